// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-annotate | FileCheck %s

// What `jax.jit(f, in_shardings=..., out_shardings=...).lower(...)` emits
// with Shardy: sdy.mesh, #sdy.sharding and sdy.sharding_constraint.  They are
// rewritten to mhlo.sharding on the same mesh, with no rules needed.

// CHECK-LABEL: module @jit_f
// CHECK-SAME: spmd.mesh = #sdy.mesh<["data"=4, "model"=2]>
// CHECK-NOT: sdy.mesh @
// CHECK: func.func public @main(%[[X:.*]]: tensor<8x16xf32> {mhlo.sharding = "{devices=[4,1,2]<=[8] last_tile_dim_replicate}"}
// CHECK-SAME: %[[W:.*]]: tensor<16x8xf32> {mhlo.sharding = "{devices=[1,2,4]<=[4,2]T(1,0) last_tile_dim_replicate}"}
// CHECK-SAME: -> (tensor<8x8xf32> {jax.result_info = "result[0]", mhlo.sharding = "{devices=[8,1]<=[8]}"}
// CHECK-SAME: tensor<f32> {jax.result_info = "result[1]", mhlo.sharding = "{replicated}"})
// CHECK: %[[DOT:.*]] = stablehlo.dot_general %[[X]], %[[W]]
// CHECK: %[[C:.*]] = stablehlo.custom_call @Sharding(%[[DOT]]) {mhlo.sharding = "{devices=[4,1,2]<=[8] last_tile_dim_replicate}"}
// CHECK: return %[[C]]
module @jit_f attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=4, "model"=2]>
  func.func public @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}, %arg1: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}) -> (tensor<8x8xf32> {jax.result_info = "result[0]", sdy.sharding = #sdy.sharding<@mesh, [{"data", "model"}, {}]>}, tensor<f32> {jax.result_info = "result[1]", sdy.sharding = #sdy.sharding<@mesh, []>}) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
    %1 = sdy.sharding_constraint %0 <@mesh, [{"data"}, {}]> : tensor<8x8xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %2 = stablehlo.reduce(%arg0 init: %cst) applies stablehlo.add across dimensions = [0, 1] : (tensor<8x16xf32>, tensor<f32>) -> tensor<f32>
    return %1, %2 : tensor<8x8xf32>, tensor<f32>
  }
}

// -----

// Unreduced axes and a maximal (single-device) mesh.

// CHECK-LABEL: module @jit_g
// CHECK: %{{.*}}: tensor<8xf32> {mhlo.sharding = "{devices=[2,2]<=[4] last_tile_dims={unreduced}}"}
// CHECK-SAME: %{{.*}}: tensor<8xf32> {mhlo.sharding = "{maximal device=1}"}
module @jit_g attributes {mhlo.num_partitions = 4 : i32} {
  sdy.mesh @mesh = <["x"=2, "y"=2]>
  sdy.mesh @maximal_mesh_1 = <[], device_ids=[1]>
  func.func public @main(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}], unreduced={"y"}>}, %arg1: tensor<8xf32> {sdy.sharding = #sdy.sharding<@maximal_mesh_1, []>}) -> tensor<8xf32> {
    return %arg0 : tensor<8xf32>
  }
}
