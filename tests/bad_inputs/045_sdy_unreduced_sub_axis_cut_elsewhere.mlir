// Partial sums pending over a sub-axis that cuts its axis where the
// module's other sub-axes do not ("data":(3)2 beside "data":(1)2 on
// data=6): no one mesh has both as axes, and a pending sum needs axes.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: ShardingError
// STDERR: %s:11:19: error: unreduced sub-axes that cut their axis differently from the module's other sub-axes are not supported
module {
  sdy.mesh @mesh = <["data"=6]>
  func.func @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data":(1)2}, {}]>},
                  %arg1: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}], unreduced={"data":(3)2}>}) -> tensor<8x4xf32> {
    return %arg0 : tensor<8x4xf32>
  }
}
