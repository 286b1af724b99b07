// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate | FileCheck %s
// RUN: stablehlo-spmd-opt %s --split-input-file --pass-pipeline='builtin.module(spmd-propagate{completion=local})' | FileCheck %s --check-prefix=LOCAL

// A while loop's carry is one tensor seen from four places: operand, block
// arguments, yielded value and result share a sharding.

// CHECK-LABEL: func.func @loop
// CHECK: %[[W:.*]]:2 = stablehlo.while{{.*}}attributes {mhlo.sharding = "{{[{][{]}}replicated}, {devices=[4,1]<=[4]}}"}
// CHECK: stablehlo.multiply %[[ACC:.*]], %[[ACC]] {mhlo.sharding = "{devices=[4,1]<=[4]}"}
// CHECK: return %[[W]]#1
func.func @loop(%x: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> tensor<8x8xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %0:2 = stablehlo.while(%i = %c0, %acc = %x) : tensor<i32>, tensor<8x8xf32>
    cond {
      %c3 = stablehlo.constant dense<3> : tensor<i32>
      %lt = stablehlo.compare LT, %i, %c3 : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    } do {
      %c1 = stablehlo.constant dense<1> : tensor<i32>
      %next = stablehlo.add %i, %c1 : tensor<i32>
      %sq = stablehlo.multiply %acc, %acc : tensor<8x8xf32>
      stablehlo.return %next, %sq : tensor<i32>, tensor<8x8xf32>
    }
  return %0#1 : tensor<8x8xf32>
}

// -----

// A call's operands and results are tied to the callee's arguments and
// returned values; the private callee's signature gets the shardings.

// CHECK-LABEL: func.func @caller
// CHECK: call @square(%arg0) {mhlo.sharding = "{devices=[1,4]<=[4]}"}
// CHECK-LABEL: func.func private @square
// CHECK-SAME: %arg0: tensor<8x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}
// CHECK-SAME: -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
// CHECK: stablehlo.multiply %arg0, %arg0 {mhlo.sharding = "{devices=[1,4]<=[4]}"}
func.func @caller(%x: tensor<8x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}) -> tensor<8x8xf32> {
  %0 = func.call @square(%x) : (tensor<8x8xf32>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
func.func private @square(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = stablehlo.multiply %x, %x : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// A sharding constraint in the middle of the program wins over what flows
// into it, and flows on from there.  Being closed, it also says where its
// input is computed (Shardy's import, for parity with GSPMD): the exp reads
// %x resharded, rather than computing rows and moving its own result.

// CHECK-LABEL: func.func @constraint
// CHECK: %[[E:.*]] = stablehlo.exponential %arg0 {mhlo.sharding = "{devices=[1,4]<=[4]}"}
// CHECK: %[[C:.*]] = stablehlo.custom_call @Sharding(%[[E]]) {mhlo.sharding = "{devices=[1,4]<=[4]}"}
// CHECK: stablehlo.log %[[C]] {mhlo.sharding = "{devices=[1,4]<=[4]}"}
func.func @constraint(%x: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> tensor<8x8xf32> {
  %0 = stablehlo.exponential %x : tensor<8x8xf32>
  %1 = stablehlo.custom_call @Sharding(%0) {mhlo.sharding = "{devices=[1,4]<=[4]}"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %2 = stablehlo.log %1 : tensor<8x8xf32>
  return %2 : tensor<8x8xf32>
}

// -----

// Two constraints that disagree on one input leave it to propagation.  The
// greedy pass (the LOCAL run) keeps the rows it is computed in; the whole
// program's cost gathers the input once and computes the exp whole, which
// the replicated constraint takes as it is and the column constraint as a
// local slice: 192 bytes moved per device against 240.

// CHECK-LABEL: func.func @two_constraints_disagree
// CHECK: %[[E:.*]] = stablehlo.exponential %arg0 {mhlo.sharding = "{replicated}"}
// CHECK: stablehlo.custom_call @Sharding(%[[E]]) {mhlo.sharding = "{devices=[1,4]<=[4]}"}
// CHECK: stablehlo.custom_call @Sharding(%[[E]]) {mhlo.sharding = "{replicated}"}

// LOCAL-LABEL: func.func @two_constraints_disagree
// LOCAL: %[[E:.*]] = stablehlo.exponential %arg0 {mhlo.sharding = "{devices=[4,1]<=[4]}"}
// LOCAL: stablehlo.custom_call @Sharding(%[[E]]) {mhlo.sharding = "{devices=[1,4]<=[4]}"}
// LOCAL: stablehlo.custom_call @Sharding(%[[E]]) {mhlo.sharding = "{replicated}"}
func.func @two_constraints_disagree(%x: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> (tensor<8x8xf32>, tensor<8x8xf32>) {
  %0 = stablehlo.exponential %x : tensor<8x8xf32>
  %1 = stablehlo.custom_call @Sharding(%0) {mhlo.sharding = "{devices=[1,4]<=[4]}"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %2 = stablehlo.custom_call @Sharding(%0) {mhlo.sharding = "{replicated}"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  return %1, %2 : tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// An open constraint is not applied to its input (Shardy applies closed
// ones only): the exp keeps the rows it reads and takes the constraint's
// columns on top, as jaxlib's sdy-propagation-pipeline gives it too.

// CHECK-LABEL: func.func @open_constraint
// CHECK: stablehlo.exponential %arg0 {mhlo.sharding = "{devices=[2,2]<=[4]}"}
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @open_constraint(%x: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}) -> tensor<8x8xf32> {
  %0 = stablehlo.exponential %x : tensor<8x8xf32>
  %1 = sdy.sharding_constraint %0 <@mesh, [{?}, {"b"}]> : tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}
