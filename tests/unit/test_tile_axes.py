"""Tests for stablehlo_spmd.tile_axes: reading tile assignments back as mesh axes.

The oracle for every device array is XLA itself (``xc.HloSharding.from_string``),
and for meshes, hand reasoning about which cut points each sharding needs.
"""

import math
import random

import numpy as np
import pytest
from jax._src.lib import xla_client as xc

from stablehlo_spmd.errors import ShardingError
from stablehlo_spmd.hlo_sharding import (
    HloSharding, TileAssignment, format_hlo_sharding, parse_hlo_sharding)
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.sharding import Sharding
from stablehlo_spmd.reshard import order_pairs
from stablehlo_spmd.tile_axes import block_axes, infer_mesh, tile_dim_axes


def xla_array(text):
    hlo = xc.HloSharding.from_string(text)
    dims = hlo.tile_assignment_dimensions()
    return np.array(hlo.tile_assignment_devices(), dtype=np.int64).reshape(dims)


def xla_replicates_last(text):
    hlo = xc.HloSharding.from_string(text)
    types = [str(t).rsplit(".", 1)[-1].upper() for t in hlo.subgroup_types()]
    return hlo.replicate_on_last_tile_dim() or (bool(types) and types[-1] == "REPLICATED")


def same_layout(ours, text):
    """Device arrays equal, up to the order inside a replication group.

    Devices in one replication group hold the same data, so XLA treats the
    order within the last (replicated) tile dim as irrelevant and sorts it.
    """
    theirs = xla_array(text)
    ours = np.asarray(ours)
    if ours.shape != theirs.shape:
        return False
    if xla_replicates_last(text):
        ours, theirs = np.sort(ours, axis=-1), np.sort(theirs, axis=-1)
    return bool(np.array_equal(ours, theirs))


def round_trip(text, mesh):
    hlo = parse_hlo_sharding(text)
    sharding = Sharding.from_hlo(hlo, mesh, hlo.data_rank)
    return sharding, sharding.to_hlo()


def assert_round_trips(texts, mesh):
    for text in texts:
        _, back = round_trip(text, mesh)
        assert back.kind == "tiled", text
        assert same_layout(back.tile.device_array(), text), (
            f"{text} came back as {format_hlo_sharding(back)}")


# ------------------------------------------------------------- infer_mesh


def test_two_splits_need_three_axes():
    # [4,2]<=[8] cuts device positions at 2; [2,4]<=[8] cuts at 4: together 2x2x2.
    texts = ["{devices=[4,2]<=[8]}", "{devices=[2,4]<=[8]}"]
    mesh = infer_mesh([parse_hlo_sharding(t) for t in texts])
    assert mesh.mesh_shape == (2, 2, 2)
    assert mesh.device_ids == tuple(range(8))
    assert mesh.axis_names == ("axis_0", "axis_1", "axis_2")
    assert_round_trips(texts, mesh)
    first, _ = round_trip(texts[0], mesh)
    second, _ = round_trip(texts[1], mesh)
    assert first.dim_axes == (("axis_0", "axis_1"), ("axis_2",))
    assert second.dim_axes == (("axis_0",), ("axis_1", "axis_2"))


def test_single_sharding_gives_its_own_mesh():
    mesh = infer_mesh([parse_hlo_sharding("{devices=[4,2]<=[8]}")])
    assert mesh.mesh_shape == (4, 2)
    assert mesh.is_iota


def test_transposed_iota():
    text = "{devices=[2,4]<=[4,2]T(1,0)}"  # dim 0 walks stride 1, dim 1 stride 2
    mesh = infer_mesh([parse_hlo_sharding(text)])
    assert mesh.mesh_shape == (4, 2)
    sharding, _ = round_trip(text, mesh)
    assert sharding.dim_axes == (("axis_1",), ("axis_0",))
    assert_round_trips([text], mesh)


def test_explicit_device_order_becomes_the_mesh_order():
    text = "{devices=[2,2]0,2,1,3}"
    mesh = infer_mesh([parse_hlo_sharding(text)])
    assert mesh.device_ids == (0, 2, 1, 3)
    assert mesh.mesh_shape == (2, 2)
    assert mesh.devices.tolist() == [[0, 2], [1, 3]]
    assert_round_trips([text], mesh)


def test_explicit_order_with_an_iota_sharding():
    # In mesh order 0,2,1,3 the plain iota [4]<=[4] walks positions 0,2,1,3,
    # which is a transpose of the 2x2 mesh.
    texts = ["{devices=[2,2]0,2,1,3}", "{devices=[4]<=[4]}"]
    mesh = infer_mesh([parse_hlo_sharding(t) for t in texts])
    assert mesh.device_ids == (0, 2, 1, 3)
    assert mesh.mesh_shape == (2, 2)
    assert_round_trips(texts, mesh)


