// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// Slices, shifts, pooling, convolution and reversal along a sharded
// dimension keep it sharded: halos from the neighbours by collective_permute
// (partitioning/windowed.py), never an all_gather.

// slice rows [2, 6) of a row-sharded 8x8 on 4 devices (2 rows each, 1 row
// of the result each): device q needs global row 2+q, which lies in its own
// shard or a neighbour's.  It receives its left neighbour's last row and its
// right neighbour's first row (one collective_permute each way, 1x8 each,
// instead of gathering 8x8) and cuts its row from the 4-row window at
// table[q] + 3 = 3 - q.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x8xf32>) {
// CHECK-NEXT: %[[LAST:.*]] = stablehlo.slice %[[A]] [1:2, 0:8]
// CHECK-NEXT: %[[FROM_LEFT:.*]] = "stablehlo.collective_permute"(%[[LAST]])
// CHECK-SAME: source_target_pairs = dense<{{\[\[}}0, 1], [1, 2], [2, 3]]>
// CHECK-NEXT: %[[FIRST:.*]] = stablehlo.slice %[[A]] [0:1, 0:8]
// CHECK-NEXT: %[[FROM_RIGHT:.*]] = "stablehlo.collective_permute"(%[[FIRST]])
// CHECK-SAME: source_target_pairs = dense<{{\[\[}}1, 0], [2, 1], [3, 2]]>
// CHECK-NEXT: %[[WINDOW:.*]] = stablehlo.concatenate %[[FROM_LEFT]], %[[A]], %[[FROM_RIGHT]], dim = 0 : {{.*}} -> tensor<4x8xf32>
// CHECK-NEXT: %[[TABLE:.*]] = stablehlo.constant dense<[0, -1, -2, -3]> : tensor<4xi32>
// CHECK: %[[START:.*]] = stablehlo.add %{{.*}}, %{{.*}} : tensor<i32>
// CHECK: %[[MINE:.*]] = stablehlo.dynamic_slice %[[WINDOW]], %[[START]], %{{.*}}, sizes = [1, 8]
// CHECK-NEXT: sdy.return %[[MINE]] : tensor<1x8xf32>
// CHECK-NOT: all_gather

module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @slice(%a: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<4x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %0 = stablehlo.slice %a [2:6, 0:8] : (tensor<8x8xf32>) -> tensor<4x8xf32>
    return %0 : tensor<4x8xf32>
  }
}

// -----

// The pipeline shift: concatenate(fresh, state[0:3]) with the stage dim
// sharded over 4 stages.  state[0:3] is each device's own row (no slice),
// and the concatenation moves each stage's row to the next stage: one
// collective_permute 0->1->2->3 of one 1x8 row, and device 0 takes the fresh
// input instead (a select on the global row index).

// CHECK-LABEL: func.func public @main
// CHECK: (%[[STATE:arg[0-9]+]]: tensor<1x8xf32>, %[[FRESH:arg[0-9]+]]: tensor<1x8xf32>) {
// CHECK-NOT: all_gather
// CHECK: %[[FRESH_ROW:.*]] = stablehlo.select %{{.*}}, %{{.*}}, %{{.*}} : tensor<1x8xi1>, tensor<1x8xf32>
// CHECK-NEXT: %[[SHIFTED:.*]] = "stablehlo.collective_permute"(%[[STATE]])
// CHECK-SAME: source_target_pairs = dense<{{\[\[}}0, 1], [1, 2], [2, 3]]>
// CHECK-SAME: (tensor<1x8xf32>) -> tensor<1x8xf32>
// CHECK: %[[MOVED:.*]] = stablehlo.select %{{.*}}, %[[SHIFTED]], %{{.*}}
// CHECK: %[[MERGED:.*]] = stablehlo.select %{{.*}}, %[[MOVED]], %[[FRESH_ROW]]
// CHECK-NEXT: sdy.return %[[MERGED]] : tensor<1x8xf32>
// CHECK-NOT: all_gather

module attributes {spmd.mesh = #sdy.mesh<["stage"=4]>} {
  func.func @shift(%state: tensor<4x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}, %fresh: tensor<1x8xf32>)
      -> (tensor<4x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %0 = stablehlo.slice %state [0:3, 0:8] : (tensor<4x8xf32>) -> tensor<3x8xf32>
    %1 = stablehlo.concatenate %fresh, %0, dim = 0 : (tensor<1x8xf32>, tensor<3x8xf32>) -> tensor<4x8xf32>
    return %1 : tensor<4x8xf32>
  }
}

