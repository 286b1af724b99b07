// Two arguments whose shardings disagree on the device count, and no mhlo.num_partitions.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:8:19: error: argument #1: mhlo.sharding '{devices=[8]<=[8]}' uses 8 devices but argument #0 uses 4
module {
  func.func @main(%arg0: tensor<8xf32> {mhlo.sharding = "{devices=[4]<=[4]}"},
                  %arg1: tensor<8xf32> {mhlo.sharding = "{devices=[8]<=[8]}"}) -> tensor<8xf32> {
    return %arg0 : tensor<8xf32>
  }
}
