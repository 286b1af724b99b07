"""Capturing a torch function, autograd and optimizer included, as one functional aten graph.

Two traces, as ``torch.export``'s non-strict mode and AOTAutograd do it:

1. ``make_fx`` runs the user's function on fake tensors with the state
   swapped in (`world.World.bound`).  ``loss.backward()`` runs torch's own
   autograd engine, whose backward ops the tracer records like any other, and
   ``optimizer.step()`` records the optimizer's in-place updates.  The trace
   runs with ``torch.compiler``'s compiling flag set, as ``torch.export``
   does, so library code takes its traceable paths (the optimizers keep the
   step count a tensor instead of reading it as a Python number).  The
   recomputation a ``torch.utils.checkpoint`` block runs in the backward is
   then put behind an optimization barrier (`recompute`), so that it stays
   a recomputation.
2. A second ``make_fx``, of ``torch.func.functionalize`` over the first
   graph, rewrites the in-place updates as new values.  Functionalization
   cannot wrap the first trace itself: ``backward()`` refuses to run inside
   a functorch transform, and the first graph no longer calls it.

Each output of the graph is then a new value: the function's own outputs,
followed by every tensor of the state as the function left it.  Nodes keep
the module path and source line that made them, for error messages.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from typing import Any, Callable

import torch
import torch.fx
import torch.utils._pytree as pytree

from stablehlo_spmd.errors import SpmdError
from stablehlo_spmd.frontends.torch import marks, recompute
from stablehlo_spmd.frontends.torch.world import Slot, World


@dataclasses.dataclass
class Captured:
    """A traced function: its functional graph and what its inputs and outputs are.

    The graph's placeholders are `state_in` (in order) then the argument
    tensors; its outputs are the function's output tensors (`output_spec`
    rebuilds the structure, `output_dtypes` are torch's dtypes), then
    `state_out`: the state's tensors the function made anew (updated
    parameters, new optimizer state), not those it left alone.  `state_after`
    lists every tensor of the state that exists after the call (a gradient
    ``zero_grad`` set to None does not).
    """

    graph: torch.fx.GraphModule
    state_in: list[Slot]
    arguments: list[torch.Tensor]
    state_out: list[Slot]
    state_after: list[Slot]
    output_spec: Any
    output_dtypes: list[torch.dtype]
    non_tensor_state: dict[str, dict[str, Any]]
    argument_marks: dict[int, marks.Mark]
    meshes: list          # the meshes of the marks the function made while traced


def capture(fn: Callable, world: World, args: tuple) -> Captured:
    """Trace `fn(*args)` with `world`'s state as inputs."""
    from torch.fx.experimental.proxy_tensor import make_fx

    host = world.host_state()
    state_in = list(host)
    leaves, args_spec = pytree.tree_flatten(args)
    tensor_positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    arguments = [leaves[i] for i in tensor_positions]
    examples = [_example(slot, value) for slot, value in host.items()]
    examples += [a.detach() for a in arguments]
    traced_outputs: dict[str, Any] = {}
    argument_marks: dict[int, marks.Mark] = {}

    def step(*flat):
        tensors = dict(zip(state_in, flat[:len(state_in)]))
        call_leaves = list(leaves)
        for position, tensor in zip(tensor_positions, flat[len(state_in):]):
            call_leaves[position] = tensor
        recorders = {id(t): _recorder(argument_marks, i)
                     for i, t in enumerate(flat[len(state_in):])}
        with world.bound(tensors) as read_back, marks.tracing(recorders) as meshes:
            result = fn(*pytree.tree_unflatten(call_leaves, args_spec))
            after, traced_outputs["non_tensor_state"] = read_back()
        traced_outputs["meshes"] = meshes
        out_leaves, out_spec = pytree.tree_flatten(result)
        for leaf in out_leaves:
            if not isinstance(leaf, torch.Tensor):
                raise SpmdError(
                    f"the function returns a value of type {type(leaf).__name__}, and a compiled "
                    "function returns tensors only: return the tensors it needs (a transformers "
                    "model's `.logits`, or the model built with use_cache=False, which "
                    "returns no cache)")
        traced_outputs["spec"] = out_spec
        traced_outputs["dtypes"] = [leaf.dtype for leaf in out_leaves]
        traced_outputs["state_out"] = list(after)
        return [*out_leaves, *after.values()]

    with _traceable_library_paths(), _module_paths(world), recompute.recomputations_marked():
        # Tensors the function reads from elsewhere than the state (a position
        # table, a mask) are the program's constants: real tensors, allowed in.
        first = _make_fx_reporting(make_fx(step, decomposition_table=_core_aten(),
                                           tracing_mode="fake", record_stack_traces=True,
                                           _allow_non_fake_inputs=True),
                                   examples)
    _refuse_captured_parameters(first)
    recompute.fence_recomputations(first)
    plain = [e.detach() for e in examples]
    with torch.fx.traceback.preserve_node_meta():
        functional = make_fx(torch.func.functionalize(_interpreted(first), remove="mutations"),
                             tracing_mode="fake")(*plain)
    # Values nothing reads (the empty tensors some decompositions make) would only be
    # constants of the program.
    functional.graph.eliminate_dead_code()
    functional.recompile()
    state_out = _changed_state(functional, state_in, traced_outputs["state_out"],
                               len(traced_outputs["dtypes"]))
    return Captured(functional, state_in, arguments, state_out, traced_outputs["state_out"],
                    traced_outputs["spec"], traced_outputs["dtypes"],
                    traced_outputs["non_tensor_state"], argument_marks, traced_outputs["meshes"])


