// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// A region manual over "x" of x=2,y=2 whose operand arrives split over x
// only: the region wants dim 0 over x then y, so each device slices its
// y-half of its x-block (no collective); the body's exp runs on that 2x4
// block; the out-sharding keeps dim 0 over x alone, so the block is
// gathered over y (devices {0,1} and {2,3}).  The region's edges themselves
// emit nothing.

// CHECK-LABEL: func.func public @main
// CHECK: sdy.manual_computation(%arg0) {{.*}} (%[[A:.*]]: tensor<4x4xf32>)
// CHECK: %[[SLICE:.*]] = stablehlo.dynamic_slice %[[A]], %{{.*}}, %{{.*}}, sizes = [2, 4]
// CHECK-NEXT: %[[EXP:.*]] = stablehlo.exponential %[[SLICE]] : tensor<2x4xf32>
// CHECK-NEXT: %[[ALL:.*]] = "stablehlo.all_gather"(%[[EXP]]) <{all_gather_dim = 0 : i64, {{.*}} replica_groups = dense<{{\[\[}}0, 1], [2, 3]]>
// CHECK-NEXT: %[[NEG:.*]] = stablehlo.negate %[[ALL]] : tensor<4x4xf32>
// CHECK-NEXT: sdy.return %[[NEG]]
// CHECK-NOT: custom_call
sdy.mesh @mesh = <["x"=2, "y"=2]>
func.func @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x4xf32> {
  %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"x", "y"}, {}]>] out_shardings=[<@mesh, [{"x"}, {}]>] manual_axes={"x"} (%arg1: tensor<4x4xf32>) {
    %1 = stablehlo.exponential %arg1 : tensor<4x4xf32>
    sdy.return %1 : tensor<4x4xf32>
  } : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %2 = stablehlo.negate %0 : tensor<8x4xf32>
  return %2 : tensor<8x4xf32>
}

// -----

// A manual value at the function boundary (XLA's partly manual sharding,
// manual over the second tile group) keeps GSPMD's frame: the argument is
// taken to its per-device block by XLA's own custom calls, and the user's
// all-reduce, whose groups {0,2} and {1,3} keep to devices holding the same
// rows, runs on the 1x2 blocks as it is.

// CHECK-LABEL: func.func public @main
// CHECK: %[[PIN:.*]] = stablehlo.custom_call @Sharding(%arg0) {mhlo.sharding = "{devices=[2,1,2]0,2,1,3 last_tile_dims={manual}}"}
// CHECK-NEXT: %[[LOCAL:.*]] = stablehlo.custom_call @SPMDFullToShardShape(%[[PIN]]) {mhlo.sharding = "{manual}"} : (tensor<2x2xf32>) -> tensor<1x2xf32>
// CHECK-NEXT: %[[SUM:.*]] = "stablehlo.all_reduce"(%[[LOCAL]]) {{.*}} replica_groups = dense<{{\[\[}}2, 0], [1, 3]]>
// CHECK: (tensor<1x2xf32>) -> tensor<1x2xf32>
// CHECK-NEXT: %[[BACK:.*]] = stablehlo.custom_call @Sharding(%[[SUM]]) {mhlo.sharding = "{manual}"}
// CHECK-NEXT: stablehlo.custom_call @SPMDShardToFullShape(%[[BACK]])
// CHECK-NOT: all_gather
func.func @main(%arg0: tensor<2x2xf32> {mhlo.sharding = "{devices=[2,1,2]0,2,1,3 last_tile_dims={manual}}"}) -> (tensor<2x2xf32> {mhlo.sharding = "{devices=[2,1,2]0,2,1,3 last_tile_dims={manual}}"}) {
  %0 = "stablehlo.all_reduce"(%arg0) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>, replica_groups = dense<[[2, 0], [1, 3]]> : tensor<2x2xi64>, use_global_device_ids}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) {mhlo.sharding = "{devices=[2,1,2]0,2,1,3 last_tile_dims={manual}}"} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}
