// Two different meshes that shardings really use: one mesh per module.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:8:3: error: the module's shardings use several different sdy meshes (data=2, data=4); stablehlo-spmd works on one mesh per module
module {
  sdy.mesh @small = <["data"=2]>
  sdy.mesh @large = <["data"=4]>
  func.func @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@small, [{"data"}, {}]>}, %arg1: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@large, [{"data"}, {}]>}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
