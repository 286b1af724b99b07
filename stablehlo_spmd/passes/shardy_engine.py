"""``spmd-propagate{engine=shardy}``: Shardy's propagation, as a second engine.

This module owns one round trip: a module in this project's form (``mhlo.sharding``
strings, ``custom_call @Sharding`` constraints, the mesh in ``spmd.mesh``) is
rewritten into Shardy's form, jaxlib's in-process ``sdy-propagation-pipeline``
completes it, and the answer is rewritten back, so that the rest of the
pipeline (and the comparison against ``engine=spmd``) reads one format.

Out, before Shardy runs:

* ``sdy.mesh @mesh = <...>`` at the start of the module body, plus one
  ``@maximal_mesh_<d> = <[], device_ids=[d]>`` per device a maximal sharding
  names (JAX's names; a maximal sharding is written ``<@maximal_mesh_d, []>``,
  with no dimensions, as Shardy's verifier requires);
* ``sdy.sharding = #sdy.sharding<@mesh, ...>`` on arguments and results,
  ``#sdy.sharding_per_value`` on any op that already carries a sharding (a
  pinned op stays pinned), and ``sdy.sharding_constraint`` in place of every
  ``custom_call @Sharding``.  ``mhlo.sharding`` text has no "open" dimension,
  so every converted sharding is closed, which is what a pin means in the
  spmd engine too; ``{unknown}`` is dropped (no sharding = Shardy may choose).

Back, after Shardy runs:

* the pipeline ends with its own clean-up passes, which leave two ops
  `import_shardy` does not read: ``sdy.constant`` (the constant splitter and
  merger turn every ``stablehlo.constant`` into one, and merge equal constant
  expressions -- constants, and broadcasts or arithmetic of constants -- that
  ended up with equal shardings), and ``sdy.reshard`` (what user constraints
  become, and what ``sdy-insert-explicit-reshards`` inserts where an operand
  does not match its op's sharding).  Any other sdy op left over (a
  ``sdy.manual_computation`` in the input, say) is refused with an error.  Constants go back to
  ``stablehlo.constant``; a reshard becomes a ``sdy.sharding_constraint`` so
  that `import_shardy` turns it into the same ``custom_call @Sharding`` the
  spmd engine writes for its own marked reshards;
* `import_shardy` rewrites every ``sdy.sharding`` (``TensorShardingPerValueAttr``
  on ops becomes one ``mhlo.sharding``, a tuple for several results), erases
  the ``sdy.mesh`` ops and writes ``spmd.mesh``;
* a value Shardy leaves without a sharding is fully replicated in Shardy's
  model; it gets ``{replicated}`` written out, so the output meets the spmd
  engine's contract (every op with tensor results, every argument and result
  carries ``mhlo.sharding``) and a later pass never has to guess.

Shardy does not keep the spmd engine's unreduced (Partial) values flowing:
it reduces where the reduction happens, so this engine's output has no
``{unreduced}`` sharding unless the user wrote one.  See
``docs/engine_comparison.md`` for what else differs.

Errors, whether in the conversion (a manual sharding, a sub-axis Shardy chose)
or from Shardy's own verifier and passes, are reported as located diagnostics
through `stablehlo_spmd.diagnostics`; nothing here raises for bad input.
Shardy's warnings (an op its rule registry does not know, a sharding group it
had to relax) come back as located warnings; note that Shardy warns about an
unknown op only the first time it meets it in a process.
"""

from __future__ import annotations

from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import stablehlo

from stablehlo_spmd import diagnostics
from stablehlo_spmd.errors import ShardingError
from stablehlo_spmd.hlo_sharding import HloSharding
from stablehlo_spmd.ir import cached_attr, source_position
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.module_shardings import (
    MHLO_SHARDING, SDY_SHARDING, ShardedValue, all_sharded_values, functions, function_values,
    import_shardy, is_sharding_constraint, mesh_attr_text, read_hlo, set_attrs,
    sdy_sharding_text, sharding_attr)
from stablehlo_spmd.sharding import Sharding

