// A malformed sharding on a sharding constraint is located at the op.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:8:10: error: op 'stablehlo.custom_call': invalid mhlo.sharding '{devices=[4,1]<=[4]' at column 1: unbalanced braces: this '{' is never closed
module attributes {mhlo.num_partitions = 4 : i32} {
  func.func @main(%arg0: tensor<8x4xf32>) -> tensor<8x4xf32> {
    %0 = stablehlo.custom_call @Sharding(%arg0) {mhlo.sharding = "{devices=[4,1]<=[4]"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    return %0 : tensor<8x4xf32>
  }
}
