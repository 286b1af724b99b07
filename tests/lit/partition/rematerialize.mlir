// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// A slice of a constant, split 4 ways, wanted whole: the constant is
// sliced again on every device, where moving the slice would sum it over
// the devices.  The first, split form of the slice is erased unused.

// CHECK-LABEL: func.func public @main
// CHECK: sdy.manual_computation
// CHECK-NEXT: %[[C:.*]] = stablehlo.constant dense<{{\[\[}}1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]]> : tensor<1x4xf32>
// CHECK-NEXT: %[[S:.*]] = stablehlo.slice %[[C]] [0:1, 1:2] : (tensor<1x4xf32>) -> tensor<1x1xf32>
// CHECK-NEXT: %[[R:.*]] = stablehlo.reshape %[[S]] : (tensor<1x1xf32>) -> tensor<f32>
// CHECK-NEXT: sdy.return %[[R]] : tensor<f32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @constant_slice() -> (tensor<f32> {mhlo.sharding = "{replicated}"}) {
    %cst = stablehlo.constant {mhlo.sharding = "{devices=[1,4]<=[4]}"} dense<[[1.0, 2.0, 3.0, 4.0]]> : tensor<1x4xf32>
    %0 = stablehlo.slice %cst [0:1, 1:2] {mhlo.sharding = "{devices=[1,4]<=[4]}"} : (tensor<1x4xf32>) -> tensor<1x1xf32>
    %1 = stablehlo.reshape %0 {mhlo.sharding = "{replicated}"} : (tensor<1x1xf32>) -> tensor<f32>
    return %1 : tensor<f32>
  }
}

// -----

// An iota pinned split by rows, added to an argument split by columns: the
// column block of the iota is made where the add needs it, no all_to_all.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<8x2xi32>) {
// CHECK-NOT: stablehlo.all_to_all
// CHECK: %[[I:.*]] = stablehlo.iota dim = 0 : tensor<8x2xi32>
// CHECK-NEXT: %[[SUM:.*]] = stablehlo.add %[[A]], %[[I]] : tensor<8x2xi32>
// CHECK-NEXT: sdy.return %[[SUM]] : tensor<8x2xi32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @iota_other_layout(%a: tensor<8x8xi32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<8x8xi32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}) {
    %0 = stablehlo.iota dim = 0 {mhlo.sharding = "{devices=[4,1]<=[4]}"} : tensor<8x8xi32>
    %1 = stablehlo.add %a, %0 {mhlo.sharding = "{devices=[1,4]<=[4]}"} : tensor<8x8xi32>
    return %1 : tensor<8x8xi32>
  }
}

// -----

// The same add with an argument in the iota's place: data that is not made
// here has to move (one all_to_all).

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<8x2xi32>, %[[B:arg[0-9]+]]: tensor<2x8xi32>) {
// CHECK-NEXT: %[[M:.*]] = "stablehlo.all_to_all"(%[[B]])
// CHECK-NEXT: %[[SUM:.*]] = stablehlo.add %[[A]], %[[M]] : tensor<8x2xi32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @argument_other_layout(%a: tensor<8x8xi32> {mhlo.sharding = "{devices=[1,4]<=[4]}"},
                                   %b: tensor<8x8xi32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x8xi32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}) {
    %1 = stablehlo.add %a, %b {mhlo.sharding = "{devices=[1,4]<=[4]}"} : tensor<8x8xi32>
    return %1 : tensor<8x8xi32>
  }
}
