// Malformed IR, verifier failures and bad pipelines give a located error
// and exit 1, never a traceback.

// RUN: not stablehlo-spmd-opt %S/Inputs/malformed.mlir 2>&1 | FileCheck %s --check-prefix=PARSE
// PARSE: malformed.mlir:2:{{[0-9]+}}: error: {{.*}}
// PARSE-NOT: Traceback

// RUN: not stablehlo-spmd-opt %S/Inputs/verifier.mlir 2>&1 | FileCheck %s --check-prefix=VERIFY
// VERIFY: verifier.mlir:2:3: error: type of return operand 0 ('tensor<4xf32>') doesn't match function result type ('tensor<3xf32>')

// RUN: not stablehlo-spmd-opt %S/Inputs/unknown_op.mlir 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// UNKNOWN: unknown_op.mlir:2:8: error: {{.*}}stablehlo.frobnicate

// RUN: not stablehlo-spmd-opt %S/Inputs/empty.mlir 2>&1 | FileCheck %s --check-prefix=EMPTY
// EMPTY: empty.mlir: error: the input is empty: expected a module

// RUN: printf 'ML\0\1\2' > %t.bin && not stablehlo-spmd-opt %t.bin 2>&1 | FileCheck %s --check-prefix=BINARY
// BINARY: error: the input is binary, not MLIR text

// RUN: not stablehlo-spmd-opt %S/Inputs/does_not_exist.mlir 2>&1 | FileCheck %s --check-prefix=MISSING
// MISSING: error: cannot open input file '{{.*}}does_not_exist.mlir': No such file or directory

// RUN: not stablehlo-spmd-opt %s --pass-pipeline='builtin.module(no-such-pass)' 2>&1 | FileCheck %s --check-prefix=PASS
// PASS: error: unknown pass 'no-such-pass': it is neither a stablehlo-spmd pass (spmd-annotate, spmd-auto-shard, spmd-inline-calls, spmd-partition, spmd-propagate, spmd-rematerialize) nor an MLIR pass registered in jaxlib

// RUN: not stablehlo-spmd-opt %s --pass-pipeline='builtin.module(cse' 2>&1 | FileCheck %s --check-prefix=SYNTAX
// SYNTAX: error: expected 'builtin.module(...)' in pass pipeline 'builtin.module(cse'

// RUN: not stablehlo-spmd-opt %s --pass-pipeline='builtin.module(spmd-annotate{colour=red})' 2>&1 | FileCheck %s --check-prefix=OPTION
// OPTION: error: pass 'spmd-annotate' has no option 'colour' (options: mesh, rules)

// RUN: not stablehlo-spmd-opt %s -o %t.missing_dir/out.mlir 2>&1 | FileCheck %s --check-prefix=OUTDIR
// OUTDIR: error: cannot write output file '{{.*}}out.mlir': directory '{{.*}}missing_dir' does not exist

// RUN: not stablehlo-spmd-opt %s --no-such-flag 2>&1 | FileCheck %s --check-prefix=FLAG
// FLAG: error: No such option '--no-such-flag'

func.func @ok(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}

// RUN: not stablehlo-spmd-opt %s --pass-pipeline='builtin.module(cse,{)' 2>&1 | FileCheck %s --check-prefix=BRACES
// BRACES: error: unbalanced brackets or quotes in pass pipeline
