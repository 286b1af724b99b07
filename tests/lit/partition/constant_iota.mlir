// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// A splat constant stays a splat, built at the per-device shape (2x8 of
// the row-sharded 8x8): every block of a splat is the same splat, so there
// is no whole constant, no partition_id and no slice.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x8xf32>) {
// CHECK-NEXT: %[[C:.*]] = stablehlo.constant dense<2.000000e+00> : tensor<2x8xf32>
// CHECK-NEXT: %[[M:.*]] = stablehlo.multiply %[[A]], %[[C]] : tensor<2x8xf32>
// CHECK-NEXT: sdy.return %[[M]] : tensor<2x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @splat(%a: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %c = stablehlo.constant dense<2.0> : tensor<8x8xf32>
    %0 = stablehlo.multiply %a, %c : tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// iota along its split dim is built per device: the iota of the 2x8 block
// plus the block's first row, 2k on device k (the table [0, 1, 2, 3] at
// partition_id, times 2).  Nothing is built whole and nothing is sliced.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x8xi32>) {
// CHECK-NEXT: %[[IOTA:.*]] = stablehlo.iota dim = 0 : tensor<2x8xi32>
// CHECK-NEXT: %[[TABLE:.*]] = stablehlo.constant dense<[0, 1, 2, 3]> : tensor<4xi32>
// CHECK-NEXT: %[[PID:.*]] = stablehlo.partition_id : tensor<ui32>
// CHECK-NEXT: %[[E:.*]] = stablehlo.dynamic_slice %[[TABLE]], %[[PID]], sizes = [1] : (tensor<4xi32>, tensor<ui32>) -> tensor<1xi32>
// CHECK-NEXT: %[[K:.*]] = stablehlo.reshape %[[E]] : (tensor<1xi32>) -> tensor<i32>
// CHECK-NEXT: %[[ROWS:.*]] = stablehlo.constant dense<2> : tensor<i32>
// CHECK-NEXT: %[[START:.*]] = stablehlo.multiply %[[K]], %[[ROWS]] : tensor<i32>
// CHECK-NEXT: %[[STARTS:.*]] = stablehlo.broadcast_in_dim %[[START]], dims = [] : (tensor<i32>) -> tensor<2x8xi32>
// CHECK-NEXT: %[[MINE:.*]] = stablehlo.add %[[IOTA]], %[[STARTS]] : tensor<2x8xi32>
// CHECK-NEXT: %[[S:.*]] = stablehlo.add %[[A]], %[[MINE]] : tensor<2x8xi32>
// CHECK-NEXT: sdy.return %[[S]] : tensor<2x8xi32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @iota_rows(%a: tensor<8x8xi32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x8xi32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %c = stablehlo.iota dim = 0 : tensor<8x8xi32>
    %0 = stablehlo.add %a, %c : tensor<8x8xi32>
    return %0 : tensor<8x8xi32>
  }
}

// -----

// iota split on the minor axis of a 2x2 (data, model) mesh: [4,8] with
// dim 1 over model (4 columns each).  Device d = 2*data + model counts from
// column 4*model: its model coordinate (table [0, 1, 0, 1]) times 4.

// CHECK-LABEL: func.func public @main
// CHECK: manual_axes={"data", "model"} () {
// CHECK-NEXT: %[[IOTA:.*]] = stablehlo.iota dim = 1 : tensor<4x4xi32>
// CHECK-NEXT: %[[TABLE:.*]] = stablehlo.constant dense<[0, 1, 0, 1]> : tensor<4xi32>
// CHECK-NEXT: %[[PID:.*]] = stablehlo.partition_id : tensor<ui32>
// CHECK-NEXT: %[[E:.*]] = stablehlo.dynamic_slice %[[TABLE]], %[[PID]], sizes = [1]
// CHECK-NEXT: %[[K:.*]] = stablehlo.reshape %[[E]] : (tensor<1xi32>) -> tensor<i32>
// CHECK-NEXT: %[[COLS:.*]] = stablehlo.constant dense<4> : tensor<i32>
// CHECK-NEXT: %[[START:.*]] = stablehlo.multiply %[[K]], %[[COLS]] : tensor<i32>
// CHECK-NEXT: %[[STARTS:.*]] = stablehlo.broadcast_in_dim %[[START]], dims = [] : (tensor<i32>) -> tensor<4x4xi32>
// CHECK-NEXT: %[[MINE:.*]] = stablehlo.add %[[IOTA]], %[[STARTS]] : tensor<4x4xi32>
// CHECK-NEXT: sdy.return %[[MINE]] : tensor<4x4xi32>
module attributes {spmd.mesh = #sdy.mesh<["data"=2, "model"=2]>} {
  func.func @iota_model() -> (tensor<4x8xi32> {mhlo.sharding = "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"}) {
    %0 = stablehlo.iota dim = 1 : tensor<4x8xi32>
    return %0 : tensor<4x8xi32>
  }
}

