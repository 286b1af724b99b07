"""Spatial partitioning and pipeline shifts compute what one device computes.

Convolutions, pooling (forward and backward), slices, pads, reversals and
the pipeline-parallel shift along a sharded dimension are partitioned with
halo exchanges (`stablehlo_spmd/partitioning/windowed.py`).  Each program
runs on 8 CPU devices and is compared with the single-device run; where the
collectives are known from the shapes, the partitioned text is checked for
them: neighbours exchange rows (collective_permute) and nothing is gathered.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_spmd as ss
from stablehlo_spmd.frontends.jax import load_object

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute")


def _random(*shape, seed=[100]):
    seed[0] += 1
    return jnp.asarray(np.random.default_rng(seed[0]).standard_normal(shape), jnp.float32)


def _compare(fn, args, mesh, rules, rtol=1e-5, atol=1e-5, want=None):
    text = ss.export(fn, *args)
    partitioned = ss.partition(text, mesh, rules)
    leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(args)]
    got = ss.run(partitioned, leaves)
    if want is None:
        want = ss.run_single_device(text, leaves)
    for index, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol,
                                   err_msg=f"result #{index}")
    counts = {kind: len(re.findall(rf'"?stablehlo\.{kind}"?\(', partitioned))
              for kind in COLLECTIVES}
    return partitioned, counts


def _conv(x, kernel, strides=(1, 1), padding="SAME"):
    return jax.lax.conv_general_dilated(x, kernel, strides, padding,
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _max_pool(x, window=3, stride=2, padding="SAME"):
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, window, window, 1),
                                 (1, stride, stride, 1), padding)


SPATIAL = (None, "h", "w", None)


@pytest.mark.parametrize("strides", [(1, 1), (2, 2)])
def test_spatially_sharded_convolution_exchanges_halos_only(strides):
    # 16x16 images split 4 ways on rows and 2 on columns: each device needs
    # one row/column from each neighbour for a 3x3 SAME convolution.
    args = (_random(2, 16, 16, 3), _random(3, 3, 3, 5))
    _, counts = _compare(lambda x, k: _conv(x, k, strides), args, "h=4,w=2",
                         [(r"^x$", SPATIAL), (r"^result$", SPATIAL)], rtol=1e-4, atol=1e-4)
    assert counts["all_gather"] == 0 and counts["all_reduce"] == 0
    assert 1 <= counts["collective_permute"] <= 4


def test_spatial_cnn_training_step():
    # conv -> relu -> 2x2 pool -> dense, with images split on rows and
    # columns: the forward conv, the pool, its gradient and the input
    # gradient conv exchange halos; the kernel gradient sums partials.
    args = ({"kernel": _random(3, 3, 3, 4), "dense": _random(256, 5)},
            _random(2, 16, 16, 3), _random(2, 5))
    partitioned, counts = _compare(
        load_object("examples/workloads.py:cnn_step"), args, "h=4,w=2",
        [(r"^x$", SPATIAL)], rtol=1e-4, atol=1e-4)
    assert counts["collective_permute"] >= 1
    # The images are never gathered: every all_gather is smaller than one image batch.
    for shape in re.findall(r'"stablehlo\.all_gather".*-> tensor<([0-9x]+)xf32>', partitioned):
        assert np.prod([int(d) for d in shape.split("x")]) < 2 * 16 * 16 * 3


def test_max_pool_forward_and_backward_on_sharded_rows():
    # 3x3 windows at stride 2 with SAME padding: one row of halo forward;
    # the gradient scatters into its window and returns the halo rows.
    x = _random(2, 16, 16, 3)

    def pool_and_grad(x):
        return _max_pool(x), jax.grad(lambda x: jnp.sum(_max_pool(x) ** 2))(x)

    _, counts = _compare(pool_and_grad, (x,), "h=4",
                         [(r"^x$", (None, "h", None, None)),
                          (r"^result", (None, "h", None, None))], rtol=1e-5, atol=1e-5)
    assert counts["all_gather"] == 0 and counts["all_reduce"] == 0
    assert counts["collective_permute"] >= 2


@pytest.mark.parametrize("rows", [16, 14])
def test_slice_pad_reverse_keep_the_dimension_sharded(rows):
    # 14 rows over 4 devices is uneven (4, 4, 4, 2): padding must never leak.
    def shapes(x):
        return (x[2:rows - 2] * 2, jnp.pad(x, ((1, 2), (0, 0)), constant_values=3.0),
                x[::-1] + 1, x[1::2])

    _, counts = _compare(shapes, (_random(rows, 4),), "x=4",
                         [(r"^x$", ("x", None)), (r"^result", ("x", None))])
    assert counts["all_gather"] == 0
    assert counts["collective_permute"] >= 3


def test_four_stage_pipeline_over_six_microbatches():
    # Stage weights and the state buffer split over 4 stages; each step's
    # shift is one collective_permute of one microbatch between neighbours.
    params, inputs = load_object("examples/pipeline.py:example_args")()
    assert params["weights"].shape[0] == 4 and inputs.shape[0] == 6
    sequential = load_object("examples/pipeline.py:sequential")
    want = [np.asarray(sequential(params, inputs))]
    partitioned, counts = _compare(
        load_object("examples/pipeline.py:pipeline"), (params, inputs), "stage=4",
        [(r"weights'\]$", ("stage", None, None)), (r"bias'\]$", ("stage", None))],
        rtol=1e-5, atol=1e-5, want=want)
    microbatch = "1x8x32xf32"
    permutes = re.findall(r'"stablehlo\.collective_permute".*-> tensor<([0-9a-z]+)>', partitioned)
    assert microbatch in permutes
    # Nothing is gathered: the finished microbatch is broadcast by its stage.
    assert counts["all_gather"] == 0 and counts["all_to_all"] == 0
    assert counts["collective_permute"] == 1 and counts["all_reduce"] == 1


def _depthwise_loss(x, kernel):
    y = jax.lax.conv_general_dilated(x, kernel, (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                     feature_group_count=x.shape[-1])
    return jnp.sum(y ** 2)


@pytest.mark.parametrize("mesh, x_spec, kernel_spec, expected", [
    # Batch split: the input gradient is local, the kernel gradient (a
    # batch-grouped convolution) sums one partial over the batch.
    ("data=4", ("data", None, None, None), None, {"all_reduce": 1}),
    # Channels split: every device holds whole groups; nothing moves.
    ("c=4", (None, None, None, "c"), (None, None, None, "c"), {}),
    # Rows split: halos for the convolutions, one partial kernel gradient.
    ("h=4", (None, "h", None, None), None, {"all_reduce": 1, "collective_permute": 6}),
])
def test_depthwise_convolution_and_its_gradients(mesh, x_spec, kernel_spec, expected):
    rules = [(r"^x$", x_spec)] + ([(r"^kernel$", kernel_spec)] if kernel_spec else [])
    _, counts = _compare(jax.value_and_grad(_depthwise_loss, argnums=(0, 1)),
                         (_random(4, 8, 8, 8), _random(3, 3, 1, 8)), mesh, rules,
                         rtol=1e-4, atol=1e-3)
    moved = {kind: count for kind, count in counts.items() if count}
    # The loss itself is a sum over the split dims: one more all-reduce.
    assert moved.pop("all_reduce", 0) == expected.pop("all_reduce", 0) + 1
    assert moved == expected


def test_convolution_with_split_output_features_is_local():
    args = (_random(4, 8, 8, 8), _random(3, 3, 8, 16))
    _, counts = _compare(_conv, args, "m=4", [(r"^kernel$", (None, None, None, "m")),
                                              (r"^result$", (None, None, None, "m"))],
                         rtol=1e-4, atol=1e-4)
    assert not any(counts.values())


def _compare_text(text, mesh, args, rtol=1e-4, atol=1e-4):
    """`_compare` for a StableHLO program whose ops carry their shardings."""
    partitioned = ss.partition(text, mesh)
    got, want = ss.run(partitioned, args), ss.run_single_device(text, args)
    for index, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol,
                                   err_msg=f"result #{index}")
    return partitioned


def _moved_elements(partitioned):
    """Per collective, the elements of its (per-device) result."""
    return [int(np.prod([int(d) for d in shape.split("x")]))
            for shape in re.findall(r'"stablehlo\.(?:all_gather|all_reduce|reduce_scatter|'
                                    r'all_to_all|collective_permute)".*-> tensor<([0-9x]+)x[a-z]',
                                    partitioned)]


def _grouped_conv(lhs, rhs, out, dims, pad, counts, shardings, mesh):
    """A one-spatial-dim convolution with a sharding on each value."""
    lhs_sharding, rhs_sharding, out_sharding = shardings
    return f"""
