"""Reshapes that move a split dimension's block boundaries: a halo exchange
in the flattened view.

A reshape keeps every element on its device when the blocks of its split
dimension map onto whole blocks of the result's split dimension.  When a
dimension that does not divide is merged with the dims minor to it, they do
not: a dim of 7 split in blocks of 4 rows, merged with a dim of 10 and split
again as a dim of 14 in blocks of 7 rows of 5, holds 40 elements a device
before and 35 after.  The rule-driven reshape then gathers the dim.  As
XLA's partitioner does (its reshape "with halo exchange"), each device here
views its block flattened from the split dim on (its rows are contiguous
there), takes the window of its result block from its own flat block and
its neighbours' (`collectives.Emitter.halo_window`), and reshapes the window
to its result block.  Taken where it moves fewer bytes than the rule-driven
plan.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo as hlo

from stablehlo_spmd.halos import halo_extent, pieces_elements, window_pieces
from stablehlo_spmd.partitioning.context import PartitionContext
from stablehlo_spmd.partitioning.strategy import (
    RULE_DRIVEN, Plan, plan_reshard_bytes, strategy)
from stablehlo_spmd.shapes import element_bytes, local_type, shape_of
from stablehlo_spmd.sharding import Sharding


class _FlatHalo(NamedTuple):
    """The flattened view: the operand's split dim `dim` and everything minor
    to it as one dim of `size` elements, held in blocks of `held` and wanted
    in blocks of `wanted` over `axes`."""

    dim: int
    axes: tuple[str, ...]
    size: int
    held: int
    wanted: int

    def windows(self, count: int):
        """(left/right halo extent or None, elements the pieces would move)."""
        live = -(-self.size // self.wanted)
        step = self.wanted - self.held
        extent = halo_extent(self.held, count, 0, self.wanted, step, self.size, live)
        pieces = window_pieces(self.held, count, self.size, [q * step for q in range(count)],
                               self.wanted, live)
        return extent, pieces_elements(pieces)


def _split_dim(sharding: Sharding) -> int | None:
    """The one dim `sharding` splits, or None (none, or several)."""
    split = [dim for dim, axes in enumerate(sharding.dim_axes) if axes]
    return split[0] if len(split) == 1 else None


def _flat_halo(p: PartitionContext, op: ir.Operation, source: Sharding,
               target: Sharding) -> _FlatHalo | None:
    operand_shape, result_shape = shape_of(op.operands[0]), shape_of(op.results[0])
    if source.unreduced or target.unreduced or not operand_shape or not result_shape:
        return None
    dim, result_dim = _split_dim(source), _split_dim(target)
    if dim is None or result_dim is None:
        return None
    axes = source.dim_axes[dim]
    if target.dim_axes[result_dim] != axes or \
            math.prod(operand_shape[:dim]) != math.prod(result_shape[:result_dim]):
        return None
    count = p.mesh.axes_size(axes)
    held = -(-operand_shape[dim] // count) * math.prod(operand_shape[dim + 1:])
    wanted = -(-result_shape[result_dim] // count) * math.prod(result_shape[result_dim + 1:])
    if held == wanted:
        return None  # the blocks line up: nothing to exchange
    return _FlatHalo(dim, axes, math.prod(operand_shape[dim:]), held, wanted)


def _reshape_plan(p: PartitionContext, op: ir.Operation) -> Plan | None:
    source = p.shardings.get(op.operands[0])
    target = p.result_shardings(op)[0]
    if source is None:
        return None
    flat = _flat_halo(p, op, source, target)
    if flat is None:
        return None
    extent, pieces = flat.windows(p.mesh.axes_size(flat.axes))
    received = pieces if extent is None else min(sum(extent), pieces)
    operand_type = ir.RankedTensorType(op.operands[0].type)
    halo_bytes = (received * math.prod(operand_type.shape[:flat.dim])
                  * element_bytes(operand_type.element_type))
    by_rule = RULE_DRIVEN.plan(p, op)
    if by_rule is not None and plan_reshard_bytes(p, op, by_rule) <= halo_bytes:
        return None
    return Plan([target], [source], [target], detail=flat)


@strategy("stablehlo.reshape", plan=_reshape_plan)
def emit_reshape(p: PartitionContext, op: ir.Operation, plan: Plan, operands):
    flat: _FlatHalo = plan.detail
    local = operands[0]
    shape = list(ir.RankedTensorType(local.type).shape)
    element = ir.RankedTensorType(local.type).element_type
    flattened = hlo.ReshapeOp(ir.RankedTensorType.get([*shape[:flat.dim], flat.held], element),
                              local).result
    window = p.emitter.halo_window(flattened, flat.dim, flat.axes, flat.size, 0, flat.wanted,
                                   flat.wanted - flat.held, live=-(-flat.size // flat.wanted))
    result_type = local_type(op.results[0].type, plan.produced[0])
    return [window if window.type == result_type else hlo.ReshapeOp(result_type, window).result]
