// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate | FileCheck %s

// Each call site shards its own copy of the callee, as Shardy's flattened
// call graph and XLA's inlining let it: the row-sharded site keeps rows, the
// column-sharded site columns, and neither is moved into the other's
// layout.  The two copies differ, so both stay; the first site keeps the
// callee's name.

// CHECK-LABEL: func.func @two_layouts
// CHECK: %[[R:.*]] = call @scale(%arg0) {mhlo.sharding = "{devices=[4,1]<=[4]}"}
// CHECK: %[[C:.*]] = call @scale_0(%arg1) {mhlo.sharding = "{devices=[1,4]<=[4]}"}
// CHECK: return %[[R]], %[[C]]
// CHECK-DAG: func.func private @scale(%arg0: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
// CHECK-DAG: func.func private @scale_0(%arg0: tensor<8x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}) -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @two_layouts(%rows: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                         %cols: tensor<8x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<8x8xf32>, tensor<8x8xf32>) {
    %0 = func.call @scale(%rows) : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %1 = func.call @scale(%cols) : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %0, %1 : tensor<8x8xf32>, tensor<8x8xf32>
  }
  func.func private @scale(%v: tensor<8x8xf32>) -> tensor<8x8xf32> {
    %0 = stablehlo.add %v, %v : tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// Copies that come out the same merge back into the one callee.

// CHECK-LABEL: func.func @one_layout
// CHECK: %[[A:.*]] = call @scale(%arg0)
// CHECK: call @scale(%[[A]])
// CHECK: func.func private @scale(
// CHECK-NOT: func.func
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @one_layout(%rows: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> tensor<8x8xf32> {
    %0 = func.call @scale(%rows) : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %1 = func.call @scale(%0) : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %1 : tensor<8x8xf32>
  }
  func.func private @scale(%v: tensor<8x8xf32>) -> tensor<8x8xf32> {
    %0 = stablehlo.add %v, %v : tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// A callee called from a callee and from the entry: the inner call was
// there first (callees are taken before their callers, as Shardy walks
// them), so it keeps @inner and the entry's call gets the copy.  A site's
// copy carries the copies of what it calls in turn: @outer's sharding
// constraint reaches only its own @inner, and the entry's @inner_0 keeps
// the rows the entry gives it.

// CHECK-LABEL: func.func @nested
// CHECK: call @outer(%arg0) {mhlo.sharding = "{devices=[1,4]<=[4]}"}
// CHECK: call @inner_0(%arg0) {mhlo.sharding = "{devices=[4,1]<=[4]}"}
// CHECK-DAG: func.func private @inner(%arg0: tensor<8x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
// CHECK-DAG: func.func private @inner_0(%arg0: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
// CHECK-DAG: func.func private @outer(
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @nested(%rows: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x8xf32>, tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %0 = func.call @outer(%rows) : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %1 = func.call @inner(%rows) : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %0, %1 : tensor<8x8xf32>, tensor<8x8xf32>
  }
  func.func private @outer(%v: tensor<8x8xf32>) -> tensor<8x8xf32> {
    %0 = stablehlo.custom_call @Sharding(%v) {mhlo.sharding = "{devices=[1,4]<=[4]}"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %1 = func.call @inner(%0) : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %1 : tensor<8x8xf32>
  }
  func.func private @inner(%v: tensor<8x8xf32>) -> tensor<8x8xf32> {
    %0 = stablehlo.negate %v : tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}