// -----

// Max pooling (window 3, stride 2, low padding 1) over rows sharded 4 ways
// (4 rows in, 2 windows out per device): each device's windows read rows
// [4q-1, 4q+4), so it receives one row from its left neighbour, masks the
// rows outside [0, 16) with the init value (-inf), and pools locally with
// no padding.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[X:arg[0-9]+]]: tensor<4x8xf32>) {
// CHECK-NEXT: %[[INIT:.*]] = stablehlo.constant dense<0xFF800000> : tensor<f32>
// CHECK-NEXT: %[[LAST:.*]] = stablehlo.slice %[[X]] [3:4, 0:8]
// CHECK-NEXT: %[[HALO:.*]] = "stablehlo.collective_permute"(%[[LAST]])
// CHECK-SAME: source_target_pairs = dense<{{\[\[}}0, 1], [1, 2], [2, 3]]>
// CHECK-NEXT: %[[WINDOW:.*]] = stablehlo.concatenate %[[HALO]], %[[X]], dim = 0 : {{.*}} -> tensor<5x8xf32>
// CHECK: %[[FILL:.*]] = stablehlo.broadcast_in_dim %[[INIT]], dims = []
// CHECK-NEXT: %[[MASKED:.*]] = stablehlo.select %{{.*}}, %[[WINDOW]], %[[FILL]]
// CHECK-NEXT: %[[POOLED:.*]] = "stablehlo.reduce_window"(%[[MASKED]], %[[INIT]])
// CHECK-SAME: padding = dense<0>
// CHECK: sdy.return %[[POOLED]] : tensor<2x8xf32>
// CHECK-NOT: all_gather