def test_partial_replication_and_unreduced():
    texts = ["{devices=[2,1,4]<=[8] last_tile_dim_replicate}",
             "{devices=[1,4,2]<=[8] last_tile_dims={unreduced}}"]
    mesh = infer_mesh([parse_hlo_sharding(t) for t in texts])
    assert mesh.mesh_shape == (2, 2, 2)
    assert_round_trips(texts, mesh)
    unreduced, _ = round_trip(texts[1], mesh)
    assert unreduced.unreduced == ("axis_2",)
    assert unreduced.dim_axes == ((), ("axis_0", "axis_1"))


def test_tuple_shardings_are_walked():
    tuple_text = "{{devices=[4,2]<=[8]}, {replicated}, {devices=[2,4]<=[8]}}"
    mesh = infer_mesh([parse_hlo_sharding(tuple_text)])
    assert mesh.mesh_shape == (2, 2, 2)


def test_tileless_shardings_need_a_device_count():
    mesh = infer_mesh([parse_hlo_sharding("{replicated}")], num_devices=4)
    assert mesh.size == 4
    with pytest.raises(ShardingError, match=r"no tiled sharding and no device count"):
        infer_mesh([parse_hlo_sharding("{replicated}"), parse_hlo_sharding("{maximal device=0}")])


def test_device_count_disagreement():
    with pytest.raises(ShardingError, match=r"disagree on the device count: \[4, 8\]"):
        infer_mesh([parse_hlo_sharding("{devices=[4,2]<=[8]}"),
                    parse_hlo_sharding("{devices=[2,2]<=[4]}")])
    with pytest.raises(ShardingError, match=r"disagree on the device count: \[8, 16\]"):
        infer_mesh([parse_hlo_sharding("{devices=[4,2]<=[8]}")], num_devices=16)


def test_incompatible_cut_points():
    # On 6 devices, [2,3] cuts device positions at 3 and [3,2] at 2; 2 does not
    # divide 3, so no mesh of whole axes has both.
    texts = ["{devices=[2,3]<=[6]}", "{devices=[3,2]<=[6]}"]
    with pytest.raises(ShardingError, match=r"cannot be expressed as axes of one mesh"):
        infer_mesh([parse_hlo_sharding(t) for t in texts])
    # Each alone is fine.
    for text in texts:
        mesh = infer_mesh([parse_hlo_sharding(text)])
        assert sorted(mesh.mesh_shape) == [2, 3]
        assert_round_trips([text], mesh)


def test_a_device_order_of_its_own_only_cuts_the_mesh():
    # The first list fixes the device order 0,2,1,3; in it, 0,1,3,2 sits at
    # positions 0,2,3,1, which no mixed-radix digits produce: that sharding
    # keeps an order of its own, and the mesh only has to cut its 4 tiles.
    own = parse_hlo_sharding("{devices=[4]0,1,3,2}")
    mesh = infer_mesh([parse_hlo_sharding("{devices=[2,2]0,2,1,3}"), own])
    assert mesh.device_ids == (0, 2, 1, 3) and mesh.mesh_shape == (2, 2)
    assert tile_dim_axes(own, mesh) is None
    assert block_axes(own, mesh) == [("axis_0", "axis_1")]
    # Tile dims that whole axes cannot make up have no such layout.
    assert block_axes(parse_hlo_sharding("{devices=[2,2]0,3,1,2}"),
                      Mesh.from_axes([("data", 4)])) is None


def test_weights_pick_the_device_order_of_the_heaviest_values():
    light = parse_hlo_sharding("{devices=[2]1,0}")
    heavy = parse_hlo_sharding("{devices=[2]0,1}")
    # Without weights the first explicit list out of id order sets the order.
    assert infer_mesh([light, heavy]).device_ids == (1, 0)
    # With them, the order under which less weight keeps an order of its own.
    assert infer_mesh([light, heavy], weights=[4, 1024]).device_ids == (0, 1)
    assert infer_mesh([light, heavy], weights=[1024, 4]).device_ids == (1, 0)


def test_order_pairs_move_each_block_to_the_mesh_order():
    mesh = Mesh.from_axes([("x", 2)])
    reversed_order = parse_hlo_sharding("{devices=[2]1,0}")
    sharding = Sharding(mesh, (("x",),))
    # Device 1 holds block 0, which device 0 holds in the mesh's order.
    assert sorted(order_pairs(reversed_order, sharding)) == [(0, 1), (1, 0)]
    # Replicated copies stay where they already are.
    partial = parse_hlo_sharding("{devices=[2,2]0,1,3,2 last_tile_dim_replicate}")
    mesh4 = Mesh.from_axes([("a", 2), ("b", 2)])
    assert sorted(order_pairs(partial, Sharding(mesh4, (("a",),)))) == [
        (0, 0), (1, 1), (2, 2), (3, 3)]


