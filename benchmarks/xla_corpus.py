"""XLA's own SPMD partitioner tests as a corpus: our partitioning against XLA's, module by module.

    python3 benchmarks/xla_corpus.py PATH/spmd_partitioner_test.cc      # writes the report
    python3 benchmarks/xla_corpus.py PATH/spmd_partitioner_test.cc --only Dot --jobs 1 -v
    python3 benchmarks/xla_corpus.py PATH/spmd_partitioner_test.cc --entry api

The corpus is xla/service/spmd/spmd_partitioner_test.cc of openxla/xla, read
from wherever it was fetched (it is not part of this repository).  For each
HLO module in it:

1. Extraction (`extract_modules`): every raw string literal of a ``TEST``
   that holds an ``ENTRY`` computation; its device count is the test's
   ``num_devices`` argument, else the module's ``num_partitions``, else what
   its shardings name.  Modules on more than 8 devices are left out.
2. Conversion (`to_stablehlo`): XLA's HLO parser and jaxlib's own HLO ->
   StableHLO converter; shardings survive as ``mhlo.sharding``.  An HLO
   ``copy`` arrives as ``mhlo.copy``, which no dialect of jaxlib's bindings
   knows: one that carries a sharding is where XLA reshards, so it becomes
   XLA's sharding constraint (``custom_call @Sharding``); one without is
   the identity and is dropped.  The module gets ``mhlo.num_partitions``.
3. Ours: ``ss.run_passes(text, "spmd-propagate,spmd-partition,canonicalize,cse")``
   (the CLI's pipeline; with ``--entry api``, ``ss.partition(text)``, the
   Python API's one call), the mesh inferred from the module's shardings,
   then `stablehlo_spmd.runtime.compile`.
4. XLA: the same converted module compiled by the PJRT client with
   ``num_partitions`` set, so XLA's GSPMD partitioner partitions it.
5. Numerics: ours on random inputs (floats normal; integers in [0, 8), or
   all distinct where the module promises ``unique_indices``; booleans
   fair) against `ss.run_single_device` of the converted module: exact for
   integers and booleans; for floats within a tolerance of the dtype's
   precision (1e-4 at 32 bits, 2e-2 at 16) relative to each value and to the
   result's largest magnitude.  Modules whose largest tensor is over 48 MiB,
   or whose results one device cannot reproduce (infeed, outfeed, random
   numbers, partition-id, their own collectives, a manual region), are compiled and counted
   but not run ("unrun").  Where ours differs, XLA's own partitioning runs
   on the same inputs: if it differs from one device too, the inputs broke a
   promise of the module (overlapping ``unique_indices``, say) and the
   module counts as "unrun", not as our mismatch.
6. Bytes: both compiled programs counted by stablehlo_spmd/collective_bytes.py;
   ours also as emitted (our StableHLO before XLA compiles it).

Each module runs in a worker process with a time limit, so a crash or a
hang costs that module only.  Statuses: ``ok`` (numerics checked),
``unrun`` (too big to run here; bytes compared), ``mismatch`` (ours differs
from one device), ``refused`` (the project's error), ``crash`` (any other
exception, a dead worker, or the time limit while ours partitions or
compiles; a run over the limit leaves the module "unrun", its bytes counted), and, not counted
against us, ``unconvertible`` (XLA's parser or jaxlib's converter rejects
it) and ``xla-fail`` (XLA's partitioner cannot compile it, or aborts).

Printed: one line per module, then the summary; the same goes to
benchmarks/results/xla_corpus.md with, for each module moving more bytes
than XLA, a guess at the cause (`cause`): XLA's compile adding collectives
to ours (more of a kind compiled than we emitted), else the HLO instruction
whose collectives move the most more bytes in ours than in XLA's (both
compiled programs name it: our collectives carry its name as their location,
XLA's as op_name metadata), grouped by what kind of instruction it is.
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

from stablehlo_spmd.collective_bytes import fmt_bytes as _fmt
from stablehlo_spmd.collective_bytes import instructions
from report import revision

ROOT = pathlib.Path(__file__).resolve().parents[1]
REPORT = ROOT / "benchmarks" / "results" / "xla_corpus.md"
MAX_DEVICES = 8
RUN_LIMIT_BYTES = 48 * 2**20       # the largest tensor of a module we still run
COMPARED = ("ok", "unrun", "mismatch")   # statuses whose bytes are compared with XLA's
# Opcodes whose results one device cannot reproduce (host transfers, random bits, the
# device's own id, collectives written into the module itself): such modules are compiled
# and counted, not run against one device.
_NOT_ON_ONE_DEVICE = ("infeed", "outfeed", "send", "recv", "rng", "rng-bit-generator",
                      "rng-get-and-update-state", "partition-id", "replica-id", "all-reduce",
                      "all-gather", "reduce-scatter", "all-to-all", "collective-permute")


# ------------------------------------------------------------------ extraction

_TEST = re.compile(r"\bTEST(?:_P|_F)?\(\s*(\w+)\s*,\s*(\w+)\s*\)")
_RAW_STRING = re.compile(r'R"([^()\\\s"]{0,16})\((.*?)\)\1"', re.DOTALL)
_DEVICES_ARGUMENT = re.compile(
    r"PartitionComputation\(\s*\w+\s*,\s*(?:/\*\s*num_devices\s*=\s*\*/\s*)?(\d+)")


@dataclasses.dataclass(frozen=True)
class CorpusModule:
    name: str          # the test's name, "#2" and on for its further modules
    hlo: str
    devices: int | None


def extract_modules(source: str) -> list[CorpusModule]:
    """Every HLO module in a C++ test file's raw string literals, named by its test."""
    starts = list(_TEST.finditer(source))
    modules = []
    for index, test in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(source)
        body = source[test.end():end]
        found = [m for m in _RAW_STRING.finditer(body) if "ENTRY" in m.group(2)]
        for number, literal in enumerate(found):
            hlo = literal.group(2).strip("\n")
            # the device count given with this module: the first after it, else any in the test
            given = (_DEVICES_ARGUMENT.search(body, literal.end())
                     or _DEVICES_ARGUMENT.search(body))
            devices = int(given.group(1)) if given else module_devices(hlo)
            name = test.group(2) + (f"#{number + 1}" if number else "")
            modules.append(CorpusModule(name, hlo, devices))
    return modules


