// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// Propagation ties the carry's operand, block arguments, yielded value and
// result: all row-sharded like %a (the counter is a replicated scalar).  So
// the loop should run on the per-device 2x8 block as it is: the carries are
// (tensor<i32>, tensor<2x8xf32>), the body's exp is on 2x8, and no
// collective is needed anywhere -- each iteration is element-wise on the
// device's own rows.  The result is the second carry, 2x8.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x8xf32>) {
// CHECK-NEXT: %[[C0:.*]] = stablehlo.constant dense<0> : tensor<i32>
// CHECK-NEXT: %[[W:.*]]:2 = stablehlo.while(%[[I:[^ ]+]] = %[[C0]], %[[V:[^ ]+]] = %[[A]]) : tensor<i32>, tensor<2x8xf32>
// CHECK-NEXT: cond {
// CHECK-NEXT: %[[C3:.*]] = stablehlo.constant dense<3> : tensor<i32>
// CHECK-NEXT: %[[LT:.*]] = stablehlo.compare LT, %[[I]], %[[C3]] : (tensor<i32>, tensor<i32>) -> tensor<i1>
// CHECK-NEXT: stablehlo.return %[[LT]] : tensor<i1>
// CHECK-NEXT: } do {
// CHECK-NEXT: %[[C1:.*]] = stablehlo.constant dense<1> : tensor<i32>
// CHECK-NEXT: %[[N:.*]] = stablehlo.add %[[I]], %[[C1]] : tensor<i32>
// CHECK-NEXT: %[[E:.*]] = stablehlo.exponential %[[V]] : tensor<2x8xf32>
// CHECK-NEXT: stablehlo.return %[[N]], %[[E]] : tensor<i32>, tensor<2x8xf32>
// CHECK-NEXT: }
// CHECK-NEXT: sdy.return %[[W]]#1 : tensor<2x8xf32>
// CHECK-NOT: stablehlo.all_
// CHECK-NOT: partition_id
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @loop(%a: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %0:2 = stablehlo.while(%i = %c0, %v = %a) : tensor<i32>, tensor<8x8xf32>
     cond {
      %c3 = stablehlo.constant dense<3> : tensor<i32>
      %p = stablehlo.compare LT, %i, %c3 : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %c1 = stablehlo.constant dense<1> : tensor<i32>
      %n = stablehlo.add %i, %c1 : tensor<i32>
      %e = stablehlo.exponential %v : tensor<8x8xf32>
      stablehlo.return %n, %e : tensor<i32>, tensor<8x8xf32>
    }
    return %0#1 : tensor<8x8xf32>
  }
}
