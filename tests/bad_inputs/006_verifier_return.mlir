// The verifier: a return that disagrees with the function type.
// CLI: stablehlo-spmd-opt %s -o %t/out.mlir
// API: parse
// RAISES: ParseError
// STDERR: %s:8:3: error: type of return operand 0 ('tensor<4xf32>') doesn't match function result type ('tensor<3xf32>') in function @f
// STDERR: %s:8:3: note: see current operation: "func.return"(%arg0) : (tensor<4xf32>) -> ()
func.func @f(%arg0: tensor<4xf32>) -> tensor<3xf32> {
  return %arg0 : tensor<4xf32>
}