def module_devices(hlo: str) -> int | None:
    """The devices an HLO module names: ``num_partitions``, else its largest sharding."""
    header = re.search(r"num_partitions\s*=\s*(\d+)", hlo)
    if header:
        return int(header.group(1))
    counts = [math.prod(int(d) for d in dims.split(","))
              for dims in re.findall(r"devices=\[([\d,]+)\]", hlo)]
    counts += [int(device) + 1 for device in re.findall(r"maximal device=(\d+)", hlo)]
    return max(counts) if counts else None


# ------------------------------------------------------------------ one module (in a worker)


def to_stablehlo(hlo: str, devices: int) -> str:
    """`hlo` through XLA's parser and jaxlib's converter, as StableHLO text the project reads."""
    from jax._src.lib import _jax
    from jax._src.lib import xla_client as xc
    from jaxlib.mlir import ir

    from stablehlo_spmd.ir import make_context

    proto = xc.hlo.hlo_module_from_text(hlo).as_serialized_hlo_module_proto()
    bytecode = _jax.mlir.hlo_to_stablehlo(proto)
    with make_context() as context:
        context.allow_unregistered_dialects = True      # for mhlo.copy, rewritten below
        module = ir.Module.parse(bytecode)
        copies, unknown = [], set()

        def visit(op):
            if op.name == "mhlo.copy":
                copies.append(op)
            elif not context.is_registered_operation(op.name):
                unknown.add(op.name)
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
        if unknown:
            raise ValueError(f"no dialect for {', '.join(sorted(unknown))}")
        for copy in copies:
            source, result = copy.operands[0], copy.results[0]
            if "mhlo.sharding" in copy.attributes:
                constraint = ir.Operation.create(
                    "stablehlo.custom_call", results=[result.type], operands=[source],
                    attributes={"call_target_name": ir.StringAttr.get("Sharding"),
                                "mhlo.sharding": copy.attributes["mhlo.sharding"]},
                    loc=copy.location, ip=ir.InsertionPoint(copy))
                result.replace_all_uses_with(constraint.results[0])
            else:
                result.replace_all_uses_with(source)
            copy.erase()
        i32 = ir.IntegerType.get_signless(32)
        module.operation.attributes["mhlo.num_partitions"] = ir.IntegerAttr.get(i32, devices)
        module.operation.attributes["mhlo.num_replicas"] = ir.IntegerAttr.get(i32, 1)
        return module.operation.get_asm(enable_debug_info=True)


def _largest_tensor_bytes(text: str) -> int:
    sizes = {"i1": 1, "i8": 1, "ui8": 1, "i16": 2, "ui16": 2, "f16": 2, "bf16": 2, "i32": 4,
             "ui32": 4, "f32": 4, "i64": 8, "ui64": 8, "f64": 8}
    largest = 0
    for dims, element in re.findall(r"tensor<((?:\d+x)*)(\w+)>", text):
        count = math.prod(int(d) for d in dims.split("x") if d)
        largest = max(largest, count * sizes.get(element, 8))
    return largest


