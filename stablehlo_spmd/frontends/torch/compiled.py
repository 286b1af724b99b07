"""`export` and `compile`: a torch module or training step as a partitioned program on PJRT.

This is the torch counterpart of `stablehlo_spmd.spmd_jit`, and sits where
it does, above the pipeline and the runtime: capture (`capture`), lower
(`lowering`), export with the JAX front end, annotate from the marks,
partition, compile, and run.

A compiled function keeps the state it updates (parameters, buffers,
gradients, optimizer state) on the devices between calls, sharded as the
program lays it out, and donates it to each call, so a step moves no state
through the host.  The user's torch objects are brought up to date only
when something reads them: ``state_dict()`` of a module or an optimizer, an
eager ``forward``, an eager ``optimizer.step()``, ``load_state_dict`` (each
through a hook), or `CompiledFunction.sync`.  After an eager ``forward``,
``step`` or ``load_state_dict`` the host holds the truth again, and the next
call puts it back on the devices.  Several compiled functions over the same
modules (a training step and an evaluation) hand the state to each other
the same way.

A program is traced again when anything that shaped it changes: argument
shapes, dtypes or marks, the set and shapes of the state's tensors (the
first optimizer step creates its state), train/eval modes, or an
optimizer setting other than the learning rate.  The learning rates are
inputs, so a scheduler's change needs no new trace.

JAX traces without its 64-bit mode, so int64 and float64 tensors are i32
and f32 in the program: an int64 argument is cast on the way in (with one
warning), and an output torch typed int64 comes back as int64.
"""

from __future__ import annotations

import re
import warnings
import weakref
from typing import Any, Callable

import numpy as np
import torch
import torch.utils._pytree as pytree

from stablehlo_spmd.diagnostics import SpmdWarning
from stablehlo_spmd.errors import SpmdError
from stablehlo_spmd.frontends.torch import lowering
from stablehlo_spmd.frontends.torch.capture import Captured, capture
from stablehlo_spmd.frontends.torch.exported import finish
from stablehlo_spmd.frontends.torch.marks import mark_of
from stablehlo_spmd.frontends.torch.world import Slot, World
from stablehlo_spmd.mesh import Mesh

_NARROWED = {torch.int64: torch.int32, torch.float64: torch.float32}


def export(fn: Callable, *example_args: Any, modules=None, optimizers=None) -> str:
    """StableHLO text of `fn` (an ``nn.Module``, or a function of tensors that uses
    modules and optimizers from its closure) on `example_args`.

    Arguments are named by torch's names (``params['fc1.weight']``,
    ``optimizer['fc1.weight']['exp_avg']``, ``args[0]``; see `world`), and
    the tensors' marks (`mark_sharding`) are their ``mhlo.sharding``.
    """
    world = World.of_function(fn, modules, optimizers)
    traced = Traced(fn, world, example_args, mesh=None, rules=())
    return traced.annotated


def compile(fn: Callable, *example_args: Any, mesh: Mesh | None = None, rules=(),
            modules=None, optimizers=None) -> "CompiledFunction":
    """`fn` compiled for its marks' mesh (or `mesh`), partitioned, ready to call with
    torch tensors.

    `rules` are the project's (regex on the argument names above, partition
    spec), applied after the marks.  `modules` and `optimizers` name the state
    when `fn` does not name it directly.  Example arguments compile the first
    program now; without them it is compiled on the first call.
    """
    compiled = CompiledFunction(fn, World.of_function(fn, modules, optimizers), mesh, rules)
    if example_args:
        compiled.program_for(example_args)
    return compiled


