"""Strategies for values that are made, not computed: constants, iota, and
the sharding constraints that only say where a value should live.

* A splat constant is the same splat on the per-device type: no data moves.
* Any other constant, and iota, are built whole on every device and sliced
  to the result's sharding (the driver's `settle`).
* ``custom_call @Sharding`` (a constraint) forwards its operand as it is
  and lets `settle` move it to the constrained sharding: this is where a
  marked reshard's all-reduce or reduce-scatter is emitted.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from stablehlo_spmd.module_shardings import is_sharding_constraint
from stablehlo_spmd.partitioning.partitioner import Partitioner
from stablehlo_spmd.partitioning.strategy import Plan, strategy
from stablehlo_spmd.shapes import local_type, shape_of
from stablehlo_spmd.sharding import Sharding


def _splat(op: ir.Operation) -> ir.DenseElementsAttr | None:
    if op.name != "stablehlo.constant":
        return None
    value = op.attributes["value"]
    if isinstance(value, ir.DenseElementsAttr) and value.is_splat:
        return value
    return None


def _made_plan(p: Partitioner, op: ir.Operation) -> Plan:
    target = p.result_shardings(op)[0]
    made = target if _splat(op) is not None else Sharding.replicated(
        p.mesh, len(shape_of(op.results[0])))
    return Plan([target], [], [made])


@strategy("stablehlo.constant", "stablehlo.iota", plan=_made_plan)
def emit_made(p: Partitioner, op: ir.Operation, plan: Plan, operands):
    splat = _splat(op)
    if splat is None:
        return p.create(op, [], [op.results[0].type]).results
    shard_type = local_type(op.results[0].type, plan.produced[0])
    value = ir.DenseElementsAttr.get_splat(shard_type, splat.get_splat_value())
    return ir.Operation.create(op.name, results=[shard_type], attributes={"value": value}).results


def _constraint_plan(p: Partitioner, op: ir.Operation) -> Plan | None:
    if not is_sharding_constraint(op):
        return None  # another custom call: the default strategies
    source = p.shardings.get(op.operands[0])
    return Plan(p.result_shardings(op)[:1], [source], [source])


@strategy("stablehlo.custom_call", plan=_constraint_plan)
def emit_constraint(p: Partitioner, op: ir.Operation, plan: Plan, operands):
    return operands[:1]
