// RUN: stablehlo-spmd-opt %s --pass-pipeline='builtin.module(canonicalize,cse)' | FileCheck %s
// RUN: stablehlo-spmd-opt %s --canonicalize --cse | FileCheck %s
// RUN: stablehlo-spmd-opt %s --cse --mlir-print-ir-after-all 2>&1 >/dev/null | FileCheck %s --check-prefix=IR
// RUN: stablehlo-spmd-opt %s --spmd-annotate=mesh=x=2 --cse --mlir-timing 2>&1 >/dev/null | FileCheck %s --check-prefix=TIMING

// Upstream passes run from the same pipeline as the project's own.

// CHECK-LABEL: func.func @dedupe
// CHECK: %[[SUM:.*]] = stablehlo.add
// CHECK-NOT: stablehlo.add
// CHECK: stablehlo.multiply %[[SUM]], %[[SUM]]
// IR: IR Dump After {{.*}}cse
// TIMING: Execution time report
// TIMING: AnnotatePass
// TIMING: CSE
func.func @dedupe(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>
  %1 = stablehlo.add %arg0, %arg0 : tensor<4xf32>
  %2 = stablehlo.multiply %0, %1 : tensor<4xf32>
  return %2 : tensor<4xf32>
}
