// A file of nothing but comments holds no module.
// CLI: stablehlo-spmd-opt %s -o %t/out.mlir
// API: parse
// RAISES: ParseError
// STDERR: %s: error: the input holds no operation: expected a module
