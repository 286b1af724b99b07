// RUN: stablehlo-spmd-opt %s --spmd-inline-calls | FileCheck %s

// @layer is called twice: each call becomes its body, reading the call's
// operands, and the private callee goes.  @pinned keeps a sharding on its
// argument, a constraint its inlined body would lose: its call stays.

// CHECK-LABEL: func.func @main
// CHECK-SAME: (%[[X:.*]]: tensor<8x16xf32>, %[[W:.*]]: tensor<16x16xf32>)
// CHECK: %[[D1:.*]] = stablehlo.dot_general %[[X]], %[[W]]
// CHECK: %[[T1:.*]] = stablehlo.tanh %[[D1]]
// CHECK: %[[D2:.*]] = stablehlo.dot_general %[[T1]], %[[W]]
// CHECK: %[[T2:.*]] = stablehlo.tanh %[[D2]]
// CHECK: %[[P:.*]] = call @pinned(%[[T2]])
// CHECK: return %[[P]]
// CHECK-NOT: func.func private @layer
// CHECK: func.func private @pinned
func.func @main(%x: tensor<8x16xf32>, %w: tensor<16x16xf32>) -> tensor<8x16xf32> {
  %0 = call @layer(%x, %w) : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %1 = call @layer(%0, %w) : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %2 = call @pinned(%1) : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return %2 : tensor<8x16xf32>
}
func.func private @layer(%h: tensor<8x16xf32>, %w: tensor<16x16xf32>) -> tensor<8x16xf32> {
  %0 = stablehlo.dot_general %h, %w, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %1 = stablehlo.tanh %0 : tensor<8x16xf32>
  return %1 : tensor<8x16xf32>
}
func.func private @pinned(%h: tensor<8x16xf32> {mhlo.sharding = "{replicated}"}) -> tensor<8x16xf32> {
  %0 = stablehlo.negate %h : tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}
