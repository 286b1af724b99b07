"""Shardy's own propagation tests as a corpus: our propagation against Shardy's, value by value.

    python3 benchmarks/shardy_suite.py SHARDY_CHECKOUT        # writes the report
    python3 benchmarks/shardy_suite.py SHARDY_CHECKOUT --only sharding_group -v
    python3 benchmarks/shardy_suite.py SHARDY_CHECKOUT --derived-only

The corpus is ``shardy/dialect/sdy/transforms/propagation/test/*.mlir`` of
openxla/shardy, read from wherever it was fetched (a checkout, or a folder
holding those files); it is not part of this repository.  Each file is split
at ``// -----`` into chunks, as ``sdy_opt -split-input-file`` splits it.  For
each chunk:

1. jaxlib parses it (with the sdy dialect loaded).  A chunk jaxlib itself
   rejects, or whose meshes have more than 8 devices, is left out.
2. Every op with results gets a tag attribute (``harness.value = N``), so that
   a value can be found again in both outputs whatever either adds around it.
3. Shardy: jaxlib's in-process ``sdy-propagation-pipeline`` on the tagged
   chunk.  A chunk Shardy itself fails on is left out too.
4. Ours: ``spmd-propagate`` (``stablehlo_spmd.run_passes``).  An error here is
   a refusal, any other exception a crash.
5. Comparison, per value (function arguments and results, tagged op results):
   both shardings become the block each device holds (`device_blocks`), so
   the two spellings (Shardy's axes, with sub-axes, and the mhlo.sharding
   device lists) compare by meaning.  A value Shardy leaves without a sharding
   is replicated.  Unreduced axes are left out of the comparison: a Partial
   the project keeps over the dims Shardy shards is agreement (Shardy reduces
   where the reduction happens; the project may keep the sum pending).
6. Run: the chunk's entry function is partitioned (``spmd-partition``) and run
   on host devices against the one-device run of the same chunk, on random
   inputs (its data-flow edges, which XLA cannot compile, removed by
   Shardy's own sink passes).  Chunks that cannot run on CPU (no ``main``, tokens, manual
   bodies with collectives, dynamic shapes, ...) count as "not run".

Derived one-op cases.  ``op_sharding_rule_registry.mlir`` only checks the
sharding rule Shardy gives each op, with nothing sharded, so as a chunk it
compares nothing.  Each of its functions (one op under test each) becomes two
cases instead (`derive_cases`), on the mesh ``<["x"=2, "y"=2]>``: *forward*,
its first argument sharded on its first two dims of even size (the first on
"x", the second on "y"), and *backward*, its first result sharded the same
way.  A function whose first argument (result) is not a ranked tensor or has
no dim of even size gives no forward (backward) case; those are counted as
skipped.  The function is renamed ``@main`` (Shardy's pipeline and the run
look for it), made public, and stripped of any ``sdy.sharding_rule`` so that
both sides derive the rule themselves.  Each case then goes through steps
1-6 like a chunk, and is summarized apart, with each differing value said to
be less, more or otherwise sharded by ours than by Shardy.

Each chunk runs in a worker process with a time limit.  Printed: per file,
chunks accepted/refused/crashed and values agreeing; the disagreements, each
with both shardings; then the summary, also written to
benchmarks/results/shardy_suite.md, with the derived cases' own section and
the agreement over all cases.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import multiprocessing
import os
import pathlib
import re
import sys
import time
from multiprocessing.connection import wait

from report import revision

SUITE_DIR = "shardy/dialect/sdy/transforms/propagation/test"
TAG = "harness.value"
MAX_DEVICES = 8


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One program to compare: a piece of a test file, or a case derived from one.

    `case` is empty for a plain chunk; for a derived case it is
    ``<function>/<direction>`` and `op` names the op under test."""
    file: str
    index: int
    line: int
    text: str
    case: str = ""
    op: str = ""

    @property
    def name(self) -> str:
        if self.case:
            return f"{self.file}@{self.case}"
        return f"{self.file}#{self.index}"

    @property
    def derived(self) -> bool:
        return bool(self.case)

    def result(self) -> dict:
        """The fields every result for this chunk starts from, whatever becomes of it."""
        found = {"name": self.name, "line": self.line}
        if self.case:
            found.update(derived=True, op=self.op)
        return found


def suite_files(root: pathlib.Path) -> list[pathlib.Path]:
    folder = root / SUITE_DIR if (root / SUITE_DIR).is_dir() else root
    return sorted(folder.glob("*.mlir"))


def split_chunks(path: pathlib.Path) -> list[Chunk]:
    """The file's chunks, each padded with blank lines so that its line numbers stay the file's."""
    text = path.read_text()
    chunks, line = [], 1
    for index, piece in enumerate(re.split(r"^// -----.*$", text, flags=re.M)):
        chunks.append(Chunk(path.name, index, line, "\n" * (line - 1) + piece))
        line += piece.count("\n")
    return chunks


# ----------------------------------------------------- derived one-op cases

DERIVED_FILE = "op_sharding_rule_registry.mlir"
DERIVED_MESH = 'sdy.mesh @mesh = <["x"=2, "y"=2]>'
DERIVED_AXES = ("x", "y")
DIRECTIONS = ("forward", "backward")


@dataclasses.dataclass
class Derivation:
    """What `derive_cases` made of the registry file: the cases, how many
    functions it read, and (function, direction, why) for each case it could
    not make."""
    cases: list[Chunk]
    functions: int
    skipped: list[tuple[str, str, str]]


