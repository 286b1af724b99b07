// An unknown pass inside a nested pipeline is named, not its anchor.
// CLI: stablehlo-spmd-opt %s --pass-pipeline='builtin.module(func.func(no-such-pass))' -o %t/out.mlir
// API: run_passes 'pipeline=builtin.module(func.func(no-such-pass))'
// RAISES: PipelineError
// STDERR: error: unknown pass 'no-such-pass': it is neither a stablehlo-spmd pass (spmd-annotate, spmd-auto-shard, spmd-inline-calls, spmd-partition, spmd-propagate, spmd-rematerialize) nor an MLIR pass registered in jaxlib
func.func @ok(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
