// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate | FileCheck %s

// OneFlow's P x B -> P: (U@V)@W with U's columns and V's rows sharded over 4
// devices.  U@V is a partial sum; a dot with replicated W is linear in it, so
// the partial flows on and the only reduction (a marked reshard) is on the
// final 64x8 product where the result annotation needs the sum -- not on the
// 64x64 U@V, where XLA all-reduces.

// CHECK-LABEL: func.func @uvw
// CHECK: %[[UV:.*]] = stablehlo.dot_general %arg0, %arg1{{.*}}mhlo.sharding = "{unreduced}"
// CHECK: %[[UVW:.*]] = stablehlo.dot_general %[[UV]], %arg2{{.*}}mhlo.sharding = "{unreduced}"
// CHECK: %[[SUM:.*]] = stablehlo.custom_call @Sharding(%[[UVW]]) {mhlo.sharding = "{replicated}"}
// CHECK-NOT: custom_call
// CHECK: return %[[SUM]]
func.func @uvw(%u: tensor<64x32xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"},
               %v: tensor<32x64xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
               %w: tensor<64x8xf32> {mhlo.sharding = "{replicated}"})
    -> (tensor<64x8xf32> {mhlo.sharding = "{replicated}"}) {
  %0 = stablehlo.dot_general %u, %v, contracting_dims = [1] x [0] : (tensor<64x32xf32>, tensor<32x64xf32>) -> tensor<64x64xf32>
  %1 = stablehlo.dot_general %0, %w, contracting_dims = [1] x [0] : (tensor<64x64xf32>, tensor<64x8xf32>) -> tensor<64x8xf32>
  return %1 : tensor<64x8xf32>
}

// -----

// Linear consumers keep the partial: add of two partials alike, multiply by
// a full value, negate.  tanh is not linear: the sum is taken right before it.

// CHECK-LABEL: func.func @linear_chain
// CHECK: %[[A:.*]] = stablehlo.dot_general {{.*}}mhlo.sharding = "{unreduced}"
// CHECK: %[[B:.*]] = stablehlo.dot_general {{.*}}mhlo.sharding = "{unreduced}"
// CHECK: %[[SUM:.*]] = stablehlo.add %[[A]], %[[B]] {mhlo.sharding = "{unreduced}"}
// CHECK: %[[SCALED:.*]] = stablehlo.multiply %[[SUM]], %arg2 {mhlo.sharding = "{unreduced}"}
// CHECK: %[[NEG:.*]] = stablehlo.negate %[[SCALED]] {mhlo.sharding = "{unreduced}"}
// CHECK: %[[FULL:.*]] = stablehlo.custom_call @Sharding(%[[NEG]]) {mhlo.sharding = "{replicated}"}
// CHECK: stablehlo.tanh %[[FULL]] {mhlo.sharding = "{replicated}"}
func.func @linear_chain(%x: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"},
                        %y: tensor<16x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                        %s: tensor<8x8xf32> {mhlo.sharding = "{replicated}"}) -> tensor<8x8xf32> {
  %0 = stablehlo.dot_general %x, %y, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %1 = stablehlo.dot_general %x, %y, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %2 = stablehlo.add %0, %1 : tensor<8x8xf32>
  %3 = stablehlo.multiply %2, %s : tensor<8x8xf32>
  %4 = stablehlo.negate %3 : tensor<8x8xf32>
  %5 = stablehlo.tanh %4 : tensor<8x8xf32>
  return %5 : tensor<8x8xf32>
}

// -----

// A partial plus a full value is not linear: the partial is summed first.

// CHECK-LABEL: func.func @partial_plus_full
// CHECK: %[[P:.*]] = stablehlo.dot_general {{.*}}mhlo.sharding = "{unreduced}"
// CHECK: %[[FULL:.*]] = stablehlo.custom_call @Sharding(%[[P]]) {mhlo.sharding = "{replicated}"}
// CHECK: stablehlo.add %[[FULL]], %arg2 {mhlo.sharding = "{replicated}"}
func.func @partial_plus_full(%x: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"},
                             %y: tensor<16x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                             %b: tensor<8x8xf32> {mhlo.sharding = "{replicated}"}) -> tensor<8x8xf32> {
  %0 = stablehlo.dot_general %x, %y, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %1 = stablehlo.add %0, %b : tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}

// -----

// reduce-sum over a sharded dimension leaves a partial; the unannotated
// function result is summed (a marked reshard) before it is returned.

// CHECK-LABEL: func.func @reduce_sum
// CHECK: %[[R:.*]] = stablehlo.reduce{{.*}}mhlo.sharding = "{unreduced}"
// CHECK: %[[S:.*]] = stablehlo.custom_call @Sharding(%[[R]]) {mhlo.sharding = "{replicated}"}
// CHECK: return %[[S]]
func.func @reduce_sum(%x: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}) -> tensor<8xf32> {
  %cst = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %cst) applies stablehlo.add across dimensions = [1] : (tensor<8x16xf32>, tensor<f32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// A max-reduce over a sharded dimension finishes its reduction at once.

// CHECK-LABEL: func.func @reduce_max
// CHECK: stablehlo.reduce{{.*}}mhlo.sharding = "{replicated}"
// CHECK-NOT: custom_call
func.func @reduce_max(%x: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}) -> tensor<8xf32> {
  %cst = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %cst) applies stablehlo.maximum across dimensions = [1] : (tensor<8x16xf32>, tensor<f32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Two consumers that need the sum share one marked reshard.

// CHECK-LABEL: func.func @two_consumers
// CHECK: %[[P:.*]] = stablehlo.dot_general {{.*}}mhlo.sharding = "{unreduced}"
// CHECK-NEXT: %[[S:.*]] = stablehlo.custom_call @Sharding(%[[P]]) {mhlo.sharding = "{replicated}"}
// CHECK-NEXT: stablehlo.tanh %[[S]]
// CHECK-NEXT: stablehlo.exponential %[[S]]
// CHECK-NOT: custom_call
func.func @two_consumers(%x: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"},
                         %y: tensor<16x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> tensor<8x8xf32> {
  %0 = stablehlo.dot_general %x, %y, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %1 = stablehlo.tanh %0 : tensor<8x8xf32>
  %2 = stablehlo.exponential %0 : tensor<8x8xf32>
  %3 = stablehlo.add %1, %2 : tensor<8x8xf32>
  return %3 : tensor<8x8xf32>
}

// -----

// A partial that branches into two paths which would each need their own
// sum costs more to carry than to sum once where it is born: it is summed
// at the dot, as XLA would, and no marked reshard is needed.

// CHECK-LABEL: func.func @branching
// CHECK: stablehlo.dot_general {{.*}}mhlo.sharding = "{replicated}"
// CHECK-NOT: unreduced
// CHECK-NOT: custom_call
func.func @branching(%x: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"},
                     %y: tensor<16x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> (tensor<8x8xf32>, tensor<8x8xf32>) {
  %0 = stablehlo.dot_general %x, %y, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %1 = stablehlo.tanh %0 : tensor<8x8xf32>
  %2 = stablehlo.negate %0 : tensor<8x8xf32>
  %3 = stablehlo.tanh %2 : tensor<8x8xf32>
  return %1, %3 : tensor<8x8xf32>, tensor<8x8xf32>
}
