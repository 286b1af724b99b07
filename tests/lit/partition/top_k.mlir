// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// top_k along the sharded dim (16 split 4 ways, k = 2 <= 4 per shard): each
// device takes the top 2 of its 4 columns, shifts their indices by its
// offset (device index * 4), and only those 2 candidates per row (values
// and indices, 8x2 each) are all-gathered; a final top_k over the 8
// candidates picks the values, and a gather picks the indices at the
// positions it chose.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<8x4xf32>) {
// CHECK-NEXT: %[[V:.*]], %[[I:.*]] = chlo.top_k(%[[A]], k = 2) : tensor<8x4xf32> -> (tensor<8x2xf32>, tensor<8x2xi32>)
// CHECK: %[[SHARD:.*]] = stablehlo.constant dense<4> : tensor<i32>
// CHECK-NEXT: %[[OFF:.*]] = stablehlo.multiply %{{.*}}, %[[SHARD]] : tensor<i32>
// CHECK-NEXT: %[[OFFS:.*]] = stablehlo.broadcast_in_dim %[[OFF]], dims = [] : (tensor<i32>) -> tensor<8x2xi32>
// CHECK-NEXT: %[[GI:.*]] = stablehlo.add %[[I]], %[[OFFS]] : tensor<8x2xi32>
// CHECK-NEXT: %[[CV:.*]] = "stablehlo.all_gather"(%[[V]])
// CHECK-SAME: all_gather_dim = 1
// CHECK-SAME: replica_groups = dense<{{\[\[}}0, 1, 2, 3]]>
// CHECK-SAME: (tensor<8x2xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: %[[CI:.*]] = "stablehlo.all_gather"(%[[GI]])
// CHECK-SAME: (tensor<8x2xi32>) -> tensor<8x8xi32>
// CHECK-NEXT: %[[FV:.*]], %[[POS:.*]] = chlo.top_k(%[[CV]], k = 2) : tensor<8x8xf32> -> (tensor<8x2xf32>, tensor<8x2xi32>)
// CHECK-NEXT: %[[FI:.*]] = "stablehlo.gather"(%[[CI]], %[[POS]])
// CHECK-SAME: collapsed_slice_dims = [1], operand_batching_dims = [0], start_indices_batching_dims = [0], start_index_map = [1], index_vector_dim = 2
// CHECK-SAME: (tensor<8x8xi32>, tensor<8x2xi32>) -> tensor<8x2xi32>
// CHECK-NEXT: sdy.return %[[FV]], %[[FI]] : tensor<8x2xf32>, tensor<8x2xi32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @top_k(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<8x2xf32> {mhlo.sharding = "{replicated}"}, tensor<8x2xi32> {mhlo.sharding = "{replicated}"}) {
    %values, %indices = chlo.top_k(%a, k = 2) : tensor<8x16xf32> -> (tensor<8x2xf32>, tensor<8x2xi32>)
    return %values, %indices : tensor<8x2xf32>, tensor<8x2xi32>
  }
}


// -----

// Uneven: 10 split 4 ways gives shards of 3, zero-padded to 12.  Before the
// local top_k the padding (global position >= 10) is overwritten with the
// lowest float in top_k's total order (the all-ones -NaN), so it loses to
// every real element, -inf and -NaN included.

// CHECK-LABEL: func.func public @main
// CHECK: %[[LOW:.*]] = stablehlo.constant dense<0xFFFFFFFF> : tensor<f32>
// CHECK: %[[POS:.*]] = stablehlo.add
// CHECK-NEXT: %[[LIMIT:.*]] = stablehlo.constant dense<10> : tensor<8x3xi32>
// CHECK-NEXT: %[[IN:.*]] = stablehlo.compare LT, %[[POS]], %[[LIMIT]]
// CHECK-NEXT: %[[FILL:.*]] = stablehlo.broadcast_in_dim %[[LOW]], dims = [] : (tensor<f32>) -> tensor<8x3xf32>
// CHECK-NEXT: %[[M:.*]] = stablehlo.select %[[IN]], %{{[a-z0-9]+}}, %[[FILL]] : tensor<8x3xi1>, tensor<8x3xf32>
// CHECK-NEXT: %[[V:.*]], %[[I:.*]] = chlo.top_k(%[[M]], k = 2) : tensor<8x3xf32> -> (tensor<8x2xf32>, tensor<8x2xi32>)
// CHECK: "stablehlo.all_gather"(%[[V]])
// CHECK-SAME: (tensor<8x2xf32>) -> tensor<8x8xf32>
// CHECK: chlo.top_k(%{{.*}}, k = 2) : tensor<8x8xf32>

module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @uneven(%a: tensor<8x10xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<8x2xf32> {mhlo.sharding = "{replicated}"}, tensor<8x2xi32> {mhlo.sharding = "{replicated}"}) {
    %values, %indices = chlo.top_k(%a, k = 2) : tensor<8x10xf32> -> (tensor<8x2xf32>, tensor<8x2xi32>)
    return %values, %indices : tensor<8x2xf32>, tensor<8x2xi32>
  }
}

// -----

