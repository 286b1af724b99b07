// RUN: not stablehlo-spmd-opt %s --spmd-annotate=rules=%inputs/bad_axis.toml 2>&1 | FileCheck %s --check-prefix=AXIS
// RUN: not stablehlo-spmd-opt %s --spmd-annotate=rules=%inputs/bad_toml.toml 2>&1 | FileCheck %s --check-prefix=TOML
// RUN: not stablehlo-spmd-opt %s --spmd-annotate=rules=%inputs/no_mesh.toml 2>&1 | FileCheck %s --check-prefix=MESH
// RUN: not stablehlo-spmd-opt %s --spmd-annotate=rules=%inputs/missing.toml 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not stablehlo-spmd-opt %s --spmd-annotate='rules=%inputs/data_model.toml mesh=data=0' 2>&1 | FileCheck %s --check-prefix=OPTION

// The unknown axis is reported at the argument (line 15), with a note at the rule.
// (Literal line numbers: the PyPI filecheck port has no [[@LINE+N]].)
// AXIS: rule_errors.mlir:15:17: error: argument #0 'x' of type tensor<4x4xf32>: unknown mesh axis 'modle'; the mesh has data=4, model=2
// AXIS-NEXT: bad_axis.toml:4:1: note: from rule '^x$' -> ('data', 'modle')
// AXIS-NOT: Traceback
// TOML: bad_toml.toml:5:{{[0-9]+}}: error: invalid TOML: {{.*}}
// MESH: rule_errors.mlir:1:1: error: spmd-annotate needs a mesh: give the rules file a [mesh] table or pass the 'mesh' option
// MISSING: missing.toml: error: cannot read rules file: No such file or directory
func.func @main(%arg0: tensor<4x4xf32> loc("x")) -> tensor<4x4xf32> {
  return %arg0 : tensor<4x4xf32>
}
// OPTION: error: invalid 'mesh' option of spmd-annotate: mesh axis 'data' has size 0; sizes must be positive
