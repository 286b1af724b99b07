// An explicit device list shorter than the tile needs.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:7:19: error: argument #0: invalid mhlo.sharding '{devices=[2,2]0,1,2}' at column 15: tile dims [2,2] need 4 devices but the list has 3
module attributes {mhlo.num_partitions = 4 : i32} {
  func.func @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,2]0,1,2}"}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
