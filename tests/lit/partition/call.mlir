// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// A func.call to a private function stays a call: the callee is partitioned
// once into a per-device private function (one per distinct signature of
// argument and result shardings) that every call site with that signature
// calls from inside the manual body.  Propagation shards a copy of @helper
// per call site; both copies take the rows of their caller, so they merge
// back into one @helper: both calls run on the 2x8 block with no
// collective, and there is one @helper, on 2x8.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x8xf32>) {
// CHECK-NEXT: %[[C1:.*]] = func.call @helper(%[[A]]) : (tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: %[[C2:.*]] = func.call @helper(%[[C1]]) : (tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: sdy.return %[[C2]] : tensor<2x8xf32>
// CHECK: func.func private @helper(%[[X:arg[0-9]+]]: tensor<2x8xf32>) -> tensor<2x8xf32> {
// CHECK-NEXT: %[[E:.*]] = stablehlo.exponential %[[X]] : tensor<2x8xf32>
// CHECK-NEXT: %[[S:.*]] = stablehlo.add %[[E]], %[[X]] : tensor<2x8xf32>
// CHECK-NEXT: return %[[S]] : tensor<2x8xf32>
// CHECK-NOT: func.func
// CHECK-LABEL: // -----
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @caller(%a: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %0 = func.call @helper(%a) : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %1 = func.call @helper(%0) : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %1 : tensor<8x8xf32>
  }
  func.func private @helper(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
    %0 = stablehlo.exponential %x : tensor<8x8xf32>
    %1 = stablehlo.add %0, %x : tensor<8x8xf32>
    return %1 : tensor<8x8xf32>
  }
}

// -----

// One callee, two call sites with differently sharded operands: each site
// gets its own copy of the callee while propagating (as Shardy's flattened
// call graph and XLA's inlining do), so the second site keeps its columns
// and nothing moves.  The two copies differ, so both stay: @h for rows and
// @h_0 for columns.

// CHECK: (%[[A:arg[0-9]+]]: tensor<2x8xf32>, %[[B:arg[0-9]+]]: tensor<8x2xf32>) {
// CHECK-NEXT: %[[E1:.*]] = func.call @h(%[[A]]) : (tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: %[[E2:.*]] = func.call @h_0(%[[B]]) : (tensor<8x2xf32>) -> tensor<8x2xf32>
// CHECK-NEXT: sdy.return %[[E1]], %[[E2]] : tensor<2x8xf32>, tensor<8x2xf32>
// CHECK: func.func private @h(%{{.*}}: tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK: func.func private @h_0(%{{.*}}: tensor<8x2xf32>) -> tensor<8x2xf32>
// CHECK-NOT: func.func
// CHECK-LABEL: // -----
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @two_sites(%a: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                       %b: tensor<8x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<8x8xf32>, tensor<8x8xf32>) {
    %0 = func.call @h(%a) : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %1 = func.call @h(%b) : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %0, %1 : tensor<8x8xf32>, tensor<8x8xf32>
  }
  func.func private @h(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
    %0 = stablehlo.exponential %x : tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// A partial value passed to a callee is summed before the call (a function
// boundary carries full values): 8x4 times 4x8 leaves an 8x8 partial, one
// all_reduce, then the call of @neg on the full 8x8.

// CHECK: (%[[U:arg[0-9]+]]: tensor<8x4xf32>, %[[V:arg[0-9]+]]: tensor<4x8xf32>) {
// CHECK-NEXT: %[[P:.*]] = stablehlo.dot_general %[[U]], %[[V]], {{.*}} -> tensor<8x8xf32>
// CHECK-NEXT: %[[S:.*]] = "stablehlo.all_reduce"(%[[P]])
// CHECK: }) : (tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: %[[N:.*]] = func.call @neg(%[[S]]) : (tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: sdy.return %[[N]] : tensor<8x8xf32>
// CHECK: func.func private @neg(%[[X:arg[0-9]+]]: tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: %[[NEG:.*]] = stablehlo.negate %[[X]] : tensor<8x8xf32>
// CHECK-NEXT: return %[[NEG]] : tensor<8x8xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @partial_argument(%u: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"},
                              %v: tensor<16x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{replicated}"}) {
    %0 = stablehlo.dot_general %u, %v, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
    %1 = func.call @neg(%0) : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %1 : tensor<8x8xf32>
  }
  func.func private @neg(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
    %0 = stablehlo.negate %x : tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}
