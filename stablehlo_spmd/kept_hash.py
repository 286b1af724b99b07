"""A hash kept after its first use, for the frozen value types solvers key caches by.

`Mesh`, `Sharding` and `OpRule` are frozen dataclasses of nested tuples (a
mesh of 1024 devices holds 1024 ids), and the search keys its caches by
them hundreds of thousands of times: hashed afresh each time, they took
half of the 17 s Llama-3-70B's 1024-device problem took to build.  A class
takes both functions below in its own body (a dataclass replaces a
`__hash__` it inherits)::

    __hash__ = kept_hash
    __getstate__ = state_without_hash

The hash is left out of a pickle: a string's hash differs from process to
process.
"""

from __future__ import annotations

import dataclasses


def kept_hash(value) -> int:
    """The hash of `value`'s fields, computed once."""
    kept = value.__dict__.get("_kept_hash")
    if kept is None:
        kept = hash(tuple(getattr(value, f.name) for f in dataclasses.fields(value)))
        object.__setattr__(value, "_kept_hash", kept)
    return kept


def state_without_hash(value) -> dict:
    return {name: field for name, field in value.__dict__.items() if name != "_kept_hash"}