def registry_file(root: pathlib.Path) -> pathlib.Path | None:
    """The registry test file next to the suite's other files, if it is there."""
    folder = root / SUITE_DIR if (root / SUITE_DIR).is_dir() else root
    path = folder / DERIVED_FILE
    return path if path.is_file() else None


def even_dims(shape) -> list[int]:
    """The dims a derived case shards: the first two of even size.  A dim of
    size 0 is left alone: there is nothing in it to split."""
    return [d for d, size in enumerate(shape) if size > 0 and size % 2 == 0][:len(DERIVED_AXES)]


def derived_sharding(shape) -> str | None:
    """The ``#sdy.sharding`` a derived case puts on a value of `shape`: its
    even dims on "x" then "y", closed (as a user's sharding is); None when
    it has no even dim."""
    dims = even_dims(shape)
    if not dims:
        return None
    spelled = ['{"%s"}' % DERIVED_AXES[dims.index(d)] if d in dims else "{}"
               for d in range(len(shape))]
    return f"#sdy.sharding<@mesh, [{', '.join(spelled)}]>"


def derive_cases(path: pathlib.Path) -> Derivation:
    """The forward and backward case of every function of the registry file
    at `path` (see the module docstring), each a `Chunk` whose `line` is the
    function's line in the file."""
    from jaxlib.mlir import ir

    from stablehlo_spmd.ir import make_context
    text = path.read_text()
    # The registry's tests say the rule they expect on the line before the op under test.
    rule_lines = [n for n, line in enumerate(text.splitlines(), 1)
                  if re.match(r"\s*//.*CHECK.*sdy\.sharding_rule", line)]
    cases, skipped = [], []
    with make_context() as context:
        module = ir.Module.parse(text, context)
        functions = _functions(module)
        for ordinal, func in enumerate(functions):
            func = func.operation
            name = ir.StringAttr(func.attributes["sym_name"]).value
            func_type = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
            op = _op_under_test(func, rule_lines)
            for direction in DIRECTIONS:
                types = func_type.inputs if direction == "forward" else func_type.results
                what = "argument" if direction == "forward" else "result"
                if not types or not isinstance(types[0], ir.RankedTensorType):
                    skipped.append((name, direction, f"first {what} is not a ranked tensor"))
                    continue
                sharding = derived_sharding(ir.RankedTensorType(types[0]).shape)
                if sharding is None:
                    skipped.append((name, direction, f"first {what} has no dim of even size"))
                    continue
                cases.append(Chunk(path.name, ordinal, _line_of(func.location),
                                   _derived_text(func, direction, sharding, context),
                                   case=f"{name}/{direction}", op=op))
    return Derivation(cases, len(functions), skipped)


def _derived_text(func, direction: str, sharding: str, context) -> str:
    """A module of the mesh and a copy of `func`, public and named @main, with
    `sharding` on its first argument (forward) or result (backward) and no
    sharding rules of its own."""
    from jaxlib.mlir import ir
    holder = ir.Module.parse(DERIVED_MESH, context)
    copy = func.clone(ip=ir.InsertionPoint(holder.body))
    copy.attributes["sym_name"] = ir.StringAttr.get("main")
    if "sym_visibility" in copy.attributes:
        del copy.attributes["sym_visibility"]
    func_type = ir.FunctionType(ir.TypeAttr(copy.attributes["function_type"]).value)
    array, count = (("arg_attrs", len(func_type.inputs)) if direction == "forward"
                    else ("res_attrs", len(func_type.results)))
    if array in copy.attributes:
        entries = [ir.DictAttr(a) for a in ir.ArrayAttr(copy.attributes[array])]
    else:
        entries = [ir.DictAttr.get({}) for _ in range(count)]
    first = {entries[0][i].name: entries[0][i].attr for i in range(len(entries[0]))}
    first["sdy.sharding"] = ir.Attribute.parse(sharding)
    copy.attributes[array] = ir.ArrayAttr.get([ir.DictAttr.get(first)] + entries[1:])

    def strip(op):
        # A rule written on the op would spare both propagations deriving it.
        if "sdy.sharding_rule" in op.attributes:
            del op.attributes["sdy.sharding_rule"]
        return ir.WalkResult.ADVANCE

    copy.walk(strip)
    return str(holder)


def _op_under_test(func, rule_lines: list[int]) -> str:
    """The op a registry function tests: the first of its top-level ops that
    comes right after a CHECK of a sharding rule, else its last op; a custom
    call is named with its target, as its rule depends on it."""
    from jaxlib.mlir import ir
    ops = [op for op in func.regions[0].blocks[0].operations if op.name != "func.return"]
    if not ops:
        return "func.return"
    chosen, previous = ops[-1], _line_of(func.location)
    for op in ops:
        line = _line_of(op.location)
        if any(previous < rule < line for rule in rule_lines):
            chosen = op
            break
        previous = line
    if chosen.name == "stablehlo.custom_call":
        target = ir.StringAttr(chosen.attributes["call_target_name"]).value
        return f"stablehlo.custom_call @{target}"
    return chosen.name


def _line_of(location) -> int:
    """The line of a file location (0 where it has none)."""
    found = re.search(r":(\d+):\d+\)?$", str(location))
    return int(found.group(1)) if found else 0


# ------------------------------------------------------------ device blocks

