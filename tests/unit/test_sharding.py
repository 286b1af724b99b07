"""Tests for stablehlo_spmd.sharding.Sharding against JAX and XLA as oracles.

The generated sweep enumerates every valid spec (each mesh axis unused,
unreduced, or splitting one tensor dimension, in every major-to-minor order)
for ranks 0..3 on the meshes (4,2), (2,2,2), (8,) and (2,4), and compares
the library's XLA sharding with the one JAX's NamedSharding builds.
"""

import itertools
import random

import jax
import numpy as np
import pytest
from jax._src.lib import xla_client as xc
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from stablehlo_spmd.errors import ShardingError
from stablehlo_spmd.hlo_sharding import format_hlo_sharding, parse_hlo_sharding
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.sharding import Sharding

MESHES = {
    "4x2": ((4, 2), ("data", "model")),
    "2x2x2": ((2, 2, 2), ("z", "y", "x")),  # names deliberately not in sorted order
    "8": ((8,), ("x",)),
    "2x4": ((2, 4), ("data", "model")),
}

# Device orders for the meshes built over a permutation of the devices.
PERMUTED = {
    "4x2": [3, 1, 7, 5, 0, 2, 4, 6],
    "2x2x2": [6, 0, 5, 3, 1, 7, 2, 4],
}


def _all_specs(names, rank):
    """Every (dim_axes, unreduced) over `names` for a tensor of `rank`."""
    slots = ["unused", "unreduced", *range(rank)]
    for assignment in itertools.product(slots, repeat=len(names)):
        per_dim = [[n for n, s in zip(names, assignment) if s == d] for d in range(rank)]
        unreduced = tuple(n for n, s in zip(names, assignment) if s == "unreduced")
        for orders in itertools.product(*[list(itertools.permutations(p)) for p in per_dim]):
            yield tuple(orders), unreduced


def _spell(dim_axes, names, rng, style):
    """Write dim_axes as a user would: None, 'a', ('a',), ('a', 'b'), or mesh indices."""
    entries = []
    for axes in dim_axes:
        if not axes:
            entries.append(None)
            continue
        if style == "index":
            axes = tuple(names.index(a) for a in axes)
        if len(axes) == 1 and rng.random() < 0.5:
            entries.append(axes[0])
        else:
            entries.append(tuple(axes))
    return tuple(entries)


def _cases():
    rng = random.Random(1234)
    for mesh_key, (shape, names) in MESHES.items():
        for rank in range(4):
            for index, (dim_axes, unreduced) in enumerate(_all_specs(names, rank)):
                style = ("names", "index", "pspec")[index % 3]
                yield pytest.param(mesh_key, rank, dim_axes, unreduced, style, rng.random(),
                                   id=f"{mesh_key}-r{rank}-{index}-{style}")


CASES = list(_cases())


def _jax_mesh(shape, names, order=None):
    by_id = {d.id: d for d in jax.devices()}
    ids = list(range(int(np.prod(shape)))) if order is None else order
    devices = np.array([by_id[i] for i in ids], dtype=object).reshape(shape)
    return jax.sharding.Mesh(devices, names,
                             axis_types=(jax.sharding.AxisType.Explicit,) * len(names))


_JAX_MESHES = {}


def _cached_jax_mesh(mesh_key, permuted=False):
    key = (mesh_key, permuted)
    if key not in _JAX_MESHES:
        shape, names = MESHES[mesh_key]
        _JAX_MESHES[key] = _jax_mesh(shape, names, PERMUTED[mesh_key] if permuted else None)
    return _JAX_MESHES[key]


def _jax_hlo(jmesh, dim_axes, unreduced):
    spec = P(*[axes if axes else None for axes in dim_axes], unreduced=set(unreduced))
    return NamedSharding(jmesh, spec)._to_xla_hlo_sharding(len(dim_axes))


