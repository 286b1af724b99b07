// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// reduce-sum over the sharded dim: each device sums its 8x4 block over
// dim 1, leaving an 8-vector partial sum; the replicated result needs the
// total, so one all_reduce (add) over the 4 devices follows.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<8x4xf32>) {
// CHECK-NEXT: %[[INIT:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[P:.*]] = stablehlo.reduce(%[[A]] init: %[[INIT]]) applies stablehlo.add across dimensions = [1] : (tensor<8x4xf32>, tensor<f32>) -> tensor<8xf32>
// CHECK-NEXT: %[[S:.*]] = "stablehlo.all_reduce"(%[[P]])
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids
// CHECK-NEXT: ^bb0(%[[L:.*]]: tensor<f32>, %[[R:.*]]: tensor<f32>):
// CHECK-NEXT: stablehlo.add %[[L]], %[[R]] : tensor<f32>
// CHECK: }) : (tensor<8xf32>) -> tensor<8xf32>
// CHECK-NEXT: sdy.return %[[S]] : tensor<8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @sharded_dim(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<8xf32> {mhlo.sharding = "{replicated}"}) {
    %cst = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = stablehlo.reduce(%a init: %cst) applies stablehlo.add across dimensions = [1] : (tensor<8x16xf32>, tensor<f32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}

// -----

// reduce over the unsharded dim: each device holds whole rows (2x16), so
// its 2 sums are final and row-sharded like the result.  No collective.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x16xf32>) {
// CHECK-NEXT: %[[INIT:.*]] = stablehlo.constant
// CHECK-NEXT: %[[R:.*]] = stablehlo.reduce(%[[A]] init: %[[INIT]]) applies stablehlo.add across dimensions = [1] : (tensor<2x16xf32>, tensor<f32>) -> tensor<2xf32>
// CHECK-NEXT: sdy.return %[[R]] : tensor<2xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @unsharded_dim(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8xf32> {mhlo.sharding = "{devices=[4]<=[4]}"}) {
    %cst = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = stablehlo.reduce(%a init: %cst) applies stablehlo.add across dimensions = [1] : (tensor<8x16xf32>, tensor<f32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}

// -----

// A max-reduce over the sharded dim finishes with an all_reduce whose
// combiner is maximum, not add.

// CHECK-LABEL: func.func public @main
// CHECK: %[[P:.*]] = stablehlo.reduce({{.*}}) applies stablehlo.maximum across dimensions = [1] : (tensor<8x4xf32>, tensor<f32>) -> tensor<8xf32>
// CHECK-NEXT: %[[S:.*]] = "stablehlo.all_reduce"(%[[P]])
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 1, 2, 3]]> : tensor<1x4xi64>
// CHECK-NEXT: ^bb0(%[[L:.*]]: tensor<f32>, %[[R:.*]]: tensor<f32>):
// CHECK-NEXT: %[[M:.*]] = stablehlo.maximum %[[L]], %[[R]] : tensor<f32>
// CHECK-NEXT: stablehlo.return %[[M]] : tensor<f32>
// CHECK-NEXT: }) : (tensor<8xf32>) -> tensor<8xf32>
// CHECK-NEXT: sdy.return %[[S]] : tensor<8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @max(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<8xf32> {mhlo.sharding = "{replicated}"}) {
    %cst = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %0 = stablehlo.reduce(%a init: %cst) applies stablehlo.maximum across dimensions = [1] : (tensor<8x16xf32>, tensor<f32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}

// -----