def _mesh_devices(mesh_attr) -> tuple[dict[str, int], list[int]] | int:
    """(axis sizes in order, device ids in mesh order) of an sdy mesh; an int for a maximal mesh."""
    from jaxlib.mlir.dialects import sdy
    mesh = sdy.MeshAttr(mesh_attr)
    axes = {sdy.MeshAxisAttr(a).name: sdy.MeshAxisAttr(a).size for a in mesh.axes}
    ids = list(mesh.device_ids)
    if not axes:
        return ids[0] if ids else None  # a maximal mesh; the empty mesh <[]> replicates
    size = 1
    for n in axes.values():
        size *= n
    return axes, ids or list(range(size))


def sdy_blocks(sharding_attr, meshes: dict) -> tuple | None:
    """Canonical (tile counts, device -> block) of one ``#sdy.sharding``; None if replicated."""
    import numpy as np
    from jaxlib.mlir.dialects import sdy
    from jaxlib.mlir import ir
    sharding = sdy.TensorShardingAttr(sharding_attr)
    ref = sharding.mesh_or_ref
    if isinstance(ref, ir.FlatSymbolRefAttr):
        mesh = meshes[ir.FlatSymbolRefAttr(ref).value]
    else:
        mesh = _mesh_devices(ref)
    if mesh is None:
        return None
    if isinstance(mesh, int):
        return ("maximal", mesh)
    axes, ids = mesh
    names = list(axes)
    coords = np.indices([axes[n] for n in names]).reshape(len(names), -1)
    counts, blocks = [], []
    for dim in sharding.dimension_shardings:
        dim = sdy.DimensionShardingAttr(dim)
        count, block = 1, np.zeros(coords.shape[1], dtype=np.int64)
        for axis in dim.axes:
            name, pre, size = _axis_ref(axis, axes)
            # A sub-axis (pre)size is the middle of the axis split pre x size x post.
            post = axes[name] // (pre * size)
            value = (coords[names.index(name)] // post) % size
            block = block * size + value
            count *= size
        counts.append(count)
        blocks.append(block)
    return _canonical(counts, blocks, ids)


def _axis_ref(axis_attr, axes: dict[str, int]) -> tuple[str, int, int]:
    from jaxlib.mlir.dialects import sdy
    axis = sdy.AxisRefAttr(axis_attr)
    info = axis.sub_axis_info
    if info is not None:
        info = sdy.SubAxisInfoAttr(info)
        return axis.name, info.pre_size, info.size
    return axis.name, 1, axes[axis.name]


def _canonical(counts, blocks, ids) -> tuple | None:
    if all(c == 1 for c in counts):
        return None
    per_device = {}
    for position, device in enumerate(ids):
        per_device[device] = tuple(int(b[position]) for b in blocks)
    return ("tiled", tuple(counts), tuple(sorted(per_device.items())))


def hlo_blocks(text: str, rank: int, element: int = 0) -> tuple | None:
    """The same canonical form for an ``mhlo.sharding`` string (`element` of a tuple)."""
    import numpy as np
    from stablehlo_spmd.hlo_sharding import parse_hlo_sharding
    hlo = parse_hlo_sharding(text)
    if hlo.kind == "tuple":
        hlo = hlo.elements[element]
    if hlo.kind == "maximal":
        return ("maximal", hlo.device)
    if not hlo.is_tiled:
        return None
    devices = hlo.tile.device_array()
    counts = list(devices.shape[:rank])
    index = np.indices(devices.shape)
    blocks, ids = [], devices.reshape(-1).tolist()
    for d in range(rank):
        blocks.append(index[d].reshape(-1))
    return _canonical(counts, blocks, ids)


# ------------------------------------------------------------- per chunk

def _tag(module) -> None:
    from jaxlib.mlir import ir
    counter = [0]

    def visit(op):
        if len(op.results) and op.name not in ("func.func", "builtin.module", "sdy.mesh"):
            op.attributes[TAG] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), counter[0])
            counter[0] += 1
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)


def _functions(module):
    return [op for op in module.body.operations if op.operation.name == "func.func"]


def _values(module, read) -> dict[str, object]:
    """Value key -> its sharding as `read` gives it, for arguments, results and tagged ops."""
    from jaxlib.mlir import ir
    found = {}
    for func in _functions(module):
        func = func.operation
        name = ir.StringAttr(func.attributes["sym_name"]).value
        func_type = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
        for kind, types, array in (("arg", func_type.inputs, "arg_attrs"),
                                   ("result", func_type.results, "res_attrs")):
            attrs = ir.ArrayAttr(func.attributes[array]) if array in func.attributes else None
            for i, type_ in enumerate(types):
                if not isinstance(type_, ir.RankedTensorType):
                    continue
                entry = ir.DictAttr(attrs[i]) if attrs is not None else None
                found[f"@{name} {kind} {i}"] = read(entry, type_, "value")

    def visit(op):
        if TAG in op.attributes:
            tag = ir.IntegerAttr(op.attributes[TAG]).value
            for i, result in enumerate(op.results):
                if isinstance(result.type, ir.RankedTensorType):
                    found[f"%{tag}#{i} {op.name}"] = read(op.attributes, result.type, ("op", i))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def _shardy_reader(module):
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import sdy
    meshes = {}
    for op in module.body.operations:
        if op.operation.name == "sdy.mesh":
            meshes[ir.StringAttr(op.attributes["sym_name"]).value] = \
                _mesh_devices(op.attributes["mesh"])

    def read(attrs, type_, where):
        if attrs is None or "sdy.sharding" not in attrs:
            return None
        attr = attrs["sdy.sharding"]
        if where != "value":
            attr = sdy.TensorShardingPerValueAttr(attr).shardings[where[1]]
        return sdy_blocks(attr, meshes)

    return read


