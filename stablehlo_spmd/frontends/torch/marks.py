"""PyTorch/XLA's sharding annotations on torch tensors: `mark_sharding`, `clear_sharding`.

Outside a trace, `mark_sharding` records a partition spec on the tensor (a
parameter, a buffer or an input batch), as PyTorch/XLA does; the program
that uses the tensor takes it as that argument's sharding.  Inside a trace
(an activation in ``forward``), it is a sharding constraint there: the
tensor is replaced in place by ``stablehlo_spmd::sharding_constraint`` of
itself, an identity op whose gradient passes through unconstrained, as
PyTorch/XLA's ``mark_sharding`` (unlike ``mark_sharding_with_gradients``)
does.  Lowering turns that op into XLA's ``custom_call @Sharding``.

A spec entry is an axis name, an axis index, None, or a tuple of those,
checked against the mesh and the tensor's rank here, so a typo fails at the
line that made it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Iterator

import torch

from stablehlo_spmd.errors import ShardingError
from stablehlo_spmd.hlo_sharding import format_hlo_sharding
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.sharding import Sharding

_MARK = "_stablehlo_spmd_mark"


@dataclasses.dataclass(frozen=True)
class Mark:
    """A tensor's partition spec over a mesh: axis names, None, or tuples of names."""

    mesh: Mesh
    spec: tuple

    def sharding(self, rank: int) -> Sharding:
        return Sharding.from_spec(self.mesh, self.spec, rank)


@torch.library.custom_op("stablehlo_spmd::sharding_constraint", mutates_args=())
def sharding_constraint(tensor: torch.Tensor, sharding: str) -> torch.Tensor:
    """`tensor` itself, laid out as XLA's sharding text `sharding` says (only a trace reads it)."""
    return tensor.clone()


@sharding_constraint.register_fake
def _(tensor: torch.Tensor, sharding: str) -> torch.Tensor:
    return torch.empty_like(tensor)


def _gradient_unconstrained(ctx, grad: torch.Tensor):
    return grad, None


sharding_constraint.register_autograd(_gradient_unconstrained)

# While a trace runs, the tracer's stand-ins for the program's arguments
# (parameters, buffers, inputs): a mark on one of those is an argument's
# sharding, a mark on anything else a constraint in the program.  The meshes
# of all marks made in the trace are collected, for the program's mesh.
_arguments_in_trace: dict[int, Callable[[Mark], None]] | None = None
_meshes_in_trace: list[Mesh] = []


@contextlib.contextmanager
def tracing(arguments: dict[int, Callable[[Mark], None]]) -> Iterator[list[Mesh]]:
    """Marks made while this is open: on a tensor whose id is a key of
    `arguments`, the callback records the mark; on any other, a constraint.
    Yields the list of the meshes marks used, filled as they are made."""
    global _arguments_in_trace, _meshes_in_trace
    outer = _arguments_in_trace, _meshes_in_trace
    _arguments_in_trace, _meshes_in_trace = arguments, []
    try:
        yield _meshes_in_trace
    finally:
        _arguments_in_trace, _meshes_in_trace = outer


def mark_sharding(tensor: torch.Tensor, mesh: Mesh, partition_spec: Any) -> torch.Tensor:
    """Shard `tensor` over `mesh` as `partition_spec` says (PyTorch/XLA's signature).

    Returns `tensor`, which carries the mark; in a traced ``forward`` the
    tensor is constrained in place."""
    if not isinstance(tensor, torch.Tensor):
        raise ShardingError(f"mark_sharding takes a torch.Tensor, not {type(tensor).__name__}")
    if not isinstance(mesh, Mesh):
        raise ShardingError(f"mark_sharding takes a stablehlo_spmd Mesh, not {type(mesh).__name__}")
    spec = tuple(getattr(partition_spec, "partitions", partition_spec))
    sharding = Sharding.from_spec(mesh, spec, tensor.dim())   # checks axes and rank now
    mark = Mark(mesh, tuple(sharding.to_spec()))               # axis indices become names
    if _arguments_in_trace is None:
        setattr(tensor, _MARK, mark)
        return tensor
    _meshes_in_trace.append(mesh)
    record = _arguments_in_trace.get(id(tensor))
    if record is not None:
        record(mark)
        return tensor
    constrained = sharding_constraint(tensor, format_hlo_sharding(sharding.to_hlo()))
    # The copy leaves the values as they were, so autograd may keep what it saved
    # of `tensor` (relu's output, say): its version counter is left unchanged.
    with torch.autograd._unsafe_preserve_version_counter(tensor):
        tensor.copy_(constrained)
    return tensor


def clear_sharding(tensor: torch.Tensor) -> torch.Tensor:
    """Forget `tensor`'s mark (PyTorch/XLA's ``clear_sharding``); returns `tensor`."""
    if hasattr(tensor, _MARK):
        delattr(tensor, _MARK)
    return tensor


def mark_of(tensor: torch.Tensor) -> Mark | None:
    return getattr(tensor, _MARK, None)