// Reduced dim sharded and the result sharded on the same axis: each device
// sums its 4x8 block over dim 0 (an 8-vector partial), then one
// reduce_scatter (add) on dim 0 gives device k elements [2k, 2k+2) of the
// total -- its block of the row-sharded result: 8 -> 2.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<4x8xf32>) {
// CHECK: %[[P:.*]] = stablehlo.reduce(%[[A]] {{.*}} across dimensions = [0] : (tensor<4x8xf32>, tensor<f32>) -> tensor<8xf32>
// CHECK-NEXT: %[[S:.*]] = "stablehlo.reduce_scatter"(%[[P]])
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 1, 2, 3]]> : tensor<1x4xi64>, scatter_dimension = 0 : i64, use_global_device_ids
// CHECK-NEXT: ^bb0(%[[L:.*]]: tensor<f32>, %[[R:.*]]: tensor<f32>):
// CHECK-NEXT: stablehlo.add %[[L]], %[[R]] : tensor<f32>
// CHECK: }) : (tensor<8xf32>) -> tensor<2xf32>
// CHECK-NEXT: sdy.return %[[S]] : tensor<2xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @scatter(%a: tensor<16x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8xf32> {mhlo.sharding = "{devices=[4]<=[4]}"}) {
    %cst = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = stablehlo.reduce(%a init: %cst) applies stablehlo.add across dimensions = [0] : (tensor<16x8xf32>, tensor<f32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}

// -----

// Full reduction of a tensor sharded on both axes of a 2x2 mesh: the
// scalar partial is summed once over all 4 devices (one all_reduce over
// both axes costs less than one per axis).

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<4x8xf32>) {
// CHECK: %[[P:.*]] = stablehlo.reduce(%[[A]] {{.*}} across dimensions = [0, 1] : (tensor<4x8xf32>, tensor<f32>) -> tensor<f32>
// CHECK-NEXT: %[[S:.*]] = "stablehlo.all_reduce"(%[[P]])
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 1, 2, 3]]> : tensor<1x4xi64>
// CHECK: }) : (tensor<f32>) -> tensor<f32>
// CHECK-NEXT: sdy.return %[[S]] : tensor<f32>
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @to_scalar(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"}) -> tensor<f32> {
    %cst = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = stablehlo.reduce(%a init: %cst) applies stablehlo.add across dimensions = [0, 1] : (tensor<8x16xf32>, tensor<f32>) -> tensor<f32>
    return %0 : tensor<f32>
  }
}

// -----

// An uneven reduced dim is reduced in place with its padding masked: 10
// rows over 4 devices are 3 per device, the last holding rows 9, 10, 11 of
// which 10 and 11 are padding -- and after exp they hold exp(0) = 1, which
// a local sum would count.  So before the local reduce each device
// overwrites the rows whose global index 3k + i is not < 10 with the
// reduce's init (0): iota along dim 0, plus its first row's index 3k (from
// the table [0, 3, 6, 9]), compared LT 10, select.  Then the partial 6-vector
// is summed with one all_reduce as for an even split.

