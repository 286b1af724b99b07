// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate | FileCheck %s

// A shard_map region (sdy.manual_computation) manual over "x" of x=2,y=2 is
// written in GSPMD's spelling: the operand pinned to its in-sharding (dim 0
// over x then y), taken to the body's 4x4 type by @SPMDFullToShardShape with
// x manual and y left on dim 0; the body's op is manual over x too, though
// nothing annotated it; the returned value goes back through
// @SPMDShardToFullShape to the out-sharding, and the op after the region
// takes that sharding.

// CHECK-LABEL: func.func @main
// CHECK: %[[PIN:.*]] = stablehlo.custom_call @Sharding(%arg0) {mhlo.sharding = "{devices=[4,1]<=[4]}"}
// CHECK-NEXT: %[[IN:.*]] = stablehlo.custom_call @SPMDFullToShardShape(%[[PIN]]) {mhlo.sharding = "{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dims={manual}}"} : (tensor<8x4xf32>) -> tensor<4x4xf32>
// CHECK-NEXT: %[[EXP:.*]] = stablehlo.exponential %[[IN]] {mhlo.sharding = "{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dims={manual}}"}
// CHECK-NEXT: %[[OUT:.*]] = stablehlo.custom_call @Sharding(%[[EXP]]) {mhlo.sharding = "{devices=[1,1,2,2]<=[4] last_tile_dims={manual, replicated}}"}
// CHECK-NEXT: %[[FULL:.*]] = stablehlo.custom_call @SPMDShardToFullShape(%[[OUT]]) {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"} : (tensor<4x4xf32>) -> tensor<8x4xf32>
// CHECK-NEXT: stablehlo.negate %[[FULL]] {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"}
// CHECK-NOT: sdy.manual_computation
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

// A region inside a region: the inner one's values are manual over both
// regions' axes, the outer one's over its own.

// CHECK-LABEL: func.func @nested
// CHECK: %[[OUTER:.*]] = stablehlo.custom_call @SPMDFullToShardShape(%{{.*}}) {mhlo.sharding = "{devices=[1,1,2,2]<=[4] last_tile_dims={manual, replicated}}"} : (tensor<8x4xf32>) -> tensor<4x4xf32>
// CHECK-NEXT: %[[PIN:.*]] = stablehlo.custom_call @Sharding(%[[OUTER]]) {mhlo.sharding = "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dims={manual}}"}
// CHECK-NEXT: %[[INNER:.*]] = stablehlo.custom_call @SPMDFullToShardShape(%[[PIN]]) {mhlo.sharding = "{manual}"} : (tensor<4x4xf32>) -> tensor<4x2xf32>
// CHECK-NEXT: stablehlo.abs %[[INNER]] {mhlo.sharding = "{manual}"}
// CHECK: stablehlo.custom_call @SPMDShardToFullShape(%{{.*}}) {mhlo.sharding = "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dims={manual}}"} : (tensor<4x2xf32>) -> tensor<4x4xf32>
sdy.mesh @mesh = <["x"=2, "y"=2]>
func.func @nested(%arg0: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"x"}, {}]>] out_shardings=[<@mesh, [{"x"}, {}]>] manual_axes={"x"} (%arg1: tensor<4x4xf32>) {
    %1 = sdy.manual_computation(%arg1) in_shardings=[<@mesh, [{}, {"y"}]>] out_shardings=[<@mesh, [{}, {"y"}]>] manual_axes={"y"} (%arg2: tensor<4x2xf32>) {
      %2 = stablehlo.abs %arg2 : tensor<4x2xf32>
      sdy.return %2 : tensor<4x2xf32>
    } : (tensor<4x4xf32>) -> tensor<4x4xf32>
    sdy.return %1 : tensor<4x4xf32>
  } : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

// Axes a region leaves free are open at its edges ({"x", ?}: what
// jax.shard_map writes for them), and propagate through it: the body's
// value, manual over "x", takes "y" on dim 1 from the operand.

// CHECK-LABEL: func.func @free_axes_cross
// CHECK: %[[IN:.*]] = stablehlo.custom_call @SPMDFullToShardShape(%{{.*}}) {mhlo.sharding = "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dims={manual}}"} : (tensor<8x4xf32>) -> tensor<4x4xf32>
// CHECK-NEXT: stablehlo.negate %[[IN]] {mhlo.sharding = "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dims={manual}}"}
sdy.mesh @mesh = <["x"=2, "y"=2]>
func.func @free_axes_cross(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>}) -> tensor<8x4xf32> {
  %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"x", ?}, {?}]>] out_shardings=[<@mesh, [{"x", ?}, {?}]>] manual_axes={"x"} (%arg1: tensor<4x4xf32>) {
    %1 = stablehlo.negate %arg1 : tensor<4x4xf32>
    sdy.return %1 : tensor<4x4xf32>
  } : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

// A function called from a region and from the code around it gets a copy
// for the region: one function has one sharding per value, and sharing it
// made the code around the region manual too.

// CHECK-LABEL: func.func private @helper_manual_x
// CHECK-SAME: (%arg0: tensor<4xf32> {mhlo.sharding = "{manual}"})
// CHECK-LABEL: func.func private @helper(
// CHECK-SAME: %arg0: tensor<4xf32> {mhlo.sharding = "{replicated}"})
// CHECK-LABEL: func.func @shared_callee
// CHECK: %[[IN:.*]] = stablehlo.custom_call @SPMDFullToShardShape
// CHECK-NEXT: call @helper_manual_x(%[[IN]]) {mhlo.sharding = "{manual}"}
// CHECK: call @helper(%arg0) {mhlo.sharding = "{replicated}"}
// CHECK: return %{{.*}} : tensor<4xf32>
sdy.mesh @mesh = <["x"=2]>
func.func private @helper(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.tanh %arg0 : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @shared_callee(%arg0: tensor<4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}) -> tensor<4xf32> {
  %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"x"} (%arg1: tensor<4xf32>) {
    %1 = func.call @helper(%arg1) : (tensor<4xf32>) -> tensor<4xf32>
    sdy.return %1 : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  %2 = func.call @helper(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  %3 = stablehlo.add %0, %2 : tensor<4xf32>
  return %3 : tensor<4xf32>
}
