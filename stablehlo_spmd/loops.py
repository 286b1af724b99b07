"""How many times a ``stablehlo.while`` runs, where its shape says so.

A scanned layer stack (``jax.lax.scan``, MaxText's ``scan_layers``) is one
loop whose body runs once per layer: whatever the body moves or costs, the
step pays it that many times.  XLA writes the count it proved into the
compiled while's ``known_trip_count``; before compiling, the count is read
from the shape JAX lowers ``lax.scan`` and ``fori_loop`` to: an integer
counter that starts at a constant, is compared ``LT`` with a constant (in
the condition, or in a carry the body passes on unchanged), and grows by a
constant 1 each iteration.  Any other loop's count is unknown here.

The search prices a loop body's moves once per iteration by it, and
stablehlo_spmd/collective_bytes.py counts a body's collectives by it.
"""

from __future__ import annotations

import re

from jaxlib.mlir import ir


def trip_count(loop: ir.Operation) -> int | None:
    """The iterations of the ``stablehlo.while`` `loop`, where it has the shape
    JAX lowers ``lax.scan`` and ``fori_loop`` to; None for any other loop."""
    condition = loop.regions[0].blocks[0]
    predicate = _terminator(condition).operands[0]
    if not isinstance(predicate, ir.OpResult):
        return None
    compare = predicate.owner
    if compare.operation.name != "stablehlo.compare" or \
            not re.search(r"\bLT\b", str(compare.attributes["comparison_direction"])):
        return None
    counter, limit = compare.operands
    if not isinstance(counter, ir.BlockArgument) or counter.owner != condition:
        return None
    index = counter.arg_number
    start, stop = _constant_int(loop.operands[index]), _constant_int(limit)
    if start is None or stop is None or _counter_step(loop, index) != 1:
        return None
    return max(0, stop - start)


def _terminator(block: ir.Block) -> ir.Operation:
    return block.operations[len(block.operations) - 1]


def _passed_on(loop: ir.Operation, index: int) -> bool:
    """Whether a while's body returns carry `index` unchanged, so it keeps its first value."""
    body = loop.regions[1].blocks[0]
    returned = _terminator(body).operands[index]
    return isinstance(returned, ir.BlockArgument) and returned.owner == body and \
        returned.arg_number == index


def _constant_int(value: ir.Value) -> int | None:
    """The integer a scalar always holds, where the program makes it a constant: a
    ``stablehlo.constant``, seen through manual-computation arguments and through loop
    carries the loop passes on unchanged (``fori_loop``'s upper bound)."""
    while isinstance(value, ir.BlockArgument):
        owner = value.owner.owner
        name = owner.operation.name
        if name == "stablehlo.while" and not _passed_on(owner, value.arg_number):
            return None
        if name not in ("stablehlo.while", "sdy.manual_computation"):
            return None   # a function's argument: its value is the caller's
        value = owner.operands[value.arg_number]
    op = value.owner
    if op.operation.name != "stablehlo.constant":
        return None
    try:
        constant = ir.DenseIntElementsAttr(op.attributes["value"])
    except ValueError:
        return None   # a float
    return int(constant[0]) if constant.is_splat else None


def _counter_step(loop: ir.Operation, index: int) -> int | None:
    """What the body adds to carry `index` each iteration, where it adds a constant."""
    body = loop.regions[1].blocks[0]
    returned = _terminator(body).operands[index]
    if not isinstance(returned, ir.OpResult) or \
            returned.owner.operation.name != "stablehlo.add":
        return None
    left, right = returned.owner.operands
    for counter, step in ((left, right), (right, left)):
        if isinstance(counter, ir.BlockArgument) and counter.owner == body and \
                counter.arg_number == index:
            return _constant_int(step)
    return None
