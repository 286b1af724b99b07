// A use of a value that was never defined.
// CLI: stablehlo-spmd-opt %s -o %t/out.mlir
// API: parse
// RAISES: ParseError
// STDERR: %s:7:10: error: use of undeclared SSA value name
func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg1 : tensor<4xf32>
}
