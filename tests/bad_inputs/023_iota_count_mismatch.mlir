// An iota holding more devices than the tile.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:7:19: error: argument #0: invalid mhlo.sharding '{devices=[2,2]<=[8]}' at column 17: tile dims [2,2] need 4 devices but iota reshape dims [8] hold 8
module attributes {mhlo.num_partitions = 4 : i32} {
  func.func @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,2]<=[8]}"}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
