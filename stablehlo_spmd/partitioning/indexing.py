"""Gathers and scatters, per device.

A gather runs on each device's indices (index-parallel: indices split on
their batch dims) and each device's columns of the operand (pass-through
dims split), and, where the operand is split on an indexed dim, as a
masked local gather (embedding lookups, ``take_along_axis`` on a split
vocabulary).  Scatters into an operand split on pass-through dims or on
indexed dims (the embedding gradient, ``x.at[i].set(v)`` on split rows)
are local scatters; scatter-adds, -maxes and -mins of updates split along
their scatter dims leave partial results.  Other shapes decline and run
replicated.

An operand split unevenly is served where it lies, as GSPMD serves it:
a gather clamps its indices into the dim before shifting them, and a
scatter's index past the dim's end lands, if anywhere, in the last
shard's padding, which nothing reads unmasked.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo as hlo

from stablehlo_spmd import op_rules
from stablehlo_spmd.module_shardings import MHLO_SHARDING
from stablehlo_spmd.op_rules import FactorKind
from stablehlo_spmd.op_rules.indexing import implicit_batching_dims
from stablehlo_spmd.partitioning.context import PartitionContext
from stablehlo_spmd.partitioning.strategy import (
    Plan, dealt_axes, factor_axes, layout, plan_from_axes, plan_reshard_bytes, rule_plan,
    strategy)
from stablehlo_spmd.shapes import int_constant, local_type, shape_of, zeros
from stablehlo_spmd.sharding import Sharding


def _scalar(value: int, element_type: ir.Type) -> ir.Value:
    return int_constant(value, ir.RankedTensorType.get([], element_type))


def _splits_index_vectors(plan: Plan, indices: int, vector_dim: int) -> bool:
    """Whether the plan splits the index-vector dim of operand `indices`
    (no local form)."""
    indices_layout = plan.required[indices]
    return vector_dim < len(indices_layout.dim_axes) and bool(indices_layout.dim_axes[vector_dim])


def _cheapest_plan(p: PartitionContext, op: ir.Operation, serves) -> Plan | None:
    """The cheapest, in bytes, of the rule's plans that `serves(plan)`
    accepts.  The candidates:

    * factors on the axes the results want, REDUCTION factors split as the
      operands have them (each device's local op is a partial result,
      combined later): a masked lookup into a split vocabulary keeps the
      vocabulary split, as GSPMD does;
    * the same with the REDUCTION factors gathered first: a scatter of a
      few updates split along their batch into a large table gathers the
      updates instead of summing the table (GSPMD sums it);
    * factors on the axes the operands have, the results moved afterwards:
      where the result is wanted whole but the operands come split alike,
      the op runs split and only its result is gathered, as GSPMD
      partitions by the operands first.

    Ties keep the earlier candidate."""
    partial = rule_plan(p, op, reduction_first=True)
    if partial is None:
        return None
    rule = partial.rule
    plans = [partial]
    if any(partial.axes[f] for f, kind in enumerate(rule.factor_kinds)
           if kind is FactorKind.REDUCTION):
        plans.append(rule_plan(p, op, constrain=_gather_reductions))
    by_operands = factor_axes(p, op, rule, _operands_way(p, op, rule), reduction_first=True)
    if by_operands != partial.axes:
        plans.append(plan_from_axes(p, op, rule, partial.wanted, by_operands))
    plans = [plan for plan in plans if serves(plan)]
    return min(plans, key=lambda plan: plan_reshard_bytes(p, op, plan), default=None)


def _operands_way(p: PartitionContext, op: ir.Operation, rule) -> list[Sharding]:
    """The result shardings the operands' own imply: each PASS_THROUGH
    factor on the axes the first operand holding it split has it on."""
    axes: list[tuple] = [()] * rule.num_factors
    used: set[str] = set()
    for factor, dealt in dealt_axes(p, rule, [p.shardings.get(v) for v in op.operands],
                                    rule.operands):
        if (rule.factor_kinds[factor] is FactorKind.PASS_THROUGH and not axes[factor]
                and not used & set(dealt)):
            axes[factor] = dealt
            used.update(dealt)
    return [layout(p, dims, axes) for dims in rule.results]


def _gather_reductions(rule, axes) -> None:
    for factor, kind in enumerate(rule.factor_kinds):
        if kind is FactorKind.REDUCTION:
            axes[factor] = ()


def _gather_plan(p: PartitionContext, op: ir.Operation) -> Plan | None:
    """The cheapest plan (`_cheapest_plan`) in which every split operand dim
    is one a local gather can serve."""
    if len(op.results) != 1:
        return None
    numbers = hlo.GatherDimensionNumbers(op.attributes["dimension_numbers"])
    index_map = list(numbers.start_index_map)
    slice_sizes = list(op_rules.int_array(op.attributes["slice_sizes"]))
    operand_shape = shape_of(op.operands[0])
    batching = set(numbers.operand_batching_dims)

    def serves(plan: Plan) -> bool:
        for dim, dim_axes in enumerate(plan.required[0].dim_axes):
            if not dim_axes:
                continue
            whole = slice_sizes[dim] == operand_shape[dim]
            trivial = dim in index_map and slice_sizes[dim] == 1
            if not (whole or trivial or dim in batching):
                return False
        return not _splits_index_vectors(plan, 1, numbers.index_vector_dim)

    return _cheapest_plan(p, op, serves)


@strategy("stablehlo.gather", plan=_gather_plan)
def emit_gather(p: PartitionContext, op: ir.Operation, plan: Plan, operands):
    """A gather on each device's indices and operand shard.

    Index batch dims and pass-through (full-slice) operand dims keep their
    sharding, with a per-device slice size.  Where the operand is sharded
    on an indexed dim (a masked local gather), each device shifts the
    (clamped) indices into its shard of every sharded indexed dim, gathers
    locally, and zeroes the rows whose index falls outside its shard: the
    results are partial sums that exactly one device contributes to
    (GSPMD's embedding-lookup strategy; the sum is taken where propagation
    put it).  An indexed dim indexed by position
    (`implicit_batching_dims`) is split like the indices:
    its shifted indices all fall inside the shard, with nothing to clamp or
    mask.  Other gathers take the default strategies.
    """
    numbers = hlo.GatherDimensionNumbers(op.attributes["dimension_numbers"])
    index_map = list(numbers.start_index_map)
    vector_dim = numbers.index_vector_dim
    slice_sizes = list(op_rules.int_array(op.attributes["slice_sizes"]))
    operand_shape, indices_shape = shape_of(op.operands[0]), shape_of(op.operands[1])
    batching = set(numbers.operand_batching_dims)
    operand_layout = plan.required[0]
    local_operand, local_indices = operands
    local_operand_shape = operand_layout.shard_shape(operand_shape)
    # A slice covering its whole dim covers the whole shard; its start,
    # indexed or not, is clamped to 0 on every device as on one.
    whole = [size == operand_shape[d] for d, size in enumerate(slice_sizes)]
    local_slice_sizes = [local_operand_shape[d] if whole[d] else size
                         for d, size in enumerate(slice_sizes)]
    positional = {dim for dim, _ in implicit_batching_dims(op)}
    mask = None
    index_type = local_indices.type
    element = index_type.element_type
    components = []
    for k, dim in enumerate(index_map):
        component = index_component(local_indices, vector_dim, k)
        dim_axes = operand_layout.dim_axes[dim]
        if dim_axes and dim not in batching and not whole[dim]:
            size = local_operand_shape[dim]
            if dim not in positional:
                # Clamp as gather itself would, before shifting into the shard.
                component = hlo.ClampOp(_scalar(0, element), component,
                                        _scalar(operand_shape[dim] - 1, element)).result
            offset = p.emitter.axis_index(dim_axes)
            offset = hlo.ConvertOp(ir.RankedTensorType.get([], element), offset).result
            offset = hlo.MulOp(offset, _scalar(size, element)).result
            component = hlo.SubtractOp(component, hlo.BroadcastInDimOp(
                component.type, offset, []).result).result
            if dim in positional:
                # Row j of this device's indices is split like operand row
                # j: every shifted index is inside the shard.
                components.append(component)
                continue
            inside = hlo.AndOp(
                hlo.CompareOp(component, int_constant(0, component.type),
                              hlo.ComparisonDirectionAttr.get("GE")).result,
                hlo.CompareOp(component, int_constant(size, component.type),
                              hlo.ComparisonDirectionAttr.get("LT")).result).result
            mask = inside if mask is None else hlo.AndOp(mask, inside).result
        components.append(component)
    if vector_dim < len(indices_shape):
        local_indices = hlo.ConcatenateOp(components, vector_dim).result
    else:
        local_indices = components[0]
    attributes = {n: op.attributes[n] for n in op.attributes if n != MHLO_SHARDING}
    attributes["slice_sizes"] = ir.DenseI64ArrayAttr.get(local_slice_sizes)
    result_type = local_type(op.results[0].type, plan.produced[0])
    gathered = ir.Operation.create(op.name, results=[result_type],
                                   operands=[local_operand, local_indices],
                                   attributes=attributes).results[0]
    return [gathered if mask is None else _zero_outside(mask, gathered, vector_dim, numbers)]


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
    return hlo.SelectOp(mask, gathered, zeros(result_type)).result


def _scatter_plan(p: PartitionContext, op: ir.Operation) -> Plan | None:
    """The cheapest plan (`_cheapest_plan`).  Every operand dim the rule
    lets it split a local scatter serves: a window dim the updates cover
    whole (indexed or not: a window that starts anywhere but 0 is out of
    bounds on every device as on one), a batching dim, or an inserted dim
    (one row per index).  Only a split index vector has no local form."""
    count = len(op.results)
    numbers = hlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
    return _cheapest_plan(
        p, op, lambda plan: not _splits_index_vectors(plan, count, numbers.index_vector_dim))


@strategy("stablehlo.scatter", plan=_scatter_plan)
def emit_scatter(p: PartitionContext, op: ir.Operation, plan: Plan, operands):
    """A scatter per device: into the device's columns of operands split on
    pass-through dims, from its share of updates split along their scatter
    dims (scatter-add, -max, -min), and into its rows of operands split on
    indexed dims.  This is GSPMD's scatter handling (pass-through operand,
    index-parallel updates, operand split on trivially sliced dims), none of
    which moves data before the scatter.

    Indices are shifted into the device's shard; an update whose index
    falls outside it is out of bounds there, and scatter skips those (no
    mask needed), so an overwriting scatter needs no more than an adding
    one.  Updates split along their scatter dims leave partial results
    combined by the body's reduction: for a sum the operand is counted on
    one device of those axes only; max and min may see it on every device.
    """
    count = len(op.results)
    numbers = hlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
    index_map = list(numbers.scattered_dims_to_operand_dims)
    vector_dim = numbers.index_vector_dim
    operand_shape, indices_shape = shape_of(op.operands[0]), shape_of(op.operands[count])
    operand_layout = plan.required[0]
    local_operands, local_indices = list(operands[:count]), operands[count]
    local_operand_shape = operand_layout.shard_shape(operand_shape)
    element = local_indices.type.element_type
    inserted = set(numbers.inserted_window_dims)
    shifts = [bool(operand_layout.dim_axes[dim]) and dim in inserted for dim in index_map]
    components, shifted = [], any(shifts)
    for k, dim in enumerate(index_map if shifted else ()):
        component = index_component(local_indices, vector_dim, k)
        dim_axes = operand_layout.dim_axes[dim]
        if shifts[k]:
            offset = p.emitter.axis_index(dim_axes)
            offset = hlo.ConvertOp(ir.RankedTensorType.get([], element), offset).result
            offset = hlo.MulOp(offset, _scalar(local_operand_shape[dim], element)).result
            component = hlo.SubtractOp(component, hlo.BroadcastInDimOp(
                component.type, offset, []).result).result
        components.append(component)
    rule = plan.rule
    partial_axes = tuple(a for f, kind in enumerate(rule.factor_kinds)
                         if kind is FactorKind.REDUCTION for a in plan.axes[f])
    if shifted:
        local_indices = (hlo.ConcatenateOp(components, vector_dim).result
                         if vector_dim < len(indices_shape) else components[0])
    if partial_axes and rule.reduction == "sum" and not operand_layout.unreduced:
        index = p.emitter.axis_index(partial_axes)
        first = hlo.CompareOp(index, zeros(index.type),
                              hlo.ComparisonDirectionAttr.get("EQ")).result
        nothing = zeros(local_operands[0].type)
        keep = hlo.BroadcastInDimOp(ir.RankedTensorType.get(
            list(local_operands[0].type.shape), first.type.element_type), first, []).result
        local_operands[0] = hlo.SelectOp(keep, local_operands[0], nothing).result
    result_types = [local_type(r.type, s) for r, s in zip(op.results, plan.produced)]
    return p.create(op, [*local_operands, local_indices, *operands[count + 1:]],
                    result_types).results


def index_component(indices: ir.Value, vector_dim: int, k: int) -> ir.Value:
    """Component k of every index vector, keeping a size-1 vector dim."""
    shape = list(indices.type.shape)
    if vector_dim >= len(shape):
        return indices
    start = [0] * len(shape)
    limit = list(shape)
    start[vector_dim], limit[vector_dim] = k, k + 1
    return hlo.SliceOp(indices, start, limit, [1] * len(shape)).result
