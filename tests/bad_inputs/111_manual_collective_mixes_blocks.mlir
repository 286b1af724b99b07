// An all-reduce in manual code whose device groups ({1,0} and {2,3}) span
// devices that hold different rows of the value: each device's own value
// has no partner block to be summed with (XLA's partitioner refuses it too).
// CLI: stablehlo-spmd-opt %s --spmd-propagate --spmd-partition -o %t/out.mlir
// API: run_passes pipeline=spmd-propagate,spmd-partition
// RAISES: ShardingError
// STDERR: %s:10:10: error: 'stablehlo.all_reduce' combines devices [1, 0], which hold different blocks of a value manual over axis_1; a collective in manual code must keep to devices holding the same block
module {
  func.func @main(%arg0: tensor<2x2xf32> {mhlo.sharding = "{devices=[2,1,2]0,2,1,3 last_tile_dims={manual}}"}) -> (tensor<2x2xf32> {mhlo.sharding = "{devices=[2,1,2]0,2,1,3 last_tile_dims={manual}}"}) {
    %0 = "stablehlo.all_reduce"(%arg0) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[1, 0], [2, 3]]> : tensor<2x2xi64>, use_global_device_ids}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) {mhlo.sharding = "{devices=[2,1,2]0,2,1,3 last_tile_dims={manual}}"} : (tensor<2x2xf32>) -> tensor<2x2xf32>
    return %0 : tensor<2x2xf32>
  }
}
