"""The edges of a manual region: ``custom_call @SPMDFullToShardShape`` and
``@SPMDShardToFullShape``, GSPMD's spelling of ``jax.shard_map`` (the import
writes ``sdy.manual_computation`` this way too).

Inside a region that is manual over axes M, each device holds its own value:
its type is the block one device holds of the global value, and the
partitioner splits it further only over the free axes (`Sharding.manual`;
`Partitioner._in_manual_region` gives every op of the region its manual
axes).  So entering a region moves nothing once the global value is laid
out with each dim split first over the manual axes that cut it down to the
region's type, then over the free axes the region's value is split on: the
device's block is then the region value's block, and the op is the
identity.  Leaving is the same in reverse, after which the global value
moves to the sharding the user gave it.

Which manual axes cut which dim is read from the global side's sharding
where it says (XLA requires both sides annotated), else taken in mesh order
to make up each dim's size ratio.  Like Shardy, the manual axes come first
(major) in each dim.

A collective already in the program (all-reduce, all-gather, reduce-scatter,
all-to-all, collective permute or broadcast: what a manual body holds) runs
on each device's block as it is where its device groups keep to devices
that hold the same block, the one case XLA's partitioner accepts for manual
code.  Where a group would mix blocks, the op runs on whole values instead,
which is always right.
"""

from __future__ import annotations

import numpy as np
from jaxlib.mlir import ir

from stablehlo_spmd.errors import ShardingError
from stablehlo_spmd.module_shardings import FULL_TO_SHARD
from stablehlo_spmd.partitioning.context import PartitionContext
from stablehlo_spmd.partitioning.strategy import REPLICATED, RULE_DRIVEN, Plan, Strategy, strategy
from stablehlo_spmd.reshard import axis_coordinate
from stablehlo_spmd.shapes import local_type, shape_of
from stablehlo_spmd.sharding import Sharding


def global_layout(outer: Sharding | None, inner: Sharding, outer_shape: tuple[int, ...],
                  inner_shape: tuple[int, ...], manual: tuple[str, ...]) -> Sharding:
    """The layout of the global value whose device blocks are the blocks of
    the region value laid out as `inner`: each dim split first over the
    `manual` axes that cut it from `outer_shape` to `inner_shape` (those
    `outer` names where it names them), then as `inner` splits it."""
    mesh = inner.mesh
    unused = [a for a in mesh.axis_names if a in manual]
    chosen: list[tuple[str, ...]] = []
    for dim, (size, block) in enumerate(zip(outer_shape, inner_shape)):
        if block == 0 or size % block:
            raise ShardingError(f"dimension {dim} of the region's value ({block}) does not "
                                f"divide the global one ({size})")
        ratio = size // block
        named = tuple(a for a in (outer.dim_axes[dim] if outer is not None else ())
                      if a in manual)
        if mesh.axes_size(named) != ratio:
            named = ()
        chosen.append(named)
        for axis in named:
            unused.remove(axis)
    for dim, (size, block) in enumerate(zip(outer_shape, inner_shape)):
        ratio = size // block
        if chosen[dim] or ratio == 1:
            continue
        picked: list[str] = []
        for axis in list(unused):
            if mesh.axes_size(picked) * mesh.axis_size(axis) <= ratio and \
                    ratio % (mesh.axes_size(picked) * mesh.axis_size(axis)) == 0:
                picked.append(axis)
                unused.remove(axis)
        if mesh.axes_size(picked) != ratio:
            raise ShardingError(
                f"dimension {dim} of the region's value is {ratio} times smaller than the "
                f"global one, which no product of the manual axes "
                f"({', '.join(manual)}) makes")
        chosen[dim] = tuple(picked)
    outer_manual = tuple(a for a in inner.manual if a not in manual)
    return Sharding(mesh, tuple(c + d for c, d in zip(chosen, inner.dim_axes)),
                    unreduced=inner.unreduced, reduction=inner.reduction, manual=outer_manual)


def _entering(op: ir.Operation) -> bool:
    return ir.StringAttr(op.attributes["call_target_name"]).value == FULL_TO_SHARD


def _boundary_plan(p: PartitionContext, op: ir.Operation) -> Plan:
    operand, result = op.operands[0], op.results[0]
    wanted = p.result_shardings(op)[0]
    if _entering(op):
        inner, outer = wanted, p.shardings.get(operand)
        whole, block = shape_of(operand), shape_of(result)
    else:
        inner, outer = p.shardings[operand].reduced(), wanted
        whole, block = shape_of(result), shape_of(operand)
    new_manual = tuple(a for a in inner.manual if outer is None or a not in outer.manual)
    layout = global_layout(outer, inner, whole, block, new_manual)
    required, produced = (layout, inner) if _entering(op) else (inner, layout)
    if local_type(operand.type, required) != local_type(result.type, produced):
        raise ShardingError(f"the region's value {block} does not split evenly over {layout}")
    return Plan([wanted], [required], [produced])


def _forward(p: PartitionContext, op: ir.Operation, plan: Plan, operands):
    return operands[:1]


MANUAL_BOUNDARY = Strategy(_boundary_plan, _forward)


def _device_groups(op: ir.Operation) -> list[list[int]]:
    """The device groups `op` combines (a permute's pairs, as two-device
    groups); none without a channel, whose groups are replicas."""
    if "channel_handle" not in op.attributes:
        return []
    name = "source_target_pairs" if op.name == "stablehlo.collective_permute" \
        else "replica_groups"
    return np.array(ir.DenseIntElementsAttr(op.attributes[name])).tolist()


def _group_mixing_blocks(layout: Sharding, groups: list[list[int]]) -> list[int] | None:
    """The first device group whose devices hold different blocks of a value
    laid out as `layout`, if any."""
    mesh = layout.mesh

    def block(device: int) -> tuple[int, ...]:
        return tuple(axis_coordinate(mesh, device, axes) for axes in layout.dim_axes)

    return next((group for group in groups if len({block(d) for d in group if d >= 0}) > 1),
                None)


def _collective_plan(p: PartitionContext, op: ir.Operation) -> Plan:
    groups = _device_groups(op)
    plan = RULE_DRIVEN.plan(p, op)
    if plan is not None and all(layout is None or _group_mixing_blocks(layout, groups) is None
                                for layout in plan.required):
        return plan
    for value in op.operands:
        current = p.shardings.get(value)
        if current is not None and current.manual:
            mixed = _group_mixing_blocks(current, groups)
            if mixed is not None:
                # Manual code combines each device's own value: a group that
                # spans devices holding different blocks of it has no
                # meaning, and XLA's partitioner refuses it as well.
                raise ShardingError(
                    f"'{op.name}' combines devices {mixed}, which hold different blocks of "
                    f"a value manual over {', '.join(current.manual)}; a collective in manual "
                    "code must keep to devices holding the same block")
    return REPLICATED.plan(p, op)


@strategy("stablehlo.all_reduce", "stablehlo.collective_permute",
          "stablehlo.collective_broadcast", "stablehlo.all_gather", "stablehlo.reduce_scatter",
          "stablehlo.all_to_all", plan=_collective_plan)
def emit_device_collective(p: PartitionContext, op: ir.Operation, plan: Plan, operands):
    chosen = REPLICATED if plan.replicates else RULE_DRIVEN
    return chosen.emit_local(p, op, plan, operands)
