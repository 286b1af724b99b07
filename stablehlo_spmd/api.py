"""The one-call Python API: text in, text out, typed errors.

These functions wrap the pass pipeline for users who never touch MLIR
objects.  Errors come out as the same `SpmdError` subclasses (with the same
located message) that the command-line tools print; warnings a pass reports
come out as `SpmdWarning`s through Python's `warnings` module.
"""

from __future__ import annotations

import os
import time
import warnings
from typing import Any, Iterable

from stablehlo_spmd import diagnostics
from stablehlo_spmd.diagnostics import DiagnosticEngine, SpmdWarning
from stablehlo_spmd.errors import SpmdError
from stablehlo_spmd.hlo_sharding import HloSharding, format_hlo_sharding, parse_hlo_sharding
from stablehlo_spmd.ir import make_context, parse_module, print_module
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.passes.annotate import AnnotatePass
from stablehlo_spmd.passes.auto_shard import AutoShardPass, auto_shard_module
from stablehlo_spmd.passes.partition import CLEANUP_PASSES, PartitionPass
from stablehlo_spmd.passes.propagate import PropagatePass
from stablehlo_spmd.pipeline import Pipeline, parse_pipeline, run_pipeline
from stablehlo_spmd.rules import RuleSet, load_rules, rules_from_python
from stablehlo_spmd.sharding import Sharding


def parse_sharding(text: str) -> HloSharding:
    """Parse ``mhlo.sharding`` text (the whole HloSharding grammar)."""
    return parse_hlo_sharding(text)


def format_sharding(sharding: HloSharding | Sharding) -> str:
    """Canonical ``mhlo.sharding`` text, byte for byte as XLA prints it."""
    if isinstance(sharding, Sharding):
        sharding = sharding.to_hlo()
    return format_hlo_sharding(sharding)


def as_mesh(mesh: Any) -> Mesh:
    if isinstance(mesh, Mesh):
        return mesh
    if isinstance(mesh, str):
        return Mesh.from_string(mesh)
    if hasattr(mesh, "devices") and hasattr(mesh, "axis_names"):
        return Mesh.from_jax(mesh)
    raise TypeError(f"expected a Mesh, a mesh string or a jax.sharding.Mesh, got {mesh!r}")


def as_rule_set(rules: Any, mesh: Mesh | None) -> RuleSet:
    if isinstance(rules, (str, os.PathLike)):
        rule_set = load_rules(rules)
        return rule_set if mesh is None else RuleSet(rule_set.rules, mesh)
    return rules_from_python(rules, mesh)


def run_passes(text: str, pipeline: Pipeline | str, filename: str = "<input>") -> str:
    """Parse `text`, run `pipeline`, return the printed module.

    Unlike the CLI (which follows mlir-opt and prints locations only when
    asked), the text keeps its locations: they carry the pytree names of the
    arguments and the source positions later diagnostics point at, and text
    handed from one API call to the next should lose neither.
    """
    if isinstance(pipeline, str):
        pipeline = parse_pipeline(pipeline)
    engine = DiagnosticEngine()
    with make_context() as context, diagnostics.collecting(engine):
        module = parse_module(text, filename, context)
        ok = run_pipeline(module, pipeline)
        _surface(engine)
        if not ok:
            raise SpmdError("pass pipeline failed")
        return print_module(module, debug_info=True)


def annotate(text: str, mesh: Any = None, rules: Iterable[Any] | str | RuleSet = (),
             filename: str = "<input>") -> str:
    """Attach ``mhlo.sharding`` to `text`'s arguments and results from `rules`.

    `rules` is a list of ``(regex, spec)`` pairs, a `RuleSet`, or a rules-file
    path; `mesh` (a `Mesh`, ``"data=4,model=2"`` or a `jax.sharding.Mesh`)
    may be omitted when the rules file has one.
    """
    rule_set = as_rule_set(rules, as_mesh(mesh) if mesh is not None else None)
    return run_passes(text, Pipeline((AnnotatePass(rules=rule_set),)), filename)


def propagate(text: str, filename: str = "<input>", engine: str = "spmd",
              completion: str = "whole-program") -> str:
    """Complete the shardings of an annotated module (GSPMD's sharding completion).

    `completion` "whole-program" settles the choices the greedy pass
    contests by the whole program's cost; "local" keeps the greedy pass's
    answer (see `passes.propagate`).
    """
    return run_passes(text, Pipeline((PropagatePass(engine=engine, completion=completion),)),
                      filename)


def partition(text: str, mesh: Any = None, rules: Iterable[Any] | str | RuleSet = (),
              filename: str = "<input>", completion: str = "whole-program") -> str:
    """annotate -> propagate -> partition: per-device StableHLO text.

    The result is in the form `jax.shard_map` lowers to (global signature,
    ``sdy.manual_computation`` body), ready for `stablehlo_spmd.run`.
    `completion` is propagation's (`propagate`).
    """
    rule_set = as_rule_set(rules, as_mesh(mesh) if mesh is not None else None)
    pipeline = Pipeline((AnnotatePass(rules=rule_set), PropagatePass(completion=completion),
                         PartitionPass(), *CLEANUP_PASSES))
    return run_passes(text, pipeline, filename)


