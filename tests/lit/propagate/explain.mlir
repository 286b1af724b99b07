// RUN: stablehlo-spmd-opt %s --verify-diagnostics --spmd-propagate=explain=true

// With explain=true every op gets a remark: its sharding and the chain of
// ops and values it came through, back to the user's annotation.

func.func @chain(%x: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> tensor<8x8xf32> {
  // expected-remark@+1 {{explain.mlir:8:8: ('axis_0', None) through stablehlo.exponential from argument #0 of @chain <- argument #0 of @chain: ('axis_0', None) from the annotation on argument #0 of @chain}}
  %0 = stablehlo.exponential %x : tensor<8x8xf32>
  // expected-remark@+1 {{through stablehlo.negate from stablehlo.exponential at}}
  %1 = stablehlo.negate %0 : tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}