class CompiledFunction:
    """A torch function run as partitioned programs, one per input signature."""

    def __init__(self, fn: Callable, world: World, mesh: Mesh | None, rules):
        self.fn = fn
        self.world = world
        self.mesh = mesh
        self.rules = tuple(rules)
        self.programs: dict[tuple, Program] = {}
        self._state = _DeviceState(world)
        self._warned_narrowing = False

    def __call__(self, *args: Any) -> Any:
        program = self.program_for(args)
        arguments = [t for t in pytree.tree_leaves(args) if isinstance(t, torch.Tensor)]
        if not self._warned_narrowing and any(t.dtype in _NARROWED for t in arguments):
            self._warned_narrowing = True
            warnings.warn("int64 and float64 arguments are passed as int32 and float32: the "
                          "program is traced without jax's 64-bit mode", SpmdWarning, stacklevel=2)
        arguments = [t.to(_NARROWED[t.dtype]) if t.dtype in _NARROWED else t for t in arguments]
        inputs = program.inputs(self._state.values(program.captured.state_in), arguments)
        placed = program.executable.place(inputs, consume=True)
        # Every tensor of the state is on the devices now; those the call updates are
        # donated to it, and the rest stay for the next call.
        self._state.keep({slot: placed[i] for i, slot in program.state_positions})
        results = program.executable.run_placed(placed)
        outputs, state = program.outputs(results)
        self._state.replace(program, state)
        return outputs

    def program_for(self, args: tuple) -> "Program":
        self._state.claim()
        key = (_arguments_key(args), self._state.signature(), self.world.static_key(),
               _marks_key(self.world))
        program = self.programs.get(key)
        if program is None:
            # The trace reads the state's structure off the user's objects (the
            # optimizer state the last call created, say): bring them up to date.
            self._state.sync()
            with self._state.tracing():
                traced = Traced(self.fn, self.world, args, self.mesh, self.rules)
            program = self.programs[key] = Program(traced)
        return program

    def sync(self) -> None:
        """Bring the modules' and optimizers' tensors up to date from the devices."""
        self._state.sync()


class Traced:
    """One trace of a function, exported, before partitioning.

    `program` is the JAX function ``(params, buffers, grads, optimizer, lr, args, seed)
    -> (outputs, state)`` (`lowering.program`) and `in_structs` its example arguments (shapes and
    dtypes); `text` its StableHLO, `annotated` that with the marks' shardings;
    `mesh` the marks' mesh (None when nothing is marked) and `rules` the
    exact-name rules the marks make, then the caller's.
    """

    def __init__(self, fn: Callable, world: World, args: tuple, mesh: Mesh | None, rules):
        import jax

        host_marks = _host_marks(world, args)
        meshes = [m.mesh for m in host_marks.values()] + ([mesh] if mesh is not None else [])
        self.mesh = _one_mesh(meshes)
        if self.mesh is not None:
            from stablehlo_spmd import runtime

            # Before torchax loads: its first use starts jax's backends.
            runtime.ensure_host_devices(self.mesh.size)
        self.captured = capture(fn, world, args)
        self.mesh = _one_mesh(meshes + self.captured.meshes)
        for position, mark in self.captured.argument_marks.items():
            host_marks[("args", position)] = mark
        self.program = lowering.program(self.captured)
        self.in_structs = _input_structs(self.captured)
        from stablehlo_spmd.frontends.jax import export as export_jax

        replaced = {slot.describe(): _result_name(slot) for slot in self.captured.state_out}
        self.text = finish(export_jax(jax.jit(self.program, keep_unused=True), *self.in_structs),
                           self.captured.graph, self.mesh.size if self.mesh is not None else None,
                           replaced.get)
        self.out_tree = jax.tree.structure(jax.eval_shape(self.program, *self.in_structs))
        self.rules = (_mark_rules(self.captured, host_marks) + _scalar_rules(self.captured)
                      + list(rules))
        self.name = getattr(fn, "__name__", type(fn).__name__)
        if self.mesh is None:
            self.annotated = self.text
        else:
            from stablehlo_spmd.api import annotate

            self.annotated = annotate(self.text, self.mesh, self.rules, filename=self.name)


