"""Reduces whose body leaves no partial result (argmax's variadic reduce),
partitioned and checked against one device: each device reduces its shard,
the per-device results are gathered and reduced again."""

import re

import jax
import jax.numpy as jnp
import numpy as np

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
