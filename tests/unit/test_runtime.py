"""Running partitioned modules on 8 CPU devices (`stablehlo_spmd.runtime`).

The partitioned modules are written by hand in the form JAX lowers
``shard_map`` to (``sdy.manual_computation`` over all mesh axes, collectives
over global device ids); results are compared with NumPy and with the
unpartitioned program run on one device.
"""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import stablehlo_spmd as ss
from stablehlo_spmd import runtime
from stablehlo_spmd.errors import SpmdError
from stablehlo_spmd.runtime import executable as runtime_executable

RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# ------------------------------------------------------------ modules

ELEMENTWISE = """
module @elementwise attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4]>
  func.func public @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>} loc("x"))
      -> (tensor<8x4xf32> {jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"x"}, {}]>] out_shardings=[<@mesh, [{"x"}, {}]>] manual_axes={"x"} (%arg1: tensor<2x4xf32>) {
      %1 = stablehlo.tanh %arg1 : tensor<2x4xf32>
      %2 = stablehlo.constant dense<2.000000e+00> : tensor<2x4xf32>
      %3 = stablehlo.multiply %1, %2 : tensor<2x4xf32>
      sdy.return %3 : tensor<2x4xf32>
    } : (tensor<8x4xf32>) -> tensor<8x4xf32>
    return %0 : tensor<8x4xf32>
  }
}
"""

ELEMENTWISE_SINGLE = """
module @elementwise attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<8x4xf32> loc("x")) -> (tensor<8x4xf32> {jax.result_info = "result"}) {
    %1 = stablehlo.tanh %arg0 : tensor<8x4xf32>
    %2 = stablehlo.constant dense<2.000000e+00> : tensor<8x4xf32>
    %3 = stablehlo.multiply %1, %2 : tensor<8x4xf32>
    return %3 : tensor<8x4xf32>
  }
}
"""

# x @ w1 with the contracted dimension split over "x": a partial dot, then a psum.
PSUM = """
module @psum attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4]>
  func.func public @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"x"}]>} loc("x"),
                         %arg1: tensor<16x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>} loc("params['w1']"))
      -> (tensor<8x4xf32> {jax.result_info = "result['y']"}) {
    %0 = sdy.manual_computation(%arg0, %arg1) in_shardings=[<@mesh, [{}, {"x"}]>, <@mesh, [{"x"}, {}]>] out_shardings=[<@mesh, [{}, {}]>] manual_axes={"x"} (%a: tensor<8x4xf32>, %w: tensor<4x4xf32>) {
      %1 = stablehlo.dot_general %a, %w, contracting_dims = [1] x [0] : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
      %2 = "stablehlo.all_reduce"(%1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
      ^bb0(%l: tensor<f32>, %r: tensor<f32>):
        %3 = stablehlo.add %l, %r : tensor<f32>
        stablehlo.return %3 : tensor<f32>
      }) : (tensor<8x4xf32>) -> tensor<8x4xf32>
      sdy.return %2 : tensor<8x4xf32>
    } : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    return %0 : tensor<8x4xf32>
  }
}
"""

PSUM_SINGLE = """
module @psum attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<8x16xf32> loc("x"), %arg1: tensor<16x4xf32> loc("params['w1']"))
      -> (tensor<8x4xf32> {jax.result_info = "result['y']"}) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    return %0 : tensor<8x4xf32>
  }
}
"""


def all_gather_module(device_ids=None):
    """8x6 split over ("x", "y") of a 4x2 mesh; gathers "y", negates: result split over "x".

    With `device_ids` the mesh is permuted, and the replica groups follow it:
    each group lists the devices of one "x" row in "y" order.
    """
    ids = list(range(8)) if device_ids is None else list(device_ids)
    mesh_ids = "" if device_ids is None else f", device_ids=[{', '.join(map(str, ids))}]"
    groups = ", ".join(f"[{ids[2 * row]}, {ids[2 * row + 1]}]" for row in range(4))
    return f"""
module @all_gather attributes {{mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32}} {{
  sdy.mesh @mesh = <["x"=4, "y"=2]{mesh_ids}>
  func.func public @main(%arg0: tensor<8x6xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{"x"}}, {{"y"}}]>}} loc("a"))
      -> (tensor<8x6xf32> {{jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{{"x"}}, {{}}]>}}) {{
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{{"x"}}, {{"y"}}]>] out_shardings=[<@mesh, [{{"x"}}, {{}}]>] manual_axes={{"x", "y"}} (%a: tensor<2x3xf32>) {{
      %1 = "stablehlo.all_gather"(%a) <{{all_gather_dim = 1 : i64, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[{groups}]> : tensor<4x2xi64>, use_global_device_ids}}> : (tensor<2x3xf32>) -> tensor<2x6xf32>
      %2 = stablehlo.negate %1 : tensor<2x6xf32>
      sdy.return %2 : tensor<2x6xf32>
    }} : (tensor<8x6xf32>) -> tensor<8x6xf32>
    return %0 : tensor<8x6xf32>
  }}
}}
"""


