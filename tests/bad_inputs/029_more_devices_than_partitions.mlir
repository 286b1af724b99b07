// A sharding over 8 devices in a module of mhlo.num_partitions = 4.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:7:19: error: argument #0: mhlo.sharding '{devices=[8,1]<=[8]}' uses 8 devices but the module says mhlo.num_partitions = 4
module attributes {mhlo.num_partitions = 4 : i32} {
  func.func @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[8,1]<=[8]}"}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
