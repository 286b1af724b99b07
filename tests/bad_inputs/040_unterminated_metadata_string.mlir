// A metadata string that never ends.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:7:19: error: argument #0: invalid mhlo.sharding '{replicated metadata={op_name="x}}' at column 31: unterminated string
module attributes {mhlo.num_partitions = 4 : i32} {
  func.func @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{replicated metadata={op_name=\"x}}"}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
