"""The collectives of a partitioned program and the bytes each one moves per device.

One counter for both sides of every comparison in benchmarks/: the same
costs whether a collective is read from XLA's optimized HLO text
(`collectives`) or from a partitioned StableHLO module before XLA compiles
it (`emitted_collectives`, or `module_collectives` on a parsed one).
``spmd-propagate`` counts by it too, to keep whichever completion moves
fewer bytes (`passes.propagate`).

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

Loops and calls: a program is counted as it runs, from its entry.  A
collective in a loop body runs once per iteration, so its record carries
``times``, the runs per step, and ``bytes`` is the total over those runs
(``per_run`` is one run's): the body of a loop of n iterations counts n
times, its condition n + 1 times (it runs once more, to stop), and nested
loops multiply.  XLA writes n into the while's ``backend_config``
(``"known_trip_count":{"n":"32"}``); in StableHLO it is read from the shape
JAX lowers ``lax.scan`` and ``fori_loop`` to (`stablehlo_spmd.loops`, which
the search prices loop bodies by too).  A loop of any other shape has an unknown trip
count: it is counted once and named in the result's ``unknown_loops``, so a
count that is too low says so.  A conditional counts its largest branch (by
bytes) once.  Anything else a computation calls (``call``, fusions, generic
async wrappers, ``func.call``) counts at each call site, as often as its
caller runs; a computation nothing reaches from the entry is not counted
(XLA's reduction bodies, dead private functions).

Plain text and regular expressions only, except `emitted_collectives` and
`module_collectives`, which read the module with jaxlib's MLIR bindings.
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
    bytes: float      # per device, DESIGN.md's cost table, over all `times` runs
    # The instruction it serves, where the text says: a StableHLO op's location name, an
    # HLO instruction's metadata op_name (XLA carries the location there).
    source: str = dataclasses.field(default="", compare=False)
    times: int = 1    # runs per step: the trip counts of the loops around it, multiplied

    @property
    def per_run(self) -> float:
        return self.bytes / self.times

    def describe(self) -> str:
        runs = f"  x{self.times}" if self.times != 1 else ""
        return (f"{self.kind:<18} {self.shape:<34} p={self.group:<2} "
                f"{fmt_bytes(self.bytes):>9}{runs}")


class CollectiveList(list):
    """A program's collectives (a plain list of `Collective`, in program order) and the
    loops whose trip count could not be read (`unknown_loops`, by name): each of those
    is counted once, so a total is low by their missing iterations."""

    def __init__(self, found=(), unknown_loops=()):
        super().__init__(found)
        self.unknown_loops = tuple(unknown_loops)


def total_bytes(found: list[Collective]) -> float:
    """Bytes one device moves per step (each record's bytes already cover all its runs)."""
    return sum(c.bytes for c in found)


def executions(found: list[Collective], kind: str | None = None) -> int:
    """How many collectives (of `kind`, or of any) one step carries out."""
    return sum(c.times for c in found if kind is None or c.kind == kind)


def _repeated(found: list[Collective], times: int) -> list[Collective]:
    """`found` as it runs `times` times over (inside a loop of that many iterations); a
    loop that never iterates runs none of it."""
    if times == 1:
        return list(found)
    if times == 0:
        return []
    return [dataclasses.replace(c, times=c.times * times, bytes=c.bytes * times)
            for c in found]


def _unique(names: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


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


def _instruction(line: str) -> tuple[str, str, str, str] | None:
    match = _INSTRUCTION.match(re.sub(r"/\*.*?\*/", "", line))   # drop /*index=5*/
    if not match:
        return None
    name, rest = match.groups()
    shape, rest = _split_shape(rest)
    return name, shape, rest.split("(", 1)[0].strip(), rest


def instructions(hlo_text: str) -> Iterator[tuple[str, str, str, str]]:
    """(name, shape, opcode, ``opcode(operands), attributes``) of each instruction line."""
    for line in hlo_text.splitlines():
        parsed = _instruction(line)
        if parsed:
            yield parsed


def _hlo_collective(shape: str, opcode: str, rest: str, shapes: dict[str, str],
                    devices: int) -> Collective | None:
    """The collective one instruction performs, or None; `shapes` holds the shapes of the
    instructions before it, for operands printed by name only."""
    started = opcode.endswith("-start")
    kind = opcode[:-len("-start")] if started else opcode
    if kind not in COLLECTIVE_KINDS:
        return None   # (a "-done" lands here too: its "-start" was counted)
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
    return _record(kind, operand_shapes, result, p, source.group(1) if source else "")


# A computation's first line: ``%add (a: f32[], b: f32[]) -> f32[] {``, ``ENTRY %main (...``.
_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*[({]")
# The attributes that name computations an instruction runs.
_CALLED = re.compile(r"\b(?:to_apply|calls|body|condition|branch_computations|"
                     r"true_computation|false_computation|called_computations|select|scatter)"
                     r"=(\{[^{}]*\}|%?[\w.\-]+)")
_TRIP_COUNT = re.compile(r'\\?"known_trip_count\\?"\s*:\s*\{\s*\\?"n\\?"\s*:\s*\\?"?(\d+)')


def _computations(hlo_text: str) -> tuple[dict[str, list[str]], str]:
    """The lines of each computation by name, and the entry computation's name.

    A text with no ENTRY (a fragment of instruction lines) is read as one computation
    of all its lines, as this counter read every text before it followed calls.
    """
    bodies: dict[str, list[str]] = {}
    entry, current = None, None
    for line in hlo_text.splitlines():
        header = _COMPUTATION.match(line)
        if header and line.rstrip().endswith("{"):
            current = header.group(2)
            bodies[current] = []
            if header.group(1):
                entry = current
        elif line.startswith("}"):
            current = None
        elif current is not None:
            bodies[current].append(line)
    if entry is None:
        return {"": hlo_text.splitlines()}, ""
    return bodies, entry


def _called(opcode: str, rest: str, bodies: dict[str, list[str]]) -> list[str]:
    """The computations an instruction runs, in the order it names them."""
    if opcode in ("async-update", "async-done"):
        return []   # they name the computation their async-start already ran
    names = []
    for value in _CALLED.findall(rest):   # (operands never hold "name=")
        names += [name for name in re.findall(r"%?([\w.\-]+)", value) if name in bodies]
    return names


def _trip_count(rest: str) -> int | None:
    found = _TRIP_COUNT.search(rest)
    return int(found.group(1)) if found else None


class _HloProgram:
    """An HLO module's computations, each counted once per run and remembered, so a
    computation called from many places is read once."""

    def __init__(self, hlo_text: str, devices: int):
        self.bodies, self.entry = _computations(hlo_text)
        self.devices = devices
        self.counted: dict[str, list[Collective]] = {}
        self.unknown_loops: list[str] = []

    def run(self, computation: str) -> list[Collective]:
        """The collectives one run of `computation` performs, with those of everything it
        calls."""
        if computation not in self.counted:
            self.counted[computation] = []            # (HLO has no recursion; a guard anyway)
            self.counted[computation] = self._count(self.bodies[computation])
        return self.counted[computation]

    def _count(self, lines: list[str]) -> list[Collective]:
        shapes: dict[str, str] = {}   # per computation: parameter names repeat across them
        found: list[Collective] = []
        for parsed in filter(None, map(_instruction, lines)):
            name, shape, opcode, rest = parsed
            shapes[name] = shape
            record = _hlo_collective(shape, opcode, rest, shapes, self.devices)
            if record is not None:
                found.append(record)
            found += self._calls(name, opcode, rest)
        return found

    def _calls(self, name: str, opcode: str, rest: str) -> list[Collective]:
        called = _called(opcode, rest, self.bodies)
        if not called:
            return []
        if opcode == "conditional":
            # One branch runs; which one is data: the largest bounds the cost.
            return max((self.run(branch) for branch in called), key=total_bytes)
        if opcode == "while":
            return self._loop(name, rest)
        return [c for computation in called for c in self.run(computation)]

    def _loop(self, name: str, rest: str) -> list[Collective]:
        """A while's body runs once per iteration and its condition once more, to stop;
        where XLA wrote no trip count, each runs once and the loop is named as unknown."""
        trips = _trip_count(rest)
        if trips is None:
            self.unknown_loops.append(name)
        body_runs, condition_runs = (1, 1) if trips is None else (trips, trips + 1)
        found = []
        for attribute, runs in (("body", body_runs), ("condition", condition_runs)):
            computation = re.search(rf"\b{attribute}=%?([\w.\-]+)", rest)
            if computation and computation.group(1) in self.bodies:
                found += _repeated(self.run(computation.group(1)), runs)
        return found


def collectives(hlo_text: str, devices: int) -> CollectiveList:
    """Every collective an HLO module runs per step, with its per-device cost, counted
    from ENTRY through loops, conditionals and calls (the module docstring says how).

    `devices` is the group size of a collective over every partition
    (``replica_groups={}`` or none).  The result's `unknown_loops` names each while
    whose trip count XLA did not write, counted once.
    """
    program = _HloProgram(hlo_text, devices)
    found = program.run(program.entry)
    return CollectiveList(found, _unique(program.unknown_loops))


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


def _location_name(op) -> str:
    name = re.search(r'loc\("([^"]+)"[()]', str(op.location))   # a name, not a file
    return name.group(1) if name else ""


def _stablehlo_collective(op, kind: str, devices: int) -> Collective:
    operands = [_hlo_shape(v.type) for v in op.operands]
    results = [_hlo_shape(r.type) for r in op.results]
    p = 1 if kind == "collective-permute" else _stablehlo_group_size(op, devices)
    return _record(kind, operands, ", ".join(results), p, _location_name(op))


class _StableHloProgram:
    """A partitioned module's functions, each counted once per call and remembered."""

    def __init__(self, module, devices: int):
        self.functions = {
            op.attributes["sym_name"].value: op
            for op in module.regions[0].blocks[0].operations
            if op.operation.name == "func.func"}
        self.devices = devices
        self.counted: dict[str, list[Collective]] = {}
        self.unknown_loops: list[str] = []

    def entries(self) -> list[str]:
        """The public functions, where a run starts (private ones run only when called)."""
        public = [name for name, op in self.functions.items()
                  if "sym_visibility" not in op.attributes
                  or op.attributes["sym_visibility"].value != "private"]
        return public or list(self.functions)

    def call(self, function: str) -> list[Collective]:
        """The collectives one call of `function` performs."""
        if function not in self.counted:
            self.counted[function] = []   # a recursive call counts once
            if function in self.functions:
                self.counted[function] = self.region(self.functions[function].regions[0],
                                                     function)
        return self.counted[function]

    def region(self, region, function: str) -> list[Collective]:
        return [c for block in region.blocks for op in block.operations
                for c in self.op(op, function)]

    def op(self, op, function: str) -> list[Collective]:
        name = op.operation.name
        kind = _STABLEHLO_KINDS.get(name)
        if kind is not None:
            return [_stablehlo_collective(op, kind, self.devices)]   # (its region: a scalar sum)
        if name == "func.call":
            return self.call(op.attributes["callee"].value)
        if name == "stablehlo.while":
            return self.loop(op, function)
        if name in ("stablehlo.case", "stablehlo.if"):
            # One branch runs; which one is data: the largest bounds the cost.
            return max((self.region(branch, function) for branch in op.regions),
                       key=total_bytes, default=[])
        return [c for region in op.regions for c in self.region(region, function)]

    def loop(self, op, function: str) -> list[Collective]:
        """The body once per iteration and the condition once more; each once, and the
        loop named as unknown, where the trip count cannot be read."""
        from stablehlo_spmd.loops import trip_count

        trips = trip_count(op)
        if trips is None:
            self.unknown_loops.append(f"@{function}: {_location_name(op) or 'stablehlo.while'}")
        body_runs, condition_runs = (1, 1) if trips is None else (trips, trips + 1)
        condition, body = op.regions
        return _repeated(self.region(body, function), body_runs) + \
            _repeated(self.region(condition, function), condition_runs)


def emitted_collectives(module_text: str, devices: int) -> CollectiveList:
    """Every collective a partitioned StableHLO module runs per step, as the partitioner
    emitted them, before XLA compiles (and may combine, split or add to) them; counted
    from the public functions through loops, conditionals and calls as `collectives`
    counts HLO (the module docstring says how), with `unknown_loops` alike."""
    from stablehlo_spmd.ir import make_context, parse_module

    with make_context() as context:
        return module_collectives(parse_module(module_text, "<partitioned>", context), devices)


def module_collectives(module, devices: int) -> CollectiveList:
    """`emitted_collectives` of a partitioned module already parsed (a
    ``builtin.module`` operation)."""
    program = _StableHloProgram(module, devices)
    found = [c for entry in program.entries() for c in program.call(entry)]
    return CollectiveList(found, _unique(program.unknown_loops))
