"""Lowering a captured torch graph to a JAX function, with torchax's op table.

`Captured.graph` is functional aten; torchax holds a JAX implementation of
each aten op.  An interpreter walks the graph once, in order, over torchax
tensors that wrap JAX tracers, so ``jax.jit(program).lower`` (the JAX front
end's `export`) writes the StableHLO.  Three ops are the project's own:

* ``stablehlo_spmd::sharding_constraint`` (an activation's `mark_sharding`)
  becomes XLA's ``custom_call @Sharding`` with the ``mhlo.sharding`` text,
  the form jax's ``with_sharding_constraint`` takes without a device mesh;
* ``stablehlo_spmd::optimization_barrier`` (before a checkpointed block's
  recomputation, `recompute`) becomes ``jax.lax.optimization_barrier``;
* the ``copy_`` into an input that functionalization appends for every
  mutated input is dropped: the new value is already an output.

Each node is lowered under a JAX name scope naming it, which `exported`
turns into the torch module path and source line that made it.  An op
torchax cannot lower raises `SpmdError` naming the op, that module path and
that line.

The program takes the state as the dicts `world.Slot` names
(``params``, ``buffers``, ``grads``, ``optimizer``, ``lr``) and the argument
tensors as ``args``; it returns ``(outputs, state)``, ``state`` keyed the same way.
"""

from __future__ import annotations

import operator
import warnings
from typing import Any, Callable, Sequence

import torch
import torch.fx

from stablehlo_spmd.errors import SpmdError
from stablehlo_spmd.frontends.torch.capture import Captured
from stablehlo_spmd.frontends.torch.exported import node_scope, torch_source
from stablehlo_spmd.frontends.torch.torchax_compat import environment
from stablehlo_spmd.frontends.torch.world import KINDS, Slot

_constraint_primitive = None


def program(captured: Captured) -> Callable:
    """The JAX function ``(params, buffers, grads, optimizer, lr, args, seed) -> (outputs,
    state)``.  Its attribute ``draws_random`` says, once it has been traced, whether
    its random ops (dropout) read `seed`: torchax draws them from its environment's
    key, which the program sets from `seed` for the length of the call."""
    env = environment()
    graph = captured.graph

    def run(params, buffers, grads, optimizer, lr, args, seed):
        import jax
        from torchax.tensor import RuntimeProperty

        state = {"params": params, "buffers": buffers, "grads": grads,
                 "optimizer": optimizer, "lr": lr}
        inputs = [lookup(state, slot) for slot in captured.state_in] + list(args)
        outer = env._property.content
        key = jax.random.key(seed)
        env._property.content = RuntimeProperty.override(outer, prng=key)
        try:
            results = _Lowering(graph, env).run(*inputs)
            run.draws_random = env._property.content.prng is not key
        finally:
            env._property.content = outer
        results = [r._elem if hasattr(r, "_elem") else r for r in results]
        count = len(captured.output_dtypes)
        return results[:count], nested(captured.state_out, results[count:])

    run.draws_random = False
    return run


def nested(slots: Sequence[Slot], values: Sequence[Any]) -> dict:
    """Values keyed by slot, as the program's dicts: ``{"params": {path: v}, "lr": [v], ...}``."""
    state: dict[str, Any] = {kind: {} for kind in KINDS}
    learning_rates = {}
    for slot, value in zip(slots, values):
        if slot.kind == "lr":
            learning_rates[slot.key] = value
        elif slot.kind == "optimizer":
            path, key = slot.key
            state["optimizer"].setdefault(path, {})[key] = value
        else:
            state[slot.kind][slot.key] = value
    state["lr"] = [learning_rates[i] for i in sorted(learning_rates)]
    return state


def lookup(state: dict, slot: Slot) -> Any:
    if slot.kind == "optimizer":
        path, key = slot.key
        return state["optimizer"][path][key]
    return state[slot.kind][slot.key]


class _Lowering(torch.fx.Interpreter):
    def __init__(self, graph: torch.fx.GraphModule, env):
        super().__init__(graph)
        self.torchax = env

    def run_node(self, node: torch.fx.Node) -> Any:
        if (node.op == "call_function" and node.target is torch.ops.aten.copy_.default
                and node.args[0].op == "placeholder"):
            return None   # functionalization's write-back of a mutated input: an output already
        if node.op != "call_function":
            return super().run_node(node)
        import jax
        from torchax.tensor import OperatorNotFound

        try:
            with jax.named_scope(node_scope(node)):
                return _as_torch_typed(super().run_node(node), node.meta.get("val"))
        except OperatorNotFound:
            raise SpmdError(f"torch op {_op_name(node.target)} has no lowering to StableHLO"
                            f"{_where(node)}") from None

    def placeholder(self, target, args, kwargs):
        from torchax.tensor import Tensor

        value = super().placeholder(target, args, kwargs)
        return Tensor(value, self.torchax)

    def get_attr(self, target, args, kwargs):
        value = super().get_attr(target, args, kwargs)
        if isinstance(value, torch.Tensor):
            from torchax.tensor import Tensor

            return Tensor(self.torchax.t2j_copy(value.detach()), self.torchax)
        return value

    def call_function(self, target, args, kwargs):
        if target is torch.ops.stablehlo_spmd.sharding_constraint.default:
            from torchax.tensor import Tensor

            tensor, sharding = args
            return Tensor(_constrain(tensor._elem, sharding), self.torchax)
        if target is torch.ops.stablehlo_spmd.optimization_barrier.default:
            import jax
            from torchax.tensor import Tensor

            values = jax.lax.optimization_barrier([value._elem for value in args[0]])
            return [Tensor(value, self.torchax) for value in values]
        if target is operator.getitem or not isinstance(target, torch._ops.OpOverload):
            return target(*args, **kwargs)
        own = _OWN_LOWERINGS.get(target)
        if own is not None:
            from torchax.tensor import Tensor

            results = own(*[a._elem if isinstance(a, Tensor) else a for a in args], **kwargs)
            if not isinstance(results, tuple):
                return Tensor(results, self.torchax)
            return tuple(None if r is None else Tensor(r, self.torchax) for r in results)
        if "device" in kwargs:
            # The trace ran on CPU tensors; in the program every value is on the devices.
            kwargs = {**kwargs, "device": "jax"}
        with self.torchax, warnings.catch_warnings():
            # An int64 constant is int32 without jax's 64-bit mode, as `compiled` says once.
            warnings.filterwarnings("ignore", "Explicitly requested dtype int64")
            return target(*args, **kwargs)


