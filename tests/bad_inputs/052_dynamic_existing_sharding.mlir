// An existing sharding that splits a dynamic dimension.
// CLI: stablehlo-spmd-opt %s --spmd-annotate=rules=%S/common/rules.toml -o %t/out.mlir
// API: annotate rules=%S/common/rules.toml
// RAISES: ShardingError
// STDERR: %s:7:19: error: argument #0 of @main has a dynamic shape (tensor<?x4xf32>); stablehlo-spmd partitions static shapes only
module attributes {mhlo.num_partitions = 8 : i32} {
  func.func @main(%arg0: tensor<?x4xf32> {mhlo.sharding = "{devices=[8,1]<=[8]}"}) -> tensor<?x4xf32> {
    return %arg0 : tensor<?x4xf32>
  }
}