// -----

// An uneven iota: [10] over 4 devices is 3 per device, device k counting
// from 3k; the last block (9, 10, 11) counts on into its padding, which is
// not part of the result.

// CHECK-LABEL: func.func public @main
// CHECK: %[[IOTA:.*]] = stablehlo.iota dim = 0 : tensor<3xi32>
// CHECK-NEXT: %[[TABLE:.*]] = stablehlo.constant dense<[0, 1, 2, 3]> : tensor<4xi32>
// CHECK-NEXT: %[[PID:.*]] = stablehlo.partition_id : tensor<ui32>
// CHECK-NEXT: %[[E:.*]] = stablehlo.dynamic_slice %[[TABLE]], %[[PID]], sizes = [1]
// CHECK-NEXT: %[[K:.*]] = stablehlo.reshape %[[E]] : (tensor<1xi32>) -> tensor<i32>
// CHECK-NEXT: %[[SIZE:.*]] = stablehlo.constant dense<3> : tensor<i32>
// CHECK-NEXT: %[[START:.*]] = stablehlo.multiply %[[K]], %[[SIZE]] : tensor<i32>
// CHECK-NEXT: %[[STARTS:.*]] = stablehlo.broadcast_in_dim %[[START]], dims = [] : (tensor<i32>) -> tensor<3xi32>
// CHECK-NEXT: %[[MINE:.*]] = stablehlo.add %[[IOTA]], %[[STARTS]] : tensor<3xi32>
// CHECK-NOT: stablehlo.iota
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @iota_uneven() -> (tensor<10xi32> {mhlo.sharding = "{devices=[4]<=[4]}"}) {
    %0 = stablehlo.iota dim = 0 : tensor<10xi32>
    return %0 : tensor<10xi32>
  }
}

// -----

// iota split on a dim it does not count along: each device's block is the
// iota of the block's shape, with no offset to add.

// CHECK-LABEL: func.func public @main
// CHECK: manual_axes={"x"} () {
// CHECK-NEXT: %[[IOTA:.*]] = stablehlo.iota dim = 1 : tensor<2x6xf32>
// CHECK-NEXT: sdy.return %[[IOTA]] : tensor<2x6xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @iota_other_dim() -> (tensor<8x6xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %0 = stablehlo.iota dim = 1 : tensor<8x6xf32>
    return %0 : tensor<8x6xf32>
  }
}

// -----

// A constant that is not a splat is built whole and each device slices
// its block: [4,2] over 4 devices, one row each at offset k (table
// [0, 1, 2, 3]).

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<1x2xf32>) {
// CHECK-NEXT: %[[C:.*]] = stablehlo.constant dense<{{\[\[}}1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00], [5.000000e+00, 6.000000e+00], [7.000000e+00, 8.000000e+00]]> : tensor<4x2xf32>
// CHECK-NEXT: %[[TABLE:.*]] = stablehlo.constant dense<[0, 1, 2, 3]> : tensor<4xi32>
// CHECK-NEXT: %[[PID:.*]] = stablehlo.partition_id : tensor<ui32>
// CHECK-NEXT: %[[E:.*]] = stablehlo.dynamic_slice %[[TABLE]], %[[PID]], sizes = [1]
// CHECK-NEXT: %[[OFF:.*]] = stablehlo.reshape %[[E]] : (tensor<1xi32>) -> tensor<i32>
// CHECK-NEXT: %[[Z:.*]] = stablehlo.constant dense<0> : tensor<i32>
// CHECK-NEXT: %[[MINE:.*]] = stablehlo.dynamic_slice %[[C]], %[[OFF]], %[[Z]], sizes = [1, 2] : (tensor<4x2xf32>, tensor<i32>, tensor<i32>) -> tensor<1x2xf32>
// CHECK-NEXT: %[[S:.*]] = stablehlo.add %[[A]], %[[MINE]] : tensor<1x2xf32>
// CHECK-NEXT: sdy.return %[[S]] : tensor<1x2xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @dense(%a: tensor<4x2xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<4x2xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %c = stablehlo.constant dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]> : tensor<4x2xf32>
    %0 = stablehlo.add %a, %c : tensor<4x2xf32>
    return %0 : tensor<4x2xf32>
  }
}
