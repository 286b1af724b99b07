// A sharding whose '{' is never closed.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:7:19: error: argument #0: invalid mhlo.sharding '{devices=[2,2]<=[4]' at column 1: unbalanced braces: this '{' is never closed
module attributes {mhlo.num_partitions = 4 : i32} {
  func.func @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,2]<=[4]"}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