def _our_reader(attrs, type_, where):
    from jaxlib.mlir import ir
    if attrs is None or "mhlo.sharding" not in attrs:
        return "missing"
    text = ir.StringAttr(attrs["mhlo.sharding"]).value
    return hlo_blocks(text, type_.rank, where[1] if where != "value" else 0)


def _devices_of(module) -> int:
    most = 1
    for op in module.body.operations:
        if op.operation.name == "sdy.mesh":
            found = _mesh_devices(op.attributes["mesh"])
            if isinstance(found, tuple):
                size = 1
                for n in found[0].values():
                    size *= n
                most = max(most, size)
    return most


def run_chunk(chunk: Chunk, execute: bool = True, phase=lambda name: None,
              partial=lambda result: None) -> dict:
    """One chunk: ours first, then Shardy's pipeline (which may abort the
    process: `partial` hands ours over before it runs, so a chunk Shardy
    cannot propagate still counts for acceptance)."""
    import warnings

    from jaxlib.mlir import ir, passmanager

    import stablehlo_spmd as ss
    from stablehlo_spmd.errors import SpmdError
    from stablehlo_spmd.ir import make_context

    result = chunk.result()
    with make_context() as context:
        context.allow_unregistered_dialects = False
        try:
            module = ir.Module.parse(chunk.text, context)
        except ir.MLIRError:
            return {**result, "status": "unparsed"}
        devices = _devices_of(module)
        result["devices"] = devices
        if devices > MAX_DEVICES:
            return {**result, "status": "too-big"}
        if not _functions(module):
            return {**result, "status": "no-function"}
        _tag(module)
        tagged = str(module)

    phase("ours")
    ours_text = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours_text = ss.run_passes(tagged, "spmd-propagate", f"{chunk.name}.mlir")
        result["ours"] = "accepted"
    except SpmdError as error:
        result.update(ours="refused", why=_one_line(error))
    except Exception as error:  # noqa: BLE001 - a crash is what this counts
        result.update(ours="crash", why=f"{type(error).__name__}: {_one_line(error)}")
    if ours_text is not None and execute:
        phase("run")
        result["run"] = _run(tagged, chunk)
    partial({**result, "status": "shardy-fails"})

    phase("shardy")
    with make_context() as context:
        shardy = ir.Module.parse(tagged, context)
        try:
            passmanager.PassManager.parse(
                "builtin.module(sdy-propagation-pipeline)", context).run(shardy.operation)
        except ir.MLIRError:
            return {**result, "status": "shardy-fails"}
        want = _values(shardy, _shardy_reader(shardy))
    if ours_text is None:
        return {**result, "status": result["ours"]}

    with make_context() as context:
        got = _values(ir.Module.parse(ours_text, context), _our_reader)
    differ = []
    for key, wanted in want.items():
        if key not in got:
            continue  # an op Shardy's pipeline made, or one ours folded away
        if got[key] != wanted:
            differ.append((key, _show(wanted), _show(got[key]), how_sharded(wanted, got[key])))
    result.update(status="accepted", values=len([k for k in want if k in got]),
                  differ=differ)
    if differ:
        result["bytes"] = _bytes_both_ways(tagged, chunk)
    return result


