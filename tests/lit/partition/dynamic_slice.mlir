// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// A slice at a run-time offset, wanted split on "y" along the dim it slices:
// the dim is read whole, the offset clamped into range before the slice (as
// the op clamps it), and each device then cuts its own column out of the
// slice.  Clamping first keeps the two slices one slice when XLA folds them
// by adding their offsets.  The dim taken whole starts at 0.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<16x8xf32>, %[[I:arg[0-9]+]]: tensor<i32>, %[[J:arg[0-9]+]]: tensor<i32>) {
// CHECK-DAG: %[[ZERO:.*]] = stablehlo.constant dense<0> : tensor<i32>
// CHECK-DAG: %[[LAST:.*]] = stablehlo.constant dense<6> : tensor<i32>
// CHECK: %[[START:.*]] = stablehlo.clamp %{{.*}}, %[[J]], %[[LAST]] : tensor<i32>
// CHECK-NEXT: %[[SLICE:.*]] = stablehlo.dynamic_slice %[[A]], %{{.*}}, %[[START]], sizes = [16, 2]
// CHECK: %[[MINE:.*]] = stablehlo.dynamic_slice %[[SLICE]], %{{.*}}, %{{.*}}, sizes = [16, 1]
// CHECK: sdy.return %[[MINE]]
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @main(%a: tensor<32x8xf32> {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"}, %i: tensor<i32>, %j: tensor<i32>)
      -> (tensor<32x2xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"}) {
    %0 = stablehlo.dynamic_slice %a, %i, %j, sizes = [32, 2] : (tensor<32x8xf32>, tensor<i32>, tensor<i32>) -> tensor<32x2xf32>
    return %0 : tensor<32x2xf32>
  }
}