module attributes {{spmd.mesh = #sdy.mesh<[{mesh}]>}} {{
  func.func @main(%x: tensor<{lhs}xf32> {{mhlo.sharding = "{lhs_sharding}"}},
                  %w: tensor<{rhs}xf32> {{mhlo.sharding = "{rhs_sharding}"}})
      -> (tensor<{out}xf32> {{mhlo.sharding = "{out_sharding}"}}) {{
    %0 = stablehlo.convolution(%x, %w) dim_numbers = {dims},
        window = {{stride = [1], pad = [{pad}], lhs_dilate = [1], rhs_dilate = [1]}}
        {{batch_group_count = {counts[0]} : i64, feature_group_count = {counts[1]} : i64,
          mhlo.sharding = "{out_sharding}"}}
        : (tensor<{lhs}xf32>, tensor<{rhs}xf32>) -> tensor<{out}xf32>
    return %0 : tensor<{out}xf32>
  }}
}}"""


@pytest.mark.parametrize("program, shapes", [
    # Depthwise forward, input and kernel split on the channels, result
    # wanted on the batch: convolve 2 channels a device, move the result.
    (_grouped_conv("8x6x8", "3x1x8", "8x6x8", "[b, 0, f]x[0, i, o]->[b, 0, f]", "[1, 1]",
                   (1, 8), ("{devices=[1,1,4]<=[4]}",) * 2 + ("{devices=[4,1,1]<=[4]}",),
                   '"x"=4'), ((8, 6, 8), (3, 1, 8))),
    # A depthwise kernel gradient (batch groups = channels), operands split
    # on the channels, result wanted on its windows.
    (_grouped_conv("2x8x8", "2x7x8", "4x1x8", "[f, 0, b]x[i, 0, o]->[0, b, f]", "[1, 1]",
                   (8, 1), ("{devices=[1,1,4]<=[4]}",) * 2 + ("{devices=[4,1,1]<=[4]}",),
                   '"x"=4'), ((2, 8, 8), (2, 7, 8))),
    # The same with the rows split unevenly (9 over 2) on "a" and the
    # channels on "b", the result wanted on the channels over "a": each
    # device sums its rows of every window (masking the padding row).
    (_grouped_conv("2x9x4", "2x9x4", "3x1x4", "[f, 0, b]x[i, 0, o]->[0, b, f]", "[1, 1]",
                   (4, 1), ("{devices=[1,2,2]<=[4]}",) * 2
                   + ("{devices=[1,1,2,2]<=[4] last_tile_dim_replicate}",), '"a"=2, "b"=2'),
     ((2, 9, 4), (2, 9, 4))),
])
def test_grouped_convolution_runs_where_its_groups_are(program, shapes):
    # Nothing the size of an operand moves: only the result (or a halo row).
    args = [np.asarray(_random(*shape)) for shape in shapes]
    partitioned = _compare_text(program, None, args)
    assert '"stablehlo.all_gather"' not in partitioned
    out_shape = re.search(r"-> \(tensor<([0-9x]+)xf32>", program).group(1)
    out_elements = int(np.prod([int(d) for d in out_shape.split("x")]))
    assert all(moved <= out_elements for moved in _moved_elements(partitioned))


def test_uneven_channel_split_of_a_depthwise_convolution():
    # 6 channels over 4 devices: 2, 2, 2 and 0 groups (the last padded).
    args = (_random(2, 8, 8, 6), _random(3, 3, 1, 6))
    spec = (None, None, None, "c")
    _, counts = _compare(lambda x, k: jax.lax.conv_general_dilated(
        x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
        feature_group_count=6), args, "c=4",
        [(r"^x$", spec), (r"^k$", spec), (r"^result$", spec)], rtol=1e-4, atol=1e-4)
    assert not any(counts.values())


def _input_gradient_of_strided_conv(kernel, dy):
    x = jnp.zeros((2, 16, 16, 4), jnp.float32)
    return jax.vjp(lambda x: _conv(x, kernel, (2, 2)), x)[1](dy)[0]


def _sum_pool_transposed(x):
    # The transpose of a 2x2, stride-2 sum pooling: base dilation 2.
    return jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 2, 2, 1), (1, 1, 1, 1),
                                 ((0, 0), (1, 1), (1, 1), (0, 0)), base_dilation=(1, 2, 2, 1))


def _upsample_with_zeros(x):
    return jax.lax.pad(x, 0.0, ((0, 0, 0), (0, 1, 1), (0, 1, 1), (0, 0, 0)))


@pytest.mark.parametrize("fn, shapes", [
    (_input_gradient_of_strided_conv, [(3, 3, 4, 5), (2, 8, 8, 5)]),
    (_sum_pool_transposed, [(2, 8, 8, 3)]),
    (_upsample_with_zeros, [(2, 8, 8, 3)]),
])
def test_base_dilated_windows_exchange_halos_only(fn, shapes):
    # Rows split 4 ways: every device's windows start at the same phase of
    # the dilation, so each reads its own rows and at most one neighbour's.
    args = tuple(_random(*shape) for shape in shapes)
    rules = [(r"^(x|dy)$", SPATIAL), (r"^result$", SPATIAL)]
    partitioned, counts = _compare(fn, args, "h=4,w=2", rules, rtol=1e-4, atol=1e-4)
    assert counts["all_gather"] == 0 and counts["all_to_all"] == 0
    assert counts["all_reduce"] == 0 and counts["collective_permute"] <= 2


def _avg_pool_gradient(x):
    # JAX transposes a 2x2, stride-2 sum pooling into a pad with interior
    # padding (17 rows from 8) and a 2x2 sum at stride 1.
    def loss(x):
        pooled = jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        return jnp.sum(pooled ** 2)
    return jax.grad(loss)(x)


def _input_gradient_of_strided_conv_on_14_rows(kernel, dy):
    x = jnp.zeros((2, 14, 14, 4), jnp.float32)
    return jax.vjp(lambda x: _conv(x, kernel, (2, 2)), x)[1](dy)[0]


@pytest.mark.parametrize("fn, shapes, mesh", [
    # 17 padded rows over 4 devices (5 a device) spread from 8 (2 a device).
    (_avg_pool_gradient, [(2, 16, 16, 3)], "h=4,w=2"),
    # 14 result rows over 2 devices (7 a device) from 7 (4 and 3).
    (_input_gradient_of_strided_conv_on_14_rows, [(3, 3, 4, 5), (2, 7, 7, 5)], "h=2"),
])
def test_base_dilation_at_a_phase_that_differs_between_devices(fn, shapes, mesh):
    # Each device reads from its own first element; the local op computes a
    # result more than its share and each device keeps its own: neighbours
    # exchange rows, nothing is gathered.
    args = tuple(_random(*shape) for shape in shapes)
    spec = SPATIAL if "w" in mesh else (None, "h", None, None)
    _, counts = _compare(fn, args, mesh, [(r"^(x|dy)$", spec), (r"^result$", spec)],
                         rtol=1e-4, atol=1e-4)
    assert counts["all_gather"] == 0 and counts["all_to_all"] == 0
    assert counts["collective_permute"] >= 1


@pytest.mark.parametrize("shift", [2, 5])
def test_roll_along_a_sharded_dim_gathers_nothing(shift):
    # jnp.roll concatenates two slices; the pieces of each window that lie
    # past the tensor's end are padding, not data to receive, and a slice
    # that lies shards away from where its result is wanted (by 5: rows
    # [11, 16) over devices 0-2) comes from the shards that hold it.
    _, counts = _compare(lambda x: jnp.roll(x, shift, axis=0), (_random(16, 8),), "x=4",
                         [(r"^x$", ("x", None)), (r"^result$", ("x", None))])
    assert counts["all_gather"] == 0 and counts["all_reduce"] == 0


@pytest.mark.parametrize("rows, reverse, halo", [(14, "false", 1), (14, "true", 2),
                                                 (16, "true", 1)])
def test_kernel_gradient_with_a_split_of_the_dilated_kernel(rows, reverse, halo):
    # The kernel gradient of a stride-2 convolution over 14 rows split in 2:
    # the input x (7 rows a device) against the output gradient (7 rows,
    # dilated by 2: 4 and 3 a device).  Each device sums its part of every
    # window (the padding row of the gradient masked): one row of x from a
    # neighbour, one all_reduce of the 3x3 kernel gradient, nothing
    # gathered.  A reversed kernel's part 0 pairs with the end of every
    # window: the two devices swap their parts of it first (the padding row
    # then leads the window: two rows of x).
    program = """