class Program:
    """A traced function, partitioned (`text`) and compiled (`executable`), and how its
    flat inputs and outputs map to torch's."""

    def __init__(self, traced: Traced):
        self.traced = traced
        import jax

        from stablehlo_spmd import runtime
        from stablehlo_spmd.api import partition

        self.captured = traced.captured
        if traced.mesh is None or traced.mesh.size == 1:
            # One device: the exported program is the program (no pass to run).
            self.text = traced.text
        else:
            runtime.ensure_host_devices(traced.mesh.size)
            self.text = partition(traced.text, traced.mesh, traced.rules, filename=traced.name)
        self.executable = runtime.compile(self.text)
        self._out_tree = traced.out_tree
        self.signature_after = _signature_of(self.captured)
        # Which flat input holds which tensor of the state (the rest are lr and arguments).
        slots = lowering.nested(self.captured.state_in, self.captured.state_in)
        flat = jax.tree.leaves((slots["params"], slots["buffers"], slots["grads"],
                                slots["optimizer"]))
        self.state_positions = list(enumerate(flat))

    def inputs(self, state: dict[Slot, Any], arguments: list[torch.Tensor]) -> list:
        import jax

        nested = lowering.nested(self.captured.state_in, [state[s] for s in self.captured.state_in])
        # Random ops draw from torch's generator, as eager torch's would: a seed per call.
        seed = torch.randint(0, 2**31 - 1, ()).item() if self.traced.program.draws_random else 0
        tree = (nested["params"], nested["buffers"], nested["grads"], nested["optimizer"],
                [np.float32(lr) for lr in nested["lr"]], [_to_numpy(a) for a in arguments],
                np.uint32(seed))
        return jax.tree.leaves(tree, is_leaf=lambda x: x is None)

    def outputs(self, results: list) -> tuple[Any, dict[Slot, Any]]:
        import jax

        outputs, nested = jax.tree.unflatten(self._out_tree, results)
        torch_outputs = [_to_torch(value, dtype)
                         for value, dtype in zip(outputs, self.captured.output_dtypes)]
        state = {slot: lowering.lookup(nested, slot) for slot in self.captured.state_out}
        return pytree.tree_unflatten(torch_outputs, self.captured.output_spec), state


class _DeviceState:
    """Where the state's current values live: on the devices (jax arrays, after a
    call) or in the user's torch objects; moves them when the other side reads."""

    # Which _DeviceState holds each module's and optimizer's state now, by id.
    _holders: "weakref.WeakValueDictionary[int, _DeviceState]" = weakref.WeakValueDictionary()

    def __init__(self, world: World):
        self.world = world
        self.arrays: dict[Slot, Any] | None = None     # None: the host holds the truth
        self.non_tensor: dict[str, dict[str, Any]] = {}
        self.ahead = False                              # arrays newer than the host
        self._signature: tuple | None = None            # of the state as it is now
        self._tracing = False
        for owner in self._owners():
            _install_hooks(owner)

    def _owners(self) -> list:
        return [*self.world.modules.values(), *self.world.optimizers]

    def claim(self) -> None:
        """Take the state from any other compiled function that holds it on the devices."""
        for owner in self._owners():
            holder = self._holders.get(id(owner))
            if holder is not None and holder is not self:
                holder.sync()
                holder.arrays = None
                holder._signature = None
            self._holders[id(owner)] = self

    def signature(self) -> tuple:
        """The state's structure: each tensor's slot, shape and dtype in the program,
        and the optimizers' state that is not a tensor.  Known without looking after
        a call (the program says what it leaves); read off the host otherwise."""
        if self._signature is None:
            self._signature = self._read_signature()
        return self._signature

    def _read_signature(self) -> tuple:
        if self.arrays is not None:
            described = {slot: (tuple(a.shape), np.dtype(a.dtype).name)
                         for slot, a in self.arrays.items()}
            return _signature_key(described, self.non_tensor)
        described = {slot: _described(t) for slot, t in self.world.host_state().items()
                     if slot.kind != "lr"}
        return _signature_key(described, self.world.host_non_tensor_state())

    def values(self, slots: list[Slot]) -> dict[Slot, Any]:
        host = self.world.host_state() if self.arrays is None else {}
        learning_rates = self.world.learning_rates()
        values = {}
        for slot in slots:
            if slot.kind == "lr":
                values[slot] = learning_rates[slot.key]
            elif self.arrays is not None:
                values[slot] = self.arrays[slot]
            else:
                values[slot] = _to_numpy(host[slot])
        return values

    def keep(self, arrays: dict[Slot, Any]) -> None:
        """The state as the next call takes it, on the devices."""
        self.arrays = {**(self.arrays or {}), **arrays}

    def replace(self, program: "Program", state: dict[Slot, Any]) -> None:
        """The state after a call: the tensors it returned (updated or made), and
        those it left alone; not those it dropped (gradients ``zero_grad`` cleared)."""
        before = self.arrays or {}
        self.arrays = {slot: state[slot] if slot in state else before[slot]
                       for slot in program.captured.state_after}
        self.non_tensor = program.captured.non_tensor_state
        self.ahead = True
        self._signature = program.signature_after

    def sync(self) -> None:
        if self._tracing or not self.ahead or self.arrays is None:
            return
        import jax

        slots = list(self.arrays)
        host = jax.device_get([self.arrays[slot] for slot in slots])
        dtypes = {slot: t.dtype for slot, t in self.world.host_state().items()
                  if isinstance(t, torch.Tensor)}
        values = {slot: _to_torch(value, dtypes.get(slot)) for slot, value in zip(slots, host)}
        self.world.write_host(values, self.non_tensor)
        self.ahead = False

    def host_changed(self) -> None:
        if not self._tracing:
            self.arrays = None
            self.ahead = False
            self._signature = None

    def tracing(self):
        state = self

        class _Tracing:
            def __enter__(self):
                state._tracing = True

            def __exit__(self, *exc):
                state._tracing = False
        return _Tracing()


