"""Tests for stablehlo_spmd.mesh.Mesh."""

import collections
import dataclasses

import numpy as np
import pytest

from stablehlo_spmd.errors import MeshError, SpmdError
from stablehlo_spmd.mesh import Mesh, parse_sub_axis, sdy_axis_refs, sdy_mesh_axes, split_axes


# ------------------------------------------------------------ constructors


def test_pytorch_xla_positional_constructor():
    # PyTorch/XLA: Mesh(device_ids, mesh_shape, axis_names), ids as a numpy array.
    mesh = Mesh(np.array(range(8)), (4, 2), ("data", "model"))
    assert mesh.device_ids == (0, 1, 2, 3, 4, 5, 6, 7)
    assert mesh.mesh_shape == (4, 2)
    assert mesh.axis_names == ("data", "model")
    assert mesh.size == 8
    assert mesh.rank == 2


def test_constructor_accepts_lists_and_arrays_and_stores_tuples():
    mesh = Mesh([3, 1, 0, 2], np.array([2, 2]), ["a", "b"])
    assert mesh.device_ids == (3, 1, 0, 2)
    assert mesh.mesh_shape == (2, 2)
    assert mesh.axis_names == ("a", "b")
    assert all(type(d) is int for d in mesh.device_ids)
    assert all(type(s) is int for s in mesh.mesh_shape)


def test_constructor_accepts_multidimensional_device_array():
    ids = np.array([[0, 2], [1, 3]])
    mesh = Mesh(ids, (2, 2), ("x", "y"))
    assert mesh.device_ids == (0, 2, 1, 3)


def test_default_axis_names():
    mesh = Mesh(range(8), (2, 2, 2))
    assert mesh.axis_names == ("axis_0", "axis_1", "axis_2")


def test_from_string():
    mesh = Mesh.from_string("data=4,model=2")
    assert mesh == Mesh(tuple(range(8)), (4, 2), ("data", "model"))


def test_from_string_allows_spaces():
    assert Mesh.from_string(" data = 4 , model = 2 ") == Mesh.from_string("data=4,model=2")


def test_from_string_with_device_ids():
    mesh = Mesh.from_string("a=2,b=2", device_ids=[0, 2, 1, 3])
    assert mesh.device_ids == (0, 2, 1, 3)
    assert mesh.devices.tolist() == [[0, 2], [1, 3]]


def test_from_string_single_axis():
    mesh = Mesh.from_string("x=8")
    assert mesh.mesh_shape == (8,)
    assert mesh.axis_names == ("x",)
    assert mesh.device_ids == tuple(range(8))


def test_from_axes():
    mesh = Mesh.from_axes([("data", 2), ("model", 4)])
    assert mesh == Mesh(tuple(range(8)), (2, 4), ("data", "model"))
    permuted = Mesh.from_axes([("a", 2), ("b", 2)], device_ids=(3, 2, 1, 0))
    assert permuted.device_ids == (3, 2, 1, 0)


def test_from_axes_rejects_nonpositive_size():
    with pytest.raises(ValueError, match=r"'model' has size 0.*positive"):
        Mesh.from_axes([("data", 2), ("model", 0)])


def test_from_jax_iota(make_jax_mesh, eight_devices):
    jmesh = make_jax_mesh((4, 2), ("data", "model"))
    mesh = Mesh.from_jax(jmesh)
    assert mesh.axis_names == ("data", "model")
    assert mesh.mesh_shape == (4, 2)
    assert mesh.device_ids == tuple(range(8))


def test_from_jax_make_mesh():
    import jax

    jmesh = jax.make_mesh((2, 4), ("x", "y"))
    mesh = Mesh.from_jax(jmesh)
    assert mesh.device_ids == tuple(d.id for d in jmesh.devices.flat)
    assert mesh.shape() == collections.OrderedDict([("x", 2), ("y", 4)])


def test_from_jax_keeps_device_order(make_jax_mesh, eight_devices):
    order = [5, 3, 7, 1, 0, 2, 6, 4]
    jmesh = make_jax_mesh((2, 2, 2), ("a", "b", "c"), order=order)
    mesh = Mesh.from_jax(jmesh)
    assert mesh.device_ids == tuple(order)
    expected = np.array([[[d.id for d in row] for row in plane] for plane in jmesh.devices])
    np.testing.assert_array_equal(mesh.devices, expected)


# ------------------------------------------------------------------ queries


def test_shape_is_ordered_dict_in_mesh_order():
    mesh = Mesh(range(24), (2, 3, 4), ("z", "a", "m"))
    shape = mesh.shape()
    assert isinstance(shape, collections.OrderedDict)
    assert list(shape.items()) == [("z", 2), ("a", 3), ("m", 4)]
    # OrderedDict equality is order-sensitive: a reordered dict is not equal.
    assert shape != collections.OrderedDict([("a", 3), ("z", 2), ("m", 4)])