def _as_torch_typed(result: Any, traced: Any) -> Any:
    """`result` in the floating dtype torch gave the node.  JAX promotes types its own
    way: a bf16 tensor times a 0-d f32 tensor (the learning rate) is f32 in JAX and
    bf16 in torch, and a bf16 parameter would come out of its update as f32."""
    from torchax.tensor import Tensor

    if isinstance(result, (tuple, list)) and isinstance(traced, (tuple, list)):
        return type(result)(_as_torch_typed(r, t) for r, t in zip(result, traced))
    if not (isinstance(result, Tensor) and isinstance(traced, torch.Tensor)
            and traced.dtype.is_floating_point and traced.dtype != torch.float64):
        return result
    from torchax.ops import mappings

    wanted = mappings.t2j_dtype(traced.dtype)
    if result._elem.dtype == wanted:
        return result
    return Tensor(result._elem.astype(wanted), result._env)


def _scalar_of(tensor):
    """A 0-d tensor read as a Python number (``.item()``) where an op takes a Scalar: the
    optimizers pass ``value=-step_size`` so.  In the program it stays the 0-d value."""
    return tensor


def _torchax_lowering(op) -> Callable:
    """torchax's JAX function for an aten op."""
    from torchax.ops import ops_registry

    table = ops_registry.all_aten_ops
    return (table.get(op) or table[op.overloadpacket]).func


def _convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
                          transposed, output_padding, groups, output_mask):
    """The gradients of torchax's own convolution lowering, by `jax.vjp`."""
    import jax

    convolution = _torchax_lowering(torch.ops.aten.convolution.default)

    def forward(x, w):
        return convolution(x, w, None, stride, padding, dilation, transposed, output_padding,
                           groups)

    _, pullback = jax.vjp(forward, input, weight)
    grad_input, grad_weight = pullback(grad_output)
    grad_bias = None
    if output_mask[2]:
        grad_bias = grad_output.sum(axis=tuple(d for d in range(grad_output.ndim) if d != 1))
    return (grad_input if output_mask[0] else None, grad_weight if output_mask[1] else None,
            grad_bias)


def _max_pool_backward(forward_op):
    """Max pooling's input gradient, by `jax.vjp` of torchax's forward (the window's
    first maximum takes the gradient, as torch's indices say)."""

    def backward(grad_output, input, kernel_size, stride, padding, dilation, ceil_mode,
                 indices):
        import jax

        pool = _torchax_lowering(forward_op)
        _, pullback = jax.vjp(
            lambda x: pool(x, kernel_size, stride, padding, dilation, ceil_mode)[0], input)
        return pullback(grad_output)[0]

    return backward


# aten ops lowered here, as functions of JAX arrays: backward ops torchax lacks (its
# users differentiate with jax.grad), max pooling's, which torchax approximates (it
# adds each output's gradient to its whole window), and reading a 0-d tensor as a
# number, which torchax does on the host (impossible inside a program).
_OWN_LOWERINGS = {
    torch.ops.aten._local_scalar_dense.default: _scalar_of,
    torch.ops.aten.convolution_backward.default: _convolution_backward,
    torch.ops.aten.max_pool2d_with_indices_backward.default:
        _max_pool_backward(torch.ops.aten.max_pool2d_with_indices.default),
    torch.ops.aten.max_pool3d_with_indices_backward.default:
        _max_pool_backward(torch.ops.aten.max_pool3d_with_indices.default),
}


def _constrain(value, sharding: str):
    return _constraint().bind(value, sharding=sharding)


def _constraint():
    """A JAX primitive for ``custom_call @Sharding {mhlo.sharding = ...}``: an identity
    that only says how its value is laid out."""
    global _constraint_primitive
    if _constraint_primitive is None:
        from jax.extend.core import Primitive
        from jax.interpreters import mlir
        from jaxlib.mlir import ir
        from jaxlib.mlir.dialects import stablehlo

        primitive = Primitive("stablehlo_spmd_sharding_constraint")
        primitive.def_impl(lambda value, sharding: value)
        primitive.def_abstract_eval(lambda value, sharding: value)

        def lower(ctx, value, sharding):
            call = stablehlo.CustomCallOp([value.type], [value], call_target_name="Sharding")
            call.attributes["mhlo.sharding"] = ir.StringAttr.get(sharding)
            return call.results

        mlir.register_lowering(primitive, lower)
        _constraint_primitive = primitive
    return _constraint_primitive


def _where(node: torch.fx.Node) -> str:
    path, filename, line = torch_source(node)
    parts = [f"in module {path}"] if path != node.name else []
    if filename is not None:
        parts.append(f"at {filename}:{line}")
    return f" ({', '.join(parts)})" if parts else ""


def _op_name(target: Any) -> str:
    name = getattr(target, "_name", None) or getattr(target, "__name__", None) or str(target)
    return name.replace("::", ".")
