// A sharding group whose values differ in shape: no one sharding fits both.
// CLI: stablehlo-spmd-opt %s --spmd-propagate -o %t/out.mlir
// API: propagate
// RAISES: SpmdError
// STDERR: %s:10:3: error: sharding group 0 holds values of different shapes (8x4 and 4x8); its values must share one sharding
module {
  sdy.mesh @mesh = <["data"=2]>
  func.func @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}, %arg1: tensor<4x8xf32>) -> tensor<8x4xf32> {
    sdy.sharding_group %arg0 group_id=0 : tensor<8x4xf32>
  sdy.sharding_group %arg1 group_id=0 : tensor<4x8xf32>
    return %arg0 : tensor<8x4xf32>
  }
}
