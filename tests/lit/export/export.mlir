// RUN: stablehlo-spmd export %S/Inputs/tiny_model.py:example | FileCheck %s
// RUN: stablehlo-spmd export %S/Inputs/tiny_model.py:loss --example-args %S/Inputs/tiny_model.py:example_args | FileCheck %s
// RUN: not stablehlo-spmd export %S/Inputs/tiny_model.py:nothing 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not stablehlo-spmd export %S/Inputs/tiny_model.py:loss 2>&1 | FileCheck %s --check-prefix=FACTORY
// RUN: not stablehlo-spmd export no_colon 2>&1 | FileCheck %s --check-prefix=REF

// Arguments are named by pytree path in their locations, results by jax.result_info.

// CHECK: func.func public @main(%[[B:.*]]: tensor<4xf32> loc("params['b']"), %[[W:.*]]: tensor<8x4xf32> loc("params['w']"), %[[X:.*]]: tensor<2x8xf32> loc("x"))
// CHECK-SAME: jax.result_info = "result['norm']"
// CHECK-SAME: jax.result_info = "result['out']"
// CHECK: stablehlo.dot_general %[[X]], %[[W]]

// MISSING: error: '{{.*}}tiny_model.py' has no attribute 'nothing'
// FACTORY: error: {{.*}}tiny_model.py:loss must be a zero-argument factory returning (function, example_args), or pass --example-args
// REF: error: expected MODULE:NAME, got 'no_colon'
