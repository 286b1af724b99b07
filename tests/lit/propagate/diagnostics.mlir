// RUN: stablehlo-spmd-opt %s --split-input-file --verify-diagnostics --spmd-propagate

// An op without a rule runs on whole values, with a warning at its location.

func.func @opaque(%x: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> tensor<8x8xf32> {
  // expected-warning@+1 {{no sharding rule for 'stablehlo.custom_call': it runs on whole values, so its operands will be gathered}}
  %0 = stablehlo.custom_call @my_kernel(%x) : (tensor<8x8xf32>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// Without a mesh or a sharding the module runs on one device: every value is
// still given its sharding (replicated), with a warning.
// expected-warning@+1 {{spmd-propagate found no mesh and no shardings: every value is replicated on one device (run spmd-annotate first, or give the module mhlo.sharding annotations)}}
module {
  func.func @no_mesh(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
    return %x : tensor<8x8xf32>
  }
}