def _xla_compiled_text(text: str, devices: int) -> str:
    """XLA's own partitioning (GSPMD, from the mhlo.sharding annotations), optimized HLO."""
    import jax
    import numpy as np
    from jax._src import compiler
    from jax._src.lib import xla_client as xc

    chosen = jax.devices()[:devices]
    client = chosen[0].client
    options = compiler.get_compile_options(
        num_replicas=1, num_partitions=devices,
        device_assignment=np.array([[d.id for d in chosen]], dtype=np.int64), backend=client)
    options.executable_build_options.use_spmd_partitioning = True
    options.executable_build_options.use_shardy_partitioner = False
    loaded = client.compile_and_load(text, xc.DeviceList(tuple(chosen)), options)
    return "\n".join(m.to_string() for m in loaded.hlo_modules())


def _random_inputs(arguments, seed: int, distinct_integers: bool = False) -> list:
    import numpy as np

    rng = np.random.default_rng(seed)
    inputs = []
    for argument in arguments:
        dtype = np.dtype(argument.dtype)
        if dtype == np.bool_:
            inputs.append(rng.integers(0, 2, argument.shape).astype(bool))
        elif np.issubdtype(dtype, np.integer) and distinct_integers:
            count = math.prod(argument.shape)
            inputs.append(rng.permutation(count).reshape(argument.shape).astype(dtype))
        elif np.issubdtype(dtype, np.integer):
            inputs.append(rng.integers(0, 8, argument.shape).astype(dtype))
        elif np.issubdtype(dtype, np.complexfloating):
            inputs.append((rng.standard_normal(argument.shape)
                           + 1j * rng.standard_normal(argument.shape)).astype(dtype))
        else:
            inputs.append(rng.standard_normal(argument.shape).astype(dtype))
    return inputs


def _tolerance(dtype) -> float | None:
    """For a floating dtype (bfloat16 included), a tolerance at its precision; else None."""
    import jax.numpy as jnp

    if not jnp.issubdtype(dtype, jnp.inexact):
        return None
    return 1e-4 if jnp.finfo(dtype).bits >= 32 else 2e-2 if jnp.finfo(dtype).bits >= 16 else 0.25


def _difference(got, want) -> str | None:
    """None when `got` matches `want` (exactly, or within `_tolerance`); else what differs."""
    import numpy as np

    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape} vs {want.shape}"
    tolerance = _tolerance(want.dtype)
    if tolerance is not None:
        a, b = got.astype(np.complex128), want.astype(np.complex128)
        finite = np.abs(b[np.isfinite(b)])
        scale = max(1.0, float(finite.max())) if finite.size else 1.0
        close = np.isclose(a, b, rtol=tolerance, atol=tolerance * scale, equal_nan=True)
    else:
        close = got == want
    if close.all():
        return None
    bad = int((~close).sum())
    return f"{bad} of {close.size} elements differ"


