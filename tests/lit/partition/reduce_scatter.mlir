// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// KNOWN FAILURE (partitioner bug, reported): an op whose reduced dim is
// sharded on an axis that its *result* is also sharded on should reduce
// locally and reduce_scatter the partial -- what GSPMD emits, and what this
// partitioner does when the partial is explicit (a pinned {unreduced} dot
// summed by a row-sharded @Sharding, dot_general.mlir; a reduce over dim 0,
// reduce.mlir).  But when propagation gives the op's result that sharding
// directly, `_factor_axes` lets the result's pass-through factor take the
// axis first and drops it from the REDUCTION factor whenever that factor
// comes later in the rule -- always for dot_general (contracting factors are
// last), for reduce when the reduced dim is the minor one.  The reduction
// is then un-sharded: operands are moved (all_to_all, all_gather) and the
// op runs on whole k.  The result is right but moves 1.5x to 6x the bytes
// (per chunk below).

// 8x16 (k over 4) times 16x8 (k over 4), result rows over the same 4
// devices: each device forms its 8x8 partial (8x4 times 4x8), then one
// reduce_scatter (add) on dim 0 leaves device k rows [2k, 2k+2) of the sum:
// 8x8 -> 2x8, 192 bytes per device.  Nothing else moves.  (Today: an
// all_to_all of a and an all_gather of b, 96 + 384 = 480 bytes.)

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<8x4xf32>, %[[B:arg[0-9]+]]: tensor<4x8xf32>) {
// CHECK-NOT: all_to_all
// CHECK-NOT: all_gather
// CHECK: %[[P:.*]] = stablehlo.dot_general %[[A]], %[[B]], contracting_dims = [1] x [0] : (tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: %[[S:.*]] = "stablehlo.reduce_scatter"(%[[P]])
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 1, 2, 3]]> : tensor<1x4xi64>, scatter_dimension = 0 : i64
// CHECK: stablehlo.add
// CHECK: }) : (tensor<8x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: sdy.return %[[S]] : tensor<2x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @rows(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"},
                  %b: tensor<16x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// Megatron's MLP on a 2x2 (data, model) mesh whose output is [data, model]:
// the second dot's 4x16 partial on model is reduce-scattered over model
// (groups [[0, 1], [2, 3]]) on dim 1, 4x16 -> 4x8: 128 bytes per device.
// (Today: all_gather of the activations and an all_to_all of w2, 256 + 512
// = 768 bytes.)

// CHECK-LABEL: func.func public @main
// CHECK: (%[[X:arg[0-9]+]]: tensor<4x16xf32>, %[[W1:arg[0-9]+]]: tensor<16x16xf32>, %[[W2:arg[0-9]+]]: tensor<16x16xf32>) {
// CHECK-NEXT: %[[H:.*]] = stablehlo.dot_general %[[X]], %[[W1]], {{.*}} -> tensor<4x16xf32>
// CHECK-NEXT: %[[T:.*]] = stablehlo.tanh %[[H]] : tensor<4x16xf32>
// CHECK-NEXT: %[[P:.*]] = stablehlo.dot_general %[[T]], %[[W2]], contracting_dims = [1] x [0] : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: %[[S:.*]] = "stablehlo.reduce_scatter"(%[[P]])
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 1], [2, 3]]> : tensor<2x2xi64>, scatter_dimension = 1 : i64
// CHECK: }) : (tensor<4x16xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: sdy.return %[[S]] : tensor<4x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["data"=2, "model"=2]>} {
  func.func @mlp(%x: tensor<8x16xf32> {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"},
                 %w1: tensor<16x32xf32> {mhlo.sharding = "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"},
                 %w2: tensor<32x16xf32> {mhlo.sharding = "{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}"})
      -> (tensor<8x16xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"}) {
    %0 = stablehlo.dot_general %x, %w1, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
    %1 = stablehlo.tanh %0 : tensor<8x32xf32>
    %2 = stablehlo.dot_general %1, %w2, contracting_dims = [1] x [0] : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
    return %2 : tensor<8x16xf32>
  }
}

// -----

// A weight-gradient update as FSDP has it: x [16,16] and dy [16,8] are
// batch-sharded (4 rows each), the gradient x^T dy contracts the batch and
// the weight w [16,8] it updates is row-sharded.  Each device forms its
// 16x8 partial (4x16 contracted with 4x8 over their 4 rows), one
// reduce_scatter (add) on dim 0 leaves its 4 rows of the sum (16x8 -> 4x8,
// 384 bytes), and the subtract is local.  (Today: all_to_all of x and
// all_gather of dy, 192 + 384 = 576 bytes.)

// CHECK-LABEL: func.func public @main
// CHECK: (%[[X:arg[0-9]+]]: tensor<4x16xf32>, %[[DY:arg[0-9]+]]: tensor<4x8xf32>, %[[W:arg[0-9]+]]: tensor<4x8xf32>) {
// CHECK-NOT: all_to_all
// CHECK-NOT: all_gather
// CHECK: %[[P:.*]] = stablehlo.dot_general %[[X]], %[[DY]], contracting_dims = [0] x [0] : (tensor<4x16xf32>, tensor<4x8xf32>) -> tensor<16x8xf32>
// CHECK-NEXT: %[[G:.*]] = "stablehlo.reduce_scatter"(%[[P]])
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 1, 2, 3]]> : tensor<1x4xi64>, scatter_dimension = 0 : i64
// CHECK: }) : (tensor<16x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[U:.*]] = stablehlo.subtract %[[W]], %[[G]] : tensor<4x8xf32>
// CHECK-NEXT: sdy.return %[[U]] : tensor<4x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @weight_update(%x: tensor<16x16xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                           %dy: tensor<16x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                           %w: tensor<16x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<16x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %g = stablehlo.dot_general %x, %dy, contracting_dims = [0] x [0] : (tensor<16x16xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
    %0 = stablehlo.subtract %w, %g : tensor<16x8xf32>
    return %0 : tensor<16x8xf32>
  }
}

// -----

// The reduce twin of the first chunk: [8,16] with its reduced dim 1 over 4
// devices, result [8] over the same 4.  Each device sums its 8x4 block (an
// 8-vector partial) and one reduce_scatter (add) leaves it elements
// [2k, 2k+2) of the total: 8 -> 2, 24 bytes per device -- not an all_to_all
// of the 8x4 operand (96 bytes).

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<8x4xf32>) {
// CHECK-NOT: all_to_all
// CHECK: %[[P:.*]] = stablehlo.reduce(%[[A]] {{.*}} across dimensions = [1] : (tensor<8x4xf32>, tensor<f32>) -> tensor<8xf32>
// CHECK-NEXT: %[[S:.*]] = "stablehlo.reduce_scatter"(%[[P]])
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 1, 2, 3]]> : tensor<1x4xi64>, scatter_dimension = 0 : i64
// CHECK: }) : (tensor<8xf32>) -> tensor<2xf32>
// CHECK-NEXT: sdy.return %[[S]] : tensor<2xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @reduce_minor(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<8xf32> {mhlo.sharding = "{devices=[4]<=[4]}"}) {
    %cst = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = stablehlo.reduce(%a init: %cst) applies stablehlo.add across dimensions = [1] : (tensor<8x16xf32>, tensor<f32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
