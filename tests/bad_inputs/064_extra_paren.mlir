// A ')' too many.
// CLI: stablehlo-spmd-opt %s --pass-pipeline='builtin.module(cse))' -o %t/out.mlir
// API: run_passes 'pipeline=builtin.module(cse))'
// RAISES: PipelineError
// STDERR: error: unbalanced ')' in pass pipeline 'builtin.module(cse))'
func.func @ok(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
