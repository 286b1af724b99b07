// An explicit tile naming device 9 on a module whose spmd.mesh has 4.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:7:19: error: argument #0: mhlo.sharding '{devices=[2,2]0,1,2,9}' names device 9 but the module has devices 0 to 3
module attributes {spmd.mesh = #sdy.mesh<["data"=2, "model"=2]>} {
  func.func @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,2]0,1,2,9}"}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
