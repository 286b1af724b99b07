"""The device mesh: named axes with sizes, and the order devices fill it in.

A `Mesh` is a small immutable value.  Its three fields are exactly PyTorch/XLA's
constructor arguments, so ``Mesh(device_ids, mesh_shape, axis_names)`` works
as it does there; `Mesh.from_string` and `Mesh.from_jax` are the other ways in.
Axes are listed major to minor: device ``device_ids[i]`` sits at the mesh
coordinate ``np.unravel_index(i, mesh_shape)``.

A mesh that cannot be built, or a query for an axis it lacks, raises
`MeshError` (a `ValueError` too), with a message callers pass on as it is.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import re
from typing import Iterable, Sequence

import numpy as np

from stablehlo_spmd.errors import MeshError
from stablehlo_spmd.kept_hash import kept_hash, state_without_hash

_AXIS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A part of an axis split at Shardy's sub-axes: "x:(2)4" is the axis of 4
# after the major 2 of "x" (Shardy's "x":(2)4).
_SUB_AXIS = re.compile(r"(?P<axis>[A-Za-z_][A-Za-z0-9_]*):\((?P<pre>\d+)\)(?P<size>\d+)")


@dataclasses.dataclass(frozen=True)
class Mesh:
    """Named mesh axes over a permutation of device ids ``0..N-1``."""

    device_ids: tuple[int, ...]
    mesh_shape: tuple[int, ...]
    axis_names: tuple[str, ...] | None = None

    __hash__ = kept_hash
    __getstate__ = state_without_hash

    def __post_init__(self):
        # Accept numpy arrays and lists the way PyTorch/XLA does, but store tuples
        # so that the mesh stays hashable and cheap to compare.
        shape = _integers(self.mesh_shape, "mesh sizes")
        ids = _integers(self.device_ids, "device ids")
        names = self.axis_names
        names = tuple(f"axis_{i}" for i in range(len(shape))) if names is None else tuple(names)
        object.__setattr__(self, "mesh_shape", shape)
        object.__setattr__(self, "device_ids", ids)
        object.__setattr__(self, "axis_names", names)
        _check_mesh(ids, shape, names)

    # ----------------------------------------------------------------- builders

    @classmethod
    def from_string(cls, text: str, device_ids: Sequence[int] | None = None) -> "Mesh":
        """Parse ``"data=4,model=2"``; devices fill the mesh in id order unless given."""
        names, sizes = [], []
        for item in text.replace(" ", "").split(","):
            name, eq, size = item.partition("=")
            if not eq or not _AXIS_NAME.fullmatch(name) or not re.fullmatch(r"-?\d+", size):
                raise MeshError(
                    f"mesh axis {item!r} in {text!r} is not of the form name=size "
                    f"(e.g. 'data=4,model=2')")
            names.append(name)
            sizes.append(int(size))
        if device_ids is None:
            _check_sizes(sizes, names)
            device_ids = range(math.prod(sizes))
        return cls(tuple(device_ids), tuple(sizes), tuple(names))

    @classmethod
    def from_axes(cls, axes: Iterable[tuple[str, int]],
                  device_ids: Sequence[int] | None = None) -> "Mesh":
        axes = list(axes)
        sizes = [size for _, size in axes]
        names = [name for name, _ in axes]
        if device_ids is None:
            _check_sizes(sizes, names)
            device_ids = range(math.prod(sizes))
        return cls(tuple(device_ids), tuple(sizes), tuple(names))

    @classmethod
    def from_jax(cls, jax_mesh) -> "Mesh":
        """The mesh of a `jax.sharding.Mesh`, keeping its device order."""
        ids = [device.id for device in np.asarray(jax_mesh.devices).flat]
        return cls(tuple(ids), tuple(jax_mesh.devices.shape), tuple(jax_mesh.axis_names))

    # ---------------------------------------------------------------- queries

    def shape(self) -> "collections.OrderedDict[str, int]":
        """Axis name to size, in mesh order (PyTorch/XLA's ``Mesh.shape()``)."""
        return collections.OrderedDict(zip(self.axis_names, self.mesh_shape))

    @property
    def size(self) -> int:
        return len(self.device_ids)

    @property
    def rank(self) -> int:
        return len(self.mesh_shape)

    def axis_size(self, name: str) -> int:
        return self.mesh_shape[self.axis_index(name)]

    def axis_index(self, name: str) -> int:
        try:
            return self._axis_positions[name]
        except KeyError:
            raise MeshError(
                f"unknown mesh axis {name!r}; the mesh has {self.describe_axes()}") from None

    def has_axis(self, name: str) -> bool:
        return name in self._axis_positions

    def axes_size(self, names: Iterable[str]) -> int:
        # The reshard planner asks this millions of times in a search over
        # a handful of distinct axis runs.
        key = names if isinstance(names, tuple) else tuple(names)
        size = self._axes_sizes.get(key)
        if size is None:
            size = self._axes_sizes[key] = math.prod(self.axis_size(n) for n in key)
        return size

    @functools.cached_property
    def _axis_positions(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.axis_names)}

    @functools.cached_property
    def _axes_sizes(self) -> dict[tuple[str, ...], int]:
        return {}

    @property
    def is_iota(self) -> bool:
        """True when devices fill the mesh in id order (XLA can then use iota tiles)."""
        return self.device_ids == tuple(range(len(self.device_ids)))

    @functools.cached_property
    def devices(self) -> np.ndarray:
        """Device ids as an array of shape `mesh_shape`."""
        array = np.array(self.device_ids, dtype=np.int64).reshape(self.mesh_shape)
        array.setflags(write=False)
        return array

    def get_logical_mesh(self) -> np.ndarray:
        """`devices`, under PyTorch/XLA's name for it."""
        return self.devices

    @functools.cached_property
    def device_positions(self) -> np.ndarray:
        """Inverse of `device_ids`: the flat mesh position of each device id."""
        positions = np.empty(self.size, dtype=np.int64)
        positions[np.array(self.device_ids, dtype=np.int64)] = np.arange(self.size)
        positions.setflags(write=False)
        return positions

    def describe_axes(self) -> str:
        return ", ".join(f"{n}={s}" for n, s in zip(self.axis_names, self.mesh_shape))

    def __str__(self) -> str:
        text = ",".join(f"{n}={s}" for n, s in zip(self.axis_names, self.mesh_shape))
        return text if self.is_iota else f"{text} devices={list(self.device_ids)}"

    def __repr__(self) -> str:
        axes = ",".join(f"{n}={s}" for n, s in zip(self.axis_names, self.mesh_shape))
        if self.is_iota:
            return f"Mesh.from_string({axes!r})"
        return f"Mesh.from_string({axes!r}, device_ids={list(self.device_ids)})"


