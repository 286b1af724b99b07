"""The axis-based sharding value type, and its conversions.

A `Sharding` says, for one tensor on one `Mesh`, which mesh axes split each
dimension (major to minor), which axes hold *unreduced* partial results
(OneFlow's Partial, XLA's ``unreduced``) and how they combine, which axes are
in manual mode, or that the whole tensor lives on one device.  Axes used for
none of these are replicated.  This is the form every later stage reasons in
(propagation, resharding, cost): "which axes" is what they need, and device
lists are only the wire format.

Conversions in:  PyTorch/XLA and JAX partition specs, GSPMD's ``mesh_split``
dims mapping, and XLA's `HloSharding` (the ``mhlo.sharding`` text) on a mesh.
Conversion out: `to_spec` and `to_hlo`, whose text is what XLA prints.

The reduction kind of unreduced axes (sum, max, min) has no spelling in the
``mhlo.sharding`` text, where ``unreduced`` always means a pending sum; it is
kept here so that later passes can carry max/min partials, and `to_hlo`
refuses anything but sum rather than silently mislabel it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Iterable, Sequence

from stablehlo_spmd.errors import ShardingError
from stablehlo_spmd.hlo_sharding import HloSharding, TileAssignment
from stablehlo_spmd.kept_hash import kept_hash, state_without_hash
from stablehlo_spmd.mesh import (
    Mesh, axis_runs, parse_sub_axis, sdy_mesh_axes, split_axes, sub_axis_name)
from stablehlo_spmd.tile_axes import block_axes, tile_dim_axes

REDUCTIONS = ("sum", "max", "min")


@dataclasses.dataclass(frozen=True)
class Sharding:
    """How one tensor is laid out over a mesh, in terms of named axes."""

    mesh: Mesh
    dim_axes: tuple[tuple[str, ...], ...]
    unreduced: tuple[str, ...] = ()
    reduction: str = "sum"
    manual: tuple[str, ...] = ()
    maximal_device: int | None = None
    open_dims: frozenset[int] = frozenset()

    __hash__ = kept_hash
    __getstate__ = state_without_hash

    def __post_init__(self):
        object.__setattr__(self, "dim_axes", tuple(tuple(a) for a in self.dim_axes))
        object.__setattr__(self, "unreduced", tuple(self.unreduced))
        object.__setattr__(self, "manual", tuple(self.manual))
        object.__setattr__(self, "open_dims", frozenset(self.open_dims))
        self._check()
        # Unreduced and manual axes are sets: their order means nothing, so keep
        # them in mesh order, as XLA lays them out, and equal values compare equal.
        for field in ("unreduced", "manual"):
            ordered = tuple(sorted(getattr(self, field), key=self.mesh.axis_index))
            object.__setattr__(self, field, ordered)

    def _check(self) -> None:
        mesh = self.mesh
        seen: dict[str, str] = {}
        uses = [(axis, f"dimension {d}") for d, axes in enumerate(self.dim_axes) for axis in axes]
        uses += [(axis, "unreduced") for axis in self.unreduced]
        uses += [(axis, "manual") for axis in self.manual]
        for axis, where in uses:
            if not mesh.has_axis(axis):
                raise ShardingError(
                    f"unknown mesh axis {axis!r} (in {where}); the mesh has {mesh.describe_axes()}")
            if axis in seen:
                raise ShardingError(
                    f"mesh axis {axis!r} is used twice (in {seen[axis]} and in {where})")
            seen[axis] = where
        if self.reduction not in REDUCTIONS:
            raise ShardingError(
                f"unknown reduction {self.reduction!r}; expected one of {', '.join(REDUCTIONS)}")
        if self.maximal_device is not None:
            if not 0 <= self.maximal_device < mesh.size:
                raise ShardingError(
                    f"maximal device {self.maximal_device} is out of range for a mesh of "
                    f"{mesh.size} devices")
            if seen:
                raise ShardingError("a maximal sharding cannot also split or reduce over axes")
        for dim in self.open_dims:
            if not 0 <= dim < self.rank:
                raise ShardingError(f"open dimension {dim} is out of range for rank {self.rank}")

    # ------------------------------------------------------------- builders

    @classmethod
    def replicated(cls, mesh: Mesh, rank: int) -> "Sharding":
        return cls(mesh, ((),) * rank)

    @classmethod
    def maximal(cls, mesh: Mesh, device: int, rank: int) -> "Sharding":
        return cls(mesh, ((),) * rank, maximal_device=device)

    @classmethod
    def fully_manual(cls, mesh: Mesh, rank: int) -> "Sharding":
        return cls(mesh, ((),) * rank, manual=mesh.axis_names)

    @classmethod
    def from_spec(cls, mesh: Mesh, spec: Any, rank: int | None = None,
                  unreduced: Iterable[str] = (), reduction: str = "sum") -> "Sharding":
        """From a partition spec: PyTorch/XLA's or JAX's, or a `jax.sharding.PartitionSpec`.

        Each entry is ``None`` (replicated), an axis name, a mesh-axis index
        (PyTorch/XLA allows ints), or a tuple of those (major to minor).  A
        `PartitionSpec`'s own ``unreduced`` axes are taken too.  When `rank` is
        given the spec must have exactly that many entries, as PyTorch/XLA's
        ``mark_sharding`` requires: a silently padded spec hides typos.
        """
        entries = tuple(getattr(spec, "partitions", spec))  # PartitionSpec: its partitions
        spec_unreduced = tuple(getattr(spec, "unreduced", ()) or ())
        if rank is not None and len(entries) != rank:
            raise ShardingError(
                f"partition spec {_spec_text(entries)} has {len(entries)} entries but the "
                f"tensor has rank {rank}")
        dim_axes = tuple(_spec_entry_axes(mesh, entry) for entry in entries)
        all_unreduced = tuple(_axis_name(mesh, a) for a in (*spec_unreduced, *unreduced))
        return cls(mesh, dim_axes, unreduced=all_unreduced, reduction=reduction)

    @classmethod
    def mesh_split(cls, mesh: Mesh, dims_mapping: Sequence[int]) -> "Sharding":
        """GSPMD's ``mesh_split``: tensor dim i is split by mesh axis ``dims_mapping[i]`` (-1: none)."""
        dim_axes = []
        for dim, mesh_dim in enumerate(dims_mapping):
            if mesh_dim == -1:
                dim_axes.append(())
            elif 0 <= mesh_dim < mesh.rank:
                dim_axes.append((mesh.axis_names[mesh_dim],))
            else:
                raise ShardingError(
                    f"dims_mapping[{dim}] = {mesh_dim} is not -1 or a mesh dimension "
                    f"(the mesh has {mesh.rank})")
        return cls(mesh, tuple(dim_axes))

    @classmethod
    def from_hlo(cls, hlo: HloSharding, mesh: Mesh, rank: int,
                 any_order: bool = False) -> "Sharding":
        """Read an XLA sharding as axes of `mesh`, for a tensor of rank `rank`.

        With `any_order`, a tile assignment in a device order of its own
        reads as the layout with the same blocks in the mesh's order
        (`tile_axes.block_axes`): where the order does not matter, inside
        the program, that layout serves as well."""
        kind = hlo.kind
        if kind == "replicated":
            return cls.replicated(mesh, rank)
        if kind == "manual":
            return cls.fully_manual(mesh, rank)
        if kind == "unreduced":
            return cls(mesh, ((),) * rank, unreduced=mesh.axis_names)
        if kind == "maximal":
            if not 0 <= hlo.device < mesh.size:
                raise ShardingError(
                    f"maximal device {hlo.device} is out of range for a mesh of {mesh.size} devices")
            return cls.maximal(mesh, hlo.device, rank)
        if kind != "tiled":
            raise ShardingError(f"a {kind} sharding does not describe one tensor")
        if hlo.data_rank != rank:
            raise ShardingError(
                f"sharding tiles {hlo.data_rank} dimensions but the tensor has rank {rank}")
        if hlo.tile.num_devices != mesh.size:
            raise ShardingError(
                f"sharding uses {hlo.tile.num_devices} devices but the mesh has {mesh.size}")
        axes = tile_dim_axes(hlo, mesh)
        if axes is None and any_order and not set(hlo.subgroup_kinds) - {"replicated"}:
            axes = block_axes(hlo, mesh)
        if axes is None:
            raise ShardingError(
                f"sharding's tile assignment is not a choice of whole axes of the mesh "
                f"[{mesh.describe_axes()}]")
        unreduced, manual = [], []
        for subgroup, subgroup_axes in zip(hlo.subgroup_kinds, axes[rank:]):
            {"unreduced": unreduced, "manual": manual}.get(subgroup, []).extend(subgroup_axes)
        return cls(mesh, tuple(axes[:rank]), unreduced=tuple(unreduced), manual=tuple(manual))

    # -------------------------------------------------------------- queries

    @property
    def rank(self) -> int:
        return len(self.dim_axes)

    @property
    def is_maximal(self) -> bool:
        return self.maximal_device is not None

    @property
    def used_axes(self) -> tuple[str, ...]:
        return tuple(a for axes in self.dim_axes for a in axes) + self.unreduced + self.manual

    @property
    def replicated_axes(self) -> tuple[str, ...]:
        """Axes the tensor is replicated over, in mesh order."""
        used = set(self.used_axes)
        return tuple(a for a in self.mesh.axis_names if a not in used)

    @property
    def is_fully_replicated(self) -> bool:
        return not self.is_maximal and not self.used_axes

    def num_shards(self, dim: int) -> int:
        return self.mesh.axes_size(self.dim_axes[dim])

    @functools.cached_property
    def tile_count(self) -> int:
        """The blocks the tensor is split into: the product of the sizes of
        the axes splitting its dims (a device holds one; kept, since the
        search asks it of each layout many times)."""
        return math.prod(self.num_shards(d) for d in range(self.rank))

    def shard_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        """Per-device shape; uneven dimensions round up, as GSPMD pads them."""
        if len(shape) != self.rank:
            raise ShardingError(f"shape {list(shape)} does not have rank {self.rank}")
        return tuple(-(-size // self.num_shards(d)) for d, size in enumerate(shape))

    def to_spec(self) -> tuple:
        """The partition spec: None, an axis name, or a tuple of axis names per dimension."""
        return tuple(None if not axes else axes[0] if len(axes) == 1 else axes
                     for axes in self.dim_axes)

    def with_dim_axes(self, dim_axes: Sequence[Sequence[str]]) -> "Sharding":
        return dataclasses.replace(self, dim_axes=tuple(tuple(a) for a in dim_axes))

    def in_manual(self, axes: Sequence[str]) -> "Sharding":
        """This layout inside a manual region over `axes` (XLA's manual
        subgroup, Shardy's manual_computation): those axes leave the dims and
        become manual.  Inside the region each device holds its own value,
        so a manual axis neither splits nor reduces."""
        manual = tuple(axes)
        if self.is_maximal or manual == self.manual:
            return self
        return dataclasses.replace(
            self, dim_axes=tuple(tuple(a for a in d if a not in manual) for d in self.dim_axes),
            unreduced=tuple(a for a in self.unreduced if a not in manual), manual=manual)

    def evenly_dividing(self, shape: Sequence[int], dims: Iterable[int],
                        closed: Iterable[int] = ()) -> "Sharding":
        """This sharding with each of `dims` split only by its leading whole
        axes that divide the dim evenly, and each of `closed` by its leading
        axes or parts of axes that do; the rest is dropped.

        What a function's argument or result may be split by: JAX places
        only arrays that divide evenly, and a partition spec names whole
        axes, so a dim propagation chose gets whole axes only, while a dim
        the user closed keeps what part of it divides.  This is Shardy's
        export (``sdy-update-non-divisible-input-output-shardings``, then
        ``sdy-remove-sub-axes-in-input-output-shardings`` on open dims)."""
        whole = dict(sdy_mesh_axes(self.mesh))
        dim_axes = list(self.dim_axes)
        for dim in dims:
            kept, left = [], shape[dim]
            for axis, parts in axis_runs(dim_axes[dim]):
                size = self.mesh.axes_size(parts)
                if size != whole[axis] or left % size:
                    break
                kept += parts
                left //= size
            dim_axes[dim] = tuple(kept)
        mesh = self.mesh
        for dim in closed:
            kept, left = [], shape[dim]
            for part in dim_axes[dim]:
                size = self.mesh.axis_size(part)
                if left % size == 0:
                    kept.append(part)
                    left //= size
                    continue
                # The major part of the axis that does divide: a sub-axis,
                # on a mesh with the axis cut there (devices keep their places).
                common = math.gcd(size, left)
                if common > 1 and parse_sub_axis(part) is None:
                    mesh = split_axes(mesh, {part: [common]})
                    kept.append(sub_axis_name(part, 1, common))
                break
            dim_axes[dim] = tuple(kept)
        if mesh is self.mesh:
            return self.with_dim_axes(dim_axes)
        return Sharding(mesh, dim_axes, self.unreduced, self.reduction, self.manual)

    def reduced(self) -> "Sharding":
        """The sharding of the full value once the pending reduction is done:
        the same dims, no unreduced axes (what crosses a function or region
        boundary, and what a consumer that is not linear needs)."""
        if not self.unreduced and self.reduction == "sum":
            return self
        return dataclasses.replace(self, unreduced=(), reduction="sum")

    # ------------------------------------------------------------ to XLA

    def to_hlo(self) -> HloSharding:
        """The XLA sharding with the same device layout, canonical as XLA builds it."""
        if self.is_maximal:
            return HloSharding.maximal(self.maximal_device)
        if self.unreduced and self.reduction != "sum":
            raise ShardingError(
                f"mhlo.sharding can only express unreduced sums, not {self.reduction}")
        mesh = self.mesh
        groups = [(kind, axes) for kind, axes in (("manual", self.manual),
                                                   ("replicated", self.replicated_axes),
                                                   ("unreduced", self.unreduced)) if axes]
        order = [a for axes in self.dim_axes for a in axes] + [a for _, axes in groups for a in axes]
        perm = [mesh.axis_index(a) for a in order]
        dims = [mesh.axes_size(axes) for axes in self.dim_axes] + [
            mesh.axes_size(axes) for _, axes in groups]
        if mesh.is_iota:
            tile = TileAssignment.iota(dims, mesh.mesh_shape, perm)
        else:
            tile = TileAssignment.from_devices(mesh.devices.transpose(perm).reshape(dims))
        return HloSharding.tiled(tile, tuple(kind for kind, _ in groups))

    def __str__(self) -> str:
        text = _spec_text(self.to_spec())
        if self.is_maximal:
            return f"maximal(device={self.maximal_device})"
        extras = []
        if self.unreduced:
            extras.append(f"unreduced={{{', '.join(self.unreduced)}}}"
                          + ("" if self.reduction == "sum" else f":{self.reduction}"))
        if self.manual:
            extras.append(f"manual={{{', '.join(self.manual)}}}")
        return " ".join([text, *extras])


def _axis_name(mesh: Mesh, axis: Any) -> str:
    if isinstance(axis, bool) or not isinstance(axis, (str, int)):
        raise ShardingError(f"{axis!r} is not a mesh axis name or index")
    if isinstance(axis, int):
        if not 0 <= axis < mesh.rank:
            raise ShardingError(f"mesh axis index {axis} is out of range (the mesh has {mesh.rank})")
        return mesh.axis_names[axis]
    if not mesh.has_axis(axis):
        raise ShardingError(f"unknown mesh axis {axis!r}; the mesh has {mesh.describe_axes()}")
    return axis


def _spec_entry_axes(mesh: Mesh, entry: Any) -> tuple[str, ...]:
    if entry is None:
        return ()
    if isinstance(entry, (tuple, list)):
        return tuple(_axis_name(mesh, a) for a in entry)
    return (_axis_name(mesh, entry),)


def _spec_text(entries: Sequence[Any]) -> str:
    return "(" + ", ".join(repr(e) for e in entries) + ("," if len(entries) == 1 else "") + ")"