def _build(mesh, names, dim_axes, unreduced, style, seed):
    rng = random.Random(seed)
    entries = _spell(dim_axes, names, rng, "index" if style == "index" else "names")
    if style == "pspec":
        # A jax.sharding.PartitionSpec carries its own (unordered) unreduced set.
        return Sharding.from_spec(mesh, P(*entries, unreduced=set(unreduced)), len(dim_axes))
    return Sharding.from_spec(mesh, entries, len(dim_axes), unreduced=unreduced)


@pytest.mark.parametrize("mesh_key, rank, dim_axes, unreduced, style, seed", CASES)
def test_from_spec_matches_jax(mesh_key, rank, dim_axes, unreduced, style, seed):
    shape, names = MESHES[mesh_key]
    jmesh = _cached_jax_mesh(mesh_key)
    mesh = Mesh.from_jax(jmesh)
    sharding = _build(mesh, names, dim_axes, unreduced, style, seed)
    expected = repr(_jax_hlo(jmesh, dim_axes, unreduced))
    assert format_hlo_sharding(sharding.to_hlo()) == expected

    # The parsed XLA text is the same value.
    assert sharding.to_hlo() == parse_hlo_sharding(expected)

    # Round trip through the XLA form.
    assert Sharding.from_hlo(sharding.to_hlo(), mesh, rank) == sharding

    # Queries agree with the spec.
    assert sharding.dim_axes == dim_axes
    assert set(sharding.unreduced) == set(unreduced)
    assert set(sharding.replicated_axes) == (
        set(names) - {a for axes in dim_axes for a in axes} - set(unreduced))


def _canonical_groups(array, replicate_last):
    array = np.asarray(array)
    if replicate_last:
        array = np.sort(array, axis=-1)
    return array


@pytest.mark.parametrize(
    "mesh_key, rank, dim_axes, unreduced, style, seed",
    [c for c in CASES if c.values[0] in PERMUTED and c.values[1] <= 2],
)
def test_from_spec_on_permuted_mesh_matches_jax_devices(mesh_key, rank, dim_axes, unreduced,
                                                       style, seed):
    """On a mesh over permuted devices JAX numbers devices by mesh position.

    XLA's sharding from JAX lists positions in ``mesh.devices.flat``; mapping
    them through the mesh's device ids gives the physical device array the
    library must produce.
    """
    shape, names = MESHES[mesh_key]
    jmesh = _cached_jax_mesh(mesh_key, permuted=True)
    mesh = Mesh.from_jax(jmesh)
    assert mesh.device_ids == tuple(PERMUTED[mesh_key])
    sharding = _build(mesh, names, dim_axes, unreduced, style, seed)
    ours = sharding.to_hlo()
    theirs = _jax_hlo(jmesh, dim_axes, unreduced)

    if theirs.is_replicated():
        assert ours.kind == "replicated"
    elif theirs.is_unreduced():
        assert ours.kind == "unreduced"
    else:
        assert ours.kind == "tiled"
        dims = theirs.tile_assignment_dimensions()
        assert list(ours.tile.dims) == dims
        kinds = [str(t).rsplit(".", 1)[-1].lower() for t in theirs.subgroup_types()]
        if theirs.replicate_on_last_tile_dim():
            kinds = ["replicated"]
        assert list(ours.subgroup_kinds) == kinds
        physical = np.array(PERMUTED[mesh_key])[np.array(theirs.tile_assignment_devices())]
        replicate_last = bool(kinds) and kinds[-1] == "replicated"
        np.testing.assert_array_equal(
            _canonical_groups(ours.tile.device_array(), replicate_last),
            _canonical_groups(physical.reshape(dims), replicate_last))
        # The text the library prints parses in XLA to the same device array.
        xla = xc.HloSharding.from_string(format_hlo_sharding(ours))
        np.testing.assert_array_equal(
            np.array(xla.tile_assignment_devices()).reshape(dims), ours.tile.device_array())

    assert Sharding.from_hlo(ours, mesh, rank) == sharding