# ------------------------------------------------------------------ sub-axes
#
# Shardy names part of an axis: "x":(pre)size is the digit of size `size`
# after the major `pre` of "x" (pre * size divides the axis).  Here a module
# whose shardings name sub-axes gets a mesh with each such axis split into
# parts at every point they name; a part is an axis like any other, named
# "x:(pre)size", so tile assignments, collectives and propagation need no
# notion of sub-axes at all.  Printing to Shardy's spelling merges the parts
# back (`sdy_axis_refs`, `sdy_mesh_axes`).

def sub_axis_name(axis: str, pre: int, size: int) -> str:
    return f"{axis}:({pre}){size}"


def parse_sub_axis(name: str) -> tuple[str, int, int] | None:
    """(axis, pre-size, size) of a part's name; None for a whole axis."""
    found = _SUB_AXIS.fullmatch(name)
    return None if found is None else (found["axis"], int(found["pre"]), int(found["size"]))


def split_axes(mesh: Mesh, cuts: dict[str, Iterable[int]]) -> Mesh:
    """`mesh` with each axis of `cuts` split into parts at those pre-sizes
    (each must divide the next, and the axis).  Devices keep their places:
    splitting an axis only names the digits of its coordinate."""
    names, sizes = [], []
    for name, size in zip(mesh.axis_names, mesh.mesh_shape):
        points = sorted({1, size} | set(cuts.get(name, ())))
        if len(points) <= 2:  # not cut (or of size 1)
            names.append(name)
            sizes.append(size)
            continue
        for low, high in zip(points, points[1:]):
            names.append(sub_axis_name(name, low, high // low))
            sizes.append(high // low)
    return Mesh(mesh.device_ids, tuple(sizes), tuple(names))


def sdy_mesh_axes(mesh: Mesh) -> list[tuple[str, int]]:
    """The mesh's axes as Shardy declares them: parts merged into their axis."""
    merged: list[tuple[str, int]] = []
    for name, size in zip(mesh.axis_names, mesh.mesh_shape):
        part = parse_sub_axis(name)
        if part is not None and merged and merged[-1][0] == part[0]:
            merged[-1] = (part[0], merged[-1][1] * size)
        else:
            merged.append((part[0] if part else name, size))
    return merged


def axis_runs(axes: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
    """`axes` (major to minor) grouped into runs of consecutive parts of one
    axis, each with the axis it is part of (a whole axis is a run of itself)."""
    runs: list[tuple[str, tuple[str, ...]]] = []
    following = None   # (axis, pre-size) the next part must have to join the run
    for name in axes:
        part = parse_sub_axis(name)
        if part is None:
            runs.append((name, (name,)))
            following = None
            continue
        axis, pre, size = part
        if following == (axis, pre):
            runs[-1] = (axis, runs[-1][1] + (name,))
        else:
            runs.append((axis, (name,)))
        following = (axis, pre * size)
    return runs


def sdy_axis_refs(mesh: Mesh, axes: Sequence[str]) -> list[str]:
    """Shardy's axis references for a run of mesh axes (major to minor):
    consecutive parts of one axis merge into that axis, or into one
    sub-axis ``"x":(pre)size``."""
    whole = dict(sdy_mesh_axes(mesh))
    refs = []
    for axis, parts in axis_runs(axes):
        first = parse_sub_axis(parts[0])
        if first is None:
            refs.append(f'"{axis}"')
            continue
        pre, size = first[1], mesh.axes_size(parts)
        whole_axis = pre == 1 and size == whole[axis]
        refs.append(f'"{axis}"' if whole_axis else f'"{axis}":({pre}){size}')
    return refs


def _integers(values, what: str) -> tuple[int, ...]:
    flat = np.asarray(values).reshape(-1)
    try:
        return tuple(int(v) for v in flat)
    except (TypeError, ValueError):
        raise MeshError(f"{what} must be integers, got {flat.tolist()}") from None


def _check_sizes(sizes: Sequence[int], names: Sequence[str]) -> None:
    for name, size in zip(names, sizes):
        if size <= 0:
            raise MeshError(f"mesh axis {name!r} has size {size}; sizes must be positive")


def _check_mesh(ids: tuple[int, ...], shape: tuple[int, ...], names: tuple[str, ...]) -> None:
    if len(names) != len(shape):
        raise MeshError(
            f"mesh has {len(shape)} axes {list(shape)} but {len(names)} names {list(names)}")
    _check_sizes(shape, names)
    for name in names:
        if not isinstance(name, str) or not (_AXIS_NAME.fullmatch(name)
                                             or _SUB_AXIS.fullmatch(name)):
            raise MeshError(f"mesh axis name {name!r} is not an identifier")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise MeshError(f"mesh axis names must be unique; {', '.join(map(repr, duplicates))} "
                         f"appears more than once in {list(names)}")
    count = math.prod(shape)
    if len(ids) != count:
        raise MeshError(
            f"mesh shape {list(shape)} holds {count} devices but {len(ids)} device ids were given")
    if sorted(ids) != list(range(count)):
        missing = sorted(set(range(count)) - set(ids))
        repeated = sorted(d for d, n in collections.Counter(ids).items() if n > 1)
        details = []
        if repeated:
            details.append(f"repeated: {repeated}")
        if missing:
            details.append(f"missing: {missing}")
        stray = sorted(d for d in set(ids) if not 0 <= d < count)
        if stray:
            details.append(f"out of range: {stray}")
        raise MeshError(
            f"device ids must be a permutation of 0..{count - 1} ({'; '.join(details)})")
