// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// XLA's GatherPassthrough: operand dim 1 is indexed, but its slice covers
// the whole dim, so its start is clamped to 0 whatever the index: it is a
// pass-through dim.  Split 4 ways, each device gathers its 4 of the 16
// with the same indices and nothing moves.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<4x4x8xf32>, %[[I:arg[0-9]+]]: tensor<3x2xi32>) {
// CHECK-NOT: all_
// CHECK: %[[G:.*]] = "stablehlo.gather"(%[[A]], %{{[0-9a-z]+}})
// CHECK-SAME: slice_sizes = array<i64: 4, 4, 2>
// CHECK-SAME: (tensor<4x4x8xf32>, tensor<3x2xi32>) -> tensor<3x4x4x2xf32>
// CHECK-NEXT: sdy.return %[[G]] : tensor<3x4x4x2xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @whole_window(%a: tensor<4x16x8xf32> {mhlo.sharding = "{devices=[1,4,1]<=[4]}"},
                          %i: tensor<3x2xi32> {mhlo.sharding = "{replicated}"})
      -> (tensor<3x4x16x2xf32> {mhlo.sharding = "{devices=[1,1,4,1]<=[4]}"}) {
    %0 = "stablehlo.gather"(%a, %i) <{dimension_numbers = #stablehlo.gather<offset_dims = [1, 2, 3], start_index_map = [1, 2], index_vector_dim = 1>, slice_sizes = array<i64: 4, 16, 2>}> : (tensor<4x16x8xf32>, tensor<3x2xi32>) -> tensor<3x4x16x2xf32>
    return %0 : tensor<3x4x16x2xf32>
  }
}

// -----

// XLA's "parallel" gather: index component 0 is an iota along the rows, so
// operand row j is read by index row j, a batching dim in all but name.
// Rows split alike, each device builds its own rows' iota (2k, 2k+1),
// shifts it back by its first row (2k) and gathers locally: no clamp, no
// mask, nothing moved.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x4x2xf32>, %[[C:arg[0-9]+]]: tensor<1x2xi32>) {
// CHECK-NOT: all_
// CHECK: %[[SHIFTED:.*]] = stablehlo.subtract %{{.*}}, %{{.*}} : tensor<1x2xi32>
// CHECK-NOT: stablehlo.clamp
// CHECK-NOT: stablehlo.select
// CHECK: %[[G:.*]] = "stablehlo.gather"(%[[A]], %{{[0-9a-z]+}})
// CHECK-SAME: (tensor<2x4x2xf32>, tensor<2x2xi32>) -> tensor<2x2xf32>
// CHECK-NEXT: sdy.return %[[G]] : tensor<2x2xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @by_position(%a: tensor<8x4x2xf32> {mhlo.sharding = "{devices=[4,1,1]<=[4]}"},
                         %c: tensor<1x8xi32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<8x2xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %rows = stablehlo.iota dim = 1 : tensor<1x8xi32>
    %idx = stablehlo.concatenate %rows, %c, dim = 0 : (tensor<1x8xi32>, tensor<1x8xi32>) -> tensor<2x8xi32>
    %0 = "stablehlo.gather"(%a, %idx) <{dimension_numbers = #stablehlo.gather<
        offset_dims = [1], collapsed_slice_dims = [0, 1], start_index_map = [0, 1],
        index_vector_dim = 0>, slice_sizes = array<i64: 1, 1, 2>}>
      : (tensor<8x4x2xf32>, tensor<2x8xi32>) -> tensor<8x2xf32>
    return %0 : tensor<8x2xf32>
  }
}