# ----------------------------------------------------------- tile_dim_axes


def tiled(devices):
    """A tiled sharding over an explicit device array (no subgroup dims)."""
    return HloSharding.tiled(TileAssignment.from_devices(np.asarray(devices)))


def test_tile_dim_axes_by_hand():
    mesh = Mesh.from_string("data=4,model=2")
    devices = np.arange(8).reshape(4, 2)
    assert tile_dim_axes(tiled(devices), mesh) == [("data",), ("model",)]
    assert tile_dim_axes(tiled(devices.T.copy()), mesh) == [("model",), ("data",)]
    assert tile_dim_axes(tiled(devices.T.reshape(8)), mesh) == [("model", "data")]
    assert tile_dim_axes(tiled(np.arange(8)), mesh) == [("data", "model")]
    assert tile_dim_axes(tiled(devices.reshape(4, 1, 2)), mesh) == [("data",), (), ("model",)]


def test_tile_dim_axes_none_when_not_whole_axes():
    mesh = Mesh.from_string("data=4,model=2")
    assert tile_dim_axes(tiled(np.arange(8).reshape(2, 4)), mesh) is None  # half of 'data'
    assert tile_dim_axes(tiled(np.array([1, 0, 2, 3, 4, 5, 6, 7])), mesh) is None
    assert tile_dim_axes(tiled(np.arange(4)), mesh) is None  # wrong device count
    single = Mesh.from_string("a=4")
    assert tile_dim_axes(tiled(np.array([[0, 2], [1, 3]])), single) is None


def test_tile_dim_axes_on_permuted_mesh():
    mesh = Mesh.from_string("a=2,b=2", device_ids=[3, 1, 0, 2])
    # mesh.devices = [[3, 1], [0, 2]]; splitting by b then a walks 3,0 / 1,2.
    assert tile_dim_axes(tiled(np.array([[3, 0], [1, 2]])), mesh) == [("b",), ("a",)]
    assert tile_dim_axes(tiled(np.array([[3, 1], [0, 2]])), mesh) == [("a",), ("b",)]
    assert tile_dim_axes(tiled(np.array([[0, 1], [2, 3]])), mesh) is None


# ---------------------------------------------------- randomized property


