// RUN: stablehlo-spmd-opt %s --split-input-file --verify-diagnostics --spmd-propagate --spmd-partition=warn-bytes=256

// An op that needs a sharded dimension whole gathers it; that is reported
// at the op when the gathered operand is at least warn-bytes large.  Here
// 8x8 f32 = 256 bytes, at the limit: warned.  (A product over the rows has
// no partial form the partitioner knows: its rows are NEED_REPLICATION.)

module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @product(%a: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> tensor<8xf32> {
    %one = stablehlo.constant dense<1.0> : tensor<f32>
    // expected-warning@+1 {{'stablehlo.reduce' needs dimension 0 of its operand tensor<8x8xf32> whole: gathering it over x (256 bytes per device)}}
    %0 = stablehlo.reduce(%a init: %one) applies stablehlo.multiply across dimensions = [0] : (tensor<8x8xf32>, tensor<f32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}

// -----

// 8x4 f32 = 128 bytes, below the limit: no warning.  Neither is a
// replicated operand (nothing is gathered) warned about.

module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @small(%a: tensor<8x4xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                   %b: tensor<8x8xf32> {mhlo.sharding = "{replicated}"})
      -> (tensor<4xf32>, tensor<8xf32>) {
    %one = stablehlo.constant dense<1.0> : tensor<f32>
    %0 = stablehlo.reduce(%a init: %one) applies stablehlo.multiply across dimensions = [0] : (tensor<8x4xf32>, tensor<f32>) -> tensor<4xf32>
    %1 = stablehlo.reduce(%b init: %one) applies stablehlo.multiply across dimensions = [0] : (tensor<8x8xf32>, tensor<f32>) -> tensor<8xf32>
    return %0, %1 : tensor<4xf32>, tensor<8xf32>
  }
}