def test_sweep_size():
    assert len(CASES) >= 300


# ------------------------------------------------------- hand-written specs


@pytest.fixture(scope="module")
def jmesh42():
    return _jax_mesh((4, 2), ("data", "model"))


@pytest.fixture(scope="module")
def mesh42():
    return Mesh.from_string("data=4,model=2")


def test_known_texts(mesh42):
    # Texts as XLA prints them for jax.make_mesh((4, 2), ('data', 'model')).
    cases = [
        ((None, "data"), "{devices=[1,4,2]<=[8] last_tile_dim_replicate}"),
        ((("model", "data"),), "{devices=[8]<=[4,2]T(1,0)}"),
        (("model", None), "{devices=[2,1,4]<=[4,2]T(1,0) last_tile_dim_replicate}"),
        (("data", "model"), "{devices=[4,2]<=[8]}"),
        ((None, None), "{replicated}"),
        ((), "{replicated}"),
    ]
    for spec, text in cases:
        assert format_hlo_sharding(Sharding.from_spec(mesh42, spec, len(spec)).to_hlo()) == text


def test_pytorch_xla_integer_axes(mesh42, jmesh42):
    # PyTorch/XLA: mark_sharding(t, mesh, (1, None, (0,)))
    by_index = Sharding.from_spec(mesh42, (1, None, (0,)), 3)
    by_name = Sharding.from_spec(mesh42, ("model", None, "data"), 3)
    assert by_index == by_name
    expected = repr(NamedSharding(jmesh42, P("model", None, "data"))._to_xla_hlo_sharding(3))
    assert format_hlo_sharding(by_index.to_hlo()) == expected


def test_mixed_names_and_indices_in_one_tuple(mesh42):
    assert Sharding.from_spec(mesh42, (("model", 0),), 1).dim_axes == (("model", "data"),)


def test_list_spec_entries(mesh42):
    assert Sharding.from_spec(mesh42, [["data", "model"], None]).dim_axes == (
        ("data", "model"), ())


def test_rank_defaults_to_spec_length(mesh42):
    assert Sharding.from_spec(mesh42, ("data",)).rank == 1
    assert Sharding.from_spec(mesh42, ()).rank == 0


def test_partition_spec_with_unreduced(mesh42, jmesh42):
    spec = P(None, "data", unreduced={"model"})
    sharding = Sharding.from_spec(mesh42, spec, 2)
    assert sharding.dim_axes == ((), ("data",))
    assert sharding.unreduced == ("model",)
    expected = repr(NamedSharding(jmesh42, spec)._to_xla_hlo_sharding(2))
    assert expected == "{devices=[1,4,2]<=[8] last_tile_dims={unreduced}}"
    assert format_hlo_sharding(sharding.to_hlo()) == expected


def test_partition_spec_with_two_unreduced_axes_matches_jax():
    # Axis names whose sorted order differs from the mesh order.
    jmesh = _jax_mesh((2, 2, 2), ("z", "y", "x"))
    mesh = Mesh.from_jax(jmesh)
    spec = P("y", unreduced={"z", "x"})
    expected = repr(NamedSharding(jmesh, spec)._to_xla_hlo_sharding(1))
    assert format_hlo_sharding(Sharding.from_spec(mesh, spec, 1).to_hlo()) == expected


def test_partition_spec_fully_unreduced_rank0(mesh42, jmesh42):
    spec = P(unreduced={"data", "model"})
    expected = repr(NamedSharding(jmesh42, spec)._to_xla_hlo_sharding(0))
    assert expected == "{unreduced}"
    assert format_hlo_sharding(Sharding.from_spec(mesh42, spec, 0).to_hlo()) == expected


def test_partition_spec_without_unreduced(mesh42, jmesh42):
    spec = P(("data", "model"), None)
    expected = repr(NamedSharding(jmesh42, spec)._to_xla_hlo_sharding(2))
    assert format_hlo_sharding(Sharding.from_spec(mesh42, spec, 2).to_hlo()) == expected


