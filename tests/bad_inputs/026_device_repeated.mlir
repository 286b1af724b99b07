// A device listed twice in an explicit tile assignment.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:7:19: error: argument #0: invalid mhlo.sharding '{devices=[2,2]0,1,1,3}' at column 19: device 1 appears twice in the tile assignment
module attributes {mhlo.num_partitions = 4 : i32} {
  func.func @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,2]0,1,1,3}"}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
