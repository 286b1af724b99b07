// Rules for 8 devices on a module compiled for 4.
// CLI: stablehlo-spmd-opt %s --spmd-annotate=rules=%S/common/rules.toml -o %t/out.mlir
// API: annotate rules=%S/common/rules.toml
// RAISES: ShardingError
// STDERR: %s:6:1: error: the mesh [data=4, model=2] has 8 devices but the module says mhlo.num_partitions = 4
module attributes {mhlo.num_partitions = 4 : i32} {
  func.func @main(%arg0: tensor<8x4xf32> loc("x")) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
