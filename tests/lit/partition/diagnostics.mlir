// RUN: stablehlo-spmd-opt %s --split-input-file --verify-diagnostics --spmd-partition

// spmd-partition alone, on modules it cannot partition.

// No mesh: no spmd.mesh, no tiled sharding to infer one from, no
// mhlo.num_partitions.  The module was not propagated.

// expected-error@+1 {{spmd-partition needs a propagated module (run spmd-annotate and spmd-propagate first)}}
module {
  func.func @no_mesh(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
    return %x : tensor<8x8xf32>
  }
}

// -----

// The output is one @main: two public functions are an error ...

// expected-error@+1 {{spmd-partition expects one public function, found 2}}
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @f(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
    return %x : tensor<8x8xf32>
  }
  func.func @g(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
    return %x : tensor<8x8xf32>
  }
}

// -----

// ... and so is none.

// expected-error@+1 {{spmd-partition expects one public function, found 0}}
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func private @f(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
    return %x : tensor<8x8xf32>
  }
}

// -----

// A sharding that does not fit the mesh (3 devices on a 4-device mesh) is
// reported at the argument.

module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  // expected-error@+1 {{sharding uses 3 devices but the mesh has 4}}
  func.func @bad(%a: tensor<9x8xf32> {mhlo.sharding = "{devices=[3,1]<=[3]}"}) -> tensor<9x8xf32> {
    return %a : tensor<9x8xf32>
  }
}
