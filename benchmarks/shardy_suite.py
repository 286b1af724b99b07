"""Shardy's own propagation tests as a corpus: our propagation against Shardy's, value by value.

    python3 benchmarks/shardy_suite.py SHARDY_CHECKOUT        # writes the report
    python3 benchmarks/shardy_suite.py SHARDY_CHECKOUT --only sharding_group -v

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

Each chunk runs in a worker process with a time limit.  Printed: per file,
chunks accepted/refused/crashed and values agreeing; the disagreements, each
with both shardings; then the summary, also written to
benchmarks/results/shardy_suite.md.
"""

from __future__ import annotations

import argparse
import dataclasses
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
    file: str
    index: int
    line: int
    text: str

    @property
    def name(self) -> str:
        return f"{self.file}#{self.index}"


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

    result = {"name": chunk.name, "line": chunk.line}
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
            differ.append((key, _show(wanted), _show(got[key])))
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
    from hlo_collectives import emitted_collectives, total_bytes
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
    """'ok', 'mismatch: ...' or 'not run: ...': ours partitioned against one device."""
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
        got = executable(*inputs)
        want = ss.run_single_device(_without_data_flow_edges(text), inputs)
    except SpmdError as error:
        return f"not run: {_one_line(error)}"
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
            connection.send({"name": chunk.name, "line": chunk.line, "status": "crash",
                             "why": f"{type(error).__name__}: {_one_line(error)}"})


def run_all(chunks: list[Chunk], jobs: int, timeout: float, execute: bool) -> list[dict]:
    context = multiprocessing.get_context("spawn")
    results, pending = [], list(reversed(chunks))
    workers = {}

    def start():
        here, there = context.Pipe()
        process = context.Process(target=_worker, args=(there,), daemon=True)
        process.start()
        return here, process

    for _ in range(min(jobs, len(chunks))):
        here, process = start()
        workers[here] = [process, None, 0.0, "ours", None]
    for here, state in list(workers.items()):
        if pending:
            state[1] = pending.pop()
            state[2] = time.monotonic()
            here.send((state[1], execute))
    while any(state[1] is not None for state in workers.values()):
        ready = wait([h for h, s in workers.items() if s[1] is not None], timeout=1.0)
        now = time.monotonic()
        for here, state in list(workers.items()):
            if state[1] is None:
                continue
            done = None
            if here in ready:
                try:
                    done = here.recv()
                except (EOFError, OSError):
                    # Shardy aborting the process on a chunk (a failed CHECK) is Shardy's;
                    # ours was handed over before it ran.
                    died = "crash" if state[3] == "ours" else "shardy-fails"
                    done = {"name": state[1].name, "line": state[1].line, "status": died,
                            "why": "worker died"}
                    if died == "shardy-fails" and state[4] is not None:
                        done = {**state[4], "died": True}
                if isinstance(done, str):
                    state[3] = done
                    continue
                if isinstance(done, tuple):
                    state[4] = done[1]
                    continue
            elif now - state[2] > timeout:
                done = {"name": state[1].name, "line": state[1].line, "status": "crash",
                        "why": f"over {timeout:.0f} s"}
            if done is None:
                continue
            results.append(done)
            if done.get("why") == "worker died" or done.get("died") or \
                    done.get("why", "").startswith("over "):
                state[0].kill()
                del workers[here]
                here, process = start()
                workers[here] = state = [process, None, 0.0, "ours", None]
            state[1], state[3], state[4] = None, "ours", None
            if pending:
                state[1] = pending.pop()
                state[2] = time.monotonic()
                here.send((state[1], execute))
    for state in workers.values():
        state[0].kill()
    return sorted(results, key=lambda r: (r["name"].split("#")[0], int(r["name"].split("#")[1])))


# ------------------------------------------------------------- the report

def summarize(results: list[dict]) -> list[str]:
    counted = [r for r in results if r["status"] in ("accepted", "refused", "crash")]
    accepted = [r for r in counted if r["status"] == "accepted"]
    # Acceptance is over every chunk jaxlib parses, Shardy's failures too.
    parsed = counted + [r for r in results if r["status"] == "shardy-fails" and "ours" in r]
    ours_ok = [r for r in parsed if r.get("ours", r["status"]) == "accepted"]
    values = sum(r["values"] for r in accepted)
    agree = values - sum(len(r["differ"]) for r in accepted)
    runs = [r.get("run", "") for r in parsed if r.get("run")]
    left_out: dict[str, int] = {}
    for r in results:
        if r not in parsed:
            left_out[r["status"]] = left_out.get(r["status"], 0) + 1
    lines = [
        f"chunks: {len(results)} in all; {len(parsed)} on at most {MAX_DEVICES} devices that "
        f"jaxlib parses, {len(counted)} of them Shardy propagates"
        + (f" (left out: {', '.join(f'{n} {k}' for k, n in sorted(left_out.items()))})"
           if left_out else ""),
        f"accepted: {len(ours_ok)} of {len(parsed)}; refused "
        f"{sum(r.get('ours', r['status']) == 'refused' for r in parsed)}, crashed "
        f"{sum(r.get('ours', r['status']) == 'crash' for r in parsed)}",
        f"values agreeing with Shardy (where it propagates): {agree} of {values} "
        f"({100.0 * agree / max(values, 1):.1f}%); agreeing or in a chunk where ours moves "
        f"fewer bytes: {agree + _in_cheaper(accepted)} of {values} "
        f"({100.0 * (agree + _in_cheaper(accepted)) / max(values, 1):.1f}%)",
        _priced(accepted),
        f"run against one device: {sum(x == 'ok' for x in runs)} ok, "
        f"{sum(x.startswith('mismatch') for x in runs)} mismatch, "
        f"{sum(x.startswith('not run') for x in runs)} not run",
    ]
    return lines


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


def report(results: list[dict], seconds: float) -> str:
    lines = [f"# Shardy's propagation suite against stablehlo-spmd ({revision(pathlib.Path(__file__).resolve().parent.parent)})", ""]
    lines += ["    " + line for line in summarize(results)]
    lines += ["", "## Per file", "", "| file | chunks | accepted | values | agree |",
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
    for r in results:
        run = r.get("run", "")
        if r.get("ours") in ("refused", "crash") or run.startswith("mismatch"):
            lines.append(f"- {r['name']} (line {r['line']}): {r['ours']} "
                         f"{r.get('why', '')} {run}".rstrip())
    lines += ["", "## Values that differ (Shardy / ours)", ""]
    for r in results:
        moved = r.get("bytes")
        priced = f" [bytes ours {moved[0]:.0f} / after Shardy's {moved[1]:.0f}]" if moved else ""
        for key, wanted, got in r.get("differ", []):
            lines.append(f"- {r['name']} (line {r['line']}) `{key}`: {wanted} / {got}{priced}")
    lines += ["", f"{len(results)} chunks in {seconds:.0f} s"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shardy", type=pathlib.Path, help="a checkout of openxla/shardy, "
                        "or the folder of its propagation tests")
    parser.add_argument("--only", default="", help="regex on 'file#chunk'")
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
    chunks = [c for f in files for c in split_chunks(f) if re.search(args.only, c.name)]
    start = time.monotonic()
    results = run_all(chunks, args.jobs, args.timeout, not args.no_run)
    seconds = time.monotonic() - start
    text = report(results, seconds)
    args.report.write_text(text)
    if args.verbose:
        print(text)
    else:
        print("\n".join(summarize(results)))
    print(f"wrote {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
