// A tile of rank 3 on a tensor of rank 2.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:7:19: error: argument #0 of @main: sharding tiles 3 dimensions but the tensor has rank 2
module attributes {mhlo.num_partitions = 4 : i32} {
  func.func @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,1,2]<=[4]}"}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
