// RUN: stablehlo-spmd-opt %s --spmd-propagate 2>%t.err | FileCheck %s
// RUN: FileCheck %s --check-prefix=WARN < %t.err

// A module that names no mesh and shards nothing runs on one device.  The
// pass still keeps its promise that every value has a sharding, so the
// partitioner and the runtime read it like any propagated module; an op
// with no rule is no exception.

// WARN: warning: spmd-propagate found no mesh and no shardings: every value is replicated on one device

// CHECK: module attributes {mhlo.num_partitions = 1 : i32, spmd.mesh = #sdy.mesh<["one"=1]>}
// CHECK-LABEL: func.func @no_mesh
// CHECK-SAME: (%[[X:.*]]: tensor<8x8xf32> {mhlo.sharding = "{replicated}"}, %[[Y:.*]]: tensor<8x8xf32> {mhlo.sharding = "{replicated}"})
// CHECK-SAME: -> (tensor<8x8xf32> {mhlo.sharding = "{replicated}"})
// CHECK: %[[OPAQUE:.*]] = stablehlo.custom_call @opaque_kernel(%[[X]], %[[Y]]) {mhlo.sharding = "{replicated}"}
// CHECK: %[[SUM:.*]] = stablehlo.add %[[OPAQUE]], %[[Y]] {mhlo.sharding = "{replicated}"}
// CHECK: return %[[SUM]]
func.func @no_mesh(%x: tensor<8x8xf32>, %y: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = stablehlo.custom_call @opaque_kernel(%x, %y) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %1 = stablehlo.add %0, %y : tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}
