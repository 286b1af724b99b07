"""Batched linear algebra (triangular_solve, cholesky) and fft partitioned and
checked against one device: the batch dims, and a triangular solve's
right-hand sides, stay split; only each matrix or signal is gathered whole."""

import re

import numpy as np
import pytest

import stablehlo_spmd as ss


def _gathered(partitioned: str) -> list[str]:
    return re.findall(r'"stablehlo\.all_gather"\(.*: \((tensor<[^>]*>)\)', partitioned)


def _lower_triangular(batch, n, seed):
    rng = np.random.default_rng(seed)
    a = np.tril(rng.standard_normal((batch, n, n))).astype(np.float32)
    a[:, np.arange(n), np.arange(n)] = 4.0  # well conditioned
    return a


TRIANGULAR_SOLVE = """
module attributes {{spmd.mesh = #sdy.mesh<["r"=2, "c"=2, "d"=2]>}} {{
  func.func @main(%a: tensor<4x8x8xf32> {{mhlo.sharding = "{{devices=[2,2,2]<=[8]}}"}},
                  %b: tensor<{b}xf32> {{mhlo.sharding = "{{devices=[2,2,2]<=[8]}}"}})
      -> (tensor<{b}xf32> {{mhlo.sharding = "{{devices=[2,2,2]<=[8]}}"}}) {{
    %0 = "stablehlo.triangular_solve"(%a, %b) {{left_side = {left}, lower = true,
        unit_diagonal = false, transpose_a = #stablehlo<transpose NO_TRANSPOSE>}}
        : (tensor<4x8x8xf32>, tensor<{b}xf32>) -> tensor<{b}xf32>
    return %0 : tensor<{b}xf32>
  }}
}}
"""


@pytest.mark.parametrize("left_side", [True, False])
def test_triangular_solve_keeps_batch_and_right_hand_sides_split(left_side):
    a = _lower_triangular(4, 8, 0)
    b_shape = (4, 8, 12) if left_side else (4, 12, 8)
    b = np.random.default_rng(1).standard_normal(b_shape).astype(np.float32)
    text = TRIANGULAR_SOLVE.format(b="x".join(map(str, b_shape)),
                                   left=str(left_side).lower())
    partitioned = ss.run_passes(text, "spmd-propagate,spmd-partition")
    got, = ss.run(partitioned, [a, b])
    want, = ss.run_single_device(text, [a, b])
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    # The batch dim stays split (2 of 4 per device) on every gathered value,
    # and b's right-hand sides stay split too (6 of 12).
    assert _gathered(partitioned) and all(t.startswith("tensor<2x") for t in _gathered(partitioned))
    local_b = re.search(r'"stablehlo.triangular_solve"\(%\S+, %\S+\) .*'
                        r': \((tensor<[^>]*>), (tensor<[^>]*>)\)', partitioned).group(2)
    dims = [int(d) for d in local_b[len("tensor<"):].split("x")[:3]]
    rhs_dim = 2 if left_side else 1
    assert dims[0] == 2 and dims[rhs_dim] == 6


CHOLESKY = """
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @main(%a: tensor<8x4x4xf32> {mhlo.sharding = "{devices=[4,1,1]<=[4]}"})
      -> (tensor<8x4x4xf32> {mhlo.sharding = "{devices=[4,1,1]<=[4]}"}) {
    %0 = stablehlo.cholesky %a, lower = true : tensor<8x4x4xf32>
    return %0 : tensor<8x4x4xf32>
  }
}
"""


def test_cholesky_runs_each_batch_where_it_is():
    m = np.random.default_rng(2).standard_normal((8, 4, 4)).astype(np.float32)
    a = m @ np.swapaxes(m, 1, 2) + 4 * np.eye(4, dtype=np.float32)
    partitioned = ss.run_passes(CHOLESKY, "spmd-propagate,spmd-partition")
    assert "all_gather" not in partitioned and "all_to_all" not in partitioned
    assert "stablehlo.cholesky" in partitioned and "tensor<2x4x4xf32>" in partitioned
    got, = ss.run(partitioned, [a])
    want, = ss.run_single_device(CHOLESKY, [a])
    np.testing.assert_allclose(np.tril(np.asarray(got)), np.tril(np.asarray(want)), rtol=1e-5,
                               atol=1e-5)


FFT = """
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @main(%a: tensor<8x6x16xf32> {mhlo.sharding = "{devices=[4,1,1]<=[4]}"})
      -> (tensor<8x6x9xcomplex<f32>> {mhlo.sharding = "{devices=[4,1,1]<=[4]}"}) {
    %0 = stablehlo.fft %a, type = RFFT, length = [16] : (tensor<8x6x16xf32>) -> tensor<8x6x9xcomplex<f32>>
    return %0 : tensor<8x6x9xcomplex<f32>>
  }
}
"""


def test_an_fft_transforms_each_batch_where_it_is():
    a = np.random.default_rng(4).standard_normal((8, 6, 16)).astype(np.float32)
    partitioned = ss.run_passes(FFT, "spmd-propagate,spmd-partition")
    assert "all_gather" not in partitioned and "all_to_all" not in partitioned
    assert "-> tensor<2x6x9xcomplex<f32>>" in partitioned
    got, = ss.run(partitioned, [a])
    want, = ss.run_single_device(FFT, [a])
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-4)
