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

// iota is built whole (8x8, its attribute unchanged) and each device keeps
// its rows: device k starts at row 2k, read from the table [0, 2, 4, 6]
// at partition_id; dynamic_slice of 2x8 at (offset, 0).

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x8xi32>) {
// CHECK-NEXT: %[[IOTA:.*]] = stablehlo.iota dim = 0 : tensor<8x8xi32>
// CHECK-NEXT: %[[TABLE:.*]] = stablehlo.constant dense<[0, 2, 4, 6]> : tensor<4xi32>
// CHECK-NEXT: %[[PID:.*]] = stablehlo.partition_id : tensor<ui32>
// CHECK-NEXT: %[[E:.*]] = stablehlo.dynamic_slice %[[TABLE]], %[[PID]], sizes = [1] : (tensor<4xi32>, tensor<ui32>) -> tensor<1xi32>
// CHECK-NEXT: %[[OFF:.*]] = stablehlo.reshape %[[E]] : (tensor<1xi32>) -> tensor<i32>
// CHECK-NEXT: %[[Z:.*]] = stablehlo.constant dense<0> : tensor<i32>
// CHECK-NEXT: %[[MINE:.*]] = stablehlo.dynamic_slice %[[IOTA]], %[[OFF]], %[[Z]], sizes = [2, 8] : (tensor<8x8xi32>, tensor<i32>, tensor<i32>) -> tensor<2x8xi32>
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

// iota sharded on the minor axis of a 2x2 (data, model) mesh: [4,8] with
// dim 1 over model (4 columns each).  Device d = 2*data + model starts at
// column 4*model: table [0, 4, 0, 4]; the offset goes to dim 1.

// CHECK-LABEL: func.func public @main
// CHECK: manual_axes={"data", "model"} () {
// CHECK-NEXT: %[[IOTA:.*]] = stablehlo.iota dim = 1 : tensor<4x8xi32>
// CHECK-NEXT: %[[TABLE:.*]] = stablehlo.constant dense<[0, 4, 0, 4]> : tensor<4xi32>
// CHECK-NEXT: %[[PID:.*]] = stablehlo.partition_id : tensor<ui32>
// CHECK-NEXT: %[[E:.*]] = stablehlo.dynamic_slice %[[TABLE]], %[[PID]], sizes = [1]
// CHECK-NEXT: %[[OFF:.*]] = stablehlo.reshape %[[E]] : (tensor<1xi32>) -> tensor<i32>
// CHECK-NEXT: %[[Z:.*]] = stablehlo.constant dense<0> : tensor<i32>
// CHECK-NEXT: %[[MINE:.*]] = stablehlo.dynamic_slice %[[IOTA]], %[[Z]], %[[OFF]], sizes = [4, 4] : (tensor<4x8xi32>, tensor<i32>, tensor<i32>) -> tensor<4x4xi32>
// CHECK-NEXT: sdy.return %[[MINE]] : tensor<4x4xi32>
module attributes {spmd.mesh = #sdy.mesh<["data"=2, "model"=2]>} {
  func.func @iota_model() -> (tensor<4x8xi32> {mhlo.sharding = "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"}) {
    %0 = stablehlo.iota dim = 1 : tensor<4x8xi32>
    return %0 : tensor<4x8xi32>
  }
}

// -----

// An uneven iota: [10] over 4 devices is 3 per device.  The whole iota is
// zero-padded to 12 and device k takes [3k, 3k+3) (table [0, 3, 6, 9]);
// the global result is sliced back to 10 after the manual computation.

// CHECK-LABEL: func.func public @main
// CHECK: manual_axes={"x"} () {
// CHECK-NEXT: %[[IOTA:.*]] = stablehlo.iota dim = 0 : tensor<10xi32>
// CHECK-NEXT: %[[Z:.*]] = stablehlo.constant dense<0> : tensor<i32>
// CHECK-NEXT: %[[P:.*]] = stablehlo.pad %[[IOTA]], %[[Z]], low = [0], high = [2], interior = [0] : (tensor<10xi32>, tensor<i32>) -> tensor<12xi32>
// CHECK-NEXT: %[[TABLE:.*]] = stablehlo.constant dense<[0, 3, 6, 9]> : tensor<4xi32>
// CHECK-NEXT: %[[PID:.*]] = stablehlo.partition_id : tensor<ui32>
// CHECK-NEXT: %[[E:.*]] = stablehlo.dynamic_slice %[[TABLE]], %[[PID]], sizes = [1]
// CHECK-NEXT: %[[OFF:.*]] = stablehlo.reshape %[[E]] : (tensor<1xi32>) -> tensor<i32>
// CHECK: %[[MINE:.*]] = stablehlo.dynamic_slice %[[P]], %[[OFF]], sizes = [3] : (tensor<12xi32>, tensor<i32>) -> tensor<3xi32>
// CHECK-NEXT: sdy.return %[[MINE]] : tensor<3xi32>
// CHECK-NEXT: } : () -> tensor<12xi32>
// CHECK-NEXT: stablehlo.slice %{{.*}} [0:10] : (tensor<12xi32>) -> tensor<10xi32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @iota_uneven() -> (tensor<10xi32> {mhlo.sharding = "{devices=[4]<=[4]}"}) {
    %0 = stablehlo.iota dim = 0 : tensor<10xi32>
    return %0 : tensor<10xi32>
  }
}

// -----

// A constant that is not a splat is built whole and sliced like iota:
// [4,2] over 4 devices, one row each at offset k (table [0, 1, 2, 3]).

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
