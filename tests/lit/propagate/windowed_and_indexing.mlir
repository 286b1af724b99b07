// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate | FileCheck %s

// slice: the untouched dim passes its sharding through; the sliced dim is a
// permutation factor, so its sharding moves too (the partitioner shifts or
// reshards the data along it).

// CHECK-LABEL: func.func @slice
// CHECK: stablehlo.slice %arg0 [0:8, 2:10] {mhlo.sharding = "{devices=[2,2]<=[4]}"}
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @slice(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"}) -> tensor<8x8xf32> {
    %0 = stablehlo.slice %a [0:8, 2:10] : (tensor<8x16xf32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// sort: the sorted dim must stay whole; the other dim keeps its sharding.

// CHECK-LABEL: func.func @sort
// CHECK: "stablehlo.sort"(%arg0)
// CHECK: mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @sort(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"}) -> tensor<8x16xf32> {
    %0 = "stablehlo.sort"(%a) <{dimension = 1 : i64, is_stable = true}> ({
    ^bb0(%l: tensor<f32>, %r: tensor<f32>):
      %lt = stablehlo.compare LT, %l, %r : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    }) : (tensor<8x16xf32>) -> tensor<8x16xf32>
    return %0 : tensor<8x16xf32>
  }
}

// -----

// concatenate of two unrelated tensors along a sharded dim: the split flows
// through to the result (as Shardy's need-replication factor propagates),
// each result shard then being one operand's pieces; the other dim passes
// through.

// CHECK-LABEL: func.func @concat
// CHECK: stablehlo.concatenate %arg0, %arg1, dim = 1 {mhlo.sharding = "{devices=[2,2]<=[4]}"}
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @concat(%a: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"},
                    %b: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"}) -> tensor<8x8xf32> {
    %0 = stablehlo.concatenate %a, %b, dim = 1 : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// An embedding lookup from a vocab-sharded table with batch-sharded ids:
// each device gathers the rows it holds (a masked local gather), so the
// rows come out batch-sharded on x and as a partial sum over y, summed only
// where the tanh needs them whole.

// CHECK-LABEL: func.func @embedding
// CHECK: %[[ROWS:.*]] = "stablehlo.gather"(%arg0, %arg1)
// CHECK-SAME: mhlo.sharding = "{devices=[2,1,1,2]<=[4] last_tile_dims={unreduced}}"
// CHECK: %[[SUM:.*]] = stablehlo.custom_call @Sharding(%[[ROWS]]) {mhlo.sharding = "{devices=[2,1,1,2]<=[4] last_tile_dim_replicate}"}
// CHECK: stablehlo.tanh %[[SUM]]
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @embedding(%table: tensor<16x8xf32> {mhlo.sharding = "{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}"},
                       %ids: tensor<4x6x1xi32> {mhlo.sharding = "{devices=[2,1,1,2]<=[4] last_tile_dim_replicate}"}) -> tensor<4x6x8xf32> {
    %0 = "stablehlo.gather"(%table, %ids) <{dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 8>}> : (tensor<16x8xf32>, tensor<4x6x1xi32>) -> tensor<4x6x8xf32>
    %1 = stablehlo.tanh %0 : tensor<4x6x8xf32>
    return %1 : tensor<4x6x8xf32>
  }
}

// -----

// A batch-sharded convolution: the output is batch-sharded; the 3x3 window
// makes the spatial dims permutation factors, which stay unsharded here.

// CHECK-LABEL: func.func @conv
// CHECK: stablehlo.convolution(%arg0, %arg1){{.*}}mhlo.sharding = "{devices=[4,1,1,1]<=[4]}"
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @conv(%x: tensor<8x6x6x3xf32> {mhlo.sharding = "{devices=[4,1,1,1]<=[4]}"}, %w: tensor<3x3x3x4xf32>) -> tensor<8x6x6x4xf32> {
    %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [1, 1], pad = [[1, 1], [1, 1]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x6x6x3xf32>, tensor<3x3x3x4xf32>) -> tensor<8x6x6x4xf32>
    return %0 : tensor<8x6x6x4xf32>
  }
}