// k = 3 does not fit in a shard of 2: the dim is gathered whole and one
// top_k runs on it (the rule-driven path).

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<8x2xf32>) {
// CHECK-NEXT: %[[W:.*]] = "stablehlo.all_gather"(%[[A]])
// CHECK-SAME: (tensor<8x2xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: %{{.*}}, %{{.*}} = chlo.top_k(%[[W]], k = 3) : tensor<8x16xf32> -> (tensor<8x3xf32>, tensor<8x3xi32>)
// CHECK-NOT: chlo.top_k
// CHECK: sdy.return
module attributes {spmd.mesh = #sdy.mesh<["x"=8]>} {
  func.func @k_over_shard(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,8]<=[8]}"})
      -> (tensor<8x3xf32> {mhlo.sharding = "{replicated}"}, tensor<8x3xi32> {mhlo.sharding = "{replicated}"}) {
    %values, %indices = chlo.top_k(%a, k = 3) : tensor<8x16xf32> -> (tensor<8x3xf32>, tensor<8x3xi32>)
    return %values, %indices : tensor<8x3xf32>, tensor<8x3xi32>
  }
}

// -----

// XLA's TopK custom call (k = 2 from its result type) takes the same route
// as chlo.top_k: a local TopK per shard of 4, the 2 candidates per row and
// their global indices all-gathered, a final TopK over the 8, and a gather
// of the indices it picked.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<8x4xf32>) {
// CHECK-NEXT: %[[L:.*]]:2 = stablehlo.custom_call @TopK(%[[A]]) : (tensor<8x4xf32>) -> (tensor<8x2xf32>, tensor<8x2xi32>)
// CHECK: %[[GI:.*]] = stablehlo.add %[[L]]#1, %{{.*}} : tensor<8x2xi32>
// CHECK-NEXT: %[[CV:.*]] = "stablehlo.all_gather"(%[[L]]#0)
// CHECK-SAME: (tensor<8x2xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: %[[CI:.*]] = "stablehlo.all_gather"(%[[GI]])
// CHECK-SAME: (tensor<8x2xi32>) -> tensor<8x8xi32>
// CHECK-NEXT: %[[F:.*]]:2 = stablehlo.custom_call @TopK(%[[CV]]) : (tensor<8x8xf32>) -> (tensor<8x2xf32>, tensor<8x2xi32>)
// CHECK-NEXT: %[[FI:.*]] = "stablehlo.gather"(%[[CI]], %[[F]]#1)
// CHECK: sdy.return %[[F]]#0, %[[FI]] : tensor<8x2xf32>, tensor<8x2xi32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @top_k_call(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<8x2xf32> {mhlo.sharding = "{replicated}"}, tensor<8x2xi32> {mhlo.sharding = "{replicated}"}) {
    %0:2 = stablehlo.custom_call @TopK(%a) : (tensor<8x16xf32>) -> (tensor<8x2xf32>, tensor<8x2xi32>)
    return %0#0, %0#1 : tensor<8x2xf32>, tensor<8x2xi32>
  }
}

// -----

// XLA's TopK as its HLO -> StableHLO converter writes it: one tuple-typed
// result that get_tuple_element ops read (they carry the shardings).  The
// call is given one result per element and each sharded read becomes a
// constraint, so the rows stay split and each device ranks its own row; the
// replicated results then gather the 8x2 winners, not the 8x64 input.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<1x64xf32>) {
// CHECK-NOT: all_gather
// CHECK: %[[V:.*]]:2 = stablehlo.custom_call @TopK(%[[A]]){{.*}} : (tensor<1x64xf32>) -> (tensor<1x2xf32>, tensor<1x2xi32>)
// CHECK-DAG: "stablehlo.all_gather"(%[[V]]#0){{.*}} : (tensor<1x2xf32>) -> tensor<8x2xf32>
// CHECK-DAG: "stablehlo.all_gather"(%[[V]]#1){{.*}} : (tensor<1x2xi32>) -> tensor<8x2xi32>
module attributes {spmd.mesh = #sdy.mesh<["x"=8]>} {
  func.func @tuple_top_k(%a: tensor<8x64xf32> {mhlo.sharding = "{devices=[8,1]<=[8]}"})
      -> (tensor<8x2xf32> {mhlo.sharding = "{replicated}"}, tensor<8x2xi32> {mhlo.sharding = "{replicated}"}) {
    %0 = stablehlo.custom_call @TopK(%a) {backend_config = "", xla_shape = "(f32[8,2]{1,0}, s32[8,2]{1,0})"} : (tensor<8x64xf32>) -> tuple<tensor<8x2xf32>, tensor<8x2xi32>>
    %1 = stablehlo.get_tuple_element %0[0] {mhlo.sharding = "{devices=[8,1]<=[8]}"} : (tuple<tensor<8x2xf32>, tensor<8x2xi32>>) -> tensor<8x2xf32>
    %2 = stablehlo.get_tuple_element %0[1] {mhlo.sharding = "{devices=[8,1]<=[8]}"} : (tuple<tensor<8x2xf32>, tensor<8x2xi32>>) -> tensor<8x2xi32>
    return %1, %2 : tensor<8x2xf32>, tensor<8x2xi32>
  }
}
