// A valid module, written into a directory that does not exist.
// CLI: stablehlo-spmd-opt %s -o %t/missing/out.mlir
// API: none -- the Python API returns text, it writes no file
// STDERR: error: cannot write output file '%t/missing/out.mlir': directory '%t/missing' does not exist
func.func @ok(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
