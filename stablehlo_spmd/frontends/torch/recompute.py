"""``torch.utils.checkpoint`` in a trace: each recomputation behind an optimization barrier.

A block run under ``torch.utils.checkpoint.checkpoint`` (either
``use_reentrant`` mode, and so ``checkpoint_sequential``) keeps only its
inputs; the backward runs the block again to get the activations it needs.
The trace records that second run like any other ops, and nothing in the
program then says the two runs must stay apart: the recomputed ops read the
same values as the forward's, so common-subexpression elimination (XLA's,
or the ``cse`` this project runs after partitioning) merges them with the
forward's, and the activations are held from the forward into the backward,
as if the block had never been checkpointed.

JAX's ``jax.checkpoint`` (``prevent_cse=True``) keeps them apart with
``stablehlo.optimization_barrier``: in the backward, the values the
recomputation reads (its residuals: the block's inputs and weights) and the
cotangent it is differentiated against pass through one barrier, and the
recomputation and the block's backward read the barrier's results.  The
recomputed ops then read values the forward's ops do not, so nothing
merges, and they wait for the cotangent, so they run in the backward.
PyTorch/XLA's ``torch_xla.utils.checkpoint`` puts the block's inputs and
incoming gradients through ``xm.optimization_barrier_`` for the same reason.

Here the user's own ``checkpoint`` gets that form, in two steps:

1. `recomputations_marked`, open while the first trace runs, wraps the
   function each recomputation calls (the non-reentrant mode's
   ``_CheckpointFrame.recompute_fn``, which its saved-tensor unpack hook
   runs; the reentrant ``CheckpointFunction``'s ``run_function``, which its
   ``backward`` runs), so each node the tracer makes while it runs carries
   that recomputation's number in ``node.meta["custom"]``.  Both patches
   are undone when it closes, also on errors.
2. `fence_recomputations` rewrites the first graph: before each
   recomputation's first node, one ``stablehlo_spmd::optimization_barrier``
   (an identity on a list of tensors) of what the recomputation reads from
   outside itself (the block's saved inputs, the parameters, a tensor the
   block reads from its closure) and of what the backward's ops that read
   the recomputed values (directly, or through ops of those values and
   parameters alone, such as a weight's transpose) take from before it: the
   gradient arriving at the block.  The recomputation and those ops read
   the barrier's results instead.

A value written in place there (batch norm's running statistics, which
eager torch updates again when it recomputes, or a buffer written through
a view) stays out of the barrier: the write must reach the value itself.
Functionalization keeps the barrier as it is, and lowering makes it
``jax.lax.optimization_barrier``.  A program without a checkpointed block
is traced and lowered as before.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
from typing import Callable, Iterator

import torch
import torch.fx

_REGION = "stablehlo_spmd_recomputation"   # key in node.meta["custom"]: the numbers of its runs


@torch.library.custom_op("stablehlo_spmd::optimization_barrier", mutates_args=())
def optimization_barrier(values: list[torch.Tensor]) -> list[torch.Tensor]:
    """`values` themselves; in the program, XLA's optimization barrier: nothing is moved
    across it, and no op that reads its results is merged with one that reads its operands."""
    return [value.clone() for value in values]


@optimization_barrier.register_fake
def _(values: list[torch.Tensor]) -> list[torch.Tensor]:
    return [torch.empty_like(value) for value in values]


@contextlib.contextmanager
def recomputations_marked() -> Iterator[None]:
    """While open, each run of a checkpointed block's recomputation marks the nodes the
    tracer makes with its own number (see the module docstring)."""
    from torch.utils import checkpoint as torch_checkpoint

    numbers = itertools.count()

    def marked(recompute: Callable) -> Callable:
        def run(*args, **kwargs):
            with _marking(next(numbers)):
                return recompute(*args, **kwargs)
        return run

    replaced = {}
    frame = getattr(torch_checkpoint, "_CheckpointFrame", None)
    if frame is not None:
        class MarkedFrame(frame):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                self.recompute_fn = marked(self.recompute_fn)

        replaced["_CheckpointFrame"] = (frame, MarkedFrame)
    function = getattr(torch_checkpoint, "CheckpointFunction", None)
    if function is not None:
        class MarkedFunction(function):
            @staticmethod
            def backward(ctx, *gradients):
                ctx.run_function = marked(ctx.run_function)
                return function.backward(ctx, *gradients)

        replaced["CheckpointFunction"] = (function, MarkedFunction)
    for name, (_, patched) in replaced.items():
        setattr(torch_checkpoint, name, patched)
    try:
        yield
    finally:
        for name, (original, _) in replaced.items():
            setattr(torch_checkpoint, name, original)


@contextlib.contextmanager
def _marking(number: int) -> Iterator[None]:
    """Nodes made while open carry `number` after their enclosing runs' numbers."""
    from torch.fx import traceback as fx_traceback

    meta = fx_traceback.current_meta
    had, outer = "custom" in meta, meta.get("custom")
    inherited = dict(outer or {})
    inherited[_REGION] = (*inherited.get(_REGION, ()), number)
    meta["custom"] = inherited
    try:
        yield
    finally:
        # preserve_node_meta replaces the dict it is given back with an equal copy.
        meta = fx_traceback.current_meta
        if had:
            meta["custom"] = outer
        else:
            meta.pop("custom", None)