module attributes {spmd.mesh = #sdy.mesh<["h"=2]>} {
  func.func @main(%x: tensor<8xROWSx14x4xf32> {mhlo.sharding = "{devices=[1,2,1,1]<=[2]}"},
                  %dy: tensor<8xHALFx7x4xf32> {mhlo.sharding = "{devices=[1,2,1,1]<=[2]}"})
      -> (tensor<3x3x4x4xf32> {mhlo.sharding = "{replicated}"}) {
    %0 = stablehlo.convolution(%x, %dy) dim_numbers = [f, 0, 1, b]x[i, 0, 1, o]->[0, 1, b, f],
        window = {stride = [1, 1], pad = [[1, 0], [1, 0]], lhs_dilate = [1, 1],
                  rhs_dilate = [2, 2], reverse = [REVERSE, false]}
        {batch_group_count = 1 : i64, feature_group_count = 1 : i64,
         mhlo.sharding = "{replicated}"}
        : (tensor<8xROWSx14x4xf32>, tensor<8xHALFx7x4xf32>) -> tensor<3x3x4x4xf32>
    return %0 : tensor<3x3x4x4xf32>
  }
}""".replace("ROWS", str(rows)).replace("HALF", str(rows // 2)).replace("REVERSE", reverse)
    args = [np.asarray(_random(8, rows, 14, 4)), np.asarray(_random(8, rows // 2, 7, 4))]
    partitioned = _compare_text(program, None, args, rtol=1e-4, atol=1e-3)
    permuted = re.findall(r'"stablehlo\.collective_permute".*-> tensor<([0-9x]+)xf32>', partitioned)
    swapped = [f"8x{-(-rows // 4)}x7x4"] if reverse == "true" else []
    assert sorted(permuted) == sorted(swapped + [f"8x{halo}x14x4"])
    assert partitioned.count('"stablehlo.all_reduce"') == 1
    assert '"stablehlo.all_gather"' not in partitioned


def test_convolution_with_a_parallel_dim_split_runs_on_each_share():
    # Dim 0 is XLA's spelling of a batch dim (8 elements, the input dilated
    # by 8, windows 7 apart): split over x, each device runs the same
    # pattern over its 4 (dilation 4, stride 3); dim 1, an ordinary window
    # split over y, exchanges halos.  Nothing is gathered or summed.
    program = """
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @main(%x: tensor<8x6x4x3xf32> {mhlo.sharding = "{devices=[2,2,1,1]<=[4]}"},
                  %w: tensor<8x3x5x3xf32> {mhlo.sharding = "{devices=[2,1,1,1,2]<=[4] last_tile_dim_replicate}"})
      -> (tensor<8x6x4x5xf32> {mhlo.sharding = "{devices=[2,2,1,1]<=[4]}"}) {
    %0 = stablehlo.convolution(%x, %w) dim_numbers = [0, 1, b, f]x[0, 1, o, i]->[0, 1, b, f],
        window = {stride = [7, 1], pad = [[0, 0], [1, 1]], lhs_dilate = [8, 1], rhs_dilate = [1, 1]}
        {batch_group_count = 1 : i64, feature_group_count = 1 : i64,
         mhlo.sharding = "{devices=[2,2,1,1]<=[4]}"}
        : (tensor<8x6x4x3xf32>, tensor<8x3x5x3xf32>) -> tensor<8x6x4x5xf32>
    return %0 : tensor<8x6x4x5xf32>
  }
}"""
    args = [np.asarray(_random(8, 6, 4, 3)), np.asarray(_random(8, 3, 5, 3))]
    partitioned = _compare_text(program, None, args)
    assert re.search(r"lhs_dilate = \[4, 1\]", partitioned)
    assert '"stablehlo.all_gather"' not in partitioned
    assert '"stablehlo.all_reduce"' not in partitioned
    assert partitioned.count('"stablehlo.collective_permute"') == 2


def test_select_and_scatter_on_rows_that_do_not_divide():
    # The max-pool gradient's scatter of XLA's SelectAndScatterWithOverlap:
    # 11 rows over 4 devices (3 a device, the last 2), 6 windows of 3 at
    # stride 2 (2 a device, the last device none).  What reaches past the
    # tensor, and the last device's windows, hold nothing to exchange or to
    # return: one row of halo each way forward, back the same, nothing
    # gathered.
    program = """
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @main(%operand: tensor<11x4xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                  %source: tensor<6x2xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<11x4xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = "stablehlo.select_and_scatter"(%operand, %source, %zero) ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %ge = stablehlo.compare GE, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
        stablehlo.return %ge : tensor<i1>
    }, {
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %sum = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %sum : tensor<f32>
    }) {window_dimensions = array<i64: 3, 2>, window_strides = array<i64: 2, 2>,
        padding = dense<[[1, 1], [0, 0]]> : tensor<2x2xi64>, mhlo.sharding = "{devices=[4,1]<=[4]}"}
      : (tensor<11x4xf32>, tensor<6x2xf32>, tensor<f32>) -> tensor<11x4xf32>
    return %0 : tensor<11x4xf32>
  }
}"""
    args = [np.asarray(_random(11, 4)), np.asarray(_random(6, 2))]
    partitioned = _compare_text(program, None, args)
    assert '"stablehlo.all_gather"' not in partitioned
    moved = _moved_elements(partitioned)
    assert moved and all(elements <= 2 * 4 for elements in moved)


@pytest.mark.parametrize("pad, cut", [((1, 0), slice(0, 16)),    # shift right by one
                                      ((2, 2), slice(4, 20)),    # shift left by two
                                      ((3, 1), slice(1, 17))])
def test_a_slice_of_a_pad_exchanges_one_window(pad, cut):
    # XLA's MergedPadThenSlice*: pad then slice is one shift of the split
    # rows, one collective_permute, where the pair would exchange twice.
    # (lax.pad: jnp.pad would wrap the pad in a function of its own.)
    _, counts = _compare(
        lambda x: jax.lax.pad(x, 2.0, [(*pad, 0), (0, 0, 0)])[cut], (_random(16, 4),), "x=4",
        [(r"^x$", ("x", None)), (r"^result$", ("x", None))])
    assert counts == {**dict.fromkeys(COLLECTIVES, 0), "collective_permute": 1}


@pytest.mark.parametrize("n, shift", [(12, 2), (6, 2), (10, 6), (16, 5), (9, 1)])
def test_a_rotation_moves_pieces_straight_from_the_source(n, shift):
    # XLA's MergedSliceThenConcatRotateRight*: the last `shift` rows put
    # before the rest.  Each device's block is one or two pieces of x's
    # shards, which go in as few collective_permutes as the pieces allow
    # (one for an even rotation); the slices' own halos are never made.
    def rotate(x):
        return jax.lax.concatenate([jax.lax.slice_in_dim(x, n - shift, n),
                                    jax.lax.slice_in_dim(x, 0, n - shift)], 0)

    partitioned, counts = _compare(rotate, (_random(n, 4),), "x=4",
                                   [(r"^x$", ("x", None)), (r"^result$", ("x", None))])
    assert counts == {**dict.fromkeys(COLLECTIVES, 0), "collective_permute": counts[
        "collective_permute"]}
    assert 1 <= counts["collective_permute"] <= 2
    if n % 4 == 0 and shift < n // 4:
        assert counts["collective_permute"] == 1


def _shift_left_with_wrap(x):
    # XLA's CollectivePermuteSimplifyIdentity: pad by one on each side, then
    # the last 16 columns of the pad and its first 2, side by side.
    padded = jax.lax.pad(x, 3.0, [(0, 0, 0), (1, 1, 0)])
    return jax.lax.concatenate([padded[:, 2:18], padded[:, 0:2]], 1)


def _circular_pad(x):
    return jax.lax.concatenate([x[-1:], x, x[:1]], 0)


@pytest.mark.parametrize("fn, shape, spec", [
    (_shift_left_with_wrap, (3, 16), (None, "x")),
    (_circular_pad, (16, 4), ("x", None)),
])
def test_pieces_of_one_source_keep_its_padding_and_gather_nothing(fn, shape, spec):
    _, counts = _compare(fn, (_random(*shape),), "x=4",
                         [(r"^x$", spec), (r"^result$", spec)])
    assert counts["all_gather"] == 0 and counts["all_to_all"] == 0
    assert 1 <= counts["collective_permute"] <= 2
