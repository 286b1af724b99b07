// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// The output wrapper on a 2x2 (data, model) mesh.  @main keeps its global
// types and says each sharding as an sdy.sharding on the mesh it declares;
// the module drops spmd.mesh and says num_partitions = 4 (2*2) and one
// replica.  The body is one sdy.manual_computation over *every* axis with
// per-device block arguments: x [8,16] split 2-way on dim 0 -> 4x16, w
// [16,32] split 2-way on dim 1 -> 16x16, the replicated bias stays 32.  The
// product [8,32] is [data, model]: 4x16 per device, no collective (the
// contraction is not sharded).  The bias comes back as the block argument.
// The private helper is partitioned into a per-device function (4x16) that
// the body calls.

// CHECK: module attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
// CHECK-NEXT: sdy.mesh @mesh = <["data"=2, "model"=2]>
// CHECK-NEXT: func.func public @main(
// CHECK-SAME: %arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>},
// CHECK-SAME: %arg1: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>},
// CHECK-SAME: %arg2: tensor<32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>})
// CHECK-SAME: -> (tensor<8x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {"model"}]>},
// CHECK-SAME: tensor<32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>})
// CHECK-NEXT: %[[OUT:.*]]:2 = sdy.manual_computation(%arg0, %arg1, %arg2)
// CHECK-SAME: in_shardings=[<@mesh, [{"data"}, {}]>, <@mesh, [{}, {"model"}]>, <@mesh, [{}]>]
// CHECK-SAME: out_shardings=[<@mesh, [{"data"}, {"model"}]>, <@mesh, [{}]>]
// CHECK-SAME: manual_axes={"data", "model"}
// CHECK-SAME: (%[[X:arg[0-9]+]]: tensor<4x16xf32>, %[[W:arg[0-9]+]]: tensor<16x16xf32>, %[[B:arg[0-9]+]]: tensor<32xf32>) {
// CHECK-NEXT: %[[D:.*]] = stablehlo.dot_general %[[X]], %[[W]], contracting_dims = [1] x [0] : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: %[[T:.*]] = func.call @act(%[[D]]) : (tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: sdy.return %[[T]], %[[B]] : tensor<4x16xf32>, tensor<32xf32>
// CHECK-NEXT: } : (tensor<8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> (tensor<8x32xf32>, tensor<32xf32>)
// CHECK-NEXT: return %[[OUT]]#0, %[[OUT]]#1 : tensor<8x32xf32>, tensor<32xf32>
// CHECK-NEXT: }
// CHECK-NEXT: func.func private @act(%[[H:arg[0-9]+]]: tensor<4x16xf32>) -> tensor<4x16xf32> {
// CHECK-NEXT: %[[TH:.*]] = stablehlo.tanh %[[H]] : tensor<4x16xf32>
// CHECK-NEXT: return %[[TH]] : tensor<4x16xf32>
// CHECK-NEXT: }
// CHECK-NEXT: }
// CHECK-NOT: func.func
module attributes {spmd.mesh = #sdy.mesh<["data"=2, "model"=2]>} {
  func.func @layer(%x: tensor<8x16xf32> {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"},
                   %w: tensor<16x32xf32> {mhlo.sharding = "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"},
                   %b: tensor<32xf32> {mhlo.sharding = "{replicated}"})
      -> (tensor<8x32xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"}, tensor<32xf32> {mhlo.sharding = "{replicated}"}) {
    %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
    %1 = func.call @act(%0) : (tensor<8x32xf32>) -> tensor<8x32xf32>
    return %1, %b : tensor<8x32xf32>, tensor<32xf32>
  }
  func.func private @act(%h: tensor<8x32xf32>) -> tensor<8x32xf32> {
    %0 = stablehlo.tanh %h : tensor<8x32xf32>
    return %0 : tensor<8x32xf32>
  }
}

// -----

// manual_axes names every mesh axis, also one that no sharding uses: here
// only `data` splits anything, yet the body is manual over `model` too (a
// device's program is the same along it).

// CHECK-LABEL: // -----
// CHECK: sdy.manual_computation(%arg0)
// CHECK-SAME: in_shardings=[<@mesh, [{"data"}, {}]>] out_shardings=[<@mesh, [{"data"}, {}]>]
// CHECK-SAME: manual_axes={"data", "model"} (%[[A:arg[0-9]+]]: tensor<4x16xf32>)
// CHECK-NEXT: stablehlo.negate %[[A]] : tensor<4x16xf32>
module attributes {spmd.mesh = #sdy.mesh<["data"=2, "model"=2]>} {
  func.func @unused_axis(%x: tensor<8x16xf32> {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"})
      -> (tensor<8x16xf32> {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"}) {
    %0 = stablehlo.negate %x : tensor<8x16xf32>
    return %0 : tensor<8x16xf32>
  }
}

// -----

// Uneven arguments are zero-padded to whole shards before the manual
// computation and uneven results sliced back after it.  On 4 devices:
// a [10,8] on dim 0: ceil(10/4) = 3 rows each, padded 10 -> 12 (high = 2);
// b [8,6] on dim 1: ceil(6/4) = 2 columns each, padded 6 -> 8 (high = 2);
// c [8,8] divides evenly and goes in as it is (2x8 each).  The manual
// computation's operand and result types are the padded ones; the global
// results are sliced to [0:10, 0:8] and [0:8, 0:6].  Nothing moves data.

// CHECK-LABEL: // -----
// CHECK: func.func public @main(%arg0: tensor<10x8xf32> {{.*}}, %arg1: tensor<8x6xf32> {{.*}}, %arg2: tensor<8x8xf32> {{.*}})
// CHECK-NEXT: %[[Z0:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[PA:.*]] = stablehlo.pad %arg0, %[[Z0]], low = [0, 0], high = [2, 0], interior = [0, 0] : (tensor<10x8xf32>, tensor<f32>) -> tensor<12x8xf32>
// CHECK-NEXT: %[[Z1:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[PB:.*]] = stablehlo.pad %arg1, %[[Z1]], low = [0, 0], high = [0, 2], interior = [0, 0] : (tensor<8x6xf32>, tensor<f32>) -> tensor<8x8xf32>
// CHECK-NEXT: %[[OUT:.*]]:3 = sdy.manual_computation(%[[PA]], %[[PB]], %arg2)
// CHECK-SAME: manual_axes={"x"} (%[[A:arg[0-9]+]]: tensor<3x8xf32>, %[[B:arg[0-9]+]]: tensor<8x2xf32>, %[[C:arg[0-9]+]]: tensor<2x8xf32>) {
// CHECK-NOT: stablehlo.all_
// CHECK-NOT: stablehlo.collective
// CHECK: %[[N:.*]] = stablehlo.negate %[[A]] : tensor<3x8xf32>
// CHECK-NEXT: sdy.return %[[N]], %[[B]], %[[C]] : tensor<3x8xf32>, tensor<8x2xf32>, tensor<2x8xf32>
// CHECK-NEXT: } : (tensor<12x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) -> (tensor<12x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>)
// CHECK-NEXT: %[[S0:.*]] = stablehlo.slice %[[OUT]]#0 [0:10, 0:8] : (tensor<12x8xf32>) -> tensor<10x8xf32>
// CHECK-NEXT: %[[S1:.*]] = stablehlo.slice %[[OUT]]#1 [0:8, 0:6] : (tensor<8x8xf32>) -> tensor<8x6xf32>
// CHECK-NEXT: return %[[S0]], %[[S1]], %[[OUT]]#2 : tensor<10x8xf32>, tensor<8x6xf32>, tensor<8x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @uneven(%a: tensor<10x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                    %b: tensor<8x6xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"},
                    %c: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<10x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
          tensor<8x6xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"},
          tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %0 = stablehlo.negate %a : tensor<10x8xf32>
    return %0, %b, %c : tensor<10x8xf32>, tensor<8x6xf32>, tensor<8x8xf32>
  }
}

// -----

// The padding value is a zero of the element type: `false` for i1, `0` for
// integers.  p [6] on 4 devices: 2 each, padded to 8; n [5]: 2 each, padded
// to 8 (high = 3).  A result that is not an argument is sliced the same way.

// CHECK-LABEL: // -----
// CHECK: %[[F:.*]] = stablehlo.constant dense<false> : tensor<i1>
// CHECK-NEXT: %[[PP:.*]] = stablehlo.pad %arg0, %[[F]], low = [0], high = [2], interior = [0] : (tensor<6xi1>, tensor<i1>) -> tensor<8xi1>
// CHECK-NEXT: %[[Z:.*]] = stablehlo.constant dense<0> : tensor<i32>
// CHECK-NEXT: %[[PN:.*]] = stablehlo.pad %arg1, %[[Z]], low = [0], high = [3], interior = [0] : (tensor<5xi32>, tensor<i32>) -> tensor<8xi32>
// CHECK-NEXT: %[[OUT:.*]]:2 = sdy.manual_computation(%[[PP]], %[[PN]])
// CHECK-SAME: (%[[P:arg[0-9]+]]: tensor<2xi1>, %[[N:arg[0-9]+]]: tensor<2xi32>)
// CHECK-NEXT: %[[NOT:.*]] = stablehlo.not %[[P]] : tensor<2xi1>
// CHECK-NEXT: %[[ADD:.*]] = stablehlo.add %[[N]], %[[N]] : tensor<2xi32>
// CHECK-NEXT: sdy.return %[[NOT]], %[[ADD]] : tensor<2xi1>, tensor<2xi32>
// CHECK-NEXT: } : (tensor<8xi1>, tensor<8xi32>) -> (tensor<8xi1>, tensor<8xi32>)
// CHECK-NEXT: stablehlo.slice %[[OUT]]#0 [0:6] : (tensor<8xi1>) -> tensor<6xi1>
// CHECK-NEXT: stablehlo.slice %[[OUT]]#1 [0:5] : (tensor<8xi32>) -> tensor<5xi32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @element_types(%p: tensor<6xi1> {mhlo.sharding = "{devices=[4]<=[4]}"},
                           %n: tensor<5xi32> {mhlo.sharding = "{devices=[4]<=[4]}"})
      -> (tensor<6xi1> {mhlo.sharding = "{devices=[4]<=[4]}"}, tensor<5xi32> {mhlo.sharding = "{devices=[4]<=[4]}"}) {
    %0 = stablehlo.not %p : tensor<6xi1>
    %1 = stablehlo.add %n, %n : tensor<5xi32>
    return %0, %1 : tensor<6xi1>, tensor<5xi32>
  }
}
