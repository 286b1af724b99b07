// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// Grouped convolutions (feature_group_count or batch_group_count > 1) run
// where their groups are: each device convolves the whole groups it holds
// with the group count divided, and only the (small) result moves when the
// result wants another layout (partitioning/windowed.py, `_setup` prices
// aligning the op with its result or with its operands).

// A depthwise convolution whose input and kernel are split on the channels
// (the groups) and whose result is wanted split on the batch: each device
// convolves its 2 channels (feature_group_count 8 / 4 = 2) and one
// all_to_all moves the result from channels to batch.  Aligning with the
// result instead would gather the input and the kernel over the channels.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[X:arg[0-9]+]]: tensor<4x6x2xf32>, %[[K:arg[0-9]+]]: tensor<3x1x2xf32>) {
// CHECK-NEXT: %[[Y:.*]] = stablehlo.convolution(%[[X]], %[[K]])
// CHECK-SAME: feature_group_count = 2
// CHECK-SAME: -> tensor<4x6x2xf32>
// CHECK-NEXT: %[[MOVED:.*]] = "stablehlo.all_to_all"(%[[Y]])
// CHECK-SAME: concat_dimension = 2
// CHECK-SAME: split_dimension = 0
// CHECK-SAME: -> tensor<1x6x8xf32>
// CHECK-NEXT: sdy.return %[[MOVED]] : tensor<1x6x8xf32>
// CHECK-NOT: all_gather

module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @depthwise(%x: tensor<4x6x8xf32> {mhlo.sharding = "{devices=[1,1,4]<=[4]}"},
                       %k: tensor<3x1x8xf32> {mhlo.sharding = "{devices=[1,1,4]<=[4]}"})
      -> (tensor<4x6x8xf32> {mhlo.sharding = "{devices=[4,1,1]<=[4]}"}) {
    %0 = stablehlo.convolution(%x, %k) dim_numbers = [b, 0, f]x[0, i, o]->[b, 0, f],
        window = {stride = [1], pad = [[1, 1]], lhs_dilate = [1], rhs_dilate = [1]}
        {batch_group_count = 1 : i64, feature_group_count = 8 : i64, mhlo.sharding = "{devices=[4,1,1]<=[4]}"}
        : (tensor<4x6x8xf32>, tensor<3x1x8xf32>) -> tensor<4x6x8xf32>
    return %0 : tensor<4x6x8xf32>
  }
}

// -----

// The kernel gradient of a depthwise convolution (batch_group_count = the
// channels) with both operands split on rows over "a" and on channels over
// "b", and the result wanted on channels over "a": each device sums its
// rows of every window (one row of halo from each neighbour over "a"), for
// its 2 channels (batch_group_count 4 / 2), the partial sums are added over
// "a", and one collective_permute moves the channels from "b" to "a".

// CHECK-LABEL: func.func public @main
// CHECK: (%[[X:arg[0-9]+]]: tensor<2x4x2xf32>, %[[DY:arg[0-9]+]]: tensor<2x4x2xf32>) {
// CHECK: %[[FROM_LEFT:.*]] = "stablehlo.collective_permute"
// CHECK-SAME: source_target_pairs = dense<{{\[\[}}0, 2], [1, 3]]>
// CHECK: %[[FROM_RIGHT:.*]] = "stablehlo.collective_permute"
// CHECK-SAME: source_target_pairs = dense<{{\[\[}}2, 0], [3, 1]]>
// CHECK-NEXT: %[[WINDOW:.*]] = stablehlo.concatenate %[[FROM_LEFT]], %[[X]], %[[FROM_RIGHT]], dim = 1
// CHECK: %[[MASKED:.*]] = stablehlo.select %{{.*}}, %[[WINDOW]], %{{.*}} : tensor<2x6x2xi1>, tensor<2x6x2xf32>
// CHECK-NEXT: %[[PARTIAL:.*]] = stablehlo.convolution(%[[MASKED]], %[[DY]])
// CHECK-SAME: pad = {{\[\[}}0, 0]]
// CHECK-SAME: batch_group_count = 2
// CHECK-SAME: -> tensor<3x1x2xf32>
// CHECK-NEXT: %[[SUM:.*]] = "stablehlo.all_reduce"(%[[PARTIAL]])
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 2], [1, 3]]>
// CHECK: %[[MOVED:.*]] = "stablehlo.collective_permute"(%[[SUM]])
// CHECK-NEXT: sdy.return %[[MOVED]] : tensor<3x1x2xf32>
// CHECK-NOT: all_gather

module attributes {spmd.mesh = #sdy.mesh<["a"=2, "b"=2]>} {
  func.func @kernel_gradient(%x: tensor<2x8x4xf32> {mhlo.sharding = "{devices=[1,2,2]<=[4]}"},
                             %dy: tensor<2x8x4xf32> {mhlo.sharding = "{devices=[1,2,2]<=[4]}"})
      -> (tensor<3x1x4xf32> {mhlo.sharding = "{devices=[1,1,2,2]<=[4] last_tile_dim_replicate}"}) {
    %0 = stablehlo.convolution(%x, %dy) dim_numbers = [f, 0, b]x[i, 0, o]->[0, b, f],
        window = {stride = [1], pad = [[1, 1]], lhs_dilate = [1], rhs_dilate = [1]}
        {batch_group_count = 4 : i64, feature_group_count = 1 : i64, mhlo.sharding = "{devices=[1,1,2,2]<=[4] last_tile_dim_replicate}"}
        : (tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<3x1x4xf32>
    return %0 : tensor<3x1x4xf32>
  }
}