module attributes {spmd.mesh = #sdy.mesh<["h"=4]>} {
  func.func @pool(%x: tensor<16x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %init = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %0 = "stablehlo.reduce_window"(%x, %init) <{padding = dense<[[1, 0], [0, 0]]> : tensor<2x2xi64>, window_dimensions = array<i64: 3, 1>, window_strides = array<i64: 2, 1>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %m = stablehlo.maximum %a, %b : tensor<f32>
      stablehlo.return %m : tensor<f32>
    }) : (tensor<16x8xf32>, tensor<f32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// A 1-D convolution (kernel 3, SAME padding) over a spatial dim sharded 4
// ways: one row of halo from each neighbour, zero outside the image, and a
// local convolution without padding: 1x6x4 in, 1x4x2 out.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[X:arg[0-9]+]]: tensor<1x4x4xf32>, %[[W:arg[0-9]+]]: tensor<3x4x2xf32>) {
// CHECK: %[[FROM_LEFT:.*]] = "stablehlo.collective_permute"
// CHECK-SAME: source_target_pairs = dense<{{\[\[}}0, 1], [1, 2], [2, 3]]>
// CHECK: %[[FROM_RIGHT:.*]] = "stablehlo.collective_permute"
// CHECK-SAME: source_target_pairs = dense<{{\[\[}}1, 0], [2, 1], [3, 2]]>
// CHECK-NEXT: %[[WINDOW:.*]] = stablehlo.concatenate %[[FROM_LEFT]], %[[X]], %[[FROM_RIGHT]], dim = 1
// CHECK: %[[MASKED:.*]] = stablehlo.select %{{.*}}, %[[WINDOW]], %{{.*}} : tensor<1x6x4xi1>, tensor<1x6x4xf32>
// CHECK-NEXT: %[[Y:.*]] = stablehlo.convolution(%[[MASKED]], %[[W]])
// CHECK-SAME: pad = {{\[\[}}0, 0]]
// CHECK-SAME: -> tensor<1x4x2xf32>
// CHECK-NEXT: sdy.return %[[Y]]
// CHECK-NOT: all_gather

module attributes {spmd.mesh = #sdy.mesh<["h"=4]>} {
  func.func @conv(%x: tensor<1x16x4xf32> {mhlo.sharding = "{devices=[1,4,1]<=[4]}"}, %w: tensor<3x4x2xf32>)
      -> (tensor<1x16x2xf32> {mhlo.sharding = "{devices=[1,4,1]<=[4]}"}) {
    %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, f]x[0, i, o]->[b, 0, f], window = {stride = [1], pad = [[1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x16x4xf32>, tensor<3x4x2xf32>) -> tensor<1x16x2xf32>
    return %0 : tensor<1x16x2xf32>
  }
}

// -----

// Reversing a sharded dim: each device reverses its shard and sends it to
// its mirror device (0<->3, 1<->2).

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x2xf32>) {
// CHECK-NEXT: %[[R:.*]] = stablehlo.reverse %[[A]], dims = [0]
// CHECK-NEXT: %[[M:.*]] = "stablehlo.collective_permute"(%[[R]])
// CHECK-SAME: source_target_pairs = dense<{{\[\[}}0, 3], [1, 2], [2, 1], [3, 0]]>
// CHECK-NEXT: sdy.return %[[M]] : tensor<2x2xf32>

module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @reverse(%a: tensor<8x2xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x2xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %0 = stablehlo.reverse %a, dims = [0] : tensor<8x2xf32>
    return %0 : tensor<8x2xf32>
  }
}

// -----

// The last row of a row-sharded 16x4, wanted whole (a pipeline's finished
// microbatch): the row lies in device 3's shard, so device 3 broadcasts it
// (its local row 1, zeros elsewhere, one all_reduce of 1x4) instead of
// everyone gathering 16x4.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<4x4xf32>) {
// CHECK-NEXT: %[[ROW:.*]] = stablehlo.slice %[[A]] [1:2, 0:4]
// CHECK: %[[OWNER:.*]] = stablehlo.constant dense<3> : tensor<i32>
// CHECK-NEXT: %[[MINE:.*]] = stablehlo.compare EQ, %{{.*}}, %[[OWNER]]
// CHECK: %[[KEPT:.*]] = stablehlo.select %{{.*}}, %[[ROW]], %{{.*}} : tensor<1x4xi1>, tensor<1x4xf32>
// CHECK-NEXT: %[[SUM:.*]] = "stablehlo.all_reduce"(%[[KEPT]])
// CHECK: sdy.return %[[SUM]] : tensor<1x4xf32>
// CHECK-NOT: all_gather
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @last_row(%a: tensor<16x4xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<1x4xf32> {mhlo.sharding = "{replicated}"}) {
    %0 = stablehlo.slice %a [13:14, 0:4] : (tensor<16x4xf32>) -> tensor<1x4xf32>
    return %0 : tensor<1x4xf32>
  }
}

// -----

// Padding 2 columns at the end of a column-sharded 4x8 on 2 devices (4 + 4
// columns in, 5 + 5 out): device 0 needs one column of device 1; device 1's
// window [5, 10) reaches past the tensor, which is the padding value, not
// something to receive.  One collective_permute of one column, 1 -> 0.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<4x4xf32>) {
// CHECK: %[[FIRST:.*]] = stablehlo.slice %[[A]] [0:4, 0:1]
// CHECK-NEXT: %[[FROM_RIGHT:.*]] = "stablehlo.collective_permute"(%[[FIRST]])
// CHECK-SAME: source_target_pairs = dense<{{\[\[}}1, 0]]>
// CHECK-SAME: (tensor<4x1xf32>) -> tensor<4x1xf32>
// CHECK-NEXT: stablehlo.concatenate %[[A]], %[[FROM_RIGHT]], dim = 1
// CHECK: sdy.return %{{.*}} : tensor<4x5xf32>
// CHECK-NOT: collective_permute
// CHECK-NOT: all_gather

module attributes {spmd.mesh = #sdy.mesh<["x"=2]>} {
  func.func @pad(%a: tensor<4x8xf32> {mhlo.sharding = "{devices=[1,2]<=[2]}"})
      -> (tensor<4x10xf32> {mhlo.sharding = "{devices=[1,2]<=[2]}"}) {
    %z = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = stablehlo.pad %a, %z, low = [0, 0], high = [0, 2], interior = [0, 0] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x10xf32>
    return %0 : tensor<4x10xf32>
  }
}

// -----

// The first 2 columns of a column-sharded 2x32 on 4 devices, wanted split
// the same way (the top-k of a sort): device 1's column lies in device 0's
// shard, 7 columns left of its own, where a halo would bring the whole
// shard.  Each window's pieces come from the shards that hold them: one
// collective_permute of one column, from device 0 (cut at a per-device
// offset: table [1, 0, 0, 0]) to device 1, the only one that needs it
// (devices 2 and 3 hold padding).

// CHECK-LABEL: func.func public @main
// CHECK-NOT: all_gather
// CHECK: %[[CUTS:.*]] = stablehlo.constant dense<[1, 0, 0, 0]> : tensor<4xi32>
// CHECK: %[[PIECE:.*]] = stablehlo.dynamic_slice %{{.*}}, %{{.*}}, %{{.*}}, sizes = [2, 1]
// CHECK-NEXT: %[[MOVED:.*]] = "stablehlo.collective_permute"(%[[PIECE]])
// CHECK-SAME: source_target_pairs = dense<{{\[\[}}0, 1]]>
// CHECK-SAME: (tensor<2x1xf32>) -> tensor<2x1xf32>
// CHECK-NOT: collective_permute
// CHECK-NOT: all_gather
// CHECK: return %{{.*}} : tensor<2x2xf32>

module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @first_two(%a: tensor<2x32xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<2x2xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}) {
    %0 = stablehlo.slice %a [0:2, 0:2] {mhlo.sharding = "{devices=[1,4]<=[4]}"} : (tensor<2x32xf32>) -> tensor<2x2xf32>
    return %0 : tensor<2x2xf32>
  }
}

