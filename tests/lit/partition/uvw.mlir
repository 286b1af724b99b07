// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s
// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition --canonicalize --cse | FileCheck %s

// (U@V)@W with U's columns and V's rows (the contracting dim, 32) over 4
// devices and W replicated.  Each device forms its 64x64 partial of U@V
// (64x8 times 8x64); a dot with a replicated W is linear in it, so the
// partial flows on into the 64x8 product (64x64 times 64x8), and the one
// sum the replicated result needs is taken there: exactly one all_reduce,
// on 64x8 -- not on the 8x larger 64x64 U@V.  The mesh is the one the
// tile assignments imply, axis_0 = 4.  Canonicalize + CSE keep it so.

// CHECK-LABEL: func.func public @main
// CHECK-SAME: %arg0: tensor<64x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"axis_0"}]>}
// CHECK: manual_axes={"axis_0"} (%[[U:arg[0-9]+]]: tensor<64x8xf32>, %[[V:arg[0-9]+]]: tensor<8x64xf32>, %[[W:arg[0-9]+]]: tensor<64x8xf32>) {
// CHECK-NOT: all_reduce
// CHECK: %[[UV:.*]] = stablehlo.dot_general %[[U]], %[[V]], contracting_dims = [1] x [0] : (tensor<64x8xf32>, tensor<8x64xf32>) -> tensor<64x64xf32>
// CHECK-NOT: all_reduce
// CHECK: %[[UVW:.*]] = stablehlo.dot_general %[[UV]], %[[W]], contracting_dims = [1] x [0] : (tensor<64x64xf32>, tensor<64x8xf32>) -> tensor<64x8xf32>
// CHECK-NEXT: %[[SUM:.*]] = "stablehlo.all_reduce"(%[[UVW]])
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 1, 2, 3]]> : tensor<1x4xi64>
// CHECK: }) : (tensor<64x8xf32>) -> tensor<64x8xf32>
// CHECK-NEXT: sdy.return %[[SUM]] : tensor<64x8xf32>
// CHECK-NOT: all_reduce
// CHECK-NOT: all_gather
// CHECK-NOT: reduce_scatter
func.func @uvw(%u: tensor<64x32xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"},
               %v: tensor<32x64xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
               %w: tensor<64x8xf32> {mhlo.sharding = "{replicated}"})
    -> (tensor<64x8xf32> {mhlo.sharding = "{replicated}"}) {
  %0 = stablehlo.dot_general %u, %v, contracting_dims = [1] x [0] : (tensor<64x32xf32>, tensor<32x64xf32>) -> tensor<64x64xf32>
  %1 = stablehlo.dot_general %0, %w, contracting_dims = [1] x [0] : (tensor<64x64xf32>, tensor<64x8xf32>) -> tensor<64x8xf32>
  return %1 : tensor<64x8xf32>
}
