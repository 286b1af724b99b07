// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// Batch-sharded batched matmul: the batch dim (4) is split over 4 devices,
// so each device multiplies its own 1x8x16 by 1x16x8; no collective.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<1x8x16xf32>, %[[B:arg[0-9]+]]: tensor<1x16x8xf32>) {
// CHECK-NEXT: %[[D:.*]] = stablehlo.dot_general %[[A]], %[[B]], batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<1x8x16xf32>, tensor<1x16x8xf32>) -> tensor<1x8x8xf32>
// CHECK-NEXT: sdy.return %[[D]] : tensor<1x8x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @batch(%a: tensor<4x8x16xf32> {mhlo.sharding = "{devices=[4,1,1]<=[4]}"},
                   %b: tensor<4x16x8xf32> {mhlo.sharding = "{devices=[4,1,1]<=[4]}"})
      -> (tensor<4x8x8xf32> {mhlo.sharding = "{devices=[4,1,1]<=[4]}"}) {
    %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<4x8x16xf32>, tensor<4x16x8xf32>) -> tensor<4x8x8xf32>
    return %0 : tensor<4x8x8xf32>
  }
}

// -----

// Contracting dim sharded on both operands (16 over 4: 8x4 times 4x8): each
// device's 8x8 product is a partial sum over its quarter of k.  The
// replicated result needs the sum: propagation marks a reshard, which
// becomes one all_reduce (add) over all 4 devices on the 8x8 partial.  The
// marked reshard itself (custom_call @Sharding) does not survive.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<8x4xf32>, %[[B:arg[0-9]+]]: tensor<4x8xf32>) {
// CHECK-NEXT: %[[P:.*]] = stablehlo.dot_general %[[A]], %[[B]], contracting_dims = [1] x [0] : (tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: %[[S:.*]] = "stablehlo.all_reduce"(%[[P]])
// CHECK-SAME: channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<{{\[\[}}0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids
// CHECK-NEXT: ^bb0(%[[L:.*]]: tensor<f32>, %[[R:.*]]: tensor<f32>):
// CHECK-NEXT: %[[SUM:.*]] = stablehlo.add %[[L]], %[[R]] : tensor<f32>
// CHECK-NEXT: stablehlo.return %[[SUM]] : tensor<f32>
// CHECK-NEXT: }) : (tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: sdy.return %[[S]] : tensor<8x8xf32>
// CHECK-NOT: custom_call
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @contracting(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"},
                         %b: tensor<16x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{replicated}"}) {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// Megatron's MLP on a 2x2 (data, model) mesh: x batch-sharded over data
// (4x16), w1 column-sharded over model (16x16), w2 row-sharded over model
// (16x16).  The first dot and tanh are local (4x16, [data, model]); the
// second dot contracts the model-sharded hidden dim, leaving a 4x16 partial
// on model that the data-sharded result sums with exactly one all_reduce.
// Its groups are the devices that differ only along model: device
// d = 2*data + model, so [[0, 1], [2, 3]].

// CHECK-LABEL: func.func public @main
// CHECK: (%[[X:arg[0-9]+]]: tensor<4x16xf32>, %[[W1:arg[0-9]+]]: tensor<16x16xf32>, %[[W2:arg[0-9]+]]: tensor<16x16xf32>) {
// CHECK-NEXT: %[[H:.*]] = stablehlo.dot_general %[[X]], %[[W1]], contracting_dims = [1] x [0] : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: %[[T:.*]] = stablehlo.tanh %[[H]] : tensor<4x16xf32>
// CHECK-NEXT: %[[P:.*]] = stablehlo.dot_general %[[T]], %[[W2]], contracting_dims = [1] x [0] : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: %[[S:.*]] = "stablehlo.all_reduce"(%[[P]])
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 1], [2, 3]]> : tensor<2x2xi64>, use_global_device_ids
// CHECK: stablehlo.add
// CHECK: }) : (tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: sdy.return %[[S]] : tensor<4x16xf32>
// CHECK-NOT: stablehlo.all_
// CHECK-NOT: stablehlo.collective
// CHECK-NOT: stablehlo.reduce_scatter
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

