// An iota transpose that repeats a dim.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:7:19: error: argument #0: invalid mhlo.sharding '{devices=[2,2]<=[2,2]T(0,0)}' at column 22: iota transpose T(0,0) is not a permutation of 0..1
module attributes {mhlo.num_partitions = 4 : i32} {
  func.func @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,2]<=[2,2]T(0,0)}"}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