// -----

// The first element of a 4-way split vector, the slice itself pinned split
// 4 ways: the one real element sits in device 0's shard and every other
// device's share is padding, so each device slices its window, clamped into
// its own shard, and nothing moves (as XLA does).  Size-1 dims a user splits stay split.

// (The uneven result crosses the boundary in GSPMD's manual form.)

// CHECK-LABEL: func.func public @main
// CHECK: %[[A:.*]] = stablehlo.custom_call @SPMDFullToShardShape({{.*}}) -> tensor<2xf32>
// CHECK-NOT: all_reduce
// CHECK-NOT: all_gather
// CHECK-NOT: collective_permute
// CHECK: %[[FIRST:.*]] = stablehlo.dynamic_slice %[[A]], %{{.*}}, sizes = [1] : (tensor<2xf32>, tensor<i32>) -> tensor<1xf32>
// CHECK-NOT: all_reduce
// CHECK-NOT: all_gather
// CHECK: stablehlo.custom_call @SPMDShardToFullShape
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func public @first_element(%a: tensor<8xf32> {mhlo.sharding = "{devices=[4]<=[4]}"})
      -> (tensor<1xf32> {mhlo.sharding = "{devices=[4]<=[4]}"}) {
    %0 = stablehlo.slice %a [0:1] {mhlo.sharding = "{devices=[4]<=[4]}"} : (tensor<8xf32>) -> tensor<1xf32>
    return %0 : tensor<1xf32>
  }
}

// -----

// A slice of a pad, through a constraint that pins the pad's own sharding,
// is one pad of the pad's operand: out[i] = a[i + 2] or 2.0.  Device i
// takes a[i + 2] from device i + 2 in one collective_permute and fills
// past the end; the pad's own halo is never exchanged (XLA's
// MergedPadThenSliceWithPaddingHigh).

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<1xf32>) {
// CHECK-NEXT: %[[FILL:.*]] = stablehlo.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[FROM:.*]] = "stablehlo.collective_permute"(%[[A]])
// CHECK-SAME: source_target_pairs = dense<{{\[\[}}2, 0], [3, 1]]>
// CHECK-NOT: collective_permute
// CHECK: %[[KEPT:.*]] = stablehlo.select %{{.*}}, %[[FROM]], %{{.*}} : tensor<1xi1>, tensor<1xf32>
// CHECK-NEXT: %[[OUT:.*]] = stablehlo.pad %[[KEPT]], %[[FILL]], low = [0], high = [0], interior = [0]
// CHECK-NEXT: sdy.return %[[OUT]] : tensor<1xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @pad_then_slice(%a: tensor<4xf32> {mhlo.sharding = "{devices=[4]<=[4]}"})
      -> (tensor<4xf32> {mhlo.sharding = "{devices=[4]<=[4]}"}) {
    %c = stablehlo.constant dense<2.0> : tensor<f32>
    %0 = stablehlo.pad %a, %c, low = [2], high = [2], interior = [0] {mhlo.sharding = "{devices=[4]<=[4]}"} : (tensor<4xf32>, tensor<f32>) -> tensor<8xf32>
    %1 = stablehlo.custom_call @Sharding(%0) {mhlo.sharding = "{devices=[4]<=[4]}"} : (tensor<8xf32>) -> tensor<8xf32>
    %2 = stablehlo.slice %1 [4:8] {mhlo.sharding = "{devices=[4]<=[4]}"} : (tensor<8xf32>) -> tensor<4xf32>
    return %2 : tensor<4xf32>
  }
}

