// The verifier: an elementwise op over tensors of different shapes.
// CLI: stablehlo-spmd-opt %s -o %t/out.mlir
// API: parse
// RAISES: ParseError
// STDERR: %s:8:8: error: 'stablehlo.add' op requires the same shape for all operands and results
// STDERR: %s:8:8: note: see current operation: %0 = "stablehlo.add"(%arg0, %arg1) : (tensor<4xf32>, tensor<8xf32>) -> tensor<4xf32>
func.func @f(%arg0: tensor<4xf32>, %arg1: tensor<8xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.add"(%arg0, %arg1) : (tensor<4xf32>, tensor<8xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
