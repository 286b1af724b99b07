"""The top-level API a user reaches as ``import stablehlo_spmd as ss``."""

import numpy as np

import stablehlo_spmd as ss

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