def _install_hooks(owner) -> None:
    """Hooks that sync before the user reads `owner` and let go after the user writes it."""
    if getattr(owner, "_stablehlo_spmd_hooked", False):
        return
    owner._stablehlo_spmd_hooked = True

    def holder():
        return _DeviceState._holders.get(id(owner))

    def sync(*_args, **_kwargs):
        if holder() is not None:
            holder().sync()

    def changed(*_args, **_kwargs):
        if holder() is not None:
            holder().host_changed()

    owner.register_state_dict_pre_hook(sync)
    owner.register_load_state_dict_pre_hook(sync)
    owner.register_load_state_dict_post_hook(changed)
    if isinstance(owner, torch.nn.Module):
        owner.register_forward_pre_hook(sync)
        owner.register_forward_hook(changed)
    else:
        owner.register_step_pre_hook(sync)
        owner.register_step_post_hook(changed)


# ------------------------------------------------------------------ marks to rules

def _host_marks(world: World, args: tuple) -> dict:
    """The marks on the state's tensors and the argument tensors, by slot or ("args", i)."""
    found: dict = {}
    for slot, value in world.host_state().items():
        mark = mark_of(value) if isinstance(value, torch.Tensor) else None
        if mark is not None:
            found[slot] = mark
    tensors = [t for t in pytree.tree_leaves(args) if isinstance(t, torch.Tensor)]
    for position, tensor in enumerate(tensors):
        mark = mark_of(tensor)
        if mark is not None:
            found[("args", position)] = mark
    return found


def _one_mesh(meshes: list) -> Mesh | None:
    distinct = list(dict.fromkeys(meshes))
    if len(distinct) > 1:
        raise SpmdError("the marks use several meshes ("
                        + "; ".join(str(m) for m in distinct)
                        + "); one program runs on one mesh")
    return distinct[0] if distinct else None


def _mark_rules(captured: Captured, marks: dict) -> list:
    """Exact-name rules from the marks.  A parameter's mark also lays out its gradient
    and its optimizer state of the same rank, and each of those as the program
    returns it, so the next call takes the state as this one left it."""
    rules = []
    ranks = _ranks(captured)
    for where, mark in marks.items():
        if isinstance(where, tuple) and where[0] == "args":
            rules.append((_exact(f"args[{where[1]}]"), mark.spec))
            continue
        slots = [where]
        if where.kind == "params":
            slots.append(Slot("grads", where.key))
            slots += [other for other, rank in ranks.items()
                      if other.kind == "optimizer" and other.key[0] == where.key
                      and rank == len(mark.spec)]
        for slot in slots:
            if slot in captured.state_in:
                rules.append((_exact(slot.describe()), mark.spec))
            if slot in captured.state_out:
                rules.append((_exact(_result_name(slot)), mark.spec))
    return rules


def _scalar_rules(captured: Captured) -> list:
    """Scalars of the state (Adam's step count, kept per parameter) are replicated, before
    the caller's rules: a rule written for a parameter's name (``w``) matches
    ``optimizer['w']['step']`` too, and has no dimension to split there."""
    rules = []
    for slot, rank in _ranks(captured).items():
        if rank == 0:
            if slot in captured.state_in:
                rules.append((_exact(slot.describe()), ()))
            if slot in captured.state_out:
                rules.append((_exact(_result_name(slot)), ()))
    return rules


def _result_name(slot: Slot) -> str:
    """The program's result that holds `slot` after the call: ``result[1]['params']['w']``."""
    inner = slot.describe()[len(slot.kind):]
    return f"result[1][{slot.kind!r}]{inner}"


