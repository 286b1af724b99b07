"""The reshard planner: turn one sharding of a tensor into another, cheaply.

`plan(source, target, shape, element_bytes)` returns the ordered collectives
(`Step`s) that turn a tensor laid out as `source` into the layout `target` on
the same mesh, each priced in bytes moved per device with DESIGN.md's table.
This module is pure mesh + sharding arithmetic; `collectives.py` turns the
steps into StableHLO.

The layout model (GSPMD's)
--------------------------
A dimension of size ``n`` split over axes of ``p`` devices in all holds
``ceil(n / p)`` elements per device; the device whose row-major coordinate
over those axes (major to minor) is ``k`` holds elements ``[k*s, (k+1)*s)``,
and positions past ``n`` are padding (zeros here).  Every intermediate of a
plan is such a layout, so a step's result shape is its `Step.result`
sharding's ``shard_shape``.

Moves, and when they need no extra data movement
------------------------------------------------
Only the minor end of a dimension's axes can change in place: a group of
axes ``G`` (``q`` devices) can be appended (slice, reduce_scatter, the
receiving side of an all_to_all) or removed (all_gather, the sending side of
an all_to_all) when the coarser blocks are exactly ``q`` finer ones, that is
when ``q`` divides the coarse shard size, or when no axis stays on the
dimension (the coarse "shard" is then the whole dimension, which can be
padded or trimmed freely).  Otherwise the dimension is gathered further first.

Search
------
The planner runs a cheapest-path search (by bytes, then by number of steps)
over intermediate layouts.  To keep the space small, slices and
reduce_scatters only add the target's next axes to a dimension, and a
collective_permute only jumps to a layout whose dimensions are prefixes of
the target's with the same shard counts; gathers may drop any minor group,
and an all_to_all may move any minor group to any other dimension (a
detour: ``(x y, -) -> (y, x)`` sends both axes to the second dim and ``y``
back, 45% fewer bytes than gathering ``y`` first), and two all_to_alls
the target wants on four distinct dims may go as one exchange over both
groups' devices, as XLA's does (7/8 of the block where one after the other
sends 3/4 and 1/2 of it).  A detour adds a
collective the byte count does not see, so the search ranks it as if it
moved `DETOUR_TOLL` of the tensor more; generated last, it loses every tie.
Size-1 mesh axes never move data, so they are dropped before the search.

Limits: the move set is not complete, so "cheapest" means cheapest among
these moves.  An uneven split that cannot happen in place is either a halo
exchange (`halo_slice`, `halo_gather`, when each device's new block lies
within reach of its coarse shard) or a gather of the dimension whole first,
and removing an
axis that is not at the minor end gathers every axis minor to it too (dim
``(x, y) -> (y)`` of a vector gathers both, then slices ``y`` again) where
a chain of all_to_alls could move less; with a second dim, detours find
such chains.  Going through another layout of the same value (the closure
of these moves) is still cheaper for a quarter of the moves the
auto-sharding search prices, 7-8% of all their bytes; about half of that
would go by slicing a free axis in first, which the search leaves out.

Costs (T: bytes of the tensor the group of ``q`` devices covers at that step,
B: this device's bytes before the step, both including padding)
all_gather (q-1)B = T(q-1)/q;  slice 0;  all_to_all B(q-1)/q = T(q-1)/q²;
all_reduce 2B(q-1)/q;  reduce_scatter B(q-1)/q;  collective_permute B = T/q;
gather_by_sum 2W(q-1)/q (W: the bytes once the dim is whole);  halo_slice:
the elements received (the widest piece from each distance) at B's bytes per
element along the dim;  halo_gather: an all_gather, then its halo the same way;
to_owner 0 (to and from one device: `_owner_plan`).
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import itertools
import math
from fractions import Fraction
from typing import Iterable, Iterator, NamedTuple, Sequence

import numpy as np

from stablehlo_spmd.errors import ShardingError
from stablehlo_spmd.halos import halo_extent, pieces_elements, window_pieces
from stablehlo_spmd.hlo_sharding import HloSharding
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.sharding import Sharding

DEFAULT_WARN_BYTES = 64 * 2**20
# A detour (an all_to_all to a dim the target does not want there) adds a
# collective, whose launch the byte count does not see: the planner takes
# one only where it saves more than this fraction of the tensor's bytes.
# On compare_xla's 2-D MLP, detours saving 5% and 10% added an all_to_all
# each and made the CPU step 1.2x slower than without them.
DETOUR_TOLL = Fraction(1, 8)

STEP_KINDS = ("all_reduce", "reduce_scatter", "all_gather", "gather_by_sum", "to_owner",
              "all_to_all", "slice", "halo_slice", "halo_gather", "collective_permute")


class ReshardError(ShardingError):
    """The two shardings cannot be connected (different meshes, new unreduced axes, ...)."""


def _placed(dims) -> set[tuple[int, int, str]]:
    """(dim, position, axis) of every mesh axis a layout's dims split."""
    return {(dim, position, axis) for dim, axes in enumerate(dims)
            for position, axis in enumerate(axes)}


