// RUN: stablehlo-spmd-opt %s --split-input-file --verify-diagnostics --spmd-propagate --spmd-partition=warn-bytes=256

// An op that needs a sharded dimension whole gathers it; that is reported
// at the op when the gathered operand is at least warn-bytes large.  Here
// 8x8 f32 = 256 bytes, at the limit: warned.  (Interior padding spreads
// rows apart, which no halo exchange serves.)

module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @pad(%a: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<15x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %z = stablehlo.constant dense<0.0> : tensor<f32>
    // expected-warning@+1 {{'stablehlo.pad' needs dimension 0 of its operand tensor<8x8xf32> whole: gathering it over x (256 bytes per device)}}
    %0 = stablehlo.pad %a, %z, low = [0, 0], high = [0, 0], interior = [1, 0] : (tensor<8x8xf32>, tensor<f32>) -> tensor<15x8xf32>
    return %0 : tensor<15x8xf32>
  }
}

// -----

// 8x4 f32 = 128 bytes, below the limit: no warning.  Neither is a
// replicated operand (nothing is gathered) warned about.

module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @small(%a: tensor<8x4xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                   %b: tensor<8x8xf32> {mhlo.sharding = "{replicated}"})
      -> (tensor<15x4xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}, tensor<15x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %z = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = stablehlo.pad %a, %z, low = [0, 0], high = [0, 0], interior = [1, 0] : (tensor<8x4xf32>, tensor<f32>) -> tensor<15x4xf32>
    %1 = stablehlo.pad %b, %z, low = [0, 0], high = [0, 0], interior = [1, 0] : (tensor<8x8xf32>, tensor<f32>) -> tensor<15x8xf32>
    return %0, %1 : tensor<15x4xf32>, tensor<15x8xf32>
  }
}
