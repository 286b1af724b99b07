"""MLIR plumbing: one context factory, parse/print with locations, cached attributes.

Everything that touches jaxlib's MLIR bindings directly, and that more than one
pass needs, lives here:

* `make_context` registers the dialects StableHLO programs use (func, arith and
  the other upstream dialects jaxlib bundles, stablehlo, chlo, sdy), and
  scopes the caches of MLIR objects (`per_context`) to its ``with`` block.
* `parse_module` keeps the file name in every location (``ir.Module.parse``
  would say ``"-"``), accepts a file of several top-level ops the way
  ``mlir-opt`` does by wrapping them in an implicit module, and gives function
  arguments that carry only a name (``loc("params['w1']")``, as JAX exports
  them) the position of their declaration, so that diagnostics about an
  argument point at a line.
* `cached_attr` builds an attribute once per (context, text): attribute
  construction is the costly part of the Python bindings, and a pass that
  writes the same sharding on a thousand values should pay for it once.
* `source_position` turns any location into ``file:line:col`` for diagnostics.
"""

from __future__ import annotations

import bisect
import contextlib
import re
import weakref
from typing import Iterator

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import chlo, sdy, stablehlo
import jaxlib.mlir._mlir_libs._jax_mlir_ext as _jax_mlir_ext

from stablehlo_spmd.errors import ParseError  # noqa: F401  (re-exported: the CLIs import it here)


@contextlib.contextmanager
def make_context() -> Iterator[ir.Context]:
    """A context with every dialect a JAX-exported StableHLO module may use,
    entered for the ``with`` block.

    Leaving the block drops what the project cached for the context
    (`per_context`): cached attributes and op rules refer to their context,
    so a cache that outlived the block would keep every context a
    long-running process ever made alive.
    """
    registry = ir.DialectRegistry()
    _jax_mlir_ext.register_dialects(registry)  # func, arith, math, ... as JAX registers them
    context = ir.Context()
    context.append_dialect_registry(registry)
    context.load_all_available_dialects()
    stablehlo.register_dialect(context)
    chlo.register_dialect(context)
    sdy.register_dialect(context)
    try:
        with context:
            yield context
    finally:
        _PER_CONTEXT.pop(context, None)
        if _last[0] is context:
            _last[0] = _last[1] = None


# ------------------------------------------------------------------ parsing

def parse_module(text: str, filename: str = "-", context: ir.Context | None = None) -> ir.Operation:
    """Parse `text` into a ``builtin.module`` operation, keeping `filename` in locations."""
    context = context or ir.Context.current
    if not text.strip():
        raise ParseError([("error", "the input is empty: expected a module", filename)])
    if "\0" in text:
        # MLIR's lexer would stop at the NUL and say "unexpected character".
        raise ParseError([("error", "the input is binary, not MLIR text", filename)])
    with context:
        try:
            op = ir.Operation.parse(text, source_name=filename).operation
        except ir.MLIRError as error:
            if "single top-level operation" not in str(error):
                raise ParseError(_mlir_diagnostics(error, text)) from None
            op = _parse_implicit_module(text, filename)
        if op.name != "builtin.module":
            module = ir.Module.create(ir.Location.file(filename, 1, 1)).operation
            module.regions[0].blocks[0].append(op)
            op = module
        _locate_named_arguments(op, text, filename)
    return op


def _parse_implicit_module(text: str, filename: str) -> ir.Operation:
    """Wrap several top-level ops in ``module { }`` without moving any line.

    The opening brace goes on a blank line or alias line just before the first
    op when there is one (columns stay exact), otherwise in front of the first
    op; the closing brace goes before any trailing alias definitions, which
    must stay at the top level.
    """
    lines = text.split("\n")

    def is_filler(line: str) -> bool:
        stripped = line.strip()
        return not stripped or stripped.startswith("//") or _ALIAS_LINE.match(stripped) is not None

    first = next((i for i, line in enumerate(lines) if not is_filler(line)), None)
    if first is None:  # comments and aliases only: nothing to wrap
        raise ParseError([("error", "the input holds no operation: expected a module", filename)])
    last = max(i for i, line in enumerate(lines) if not is_filler(line))
    lines[last] += "\n}"
    before = lines[first - 1].strip() if first else None
    if before is not None and (not before or _ALIAS_LINE.match(before)):
        lines[first - 1] += " module {"
    else:
        lines[first] = "module { " + lines[first]
    try:
        return ir.Operation.parse("\n".join(lines), source_name=filename).operation
    except ir.MLIRError as error:
        raise ParseError(_mlir_diagnostics(error, text)) from None


_ALIAS_LINE = re.compile(r"^[#!][\w.$-]+\s*=")


def _mlir_diagnostics(error: ir.MLIRError, text: str) -> list[tuple[str, str, str]]:
    result = []
    for diag in error.error_diagnostics:
        position = source_position(diag.location)
        result.append(("error", *_clarify(diag.message, position, text)))
        for note in diag.notes:
            result.append(("note", note.message, source_position(note.location)))
    if not result:
        result.append(("error", str(error), None))
    return result


_POSITION = re.compile(r"^(.*):(\d+):(\d+)$")
_UNREGISTERED_DIALECT = "operation being parsed with an unregistered dialect"
_OP_NAME_BEFORE = re.compile(r"\"?([A-Za-z_][\w$]*)\.([\w.$]+)\"?\s*$")


