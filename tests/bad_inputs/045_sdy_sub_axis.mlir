// A Shardy sharding on a sub-axis, which this project does not model.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:8:19: error: sdy sub-axis #sdy<axis_ref"data":(1)2> is not supported; use whole mesh axes
module {
  sdy.mesh @mesh = <["data"=4]>
  func.func @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data":(1)2}, {}]>}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
