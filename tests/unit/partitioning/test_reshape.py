"""Reshapes whose split dim changes block size across a merge, partitioned
and checked against one device: each device exchanges the halo of its
flattened block with its neighbours instead of gathering the dim."""

import re

import jax.numpy as jnp
import numpy as np
import pytest

from .single_device import partition_and_check


def _moved(partitioned: str) -> list[str]:
    return re.findall(r'"stablehlo\.(all_gather|all_reduce|all_to_all|collective_permute)"',
                      partitioned)


@pytest.mark.parametrize("shape, new_shape, mesh", [
    ((7, 10), (14, 5), "x=2"),     # blocks of 40 elements become blocks of 35
    ((24,), (6, 4), "x=4"),        # blocks of 6 become blocks of 8; the last device holds none
    ((3, 10, 6), (3, 4, 15), "x=4"),
])
def test_a_merge_that_moves_block_boundaries_exchanges_halos(shape, new_shape, mesh):
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + 1
    split = (None,) * (len(shape) - 2) + ("x", None) if len(shape) > 1 else ("x",)
    result_split = (None,) * (len(new_shape) - 2) + ("x", None)
    partitioned = partition_and_check(lambda v: jnp.reshape(v, new_shape), (x,), mesh,
                                      [(r"^v$", split), (r"^result$", result_split)])
    assert _moved(partitioned) and set(_moved(partitioned)) == {"collective_permute"}
