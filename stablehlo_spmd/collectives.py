"""Emit collectives and reshards as StableHLO inside a per-device program.

`Emitter` builds ops on *local* (per-device) values of a program that runs
once per device of a `Mesh` (a manual body: ``sdy.manual_computation`` over
every axis, or a module compiled with every value ``{manual}``):

* the five collectives, with replica groups made of the global device ids
  that differ only along the given mesh axes, ``use_global_device_ids`` where
  the op has it, and a fresh ``channel_handle`` each (the channel marks a
  collective as cross-partition, and XLA expects one per collective);
* `axis_index` and `local_slice`, which find this device's place on the mesh
  from ``stablehlo.partition_id`` through a constant lookup table, as GSPMD
  does (one table per (axes, shard size), so any device order works);
* `reshard`, which runs `reshard.plan` and emits its steps, padding before a
  split and trimming after a concatenation where dimensions are uneven.

Ops are placed at the current ``ir.InsertionPoint`` and ``ir.Location``, or
at the `ip` / `loc` each public method accepts.  Values are not cached
across calls (a table lookup may be emitted twice); upstream CSE folds them.
"""

from __future__ import annotations

import contextlib
import functools
import math
from typing import NamedTuple, Sequence

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from stablehlo_spmd.halos import halo_extent, pieces_elements, window_pieces, within_one_shard
from stablehlo_spmd.ir import cached_attr
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.reshard import Step, axis_coordinate, plan, replica_groups
from stablehlo_spmd.shapes import element_bytes, int_constant, scalar_zero, shape_of
from stablehlo_spmd.sharding import Sharding

_DEVICE_TO_DEVICE = 1  # ChannelHandle type for collectives between devices

_COMBINERS = {"sum": stablehlo.AddOp, "max": stablehlo.MaxOp, "min": stablehlo.MinOp}


def _placed(method):
    """Run `method` under the caller's `ip` / `loc` keywords (else the current ones)."""

    @functools.wraps(method)
    def wrapper(self, *args, loc: ir.Location | None = None,
                ip: ir.InsertionPoint | None = None, **kwargs):
        with contextlib.ExitStack() as stack:
            stack.enter_context(self.context)
            if loc is not None:
                stack.enter_context(loc)
            elif ir.Location.current is None:
                stack.enter_context(ir.Location.unknown())
            if ip is not None:
                stack.enter_context(ip)
            return method(self, *args, **kwargs)

    return wrapper


class Piece(NamedTuple):
    """`size` elements of the shard at coordinate `source` (from
    `source_offset` in it) that the device at coordinate `target` puts at
    `target_offset` of its block (`Emitter.gather_pieces`)."""

    source: int
    target: int
    source_offset: int
    target_offset: int
    size: int


def permute_groups(pieces: Sequence[Piece]) -> list[tuple[bool, list[Piece]]]:
    """`pieces` as (moves, group): first the pieces devices keep (moves
    False), then the pieces that move; in every group each device sends at
    most one piece and receives at most one, so one collective_permute
    carries each moving group and one placement puts each group in place.
    A device can keep several pieces of its own shard (x beside a slice of
    x), so kept pieces are grouped by the same rule.  Widest first, so a
    group's width (its widest piece) is what it must carry."""
    def grouped(chosen) -> list[list[Piece]]:
        groups: list[tuple[set, set, list[Piece]]] = []
        for piece in sorted(chosen, key=lambda x: -x.size):
            for senders, receivers, group in groups:
                if piece.source not in senders and piece.target not in receivers:
                    break
            else:
                senders, receivers, group = set(), set(), []
                groups.append((senders, receivers, group))
            senders.add(piece.source)
            receivers.add(piece.target)
            group.append(piece)
        return [group for _, _, group in groups]

    kept = grouped(piece for piece in pieces if piece.source == piece.target)
    moved = grouped(piece for piece in pieces if piece.source != piece.target)
    return [(False, group) for group in kept] + [(True, group) for group in moved]


