// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// Element-wise ops on operands sharded alike need no data movement: each
// device applies the op to its own 2x8 block (8 rows over 4 devices).

// CHECK-LABEL: func.func public @main
// CHECK: manual_axes={"x"} (%[[A:arg[0-9]+]]: tensor<2x8xf32>, %[[B:arg[0-9]+]]: tensor<2x8xf32>) {
// CHECK-NOT: stablehlo.all_
// CHECK-NOT: stablehlo.collective
// CHECK-NOT: stablehlo.reduce_scatter
// CHECK-NOT: partition_id
// CHECK: %[[S:.*]] = stablehlo.add %[[A]], %[[B]] : tensor<2x8xf32>
// CHECK-NEXT: %[[M:.*]] = stablehlo.multiply %[[S]], %[[A]] : tensor<2x8xf32>
// CHECK-NEXT: %[[T:.*]] = stablehlo.tanh %[[M]] : tensor<2x8xf32>
// CHECK-NEXT: sdy.return %[[T]] : tensor<2x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @alike(%a: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                   %b: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %0 = stablehlo.add %a, %b : tensor<8x8xf32>
    %1 = stablehlo.multiply %0, %a : tensor<8x8xf32>
    %2 = stablehlo.tanh %1 : tensor<8x8xf32>
    return %2 : tensor<8x8xf32>
  }
}

// -----

// Uneven but alike: [10,6] on 4 devices is 3x6 per device (XLA's layout:
// the last shard padded, in GSPMD's manual form at the boundary).  The
// padded rows compute garbage that no one reads, so still no collective.
// The splat constant is built at the per-device shape.

// CHECK-LABEL: func.func public @main
// CHECK: %[[X:.*]] = stablehlo.custom_call @SPMDFullToShardShape(%{{.*}}) {mhlo.sharding = "{manual}"} : (tensor<10x6xf32>) -> tensor<3x6xf32>
// CHECK: %[[Y:.*]] = stablehlo.custom_call @SPMDFullToShardShape(%{{.*}}) {mhlo.sharding = "{manual}"} : (tensor<10x6xf32>) -> tensor<3x6xf32>
// CHECK-NEXT: %[[TWO:.*]] = stablehlo.constant dense<2.000000e+00> : tensor<3x6xf32>
// CHECK-NEXT: %[[S:.*]] = stablehlo.sine %[[X]] : tensor<3x6xf32>
// CHECK-NEXT: %[[M:.*]] = stablehlo.multiply %[[S]], %[[TWO]] : tensor<3x6xf32>
// CHECK-NEXT: %[[R:.*]] = stablehlo.add %[[M]], %[[Y]] : tensor<3x6xf32>
// CHECK-NEXT: %[[MR:.*]] = stablehlo.custom_call @Sharding(%[[R]]) {mhlo.sharding = "{manual}"} : (tensor<3x6xf32>) -> tensor<3x6xf32>
// CHECK-NEXT: stablehlo.custom_call @SPMDShardToFullShape(%[[MR]]) {mhlo.sharding = "{devices=[4,1]<=[4]}"} : (tensor<3x6xf32>) -> tensor<10x6xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @uneven(%x: tensor<10x6xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                    %y: tensor<10x6xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<10x6xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %two = stablehlo.constant dense<2.0> : tensor<10x6xf32>
    %0 = stablehlo.sine %x : tensor<10x6xf32>
    %1 = stablehlo.multiply %0, %two : tensor<10x6xf32>
    %2 = stablehlo.add %1, %y : tensor<10x6xf32>
    return %2 : tensor<10x6xf32>
  }
}

// -----

// Operands sharded differently: the result is row-sharded, so the column-
// sharded b is resharded to rows first with one all_to_all over the 4
// devices (split its 8 rows into 4 blocks of 2, send block k to device k,
// concatenate the 4 received 2x2 column blocks: 8x2 -> 2x8).  a is used as
// it is.

