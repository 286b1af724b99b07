"""Reduces whose body leaves no partial result: reduce, gather, reduce again.

A reduce whose body is one add, max or min leaves partial results over a
split reduced dim (its rule's REDUCTION factor), combined where propagation
puts the sum.  Any other body (argmax's variadic compare-and-select, say)
cannot: its rule keeps the reduced dims whole at the op (PERMUTATION
factors of the inputs alone), and the rule-driven plan gathers the operands
along them.  Where the operands come
split along a reduced dim, XLA's partitioner instead reduces each device's
shard, all-gathers the per-device results along a new leading dim and
reduces those with the same body.  A reduce's init is its body's identity,
so the extra application of it on each device changes nothing (padding of
an uneven shard is overwritten with it first).  The plan prices both ways
by bytes and keeps the cheaper.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo as hlo

from stablehlo_spmd import op_rules
from stablehlo_spmd.op_rules import FactorKind
from stablehlo_spmd.partitioning.context import PartitionContext
from stablehlo_spmd.partitioning.strategy import (
    RULE_DRIVEN, Plan, dealt_axes, factor_axes, layout, mask_uneven_reduction,
    plan_reshard_bytes, strategy)
from stablehlo_spmd.shapes import local_type, shape_of, tensor_bytes
from stablehlo_spmd.sharding import Sharding


# The kinds of a reduced dim that leaves no partial result.
_READ_WHOLE = (FactorKind.PERMUTATION, FactorKind.NEED_REPLICATION)


def _reduce_plan(p: PartitionContext, op: ir.Operation) -> Plan | None:
    """The rule's plan, or the tree of local reduces where that moves fewer
    bytes (`Plan.detail`: the mesh axes the per-device results are gathered
    over)."""
    by_rule = RULE_DRIVEN.plan(p, op)
    tree = _tree_plan(p, op)
    if tree is None or by_rule is None:
        return by_rule
    gathered = sum(tensor_bytes(local_type(r.type, s)) for r, s in zip(op.results, tree.produced))
    tree_cost = plan_reshard_bytes(p, op, tree) + gathered * (p.mesh.axes_size(tree.detail) - 1)
    return tree if tree_cost < plan_reshard_bytes(p, op, by_rule) else by_rule


def _tree_plan(p: PartitionContext, op: ir.Operation) -> Plan | None:
    """Each reduced dim keeps the axes the first input has it split over
    (those no kept dim of the results takes); None when none is split."""
    rule = op_rules.rule_for(op)
    if rule is None or rule.reduction is not None:
        return None
    wanted = p.result_shardings(op)
    if any(s is None or s.unreduced for s in wanted):
        return None
    axes = factor_axes(p, op, rule, wanted)
    used = {a for factor_axes_ in axes for a in factor_axes_}
    tree: list[str] = []
    count = len(op.results)
    first = p.shardings.get(op.operands[0])
    for factor, dealt in dealt_axes(p, rule, [first], rule.operands[:1]):
        if rule.factor_kinds[factor] not in _READ_WHOLE or axes[factor]:
            continue
        kept = tuple(a for a in dealt if a not in used)
        if kept:
            axes[factor] = kept
            used.update(kept)
            tree.extend(kept)
    if not tree:
        return None
    required = [layout(p, dims, axes) for dims in rule.operands[:count]]
    required += [Sharding.replicated(p.mesh, 0)] * count
    produced = [layout(p, dims, axes) for dims in rule.results]
    return Plan(wanted, required, produced, rule, axes, detail=tuple(
        a for a in p.mesh.axis_names if a in tree))


@strategy("stablehlo.reduce", plan=_reduce_plan)
def emit_reduce(p: PartitionContext, op: ir.Operation, plan: Plan, operands):
    if plan.detail is None:
        return RULE_DRIVEN.emit_local(p, op, plan, operands)
    count = len(op.results)
    inputs = [mask_uneven_reduction(p, op, plan, index, local)
              for index, local in enumerate(operands[:count])]
    inits = list(operands[count:])
    types = [local_type(r.type, s) for r, s in zip(op.results, plan.produced)]
    partials = p.create(op, [*inputs, *inits], types).results
    stacked = []
    for partial in partials:
        shape = list(shape_of(partial))
        one = ir.RankedTensorType.get([1, *shape], ir.RankedTensorType(partial.type).element_type)
        stacked.append(p.emitter.all_gather(hlo.ReshapeOp(one, partial).result, 0, plan.detail))
    combined = p.create(op, [*stacked, *inits], types)
    combined.attributes["dimensions"] = ir.DenseI64ArrayAttr.get([0])
    return combined.results