PIPELINE = "builtin.module(sdy-propagation-pipeline)"
MESH_NAME = "mesh"
ENTRY_NAME = "main"  # the function Shardy's call-graph passes look up by name

# Ops the pipeline leaves that the round trip rewrites (all other sdy ops are refused).
_HANDLED_SDY_OPS = {"sdy.mesh", "sdy.constant", "sdy.reshard", "sdy.sharding_constraint"}


def run_shardy_propagation(module: ir.Operation, mesh: Mesh) -> None:
    """Complete `module`'s shardings with Shardy; diagnostics on failure."""
    with module.context:
        entry = _entry_function(module)
        if entry is None:
            return
        if not to_shardy(module, mesh):
            return
        renamed = entry != ENTRY_NAME
        if renamed:
            _rename_function(module, entry, ENTRY_NAME)
        try:
            ran = _run_pipeline(module)
        finally:
            if renamed:
                _rename_function(module, ENTRY_NAME, entry)
        if not ran:
            return
        if not _back_to_stablehlo(module):
            return
        try:
            import_shardy(module)
        except ShardingError as error:
            diagnostics.error(error.location or module.location,
                              f"cannot read Shardy's answer back: {error.message}")
            return
        _replicate_unsharded(module)


# ------------------------------------------------------------- the entry

def _entry_function(module: ir.Operation) -> str | None:
    """The name of the function Shardy will treat as ``@main``.

    Shardy's call-graph passes look the entry up by the name ``main`` and
    abort the whole process (a CHECK failure, not a diagnostic) when a module
    with calls, or with only private functions, has none.  A module without
    ``@main`` but with exactly one public function has it renamed to ``main``
    while Shardy runs; any other module is refused here, with a diagnostic.
    """
    public = []
    for func in functions(module):
        name = ir.StringAttr(func.attributes["sym_name"]).value
        if name == ENTRY_NAME:
            return name
        visibility = func.attributes["sym_visibility"] if "sym_visibility" in func.attributes \
            else None
        if visibility is None or ir.StringAttr(visibility).value == "public":
            public.append(name)
    if len(public) == 1:
        return public[0]
    found = ", ".join(f"@{name}" for name in public) or "none"
    diagnostics.error(module.location, "the shardy engine needs one entry function: a "
                      f"@{ENTRY_NAME}, or a single public function (public functions: {found})")
    return None


def _rename_function(module: ir.Operation, old: str, new: str) -> None:
    for func in functions(module):
        if ir.StringAttr(func.attributes["sym_name"]).value == old:
            ir.SymbolTable.set_symbol_name(func, new)
            break
    ir.SymbolTable.replace_all_symbol_uses(old, new, module)


# ------------------------------------------------------------------ to sdy

def to_shardy(module: ir.Operation, mesh: Mesh) -> bool:
    """Rewrite `module`'s ``mhlo.sharding`` form into Shardy's, in place.

    Returns False (after reporting located errors) when some sharding has no
    Shardy form; the module is then left untouched.  Public so that tools
    (``benchmarks/propagation_speed.py``) can hand Shardy the same program.
    """
    context = module.context
    maximal_devices: set[int] = set()
    updates = []
    ok = True
    constraints = []
    for value in all_sharded_values(module):
        # Only XLA's spelling is converted: an sdy.sharding_constraint is
        # Shardy's own already (import_shardy leaves none behind anyway).
        if value.kind == "op" and value.owner.name == "stablehlo.custom_call" \
                and is_sharding_constraint(value.owner):
            constraints.append(value)
            continue
        try:
            attr = _sdy_attr(value, mesh, maximal_devices, context)
        except ShardingError as error:
            diagnostics.error(error.location or value.location,
                              f"{value.describe()}: cannot be given to Shardy: {error.message}")
            ok = False
            continue
        updates.append((value, MHLO_SHARDING, None))
        if attr is not None:
            updates.append((value, SDY_SHARDING, attr))
    replacements = []
    for value in constraints:
        try:
            hlo = read_hlo(value)
            sharding = _to_sharding(hlo, mesh, value)
            if sharding is None:  # {unknown} constrains nothing
                replacements.append((value.owner, None))
                continue
            if sharding.is_maximal:
                maximal_devices.add(sharding.maximal_device)
            text = sdy_sharding_text(sharding, MESH_NAME)
        except ShardingError as error:
            diagnostics.error(error.location or value.location,
                              f"sharding constraint cannot be given to Shardy: {error.message}")
            ok = False
            continue
        replacements.append((value.owner, cached_attr(text, context)))
    if not ok:
        return False
    set_attrs(updates)
    for op, attr in replacements:
        _replace_constraint(op, attr)
    _declare_meshes(module, mesh, maximal_devices)
    return True


