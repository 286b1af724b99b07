// RUN: stablehlo-spmd-opt %s --spmd-propagate --spmd-partition | FileCheck %s

// Shardy's sub-axes are axes of the mesh: "a"=4 is split into "a":(1)2 and
// "a":(2)2, and the partitioned module prints every sharding back in
// Shardy's spelling, as it came in: the mesh is "a"=4 again, a whole "a"
// stays "a", and a minor part before a major one stays two sub-axes.

// CHECK: sdy.mesh @mesh = <["a"=4, "b"=2]>
// CHECK-LABEL: func.func public @main
// CHECK-SAME: %arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a":(1)2}, {"b"}]>}
// CHECK-SAME: %arg1: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}
// CHECK-SAME: -> (tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a":(2)2, "a":(1)2}, {}]>})
// CHECK: sdy.manual_computation(%arg0, %arg1)
// CHECK-SAME: in_shardings=[<@mesh, [{"a":(1)2}, {"b"}]>, <@mesh, [{"a"}, {}]>]
// CHECK-SAME: manual_axes={"a", "b"} (%[[X:.*]]: tensor<4x2xf32>, %[[Y:.*]]: tensor<2x4xf32>)
sdy.mesh @mesh = <["a"=4, "b"=2]>
func.func @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a":(1)2}, {"b"}]>},
                %arg1: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>})
    -> (tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a":(2)2, "a":(1)2}, {}]>}) {
  %0 = stablehlo.add %arg0, %arg1 : tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}