def test_logical_mesh_is_pytorch_xlas_device_array():
    mesh = Mesh([3, 2, 1, 0], (2, 2), ("data", "model"))
    assert mesh.get_logical_mesh().tolist() == [[3, 2], [1, 0]]


def test_devices_array_iota():
    mesh = Mesh.from_string("data=4,model=2")
    np.testing.assert_array_equal(mesh.devices, np.arange(8).reshape(4, 2))
    assert mesh.devices.shape == (4, 2)
    assert not mesh.devices.flags.writeable


def test_devices_array_permuted():
    ids = [7, 6, 5, 4, 3, 2, 1, 0]
    mesh = Mesh(ids, (2, 4), ("a", "b"))
    np.testing.assert_array_equal(mesh.devices, np.array(ids).reshape(2, 4))
    # The device at mesh coordinate (i, j) is ids[np.ravel_multi_index((i, j), shape)].
    for i in range(2):
        for j in range(4):
            assert mesh.devices[i, j] == ids[i * 4 + j]


def test_device_positions_is_inverse_permutation():
    ids = [3, 0, 6, 1, 7, 2, 5, 4]
    mesh = Mesh(ids, (8,), ("x",))
    positions = mesh.device_positions
    for position, device in enumerate(ids):
        assert positions[device] == position


def test_axis_queries():
    mesh = Mesh.from_string("data=4,model=2,pipe=3")
    assert mesh.axis_index("model") == 1
    assert mesh.axis_size("pipe") == 3
    assert mesh.axes_size(["data", "pipe"]) == 12
    assert mesh.axes_size([]) == 1
    assert mesh.has_axis("data") and not mesh.has_axis("modle")


def test_unknown_axis_query_names_the_axis_and_the_mesh():
    mesh = Mesh.from_string("data=4,model=2")
    with pytest.raises(ValueError, match=r"unknown mesh axis 'modle'.*data=4, model=2"):
        mesh.axis_size("modle")


def test_is_iota():
    assert Mesh.from_string("a=2,b=2").is_iota
    assert not Mesh.from_string("a=2,b=2", device_ids=[1, 0, 2, 3]).is_iota


def test_repr_round_trips():
    for mesh in (Mesh.from_string("data=4,model=2"),
                 Mesh((2, 0, 3, 1), (2, 2), ("a", "b"))):
        assert eval(repr(mesh), {"Mesh": Mesh}) == mesh


def test_str_mentions_devices_only_when_permuted():
    assert str(Mesh.from_string("data=4,model=2")) == "data=4,model=2"
    permuted = str(Mesh((1, 0), (2,), ("x",)))
    assert permuted.startswith("x=2") and "[1, 0]" in permuted


# --------------------------------------------------------- value semantics


def test_equality_across_constructors():
    a = Mesh(np.arange(8), np.array([4, 2]), ["data", "model"])
    b = Mesh.from_string("data=4,model=2")
    c = Mesh.from_axes([("data", 4), ("model", 2)])
    assert a == b == c
    assert hash(a) == hash(b) == hash(c)
    assert len({a, b, c}) == 1


def test_inequality():
    base = Mesh.from_string("data=4,model=2")
    assert base != Mesh.from_string("data=2,model=4")
    assert base != Mesh.from_string("data=4,mdl=2")
    assert base != Mesh.from_string("data=4,model=2", device_ids=[1, 0, 2, 3, 4, 5, 6, 7])
    assert base != Mesh.from_string("model=2,data=4")


def test_usable_as_dict_key():
    table = {Mesh.from_string("a=2"): "two"}
    assert table[Mesh((0, 1), (2,), ("a",))] == "two"


def test_immutable():
    mesh = Mesh.from_string("a=2")
    with pytest.raises(dataclasses.FrozenInstanceError):
        mesh.mesh_shape = (1, 2)


# -------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "ids, fragments",
    [
        ((0, 0, 1, 2), ["permutation of 0..3", "repeated: [0]", "missing: [3]"]),
        ((0, 1, 2, 2), ["repeated: [2]", "missing: [3]"]),
        ((0, 1, 2, 4), ["out of range: [4]", "missing: [3]"]),
        ((0, 1, 2, -1), ["out of range: [-1]", "missing: [3]"]),
        ((1, 2, 3, 4), ["missing: [0]", "out of range: [4]"]),
    ],
)
def test_device_ids_must_be_a_permutation(ids, fragments):
    with pytest.raises(ValueError) as info:
        Mesh(ids, (2, 2), ("a", "b"))
    for fragment in fragments:
        assert fragment in str(info.value)


