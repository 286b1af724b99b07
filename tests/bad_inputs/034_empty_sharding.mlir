// An empty sharding string.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:7:19: error: argument #0: invalid mhlo.sharding '' at column 1: expected '{' to start the sharding, got end of text
module attributes {mhlo.num_partitions = 4 : i32} {
  func.func @main(%arg0: tensor<8x4xf32> {mhlo.sharding = ""}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
