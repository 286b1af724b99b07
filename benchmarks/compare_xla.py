"""Our partitioned programs against XLA's own partitioning of the same functions.

    python3 benchmarks/compare_xla.py --all > benchmarks/results/compare_xla.txt   # the saved run
    python3 benchmarks/compare_xla.py --workloads megatron-mlp uvw --repeat 200
    python3 benchmarks/compare_xla.py --dump-hlo /tmp/hlo     # also write both optimized HLOs

The script sets ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` (and
``JAX_PLATFORMS=cpu``) itself, before jax is imported, so everything runs in
one process on 8 CPU host devices (about 15 s for every workload on 2 cores).
The workloads are the programs of examples/workloads.py and
examples/pipeline.py (and ``lax.top_k``) with shapes, meshes and rules
modelled on the tests that check them (tests/unit/partitioning/:
test_partitioner.py, test_windowed.py, test_sorting.py; written out here, not
imported; inputs from a fixed seed), and the
demo's transformer training step (`stablehlo_spmd.demo_model`, re-exported as
examples/transformer.py) with its rules, stablehlo_spmd/demo_rules.toml.  For
each workload:

1. ours: ``ss.partition(ss.export(fn, *args), mesh, rules)`` (annotate,
   propagate, partition, canonicalize, cse; "partition ms" is the median of
   3 such calls), then ``stablehlo_spmd.runtime.compile``.
2. XLA: ``jax.jit(fn, in_shardings=..., out_shardings=..., keep_unused=True)
   .lower(*args).compile()`` with ``NamedSharding``s read back from
   ``ss.annotate`` of the same text with the same rules, so every argument
   and result gets exactly the spec the first matching rule gives it.  An
   argument no rule matches is replicated.  A result no rule matches is left
   to propagation on our side, so XLA is given the layout our executable
   returns it in (``--unmatched ours``, the default: both programs take and
   give the same layouts); ``--unmatched xla`` lets XLA choose (it chooses the
   same on these workloads), ``--unmatched replicated`` pins it replicated
   (which makes XLA gather what ours leaves sharded).
   A ``jax.Array`` cannot be split unevenly, so a spec that does not divide
   its value (the uneven workloads) goes into the jitted function as a
   ``with_sharding_constraint`` and the value crosses the boundary in the
   layout our executable takes/returns it in; such a program's shardings are
   all given as jax's private ``GSPMDSharding`` (jit fails trying to map an
   uneven layout back onto a NamedSharding otherwise).
3. Collectives are counted in each compiled program's optimized HLO (ours:
   ``Executable.compiled_text()``; XLA: ``compiled.as_text()``) with one
   counter, stablehlo_spmd/collective_bytes.py: per kind, an async
   ``-start``/``-done`` pair once, a combined (tuple-shaped) collective by all
   its operands, bytes per device by DESIGN.md's cost table with the group
   size read from ``replica_groups`` (see that module for the formulas).
   Ours is also counted as emitted, in our partitioned StableHLO before XLA
   compiles it ("bytes ours as emitted"): where the two figures of ours
   differ, XLA's backend combined, split or added collectives at compile time.
4. Time, after warm-up, ``--repeat`` alternating rounds on the same inputs,
   already on the devices, each call followed by ``block_until_ready``;
   medians are reported.  "step": each side's public call (ours
   ``Executable.__call__``, XLA's ``Compiled.__call__``).  "exec": both
   through the same PJRT ``execute_sharded`` (XLA's from the public
   ``Compiled.runtime_executable()``, ours from the Executable's private
   ``_loaded``), so "exec o/x" compares the programs and "step o/x" adds the
   Python each call path costs.  These are tiny programs on a 2-core host:
   the figures are mostly dispatch and host-side collective overhead.
   "host": each side's public call handed the NumPy inputs instead, so the
   time includes cutting them into shards and putting those on the devices
   (jax's ``Compiled.__call__`` takes host arrays too); its columns stand
   beside "step" (device arrays in), in the printed table and the report.
5. Per-device memory: ``Executable.memory_analysis()`` for ours,
   ``compiled.memory_analysis()`` for XLA.
6. Numerics: every output of ours is checked against XLA's (allclose, with
   the tolerances the tests use), so the comparison is between equal programs.

7. Pass time: ours, each of annotate, propagate and partition (with
   canonicalize and cse) timed apart on one parsed module, median of 3, and
   ``runtime.compile``; XLA, ``jit(...).lower`` and ``.compile()``, one call
   each (XLA's partitioner runs inside compile and is not timed apart).

Printed: the main table, pass and compile times, the memory table, the
largest differences between the two programs' outputs, and each program's
collectives with their per-device shapes, groups and bytes.  ``--all`` runs
every workload and also writes benchmarks/results/latest.md (header with
date, versions, devices and the command; one table; each workload's
collectives) and latest.png (bytes and step ratios per workload), through
benchmarks/report.py; matplotlib is needed for the chart only.
"""

