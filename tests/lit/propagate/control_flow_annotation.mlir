// RUN: stablehlo-spmd-opt %s --spmd-propagate | FileCheck %s

// A case op's own annotation pins its result like any op's: the branches
// yield %arg1 and %arg2, so both arguments take it.  (Control flow has ties
// and no rule of its own; its annotation used to be dropped.)

// CHECK-LABEL: func.func @case_annotation
// CHECK-SAME: %arg1: tensor<8xi64> {mhlo.sharding = "{devices=[4]<=[4]}"}
// CHECK-SAME: %arg2: tensor<8xi64> {mhlo.sharding = "{devices=[4]<=[4]}"}
// CHECK: %[[CASE:.*]] = "stablehlo.case"(%arg0)
// CHECK: }) {mhlo.sharding = "{devices=[4]<=[4]}"}
// CHECK-NEXT: return %[[CASE]]
func.func @case_annotation(%arg0: tensor<i32> {mhlo.sharding = "{replicated}"}, %arg1: tensor<8xi64>, %arg2: tensor<8xi64>) -> tensor<8xi64> {
  %0 = "stablehlo.case"(%arg0) ({
    stablehlo.return %arg1 : tensor<8xi64>
  }, {
    stablehlo.return %arg2 : tensor<8xi64>
  }) {mhlo.sharding = "{devices=[4]<=[4]}"} : (tensor<i32>) -> tensor<8xi64>
  return %0 : tensor<8xi64>
}
