// A negative maximal device.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:7:19: error: argument #0: invalid mhlo.sharding '{maximal device=-1}' at column 17: device ids must not be negative, got -1
module attributes {mhlo.num_partitions = 4 : i32} {
  func.func @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{maximal device=-1}"}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