# Two results sharded over both axes of a 4x2 mesh: one dimension each, and both on one.
TWO_AXES = """
module @two_axes attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4, "y"=2]>
  func.func public @main(%arg0: tensor<8x6xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>} loc("a"),
                         %arg1: tensor<16x3xi32> {sdy.sharding = #sdy.sharding<@mesh, [{"x", "y"}, {}]>} loc("b"))
      -> (tensor<8x6xf32> {jax.result_info = "result[0]", sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>},
          tensor<16x3xi32> {jax.result_info = "result[1]", sdy.sharding = #sdy.sharding<@mesh, [{"x", "y"}, {}]>}) {
    %0:2 = sdy.manual_computation(%arg0, %arg1) in_shardings=[<@mesh, [{"x"}, {"y"}]>, <@mesh, [{"x", "y"}, {}]>] out_shardings=[<@mesh, [{"x"}, {"y"}]>, <@mesh, [{"x", "y"}, {}]>] manual_axes={"x", "y"} (%a: tensor<2x3xf32>, %b: tensor<2x3xi32>) {
      %1 = stablehlo.multiply %a, %a : tensor<2x3xf32>
      %2 = stablehlo.add %b, %b : tensor<2x3xi32>
      sdy.return %1, %2 : tensor<2x3xf32>, tensor<2x3xi32>
    } : (tensor<8x6xf32>, tensor<16x3xi32>) -> (tensor<8x6xf32>, tensor<16x3xi32>)
    return %0#0, %0#1 : tensor<8x6xf32>, tensor<16x3xi32>
  }
}
"""

TWO_AXES_SINGLE = """
module @two_axes attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<8x6xf32> loc("a"), %arg1: tensor<16x3xi32> loc("b"))
      -> (tensor<8x6xf32> {jax.result_info = "result[0]"}, tensor<16x3xi32> {jax.result_info = "result[1]"}) {
    %1 = stablehlo.multiply %arg0, %arg0 : tensor<8x6xf32>
    %2 = stablehlo.add %arg1, %arg1 : tensor<16x3xi32>
    return %1, %2 : tensor<8x6xf32>, tensor<16x3xi32>
  }
}
"""


# The same psum in the GSPMD spelling (what JAX lowers shard_map to with Shardy off).
PSUM_GSPMD = """
module @psum_gspmd attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[4,1,2]<=[8] last_tile_dim_replicate}"} loc("v"))
      -> (tensor<2x4xf32> {jax.result_info = "result"}) {
    %0 = stablehlo.custom_call @Sharding(%arg0) {mhlo.sharding = "{devices=[4,1,2]<=[8] last_tile_dim_replicate}"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %1 = stablehlo.custom_call @SPMDFullToShardShape(%0) {mhlo.sharding = "{manual}"} : (tensor<8x4xf32>) -> tensor<2x4xf32>
    %2 = "stablehlo.all_reduce"(%1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 2, 4, 6], [1, 3, 5, 7]]> : tensor<2x4xi64>, use_global_device_ids}> ({
    ^bb0(%l: tensor<f32>, %r: tensor<f32>):
      %5 = stablehlo.add %l, %r : tensor<f32>
      stablehlo.return %5 : tensor<f32>
    }) : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %3 = stablehlo.custom_call @Sharding(%2) {mhlo.sharding = "{manual}"} : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %4 = stablehlo.custom_call @SPMDShardToFullShape(%3) {mhlo.sharding = "{replicated}"} : (tensor<2x4xf32>) -> tensor<2x4xf32>
    return %4 : tensor<2x4xf32>
  }
}
"""


# A scalar replicated beside a sharded matrix: the one multiplies the other.
SCALE = """
module @scale attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4]>
  func.func public @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>} loc("x"),
                         %arg1: tensor<f32> {sdy.sharding = #sdy.sharding<@mesh, []>} loc("s"))
      -> (tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) {
    %0 = sdy.manual_computation(%arg0, %arg1) in_shardings=[<@mesh, [{"x"}, {}]>, <@mesh, []>] out_shardings=[<@mesh, [{"x"}, {}]>] manual_axes={"x"} (%a: tensor<2x4xf32>, %s: tensor<f32>) {
      %1 = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<f32>) -> tensor<2x4xf32>
      %2 = stablehlo.multiply %a, %1 : tensor<2x4xf32>
      sdy.return %2 : tensor<2x4xf32>
    } : (tensor<8x4xf32>, tensor<f32>) -> tensor<8x4xf32>
    return %0 : tensor<8x4xf32>
  }
}
"""

# 10 rows over 4 devices, the way the partitioner writes it: padded to 12 before the manual
# computation, sliced back to 10 after.
PADDED = """
module @padded attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4]>
  func.func public @main(%arg0: tensor<10x6xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>} loc("x"))
      -> (tensor<10x6xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.pad %arg0, %cst, low = [0, 0], high = [2, 0], interior = [0, 0] : (tensor<10x6xf32>, tensor<f32>) -> tensor<12x6xf32>
    %1 = sdy.manual_computation(%0) in_shardings=[<@mesh, [{"x"}, {}]>] out_shardings=[<@mesh, [{"x"}, {}]>] manual_axes={"x"} (%a: tensor<3x6xf32>) {
      %2 = stablehlo.negate %a : tensor<3x6xf32>
      sdy.return %2 : tensor<3x6xf32>
    } : (tensor<12x6xf32>) -> tensor<12x6xf32>
    %3 = stablehlo.slice %1 [0:10, 0:6] : (tensor<12x6xf32>) -> tensor<10x6xf32>
    return %3 : tensor<10x6xf32>
  }
}
"""

