// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// Base-dilated windows along a sharded dimension keep it sharded: the input
// spread out `d` apart (a convolution's lhs_dilate, reduce_window's
// base_dilations, pad's interior padding + 1) is read through a halo of the
// elements each device's windows touch, and the local op dilates them
// again with its padding made local (partitioning/windowed.py,
// `_strided_halo`).  Where the devices' windows start at different phases
// of the dilation, the local op computes a few more results and each
// device keeps its own.  XLA's partitioner does the same in both cases.

// The input gradient of a stride-2 convolution (lhs_dilate 2): 4 rows of the
// output gradient over 4 devices (1 each), 8 rows of result (2 each).  The
// device's windows read dilated rows [2q-1, 2q+3), i.e. its own row and the
// next device's: one collective_permute of one row, and a local convolution
// with low padding 1 and high padding 0.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[DY:arg[0-9]+]]: tensor<1x1x2xf32>, %[[K:arg[0-9]+]]: tensor<3x2x2xf32>) {
// CHECK-NEXT: %[[NEXT:.*]] = "stablehlo.collective_permute"(%[[DY]])
// CHECK-SAME: source_target_pairs = dense<{{\[\[}}1, 0], [2, 1], [3, 2]]>
// CHECK-NEXT: %[[ROWS:.*]] = stablehlo.concatenate %[[DY]], %[[NEXT]], dim = 1
// CHECK: %[[MASKED:.*]] = stablehlo.select %{{.*}}, %[[ROWS]], %{{.*}} : tensor<1x2x2xi1>, tensor<1x2x2xf32>
// CHECK-NEXT: %[[DX:.*]] = stablehlo.convolution(%[[MASKED]], %[[K]])
// CHECK-SAME: pad = {{\[\[}}1, 0]], lhs_dilate = [2]
// CHECK-SAME: -> tensor<1x2x2xf32>
// CHECK-NEXT: sdy.return %[[DX]] : tensor<1x2x2xf32>
// CHECK-NOT: all_gather

module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @input_gradient(%dy: tensor<1x4x2xf32> {mhlo.sharding = "{devices=[1,4,1]<=[4]}"},
                            %k: tensor<3x2x2xf32>)
      -> (tensor<1x8x2xf32> {mhlo.sharding = "{devices=[1,4,1]<=[4]}"}) {
    %0 = stablehlo.convolution(%dy, %k) dim_numbers = [b, 0, f]x[0, o, i]->[b, 0, f],
        window = {stride = [1], pad = [[1, 2]], lhs_dilate = [2], rhs_dilate = [1], reverse = [true]}
        {batch_group_count = 1 : i64, feature_group_count = 1 : i64}
        : (tensor<1x4x2xf32>, tensor<3x2x2xf32>) -> tensor<1x8x2xf32>
    return %0 : tensor<1x8x2xf32>
  }
}

// -----

// Interior padding is a base dilation: each device's 4 result rows are its
// own 2 rows spread out, so the pad runs locally and nothing moves.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[X:arg[0-9]+]]: tensor<2x3xf32>) {
// CHECK: %[[Y:.*]] = stablehlo.pad %[[X]], %{{.*}}, low = [0, 0], high = [1, 0], interior = [1, 0]
// CHECK-SAME: -> tensor<4x3xf32>
// CHECK-NEXT: sdy.return %[[Y]] : tensor<4x3xf32>
// CHECK-NOT: all_gather
// CHECK-NOT: collective_permute

module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @upsample(%x: tensor<8x3xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<16x3xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = stablehlo.pad %x, %zero, low = [0, 0], high = [1, 0], interior = [1, 0]
        : (tensor<8x3xf32>, tensor<f32>) -> tensor<16x3xf32>
    return %0 : tensor<16x3xf32>
  }
}

// -----

// reduce_window with base_dilations 2 and padding 1 on each side (the
// transpose of a 2-wide sum pooling): device q's 4 windows read dilated
// rows [4q-1, 4q+4), whose elements are its own rows 2q and 2q+1.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[X:arg[0-9]+]]: tensor<2x3xf32>) {
// CHECK: %[[Y:.*]] = "stablehlo.reduce_window"(%[[X]], %{{.*}})
// CHECK-SAME: base_dilations = array<i64: 2, 1>, padding = dense<{{\[\[}}1, 1], [0, 0]]>
// CHECK: -> tensor<4x3xf32>
// CHECK-NEXT: sdy.return %[[Y]] : tensor<4x3xf32>
// CHECK-NOT: all_gather
// CHECK-NOT: collective_permute

module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @dilated_sum(%x: tensor<8x3xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<16x3xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = "stablehlo.reduce_window"(%x, %zero) ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %s : tensor<f32>
    }) {window_dimensions = array<i64: 2, 1>, base_dilations = array<i64: 2, 1>,
        padding = dense<[[1, 1], [0, 0]]> : tensor<2x2xi64>}
      : (tensor<8x3xf32>, tensor<f32>) -> tensor<16x3xf32>
    return %0 : tensor<16x3xf32>
  }
}

// -----

// Interior padding 1 with low 1 and high 4: 8 rows spread to 20, 5 a
// device on 4 devices.  Device q's results start at dilated row 5q - 1,
// at an odd or even phase of the dilation depending on q, so the windows
// start at different phases: each device reads from its own first element
// (rows [0, 2, 5, 7] of the input: table [0, 0, 1, 1] past its shard),
// the local pad computes one result more than its share (6 rows, low
// padding 1 for all), and each device keeps its 5 from [0, 1, 0, 1].
// Only devices 1 and 2 need a row of their right neighbour: one
// collective_permute of one row.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[X:arg[0-9]+]]: tensor<2x3xf32>) {
// CHECK: %[[FIRST:.*]] = stablehlo.slice %[[X]] [0:1, 0:3]
// CHECK-NEXT: %[[NEXT:.*]] = "stablehlo.collective_permute"(%[[FIRST]])
// CHECK-SAME: (tensor<1x3xf32>) -> tensor<1x3xf32>
// CHECK: %[[STARTS:.*]] = stablehlo.constant dense<[0, 0, 1, 1]> : tensor<4xi32>
// CHECK: %[[ROWS:.*]] = stablehlo.dynamic_slice %{{.*}}, %{{.*}}, %{{.*}}, sizes = [3, 3]
// CHECK: %[[MASKED:.*]] = stablehlo.select %{{.*}}, %[[ROWS]], %{{.*}} : tensor<3x3xi1>, tensor<3x3xf32>
// CHECK-NEXT: %[[SPREAD:.*]] = stablehlo.pad %[[MASKED]], %{{.*}}, low = [1, 0], high = [0, 0], interior = [1, 0]
// CHECK-SAME: -> tensor<6x3xf32>
// CHECK-NEXT: %[[KEEP:.*]] = stablehlo.constant dense<[0, 1, 0, 1]> : tensor<4xi32>
// CHECK: %[[MINE:.*]] = stablehlo.dynamic_slice %[[SPREAD]], %{{.*}}, %{{.*}}, sizes = [5, 3]
// CHECK-NEXT: sdy.return %[[MINE]] : tensor<5x3xf32>
// CHECK-NOT: all_gather

module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @spread(%x: tensor<8x3xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<20x3xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = stablehlo.pad %x, %zero, low = [1, 0], high = [4, 0], interior = [1, 0]
        : (tensor<8x3xf32>, tensor<f32>) -> tensor<20x3xf32>
    return %0 : tensor<20x3xf32>
  }
}