def _ranks(captured: Captured) -> dict[Slot, int]:
    """Each tensor of the state's rank, as the program takes or returns it."""
    return {slot: value.dim() for slot, value in _state_values(captured).items()}


def _state_values(captured: Captured) -> dict[Slot, torch.Tensor]:
    """The trace's (fake) value of each tensor of the state: as the program returns it
    where it does, else as it takes it."""
    placeholders = [n for n in captured.graph.graph.nodes if n.op == "placeholder"]
    outputs = next(n for n in captured.graph.graph.nodes if n.op == "output").args[0]
    values = {slot: placeholders[i].meta["val"] for i, slot in enumerate(captured.state_in)}
    count = len(captured.output_dtypes)
    values.update({slot: outputs[count + i].meta["val"]
                   for i, slot in enumerate(captured.state_out)})
    return values


def _exact(name: str) -> str:
    return f"^{re.escape(name)}$"


def _marks_key(world: World) -> tuple:
    """The marks on parameters and buffers, the state's tensors a user marks."""
    found = []
    for path, parameter in world.parameters.items():
        mark = mark_of(parameter)
        if mark is not None:
            found.append((path, mark.mesh, mark.spec))
    for path, (module, name) in world.buffer_owners.items():
        mark = mark_of(module._buffers[name]) if module._buffers.get(name) is not None else None
        if mark is not None:
            found.append(("buffer " + path, mark.mesh, mark.spec))
    return tuple(found)


# ------------------------------------------------------------------ values and signatures

def _signature_of(captured: Captured) -> tuple:
    """The state's signature (as `_DeviceState.signature` reads it) after a call of
    the program `captured` was traced from."""
    values = _state_values(captured)
    described = {slot: _described(values[slot]) for slot in captured.state_after}
    return _signature_key(described, captured.non_tensor_state)


def _described(tensor: torch.Tensor) -> tuple:
    return tuple(tensor.shape), np.dtype(_jax_dtype(_NARROWED.get(tensor.dtype, tensor.dtype))).name


def _signature_key(described: dict, non_tensor: dict) -> tuple:
    non_tensor_key = tuple(sorted((path, tuple(sorted((k, repr(v)) for k, v in entries.items())))
                                  for path, entries in non_tensor.items()))
    return tuple(sorted(((s.kind, repr(s.key)), d) for s, d in described.items())), non_tensor_key


def _arguments_key(args: tuple) -> tuple:
    leaves, spec = pytree.tree_flatten(args)
    described = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            mark = mark_of(leaf)
            described.append((tuple(leaf.shape), leaf.dtype, mark))
        else:
            described.append(("static", leaf))
    return str(spec), tuple(described)


def _input_structs(captured: Captured) -> tuple:
    """The program's example arguments: each placeholder's shape and dtype, as JAX
    takes them (int64 as int32), and the random seed."""
    import jax

    graph_inputs = [n for n in captured.graph.graph.nodes if n.op == "placeholder"]
    structs = [_struct(node.meta["val"]) for node in graph_inputs]
    state = lowering.nested(captured.state_in, structs[:len(captured.state_in)])
    arguments = structs[len(captured.state_in):]
    return (state["params"], state["buffers"], state["grads"], state["optimizer"],
            state["lr"], arguments, jax.ShapeDtypeStruct((), np.uint32))


def _struct(value: torch.Tensor):
    import jax

    dtype = _NARROWED.get(value.dtype, value.dtype)
    return jax.ShapeDtypeStruct(tuple(value.shape), _jax_dtype(dtype))


def _jax_dtype(dtype: torch.dtype):
    import jax.numpy as jnp

    if dtype == torch.bfloat16:
        return jnp.bfloat16
    return torch.empty((), dtype=dtype).numpy().dtype


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        import ml_dtypes

        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    if tensor.dtype in _NARROWED:
        tensor = tensor.to(_NARROWED[tensor.dtype])
    return tensor.numpy()


def _to_torch(value: Any, dtype: torch.dtype | None) -> torch.Tensor:
    array = np.asarray(value)
    if array.dtype.name == "bfloat16":
        tensor = torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
    else:
        tensor = torch.from_numpy(array.copy())
    return tensor if dtype is None or tensor.dtype == dtype else tensor.to(dtype)
