// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// An overwriting scatter (x.at[i].set(u)) into a table split on its rows,
// the indices and updates whole: device k shifts each index by its first
// row (4k) and scatters into its own 4 rows; an index outside them is out
// of bounds there and skipped.  Nothing moves (XLA does the same).

// CHECK-LABEL: func.func public @main
// CHECK: (%[[T:arg[0-9]+]]: tensor<4x8xf32>, %[[I:arg[0-9]+]]: tensor<3x1xi32>, %[[U:arg[0-9]+]]: tensor<3x8xf32>) {
// CHECK: %[[ROWS:.*]] = stablehlo.constant dense<4> : tensor<i32>
// CHECK-NEXT: %[[FIRST:.*]] = stablehlo.multiply %{{.*}}, %[[ROWS]] : tensor<i32>
// CHECK-NEXT: %[[FIRSTS:.*]] = stablehlo.broadcast_in_dim %[[FIRST]], dims = [] : (tensor<i32>) -> tensor<3x1xi32>
// CHECK-NEXT: %[[SHIFTED:.*]] = stablehlo.subtract %{{.*}}, %[[FIRSTS]] : tensor<3x1xi32>
// CHECK-NEXT: %[[IDX:.*]] = stablehlo.concatenate %[[SHIFTED]], dim = 1
// CHECK-NEXT: %[[S:.*]] = "stablehlo.scatter"(%[[T]], %[[IDX]], %[[U]])
// CHECK: }) : (tensor<4x8xf32>, tensor<3x1xi32>, tensor<3x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: sdy.return %[[S]] : tensor<4x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @set_rows(%t: tensor<16x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                      %i: tensor<3x1xi32> {mhlo.sharding = "{replicated}"},
                      %u: tensor<3x8xf32> {mhlo.sharding = "{replicated}"})
      -> (tensor<16x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %0 = "stablehlo.scatter"(%t, %i, %u) <{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({
    ^bb0(%old: tensor<f32>, %new: tensor<f32>):
      stablehlo.return %new : tensor<f32>
    }) : (tensor<16x8xf32>, tensor<3x1xi32>, tensor<3x8xf32>) -> tensor<16x8xf32>
    return %0 : tensor<16x8xf32>
  }
}

// -----

// A scatter-max of many updates split on their scatter dim (16 over 4
// devices) into a small table: each device scatters its 4 updates into
// the whole table, and the partial tables are combined by an all_reduce
// with the body's own maximum: 4x8 elements move where gathering the
// updates would move 16x8.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[T:arg[0-9]+]]: tensor<4x8xf32>, %[[I:arg[0-9]+]]: tensor<4x1xi32>, %[[U:arg[0-9]+]]: tensor<4x8xf32>) {
// CHECK-NEXT: %[[S:.*]] = "stablehlo.scatter"(%[[T]], %[[I]], %[[U]])
// CHECK: }) : (tensor<4x8xf32>, tensor<4x1xi32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[R:.*]] = "stablehlo.all_reduce"(%[[S]])
// CHECK: stablehlo.maximum
// CHECK: }) : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: sdy.return %[[R]] : tensor<4x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @many_updates(%t: tensor<4x8xf32> {mhlo.sharding = "{replicated}"},
                          %i: tensor<16x1xi32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                          %u: tensor<16x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<4x8xf32> {mhlo.sharding = "{replicated}"}) {
    %0 = "stablehlo.scatter"(%t, %i, %u) <{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({
    ^bb0(%old: tensor<f32>, %new: tensor<f32>):
      %m = stablehlo.maximum %old, %new : tensor<f32>
      stablehlo.return %m : tensor<f32>
    }) : (tensor<4x8xf32>, tensor<16x1xi32>, tensor<16x8xf32>) -> tensor<4x8xf32>
    return %0 : tensor<4x8xf32>
  }
}

// -----

// The same scatter-max with few updates (4) into a large table (64 rows):
// gathering the updates and their indices moves less than combining the
// table, so they are gathered and one scatter runs on every device.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[T:arg[0-9]+]]: tensor<64x8xf32>, %[[I:arg[0-9]+]]: tensor<1x1xi32>, %[[U:arg[0-9]+]]: tensor<1x8xf32>) {
// CHECK-DAG: %[[IW:.*]] = "stablehlo.all_gather"(%[[I]]){{.*}}(tensor<1x1xi32>) -> tensor<4x1xi32>
// CHECK-DAG: %[[UW:.*]] = "stablehlo.all_gather"(%[[U]]){{.*}}(tensor<1x8xf32>) -> tensor<4x8xf32>
// CHECK: %[[S:.*]] = "stablehlo.scatter"(%[[T]], %[[IW]], %[[UW]])
// CHECK: }) : (tensor<64x8xf32>, tensor<4x1xi32>, tensor<4x8xf32>) -> tensor<64x8xf32>
// CHECK-NEXT: sdy.return %[[S]] : tensor<64x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @few_updates(%t: tensor<64x8xf32> {mhlo.sharding = "{replicated}"},
                         %i: tensor<4x1xi32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                         %u: tensor<4x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<64x8xf32> {mhlo.sharding = "{replicated}"}) {
    %0 = "stablehlo.scatter"(%t, %i, %u) <{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({
    ^bb0(%old: tensor<f32>, %new: tensor<f32>):
      %m = stablehlo.maximum %old, %new : tensor<f32>
      stablehlo.return %m : tensor<f32>
    }) : (tensor<64x8xf32>, tensor<4x1xi32>, tensor<4x8xf32>) -> tensor<64x8xf32>
    return %0 : tensor<64x8xf32>
  }
}