from __future__ import annotations

import os

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import datetime  # noqa: E402
import pathlib  # noqa: E402
import shlex  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from typing import Any, Callable  # noqa: E402

import jax  # noqa: E402  (after XLA_FLAGS)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from stablehlo_spmd.collective_bytes import collectives, emitted_collectives  # noqa: E402
from report import (  # noqa: E402  (benchmarks/report.py, beside this script)
    Memory, PassTimes, Row, RunInfo, print_text, revision, write_report)

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEVICES = 8
REPORT_DIR = ROOT / "benchmarks" / "results"
DEMO_RULES = ROOT / "stablehlo_spmd" / "demo_rules.toml"   # the transformer's rules


# ------------------------------------------------------------------ workloads
# The programs are loaded from examples/ as the tests load them; shapes, meshes and
# rules follow tests/unit/partitioning/ (test_partitioner.py, test_windowed.py,
# test_sorting.py); inputs are drawn from a fixed seed per workload.


def _random(rng, *shape):
    return jnp.asarray(rng.standard_normal(shape), jnp.float32)


def _workload(name: str) -> Callable:
    from stablehlo_spmd.frontends.jax import load_object
    return load_object(f"{ROOT / 'examples' / 'workloads.py'}:{name}")


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    make: Callable[[], tuple[Callable, tuple]]   # () -> (fn, args)
    mesh: str | None                             # None: the rules file's mesh
    rules: Any                                   # [(regex, spec)] or a rules-file path
    rtol: float = 1e-5
    atol: float = 1e-5


def _transformer():
    from stablehlo_spmd.demo_model import train_step_example
    return train_step_example()


def _pipeline():
    from stablehlo_spmd.frontends.jax import load_object
    example = str(ROOT / "examples" / "pipeline.py")
    return load_object(f"{example}:pipeline"), load_object(f"{example}:example_args")()


def _top_k(x):
    import jax
    return jax.lax.top_k(x, 4)


