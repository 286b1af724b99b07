// An op stablehlo does not have.
// CLI: stablehlo-spmd-opt %s -o %t/out.mlir
// API: parse
// RAISES: ParseError
// STDERR: %s:8:8: error: unregistered operation 'stablehlo.frobnicate' found in dialect ('stablehlo') that does not allow unknown operations
// STDERR: %s:8:8: note: see current operation: %0 = "stablehlo.frobnicate"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.frobnicate"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