@dataclasses.dataclass(frozen=True)
class Step:
    """One collective (or local slice) of a reshard plan.

    `axes` are the mesh axes forming the replica groups, row-major in the
    order given (a device's position in its group is its coordinate over
    them); for a collective_permute, the axes along which devices trade
    blocks (those whose place in the layout changes: what a cost model in
    seconds prices the link by).  `dim` is the tensor dimension gathered, scattered or sliced; for
    an all_to_all it is the dimension that loses the axes (the concat
    dimension) and `dim2` the one that gains them (the split dimension).
    `reduction` is "sum", "max" or "min" for all_reduce and reduce_scatter,
    "" otherwise.  `pairs` are the (source, target) device ids of a
    collective_permute, every device included (a device keeping its block
    is paired with itself).  `device` is the device a `to_owner` step hands
    a whole value to (`{maximal device=k}`; every device keeps it).
    `replicates_fully` marks a step whose result, an intermediate of the
    plan, is the whole tensor on every device and larger than the plan's
    `warn_bytes`.  `groups` makes an all_to_all joint: each (axes, dim,
    dim2) moves its axes from `dim` to `dim2`, all in one exchange over
    `axes`, their concatenation (`dim` and `dim2` are then None).
    `result` is the layout after the step; it
    is not part of equality, so tests can spell expected plans without it.
    """

    kind: str
    axes: tuple[str, ...] = ()
    dim: int | None = None
    dim2: int | None = None
    reduction: str = ""
    bytes_per_device: float = 0.0
    replicates_fully: bool = False
    pairs: tuple[tuple[int, int], ...] = ()
    device: int | None = None
    groups: tuple[tuple[tuple[str, ...], int, int], ...] = ()
    result: Sharding | None = dataclasses.field(default=None, compare=False, repr=False)


def plan(source: Sharding, target: Sharding, shape: Sequence[int], element_bytes: int,
         warn_bytes: float = DEFAULT_WARN_BYTES, with_pairs: bool = True) -> list[Step]:
    """The cheapest list of steps turning `source` into `target` for a tensor of `shape`.

    Raises `ReshardError` when no plan exists: different meshes, manual
    axes that the target does not keep, a maximal sharding on one side
    only, or a target with unreduced axes (or another reduction) that the
    source does not have.  Plans are cached by their arguments (shardings
    are values).  Without `with_pairs` a collective_permute's device pairs
    are left out: a price needs only its bytes, and pairing 1024 devices
    is most of what planning a permute costs.
    """
    shape = tuple(int(n) for n in shape)
    if target.manual and not source.manual:
        # A value read inside a manual region: each device's copy is its own
        # value there, so the value only has to arrive in the target's free
        # layout, its manual axes holding it whole (XLA broadcasts a
        # non-manual operand into a manual region the same way).
        free = dataclasses.replace(target, manual=())
        steps = plan(source, free, shape, element_bytes, warn_bytes, with_pairs)
        return steps[:-1] + [dataclasses.replace(steps[-1], result=target)] if steps else []
    _check_plannable(source, target, shape)
    if source.is_maximal or target.is_maximal:
        return _owner_plan(source, target, shape, int(element_bytes), float(warn_bytes))
    return list(_plan_cached(source, target, shape, int(element_bytes), float(warn_bytes),
                             with_pairs))


def _owner_plan(source: Sharding, target: Sharding, shape: tuple[int, ...],
                element_bytes: int, warn_bytes: float) -> list[Step]:
    """Plans to or from one device (`{maximal device=k}`).  A value wanted
    on one device is made whole (replicated) and handed to it; the handing
    moves nothing, since every device then holds it whole, and every op of
    one owner runs on every device of the one SPMD body
    (`partitioning.strategy.ON_OWNER`).  So a value on one device is whole
    everywhere, and leaving it is as from a replicated value (XLA, where
    only the owner holds it, broadcasts it from there)."""
    if source == target:
        return []
    replicated = Sharding.replicated(source.mesh, len(shape))
    steps = [] if source.is_maximal else plan(source, replicated, shape, element_bytes,
                                               warn_bytes)
    if target.is_maximal:
        return steps + [Step("to_owner", device=target.maximal_device, result=target)]
    return steps + plan(replicated, target, shape, element_bytes, warn_bytes)