def _workloads() -> list[Workload]:
    def rng(seed):
        return np.random.default_rng(seed)

    def mlp_args(seed):
        r = rng(seed)
        return {"w1": _random(r, 16, 32), "w2": _random(r, 32, 16)}, _random(r, 8, 16)

    def attention_args():
        r = rng(3)
        return ({name: _random(r, 32, 32) for name in ("wq", "wk", "wv", "wo")},
                _random(r, 4, 8, 32))

    def fsdp_args():
        r = rng(4)
        return ({"w1": _random(r, 16, 32), "w2": _random(r, 32, 8)}, _random(r, 16, 16),
                _random(r, 16, 8))

    def uneven_args(count):
        r = rng(5)
        return tuple(_random(r, 10, 6) for _ in range(count))

    def uvw_args():
        r = rng(6)
        return _random(r, 64, 32), _random(r, 32, 64), _random(r, 64, 8)

    def moe_args():
        r = rng(7)
        return ({"gate": _random(r, 16, 8), "w_in": _random(r, 8, 16, 32),
                 "w_out": _random(r, 8, 32, 16)}, _random(r, 8, 4, 16))

    def cnn_args():
        r = rng(8)
        return ({"kernel": _random(r, 3, 3, 3, 4), "dense": _random(r, 256, 5)},
                _random(r, 2, 16, 16, 3), _random(r, 2, 5))

    return [
        Workload("megatron-mlp", lambda: (_workload('mlp'), mlp_args(1)), "data=4,model=2", [
            (r"w1", (None, "model")), (r"w2", ("model", None)), (r"^x$", ("data", None)),
            (r"^result$", ("data", None))]),
        Workload("mlp-2d", lambda: (_workload('mlp'), mlp_args(2)), "data=4,model=2", [
            (r"w1", ("data", "model")), (r"w2", ("model", "data")),
            (r"^x$", ("data", "model"))]),
        Workload("attention", lambda: (_workload('attention'), attention_args()), "data=4,model=2", [
            (r"w[qkv]'\]$", (None, "model")), (r"wo'\]$", ("model", None)),
            (r"^x$", ("data", None, None))], rtol=1e-4, atol=1e-4),
        Workload("fsdp-step", lambda: (_workload('sgd_step'), fsdp_args()), "data=8", [
            (r"w1'\]$", ("data", None)), (r"w2'\]$", ("data", None)),
            (r"^[xy]$", ("data", None))]),
        Workload("uneven-elementwise", lambda: (_workload('uneven_elementwise'), uneven_args(2)), "x=4",
                 [(r"", ("x", None))]),
        Workload("uneven-reduce", lambda: (_workload('uneven_reduce'), uneven_args(1)), "x=4",
                 [(r"^x$", ("x", None))]),
        Workload("uvw", lambda: (_workload('chain'), uvw_args()), "x=4", [
            (r"^u$", (None, "x")), (r"^v$", ("x", None)), (r"^w$", (None, None)),
            (r"^result$", (None, None))], rtol=1e-4, atol=1e-4),
        Workload("moe-layer", lambda: (_workload('moe_layer'), moe_args()), "expert=8", [
            (r"w_(in|out)'\]$", ("expert", None, None)), (r"gate", (None, None)),
            (r"^x$", ("expert", None, None))], rtol=1e-4, atol=1e-4),
        Workload("spatial-cnn-step", lambda: (_workload('cnn_step'), cnn_args()), "h=4,w=2", [
            (r"^x$", (None, "h", "w", None))], rtol=1e-4, atol=1e-4),
        Workload("pipeline-4x6", _pipeline, "stage=4", [
            (r"weights'\]$", ("stage", None, None)), (r"bias'\]$", ("stage", None))]),
        Workload("top-k", lambda: (_top_k, (_random(rng(9), 16, 256),)), "data=2,x=4", [
            (r"^x$", ("data", "x")), (r"^result", ("data", None))]),
        Workload("transformer-step", _transformer, None,
                 str(DEMO_RULES), rtol=1e-4, atol=1e-5),
    ]


# ------------------------------------------------------------------ shardings


def _jax_mesh(mesh):
    """Our `Mesh` as a jax Mesh: logical device i is jax.devices()[i], as the runtime runs it."""
    from jax.sharding import AxisType
    devices = np.array(jax.devices()[:mesh.size], dtype=object)
    array = devices[np.asarray(mesh.device_ids)].reshape(mesh.mesh_shape)
    return jax.sharding.Mesh(array, tuple(mesh.axis_names),
                             axis_types=(AxisType.Auto,) * mesh.rank)


def _rule_specs(text: str, mesh, rules) -> tuple[list, list]:
    """Per argument and per result: the partition spec the rules give it, or None (unmatched).

    Read back from spmd-annotate's output, so the matching is exactly ours.
    """
    import stablehlo_spmd as ss
    from stablehlo_spmd import module_shardings as ms
    from stablehlo_spmd.ir import make_context, parse_module
    from stablehlo_spmd.sharding import Sharding

    annotated = ss.annotate(text, mesh, rules)
    arguments, results = [], []
    with make_context() as context:
        module = parse_module(annotated, "<annotated>", context)
        main = next(f for f in ms.functions(module)
                    if str(f.attributes["sym_name"]).strip('"') == "main")
        for value in ms.function_values(main):
            hlo = ms.read_hlo(value)
            spec = None if hlo is None else Sharding.from_hlo(hlo, mesh, value.rank).to_spec()
            (arguments if value.kind == "argument" else results).append(spec)
    return arguments, results


# ------------------------------------------------------------------ one workload


def _block(outputs):
    return jax.block_until_ready(outputs)


