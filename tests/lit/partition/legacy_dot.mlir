// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// The legacy stablehlo.dot (what XLA's HLO dot converts to) partitions like
// dot_general.  Here XLA's MatchOutputPartitioningForContractingRHS shape,
// scaled down: the contracting dim k is split 4 ways (y) on both operands
// and the rhs's n 2 ways (x); the result wants n over all 8 devices.  Each
// device multiplies its own blocks (no operand moves), leaving a partial
// [16, 8] product over y, and one reduce_scatter over y sums it onto the
// rest of n's split: [16, 8] -> [16, 2].

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<16x8xf32>, %[[B:arg[0-9]+]]: tensor<8x8xf32>) {
// CHECK-NOT: stablehlo.all_gather
// CHECK: %[[P:.*]] = stablehlo.dot %[[A]], %[[B]] : (tensor<16x8xf32>, tensor<8x8xf32>) -> tensor<16x8xf32>
// CHECK-NEXT: %[[S:.*]] = "stablehlo.reduce_scatter"(%[[P]])
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 1, 2, 3], [4, 5, 6, 7]]> : tensor<2x4xi64>, scatter_dimension = 1 : i64
// CHECK: (tensor<16x8xf32>) -> tensor<16x2xf32>
// CHECK-NEXT: sdy.return %[[S]] : tensor<16x2xf32>
// CHECK-NOT: stablehlo.all_
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=4]>} {
  func.func @main(%a: tensor<16x32xf32> {mhlo.sharding = "{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}"},
                  %b: tensor<32x16xf32> {mhlo.sharding = "{devices=[4,2]<=[2,4]T(1,0)}"})
      -> (tensor<16x16xf32> {mhlo.sharding = "{devices=[1,8]<=[8]}"}) {
    %0 = stablehlo.dot %a, %b : (tensor<16x32xf32>, tensor<32x16xf32>) -> tensor<16x16xf32>
    return %0 : tensor<16x16xf32>
  }
}
