// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition --canonicalize | FileCheck %s

// The result lists its two devices the other way round.  The body works in
// one device order, so the argument would be permuted in and the reversed
// block permuted back out; but a reverse is local to each block, so the two
// permutes undo each other and neither is emitted: device 0's first half,
// reversed, is the result's second half, which device 0 holds in the
// result's order.

// CHECK-LABEL: func.func public @main
// CHECK-SAME: -> (tensor<4xf32> {mhlo.sharding = "{devices=[2]1,0}"})
// CHECK: %[[LOCAL:.*]] = stablehlo.custom_call @SPMDFullToShardShape
// CHECK-NEXT: %[[REV:.*]] = stablehlo.reverse %[[LOCAL]], dims = [0] : tensor<2xf32>
// CHECK-NOT: collective_permute
// CHECK: stablehlo.custom_call @SPMDShardToFullShape
func.func @main(%arg0: tensor<4xf32> {mhlo.sharding = "{devices=[2]0,1}"})
    -> (tensor<4xf32> {mhlo.sharding = "{devices=[2]1,0}"}) {
  %0 = stablehlo.reverse %arg0, dims = [0] {mhlo.sharding = "{devices=[2]1,0}"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// The same orders around an add of the argument with another value: the
// add reads a block that is not permuted, so the permutes stay.

// CHECK-LABEL: func.func public @main
// CHECK: "stablehlo.collective_permute"
// CHECK: stablehlo.add
// CHECK: "stablehlo.collective_permute"
func.func @main(%arg0: tensor<4xf32> {mhlo.sharding = "{devices=[2]0,1}"},
                %arg1: tensor<4xf32> {mhlo.sharding = "{devices=[2]1,0}"})
    -> (tensor<4xf32> {mhlo.sharding = "{devices=[2]0,1}"}) {
  %0 = stablehlo.add %arg0, %arg1 {mhlo.sharding = "{devices=[2]1,0}"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}