def test_mesh_split_matches_jax(mesh42, jmesh42):
    # GSPMD mesh_split(t, mesh, [1, -1, 0]): dim 0 by mesh dim 1, dim 2 by mesh dim 0.
    sharding = Sharding.mesh_split(mesh42, [1, -1, 0])
    assert sharding.dim_axes == (("model",), (), ("data",))
    expected = repr(NamedSharding(jmesh42, P("model", None, "data"))._to_xla_hlo_sharding(3))
    assert format_hlo_sharding(sharding.to_hlo()) == expected
    assert Sharding.mesh_split(mesh42, [-1, -1]).is_fully_replicated


@pytest.mark.parametrize("bad", [2, -2, 5])
def test_mesh_split_out_of_range(mesh42, bad):
    with pytest.raises(ShardingError, match=rf"dims_mapping\[1\] = {bad} is not -1 or a mesh"):
        Sharding.mesh_split(mesh42, [0, bad])


def test_mesh_split_same_mesh_dim_twice(mesh42):
    with pytest.raises(ShardingError, match=r"'data' is used twice"):
        Sharding.mesh_split(mesh42, [0, 0])


def test_maximal_and_manual(mesh42):
    assert format_hlo_sharding(Sharding.maximal(mesh42, 3, 2).to_hlo()) == "{maximal device=3}"
    assert format_hlo_sharding(Sharding.fully_manual(mesh42, 2).to_hlo()) == "{manual}"
    assert format_hlo_sharding(Sharding.replicated(mesh42, 3).to_hlo()) == "{replicated}"
    assert xc.HloSharding.from_string("{maximal device=3}").is_maximal()


def test_from_hlo_tileless_kinds(mesh42):
    assert Sharding.from_hlo(parse_hlo_sharding("{replicated}"), mesh42, 2).is_fully_replicated
    manual = Sharding.from_hlo(parse_hlo_sharding("{manual}"), mesh42, 1)
    assert set(manual.manual) == {"data", "model"}
    unreduced = Sharding.from_hlo(parse_hlo_sharding("{unreduced}"), mesh42, 1)
    assert set(unreduced.unreduced) == {"data", "model"}
    maximal = Sharding.from_hlo(parse_hlo_sharding("{maximal device=5}"), mesh42, 2)
    assert maximal.maximal_device == 5 and maximal.rank == 2


def test_from_hlo_explicit_device_list(mesh42):
    # {devices=[2,4]0,2,4,6,1,3,5,7}: dim 0 walks devices 0,1 (stride 1 = model),
    # dim 1 walks 0,2,4,6 (stride 2 = data).
    sharding = Sharding.from_hlo(parse_hlo_sharding("{devices=[2,4]0,2,4,6,1,3,5,7}"), mesh42, 2)
    assert sharding.dim_axes == (("model",), ("data",))


def test_from_hlo_partial_manual(mesh42):
    text = "{devices=[4,1,2]<=[8] last_tile_dims={manual}}"
    sharding = Sharding.from_hlo(parse_hlo_sharding(text), mesh42, 2)
    assert sharding.dim_axes == (("data",), ())
    assert sharding.manual == ("model",)
    assert format_hlo_sharding(sharding.to_hlo()) == text


# ------------------------------------------------------------------ errors


def test_unknown_axis(mesh42):
    with pytest.raises(ShardingError) as info:
        Sharding.from_spec(mesh42, ("data", "modle"), 2)
    assert "unknown mesh axis 'modle'" in str(info.value)
    assert "data=4, model=2" in str(info.value)


def test_unknown_unreduced_axis(mesh42):
    with pytest.raises(ShardingError, match=r"unknown mesh axis 'pipe'"):
        Sharding.from_spec(mesh42, ("data",), 1, unreduced=("pipe",))


