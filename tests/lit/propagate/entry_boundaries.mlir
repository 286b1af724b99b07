// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate | FileCheck %s

// An entry point's argument or result that propagation shards is split
// only by its leading whole axes that divide it evenly: JAX places only
// arrays that divide evenly (Shardy's export does the same).  The ops inside
// keep the uneven split they propagated.  4 rows divide over "b" (2), then
// 2 do not over "c" (3): %x and the first result keep "b".  3 rows do not
// divide over "b" at all, 9 columns do over "c": %y and the second result
// keep "c" on columns only.

// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg0: tensor<4x9xf32> {mhlo.sharding = "{devices=[2,1,3]<=[6] last_tile_dim_replicate}"}
// CHECK-SAME: %arg1: tensor<3x9xf32> {mhlo.sharding = "{devices=[1,3,2]<=[2,3]T(1,0) last_tile_dim_replicate}"}
// CHECK-SAME: -> (tensor<4x9xf32> {mhlo.sharding = "{devices=[2,1,3]<=[6] last_tile_dim_replicate}"}, tensor<3x9xf32> {mhlo.sharding = "{devices=[1,3,2]<=[2,3]T(1,0) last_tile_dim_replicate}"})
// CHECK: %[[A:.*]] = stablehlo.add %arg0, %arg0 {mhlo.sharding = "{devices=[6,1]<=[6]}"}
// CHECK: %[[B:.*]] = stablehlo.add %arg1, %arg1 {mhlo.sharding = "{devices=[2,3]<=[6]}"}
// CHECK: return %[[A]], %[[B]]
sdy.mesh @mesh = <["b"=2, "c"=3]>
func.func @main(%x: tensor<4x9xf32>, %y: tensor<3x9xf32>) -> (tensor<4x9xf32>, tensor<3x9xf32>) {
  %0 = stablehlo.add %x, %x {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"b", "c"}, {}]>]>} : tensor<4x9xf32>
  %1 = stablehlo.add %y, %y {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"b"}, {"c"}]>]>} : tensor<3x9xf32>
  return %0, %1 : tensor<4x9xf32>, tensor<3x9xf32>
}

// -----

// A private callee's boundary is internal (XLA inlines it): it keeps the
// uneven split.  So does an uneven split the user gave in XLA's own
// spelling, which XLA pads.  The entry's result, which propagation chose,
// is returned whole.

// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg0: tensor<6x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}
// CHECK-SAME: -> (tensor<6x8xf32> {mhlo.sharding = "{replicated}"})
// CHECK: func.func private @twice(%arg0: tensor<6x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> (tensor<6x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @main(%v: tensor<6x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> tensor<6x8xf32> {
    %0 = func.call @twice(%v) : (tensor<6x8xf32>) -> tensor<6x8xf32>
    return %0 : tensor<6x8xf32>
  }
  func.func private @twice(%v: tensor<6x8xf32>) -> tensor<6x8xf32> {
    %0 = stablehlo.add %v, %v : tensor<6x8xf32>
    return %0 : tensor<6x8xf32>
  }
}

// -----

// A Shardy sharding the user closed on an entry argument is evened out
// too, as Shardy's export does, keeping the part of an axis that divides:
// 2 rows over "x" (4) keep its major half, the sub-axis "x":(1)2, and the
// module's mesh is cut there.  The add inside keeps all of "x".

// CHECK: spmd.mesh = #sdy.mesh<["x:(1)2"=2, "x:(2)2"=2]>
// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg0: tensor<2x8xf32> {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"}
// CHECK: stablehlo.add %arg0, %arg0 {mhlo.sharding = "{devices=[4,1]<=[4]}"}
sdy.mesh @mesh = <["x"=4]>
func.func @main(%v: tensor<2x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> tensor<2x8xf32> {
  %0 = stablehlo.add %v, %v : tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}
