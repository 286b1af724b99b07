// A quoted option value that never ends.
// CLI: stablehlo-spmd-opt %s --pass-pipeline='builtin.module(spmd-annotate{rules="r.toml})' -o %t/out.mlir
// API: run_passes 'pipeline=builtin.module(spmd-annotate{rules="r.toml})'
// RAISES: PipelineError
// STDERR: error: unterminated quote in pass pipeline 'builtin.module(spmd-annotate{rules="r.toml})'
func.func @ok(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