def _factorizations(n, max_len):
    """All ordered factorizations of n into factors >= 2, at most max_len of them."""
    if n == 1:
        return [()]
    if max_len == 0:
        return []
    return [(f,) + rest
            for f in range(2, n + 1) if n % f == 0
            for rest in _factorizations(n // f, max_len - 1)]


def test_factorizations_helper():
    assert sorted(_factorizations(8, 4)) == [(2, 2, 2), (2, 4), (4, 2), (8,)]
    assert (2, 2, 2, 2) in _factorizations(16, 4) and (16,) in _factorizations(16, 1)


def _random_iota_text(rng, n):
    reshape = rng.choice(_factorizations(n, 4))
    perm = list(range(len(reshape)))
    rng.shuffle(perm)
    replicate = rng.random() < 0.4
    dims = list(rng.choice(_factorizations(n, 4)))
    if rng.random() < 0.3:  # sprinkle in size-1 data dims
        dims.insert(rng.randrange(len(dims) + 1), 1)
    if replicate and len(dims) < 2:
        dims.insert(0, 1)
    text = f"{{devices=[{','.join(map(str, dims))}]<=[{','.join(map(str, reshape))}]"
    if len(reshape) > 1:
        text += f"T({','.join(map(str, perm))})"
    return text + (" last_tile_dim_replicate}" if replicate else "}")


def _random_sets(seed, count):
    rng = random.Random(seed)
    for _ in range(count):
        n = rng.choice([8, 16])
        yield n, [_random_iota_text(rng, n) for _ in range(rng.randint(1, 3))]


@pytest.mark.parametrize("n, texts", list(_random_sets(20240601, 150)))
def test_random_iota_sets_round_trip(n, texts):
    hlos = [parse_hlo_sharding(t) for t in texts]
    for text, hlo in zip(texts, hlos):
        if hlo.kind == "tiled":
            assert same_layout(hlo.tile.device_array(), text), text  # the parser agrees with XLA
        else:
            assert hlo.kind == "replicated" and xc.HloSharding.from_string(text).is_replicated()
    mesh = infer_mesh(hlos, num_devices=n)  # cut points are all powers of two: always a mesh
    assert mesh.is_iota
    assert mesh.size == n
    tiled = [h for h in hlos if h.kind == "tiled"]
    # Shortest: merging any two adjacent axes loses some sharding.
    shape = list(mesh.mesh_shape)
    for i in range(len(shape) - 1):
        merged_shape = shape[:i] + [shape[i] * shape[i + 1]] + shape[i + 2:]
        merged = Mesh(range(n), merged_shape, [f"a{j}" for j in range(len(merged_shape))])
        failures = 0
        for hlo in tiled:
            try:
                Sharding.from_hlo(hlo, merged, hlo.data_rank)
            except ShardingError:
                failures += 1
        assert failures, f"axes {i} and {i + 1} of {mesh} could be merged for {texts}"
    if not tiled:
        assert mesh.mesh_shape == (n,)
    for text, hlo in zip(texts, hlos):
        if hlo.kind != "tiled":
            continue
        sharding = Sharding.from_hlo(hlo, mesh, hlo.data_rank)
        back = sharding.to_hlo()
        assert back.kind == "tiled"
        assert list(back.subgroup_kinds) == list(hlo.subgroup_kinds)
        assert same_layout(back.tile.device_array(), text), (
            f"{text} on {mesh} came back as {format_hlo_sharding(back)}")
        # The shard count of each data dim is the tile dim.
        for dim, size in enumerate(xla_array(text).shape[:hlo.data_rank]):
            assert sharding.num_shards(dim) == size


def _random_permuted_case(rng):
    """A random mesh over permuted devices and a sharding built by hand on it."""
    n = rng.choice([8, 16])
    shape = rng.choice(_factorizations(n, 4))
    names = [f"m{i}" for i in range(len(shape))]
    ids = list(range(n))
    rng.shuffle(ids)
    mesh = Mesh(ids, shape, names)
    # Each axis: a random data dim, unreduced, or replicated.
    rank = rng.randint(1, 3)
    slots = [rng.choice(["rep", "unr", *range(rank)]) for _ in names]
    dim_axes = [[a for a, s in zip(names, slots) if s == d] for d in range(rank)]
    for axes in dim_axes:
        rng.shuffle(axes)
    unreduced = [a for a, s in zip(names, slots) if s == "unr"]
    replicated = [a for a, s in zip(names, slots) if s == "rep"]
    return mesh, dim_axes, unreduced, replicated


@pytest.mark.parametrize("seed", range(60))
def test_random_permuted_mesh_device_arrays(seed):
    """to_hlo's devices equal the hand-built transpose of the mesh; from_hlo reads them back."""
    rng = random.Random(seed)
    mesh, dim_axes, unreduced, replicated = _random_permuted_case(rng)
    sharding = Sharding(mesh, dim_axes, unreduced=unreduced)
    hlo = sharding.to_hlo()
    names = list(mesh.axis_names)
    order = [a for axes in dim_axes for a in axes] + unreduced + replicated
    perm = [names.index(a) for a in order]
    dims = [math.prod(mesh.shape()[a] for a in axes) for axes in dim_axes]
    groups = [g for g in ([unreduced] if unreduced else []) + ([replicated] if replicated else [])]
    dims += [math.prod(mesh.shape()[a] for a in g) for g in groups]
    expected = mesh.devices.transpose(perm).reshape(dims)
    text = format_hlo_sharding(hlo)
    if math.prod(dims[:len(dim_axes)]) == 1 and not unreduced:
        assert hlo.kind == "replicated"
        return
    if math.prod(dims[:len(dim_axes)]) == 1 and not replicated:
        assert hlo.kind == "unreduced"
        return
    # XLA reads the library's text to the same devices (sorted replication groups aside).
    theirs = xla_array(text)
    if replicated:
        expected = np.sort(expected, axis=-1)
        theirs = np.sort(theirs, axis=-1)
    np.testing.assert_array_equal(theirs, expected)
    # And the library reads its own XLA sharding back.
    assert Sharding.from_hlo(hlo, mesh, len(dim_axes)) == sharding


# ---------------------------------------------- infer_mesh on module-like sets


def test_permuted_module_round_trip():
    # A module whose first explicit sharding fixes a non-iota device order, and
    # a partially replicated sharding over that order: dim 0 split like the
    # first one, replicated along its minor axis, as XLA prints it.
    first = "{devices=[4,2]0,4,1,5,2,6,3,7}"
    assert_round_trips([first], infer_mesh([parse_hlo_sharding(first)]))
    texts = ["{devices=[4,2]4,0,5,1,6,2,7,3}",
             repr(xc.HloSharding.from_string(
                 "{devices=[4,1,2]4,0,5,1,6,2,7,3 last_tile_dim_replicate}"))]
    assert texts[1] == "{devices=[4,1,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}"
    hlos = [parse_hlo_sharding(t) for t in texts]
    mesh = infer_mesh(hlos)
    assert mesh.device_ids == (4, 0, 5, 1, 6, 2, 7, 3)
    assert mesh.mesh_shape == (4, 2)
    assert_round_trips(texts, mesh)
