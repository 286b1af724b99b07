// --pass-pipeline and per-pass flags together.
// CLI: stablehlo-spmd-opt %s --pass-pipeline=builtin.module(cse) --canonicalize -o %t/out.mlir
// API: none -- flags are the command line's
// STDERR: error: use either --pass-pipeline or per-pass flags, not both
func.func @ok(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
