// A sharding over 8 devices on a module whose spmd.mesh has 4.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:7:19: error: argument #0 of @main: sharding uses 8 devices but the mesh has 4
module attributes {spmd.mesh = #sdy.mesh<["data"=4]>} {
  func.func @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[8,1]<=[8]}"}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