def run_workload(workload: Workload, repeat: int, unmatched: str,
                 show_hlo: bool) -> Row:
    import stablehlo_spmd as ss
    from jax.sharding import NamedSharding, PartitionSpec
    from stablehlo_spmd import runtime
    from stablehlo_spmd.api import as_mesh, as_rule_set

    fn, args = workload.make()
    rule_set = as_rule_set(workload.rules, as_mesh(workload.mesh) if workload.mesh else None)
    mesh = rule_set.mesh
    text = ss.export(fn, *args)
    leaves, in_tree = jax.tree_util.tree_flatten(args)
    leaves = [np.asarray(x) for x in leaves]

    # 1. ours
    partition_times = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            start = time.perf_counter()
            partitioned = ss.partition(text, mesh, rule_set)
            partition_times.append(time.perf_counter() - start)
        passes = _pass_times(text, rule_set, statistics.median(partition_times) * 1e3)
    start = time.perf_counter()
    executable = runtime.compile(partitioned)
    ours_compile_ms = (time.perf_counter() - start) * 1e3

    # 2. XLA, with the same rules
    jax_mesh = _jax_mesh(mesh)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        arg_specs, result_specs = _rule_specs(text, mesh, rule_set)
    out_leaves, out_tree = jax.tree_util.tree_flatten(jax.eval_shape(fn, *args))
    assert len(arg_specs) == len(leaves) and len(result_specs) == len(out_leaves)

    def named(spec):
        return NamedSharding(jax_mesh, PartitionSpec(*(spec or ())))

    def even(sharding, shape):
        try:
            sharding.shard_shape(tuple(shape))
            return True
        except ValueError:
            return False

    # A jax.Array cannot be split unevenly, so a spec that does not divide its value is
    # given to XLA as a sharding constraint inside the program, and the value crosses
    # jit's boundary replicated, the one layout jit takes for it.  (Ours keeps XLA's own
    # uneven layout at its boundary, shards in place: no jit program can, so on these
    # workloads the two boundaries differ and XLA's gathers its uneven results.)
    replicated = named(())
    in_shardings, inner_in = [], []
    for spec, leaf in zip(arg_specs, leaves):
        sharding = named(spec)
        uneven = not even(sharding, leaf.shape)
        in_shardings.append(replicated if uneven else sharding)
        inner_in.append(sharding if uneven else None)
    out_shardings, inner_out = [], []
    for spec, leaf, ours_sharding in zip(result_specs, out_leaves, executable.out_shardings):
        if spec is None:
            sharding = {"ours": ours_sharding, "replicated": named(()), "xla": None}[unmatched]
        else:
            sharding = named(spec)
        uneven = sharding is not None and not even(sharding, leaf.shape)
        out_shardings.append(replicated if uneven else sharding)
        inner_out.append(sharding if uneven else None)
    constrained = any(s is not None for s in inner_in + inner_out)
    if constrained:
        # jit maps XLA's compiled layouts back onto the first NamedSharding it is given, and
        # fails on an uneven one; with every sharding in XLA's own terms it does not try.
        in_shardings = [_gspmd(s, x.ndim) for s, x in zip(in_shardings, leaves)]
        out_shardings = [_gspmd(s, x.ndim) for s, x in zip(out_shardings, out_leaves)]
        inner_in = [_gspmd(s, x.ndim) for s, x in zip(inner_in, leaves)]
        inner_out = [_gspmd(s, x.ndim) for s, x in zip(inner_out, out_leaves)]

    def with_constraints(*inputs):
        flat = [x if s is None else jax.lax.with_sharding_constraint(x, s)
                for x, s in zip(jax.tree_util.tree_leaves(inputs), inner_in)]
        outputs = fn(*jax.tree_util.tree_unflatten(in_tree, flat))
        flat = [x if s is None else jax.lax.with_sharding_constraint(x, s)
                for x, s in zip(jax.tree_util.tree_leaves(outputs), inner_out)]
        return jax.tree_util.tree_unflatten(out_tree, flat)

    jitted = jax.jit(with_constraints if constrained else fn, keep_unused=True,
                     in_shardings=jax.tree_util.tree_unflatten(in_tree, in_shardings),
                     out_shardings=_with_none_leaves(out_tree, out_shardings))
    start = time.perf_counter()
    lowered = jitted.lower(*args)
    xla_lower_ms = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    compiled = lowered.compile()
    xla_compile_ms = (time.perf_counter() - start) * 1e3

    # 3. collectives
    ours_text, xla_text = executable.compiled_text(), compiled.as_text()
    ours_found, xla_found = collectives(ours_text, mesh.size), collectives(xla_text, mesh.size)
    ours_emitted = emitted_collectives(partitioned, mesh.size)
    if show_hlo:
        directory = pathlib.Path(show_hlo)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{workload.name}.ours.hlo").write_text(ours_text)
        (directory / f"{workload.name}.xla.hlo").write_text(xla_text)

    # 6. numerics (and warm-up)
    ours_inputs = executable.place(leaves)
    xla_inputs = jax.tree_util.tree_unflatten(
        in_tree, [jax.device_put(x, s) for x, s in zip(leaves, in_shardings)])
    ours_out = _block(executable(*ours_inputs))
    xla_out = jax.tree_util.tree_leaves(_block(compiled(*xla_inputs)))
    assert len(ours_out) == len(xla_out), (len(ours_out), len(xla_out))
    max_error = 0.0
    for index, (got, want) in enumerate(zip(ours_out, xla_out)):
        got, want = np.asarray(got), np.asarray(want)
        np.testing.assert_allclose(got, want, rtol=workload.rtol, atol=workload.atol,
                                   err_msg=f"{workload.name}: result #{index}, ours vs XLA")
        if got.size:
            max_error = max(max_error, float(np.max(np.abs(got.astype(np.float64)
                                                           - want.astype(np.float64)))))

    # 4. step time, alternating.  "step": each side's public call.  "exec": both through the
    # same PJRT call (LoadedExecutable.execute_sharded on the same kind of placed arrays), so
    # the difference is the programs', not the Python around them.  XLA's comes from the
    # public Compiled.runtime_executable(); ours from the Executable's private `_loaded`.
    xla_flat = jax.tree_util.tree_leaves(xla_inputs)
    ours_loaded = executable._loaded
    xla_loaded = compiled.runtime_executable()

    def ours_exec():
        return ours_loaded.execute_sharded(ours_inputs).disassemble_into_single_device_arrays()

    def xla_exec():
        return xla_loaded.execute_sharded(xla_flat).disassemble_into_single_device_arrays()

    host_inputs = jax.tree_util.tree_unflatten(in_tree, leaves)
    calls = {"ours": lambda: executable(*ours_inputs), "xla": lambda: compiled(*xla_inputs),
             "ours exec": ours_exec, "xla exec": xla_exec,
             "ours host": lambda: executable(*leaves), "xla host": lambda: compiled(*host_inputs)}
    for _ in range(3):
        for call in calls.values():
            _block(call())
    times = {name: [] for name in calls}
    for _ in range(repeat):
        for name, call in calls.items():
            start = time.perf_counter()
            _block(call())
            times[name].append(time.perf_counter() - start)
    ms = {name: statistics.median(values) * 1e3 for name, values in times.items()}

    # 5. memory
    try:
        xla_stats = compiled.memory_analysis()
    except Exception:  # noqa: BLE001  (not every backend has it)
        xla_stats = None

    return Row(workload.name, ours_found, xla_found, ours_emitted=ours_emitted,
               ours_ms=ms["ours"], xla_ms=ms["xla"],
               ours_host_ms=ms["ours host"], xla_host_ms=ms["xla host"],
               ours_exec_ms=ms["ours exec"], xla_exec_ms=ms["xla exec"], passes=passes,
               ours_compile_ms=ours_compile_ms, xla_lower_ms=xla_lower_ms,
               xla_compile_ms=xla_compile_ms,
               ours_memory=Memory.from_stats(executable.memory_analysis()),
               xla_memory=Memory.from_stats(xla_stats), max_error=max_error)


