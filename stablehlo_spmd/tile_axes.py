"""Reading device tile assignments back as named mesh axes.

An ``mhlo.sharding`` names devices, not axes: its tile assignment is an array
of device ids.  To work with axes we factor that array.  After relabelling
each device by its position in the mesh's device order, a tile assignment that
fits the mesh is a transposed iota: its flattened entries are a mixed-radix
number whose digits are *pieces* ``(stride, size)`` in device-position space.
Every mesh axis is such a piece too (stride = product of the sizes minor to
it), so matching the two tells which axes tile which tensor dimension.

The same pieces give the one common mesh for a whole module: every piece's
boundaries (``stride`` and ``stride * size``) are cut points on the device
positions, and the mesh is the shortest factorization that has all of them.
That only exists when the cut points divide one another; otherwise no single
mesh of full axes expresses all the tile assignments and we say so.  A tile
assignment that no reordering of axes makes a transposed iota over the
mesh's device order (``{devices=[2]1,0}`` beside ``<=[2]``) has a device
order of its own: the mesh only cuts its tile dims, which take whole axes in
mesh order (`block_axes`), and its device order is kept where it matters,
at the function boundary (`partitioning.partitioner`).

Everything here is numpy over at most N device ids per sharding: linear in the
device count, independent of tensor sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from stablehlo_spmd.errors import ShardingError
from stablehlo_spmd.hlo_sharding import HloSharding
from stablehlo_spmd.mesh import Mesh


@dataclass(frozen=True)
class _Piece:
    """One mixed-radix digit of a flattened tile array.

    `stride` is its weight in device-position space; `block` is how many flat
    entries one step of it spans (the product of the sizes minor to it).
    """

    stride: int
    size: int
    block: int


def _factor_flat(positions: np.ndarray) -> list[_Piece] | None:
    """Coarsest pieces (minor first) with ``positions == sum(digit * stride)``, if any.

    Greedy from the minor end: each step extends the current arithmetic run as
    far as it goes.  Merging two adjacent digits whose strides chain exactly is
    always valid, so the greedy answer is right whenever an answer exists; the
    final rebuild checks it.
    """
    n = len(positions)
    if n == 0 or positions[0] != 0:
        return None
    pieces: list[_Piece] = []
    block = 1
    while block < n:
        stride = int(positions[block])
        if stride <= 0:
            return None
        size = 2
        while block * size < n and int(positions[block * size]) == size * stride:
            size += 1
        while n % (block * size):
            size -= 1
        if size < 2:
            return None
        pieces.append(_Piece(stride, size, block))
        block *= size
    rebuilt = np.zeros(n, dtype=np.int64)
    flat_index = np.arange(n)
    for piece in pieces:
        rebuilt += ((flat_index // piece.block) % piece.size) * piece.stride
    if not np.array_equal(rebuilt, positions):
        return None
    return pieces


def _split_pieces(pieces: list[_Piece], cuts: Iterable[int], space: str) -> list[_Piece] | None:
    """Split pieces so that no cut falls strictly inside one.

    `space` says what the cuts measure: ``"block"`` (flat positions in the
    tile array, e.g. its dimension boundaries) or ``"stride"`` (device
    positions, e.g. mesh axis boundaries).  Either way a piece splits into a
    minor digit of ``cut / lower`` steps and a major digit with the rest.
    Returns None when a cut does not divide a piece evenly.
    """
    result = list(pieces)
    for cut in sorted(set(cuts)):
        next_result = []
        for piece in result:
            lower = piece.block if space == "block" else piece.stride
            upper = lower * piece.size
            if lower < cut < upper:
                if cut % lower or upper % cut:
                    return None
                minor_size = cut // lower
                next_result.append(_Piece(piece.stride, minor_size, piece.block))
                next_result.append(_Piece(piece.stride * minor_size, piece.size // minor_size,
                                          piece.block * minor_size))
            else:
                next_result.append(piece)
        result = next_result
    return result


def _flat_cuts(dims: Sequence[int]) -> list[int]:
    """Block boundaries of an array of shape `dims` when flattened row-major."""
    cuts, block = [], 1
    for size in reversed(dims):
        block *= size
        cuts.append(block)
    return cuts


def _pieces_of(sharding: HloSharding, device_positions: np.ndarray) -> list[_Piece] | None:
    """Pieces of a tiled sharding's device array, in device-position space.

    Devices inside a replication group are interchangeable, and XLA sorts
    them by id; sorting them by mesh position instead is what lets a mesh
    with a permuted device order read its own partially replicated shardings.
    """
    positions = device_positions[sharding.tile.device_array()]
    if "replicated" in sharding.subgroup_kinds:
        replicated_dim = sharding.data_rank + sharding.subgroup_kinds.index("replicated")
        positions = np.sort(positions, axis=replicated_dim)
    pieces = _factor_flat(positions.reshape(-1))
    if pieces is None:
        return None
    return _split_pieces(pieces, _flat_cuts(positions.shape), "block")


def _tiled_shardings(shardings: Iterable[HloSharding]) -> Iterable[HloSharding]:
    for sharding in shardings:
        if sharding.kind == "tuple":
            yield from _tiled_shardings(sharding.elements)
        elif sharding.kind == "tiled":
            yield sharding


def infer_mesh(shardings: Iterable[HloSharding], num_devices: int | None = None,
               weights: Sequence[float] | None = None) -> Mesh:
    """The shortest mesh on which every tiled sharding is a choice of whole axes.

    Devices fill the mesh in id order, unless some tile assignment is an
    explicit device list that is not in id order: then one such list is the
    mesh's device order, as XLA users who write explicit lists expect.  With
    `weights` (one per sharding, e.g. its tensor's bytes), it is the order
    under which the least weight keeps an order of its own (those values
    are permuted where the order matters), ties going to the first list.
    Axes are named ``axis_0`` (major) onwards.
    """
    shardings = list(shardings)
    candidates = _device_orders(shardings)
    if weights is None or len(candidates) < 2:
        return _mesh_in_order(shardings, num_devices, candidates[0] if candidates else None)
    best, best_cost = None, None
    for order in candidates:
        try:
            mesh = _mesh_in_order(shardings, num_devices, order)
        except ShardingError:
            continue
        cost = sum(weight for sharding, weight in zip(shardings, weights)
                   for element in _tiled_shardings([sharding])
                   if tile_dim_axes(element, mesh) is None)
        if best_cost is None or cost < best_cost:
            best, best_cost = mesh, cost
    return best if best is not None else _mesh_in_order(shardings, num_devices, candidates[0])


def _device_orders(shardings: Sequence[HloSharding]) -> list[np.ndarray]:
    """The explicit device lists not in id order, first seen first, then id order."""
    orders: list[np.ndarray] = []
    count = None
    for sharding in _tiled_shardings(shardings):
        count = sharding.tile.num_devices
        if not sharding.tile.is_iota:
            flat = sharding.tile.device_array().reshape(-1)
            if not np.array_equal(flat, np.arange(len(flat))) and \
                    not any(np.array_equal(flat, o) for o in orders):
                orders.append(flat)
    return orders + [np.arange(count)] if count is not None else []


def _mesh_in_order(shardings: Sequence[HloSharding], num_devices: int | None,
                   device_order: np.ndarray | None) -> Mesh:
    tiled = list(_tiled_shardings(shardings))
    counts = {s.tile.num_devices for s in tiled}
    if num_devices is not None:
        counts.add(num_devices)
    if len(counts) > 1:
        raise ShardingError(
            f"shardings disagree on the device count: {sorted(counts)}")
    if not counts:
        raise ShardingError("no tiled sharding and no device count to build a mesh from")
    count = counts.pop()
    if device_order is None or len(device_order) != count:
        device_order = np.arange(count)
    positions = np.empty(count, dtype=np.int64)
    positions[device_order] = np.arange(count)

    cuts = {1, count}
    for sharding in tiled:
        pieces = _pieces_of(sharding, positions)
        if pieces is None:
            # A device order of its own (XLA allows any device list per
            # value): the mesh only has to cut its tile dims, which then
            # take whole axes in mesh order (`block_axes`), and the
            # partitioner permutes where such a value crosses the boundary.
            cuts.update(_flat_cuts(sharding.tile.dims))
            continue
        for piece in pieces:
            cuts.update((piece.stride, piece.stride * piece.size))
    ordered = sorted(cuts)
    for smaller, larger in zip(ordered, ordered[1:]):
        if larger % smaller:
            raise ShardingError(
                "the tile assignments in this module cannot be expressed as axes of one mesh "
                f"(device-position boundaries {smaller} and {larger} do not divide)")
    sizes_minor_first = [b // a for a, b in zip(ordered, ordered[1:])]
    sizes = tuple(reversed(sizes_minor_first)) or (1,)
    names = tuple(f"axis_{i}" for i in range(len(sizes)))
    return Mesh(tuple(int(d) for d in device_order), sizes, names)


def tile_dim_axes(sharding: HloSharding, mesh: Mesh) -> list[tuple[str, ...]] | None:
    """Mesh axes (major to minor) that tile each dimension of a tiled sharding.

    One entry per tile dimension, subgroup dimensions included.  Returns None
    when the tile assignment is not a choice of whole axes of `mesh`.
    """
    tile_shape = sharding.tile.dims
    if sharding.tile.num_devices != mesh.size:
        return None
    pieces = _pieces_of(sharding, mesh.device_positions)
    if pieces is None:
        return None
    axis_strides = {}
    stride = 1
    for name, size in zip(reversed(mesh.axis_names), reversed(mesh.mesh_shape)):
        axis_strides[stride] = (name, size)
        stride *= size
    pieces = _split_pieces(pieces, axis_strides, "stride")
    if pieces is None:
        return None

    dim_of_block = {}
    block = 1
    for dim in reversed(range(len(tile_shape))):
        dim_of_block[dim] = (block, block * tile_shape[dim])
        block *= tile_shape[dim]
    axes: list[list[str]] = [[] for _ in tile_shape]
    for piece in reversed(pieces):  # major first
        name, size = axis_strides.get(piece.stride, (None, None))
        if name is None or size != piece.size:
            return None
        dim = next(d for d, (lo, hi) in dim_of_block.items() if lo <= piece.block < hi)
        axes[dim].append(name)
    return [tuple(a) for a in axes]


def block_axes(sharding: HloSharding, mesh: Mesh) -> list[tuple[str, ...]] | None:
    """Whole axes of `mesh`, taken in mesh order, whose sizes make up each
    tile dim of `sharding` (subgroup dims included): the layout on the mesh
    with the same blocks as `sharding`, whatever its device order.  None
    when the axes cannot make up the tile dims."""
    axes: list[tuple[str, ...]] = []
    names = list(zip(mesh.axis_names, mesh.mesh_shape))
    for size in sharding.tile.dims:
        taken, product = [], 1
        while product < size and names:
            name, axis_size = names.pop(0)
            taken.append(name)
            product *= axis_size
        if product != size:
            return None
        axes.append(tuple(taken))
    return axes if not names else None
