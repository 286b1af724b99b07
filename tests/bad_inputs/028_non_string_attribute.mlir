// mhlo.sharding written as an integer, not a string.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:7:19: error: argument #0: mhlo.sharding must be a string, got 3 : i32
module attributes {mhlo.num_partitions = 4 : i32} {
  func.func @main(%arg0: tensor<8x4xf32> {mhlo.sharding = 3 : i32}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
