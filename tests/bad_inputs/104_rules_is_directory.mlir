// A rules path that names a directory.
// CLI: stablehlo-spmd-opt %s --spmd-annotate=rules=%S/common -o %t/out.mlir
// API: annotate rules=%S/common
// RAISES: RulesError
// STDERR: %S/common: error: cannot read rules file: Is a directory
func.func @ok(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
