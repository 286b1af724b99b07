// A flag the tool does not have.
// CLI: stablehlo-spmd-opt %s --no-such-flag -o %t/out.mlir
// API: none -- flags are the command line's
// STDERR: error: No such option '--no-such-flag' (see 'stablehlo-spmd-opt --help')
func.func @ok(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}
