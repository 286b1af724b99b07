"""Loading torchax, the op table that lowers torch's aten ops to JAX, on today's torch.

Every torchax from 0.0.7 to 0.0.13 fails at import on torch 2.13: its tables
list the named-tensor (``Dimname``) overloads, such as
``aten.prod.dim_Dimname``, that torch 2.13 removed.  Those entries are only
dictionary keys, and nothing ever calls them.  While torchax loads and
builds its op tables, a lookup of a missing overload whose name mentions
names (``Dimname``, ``dimname``, ``names``) gets an inert placeholder
instead of an ``AttributeError``; every other lookup behaves as before, and
the patch is undone once the tables are built.

`placeholders_made` lists the overloads the patch stood in for, so a test can
check that it still only stands in for named-tensor overloads, and a release
of torchax that no longer needs it shows as an empty list (then drop this
module: `environment` becomes ``torchax.default_env()``).
"""

from __future__ import annotations

import contextlib
import functools

placeholders_made: list[str] = []


class MissingOverload:
    """Stands in for a named-tensor overload torch no longer has; never callable."""

    def __init__(self, qualified_name: str):
        self.qualified_name = qualified_name

    def __repr__(self) -> str:
        return f"<overload {self.qualified_name}, absent from this torch>"

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(f"{self.qualified_name} does not exist in this torch")


def _is_named_tensor_overload(overload: str) -> bool:
    return "name" in overload.lower()


@contextlib.contextmanager
def _named_overloads_tolerated():
    from torch import _ops

    original = _ops.OpOverloadPacket.__getattr__

    def lookup(packet, overload):
        try:
            return original(packet, overload)
        except AttributeError:
            if not _is_named_tensor_overload(overload):
                raise
            name = f"{packet._qualified_op_name}.{overload}"
            placeholders_made.append(name)
            return MissingOverload(name)

    _ops.OpOverloadPacket.__getattr__ = lookup
    try:
        yield
    finally:
        _ops.OpOverloadPacket.__getattr__ = original


@functools.cache
def environment():
    """torchax's environment (its op table), loaded once; torchax imported on first use.

    Building it starts no jax backend, so a caller can still ask for host
    devices afterwards."""
    with _named_overloads_tolerated():
        import torchax

        env = torchax.default_env()
    return env
