// A manual region (jax.shard_map) in the input, which this project cannot keep yet.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:9:10: error: sdy.manual_computation (what jax.shard_map lowers to) is not supported yet: stablehlo-spmd cannot keep a manual region as it is
module {
  sdy.mesh @mesh = <["data"=2]>
  func.func @main(%arg0: tensor<8x4xf32>) -> tensor<8x4xf32> {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"data"}, {}]>] out_shardings=[<@mesh, [{"data"}, {}]>] manual_axes={"data"} (%arg1: tensor<4x4xf32>) {
      sdy.return %arg1 : tensor<4x4xf32>
    } : (tensor<8x4xf32>) -> tensor<8x4xf32>
    return %0 : tensor<8x4xf32>
  }
}
