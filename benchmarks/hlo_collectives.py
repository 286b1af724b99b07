"""The collectives of a partitioned program and the bytes each one moves per device.

One counter for both sides of every comparison in benchmarks/: the same
costs whether a collective is read from XLA's optimized HLO text
(`collectives`) or from a partitioned StableHLO module before XLA compiles
it (`emitted_collectives`).

Costs per device follow the resharding table of DESIGN.md, whose T is the
bytes of the tensor the group covers; in a partitioned program every shape
is already per device, so with p the size of each replica group:

* all-reduce: the operand is the whole (partial) tensor, ``2·S_in·(p−1)/p``;
* all-gather: the result is the whole tensor, ``S_out·(p−1)/p``;
* reduce-scatter: the operand is the whole (partial) tensor, ``S_in·(p−1)/p``;
* all-to-all: the operand is one device's block, a 1/p of T, so
  T(p−1)/p² is ``S_in·(p−1)/p``;
* collective-permute: one block sent, ``S_in``.

A combined collective (XLA's combiners merge several into one op with a
tuple result, ``(f32[..], f32[..]) all-reduce(a, b)``) costs the sum of its
operands.  An async pair (``all-gather-start`` / ``all-gather-done``) is
counted once, at its start; a collective XLA wraps in a generic
``async-start`` is counted where it appears, inside the wrapped computation.

Plain text and regular expressions only, except `emitted_collectives`, which
reads the module with jaxlib's MLIR bindings.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Iterator

COLLECTIVE_KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                    "collective-permute")


def fmt_bytes(value: float) -> str:
    if value < 1024:
        return f"{value:.0f} B"
    if value < 1024 ** 2:
        return f"{value / 1024:.1f} KiB"
    return f"{value / 1024 ** 2:.2f} MiB"


@dataclasses.dataclass(frozen=True)
class Collective:
    kind: str
    shape: str        # the per-device operand shape(s)
    group: int        # p
    bytes: float      # per device, DESIGN.md's cost table
    # The instruction it serves, where the text says: a StableHLO op's location name, an
    # HLO instruction's metadata op_name (XLA carries the location there).
    source: str = dataclasses.field(default="", compare=False)

    def describe(self) -> str:
        return f"{self.kind:<18} {self.shape:<34} p={self.group:<2} {fmt_bytes(self.bytes):>9}"


def total_bytes(found: list[Collective]) -> float:
    return sum(c.bytes for c in found)


def collective_cost(kind: str, operand_bytes: float, result_bytes: float, p: int) -> float:
    """Bytes one device moves, by the cost table in this module's docstring."""
    if kind == "all-reduce":
        return 2 * operand_bytes * (p - 1) / p
    if kind == "all-gather":
        return result_bytes * (p - 1) / p
    if kind in ("reduce-scatter", "all-to-all"):
        return operand_bytes * (p - 1) / p
    if kind == "collective-permute":
        return operand_bytes
    raise ValueError(f"not a collective: {kind}")


def _record(kind: str, operand_shapes: list[str], result_shape: str, p: int,
            source: str = "") -> Collective:
    size = sum(_shape_bytes(s) for s in operand_shapes)
    cost = collective_cost(kind, size, _shape_bytes(result_shape), p)
    plain = [re.sub(r"\{[\d,]*\}", "", s) for s in operand_shapes]   # layouts dropped
    text = ", ".join(plain) if len(plain) <= 3 else f"{len(plain)} operands: " + ", ".join(
        plain[:2]) + ", ..."
    return Collective(kind, text, p, cost, source)


# ------------------------------------------------------------------ HLO text

