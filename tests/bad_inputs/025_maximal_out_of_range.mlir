// A maximal sharding on a device the module does not have.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:7:19: error: argument #0 of @main: maximal device 7 is out of range for a mesh of 4 devices
module attributes {mhlo.num_partitions = 4 : i32} {
  func.func @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{maximal device=7}"}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