def _bytes_both_ways(text: str, chunk: Chunk) -> tuple[float, float] | None:
    """Collective bytes per device of the chunk partitioned by this project
    after our propagation and after Shardy's (``engine=shardy``): how a
    difference is priced.  None where either cannot be partitioned."""
    import warnings

    import stablehlo_spmd as ss
    from stablehlo_spmd.collective_bytes import emitted_collectives, total_bytes
    devices = max(1, _devices_in_text(text))
    moved = []
    for engine in ("spmd", "shardy"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                partitioned = ss.run_passes(
                    text, f"spmd-propagate{{engine={engine}}},spmd-partition",
                    f"{chunk.name}.mlir")
            moved.append(total_bytes(emitted_collectives(partitioned, devices)))
        except Exception:  # noqa: BLE001 - unpriced, said as such in the report
            return None
    return moved[0], moved[1]


def _devices_in_text(text: str) -> int:
    most = 1
    for axes in re.findall(r"sdy\.mesh @[\w.$-]+ = <\[([^\]]*)\]", text):
        size = 1
        for n in re.findall(r'=\s*(\d+)', axes):
            size *= int(n)
        most = max(most, size)
    return most


def _run(text: str, chunk: Chunk) -> str:
    """'ok', 'mismatch: ...', 'failed: ...' or 'not run: ...': ours partitioned
    against one device.  A program XLA cannot run on one CPU device either
    (an unknown custom call, collectives over replicas it does not have) is
    not run; ours failing where that reference runs is 'failed'."""
    import numpy as np

    import stablehlo_spmd as ss
    from stablehlo_spmd import runtime
    from stablehlo_spmd.errors import SpmdError
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from xla_corpus import _difference, _random_inputs
    text = _with_main(text)
    if text is None:
        return "not run: no entry function"
    if re.search(r"token|manual_computation|\?x|collective|infeed|rng|custom_call", text):
        return "not run: not reproducible on one device"
    try:
        partitioned = ss.run_passes(text, "spmd-propagate,spmd-partition", f"{chunk.name}.mlir")
        executable = runtime.compile(partitioned)
        inputs = _random_inputs(executable.arguments, seed=0)
    except SpmdError as error:
        return f"not run: {_one_line(error)}"
    try:
        want = ss.run_single_device(_without_data_flow_edges(text), inputs)
    except Exception as error:  # noqa: BLE001 - whatever stops the reference, nothing to compare
        return f"not run: one device: {_one_line(error)}"
    try:
        got = executable(*inputs)
    except Exception as error:  # noqa: BLE001 - the reference ran, so this one is ours
        return f"failed: {type(error).__name__}: {_one_line(error)}"
    got = got if isinstance(got, (list, tuple)) else [got]
    want = want if isinstance(want, (list, tuple)) else [want]
    for i, (g, w) in enumerate(zip(got, want)):
        why = _difference(np.asarray(g), np.asarray(w))
        if why:
            return f"mismatch: result {i}: {why}"
    return "ok"


def _without_data_flow_edges(text: str) -> str:
    """`text` with Shardy's data-flow edges (identities XLA cannot compile)
    removed by Shardy's own pass, so that the one-device reference does
    not go through this project's import."""
    if "data_flow_edge" not in text:
        return text
    from jaxlib.mlir import ir, passmanager
    from stablehlo_spmd.ir import make_context
    with make_context() as context:
        module = ir.Module.parse(text, context)
        passmanager.PassManager.parse(
            "builtin.module(func.func(sdy-sink-data-flow-edges,sdy-sink-func-data-flow-edges))",
            context).run(module.operation)
        return str(module)


def _with_main(text: str) -> str | None:
    """`text` with its entry function named @main: the one function no other
    function calls (Shardy's tests name their functions after the case)."""
    defined = re.findall(r"func\.func (?:public |private )?@([\w.$-]+)\(", text)
    called = set(re.findall(r"call @([\w.$-]+)\(", text))
    entries = [name for name in defined if name not in called]
    if "main" in defined:
        return text
    if len(entries) != 1:
        return None
    return re.sub(rf"func\.func (public |private )?@{re.escape(entries[0])}\(",
                  "func.func @main(", text, count=1)


def how_sharded(wanted, got) -> str:
    """'less', 'more' or 'other': whether ours (`got`) cuts a value into fewer
    or more pieces than Shardy (`wanted`), or as many but laid out otherwise."""
    theirs, ours = _pieces(wanted), _pieces(got)
    return "less" if ours < theirs else "more" if ours > theirs else "other"


def _pieces(blocks) -> int:
    """How many blocks a value is cut into: 1 when replicated, on one device or unsharded."""
    if blocks is None or blocks == "missing" or blocks[0] == "maximal":
        return 1
    return math.prod(blocks[1])


def _show(blocks) -> str:
    if blocks is None:
        return "replicated"
    if blocks == "missing":
        return "no sharding"
    if blocks[0] == "maximal":
        return f"maximal {blocks[1]}"
    counts = "x".join(str(c) for c in blocks[1])
    order = ",".join(str(d) for d, _ in sorted(blocks[2], key=lambda item: item[1]))
    return f"tiles [{counts}] devices {order}"


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:200] if text else type(error).__name__


# ----------------------------------------------------------- the workers

def _worker(connection) -> None:
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    import stablehlo_spmd as ss
    ss.ensure_host_devices(MAX_DEVICES)
    while True:
        chunk, execute = connection.recv()
        try:
            connection.send(run_chunk(chunk, execute, lambda name: connection.send(name),
                                      lambda partial: connection.send(("partial", partial))))
        except Exception as error:  # noqa: BLE001
            connection.send({**chunk.result(), "status": "crash",
                             "why": f"{type(error).__name__}: {_one_line(error)}"})


@dataclasses.dataclass
class _Slot:
    """One worker process and what it is doing: the chunk, whether it runs it
    on devices, since when, the phase it said it is in, the result it handed
    over before Shardy's pipeline, and why the chunk's run was dropped (for
    a chunk done again without it)."""
    connection: object
    process: object
    chunk: Chunk | None = None
    execute: bool = True
    started: float = 0.0
    phase: str = "ours"
    partial: dict | None = None
    dropped: str = ""


def run_all(chunks: list[Chunk], jobs: int, timeout: float, execute: bool) -> list[dict]:
    """`run_chunk` of every chunk, in at most `jobs` worker processes, in the
    order of `chunks`.  A worker that dies or runs past `timeout` is
    replaced; when that happened in the run on devices, the chunk is done
    again without it, so that a run too slow for the CPU (or one that kills
    the process) costs the chunk its run only, not its comparison."""
    context = multiprocessing.get_context("spawn")
    results: list[dict] = []
    pending = [(chunk, execute, "") for chunk in reversed(chunks)]
    slots: list[_Slot] = []

    def start() -> _Slot:
        here, there = context.Pipe()
        process = context.Process(target=_worker, args=(there,), daemon=True)
        process.start()
        return _Slot(here, process)

    def give(slot: _Slot) -> None:
        if pending:
            slot.chunk, slot.execute, slot.dropped = pending.pop()
            slot.started, slot.phase, slot.partial = time.monotonic(), "ours", None
            slot.connection.send((slot.chunk, slot.execute))

    for _ in range(min(jobs, len(chunks))):
        slots.append(start())
        give(slots[-1])
    while any(slot.chunk is not None for slot in slots):
        ready = wait([slot.connection for slot in slots if slot.chunk is not None], timeout=1.0)
        now = time.monotonic()
        for position, slot in enumerate(slots):
            if slot.chunk is None:
                continue
            done, lost = None, ""
            if slot.connection in ready:
                try:
                    done = slot.connection.recv()
                except (EOFError, OSError):
                    lost = "worker died"
                if isinstance(done, str):
                    slot.phase = done
                    continue
                if isinstance(done, tuple):
                    slot.partial = done[1]
                    continue
            elif now - slot.started > timeout:
                lost = f"over {timeout:.0f} s"
            if done is None and not lost:
                continue
            dropped = slot.dropped
            if lost:
                slot.process.kill()
                slots[position] = replacement = start()
                if slot.phase == "run":
                    # Slow on CPU is no fault of the chunk's; a run killing the process may be.
                    outcome = "not run" if lost.startswith("over") else "failed"
                    pending.append((slot.chunk, False, f"{outcome}: {lost} in the run"))
                    give(replacement)
                    continue
                done = _lost(slot, lost)
                slot = replacement
            if dropped:
                done = {**done, "run": dropped}
            results.append(done)
            slot.chunk = None
            give(slot)
    for slot in slots:
        slot.process.kill()
    # In the order the chunks came: plain ones by file and place, derived ones after.
    order = {chunk.name: position for position, chunk in enumerate(chunks)}
    return sorted(results, key=lambda r: order[r["name"]])


