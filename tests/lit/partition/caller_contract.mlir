// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate --spmd-partition | FileCheck %s

// The partitioned @main keeps what its signature promises the caller: a
// donated argument stays donated to its result, and results keep their
// names.  A training step updates its parameters in place this way.

// CHECK-LABEL: module @donated
// CHECK: func.func public @main(%[[W:arg[0-9]+]]: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"axis_0"}]>, tf.aliasing_output = 0 : i32}
// CHECK-SAME: -> (tensor<8x8xf32> {jax.result_info = "result[0]['w']", sdy.sharding = #sdy.sharding<@mesh, [{}, {"axis_0"}]>}
module @donated attributes {mhlo.num_partitions = 4 : i32} {
  func.func public @main(%w: tensor<8x8xf32> {mhlo.sharding = "{devices=[1,2,2]<=[4] last_tile_dim_replicate}", tf.aliasing_output = 0 : i32},
                         %g: tensor<8x8xf32>)
      -> (tensor<8x8xf32> {jax.result_info = "result[0]['w']", mhlo.sharding = "{devices=[1,2,2]<=[4] last_tile_dim_replicate}"}) {
    %0 = stablehlo.subtract %w, %g : tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}

// -----

// A result laid out otherwise than the argument donated to it cannot share
// its buffers: the argument is donated without a partner (jax.buffer_donor),
// and XLA reuses it where a result fits.

// CHECK-LABEL: module @relaid
// CHECK: func.func public @main(%{{.*}}: tensor<8x8xf32> {jax.buffer_donor = true, sdy.sharding = #sdy.sharding<@mesh, [{}, {"axis_0"}]>}
// CHECK-NOT: tf.aliasing_output
module @relaid attributes {mhlo.num_partitions = 4 : i32} {
  func.func public @main(%w: tensor<8x8xf32> {mhlo.sharding = "{devices=[1,2,2]<=[4] last_tile_dim_replicate}", tf.aliasing_output = 0 : i32},
                         %g: tensor<8x8xf32>)
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"}) {
    %0 = stablehlo.subtract %w, %g : tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}
