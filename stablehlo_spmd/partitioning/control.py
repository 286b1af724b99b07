"""Control flow, per device: loops, branches, calls, and the loop-indexed
slices a scanned layer stack is made of.

* ``while`` keeps its carries in their propagated shardings: operands are
  resharded to them and both regions run per device.
* ``if`` / ``case`` read a replicated predicate (every device must take the
  same branch, or the collectives inside the branches would not match up),
  and every branch yields the op's results in their shardings, as full
  values; results that propagation left partial are settled after the op.
* ``func.call`` becomes a call of a per-device private function, one per
  distinct (callee, argument shardings, result shardings) signature, made
  the first time a call site needs it.  XLA (PJRT CPU, Shardy export)
  compiles such calls inside ``sdy.manual_computation`` as it does the
  nested ``jit`` calls of a ``shard_map`` body, so each site keeps one call
  instead of a copy of the callee's body (the upstream ``inline`` pass could
  not have done that copy anyway: it does not inline StableHLO in jaxlib's
  build).  Propagation ties every call site to the callee's arguments
  (`op_rules.control`), so today a callee has exactly one signature and a
  site whose operands are sharded otherwise is resharded to it.  Letting
  sites keep their own shardings needs propagation to solve the callee once
  per site (Shardy's named computations); the cache here is keyed by the
  signature so that nothing changes in this module when it does.
* ``dynamic_slice`` / ``dynamic_update_slice`` at a run-time offset (what
  ``jax.lax.scan`` does to a stack of layers' weights, and to its stacked
  outputs, with the loop counter): the dims they take whole stay sharded
  per device and only the offset dims need the whole operand, so one
  layer's slice of a model-parallel stack is read locally each iteration
  instead of gathering the stack.
"""

from __future__ import annotations

import dataclasses
import weakref

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import func
from jaxlib.mlir.dialects import stablehlo as hlo

from stablehlo_spmd import op_rules
from stablehlo_spmd.module_shardings import function_values
from stablehlo_spmd.partitioning.partitioner import Partitioner, handles, local_type, shape_of
from stablehlo_spmd.sharding import Sharding

# Per-device functions already made, per partitioning: signature -> symbol.
_OUTLINED: "weakref.WeakKeyDictionary[Partitioner, dict[tuple, str]]" = weakref.WeakKeyDictionary()


def _full(sharding: Sharding) -> Sharding:
    """`sharding` with no pending partial sum (what crosses a region boundary)."""
    return dataclasses.replace(sharding, unreduced=(), reduction="sum")


# ------------------------------------------------------------------ loops

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


# --------------------------------------------------------------- branches

@handles("stablehlo.if", "stablehlo.case")
def emit_branches(p: Partitioner, op: ir.Operation) -> None:
    """Every device takes the branch the whole program takes; each branch
    (cloned by `Partitioner.create`) yields the results per device."""
    predicate = op.operands[0]
    predicate = p.to(predicate, Sharding.replicated(p.mesh, len(shape_of(predicate) or ())))
    targets = p.result_shardings(op)
    yielded = [_full(s) for s in targets]
    new_op = p.create(op, [predicate], [local_type(r.type, s) for r, s in zip(op.results, yielded)])
    for old, new, sharding, target in zip(op.results, new_op.results, yielded, targets):
        p.bind(old, new, sharding)
        if shape_of(old) is not None:
            p.settle(old, target)


# ------------------------------------------------------------------ calls

@handles("func.call")
def emit_call(p: Partitioner, op: ir.Operation) -> bool | None:
    """Call the callee's per-device function for this site's signature.

    The operands are resharded to the callee's argument shardings (a
    function boundary carries full values) and the results come back in
    the callee's result shardings, then settle to the call's own.
    """
    name = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
    callee = p.callees[name]
    values = list(function_values(callee))
    arguments = [p.declared(v) if shape_of(a) is not None else None
                 for v, a in zip((v for v in values if v.kind == "argument"), op.operands)]
    results = [p.declared(v) if shape_of(r) is not None else None
               for v, r in zip((v for v in values if v.kind == "result"), op.results)]
    if any(s is None for s, a in zip(arguments, op.operands) if shape_of(a) is not None) or \
            any(s is None for s, r in zip(results, op.results) if shape_of(r) is not None):
        return False  # a bad sharding on the callee, reported by `declared`: run it as it is
    operands = [p.to(a, s) if s is not None else p.local[a] for a, s in zip(op.operands, arguments)]
    signature = (name, tuple(arguments), tuple(results))
    outlined = _OUTLINED.setdefault(p, {})
    symbol = outlined.get(signature)
    if symbol is None:
        symbol = outlined[signature] = _outline(p, callee, name, arguments, results,
                                                set(outlined.values()))
    result_types = [local_type(r.type, s) if s is not None else r.type
                    for r, s in zip(op.results, results)]
    call = func.CallOp(result_types, symbol, operands)
    for old, new, sharding, target in zip(op.results, call.results, results, p.result_shardings(op)):
        if sharding is None:
            p.local[old] = new
            continue
        p.bind(old, new, sharding)
        p.settle(old, target)


