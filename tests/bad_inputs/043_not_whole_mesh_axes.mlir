// A tile assignment whose tile dims no whole axes of the mesh make up, in
// any device order: 2 rows of tiles from a mesh with one 4-way axis would
// need part of an axis.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:9:19: error: argument #0 of @main: sharding's tile assignment is not a choice of whole axes of the mesh [data=4]
module attributes {spmd.mesh = #sdy.mesh<["data"=4]>} {
  func.func @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,2]0,3,1,2}"}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
