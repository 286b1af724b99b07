// RUN: stablehlo-spmd-opt %s --split-input-file --pass-pipeline='builtin.module(spmd-propagate{completion=local})' | FileCheck %s

// Shardy's first op priority: an element-wise op or a dynamic slice whose
// operand has other readers waits until the ops with single-reader operands
// have propagated.  The order is the greedy pass's, so it runs alone here
// (completion=local): where candidates contest an axis the default pass
// settles them by the whole program's cost instead (propagate/dot_and_shapes).

// The slice is read by two ops, so the returned column split does not reach
// it backward before the table's row split reaches it forward: the 16x4
// slice is resharded once, not the 16x16 table.

// CHECK-LABEL: func.func @slice_read_twice
// CHECK: %[[SLICE:.*]] = stablehlo.dynamic_slice %arg0, {{.*}} {mhlo.sharding = "{devices=[4,1]<=[4]}"}
// CHECK: %[[EXP:.*]] = stablehlo.exponential %[[SLICE]] {mhlo.sharding = "{devices=[1,4]<=[4]}"}
// CHECK: %[[NEG:.*]] = stablehlo.negate %[[SLICE]] {mhlo.sharding = "{devices=[1,4]<=[4]}"}
// CHECK: stablehlo.multiply %[[EXP]], %[[NEG]] {mhlo.sharding = "{devices=[1,4]<=[4]}"}
func.func @slice_read_twice(%table: tensor<16x16xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                            %column: tensor<i32> {mhlo.sharding = "{replicated}"})
    -> (tensor<16x4xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}) {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %slice = stablehlo.dynamic_slice %table, %zero, %column, sizes = [16, 4] : (tensor<16x16xf32>, tensor<i32>, tensor<i32>) -> tensor<16x4xf32>
  %exp = stablehlo.exponential %slice : tensor<16x4xf32>
  %neg = stablehlo.negate %slice : tensor<16x4xf32>
  %product = stablehlo.multiply %exp, %neg : tensor<16x4xf32>
  return %product : tensor<16x4xf32>
}

// -----

// %x is read by two ops that each lead to a result of its own split.  The
// tanh/abs chain has single readers, so the row split reaches %sq first and
// %x takes it from there; the column split stops at %diff.

// CHECK-LABEL: func.func @operand_read_twice
// CHECK-SAME: %arg0: tensor<16x16xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}
// CHECK: %[[SQ:.*]] = stablehlo.multiply %arg0, %arg0 {mhlo.sharding = "{devices=[4,1]<=[4]}"}
// CHECK: %[[DIFF:.*]] = stablehlo.subtract %arg0, %arg0 {mhlo.sharding = "{devices=[1,4]<=[4]}"}
// CHECK: %[[TANH:.*]] = stablehlo.tanh %[[SQ]] {mhlo.sharding = "{devices=[4,1]<=[4]}"}
// CHECK: return %[[DIFF]], %{{.*}}
func.func @operand_read_twice(%x: tensor<16x16xf32>)
    -> (tensor<16x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"},
        tensor<16x16xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
  %sq = stablehlo.multiply %x, %x : tensor<16x16xf32>
  %diff = stablehlo.subtract %x, %x : tensor<16x16xf32>
  %tanh = stablehlo.tanh %sq : tensor<16x16xf32>
  %abs = stablehlo.abs %tanh : tensor<16x16xf32>
  return %diff, %abs : tensor<16x16xf32>, tensor<16x16xf32>
}
