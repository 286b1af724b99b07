// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// A sort along its split dim (16 columns over 4 devices) moves the split to
// the rows instead of gathering the columns: one all_to_all gives each
// device 2 whole rows, it sorts them, and a second all_to_all puts the
// columns back where the result wants them.  Each all_to_all moves 3/4 of a
// device's 8x4 block; a gather would have brought in 3 more blocks.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<8x4xf32>) {
// CHECK-NEXT: %[[ROWS:.*]] = "stablehlo.all_to_all"(%[[A]])
// CHECK-SAME: concat_dimension = 1 : i64
// CHECK-SAME: split_count = 4 : i64, split_dimension = 0 : i64
// CHECK-SAME: (tensor<8x4xf32>) -> tensor<2x16xf32>
// CHECK-NEXT: %[[SORTED:.*]] = "stablehlo.sort"(%[[ROWS]]) <{dimension = 1 : i64, is_stable = true}>
// CHECK: }) : (tensor<2x16xf32>) -> tensor<2x16xf32>
// CHECK-NEXT: %[[BACK:.*]] = "stablehlo.all_to_all"(%[[SORTED]])
// CHECK-SAME: concat_dimension = 0 : i64
// CHECK-SAME: split_count = 4 : i64, split_dimension = 1 : i64
// CHECK-SAME: (tensor<2x16xf32>) -> tensor<8x4xf32>
// CHECK-NEXT: sdy.return %[[BACK]] : tensor<8x4xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @sort_columns(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}) {
    %0 = "stablehlo.sort"(%a) <{dimension = 1 : i64, is_stable = true}> ({
    ^bb0(%l: tensor<f32>, %r: tensor<f32>):
      %lt = stablehlo.compare LT, %l, %r, TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    }) : (tensor<8x16xf32>) -> tensor<8x16xf32>
    return %0 : tensor<8x16xf32>
  }
}

// -----

// Keys and values sorted together move alike: each operand goes through
// its own all_to_all to the same row split, and the results come back.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[K:arg[0-9]+]]: tensor<8x4xf32>, %[[V:arg[0-9]+]]: tensor<8x4xi32>) {
// CHECK-NEXT: %[[KR:.*]] = "stablehlo.all_to_all"(%[[K]])
// CHECK-SAME: (tensor<8x4xf32>) -> tensor<2x16xf32>
// CHECK-NEXT: %[[VR:.*]] = "stablehlo.all_to_all"(%[[V]])
// CHECK-SAME: (tensor<8x4xi32>) -> tensor<2x16xi32>
// CHECK-NEXT: %[[S:.*]]:2 = "stablehlo.sort"(%[[KR]], %[[VR]])
// CHECK: }) : (tensor<2x16xf32>, tensor<2x16xi32>) -> (tensor<2x16xf32>, tensor<2x16xi32>)
// CHECK-NEXT: "stablehlo.all_to_all"(%[[S]]#0)
// CHECK-SAME: (tensor<2x16xf32>) -> tensor<8x4xf32>
// CHECK-NEXT: "stablehlo.all_to_all"(%[[S]]#1)
// CHECK-SAME: (tensor<2x16xi32>) -> tensor<8x4xi32>
// CHECK-NOT: all_gather
// CHECK: sdy.return
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @sort_pairs(%k: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"},
                        %v: tensor<8x16xi32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"},
          tensor<8x16xi32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}) {
    %0:2 = "stablehlo.sort"(%k, %v) <{dimension = 1 : i64, is_stable = true}> ({
    ^bb0(%l: tensor<f32>, %r: tensor<f32>, %li: tensor<i32>, %ri: tensor<i32>):
      %lt = stablehlo.compare LT, %l, %r, TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    }) : (tensor<8x16xf32>, tensor<8x16xi32>) -> (tensor<8x16xf32>, tensor<8x16xi32>)
    return %0#0, %0#1 : tensor<8x16xf32>, tensor<8x16xi32>
  }
}

// -----

// The result is wanted whole: moving the split to the rows would need the
// all_to_all and then gather the sorted rows anyway, so the planner keeps
// the single all_gather of the sorted dim (XLA moves both).

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<8x4xf32>) {
// CHECK-NEXT: %[[W:.*]] = "stablehlo.all_gather"(%[[A]])
// CHECK-SAME: (tensor<8x4xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: "stablehlo.sort"(%[[W]])
// CHECK-NOT: all_to_all
// CHECK: sdy.return
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @sort_to_whole(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<8x16xf32> {mhlo.sharding = "{replicated}"}) {
    %0 = "stablehlo.sort"(%a) <{dimension = 1 : i64, is_stable = true}> ({
    ^bb0(%l: tensor<f32>, %r: tensor<f32>):
      %lt = stablehlo.compare LT, %l, %r, TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    }) : (tensor<8x16xf32>) -> tensor<8x16xf32>
    return %0 : tensor<8x16xf32>
  }
}

// -----

// No other dim takes the split evenly (3 rows over 4 devices): the sorted
// dim is gathered, as XLA does too.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<3x4xf32>) {
// CHECK-NEXT: %[[W:.*]] = "stablehlo.all_gather"(%[[A]])
// CHECK-SAME: (tensor<3x4xf32>) -> tensor<3x16xf32>
// CHECK-NEXT: "stablehlo.sort"(%[[W]])
// CHECK-NOT: all_to_all
// CHECK: sdy.return
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @no_free_dim(%a: tensor<3x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<3x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}) {
    %0 = "stablehlo.sort"(%a) <{dimension = 1 : i64, is_stable = true}> ({
    ^bb0(%l: tensor<f32>, %r: tensor<f32>):
      %lt = stablehlo.compare LT, %l, %r, TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    }) : (tensor<3x16xf32>) -> tensor<3x16xf32>
    return %0 : tensor<3x16xf32>
  }
}
