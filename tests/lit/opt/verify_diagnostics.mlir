// RUN: stablehlo-spmd-opt %s --split-input-file --verify-diagnostics
// RUN: not stablehlo-spmd-opt %S/Inputs/wrong_expectations.mlir --split-input-file --verify-diagnostics 2>&1 | FileCheck %s

// Expectations may sit on the diagnostic's line, or point at it with @+N / @-N / @above / @below.

func.func @f(%arg0: tensor<4xf32>) -> tensor<3xf32> {
  return %arg0 : tensor<4xf32> // expected-error {{doesn't match function result type}}
}

// -----

func.func @g(%arg0: tensor<4xf32>) -> tensor<3xf32> {
  // expected-error@+1 {{type of return operand 0}}
  return %arg0 : tensor<4xf32>
}

// -----

// expected-error@below {{custom op 'stablehlo.frobnicate' is unknown}}
%0 = stablehlo.frobnicate : tensor<4xf32>

// CHECK: wrong_expectations.mlir:3:3: error: unexpected error: type of return operand 0
// CHECK: wrong_expectations.mlir:2:3: error: expected error "no such message" was not produced
// CHECK-NOT: Traceback
