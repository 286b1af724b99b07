"""Manual regions (``jax.shard_map`` inside ``jax.jit``, and GSPMD's
``@SPMDFullToShardShape`` spelling) are kept manual and partitioned around.

A shard_map program has no one-device form to run, so each program here is
held against the same computation written without shard_map, run on one
device: what the per-device body computes, summed or concatenated as the
collectives in it say.
"""

import warnings
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_spmd as ss
from stablehlo_spmd.errors import ShardingError
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.partitioning.manual import global_layout
from stablehlo_spmd.sharding import Sharding

P = jax.sharding.PartitionSpec


def _mesh(*axes):
    names = tuple(n for n, _ in axes)
    return jax.make_mesh(tuple(s for _, s in axes), names,
                         axis_types=(jax.sharding.AxisType.Auto,) * len(names))


def _random(*shape, seed=[300]):
    seed[0] += 1
    return np.random.default_rng(seed[0]).standard_normal(shape).astype(np.float32)


def _exported(fn, mesh, specs, *args) -> str:
    shardings = [jax.sharding.NamedSharding(mesh, s) for s in specs]
    return jax.jit(fn, in_shardings=shardings).lower(*args).as_text()


def _partition(text: str) -> str:
    return ss.run_passes(text, "spmd-propagate,spmd-partition,canonicalize,cse")


def test_shard_map_with_a_psum_inside_jit_matches_its_one_device_form():
    mesh = _mesh(("x", 4), ("y", 2))

    def step(a, b):
        @partial(jax.shard_map, mesh=mesh, in_specs=(P("x", None), P(None, "y")),
                 out_specs=P("x", "y"))
        def body(a, b):
            return (a @ b) * jax.lax.psum(jnp.sum(a), "x")
        return jnp.tanh(body(a, b)) + 1

    a, b = _random(8, 16) / 4, _random(16, 4)
    text = _exported(step, mesh, (P("x"), P()), a, b)
    assert "sdy.manual_computation" in text
    partitioned = _partition(text)
    got = ss.run(partitioned, [a, b])[0]
    want = np.tanh((a @ b) * a.sum()) + 1   # the psum over x adds every row block
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    # The body stays per device: its all-reduce is the user's, over the same groups.
    assert partitioned.count('"stablehlo.all_reduce"') == 1
    assert "replica_groups = dense<[[0, 2, 4, 6], [1, 3, 5, 7]]>" in partitioned


