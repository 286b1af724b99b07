// A malformed sharding on a function result is located at the return.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:8:5: error: result #0 of @main: sharding tiles 1 dimensions but the tensor has rank 2
module attributes {mhlo.num_partitions = 4 : i32} {
  func.func @main(%arg0: tensor<8x4xf32>) -> (tensor<8x4xf32> {mhlo.sharding = "{devices=[4,1]<=[4] last_tile_dim_replicate}"}) {
    return %arg0 : tensor<8x4xf32>
  }
}
