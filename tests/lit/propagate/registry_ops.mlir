// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate | FileCheck %s

// A variadic all_gather already in the program: every dim is shared by both
// operands, so the second takes the first's split whole; the dim it does
// not gather passes through to both results, the gathered dim stays whole
// in them.

// CHECK-LABEL: func.func @variadic_all_gather
// CHECK-SAME: %arg1: tensor<2x2xi64> {mhlo.sharding = "{devices=[2,2]<=[4]}"}
// CHECK: stablehlo.all_gather
// CHECK-SAME: mhlo.sharding = "{{[{][{]}}devices=[2,1,2]<=[4] last_tile_dim_replicate}, {devices=[2,1,2]<=[4] last_tile_dim_replicate}}"
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @variadic_all_gather(%arg0: tensor<2x2xi64> {mhlo.sharding = "{devices=[2,2]<=[4]}"}, %arg1: tensor<2x2xi64>)
      -> (tensor<2x4xi64>, tensor<2x4xi64>) {
    %0:2 = "stablehlo.all_gather"(%arg0, %arg1) {all_gather_dim = 1 : i64, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>,
        channel_handle = #stablehlo.channel_handle<handle = 0, type = 0>} : (tensor<2x2xi64>, tensor<2x2xi64>) -> (tensor<2x4xi64>, tensor<2x4xi64>)
    return %0#0, %0#1 : tensor<2x4xi64>, tensor<2x4xi64>
  }
}

// -----

// batch_norm_inference is element-wise in x, and the per-feature vectors
// share x's feature dim (here dim 1, split on "y").

// CHECK-LABEL: func.func @batch_norm
// CHECK-SAME: %arg1: tensor<8xf32> {mhlo.sharding = "{devices=[2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"}
// CHECK-SAME: %arg4: tensor<8xf32> {mhlo.sharding = "{devices=[2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"}
// CHECK: "stablehlo.batch_norm_inference"
// CHECK-SAME: mhlo.sharding = "{devices=[2,2,1]<=[4]}"
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @batch_norm(%x: tensor<4x8x6xf32> {mhlo.sharding = "{devices=[2,2,1]<=[4]}"}, %scale: tensor<8xf32>,
                        %offset: tensor<8xf32>, %mean: tensor<8xf32>, %variance: tensor<8xf32>) -> tensor<4x8x6xf32> {
    %0 = "stablehlo.batch_norm_inference"(%x, %scale, %offset, %mean, %variance) {epsilon = 0.001 : f32, feature_index = 1 : i64}
        : (tensor<4x8x6xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8x6xf32>
    return %0 : tensor<4x8x6xf32>
  }
}
