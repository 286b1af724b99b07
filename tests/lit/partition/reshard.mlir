// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// custom_call @Sharding from rows to columns on 4 devices, S(0) -> S(1): one
// all_to_all.  Device k splits its 2x8 rows into 4 column blocks of 2
// (split_dimension = 1), sends block j to device j, and stacks the 4 2x2
// blocks it receives, in device order, along dim 0 (concat_dimension = 0):
// rows 0..7 of columns [2k, 2k+2), 8x2.  The custom_call is gone.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x8xf32>) {
// CHECK-NEXT: %[[T:.*]] = "stablehlo.all_to_all"(%[[A]])
// CHECK-SAME: channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, concat_dimension = 0 : i64, replica_groups = dense<{{\[\[}}0, 1, 2, 3]]> : tensor<1x4xi64>, split_count = 4 : i64, split_dimension = 1 : i64
// CHECK-SAME: (tensor<2x8xf32>) -> tensor<8x2xf32>
// CHECK-NEXT: sdy.return %[[T]] : tensor<8x2xf32>
// CHECK-NOT: custom_call
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @rows_to_columns(%a: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}) {
    %0 = stablehlo.custom_call @Sharding(%a) {mhlo.sharding = "{devices=[1,4]<=[4]}"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// S(0) -> replicated: one all_gather on dim 0 over the 4 devices, 2x8 -> 8x8.

// CHECK-LABEL: // -----
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x8xf32>) {
// CHECK-NEXT: %[[G:.*]] = "stablehlo.all_gather"(%[[A]])
// CHECK-SAME: all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<{{\[\[}}0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids
// CHECK-SAME: (tensor<2x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: sdy.return %[[G]] : tensor<8x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @gather(%a: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{replicated}"}) {
    %0 = stablehlo.custom_call @Sharding(%a) {mhlo.sharding = "{replicated}"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// replicated -> S(1) over b on a 2x2 (a, b) mesh: no communication, each
// device slices its columns.  The tile assignment [0, 2, 1, 3] puts devices
// {0, 2} in column block 0 and {1, 3} in block 1; with d = 2*a + b that is
// axis b.  Device d starts at column 4*b(d): table [0, 4, 0, 4], indexed by
// partition_id, offset on dim 1, 8x4 slice.

// CHECK-LABEL: // -----
// CHECK: func.func public @main
// CHECK-SAME: -> (tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"b"}]>})
// CHECK: (%[[A:arg[0-9]+]]: tensor<8x8xf32>) {
// CHECK-NEXT: %[[TABLE:.*]] = stablehlo.constant dense<[0, 4, 0, 4]> : tensor<4xi32>
// CHECK-NEXT: %[[PID:.*]] = stablehlo.partition_id : tensor<ui32>
// CHECK-NEXT: %[[E:.*]] = stablehlo.dynamic_slice %[[TABLE]], %[[PID]], sizes = [1] : (tensor<4xi32>, tensor<ui32>) -> tensor<1xi32>
// CHECK-NEXT: %[[OFF:.*]] = stablehlo.reshape %[[E]] : (tensor<1xi32>) -> tensor<i32>
// CHECK-NEXT: %[[Z:.*]] = stablehlo.constant dense<0> : tensor<i32>
// CHECK-NEXT: %[[S:.*]] = stablehlo.dynamic_slice %[[A]], %[[Z]], %[[OFF]], sizes = [8, 4] : (tensor<8x8xf32>, tensor<i32>, tensor<i32>) -> tensor<8x4xf32>
// CHECK-NEXT: sdy.return %[[S]] : tensor<8x4xf32>
// CHECK-NOT: stablehlo.all_
module attributes {spmd.mesh = #sdy.mesh<["a"=2, "b"=2]>} {
  func.func @slice_columns(%a: tensor<8x8xf32> {mhlo.sharding = "{replicated}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"}) {
    %0 = stablehlo.custom_call @Sharding(%a) {mhlo.sharding = "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// The same tile assignment on a mesh with an explicit device order,
// device_ids = [0, 2, 1, 3]: mesh position (a, b) holds device
// device_ids[2a + b], so (0,0)=0, (0,1)=2, (1,0)=1, (1,1)=3.  Now {0, 2}
// are a = 0 and the split is over a, on dim 0.  Tables and groups follow
// the device ids, not the positions: replicated -> S(0) over a slices rows
// at 4*a(d) = [0, 4, 0, 4] for d = 0..3; S(0) over a -> replicated gathers
// within the devices differing only along a, in a order: b = 0 is devices
// (0, 1), b = 1 is (2, 3).

// CHECK-LABEL: // -----
// CHECK: sdy.mesh @mesh = <["a"=2, "b"=2], device_ids=[0, 2, 1, 3]>
// CHECK: (%[[A:arg[0-9]+]]: tensor<8x8xf32>) {
// CHECK-NEXT: %[[TABLE:.*]] = stablehlo.constant dense<[0, 4, 0, 4]> : tensor<4xi32>
// CHECK-NEXT: %[[PID:.*]] = stablehlo.partition_id : tensor<ui32>
// CHECK-NEXT: %[[E:.*]] = stablehlo.dynamic_slice %[[TABLE]], %[[PID]], sizes = [1]
// CHECK-NEXT: %[[OFF:.*]] = stablehlo.reshape %[[E]] : (tensor<1xi32>) -> tensor<i32>
// CHECK-NEXT: %[[Z:.*]] = stablehlo.constant dense<0> : tensor<i32>
// CHECK-NEXT: %[[S:.*]] = stablehlo.dynamic_slice %[[A]], %[[OFF]], %[[Z]], sizes = [4, 8] : (tensor<8x8xf32>, tensor<i32>, tensor<i32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[X:.*]] = stablehlo.exponential %[[S]] : tensor<4x8xf32>
// CHECK-NEXT: %[[G:.*]] = "stablehlo.all_gather"(%[[X]])
// CHECK-SAME: all_gather_dim = 0 : i64
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 1], [2, 3]]> : tensor<2x2xi64>
// CHECK-SAME: (tensor<4x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: sdy.return %[[G]] : tensor<8x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["a"=2, "b"=2], device_ids=[0, 2, 1, 3]>} {
  func.func @device_order(%x: tensor<8x8xf32> {mhlo.sharding = "{replicated}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{replicated}"}) {
    %0 = stablehlo.custom_call @Sharding(%x) {mhlo.sharding = "{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %1 = stablehlo.exponential %0 : tensor<8x8xf32>
    return %1 : tensor<8x8xf32>
  }
}

// -----

// Two collectives in one program get distinct channels, in order: rows ->
// columns (all_to_all, handle 1), exp on 8x2, columns -> replicated
// (all_gather on dim 1, handle 2).

// CHECK-LABEL: // -----
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x8xf32>) {
// CHECK-NEXT: %[[T:.*]] = "stablehlo.all_to_all"(%[[A]]) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>
// CHECK-SAME: (tensor<2x8xf32>) -> tensor<8x2xf32>
// CHECK-NEXT: %[[X:.*]] = stablehlo.exponential %[[T]] : tensor<8x2xf32>
// CHECK-NEXT: %[[G:.*]] = "stablehlo.all_gather"(%[[X]]) <{all_gather_dim = 1 : i64, channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>
// CHECK-SAME: (tensor<8x2xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: sdy.return %[[G]] : tensor<8x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @channels(%x: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{replicated}"}) {
    %0 = stablehlo.custom_call @Sharding(%x) {mhlo.sharding = "{devices=[1,4]<=[4]}"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %1 = stablehlo.exponential %0 : tensor<8x8xf32>
    return %1 : tensor<8x8xf32>
  }
}

// -----

// Same shard count, other axis: rows over x -> rows over y on a 2x2 (x, y)
// mesh is a collective_permute.  Device d = 2x + y holds row block x(d)
// and needs block y(d): 0 and 3 keep theirs, 1 needs block 0 and 2 needs
// block 1; each device sends once, so the pairs (source, target) are
// (0,0), (2,1), (1,2), (3,3).

// CHECK-LABEL: // -----
// CHECK: (%[[A:arg[0-9]+]]: tensor<4x8xf32>) {
// CHECK-NEXT: %[[P:.*]] = "stablehlo.collective_permute"(%[[A]])
// CHECK-SAME: source_target_pairs = dense<{{\[\[}}0, 0], [2, 1], [1, 2], [3, 3]]> : tensor<4x2xi64>
// CHECK-SAME: (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: sdy.return %[[P]] : tensor<4x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @permute(%a: tensor<8x8xf32> {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}"}) {
    %0 = stablehlo.custom_call @Sharding(%a) {mhlo.sharding = "{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// Uneven S(0) -> S(1): [10,6] on 4 devices is 3x6 per device as rows
// (padded 10 -> 12) and 10x2 as columns (padded 6 -> 8).  all_to_all needs
// whole blocks: pad the local columns 6 -> 8, exchange (3x8 -> 12x2), trim
// the padded rows (12x2 -> 10x2).  Each device's 10x2 block is its shard of
// the 10x6 result in XLA's uneven layout (the last one all padding).

// CHECK-LABEL: // -----
// CHECK: %[[A:.*]] = stablehlo.custom_call @SPMDFullToShardShape(%{{.*}}) {mhlo.sharding = "{manual}"} : ({{.*}}) -> tensor<3x6xf32>
// CHECK-NEXT: %[[Z:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[P:.*]] = stablehlo.pad %[[A]], %[[Z]], low = [0, 0], high = [0, 2], interior = [0, 0] : (tensor<3x6xf32>, tensor<f32>) -> tensor<3x8xf32>
// CHECK-NEXT: %[[T:.*]] = "stablehlo.all_to_all"(%[[P]])
// CHECK-SAME: concat_dimension = 0 : i64, replica_groups = dense<{{\[\[}}0, 1, 2, 3]]> : tensor<1x4xi64>, split_count = 4 : i64, split_dimension = 1 : i64
// CHECK-SAME: (tensor<3x8xf32>) -> tensor<12x2xf32>
// CHECK-NEXT: %[[S:.*]] = stablehlo.slice %[[T]] [0:10, 0:2] : (tensor<12x2xf32>) -> tensor<10x2xf32>
// CHECK-NEXT: stablehlo.custom_call @Sharding(%[[S]]) {mhlo.sharding = "{manual}"} : (tensor<10x2xf32>) -> tensor<10x2xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @uneven(%a: tensor<10x6xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<10x6xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}) {
    %0 = stablehlo.custom_call @Sharding(%a) {mhlo.sharding = "{devices=[1,4]<=[4]}"} : (tensor<10x6xf32>) -> tensor<10x6xf32>
    return %0 : tensor<10x6xf32>
  }
}

// -----

// Rows over (x, y) to rows over y alone: the 2-row blocks move first, to
// the (y, x) order (device 2x+y takes block 4y+x), and then x is gathered,
// 8 rows over y.  Gathering x first would move the 8-row blocks instead.

// CHECK-LABEL: // -----
// CHECK: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x8xf32>) {
// CHECK-NEXT: %[[P:.*]] = "stablehlo.collective_permute"(%[[A]])
// CHECK-SAME: source_target_pairs = dense<{{\[\[}}0, 0], [4, 1], [1, 2], [5, 3], [2, 4], [6, 5], [3, 6], [7, 7]]>
// CHECK-SAME: (tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: %[[G:.*]] = "stablehlo.all_gather"(%[[P]])
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 2, 4, 6], [1, 3, 5, 7]]>
// CHECK-SAME: (tensor<2x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: sdy.return %[[G]] : tensor<8x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4, "y"=2]>} {
  func.func @permute_then_gather(%a: tensor<16x8xf32> {mhlo.sharding = "{devices=[8,1]<=[8]}"})
      -> (tensor<16x8xf32> {mhlo.sharding = "{devices=[2,1,4]<=[4,2]T(1,0) last_tile_dim_replicate}"}) {
    return %a : tensor<16x8xf32>
  }
}

