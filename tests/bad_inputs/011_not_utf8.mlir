// Latin-1 text: the bad byte is located like any other error.
// CLI: stablehlo-spmd-opt %s -o %t/out.mlir
// API: none -- the Python API takes str, already decoded by the caller
// STDERR: %s:5:7: error: byte 0xe9 is not UTF-8: the input must be UTF-8 text
// café au lait
