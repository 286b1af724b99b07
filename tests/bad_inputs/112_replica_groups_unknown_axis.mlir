// A collective whose groups are named by an axis its mesh does not have
// (as newer JAX names them in a shard_map body): its devices cannot be known.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: run_passes pipeline=spmd-propagate
// RAISES: ShardingError
// STDERR: %s:11:10: error: 'stablehlo.all_reduce': replica groups #stablehlo.replica_group_mesh_axes<mesh = @mesh, axes = [#stablehlo.axis_ref<name = "z">]>: unknown mesh axis 'z'; the mesh has x=4
sdy.mesh @mesh = <["x"=4]>
func.func @main(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) -> tensor<8xf32> {
  %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"x"}]>] out_shardings=[<@mesh, [{"x"}]>]
      manual_axes={"x"} (%block: tensor<2xf32>) {
    %1 = "stablehlo.all_reduce"(%block) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = #stablehlo.replica_group_mesh_axes<mesh = @mesh, axes = [#stablehlo.axis_ref<name = "z">]>, use_global_device_ids}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<2xf32>) -> tensor<2xf32>
    sdy.return %1 : tensor<2xf32>
  } : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