def _lost(slot: _Slot, why: str) -> dict:
    """The result of a chunk whose worker died or ran out of time outside the
    run: Shardy's if it was in Shardy's pipeline (a failed CHECK there
    aborts the process; ours was handed over before it ran), else ours."""
    if slot.phase == "shardy":
        if slot.partial is not None:
            return {**slot.partial, "died": True}
        return {**slot.chunk.result(), "status": "shardy-fails", "why": why}
    return {**slot.chunk.result(), "status": "crash", "why": why}


# ------------------------------------------------------------- the report

@dataclasses.dataclass
class Tally:
    """The counts a summary is made of, over some results (chunks or derived cases)."""
    counted: list[dict]   # Shardy propagates them: ours accepted, refused or crashed
    accepted: list[dict]  # both propagated: their values are compared
    parsed: list[dict]    # jaxlib parses them, Shardy's failures too: acceptance is over these
    ours_ok: list[dict]
    values: int
    agree: int
    runs: list[str]

    @classmethod
    def of(cls, results: list[dict]) -> "Tally":
        counted = [r for r in results if r["status"] in ("accepted", "refused", "crash")]
        accepted = [r for r in counted if r["status"] == "accepted"]
        parsed = counted + [r for r in results if r["status"] == "shardy-fails" and "ours" in r]
        values = sum(r["values"] for r in accepted)
        return cls(counted, accepted, parsed,
                   [r for r in parsed if r.get("ours", r["status"]) == "accepted"],
                   values, values - sum(len(r["differ"]) for r in accepted),
                   [r.get("run", "") for r in parsed if r.get("run")])

    def ours(self, outcome: str) -> int:
        return sum(r.get("ours", r["status"]) == outcome for r in self.parsed)

    def run_line(self) -> str:
        failed = sum(x.startswith("failed") for x in self.runs)
        return (f"run against one device: {sum(x == 'ok' for x in self.runs)} ok, "
                f"{sum(x.startswith('mismatch') for x in self.runs)} mismatch, "
                f"{sum(x.startswith('not run') for x in self.runs)} not run"
                + (f", {failed} failed" if failed else ""))


def summarize(results: list[dict]) -> list[str]:
    """The plain chunks' summary."""
    tally = Tally.of(results)
    counted, accepted, parsed = tally.counted, tally.accepted, tally.parsed
    values, agree = tally.values, tally.agree
    left_out: dict[str, int] = {}
    for r in results:
        if r not in parsed:
            left_out[r["status"]] = left_out.get(r["status"], 0) + 1
    lines = [
        f"chunks: {len(results)} in all; {len(parsed)} on at most {MAX_DEVICES} devices that "
        f"jaxlib parses, {len(counted)} of them Shardy propagates"
        + (f" (left out: {', '.join(f'{n} {k}' for k, n in sorted(left_out.items()))})"
           if left_out else ""),
        f"accepted: {len(tally.ours_ok)} of {len(parsed)}; refused "
        f"{tally.ours('refused')}, crashed {tally.ours('crash')}",
        f"values agreeing with Shardy (where it propagates): {agree} of {values} "
        f"({100.0 * agree / max(values, 1):.1f}%); agreeing or in a chunk where ours moves "
        f"fewer bytes: {agree + _in_cheaper(accepted)} of {values} "
        f"({100.0 * (agree + _in_cheaper(accepted)) / max(values, 1):.1f}%)",
        _priced(accepted),
        tally.run_line(),
    ]
    return lines


