// RUN: stablehlo-spmd-opt %s --spmd-auto-shard=mesh=x=8 | FileCheck %s

// z = a @ b + c @ d with every operand split on the contraction dim over all
// 8 devices, and z wanted whole.  Each dot leaves a Partial sum; summing each
// at once would be two all-reduces of z, while the add is linear in both
// partials, so the plan keeps them and sums once, where z leaves.  Each dot
// runs split over x on its contracted factor (the third, after the two free
// ones), as the plan says, whatever else would move less around it.

// CHECK-LABEL: func.func @two_partial_dots
// CHECK: %[[AB:.*]] = stablehlo.dot_general %{{.*}}, %{{.*}}, contracting_dims = [1] x [0] {mhlo.sharding = "{unreduced}", spmd.factor_axes = {{\[\[\], \[\], \["x"\]\]}}}
// CHECK: %[[CD:.*]] = stablehlo.dot_general %{{.*}}, %{{.*}}, contracting_dims = [1] x [0] {mhlo.sharding = "{unreduced}", spmd.factor_axes = {{\[\[\], \[\], \["x"\]\]}}}
// CHECK: %[[Z:.*]] = stablehlo.add %[[AB]], %[[CD]] {mhlo.sharding = "{unreduced}"}
// CHECK: %[[SUM:.*]] = stablehlo.custom_call @Sharding(%[[Z]]) {mhlo.sharding = "{replicated}"}
// CHECK: return %[[SUM]]
func.func @two_partial_dots(
    %a: tensor<16x64xf32> {mhlo.sharding = "{devices=[1,8]<=[8]}"},
    %b: tensor<64x32xf32> {mhlo.sharding = "{devices=[8,1]<=[8]}"},
    %c: tensor<16x64xf32> {mhlo.sharding = "{devices=[1,8]<=[8]}"},
    %d: tensor<64x32xf32> {mhlo.sharding = "{devices=[8,1]<=[8]}"})
    -> (tensor<16x32xf32> {mhlo.sharding = "{replicated}"}) {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<16x64xf32>, tensor<64x32xf32>) -> tensor<16x32xf32>
  %1 = stablehlo.dot_general %c, %d, contracting_dims = [1] x [0] : (tensor<16x64xf32>, tensor<64x32xf32>) -> tensor<16x32xf32>
  %2 = stablehlo.add %0, %1 : tensor<16x32xf32>
  return %2 : tensor<16x32xf32>
}

// The same sum read by two ops that need it summed: the add still keeps the
// partials, and one sum serves both readers.  Summing each dot at once (the
// plan when every read paid for its own sum) moves z two times over.

// CHECK-LABEL: func.func @one_sum_for_two_readers
// CHECK: %[[AB:.*]] = stablehlo.dot_general %{{.*}}, %{{.*}}, contracting_dims = [1] x [0] {mhlo.sharding = "{unreduced}", spmd.factor_axes = {{\[\[\], \[\], \["x"\]\]}}}
// CHECK: %[[CD:.*]] = stablehlo.dot_general %{{.*}}, %{{.*}}, contracting_dims = [1] x [0] {mhlo.sharding = "{unreduced}", spmd.factor_axes = {{\[\[\], \[\], \["x"\]\]}}}
// CHECK: %[[Z:.*]] = stablehlo.add %[[AB]], %[[CD]] {mhlo.sharding = "{unreduced}"}
// CHECK: %[[SUM:.*]] = stablehlo.custom_call @Sharding(%[[Z]])
// CHECK-NOT: @Sharding
// CHECK: %[[E:.*]] = stablehlo.exponential %[[SUM]]
// CHECK-NOT: @Sharding
// CHECK: %[[T:.*]] = stablehlo.tanh %[[SUM]]
// CHECK: stablehlo.add %[[E]], %[[T]]
func.func @one_sum_for_two_readers(
    %a: tensor<16x64xf32> {mhlo.sharding = "{devices=[1,8]<=[8]}"},
    %b: tensor<64x32xf32> {mhlo.sharding = "{devices=[8,1]<=[8]}"},
    %c: tensor<16x64xf32> {mhlo.sharding = "{devices=[1,8]<=[8]}"},
    %d: tensor<64x32xf32> {mhlo.sharding = "{devices=[8,1]<=[8]}"})
    -> (tensor<16x32xf32> {mhlo.sharding = "{replicated}"}) {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<16x64xf32>, tensor<64x32xf32>) -> tensor<16x32xf32>
  %1 = stablehlo.dot_general %c, %d, contracting_dims = [1] x [0] : (tensor<16x64xf32>, tensor<64x32xf32>) -> tensor<16x32xf32>
  %2 = stablehlo.add %0, %1 : tensor<16x32xf32>
  %3 = stablehlo.exponential %2 : tensor<16x32xf32>
  %4 = stablehlo.tanh %2 : tensor<16x32xf32>
  %5 = stablehlo.add %3, %4 : tensor<16x32xf32>
  return %5 : tensor<16x32xf32>
}
