// RUN: stablehlo-spmd-opt %s --split-input-file --pass-pipeline='builtin.module(spmd-annotate{rules=%inputs/data_model.toml})' | FileCheck %s

// Expected strings are what jax.sharding.NamedSharding gives on a 4x2
// ('data', 'model') mesh for the same partition specs.

// CHECK-LABEL: module @mlp
// CHECK-SAME: mhlo.num_partitions = 8 : i32
// CHECK-SAME: spmd.mesh = #sdy.mesh<["data"=4, "model"=2]>
// CHECK: func.func public @main(
// CHECK-SAME: %[[W1:.*]]: tensor<16x32xf32> {mhlo.sharding = "{devices=[1,2,4]<=[4,2]T(1,0) last_tile_dim_replicate}"}
// CHECK-SAME: %[[W2:.*]]: tensor<32x8xf32> {mhlo.sharding = "{devices=[2,1,4]<=[4,2]T(1,0) last_tile_dim_replicate}"}
// CHECK-SAME: %[[X:.*]]: tensor<4x16xf32> {mhlo.sharding = "{devices=[4,1,2]<=[8] last_tile_dim_replicate}"}
// CHECK-SAME: -> (tensor<8x8xf32> {jax.result_info = "result[0]", mhlo.sharding = "{devices=[8,1]<=[8]}"}
// CHECK-SAME: tensor<f32> {jax.result_info = "result[1]", mhlo.sharding = "{replicated}"})
// CHECK: stablehlo.dot_general %[[X]], %[[W1]]
// CHECK: stablehlo.dot_general %{{.*}}, %[[W2]]
module @mlp attributes {mhlo.num_partitions = 1 : i32} {
  func.func public @main(%arg0: tensor<16x32xf32> loc("params['w1']"), %arg1: tensor<32x8xf32> loc("params['w2']"), %arg2: tensor<4x16xf32> loc("x"))
      -> (tensor<8x8xf32> {jax.result_info = "result[0]"}, tensor<f32> {jax.result_info = "result[1]"}) {
    %0 = stablehlo.dot_general %arg2, %arg0, contracting_dims = [1] x [0] : (tensor<4x16xf32>, tensor<16x32xf32>) -> tensor<4x32xf32>
    %1 = stablehlo.dot_general %0, %arg1, contracting_dims = [1] x [0] : (tensor<4x32xf32>, tensor<32x8xf32>) -> tensor<4x8xf32>
    %2 = stablehlo.concatenate %1, %1, dim = 0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
    %cst = stablehlo.constant dense<0.0> : tensor<f32>
    %3 = stablehlo.reduce(%1 init: %cst) applies stablehlo.add across dimensions = [0, 1] : (tensor<4x8xf32>, tensor<f32>) -> tensor<f32>
    return %2, %3 : tensor<8x8xf32>, tensor<f32>
  }
}

// -----

// Names fall back to argN / result when the exporter gave none; private
// functions are left alone.

// CHECK-LABEL: module attributes
// CHECK: func.func @main(%{{.*}}: tensor<4x16xf32>)
// CHECK-SAME: -> (tensor<4x16xf32> {mhlo.sharding = "{devices=[8,1]<=[8]}"})
// CHECK: func.func private @helper(%{{.*}}: tensor<4x16xf32>) -> tensor<4x16xf32> {
func.func @main(%arg0: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %0 = func.call @helper(%arg0) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}
func.func private @helper(%arg0: tensor<4x16xf32>) -> tensor<4x16xf32> {
  return %arg0 : tensor<4x16xf32>
}
