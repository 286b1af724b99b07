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

// A boundary value its shards do not divide keeps XLA's own uneven layout:
// ceil-sized shards, the last ones padded.  sdy.manual_computation only
// takes dims its axes divide, so the frame is GSPMD's manual form instead:
// each argument pinned to its sharding and cut to its shard by
// SPMDFullToShardShape, each result turned back by SPMDShardToFullShape.
// On 4 devices: a [10,8] on dim 0 is 3 rows a device; b [8,6] on dim 1, 2
// columns; c [8,8] divides and takes the same form.  Nothing moves data.

// CHECK-LABEL: // -----
// CHECK: func.func public @main(%arg0: tensor<10x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}, %arg1: tensor<8x6xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}, %arg2: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
// CHECK-SAME: -> (tensor<10x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}, tensor<8x6xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}, tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
// CHECK-NEXT: %[[PA:.*]] = stablehlo.custom_call @Sharding(%arg0) {mhlo.sharding = "{devices=[4,1]<=[4]}"} : (tensor<10x8xf32>) -> tensor<10x8xf32>
// CHECK-NEXT: %[[A:.*]] = stablehlo.custom_call @SPMDFullToShardShape(%[[PA]]) {mhlo.sharding = "{manual}"} : (tensor<10x8xf32>) -> tensor<3x8xf32>
// CHECK-NEXT: %[[PB:.*]] = stablehlo.custom_call @Sharding(%arg1) {mhlo.sharding = "{devices=[1,4]<=[4]}"} : (tensor<8x6xf32>) -> tensor<8x6xf32>
// CHECK-NEXT: %[[B:.*]] = stablehlo.custom_call @SPMDFullToShardShape(%[[PB]]) {mhlo.sharding = "{manual}"} : (tensor<8x6xf32>) -> tensor<8x2xf32>
// CHECK-NEXT: %[[PC:.*]] = stablehlo.custom_call @Sharding(%arg2) {mhlo.sharding = "{devices=[4,1]<=[4]}"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: %[[C:.*]] = stablehlo.custom_call @SPMDFullToShardShape(%[[PC]]) {mhlo.sharding = "{manual}"} : (tensor<8x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: %[[N:.*]] = stablehlo.negate %[[A]] : tensor<3x8xf32>
// CHECK-NEXT: %[[MN:.*]] = stablehlo.custom_call @Sharding(%[[N]]) {mhlo.sharding = "{manual}"} : (tensor<3x8xf32>) -> tensor<3x8xf32>
// CHECK-NEXT: %[[R0:.*]] = stablehlo.custom_call @SPMDShardToFullShape(%[[MN]]) {mhlo.sharding = "{devices=[4,1]<=[4]}"} : (tensor<3x8xf32>) -> tensor<10x8xf32>
// CHECK-NEXT: %[[MB:.*]] = stablehlo.custom_call @Sharding(%[[B]]) {mhlo.sharding = "{manual}"} : (tensor<8x2xf32>) -> tensor<8x2xf32>
// CHECK-NEXT: %[[R1:.*]] = stablehlo.custom_call @SPMDShardToFullShape(%[[MB]]) {mhlo.sharding = "{devices=[1,4]<=[4]}"} : (tensor<8x2xf32>) -> tensor<8x6xf32>
// CHECK-NEXT: %[[MC:.*]] = stablehlo.custom_call @Sharding(%[[C]]) {mhlo.sharding = "{manual}"} : (tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: %[[R2:.*]] = stablehlo.custom_call @SPMDShardToFullShape(%[[MC]]) {mhlo.sharding = "{devices=[4,1]<=[4]}"} : (tensor<2x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: return %[[R0]], %[[R1]], %[[R2]] : tensor<10x8xf32>, tensor<8x6xf32>, tensor<8x8xf32>
// CHECK-NOT: sdy.
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

// Any element type: p [6] i1 on 4 devices, 2 a device (the last holds
// none); n [5] i32, 2 a device (the last holds 1).  Each op runs on its
// shard; nothing is gathered.

// CHECK-LABEL: // -----
// CHECK: %[[P:.*]] = stablehlo.custom_call @SPMDFullToShardShape(%{{.*}}) {mhlo.sharding = "{manual}"} : (tensor<6xi1>) -> tensor<2xi1>
// CHECK: %[[N:.*]] = stablehlo.custom_call @SPMDFullToShardShape(%{{.*}}) {mhlo.sharding = "{manual}"} : (tensor<5xi32>) -> tensor<2xi32>
// CHECK-NEXT: %[[NOT:.*]] = stablehlo.not %[[P]] : tensor<2xi1>
// CHECK-NEXT: %[[ADD:.*]] = stablehlo.add %[[N]], %[[N]] : tensor<2xi32>
// CHECK-NOT: stablehlo.all_
// CHECK: stablehlo.custom_call @SPMDShardToFullShape(%{{.*}}) {mhlo.sharding = "{devices=[4]<=[4]}"} : (tensor<2xi1>) -> tensor<6xi1>
// CHECK: stablehlo.custom_call @SPMDShardToFullShape(%{{.*}}) {mhlo.sharding = "{devices=[4]<=[4]}"} : (tensor<2xi32>) -> tensor<5xi32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @element_types(%p: tensor<6xi1> {mhlo.sharding = "{devices=[4]<=[4]}"},
                           %n: tensor<5xi32> {mhlo.sharding = "{devices=[4]<=[4]}"})
      -> (tensor<6xi1> {mhlo.sharding = "{devices=[4]<=[4]}"}, tensor<5xi32> {mhlo.sharding = "{devices=[4]<=[4]}"}) {
    %0 = stablehlo.not %p : tensor<6xi1>
    %1 = stablehlo.add %n, %n : tensor<5xi32>
    return %0, %1 : tensor<6xi1>, tensor<5xi32>
  }
}