# The GSPMD spelling lets XLA split 10 rows 4 ways at the boundary, which no jax.Array can hold.
UNEVEN_GSPMD = """
module @uneven attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<10x6xf32> {mhlo.sharding = "ARG"} loc("v"))
      -> (tensor<10x6xf32> {jax.result_info = "result", mhlo.sharding = "RESULT"}) {
    %0 = stablehlo.negate %arg0 : tensor<10x6xf32>
    return %0 : tensor<10x6xf32>
  }
}
"""

# Two 64-bit arguments, one sharded.
WIDE = """
module @wide attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=2]>
  func.func public @main(%arg0: tensor<4xi64> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>},
                         %arg1: tensor<f64>) -> (tensor<4xi64>, tensor<f64>) {
    %0 = stablehlo.negate %arg0 : tensor<4xi64>
    %1 = stablehlo.multiply %arg1, %arg1 : tensor<f64>
    return %0, %1 : tensor<4xi64>, tensor<f64>
  }
}
"""


def assert_sharding(array, executable, spec):
    expected = NamedSharding(executable.jax_mesh, spec)
    assert isinstance(array.sharding, NamedSharding), array.sharding
    assert array.sharding.is_equivalent_to(expected, array.ndim), (array.sharding, spec)


# ------------------------------------------------------------ running


def test_elementwise_on_a_sharded_input(eight_devices):
    x = rand(8, 4)
    exe = runtime.compile(ELEMENTWISE)
    assert exe.num_partitions == 4 and len(exe.devices) == 4
    (out,) = exe(x)
    assert isinstance(out, jax.Array) and out.shape == (8, 4) and out.dtype == np.float32
    np.testing.assert_allclose(np.asarray(out), np.tanh(x) * 2, rtol=1e-6)
    (oracle,) = runtime.run_single_device(ELEMENTWISE_SINGLE, [x])
    np.testing.assert_allclose(np.asarray(out), np.asarray(oracle), rtol=1e-6)
    assert_sharding(out, exe, P("x", None))
    assert [s.data.shape for s in out.addressable_shards] == [(2, 4)] * 4


def test_function_with_no_results_compiles_and_runs(eight_devices):
    # XLA hands back one (empty) tuple sharding for no results at all; it was
    # once read as one result's sharding.
    text = """
    module attributes {mhlo.num_partitions = 4 : i32} {
      func.func @main(%arg0: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
        return
      }
    }"""
    exe = runtime.compile(text)
    assert exe.results == [] or len(exe.results) == 0
    assert exe(rand(8, 8)) in ([], ())


def test_a_token_result_comes_back_as_none(eight_devices):
    # An outfeed's ordering token is a result XLA returns, but holds no data.
    text = """
    module attributes {mhlo.num_partitions = 2 : i32} {
      func.func @main(%arg0: tensor<4xf32> {mhlo.sharding = "{devices=[2]<=[2]}"})
          -> (tensor<4xf32> {mhlo.sharding = "{devices=[2]<=[2]}"}, !stablehlo.token) {
        %0 = stablehlo.negate %arg0 {mhlo.sharding = "{devices=[2]<=[2]}"} : tensor<4xf32>
        %1 = stablehlo.create_token : !stablehlo.token
        return %0, %1 : tensor<4xf32>, !stablehlo.token
      }
    }"""
    exe = runtime.compile(text)
    assert exe.results[1].is_token and not exe.results[0].is_token
    x = rand(4)
    negated, token = exe(x)
    np.testing.assert_array_equal(np.asarray(negated), -x)
    assert token is None


def test_psum_gives_a_replicated_result(eight_devices):
    x, w1 = rand(8, 16), rand(16, 4)
    exe = runtime.compile(PSUM)
    assert [a.name for a in exe.arguments] == ["x", "params['w1']"]
    assert [r.name for r in exe.results] == ["result['y']"]
    (out,) = exe(x, w1)
    np.testing.assert_allclose(np.asarray(out), x @ w1, rtol=1e-5, atol=1e-5)
    (oracle,) = runtime.run_single_device(PSUM_SINGLE, [x, w1])
    np.testing.assert_allclose(np.asarray(out), np.asarray(oracle), rtol=1e-5, atol=1e-5)
    assert out.sharding.is_fully_replicated
    assert_sharding(out, exe, P())


def test_memory_per_device_is_the_memory_the_full_compile_holds(eight_devices):
    # The measurement compiles with less codegen effort; buffers must not change.
    stats = runtime.compile(PSUM).memory_analysis()
    held = (stats.argument_size_in_bytes + stats.output_size_in_bytes
            + stats.temp_size_in_bytes - stats.alias_size_in_bytes)
    # Each device's f32 blocks: x 8x4, w1 4x4, and the result 8x4.
    assert held >= (8 * 4 + 4 * 4 + 8 * 4) * 4
    assert runtime.memory_per_device(PSUM) == held


@pytest.mark.parametrize("device_ids", [None, [7, 6, 5, 4, 3, 2, 1, 0], [3, 1, 0, 2, 6, 7, 5, 4]],
                         ids=["iota", "reversed", "permuted"])
def test_all_gather(eight_devices, device_ids):
    a = rand(8, 6)
    exe = runtime.compile(all_gather_module(device_ids))
    (out,) = exe(a)
    np.testing.assert_array_equal(np.asarray(out), -a)
    assert_sharding(out, exe, P("x", None))
    ids = device_ids or list(range(8))
    assert [d.id for d in exe.jax_mesh.devices.flat] == ids  # logical id i runs on device i


