// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// jax.checkpoint's form: the forward reads %x and %w, and the backward
// recomputes from the barrier's results.  The barrier carries three values
// split on one mesh axis at once (%w's rows on "data", %x's rows on "data",
// %u's columns and %v's rows on "model"): each keeps its own sharding,
// where one rule over all operands would let "model" split one of them and
// gather the rest.  Nothing the forward made is handed to the barrier: it
// takes the arguments as they are, and the recomputed product slices and
// gathers the barrier's copy of %w again, after it (the forward's slice of
// %w, made for the forward's product, is not reused across the barrier).

// CHECK-LABEL: func.func public @main
// CHECK: (%[[X:arg[0-9]+]]: tensor<4x16xf32>, %[[W:arg[0-9]+]]: tensor<8x16xf32>, %[[U:arg[0-9]+]]: tensor<16x8xf32>, %[[V:arg[0-9]+]]: tensor<8x16xf32>) {
// CHECK: %[[FWD_W:.*]] = stablehlo.dynamic_slice %[[W]]
// CHECK: stablehlo.dot_general %{{.*}}, %[[FWD_W]]
// CHECK: %[[B:.*]]:4 = stablehlo.optimization_barrier %[[X]], %[[W]], %[[U]], %[[V]] : tensor<4x16xf32>, tensor<8x16xf32>, tensor<16x8xf32>, tensor<8x16xf32>
// CHECK-NOT: %[[FWD_W]]
// CHECK: %[[REMADE_W:.*]] = stablehlo.dynamic_slice %[[B]]#1
// CHECK-NEXT: %[[GATHERED_W:.*]] = "stablehlo.all_gather"(%[[REMADE_W]])
// CHECK-NEXT: %[[Y2:.*]] = stablehlo.dot_general %[[B]]#0, %[[GATHERED_W]]
// CHECK-NEXT: %[[Y2_FULL:.*]] = "stablehlo.all_gather"(%[[Y2]])
// CHECK-NEXT: %[[H:.*]] = stablehlo.dot_general %[[Y2_FULL]], %[[B]]#2
// CHECK-NEXT: stablehlo.dot_general %[[H]], %[[B]]#3
module attributes {spmd.mesh = #sdy.mesh<["data"=2, "model"=2]>} {
  func.func @remat(%x: tensor<8x16xf32> {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"},
                   %w: tensor<16x16xf32> {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"},
                   %u: tensor<16x16xf32> {mhlo.sharding = "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"},
                   %v: tensor<16x16xf32> {mhlo.sharding = "{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}"})
      -> (tensor<8x16xf32> {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"},
          tensor<8x16xf32> {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"}) {
    %y = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
    %b:4 = stablehlo.optimization_barrier %x, %w, %u, %v : tensor<8x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>
    %y2 = stablehlo.dot_general %b#0, %b#1, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
    %h = stablehlo.dot_general %y2, %b#2, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
    %o = stablehlo.dot_general %h, %b#3, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
    return %y, %o : tensor<8x16xf32>, tensor<8x16xf32>
  }
}
