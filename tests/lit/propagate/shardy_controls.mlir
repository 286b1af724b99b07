// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate | FileCheck %s

// Shardy's open dims ({?}, what jax's PartitionSpec.UNCONSTRAINED lowers
// to) are the user's leave to split a dim further: the open argument takes
// the split its sum partner brings, as Shardy's propagation gives it
// ([{"a"}, {"b"}]), where a closed {} would stay whole.  The import keeps the
// open dims beside XLA's text, which cannot say them, and drops the note
// once propagation has written the sharding.

// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg0: tensor<8x8xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"}
// CHECK-SAME: %arg1: tensor<8x8xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"}
// CHECK-SAME: %arg2: tensor<8x8xf32> {mhlo.sharding = "{replicated}"}
// CHECK-NOT: spmd.open_dims
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{?}, {?}]>},
                %arg1: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {"b"}]>},
                %arg2: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>})
    -> (tensor<8x8xf32>, tensor<8x8xf32>) {
  %0 = stablehlo.add %arg0, %arg1 : tensor<8x8xf32>
  %1 = stablehlo.add %arg2, %arg1 : tensor<8x8xf32>
  return %0, %1 : tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// Shardy's data-only ops: sdy.constant is a constant (Shardy keeps it from
// folding), and a data-flow edge without a sharding is its operand.  Both
// take the split of the values around them instead of staying replicated.

// CHECK-LABEL: func.func @main
// CHECK: %[[C:.*]] = stablehlo.constant {mhlo.sharding = "{devices=[2,2]<=[4]}"} dense<1.000000e+00>
// CHECK-NEXT: %[[S:.*]] = stablehlo.add %arg0, %[[C]] {mhlo.sharding = "{devices=[2,2]<=[4]}"}
// CHECK-NEXT: %[[P:.*]] = stablehlo.multiply %[[S]], %[[S]] {mhlo.sharding = "{devices=[2,2]<=[4]}"}
// CHECK-NOT: sdy.constant
// CHECK-NOT: sdy.data_flow_edge
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {"b"}]>}) -> tensor<8x8xf32> {
  %c = sdy.constant dense<1.0> : tensor<8x8xf32>
  %0 = stablehlo.add %arg0, %c : tensor<8x8xf32>
  %1 = sdy.data_flow_edge %0 : tensor<8x8xf32>
  %2 = stablehlo.multiply %1, %1 : tensor<8x8xf32>
  return %2 : tensor<8x8xf32>
}

// -----

// A constraint with an open dim (jax's with_sharding_constraint with
// UNCONSTRAINED) pins its closed dims only: dim 0 takes "a" from the sum's
// partner, dim 1 stays whole as the constraint says.

// CHECK-LABEL: func.func @main
// CHECK: %[[C:.*]] = stablehlo.custom_call @Sharding(%arg1) {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"}
// CHECK-NOT: spmd.open_dims
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {"b"}]>},
                %arg1: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = sdy.sharding_constraint %arg1 <@mesh, [{?}, {}]> : tensor<8x8xf32>
  %1 = stablehlo.add %0, %arg0 : tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}