def test_unknown_axis_in_constructor_says_where(mesh42):
    with pytest.raises(ShardingError, match=r"unknown mesh axis 'pipe' \(in dimension 1\)"):
        Sharding(mesh42, ((), ("pipe",)))


def test_axis_used_twice_in_one_dim(mesh42):
    with pytest.raises(ShardingError, match=r"'data' is used twice"):
        Sharding.from_spec(mesh42, (("data", "data"),), 1)


def test_axis_used_twice_across_dims(mesh42):
    with pytest.raises(ShardingError,
                       match=r"'model' is used twice \(in dimension 0 and in dimension 2\)"):
        Sharding.from_spec(mesh42, ("model", None, "model"), 3)


def test_axis_split_and_unreduced(mesh42):
    with pytest.raises(ShardingError,
                       match=r"'data' is used twice \(in dimension 0 and in unreduced\)"):
        Sharding.from_spec(mesh42, ("data", None), 2, unreduced=("data",))


def test_index_and_name_of_same_axis(mesh42):
    with pytest.raises(ShardingError, match=r"'data' is used twice"):
        Sharding.from_spec(mesh42, (0, "data"), 2)


@pytest.mark.parametrize("spec, rank, entries", [(("data",), 2, 1), ((None, None, "data"), 2, 3),
                                                 ((), 1, 0), ((None,), 0, 1)])
def test_spec_length_must_equal_rank(mesh42, spec, rank, entries):
    with pytest.raises(ShardingError, match=rf"has {entries} entries but the tensor has rank {rank}"):
        Sharding.from_spec(mesh42, spec, rank)


@pytest.mark.parametrize("index", [2, -1, 7])
def test_axis_index_out_of_range(mesh42, index):
    with pytest.raises(ShardingError, match=rf"mesh axis index {index} is out of range"):
        Sharding.from_spec(mesh42, (index,), 1)


@pytest.mark.parametrize("entry", [True, 1.0, b"data", object()])
def test_bad_spec_entry_type(mesh42, entry):
    with pytest.raises(ShardingError, match=r"is not a mesh axis name or index"):
        Sharding.from_spec(mesh42, (entry,), 1)


@pytest.mark.parametrize("device", [8, -1, 100])
def test_maximal_device_out_of_range(mesh42, device):
    with pytest.raises(ShardingError, match=rf"maximal device {device} is out of range.* 8 devices"):
        Sharding.maximal(mesh42, device, 1)


def test_from_hlo_maximal_device_out_of_range(mesh42):
    with pytest.raises(ShardingError, match=r"maximal device 9 is out of range"):
        Sharding.from_hlo(parse_hlo_sharding("{maximal device=9}"), mesh42, 1)


def test_maximal_cannot_split(mesh42):
    with pytest.raises(ShardingError, match=r"maximal sharding cannot also split"):
        Sharding(mesh42, (("data",),), maximal_device=0)


def test_unknown_reduction(mesh42):
    with pytest.raises(ShardingError, match=r"unknown reduction 'mean'; expected one of sum, max, min"):
        Sharding.from_spec(mesh42, (None,), 1, unreduced=("data",), reduction="mean")


def test_to_hlo_refuses_non_sum_unreduced(mesh42):
    sharding = Sharding.from_spec(mesh42, (None,), 1, unreduced=("data",), reduction="max")
    with pytest.raises(ShardingError, match=r"only express unreduced sums, not max"):
        sharding.to_hlo()
    # Without unreduced axes the reduction kind is irrelevant.
    plain = Sharding.from_spec(mesh42, ("data",), 1, reduction="min")
    assert format_hlo_sharding(plain.to_hlo()) == "{devices=[4,2]<=[8] last_tile_dim_replicate}"


def test_open_dims_out_of_range(mesh42):
    with pytest.raises(ShardingError, match=r"open dimension 2 is out of range for rank 2"):
        Sharding(mesh42, ((), ()), open_dims={2})


