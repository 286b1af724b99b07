// stablehlo-spmd explain reports a parse error like the opt tool.
// CLI: stablehlo-spmd explain %s
// API: parse
// RAISES: ParseError
// STDERR: %s:7:31: error: the input ends inside a region: expected '}'
func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
