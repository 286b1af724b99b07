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
from typing import Sequence

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from stablehlo_spmd.ir import cached_attr
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.reshard import Step, axis_coordinate, plan, replica_groups
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
        zero = stablehlo.ConstantOp(cached_attr(
            f"dense<0> : tensor<{_element_type(offset)}>", self.context)).result
        starts = [zero] * len(shape)
        starts[dim] = offset
        shape[dim] = size
        return stablehlo.DynamicSliceOp(value, starts, shape).result

    # ------------------------------------------------------------ padding

    @_placed
    def mask_padding(self, value: ir.Value, dim: int, axes: Sequence[str], global_size: int,
                     neutral: ir.Value | None = None) -> ir.Value:
        """Replace the elements of `dim` past `global_size` (the padding of an
        uneven shard) with `neutral` (a scalar; zero when None)."""
        shape = _shape(value)
        local_size = shape[dim]
        element = _element_type(value)
        i32 = ir.IntegerType.get_signless(32, self.context)
        index_type = ir.RankedTensorType.get(list(shape), i32)
        positions = stablehlo.IotaOp(index_type, dim).result
        offset = self.axis_index(axes)
        if ir.RankedTensorType(offset.type).element_type != i32:
            offset = stablehlo.ConvertOp(ir.RankedTensorType.get([], i32), offset).result
        shard = stablehlo.ConstantOp(cached_attr(f"dense<{local_size}> : tensor<i32>", self.context)).result
        start = stablehlo.MulOp(offset, shard).result
        start = stablehlo.BroadcastInDimOp(index_type, start, []).result
        limit = stablehlo.ConstantOp(cached_attr(
            f"dense<{global_size}> : {index_type}", self.context)).result
        inside = stablehlo.CompareOp(stablehlo.AddOp(positions, start).result, limit,
                                     stablehlo.ComparisonDirectionAttr.get("LT")).result
        if neutral is None:
            neutral = stablehlo.ConstantOp(cached_attr(
                f"dense<{_zero_text(element)}> : tensor<{element}>", self.context)).result
        filler = stablehlo.BroadcastInDimOp(value.type, neutral, []).result
        return stablehlo.SelectOp(inside, value, filler).result

    @_placed
    def pad(self, value: ir.Value, dim: int, size: int) -> ir.Value:
        """Zero-pad `dim` at its end up to `size` (no op when already that long)."""
        shape = _shape(value)
        if shape[dim] == size:
            return value
        if shape[dim] > size:
            raise ValueError(f"cannot pad dimension {dim} of {shape} down to {size}")
        high = [0] * len(shape)
        high[dim] = size - shape[dim]
        element = _element_type(value)
        zero = stablehlo.ConstantOp(cached_attr(
            f"dense<{_zero_text(element)}> : tensor<{element}>", self.context)).result
        return stablehlo.PadOp(value, zero, [0] * len(shape), high, [0] * len(shape)).result

    @_placed
    def trim(self, value: ir.Value, dim: int, size: int) -> ir.Value:
        """Keep the first `size` elements of `dim` (no op when already that long)."""
        shape = _shape(value)
        if shape[dim] == size:
            return value
        limits = list(shape)
        limits[dim] = size
        return stablehlo.SliceOp(value, [0] * len(shape), limits, [1] * len(shape)).result

    # ------------------------------------------------------------ reshard

    @_placed
    def reshard(self, value: ir.Value, source: Sharding, target: Sharding,
                global_shape: Sequence[int], steps: Sequence[Step] | None = None) -> ir.Value:
        """Turn the local `value` of a `source`-sharded tensor into its `target` shard.

        `steps` is the plan when the caller already made it (to price or warn about it).
        """
        if steps is None:
            steps = plan(source, target, global_shape, _element_bytes(value))
        for step in steps:
            value = self._emit_step(value, step, step.result.shard_shape(global_shape))
        return value

    def _emit_step(self, value: ir.Value, step: Step, shape: tuple[int, ...]) -> ir.Value:
        """Emit `step`; `shape` is the local shape of its result layout."""
        count = self.mesh.axes_size(step.axes)
        if step.kind == "slice":
            value = self.local_slice(value, step.dim, step.axes)
        elif step.kind == "all_gather":
            gathered = self.all_gather(value, step.dim, step.axes)
            value = self.trim(gathered, step.dim, shape[step.dim])
        elif step.kind == "all_reduce":
            value = self.all_reduce(value, step.axes, step.reduction)
        elif step.kind == "reduce_scatter":
            padded = self.pad(value, step.dim, count * shape[step.dim])
            value = self.reduce_scatter(padded, step.dim, step.axes, step.reduction)
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
        table = [axis_coordinate(self.mesh, device, axes) * scale
                 for device in range(self.mesh.size)]
        bits = 32 if max(table) < 2**31 else 64
        constant = stablehlo.ConstantOp(cached_attr(
            f"dense<{table}> : tensor<{len(table)}xi{bits}>", self.context)).result
        partition = stablehlo.PartitionIdOp().result
        entry = stablehlo.DynamicSliceOp(constant, [partition], [1]).result
        scalar = ir.RankedTensorType.get([], ir.IntegerType.get_signless(bits))
        return stablehlo.ReshapeOp(scalar, entry).result


# ------------------------------------------------------------ types

def _shape(value: ir.Value) -> list[int]:
    return list(ir.RankedTensorType(value.type).shape)


def _element_type(value: ir.Value) -> ir.Type:
    return ir.RankedTensorType(value.type).element_type


def _like(value: ir.Value, shape: Sequence[int]) -> ir.Type:
    return ir.RankedTensorType.get(list(shape), _element_type(value))


def _exact_split(size: int, count: int, op: str) -> int:
    if size % count:
        raise ValueError(f"{op} cannot split a dimension of {size} into {count} equal blocks; "
                         f"pad it first")
    return size // count


def _element_bytes(value: ir.Value) -> int:
    element = _element_type(value)
    if isinstance(element, ir.ComplexType):
        return 2 * _bytes_of(element.element_type)
    return _bytes_of(element)


def _bytes_of(element: ir.Type) -> int:
    width = element.width if isinstance(element, (ir.IntegerType, ir.FloatType)) else 64
    return max(1, -(-width // 8))  # i1 is stored as a byte


def _zero_text(element: ir.Type) -> str:
    if isinstance(element, ir.ComplexType):
        return "(0.0, 0.0)"
    if isinstance(element, ir.FloatType):
        return "0.0"
    if isinstance(element, ir.IntegerType) and element.width == 1:
        return "false"
    return "0"
