// An upstream integer option given a word.
// CLI: stablehlo-spmd-opt %s --pass-pipeline='builtin.module(canonicalize{max-iterations=x})' -o %t/out.mlir
// API: run_passes 'pipeline=builtin.module(canonicalize{max-iterations=x})'
// RAISES: PipelineError
// STDERR: error: option 'max-iterations' of pass 'canonicalize' expects an integer, got 'x'
func.func @ok(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
