"""Ordering ops along a sharded dimension: sort and a distributed top-k.

`stablehlo.sort` orders along one dim, which its op rule marks
NEED_REPLICATION: the rule-driven path gathers that dim whole on every
device.  When the operands come split along the sorted dim, the split can
instead move to another dim (an all-to-all, which moves 1/p of what the
gather would), each device sorts its whole rows, and the results move back
where propagation wants them.  This is GSPMD's sort handler (it moves the
sort dim's tiles to a free dim when one divides); here every dim that
divides is priced with the reshard planner, the gather too, and the
cheapest plan wins, so a sort whose result is wanted whole keeps the single
gather.

`chlo.top_k` (what `jax.lax.top_k` lowers to; another `axis` is a transpose
around it) and XLA's ``custom_call @TopK`` select along their last dim,
which the op rule marks NEED_REPLICATION: the rule-driven path would gather
that dim whole.  When the operand's last dim is sharded and k fits in one
shard, each device instead takes the top k of its own shard, the devices
exchange only those k candidates (values and global indices), and a second
top-k over the candidates picks the answer, which every device of those
axes then holds.  Other top-ks (last dim unsharded, or k larger than a
shard) decline and run by rule.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo as hlo

from stablehlo_spmd import op_rules
from stablehlo_spmd.op_rules import FactorKind
from stablehlo_spmd.partitioning.context import PartitionContext
from stablehlo_spmd.partitioning.strategy import (
    RULE_DRIVEN, Plan, Strategy, factor_axes, layout, plan_from_axes, plan_reshard_bytes,
    rule_plan, strategy)
from stablehlo_spmd.shapes import shape_of
from stablehlo_spmd.sharding import Sharding


def _sort_plan(p: PartitionContext, op: ir.Operation) -> Plan | None:
    """Sort with the sorted dim's axes moved onto another dim, when some dim
    takes them evenly and that moves fewer bytes than gathering the sorted
    dim; None (the rule's plan, gathering it) otherwise.

    A result nobody reads (the sorted keys of an argsort) is left where the
    local sort puts it: moving it would be priced, and emitted, for nothing.
    """
    by_rule = rule_plan(p, op)
    if by_rule is None:
        return None
    rule = by_rule.rule
    (sorted_factor,) = [f for f, kind in enumerate(rule.factor_kinds)
                        if kind is FactorKind.NEED_REPLICATION]
    sorted_dim = next(d for d, factors in enumerate(rule.operands[0]) if sorted_factor in factors)
    used = {a for axes in by_rule.axes for a in axes}
    moving = tuple(dict.fromkeys(
        a for operand in op.operands if p.shardings.get(operand) is not None
        for a in p.shardings[operand].dim_axes[sorted_dim] if a not in used))
    if not moving:
        return None
    best, best_bytes = None, plan_reshard_bytes(p, op, _unread_results_stay(op, by_rule))
    for factor, size in enumerate(rule.factor_sizes):
        if factor == sorted_factor:
            continue
        axes = list(by_rule.axes)
        axes[factor] = axes[factor] + moving
        if size % p.mesh.axes_size(axes[factor]):
            continue
        plan = _unread_results_stay(op, plan_from_axes(p, op, rule, by_rule.wanted, axes))
        # The sorted dim is moved whole by an all-to-all, not gathered:
        # nothing to report.
        plan.gathered = plan.gathered - {sorted_factor}
        cost = plan_reshard_bytes(p, op, plan)
        if cost < best_bytes:
            best, best_bytes = plan, cost
    return best


def _unread_results_stay(op: ir.Operation, plan: Plan) -> Plan:
    """`plan`, with each result that has no use wanted as it is produced."""
    plan.wanted = [produced if not any(True for _ in result.uses) else wanted
                   for result, produced, wanted in zip(op.results, plan.produced, plan.wanted)]
    return plan


# Emitted as the rule-driven default is: the same sort on per-device types
# (the sorted dim is whole on every device either way).
strategy("stablehlo.sort", plan=_sort_plan)(RULE_DRIVEN.emit_local)


def _top_k_plan(p: PartitionContext, op: ir.Operation) -> Plan | None:
    """Keep the last dim split when each shard holds at least k candidates;
    the batch dims run as the rule would run them, less the axes the last
    dim uses.  None (the rule's plan, gathering the last dim) otherwise."""
    rule = op_rules.rule_for(op)
    operand = op.operands[0]
    shape = shape_of(operand)
    source = p.shardings.get(operand)
    if rule is None or not shape or source is None:
        return None
    last = len(shape) - 1
    axes = source.dim_axes[last]
    if not axes:
        return None
    k = shape_of(op.results[0])[last]
    if k > -(-shape[last] // p.mesh.axes_size(axes)):
        return None  # a shard has fewer than k candidates: gather the dim (by rule)
    if lowest_literal(operand.type.element_type) is None:
        return None
    wanted = p.result_shardings(op)
    by_rule = layout(p, rule.operands[0], factor_axes(p, op, rule, wanted))
    batch = [tuple(a for a in by_rule.dim_axes[d] if a not in axes) for d in range(last)]
    operand_layout = Sharding(p.mesh, (*batch, axes))
    result_layout = operand_layout.with_dim_axes((*batch, ()))
    return Plan(wanted, [operand_layout], [result_layout, result_layout], rule)


@strategy("chlo.top_k", plan=_top_k_plan)
def emit_top_k(p: PartitionContext, op: ir.Operation, plan: Plan, operands):
    """Local top-k per shard, all-gather of the k candidates, final top-k.

    Why the answer is the single-device one: top-k orders by value, ties
    going to the lower index.  Every element of the global top k is in its
    own shard's top k, since a shard's order is the global one restricted to
    it.  The candidates are gathered in device order, each device's in its
    own order, so among equal values a candidate's position follows its
    global index and the final top-k breaks ties as the global one would.
    Padding of an uneven shard is set to the lowest value there is and sits
    after every real element of its shard, so it never displaces one.
    """
    operand = op.operands[0]
    shape = shape_of(operand)
    last = len(shape) - 1
    axes = plan.required[0].dim_axes[last]
    n, k = shape[last], shape_of(op.results[0])[last]
    shard_size = -(-n // p.mesh.axes_size(axes))
    local = operands[0]
    if n % p.mesh.axes_size(axes):
        local = p.emitter.mask_padding(local, last, axes, n, lowest(operand.type.element_type))

    local_shape = list(local.type.shape)
    values_type = ir.RankedTensorType.get(local_shape[:last] + [k], operand.type.element_type)
    indices_element = ir.RankedTensorType(op.results[1].type).element_type
    indices_type = ir.RankedTensorType.get(local_shape[:last] + [k], indices_element)
    values, indices = p.create(op, [local], [values_type, indices_type]).results

    # Local positions to global indices: add this shard's offset along the dim.
    offset = p.emitter.axis_index(axes)
    scalar_type = ir.RankedTensorType.get([], indices_element)
    if offset.type != scalar_type:
        offset = hlo.ConvertOp(scalar_type, offset).result
    size = hlo.ConstantOp(ir.DenseElementsAttr.get_splat(
        scalar_type, ir.IntegerAttr.get(indices_element, shard_size))).result
    offset = hlo.MulOp(offset, size).result
    indices = hlo.AddOp(indices, hlo.BroadcastInDimOp(indices_type, offset, []).result).result

    candidates = p.emitter.all_gather(values, last, axes)
    candidate_indices = p.emitter.all_gather(indices, last, axes)
    best, positions = p.create(op, [candidates], [values_type, indices_type]).results
    return [best, take_along_last(candidate_indices, positions)]


def _top_k_call_plan(p: PartitionContext, op: ir.Operation) -> Plan | None:
    """XLA's ``custom_call @TopK`` as `chlo.top_k`, when it orders largest
    first: one given a comparator of its own (``called_computations``)
    declines, since the padding's filler and the candidates' order assume
    the default one."""
    attributes = op.attributes
    if "called_computations" in attributes and len(ir.ArrayAttr(attributes["called_computations"])):
        return None
    return _top_k_plan(p, op)


# The strategy of a custom call to ``@TopK`` (`partitioning.basic` dispatches
# custom calls by target).
TOP_K_CALL = Strategy(_top_k_call_plan, emit_top_k)


def take_along_last(operand: ir.Value, positions: ir.Value) -> ir.Value:
    """``operand[..., positions[..., j]]``: a gather along the last dim, the
    other dims batching dims of both."""
    rank = len(operand.type.shape)
    batch = list(range(rank - 1))
    numbers = hlo.GatherDimensionNumbers.get(
        offset_dims=[], collapsed_slice_dims=[rank - 1], operand_batching_dims=batch,
        start_indices_batching_dims=batch, start_index_map=[rank - 1], index_vector_dim=rank)
    result_type = ir.RankedTensorType.get(list(positions.type.shape),
                                          ir.RankedTensorType(operand.type).element_type)
    return hlo.GatherOp(operand, positions, numbers, [1] * rank, indices_are_sorted=False,
                        results=[result_type]).result


def lowest_literal(element: ir.Type) -> str | None:
    """The lowest value of `element` in top-k's order, as an MLIR literal.

    Floats are ordered totally there (a NaN with the sign set is below -inf),
    so the lowest float is the all-ones bit pattern; integers take their
    minimum.  None for element types top-k is not given here.
    """
    if isinstance(element, ir.FloatType):
        return "0x" + "F" * (element.width // 4)
    if isinstance(element, ir.IntegerType):
        if element.width == 1:
            return None
        if element.is_unsigned:
            return "0"
        return str(-(1 << (element.width - 1)))
    return None


def lowest(element: ir.Type) -> ir.Value:
    """`lowest_literal` as a scalar constant."""
    attr = ir.Attribute.parse(f"dense<{lowest_literal(element)}> : tensor<{element}>")
    return hlo.ConstantOp(attr).result
