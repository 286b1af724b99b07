// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// A custom call carrying Shardy's sdy.sharding_rule runs by that rule.
// Here (JAX's rule for a batched Cholesky) the batch factor i is shared by
// the operand and both results: with the batch split 4 ways, each device
// calls the same target on its 2 matrices and nothing moves.  The
// per-device call drops the rule, whose factor sizes are the global ones.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x4x4xf32>) {
// CHECK-NEXT: %[[F:.*]]:2 = stablehlo.custom_call @batched_factor(%[[A]]) {mhlo.frontend_attributes = {num_batch_dims = "1"}} : (tensor<2x4x4xf32>) -> (tensor<2x4x4xf32>, tensor<2xi32>)
// CHECK-NEXT: sdy.return %[[F]]#0, %[[F]]#1 : tensor<2x4x4xf32>, tensor<2xi32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @batched(%a: tensor<8x4x4xf32> {mhlo.sharding = "{devices=[4,1,1]<=[4]}"})
      -> (tensor<8x4x4xf32> {mhlo.sharding = "{devices=[4,1,1]<=[4]}"},
          tensor<8xi32> {mhlo.sharding = "{devices=[4]<=[4]}"}) {
    %0:2 = stablehlo.custom_call @batched_factor(%a) {mhlo.frontend_attributes = {num_batch_dims = "1"}, sdy.sharding_rule = #sdy.op_sharding_rule<([i, j, k])->([i, l, m], [i]) {i=8, j=4, k=4, l=4, m=4}, custom>} : (tensor<8x4x4xf32>) -> (tensor<8x4x4xf32>, tensor<8xi32>)
    return %0#0, %0#1 : tensor<8x4x4xf32>, tensor<8xi32>
  }
}

// -----

// The same call with a matrix dim split: the rule links no operand factor
// to that result dim, so the call needs its matrices whole: they are
// gathered, the call runs on all 8, and each device keeps its row of the
// result.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<8x1x4xf32>) {
// CHECK-NEXT: %[[W:.*]] = "stablehlo.all_gather"(%[[A]])
// CHECK-SAME: all_gather_dim = 1
// CHECK-SAME: (tensor<8x1x4xf32>) -> tensor<8x4x4xf32>
// CHECK-NEXT: %[[F:.*]]:2 = stablehlo.custom_call @batched_factor(%[[W]]) : (tensor<8x4x4xf32>) -> (tensor<8x4x4xf32>, tensor<8xi32>)
// CHECK: stablehlo.dynamic_slice %[[F]]#0, {{.*}} sizes = [8, 1, 4]
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @matrix_split(%a: tensor<8x4x4xf32> {mhlo.sharding = "{devices=[1,4,1]<=[4]}"})
      -> (tensor<8x4x4xf32> {mhlo.sharding = "{devices=[1,4,1]<=[4]}"}) {
    %0:2 = stablehlo.custom_call @batched_factor(%a) {sdy.sharding_rule = #sdy.op_sharding_rule<([i, j, k])->([i, l, m], [i]) {i=8, j=4, k=4, l=4, m=4}, custom>} : (tensor<8x4x4xf32>) -> (tensor<8x4x4xf32>, tensor<8xi32>)
    return %0#0 : tensor<8x4x4xf32>
  }
}

// -----

// A reduction factor, split on the operand, leaves each device's call a
// partial sum, summed by one all_reduce where the result is wanted whole.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<8x4xf32>) {
// CHECK-NEXT: %[[P:.*]] = stablehlo.custom_call @row_sum(%[[A]]) : (tensor<8x4xf32>) -> tensor<8xf32>
// CHECK-NEXT: %[[S:.*]] = "stablehlo.all_reduce"(%[[P]])
// CHECK: stablehlo.add
// CHECK: sdy.return %[[S]] : tensor<8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @sum_rows(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<8xf32> {mhlo.sharding = "{replicated}"}) {
    %0 = stablehlo.custom_call @row_sum(%a) {sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i]) {i=8, j=16} reduction={j}, custom>} : (tensor<8x16xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}

// -----

// A custom call with neither a rule nor a known target stays opaque: its
// operand is gathered and it runs whole.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x4x4xf32>) {
// CHECK-NEXT: %[[W:.*]] = "stablehlo.all_gather"(%[[A]])
// CHECK-SAME: (tensor<2x4x4xf32>) -> tensor<8x4x4xf32>
// CHECK-NEXT: stablehlo.custom_call @unknown_target(%[[W]]) : (tensor<8x4x4xf32>) -> tensor<8x4x4xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @opaque(%a: tensor<8x4x4xf32> {mhlo.sharding = "{devices=[4,1,1]<=[4]}"})
      -> (tensor<8x4x4xf32> {mhlo.sharding = "{devices=[4,1,1]<=[4]}"}) {
    %0 = stablehlo.custom_call @unknown_target(%a) : (tensor<8x4x4xf32>) -> tensor<8x4x4xf32>
    return %0 : tensor<8x4x4xf32>
  }
}