_INSTRUCTION_START = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(?:\(|[a-z][a-z0-9]*\[)")


def one_instruction_a_line(hlo: str) -> str:
    """`hlo` with each instruction on one line: hand-written tests wrap long ones."""
    lines: list[str] = []
    for line in hlo.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        starts = (_INSTRUCTION_START.match(line) or stripped.endswith("{") or stripped == "}"
                  or stripped.startswith("HloModule"))
        if starts or not lines:
            lines.append(line)
        else:
            lines[-1] += " " + stripped
    return "\n".join(lines)


def _instruction_opcodes(hlo: str) -> dict[str, str]:
    """HLO instruction name -> opcode, with the attributes that set a cause apart."""
    opcodes = {}
    for name, _, opcode, rest in instructions(one_instruction_a_line(hlo)):
        if opcode == "convolution" and re.search(r"(feature|batch)_group_count=", rest):
            opcode = "convolution(groups)"
        elif opcode in ("convolution", "reduce-window") and re.search(
                r"(lhs_dilate|rhs_dilate|base_dilat|window_dilat)", rest):
            opcode = f"{opcode}(dilated)"
        elif opcode == "custom-call":
            target = re.search(r'custom_call_target="([^"]+)"', rest)
            opcode = f"custom-call({target.group(1)})" if target else opcode
        opcodes[name] = opcode
    return opcodes


def _bytes_by_instruction(found) -> dict[str, float]:
    """Bytes per source instruction (named by each collective's location or metadata)."""
    by_name: dict[str, float] = {}
    for collective in found:
        # XLA prefixes the op_name of what it inlined (our manual body: "call.1/dot.89")
        name = collective.source.rsplit("/", 1)[-1] or "?"
        by_name[name] = by_name.get(name, 0.0) + collective.bytes
    return by_name


# What a module's status is when its worker dies or overruns in each phase.
_PHASE_STATUS = {"convert": "unconvertible", "xla": "xla-fail", "ours": "crash", "run": "crash"}


# How a module is partitioned: the CLI's pipeline (stablehlo-spmd-opt
# --spmd-propagate --spmd-partition --canonicalize --cse), or the Python API's
# one call (ss.partition, which annotates with no rules first).  Both must
# accept, refuse and compute the same.
ENTRIES = {
    "cli": lambda ss, text: ss.run_passes(text, "spmd-propagate,spmd-partition,canonicalize,cse"),
    "api": lambda ss, text: ss.partition(text),
}


def run_module(module: CorpusModule, phase=lambda name, measured: None, seed: int = 0,
               entry: str = "cli") -> dict:
    """Everything measured on one module, as a plain dict (it crosses a process boundary).

    `phase` is told each phase of `_PHASE_STATUS` as it starts, with what is measured so far;
    `entry` names the way in (`ENTRIES`).
    """
    import warnings

    import stablehlo_spmd as ss
    from stablehlo_spmd.collective_bytes import collectives, emitted_collectives, total_bytes
    from stablehlo_spmd import runtime
    from stablehlo_spmd.errors import SpmdError

    result = {"name": module.name, "devices": module.devices}
    phase("convert", result)
    try:
        text = to_stablehlo(module.hlo, module.devices)
    except Exception as error:  # noqa: BLE001  (any converter failure is the corpus's)
        return {**result, "status": "unconvertible", "detail": _one_line(error)}
    phase("xla", result)
    try:
        xla_text = _xla_compiled_text(text, module.devices)
    except Exception as error:  # noqa: BLE001
        return {**result, "status": "xla-fail", "detail": _one_line(error)}
    xla_found = collectives(xla_text, module.devices)
    result["xla_bytes"] = total_bytes(xla_found)
    xla_at = _bytes_by_instruction(xla_found)
    phase("ours", result)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            partitioned = ENTRIES[entry](ss, text)
            executable = runtime.compile(partitioned)
        compiled = collectives(executable.compiled_text(), module.devices)
        emitted = emitted_collectives(partitioned, module.devices)
        result.update(ours_bytes=total_bytes(compiled), emitted_bytes=total_bytes(emitted),
                      ours_at=_bytes_by_instruction(compiled), xla_at=xla_at,
                      ours_counts=_kind_counts(compiled), emitted_counts=_kind_counts(emitted))
        unrun = _why_not_run(module.hlo, text)
        if unrun:
            return {**result, "status": "unrun", "detail": unrun}
        phase("run", result)
        inputs = _random_inputs(executable.arguments, seed,
                                distinct_integers="unique_indices=true" in module.hlo)
        ours = executable(*inputs)
        want = ss.run_single_device(text, inputs)
    except SpmdError as error:
        return {**result, "status": "refused", "detail": _one_line(error)}
    except Exception as error:  # noqa: BLE001  (the project failing in any other way)
        return {**result, "status": "crash", "detail": f"{type(error).__name__}: "
                f"{_one_line(error)}"}
    for index, (got, expected) in enumerate(zip(ours, want)):
        difference = _difference(got, expected)
        if difference:
            if _xla_differs_too(text, inputs, want):
                return {**result, "status": "unrun", "detail": "XLA's partitioning differs "
                        "from one device as well: the random inputs break a promise of the "
                        f"module (ours: result #{index}: {difference})"}
            return {**result, "status": "mismatch", "detail": f"result #{index}: {difference}"}
    return {**result, "status": "ok", "detail": ""}


def _xla_differs_too(text: str, inputs: list, want: list) -> bool:
    """Whether XLA's own partitioning of the module, run on the same inputs, differs from
    one device too (then the inputs, not a partitioner, are at fault)."""
    from stablehlo_spmd import runtime

    try:
        theirs = runtime.compile(text)(*inputs)    # mhlo.sharding only: XLA's GSPMD partitions
    except Exception:  # noqa: BLE001  (XLA's run unavailable: ours stays the suspect)
        return False
    return any(_difference(got, expected) for got, expected in zip(theirs, want))


def _why_not_run(hlo: str, text: str) -> str | None:
    """Why a module is only compiled and counted here, or None to run it."""
    opcodes = sorted({opcode for _, _, opcode, _ in instructions(one_instruction_a_line(hlo))
                      if opcode.removesuffix("-start") in _NOT_ON_ONE_DEVICE})
    if opcodes:
        return f"not comparable with one device ({', '.join(opcodes)}): compiled and counted"
    if re.search(r'custom_call_target="SPMD(FullToShard|ShardToFull)Shape"', hlo):
        # Inside a manual region each device computes on its own block:
        # there is no one-device program to hold it against.
        return "not comparable with one device (a manual region): compiled and counted"
    if _largest_tensor_bytes(text) > RUN_LIMIT_BYTES:
        return f"a tensor over {RUN_LIMIT_BYTES // 2**20} MiB: compiled and counted, not run"
    return None


def _kind_counts(found) -> dict[str, int]:
    counts: dict[str, int] = {}
    for collective in found:
        counts[collective.kind] = counts.get(collective.kind, 0) + collective.times
    return counts


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text[:300]


def _worker(connection, quiet: bool, entry: str) -> None:
    """Run modules sent over `connection` until it closes; one result dict per module."""
    if quiet:   # XLA's fatal checks print their stack on stderr; the status says enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    _host_devices()
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import jax
    jax.devices()
    try:
        connection.send("ready")
        while True:
            module = connection.recv()
            connection.send(run_module(
                module, lambda name, measured: connection.send(("phase", name, measured)),
                entry=entry))
    except (EOFError, BrokenPipeError):
        return                       # the run is over (or gave up on this worker)


def _host_devices() -> None:
    flag = f"--xla_force_host_platform_device_count={MAX_DEVICES}"
    if flag not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


# ------------------------------------------------------------------ the run


class _Worker:
    def __init__(self, context, quiet: bool, entry: str):
        self.connection, child = context.Pipe()
        self.process = context.Process(target=_worker, args=(child, quiet, entry), daemon=True)
        self.process.start()
        child.close()
        self.module: CorpusModule | None = None
        self.started = 0.0
        self.ready = False
        self.phase = ""
        self.measured: dict = {}

    def send(self, module: CorpusModule) -> None:
        self.module, self.started, self.phase, self.measured = module, time.monotonic(), "", {}
        self.connection.send(module)

    def stop(self) -> None:
        self.process.kill()
        self.process.join()
        self.connection.close()


def run_all(modules: list[CorpusModule], jobs: int, timeout: float, verbose: bool,
            entry: str = "cli") -> list[dict]:
    """Each module in a worker process; a worker that dies or overruns is replaced."""
    context = multiprocessing.get_context("spawn")
    pending = list(reversed(modules))
    results: dict[str, dict] = {}
    workers = [_Worker(context, not verbose, entry) for _ in range(min(jobs, len(modules)))]

    def finish(worker, result):
        results[result["name"]] = result
        worker.module = None
        if verbose:
            print(_line(result), flush=True)

    while pending or any(w.module for w in workers):
        for worker in workers:
            if worker.ready and worker.module is None and pending:
                worker.send(pending.pop())
        ready = wait([w.connection for w in workers], timeout=1.0)
        for index, worker in enumerate(workers):
            if worker.connection in ready:
                try:
                    message = worker.connection.recv()
                except EOFError:
                    message = None
                if message == "ready":
                    worker.ready = True
                    continue
                if isinstance(message, tuple):
                    _, worker.phase, worker.measured = message
                    continue
                if message is not None:
                    finish(worker, message)
                    continue
                worker.process.join(timeout=5)
                reason = f"died (exit code {worker.process.exitcode})"
                if not worker.ready:           # it could not even start: neither will the next
                    print(f"error: a worker process {reason} while starting (jax and the "
                          "project must import in a fresh process)", file=sys.stderr)
                    raise SystemExit(1)
            elif worker.module is not None and time.monotonic() - worker.started > timeout:
                reason = f"over the {timeout:.0f} s limit"
            else:
                continue
            if worker.module is not None:
                status = _PHASE_STATUS.get(worker.phase, "crash")
                if worker.phase == "run" and reason.startswith("over"):
                    status = "unrun"      # compiled and counted; too slow to run on this host
                finish(worker, {**worker.measured, "name": worker.module.name,
                                "devices": worker.module.devices, "status": status,
                                "detail": f"{worker.phase or 'start'} phase {reason}"})
            worker.stop()
            workers[index] = _Worker(context, not verbose, entry) if pending else None
        workers = [w for w in workers if w is not None]
    for worker in workers:
        worker.connection.close()
        worker.process.join(timeout=5)
        if worker.process.is_alive():
            worker.stop()
    return [results[m.name] for m in modules]


# ------------------------------------------------------------------ report

_CAUSES = (   # (cause, opcodes whose collectives point at it)
    ("pad/slice", ("pad", "slice", "dynamic-slice", "dynamic-update-slice", "concatenate",
                   "reverse")),
    ("windowed halo", ("reduce-window", "select-and-scatter")),
    ("iota", ("iota",)),
    ("sort", ("sort",)),
    ("conv groups", ("convolution(groups)",)),
    ("dilation", ("convolution(dilated)", "reduce-window(dilated)")),
    ("gather/scatter", ("gather", "scatter")),
    ("custom calls", ("custom-call",)),
    ("dot/conv strategy", ("dot", "convolution")),
    ("conflicts", ("copy", "reduce", "transpose", "reshape", "broadcast", "add", "multiply",
                   "subtract", "divide", "maximum", "minimum", "select", "compare", "convert",
                   "negate", "exponential", "parameter", "tuple")),
)


def cause(result: dict, hlo: str) -> tuple[str, str]:
    """(cause group, one-line reason) for a module where ours moves more bytes than XLA."""
    compiled, emitted = result.get("ours_counts", {}), result.get("emitted_counts", {})
    added = {kind: count - emitted.get(kind, 0) for kind, count in compiled.items()
             if count > emitted.get(kind, 0)}
    if added:
        # XLA's combiners only merge collectives: more of a kind once compiled means XLA's
        # partitioner added them, at our program's boundary (the manual body is ours).
        listed = ", ".join(f"{count} {kind}" for kind, count in sorted(added.items()))
        return ("uneven boundary", f"XLA's compile adds {listed} to our program (as emitted "
                f"{_fmt(result['emitted_bytes'])}, compiled {_fmt(result['ours_bytes'])})")
    ours_at, xla_at = result.get("ours_at") or {}, result.get("xla_at") or {}
    if not ours_at:
        return ("other", "no collective of ours to attribute")
    opcodes = _instruction_opcodes(hlo)
    name, excess = max(((n, moved - xla_at.get(n, 0.0)) for n, moved in ours_at.items()),
                       key=lambda item: item[1])
    opcode = opcodes.get(name, "?")
    base = opcode.split("(")[0] if opcode.startswith("custom-call") else opcode
    group = next((g for g, members in _CAUSES if base in members or opcode in members), "other")
    return group, (f"{_fmt(ours_at[name])} at {opcode} %{name} (XLA "
                   f"{_fmt(xla_at.get(name, 0.0))})")


def _ratio(ours: float, xla: float) -> str:
    if xla == 0:
        return "=" if ours == 0 else "inf"
    return f"{ours / xla:.2f}"


def _line(result: dict) -> str:
    ours, xla = result.get("ours_bytes"), result.get("xla_bytes")
    figures = ("" if ours is None or xla is None else
               f"{_fmt(ours):>10} {_fmt(xla):>10} {_ratio(ours, xla):>6}")
    detail = f"  {result['detail']}" if result.get("detail") else ""
    return f"{result['name'][:60]:<60} {result['status']:<13} {figures}{detail}"


@dataclasses.dataclass
class Summary:
    extracted: int
    kept: int
    statuses: dict[str, int]
    compared: int
    at_most_xla: int
    ours_total: float
    emitted_total: float
    xla_total: float
    losers: list[tuple[dict, str, str]]        # (result, cause group, reason), worst first
    causes: dict[str, tuple[int, float]]       # group -> (modules, excess bytes)
    geomean: float | None                      # of ours / XLA where both move bytes
    refusals: list[tuple[str, int, str]]       # (message, modules, first module), most first


def summarize(results: list[dict], hlo_of: dict[str, str], extracted: int) -> Summary:
    statuses: dict[str, int] = {}
    for result in results:
        statuses[result["status"]] = statuses.get(result["status"], 0) + 1
    compared = [r for r in results if r["status"] in COMPARED]
    losers = []
    causes: dict[str, tuple[int, float]] = {}
    for result in compared:
        if result["ours_bytes"] > result["xla_bytes"]:
            group, reason = cause(result, hlo_of[result["name"]])
            losers.append((result, group, reason))
            count, excess = causes.get(group, (0, 0.0))
            causes[group] = (count + 1, excess + result["ours_bytes"] - result["xla_bytes"])
    losers.sort(key=lambda item: item[0]["xla_bytes"] - item[0]["ours_bytes"])
    both = [math.log(r["ours_bytes"] / r["xla_bytes"]) for r in compared
            if r["ours_bytes"] > 0 and r["xla_bytes"] > 0]
    refusals: dict[str, list[str]] = {}
    for result in results:
        if result["status"] in ("refused", "crash"):
            message = re.sub(r"\d+", "N", result["detail"])[:160]
            refusals.setdefault(f"{result['status']}: {message}", []).append(result["name"])
    return Summary(
        extracted=extracted, kept=len(results), statuses=statuses, compared=len(compared),
        at_most_xla=sum(r["ours_bytes"] <= r["xla_bytes"] for r in compared),
        ours_total=sum(r["ours_bytes"] for r in compared),
        emitted_total=sum(r["emitted_bytes"] for r in compared),
        xla_total=sum(r["xla_bytes"] for r in compared), losers=losers,
        causes=dict(sorted(causes.items(), key=lambda item: -item[1][1])),
        geomean=math.exp(sum(both) / len(both)) if both else None,
        refusals=sorted(((message, len(names), names[0]) for message, names in refusals.items()),
                        key=lambda item: -item[1]))


def _headline(s: Summary) -> list[str]:
    """The summary's figures, one sentence each (printed, and listed in the report)."""
    geomean = "n/a" if s.geomean is None else f"{s.geomean:.2f}"
    return [
        f"modules in the file: {s.extracted}; on at most {MAX_DEVICES} devices: {s.kept}",
        "statuses: " + ", ".join(f"{name} {count}" for name, count in sorted(s.statuses.items())),
        f"runnable (both partitioners compile it: ok, unrun, mismatch): {s.compared}; ours <= "
        f"XLA on {s.at_most_xla} ({_percent(s.at_most_xla, s.compared)})",
        f"total bytes per device over those: ours {_fmt(s.ours_total)} (as emitted "
        f"{_fmt(s.emitted_total)}), XLA {_fmt(s.xla_total)}: ours / XLA "
        f"{_ratio(s.ours_total, s.xla_total)}; geometric mean of ours / XLA where both move "
        f"bytes: {geomean}",
    ]


def _loser_cells(item: tuple[dict, str, str]) -> tuple[str, ...]:
    result, group, reason = item
    return (result["name"], _fmt(result["ours_bytes"]), _fmt(result["xla_bytes"]),
            _ratio(result["ours_bytes"], result["xla_bytes"]), group, reason)


def summary_lines(summary: Summary, top: int = 20) -> list[str]:
    lines = _headline(summary) + ["", "modules moving more than XLA, by cause guess "
                                      "(modules, excess bytes):"]
    lines += [f"  {group:<16} {count:>4} {_fmt(excess):>12}"
              for group, (count, excess) in summary.causes.items()]
    lines += ["", f"biggest losers (top {top}, by excess bytes): ours, XLA, o/x, cause, reason"]
    for item in summary.losers[:top]:
        name, ours, xla, ratio, group, reason = _loser_cells(item)
        lines.append(f"  {name[:56]:<56} {ours:>12} {xla:>12} {ratio:>7}  [{group}] {reason}")
    lines += ["", "refused or crashed, by message (modules, first one):"]
    lines += [f"  {count:>3}  {message}  ({first})" for message, count, first in summary.refusals]
    return lines


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]],
           numbers: tuple[int, ...]) -> list[str]:
    """A markdown table; the columns at `numbers` are right-aligned."""
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---:" if i in numbers else "---" for i in range(len(header))) + "|"]
    return lines + ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in rows]


