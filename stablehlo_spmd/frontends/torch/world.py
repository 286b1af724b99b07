"""The torch objects a traced function reads and updates, and their names in the program.

A PyTorch training step reads its state from objects, not arguments: the
modules' parameters and buffers, the parameters' ``.grad``, the optimizers'
per-parameter state (momentum, Adam's moments and step count) and each
param group's learning rate.  `World` holds those objects and names each
tensor of that state as the exported program's argument:

    params['fc1.weight']                 a parameter, by its module path
    buffers['bn.running_mean']           a buffer
    grads['fc1.weight']                  a gradient present before the call
    optimizer['fc1.weight']['exp_avg']   an optimizer's state for that parameter
    lr[0]                                a param group's learning rate

Sharing the parameter's path makes one rule (``fc1\\.weight``) shard the
parameter, its gradient and its optimizer state alike.  A parameter tied
to two modules is one argument, under its first path.

`World.bound` is where tracing meets those objects: for the length of a
trace it swaps the tracer's tensors in (module attributes, ``.grad``, the
optimizers' param groups and state, the learning rates as tensors) and
restores the user's objects after, whatever the trace did.  The optimizer
runs with ``foreach`` and ``fused`` off and ``capturable`` on: the same
arithmetic, written as one tensor op per step, with the step count and
learning rate as tensors instead of Python numbers read off the host.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import inspect
from typing import Any, Callable, Iterator

import torch

from stablehlo_spmd.errors import SpmdError

KINDS = ("params", "buffers", "grads", "optimizer", "lr")


@dataclasses.dataclass(frozen=True)
class Slot:
    """One tensor of the state: its kind (one of `KINDS`) and its key within that kind.

    The key is the module path (params, buffers, grads), (path, state key)
    for an optimizer's state, or the param group's index for a learning rate.
    """

    kind: str
    key: Any

    def path(self) -> tuple:
        return (self.kind, *self.key) if isinstance(self.key, tuple) else (self.kind, self.key)

    def describe(self) -> str:
        return self.kind + "".join(f"[{k!r}]" for k in self.path()[1:])


class World:
    """The modules and optimizers a function uses, and the state they hold."""

    def __init__(self, modules: dict[str, torch.nn.Module],
                 optimizers: list[torch.optim.Optimizer]):
        self.modules = modules
        self.optimizers = optimizers
        self.parameters: dict[str, torch.nn.Parameter] = {}
        self.buffer_owners: dict[str, tuple[torch.nn.Module, str]] = {}
        seen: set[int] = set()
        for prefix, module in modules.items():
            for path, parameter in module.named_parameters(remove_duplicate=False):
                if id(parameter) not in seen:   # a tied parameter: its first path
                    seen.add(id(parameter))
                    self.parameters[_joined(prefix, path)] = parameter
            for path, submodule in module.named_modules(remove_duplicate=False):
                for name, buffer in submodule._buffers.items():
                    full = _joined(prefix, _joined(path, name))
                    if buffer is not None and full not in self.buffer_owners:
                        self.buffer_owners[full] = (submodule, name)
        self._path_of = {id(p): path for path, p in self.parameters.items()}
        for index, optimizer in enumerate(optimizers):
            for group in optimizer.param_groups:
                for parameter in group["params"]:
                    if id(parameter) not in self._path_of:
                        raise SpmdError(
                            f"optimizer {index} updates a parameter of shape "
                            f"{tuple(parameter.shape)} that no module the function uses holds; "
                            "pass its module with modules=")

    # ------------------------------------------------------------ discovery

    @classmethod
    def of_function(cls, fn: Callable, modules=None, optimizers=None) -> "World":
        """The modules and optimizers `fn` reads: itself if a module, else those it names
        (closure variables and globals), unless given."""
        if isinstance(fn, torch.nn.Module) and modules is None:
            modules = {"": fn}
        found_modules: dict[str, torch.nn.Module] = {}
        found_optimizers: list[torch.optim.Optimizer] = []
        if modules is None or optimizers is None:
            for name, value in _names_used(fn).items():
                if isinstance(value, torch.nn.Module):
                    found_modules[name] = value
                elif isinstance(value, torch.optim.Optimizer):
                    found_optimizers.append(value)
        if modules is None:
            modules = found_modules
        elif not isinstance(modules, dict):
            modules = {name: m for name, m in _named_by_caller(modules, found_modules)}
        # One module's own paths need no prefix; several are told apart by their names.
        # Modules that hold no state (a loss, an activation) do not count.
        stateful = [name for name, m in modules.items() if _holds_state(m)]
        if len(stateful) == 1:
            modules = {("" if name == stateful[0] else name): m for name, m in modules.items()}
        return cls(modules, list(found_optimizers if optimizers is None else optimizers))

    def path_of(self, parameter: torch.Tensor) -> str:
        return self._path_of[id(parameter)]

    # ------------------------------------------------------------ reading the host

    def host_state(self) -> dict[Slot, Any]:
        """Every tensor of the state as the user's objects hold it now (lr as a float)."""
        state: dict[Slot, Any] = {}
        for path, parameter in self.parameters.items():
            state[Slot("params", path)] = parameter
        for path, (module, name) in self.buffer_owners.items():
            state[Slot("buffers", path)] = module._buffers[name]
        for path, parameter in self.parameters.items():
            if parameter.grad is not None:
                state[Slot("grads", path)] = parameter.grad
        for optimizer in self.optimizers:
            for parameter, entries in optimizer.state.items():
                for key, value in entries.items():
                    if isinstance(value, torch.Tensor):
                        state[Slot("optimizer", (self.path_of(parameter), key))] = value
        for index, group in enumerate(self.learning_rate_groups()):
            state[Slot("lr", index)] = float(group["lr"])
        return state

    def learning_rates(self) -> list[float]:
        return [float(group["lr"]) for group in self.learning_rate_groups()]

    def learning_rate_groups(self) -> list[dict]:
        return [group for optimizer in self.optimizers for group in optimizer.param_groups]

    def static_key(self) -> tuple:
        """What else decides the traced program: train/eval modes, and the optimizers'
        settings other than the learning rate."""
        modes = tuple(m.training for root in self.modules.values() for m in root.modules())
        settings = tuple(
            tuple(sorted((k, _hashable(v)) for k, v in group.items() if k not in ("params", "lr")))
            for optimizer in self.optimizers for group in optimizer.param_groups)
        return modes, settings

    def host_non_tensor_state(self) -> dict[str, dict[str, Any]]:
        """The optimizers' per-parameter state that is not a tensor, by parameter path."""
        found: dict[str, dict[str, Any]] = {}
        for optimizer in self.optimizers:
            for parameter, entries in optimizer.state.items():
                values = {k: v for k, v in entries.items() if not isinstance(v, torch.Tensor)}
                if values:
                    found[self.path_of(parameter)] = values
        return found

    # ------------------------------------------------------------ tracing

    @contextlib.contextmanager
    def bound(self, tensors: dict[Slot, torch.Tensor]) -> Iterator[Callable[[], tuple]]:
        """Swap `tensors` (the tracer's, keyed as `host_state` is) into the user's objects.

        Yields a function that reads the state back out, as the function left it: its
        tensors by slot, and the optimizers' state that is not a tensor, by parameter path."""
        restore: list[Callable[[], None]] = []
        try:
            by_id: dict[int, torch.Tensor] = {}
            for path, parameter in self.parameters.items():
                stand_in = tensors[Slot("params", path)]
                stand_in.grad = tensors.get(Slot("grads", path))
                by_id[id(parameter)] = stand_in
            for root in self.modules.values():
                for module in root.modules():
                    for name, parameter in list(module._parameters.items()):
                        if parameter is not None and id(parameter) in by_id:
                            restore.append(_setter(module._parameters, name, parameter))
                            module._parameters[name] = by_id[id(parameter)]
            for path, (module, name) in self.buffer_owners.items():
                restore.append(_setter(module._buffers, name, module._buffers[name]))
                module._buffers[name] = tensors[Slot("buffers", path)]
            lr_index = 0
            for optimizer in self.optimizers:
                restore.append(_attribute_setter(optimizer, "state", optimizer.state))
                stand_in_state = collections.defaultdict(dict)
                for parameter, entries in optimizer.state.items():
                    path = self.path_of(parameter)
                    stand_in_state[by_id[id(parameter)]] = {
                        key: tensors.get(Slot("optimizer", (path, key)), value)
                        for key, value in entries.items()}
                optimizer.state = stand_in_state
                for group in optimizer.param_groups:
                    restore.append(_group_restorer(group))
                    group["params"] = [by_id[id(p)] for p in group["params"]]
                    group["lr"] = tensors[Slot("lr", lr_index)]
                    lr_index += 1
                    for flag, value in (("foreach", False), ("fused", None), ("capturable", True)):
                        if flag in group:
                            group[flag] = value

            path_of_stand_in = {id(tensors[Slot("params", p)]): p for p in self.parameters}

            def read_back() -> tuple[dict[Slot, torch.Tensor], dict[str, dict[str, Any]]]:
                after: dict[Slot, torch.Tensor] = {}
                non_tensor: dict[str, dict[str, Any]] = {}
                for path in self.parameters:
                    after[Slot("params", path)] = tensors[Slot("params", path)]
                for path, (module, name) in self.buffer_owners.items():
                    if module._buffers.get(name) is not None:
                        after[Slot("buffers", path)] = module._buffers[name]
                for path in self.parameters:
                    grad = tensors[Slot("params", path)].grad
                    if grad is not None:
                        after[Slot("grads", path)] = grad
                for optimizer in self.optimizers:
                    for stand_in, entries in optimizer.state.items():
                        path = path_of_stand_in[id(stand_in)]
                        for key, value in entries.items():
                            if isinstance(value, torch.Tensor):
                                after[Slot("optimizer", (path, key))] = value
                            else:
                                non_tensor.setdefault(path, {})[key] = value
                return after, non_tensor

            yield read_back
        finally:
            for undo in reversed(restore):
                undo()

    # ------------------------------------------------------------ writing the host

    def write_host(self, values: dict[Slot, torch.Tensor], non_tensor_state: dict) -> None:
        """Put the program's state back into the user's objects (values on the host)."""
        with torch.no_grad():
            for path, parameter in self.parameters.items():
                parameter.copy_(values[Slot("params", path)])
                parameter.grad = values.get(Slot("grads", path))
            for path, (module, name) in self.buffer_owners.items():
                value = values.get(Slot("buffers", path))
                if value is not None:
                    module._buffers[name].copy_(value)
            for optimizer in self.optimizers:
                for group in optimizer.param_groups:
                    for parameter in group["params"]:
                        path = self.path_of(parameter)
                        entries = dict(non_tensor_state.get(path, {}))
                        for slot, value in values.items():
                            if slot.kind == "optimizer" and slot.key[0] == path:
                                entries[slot.key[1]] = value
                        if entries:
                            optimizer.state[parameter] = entries


