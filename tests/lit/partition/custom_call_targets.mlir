// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// Custom-call targets from Shardy's registry (op_rules/custom_calls.py).
// Where a call computes on whole matrices or a whole reduced dim, that dim
// is gathered before the call and the call runs on per-device batches.

// Eigh: the batch stays split; the matrix dim split on "y" propagates to
// the eigenvectors (as Shardy's rule lets it) but is gathered for the call.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<4x2x4xf32>) {
// CHECK: %[[W:.*]] = "stablehlo.all_gather"(%[[A]]) <{all_gather_dim = 1
// CHECK-SAME: (tensor<4x2x4xf32>) -> tensor<4x4x4xf32>
// CHECK-NEXT: %[[E:.*]]:2 = stablehlo.custom_call @Eigh(%[[W]])
// CHECK-SAME: (tensor<4x4x4xf32>) -> (tensor<4x4x4xf32>, tensor<4x4xf32>)
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @eigh(%a: tensor<8x4x4xf32> {mhlo.sharding = "{devices=[2,2,1]<=[4]}"})
      -> (tensor<8x4x4xf32>, tensor<8x4xf32>) {
    %0:2 = stablehlo.custom_call @Eigh(%a) {backend_config = "1,1,100,1e-6"} : (tensor<8x4x4xf32>) -> (tensor<8x4x4xf32>, tensor<8x4xf32>)
    return %0#0, %0#1 : tensor<8x4x4xf32>, tensor<8x4xf32>
  }
}

// -----

// Qr reads whole matrices: the split row dim propagates to the first
// result (as Shardy's factor does) but is gathered for the call; the taus
// are split on the batch alone.

// CHECK-LABEL: func.func public @main
// CHECK: out_shardings=[<@mesh, [{"x"}, {"y"}, {}]>, <@mesh, [{"x"}, {}]>]
// CHECK-SAME: (%[[A:arg[0-9]+]]: tensor<4x3x4xf32>) {
// CHECK: %[[W:.*]] = "stablehlo.all_gather"(%[[A]]) <{all_gather_dim = 1
// CHECK-NEXT: stablehlo.custom_call @Qr(%[[W]]) : (tensor<4x6x4xf32>) -> (tensor<4x6x4xf32>, tensor<4x4xf32>)
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @qr(%a: tensor<8x6x4xf32> {mhlo.sharding = "{devices=[2,2,1]<=[4]}"})
      -> (tensor<8x6x4xf32>, tensor<8x4xf32>) {
    %0:2 = stablehlo.custom_call @Qr(%a) : (tensor<8x6x4xf32>) -> (tensor<8x6x4xf32>, tensor<8x4xf32>)
    return %0#0, %0#1 : tensor<8x6x4xf32>, tensor<8x4xf32>
  }
}

// -----

// ApproxTopK reads its reduced dim whole; the rows stay split.  The iota
// operand shares both dims with the values, so it takes their split (as in
// Shardy) and is gathered along the reduced dim with them.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<8x4xf32>, %[[I:arg[0-9]+]]: tensor<8x4xf32>) {
// CHECK: %[[W:.*]] = "stablehlo.all_gather"(%[[A]]) <{all_gather_dim = 1
// CHECK-NEXT: %[[WI:.*]] = "stablehlo.all_gather"(%[[I]]) <{all_gather_dim = 1
// CHECK-NEXT: stablehlo.custom_call @ApproxTopK(%[[W]], %[[WI]],
// CHECK-SAME: (tensor<8x8xf32>, tensor<8x8xf32>, tensor<f32>, tensor<i32>) -> (tensor<8x2xf32>, tensor<8x2xf32>)
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @approx(%a: tensor<16x8xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"}, %i: tensor<16x8xf32>)
      -> (tensor<16x2xf32>, tensor<16x2xf32>) {
    %c = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %c1 = stablehlo.constant dense<-1> : tensor<i32>
    %0:2 = stablehlo.custom_call @ApproxTopK(%a, %i, %c, %c1) {mhlo.backend_config = {aggregate_to_topk = true, recall_target = 0.95 : f32, reduction_dim = 1 : i64, reduction_input_size_override = -1 : i64, top_k = 2 : i64}, called_computations = [@top_k_gt]} : (tensor<16x8xf32>, tensor<16x8xf32>, tensor<f32>, tensor<i32>) -> (tensor<16x2xf32>, tensor<16x2xf32>)
    return %0#0, %0#1 : tensor<16x2xf32>, tensor<16x2xf32>
  }
  func.func private @top_k_gt(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<f32>, %d: tensor<f32>) -> tensor<i1> {
    %0 = stablehlo.compare GT, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
    return %0 : tensor<i1>
  }
}

// -----

// Host offloading is pointwise: each device moves its own block.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<4x2xf32>) {
// CHECK-NOT: all_gather
// CHECK: %[[H:.*]] = stablehlo.custom_call @MoveToHost(%[[A]]) {{.*}} : (tensor<4x2xf32>) -> tensor<4x2xf32>
// CHECK-NEXT: stablehlo.custom_call @MoveToDevice(%[[H]]) {{.*}} : (tensor<4x2xf32>) -> tensor<4x2xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @offload(%a: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"}) -> tensor<8x4xf32> {
    %0 = stablehlo.custom_call @MoveToHost(%a) {backend_config = ""} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %1 = stablehlo.custom_call @MoveToDevice(%0) {backend_config = ""} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    return %1 : tensor<8x4xf32>
  }
}

// -----

// An X64Combine that makes a random-number state keeps it whole.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[HI:arg[0-9]+]]: tensor<1xui32>, %[[LO:arg[0-9]+]]: tensor<2xui32>) {
// CHECK: %[[W:.*]] = "stablehlo.all_gather"(%[[HI]])
// CHECK-NEXT: %[[S:.*]] = stablehlo.custom_call @X64Combine(%[[W]], %[[LO]]) : (tensor<2xui32>, tensor<2xui32>) -> tensor<2xui64>
// CHECK-NEXT: stablehlo.rng_bit_generator %[[S]]
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @rng_state(%hi: tensor<2xui32> {mhlo.sharding = "{devices=[2,2]<=[4] last_tile_dim_replicate}"}, %lo: tensor<2xui32>) -> tensor<4x4xui32> {
    %0 = stablehlo.custom_call @X64Combine(%hi, %lo) : (tensor<2xui32>, tensor<2xui32>) -> tensor<2xui64>
    %1:2 = stablehlo.rng_bit_generator %0, algorithm = DEFAULT : (tensor<2xui64>) -> (tensor<2xui64>, tensor<4x4xui32>)
    return %1#1 : tensor<4x4xui32>
  }
}