class Emitter:
    """Builds collectives on per-device values of a program over `mesh`."""

    def __init__(self, mesh: Mesh, context: ir.Context | None = None, first_channel: int = 1):
        self.mesh = mesh
        self.context = context or ir.Context.current
        self.next_channel = first_channel

    @classmethod
    def for_module(cls, mesh: Mesh, module: ir.Operation) -> "Emitter":
        """An emitter whose channel handles follow the largest one already in `module`."""
        largest = 0

        def visit(op):
            nonlocal largest
            attributes = op.attributes
            if "channel_handle" in attributes:
                largest = max(largest, stablehlo.ChannelHandle(attributes["channel_handle"]).handle)
            return ir.WalkResult.ADVANCE

        module.walk(visit)
        return cls(mesh, module.context, first_channel=largest + 1)

    # ------------------------------------------------------------ collectives

    @_placed
    def all_reduce(self, value: ir.Value, axes: Sequence[str], reduction: str = "sum") -> ir.Value:
        op = stablehlo.AllReduceOp([value.type], [value], self._groups(axes),
                                   channel_handle=self._channel(), use_global_device_ids=True)
        self._add_combiner(op, value, reduction)
        return op.results[0]

    @_placed
    def all_gather(self, value: ir.Value, dim: int, axes: Sequence[str]) -> ir.Value:
        """Concatenate the group's values along `dim`, in coordinate order over `axes`."""
        shape = _shape(value)
        shape[dim] *= self.mesh.axes_size(axes)
        return stablehlo.AllGatherOp([_like(value, shape)], [value], dim, self._groups(axes),
                                     channel_handle=self._channel(),
                                     use_global_device_ids=True).results[0]

    @_placed
    def reduce_scatter(self, value: ir.Value, dim: int, axes: Sequence[str],
                       reduction: str = "sum") -> ir.Value:
        """Reduce over the group and keep block k of `dim` on the device at coordinate k."""
        shape = _shape(value)
        shape[dim] = _exact_split(shape[dim], self.mesh.axes_size(axes), "reduce_scatter")
        op = stablehlo.ReduceScatterOp(_like(value, shape), value, dim, self._groups(axes),
                                       channel_handle=self._channel(),
                                       use_global_device_ids=True)
        self._add_combiner(op, value, reduction)
        return op.results[0]

    @_placed
    def all_to_all(self, value: ir.Value, split_dim: int, concat_dim: int,
                   axes: Sequence[str]) -> ir.Value:
        """Send block k of `split_dim` to the k-th device; concatenate arrivals on `concat_dim`."""
        count = self.mesh.axes_size(axes)
        shape = _shape(value)
        shape[split_dim] = _exact_split(shape[split_dim], count, "all_to_all")
        shape[concat_dim] *= count
        if _defined_by(value, "stablehlo.pad") and _defined_by(value.owner.operands[0],
                                                                "stablehlo.transpose"):
            # XLA's CPU compiler (jaxlib 0.10) splits an all_to_all into one
            # operand per block; a block that is all padding becomes a
            # broadcast, the transposed ones get another layout, and XLA
            # rejects its own all_to_all ("operands with different shapes").
            # Plain JAX does the same (tests/differential/test_regressions.py).
            # The barrier keeps the blocks slices of one value.
            value = stablehlo.OptimizationBarrierOp([value]).results[0]
        # all_to_all has no use_global_device_ids: with a channel, its groups
        # are partition ids, which are the mesh's device ids here.
        return stablehlo.AllToAllOp([value], split_dim, concat_dim, count, self._groups(axes),
                                    channel_handle=self._channel(),
                                    results=[_like(value, shape)]).results[0]

    @_placed
    def collective_permute(self, value: ir.Value,
                           source_target_pairs: Sequence[tuple[int, int]]) -> ir.Value:
        """Devices that no pair targets receive zeros, as StableHLO defines it."""
        pairs = [list(pair) for pair in source_target_pairs]
        if not pairs:
            # Nobody sends (e.g. a halo from farther than the mesh reaches):
            # every device receives zeros, and an empty pair list has no
            # tensor<0x2xi64> literal to spell it anyway.
            return stablehlo.BroadcastInDimOp(value.type, scalar_zero(_element_type(value)),
                                              []).result
        attr = cached_attr(f"dense<{pairs}> : tensor<{len(pairs)}x2xi64>", self.context)
        return stablehlo.CollectivePermuteOp(value, attr, channel_handle=self._channel(),
                                             results=[value.type]).results[0]

    # ------------------------------------------------------------ device position

    @_placed
    def axis_index(self, axes: Sequence[str]) -> ir.Value:
        """This device's row-major coordinate over `axes`, as a tensor<i32> (or i64)."""
        return self._lookup(tuple(axes), 1)

    @_placed
    def local_slice(self, value: ir.Value, dim: int, axes: Sequence[str],
                    global_size: int | None = None) -> ir.Value:
        """This device's block of `dim` when `axes` split it: ``ceil(global_size / p)``
        elements at offset ``axis_index * size``.

        `global_size` is the extent being split (by default the local one);
        the local dimension is zero-padded to ``p * size`` first if shorter.
        """
        count = self.mesh.axes_size(axes)
        extent = _shape(value)[dim] if global_size is None else global_size
        size = -(-extent // count)
        value = self.pad(value, dim, count * size)
        shape = _shape(value)
        offset = self._lookup(tuple(axes), size)
        starts = [scalar_zero(_element_type(offset))] * len(shape)
        starts[dim] = offset
        shape[dim] = size
        return stablehlo.DynamicSliceOp(value, starts, shape).result

    # ------------------------------------------------------------ halos

    @_placed
    def shift(self, value: ir.Value, axes: Sequence[str], by: int) -> ir.Value:
        """Send `value` from the device at coordinate q over `axes` to the one
        at q + `by` (same coordinates elsewhere); devices nobody sends to get
        zeros, as collective_permute defines it."""
        pairs = [(group[q], group[q + by]) for group in replica_groups(self.mesh, axes)
                 for q in range(len(group)) if 0 <= q + by < len(group)]
        return self.collective_permute(value, pairs)

    @_placed
    def mirror(self, value: ir.Value, axes: Sequence[str]) -> ir.Value:
        """Send `value` from coordinate q over `axes` to coordinate p-1-q."""
        pairs = [(group[q], group[len(group) - 1 - q])
                 for group in replica_groups(self.mesh, axes) for q in range(len(group))]
        return self.collective_permute(value, pairs)

    @_placed
    def halo_window(self, value: ir.Value, dim: int, axes: Sequence[str], global_size: int,
                    offset: int, length: int, step: int = 0,
                    fill: ir.Value | None = None, live: int | None = None,
                    starts: Sequence[int] | None = None,
                    needed: Sequence[int] | None = None) -> ir.Value:
        """A window of `length` elements along `dim` of a tensor split over `axes`.

        `value` is this device's shard (s elements along `dim`, the last one
        padded when uneven).  The device at coordinate q gets global
        elements ``[q*s + offset + q*step, ... + length)`` (or from
        ``q*s + starts[q]`` when `starts` is given): its own shard,
        shifted, with halos from its neighbours (one collective_permute each
        way, of only the elements inside ``[0, global_size)`` that some
        device needs), and `fill` (a scalar, zero when None) where the
        window leaves ``[0, global_size)``.  Devices from coordinate `live`
        on (default: none) compute padding only: what they get does not
        matter, and the device at coordinate q uses only the first
        ``needed[q]`` elements of its window when `needed` is given.  A
        constant window (step 0) is cut with a static slice, others at a
        per-device offset.

        Where that would send more (a window reaching past the neighbours'
        shards, or devices reading windows at far different places of
        theirs), each device instead gets exactly the pieces of its window
        from the shards that hold them (`window_gather`).
        """
        shape = _shape(value)
        size = shape[dim]
        count = self.mesh.axes_size(axes)
        live = count if live is None else min(live, count)
        extent = halo_extent(size, count, offset, length, step, global_size, live, starts,
                             needed)
        table = starts is not None
        starts = list(starts) if table else [offset + q * step for q in range(count)]
        pieces = window_pieces(size, count, global_size, starts, length, live, needed)
        if extent is None or sum(extent) > pieces_elements(pieces):
            return self.window_gather(value, dim, axes, starts, length, pieces, fill)
        left, right = extent
        needs_mask = any(q * size + start < 0 or q * size + start + length > global_size
                         for q, start in enumerate(starts))
        if not table and within_one_shard(size, offset, length, step):
            # Another device's shard holds the whole window: one hop there.
            value = self._edge(self.shift(value, axes, -(offset // size)), dim,
                               offset % size, offset % size + length)
            if needs_mask:
                value = self._mask_outside(value, dim, axes, size, offset, global_size, fill)
            return value
        pieces = []
        if left:
            pieces.append(self.shift(self._edge(value, dim, size - left, size), axes, 1))
        pieces.append(value)
        if right:
            pieces.append(self.shift(self._edge(value, dim, 0, right), axes, -1))
        if len(pieces) > 1:
            value = stablehlo.ConcatenateOp(pieces, dim).result
        # What a window reaches past the halos is outside the tensor (masked
        # below): the buffer is only widened so that every cut stays in it.
        before = max([left] + [-start for start in starts[:live]])
        after = max([right] + [start + length - size for start in starts[:live]])
        if before > left or after > right:
            value = self._place(value, dim, before - left, before + size + after)
        left = before
        if table:
            value = self.per_device_slice(value, dim, axes, [left + start for start in starts],
                                          length)
        elif step == 0:
            value = self._edge(value, dim, left + offset, left + offset + length)
        else:
            moved = self._lookup(tuple(axes), step)
            start = stablehlo.AddOp(moved, int_constant(left + offset, moved.type)).result
            zero = int_constant(0, moved.type)
            indices = [zero] * len(shape)
            indices[dim] = start
            sizes = _shape(value)
            sizes[dim] = length
            value = stablehlo.DynamicSliceOp(value, indices, sizes).result
        if needs_mask and table:
            inside = self._compare_positions(
                _shape(value), dim, axes, 0, 0, [("GE", 0), ("LT", global_size)],
                [q * size + start for q, start in enumerate(starts)])
            value = self._select_inside(inside, value, fill)
        elif needs_mask:
            value = self._mask_outside(value, dim, axes, size + step, offset, global_size, fill)
        return value

    @_placed
    def window_gather(self, value: ir.Value, dim: int, axes: Sequence[str],
                      starts: Sequence[int], length: int, pieces, fill: ir.Value | None = None
                      ) -> ir.Value:
        """The windows of `halo_window` from the `pieces` of `window_pieces`:
        each device gets exactly the pieces of its window from the shards
        that hold them (`gather_pieces`).  The rest of a window is `fill`."""
        size = _shape(value)[dim]
        return self.gather_pieces(value, dim, axes, length, [
            Piece(q + distance, q, low - (q + distance) * size, low - (q * size + starts[q]), n)
            for distance, by_target in pieces for q, (low, n) in by_target.items()], fill)

    def gather_pieces(self, value: ir.Value, dim: int, axes: Sequence[str], length: int,
                      pieces: Sequence["Piece"], fill: ir.Value | None = None) -> ir.Value:
        """A block of `length` along `dim` on each device, made of `pieces` of
        the shards of `value` (split over `axes`).  Pieces go in the groups
        of `permute_groups`: for each, every source cuts its piece at a
        per-device offset, as wide as the widest, and sends it (one
        collective_permute; none for the pieces a device keeps); each target
        puts the piece in place and keeps its part.  The rest of each block
        is `fill`."""
        shape = _shape(value)
        size, count = shape[dim], self.mesh.axes_size(axes)
        window_shape = list(shape)
        window_shape[dim] = length
        window_type = _like(value, window_shape)
        fill = fill if fill is not None else scalar_zero(_element_type(value))
        result = stablehlo.BroadcastInDimOp(window_type, fill, []).result
        for moves, group in permute_groups(pieces):
            width = max(piece.size for piece in group)
            cut = [0] * count       # by source coordinate: where it cuts its piece
            for piece in group:
                cut[piece.source] = min(piece.source_offset, size - width)
            sent = self.per_device_slice(value, dim, axes, cut, width)
            if moves:
                sent = self.collective_permute(sent, [
                    (members[piece.source], members[piece.target])
                    for members in replica_groups(self.mesh, axes) for piece in group])
            # By target coordinate: where the piece lands in the block (the
            # buffer has `width` to spare on each side), and the part it keeps.
            lands, first, end = [width] * count, [0] * count, [0] * count
            for piece in group:
                lands[piece.target] = (piece.target_offset - piece.source_offset
                                       + cut[piece.source] + width)
                first[piece.target] = piece.target_offset
                end[piece.target] = piece.target_offset + piece.size
            buffer_shape = list(window_shape)
            buffer_shape[dim] = length + 2 * width
            buffer = stablehlo.BroadcastInDimOp(_like(value, buffer_shape),
                                                scalar_zero(_element_type(value)), []).result
            at = self._table(tuple(axes), lands)
            indices = [int_constant(0, at.type)] * len(shape)
            indices[dim] = at
            placed = self._edge(stablehlo.DynamicUpdateSliceOp(buffer, sent, indices).result,
                                dim, width, width + length)
            keep = stablehlo.AndOp(
                self._compare_positions(window_shape, dim, axes, 0, 0, [("GE", 0)],
                                        [-f for f in first]),
                self._compare_positions(window_shape, dim, axes, 0, 0, [("LT", 0)],
                                        [-e for e in end])).result
            result = stablehlo.SelectOp(keep, placed, result).result
        return result

    @_placed
    def per_device_slice(self, value: ir.Value, dim: int, axes: Sequence[str],
                         starts: Sequence[int], size: int) -> ir.Value:
        """`size` elements of `dim` from ``starts[q]``, q this device's
        coordinate over `axes`."""
        start = self._table(tuple(axes), starts)
        indices = [int_constant(0, start.type)] * len(_shape(value))
        indices[dim] = start
        sizes = _shape(value)
        sizes[dim] = size
        return stablehlo.DynamicSliceOp(value, indices, sizes).result

    @_placed
    def halo_window_transpose(self, value: ir.Value, dim: int, axes: Sequence[str],
                              shard_size: int, offset: int, step: int = 0,
                              global_size: int | None = None,
                              live: int | None = None) -> ir.Value:
        """Sum what each device computed on its `halo_window` back onto the
        shards that own those elements: the transpose of
        ``halo_window(shard, dim, axes, global_size, offset, length, step,
        live=live)``, with length `value`'s extent along `dim`.  With
        `global_size`, what lands outside the tensor, and all that devices
        from `live` on computed, must be zero: it is not sent."""
        length = _shape(value)[dim]
        count = self.mesh.axes_size(axes)
        live = count if live is None else min(live, count)
        starts = [offset + q * step for q in range(count)]
        left, right = halo_extent(shard_size, count, offset, length, step, global_size, live)
        # The buffer holds every window; only [q*s - left, q*s + s + right) of
        # it is returned.
        before = max([left] + [-start for start in starts[:live]])
        after = max([right] + [start + length - shard_size for start in starts[:live]])
        extent = before + shard_size + after
        if step or before + offset:
            # Put each device's window where it sits in its padded
            # neighbourhood [q*s - before, q*s + s + after).
            shape = _shape(value)
            shape[dim] = extent
            zeros = stablehlo.BroadcastInDimOp(_like(value, shape),
                                               scalar_zero(_element_type(value)), []).result
            start = self._lookup(tuple(axes), step)
            start = stablehlo.AddOp(start, int_constant(before + offset, start.type)).result
            indices = [int_constant(0, start.type)] * len(shape)
            indices[dim] = start
            value = stablehlo.DynamicUpdateSliceOp(zeros, value, indices).result
        elif length < extent:
            value = self.pad(value, dim, extent)
        value = self._edge(value, dim, before - left, before + shard_size + right)
        return self.halo_return(value, dim, axes, left, shard_size)

    @_placed
    def halo_return(self, value: ir.Value, dim: int, axes: Sequence[str], left: int,
                    size: int) -> ir.Value:
        """The transpose of a constant `halo_window`: `value` holds, along
        `dim`, contributions to global elements ``[q*size - left, ...)``; each
        device keeps the `size` of its own shard, adding what its neighbours
        computed for them (one collective_permute each way)."""
        if _shape(value)[dim] < left + size:
            value = self.pad(value, dim, left + size)
        extent = _shape(value)[dim]
        right = extent - left - size
        own = self._edge(value, dim, left, left + size)
        if left:
            # My leading part belongs to the tail of the previous shard.
            arrived = self.shift(self._edge(value, dim, 0, left), axes, -1)
            own = stablehlo.AddOp(own, self._place(arrived, dim, size - left, size)).result
        if right:
            arrived = self.shift(self._edge(value, dim, left + size, extent), axes, 1)
            own = stablehlo.AddOp(own, self._place(arrived, dim, 0, size)).result
        return own

    def _edge(self, value: ir.Value, dim: int, start: int, limit: int) -> ir.Value:
        """Elements [start, limit) of `dim` (the value itself when that is all of it)."""
        shape = _shape(value)
        if (start, limit) == (0, shape[dim]):
            return value
        starts, limits = [0] * len(shape), list(shape)
        starts[dim], limits[dim] = start, limit
        return stablehlo.SliceOp(value, starts, limits, [1] * len(shape)).result

    def _place(self, value: ir.Value, dim: int, low: int, size: int) -> ir.Value:
        """`value` zero-padded along `dim` to `size`, starting at `low`."""
        shape = _shape(value)
        lows, highs = [0] * len(shape), [0] * len(shape)
        lows[dim], highs[dim] = low, size - low - shape[dim]
        return stablehlo.PadOp(value, scalar_zero(_element_type(value)), lows, highs,
                               [0] * len(shape)).result

    def _mask_outside(self, value: ir.Value, dim: int, axes: Sequence[str], stride: int,
                      offset: int, global_size: int, fill: ir.Value | None) -> ir.Value:
        """Set to `fill` (zero when None) the elements outside `inside`'s range."""
        inside = self.inside(_shape(value), dim, axes, stride, offset, 0, global_size)
        return self._select_inside(inside, value, fill)

    @_placed
    def inside(self, shape: Sequence[int], dim: int, axes: Sequence[str], stride: int,
               offset: int, low: int, high: int) -> ir.Value:
        """An i1 tensor of `shape`: whether ``q*stride + offset + i`` (i the index
        along `dim`, q this device's coordinate over `axes`) is in [low, high)."""
        return self._compare_positions(shape, dim, axes, stride, offset,
                                       [("GE", low), ("LT", high)])

    def _compare_positions(self, shape: Sequence[int], dim: int, axes: Sequence[str],
                           stride: int, offset: int, bounds,
                           starts: Sequence[int] | None = None) -> ir.Value:
        """The conjunction of ``q*stride + offset + i <direction> bound`` over
        `bounds` (``starts[q] + i`` when `starts` is given)."""
        i32 = ir.IntegerType.get_signless(32, self.context)
        index_type = ir.RankedTensorType.get(list(shape), i32)
        start = (self._lookup(tuple(axes), stride) if starts is None
                 else self._table(tuple(axes), starts))
        if ir.RankedTensorType(start.type).element_type != i32:
            start = stablehlo.ConvertOp(ir.RankedTensorType.get([], i32), start).result
        if offset:
            start = stablehlo.AddOp(start, int_constant(offset, start.type)).result
        positions = stablehlo.AddOp(stablehlo.IotaOp(index_type, dim).result,
                                    stablehlo.BroadcastInDimOp(index_type, start, []).result).result
        result = None
        for direction, bound in bounds:
            limit = int_constant(bound, index_type)
            compared = stablehlo.CompareOp(positions, limit,
                                           stablehlo.ComparisonDirectionAttr.get(direction)).result
            result = compared if result is None else stablehlo.AndOp(result, compared).result
        return result

    def _select_inside(self, inside: ir.Value, value: ir.Value,
                       fill: ir.Value | None) -> ir.Value:
        """`value` where `inside`, else the scalar `fill` (zero when None)."""
        fill = fill if fill is not None else scalar_zero(_element_type(value))
        return stablehlo.SelectOp(inside, value,
                                  stablehlo.BroadcastInDimOp(value.type, fill, []).result).result

    # ------------------------------------------------------------ padding

    @_placed
    def mask_padding(self, value: ir.Value, dim: int, axes: Sequence[str], global_size: int,
                     neutral: ir.Value | None = None) -> ir.Value:
        """Replace the elements of `dim` past `global_size` (the padding of an
        uneven shard) with `neutral` (a scalar; zero when None)."""
        inside = self._compare_positions(_shape(value), dim, axes, _shape(value)[dim], 0,
                                         [("LT", global_size)])
        return self._select_inside(inside, value, neutral)

    @_placed
    def pad(self, value: ir.Value, dim: int, size: int) -> ir.Value:
        """Zero-pad `dim` at its end up to `size` (no op when already that long)."""
        shape = _shape(value)
        if shape[dim] == size:
            return value
        if shape[dim] > size:
            raise ValueError(f"cannot pad dimension {dim} of {shape} down to {size}")
        return self._place(value, dim, 0, size)

    @_placed
    def trim(self, value: ir.Value, dim: int, size: int) -> ir.Value:
        """Keep the first `size` elements of `dim` (no op when already that long)."""
        return self._edge(value, dim, 0, size)

    # ------------------------------------------------------------ reshard

    @_placed
    def reshard(self, value: ir.Value, source: Sharding, target: Sharding,
                global_shape: Sequence[int], steps: Sequence[Step] | None = None) -> ir.Value:
        """Turn the local `value` of a `source`-sharded tensor into its `target` shard.

        `steps` is the plan when the caller already made it (to price or warn about it).
        """
        if steps is None:
            steps = plan(source, target, global_shape, element_bytes(_element_type(value)))
        for step in steps:
            value = self._emit_step(value, step, step.result.shard_shape(global_shape),
                                    global_shape)
        return value

    def _emit_step(self, value: ir.Value, step: Step, shape: tuple[int, ...],
                   global_shape: Sequence[int]) -> ir.Value:
        """Emit `step`; `shape` is the local shape of its result layout."""
        count = self.mesh.axes_size(step.axes)
        if step.kind == "slice":
            value = self.local_slice(value, step.dim, step.axes)
        elif step.kind == "halo_slice":
            value = self._halo_slice(value, step, shape[step.dim], global_shape[step.dim])
        elif step.kind == "gather_by_sum":
            value = self._gather_by_sum(value, step, global_shape[step.dim])
        elif step.kind == "to_owner":
            pass  # every device holds the whole value; the owner's copy is the value's
        elif step.kind == "halo_gather":
            value = self._halo_gather(value, step, shape[step.dim], global_shape[step.dim])
        elif step.kind == "all_gather":
            gathered = self.all_gather(value, step.dim, step.axes)
            value = self.trim(gathered, step.dim, shape[step.dim])
        elif step.kind == "all_reduce":
            value = self.all_reduce(value, step.axes, step.reduction)
        elif step.kind == "reduce_scatter":
            padded = self.pad(value, step.dim, count * shape[step.dim])
            value = self.reduce_scatter(padded, step.dim, step.axes, step.reduction)
        elif step.kind == "all_to_all" and step.groups:
            value = self._joint_all_to_all(value, step, shape)
        elif step.kind == "all_to_all":
            # Axes leave `dim` (the concat dimension) and join `dim2` (the split one).
            padded = self.pad(value, step.dim2, count * shape[step.dim2])
            moved = self.all_to_all(padded, step.dim2, step.dim, step.axes)
            value = self.trim(moved, step.dim, shape[step.dim])
        elif step.kind == "collective_permute":
            value = self.collective_permute(value, step.pairs)
        else:
            raise ValueError(f"unknown reshard step {step.kind!r}")
        if tuple(_shape(value)) != tuple(shape):
            raise AssertionError(f"{step} produced {_shape(value)}, expected {list(shape)}")
        return value

    def _joint_all_to_all(self, value: ir.Value, step: Step, shape) -> ir.Value:
        """`Step.groups`: every group's exchange in one all_to_all over all
        their devices, as XLA writes it.  Each destination dim is cut into
        its group's blocks and the blocks brought to one leading dim, the
        first group's major, so that block (j1, j2) goes to the device at
        (j1, j2) over the groups' axes; what arrives from (j1, j2) is block
        j1 of the first source dim and j2 of the second, put back in place."""
        counts = [self.mesh.axes_size(axes) for axes, _, _ in step.groups]
        for (_axes, _source, dest), count in zip(step.groups, counts):
            value = self.pad(value, dest, count * shape[dest])
        local = _shape(value)
        cut = {dest: count for (_axes, _source, dest), count in zip(step.groups, counts)}
        split_shape, block_axis, rest = [], {}, []
        for dim, size in enumerate(local):
            if dim in cut:
                block_axis[dim] = len(split_shape)
                split_shape.append(cut[dim])
                size //= cut[dim]
            rest.append(len(split_shape))
            split_shape.append(size)
        blocks = [block_axis[dest] for _axes, _source, dest in step.groups]
        value = self._reshape(value, split_shape)
        value = self._transpose(value, blocks + rest)
        kept = [split_shape[axis] for axis in rest]
        value = self._reshape(value, [math.prod(counts), *kept])
        # Keep the blocks slices of one value (see `all_to_all`).
        value = stablehlo.OptimizationBarrierOp([value]).results[0]
        value = self.all_to_all(value, 0, 0, step.axes)
        value = self._reshape(value, [*counts, *kept])
        source_of = {source: k for k, (_axes, source, _dest) in enumerate(step.groups)}
        order, merged = [], []
        for dim, size in enumerate(kept):
            k = source_of.get(dim)
            if k is None:
                order.append(len(counts) + dim)
                merged.append(size)
            else:
                order += [k, len(counts) + dim]
                merged.append(counts[k] * size)
        value = self._reshape(self._transpose(value, order), merged)
        for _axes, source, _dest in step.groups:
            value = self.trim(value, source, shape[source])
        return value

    def _reshape(self, value: ir.Value, shape: Sequence[int]) -> ir.Value:
        return stablehlo.ReshapeOp(_like(value, shape), value).result

    def _transpose(self, value: ir.Value, permutation: Sequence[int]) -> ir.Value:
        return stablehlo.TransposeOp(value, list(permutation)).result

    def _halo_slice(self, value: ir.Value, step: Step, block: int, size: int) -> ir.Value:
        """`Step.halo_slice`: the window of this device's `count` finer blocks
        of `block` elements from its coarse shard and its neighbours', then
        its own block; padding past `size` is zeroed as the layout wants."""
        dim, count = step.dim, self.mesh.axes_size(step.axes)
        coarse = step.result.dim_axes[dim][:-len(step.axes)]
        length = count * block
        window = self.halo_window(value, dim, coarse, size, 0, length,
                                  length - _shape(value)[dim], live=-(-size // length))
        value = self.local_slice(window, dim, step.axes)
        if self.mesh.axes_size(step.result.dim_axes[dim]) * block > size:
            value = self.mask_padding(value, dim, step.result.dim_axes[dim], size)
        return value

    def _gather_by_sum(self, value: ir.Value, step: Step, size: int) -> ir.Value:
        """`Step.gather_by_sum`: this device's shard placed at its offset in a
        zero buffer, cut to the `size` real elements (the padding falls past
        them), and summed over the step's axes.  Booleans are summed as
        integers: each element is real on one device only."""
        dim = step.dim
        shard = _shape(value)[dim]
        count = self.mesh.axes_size(step.axes)
        element = _element_type(value)
        boolean = isinstance(element, ir.IntegerType) and ir.IntegerType(element).width == 1
        if boolean:
            value = stablehlo.ConvertOp(_like_typed(value, ir.IntegerType.get_signless(8)),
                                        value).result
        buffer = stablehlo.BroadcastInDimOp(
            _like(value, [*_shape(value)[:dim], count * shard, *_shape(value)[dim + 1:]]),
            scalar_zero(_element_type(value)), []).result
        offset = self._lookup(tuple(step.axes), shard)
        zero = int_constant(0, offset.type)
        starts = [zero] * len(_shape(value))
        starts[dim] = offset
        placed = stablehlo.DynamicUpdateSliceOp(buffer, value, starts).result
        value = self.all_reduce(self._edge(placed, dim, 0, size), step.axes)
        if boolean:
            value = stablehlo.ConvertOp(_like_typed(value, element), value).result
        return value

    def _halo_gather(self, value: ir.Value, step: Step, shard: int, size: int) -> ir.Value:
        """`Step.halo_gather`: gather this device's `count` finer blocks, then
        cut its coarse shard of `shard` elements from them and a neighbour's
        halo; padding past `size` is zeroed as the layout wants."""
        dim = step.dim
        coarse = step.result.dim_axes[dim]
        gathered = self.all_gather(value, dim, step.axes)
        held = _shape(gathered)[dim]
        value = self.halo_window(gathered, dim, coarse, size, 0, shard, shard - held,
                                 live=-(-size // shard))
        if self.mesh.axes_size(coarse) * shard > size:
            value = self.mask_padding(value, dim, coarse, size)
        return value

    # ------------------------------------------------------------ helpers

    def _channel(self) -> ir.Attribute:
        handle = self.next_channel
        self.next_channel += 1
        return cached_attr(
            f"#stablehlo.channel_handle<handle = {handle}, type = {_DEVICE_TO_DEVICE}>",
            self.context)

    def _groups(self, axes: Sequence[str]) -> ir.Attribute:
        groups = replica_groups(self.mesh, axes)
        return cached_attr(f"dense<{groups}> : tensor<{len(groups)}x{len(groups[0])}xi64>",
                           self.context)

    def _add_combiner(self, op: ir.OpView, value: ir.Value, reduction: str) -> None:
        scalar = ir.RankedTensorType.get([], _element_type(value))
        block = op.regions[0].blocks.append(scalar, scalar)
        with ir.InsertionPoint(block):
            stablehlo.ReturnOp([_COMBINERS[reduction](*block.arguments).result])

    def _lookup(self, axes: tuple[str, ...], scale: int) -> ir.Value:
        """``table[partition_id]`` where table[d] = device d's coordinate over `axes` * `scale`."""
        return self._table(axes, [q * scale for q in range(self.mesh.axes_size(axes))])

    def _table(self, axes: tuple[str, ...], values: Sequence[int]) -> ir.Value:
        """``values[q]``, q this device's coordinate over `axes`."""
        table = [values[axis_coordinate(self.mesh, device, axes)]
                 for device in range(self.mesh.size)]
        bits = 32 if max(table) < 2**31 else 64
        constant = stablehlo.ConstantOp(cached_attr(
            f"dense<{table}> : tensor<{len(table)}xi{bits}>", self.context)).result
        partition = stablehlo.PartitionIdOp().result
        entry = stablehlo.DynamicSliceOp(constant, [partition], [1]).result
        scalar = ir.RankedTensorType.get([], ir.IntegerType.get_signless(bits))
        return stablehlo.ReshapeOp(scalar, entry).result


# ------------------------------------------------------------ types

def _defined_by(value: ir.Value, name: str) -> bool:
    owner = value.owner
    return not isinstance(owner, ir.Block) and owner.operation.name == name


def _shape(value: ir.Value) -> list[int]:
    """The shape as a list, to be edited into the shape of a result."""
    return list(shape_of(value))


def _element_type(value: ir.Value) -> ir.Type:
    return ir.RankedTensorType(value.type).element_type


def _like_typed(value: ir.Value, element: ir.Type) -> ir.Type:
    return ir.RankedTensorType.get(_shape(value), element)


def _like(value: ir.Value, shape: Sequence[int]) -> ir.Type:
    return ir.RankedTensorType.get(list(shape), _element_type(value))


def _exact_split(size: int, count: int, op: str) -> int:
    if size % count:
        raise ValueError(f"{op} cannot split a dimension of {size} into {count} equal blocks; "
                         f"pad it first")
    return size // count
