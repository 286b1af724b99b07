// A rule that matches a tensor of dynamic shape.
// CLI: stablehlo-spmd-opt %s --spmd-annotate=rules=%S/common/rules.toml -o %t/out.mlir
// API: annotate rules=%S/common/rules.toml
// RAISES: ShardingError
// STDERR: %s:7:17: error: argument #0 'x' of @main has a dynamic shape (tensor<?x4xf32>); stablehlo-spmd partitions static shapes only
// STDERR: %S/common/rules.toml:5:1: note: from rule '^x$' -> ('data', 'model')
func.func @main(%arg0: tensor<?x4xf32> loc("x")) -> tensor<?x4xf32> {
  return %arg0 : tensor<?x4xf32>
}
