"""Export a JAX function to StableHLO text with arguments named by pytree path.

``jax.jit(fn).lower(*args).as_text(debug_info=True)`` already names every
argument by its pytree path in its location (``loc("params['w1']")``) and
every result by ``jax.result_info`` (``result[1]['w1']``); those names are
what partition rules match.  This module is that call, plus loading a
function from ``MODULE:NAME`` for the command line.

Locations keep only the frames of the traced function.  jax locates an op by
the Python stack that made it, up to and including the call of ``lower``;
ops no traced line made (hoisted constants, the return) get the stack of
that call alone.  Those outer frames (this file, then whoever called
`export`: a script, the demo, the command line, click) say who asked for the
export, not which code made the op, and would otherwise be what a
diagnostic or a collective's "caused by" points at.  They are cut, so an op
is located in the model or, plainly, nowhere.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any, Callable

from jaxlib.mlir import ir

from stablehlo_spmd.errors import SpmdError


def export(fn: Callable, *example_args: Any, **example_kwargs: Any) -> str:
    """StableHLO text of `fn` traced on the example arguments (arrays or ShapeDtypeStructs)."""
    import jax

    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    lowered = jitted.lower(*example_args, **example_kwargs)
    # jax caches lowered modules: edit a copy, never the module jit may compile.
    module = lowered.compiler_ir("stablehlo").operation.clone()
    _drop_export_frames(module)
    return module.get_asm(enable_debug_info=True)


def _drop_export_frames(module: ir.Operation) -> None:
    """Cut this file's frame, and every caller's frame outside it, from each location."""
    cut_by_attr: dict[ir.Attribute, ir.Location | None] = {}

    def cut(location: ir.Location) -> ir.Location | None:
        """`location` without the export's frames; None if nothing is left."""
        key = location.attr
        if key not in cut_by_attr:
            cut_by_attr[key] = _without_export_frames(ir.Location.from_attr(key), cut)
        return cut_by_attr[key]

    def visit(op):
        op.location = cut(op.location) or ir.Location.unknown()
        for region in op.regions:
            for block in region.blocks:
                for argument in block.arguments:
                    argument.set_location(cut(argument.location) or ir.Location.unknown())
        return ir.WalkResult.ADVANCE

    with module.context:
        module.walk(visit)


def _without_export_frames(location: ir.Location, cut) -> ir.Location | None:
    """One level of `location` rebuilt; `cut` rebuilds the locations inside it."""
    if _is_export_frame(location):
        return None
    if isinstance(location, ir.CallSiteLoc):
        if _is_export_frame(ir.Location.from_attr(location.callee.attr)):
            return None  # the frames outside it are the export's callers
        callee, caller = cut(location.callee), cut(location.caller)
        if callee is None or caller is None:
            return caller if callee is None else callee
        return ir.Location.callsite(callee, [caller])
    if isinstance(location, ir.NameLoc):
        return ir.Location.name(location.name_str, cut(location.child_loc))
    if isinstance(location, ir.FusedLoc):
        kept = [inner for inner in map(cut, location.locations) if inner is not None]
        return ir.Location.fused(kept, location.metadata) if kept else None
    return location


def _is_export_frame(location: ir.Location) -> bool:
    """A position in this file, bare or named by its function (jax's form of a frame)."""
    if isinstance(location, ir.NameLoc):
        location = ir.Location.from_attr(location.child_loc.attr)
    return isinstance(location, ir.FileLineColLoc) and location.filename == __file__


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


def load_reference(function_ref: str, args_ref: str | None = None) -> tuple[Callable, tuple]:
    """``MODULE:FUNCTION`` and its example arguments, for the command line.

    With `args_ref`, it names the example arguments (a tuple, or a callable
    returning one).  Without it, FUNCTION must be a zero-argument factory that
    returns ``(function, example_args)``.  Any front end's programs load this way.
    """
    target = load_object(function_ref)
    if args_ref is not None:
        args = load_object(args_ref)
        args = args() if callable(args) else args
        return target, tuple(args)
    if not callable(target):
        raise SpmdError(f"{function_ref} is not callable")
    try:
        made = target()
    except TypeError as error:
        raise SpmdError(f"{function_ref} must be a zero-argument factory returning "
                        f"(function, example_args), or pass --example-args ({error})") from None
    if not (isinstance(made, tuple) and len(made) == 2 and callable(made[0])):
        raise SpmdError(f"{function_ref}() must return (function, example_args)")
    return made[0], tuple(made[1])
