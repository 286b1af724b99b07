// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-annotate | FileCheck %s

// Without rules, the mesh is read back from the tile assignments the module
// already carries: the shortest factorization that has every tile boundary.
// [4,2] and [2,4] over 8 devices cut at 2 and 4, so the mesh is 2x2x2.

// CHECK-LABEL: module @two_tilings
// CHECK-SAME: spmd.mesh = #sdy.mesh<["axis_0"=2, "axis_1"=2, "axis_2"=2]>
// CHECK: mhlo.sharding = "{devices=[4,2]<=[8]}"
// CHECK: mhlo.sharding = "{devices=[2,4]<=[8]}"
module @two_tilings {
  func.func @main(%arg0: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,2]<=[8]}"}) -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[2,4]<=[8]}"}) {
    return %arg0 : tensor<8x8xf32>
  }
}

// -----

// A transposed iota needs no finer mesh: <=[2,4]T(1,0) is the 4-axis then the 2-axis.

// CHECK-LABEL: module @transposed
// CHECK-SAME: spmd.mesh = #sdy.mesh<["axis_0"=2, "axis_1"=4]>
module @transposed {
  func.func @main(%arg0: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,2]<=[2,4]T(1,0)}"}) -> tensor<8x8xf32> {
    return %arg0 : tensor<8x8xf32>
  }
}

// -----

// An explicit device list becomes the mesh's device order.

// CHECK-LABEL: module @explicit
// CHECK-SAME: spmd.mesh = #sdy.mesh<["axis_0"=2, "axis_1"=2], device_ids=[0, 2, 1, 3]>
module @explicit {
  func.func @main(%arg0: tensor<8x8xf32> {mhlo.sharding = "{devices=[2,2]0,2,1,3}"}) -> tensor<8x8xf32> {
    return %arg0 : tensor<8x8xf32>
  }
}