def test_shard_map_over_one_axis_leaves_the_other_to_the_partitioner():
    # Manual over "x" only: inside, "y" is free, and the partitioner splits
    # the region's values over it like any other value.
    mesh = _mesh(("x", 2), ("y", 4))

    def step(a, w):
        h = jnp.sin(a) @ w

        @partial(jax.shard_map, mesh=mesh, in_specs=P("x", None), out_specs=P("x", None),
                 axis_names={"x"})
        def body(h):
            return h - jax.lax.pmean(h, "x")
        return body(h) * 2

    a, w = _random(8, 6), _random(6, 16)
    text = _exported(step, mesh, (P("x"), P(None, "y")), a, w)
    partitioned = _partition(text)
    # shard_map leaves "y" open at the region's edges: the body runs split
    # over it as the dot before it does, so the user's all-reduce is the
    # only collective (nothing is gathered over "y" to enter the region).
    assert partitioned.count('"stablehlo.all_reduce"') == 1
    assert "all_gather" not in partitioned and "all_to_all" not in partitioned
    got = ss.run(partitioned, [a, w])[0]
    h = np.sin(a) @ w
    blocks = h.reshape(2, 4, 16)
    want = (blocks - blocks.mean(axis=0, keepdims=True)).reshape(8, 16) * 2
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_collectives_in_a_shard_map_body_run_per_device():
    # ppermute, all_gather, psum_scatter and all_to_all over "x" in the body:
    # each is the user's own collective, kept as it is, with no warning.
    mesh = _mesh(("x", 4), ("y", 2))

    def step(a, b):
        @partial(jax.shard_map, mesh=mesh, in_specs=(P("x", "y"), P("x")),
                 out_specs=(P("x", "y"), P(None, "y"), P("x"), P("x")), check_vma=False)
        def body(a, b):
            shifted = jax.lax.ppermute(a, "x", [(i, (i + 1) % 4) for i in range(4)])
            gathered = jax.lax.all_gather(a, "x", axis=0, tiled=True)
            scattered = jax.lax.psum_scatter(b, "x", scatter_dimension=0, tiled=True)
            swapped = jax.lax.all_to_all(b, "x", 0, 0, tiled=True)
            return shifted * 2, gathered, scattered, swapped
        return body(jnp.sin(a), b)

    a, b = _random(8, 4), _random(16, 3)
    text = _exported(step, mesh, (P("x", "y"), P("x")), a, b)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ss.SpmdWarning)
        partitioned = _partition(text)
    shifted, gathered, scattered, swapped = (np.asarray(r) for r in ss.run(partitioned, [a, b]))
    blocks = b.reshape(4, 4, 3)   # b's row block on each x
    np.testing.assert_allclose(shifted, np.roll(np.sin(a), 2, axis=0) * 2, rtol=1e-6)
    np.testing.assert_allclose(gathered, np.sin(a), rtol=1e-6)
    np.testing.assert_allclose(scattered, blocks.sum(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(swapped, blocks.transpose(1, 0, 2).reshape(16, 3), rtol=1e-6)


def test_a_ring_loop_in_a_shard_map_body_runs_per_device():
    # Ring-attention's shape: a loop whose carry is passed round the ring
    # with ppermute, manual over "x" only, "y" free (q arrives split on it).
    mesh = _mesh(("x", 4), ("y", 2))

    def step(q, k):
        @partial(jax.shard_map, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"),
                 axis_names={"x"}, check_vma=False)
        def ring(q, k):
            def body(_, carry):
                total, passed = carry
                passed_on = jax.lax.ppermute(passed, "x", [(j, (j + 1) % 4) for j in range(4)])
                return total + q @ passed.T, passed_on
            start = jnp.zeros((q.shape[0], k.shape[0]), q.dtype)
            return jax.lax.fori_loop(0, 4, body, (start, k))[0]
        return ring(q, k)

    q, k = _random(8, 16), _random(8, 16)
    text = _exported(step, mesh, (P("x", "y"), P("x")), q, k)
    got = np.asarray(ss.run(_partition(text), [q, k])[0])
    # Each device's rows of q meet every device's rows of k once.
    want = q @ k.reshape(4, 2, 16).sum(axis=0).T
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_gspmd_manual_region_is_the_identity_at_its_edges():
    text = """
func.func @main(%x: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"})
    -> (tensor<8x4xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"}) {
  %0 = stablehlo.custom_call @SPMDFullToShardShape(%x) {mhlo.sharding = "{manual}"}
      : (tensor<8x4xf32>) -> tensor<4x4xf32>
  %1 = stablehlo.exponential %0 {mhlo.sharding = "{manual}"} : tensor<4x4xf32>
  %2 = stablehlo.custom_call @SPMDShardToFullShape(%1) {mhlo.sharding = "{devices=[2,1]<=[2]}"}
      : (tensor<4x4xf32>) -> tensor<8x4xf32>
  return %2 : tensor<8x4xf32>
}
"""
    partitioned = _partition(text)
    assert "all_gather" not in partitioned and "all_to_all" not in partitioned
    x = _random(8, 4)
    np.testing.assert_allclose(np.asarray(ss.run(partitioned, [x])[0]), np.exp(x), rtol=1e-6)


def test_a_value_from_outside_is_read_whole_in_the_region():
    # %w is split over the region's manual axis outside it: inside, each
    # device needs all of it, so it is gathered once at the region's edge.
    text = """
func.func @main(%x: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"},
                %w: tensor<4xf32> {mhlo.sharding = "{devices=[2]<=[2]}"})
    -> (tensor<8x4xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"}) {
  %0 = stablehlo.custom_call @SPMDFullToShardShape(%x) {mhlo.sharding = "{manual}"}
      : (tensor<8x4xf32>) -> tensor<4x4xf32>
  %1 = stablehlo.broadcast_in_dim %w, dims = [1] : (tensor<4xf32>) -> tensor<4x4xf32>
  %2 = stablehlo.multiply %0, %1 {mhlo.sharding = "{manual}"} : tensor<4x4xf32>
  %3 = stablehlo.custom_call @SPMDShardToFullShape(%2) {mhlo.sharding = "{devices=[2,1]<=[2]}"}
      : (tensor<4x4xf32>) -> tensor<8x4xf32>
  return %3 : tensor<8x4xf32>
}
"""
    partitioned = _partition(text)
    assert partitioned.count('"stablehlo.all_gather"') == 1
    x, w = _random(8, 4), _random(4)
    np.testing.assert_allclose(np.asarray(ss.run(partitioned, [x, w])[0]), x * w, rtol=1e-6)


def test_an_all_reduce_whose_groups_mix_blocks_runs_on_whole_values():
    # Devices 0 and 1 hold different rows of %x: summing their blocks would
    # add unrelated rows, so the all-reduce runs on the whole value.
    text = """
func.func @main(%x: tensor<8xf32> {mhlo.sharding = "{devices=[2]<=[2]}"})
    -> (tensor<8xf32> {mhlo.sharding = "{devices=[2]<=[2]}"}) {
  %0 = "stablehlo.all_reduce"(%x) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>,
      replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>, use_global_device_ids}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) {mhlo.sharding = "{devices=[2]<=[2]}"} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
"""
    partitioned = _partition(text)
    x = _random(8)
    np.testing.assert_allclose(np.asarray(ss.run(partitioned, [x])[0]), 2 * x, rtol=1e-6)


def test_global_layout_puts_the_manual_axes_first_in_each_dim():
    mesh = Mesh.from_axes([("a", 2), ("b", 2), ("c", 2)])
    inner = Sharding(mesh, (("c",), ()), manual=("a", "b"))
    # 8x8 cut to 4x4: one manual axis on each dim, in mesh order where the
    # global side names none.
    assert global_layout(None, inner, (8, 8), (4, 4), ("a", "b")).dim_axes == (("a", "c"), ("b",))
    # Where the global side names them, its choice stands.
    outer = Sharding(mesh, (("b",), ("a",)))
    assert global_layout(outer, inner, (8, 8), (4, 4), ("a", "b")).dim_axes == (("b", "c"), ("a",))
    with pytest.raises(ShardingError, match="does not divide"):
        global_layout(None, inner, (8, 8), (3, 8), ("a", "b"))


# What newer JAX writes in a shard_map body: the groups named by mesh axes,
# on a mesh symbol of their own (here with a sub-axis, "x":(2)2, the minor
# half of "x") rather than as device lists.
MESH_AXES_GROUPS = """
sdy.mesh @mesh = <["x"=4, "y"=2]>
sdy.mesh @groups = <["x"=4, "y"=2]>
func.func @main(%a: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>})
    -> (tensor<2x4xf32>, tensor<8x4xf32>) {
  %0:2 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{"x"}, {"y"}]>]
      out_shardings=[<@mesh, [{}, {"y"}]>, <@mesh, [{"x"}, {"y"}]>] manual_axes={"x", "y"}
      (%block: tensor<2x2xf32>) {
    %1 = "stablehlo.all_reduce"(%block) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>,
        replica_groups = #stablehlo.replica_group_mesh_axes<mesh = @groups, axes = [#stablehlo.axis_ref<name = "x">]>,
        use_global_device_ids}> ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %s = stablehlo.add %p, %q : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<2x2xf32>) -> tensor<2x2xf32>
    %2 = "stablehlo.all_gather"(%block) <{all_gather_dim = 0 : i64,
        channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>,
        replica_groups = #stablehlo.replica_group_mesh_axes<mesh = @groups, axes = [#stablehlo.axis_ref<name = "x", sub_axis_info = (2)2>]>,
        use_global_device_ids}> : (tensor<2x2xf32>) -> tensor<4x2xf32>
    %3 = stablehlo.slice %2 [0:2, 0:2] : (tensor<4x2xf32>) -> tensor<2x2xf32>
    sdy.return %1, %3 : tensor<2x2xf32>, tensor<2x2xf32>
  } : (tensor<8x4xf32>) -> (tensor<2x4xf32>, tensor<8x4xf32>)
  return %0#0, %0#1 : tensor<2x4xf32>, tensor<8x4xf32>
}
"""


def test_groups_named_by_mesh_axes_are_the_device_lists_they_name():
    partitioned = ss.run_passes(MESH_AXES_GROUPS, "spmd-propagate,spmd-partition")
    # "x" varies over devices 0,2,4,6 (and 1,3,5,7); its minor half over 0,2 / 4,6 / ...
    assert "replica_groups = dense<[[0, 2, 4, 6], [1, 3, 5, 7]]>" in partitioned
    assert "replica_groups = dense<[[0, 2], [1, 3], [4, 6], [5, 7]]>" in partitioned
    a = _random(8, 4)
    summed, first_of_pair = (np.asarray(r) for r in ss.run(partitioned, [a]))
    blocks = a.reshape(4, 2, 2, 2)   # [x, row, y, column]
    np.testing.assert_allclose(summed, blocks.sum(axis=0).reshape(2, 4), rtol=1e-5)
    # Each device keeps the first block of its pair along the minor half of
    # "x": x = 0, 1 hold block 0 and x = 2, 3 block 2, on their own columns.
    np.testing.assert_allclose(first_of_pair, blocks[[0, 0, 2, 2]].reshape(8, 4), rtol=1e-6)
