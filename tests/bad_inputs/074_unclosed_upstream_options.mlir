// Upstream pass options never closed.
// CLI: stablehlo-spmd-opt %s --pass-pipeline='builtin.module(func.func(cse{))' -o %t/out.mlir
// API: run_passes 'pipeline=builtin.module(func.func(cse{))'
// RAISES: PipelineError
// STDERR: error: unbalanced brackets or quotes in pass pipeline 'builtin.module(func.func(cse{))'
func.func @ok(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