def fence_recomputations(graph_module: torch.fx.GraphModule) -> int:
    """Put each marked recomputation in `graph_module` behind its own barrier; returns
    how many barriers it added."""
    graph = graph_module.graph
    regions: dict[int, list[torch.fx.Node]] = {}
    for node in graph.nodes:
        for number in (node.meta.get("custom") or {}).get(_REGION, ()):
            regions.setdefault(number, []).append(node)
    added = sum(_fence(graph, members) for _, members in sorted(regions.items()))
    if added:
        graph.lint()
        graph_module.recompile()
    return added


def _fence(graph: torch.fx.Graph, members: list[torch.fx.Node]) -> int:
    """One barrier before the recomputation `members` (its nodes, in order); returns 1,
    or 0 where it reads nothing a barrier could take."""
    inside = set(members)
    nodes = list(graph.nodes)
    position = {node: i for i, node in enumerate(nodes)}
    first = members[0]
    # The backward's ops that read what the recomputation made, directly or through ops
    # of those values and arguments alone (the transpose of a recomputed weight's view).
    derived = set(inside)
    readers = []
    for node in nodes[position[first]:]:
        if node in inside or node.op == "output" or not any(
                value in derived for value in node.all_input_nodes):
            continue
        if all(value in derived or value.op in ("placeholder", "get_attr")
               for value in node.all_input_nodes):
            derived.add(node)
        readers.append(node)
    written = _written(members + readers, inside)

    def fenceable(value: torch.fx.Node) -> bool:
        return (value not in inside and value not in written and value.op != "get_attr"
                and position[value] < position[first]
                and isinstance(value.meta.get("val"), torch.Tensor))

    read = [v for node in members for v in node.all_input_nodes if fenceable(v)]
    # What the readers take from before the recomputation, other than the program's
    # arguments and what the recomputation reads: the gradients arriving at the block.
    gradients = [v for reader in readers for v in reader.all_input_nodes
                 if fenceable(v) and v.op != "placeholder"]
    values = list(dict.fromkeys(read + gradients))
    if not values:
        return 0
    with graph.inserting_before(first):
        barrier = graph.call_function(torch.ops.stablehlo_spmd.optimization_barrier.default,
                                      ([*values],))
        fenced = [graph.call_function(operator.getitem, (barrier, index))
                  for index in range(len(values))]
    # Located where the recomputation is, for the program's locations.
    for node in (barrier, *fenced):
        node.meta.update({key: first.meta[key] for key in ("stack_trace", "nn_module_stack")
                          if key in first.meta})
    barrier.meta["val"] = [value.meta["val"] for value in values]
    for value, node in zip(values, fenced):
        node.meta["val"] = value.meta["val"]
    for node in dict.fromkeys(members + readers):
        for value, replacement in zip(values, fenced):
            node.replace_input_with(value, replacement)
    return 1


def _written(nodes: list[torch.fx.Node], inside: set) -> set[torch.fx.Node]:
    """The values from outside the recomputation that one of `nodes` writes in place,
    directly or through a view made inside the recomputation."""
    written = set()
    for node in nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        for index, argument in enumerate(target._schema.arguments):
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            given = node.args[index] if index < len(node.args) else node.kwargs.get(argument.name)
            for value in given if isinstance(given, (list, tuple)) else [given]:
                if isinstance(value, torch.fx.Node):
                    written.add(_base(value, inside))
    return written


def _base(value: torch.fx.Node, inside: set) -> torch.fx.Node:
    """The value a view made inside the recomputation looks into."""
    while (value in inside and value.op == "call_function"
           and isinstance(value.target, torch._ops.OpOverload)
           and value.target._schema.returns
           and value.target._schema.returns[0].alias_info is not None
           and not value.target._schema.returns[0].alias_info.is_write
           and value.args and isinstance(value.args[0], torch.fx.Node)):
        value = value.args[0]
    return value