_DTYPE_BYTES = {"pred": 1, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "s16": 2, "u16": 2,
                "s32": 4, "u32": 4, "s64": 8, "u64": 8, "f16": 2, "bf16": 2, "f32": 4, "f64": 8,
                "c64": 8, "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1, "token": 0}
_ARRAY = re.compile(r"\b([a-z]\w*)\[([\d,]*)\]")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")


def _shape_bytes(shape: str) -> int:
    """Bytes of every array in an HLO shape, tuples included (``(f32[2], s32[])``)."""
    total = 0.0
    for dtype, dims in _ARRAY.findall(shape):
        size = _DTYPE_BYTES.get(dtype)
        if size is None:
            continue
        total += size * math.prod(int(d) for d in dims.split(",") if d)
    return int(total)


def _split_shape(rest: str) -> tuple[str, str]:
    """``f32[8,4]{1,0} all-reduce(...)`` or ``(f32[..], f32[..]) op(...)`` -> (shape, remainder)."""
    if rest.startswith("("):
        depth = 0
        for i, char in enumerate(rest):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth == 0:
                return rest[:i + 1], rest[i + 1:].lstrip()
    head, _, tail = rest.partition(" ")
    return head, tail


def _top_level(text: str, separator: str = ",") -> list[str]:
    """`text` split at the separators outside any bracket."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == separator and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        depth += {"(": 1, ")": -1, "{": 1, "}": -1, "[": 1, "]": -1}.get(char, 0)
        current += char
    if current.strip():
        parts.append(current.strip())
    return parts


def _operands(text: str) -> tuple[list[str], str]:
    """The operand list of ``op(a, b), attrs`` (up to the matching paren) and the attributes."""
    start = text.index("(")
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1, "{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            inner, attrs = text[start + 1:i], text[i + 1:]
            break
    else:
        inner, attrs = text[start + 1:], ""
    return _top_level(inner), attrs


def _group_size(attrs: str, devices: int) -> int:
    """p: the size of each replica group, in any of the spellings XLA prints."""
    if "replica_groups=" not in attrs or "replica_groups={}" in attrs:
        return devices                                 # one group of every partition
    iota = re.search(r"replica_groups=\[([\d,]+)\]<=", attrs)
    if iota:                                           # [groups,size]<=[dims]T(perm)
        return int(iota.group(1).split(",")[-1])
    explicit = re.search(r"replica_groups=\{\{([\d,]*)\}", attrs)
    if explicit:                                       # {{0,1},{2,3}}
        return len(explicit.group(1).split(","))
    # mesh-axes form: replica_groups=mesh['a'=4,'b'=2][, device_ids=(...)] {'a'}
    axes = re.search(r"replica_groups=mesh\[([^\]]*)\](?:,\s*device_ids=\((?:[^()]|\([^()]*\))*\))?"
                     r"\s*\{([^}]*)\}", attrs)
    if axes:
        sizes = {name: int(size) for name, size in re.findall(r"'([^']+)'=(\d+)", axes.group(1))}
        return math.prod(sizes[name] for name in re.findall(r"'([^']+)'", axes.group(2)))
    raise ValueError(f"cannot read the replica groups of: {attrs.strip()[:200]}")


def _async_result(shape: str) -> str:
    """The result half of an ``all-gather-start``'s ``(operands, results)`` tuple."""
    halves = _top_level(shape[1:-1]) if shape.startswith("(") else []
    return halves[1] if len(halves) == 2 else shape


def instructions(hlo_text: str) -> Iterator[tuple[str, str, str, str]]:
    """(name, shape, opcode, ``opcode(operands), attributes``) of each instruction line."""
    for line in hlo_text.splitlines():
        match = _INSTRUCTION.match(re.sub(r"/\*.*?\*/", "", line))   # drop /*index=5*/
        if not match:
            continue
        name, rest = match.groups()
        shape, rest = _split_shape(rest)
        yield name, shape, rest.split("(", 1)[0].strip(), rest


def collectives(hlo_text: str, devices: int) -> list[Collective]:
    """Every collective of an HLO module's text, with its per-device cost.

    `devices` is the group size of a collective over every partition
    (``replica_groups={}`` or none).
    """
    shapes: dict[str, str] = {}
    found = []
    for name, shape, opcode, rest in instructions(hlo_text):
        shapes[name] = shape
        started = opcode.endswith("-start")
        kind = opcode[:-len("-start")] if started else opcode
        if kind not in COLLECTIVE_KINDS:
            continue   # (a "-done" lands here too: its "-start" was counted)
        operands, attrs = _operands(rest)
        operand_shapes = []
        for operand in operands:
            if re.search(r"\[[\d,]*\]", operand.split("%")[0]):   # inline "f32[2,8]{1,0} %x"
                operand_shapes.append(operand.rsplit(" ", 1)[0])
            else:
                operand_shapes.append(shapes.get(operand.lstrip("%").split(" ")[-1], ""))
        if kind == "collective-permute":
            operand_shapes = operand_shapes[:1]   # (the in-place form's other operands are indices)
            p = 1
        else:
            p = _group_size(attrs, devices)
        result = _async_result(shape) if started and kind == "all-gather" else shape
        source = re.search(r'metadata=\{[^}]*\bop_name="([^"]*)"', attrs)
        found.append(_record(kind, operand_shapes, result, p, source.group(1) if source else ""))
    return found


# ------------------------------------------------------------------ StableHLO (as emitted)

_STABLEHLO_KINDS = {f"stablehlo.{kind.replace('-', '_')}": kind for kind in COLLECTIVE_KINDS}
_MLIR_ELEMENT = {"i1": "pred", "complex<f32>": "c64", "complex<f64>": "c128",
                 "f8E4M3FN": "f8e4m3fn", "f8E5M2": "f8e5m2"}


def _hlo_shape(mlir_type) -> str:
    """An MLIR ranked tensor type in HLO's spelling: ``tensor<2x16xi32>`` -> ``s32[2,16]``."""
    from jaxlib.mlir import ir

    tensor = ir.RankedTensorType(mlir_type)
    element = str(tensor.element_type)
    if element in _MLIR_ELEMENT:
        element = _MLIR_ELEMENT[element]
    elif re.fullmatch(r"ui\d+", element):
        element = "u" + element[2:]
    elif re.fullmatch(r"i\d+", element):
        element = "s" + element[1:]
    return f"{element}[{','.join(str(d) for d in tensor.shape)}]"


def _stablehlo_group_size(op, devices: int) -> int:
    from jaxlib.mlir import ir

    if "replica_groups" not in op.attributes:
        return devices
    groups = ir.DenseIntElementsAttr(op.attributes["replica_groups"])
    shape = ir.RankedTensorType(groups.type).shape
    if not shape or 0 in shape:
        return devices                                 # empty: one group of every partition
    first = [groups[i] for i in range(shape[-1])]
    return sum(1 for device in first if device >= 0)   # -1 pads a shorter group


def emitted_collectives(module_text: str, devices: int) -> list[Collective]:
    """Every collective of a partitioned StableHLO module as the partitioner emitted it,
    before XLA compiles (and may combine, split or add to) them."""
    from jaxlib.mlir import ir

    from stablehlo_spmd.ir import make_context, parse_module

    found = []
    with make_context() as context:
        module = parse_module(module_text, "<partitioned>", context)

        def visit(op):
            kind = _STABLEHLO_KINDS.get(op.name)
            if kind is not None:
                operands = [_hlo_shape(v.type) for v in op.operands]
                results = [_hlo_shape(r.type) for r in op.results]
                p = 1 if kind == "collective-permute" else _stablehlo_group_size(op, devices)
                name = re.search(r'loc\("([^"]+)"[()]', str(op.location))   # a name, not a file
                found.append(_record(kind, operands, ", ".join(results), p,
                                     name.group(1) if name else ""))
            return ir.WalkResult.ADVANCE

        module.walk(visit)
    return found