// -----

// A rotation right by 2 of 20 elements split 4 ways (5 a device): each
// device's block is its left neighbour's last 2 elements (device 0's from
// device 3) and its own first 3, cut straight from the argument.  One
// collective_permute carries the 2-element pieces around the ring; the
// slices' own halos are never made.

// CHECK-LABEL: func.func public @main(%arg0: tensor<20xf32>
// CHECK: (%[[A:arg[0-9]+]]: tensor<5xf32>) {
// CHECK-NOT: collective_permute
// CHECK: %[[PIECE:.*]] = stablehlo.dynamic_slice %[[A]], %{{.*}}, sizes = [2] : (tensor<5xf32>, tensor<i32>) -> tensor<2xf32>
// CHECK-NEXT: %[[SENT:.*]] = "stablehlo.collective_permute"(%[[PIECE]])
// CHECK-SAME: source_target_pairs = dense<{{\[\[}}3, 0], [0, 1], [1, 2], [2, 3]]>
// CHECK-NOT: collective_permute
// CHECK: sdy.return
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @rotate(%a: tensor<20xf32> {mhlo.sharding = "{devices=[4]<=[4]}"})
      -> (tensor<20xf32> {mhlo.sharding = "{devices=[4]<=[4]}"}) {
    %0 = stablehlo.slice %a [18:20] {mhlo.sharding = "{devices=[4]<=[4]}"} : (tensor<20xf32>) -> tensor<2xf32>
    %1 = stablehlo.slice %a [0:18] {mhlo.sharding = "{devices=[4]<=[4]}"} : (tensor<20xf32>) -> tensor<18xf32>
    %2 = stablehlo.concatenate %0, %1, dim = 0 {mhlo.sharding = "{devices=[4]<=[4]}"} : (tensor<2xf32>, tensor<18xf32>) -> tensor<20xf32>
    return %2 : tensor<20xf32>
  }
}

// -----

// A slice of x before x itself, 10 elements split 2 ways (5 a device):
// device 0's block is x[0:2] then x[0:3], two pieces of its own shard.  Each
// kept piece is placed on its own (a placement holds one piece per device);
// only x[3] moves, from device 0 to device 1.

// CHECK-LABEL: func.func public @main(%arg0: tensor<8xf32>
// CHECK: (%[[X:arg[0-9]+]]: tensor<4xf32>) {
// CHECK-NOT: collective_permute
// CHECK: %[[WIDE:.*]] = stablehlo.dynamic_slice %[[X]], %{{.*}}, sizes = [4]
// CHECK: stablehlo.dynamic_update_slice %{{.*}}, %[[WIDE]], %{{.*}} : (tensor<13xf32>, tensor<4xf32>, tensor<i32>)
// CHECK-NOT: collective_permute
// CHECK: %[[NARROW:.*]] = stablehlo.dynamic_slice %[[X]], %{{.*}}, sizes = [2]
// CHECK: stablehlo.dynamic_update_slice %{{.*}}, %[[NARROW]], %{{.*}} : (tensor<9xf32>, tensor<2xf32>, tensor<i32>)
// CHECK: %[[ONE:.*]] = stablehlo.dynamic_slice %[[X]], %{{.*}}, sizes = [1]
// CHECK-NEXT: "stablehlo.collective_permute"(%[[ONE]])
// CHECK-SAME: source_target_pairs = dense<{{\[\[}}0, 1]]>
// CHECK-NOT: collective_permute
// CHECK: sdy.return
module attributes {spmd.mesh = #sdy.mesh<["x"=2]>} {
  func.func @main(%a: tensor<8xf32> {mhlo.sharding = "{devices=[2]<=[2]}"})
      -> (tensor<10xf32> {mhlo.sharding = "{devices=[2]<=[2]}"}) {
    %0 = stablehlo.slice %a [0:2] : (tensor<8xf32>) -> tensor<2xf32>
    %1 = stablehlo.concatenate %0, %a, dim = 0 : (tensor<2xf32>, tensor<8xf32>) -> tensor<10xf32>
    return %1 : tensor<10xf32>
  }
}