// -----

// Rows over x and columns over y, wanted as rows over (y, x): an all_to_all
// over y moves y to the rows (2 rows of 8 a device, blocks in (x, y)
// order), and one permute puts them in (y, x) order.

// CHECK-LABEL: // -----
// CHECK: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<4x4xf32>) {
// CHECK-NEXT: %[[T:.*]] = "stablehlo.all_to_all"(%[[A]])
// CHECK-SAME: concat_dimension = 1 : i64, replica_groups = dense<{{\[\[}}0, 1], [2, 3], [4, 5], [6, 7]]> : tensor<4x2xi64>, split_count = 2 : i64, split_dimension = 0 : i64
// CHECK-SAME: (tensor<4x4xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: %[[P:.*]] = "stablehlo.collective_permute"(%[[T]])
// CHECK-SAME: source_target_pairs = dense<{{\[\[}}0, 0], [4, 1], [1, 2], [5, 3], [2, 4], [6, 5], [3, 6], [7, 7]]>
// CHECK-NEXT: sdy.return %[[P]] : tensor<2x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4, "y"=2]>} {
  func.func @merge_reordered(%a: tensor<16x8xf32> {mhlo.sharding = "{devices=[4,2]<=[8]}"})
      -> (tensor<16x8xf32> {mhlo.sharding = "{devices=[8,1]<=[4,2]T(1,0)}"}) {
    return %a : tensor<16x8xf32>
  }
}