// CHECK-LABEL: func.func public @main
// CHECK: manual_axes={"x"} (%[[A:arg[0-9]+]]: tensor<2x8xf32>, %[[B:arg[0-9]+]]: tensor<8x2xf32>) {
// CHECK-NEXT: %[[BT:.*]] = "stablehlo.all_to_all"(%[[B]])
// CHECK-SAME: concat_dimension = 1 : i64, replica_groups = dense<{{\[\[}}0, 1, 2, 3]]> : tensor<1x4xi64>, split_count = 4 : i64, split_dimension = 0 : i64
// CHECK-SAME: (tensor<8x2xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: %[[S:.*]] = stablehlo.add %[[A]], %[[BT]] : tensor<2x8xf32>
// CHECK-NEXT: sdy.return %[[S]] : tensor<2x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @differ(%a: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                    %b: tensor<8x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %0 = stablehlo.add %a, %b : tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// A replicated operand next to a sharded one is sliced locally (no
// communication): on a 2x2 (x, y) mesh, device d = 2*x + y keeps rows
// [4*x, 4*x + 4) of b, so the offset table indexed by partition_id is
// [0, 0, 4, 4].

// CHECK-LABEL: func.func public @main
// CHECK: manual_axes={"x", "y"} (%[[A:arg[0-9]+]]: tensor<4x8xf32>, %[[B:arg[0-9]+]]: tensor<8x8xf32>) {
// CHECK-NEXT: %[[TABLE:.*]] = stablehlo.constant dense<[0, 0, 4, 4]> : tensor<4xi32>
// CHECK-NEXT: %[[PID:.*]] = stablehlo.partition_id : tensor<ui32>
// CHECK-NEXT: %[[ENTRY:.*]] = stablehlo.dynamic_slice %[[TABLE]], %[[PID]], sizes = [1] : (tensor<4xi32>, tensor<ui32>) -> tensor<1xi32>
// CHECK-NEXT: %[[OFF:.*]] = stablehlo.reshape %[[ENTRY]] : (tensor<1xi32>) -> tensor<i32>
// CHECK-NEXT: %[[ZERO:.*]] = stablehlo.constant dense<0> : tensor<i32>
// CHECK-NEXT: %[[BS:.*]] = stablehlo.dynamic_slice %[[B]], %[[OFF]], %[[ZERO]], sizes = [4, 8] : (tensor<8x8xf32>, tensor<i32>, tensor<i32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[D:.*]] = stablehlo.subtract %[[A]], %[[BS]] : tensor<4x8xf32>
// CHECK-NEXT: sdy.return %[[D]] : tensor<4x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @replicated_operand(%a: tensor<8x8xf32> {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"},
                                %b: tensor<8x8xf32> {mhlo.sharding = "{replicated}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"}) {
    %0 = stablehlo.subtract %a, %b : tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// Both operands split on rows, the product wanted split on the leading dim:
// the op runs where its operands are and its one result moves (one
// all_to_all), not where its result is wanted, which would move both
// operands (spmd-auto-shard prices the first; Mixtral's expert product paid
// twice its price, 3 GiB a step).

// CHECK-LABEL: func.func public @main
// CHECK: manual_axes={"x"} (%[[A:arg[0-9]+]]: tensor<4x2x2xf32>, %[[B:arg[0-9]+]]: tensor<4x2x2xf32>) {
// CHECK-NEXT: %[[M:.*]] = stablehlo.multiply %[[A]], %[[B]] : tensor<4x2x2xf32>
// CHECK-NEXT: %[[R:.*]] = "stablehlo.all_to_all"(%[[M]])
// CHECK-SAME: split_dimension = 0
// CHECK-SAME: -> tensor<1x8x2xf32>
// CHECK-NEXT: sdy.return %[[R]] : tensor<1x8x2xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @moved_once(%a: tensor<4x8x2xf32> {mhlo.sharding = "{devices=[1,4,1]<=[4]}"},
                        %b: tensor<4x8x2xf32> {mhlo.sharding = "{devices=[1,4,1]<=[4]}"})
      -> (tensor<4x8x2xf32> {mhlo.sharding = "{devices=[4,1,1]<=[4]}"}) {
    %0 = stablehlo.multiply %a, %b {mhlo.sharding = "{devices=[4,1,1]<=[4]}"} : tensor<4x8x2xf32>
    return %0 : tensor<4x8x2xf32>
  }
}
