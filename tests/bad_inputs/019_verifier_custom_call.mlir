// The verifier: a func.call of a function that does not exist.
// CLI: stablehlo-spmd-opt %s -o %t/out.mlir
// API: parse
// RAISES: ParseError
// STDERR: %s:8:8: error: 'func.call' op 'nowhere' does not reference a valid function
// STDERR: %s:8:8: note: see current operation: %0 = "func.call"(%arg0) <{callee = @nowhere}> : (tensor<4xf32>) -> tensor<4xf32>
func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @nowhere(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