def test_mesh_device_ids_are_partition_ids(eight_devices):
    """Mesh position i holds logical device device_ids[i], whose partition_id it reads."""
    text = """
    module @ids attributes {mhlo.num_partitions = 4 : i32} {
      sdy.mesh @mesh = <["x"=4], device_ids=[3, 2, 1, 0]>
      func.func public @main() -> (tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) {
        %0 = sdy.manual_computation() in_shardings=[] out_shardings=[<@mesh, [{"x"}]>] manual_axes={"x"} () {
          %1 = stablehlo.partition_id : tensor<ui32>
          %2 = stablehlo.convert %1 : (tensor<ui32>) -> tensor<f32>
          %3 = stablehlo.broadcast_in_dim %2, dims = [] : (tensor<f32>) -> tensor<2xf32>
          sdy.return %3 : tensor<2xf32>
        } : () -> tensor<8xf32>
        return %0 : tensor<8xf32>
      }
    }
    """
    (out,) = runtime.run(text, [])
    np.testing.assert_array_equal(np.asarray(out), [3, 3, 2, 2, 1, 1, 0, 0])


def test_results_sharded_on_two_axes(eight_devices):
    a = rand(8, 6)
    b = RNG.integers(-100, 100, size=(16, 3)).astype(np.int32)
    exe = runtime.compile(TWO_AXES)
    out = exe(a, b)
    expected = runtime.run_single_device(TWO_AXES_SINGLE, [a, b])
    for got, want in zip(out, expected):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(out[1]), b + b)
    assert_sharding(out[0], exe, P("x", "y"))
    assert_sharding(out[1], exe, P(("x", "y"), None))
    assert {s.data.shape for s in out[0].addressable_shards} == {(2, 3)}
    assert {s.data.shape for s in out[1].addressable_shards} == {(2, 3)}


def test_inputs_may_be_jax_arrays_laid_out_any_way(eight_devices, make_jax_mesh):
    a = rand(8, 6)
    b = RNG.integers(-100, 100, size=(16, 3)).astype(np.int32)
    exe = runtime.compile(TWO_AXES)
    mesh = make_jax_mesh((8,), ("d",))
    inputs = [jnp.asarray(a), jax.device_put(b, NamedSharding(mesh, P(None, None)))]
    out = exe(*inputs)
    np.testing.assert_array_equal(np.asarray(out[0]), a * a)
    placed = exe.place([jax.device_put(a, exe.in_shardings[0]), b])
    assert placed[0].sharding == exe.in_shardings[0]
    # An input already laid out as the executable wants it is used as it is.
    already = jax.device_put(a, exe.in_shardings[0])
    assert exe.place([already, b])[0] is already


def test_host_arrays_with_any_strides(eight_devices):
    # Each device is sent a slice of the host array cut as a view, so the strides of the
    # caller's array (column-major, reversed, a strided window) reach the transfer as they are.
    a = rand(8, 6)
    b = RNG.integers(-100, 100, size=(16, 3)).astype(np.int32)
    exe = runtime.compile(TWO_AXES)
    views = [np.asfortranarray(a), a[::-1].copy()[::-1], np.repeat(a, 2, axis=1)[:, ::2]]
    for view in views:
        assert not view.flags.c_contiguous and np.array_equal(view, a)
        out = exe(view, np.asfortranarray(b))
        np.testing.assert_array_equal(np.asarray(out[0]), a * a)
        np.testing.assert_array_equal(np.asarray(out[1]), b + b)


def test_host_and_device_arrays_mixed(eight_devices, make_jax_mesh):
    x, w1 = rand(8, 16), rand(16, 4)
    exe = runtime.compile(PSUM)
    placed = exe.place([x, w1])
    elsewhere = jax.device_put(w1, NamedSharding(make_jax_mesh((8,), ("d",)), P("d", None)))
    for inputs in ([x, w1], [placed[0], w1], [x, placed[1]], [jnp.asarray(x), elsewhere],
                   placed):
        (out,) = exe(*inputs)
        np.testing.assert_allclose(np.asarray(out), x @ w1, rtol=1e-5, atol=1e-5)
    # A result fed to another executable, which takes it in another layout.
    (again,) = runtime.compile(ELEMENTWISE)(exe(x, w1)[0])
    np.testing.assert_allclose(np.asarray(again), np.tanh(x @ w1) * 2, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scalar", [2.5, np.float32(2.5), np.array(2.5, np.float32),
                                    jnp.float32(2.5)],
                         ids=["python", "numpy-scalar", "numpy-0d", "jax"])
def test_replicated_scalar_argument(eight_devices, scalar):
    x = rand(8, 4)
    (out,) = runtime.compile(SCALE)(x, scalar)
    np.testing.assert_allclose(np.asarray(out), x * 2.5, rtol=1e-6)


def test_module_padding_an_uneven_split_runs(eight_devices):
    x = rand(10, 6)
    exe = runtime.compile(PADDED)
    (out,) = exe(x)
    np.testing.assert_array_equal(np.asarray(out), -x)
    (back,) = exe(out)  # a device array in
    np.testing.assert_array_equal(np.asarray(back), x)


