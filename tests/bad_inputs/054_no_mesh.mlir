// spmd-annotate with neither a rules mesh nor a mesh option.
// CLI: stablehlo-spmd-opt %s --spmd-annotate -o %t/out.mlir
// API: run_passes pipeline=builtin.module(spmd-annotate)
// RAISES: SpmdError
// STDERR: %s:1:1: error: spmd-annotate needs a mesh: give the rules file a [mesh] table or pass the 'mesh' option
func.func @main(%arg0: tensor<8x4xf32> loc("x")) -> tensor<8x4xf32> {
  return %arg0 : tensor<8x4xf32>
}
