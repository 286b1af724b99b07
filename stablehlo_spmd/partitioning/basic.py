"""Strategies for values that are made, not computed: constants, iota, and
the sharding constraints that only say where a value should live.

* A splat constant is the same splat on the per-device type: no data moves.
* An iota is the iota of the per-device block plus the block's offset
  along the counting dim: nothing is built whole, nothing moves.
* Any other constant is built whole on every device and sliced to the
  result's sharding (the driver's `settle`).
* ``custom_call @Sharding`` (a constraint) moves its operand to the
  constrained sharding (`Partitioner.to`) and forwards it: this is where a
  marked reshard's all-reduce or reduce-scatter is emitted.

Custom calls share one entry in the strategy table: besides constraints
and the edges of manual regions (`partitioning.manual`), a call carrying
an ``sdy.sharding_rule`` runs by that rule, and one to a target this
project knows (XLA's ``@TopK``: `sorting.TOP_K_CALL`) takes that target's
strategy; any other runs replicated.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo as hlo

from stablehlo_spmd.module_shardings import (
    MHLO_SHARDING, is_manual_boundary, is_sharding_constraint)
from stablehlo_spmd.op_rules.control import SHARDING_RULE
from stablehlo_spmd.partitioning.manual import MANUAL_BOUNDARY
from stablehlo_spmd.partitioning.context import PartitionContext
from stablehlo_spmd.partitioning.sorting import TOP_K_CALL
from stablehlo_spmd.partitioning.strategy import RULE_DRIVEN, Plan, Strategy, strategy
from stablehlo_spmd.shapes import int_constant, local_type, shape_of
from stablehlo_spmd.sharding import Sharding


def _splat(op: ir.Operation) -> ir.DenseElementsAttr | None:
    if op.name != "stablehlo.constant":
        return None
    try:
        value = op.attributes["value"]
    except TypeError:  # complex elements, which jaxlib's bindings cannot read: built whole
        return None
    if isinstance(value, ir.DenseElementsAttr) and value.is_splat:
        return value
    return None


def _made_plan(p: PartitionContext, op: ir.Operation) -> Plan:
    target = p.result_shardings(op)[0]
    local = _splat(op) is not None or op.name == "stablehlo.iota"
    made = target.reduced() if local else Sharding.replicated(p.mesh, len(shape_of(op.results[0])))
    return Plan([target], [], [made])


@strategy("stablehlo.constant", "stablehlo.iota", plan=_made_plan, local=True)
def emit_made(p: PartitionContext, op: ir.Operation, plan: Plan, operands):
    if op.name == "stablehlo.iota":
        return [_local_iota(p, op, plan.produced[0])]
    splat = _splat(op)
    if splat is None:
        # The op itself on every device (its result is the global value),
        # cloned rather than rebuilt: a complex payload cannot be read back.
        whole = op.clone()
        if MHLO_SHARDING in whole.attributes:
            del whole.attributes[MHLO_SHARDING]
        return whole.results
    shard_type = local_type(op.results[0].type, plan.produced[0])
    value = ir.DenseElementsAttr.get_splat(shard_type, splat.get_splat_value())
    return ir.Operation.create(op.name, results=[shard_type], attributes={"value": value}).results


def _local_iota(p: PartitionContext, op: ir.Operation, layout: Sharding) -> ir.Value:
    """This device's block of the iota: the iota of the block's shape, plus,
    where the counting dim is split, the block's first index along it (the
    device's coordinate over that dim's axes times the block size).  GSPMD
    does the same; an uneven last block counts on into its padding, which
    nothing reads unmasked."""
    dim = ir.IntegerAttr(op.attributes["iota_dimension"]).value
    result_type = ir.RankedTensorType(op.results[0].type)
    shard_type = local_type(result_type, layout)
    local = p.create(op, [], [shard_type]).results[0]
    axes = layout.dim_axes[dim]
    if not axes:
        return local
    coordinate = p.emitter.axis_index(axes)
    start = hlo.MulOp(coordinate, int_constant(shard_type.shape[dim], coordinate.type)).result
    scalar_type = ir.RankedTensorType.get([], result_type.element_type)
    if start.type != scalar_type:
        start = hlo.ConvertOp(scalar_type, start).result
    return hlo.AddOp(local, hlo.BroadcastInDimOp(shard_type, start, []).result).result


def _constraint_plan(p: PartitionContext, op: ir.Operation) -> Plan:
    """The operand moved to the constrained sharding (less any partial axes
    it does not pend), so the move goes through `Partitioner.to`: a value
    made from constants is made again there, and a move made once is
    reused."""
    source = p.shardings.get(op.operands[0])
    wanted = p.result_shardings(op)[:1]
    if source is None:
        return Plan(wanted, [source], [source])
    target = wanted[0]
    if not set(target.unreduced) <= set(source.unreduced):
        target = target.reduced()
    return Plan(wanted, [target], [target])


def _emit_constraint(p: PartitionContext, op: ir.Operation, plan: Plan, operands):
    return operands[:1]


def _emit_by_sharding_rule(p: PartitionContext, op: ir.Operation, plan: Plan, operands):
    """The call on per-device types, as the rule-driven default emits it,
    less the rule: its factor sizes are the global ones."""
    results = RULE_DRIVEN.emit_local(p, op, plan, operands)
    del results[0].owner.attributes[SHARDING_RULE]
    return results


_CONSTRAINT = Strategy(_constraint_plan, _emit_constraint)
_BY_SHARDING_RULE = Strategy(RULE_DRIVEN.plan, _emit_by_sharding_rule)
_BY_TARGET = {"TopK": TOP_K_CALL}


def _custom_call_strategy(op: ir.Operation) -> Strategy | None:
    """A custom call's strategy, chosen as its op rule is
    (`op_rules.control`): a sharding constraint, the edge of a manual region
    (`partitioning.manual`), a call with an ``sdy.sharding_rule``, a target
    this project knows; None for an opaque call (it runs replicated)."""
    if is_sharding_constraint(op):
        return _CONSTRAINT
    if is_manual_boundary(op):
        return MANUAL_BOUNDARY
    if SHARDING_RULE in op.attributes:
        return _BY_SHARDING_RULE
    return _BY_TARGET.get(ir.StringAttr(op.attributes["call_target_name"]).value)


def _custom_call_plan(p: PartitionContext, op: ir.Operation) -> Plan | None:
    chosen = _custom_call_strategy(op)
    return chosen.plan(p, op) if chosen is not None else None


@strategy("stablehlo.custom_call", plan=_custom_call_plan)
def emit_custom_call(p: PartitionContext, op: ir.Operation, plan: Plan, operands):
    return _custom_call_strategy(op).emit_local(p, op, plan, operands)