def markdown(results: list[dict], summary: Summary, command: str, source: str,
             measured: str = "") -> str:
    s = summary
    causes = {item[0]["name"]: item for item in s.losers}
    lines = [
        "# XLA's SPMD partitioner tests as a corpus",
        "",
        f"- command: `{command}`",
        f"- corpus: {source}",
        f"- {_versions()}",
        *([f"- revision: {measured}"] if measured else []),
        "",
        "Each HLO module of the file on at most 8 devices, converted by jaxlib's HLO -> "
        "StableHLO converter, partitioned by this project (propagate, partition) and by "
        "XLA's GSPMD partitioner from the same shardings; both compiled programs' "
        "collectives counted by stablehlo_spmd/collective_bytes.py (bytes per device, DESIGN.md's "
        "cost table). Ours is checked against one device on random inputs. See "
        "benchmarks/xla_corpus.py for the steps and the statuses.",
        "",
        "## Summary",
        "",
        *(f"- {line}" for line in _headline(s)),
        "",
        "## Modules moving more bytes than XLA, by cause (a guess per module)",
        "",
        *_table(("cause", "modules", "excess bytes"),
                [(g, str(count), _fmt(excess)) for g, (count, excess) in s.causes.items()], (1, 2)),
        "",
        "The guess: XLA's compile adding collectives to our program (more of a kind compiled "
        "than we emitted: at the boundary, where uneven shards are trimmed), else the "
        "instruction whose collectives move the most more bytes in ours than in XLA's (both "
        "compiled programs name it: our collectives' locations and XLA's op_name metadata "
        "carry the HLO instruction's name); reshards at copies, reshapes, elementwise ops and "
        "the like count as conflicts.",
        "",
        "## Biggest losers",
        "",
        *_table(("module", "ours", "XLA", "o/x", "cause", "reason"),
                [_loser_cells(item) for item in s.losers[:20]], (1, 2, 3)),
        "",
        "## Refused or crashed, by message",
        "",
        *_table(("modules", "message", "first module"),
                [(str(count), message, first) for message, count, first in s.refusals], (0,)),
        "",
        "## Every module",
        "",
    ]
    rows = []
    for r in results:
        compared = "ours_bytes" in r and "xla_bytes" in r
        rows.append((r["name"], str(r.get("devices")), r["status"],
                     _fmt(r["ours_bytes"]) if "ours_bytes" in r else "",
                     _fmt(r["emitted_bytes"]) if "emitted_bytes" in r else "",
                     _fmt(r["xla_bytes"]) if "xla_bytes" in r else "",
                     _ratio(r["ours_bytes"], r["xla_bytes"]) if compared else "",
                     causes[r["name"]][1] if r["name"] in causes else "",
                     r.get("detail", "")))
    lines += _table(("module", "devices", "status", "ours", "ours as emitted", "XLA", "o/x",
                     "cause (losers)", "detail"), rows, (1, 3, 4, 5, 6))
    return "\n".join(lines) + "\n"


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "n/a"


