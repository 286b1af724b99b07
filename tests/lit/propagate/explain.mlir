// RUN: stablehlo-spmd-opt %s --verify-diagnostics --spmd-propagate=explain=true
// RUN: stablehlo-spmd explain %s | FileCheck %s --check-prefix=CLI
// RUN: stablehlo-spmd-opt %s --spmd-propagate=origins=true | FileCheck %s --check-prefix=ORIGINS

// CLI: explain.mlir:14:8: stablehlo.exponential at {{.*}}explain.mlir:14:8: ('axis_0', None) through stablehlo.exponential from argument #0 of @chain
// CLI: explain.mlir:16:8: stablehlo.negate at {{.*}}explain.mlir:16:8: ('axis_0', None) through stablehlo.negate from stablehlo.exponential
// ORIGINS: stablehlo.negate %{{.*}} {mhlo.sharding = "{devices=[4,1]<=[4]}", spmd.origin = "stablehlo.negate at

// With explain=true every op gets a remark: its sharding and the chain of
// ops and values it came through, back to the user's annotation.

func.func @chain(%x: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> tensor<8x8xf32> {
  // expected-remark@+1 {{explain.mlir:14:8: ('axis_0', None) through stablehlo.exponential from argument #0 of @chain <- argument #0 of @chain: ('axis_0', None) from the annotation on argument #0 of @chain}}
  %0 = stablehlo.exponential %x : tensor<8x8xf32>
  // expected-remark@+1 {{through stablehlo.negate from stablehlo.exponential at}}
  %1 = stablehlo.negate %0 : tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}
