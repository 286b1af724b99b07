// A type left unclosed: the parser says where it stopped.
// CLI: stablehlo-spmd-opt %s -o %t/out.mlir
// API: parse
// RAISES: ParseError
// STDERR: %s:7:30: error: expected '>' in tensor type
func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32
}
