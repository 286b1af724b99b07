// RUN: stablehlo-spmd-opt %s --split-input-file --pass-pipeline='builtin.module(spmd-propagate{completion=local},spmd-partition)' | FileCheck %s

// These check how the partitioner makes constants in the layouts the greedy
// pass gives them (completion=local); the whole-program completion may lay
// a constant out whole instead, which moves as little.

// A value made from nothing (an iota, a constant) costs nothing to read in
// a new layout: every device makes its own block of it.  The dot reads one
// iota as both operands, rows over x on the left and rows over y on the
// right, so its result lands in the [x, y] layout the add wants with no
// collective at all (a plan that moved the iota, or summed a split
// contraction, was priced cheaper before operand moves knew this).

// CHECK-LABEL: func.func public @main
// CHECK: %[[LHS:.*]] = stablehlo.iota dim = 1 : tensor<4x16xf32>
// CHECK: %[[RHS:.*]] = stablehlo.iota dim = 1 : tensor<4x16xf32>
// CHECK: %[[GRAM:.*]] = stablehlo.dot_general %[[LHS]], %[[RHS]], contracting_dims = [1] x [1] : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x4xf32>
// CHECK-NOT: all_
// CHECK-NOT: reduce_scatter
// CHECK: stablehlo.add %[[GRAM]], %arg1 : tensor<4x4xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @gram_of_an_iota(%bias: tensor<8x8xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"}) {
    %w = stablehlo.iota dim = 1 : tensor<8x16xf32>
    %gram = stablehlo.dot_general %w, %w, contracting_dims = [1] x [1] : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x8xf32>
    %sum = stablehlo.add %gram, %bias : tensor<8x8xf32>
    return %sum : tensor<8x8xf32>
  }
}

// -----

// The same with a dense constant: each operand is the device's row block,
// sliced out of the whole constant by its own table of offsets, and
// nothing moves between devices.  Device d = 2x + y starts its left rows at
// 2x(d) and its right rows at 2y(d).

// CHECK-LABEL: // -----
// CHECK: %[[LEFT_TABLE:.*]] = stablehlo.constant dense<[0, 0, 2, 2]> : tensor<4xi32>
// CHECK: %[[LEFT:.*]] = stablehlo.dynamic_slice %{{.*}}, %{{.*}}, %{{.*}}, sizes = [2, 2] : (tensor<4x2xf32>
// CHECK: %[[RIGHT_TABLE:.*]] = stablehlo.constant dense<[0, 2, 0, 2]> : tensor<4xi32>
// CHECK: %[[RIGHT:.*]] = stablehlo.dynamic_slice %{{.*}}, %{{.*}}, %{{.*}}, sizes = [2, 2] : (tensor<4x2xf32>
// CHECK-NOT: all_
// CHECK-NOT: reduce_scatter
// CHECK-NOT: collective_permute
// CHECK: stablehlo.dot_general %[[LEFT]], %[[RIGHT]], contracting_dims = [1] x [1] : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
// CHECK-NOT: all_
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @gram_of_a_constant(%bias: tensor<4x4xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"})
      -> (tensor<4x4xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"}) {
    %w = stablehlo.constant dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]> : tensor<4x2xf32>
    %gram = stablehlo.dot_general %w, %w, contracting_dims = [1] x [1] : (tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x4xf32>
    %sum = stablehlo.add %gram, %bias : tensor<4x4xf32>
    return %sum : tensor<4x4xf32>
  }
}
