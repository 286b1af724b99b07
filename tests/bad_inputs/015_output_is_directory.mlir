// A valid module, written onto a path that is a directory.
// CLI: stablehlo-spmd-opt %s -o %t
// API: none -- the Python API returns text, it writes no file
// STDERR: error: cannot write output file '%t': Is a directory
func.func @ok(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