def _joined(prefix: str, path: str) -> str:
    return f"{prefix}.{path}" if prefix and path else prefix or path


def _holds_state(module: torch.nn.Module) -> bool:
    return any(True for _ in module.parameters()) or any(True for _ in module.buffers())


def _names_used(fn: Callable) -> dict[str, Any]:
    """The closure variables and globals `fn` names (a module: none; it is its own state)."""
    target = fn
    if isinstance(fn, torch.nn.Module):
        return {}
    while hasattr(target, "__wrapped__"):
        target = target.__wrapped__
    try:
        found = inspect.getclosurevars(target)
    except TypeError:
        return {}
    return {**found.globals, **found.nonlocals}


def _named_by_caller(modules, found: dict[str, torch.nn.Module]):
    """Name given modules as the function does where it names them, else by position."""
    names = {id(m): n for n, m in found.items()}
    for index, module in enumerate(modules):
        yield names.get(id(module), f"module{index}"), module


def _hashable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), str(value.dtype))
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def _setter(mapping: dict, key: str, value: Any) -> Callable[[], None]:
    def undo():
        mapping[key] = value
    return undo


def _attribute_setter(owner: Any, name: str, value: Any) -> Callable[[], None]:
    def undo():
        setattr(owner, name, value)
    return undo


def _group_restorer(group: dict) -> Callable[[], None]:
    saved = dict(group)

    def undo():
        group.clear()
        group.update(saved)
    return undo
