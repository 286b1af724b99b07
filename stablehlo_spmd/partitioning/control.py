"""Control flow, per device: loops, branches, calls, and the loop-indexed
slices a scanned layer stack is made of.

* ``while`` keeps its carries in their propagated shardings: operands are
  resharded to them and both regions run per device.
* ``optimization_barrier`` passes each per-device operand through as it
  is, and its results are moved to their own shardings after it.  A move
  before it could hand the barrier a form the partitioner made for the
  forward (a gathered weight, from its reshard cache), which would then
  live from the forward to the backward that ``jax.checkpoint`` wanted to
  recompute it in; after it, the move is part of the recomputation, as the
  recomputed forward's collectives are in XLA.
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
  build).  Propagation shards a copy of the callee per call site and
  merges the copies that came out the same (`call_graph`), so two sites
  whose operands are sharded differently each keep their own signature;
  the cache of outlined functions (`Partitioner.outlined`) is keyed by the
  signature, and a site whose operands still differ from its callee's
  arguments is resharded to them.
* ``dynamic_slice`` / ``dynamic_update_slice`` at a run-time offset (what
  ``jax.lax.scan`` does to a stack of layers' weights, and to its stacked
  outputs, with the loop counter): the dims they take whole stay sharded
  per device, so one layer's slice of a model-parallel stack is read
  locally each iteration instead of gathering the stack.  A slice at a
  run-time offset reads its dim whole (the offset can fall on any device);
  an update at one keeps the operand split there and each device writes
  the part of the update that falls in its shard.

This module also owns what every region-holding op here tells the driver's
`Partitioner.create`: which shardings a region's block arguments and yields
have (a while's carries; an if/case branch's full results).
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import func
from jaxlib.mlir.dialects import stablehlo as hlo

from stablehlo_spmd.module_shardings import function_values
from stablehlo_spmd.partitioning.context import PartitionContext, erase_unused
from stablehlo_spmd.partitioning.strategy import Plan, strategy
from stablehlo_spmd.shapes import int_constant, local_type, scalar_zero, shape_of, zeros
from stablehlo_spmd.sharding import Sharding


# ------------------------------------------------------------------ loops

def _while_plan(p: PartitionContext, op: ir.Operation) -> Plan:
    carries = [s if shape_of(r) is not None else None
               for r, s in zip(op.results, p.result_shardings(op))]
    return Plan(carries, carries, carries)


@strategy("stablehlo.while", plan=_while_plan)
def emit_while(p: PartitionContext, op: ir.Operation, plan: Plan, operands):
    """A loop keeps its carries in their (propagated) shardings: they are
    the block arguments of both regions and what the body yields."""
    carries = [s if s is not None else Sharding.replicated(p.mesh, 0) for s in plan.produced]
    result_types = [local_type(r.type, s) for r, s in zip(op.results, carries)]
    return p.create(op, operands, result_types,
                    regions=[(carries, None), (carries, carries)]).results


def _barrier_plan(p: PartitionContext, op: ir.Operation) -> Plan:
    wanted = [s if shape_of(r) is not None else None
              for r, s in zip(op.results, p.result_shardings(op))]
    as_is = [p.shardings.get(v) if shape_of(v) is not None else None for v in op.operands]
    return Plan(wanted, [None] * len(op.operands), as_is)


@strategy("stablehlo.optimization_barrier", plan=_barrier_plan)
def emit_barrier(p: PartitionContext, op: ir.Operation, plan: Plan, operands):
    result_types = [local_type(r.type, s) if s is not None else r.type
                    for r, s in zip(op.results, plan.produced)]
    return p.create(op, operands, result_types).results


# --------------------------------------------------------------- branches

def _branches_plan(p: PartitionContext, op: ir.Operation) -> Plan:
    predicate = op.operands[0]
    targets = p.result_shardings(op)
    yielded = [s.reduced() for s in targets]
    return Plan([t if shape_of(r) is not None else None for r, t in zip(op.results, targets)],
                [Sharding.replicated(p.mesh, len(shape_of(predicate) or ()))], yielded)


@strategy("stablehlo.if", "stablehlo.case", plan=_branches_plan)
def emit_branches(p: PartitionContext, op: ir.Operation, plan: Plan, operands):
    """Every device takes the branch the whole program takes; each branch
    yields the results per device, as full values."""
    result_types = [local_type(r.type, s) for r, s in zip(op.results, plan.produced)]
    return p.create(op, operands, result_types,
                    regions=[(None, plan.produced)] * len(op.regions)).results


# ------------------------------------------------------------------ calls

def _call_plan(p: PartitionContext, op: ir.Operation) -> Plan | None:
    """The callee's argument shardings in, its result shardings out (a
    function boundary carries full values); results then settle to the
    call's own shardings."""
    name = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
    values = list(function_values(p.callees[name]))
    arguments = [p.declared(v) if shape_of(a) is not None else None
                 for v, a in zip((v for v in values if v.kind == "argument"), op.operands)]
    results = [p.declared(v) if shape_of(r) is not None else None
               for v, r in zip((v for v in values if v.kind == "result"), op.results)]
    if any(s is None for s, a in zip(arguments, op.operands) if shape_of(a) is not None) or \
            any(s is None for s, r in zip(results, op.results) if shape_of(r) is not None):
        return None  # a bad sharding on the callee, reported by `declared`: run it as it is
    wanted = [s if shape_of(r) is not None else None
              for r, s in zip(op.results, p.result_shardings(op))]
    return Plan(wanted, arguments, results, detail=name)