// -----

// XLA's ScatterPartitionedOnTrivialSliceDims: 17 rows over 2 devices (9
// and 8, plus a row of padding).  The same local scatter-add, the indices
// shifted by 9 on device 1; an index past row 16 can only land in the
// padding, which nothing reads.  Nothing moves.

// CHECK-LABEL: func.func public @main
// CHECK: %[[ROWS:.*]] = stablehlo.constant dense<9> : tensor<i32>
// CHECK-NEXT: %[[FIRST:.*]] = stablehlo.multiply %{{.*}}, %[[ROWS]] : tensor<i32>
// CHECK-NEXT: %[[FIRSTS:.*]] = stablehlo.broadcast_in_dim %[[FIRST]], dims = [] : (tensor<i32>) -> tensor<2x3xi32>
// CHECK-NEXT: %[[SHIFTED:.*]] = stablehlo.subtract %{{.*}}, %[[FIRSTS]] : tensor<2x3xi32>
// CHECK-NEXT: "stablehlo.scatter"(%{{.*}}, %[[SHIFTED]], %{{.*}})
// CHECK: }) : (tensor<9x9xf32>, tensor<2x3xi32>, tensor<2x3x9xf32>) -> tensor<9x9xf32>
// CHECK-NOT: all_
module attributes {spmd.mesh = #sdy.mesh<["x"=2]>} {
  func.func @uneven_rows(%t: tensor<17x9xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"},
                         %i: tensor<2x3xi32> {mhlo.sharding = "{replicated}"},
                         %u: tensor<2x3x9xf32> {mhlo.sharding = "{replicated}"})
      -> (tensor<17x9xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"}) {
    %0 = "stablehlo.scatter"(%t, %i, %u) <{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [2], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 2>}> ({
    ^bb0(%old: tensor<f32>, %new: tensor<f32>):
      %s = stablehlo.add %old, %new : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<17x9xf32>, tensor<2x3xi32>, tensor<2x3x9xf32>) -> tensor<17x9xf32>
    return %0 : tensor<17x9xf32>
  }
}

// -----

// The embedding gradient under FSDP: a scatter-add of a few updates split on
// their batch (4 over 4 devices) into a large table (64 rows) split on its
// rows over the same axis.  Reduce-scattering a whole partial table would
// move 48 rows per device; gathering the updates moves 3, and each device
// then adds into its own 16 rows (no whole table on any device).

// CHECK-LABEL: func.func public @main
// CHECK: (%[[T:arg[0-9]+]]: tensor<16x8xf32>, %[[I:arg[0-9]+]]: tensor<1x1xi32>, %[[U:arg[0-9]+]]: tensor<1x8xf32>) {
// CHECK-DAG: %[[IS:.*]] = "stablehlo.all_gather"(%[[I]]){{.*}} -> tensor<4x1xi32>
// CHECK-DAG: %[[US:.*]] = "stablehlo.all_gather"(%[[U]]){{.*}} -> tensor<4x8xf32>
// CHECK-NOT: all_gather
// CHECK: %[[S:.*]] = "stablehlo.scatter"(%[[T]], %{{.*}}, %[[US]])
// CHECK: }) : (tensor<16x8xf32>, tensor<4x1xi32>, tensor<4x8xf32>) -> tensor<16x8xf32>
// CHECK-NOT: reduce_scatter
// CHECK: sdy.return %[[S]] : tensor<16x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @embedding_gradient(%t: tensor<64x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                                %i: tensor<4x1xi32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                                %u: tensor<4x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<64x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %0 = "stablehlo.scatter"(%t, %i, %u) <{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({
    ^bb0(%old: tensor<f32>, %new: tensor<f32>):
      %s = stablehlo.add %old, %new : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<64x8xf32>, tensor<4x1xi32>, tensor<4x8xf32>) -> tensor<64x8xf32>
    return %0 : tensor<64x8xf32>
  }
}
