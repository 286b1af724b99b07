// An op of a dialect nobody registered: no hint at a flag this tool lacks.
// CLI: stablehlo-spmd-opt %s -o %t/out.mlir
// API: parse
// RAISES: ParseError
// STDERR: %s:7:8: error: operation 'acme.widget' is of dialect 'acme', which stablehlo-spmd does not know
func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "acme.widget"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
