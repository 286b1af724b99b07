// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// broadcast_in_dim keeps the operand's sharding on the dim it maps to: b [8]
// over 4 devices (2 each) broadcast along a new major dim is [4,8] sharded
// on dim 1, 4x2 per device.  A scalar broadcasts to the local shape
// directly.  The broadcast_dimensions attribute is unchanged.  No
// collective.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[B:arg[0-9]+]]: tensor<2xf32>, %[[S:arg[0-9]+]]: tensor<f32>) {
// CHECK-NEXT: %[[X:.*]] = stablehlo.broadcast_in_dim %[[B]], dims = [1] : (tensor<2xf32>) -> tensor<4x2xf32>
// CHECK-NEXT: %[[Y:.*]] = stablehlo.broadcast_in_dim %[[S]], dims = [] : (tensor<f32>) -> tensor<4x2xf32>
// CHECK-NEXT: %[[Z:.*]] = stablehlo.add %[[X]], %[[Y]] : tensor<4x2xf32>
// CHECK-NEXT: sdy.return %[[Z]] : tensor<4x2xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @broadcast(%b: tensor<8xf32> {mhlo.sharding = "{devices=[4]<=[4]}"}, %s: tensor<f32>)
      -> (tensor<4x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}) {
    %0 = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<8xf32>) -> tensor<4x8xf32>
    %1 = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<f32>) -> tensor<4x8xf32>
    %2 = stablehlo.add %0, %1 : tensor<4x8xf32>
    return %2 : tensor<4x8xf32>
  }
}

// -----

// transpose moves the sharding with the dim: [8,4] row-sharded (2x4 each)
// transposes to [4,8] column-sharded (4x2 each).  No collective.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x4xf32>) {
// CHECK-NEXT: %[[T:.*]] = stablehlo.transpose %[[A]], dims = [1, 0] : (tensor<2x4xf32>) -> tensor<4x2xf32>
// CHECK-NEXT: sdy.return %[[T]] : tensor<4x2xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @transpose(%a: tensor<8x4xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<4x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}) {
    %0 = stablehlo.transpose %a, dims = [1, 0] : (tensor<8x4xf32>) -> tensor<4x8xf32>
    return %0 : tensor<4x8xf32>
  }
}

// -----

// reshape splitting the sharded dim: [8,6] rows over 4 devices -> [4,2,6]
// with dim 0 over the 4: device k's rows [2k, 2k+2) are exactly the block
// [k, 0:2, :], so 2x6 -> 1x2x6 locally.  Merging back is the same in
// reverse.  No collective.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x6xf32>) {
// CHECK-NEXT: %[[S:.*]] = stablehlo.reshape %[[A]] : (tensor<2x6xf32>) -> tensor<1x2x6xf32>
// CHECK-NEXT: %[[N:.*]] = stablehlo.negate %[[S]] : tensor<1x2x6xf32>
// CHECK-NEXT: %[[M:.*]] = stablehlo.reshape %[[N]] : (tensor<1x2x6xf32>) -> tensor<2x6xf32>
// CHECK-NEXT: sdy.return %[[S]], %[[M]] : tensor<1x2x6xf32>, tensor<2x6xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @split_and_merge(%a: tensor<8x6xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<4x2x6xf32> {mhlo.sharding = "{devices=[4,1,1]<=[4]}"},
          tensor<8x6xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %0 = stablehlo.reshape %a : (tensor<8x6xf32>) -> tensor<4x2x6xf32>
    %1 = stablehlo.negate %0 : tensor<4x2x6xf32>
    %2 = stablehlo.reshape %1 : (tensor<4x2x6xf32>) -> tensor<8x6xf32>
    return %0, %2 : tensor<4x2x6xf32>, tensor<8x6xf32>
  }
}

// -----

// A dim split over two axes (x, y) of a 2x2 mesh splits across a reshape:
// [8,6] rows over (x, y) -> [2,4,6] with dim 0 over x and dim 1 over y.
// Device (x, y) holds rows [2*(2x+y), +2) = [4x + 2y, +2), which is
// [x, 2y:2y+2, :] of the [2,4,6] view: 2x6 -> 1x2x6 locally, and back.

// CHECK-LABEL: func.func public @main
// CHECK: manual_axes={"x", "y"} (%[[A:arg[0-9]+]]: tensor<2x6xf32>) {
// CHECK-NEXT: %[[S:.*]] = stablehlo.reshape %[[A]] : (tensor<2x6xf32>) -> tensor<1x2x6xf32>
// CHECK-NEXT: %[[N:.*]] = stablehlo.negate %[[S]] : tensor<1x2x6xf32>
// CHECK-NEXT: %[[M:.*]] = stablehlo.reshape %[[N]] : (tensor<1x2x6xf32>) -> tensor<2x6xf32>
// CHECK-NEXT: sdy.return %[[M]] : tensor<2x6xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @split_two_axes(%a: tensor<8x6xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> tensor<8x6xf32> {
    %0 = stablehlo.reshape %a : (tensor<8x6xf32>) -> tensor<2x4x6xf32>
    %1 = stablehlo.negate %0 : tensor<2x4x6xf32>
    %2 = stablehlo.reshape %1 : (tensor<2x4x6xf32>) -> tensor<8x6xf32>
    return %2 : tensor<8x6xf32>
  }
}

// -----

