// RUN: stablehlo-spmd-opt %s --split-input-file --verify-diagnostics --spmd-annotate=rules=%inputs/data_model.toml

// Each error is reported at the argument it concerns.

// expected-error@+1 {{argument #0 'x' of type tensor<4xf32>: partition spec ('data', None) has 2 entries but the tensor has rank 1}}
func.func @rank_mismatch(%arg0: tensor<4xf32> loc("x")) {
  return
}

// -----

// An existing annotation for more devices than the mesh has.
// expected-error@+1 {{the mesh [data=4, model=2] has 8 devices but the module says mhlo.num_partitions = 4}}
module attributes {mhlo.num_partitions = 4 : i32} {
  func.func @main(%arg0: tensor<4x4xf32> loc("x")) -> tensor<4x4xf32> {
    return %arg0 : tensor<4x4xf32>
  }
}

// -----

// expected-error@+1 {{the mesh [data=4, model=2] has 8 devices but the module's existing shardings use 4}}
module {
  func.func @main(%arg0: tensor<4x4xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"}) -> tensor<4x4xf32> {
    return %arg0 : tensor<4x4xf32>
  }
}

// -----

// expected-error@+1 {{argument #0: invalid mhlo.sharding '{devices=[2,2]<=[4]' at column}}
func.func @bad_sharding(%arg0: tensor<4x4xf32> {mhlo.sharding = "{devices=[2,2]<=[4]"}) -> tensor<4x4xf32> {
  return %arg0 : tensor<4x4xf32>
}

// -----

// expected-error@+1 {{argument #0 of @tile_rank: sharding tiles 2 dimensions but the tensor has rank 1}}
func.func @tile_rank(%arg0: tensor<8xf32> {mhlo.sharding = "{devices=[4,2]<=[8]}"}) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}

// -----

// expected-error@+1 {{argument #0: mhlo.sharding must be a string, got 3 : i32}}
func.func @not_a_string(%arg0: tensor<8xf32> {mhlo.sharding = 3 : i32}) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}

// -----

func.func @constraint(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{op 'stablehlo.custom_call': maximal device 9 is out of range for a mesh of 8 devices}}
  %0 = stablehlo.custom_call @Sharding(%arg0) {mhlo.sharding = "{maximal device=9}"} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
