// A rule that matches an unranked tensor.
// CLI: stablehlo-spmd-opt %s --spmd-annotate=rules=%S/common/rules.toml -o %t/out.mlir
// API: annotate rules=%S/common/rules.toml
// RAISES: ShardingError
// STDERR: %s:6:17: error: argument #0 'x' is matched by rule '^x$' -> ('data', 'model') but has no ranked tensor type (tensor<*xf32>)
func.func @main(%arg0: tensor<*xf32> loc("x")) -> tensor<*xf32> {
  return %arg0 : tensor<*xf32>
}
