"""Control flow, per device: loops keep their carries' shardings, calls are
partitioned at each call site.

Calls are inlined as they are partitioned (the callee's body is emitted at
each call site): the upstream ``inline`` pass does not inline StableHLO in
jaxlib's build.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from stablehlo_spmd.module_shardings import function_values
from stablehlo_spmd.partitioning.partitioner import Partitioner, handles, local_type, shape_of


@handles("func.call")
def emit_call(p: Partitioner, op: ir.Operation) -> None:
    """Partition the callee's body in place of the call (inlining as we go).

    Propagation gave the callee one signature for every call site, so each
    site reshards its operands to the callee's argument shardings.
    """
    callee = p.callees[ir.FlatSymbolRefAttr(op.attributes["callee"]).value]
    values = list(function_values(callee))
    entry = callee.regions[0].blocks[0]
    arguments = [v for v in values if v.kind == "argument"]
    for old_arg, operand, value in zip(entry.arguments, op.operands, arguments):
        sharding = p.declared(value) if shape_of(operand) is not None else None
        if sharding is None:
            p.local[old_arg] = p.local[operand]
            continue
        p.bind(old_arg, p.to(operand, sharding), sharding)
    for inner in list(entry.operations)[:-1]:
        p.emit(inner.operation)
    terminator = entry.operations[len(entry.operations) - 1]
    for result, returned in zip(op.results, terminator.operands):
        p.local[result] = p.local[returned]
        if returned in p.shardings:
            p.shardings[result] = p.shardings[returned]
    for result, target in zip(op.results, p.result_shardings(op)):
        if shape_of(result) is not None and p.shardings.get(result) != target:
            p.settle(result, target)


@handles("stablehlo.while")
def emit_while(p: Partitioner, op: ir.Operation) -> None:
    """A loop keeps its carries in their (propagated) shardings: operands
    are resharded to them, the body runs per device, results stay so."""
    carries = p.result_shardings(op)
    operands = [p.to(v, s) if shape_of(v) is not None else p.local[v]
                for v, s in zip(op.operands, carries)]
    result_types = [local_type(r.type, s) for r, s in zip(op.results, carries)]
    new_op = p.create(op, operands, result_types)
    for old, new, sharding in zip(op.results, new_op.results, carries):
        p.bind(old, new, sharding)