def plan_cost(steps: Iterable[Step]) -> float:
    """Bytes moved per device by a plan."""
    return float(sum(step.bytes_per_device for step in steps))


# ------------------------------------------------------------ device layout

def axis_coordinate(mesh: Mesh, device: int, axes: Sequence[str]) -> int:
    """The row-major coordinate of `device` over `axes` (listed major to minor)."""
    coords = _coordinates(mesh)[device]
    index = 0
    for axis in axes:
        index = index * mesh.axis_size(axis) + int(coords[mesh.axis_index(axis)])
    return index


def replica_groups(mesh: Mesh, axes: Sequence[str]) -> list[list[int]]:
    """Groups of device ids that differ only along `axes`, each ordered by coordinate."""
    positions = [mesh.axis_index(a) for a in axes]
    others = [i for i in range(mesh.rank) if i not in positions]
    # Mesh axes as array dims: group dims last (in the order given), so that
    # every row of the flattened array is one group in coordinate order.
    devices = mesh.devices.transpose(others + positions)
    return devices.reshape(-1, mesh.axes_size(axes)).tolist()


def order_pairs(own: HloSharding, sharding: Sharding) -> list[tuple[int, int]]:
    """(source, target) device pairs that move every block of a value laid
    out as `own` (a tile assignment in a device order of its own) to the
    devices that hold that block under `sharding` (the same blocks in the
    mesh's order, `tile_axes.block_axes`).  Every device sends one block and
    receives one; a device that holds its block in both keeps it."""
    tile = own.tile.device_array()
    data_rank = own.data_rank
    sources: dict[tuple[int, ...], list[int]] = {}
    for index in np.ndindex(*tile.shape):
        sources.setdefault(index[:data_rank], []).append(int(tile[index]))
    targets: dict[tuple[int, ...], list[int]] = {}
    for device in sharding.mesh.device_ids:
        block = tuple(axis_coordinate(sharding.mesh, device, axes) for axes in sharding.dim_axes)
        targets.setdefault(block, []).append(device)
    pairs = []
    for block, senders in sources.items():
        receivers = targets[block]
        kept = set(senders) & set(receivers)
        pairs += [(device, device) for device in sorted(kept)]
        pairs += list(zip(sorted(set(senders) - kept), sorted(set(receivers) - kept)))
    return pairs


def shard_offsets(sharding: Sharding, shape: Sequence[int]) -> dict[int, tuple[int, ...]]:
    """For each device id, the global start index of its shard along each dim (padding included)."""
    sizes = sharding.shard_shape(shape)
    return {device: tuple(axis_coordinate(sharding.mesh, device, axes) * size
                          for axes, size in zip(sharding.dim_axes, sizes))
            for device in sharding.mesh.device_ids}


@functools.lru_cache(maxsize=64)
def _coordinates(mesh: Mesh) -> np.ndarray:
    """Row `d`: the mesh coordinate of device id `d`."""
    return np.stack(np.unravel_index(mesh.device_positions, mesh.mesh_shape), axis=1)


# ------------------------------------------------------------ validation

def _check_plannable(source: Sharding, target: Sharding, shape: tuple[int, ...]) -> None:
    if source.mesh != target.mesh:
        raise ReshardError(f"cannot reshard between meshes [{source.mesh.describe_axes()}] "
                           f"and [{target.mesh.describe_axes()}]")
    if source.rank != len(shape) or target.rank != len(shape):
        raise ReshardError(f"shardings of rank {source.rank} and {target.rank} do not fit "
                           f"shape {list(shape)}")
    if source.manual != target.manual:
        raise ReshardError(f"manual axes differ ({list(source.manual)} vs {list(target.manual)})")
    extra = [a for a in target.unreduced if a not in source.unreduced]
    if extra:
        raise ReshardError(f"target {target} is unreduced along {extra}, which the source "
                           f"{source} is not: a reshard cannot make partial values")
    if target.unreduced and target.reduction != source.reduction:
        raise ReshardError(f"source pends a {source.reduction} but target a {target.reduction}")


# ------------------------------------------------------------ the search