def _versions() -> str:
    from importlib import metadata
    try:
        return f"jax {metadata.version('jax')}, jaxlib {metadata.version('jaxlib')}"
    except metadata.PackageNotFoundError:
        return "jax version unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source", help="spmd_partitioner_test.cc (openxla/xla, "
                        "xla/service/spmd/); not part of this repository")
    parser.add_argument("--only", default="", metavar="REGEX",
                        help="only modules whose name matches (the report is not written)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds one module may take (default 60)")
    parser.add_argument("--report", default=str(REPORT),
                        help=f"markdown report (default {REPORT.relative_to(ROOT)})")
    parser.add_argument("--entry", choices=sorted(ENTRIES), default="cli",
                        help="partition through the CLI's pipeline (default) or the Python "
                             "API's ss.partition; the report of the API run is "
                             "xla_corpus_api.md")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print each module's line as it finishes, and what the workers "
                             "print on stderr (XLA's logs)")
    options = parser.parse_args()
    try:
        source = pathlib.Path(options.source).read_text()
    except OSError as error:
        print(f"error: cannot read '{options.source}': {error.strerror}", file=sys.stderr)
        raise SystemExit(1) from None
    modules = extract_modules(source)
    if not modules:
        print(f"error: '{options.source}': no HLO module in any TEST's raw strings",
              file=sys.stderr)
        raise SystemExit(1)
    kept = [m for m in modules if m.devices is not None and m.devices <= MAX_DEVICES]
    if options.only:
        kept = [m for m in kept if re.search(options.only, m.name)]
    start = time.monotonic()
    results = run_all(kept, options.jobs, options.timeout, options.verbose, options.entry)
    elapsed = time.monotonic() - start
    if not options.verbose:
        for result in results:
            print(_line(result))
    summary = summarize(results, {m.name: m.hlo for m in kept}, len(modules))
    print()
    for line in summary_lines(summary):
        print(line)
    print(f"\n{len(kept)} modules in {elapsed:.0f} s with {options.jobs} workers")
    if not options.only:
        command = "python3 benchmarks/xla_corpus.py spmd_partitioner_test.cc"
        report = pathlib.Path(options.report)
        if options.entry != "cli":
            command += f" --entry {options.entry}"
            if options.report == str(REPORT):
                report = REPORT.with_name(f"{REPORT.stem}_{options.entry}{REPORT.suffix}")
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(markdown(results, summary, command, _describe_source(options.source),
                                   revision(ROOT)))
        print(f"wrote {report}", file=sys.stderr)


def _describe_source(path: str) -> str:
    return (f"openxla/xla xla/service/spmd/spmd_partitioner_test.cc "
            f"({pathlib.Path(path).stat().st_size} bytes)")


if __name__ == "__main__":
    main()