@pytest.mark.parametrize("arg, result", [
    ("{devices=[4,1]<=[4]}", "{replicated}"), ("{replicated}", "{devices=[4,1]<=[4]}"),
    ("{devices=[4,1]<=[4]}", "{devices=[1,4]<=[4]}"),
    ("{devices=[1,4]<=[4]}", "{devices=[1,4]<=[4]}")])
def test_unevenly_split_boundary_runs_as_padded_shards(eight_devices, arg, result):
    # XLA holds 10 rows split 4 ways as shards of 3, the last one padded (and
    # 6 columns as 2, 2, 2 and none): the executable takes and gives such
    # shards, and the caller global arrays.
    exe = runtime.compile(UNEVEN_GSPMD.replace("ARG", arg).replace("RESULT", result))
    x = rand(10, 6)
    for given in (x, jax.device_put(x, eight_devices[0]), exe.place([x])[0]):
        (got,) = exe(given)
        assert got.shape == (10, 6)
        np.testing.assert_array_equal(np.asarray(got), -x)


def test_64_bit_arguments_keep_their_type_with_x64_off():
    # jax narrows 64-bit host values while its x64 flag is off (the default); the executable
    # was compiled for 64 bits, and 32-bit buffers make XLA abort the process.
    big = 3 * 2 ** 40
    lines = fresh_python(f"""
        from stablehlo_spmd import runtime
        runtime.ensure_host_devices(2)
        import jax, numpy as np
        assert not jax.config.jax_enable_x64
        wide, square = runtime.compile({WIDE!r})(np.arange(4, dtype=np.int64) * {big}, 1 + 2**-40)
        print(wide.dtype, square.dtype)
        print(*np.asarray(wide).tolist())
        print(repr(float(square)))
    """)
    assert lines[0] == "int64 float64"
    assert lines[1] == " ".join(str(-i * big) for i in range(4))
    assert float(lines[2]) == (1 + 2 ** -40) ** 2


def test_shard_map_lowered_by_jax_runs(eight_devices):
    mesh = jax.make_mesh((4,), ("x",), devices=jax.devices()[:4],
                         axis_types=(jax.sharding.AxisType.Auto,))

    def f(v):
        return jax.lax.psum(v * 2, "x")

    jitted = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P()),
                     in_shardings=NamedSharding(mesh, P("x")))
    v = rand(8, 4)
    text = jitted.lower(v).as_text(debug_info=True)
    (out,) = runtime.run(text, [v])
    np.testing.assert_allclose(np.asarray(out), np.asarray(jitted(v)), rtol=1e-6)
    assert out.shape == (2, 4)


def test_gspmd_spelling_runs(eight_devices):
    v = rand(8, 4)
    exe = runtime.compile(PSUM_GSPMD)
    (out,) = exe(v)
    np.testing.assert_allclose(np.asarray(out), v.reshape(4, 2, 4).sum(0), rtol=1e-5)
    assert exe.mesh is not None and exe.mesh.mesh_shape == (4, 2)  # inferred from the tiles
    assert exe.in_shardings[0].is_equivalent_to(
        NamedSharding(exe.jax_mesh, P(exe.mesh.axis_names[0])), 2)


def test_donated_arguments_leave_the_callers_array_alone(eight_devices):
    donating = ELEMENTWISE.replace('[{"x"}, {}]>} loc("x")',
                                   '[{"x"}, {}]>, tf.aliasing_output = 0 : i32} loc("x")')
    exe = runtime.compile(donating)
    x = jax.device_put(rand(8, 4), exe.in_shardings[0])
    (out,) = exe(x)
    assert not x.is_deleted()
    np.testing.assert_allclose(np.asarray(out), np.tanh(np.asarray(x)) * 2, rtol=1e-6)
    host = rand(8, 4)
    kept = host.copy()
    (out,) = exe(host)
    np.testing.assert_array_equal(host, kept)
    np.testing.assert_allclose(np.asarray(out), np.tanh(kept) * 2, rtol=1e-6)


def test_run_caches_executables_by_text(eight_devices, monkeypatch):
    runtime.clear_cache()
    compiled = []
    real = runtime_executable._compile   # where `run` looks it up
    monkeypatch.setattr(runtime_executable, "_compile",
                        lambda *a, **k: compiled.append(1) or real(*a, **k))
    x = rand(8, 4)
    first = runtime.run(ELEMENTWISE, [x])
    second = runtime.run(ELEMENTWISE, [x + 1])
    assert len(compiled) == 1
    np.testing.assert_allclose(np.asarray(second[0]), np.tanh(x + 1) * 2, rtol=1e-6)
    assert not np.allclose(np.asarray(first[0]), np.asarray(second[0]))
    runtime.run(ELEMENTWISE + "\n// another text\n", [x])
    assert len(compiled) == 2


def test_explicit_device_assignment(eight_devices):
    devices = list(reversed(jax.devices()[:4]))
    exe = runtime.compile(ELEMENTWISE, devices=devices)
    x = rand(8, 4)
    (out,) = exe(x)
    np.testing.assert_allclose(np.asarray(out), np.tanh(x) * 2, rtol=1e-6)
    shard_of = {s.device.id: s.index for s in out.addressable_shards}
    assert shard_of[3] == (slice(0, 2), slice(None))  # logical device 0 runs on device 3
    by_id = runtime.compile(ELEMENTWISE, devices=[3, 2, 1, 0])
    assert by_id.devices == tuple(devices)
    with pytest.raises(runtime.DeviceError, match="num_partitions = 4 but 2 devices"):
        runtime.compile(ELEMENTWISE, devices=[0, 1])


