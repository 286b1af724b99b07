// A rules file that does not exist.
// CLI: stablehlo-spmd-opt %s --spmd-annotate=rules=%S/common/no_such_rules.toml -o %t/out.mlir
// API: annotate rules=%S/common/no_such_rules.toml
// RAISES: RulesError
// STDERR: %S/common/no_such_rules.toml: error: cannot read rules file: No such file or directory
func.func @ok(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
