// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// Ops with no partitioned form run replicated: operands gathered, the op on
// global shapes with its attributes unchanged, the result sliced to its
// sharding.

// cholesky (no rule, so no partitioned form) of a row-sharded [6,6] on 4
// devices (2, 2, 2 and 0 rows): gather the rows (all_gather dim 0, 2x6 ->
// 8x6, less the padding -> 6x6), factor the whole matrix, keep rows
// [2k, 2k+2) of the 8 (6 padded by two) on device k (table [0, 2, 4, 6]).

// CHECK-LABEL: func.func public @main
// CHECK: %[[A:.*]] = stablehlo.custom_call @SPMDFullToShardShape(%{{.*}}) {mhlo.sharding = "{manual}"} : ({{.*}}) -> tensor<2x6xf32>
// CHECK-NEXT: %[[G:.*]] = "stablehlo.all_gather"(%[[A]])
// CHECK-SAME: all_gather_dim = 0 : i64
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 1, 2, 3]]> : tensor<1x4xi64>
// CHECK-SAME: (tensor<2x6xf32>) -> tensor<8x6xf32>
// CHECK-NEXT: %[[ROWS:.*]] = stablehlo.slice %[[G]] [0:6, 0:6]
// CHECK-NEXT: %[[L:.*]] = stablehlo.cholesky %[[ROWS]], lower = true : tensor<6x6xf32>
// CHECK: %[[WHOLE:.*]] = stablehlo.pad %[[L]], {{.*}} -> tensor<8x6xf32>
// CHECK-NEXT: %[[TABLE:.*]] = stablehlo.constant dense<[0, 2, 4, 6]> : tensor<4xi32>
// CHECK-NEXT: %[[PID:.*]] = stablehlo.partition_id : tensor<ui32>
// CHECK-NEXT: %[[E:.*]] = stablehlo.dynamic_slice %[[TABLE]], %[[PID]], sizes = [1]
// CHECK-NEXT: %[[OFF:.*]] = stablehlo.reshape %[[E]] : (tensor<1xi32>) -> tensor<i32>
// CHECK-NEXT: %[[Z:.*]] = stablehlo.constant dense<0> : tensor<i32>
// CHECK-NEXT: %[[MINE:.*]] = stablehlo.dynamic_slice %[[WHOLE]], %[[OFF]], %[[Z]], sizes = [2, 6] : (tensor<8x6xf32>, tensor<i32>, tensor<i32>) -> tensor<2x6xf32>
// CHECK-NEXT: stablehlo.custom_call @Sharding(%[[MINE]]) {mhlo.sharding = "{manual}"} : (tensor<2x6xf32>) -> tensor<2x6xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @cholesky(%a: tensor<6x6xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<6x6xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %0 = stablehlo.cholesky %a, lower = true : tensor<6x6xf32>
    return %0 : tensor<6x6xf32>
  }
}

// -----

// gather from a row-sharded table (8x4 on 4 devices, 2 rows each) with
// replicated indices: a masked local gather.  Each device clamps the index
// to [0, 7] as gather would, shifts it into its shard (minus 2 * its
// position), gathers from its 2x4 rows, and zeroes the rows whose index is
// outside [0, 2).  Exactly one device contributes each row, so the 4x4
// result is a partial sum; the row-sharded result takes it by a
// reduce_scatter (48 bytes per device) rather than gathering the table (96).

// CHECK-LABEL: func.func public @main
// CHECK: (%[[T:arg[0-9]+]]: tensor<2x4xf32>, %[[I:arg[0-9]+]]: tensor<4x1xi32>) {
// CHECK-NOT: all_gather
// CHECK: %[[C:.*]] = stablehlo.slice %[[I]] [0:4, 0:1]
// CHECK: %[[CL:.*]] = stablehlo.clamp %{{.*}}, %[[C]], %{{.*}} : (tensor<i32>, tensor<4x1xi32>, tensor<i32>) -> tensor<4x1xi32>
// CHECK: stablehlo.constant dense<[0, 1, 2, 3]> : tensor<4xi32>
// CHECK: stablehlo.partition_id
// CHECK: %[[SHIFTED:.*]] = stablehlo.subtract %[[CL]], %{{.*}} : tensor<4x1xi32>
// CHECK: stablehlo.compare GE, %[[SHIFTED]]
// CHECK: stablehlo.compare LT, %[[SHIFTED]]
// CHECK: %[[R:.*]] = "stablehlo.gather"(%[[T]], %{{[0-9]+}})
// CHECK-SAME: slice_sizes = array<i64: 1, 4>
// CHECK-SAME: (tensor<2x4xf32>, tensor<4x1xi32>) -> tensor<4x4xf32>
// CHECK: %[[M:.*]] = stablehlo.broadcast_in_dim %{{.*}}, dims = [0] : (tensor<4xi1>) -> tensor<4x4xi1>
// CHECK: %[[P:.*]] = stablehlo.select %[[M]], %[[R]], %{{.*}} : tensor<4x4xi1>, tensor<4x4xf32>
// CHECK: %[[MINE:.*]] = "stablehlo.reduce_scatter"(%[[P]])
// CHECK-SAME: scatter_dimension = 0 : i64
// CHECK: stablehlo.add
// CHECK: }) : (tensor<4x4xf32>) -> tensor<1x4xf32>
// CHECK-NEXT: sdy.return %[[MINE]] : tensor<1x4xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @gather(%a: tensor<8x4xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                    %i: tensor<4x1xi32> {mhlo.sharding = "{replicated}"})
      -> (tensor<4x4xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %0 = "stablehlo.gather"(%a, %i) {dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 4>, indices_are_sorted = false} : (tensor<8x4xf32>, tensor<4x1xi32>) -> tensor<4x4xf32>
    return %0 : tensor<4x4xf32>
  }
}

// -----

// An opaque custom_call (no rule) sees global values: its sharded operand
// is gathered, it runs on 8x8, and the row-sharded function result takes
// this device's 2 rows of its (replicated) result.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x8xf32>) {
// CHECK-NEXT: %[[G:.*]] = "stablehlo.all_gather"(%[[A]]) {{.*}} : (tensor<2x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: %[[K:.*]] = stablehlo.custom_call @my_kernel(%[[G]]) : (tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: %[[TABLE:.*]] = stablehlo.constant dense<[0, 2, 4, 6]> : tensor<4xi32>
// CHECK: %[[MINE:.*]] = stablehlo.dynamic_slice %[[K]], {{.*}} sizes = [2, 8] : (tensor<8x8xf32>, tensor<i32>, tensor<i32>) -> tensor<2x8xf32>
// CHECK-NEXT: sdy.return %[[MINE]] : tensor<2x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @opaque(%a: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %0 = stablehlo.custom_call @my_kernel(%a) : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}
