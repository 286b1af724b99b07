// A mesh option with an axis of size 0.
// CLI: stablehlo-spmd-opt %s --spmd-annotate=mesh=data=0 -o %t/out.mlir
// API: run_passes pipeline=builtin.module(spmd-annotate{mesh=data=0})
// RAISES: PipelineError
// STDERR: error: invalid 'mesh' option of spmd-annotate: mesh axis 'data' has size 0; sizes must be positive
func.func @ok(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