def summarize_derived(results: list[dict], derivation: Derivation) -> list[str]:
    """The derived cases' summary: how many were made and not made, ours
    accepted, values agreeing with Shardy and how ours differs where it does,
    and the runs against one device."""
    tally = Tally.of(results)
    reasons: dict[str, int] = {}
    for _, _, why in derivation.skipped:
        reasons[why] = reasons.get(why, 0) + 1
    shardy_fails = sum(r["status"] == "shardy-fails" for r in results)
    differ = _differing(results)
    kinds = {how: sum(len(found) for found in _by_op(differ, how).values())
             for how in ("less", "more", "other")}
    return [
        f"derived cases: {len(results)} from {derivation.functions} functions of {DERIVED_FILE} "
        f"(forward: first argument sharded, backward: first result sharded); "
        f"{len(derivation.skipped)} not made"
        + (f" ({', '.join(f'{why}: {n}' for why, n in sorted(reasons.items()))})"
           if reasons else "")
        + f"; Shardy propagates {len(tally.counted)}"
        + (f" (fails on {shardy_fails})" if shardy_fails else ""),
        f"accepted: {len(tally.ours_ok)} of {len(tally.parsed)}; refused "
        f"{tally.ours('refused')}, crashed {tally.ours('crash')}",
        f"values agreeing with Shardy (where it propagates): {tally.agree} of {tally.values} "
        f"({100.0 * tally.agree / max(tally.values, 1):.1f}%); of the others ours shards "
        f"{kinds['less']} less, {kinds['more']} more, {kinds['other']} as much but otherwise; "
        f"agreeing or in a case where ours moves fewer bytes: "
        f"{_agreeing_or_cheaper(tally)} of {tally.values} "
        f"({100.0 * _agreeing_or_cheaper(tally) / max(tally.values, 1):.1f}%)",
        _priced(tally.accepted),
        tally.run_line(),
    ]


def summarize_all(plain: list[dict], derived: list[dict]) -> str:
    """One line: values agreeing with Shardy over plain chunks and derived cases together."""
    tallies = [Tally.of(plain), Tally.of(derived)]
    values = sum(t.values for t in tallies)
    agree = sum(t.agree for t in tallies)
    cheaper = sum(_agreeing_or_cheaper(t) for t in tallies)
    return (f"all cases ({len(plain)} chunks, {len(derived)} derived): values agreeing with "
            f"Shardy {agree} of {values} ({100.0 * agree / max(values, 1):.1f}%); agreeing or "
            f"where ours moves fewer bytes: {cheaper} of {values} "
            f"({100.0 * cheaper / max(values, 1):.1f}%)")


def _agreeing_or_cheaper(tally: "Tally") -> int:
    """Values that agree, or differ in a case where ours moves fewer bytes
    than Shardy's propagation leads to (the issue's count of agreement)."""
    return tally.agree + _in_cheaper(tally.accepted)


def _differing(results: list[dict]) -> list[tuple[dict, tuple]]:
    """(result, difference) for each value that differs, in result order."""
    return [(r, d) for r in results for d in r.get("differ", [])]


def _by_op(differ: list[tuple[dict, tuple]], how: str) -> dict[str, list[tuple[dict, tuple]]]:
    """The differences of kind `how` ('less', 'more', 'other'), grouped by
    the op their derived case tests, most values first."""
    grouped: dict[str, list] = {}
    for r, d in differ:
        if len(d) > 3 and d[3] == how:
            grouped.setdefault(r.get("op", "?"), []).append((r, d))
    return dict(sorted(grouped.items(), key=lambda item: (-len(item[1]), item[0])))


def _in_cheaper(accepted: list[dict]) -> int:
    """Differing values in chunks where this project's propagation leads to
    fewer bytes moved than Shardy's: differences it can show are cheaper."""
    return sum(len(r["differ"]) for r in accepted
               if r["differ"] and r.get("bytes") and r["bytes"][0] < r["bytes"][1])


def _priced(accepted: list[dict]) -> str:
    """How the chunks with differing values compare in bytes moved."""
    differing = [r for r in accepted if r["differ"]]
    priced = [r for r in differing if r.get("bytes")]
    cheaper = [r for r in priced if r["bytes"][0] < r["bytes"][1]]
    equal = [r for r in priced if r["bytes"][0] == r["bytes"][1]]
    dearer = [r for r in priced if r["bytes"][0] > r["bytes"][1]]
    values = sum(len(r["differ"]) for r in cheaper + equal)
    return (f"chunks with differing values: {len(differing)}; partitioned by this project "
            f"after each propagation, ours moves fewer bytes in {len(cheaper)}, as many in "
            f"{len(equal)}, more in {len(dearer)}, unpriced {len(differing) - len(priced)} "
            f"({values} differing values are in chunks where ours moves no more)")


def report(results: list[dict], seconds: float, derivation: Derivation | None = None) -> str:
    """The whole report: the plain chunks' summary and details, the derived
    cases' (when `derivation` made any), and the agreement over both."""
    plain = [r for r in results if not r.get("derived")]
    derived = [r for r in results if r.get("derived")]
    lines = [f"# Shardy's propagation suite against stablehlo-spmd ({revision(pathlib.Path(__file__).resolve().parent.parent)})", ""]
    if plain:
        lines += ["    " + line for line in summarize(plain)]
    if derivation is not None:
        lines += ["", "Derived one-op cases:", ""]
        lines += ["    " + line for line in summarize_derived(derived, derivation)]
        lines += ["", "    " + summarize_all(plain, derived)]
    if plain:
        lines += _plain_details(plain)
    if derivation is not None:
        lines += _derived_details(derived, derivation)
    lines += ["", f"{len(plain)} chunks and {len(derived)} derived cases in {seconds:.0f} s"]
    return "\n".join(lines) + "\n"


