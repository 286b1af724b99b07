// RUN: stablehlo-spmd-opt %s --split-input-file --verify-diagnostics --spmd-propagate --spmd-partition=warn-bytes=0

// A sort needs its dimension whole.  Sorting along the dimension the user
// split gathers it (here 8x16 f32 split 4-way on dim 1, so all 512 bytes on
// every device) and says so at the sort.

module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @sort(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}) -> tensor<8x16xf32> {
    // expected-warning@+1 {{'stablehlo.sort' needs dimension 1 of its operand tensor<8x16xf32> whole: gathering it over x (512 bytes per device)}}
    %0 = "stablehlo.sort"(%a) <{dimension = 1 : i64, is_stable = true}> ({
    ^bb0(%l: tensor<f32>, %r: tensor<f32>):
      %lt = stablehlo.compare LT, %l, %r : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    }) : (tensor<8x16xf32>) -> tensor<8x16xf32>
    return %0 : tensor<8x16xf32>
  }
}

// -----

// Sorting along a dimension nobody split moves nothing and says nothing.

module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @sort_rows(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> tensor<8x16xf32> {
    %0 = "stablehlo.sort"(%a) <{dimension = 1 : i64, is_stable = true}> ({
    ^bb0(%l: tensor<f32>, %r: tensor<f32>):
      %lt = stablehlo.compare LT, %l, %r : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    }) : (tensor<8x16xf32>) -> tensor<8x16xf32>
    return %0 : tensor<8x16xf32>
  }
}
