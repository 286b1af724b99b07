// RUN: stablehlo-spmd-opt %s --split-input-file --verify-diagnostics --spmd-propagate --spmd-partition=warn-bytes=256

// An op that needs a sharded dimension whole gathers it; that is reported
// at the op when the gathered operand is at least warn-bytes large.  Here
// 8x8 f32 = 256 bytes, at the limit: warned.  (A sort along the rows needs
// them whole: they are a PERMUTATION factor with no window.)

module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @sorted(%a: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> tensor<8x8xf32> {
    // expected-warning@+1 {{'stablehlo.sort' needs dimension 0 of its operand tensor<8x8xf32> whole: gathering it over x (256 bytes per device)}}
    %0 = "stablehlo.sort"(%a) ({
    ^bb0(%l: tensor<f32>, %r: tensor<f32>):
      %lt = stablehlo.compare LT, %l, %r : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    }) {dimension = 0 : i64} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// 8x4 f32 = 128 bytes, below the limit: no warning.  Neither is a
// replicated operand (nothing is gathered) warned about.

module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @small(%a: tensor<8x4xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                   %b: tensor<8x8xf32> {mhlo.sharding = "{replicated}"})
      -> (tensor<8x4xf32>, tensor<8x8xf32>) {
    %0 = "stablehlo.sort"(%a) ({
    ^bb0(%l: tensor<f32>, %r: tensor<f32>):
      %lt = stablehlo.compare LT, %l, %r : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    }) {dimension = 0 : i64} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %1 = "stablehlo.sort"(%b) ({
    ^bb0(%l: tensor<f32>, %r: tensor<f32>):
      %lt = stablehlo.compare LT, %l, %r : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    }) {dimension = 0 : i64} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %0, %1 : tensor<8x4xf32>, tensor<8x8xf32>
  }
}
