"""Gathers and scatters, per device.

A gather runs on each device's indices (index-parallel: indices split on
their batch dims) and each device's columns of the operand (pass-through
dims split), and, where the operand is split on an indexed dim, as a
masked local gather (embedding lookups, ``take_along_axis`` on a split
vocabulary).  Scatter-adds into an operand split on indexed dims (the
embedding gradient) are local scatter-adds.  Other shapes decline and run
replicated.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo as hlo

from stablehlo_spmd import op_rules
from stablehlo_spmd.module_shardings import MHLO_SHARDING
from stablehlo_spmd.op_rules import FactorKind, UnreducedFlow
from stablehlo_spmd.partitioning.partitioner import (
    Partitioner, clamp, handles, local_type, scalar, shape_of, splat, zero_like_index, zeros)


@handles("stablehlo.gather")
def emit_gather(p: Partitioner, op: ir.Operation) -> bool:
    """A gather on each device's indices and operand shard.

    Index batch dims and pass-through (full-slice) operand dims keep their
    sharding, with a per-device slice size.  Where the operand is sharded
    on an indexed dim (a masked local gather), each device shifts the (clamped) indices into its shard of every
    sharded indexed dim, gathers locally, and zeroes the rows whose index
    falls outside its shard: the results are partial sums that exactly
    one device contributes to (GSPMD's embedding-lookup strategy; the
    sum is taken where propagation put it).  Returns False (the caller
    runs it replicated) for any other shape of gather.
    """
    rule = op_rules.rule_for(op)
    if rule is None or len(op.results) != 1:
        return False
    numbers = hlo.GatherDimensionNumbers(op.attributes["dimension_numbers"])
    index_map = list(numbers.start_index_map)
    vector_dim = numbers.index_vector_dim
    slice_sizes = list(op_rules.int_array(op.attributes["slice_sizes"]))
    operand, indices = op.operands[0], op.operands[1]
    operand_shape, indices_shape = shape_of(operand), shape_of(indices)
    wanted = p.result_shardings(op)
    axes = p.factor_axes(op, rule, wanted, reduction_first=True)
    required, produced = p.layouts(op, rule, axes, wanted)
    operand_layout = required[0]
    batching = set(numbers.operand_batching_dims)
    for dim, dim_axes in enumerate(operand_layout.dim_axes):
        if not dim_axes:
            continue
        shards = p.mesh.axes_size(dim_axes)
        if operand_shape[dim] % shards:
            return False
        indexed = dim in index_map and dim not in batching
        if indexed and slice_sizes[dim] != 1:
            return False
        if not indexed and dim not in batching and slice_sizes[dim] != operand_shape[dim]:
            return False
    if any(required[1].dim_axes[d] for d in range(len(indices_shape)) if d == vector_dim):
        return False
    local_operand = p.to(operand, operand_layout)
    local_indices = p.to(indices, required[1])
    local_operand_shape = operand_layout.shard_shape(operand_shape)
    local_slice_sizes = [local_operand_shape[d] if (slice_sizes[d] == operand_shape[d]
                                                      and d not in index_map) else size
                         for d, size in enumerate(slice_sizes)]
    mask = None
    index_type = local_indices.type
    element = index_type.element_type
    components = []
    for k, dim in enumerate(index_map):
        component = index_component(local_indices, vector_dim, k)
        dim_axes = operand_layout.dim_axes[dim]
        if dim_axes and dim not in batching:
            size = local_operand_shape[dim]
            component = clamp(component, 0, operand_shape[dim] - 1, element)
            offset = p.emitter.axis_index(dim_axes)
            offset = hlo.ConvertOp(ir.RankedTensorType.get([], element), offset).result
            offset = hlo.MulOp(offset, scalar(size, element)).result
            component = hlo.SubtractOp(component, hlo.BroadcastInDimOp(
                component.type, offset, []).result).result
            inside = hlo.AndOp(
                hlo.CompareOp(component, splat(0, component.type),
                              hlo.ComparisonDirectionAttr.get("GE")).result,
                hlo.CompareOp(component, splat(size, component.type),
                              hlo.ComparisonDirectionAttr.get("LT")).result).result
            mask = inside if mask is None else hlo.AndOp(mask, inside).result
        components.append(component)
    if vector_dim < len(indices_shape):
        local_indices = hlo.ConcatenateOp(components, vector_dim).result
    else:
        local_indices = components[0]
    attributes = {n: op.attributes[n] for n in op.attributes if n != MHLO_SHARDING}
    attributes["slice_sizes"] = ir.DenseI64ArrayAttr.get(local_slice_sizes)
    result_type = local_type(op.results[0].type, produced[0])
    gathered = ir.Operation.create(op.name, results=[result_type],
                                   operands=[local_operand, local_indices],
                                   attributes=attributes).results[0]
    result = gathered if mask is None else _zero_outside(mask, gathered, vector_dim, numbers)
    p.bind(op.results[0], result, produced[0])
    p.settle(op.results[0], wanted[0])
    return True


def _zero_outside(mask: ir.Value, gathered: ir.Value, vector_dim: int, numbers) -> ir.Value:
    """Zero the gathered rows whose index fell outside this device's shard."""
    result_type = gathered.type
    # The mask covers the batch positions; spread it over the offset dims.
    batch_result_dims = [d for d in range(len(result_type.shape))
                         if d not in set(numbers.offset_dims)]
    mask_shape = [d for i, d in enumerate(mask.type.shape) if i != vector_dim]
    mask = hlo.ReshapeOp(ir.RankedTensorType.get(mask_shape, mask.type.element_type),
                         mask).result
    wide = ir.RankedTensorType.get(list(result_type.shape), mask.type.element_type)
    mask = hlo.BroadcastInDimOp(wide, mask, batch_result_dims).result
    zero = splat(0, result_type) if not isinstance(result_type.element_type, ir.FloatType) \
        else hlo.ConstantOp(ir.DenseElementsAttr.get_splat(
            result_type, ir.FloatAttr.get(result_type.element_type, 0.0))).result
    return hlo.SelectOp(mask, gathered, zero).result