// Merging a sharded *minor* dim: [8,6] with its columns over 2 devices
// (8x3 each) -> [48].  A device's columns are not a contiguous run of the
// flat vector, so the merge cannot stay sharded: the columns are gathered
// (all_gather on dim 1, 8x3 -> 8x6, group [[0, 1]]) and the whole [48]
// reshaped, as the replicated result wants.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<8x3xf32>) {
// CHECK-NEXT: %[[G:.*]] = "stablehlo.all_gather"(%[[A]])
// CHECK-SAME: all_gather_dim = 1 : i64
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 1]]> : tensor<1x2xi64>
// CHECK-SAME: (tensor<8x3xf32>) -> tensor<8x6xf32>
// CHECK-NEXT: %[[R:.*]] = stablehlo.reshape %[[G]] : (tensor<8x6xf32>) -> tensor<48xf32>
// CHECK-NEXT: sdy.return %[[R]] : tensor<48xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=2]>} {
  func.func @merge_minor(%a: tensor<8x6xf32> {mhlo.sharding = "{devices=[1,2]<=[2]}"}) -> tensor<48xf32> {
    %0 = stablehlo.reshape %a : (tensor<8x6xf32>) -> tensor<48xf32>
    return %0 : tensor<48xf32>
  }
}

// -----

// Merging an unevenly sharded dim: [10,6] rows over 4 devices (3 rows
// each, the last with 2 rows of padding) -> [60] over 4 (15 each).  Device
// k holds flat elements [18k, 18k+18) and wants [15k, 15k+15): it takes the
// last 9 of its left neighbour's flat block as a halo (at most 9 are
// needed, by device 3) and cuts its window at 9 - 3k.  Nothing is gathered.

// CHECK-LABEL: func.func public @main
// CHECK: %[[A:.*]] = stablehlo.custom_call @SPMDFullToShardShape(%{{.*}}) {mhlo.sharding = "{manual}"} : ({{.*}}) -> tensor<3x6xf32>
// CHECK-NEXT: %[[FLAT:.*]] = stablehlo.reshape %[[A]] : (tensor<3x6xf32>) -> tensor<18xf32>
// CHECK-NEXT: %[[TAIL:.*]] = stablehlo.slice %[[FLAT]] [9:18] : (tensor<18xf32>) -> tensor<9xf32>
// CHECK-NEXT: %[[HALO:.*]] = "stablehlo.collective_permute"(%[[TAIL]])
// CHECK-SAME: source_target_pairs = dense<{{\[\[}}0, 1], [1, 2], [2, 3]]>
// CHECK-NEXT: %[[JOINED:.*]] = stablehlo.concatenate %[[HALO]], %[[FLAT]], dim = 0 : (tensor<9xf32>, tensor<18xf32>) -> tensor<27xf32>
// CHECK-NEXT: %[[TABLE:.*]] = stablehlo.constant dense<[0, -3, -6, -9]> : tensor<4xi32>
// CHECK-NOT: stablehlo.all_gather
// CHECK: %[[MINE:.*]] = stablehlo.dynamic_slice %[[JOINED]], %{{.*}}, sizes = [15] : (tensor<27xf32>, tensor<i32>) -> tensor<15xf32>
// CHECK-NEXT: stablehlo.custom_call @Sharding(%[[MINE]]) {mhlo.sharding = "{manual}"} : (tensor<15xf32>) -> tensor<15xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @merge_uneven(%a: tensor<10x6xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<60xf32> {mhlo.sharding = "{devices=[4]<=[4]}"}) {
    %0 = stablehlo.reshape %a : (tensor<10x6xf32>) -> tensor<60xf32>
    return %0 : tensor<60xf32>
  }
}

// -----

// A dim of 7 split in blocks of 4 rows, merged with 10 and split again as
// 14 rows of 5 in blocks of 7: 40 flat elements a device before, 35 after.
// Device 1 takes the last 5 of device 0's flat block as a halo; nothing is
// gathered (XLA's ReshapeMergeDimsWithHaloExchange).

// CHECK-LABEL: func.func public @main
// CHECK: %[[SHARD:.*]] = stablehlo.custom_call @SPMDFullToShardShape({{.*}}) -> tensor<4x10xf32>
// CHECK-NEXT: %[[FLAT:.*]] = stablehlo.reshape %[[SHARD]] : (tensor<4x10xf32>) -> tensor<40xf32>
// CHECK-NEXT: %[[TAIL:.*]] = stablehlo.slice %[[FLAT]] [35:40]
// CHECK-NEXT: %[[HALO:.*]] = "stablehlo.collective_permute"(%[[TAIL]])
// CHECK-SAME: source_target_pairs = dense<{{\[\[}}0, 1]]>
// CHECK-NEXT: %[[JOINED:.*]] = stablehlo.concatenate %[[HALO]], %[[FLAT]], dim = 0 : (tensor<5xf32>, tensor<40xf32>) -> tensor<45xf32>
// CHECK-NOT: stablehlo.all_gather
// CHECK: %[[WINDOW:.*]] = stablehlo.dynamic_slice %[[JOINED]], %{{.*}}, sizes = [35]
// CHECK-NEXT: %[[RESULT:.*]] = stablehlo.reshape %[[WINDOW]] : (tensor<35xf32>) -> tensor<7x5xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=2]>} {
  func.func @merge_halo(%a: tensor<7x10xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"})
      -> (tensor<14x5xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"}) {
    %0 = stablehlo.reshape %a : (tensor<7x10xf32>) -> tensor<14x5xf32>
    return %0 : tensor<14x5xf32>
  }
}
