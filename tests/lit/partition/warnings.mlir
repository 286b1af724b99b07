// RUN: stablehlo-spmd-opt %s --split-input-file --verify-diagnostics --spmd-propagate --spmd-partition=warn-bytes=256

// An op that runs replicated gathers its sharded operands in full; that is
// reported at the op when the operand is at least warn-bytes large.  Here
// 8x8 f32 = 256 bytes, at the limit: warned.

module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @slice(%a: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<4x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    // expected-warning@+1 {{'stablehlo.slice' has no partitioned form: its operand tensor<8x8xf32> (256 bytes, sharded ('x', None)) is gathered in full}}
    %0 = stablehlo.slice %a [2:6, 0:8] : (tensor<8x8xf32>) -> tensor<4x8xf32>
    return %0 : tensor<4x8xf32>
  }
}

// -----

// 8x4 f32 = 128 bytes, below the limit: no warning.  Neither is a
// replicated operand (nothing is gathered) warned about.

module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @small(%a: tensor<8x4xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                   %b: tensor<8x8xf32> {mhlo.sharding = "{replicated}"})
      -> (tensor<4x4xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}, tensor<4x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %0 = stablehlo.slice %a [2:6, 0:4] : (tensor<8x4xf32>) -> tensor<4x4xf32>
    %1 = stablehlo.slice %b [2:6, 0:8] : (tensor<8x8xf32>) -> tensor<4x8xf32>
    return %0, %1 : tensor<4x4xf32>, tensor<4x8xf32>
  }
}
