"""Values that list their devices in an order of their own (XLA allows any
device list per value) are read, partitioned and run right: the body works
in the mesh's order, and a boundary value in another order is permuted at
the edge."""

import numpy as np

import stablehlo_spmd as ss

REVERSED_IN = """
func.func @main(%x: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,1]1,0}"},
                %y: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,1]0,1}"})
    -> (tensor<8x4xf32> {mhlo.sharding = "{devices=[2,1]1,0}"}) {
  %0 = stablehlo.add %x, %y {mhlo.sharding = "{devices=[2,1]0,1}"} : tensor<8x4xf32>
  %1 = stablehlo.reverse %0, dims = [0] {mhlo.sharding = "{devices=[2,1]1,0}"} : tensor<8x4xf32>
  return %1 : tensor<8x4xf32>
}
"""


def _random(*shape, seed=[500]):
    seed[0] += 1
    return np.random.default_rng(seed[0]).standard_normal(shape).astype(np.float32)


def test_reversed_device_order_at_the_boundary_runs_right():
    partitioned = ss.run_passes(REVERSED_IN, "spmd-propagate,spmd-partition,canonicalize")
    # The frame keeps the user's order (GSPMD's spelling can say it) ...
    assert 'mhlo.sharding = "{devices=[2,1]1,0}"' in partitioned
    # ... and the body swaps the two blocks of %x into the mesh's order.
    assert "source_target_pairs = dense<[[0, 1], [1, 0]]>" in partitioned
    x, y = _random(8, 4), _random(8, 4)
    got = ss.run(partitioned, [x, y])[0]
    np.testing.assert_allclose(np.asarray(got), (x + y)[::-1], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(got), np.asarray(ss.run_single_device(REVERSED_IN,
                                                                                 [x, y])[0]))


def test_device_orders_that_permute_a_2d_mesh_run_right():
    text = """
func.func @main(%x: tensor<8x8xf32> {mhlo.sharding = "{devices=[2,2]3,1,2,0}"},
                %w: tensor<8x8xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"})
    -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[2,1,2]1,0,3,2 last_tile_dim_replicate}"}) {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
"""
    partitioned = ss.run_passes(text, "spmd-propagate,spmd-partition,canonicalize")
    x, w = _random(8, 8), _random(8, 8)
    np.testing.assert_allclose(np.asarray(ss.run(partitioned, [x, w])[0]), x @ w,
                               rtol=1e-5, atol=1e-5)


SUB_AXES = """
sdy.mesh @mesh = <["a"=6]>
func.func @main(%x: tensor<4x6xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a":(1)2}, {}]>})
    -> (tensor<4x6xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"a":(3)2}]>}) {
  %0 = stablehlo.sine %x : tensor<4x6xf32>
  return %0 : tensor<4x6xf32>
}
"""


def test_sub_axes_that_cut_an_axis_two_ways_run_right():
    # "a":(1)2 splits a=6 as 2x3, "a":(3)2 as 3x2: the mesh takes the first
    # cut, and the second reads as its devices listed, an order of its own.
    partitioned = ss.run_passes(SUB_AXES, "spmd-propagate,spmd-partition,canonicalize")
    x = _random(4, 6)
    np.testing.assert_allclose(np.asarray(ss.run(partitioned, [x])[0]), np.sin(x), rtol=1e-6)


def test_two_meshes_over_the_same_devices_run_right():
    text = """
sdy.mesh @flat = <["a"=4]>
sdy.mesh @grid = <["x"=2, "y"=2]>
func.func @main(%x: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@flat, [{"a"}, {}]>},
                %y: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@grid, [{"y"}, {"x"}]>})
    -> (tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@grid, [{}, {"x", "y"}]>}) {
  %0 = stablehlo.multiply %x, %y : tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}
"""
    partitioned = ss.run_passes(text, "spmd-propagate,spmd-partition,canonicalize")
    x, y = _random(8, 4), _random(8, 4)
    np.testing.assert_allclose(np.asarray(ss.run(partitioned, [x, y])[0]), x * y, rtol=1e-6)
