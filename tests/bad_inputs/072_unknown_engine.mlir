// A propagation engine that does not exist.
// CLI: stablehlo-spmd-opt %s --pass-pipeline='builtin.module(spmd-propagate{engine=magic})' -o %t/out.mlir
// API: run_passes 'pipeline=builtin.module(spmd-propagate{engine=magic})'
// RAISES: SpmdError
// STDERR: %s:1:1: error: unknown propagation engine 'magic' (expected 'spmd' or 'shardy')
func.func @ok(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
