// RUN: stablehlo-spmd-opt %s --split-input-file | FileCheck %s
// RUN: stablehlo-spmd-opt %s --split-input-file --mlir-print-debuginfo | FileCheck %s --check-prefix=LOC

// Each chunk is parsed and printed on its own; outputs are joined with the
// same marker, and locations keep the file name and the whole-file line.

// CHECK-LABEL: func.func @first
// CHECK: %[[SUM:.*]] = stablehlo.add %[[A:.*]], %[[A]]
// CHECK: return %[[SUM]]
// CHECK: // -----
// CHECK-LABEL: func.func @second
// LOC: stablehlo.add {{.*}} loc(#[[ADD:loc[0-9]*]])
// LOC: #[[ADD]] = loc("{{.*}}split_input_file.mlir":22:8)
func.func @first(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @second(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.multiply %arg0, %arg0 : tensor<4xf32>
  return %0 : tensor<4xf32>
}
