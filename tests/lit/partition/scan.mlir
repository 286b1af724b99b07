// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// A scan over a stack of per-layer biases, as jax.lax.scan lowers it: a
// while whose body reads layer %i of the stack with a dynamic_slice and
// writes this iteration's output into a stacked result with a
// dynamic_update_slice, both at the loop counter.  On a 2x2 (x, y) mesh the
// stack [3,8] is split on its features over y, the carry [4,8] on rows
// over x and features over y, the stacked outputs [3,4,8] likewise.
//
// Only the layer dim is indexed at a run-time offset; the dims the slices
// take whole keep their axes.  So every device slices layer %i out of its
// own 3x4 shard of the stack (sizes [1, 4], at the counter clamped into
// range as the op clamps it), adds it to its 2x4 block of the
// carry, and writes that block into its 3x2x4 shard of the outputs: no
// collective, and the stack is never gathered.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[B:arg[0-9]+]]: tensor<3x4xf32>, %[[H:arg[0-9]+]]: tensor<2x4xf32>) {
// CHECK: %[[YS0:.*]] = stablehlo.broadcast_in_dim %{{.*}}, dims = [] : (tensor<f32>) -> tensor<3x2x4xf32>
// CHECK: %[[W:.*]]:4 = stablehlo.while(%[[S:[^ ]+]] = %[[B]], %[[I:[^ ]+]] = %{{[^ ]+}}, %[[C:[^ ]+]] = %[[H]], %[[YS:[^ ]+]] = %[[YS0]])
// CHECK-SAME: : tensor<3x4xf32>, tensor<i32>, tensor<2x4xf32>, tensor<3x2x4xf32>
// CHECK: } do {
// CHECK-NEXT: %[[ZERO:.*]] = stablehlo.constant dense<0> : tensor<i32>
// CHECK: %[[AT:.*]] = stablehlo.clamp %{{.*}}, %[[I]], %{{.*}} : tensor<i32>
// CHECK: %[[L:.*]] = stablehlo.dynamic_slice %[[S]], %[[AT]], %{{.*}}, sizes = [1, 4] : (tensor<3x4xf32>, tensor<i32>, tensor<i32>) -> tensor<1x4xf32>
// CHECK-NEXT: %[[LB:.*]] = stablehlo.broadcast_in_dim %[[L]], dims = [0, 1] : (tensor<1x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT: %[[SUM:.*]] = stablehlo.add %[[C]], %[[LB]] : tensor<2x4xf32>
// CHECK-NEXT: %[[T:.*]] = stablehlo.tanh %[[SUM]] : tensor<2x4xf32>
// CHECK-NEXT: %[[T3:.*]] = stablehlo.reshape %[[T]] : (tensor<2x4xf32>) -> tensor<1x2x4xf32>
// CHECK-NEXT: %[[NEW:.*]] = stablehlo.dynamic_update_slice %[[YS]], %[[T3]], %[[I]], %[[ZERO]], %[[ZERO]] : (tensor<3x2x4xf32>, tensor<1x2x4xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<3x2x4xf32>
// CHECK: stablehlo.return %[[S]], %{{.*}}, %[[T]], %[[NEW]] : tensor<3x4xf32>, tensor<i32>, tensor<2x4xf32>, tensor<3x2x4xf32>
// CHECK: sdy.return %[[W]]#2, %[[W]]#3 : tensor<2x4xf32>, tensor<3x2x4xf32>
// CHECK-NOT: stablehlo.all_
// CHECK-NOT: collective_permute
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @scan(%b: tensor<3x8xf32> {mhlo.sharding = "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"},
                  %h: tensor<4x8xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"})
      -> (tensor<4x8xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"},
          tensor<3x4x8xf32> {mhlo.sharding = "{devices=[1,2,2]<=[4]}"}) {
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %ys = stablehlo.broadcast_in_dim %zero, dims = [] : (tensor<f32>) -> tensor<3x4x8xf32>
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %0:4 = stablehlo.while(%stack = %b, %i = %c0, %carry = %h, %out = %ys)
        : tensor<3x8xf32>, tensor<i32>, tensor<4x8xf32>, tensor<3x4x8xf32>
     cond {
      %c3 = stablehlo.constant dense<3> : tensor<i32>
      %p = stablehlo.compare LT, %i, %c3 : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %z = stablehlo.constant dense<0> : tensor<i32>
      %layer = stablehlo.dynamic_slice %stack, %i, %z, sizes = [1, 8] : (tensor<3x8xf32>, tensor<i32>, tensor<i32>) -> tensor<1x8xf32>
      %bias = stablehlo.broadcast_in_dim %layer, dims = [0, 1] : (tensor<1x8xf32>) -> tensor<4x8xf32>
      %sum = stablehlo.add %carry, %bias : tensor<4x8xf32>
      %next = stablehlo.tanh %sum : tensor<4x8xf32>
      %row = stablehlo.reshape %next : (tensor<4x8xf32>) -> tensor<1x4x8xf32>
      %written = stablehlo.dynamic_update_slice %out, %row, %i, %z, %z : (tensor<3x4x8xf32>, tensor<1x4x8xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<3x4x8xf32>
      %c1 = stablehlo.constant dense<1> : tensor<i32>
      %inc = stablehlo.add %i, %c1 : tensor<i32>
      stablehlo.return %stack, %inc, %next, %written : tensor<3x8xf32>, tensor<i32>, tensor<4x8xf32>, tensor<3x4x8xf32>
    }
    return %0#2, %0#3 : tensor<4x8xf32>, tensor<3x4x8xf32>
  }
}
