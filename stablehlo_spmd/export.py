"""Export a JAX function to StableHLO text with arguments named by pytree path.

``jax.jit(fn).lower(*args).as_text(debug_info=True)`` already names every
argument by its pytree path in its location (``loc("params['w1']")``) and
every result by ``jax.result_info`` (``result[1]['w1']``); those names are
what partition rules match.  This module is that call, plus loading a
function from ``MODULE:NAME`` for the command line.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any, Callable

from stablehlo_spmd.errors import SpmdError


def export(fn: Callable, *example_args: Any, **example_kwargs: Any) -> str:
    """StableHLO text of `fn` traced on the example arguments (arrays or ShapeDtypeStructs)."""
    import jax

    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    return jitted.lower(*example_args, **example_kwargs).as_text(debug_info=True)


def load_object(reference: str) -> Any:
    """Resolve ``package.module:attr`` or ``path/to/file.py:attr``."""
    module_name, colon, attribute = reference.rpartition(":")
    if not colon or not module_name or not attribute:
        raise SpmdError(f"expected MODULE:NAME, got {reference!r}")
    module = _import(module_name)
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise SpmdError(f"{module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    return target


def _import(module_name: str):
    if module_name.endswith(".py") or os.sep in module_name:
        if not os.path.isfile(module_name):
            raise SpmdError(f"no such Python file: {module_name}")
        name = os.path.splitext(os.path.basename(module_name))[0]
        spec = importlib.util.spec_from_file_location(name, module_name)
        module = importlib.util.module_from_spec(spec)
        sys.modules.setdefault(name, module)
        spec.loader.exec_module(module)
        return module
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise SpmdError(f"cannot import {module_name!r}: {error}") from None


def export_reference(function_ref: str, args_ref: str | None = None) -> str:
    """Export ``MODULE:FUNCTION``.

    With `args_ref`, it names the example arguments (a tuple, or a callable
    returning one).  Without it, FUNCTION must be a zero-argument factory that
    returns ``(function, example_args)``.
    """
    target = load_object(function_ref)
    if args_ref is not None:
        args = load_object(args_ref)
        args = args() if callable(args) else args
        return export(target, *args)
    if not callable(target):
        raise SpmdError(f"{function_ref} is not callable")
    try:
        made = target()
    except TypeError as error:
        raise SpmdError(f"{function_ref} must be a zero-argument factory returning "
                        f"(function, example_args), or pass --example-args ({error})") from None
    if not (isinstance(made, tuple) and len(made) == 2 and callable(made[0])):
        raise SpmdError(f"{function_ref}() must return (function, example_args)")
    return export(made[0], *made[1])