def _clarify(message: str, position: str | None, text: str) -> tuple[str, str | None]:
    """MLIR's parser messages, reworded where they would mislead a user of this tool.

    MLIR suggests ``-allow-unregistered-dialect``, a flag this tool does not
    have, and reports a file that ends inside a region as a missing op name.
    """
    found = _POSITION.match(position or "")
    if found is None:
        return message, position
    filename, line, col = found.group(1), int(found.group(2)), int(found.group(3))
    lines = text.split("\n")
    if message.startswith(_UNREGISTERED_DIALECT) and line <= len(lines):
        op_name = _OP_NAME_BEFORE.search(lines[line - 1][:col - 1])
        if op_name:
            dialect, start = op_name.group(1), op_name.start() + 1
            return (f"operation '{dialect}.{op_name.group(2)}' is of dialect '{dialect}', "
                    "which stablehlo-spmd does not know", f"{filename}:{line}:{start}")
    if message == "expected operation name in quotes" and line <= len(lines):
        rest = "\n".join([lines[line - 1][col - 1:], *lines[line:]])
        if not rest.strip():
            return "the input ends inside a region: expected '}'", position
    return message, position


_ARGUMENT_DECLARATION = re.compile(r"%[A-Za-z0-9_$.-]+\s*:")


def _locate_named_arguments(module: ir.Operation, text: str, filename: str) -> None:
    """Give name-only argument locations the file position of their declaration.

    JAX exports ``%arg0: tensor<..> loc("params['w1']")``: the name is kept, and
    the position where the parser saw ``%arg0`` becomes its child location.
    Only top-level functions are scanned; each signature is read once, left to
    right (``Value.get_name`` would print the whole module per argument).
    """
    line_starts = None
    for op in module.regions[0].blocks[0].operations:
        if op.operation.name != "func.func" or not op.regions[0].blocks:
            continue
        args = list(op.regions[0].blocks[0].arguments)
        if not any(_is_bare_name(a.location) for a in args):
            continue
        symbol = ir.StringAttr(op.attributes["sym_name"]).value
        header = re.search(r"func\.func\b[^@{]*@" + re.escape(symbol) + r"\s*\(", text)
        if header is None:
            continue
        if line_starts is None:
            line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        declarations = _ARGUMENT_DECLARATION.finditer(text, header.end())
        for arg, declaration in zip(args, declarations):
            if _is_bare_name(arg.location):
                line = _line_of(line_starts, declaration.start())
                col = declaration.start() - line_starts[line - 1] + 1
                arg.set_location(ir.Location.name(
                    arg.location.name_str, childLoc=ir.Location.file(filename, line, col)))


def _is_bare_name(location: ir.Location) -> bool:
    return isinstance(location, ir.NameLoc) and isinstance(location.child_loc, ir.UnknownLoc)


def _line_of(line_starts: list[int], offset: int) -> int:
    return bisect.bisect_right(line_starts, offset)


def ops_named(root: ir.Operation, names) -> list[ir.Operation]:
    """The ops under `root` (itself included) whose name is in `names`, in
    the walk's post-order (inner ops before the ops holding them), collected
    first so that callers may rewrite them."""
    found: list[ir.Operation] = []

    def visit(op):
        if op.name in names:
            found.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    return found


def print_module(module: ir.Operation, debug_info: bool = False) -> str:
    return module.get_asm(enable_debug_info=debug_info, assume_verified=True)


# ---------------------------------------------------------------- locations

def source_position(location: ir.Location) -> str | None:
    """``file:line:col`` of the first file position inside `location`, if any."""
    found = _file_location(location)
    if found is None:
        return None
    return f"{found.filename}:{found.start_line}:{found.start_col}"


def _typed(location: ir.Location) -> ir.Location:
    """Diagnostics hand out untyped locations; re-read them as their concrete kind."""
    return ir.Location.from_attr(location.attr) if type(location) is ir.Location else location


def _file_location(location: ir.Location):
    location = _typed(location)
    if isinstance(location, ir.FileLineColLoc):
        return location
    if isinstance(location, ir.NameLoc):
        return _file_location(location.child_loc)
    if isinstance(location, ir.CallSiteLoc):
        return _file_location(location.callee) or _file_location(location.caller)
    if isinstance(location, ir.FusedLoc):
        for inner in location.locations:
            found = _file_location(inner)
            if found is not None:
                return found
    return None


def location_name(location: ir.Location) -> str | None:
    """The outermost name in a location (JAX names arguments this way)."""
    location = _typed(location)
    if isinstance(location, ir.NameLoc):
        return location.name_str
    if isinstance(location, ir.FusedLoc):
        for inner in location.locations:
            name = location_name(inner)
            if name is not None:
                return name
    return None


# --------------------------------------------------------------- attributes

# Caches of MLIR objects, one dict per (context, cache name).  Weakly keyed
# so a context the project did not make is not held by its absent entry; the
# entries themselves hold their context, which is why `make_context` drops
# its context's caches when its block ends.
_PER_CONTEXT: "weakref.WeakKeyDictionary[ir.Context, dict[str, dict]]" = weakref.WeakKeyDictionary()


# The context asked for last and its caches: nearly every call asks for the
# same context as the one before, and a weak-dictionary lookup per op rule
# was a measurable part of partitioning.
_last: list = [None, None]


def per_context(name: str, context: ir.Context) -> dict:
    """The cache called `name` for `context` (created empty)."""
    if _last[0] is context:
        caches = _last[1]
    else:
        try:
            caches = _PER_CONTEXT[context]
        except KeyError:
            caches = _PER_CONTEXT[context] = {}
        _last[0], _last[1] = context, caches
    cache = caches.get(name)
    if cache is None:
        cache = caches[name] = {}
    return cache


def cached_attr(text: str, context: ir.Context | None = None) -> ir.Attribute:
    """``ir.Attribute.parse(text)``, once per context."""
    context = context or ir.Context.current
    cache = per_context("attributes", context)
    attr = cache.get(text)
    if attr is None:
        attr = cache[text] = ir.Attribute.parse(text, context)
    return attr