def test_from_hlo_rank_mismatch(mesh42):
    with pytest.raises(ShardingError, match=r"tiles 2 dimensions but the tensor has rank 3"):
        Sharding.from_hlo(parse_hlo_sharding("{devices=[4,2]<=[8]}"), mesh42, 3)


def test_from_hlo_device_count_mismatch(mesh42):
    with pytest.raises(ShardingError, match=r"uses 4 devices but the mesh has 8"):
        Sharding.from_hlo(parse_hlo_sharding("{devices=[2,2]<=[4]}"), mesh42, 2)


def test_from_hlo_not_whole_axes(mesh42):
    # Devices 1 and 0 swapped: no mesh axis of data=4,model=2 walks 1,0,2,...
    with pytest.raises(ShardingError, match=r"not a choice of whole axes.*data=4, model=2"):
        Sharding.from_hlo(parse_hlo_sharding("{devices=[8]1,0,2,3,4,5,6,7}"), mesh42, 1)
    # A split of 8 into 2x4 when the mesh axes are 4x2: the major 2 is half an axis.
    with pytest.raises(ShardingError, match=r"not a choice of whole axes"):
        Sharding.from_hlo(parse_hlo_sharding("{devices=[2,4]<=[8]}"), mesh42, 2)


def test_from_hlo_tuple_rejected(mesh42):
    with pytest.raises(ShardingError, match=r"tuple sharding does not describe one tensor"):
        Sharding.from_hlo(parse_hlo_sharding("{{replicated}, {replicated}}"), mesh42, 1)


# -------------------------------------------------------------- shard_shape


@pytest.mark.parametrize(
    "spec, shape, expected",
    [
        (("data", "model"), (8, 4), (2, 2)),
        (("data", "model"), (10, 3), (3, 2)),   # ceil(10/4), ceil(3/2)
        ((("data", "model"), None), (9, 5), (2, 5)),  # ceil(9/8)
        ((None, "data"), (7, 1), (7, 1)),       # a dim smaller than its shard count
        ((None, None), (3, 3), (3, 3)),
        ((), (), ()),
        (("model",), (0,), (0,)),
    ],
)
def test_shard_shape(mesh42, spec, shape, expected):
    assert Sharding.from_spec(mesh42, spec, len(spec)).shard_shape(shape) == expected


def test_shard_shape_uneven_matches_ceil_formula(mesh42):
    sharding = Sharding.from_spec(mesh42, (("model", "data"), None))
    for size in range(0, 40):
        assert sharding.shard_shape((size, 3)) == ((size + 7) // 8, 3)


def test_shard_shape_rank_mismatch(mesh42):
    with pytest.raises(ShardingError, match=r"shape \[4\] does not have rank 2"):
        Sharding.from_spec(mesh42, ("data", None)).shard_shape((4,))


# ------------------------------------------------------------------ misc


def test_to_spec_round_trip(mesh42):
    for spec in [("data", None), (("model", "data"),), (None, "model", "data"), ()]:
        sharding = Sharding.from_spec(mesh42, spec)
        assert sharding.to_spec() == spec
        assert Sharding.from_spec(mesh42, sharding.to_spec()) == sharding


def test_str(mesh42):
    assert str(Sharding.from_spec(mesh42, ("data", None))) == "('data', None)"
    text = str(Sharding.from_spec(mesh42, (None,), unreduced=("model",), reduction="max"))
    assert "unreduced={model}:max" in text
    assert str(Sharding.maximal(mesh42, 2, 1)) == "maximal(device=2)"


def test_hashable_and_equal(mesh42):
    a = Sharding.from_spec(mesh42, ("data", None))
    b = Sharding.from_spec(mesh42, (0, None), 2)
    c = Sharding.from_spec(mesh42, ("model", None))
    assert a == b and hash(a) == hash(b)
    assert a != c
    assert a != Sharding.from_spec(mesh42, ("data", None), reduction="max",
                                   unreduced=("model",))
