// A tuple sharding on a value that is one tensor.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:7:19: error: argument #0 of @main: a tuple sharding does not describe one tensor
module attributes {mhlo.num_partitions = 4 : i32} {
  func.func @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{{replicated}, {replicated}}"}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