def _outline(p: Partitioner, callee: ir.Operation, name: str, arguments, results,
             taken: set[str]) -> str:
    """Emit `callee` partitioned for one signature as a private function of
    the module being built; returns its symbol (the callee's own for its
    first signature, then a suffixed one no other function has or will take)."""
    symbol, suffix = name, 0
    while symbol in taken or (symbol != name and symbol in p.callees):
        suffix += 1
        symbol = f"{name}_{suffix}"
    entry = callee.regions[0].blocks[0]
    arg_types = [local_type(a.type, s) if s is not None else a.type
                 for a, s in zip(entry.arguments, arguments)]
    terminator = entry.operations[len(entry.operations) - 1]
    result_types = [local_type(v.type, s) if s is not None else v.type
                    for v, s in zip(terminator.operands, results)]
    with ir.InsertionPoint(_module_block()), callee.location:
        function = func.FuncOp(symbol, (arg_types, result_types), visibility="private")
    body = function.add_entry_block()
    for old, new, sharding in zip(entry.arguments, body.arguments, arguments):
        if sharding is None:
            p.local[old] = new
        else:
            p.bind(old, new, sharding)
    with ir.InsertionPoint(body):
        for inner in list(entry.operations)[:-1]:
            p.emit(inner.operation)
        with terminator.location:
            returned = [p.to(v, s) if s is not None else p.local[v]
                        for v, s in zip(terminator.operands, results)]
            func.ReturnOp(returned)
    return symbol


def _module_block() -> ir.Block:
    """The body of the module the current insertion point is in (the
    partitioner's new module, whose functions replace the old ones)."""
    operation = ir.InsertionPoint.current.block.owner.operation
    while operation.name != "builtin.module":
        operation = operation.parent.operation
    return operation.regions[0].blocks[0]


# ------------------------------------------- slices at run-time offsets

@handles("stablehlo.dynamic_slice")
def emit_dynamic_slice(p: Partitioner, op: ir.Operation) -> bool | None:
    """Slice locally: a dim the slice takes whole keeps its axes (its slice
    size becomes the shard's size, its start index is clamped to 0 as it is
    globally); a dim sliced at a run-time offset is read whole (its factor
    needs replication), as the offset can fall on any device."""
    rule = op_rules.rule_for(op)
    if rule is None:
        return False
    wanted = p.result_shardings(op)
    axes = p.factor_axes(op, rule, wanted)
    required, produced = p.layouts(op, rule, axes, wanted)
    operand = op.operands[0]
    p.warn_if_dims_gathered(op, rule, operand, rule.operands[0], required[0])
    local_operand = p.to(operand, required[0])
    indices = [p.to(v, layout) for v, layout in zip(op.operands[1:], required[1:])]
    result_type = local_type(op.results[0].type, produced[0])
    sliced = hlo.DynamicSliceOp(local_operand, indices, list(result_type.shape)).result
    p.bind(op.results[0], sliced, produced[0])
    p.settle(op.results[0], wanted[0])
    return True


@handles("stablehlo.dynamic_update_slice")
def emit_dynamic_update_slice(p: Partitioner, op: ir.Operation) -> bool | None:
    """Update locally: where the update covers a dim whole, operand, update
    and result keep its axes; where it is written at a run-time offset,
    that dim of the operand is held whole (each device could own the part
    the offset falls on) and the update is read whole there."""
    rule = op_rules.rule_for(op)
    if rule is None:
        return False
    operand, update = op.operands[0], op.operands[1]
    wanted = p.result_shardings(op)
    axes = p.factor_axes(op, rule, wanted)
    for dim, (size, update_size) in enumerate(zip(shape_of(operand), shape_of(update))):
        if size != update_size:
            for factor in rule.operands[0][dim]:
                axes[factor] = ()
    required, produced = p.layouts(op, rule, axes, wanted)
    for value, dims, layout in zip((operand, update), rule.operands, required):
        p.warn_if_dims_gathered(op, rule, value, dims, layout)
    operands = [p.to(v, layout) for v, layout in zip(op.operands, required)]
    result_type = local_type(op.results[0].type, produced[0])
    new_op = p.create(op, operands, [result_type])
    p.bind(op.results[0], new_op.results[0], produced[0])
    p.settle(op.results[0], wanted[0])
    return True