def _changed_state(graph: torch.fx.GraphModule, state_in: list[Slot], state_out: list[Slot],
                   output_count: int) -> list[Slot]:
    """Drop from the graph's outputs each tensor of the state the function left as it
    found it (a forward's parameters): it stays where it is, and is not donated."""
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    given = {slot: placeholders[i] for i, slot in enumerate(state_in)}
    output = next(n for n in graph.graph.nodes if n.op == "output")
    values = list(output.args[0])
    kept_values, kept_slots = values[:output_count], []
    for slot, value in zip(state_out, values[output_count:]):
        if given.get(slot) is not value:
            kept_values.append(value)
            kept_slots.append(slot)
    output.args = (kept_values,)
    graph.recompile()
    return kept_slots


def _core_aten() -> dict:
    """torch.export's decompositions into core aten, and those of the ops that update
    an argument in place but have no functional twin for functionalization to
    use: batch norm's running statistics.  ``native_batch_norm``'s schema does
    not even say it writes them."""
    from torch._decomp import core_aten_decompositions, decomposition_table

    table = dict(core_aten_decompositions())
    for op, decomposition in decomposition_table.items():
        if isinstance(op, torch._ops.OpOverload) and op not in table and (
                op is torch.ops.aten.native_batch_norm.default
                or (op._schema.is_mutable and not op._schema.name.endswith("_")
                    and "out" not in op._overloadname)):
            table[op] = decomposition
    return table


def _example(slot: Slot, value: Any) -> torch.Tensor:
    """The tracer's input for one slot: parameters require grad, so backward fills their .grad."""
    if slot.kind == "lr":
        # A tensor that requires grad takes the optimizers' tensor-lr path (SGD's
        # ``addcmul_(grad, lr)``) instead of reading lr as a Python number.
        return torch.tensor(value, dtype=torch.float32, requires_grad=True)
    tensor = value.detach()
    return tensor.requires_grad_(True) if slot.kind == "params" else tensor


def _recorder(found: dict[int, marks.Mark], position: int):
    def record(mark: marks.Mark) -> None:
        found[position] = mark
    return record


class _traceable_library_paths:
    """``torch.compiler.is_compiling()`` is True for the trace, as under ``torch.export``;
    attention and recurrent layers take their plain-op paths, not the fused CPU
    kernels (``_scaled_dot_product_flash_attention_for_cpu`` and its backward,
    ``mkldnn_rnn_layer``), which are single ops nothing lowers."""

    def __enter__(self):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        self._saved = torch.compiler._is_compiling_flag
        torch.compiler._is_compiling_flag = True
        self._contexts = [sdpa_kernel([SDPBackend.MATH]),
                          torch.backends.mkldnn.flags(enabled=False)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # mkldnn's flags warn about Intel GPUs' TF32
            for context in self._contexts:
                context.__enter__()

    def __exit__(self, *exc):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for context in reversed(self._contexts):
                context.__exit__(*exc)
        torch.compiler._is_compiling_flag = self._saved


@contextlib.contextmanager
def _module_paths(world: World):
    """Record on each node the path of the module whose ``forward`` made it, as
    ``nn_module_stack`` (``torch.export``'s key): global forward hooks keep
    the path of the innermost running module in the tracer's current node meta."""
    from torch.fx import traceback as fx_traceback

    paths = {}
    for prefix, root in world.modules.items():
        for path, module in root.named_modules():
            paths.setdefault(id(module), ".".join(p for p in (prefix, path) if p))
    running: list[tuple[str, str]] = []

    def enter(module, _inputs):
        path = paths.get(id(module))
        if path is not None:
            running.append((path, type(module).__qualname__))
            fx_traceback.current_meta["nn_module_stack"] = {p: (p, t) for p, t in running}

    def leave(module, _inputs, _outputs):
        if paths.get(id(module)) is not None and running:
            running.pop()
            if running:
                fx_traceback.current_meta["nn_module_stack"] = {p: (p, t) for p, t in running}
            else:
                fx_traceback.current_meta.pop("nn_module_stack", None)

    from torch.nn.modules import module as module_hooks

    with fx_traceback.preserve_node_meta():
        before = module_hooks.register_module_forward_pre_hook(enter)
        after = module_hooks.register_module_forward_hook(leave, always_call=True)
        try:
            yield
        finally:
            before.remove()
            after.remove()
            fx_traceback.current_meta.pop("nn_module_stack", None)


def _make_fx_reporting(traced: Callable, examples: list) -> torch.fx.GraphModule:
    """Run the first trace; a data-dependent op becomes an `SpmdError` naming it."""
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    try:
        return traced(*examples)
    except (GuardOnDataDependentSymNode, torch._subclasses.fake_tensor.DataDependentOutputException,
            torch._subclasses.fake_tensor.DynamicOutputShapeException) as error:
        raise SpmdError("the function reads a tensor's value on the host while it is traced "
                        f"(`.item()`, `.tolist()`, a data-dependent shape): {_first_line(error)}"
                        ) from None


def _refuse_captured_parameters(graph: torch.fx.GraphModule) -> None:
    """A parameter the trace met but the world does not hold would be frozen into the program."""
    for node in graph.graph.nodes:
        if node.op == "get_attr":
            value = getattr(graph, node.target)
            if isinstance(value, torch.nn.Parameter):
                raise SpmdError(
                    f"the function uses a parameter of shape {tuple(value.shape)} from a module "
                    "it does not name directly, which would be frozen into the program; pass "
                    "that module with modules=")


def _interpreted(graph: torch.fx.GraphModule) -> Callable:
    def run(*inputs):
        return torch.fx.Interpreter(graph).run(*inputs)
    return run


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
