// An option spmd-annotate does not have.
// CLI: stablehlo-spmd-opt %s --pass-pipeline='builtin.module(spmd-annotate{colour=red})' -o %t/out.mlir
// API: run_passes 'pipeline=builtin.module(spmd-annotate{colour=red})'
// RAISES: PipelineError
// STDERR: error: pass 'spmd-annotate' has no option 'colour' (options: mesh, rules)
func.func @ok(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