# ------------------------------------------------------------ errors


def test_wrong_input_count():
    exe = runtime.compile(PSUM)
    with pytest.raises(runtime.RuntimeInputError) as error:
        exe(rand(8, 16))
    message = str(error.value)
    assert "expected 2 inputs" in message and "got 1" in message
    assert "argument #1 \"params['w1']\"" in message
    assert isinstance(error.value, SpmdError) and isinstance(error.value, ValueError)


def test_wrong_input_shape():
    exe = runtime.compile(PSUM)
    with pytest.raises(runtime.RuntimeInputError) as error:
        exe(rand(8, 16), rand(4, 16))
    message = str(error.value)
    assert "argument #1 \"params['w1']\"" in message
    assert "expected shape (16, 4) (tensor<16x4xf32>), got (4, 16)" in message


def test_wrong_input_dtype():
    exe = runtime.compile(PSUM)
    with pytest.raises(runtime.RuntimeInputError) as error:
        exe(rand(8, 16, dtype=np.float64), rand(16, 4))
    assert "argument #0 'x': expected dtype float32 (tensor<8x16xf32>), got float64" in str(
        error.value)
    with pytest.raises(runtime.RuntimeInputError, match="\"params\\['w1'\\]\".*got int32"):
        exe(rand(8, 16), jnp.zeros((16, 4), jnp.int32))


def test_too_many_partitions_for_the_devices():
    text = (ELEMENTWISE.replace("mhlo.num_partitions = 4", "mhlo.num_partitions = 16")
            .replace('["x"=4]', '["x"=16]').replace("8x4xf32", "16x4xf32")
            .replace("2x4xf32", "1x4xf32"))
    with pytest.raises(runtime.DeviceError, match="needs 16 devices but jax has 8 cpu devices.*"
                                                  "xla_force_host_platform_device_count=16"):
        runtime.compile(text)


def test_modules_that_cannot_run():
    with pytest.raises(SpmdError):
        runtime.compile("module { func.func @main( }")
    no_main = ELEMENTWISE.replace("@main", "@other")
    with pytest.raises(runtime.RuntimeCompileError, match="no function @main"):
        runtime.compile(no_main)
    dynamic = ELEMENTWISE_SINGLE.replace("tensor<8x4xf32> loc", "tensor<?x4xf32> loc")
    dynamic = dynamic.replace("stablehlo.tanh %arg0 : tensor<8x4xf32>",
                              "stablehlo.tanh %arg0 : (tensor<?x4xf32>) -> tensor<8x4xf32>")
    with pytest.raises(SpmdError, match="argument #0 'x'"):
        runtime.run_single_device(dynamic, [rand(8, 4)])


# A row sum over a sharded dim left pending, then asked for whole: in GSPMD's spelling XLA
# never sums it (each device keeps its part); in Shardy's it does.
PENDING_SUM_GSPMD = """
module @pending attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[1,2]<=[2]}"} loc("x"))
      -> (tensor<8xf32> {mhlo.sharding = "{replicated}"}) {
    %c = stablehlo.constant {mhlo.sharding = "{replicated}"} dense<0.0> : tensor<f32>
    %0 = stablehlo.reduce(%arg0 init: %c) applies stablehlo.add across dimensions = [1] {mhlo.sharding = "{unreduced}"} : (tensor<8x4xf32>, tensor<f32>) -> tensor<8xf32>
    %1 = stablehlo.custom_call @Sharding(%0) {mhlo.sharding = "{replicated}"} : (tensor<8xf32>) -> tensor<8xf32>
    return %1 : tensor<8xf32>
  }
}
"""

PENDING_SUM_SHARDY = """
module @pending attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=2]>
  func.func public @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"x"}]>} loc("x"))
      -> (tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}) {
    %c = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = stablehlo.reduce(%arg0 init: %c) applies stablehlo.add across dimensions = [1] {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{}], unreduced={"x"}>]>} : (tensor<8x4xf32>, tensor<f32>) -> tensor<8xf32>
    %1 = sdy.sharding_constraint %0 <@mesh, [{}]> : tensor<8xf32>
    return %1 : tensor<8xf32>
  }
}
"""

# (StableHLO's parser places a pretty-printed reduce at its operand list's parenthesis.)
PENDING_SUM_MESSAGE = (r"<module>:6:26: error: 'stablehlo.reduce' holds a pending partial sum "
                       r"\('\{unreduced\}' in mhlo.sharding\), which XLA's GSPMD partitioner does "
                       r"not sum")


def test_a_pending_sum_in_gspmd_spelling_is_refused_not_run_wrong():
    with pytest.raises(runtime.RuntimeCompileError, match=PENDING_SUM_MESSAGE):
        runtime.compile(PENDING_SUM_GSPMD)
    # The module itself is fine: one device runs it, and our partitioner sums the part.
    x = rand(8, 4)
    np.testing.assert_allclose(
        np.asarray(runtime.run_single_device(PENDING_SUM_GSPMD, [x])[0]), x.sum(1), rtol=1e-6)
    np.testing.assert_allclose(
        np.asarray(runtime.run(ss.partition(PENDING_SUM_GSPMD), [x])[0]), x.sum(1), rtol=1e-6)