def auto_shard(text: str, mesh: Any, memory_budget: int | float | str | None = None,
               rules: Iterable[Any] | str | RuleSet = (), bandwidth: str | dict | None = None,
               latency: float = 0.0, time_limit: float = 60.0,
               measure_memory: bool | None = None, target: str | None = None,
               hardware: str = "", flops: float = 0.0, filename: str = "<input>") -> str:
    """Choose every value's sharding over `mesh` within `memory_budget` bytes per device.

    `memory_budget` is an int or a string like ``"2GiB"``; None means no
    limit.  `rules` (as for `annotate`) are hard constraints, as are the
    module's own annotations.  `bandwidth` (``{"data": 25e9}`` or
    ``"data=25e9,model=300e9"``, bytes per second per axis) makes the search
    minimize seconds instead of bytes; so does `hardware`, a named profile
    (``"h100"``, ``"tpu-v5p"``) whose links and peak FLOP/s (`flops`
    overrides it) price the collectives and the contractions' arithmetic.  The result is an annotated module:
    ``partition(auto_shard(...))`` partitions it with the mesh it names.

    With a budget, each plan is partitioned and compiled for jax's default
    backend, and XLA's own memory analysis decides whether it fits (the
    search's estimate steers it; see `passes.auto_shard._fit_measured`).
    `measure_memory` None does so where this process has the mesh's
    devices and a compile is predicted to take at most a quarter of
    `time_limit`; elsewhere (a full-depth model compiles for longer than it
    is searched) the estimate decides, kept 3% under the budget, with a
    warning where the devices are missing.  True measures whatever a
    compile costs, within `time_limit`; False keeps to the estimate.  `target` (``"cpu"``, ``"gpu"``, ``"tpu"``) is the backend the
    estimate counts memory for (XLA's CPU backend computes bf16 in f32);
    None: the one this process compiles the mesh's programs on.

    Raises `SpmdError` when no plan fits the budget, naming the smallest one
    that does, or when the search finds none within `time_limit` seconds
    (counted from reading the program, measuring included: the whole call).
    """
    started = time.perf_counter()
    mesh = as_mesh(mesh)
    rule_set = as_rule_set(rules, mesh)
    if isinstance(bandwidth, dict):
        bandwidth = ",".join(f"{axis}={speed}" for axis, speed in bandwidth.items())
    budget = "" if memory_budget is None else str(memory_budget)
    options = AutoShardPass(memory_budget=budget, bandwidth=bandwidth or "", latency=latency,
                            time_limit=time_limit, hardware=hardware, flops=flops,
                            target=default_target(mesh) if target is None else target)
    check = None if measure_memory is False else memory_check(bool(measure_memory))
    engine = DiagnosticEngine()
    with make_context() as context, diagnostics.collecting(engine):
        module = parse_module(text, filename, context)
        ok = run_pipeline(module, Pipeline((AnnotatePass(rules=rule_set),)))
        ok = ok and auto_shard_module(module.operation, options, check,
                                      measure_always=bool(measure_memory),
                                      started=started) is not None
        _surface(engine)
        if not ok:
            raise SpmdError("pass pipeline failed")
        return print_module(module, debug_info=True)


def default_target(mesh: Mesh | None) -> str:
    """The backend `mesh`'s programs compile on in this process (jax's
    default backend where the mesh is not known yet): what the search
    counts memory for unless told another."""
    from stablehlo_spmd import runtime

    if mesh is None:
        import jax

        return jax.default_backend()
    return runtime.compile_platform(mesh.size)


def memory_check(required: bool = False):
    """For `auto_shard_module`: given a plan's mesh, a function that
    partitions an annotated module, compiles it for jax's default backend
    and returns XLA's memory analysis of it (bytes per device); None where
    this process lacks the mesh's devices, unless `required`, in which case
    measuring fails with the runtime's error."""
    from stablehlo_spmd import runtime

    def measure(annotated: str) -> float:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # the search's own trial plans, not the user's
            return float(runtime.memory_per_device(partition(annotated)))

    def check(mesh: Mesh):
        return measure if required or runtime.has_devices(mesh.size) else None

    return check


def spmd_jit(fn, mesh: Any, rules: Iterable[Any] | str | RuleSet):
    """Like `jax.jit` with shardings from rules: export, partition and compile
    once per input signature (shapes, dtypes, pytree structure), then run.

    Takes and returns pytrees; the outputs are global `jax.Array`s.
    """
    import jax

    from stablehlo_spmd import runtime
    from stablehlo_spmd.frontends.jax import export

    compiled: dict = {}

    def call(*args):
        leaves, tree = jax.tree_util.tree_flatten(args)
        key = (tree, tuple((tuple(getattr(x, "shape", ())), str(getattr(x, "dtype", type(x))))
                           for x in leaves))
        entry = compiled.get(key)
        if entry is None:
            out_tree = jax.tree_util.tree_structure(jax.eval_shape(fn, *args))
            text = partition(export(fn, *args), mesh, rules, filename=getattr(fn, "__name__", "fn"))
            entry = compiled[key] = (runtime.compile(text), out_tree)
        executable, out_tree = entry
        return jax.tree_util.tree_unflatten(out_tree, executable(*leaves))

    call.cache = compiled
    return call


def _surface(engine: DiagnosticEngine) -> None:
    for diagnostic in engine.diagnostics:
        if diagnostic.severity == "warning":
            warnings.warn(str(diagnostic), SpmdWarning, stacklevel=3)
    engine.raise_if_errors()
