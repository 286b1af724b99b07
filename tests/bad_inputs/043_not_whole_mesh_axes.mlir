// A tile assignment that no choice of the mesh's axes gives.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:7:19: error: argument #0 of @main: sharding's tile assignment is not a choice of whole axes of the mesh [data=2, model=2]
module attributes {spmd.mesh = #sdy.mesh<["data"=2, "model"=2]>} {
  func.func @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[4,1]0,3,1,2}"}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