def test_a_pending_sum_in_shardy_spelling_runs_and_is_summed():
    x = rand(8, 4)
    np.testing.assert_allclose(
        np.asarray(runtime.run(PENDING_SUM_SHARDY, [x])[0]), x.sum(1), rtol=1e-6)


def test_the_run_command_refuses_a_pending_sum_as_the_api_does(tmp_path):
    source, inputs = tmp_path / "pending.mlir", tmp_path / "in.npz"
    source.write_text(PENDING_SUM_GSPMD)
    np.savez(inputs, x=rand(8, 4))
    done = subprocess.run(
        [sys.executable, "-m", "stablehlo_spmd.cli.main", "run", str(source), "--inputs",
         str(inputs), "--outputs", str(tmp_path / "out.npz")],
        capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert f"{source}:6:26: error: 'stablehlo.reduce' holds a pending partial sum" in done.stderr
    assert not (tmp_path / "out.npz").exists()


def test_run_single_device_refuses_partitioned_modules():
    with pytest.raises(runtime.RuntimeCompileError, match="already partitioned"):
        runtime.run_single_device(PSUM, [rand(8, 16), rand(16, 4)])


def test_run_single_device_drops_annotations():
    annotated = """
    module @annotated attributes {mhlo.num_partitions = 8 : i32} {
      sdy.mesh @mesh = <["data"=4, "model"=2]>
      func.func public @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[4,1,2]<=[8] last_tile_dim_replicate}"} loc("x"),
                             %arg1: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>})
          -> (tensor<8x4xf32> {mhlo.sharding = "{replicated}"}) {
        %0 = stablehlo.custom_call @Sharding(%arg0) {mhlo.sharding = "{devices=[8,1]<=[8]}"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
        %1 = sdy.sharding_constraint %arg1 <@mesh, [{}, {"model"}]> : tensor<8x4xf32>
        %2 = stablehlo.add %0, %1 : tensor<8x4xf32>
        return %2 : tensor<8x4xf32>
      }
    }
    """
    x, y = rand(8, 4), rand(8, 4)
    (out,) = runtime.run_single_device(annotated, [x, y])
    np.testing.assert_allclose(np.asarray(out), x + y, rtol=1e-6)
    assert len(out.sharding.device_set) == 1


def test_python_scalars_take_the_argument_dtype():
    scalar = """
    module @scalar {
      func.func public @main(%arg0: tensor<f32>, %arg1: tensor<3xi32>) -> tensor<3xf32> {
        %0 = stablehlo.convert %arg1 : (tensor<3xi32>) -> tensor<3xf32>
        %1 = stablehlo.broadcast_in_dim %arg0, dims = [] : (tensor<f32>) -> tensor<3xf32>
        %2 = stablehlo.multiply %0, %1 : tensor<3xf32>
        return %2 : tensor<3xf32>
      }
    }
    """
    (out,) = runtime.run_single_device(scalar, [2.5, np.array([1, 2, 3], np.int32)])
    np.testing.assert_allclose(np.asarray(out), [2.5, 5.0, 7.5])
    with pytest.raises(runtime.RuntimeInputError, match="argument #1: expected dtype int32"):
        runtime.run_single_device(scalar, [2.5, [1, 2, 3.5]])


# ------------------------------------------------------------ devices


def test_ensure_host_devices_after_jax_started(eight_devices):
    runtime.ensure_host_devices(8)
    with pytest.raises(runtime.DeviceError, match="needs 1000 devices but jax has 8 cpu devices; "
                                                  "jax's backends have already started"):
        runtime.ensure_host_devices(1000)


def fresh_python(script, xla_flags=None):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if xla_flags is not None:
        env["XLA_FLAGS"] = xla_flags
    env["JAX_PLATFORMS"] = "cpu"
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                            text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.split("\n")


def test_ensure_host_devices_before_jax_is_imported():
    flags, count = fresh_python("""
        import os, sys
        from stablehlo_spmd import runtime
        runtime.ensure_host_devices(3)
        assert "jax" not in sys.modules
        print(os.environ["XLA_FLAGS"])
        import jax
        print(len(jax.devices()))
    """, "--xla_force_host_platform_device_count=2 --xla_cpu_enable_fast_math=false")[:2]
    assert flags == "--xla_force_host_platform_device_count=3 --xla_cpu_enable_fast_math=false"
    assert count == "3"


def test_ensure_host_devices_before_jax_starts():
    (count,) = fresh_python("""
        import jax
        from stablehlo_spmd import runtime
        runtime.ensure_host_devices(5)
        print(len(jax.devices()))
    """)[:1]
    assert count == "5"


# ------------------------------------------------------------ files


def test_run_files(tmp_path):
    module = tmp_path / "psum.mlir"
    module.write_text(PSUM)
    x, w1 = rand(8, 16), rand(16, 4)
    inputs, outputs = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inputs, **{"x": x, "params['w1']": w1})
    written = runtime.run_files(str(module), str(inputs), str(outputs))
    assert [key for key, _ in written] == ["result0"]
    with np.load(outputs) as result:
        assert result.files == ["result0"]
        np.testing.assert_allclose(result["result0"], x @ w1, rtol=1e-5, atol=1e-5)

    np.savez(inputs, arg0=x, arg1=w1)  # positional keys work as well
    runtime.run_files(str(module), str(inputs), str(outputs))

    np.savez(inputs, x, w1)  # and NumPy's own, arr_0 and arr_1
    runtime.run_files(str(module), str(inputs), str(outputs))
    with np.load(outputs) as result:
        np.testing.assert_allclose(result["result0"], x @ w1, rtol=1e-5, atol=1e-5)


