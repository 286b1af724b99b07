// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate 2>/dev/null | FileCheck %s
// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition 2>/dev/null | FileCheck %s --check-prefix=PART

// An op with no rule runs on whole values and propagates nothing through
// itself, but its result is a value like any other (Shardy's semantics):
// the negate's split reaches it from the returned value, and the partitioner
// cuts each device's rows out of the kernel's whole result, which moves
// nothing.  Only its operand is gathered.

// CHECK-LABEL: func.func @result_sharded_by_its_user
// CHECK: %[[KERNEL:.*]] = stablehlo.custom_call @my_kernel(%arg0) {mhlo.sharding = "{devices=[4,1]<=[4]}"}
// CHECK: stablehlo.negate %[[KERNEL]] {mhlo.sharding = "{devices=[4,1]<=[4]}"}

// PART-LABEL: func.func public @main
// PART: %[[WHOLE:.*]] = "stablehlo.all_gather"(%arg1)
// PART: %[[OUT:.*]] = stablehlo.custom_call @my_kernel(%[[WHOLE]]) : (tensor<8x8xf32>) -> tensor<8x8xf32>
// PART-NOT: all_gather
// PART: %[[ROWS:.*]] = stablehlo.dynamic_slice %[[OUT]], %{{.*}}, %{{.*}}, sizes = [2, 8]
// PART: stablehlo.negate %[[ROWS]] : tensor<2x8xf32>
func.func @result_sharded_by_its_user(%x: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
  %0 = stablehlo.custom_call @my_kernel(%x) : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %1 = stablehlo.negate %0 : tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}

// -----

// The user's own annotation on such an op still pins its result.

// CHECK-LABEL: func.func @annotated_result
// CHECK: stablehlo.custom_call @my_kernel(%arg0) {mhlo.sharding = "{devices=[1,4]<=[4]}"}
// CHECK: stablehlo.negate %{{.*}} {mhlo.sharding = "{devices=[1,4]<=[4]}"}
func.func @annotated_result(%x: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> tensor<8x8xf32> {
  %0 = stablehlo.custom_call @my_kernel(%x) {mhlo.sharding = "{devices=[1,4]<=[4]}"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %1 = stablehlo.negate %0 : tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}
