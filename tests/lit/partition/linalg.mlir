// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// triangular_solve on [2,2,2]-split operands: each system is solved whole,
// so a is gathered over both matrix dims and b over its m dim only; the
// batch dim and b's right-hand sides stay split (2 of 4 systems, 6 of 12
// columns a device), where XLA keeps the batch dim alone.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x4x4xf32>, %[[B:arg[0-9]+]]: tensor<2x4x6xf32>) {
// CHECK: %[[AR:.*]] = "stablehlo.all_gather"(%[[A]]) {{.*}} : (tensor<2x4x4xf32>) -> tensor<2x8x4xf32>
// CHECK-NEXT: %[[AW:.*]] = "stablehlo.all_gather"(%[[AR]]) {{.*}} : (tensor<2x8x4xf32>) -> tensor<2x8x8xf32>
// CHECK-NEXT: %[[BW:.*]] = "stablehlo.all_gather"(%[[B]]) {{.*}} : (tensor<2x4x6xf32>) -> tensor<2x8x6xf32>
// CHECK-NEXT: %[[X:.*]] = "stablehlo.triangular_solve"(%[[AW]], %[[BW]])
// CHECK-SAME: : (tensor<2x8x8xf32>, tensor<2x8x6xf32>) -> tensor<2x8x6xf32>
module attributes {spmd.mesh = #sdy.mesh<["r"=2, "c"=2, "d"=2]>} {
  func.func @solve(%a: tensor<4x8x8xf32> {mhlo.sharding = "{devices=[2,2,2]<=[8]}"},
                   %b: tensor<4x8x12xf32> {mhlo.sharding = "{devices=[2,2,2]<=[8]}"})
      -> (tensor<4x8x12xf32> {mhlo.sharding = "{devices=[2,2,2]<=[8]}"}) {
    %0 = "stablehlo.triangular_solve"(%a, %b) {left_side = true, lower = true,
        unit_diagonal = false, transpose_a = #stablehlo<transpose NO_TRANSPOSE>}
        : (tensor<4x8x8xf32>, tensor<4x8x12xf32>) -> tensor<4x8x12xf32>
    return %0 : tensor<4x8x12xf32>
  }
}

// -----

// cholesky of a batch split 4 ways: each device factors its own matrices.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<2x4x4xf32>) {
// CHECK-NEXT: %[[L:.*]] = stablehlo.cholesky %[[A]], lower = true : tensor<2x4x4xf32>
// CHECK-NEXT: sdy.return %[[L]] : tensor<2x4x4xf32>
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @factor(%a: tensor<8x4x4xf32> {mhlo.sharding = "{devices=[4,1,1]<=[4]}"})
      -> (tensor<8x4x4xf32> {mhlo.sharding = "{devices=[4,1,1]<=[4]}"}) {
    %0 = stablehlo.cholesky %a, lower = true : tensor<8x4x4xf32>
    return %0 : tensor<8x4x4xf32>
  }
}

// -----

// A complex fft over its last two dims, the first of them split on "y":
// the split propagates to the result (a transform dim that keeps its size),
// and the partitioner gathers that dim for the transform, then keeps its
// own half of the result.  The batch dim stays split on "x".

// CHECK-LABEL: func.func public @main
// CHECK-SAME: -> (tensor<8x32x64xcomplex<f32>> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}, {}]>})
// CHECK: (%[[A:arg[0-9]+]]: tensor<4x16x64xcomplex<f32>>) {
// CHECK: %[[W:.*]] = "stablehlo.all_gather"(%[[A]]) <{all_gather_dim = 1
// CHECK-NEXT: %[[F:.*]] = stablehlo.fft %[[W]], type = FFT, length = [32, 64] : (tensor<4x32x64xcomplex<f32>>) -> tensor<4x32x64xcomplex<f32>>
// CHECK: %[[MINE:.*]] = stablehlo.dynamic_slice %[[F]], {{.*}} sizes = [4, 16, 64]
// CHECK: sdy.return %[[MINE]]
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @fft(%a: tensor<8x32x64xcomplex<f32>> {mhlo.sharding = "{devices=[2,2,1]<=[4]}"}) -> tensor<8x32x64xcomplex<f32>> {
    %0 = stablehlo.fft %a, type = FFT, length = [32, 64] : (tensor<8x32x64xcomplex<f32>>) -> tensor<8x32x64xcomplex<f32>>
    return %0 : tensor<8x32x64xcomplex<f32>>
  }
}

// -----

// The same fft with its result wanted whole: the transform's whole-row
// result is still at hand after the part each device keeps is cut from it,
// so the result is gathered from it over "x" alone; "y" is not gathered a
// second time.

// CHECK-LABEL: func.func public @main
// CHECK: (%[[A:arg[0-9]+]]: tensor<4x16x64xcomplex<f32>>) {
// CHECK: %[[W:.*]] = "stablehlo.all_gather"(%[[A]]) <{all_gather_dim = 1
// CHECK-NEXT: %[[F:.*]] = stablehlo.fft %[[W]]
// CHECK: %[[R:.*]] = "stablehlo.all_gather"(%[[F]]) <{all_gather_dim = 0
// CHECK-SAME: (tensor<4x32x64xcomplex<f32>>) -> tensor<8x32x64xcomplex<f32>>
// CHECK-NOT: all_gather
// CHECK: sdy.return %[[R]]
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @fft_whole(%a: tensor<8x32x64xcomplex<f32>> {mhlo.sharding = "{devices=[2,2,1]<=[4]}"})
      -> (tensor<8x32x64xcomplex<f32>> {mhlo.sharding = "{replicated}"}) {
    %0 = stablehlo.fft %a, type = FFT, length = [32, 64] : (tensor<8x32x64xcomplex<f32>>) -> tensor<8x32x64xcomplex<f32>>
    return %0 : tensor<8x32x64xcomplex<f32>>
  }
}