// -----

// A value moved to a layout once serves every later reader there: a's
// rows go to columns by one all_to_all, read by both the add and the
// multiply.

// CHECK-LABEL: // -----
// CHECK: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x8xf32>, %[[B:arg[0-9]+]]: tensor<8x2xf32>) {
// CHECK-NEXT: %[[M:.*]] = "stablehlo.all_to_all"(%[[A]])
// CHECK-NEXT: %[[S:.*]] = stablehlo.add %[[M]], %[[B]] : tensor<8x2xf32>
// CHECK-NEXT: %[[P:.*]] = stablehlo.multiply %[[M]], %[[S]] : tensor<8x2xf32>
// CHECK-NEXT: sdy.return %[[P]] : tensor<8x2xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @moved_once(%a: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                        %b: tensor<8x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}) {
    %0 = stablehlo.add %a, %b {mhlo.sharding = "{devices=[1,4]<=[4]}"} : tensor<8x8xf32>
    %1 = stablehlo.multiply %a, %0 {mhlo.sharding = "{devices=[1,4]<=[4]}"} : tensor<8x8xf32>
    return %1 : tensor<8x8xf32>
  }
}

// -----

// ...but only where the move dominates the reader: a's move inside the
// loop body is not visible after the loop, which moves it again.

// CHECK-LABEL: // -----
// CHECK: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x8xf32>, %[[B:arg[0-9]+]]: tensor<8x2xf32>) {
// CHECK: %[[LOOP:.*]]:2 = stablehlo.while
// CHECK: } do {
// CHECK: %[[IN:.*]] = "stablehlo.all_to_all"(%[[A]])
// CHECK-NEXT: stablehlo.add %[[IN]], %{{.*}} : tensor<8x2xf32>
// CHECK: %[[OUT:.*]] = "stablehlo.all_to_all"(%[[A]])
// CHECK-NEXT: %[[P:.*]] = stablehlo.multiply %[[OUT]], %[[LOOP]]#1 : tensor<8x2xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @moved_in_a_loop(%a: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                             %b: tensor<8x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}) {
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %r:2 = stablehlo.while(%i = %c0, %acc = %b) : tensor<i32>, tensor<8x8xf32>
     cond {
      %c2 = stablehlo.constant dense<2> : tensor<i32>
      %lt = stablehlo.compare LT, %i, %c2 : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    } do {
      %c1 = stablehlo.constant dense<1> : tensor<i32>
      %next = stablehlo.add %i, %c1 : tensor<i32>
      %sum = stablehlo.add %a, %acc : tensor<8x8xf32>
      stablehlo.return %next, %sum : tensor<i32>, tensor<8x8xf32>
    }
    %1 = stablehlo.multiply %a, %r#1 {mhlo.sharding = "{devices=[1,4]<=[4]}"} : tensor<8x8xf32>
    return %1 : tensor<8x8xf32>
  }
}

