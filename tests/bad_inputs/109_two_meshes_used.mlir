// Two meshes of different device counts that shardings really use: one
// program runs on one set of devices.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:9:3: error: the module's shardings use sdy meshes of different device counts (data=2 on 2, data=4 on 4); one program runs on one set of devices
module {
  sdy.mesh @small = <["data"=2]>
  sdy.mesh @large = <["data"=4]>
  func.func @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@small, [{"data"}, {}]>}, %arg1: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@large, [{"data"}, {}]>}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