// Non-contracting dim of the lhs sharded, rhs replicated: each device
// multiplies its 2 rows by the whole rhs (2x16 times 16x8); the rows of the
// result are its own.  No collective.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x16xf32>, %[[B:arg[0-9]+]]: tensor<16x8xf32>) {
// CHECK-NEXT: %[[D:.*]] = stablehlo.dot_general %[[A]], %[[B]], contracting_dims = [1] x [0] : (tensor<2x16xf32>, tensor<16x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: sdy.return %[[D]] : tensor<2x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @lhs_rows(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                      %b: tensor<16x8xf32> {mhlo.sharding = "{replicated}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// The mirror image: the rhs's non-contracting dim is sharded, the lhs is
// replicated, the result column-sharded: 8x16 times 16x2 -> 8x2 per device,
// no collective.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<8x16xf32>, %[[B:arg[0-9]+]]: tensor<16x2xf32>) {
// CHECK-NEXT: %[[D:.*]] = stablehlo.dot_general %[[A]], %[[B]], contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x2xf32>) -> tensor<8x2xf32>
// CHECK-NEXT: sdy.return %[[D]] : tensor<8x2xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @rhs_columns(%a: tensor<8x16xf32> {mhlo.sharding = "{replicated}"},
                         %b: tensor<16x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}) {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// Both non-contracting dims sharded on the same axis: one axis cannot split
// rows and columns of the result at once.  The result keeps the rows (its
// sharding), so the lhs is used as it is and the rhs's columns are
// gathered: all_gather on dim 1 over the 4 devices, 16x2 -> 16x8.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x16xf32>, %[[B:arg[0-9]+]]: tensor<16x2xf32>) {
// CHECK-NEXT: %[[G:.*]] = "stablehlo.all_gather"(%[[B]])
// CHECK-SAME: all_gather_dim = 1 : i64
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids
// CHECK-SAME: (tensor<16x2xf32>) -> tensor<16x8xf32>
// CHECK-NEXT: %[[D:.*]] = stablehlo.dot_general %[[A]], %[[G]], contracting_dims = [1] x [0] : (tensor<2x16xf32>, tensor<16x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: sdy.return %[[D]] : tensor<2x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @both_rows_and_columns(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                                   %b: tensor<16x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// Contracting dim sharded on different axes of a 2x2 (x, y) mesh: a's k
// over x, b's k over y.  The contraction runs over a's axis x, and y moves
// to b's free dim n (one all_to_all within each x row, 8x8 -> 16x4), so the
// product is half as wide: each device keeps its x-half of k (a table of
// [0, 0, 8, 8]), sums its 8x4 partial over x ([[0, 2], [1, 3]]), and the
// columns are gathered over y.  That moves 384 bytes a device; moving b's
// blocks to the x layout and summing the whole 8x8 would move 512.

// CHECK-LABEL: func.func public @main
// CHECK: manual_axes={"x", "y"} (%[[A:arg[0-9]+]]: tensor<8x8xf32>, %[[B:arg[0-9]+]]: tensor<8x8xf32>) {
// CHECK-NEXT: %[[BT:.*]] = "stablehlo.all_to_all"(%[[B]])
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 1], [2, 3]]> : tensor<2x2xi64>
// CHECK-SAME: (tensor<8x8xf32>) -> tensor<16x4xf32>
// CHECK: %[[TABLE:.*]] = stablehlo.constant dense<[0, 0, 8, 8]> : tensor<4xi32>
// CHECK: %[[BK:.*]] = stablehlo.dynamic_slice %[[BT]], %{{.*}}, %{{.*}}, sizes = [8, 4] : (tensor<16x4xf32>, tensor<i32>, tensor<i32>) -> tensor<8x4xf32>
// CHECK-NEXT: %[[P:.*]] = stablehlo.dot_general %[[A]], %[[BK]], contracting_dims = [1] x [0] : (tensor<8x8xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
// CHECK-NEXT: %[[S:.*]] = "stablehlo.all_reduce"(%[[P]])
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 2], [1, 3]]> : tensor<2x2xi64>
// CHECK: }) : (tensor<8x4xf32>) -> tensor<8x4xf32>
// CHECK-NEXT: %[[G:.*]] = "stablehlo.all_gather"(%[[S]])
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 1], [2, 3]]> : tensor<2x2xi64>
// CHECK-SAME: (tensor<8x4xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: sdy.return %[[G]] : tensor<8x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @mismatched_contraction(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,2,2]<=[4] last_tile_dim_replicate}"},
                                    %b: tensor<16x8xf32> {mhlo.sharding = "{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{replicated}"}) {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// A partial the user pins ({unreduced} on the dot) summed into a row-sharded
// layout by a @Sharding constraint: the marked reshard sums the local 8x8
// partial straight into this device's rows with one reduce_scatter (add) on
// dim 0 (device k keeps rows [2k, 2k+2)): 8x8 -> 2x8.  Nothing else moves.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<8x4xf32>, %[[B:arg[0-9]+]]: tensor<4x8xf32>) {
// CHECK-NEXT: %[[P:.*]] = stablehlo.dot_general %[[A]], %[[B]], contracting_dims = [1] x [0] : (tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: %[[S:.*]] = "stablehlo.reduce_scatter"(%[[P]])
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 1, 2, 3]]> : tensor<1x4xi64>, scatter_dimension = 0 : i64, use_global_device_ids
// CHECK-NEXT: ^bb0(%[[L:.*]]: tensor<f32>, %[[R:.*]]: tensor<f32>):
// CHECK-NEXT: stablehlo.add %[[L]], %[[R]] : tensor<f32>
// CHECK: }) : (tensor<8x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: sdy.return %[[S]] : tensor<2x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @pinned_partial(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"},
                            %b: tensor<16x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] {mhlo.sharding = "{unreduced}"} : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
    %1 = stablehlo.custom_call @Sharding(%0) {mhlo.sharding = "{devices=[4,1]<=[4]}"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %1 : tensor<8x8xf32>
  }
}