// -----

// A value pinned to device 2 ({maximal device=2}) between two row splits:
// its rows are gathered and handed to device 2, and the exponential runs on
// the whole value there.  Every device runs that one body, so every device
// holds the result whole and keeps its rows: nothing moves back.

// CHECK-LABEL: // -----
// CHECK: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x4xf32>) {
// CHECK-NEXT: %[[W:.*]] = "stablehlo.all_gather"(%[[A]]) {{.*}} : (tensor<2x4xf32>) -> tensor<8x4xf32>
// CHECK-NEXT: %[[E:.*]] = stablehlo.exponential %[[W]] : tensor<8x4xf32>
// CHECK-NOT: stablehlo.all_reduce
// CHECK: %[[MINE:.*]] = stablehlo.dynamic_slice %[[E]], %{{.*}}, %{{.*}}, sizes = [2, 4]
// CHECK-NEXT: sdy.return %[[MINE]] : tensor<2x4xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @on_one_device(%a: tensor<8x4xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x4xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %0 = stablehlo.custom_call @Sharding(%a) {mhlo.sharding = "{maximal device=2}"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %1 = stablehlo.exponential %0 {mhlo.sharding = "{maximal device=2}"} : tensor<8x4xf32>
    %2 = stablehlo.custom_call @Sharding(%1) {mhlo.sharding = "{devices=[4,1]<=[4]}"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    return %2 : tensor<8x4xf32>
  }
}
