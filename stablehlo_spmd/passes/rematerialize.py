"""``spmd-rematerialize``: recompute activations in the backward, as ``jax.checkpoint`` does.

`rematerialize` writes a plan's recomputations (`auto_sharding.remat`) into
the module: each recomputed segment's ops are cloned, in program order, just
before the first backward op that reads a value they free; the backward's
reads of those values then read the clones.  The clones read what they need
from outside the segment (its input, its weights, the results a ``minimal``
policy keeps) through one ``stablehlo.optimization_barrier``, with the
values the backward has made by then and that first reader reads (the
gradient arriving at the layer): ``jax.checkpoint``'s form (prevent_cse),
so that no common-subexpression elimination merges a clone with the
original, and no scheduler that keeps the barrier runs it before the
gradient it waits for.  A clone keeps its original's attributes, its
sharding and its contraction's factor axes included; the barrier gets its
shardings from propagation, which ties each of its results to its operand.

``spmd-auto-shard`` calls it with the recomputations its search chose.  As a
pass of its own it recomputes every segment it finds (`policy` ``full`` or
``minimal``), as ``jax.checkpoint`` on every layer would.

Options:
  policy   ``full`` (recompute each segment's residuals from its inputs) or
           ``minimal`` (keep the projections' results and recompute the rest)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import ClassVar

from jaxlib.mlir import ir

from stablehlo_spmd import diagnostics
from stablehlo_spmd.auto_sharding.remat import POLICIES, Recomputation, find_layers
from stablehlo_spmd.errors import ShardingError
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.module_shardings import checked_mesh, import_shardy, untuple_custom_calls
from stablehlo_spmd.passes import ModulePass, register_pass
from stablehlo_spmd.passes.propagate import ModuleGraph

BARRIER = "stablehlo.optimization_barrier"


@register_pass
@dataclasses.dataclass(frozen=True)
class RematerializePass(ModulePass):
    name: ClassVar[str] = "spmd-rematerialize"
    description: ClassVar[str] = ("recompute every layer's activations in the backward, as "
                                  "jax.checkpoint does")

    policy: str = "full"

    def run(self, module: ir.Operation) -> None:
        if self.policy not in POLICIES:
            diagnostics.error(module.location, f"spmd-rematerialize: unknown policy "
                              f"{self.policy!r} (expected {' or '.join(POLICIES)})")
            return
        try:
            import_shardy(module, lower_manual=True)
            untuple_custom_calls(module)
            mesh = checked_mesh(module) or Mesh((0,), (1,), ("_",))
        except ShardingError as error:
            diagnostics.error(error.location or module.location, error.message)
            return
        graph = ModuleGraph.build(module, mesh)
        if graph is None:
            return
        nbytes = [math.prod(shape) * size
                  for shape, size in zip(graph.shapes, graph.element_bytes)]
        arguments = {index for _, index in graph.entry_values()[0]}
        layers = find_layers(graph.nodes, graph.shapes, nbytes, arguments)
        if layers is None:
            return
        found = [layers.recomputation(graph.nodes, i, self.policy)
                 for i in range(len(layers.segments))]
        rematerialize(graph, [r for r in found if r is not None])


def rematerialize(graph: ModuleGraph, recomputations: Sequence[Recomputation]) -> None:
    """Write `recomputations` (over `graph`'s node and value numbers) into the
    module `graph` was read from (see the module docstring)."""
    if not recomputations:
        return
    values = {index: value for value, index in graph.ids.items()}
    made_at = {}
    for position, node in enumerate(graph.nodes):
        for index in node.results:
            made_at.setdefault(index, position)
    # Program order, taken once: the ops inserted below are the barriers and
    # clones, which read no value a recomputation frees.
    order = {op.operation: i for function in graph.functions.values()
             for i, op in enumerate(function.regions[0].blocks[0].operations)}
    # The last recomputation first: each is placed before an op of the
    # backward, and an earlier layer's backward comes later.
    for recomputation in sorted(recomputations, key=lambda r: -r.at):
        _clone_before(graph, values, made_at, order, recomputation)


def _clone_before(graph: ModuleGraph, values: dict[int, ir.Value], made_at: dict[int, int],
                  order: dict[ir.Operation, int], recomputation: Recomputation) -> None:
    reader = next(op for op in graph.node_ops[recomputation.at:] if op is not None).operation
    freed = {values[v] for v in recomputation.freed}
    held = [values[v] for v in recomputation.held]
    # The gradient reaching the layer: what the first backward reader reads
    # that the backward made.
    waited = [v for v in _unique(reader.operands) if v not in freed and v not in held
              and made_at.get(graph.ids.get(v, -1), -1) >= recomputation.boundary]
    passed = held + waited
    with reader.location, ir.InsertionPoint(reader):
        barrier = ir.Operation.create(BARRIER, results=[v.type for v in passed],
                                      operands=passed)
        renamed = dict(zip(passed, barrier.results))
        for op in _ops(graph, recomputation.nodes):
            clone = op.clone().operation
            for position, operand in enumerate(op.operands):
                if operand in renamed:
                    clone.operands[position] = renamed[operand]
            renamed.update(zip(op.results, clone.results))
    at = order[_top(reader)]
    for value in freed | set(waited):
        copy = renamed[value]
        for use in list(value.uses):
            owner = use.owner.operation
            if owner == barrier or _inside(owner, barrier):
                continue
            if order.get(_top(owner), -1) >= at:
                owner.operands[use.operand_number] = copy


def _ops(graph: ModuleGraph, nodes: Sequence[int]) -> list[ir.Operation]:
    """The distinct ops of `nodes`, in program order."""
    seen, ops = set(), []
    for index in nodes:
        op = graph.node_ops[index]
        if op is not None and op not in seen:
            seen.add(op)
            ops.append(op.operation)
    return ops


def _unique(items) -> list:
    found = []
    for item in items:
        if item not in found:
            found.append(item)
    return found


def _top(op: ir.Operation) -> ir.Operation:
    """`op`'s ancestor in its function's body block (`op` itself there)."""
    while op.parent is not None and op.parent.name != "func.func":
        op = op.parent.operation
    return op.operation


def _inside(op: ir.Operation, ancestor: ir.Operation) -> bool:
    while op is not None:
        if op == ancestor:
            return True
        op = op.parent.operation if op.parent is not None else None
    return False