@handles("stablehlo.scatter")
def emit_scatter(p: Partitioner, op: ir.Operation) -> bool:
    """A scatter-add per device: into the device's columns of an operand
    split on pass-through dims, from its share of updates split along their
    scatter dims, and into its rows of an operand split on indexed dims.

    Indices are shifted into the device's shard; an update whose index
    falls outside it is out of bounds there, and scatter skips those (no
    mask needed).  Updates split along their scatter dims leave partial
    sums, so the operand is counted on one device of those axes only.
    Returns False (the caller runs it replicated) for other scatters.
    """
    rule = op_rules.rule_for(op)
    if rule is None or len(op.results) != 1 or rule.reduction != "sum" \
            or rule.unreduced is UnreducedFlow.NONE:
        return False
    numbers = hlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
    index_map = list(numbers.scattered_dims_to_operand_dims)
    inserted = set(numbers.inserted_window_dims)
    batching = set(numbers.input_batching_dims)
    vector_dim = numbers.index_vector_dim
    operand, indices, updates = op.operands
    operand_shape, indices_shape = shape_of(operand), shape_of(indices)
    wanted = p.result_shardings(op)
    axes = p.factor_axes(op, rule, wanted, reduction_first=True)
    required, produced = p.layouts(op, rule, axes, wanted)
    operand_layout = required[0]
    for dim, dim_axes in enumerate(operand_layout.dim_axes):
        if dim_axes and (operand_shape[dim] % p.mesh.axes_size(dim_axes)
                         or (dim in index_map and dim not in inserted and dim not in batching)):
            return False
    if vector_dim < len(indices_shape) and required[1].dim_axes[vector_dim]:
        return False
    local_operand = p.to(operand, operand_layout)
    local_indices = p.to(indices, required[1])
    local_updates = p.to(updates, required[2])
    local_operand_shape = operand_layout.shard_shape(operand_shape)
    element = local_indices.type.element_type
    components, shifted = [], False
    for k, dim in enumerate(index_map):
        component = index_component(local_indices, vector_dim, k)
        dim_axes = operand_layout.dim_axes[dim]
        if dim_axes and dim not in batching:
            offset = p.emitter.axis_index(dim_axes)
            offset = hlo.ConvertOp(ir.RankedTensorType.get([], element), offset).result
            offset = hlo.MulOp(offset, scalar(local_operand_shape[dim], element)).result
            component = hlo.SubtractOp(component, hlo.BroadcastInDimOp(
                component.type, offset, []).result).result
            shifted = True
        components.append(component)
    partial_axes = tuple(a for f, kind in enumerate(rule.factor_kinds)
                         if kind is FactorKind.REDUCTION for a in axes[f])
    if shifted:
        local_indices = (hlo.ConcatenateOp(components, vector_dim).result
                         if vector_dim < len(indices_shape) else components[0])
    if partial_axes and not operand_layout.unreduced:
        index = p.emitter.axis_index(partial_axes)
        first = hlo.CompareOp(index, zero_like_index(index),
                              hlo.ComparisonDirectionAttr.get("EQ")).result
        nothing = zeros(local_operand.type)
        keep = hlo.BroadcastInDimOp(ir.RankedTensorType.get(
            list(local_operand.type.shape), first.type.element_type), first, []).result
        local_operand = hlo.SelectOp(keep, local_operand, nothing).result
    result_type = local_type(op.results[0].type, produced[0])
    new_op = p.create(op, [local_operand, local_indices, local_updates], [result_type])
    p.bind(op.results[0], new_op.results[0], produced[0])
    p.settle(op.results[0], wanted[0])
    return True


def index_component(indices: ir.Value, vector_dim: int, k: int) -> ir.Value:
    """Component k of every index vector, keeping a size-1 vector dim."""
    shape = list(indices.type.shape)
    if vector_dim >= len(shape):
        return indices
    start = [0] * len(shape)
    limit = list(shape)
    start[vector_dim], limit[vector_dim] = k, k + 1
    return hlo.SliceOp(indices, start, limit, [1] * len(shape)).result