def _pass_times(text: str, rule_set, pipeline_ms: float, repeat: int = 3) -> PassTimes:
    """Each pass of ss.partition timed apart, on one parsed module (median of `repeat`)."""
    from stablehlo_spmd import diagnostics
    from stablehlo_spmd.ir import make_context, parse_module
    from stablehlo_spmd.passes.annotate import AnnotatePass
    from stablehlo_spmd.passes.partition import PartitionPass
    from stablehlo_spmd.passes.propagate import PropagatePass
    from stablehlo_spmd.pipeline import Pipeline, run_pipeline

    stages = {"annotate": (AnnotatePass(rules=rule_set),), "propagate": (PropagatePass(),),
              "partition": (PartitionPass(), "canonicalize", "cse")}
    times: dict[str, list[float]] = {name: [] for name in stages}
    for _ in range(repeat):
        with make_context() as context, diagnostics.collecting():
            module = parse_module(text, "<input>", context)
            for name, elements in stages.items():
                start = time.perf_counter()
                if not run_pipeline(module, Pipeline(elements)):
                    raise RuntimeError(f"{name} failed")
                times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(values) * 1e3 for name, values in times.items()}
    return PassTimes(median["annotate"], median["propagate"], median["partition"], pipeline_ms)


def _gspmd(sharding, ndim: int):
    """`sharding` as a GSPMDSharding (jax's private spelling of an XLA HloSharding)."""
    from jax._src.sharding_impls import GSPMDSharding
    if sharding is None or isinstance(sharding, GSPMDSharding):
        return sharding
    return GSPMDSharding(tuple(sharding._device_assignment), sharding._to_xla_hlo_sharding(ndim))


