// An option an upstream pass does not have.
// CLI: stablehlo-spmd-opt %s --pass-pipeline='builtin.module(canonicalize{bogus=1})' -o %t/out.mlir
// API: run_passes 'pipeline=builtin.module(canonicalize{bogus=1})'
// RAISES: PipelineError
// STDERR: error: pass 'canonicalize' has no option 'bogus'
func.func @ok(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
