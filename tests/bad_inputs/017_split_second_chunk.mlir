// With --split-input-file, an error in the second chunk keeps its line in the whole file.
// CLI: stablehlo-spmd-opt %s --split-input-file -o %t/out.mlir
// API: none -- the Python API takes one module, it has no --split-input-file
// STDERR: %s:10:10: error: use of undeclared SSA value name
func.func @ok(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
// -----
func.func @bad(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg9 : tensor<4xf32>
}