@strategy("func.call", plan=_call_plan)
def emit_call(p: PartitionContext, op: ir.Operation, plan: Plan, operands):
    """Call the callee's per-device function for this site's signature."""
    name = plan.detail
    signature = (name, tuple(plan.required), tuple(plan.produced))
    symbol = p.outlined.get(signature)
    if symbol is None:
        symbol = p.outlined[signature] = _outline(p, p.callees[name], name, plan.required,
                                                  plan.produced, set(p.outlined.values()))
    result_types = [local_type(r.type, s) if s is not None else r.type
                    for r, s in zip(op.results, plan.produced)]
    return func.CallOp(result_types, symbol, operands).results


def _outline(p: PartitionContext, callee: ir.Operation, name: str, arguments, results,
             taken: set[str]) -> str:
    """Emit `callee` partitioned for one signature as a private function of
    the module; returns its symbol (the callee's own for its first
    signature, then a suffixed one no other function has or will take)."""
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
    with ir.InsertionPoint(p.module.regions[0].blocks[0]), callee.location:
        function = func.FuncOp(symbol, (arg_types, result_types), visibility="private")
    body = function.add_entry_block()
    for old, new, sharding in zip(entry.arguments, body.arguments, arguments):
        p.bind(old, new, sharding)
    with ir.InsertionPoint(body):
        for inner in list(entry.operations)[:-1]:
            p.emit(inner.operation)
        with terminator.location:
            returned = [p.to(v, s) if s is not None else p.local[v]
                        for v, s in zip(terminator.operands, results)]
            func.ReturnOp(returned)
    erase_unused(body)
    return symbol


# ------------------------------------------- slices at run-time offsets

@strategy("stablehlo.dynamic_slice")
def emit_dynamic_slice(p: PartitionContext, op: ir.Operation, plan: Plan, operands):
    """Slice locally: a dim the slice takes whole keeps its axes (its slice
    size becomes the shard's size, its start is 0, as the op clamps it
    globally); a dim sliced at a run-time offset is read whole (its factor
    needs replication), as the offset can fall on any device.

    The offsets are clamped here, as the op would clamp them: a consumer may
    cut this device's part out of the slice with a dynamic_slice of its own,
    and XLA folds two dynamic slices into one by adding their offsets, which
    is only the same slice while the first offset is in range (XLA's CPU
    compiler returned x[7] for x[clamp(7, 0, 6):][0:1] of an 8-element x)."""
    local, *starts = operands
    result_type = local_type(op.results[0].type, plan.produced[0])
    sizes = list(result_type.shape)
    for dim, (start, whole, size) in enumerate(zip(starts, local.type.shape, sizes)):
        index_type = ir.RankedTensorType(start.type)
        starts[dim] = zeros(index_type) if size == whole else hlo.ClampOp(
            zeros(index_type), start, int_constant(whole - size, index_type)).result
    return [hlo.DynamicSliceOp(local, starts, sizes).result]


@strategy("stablehlo.dynamic_update_slice")
def emit_dynamic_update_slice(p: PartitionContext, op: ir.Operation, plan: Plan, operands):
    """Update each device's shard in place, as the rule says: operand and
    result keep their split on a dim written at a run-time offset, and the
    update is read whole there.

    Each device pads its shard by the update's size on both sides of such
    a dim and writes the update at its offset made local; an update that
    misses the shard is clamped by the op itself into the padding on one
    side or the other, and slicing the padding off again leaves exactly the
    elements of the update that fall in the shard.
    """
    operand, update = op.operands[0], op.operands[1]
    local, local_update, *starts = operands
    layout = plan.required[0]
    index_type = ir.RankedTensorType(starts[0].type) if starts else None
    padded_dims = []
    for dim, (size, update_size) in enumerate(zip(shape_of(operand), shape_of(update))):
        dim_axes = layout.dim_axes[dim]
        if not dim_axes or size == update_size:
            continue  # (a dim written whole starts at 0, where the op clamps any start)
        shard = local.type.shape[dim]
        # The op clamps the global offset into [0, size - update_size] first.
        start = hlo.ClampOp(zeros(index_type), starts[dim],
                            int_constant(size - update_size, index_type)).result
        coordinate = p.emitter.axis_index(dim_axes)
        if coordinate.type != index_type:
            coordinate = hlo.ConvertOp(index_type, coordinate).result
        shard_start = hlo.MulOp(coordinate, int_constant(shard, index_type)).result
        starts[dim] = hlo.AddOp(hlo.SubtractOp(start, shard_start).result,
                                int_constant(update_size, index_type)).result
        local = _pad_dim(local, dim, update_size)
        padded_dims.append((dim, update_size, shard))
    updated = hlo.DynamicUpdateSliceOp(local, local_update, starts).result
    if padded_dims:
        shape = list(updated.type.shape)
        begin, end = [0] * len(shape), list(shape)
        for dim, margin, shard in padded_dims:
            begin[dim], end[dim] = margin, margin + shard
        updated = hlo.SliceOp(updated, begin, end, [1] * len(shape)).result
    return [updated]


def _pad_dim(value: ir.Value, dim: int, margin: int) -> ir.Value:
    """`value` with `margin` zeros before and after along `dim`."""
    rank = len(value.type.shape)
    low = [margin if d == dim else 0 for d in range(rank)]
    return hlo.PadOp(value, scalar_zero(ir.RankedTensorType(value.type).element_type), low, low,
                     [0] * rank).result