def test_device_ids_wrong_count():
    with pytest.raises(ValueError, match=r"holds 4 devices but 3 device ids"):
        Mesh((0, 1, 2), (2, 2), ("a", "b"))
    with pytest.raises(ValueError, match=r"holds 4 devices but 5 device ids"):
        Mesh.from_string("a=2,b=2", device_ids=range(5))


@pytest.mark.parametrize("size", [0, -2])
def test_nonpositive_sizes(size):
    with pytest.raises(ValueError, match=rf"'b' has size {size}; sizes must be positive"):
        Mesh((), (2, size), ("a", "b"))
    with pytest.raises(ValueError, match=rf"'b' has size {size}; sizes must be positive"):
        Mesh.from_string(f"a=2,b={size}")


def test_duplicate_axis_names():
    with pytest.raises(ValueError, match=r"unique; 'a' appears more than once"):
        Mesh(range(4), (2, 2), ("a", "a"))
    with pytest.raises(ValueError, match=r"unique; 'data' appears more than once"):
        Mesh.from_string("data=2,model=2,data=2")


def test_name_count_mismatch():
    with pytest.raises(ValueError, match=r"2 axes .* but 3 names"):
        Mesh(range(4), (2, 2), ("a", "b", "c"))


@pytest.mark.parametrize("name", ["1x", "a-b", "", "a b", 3])
def test_axis_names_must_be_identifiers(name):
    with pytest.raises(ValueError, match=r"is not an identifier"):
        Mesh(range(4), (2, 2), ("ok", name))


@pytest.mark.parametrize(
    "text",
    ["data4", "data=", "=4", "data=4,,model=2", "data=x", "", "data=4;model=2",
     "data=4,model", "1data=4", "data=2.0"],
)
def test_from_string_bad_text(text):
    with pytest.raises(ValueError) as info:
        Mesh.from_string(text)
    message = str(info.value)
    assert "is not of the form name=size" in message
    assert repr(text) in message


@pytest.mark.parametrize(
    "build",
    [
        lambda: Mesh((0, 0, 1, 2), (2, 2), ("a", "b")),
        lambda: Mesh((0, 1, 2), (2, 2), ("a", "b")),
        lambda: Mesh((), (2, 0), ("a", "b")),
        lambda: Mesh(range(4), (2, 2), ("a", "a")),
        lambda: Mesh(range(4), (2, 2), ("a", "b", "c")),
        lambda: Mesh(range(4), (2, 2), ("ok", "1x")),
        lambda: Mesh.from_string("data=4,model"),
        lambda: Mesh.from_axes([("data", 2), ("model", 0)]),
        lambda: Mesh.from_string("data=4,model=2").axis_size("modle"),
    ],
)
def test_every_mesh_error_is_a_typed_user_error(build):
    # Typed, so the CLI reports it as one diagnostic line; still a ValueError,
    # so callers written against the old bare errors keep catching it.
    with pytest.raises(MeshError) as info:
        build()
    assert isinstance(info.value, SpmdError) and isinstance(info.value, ValueError)
    assert info.value.location is None and str(info.value) == info.value.message


@pytest.mark.parametrize(
    "ids, shape, message",
    [
        (("a", "b"), (2,), "device ids must be integers, got ['a', 'b']"),
        ((0, 1), ("two",), "mesh sizes must be integers, got ['two']"),
    ],
)
def test_non_integer_sizes_and_ids_are_mesh_errors(ids, shape, message):
    with pytest.raises(MeshError) as info:
        Mesh(ids, shape, ("x",))
    assert str(info.value) == message


# ------------------------------------------------------------------ sub-axes

def test_split_axes_names_each_part_by_its_pre_size():
    mesh = Mesh.from_string("a=8,b=2")
    split = split_axes(mesh, {"a": [2, 4]})
    assert split.axis_names == ("a:(1)2", "a:(2)2", "a:(4)2", "b")
    assert split.device_ids == mesh.device_ids   # devices keep their places
    assert parse_sub_axis("a:(2)2") == ("a", 2, 2) and parse_sub_axis("b") is None
    assert sdy_mesh_axes(split) == [("a", 8), ("b", 2)]
    # An axis of size 1 has nothing to split, and stays.
    assert split_axes(Mesh.from_string("a=1,b=2"), {}).axis_names == ("a", "b")


def test_sdy_axis_refs_merge_parts_back_into_shardys_spelling():
    split = split_axes(Mesh.from_string("a=8,b=2"), {"a": [2, 4]})
    assert sdy_axis_refs(split, ("a:(1)2", "a:(2)2", "a:(4)2")) == ['"a"']
    assert sdy_axis_refs(split, ("a:(1)2", "a:(2)2")) == ['"a":(1)4']
    assert sdy_axis_refs(split, ("a:(4)2", "a:(1)2", "b")) == ['"a":(4)2', '"a":(1)2', '"b"']
