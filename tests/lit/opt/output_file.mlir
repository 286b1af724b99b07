// The output is written only on success, so -o naming the input is safe,
// and a failing run leaves an existing output file untouched.

// RUN: cp %s %t.mlir
// RUN: stablehlo-spmd-opt %t.mlir --cse -o %t.mlir
// RUN: FileCheck %s --check-prefix=INPLACE < %t.mlir
// INPLACE: func.func @keep
// INPLACE-NOT: stablehlo.add

// RUN: echo "previous contents" > %t.out
// RUN: not stablehlo-spmd-opt %S/Inputs/verifier.mlir -o %t.out
// RUN: FileCheck %s --check-prefix=UNTOUCHED < %t.out
// UNTOUCHED: previous contents

// RUN: cat %s | stablehlo-spmd-opt - --cse | FileCheck %s --check-prefix=STDIN
// STDIN: func.func @keep

func.func @keep(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>
  return %arg0 : tensor<4xf32>
}