def test_run_files_asks_for_the_devices_it_needs(tmp_path):
    module, inputs, outputs = tmp_path / "two_axes.mlir", tmp_path / "in.npz", tmp_path / "out.npz"
    module.write_text(TWO_AXES)
    a, b = rand(8, 6), np.arange(48, dtype=np.int32).reshape(16, 3)
    np.savez(inputs, a=a, arg1=b)
    (count,) = fresh_python(f"""
        from stablehlo_spmd import runtime
        runtime.run_files({str(module)!r}, {str(inputs)!r}, {str(outputs)!r})
        import jax
        print(len(jax.devices()))
    """)[:1]
    assert count == "8"
    with np.load(outputs) as result:
        np.testing.assert_array_equal(result["result0"], a * a)
        np.testing.assert_array_equal(result["result1"], b + b)


def test_run_files_errors_write_nothing(tmp_path):
    module = tmp_path / "psum.mlir"
    module.write_text(PSUM)
    inputs, outputs = tmp_path / "in.npz", tmp_path / "out.npz"
    x, w1 = rand(8, 16), rand(16, 4)

    np.savez(inputs, x=x)
    with pytest.raises(runtime.RuntimeInputError,
                       match="argument #1 \"params\\['w1'\\]\" is missing .*"
                             "expected the key \"params\\['w1'\\]\", 'arg1' or 'arr_1'"):
        runtime.run_files(str(module), str(inputs), str(outputs))

    np.savez(inputs, x=x, arg1=w1, w2=w1)
    with pytest.raises(runtime.RuntimeInputError, match="key 'w2' naming no argument"):
        runtime.run_files(str(module), str(inputs), str(outputs))

    np.savez(inputs, x=x, arg0=x, arg1=w1)
    with pytest.raises(runtime.RuntimeInputError, match="given twice"):
        runtime.run_files(str(module), str(inputs), str(outputs))

    # NumPy's positional key names the same argument as 'arg1' does.
    np.savez(inputs, x, w1, arg1=w1)
    with pytest.raises(runtime.RuntimeInputError,
                       match="argument #1 .* given twice .* as 'arg1' and as 'arr_1'"):
        runtime.run_files(str(module), str(inputs), str(outputs))

    np.savez(inputs, x=x, arg1=w1.T)
    with pytest.raises(runtime.RuntimeInputError, match="expected shape \\(16, 4\\)"):
        runtime.run_files(str(module), str(inputs), str(outputs))

    with pytest.raises(SpmdError, match="cannot open input file"):
        runtime.run_files(str(tmp_path / "missing.mlir"), str(inputs), str(outputs))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.npz", "psum.mlir"]


def test_run_files_keeps_bfloat16(tmp_path):
    module = tmp_path / "bf16.mlir"
    module.write_text(ELEMENTWISE.replace("f32", "bf16").replace(
        "dense<2.000000e+00>", "dense<2.0>"))
    x = rand(8, 4).astype(jnp.bfloat16)
    inputs, outputs = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inputs, x=x)  # .npz stores bfloat16 as raw 2-byte records
    (_, out), = runtime.run_files(str(module), str(inputs), str(outputs))
    assert out.dtype == jnp.bfloat16
    np.testing.assert_allclose(out.astype(np.float32),
                               (np.tanh(x.astype(np.float32)) * 2), rtol=2e-2, atol=2e-2)


def test_boolean_arguments_are_numpy_bools():
    # StableHLO's i1 is a boolean: numpy bool arrays and scalars feed it.
    select = """
    module @select {
      func.func public @main(%arg0: tensor<3xi1>, %arg1: tensor<3xf32>) -> tensor<3xf32> {
        %0 = stablehlo.negate %arg1 : tensor<3xf32>
        %1 = stablehlo.select %arg0, %arg1, %0 : tensor<3xi1>, tensor<3xf32>
        return %1 : tensor<3xf32>
      }
    }
    """
    flags = np.array([True, False, True])
    (out,) = runtime.run_single_device(select, [flags, np.ones(3, np.float32)])
    np.testing.assert_array_equal(np.asarray(out), [1.0, -1.0, 1.0])


def _donating_step(params, x):
    return {"w": params["w"] - 0.1 * (x.T @ x)}, (x @ params["w"]).sum()


def test_call_consuming_hands_over_the_donated_arrays():
    mesh = ss.Mesh.from_string("data=2,model=2")
    rules = [(r"params\['w'\]", (None, "model")), (r"result\[0\]\['w'\]", (None, "model"))]
    exported = ss.export(jax.jit(_donating_step, donate_argnums=0),
                         {"w": jnp.ones((8, 8), jnp.float32)}, jnp.ones((4, 8), jnp.float32))
    executable = runtime.compile(ss.partition(exported, mesh, rules))
    w = np.ones((8, 8), np.float32)
    x = np.ones((4, 8), np.float32)
    kept = executable.place([w, x])
    executable(*kept)
    assert not kept[0].is_deleted()          # a plain call copies what the module donates
    new_w, _ = executable.call_consuming(*kept)
    assert kept[0].is_deleted()              # the consuming call hands it over
    assert np.allclose(np.asarray(new_w), w - 0.1 * 4)