class _Layout(NamedTuple):
    """A search state: axes per dim (major to minor) and the unreduced axes still pending."""
    dims: tuple[tuple[str, ...], ...]
    pending: frozenset[str]


class _Move(NamedTuple):
    step: Step  # without `result` (and permute `pairs`), filled in once the path is known
    after: _Layout
    cost: int | Fraction   # bytes times `_Problem.scale`, as the search ranks the move


@functools.lru_cache(maxsize=4096)
def _plan_cached(source: Sharding, target: Sharding, shape: tuple[int, ...],
                 element_bytes: int, warn_bytes: float, with_pairs: bool) -> tuple[Step, ...]:
    problem = _Problem(source, target, shape, element_bytes)
    moves = problem.cheapest_path()
    steps, before = [], problem.start
    for index, move in enumerate(moves):
        last = index == len(moves) - 1
        result = target if last else problem.sharding(move.after)
        step = dataclasses.replace(move.step, result=result)
        if not last and all(not axes for axes in move.after.dims):
            step = dataclasses.replace(step, replicates_fully=problem.global_bytes > warn_bytes)
        if step.kind == "collective_permute" and with_pairs:  # only for the chosen permutes
            step = dataclasses.replace(step, pairs=problem.permutation(before, move.after))
        steps.append(step)
        before = move.after
    return tuple(steps)