// CHECK-LABEL: func.func public @main
// CHECK: %[[A:.*]] = stablehlo.custom_call @SPMDFullToShardShape(%{{.*}}) {mhlo.sharding = "{manual}"} : ({{.*}}) -> tensor<3x6xf32>
// CHECK-NEXT: %[[INIT:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[E:.*]] = stablehlo.exponential %[[A]] : tensor<3x6xf32>
// CHECK-NEXT: %[[TABLE:.*]] = stablehlo.constant dense<[0, 3, 6, 9]> : tensor<4xi32>
// CHECK-NEXT: %[[PID:.*]] = stablehlo.partition_id : tensor<ui32>
// CHECK-NEXT: %[[ENTRY:.*]] = stablehlo.dynamic_slice %[[TABLE]], %[[PID]], sizes = [1]
// CHECK-NEXT: %[[START:.*]] = stablehlo.reshape %[[ENTRY]] : (tensor<1xi32>) -> tensor<i32>
// CHECK-NEXT: %[[ROW:.*]] = stablehlo.iota dim = 0 : tensor<3x6xi32>
// CHECK-NEXT: %[[STARTS:.*]] = stablehlo.broadcast_in_dim %[[START]], dims = [] : (tensor<i32>) -> tensor<3x6xi32>
// CHECK-NEXT: %[[GLOBAL:.*]] = stablehlo.add %[[ROW]], %[[STARTS]] : tensor<3x6xi32>
// CHECK-NEXT: %[[TEN:.*]] = stablehlo.constant dense<10> : tensor<3x6xi32>
// CHECK-NEXT: %[[REAL:.*]] = stablehlo.compare LT, %[[GLOBAL]], %[[TEN]] : (tensor<3x6xi32>, tensor<3x6xi32>) -> tensor<3x6xi1>
// CHECK-NEXT: %[[FILL:.*]] = stablehlo.broadcast_in_dim %[[INIT]], dims = [] : (tensor<f32>) -> tensor<3x6xf32>
// CHECK-NEXT: %[[MASKED:.*]] = stablehlo.select %[[REAL]], %[[E]], %[[FILL]] : tensor<3x6xi1>, tensor<3x6xf32>
// CHECK-NEXT: %[[P:.*]] = stablehlo.reduce(%[[MASKED]] init: %[[INIT]]) applies stablehlo.add across dimensions = [0] : (tensor<3x6xf32>, tensor<f32>) -> tensor<6xf32>
// CHECK-NEXT: %[[S:.*]] = "stablehlo.all_reduce"(%[[P]])
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 1, 2, 3]]> : tensor<1x4xi64>
// CHECK: }) : (tensor<6xf32>) -> tensor<6xf32>
// CHECK-NEXT: stablehlo.custom_call @Sharding(%[[S]]) {mhlo.sharding = "{manual}"} : (tensor<6xf32>) -> tensor<6xf32>
// CHECK-NOT: all_gather
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @uneven(%a: tensor<10x6xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<6xf32> {mhlo.sharding = "{replicated}"}) {
    %cst = stablehlo.constant dense<0.0> : tensor<f32>
    %e = stablehlo.exponential %a : tensor<10x6xf32>
    %0 = stablehlo.reduce(%e init: %cst) applies stablehlo.add across dimensions = [0] : (tensor<10x6xf32>, tensor<f32>) -> tensor<6xf32>
    return %0 : tensor<6xf32>
  }
}

// -----

// A product over split rows has no partial form (`mhlo.sharding` spells
// pending sums, maxes and mins only): each device multiplies its 2 rows, the
// four 8-element products are all-gathered and multiplied again, 8 elements
// a device instead of the 8x8 operand.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x8xf32>) {
// CHECK-NOT: all_gather
// CHECK: %[[MINE:.*]] = stablehlo.reduce(%[[A]] init: %[[ONE:.*]]) applies stablehlo.multiply across dimensions = [0] : (tensor<2x8xf32>, tensor<f32>) -> tensor<8xf32>
// CHECK-NEXT: %[[ROW:.*]] = stablehlo.reshape %[[MINE]] : (tensor<8xf32>) -> tensor<1x8xf32>
// CHECK-NEXT: %[[ALL:.*]] = "stablehlo.all_gather"(%[[ROW]])
// CHECK-SAME: (tensor<1x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[P:.*]] = stablehlo.reduce(%[[ALL]] init: %[[ONE]]) applies stablehlo.multiply across dimensions = [0] : (tensor<4x8xf32>, tensor<f32>) -> tensor<8xf32>
// CHECK-NEXT: sdy.return %[[P]] : tensor<8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @product(%a: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8xf32> {mhlo.sharding = "{replicated}"}) {
    %one = stablehlo.constant dense<1.0> : tensor<f32>
    %0 = stablehlo.reduce(%a init: %one) applies stablehlo.multiply across dimensions = [0] : (tensor<8x8xf32>, tensor<f32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}

// -----

// An all_reduce with no channel runs across replicas, never across
// partitions: each partition's row block meets only the same block, so the
// op runs on the block as it is (XLA's TiledAllReduce), any body.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x3xf32>) {
// CHECK-NEXT: %[[M:.*]] = "stablehlo.all_reduce"(%[[A]]) <{replica_groups = dense<> : tensor<0x0xi64>}>
// CHECK: stablehlo.maximum
// CHECK: }) : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT: sdy.return %[[M]] : tensor<2x3xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=2]>} {
  func.func @cross_replica(%a: tensor<4x3xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"})
      -> (tensor<4x3xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"}) {
    %0 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<> : tensor<0x0xi64>}> ({
    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
      %s = stablehlo.maximum %x, %y : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<4x3xf32>) -> tensor<4x3xf32>
    return %0 : tensor<4x3xf32>
  }
}
