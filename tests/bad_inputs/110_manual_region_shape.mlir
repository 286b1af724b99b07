// A manual region whose per-device type no product of the manual axes cuts
// the global value down to (8 rows cannot become 3 on 2 devices).
// CLI: stablehlo-spmd-opt %s --spmd-propagate --spmd-partition -o %t/out.mlir
// API: run_passes pipeline=spmd-propagate,spmd-partition
// RAISES: ShardingError
// STDERR: %s:10:10: error: dimension 0 of the region's value (3) does not divide the global one (8)
module {
  func.func @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"}) -> (tensor<8x4xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"}) {
    %0 = stablehlo.custom_call @Sharding(%arg0) {mhlo.sharding = "{devices=[2,1]<=[2]}"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %1 = stablehlo.custom_call @SPMDFullToShardShape(%0) {mhlo.sharding = "{manual}"} : (tensor<8x4xf32>) -> tensor<3x4xf32>
    %2 = stablehlo.custom_call @SPMDShardToFullShape(%1) {mhlo.sharding = "{devices=[2,1]<=[2]}"} : (tensor<3x4xf32>) -> tensor<8x4xf32>
    return %2 : tensor<8x4xf32>
  }
}
