// RUN: stablehlo-spmd-opt %s --spmd-annotate=rules=%inputs/permuted_mesh.toml | FileCheck %s

// A mesh with an explicit device order (PyTorch/XLA's device_ids) writes
// explicit device lists: devices [[0, 2], [1, 3]] tile the two dimensions.

// CHECK: spmd.mesh = #sdy.mesh<["a"=2, "b"=2], device_ids=[0, 2, 1, 3]>
// CHECK: func.func @main(%[[A:.*]]: tensor<4x4xf32> {mhlo.sharding = "{devices=[2,2]0,2,1,3}"})
// CHECK-NEXT: return %[[A]]
func.func @main(%arg0: tensor<4x4xf32>) -> tensor<4x4xf32> {
  return %arg0 : tensor<4x4xf32>
}
