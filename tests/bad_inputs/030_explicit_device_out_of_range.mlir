// An explicit tile naming device 9 in a module of 4 devices.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:7:19: error: argument #0: mhlo.sharding '{devices=[2,2]0,1,2,9}' names device 9 but the module has devices 0 to 3
module attributes {mhlo.num_partitions = 4 : i32} {
  func.func @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,2]0,1,2,9}"}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
