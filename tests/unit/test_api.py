"""The top-level API a user reaches as ``import stablehlo_spmd as ss``."""

import inspect
import os

import jax.numpy as jnp
import numpy as np

import stablehlo_spmd as ss
from stablehlo_spmd.demo import NO_LOCATION, list_collectives

MATMUL = """
func.func @main(%x: tensor<8x4xf32> loc("x"), %w: tensor<4x6xf32> loc("w")) -> tensor<8x6xf32> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<8x4xf32>, tensor<4x6xf32>) -> tensor<8x6xf32>
  return %0 : tensor<8x6xf32>
}"""


def test_partition_compile_and_call_as_the_readme_says():
    per_device = ss.partition(MATMUL, "data=4", [("^x$", ("data", None)), ("^w$", ())])
    executable = ss.compile(per_device)
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    w = (np.arange(24) % 5 - 2).astype(np.float32).reshape(4, 6)  # small integers: exact sums
    (got,) = executable(x, w)
    (want,) = ss.run_single_device(MATMUL, [x, w])
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_compile_is_listed_in_the_public_names():
    assert "compile" in ss.__all__


def _negated_total(x):
    return -jnp.sum(x * 2.0)


def test_export_locates_ops_in_the_traced_code_and_never_in_stablehlo_spmd():
    text = ss.export(_negated_total, np.ones((8, 4), np.float32))
    body_line = inspect.getsourcelines(_negated_total)[1] + 1
    assert f'"{__file__}":{body_line}:' in text
    assert os.path.dirname(ss.__file__) not in text


def test_a_collective_no_traced_line_made_has_no_location():
    # The sum over the split rows stays partial through the negation and is
    # reduced for the return, which jax locates at the call of `lower`.
    text = ss.export(_negated_total, np.ones((8, 4), np.float32))
    per_device = ss.partition(text, "data=4", [("^x$", ("data", None)), ("^result", ())])
    [collective] = list_collectives(per_device)
    assert collective.where == NO_LOCATION