class _Problem:
    """One (source, target, shape) planning problem; generates the moves of the search.

    Costs are exact, so that ties go to the move generated first on every
    machine, and kept as integers: bytes times `scale`, which every group's
    device count divides (a divisor of the mesh's) and the detour toll's
    denominator too.  Only halo prices, per element of an uneven dim, can
    still be fractions.  Fractions throughout made a third of the
    auto-sharding search's pricing time."""

    def __init__(self, source: Sharding, target: Sharding, shape: tuple[int, ...],
                 element_bytes: int):
        self.mesh = source.mesh
        self.source = source
        self.shape = shape
        self.element_bytes = element_bytes
        self.reduction = source.reduction
        trivial = {a for a in self.mesh.axis_names if self.mesh.axis_size(a) == 1}
        self.start = _Layout(_drop(source.dim_axes, trivial),
                             frozenset(source.unreduced) - trivial)
        self.goal = _Layout(_drop(target.dim_axes, trivial),
                            frozenset(target.unreduced) - trivial)
        # Axes that never move: manual ones, and size-1 ones (data-wise no-ops).
        self.fixed = frozenset(source.manual) | trivial
        self.global_bytes = math.prod(shape) * element_bytes
        self.scale = self.mesh.size * DETOUR_TOLL.denominator
        self._detour_toll = int(self.global_bytes * DETOUR_TOLL * self.scale)
        self._all_to_all_moves: dict[_Layout, tuple[list[_Move], list[_Move]]] = {}
        self._local_shapes: dict[tuple, tuple[int, ...]] = {}
        self._shard_counts: dict[tuple[str, ...], int] = {}

    # -------------------------------------------------------- layout sizes

    def shards(self, axes: Iterable[str]) -> int:
        try:
            return self._shard_counts[axes]
        except KeyError:
            size = self._shard_counts[axes] = self.mesh.axes_size(axes)
            return size
        except TypeError:   # not a tuple: nothing to remember it by
            return self.mesh.axes_size(axes)

    def local_shape(self, layout: _Layout) -> tuple[int, ...]:
        # Every move generator asks it of each layout the search pops.
        local = self._local_shapes.get(layout.dims)
        if local is None:
            local = self._local_shapes[layout.dims] = tuple(
                -(-n // self.shards(axes)) for n, axes in zip(self.shape, layout.dims))
        return local

    def nbytes(self, shape: Iterable[int]) -> int:
        return math.prod(shape) * self.element_bytes

    def per_device(self, total: int, q: int) -> int:
        """`total` bytes over a group of `q` devices, scaled (exact: q divides the scale)."""
        return total * self.scale // q

    def per_element(self, total: int, elements: int) -> int | Fraction:
        """`total` bytes over `elements`, scaled: a fraction only where it must be."""
        scaled = total * self.scale
        return scaled // elements if scaled % elements == 0 else Fraction(scaled, elements)

    def unscaled(self, cost: int | Fraction) -> float:
        return float(cost / self.scale)

    def sharding(self, layout: _Layout) -> Sharding:
        return Sharding(self.mesh, layout.dims, unreduced=tuple(layout.pending),
                        reduction=self.reduction, manual=self.source.manual)

    def splittable(self, dim: int, major: Sequence[str], q: int) -> bool:
        """Can the shards of `dim` over `major` be cut into `q` finer ones in place?"""
        shards = self.shards(major)
        return shards == 1 or -(-self.shape[dim] // shards) % q == 0

    def padded_bytes(self, layout: _Layout, dim: int, q: int) -> int:
        """Local bytes once `dim` is padded to `q` shards of the finer size."""
        shape = list(self.local_shape(layout))
        finer = -(-self.shape[dim] // (self.shards(layout.dims[dim]) * q))
        shape[dim] = q * finer
        return self.nbytes(shape)

    def next_axes(self, layout: _Layout, dim: int) -> tuple[str, ...] | None:
        """The target's axes still to add to `dim`, or None when `dim` is off the target's path."""
        have, want = layout.dims[dim], self.goal.dims[dim]
        return want[len(have):] if want[:len(have)] == have else None

    def free_axes(self, layout: _Layout) -> frozenset[str]:
        used = {a for axes in layout.dims for a in axes} | layout.pending | self.fixed
        return frozenset(self.mesh.axis_names) - used

    # -------------------------------------------------------- search

    def cheapest_path(self) -> list[_Move]:
        """Dijkstra over layouts, by (bytes, steps); ties keep the first move generated."""
        best = {self.start: (0, 0)}
        came_from: dict[_Layout, tuple[_Layout, _Move]] = {}
        frontier = [(0, 0, 0, self.start)]
        tie = itertools.count(1)
        while frontier:
            cost, steps, _, layout = heapq.heappop(frontier)
            if layout == self.goal:
                return _path_to(layout, came_from)
            if (cost, steps) > best[layout]:
                continue
            for move in self.moves(layout):
                key = (cost + move.cost, steps + 1)
                if key < best.get(move.after, (math.inf, 0)):
                    best[move.after] = key
                    came_from[move.after] = (layout, move)
                    heapq.heappush(frontier, (*key, next(tie), move.after))
        raise AssertionError("gathering everything and slicing again always reaches the target")

    def moves(self, layout: _Layout) -> Iterator[_Move]:
        yield from self.slices(layout)
        yield from self.halo_slices(layout)
        yield from self.reduce_scatters(layout)
        yield from self.all_reduces(layout)
        yield from self.all_to_alls(layout)
        yield from self.joint_all_to_alls(layout)
        yield from self.all_gathers(layout)
        yield from self.halo_gathers(layout)
        yield from self.permutes(layout)
        yield from self.all_to_alls(layout, detours=True)

    def slices(self, layout: _Layout) -> Iterator[_Move]:
        free = self.free_axes(layout)
        for dim, group in self.target_groups(layout, lambda a: a in free):
            after = _with_dim(layout, dim, layout.dims[dim] + group)
            yield _Move(Step("slice", group, dim), after, 0)

    def halo_slices(self, layout: _Layout) -> Iterator[_Move]:
        """Split an unevenly split dim further where the finer blocks do not
        nest in the coarser ones: each device's block starts in its own
        coarse shard or past it, and the part held elsewhere comes by halo
        exchange (GSPMD's reshard by halo) instead of gathering the dim.

        The device at coarse coordinate c takes the window of its q finer
        blocks, ``[c*q*s_f, (c+1)*q*s_f)`` (`Emitter.halo_window` with offset
        0 and step ``q*s_f - s_c``), then keeps its block of it (a slice over
        the new axes).  Priced by the elements received, as the windowed
        strategies price halos."""
        free = self.free_axes(layout)
        local = self.local_shape(layout)
        for dim in range(len(layout.dims)):
            major = layout.dims[dim]
            upcoming = self.next_axes(layout, dim) or ()
            coarse = self.shards(major)
            if not major or coarse == 1:
                continue
            for k in range(1, len(upcoming) + 1):
                group = upcoming[:k]
                if group[-1] not in free:
                    break
                q = self.shards(group)
                if self.splittable(dim, major, q):
                    continue
                received = self.halo_elements(dim, coarse, -(-self.shape[dim] // coarse),
                                              q * -(-self.shape[dim] // (coarse * q)))
                if received is None:
                    continue
                cost = self.per_element(self.nbytes(local) * received, local[dim])
                after = _with_dim(layout, dim, major + group)
                yield _Move(Step("halo_slice", group, dim, bytes_per_device=self.unscaled(cost)),
                            after, cost)

    def halo_gathers(self, layout: _Layout) -> Iterator[_Move]:
        """Remove a minor group of a dim's axes where the finer blocks do not
        nest in the coarser ones (blocks of 2 back into blocks of 3): gather
        the group (each device then holds ``[c*q*s_f, (c+1)*q*s_f)``), and take
        the coarse shard ``[c*s_c, (c+1)*s_c)`` from that and a neighbour's
        halo, as GSPMD does, instead of gathering the whole dim."""
        local = self.local_shape(layout)
        nbytes = self.nbytes(local)
        for dim, axes in enumerate(layout.dims):
            for cut in range(1, len(axes)):
                major, group = axes[:cut], axes[cut:]
                q = self.shards(group)
                if self.splittable(dim, major, q):
                    continue
                coarse = self.shards(major)
                received = self.halo_elements(dim, coarse, q * local[dim],
                                              -(-self.shape[dim] // coarse))
                if received is None:
                    continue
                cost = nbytes * (q - 1) * self.scale + \
                    self.per_element(nbytes * received, local[dim])
                yield _Move(Step("halo_gather", group, dim, bytes_per_device=self.unscaled(cost)),
                            _with_dim(layout, dim, major), cost)

    def halo_elements(self, dim: int, coarse: int, held: int, wanted: int) -> int | None:
        """Elements along `dim` a device receives when the device at coarse
        coordinate c holds ``[c*held, (c+1)*held)`` and wants the window
        ``[c*wanted, (c+1)*wanted)`` (`halo_slices`, `halo_gathers`); None
        where halos from the neighbours do not serve and the pieces would
        move as much as a gather."""
        n = self.shape[dim]
        live = -(-n // wanted)
        step = wanted - held
        extent = halo_extent(held, coarse, 0, wanted, step, n, live)
        starts = [c * step for c in range(coarse)]
        pieces = pieces_elements(window_pieces(held, coarse, n, starts, wanted, live))
        if extent is not None:
            return min(sum(extent), pieces)
        return pieces if pieces < (coarse - 1) * held else None

    def reduce_scatters(self, layout: _Layout) -> Iterator[_Move]:
        to_reduce = layout.pending - self.goal.pending
        for dim, group in self.target_groups(layout, lambda a: a in to_reduce):
            q = self.shards(group)
            after = _with_dim(layout, dim, layout.dims[dim] + group)
            after = after._replace(pending=layout.pending - set(group))
            cost = self.per_device(self.padded_bytes(layout, dim, q) * (q - 1), q)
            yield _Move(Step("reduce_scatter", group, dim, reduction=self.reduction,
                             bytes_per_device=self.unscaled(cost)), after, cost)

    def target_groups(self, layout: _Layout, allowed) -> Iterator[tuple[int, tuple[str, ...]]]:
        """(dim, group): the target's next axes of `dim`, all `allowed`, splittable in place."""
        for dim in range(len(layout.dims)):
            upcoming = self.next_axes(layout, dim) or ()
            for k in range(1, len(upcoming) + 1):
                group = upcoming[:k]
                if not allowed(group[-1]):
                    break
                if self.splittable(dim, layout.dims[dim], self.shards(group)):
                    yield dim, group

    def all_reduces(self, layout: _Layout) -> Iterator[_Move]:
        to_reduce = sorted(layout.pending - self.goal.pending, key=self.mesh.axis_index)
        local = self.nbytes(self.local_shape(layout))
        for count in range(len(to_reduce), 0, -1):
            for group in itertools.combinations(to_reduce, count):
                q = self.shards(group)
                cost = self.per_device(2 * local * (q - 1), q)
                after = layout._replace(pending=layout.pending - set(group))
                yield _Move(Step("all_reduce", group, reduction=self.reduction,
                                 bytes_per_device=self.unscaled(cost)), after, cost)

    def all_gathers(self, layout: _Layout) -> Iterator[_Move]:
        local = self.nbytes(self.local_shape(layout))
        for dim, axes in enumerate(layout.dims):
            for cut in range(len(axes)):
                major, group = axes[:cut], axes[cut:]
                q = self.shards(group)
                if self.splittable(dim, major, q):
                    cost = local * (q - 1) * self.scale
                    yield _Move(Step("all_gather", group, dim,
                                     bytes_per_device=self.unscaled(cost)),
                                _with_dim(layout, dim, major), cost)
            if axes:
                yield self.gather_by_sum(layout, dim)

    def gather_by_sum(self, layout: _Layout, dim: int) -> _Move:
        """Make `dim` whole by summing: each device places the real part of
        its shard in a zero buffer of the whole dim, and an all_reduce adds
        them up.  It sends the whole dim twice where an all_gather sends
        every shard, padding included, once: cheaper where most devices
        hold padding only (a dim of 1 split 8 ways: the owner's broadcast,
        as XLA writes it)."""
        q = self.shards(layout.dims[dim])
        local = self.local_shape(layout)
        whole = self.nbytes(local) * self.shape[dim] // local[dim]
        cost = self.per_device(2 * whole * (q - 1), q)
        return _Move(Step("gather_by_sum", layout.dims[dim], dim,
                          bytes_per_device=self.unscaled(cost)),
                     _with_dim(layout, dim, ()), cost)

    def all_to_alls(self, layout: _Layout, detours: bool = False) -> list[_Move]:
        """Move a minor group of `source_dim`'s axes to the minor end of another
        dim: the target's next axes there, or any group that leaves every dim
        split as many ways as the target's (a permute then puts the blocks
        in the target's order, as XLA does for a merge in another order).
        With `detours`, exactly the other moves: a group parked where the
        target does not want it, to be moved on or gathered later.  Without
        them, 26% of the moves the auto-sharding search priced on Mixtral's
        forward and BERT's training step cost more than going through
        another of the value's layouts; with them (and their toll), 24%,
        and those moves sum to 6-7% fewer bytes.

        Both kinds come from one pass over the layout's groups, kept for the
        layout: `moves` asks for each, and `joint_all_to_alls` again."""
        found = self._all_to_all_moves.get(layout)
        if found is None:
            found = self._all_to_all_moves[layout] = self._find_all_to_alls(layout)
        return found[detours]

    def _find_all_to_alls(self, layout: _Layout) -> tuple[list[_Move], list[_Move]]:
        """(the moves the target wants, the detours), each in generation order."""
        goal_counts = [self.shards(axes) for axes in self.goal.dims]
        wanted_moves: list[_Move] = []
        detour_moves: list[_Move] = []
        for source_dim, axes in enumerate(layout.dims):
            for cut in range(len(axes)):
                major, group = axes[:cut], axes[cut:]
                q = self.shards(group)
                if not self.splittable(source_dim, major, q):
                    continue
                for dest_dim in range(len(layout.dims)):
                    if dest_dim == source_dim or \
                            not self.splittable(dest_dim, layout.dims[dest_dim], q):
                        continue
                    after = _with_dim(layout, source_dim, major)
                    after = _with_dim(after, dest_dim, layout.dims[dest_dim] + group)
                    upcoming = self.next_axes(layout, dest_dim)
                    wanted = bool(upcoming and upcoming[:len(group)] == group) or \
                        [self.shards(a) for a in after.dims] == goal_counts
                    # A detour pads nothing: a dim neither end splits then
                    # changes a move's price only by which groups divide it,
                    # all the auto-sharding search's move classes keep of it.
                    if not wanted and self.local_shape(layout)[dest_dim] % q:
                        continue
                    cost = self.per_device(self.padded_bytes(layout, dest_dim, q) * (q - 1), q)
                    step = Step("all_to_all", group, source_dim, dest_dim,
                                bytes_per_device=self.unscaled(cost))
                    if wanted:
                        wanted_moves.append(_Move(step, after, cost))
                    else:
                        # The search ranks a detour as if it moved DETOUR_TOLL
                        # of the tensor more than it does.
                        detour_moves.append(_Move(step, after, cost + self._detour_toll))
        return wanted_moves, detour_moves

    def joint_all_to_alls(self, layout: _Layout) -> Iterator[_Move]:
        """Two all_to_alls the target wants, on four distinct dims, as one
        exchange over both groups' devices (XLA's multi-dim all_to_all):
        each device sends (q-1)/q of its block once, where one after the
        other send (q1-1)/q1 of it and then (q2-1)/q2, never less, in two
        collectives."""
        if len(layout.dims) < 4:
            return
        singles = [move.step for move in self.all_to_alls(layout)]
        for index, first in enumerate(singles):
            for second in singles[index + 1:]:
                if len({first.dim, first.dim2, second.dim, second.dim2}) < 4:
                    continue
                shape = list(self.local_shape(layout))
                after = layout
                for step in (first, second):
                    q = self.shards(step.axes)
                    held = self.shards(layout.dims[step.dim2])
                    shape[step.dim2] = q * -(-self.shape[step.dim2] // (held * q))
                    kept = layout.dims[step.dim][:len(layout.dims[step.dim]) - len(step.axes)]
                    after = _with_dim(after, step.dim, kept)
                    after = _with_dim(after, step.dim2, layout.dims[step.dim2] + step.axes)
                q = self.shards(first.axes + second.axes)
                cost = self.per_device(self.nbytes(shape) * (q - 1), q)
                groups = tuple((step.axes, step.dim, step.dim2) for step in (first, second))
                yield _Move(Step("all_to_all", first.axes + second.axes, groups=groups,
                                 bytes_per_device=self.unscaled(cost)), after, cost)

    def permutes(self, layout: _Layout) -> Iterator[_Move]:
        """Same shard counts per dim, other devices: jump to a layout on the
        target's path, or one step from it: a dim may also take, minor to
        the target's axes, axes the target does not split at all, which an
        all_gather then drops.  (Moving the smaller blocks first and
        gathering after moves less than gathering first: XLA's order.)"""
        goal_axes = {a for axes in self.goal.dims for a in axes}
        spare = [a for a in self.mesh.axis_names
                 if a not in goal_axes and a not in layout.pending and a not in self.fixed]
        extras = [()] + [(a,) for a in spare] + list(itertools.permutations(spare, 2))
        options = []
        for dim, axes in enumerate(layout.dims):
            want = self.goal.dims[dim]
            count = self.shards(axes)
            options.append([want[:k] + extra for k in range(len(want) + 1) for extra in extras
                            if (not extra or k == len(want))
                            and self.shards(want[:k] + extra) == count])
        local = self.nbytes(self.local_shape(layout))
        held = _placed(layout.dims)
        for dims in itertools.product(*options):
            used = [a for axes in dims for a in axes]
            if dims == layout.dims or len(set(used)) != len(used) or layout.pending & set(used):
                continue
            crossed = tuple(sorted({axis for _, _, axis in held ^ _placed(dims)}))
            yield _Move(Step("collective_permute", crossed, bytes_per_device=float(local)),
                        layout._replace(dims=tuple(dims)), local * self.scale)

    def permutation(self, before: _Layout, after: _Layout) -> tuple[tuple[int, int], ...]:
        """(source, target) device pairs giving every device the block it needs.

        Devices that differ only along pending axes hold the partials of one
        value, which must arrive together: the matching is made among devices at
        coordinate 0 along the pending axes, then repeated along them.
        """
        mesh = self.mesh
        pending = [mesh.axis_index(a) for a in before.pending]

        def blocks(layout: _Layout, device: int) -> tuple[int, ...]:
            return tuple(axis_coordinate(mesh, device, axes) for axes in layout.dims)

        base = [int(d) for d in mesh.device_ids
                if not any(_coordinates(mesh)[d][pending].tolist())]
        holders: dict[tuple[int, ...], list[int]] = {}
        for device in base:
            holders.setdefault(blocks(before, device), []).append(device)
        matches, needy = {}, []
        for device in base:
            wanted = blocks(after, device)
            if device in holders[wanted]:  # already holds its block: keep it in place
                holders[wanted].remove(device)
                matches[device] = device
            else:
                needy.append((device, wanted))
        for device, wanted in needy:
            matches[device] = holders[wanted].pop(0)
        pairs = []
        for offset in np.ndindex(*(mesh.mesh_shape[i] for i in pending)):
            for target, source in matches.items():
                pairs.append((_shifted(mesh, source, pending, offset),
                              _shifted(mesh, target, pending, offset)))
        return tuple(sorted(pairs, key=lambda pair: pair[1]))


def _shifted(mesh: Mesh, device: int, mesh_dims: list[int], coordinates: tuple[int, ...]) -> int:
    """The device at `device`'s mesh coordinates with `mesh_dims` set to `coordinates`."""
    coords = _coordinates(mesh)[device].copy()
    coords[mesh_dims] = coordinates
    return int(mesh.devices[tuple(coords)])


def _path_to(layout: _Layout, came_from: dict) -> list[_Move]:
    path = []
    while layout in came_from:
        layout, move = came_from[layout]
        path.append(move)
    return path[::-1]


def _with_dim(layout: _Layout, dim: int, axes: tuple[str, ...]) -> _Layout:
    return layout._replace(dims=layout.dims[:dim] + (axes,) + layout.dims[dim + 1:])


def _drop(dim_axes: tuple[tuple[str, ...], ...], axes: frozenset | set) -> tuple:
    return tuple(tuple(a for a in dim if a not in axes) for dim in dim_axes)
