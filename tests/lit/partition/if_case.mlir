// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// stablehlo.if runs per device: the predicate is a replicated scalar (every
// device takes the same branch, so collectives inside a branch match up),
// and each branch yields the if's result in its sharding.  Propagation ties
// the result to what both branches yield: rows, like %a.  So the exp runs on
// the 2x8 block, the other branch yields the block argument as it is, the
// if's result is 2x8, and nothing is gathered or sliced.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[P:arg[0-9]+]]: tensor<i1>, %[[A:arg[0-9]+]]: tensor<2x8xf32>) {
// CHECK-NEXT: %[[IF:.*]] = "stablehlo.if"(%[[P]]) ({
// CHECK-NEXT: %[[E:.*]] = stablehlo.exponential %[[A]] : tensor<2x8xf32>
// CHECK-NEXT: stablehlo.return %[[E]] : tensor<2x8xf32>
// CHECK-NEXT: }, {
// CHECK-NEXT: stablehlo.return %[[A]] : tensor<2x8xf32>
// CHECK-NEXT: }) : (tensor<i1>) -> tensor<2x8xf32>
// CHECK-NEXT: sdy.return %[[IF]] : tensor<2x8xf32>
// CHECK-NOT: stablehlo.all_
// CHECK-NOT: partition_id
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @conditional(%p: tensor<i1>, %a: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %0 = "stablehlo.if"(%p) ({
      %1 = stablehlo.exponential %a : tensor<8x8xf32>
      stablehlo.return %1 : tensor<8x8xf32>
    }, {
      stablehlo.return %a : tensor<8x8xf32>
    }) : (tensor<i1>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// A predicate computed from a sharded tensor is summed before the if: the
// reduce of the row-sharded %a leaves a partial scalar, which one
// all_reduce makes the same on every device before the compare.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x8xf32>) {
// CHECK: %[[R:.*]] = stablehlo.reduce(%[[A]] init: %{{.*}}) applies stablehlo.add across dimensions = [0, 1] : (tensor<2x8xf32>, tensor<f32>) -> tensor<f32>
// CHECK-NEXT: %[[S:.*]] = "stablehlo.all_reduce"(%[[R]])
// CHECK: }) : (tensor<f32>) -> tensor<f32>
// CHECK-NEXT: %[[P:.*]] = stablehlo.compare GT, %[[S]], %{{.*}} : (tensor<f32>, tensor<f32>) -> tensor<i1>
// CHECK-NEXT: %[[IF:.*]] = "stablehlo.if"(%[[P]]) ({
// CHECK-NEXT: %[[N:.*]] = stablehlo.negate %[[A]] : tensor<2x8xf32>
// CHECK-NEXT: stablehlo.return %[[N]] : tensor<2x8xf32>
// CHECK-NEXT: }, {
// CHECK-NEXT: stablehlo.return %[[A]] : tensor<2x8xf32>
// CHECK-NEXT: }) : (tensor<i1>) -> tensor<2x8xf32>
// CHECK-NEXT: sdy.return %[[IF]] : tensor<2x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @sum_positive(%a: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %sum = stablehlo.reduce(%a init: %zero) applies stablehlo.add across dimensions = [0, 1] : (tensor<8x8xf32>, tensor<f32>) -> tensor<f32>
    %p = stablehlo.compare GT, %sum, %zero : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %0 = "stablehlo.if"(%p) ({
      %1 = stablehlo.negate %a : tensor<8x8xf32>
      stablehlo.return %1 : tensor<8x8xf32>
    }, {
      stablehlo.return %a : tensor<8x8xf32>
    }) : (tensor<i1>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// stablehlo.case on a 4-way column split of the contraction: branch 0's
// dot of the 8x2 and 2x8 blocks is a partial sum, summed inside the branch
// (a branch yields full values; another branch's value is not a partial of
// the same sum), so the all_reduce sits in branch 0 alone; branch 1 yields
// a replicated 8x8 constant as it is.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[I:arg[0-9]+]]: tensor<i32>, %[[U:arg[0-9]+]]: tensor<8x2xf32>, %[[V:arg[0-9]+]]: tensor<2x8xf32>) {
// CHECK: %[[CASE:.*]] = "stablehlo.case"(%[[I]]) ({
// CHECK-NEXT: %[[D:.*]] = stablehlo.dot_general %[[U]], %[[V]], contracting_dims = [1] x [0] : (tensor<8x2xf32>, tensor<2x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: %[[SUM:.*]] = "stablehlo.all_reduce"(%[[D]])
// CHECK: }) : (tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: stablehlo.return %[[SUM]] : tensor<8x8xf32>
// CHECK-NEXT: }, {
// CHECK-NEXT: %[[ONE:.*]] = stablehlo.constant dense<1.000000e+00> : tensor<8x8xf32>
// CHECK-NEXT: stablehlo.return %[[ONE]] : tensor<8x8xf32>
// CHECK-NEXT: }) : (tensor<i32>) -> tensor<8x8xf32>
// CHECK-NEXT: sdy.return %[[CASE]] : tensor<8x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @switch(%i: tensor<i32>,
                    %u: tensor<8x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"},
                    %v: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{replicated}"}) {
    %0 = "stablehlo.case"(%i) ({
      %1 = stablehlo.dot_general %u, %v, contracting_dims = [1] x [0] : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
      stablehlo.return %1 : tensor<8x8xf32>
    }, {
      %2 = stablehlo.constant dense<1.0> : tensor<8x8xf32>
      stablehlo.return %2 : tensor<8x8xf32>
    }) : (tensor<i32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}
