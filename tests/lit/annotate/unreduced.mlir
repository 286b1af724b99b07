// RUN: stablehlo-spmd-opt %s --spmd-annotate=rules=%inputs/unreduced.toml | FileCheck %s

// Unreduced (Partial) axes print as XLA's last_tile_dims={unreduced}; the
// expected string is NamedSharding's for P(None, 'data', unreduced={'model'}).

// CHECK: func.func @main(%[[P:.*]]: tensor<8x8xf32> {mhlo.sharding = "{devices=[1,2,4]<=[8] last_tile_dims={unreduced}}"}
// CHECK-SAME: %[[Q:.*]]: tensor<8x8xf32> {mhlo.sharding = "{replicated}"}
// CHECK: stablehlo.add %[[P]], %[[Q]]
func.func @main(%arg0: tensor<8x8xf32> loc("partial"), %arg1: tensor<8x8xf32> loc("full")) -> tensor<8x8xf32> {
  %0 = stablehlo.add %arg0, %arg1 : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
