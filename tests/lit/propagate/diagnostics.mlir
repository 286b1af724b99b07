// RUN: stablehlo-spmd-opt %s --split-input-file --verify-diagnostics --spmd-propagate

// An op without a rule is replicated, with a warning at its location.

func.func @opaque(%x: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> tensor<8x8xf32> {
  // expected-warning@+1 {{no sharding rule for 'stablehlo.custom_call': its results are replicated and its operands will be gathered}}
  %0 = stablehlo.custom_call @my_kernel(%x) : (tensor<8x8xf32>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// Without a mesh or a sharding there is nothing to propagate: the module is
// left as it is (as Shardy leaves it), with a warning.
// expected-warning@+1 {{spmd-propagate found no mesh and no shardings: the module is left as it is (run spmd-annotate first, or give the module mhlo.sharding annotations)}}
module {
  func.func @no_mesh(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
    return %x : tensor<8x8xf32>
  }
}
