// RUN: stablehlo-spmd-opt %s --verify-diagnostics --spmd-propagate --spmd-partition=warn-bytes=0

// Moving a dim from a 2-way axis to a 3-way one has no in-place path: the
// plan gathers the whole tensor and slices it again.  That full copy is
// reported at the op that needed it (XLA's "involuntary full
// rematerialization", with a location).

module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=3]>} {
  func.func @main(%a: tensor<6xf32> {mhlo.sharding = "{devices=[2,3]<=[6] last_tile_dim_replicate}"})
      -> (tensor<6xf32> {mhlo.sharding = "{devices=[3,2]<=[2,3]T(1,0) last_tile_dim_replicate}"}) {
    // expected-warning@+1 {{goes through a fully replicated copy}}
    return %a : tensor<6xf32>
  }
}