def _with_none_leaves(tree, leaves):
    """A pytree of shardings where None (XLA chooses) stays a leaf rather than an empty node."""
    placeholder = object()
    filled = jax.tree_util.tree_unflatten(tree, [placeholder if x is None else x for x in leaves])
    return jax.tree_util.tree_map(lambda x: None if x is placeholder else x, filled)


def run_info(repeat: int, unmatched: str) -> RunInfo:
    import jaxlib
    script = pathlib.Path(sys.argv[0]).resolve()
    try:
        script = script.relative_to(pathlib.Path.cwd())
    except ValueError:
        pass
    command = " ".join(shlex.quote(part) for part in ["python3", str(script), *sys.argv[1:]])
    return RunInfo(
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        jax_version=jax.__version__, jaxlib_version=jaxlib.__version__,
        devices=jax.device_count(), platform=jax.devices()[0].platform, command=command,
        repeat=repeat, unmatched=unmatched, revision=revision(ROOT))


def main() -> None:
    names = [w.name for w in _workloads()]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--workloads", nargs="+", choices=names, default=names,
                       metavar="NAME", help=f"which workloads (default: all of {' '.join(names)})")
    which.add_argument("--all", action="store_true",
                       help="every workload, and write the report: "
                            f"{REPORT_DIR.relative_to(ROOT)}/latest.md and latest.png "
                            "(the chart needs matplotlib: pip install '.[report]')")
    parser.add_argument("--repeat", type=int, default=50,
                        help="timed runs of each executable per workload (default 50)")
    parser.add_argument("--unmatched", choices=("ours", "replicated", "xla"), default="ours",
                        help="XLA's out_sharding for a result no rule matches: the layout ours "
                             "returns (default), replicated, or XLA's choice")
    parser.add_argument("--dump-hlo", metavar="DIR", default="",
                        help="write both optimized HLO texts of each workload into DIR")
    options = parser.parse_args()
    if len(jax.devices()) < DEVICES:
        raise SystemExit(f"need {DEVICES} devices; XLA_FLAGS was set too late")
    jax.block_until_ready(jax.jit(lambda x: x + 1)(1.0))   # the backend's one-time start-up

    rows = []
    for workload in _workloads():
        if not options.all and workload.name not in options.workloads:
            continue
        start = time.perf_counter()
        rows.append(run_workload(workload, options.repeat, options.unmatched, options.dump_hlo))
        print(f"  {workload.name}: done in {time.perf_counter() - start:.1f} s", file=sys.stderr,
              flush=True)
    info = run_info(options.repeat, options.unmatched)
    print_text(rows, info)
    if options.all:
        for path in write_report(REPORT_DIR, rows, info):
            print(f"wrote {path.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
