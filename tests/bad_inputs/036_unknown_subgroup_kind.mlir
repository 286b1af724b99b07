// A last_tile_dims kind XLA does not have.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:7:19: error: argument #0: invalid mhlo.sharding '{devices=[2,1,2]<=[4] last_tile_dims={bogus}}' at column 39: expected a subgroup kind (manual, replicated or unreduced) in last_tile_dims, got 'bogus'
module attributes {mhlo.num_partitions = 4 : i32} {
  func.func @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dims={bogus}}"}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