def _sdy_attr(value: ShardedValue, mesh: Mesh, maximal_devices: set[int],
              context: ir.Context) -> ir.Attribute | None:
    hlo = read_hlo(value)
    if value.kind != "op":
        sharding = _to_sharding(hlo, mesh, value)
        if sharding is None:
            return None
        if sharding.is_maximal:
            maximal_devices.add(sharding.maximal_device)
        return cached_attr(sdy_sharding_text(sharding, MESH_NAME), context)
    op = value.owner
    elements = hlo.elements if hlo.kind == "tuple" else (hlo,) * len(op.results)
    if len(elements) != len(op.results):
        raise _error(value, f"{len(elements)} shardings for {len(op.results)} results")
    per_result = []
    for result, element in zip(op.results, elements):
        result_value = ShardedValue("op", op, 0, None, op.location, result.type)
        sharding = _to_sharding(element, mesh, result_value)
        if sharding is None:  # {unknown}: open, any sharding Shardy likes
            rank = result_value.rank or 0
            per_result.append(f"<@{MESH_NAME}, [{', '.join(['{?}'] * rank)}]>")
            continue
        if sharding.is_maximal:
            maximal_devices.add(sharding.maximal_device)
        per_result.append(sdy_sharding_text(sharding, MESH_NAME)[len("#sdy.sharding"):])
    return cached_attr(f"#sdy.sharding_per_value<[{', '.join(per_result)}]>", context)


def _to_sharding(hlo: HloSharding | None, mesh: Mesh, value: ShardedValue) -> Sharding | None:
    if hlo is None or hlo.kind == "unknown":
        return None
    rank = value.rank
    if rank is None:
        raise _error(value, "Shardy shards ranked tensors only")
    if hlo.kind == "tuple":
        raise _error(value, "a tuple sharding on a single tensor")
    try:
        return Sharding.from_hlo(hlo, mesh, rank)
    except ShardingError as error:
        raise _error(value, error.message) from None


def _error(value: ShardedValue, message: str) -> ShardingError:
    return ShardingError(message, source_position(value.location))


def _replace_constraint(op: ir.Operation, attr: ir.Attribute | None) -> None:
    if attr is None:
        op.results[0].replace_all_uses_with(op.operands[0])
        op.erase()
        return
    with ir.InsertionPoint(op), op.location:
        constraint = ir.Operation.create(
            "sdy.sharding_constraint", results=[op.results[0].type], operands=[op.operands[0]],
            attributes={"sharding": attr})
    op.results[0].replace_all_uses_with(constraint.results[0])
    op.erase()


def _declare_meshes(module: ir.Operation, mesh: Mesh, maximal_devices: set[int]) -> None:
    context = module.context
    body = module.regions[0].blocks[0]
    declarations = [(MESH_NAME, mesh_attr_text(mesh, sdy_axes=True))]
    declarations += [(f"maximal_mesh_{d}", f"#sdy.mesh<[], device_ids=[{d}]>")
                     for d in sorted(maximal_devices)]
    with ir.InsertionPoint.at_block_begin(body), module.location:
        for name, text in declarations:
            ir.Operation.create("sdy.mesh", attributes={
                "sym_name": ir.StringAttr.get(name, context),
                "mesh": cached_attr(text, context)})