def _plain_details(results: list[dict]) -> list[str]:
    """The plain chunks' sections: per file, failures, values that differ."""
    lines = ["", "## Per file", "", "| file | chunks | accepted | values | agree |",
             "|---|---|---|---|---|"]
    by_file: dict[str, list[dict]] = {}
    for r in results:
        by_file.setdefault(r["name"].split("#")[0], []).append(r)
    for name, rs in by_file.items():
        acc = [r for r in rs if r["status"] == "accepted"]
        ours_ok = [r for r in rs if r.get("ours") == "accepted"]
        values = sum(r["values"] for r in acc)
        agree = values - sum(len(r["differ"]) for r in acc)
        lines.append(f"| {name} | {len(rs)} | {len(ours_ok)} | {values} | {agree} |")
    lines += ["", "## Refused, crashed, mismatched", ""]
    lines += _failures(results)
    lines += ["", "## Values that differ (Shardy / ours)", ""]
    for r in results:
        moved = r.get("bytes")
        priced = f" [bytes ours {moved[0]:.0f} / after Shardy's {moved[1]:.0f}]" if moved else ""
        for key, wanted, got, *_ in r.get("differ", []):
            lines.append(f"- {r['name']} (line {r['line']}) `{key}`: {wanted} / {got}{priced}")
    return lines


def _failures(results: list[dict]) -> list[str]:
    """A line for each result ours refused or crashed on, or whose run failed or mismatched."""
    lines = []
    for r in results:
        run = r.get("run", "")
        if r.get("ours", r["status"]) in ("refused", "crash") or \
                run.startswith(("mismatch", "failed")):
            said = [r.get("ours", r["status"]), r.get("why", ""), run]
            lines.append(f"- {r['name']} (line {r['line']}): {' '.join(x for x in said if x)}")
    return lines


def _derived_details(results: list[dict], derivation: Derivation) -> list[str]:
    """The derived cases' sections: the differing values by op and kind,
    failures, cases Shardy fails on, runs not made and cases not made."""
    lines = ["", f"## Derived one-op cases ({DERIVED_FILE})"]
    differ = _differing(results)
    for how, title in (("less", "Ours shards less than Shardy"),
                       ("more", "Ours shards more than Shardy"),
                       ("other", "Ours shards as much as Shardy, but otherwise")):
        grouped = _by_op(differ, how)
        lines += ["", f"### {title} (Shardy / ours), by op under test", ""]
        for op, found in grouped.items():
            cases = len({r["name"] for r, _ in found})
            lines.append(f"- `{op}`: {len(found)} values in {cases} cases")
            for r, (key, wanted, got, *_) in found:
                moved = r.get("bytes")
                priced = (f" [bytes ours {moved[0]:.0f} / after Shardy's {moved[1]:.0f}]"
                          if moved else "")
                lines.append(f"  - {r['name'].split('@', 1)[1]} (line {r['line']}) "
                             f"`{key}`: {wanted} / {got}{priced}")
    lines += ["", "### Refused, crashed, failed or mismatched", ""]
    lines += _failures(results)
    lines += ["", "### Shardy fails", ""]
    lines += [f"- {r['name']} (line {r['line']}) {r.get('why', '')}".rstrip()
              for r in results if r["status"] == "shardy-fails"]
    not_run: dict[str, list[str]] = {}
    for r in results:
        if r.get("run", "").startswith("not run"):
            not_run.setdefault(r["run"][:120], []).append(r["name"].split("@", 1)[1])
    lines += ["", "### Not run against one device, by reason", ""]
    lines += [f"- {len(names)} cases, {why} ({', '.join(names)})" for why, names in
              sorted(not_run.items(), key=lambda item: -len(item[1]))]
    lines += ["", "### Not made", ""]
    lines += [f"- {name}/{direction}: {why}" for name, direction, why in derivation.skipped]
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shardy", type=pathlib.Path, help="a checkout of openxla/shardy, "
                        "or the folder of its propagation tests")
    parser.add_argument("--only", default="",
                        help="regex on 'file#chunk' or 'file@function/direction'")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--derived-only", action="store_true",
                       help=f"only the cases derived from {DERIVED_FILE}")
    which.add_argument("--no-derived", action="store_true",
                       help="only the plain chunks")
    parser.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--no-run", action="store_true", help="compare propagation only")
    parser.add_argument("--report", type=pathlib.Path,
                        default=pathlib.Path(__file__).parent / "results" / "shardy_suite.md")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    files = suite_files(args.shardy)
    if not files:
        print(f"error: no .mlir files under {args.shardy}", file=sys.stderr)
        return 1
    chunks = [] if args.derived_only else \
        [c for f in files for c in split_chunks(f) if re.search(args.only, c.name)]
    derivation = None
    registry = None if args.no_derived else registry_file(args.shardy)
    if registry is not None:
        derivation = derive_cases(registry)
        derivation.cases = [c for c in derivation.cases if re.search(args.only, c.name)]
        derivation.skipped = [s for s in derivation.skipped
                              if re.search(args.only, f"{registry.name}@{s[0]}/{s[1]}")]
        chunks += derivation.cases
    elif args.derived_only:
        print(f"error: no {DERIVED_FILE} under {args.shardy}", file=sys.stderr)
        return 1
    start = time.monotonic()
    results = run_all(chunks, args.jobs, args.timeout, not args.no_run)
    seconds = time.monotonic() - start
    text = report(results, seconds, derivation)
    args.report.write_text(text)
    if args.verbose:
        print(text)
    else:
        plain = [r for r in results if not r.get("derived")]
        derived = [r for r in results if r.get("derived")]
        if not args.derived_only:
            print("\n".join(summarize(plain)))
        if derivation is not None:
            print("\n".join(summarize_derived(derived, derivation)))
            print(summarize_all(plain, derived))
    print(f"wrote {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
