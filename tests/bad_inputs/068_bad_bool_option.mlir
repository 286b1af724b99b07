// A bool option given a non-bool.
// CLI: stablehlo-spmd-opt %s --pass-pipeline='builtin.module(spmd-propagate{explain=maybe})' -o %t/out.mlir
// API: run_passes 'pipeline=builtin.module(spmd-propagate{explain=maybe})'
// RAISES: PipelineError
// STDERR: error: option 'explain' of pass 'spmd-propagate' expects a bool, got 'maybe'
func.func @ok(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
