// Two commas in a row.
// CLI: stablehlo-spmd-opt %s --pass-pipeline='builtin.module(cse,,cse)' -o %t/out.mlir
// API: run_passes 'pipeline=builtin.module(cse,,cse)'
// RAISES: PipelineError
// STDERR: error: empty element in pass pipeline 'builtin.module(cse,,cse)'
func.func @ok(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
