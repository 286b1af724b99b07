"""Reduces whose body leaves no partial result (argmax's variadic reduce),
partitioned and checked against one device: each device reduces its shard,
the per-device results are gathered and reduced again."""

import re

import jax
import jax.numpy as jnp
import numpy as np

import stablehlo_spmd as ss

from .single_device import partition_and_check


def _gathered_types(partitioned: str) -> list[str]:
    return re.findall(r'"stablehlo\.all_gather".*: \((tensor<[^>]*>)\)', partitioned)


def _argmax_rows(x):
    return jnp.argmax(x, axis=1)


def test_argmax_over_a_split_dim_gathers_one_candidate_per_device():
    x = np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32)
    partitioned = partition_and_check(_argmax_rows, (x,), "x=8",
                                      [(r"^x$", (None, "x")), (r"^result$", ())])
    # Values and indices of each device's best, [1, 16] each; not the 16x8 shards.
    assert sorted(_gathered_types(partitioned)) == ["tensor<1x16xf32>", "tensor<1x16xi32>"]


def test_argmax_over_an_uneven_split_never_picks_the_padding():
    # 10 columns over 4 devices: shards of 3, the last one holding 1 and padding.
    x = -np.abs(np.random.default_rng(1).standard_normal((4, 10))).astype(np.float32) - 1
    x[:, 9] = 5.0   # the best of every row sits in the last, mostly padded shard
    x[2, 4] = 7.0
    partition_and_check(_argmax_rows, (x,), "x=4", [(r"^x$", (None, "x")), (r"^result$", ())])


def test_argmax_over_split_rows_and_columns():
    x = np.random.default_rng(2).standard_normal((8, 32)).astype(np.float32)
    partition_and_check(lambda x: (jnp.argmax(x, axis=1), jax.lax.argmin(x, 0, jnp.int32)),
                        (x,), "r=2,c=4", [(r"^x$", ("r", "c"))])


CROSS_REPLICA_MAX = """
module attributes {spmd.mesh = #sdy.mesh<["x"=2]>} {
  func.func @main(%a: tensor<4x3xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"})
      -> (tensor<4x3xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"}) {
    %0 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<> : tensor<0x0xi64>}> ({
    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
      %s = stablehlo.maximum %x, %y : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<4x3xf32>) -> tensor<4x3xf32>
    return %0 : tensor<4x3xf32>
  }
}
"""


def test_a_cross_replica_all_reduce_runs_on_each_block_as_it_is():
    a = np.random.default_rng(3).standard_normal((4, 3)).astype(np.float32)
    partitioned = ss.run_passes(CROSS_REPLICA_MAX, "spmd-propagate,spmd-partition")
    assert "all_gather" not in partitioned
    assert partitioned.count("stablehlo.all_reduce") == 1
    assert "}) : (tensor<2x3xf32>) -> tensor<2x3xf32>" in partitioned
    got, = ss.run(partitioned, [a])
    want, = ss.run_single_device(CROSS_REPLICA_MAX, [a])
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