// -----

// An uneven contracting dim stays sharded with its padding masked: k = 10
// over 4 devices is 3 per device, device 3 holding k = 9, 10, 11 where 10
// and 11 are padding (after exp, a's padding is exp(0) = 1, and 0 * NaN
// would be NaN anyway).  Both operands get their k positions 3k + i >= 10
// replaced by zero (iota on the k dim, offset by the shard's first k from
// the table [0, 3, 6, 9], compare LT 10, select), then the local 8x3 times 3x8 dot
// and one all_reduce as for an even split.

// CHECK-LABEL: func.func public @main
// CHECK: %[[A:.*]] = stablehlo.custom_call @SPMDFullToShardShape(%{{.*}}) {mhlo.sharding = "{manual}"} : ({{.*}}) -> tensor<8x3xf32>
// CHECK: %[[B:.*]] = stablehlo.custom_call @SPMDFullToShardShape(%{{.*}}) {mhlo.sharding = "{manual}"} : ({{.*}}) -> tensor<3x8xf32>
// CHECK-NEXT: %[[E:.*]] = stablehlo.exponential %[[A]] : tensor<8x3xf32>
// CHECK-NEXT: stablehlo.constant dense<[0, 3, 6, 9]> : tensor<4xi32>
// CHECK: %[[KA:.*]] = stablehlo.iota dim = 1 : tensor<8x3xi32>
// CHECK-NEXT: stablehlo.broadcast_in_dim
// CHECK-NEXT: %[[GA:.*]] = stablehlo.add %[[KA]], %{{.*}} : tensor<8x3xi32>
// CHECK-NEXT: %[[TEN_A:.*]] = stablehlo.constant dense<10> : tensor<8x3xi32>
// CHECK-NEXT: %[[INA:.*]] = stablehlo.compare LT, %[[GA]], %[[TEN_A]] : (tensor<8x3xi32>, tensor<8x3xi32>) -> tensor<8x3xi1>
// CHECK-NEXT: %[[ZA:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[FA:.*]] = stablehlo.broadcast_in_dim %[[ZA]], dims = [] : (tensor<f32>) -> tensor<8x3xf32>
// CHECK-NEXT: %[[MA:.*]] = stablehlo.select %[[INA]], %[[E]], %[[FA]] : tensor<8x3xi1>, tensor<8x3xf32>
// CHECK-NEXT: stablehlo.constant dense<[0, 3, 6, 9]> : tensor<4xi32>
// CHECK: %[[KB:.*]] = stablehlo.iota dim = 0 : tensor<3x8xi32>
// CHECK-NEXT: stablehlo.broadcast_in_dim
// CHECK-NEXT: %[[GB:.*]] = stablehlo.add %[[KB]], %{{.*}} : tensor<3x8xi32>
// CHECK-NEXT: %[[TEN_B:.*]] = stablehlo.constant dense<10> : tensor<3x8xi32>
// CHECK-NEXT: %[[INB:.*]] = stablehlo.compare LT, %[[GB]], %[[TEN_B]] : (tensor<3x8xi32>, tensor<3x8xi32>) -> tensor<3x8xi1>
// CHECK-NEXT: %[[ZB:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[FB:.*]] = stablehlo.broadcast_in_dim %[[ZB]], dims = [] : (tensor<f32>) -> tensor<3x8xf32>
// CHECK-NEXT: %[[MB:.*]] = stablehlo.select %[[INB]], %[[B]], %[[FB]] : tensor<3x8xi1>, tensor<3x8xf32>
// CHECK-NEXT: %[[P:.*]] = stablehlo.dot_general %[[MA]], %[[MB]], contracting_dims = [1] x [0] : (tensor<8x3xf32>, tensor<3x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: %[[S:.*]] = "stablehlo.all_reduce"(%[[P]])
// CHECK: }) : (tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: stablehlo.custom_call @Sharding(%[[S]]) {mhlo.sharding = "{manual}"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @uneven_contraction(%a: tensor<8x10xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"},
                                %b: tensor<10x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{replicated}"}) {
    %e = stablehlo.exponential %a : tensor<8x10xf32>
    %0 = stablehlo.dot_general %e, %b, contracting_dims = [1] x [0] : (tensor<8x10xf32>, tensor<10x8xf32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}