# -------------------------------------------------------------- run Shardy

def _run_pipeline(module: ir.Operation) -> bool:
    """Run Shardy in the module's context; its diagnostics become ours."""
    context = module.context
    seen: list[tuple] = []

    def handler(diagnostic) -> bool:
        # Errors come back on the MLIRError below; keep the others, read now:
        # a diagnostic is only valid inside its callback.
        if diagnostic.severity != ir.DiagnosticSeverity.ERROR:
            seen.append(_read(diagnostic))
        return True

    attached = context.attach_diagnostic_handler(handler)
    try:
        manager = passmanager.PassManager.parse(PIPELINE, context)
        manager.run(module)
    except ir.MLIRError as error:
        reported = False
        for diagnostic in error.error_diagnostics:
            _report(_read(diagnostic), "error")
            reported = True
        if not reported:
            diagnostics.error(module.location, f"Shardy propagation failed: {error}")
        return False
    finally:
        attached.detach()
        for diagnostic in seen:
            _report(diagnostic, "warning")
    return True


def _read(diagnostic) -> tuple:
    """(location, message, notes) of an MLIR diagnostic, copied out of it."""
    return (diagnostic.location, diagnostic.message,
            [(note.location, note.message) for note in diagnostic.notes])


def _report(read: tuple, severity: str) -> None:
    location, message, notes = read
    emit = diagnostics.error if severity == "error" else diagnostics.warning
    emit(location, f"Shardy propagation: {message}")
    for note_location, note_message in notes:
        diagnostics.note(note_location, note_message)


# --------------------------------------------------------------- from sdy

def _back_to_stablehlo(module: ir.Operation) -> bool:
    found: list[ir.Operation] = []

    def visit(op):
        if op.name.startswith("sdy.") and op.name != "sdy.mesh":
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    ok = True
    for op in found:
        if op.name == "sdy.constant":
            _constant_back(op)
        elif op.name == "sdy.reshard":
            _reshard_back(op)
        elif op.name not in _HANDLED_SDY_OPS:
            diagnostics.error(op.location, f"Shardy left '{op.name}', which has no "
                              "mhlo.sharding form; the shardy engine cannot express it")
            ok = False
    return ok


def _constant_back(op: ir.Operation) -> None:
    with ir.InsertionPoint(op), op.location:
        constant = stablehlo.ConstantOp(op.attributes["value"])
    if SDY_SHARDING in op.attributes:
        constant.operation.attributes[SDY_SHARDING] = op.attributes[SDY_SHARDING]
    op.results[0].replace_all_uses_with(constant.result)
    op.erase()


def _reshard_back(op: ir.Operation) -> None:
    with ir.InsertionPoint(op), op.location:
        constraint = ir.Operation.create(
            "sdy.sharding_constraint", results=[op.results[0].type], operands=[op.operands[0]],
            attributes={"sharding": op.attributes["sharding"]})
    op.results[0].replace_all_uses_with(constraint.results[0])
    op.erase()


def _replicate_unsharded(module: ir.Operation) -> None:
    """``{replicated}`` on every tensor value Shardy left without a sharding."""
    context = module.context
    replicated = sharding_attr(HloSharding.replicated(), context)
    updates = []
    for func in functions(module):
        for value in function_values(func):
            if value.rank is not None and value.get(MHLO_SHARDING) is None:
                updates.append((value, MHLO_SHARDING, replicated))
    set_attrs(updates)

    def visit(op):
        if MHLO_SHARDING in op.attributes or op.name == "func.func" or not len(op.results):
            return ir.WalkResult.ADVANCE
        if all(isinstance(r.type, ir.RankedTensorType) for r in op.results):
            if len(op.results) == 1:
                op.attributes[MHLO_SHARDING] = replicated
            else:
                op.attributes[MHLO_SHARDING] = sharding_attr(
                    HloSharding.tuple_of([HloSharding.replicated()] * len(op.results)), context)
        return ir.WalkResult.ADVANCE

    module.walk(visit)

