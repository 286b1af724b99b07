"""``spmd-inline-calls``: write each call's callee out at the call.

XLA inlines calls before it partitions a program and before it assigns its
buffers (its ``CallInliner``), so a function called from every layer (a
jitted silu) holds its values once per call, and XLA's fusion sees through
it.  ``spmd-auto-shard`` runs this first, so that the search prices the
program XLA compiles: with Mixtral's silu kept a call, its memory estimate
held the silu's values once for all layers (0.91x of XLA's figure at 8
layers under a tight budget; written out, 0.97-1.01x).

A callee with a sharding on an argument or a result (``mhlo.sharding``,
``sdy.sharding``) is kept a call: its annotations are constraints the
inlined code would lose.  So is one whose body is not one block ending in
``func.return``, and a call inside its own callee.  A private callee no
call reaches any longer is removed.  The pass is its own mnemonic too,
for pipelines that want the inlined program without a search.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jaxlib.mlir import ir

from stablehlo_spmd.passes import ModulePass, register_pass

_SHARDING_ATTRS = ("mhlo.sharding", "sdy.sharding")


@register_pass
@dataclasses.dataclass(frozen=True)
class InlineCallsPass(ModulePass):
    name: ClassVar[str] = "spmd-inline-calls"
    description: ClassVar[str] = "write each call's callee out at the call, as XLA does"

    def run(self, module: ir.Operation) -> None:
        inline_calls(module)


def inline_calls(module: ir.Operation) -> int:
    """Inline every call whose callee allows it (see the module docstring);
    the number of calls inlined."""
    body = module.regions[0].blocks[0]
    functions = {ir.StringAttr(op.attributes["sym_name"]).value: op.operation
                 for op in body.operations if op.operation.name == "func.func"}
    inlinable = {name for name, func in functions.items() if _inlinable(func)}
    pending = [call for func in functions.values() for call in _calls(func)]
    inlined = 0
    while pending:
        call = pending.pop()
        callee = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
        if callee not in inlinable or _inside(call, functions[callee]):
            continue
        pending.extend(_inline(call, functions[callee]))
        inlined += 1
    if inlined:
        _drop_unreached(body, functions)
    return inlined


def _inlinable(func: ir.Operation) -> bool:
    blocks = list(func.regions[0].blocks)
    if len(blocks) != 1:
        return False
    operations = list(blocks[0].operations)
    if not operations or operations[-1].operation.name != "func.return":
        return False
    for name in ("arg_attrs", "res_attrs"):
        if name not in func.attributes:
            continue
        for entry in ir.ArrayAttr(func.attributes[name]):
            attrs = ir.DictAttr(entry)
            if any(key in attrs for key in _SHARDING_ATTRS):
                return False
    return True


def _calls(op: ir.Operation) -> list[ir.Operation]:
    found = []
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                if inner.operation.name == "func.call":
                    found.append(inner.operation)
                found.extend(_calls(inner.operation))
    return found


def _inside(op: ir.Operation, func: ir.Operation) -> bool:
    parent = op.parent
    while parent is not None:
        if parent == func:
            return True
        parent = parent.parent
    return False


def _inline(call: ir.Operation, callee: ir.Operation) -> list[ir.Operation]:
    """Clone `callee`'s body before `call`, its arguments read as the call's
    operands, and replace the call's results; the calls the clone holds."""
    block = callee.regions[0].blocks[0]
    mapping = {argument: operand for argument, operand in zip(block.arguments, call.operands)}
    operations = list(block.operations)
    point = ir.InsertionPoint(call)
    calls = []
    for op in operations[:-1]:
        clone = op.operation.clone(ip=point)
        _remap(clone, mapping)
        for old, new in zip(op.results, clone.results):
            mapping[old] = new
        if clone.name == "func.call":
            calls.append(clone)
        calls.extend(_calls(clone))
    returned = operations[-1].operation.operands
    for result, value in zip(call.results, returned):
        result.replace_all_uses_with(mapping.get(value, value))
    call.erase()
    return calls


def _remap(op: ir.Operation, mapping: dict) -> None:
    """Read the callee's values as their clones, in `op` and in its regions
    (a region may read a value of the body around it)."""
    for position, operand in enumerate(op.operands):
        replacement = mapping.get(operand)
        if replacement is not None:
            op.operands[position] = replacement
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                _remap(inner.operation, mapping)


def _drop_unreached(body: ir.Block, functions: dict[str, ir.Operation]) -> None:
    called = {ir.FlatSymbolRefAttr(call.attributes["callee"]).value
              for func in functions.values() for call in _calls(func)}
    for name, func in functions.items():
        visibility = func.attributes["sym_visibility"] if "sym_visibility" in func.attributes \
            else None
        if name not in called and visibility is not None \
                and ir.StringAttr(visibility).value == "private":
            func.erase()
