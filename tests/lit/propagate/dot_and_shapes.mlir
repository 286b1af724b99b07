// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate | FileCheck %s
// RUN: stablehlo-spmd-opt %s --split-input-file --pass-pipeline='builtin.module(spmd-propagate{completion=local})' | FileCheck %s --check-prefix=LOCAL

// Megatron's MLP on a 2x2 (data, model) mesh: x batch-sharded, w1 column-
// and w2 row-sharded.  The hidden activation is sharded on both; the second
// dot contracts over `model`, so its result is a partial sum on `model` that
// the result annotation (batch-sharded) reduces.

// CHECK-LABEL: func.func @mlp
// CHECK: %[[H:.*]] = stablehlo.dot_general %arg0, %arg1{{.*}}mhlo.sharding = "{devices=[2,2]<=[4]}"
// CHECK: %[[A:.*]] = stablehlo.tanh %[[H]] {mhlo.sharding = "{devices=[2,2]<=[4]}"}
// CHECK: %[[O:.*]] = stablehlo.dot_general %[[A]], %arg2{{.*}}mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dims={unreduced}}"
// CHECK: %[[R:.*]] = stablehlo.custom_call @Sharding(%[[O]]) {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"}
// CHECK: return %[[R]]
module attributes {spmd.mesh = #sdy.mesh<["data"=2, "model"=2]>} {
  func.func @mlp(%x: tensor<8x16xf32> {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"},
                 %w1: tensor<16x32xf32> {mhlo.sharding = "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"},
                 %w2: tensor<32x16xf32> {mhlo.sharding = "{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}"})
      -> (tensor<8x16xf32> {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"}) {
    %0 = stablehlo.dot_general %x, %w1, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
    %1 = stablehlo.tanh %0 : tensor<8x32xf32>
    %2 = stablehlo.dot_general %1, %w2, contracting_dims = [1] x [0] : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
    return %2 : tensor<8x16xf32>
  }
}

// -----

// Backward propagation: only the result is annotated; the operands of the
// element-wise chain and the transpose take its sharding, permuted.

// CHECK-LABEL: func.func @backward
// CHECK-SAME: %arg0: tensor<4x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}
// CHECK: stablehlo.transpose %arg0, dims = [1, 0] {mhlo.sharding = "{devices=[4,1]<=[4]}"}
// CHECK: stablehlo.exponential {{.*}}mhlo.sharding = "{devices=[4,1]<=[4]}"
func.func @backward(%x: tensor<4x8xf32>) -> (tensor<8x4xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
  %0 = stablehlo.transpose %x, dims = [1, 0] : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %1 = stablehlo.exponential %0 : tensor<8x4xf32>
  return %1 : tensor<8x4xf32>
}

// -----

// Reshape splits and merges: [8,6] sharded 4-way on dim 0 becomes [2,4,6]
// sharded on dim 0 (2) and dim 1 (the remaining 2 of the 4-way axis cannot
// split an axis, so only whole axes move: a 2x2 mesh, axis_0 on 2, axis_1 on 4).

// CHECK-LABEL: func.func @reshape_split
// CHECK: stablehlo.reshape %arg0 {mhlo.sharding = "{devices=[2,2,1]<=[4]}"} : (tensor<8x6xf32>) -> tensor<2x4x6xf32>
// CHECK: stablehlo.reshape {{.*}}mhlo.sharding = "{devices=[4,1]<=[4]}"{{.*}}-> tensor<8x6xf32>
module attributes {spmd.mesh = #sdy.mesh<["axis_0"=2, "axis_1"=2]>} {
  func.func @reshape_split(%x: tensor<8x6xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> tensor<8x6xf32> {
    %0 = stablehlo.reshape %x : (tensor<8x6xf32>) -> tensor<2x4x6xf32>
    %1 = stablehlo.reshape %0 : (tensor<2x4x6xf32>) -> tensor<8x6xf32>
    return %1 : tensor<8x6xf32>
  }
}

// -----

// broadcast_in_dim: the operand's dims map to the result's; the new dim is
// left to the result's users.  A size-1 dim that is expanded does not carry
// the sharding back to the operand.

// CHECK-LABEL: func.func @broadcast
// CHECK: stablehlo.broadcast_in_dim %arg0, dims = [1] {mhlo.sharding = "{devices=[1,4]<=[4]}"}
// CHECK: stablehlo.broadcast_in_dim %arg1, dims = [0, 1] {mhlo.sharding = "{devices=[1,4]<=[4]}"}
// CHECK-SAME: (tensor<1x8xf32>) -> tensor<4x8xf32>
func.func @broadcast(%b: tensor<8xf32> {mhlo.sharding = "{devices=[4]<=[4]}"}, %c: tensor<1x8xf32>) -> tensor<4x8xf32> {
  %0 = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<8xf32>) -> tensor<4x8xf32>
  %1 = stablehlo.broadcast_in_dim %c, dims = [0, 1] : (tensor<1x8xf32>) -> tensor<4x8xf32>
  %2 = stablehlo.add %0, %1 : tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}

// -----

// An activation reaching a matmul through a call: the callee's ops run where
// it is called, so the dot reads x's batch split before the smaller weight
// (split on its output dim over the same axis) can seat its own on the result.

// CHECK-LABEL: func.func @activation_through_a_call
// CHECK: %[[Y:.*]] = call @twice_transposed(%arg0) {mhlo.sharding = "{devices=[4,1]<=[4]}"}
// CHECK: stablehlo.dot_general %[[Y]], %arg1{{.*}}mhlo.sharding = "{devices=[4,1]<=[4]}"
module attributes {spmd.mesh = #sdy.mesh<["data"=4]>} {
  func.func @activation_through_a_call(
      %x: tensor<64x16xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
      %w: tensor<16x32xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}) -> tensor<64x32xf32> {
    %0 = func.call @twice_transposed(%x) : (tensor<64x16xf32>) -> tensor<64x16xf32>
    %1 = stablehlo.dot_general %0, %w, contracting_dims = [1] x [0] : (tensor<64x16xf32>, tensor<16x32xf32>) -> tensor<64x32xf32>
    return %1 : tensor<64x32xf32>
  }
  func.func private @twice_transposed(%a: tensor<64x16xf32>) -> tensor<64x16xf32> {
    %0 = stablehlo.transpose %a, dims = [1, 0] : (tensor<64x16xf32>) -> tensor<16x64xf32>
    %1 = stablehlo.transpose %0, dims = [1, 0] : (tensor<16x64xf32>) -> tensor<64x16xf32>
    return %1 : tensor<64x16xf32>
  }
}

// -----

// An embedding lookup under FSDP: the table's rows and the ids' batch both
// over `data`, contesting the one axis at the gather.  The greedy pass
// (LOCAL) gives it to the batch: the ids reach the gather through a
// broadcast that only adds a unit dim (a reshape, so it runs forward with
// the other ops), the lookup keeps the batch split rather than leaving
// every embedding a partial sum, and the matmul after it keeps it too (the
// weight's contracting split yields).  At these sizes (a 32 KB table, 8
// ids) the whole program's cost settles the contest the other way: each
// device looks up its own rows into a Partial embedding, summed once, and
// the matmul splits the weight's columns; its collectives move 1,176 bytes
// per device against the batch split's 1,272.

// CHECK-LABEL: func.func @embedding_then_matmul
// CHECK: %[[E:.*]] = "stablehlo.gather"(%arg0, %{{.*}}){{.*}}mhlo.sharding = "{unreduced}"
// CHECK: %[[S:.*]] = stablehlo.custom_call @Sharding(%[[E]]) {mhlo.sharding = "{replicated}"}
// CHECK: stablehlo.dot_general %[[S]], %arg2{{.*}}mhlo.sharding = "{devices=[1,4]<=[4]}"

// LOCAL-LABEL: func.func @embedding_then_matmul
// LOCAL: %[[I:.*]] = stablehlo.broadcast_in_dim %arg1, dims = [0] {mhlo.sharding = "{devices=[4,1]<=[4]}"}
// LOCAL: %[[E:.*]] = "stablehlo.gather"(%arg0, %[[I]]){{.*}}mhlo.sharding = "{devices=[4,1]<=[4]}"
// LOCAL: stablehlo.dot_general %[[E]], %arg2{{.*}}mhlo.sharding = "{devices=[4,1]<=[4]}"
module attributes {spmd.mesh = #sdy.mesh<["data"=4]>} {
  func.func @embedding_then_matmul(
      %table: tensor<512x16xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
      %ids: tensor<8xi32> {mhlo.sharding = "{devices=[4]<=[4]}"},
      %w: tensor<16x32xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> tensor<8x32xf32> {
    %0 = stablehlo.broadcast_in_dim %ids, dims = [0] : (tensor<8xi32>) -> tensor<8x1xi32>
    %1 = "stablehlo.gather"(%table, %0) {dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 16>, indices_are_sorted = false} : (tensor<512x16xf32>, tensor<8x1xi32>) -> tensor<8x16xf32>
    %2 = stablehlo.dot_general %1, %w, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
    return %2 : tensor<8x32xf32>
  }
}

// -----

// Every value has a sharding: an op with no rule gets the replicated one it
// runs with (and a warning, checked in diagnostics.mlir).  An fft keeps its
// batch dims split; the transformed dim, whose size a real transform
// changes, is whole.

// CHECK-LABEL: func.func @unruled_and_fft
// CHECK: %[[K:.*]] = stablehlo.custom_call @my_kernel(%{{.*}}) {mhlo.sharding = "{replicated}"}
// CHECK: %[[F:.*]] = stablehlo.fft %{{.*}}, type = RFFT, length = [16] {mhlo.sharding = "{devices=[4,1,1]<=[4]}"}
func.func @unruled_and_fft(%x: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                           %s: tensor<8x6x16xf32> {mhlo.sharding = "{devices=[4,1,1]<=[4]}"})
    -> (tensor<8x8xf32>, tensor<8x6x9xcomplex<f32>>) {
  %0 = stablehlo.custom_call @my_kernel(%x) : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %1 = stablehlo.fft %s, type = RFFT, length = [16] : (tensor<8x6x16xf32>) -> tensor<8x6x9xcomplex<f32>>
  return %0, %1 : tensor<8x8xf32>, tensor<8x6x9xcomplex<f32>>
}
