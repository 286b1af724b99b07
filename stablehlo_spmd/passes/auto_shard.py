"""``spmd-auto-shard``: choose every value's sharding from a mesh and a memory budget.

The pass inlines the module's calls as XLA does (``spmd-inline-calls``: the
search prices the program XLA compiles, a layer's jitted silu once per
layer), reads it into the propagation graph (`ModuleGraph`, the
one ``spmd-propagate`` builds), hands it to the search (`auto_sharding/`),
and writes the plan back the way ``spmd-propagate`` writes its answer: an
``mhlo.sharding`` on every op and function argument and result, and a
marked reshard where a Partial value meets a consumer that needs its sum.
The output is an ordinary annotated module: ``spmd-propagate`` keeps every
sharding in it and ``spmd-partition`` takes it unchanged.

Annotations already in the module (from ``spmd-annotate``'s rules,
``mhlo.sharding`` or ``sdy.sharding``) are hard constraints; open dims
(``{?}``) may still be split.  The updated parameters of a training step
come out in the layout chosen for the parameters, since one step's outputs
are the next step's inputs: a result is the next value of an argument when
jax says so (``tf.aliasing_output``), or when its pytree path after the
leading index is the argument's after its leading key, with the same type
(``result[0]['w']`` and ``params['w']``; ``result[i]`` preferring the i-th
argument).  Gradients and optimizer state then follow their parameters
through the update's element-wise ops.

The estimate of peak memory is the search's; XLA's memory analysis of the
compiled plan is the truth.  A pass cannot compile, so `auto_shard_module`
takes a `memory_check` from the layer above (`api.memory_check`, used by
``ss.auto_shard`` and the ``auto-shard`` command) and, with a budget, checks
each plan by it and searches again where the estimate was wrong
(`_fit_measured`).  The textual pass uses the estimate alone.

Measuring is bounded by the search's time limit like the rest of it: a
plan is compiled only where that is predicted to end in the time left
(`_CompileClock`), and by default only where a compile costs at most
`MEASURE_SHARE` of the limit.  A full-depth step takes longer to compile
than to search (Llama-3-8B's, 20 to 30 s on 64 host devices, against a
search of 4 to 7 s), and there the estimate is within a few percent of
XLA's analysis; so where the caller wanted XLA's word but gets the
estimate's, the search keeps `ESTIMATE_MARGIN` under the budget, and the
plan's memory is reported as estimated.  ``measure_always`` (``ss.auto_shard(
measure_memory=True)``) compiles whatever it costs, within the time limit.

Options:
  mesh           axis sizes, ``data=4,model=2`` (else the module's mesh)
  memory-budget  bytes per device: ``2GiB``, ``512MB``, ``1000000`` (empty: no limit)
  bandwidth      bytes per second per axis, ``data=25e9,model=300e9``: the
                 search then minimizes seconds (alpha-beta) instead of bytes
  latency        seconds per collective, with `bandwidth`
  hardware       a named profile (``h100``, ``tpu-v5p``: `auto_sharding.hardware`):
                 each axis's link by where its devices sit, and the chip's peak,
                 so that the search minimizes seconds, contractions' arithmetic
                 included; `bandwidth` and `latency` override its axes
  flops          FLOP/s per device (the profile's peak by default), with seconds
  explain        a remark per op: its sharding and why the search chose it
  time-limit     seconds the search may take, reading the program and building
                 its 0-1 program included (a limit reached is warned of)
  target         the backend the plan compiles for, as its memory goes: ``cpu``
                 (XLA's CPU backend computes bf16 and f16 in f32, so their
                 temporaries take f32's bytes), ``gpu`` or ``tpu`` (each type at
                 its width; also the default here).  ``ss.auto_shard`` and the
                 ``auto-shard`` command default to jax's default backend.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import re
import time
from typing import Callable, ClassVar

from jaxlib.mlir import ir

from stablehlo_spmd import diagnostics
from stablehlo_spmd.auto_sharding import (
    CostModel, InfeasibleBudget, Plan, Search, SearchTimeLimit, format_bytes)
from stablehlo_spmd.auto_sharding.hardware import Hardware, profile
from stablehlo_spmd.errors import ShardingError, SpmdError
from stablehlo_spmd.ir import cached_attr
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.module_shardings import (
    FACTOR_AXES, checked_mesh, import_shardy, untuple_custom_calls)
from stablehlo_spmd.passes import ModulePass, register_pass
from stablehlo_spmd.passes.inline_calls import inline_calls
from stablehlo_spmd.passes.propagate import ModuleGraph
from stablehlo_spmd.passes.rematerialize import rematerialize
from stablehlo_spmd.op_graph import NO_VALUE
from stablehlo_spmd.propagation import ValueState

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str | int | float | None) -> float | None:
    """``"2GiB"``, ``"512MB"``, ``1e9`` or ``None`` as bytes (None: no limit)."""
    if text is None or text == "":
        return None
    if isinstance(text, (int, float)):
        if text <= 0:
            raise ValueError(f"a memory budget must be positive, got {text}")
        return float(text)
    found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if not found or found.group(2).lower() not in _UNITS:
        raise ValueError(f"cannot read the memory budget {text!r} (expected e.g. 2GiB, "
                         "512MB or a number of bytes)")
    size = float(found.group(1)) * _UNITS[found.group(2).lower()]
    if size <= 0:
        raise ValueError(f"a memory budget must be positive, got {text!r}")
    return size


# How each backend's compiled programs hold memory (`CostModel`): XLA's CPU
# backend computes 16-bit floats in f32; GPUs and TPUs compute bf16 natively.
_TARGETS = {"": {}, "gpu": {}, "cuda": {}, "rocm": {}, "tpu": {},
            "cpu": {"float_compute_bytes": 4, "windowed_reduction_above": 32}}


def target_cost_model(target: str, bandwidths=(), latency: float = 0.0,
                      hardware: Hardware | None = None, mesh: Mesh | None = None,
                      flops: float = 0.0) -> CostModel:
    """The cost model for plans compiled by the backend named `target`: bytes,
    or seconds where `bandwidths` or a `hardware` profile (laid over `mesh`)
    give the links' speeds.  `bandwidths`, `latency` and `flops` (FLOP/s per
    device) override the profile's figures: an axis's bandwidth, every
    axis's latency, the peak."""
    found = _TARGETS.get(target.strip().lower())
    if found is None:
        raise ValueError(f"unknown target {target!r} (expected cpu, gpu or tpu)")
    if hardware is None:
        return CostModel(bandwidths, latency, flops_per_second=flops, **found)
    if flops:
        hardware = hardware.override(flops=flops)
    model = hardware.cost_model(mesh, **found)
    speeds = dict(model.bandwidths) | dict(bandwidths)
    latencies = {axis: latency for axis in speeds} if latency else dict(model.latencies)
    return dataclasses.replace(model, bandwidths=tuple(speeds.items()),
                               latencies=tuple(latencies.items()))


def parse_bandwidths(text: str) -> tuple[tuple[str, float], ...]:
    """``data=25e9,model=300e9`` as ((axis, bytes per second), ...)."""
    if not text:
        return ()
    pairs = []
    for item in text.split(","):
        name, _, value = item.partition("=")
        try:
            speed = float(value)
        except ValueError:
            speed = -1.0
        if not name.strip() or speed <= 0:
            raise ValueError(f"cannot read the bandwidth {item!r} (expected axis=bytes_per_second)")
        pairs.append((name.strip(), speed))
    return tuple(pairs)


@dataclasses.dataclass
class AutoShardResult:
    """What one run of the search chose, for the CLI's table and `explain`."""

    plan: Plan
    mesh: Mesh
    memory_budget: float | None
    rows: list[tuple[str, str, str, float, str]]  # (kind, name, sharding, bytes, why)
    # How far under the budget the estimate kept the plan, where XLA's analysis
    # was wanted but not run (`ESTIMATE_MARGIN`); 0 otherwise.
    margin: float = 0.0


@register_pass
@dataclasses.dataclass(frozen=True)
class AutoShardPass(ModulePass):
    name: ClassVar[str] = "spmd-auto-shard"
    description: ClassVar[str] = ("choose every value's sharding from a mesh and a memory "
                                  "budget (an ILP over the op-rule table's strategies)")

    mesh: str = ""
    memory_budget: str = ""
    bandwidth: str = ""
    latency: float = 0.0
    explain: bool = False
    time_limit: float = 60.0
    target: str = ""
    hardware: str = ""
    flops: float = 0.0

    def run(self, module: ir.Operation) -> None:
        auto_shard_module(module, self)


MemoryCheck = Callable[[Mesh], "Callable[[str], float] | None"]

# Where the caller wanted XLA's memory analysis of the plan but measuring
# costs more than the time limit allows, the estimate decides, this far under
# the budget: its error at full depth, where compiling takes longest (0.99x
# to 1.03x of XLA's analysis on Llama-3-8B's and Mixtral's steps, 64 and 256
# devices: benchmarks/results/auto_scale.md).
ESTIMATE_MARGIN = 0.03
# By default a plan is measured only where a compile is predicted to take at
# most this share of the time limit.
MEASURE_SHARE = 0.25
# Seconds to partition and compile one op of the program for XLA's memory
# analysis, before any was timed: 1.8 ms on a 4-layer Llama-3-8B step over 64
# host devices (2,246 ops, 4.1 s), 3.4 ms with its layers rematerialized
# (3,095 ops, 10.4 s), on this project's 2-core machine.
COMPILE_SECONDS_PER_OP = 3e-3
# What writing the plan into the module, and printing it, takes per op, kept
# out of the time limit's end: Llama-3-70B's full-depth step (48k ops), 1.4 s
# after its search, on the same machine.
WRITE_SECONDS_PER_OP = 6e-5


def auto_shard_module(module: ir.Operation, options: AutoShardPass,
                      memory_check: MemoryCheck | None = None,
                      measure_always: bool = False,
                      started: float | None = None) -> AutoShardResult | None:
    """Run the search on `module` and write its plan; None after reporting an error.

    `memory_check`, where given, is how the layer above (`api.memory_check`)
    reaches XLA's own memory analysis, which a pass cannot: for the plan's
    mesh, a function from an annotated module's text to the bytes per
    device its compiled partitioned program holds, or None where it cannot
    compile here (then the estimate stands, with a warning).  With a
    budget, plans are checked by it and searched again where the estimate
    was wrong (`_fit_measured`), where measuring fits the time limit (by
    default, where it costs at most `MEASURE_SHARE` of it; `measure_always`:
    whatever it costs).  The time limit counts from `started` (a
    `time.perf_counter()` reading: where the caller's call began, its
    parsing included), else from now, and ends early enough to write the
    plan (`WRITE_SECONDS_PER_OP`).
    """
    with _cyclic_collector_paused():
        return _search_and_write(module, options, memory_check, measure_always,
                                 time.perf_counter() if started is None else started)


@contextlib.contextmanager
def _cyclic_collector_paused():
    """Python's cyclic garbage collector off for the search, as it was after.

    Building the search allocates millions of small objects (layouts,
    strategies, cost tuples), nearly all freed by reference counting, and
    each of the collector's full passes walks every object still alive:
    Llama-3-70B's AdamW step on 1024 devices was read, built and refused
    in 6.9 s with it, 5.0 s without, at the same peak memory (566 MiB;
    the 0.9M objects in cycles it leaves are freed at the next collection
    after the search).  In a process holding more (auto_scale.py, after
    compiling the hand plans) each pass walks more, and the same search
    took 8.8 s."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _search_and_write(module: ir.Operation, options: AutoShardPass,
                      memory_check: MemoryCheck | None, measure_always: bool,
                      started: float) -> AutoShardResult | None:
    # The limit is the whole call's, not its solver's: on Mixtral-8x7B's
    # full-depth step, reading the program and building the 0-1 program
    # take 4 s before the solver starts.
    deadline = started + options.time_limit
    try:
        budget = parse_bytes(options.memory_budget)
        hardware = profile(options.hardware) if options.hardware else None
        bandwidths = parse_bandwidths(options.bandwidth)
        target_cost_model(options.target)   # a target it does not know is refused here
        mesh = Mesh.from_string(options.mesh) if options.mesh else None
    except (ValueError, ShardingError) as error:
        diagnostics.error(module.location, f"spmd-auto-shard: {error}")
        return None
    # The program XLA compiles has its calls inlined: so is the one searched.
    inline_calls(module)
    pristine = module.get_asm(enable_debug_info=True) if memory_check and budget else None
    found = _read(module, mesh)
    if found is None:
        return None
    graph, mesh = found
    deadline -= WRITE_SECONDS_PER_OP * len(graph.nodes)
    entry = graph.entry_name()
    where = graph.functions[entry].location
    cost_model = target_cost_model(options.target, bandwidths, options.latency, hardware, mesh,
                                   options.flops)
    measure = memory_check(mesh) if pristine is not None else None
    clock = _CompileClock(len(graph.nodes))
    margin = 0.0
    if pristine is not None and measure is None:
        diagnostics.warning(where, "spmd-auto-shard: the plan's memory is the search's estimate "
                            f"only: this process cannot compile for the mesh's {mesh.size} "
                            "devices to measure it")
        margin = ESTIMATE_MARGIN
    elif measure is not None and not measure_always and \
            clock.predicted() > MEASURE_SHARE * options.time_limit:
        measure, margin = None, ESTIMATE_MARGIN
    searcher = Search(graph.search_graph(carried_pairs(*graph.entry_values())), cost_model)
    try:
        if measure is None:
            limit = None if budget is None else budget * (1 - margin)
            plan = searcher.solve(limit, max(1e-9, deadline - time.perf_counter()))
        else:
            plan = _fit_measured(searcher, budget, deadline, clock.timed(
                lambda p: measure(_planned_text(pristine, module.context, mesh, p))))
    except (InfeasibleBudget, SearchTimeLimit) as error:
        kept = (f" (where XLA's analysis is not run, the search keeps {ESTIMATE_MARGIN:.0%} "
                f"under the budget of {format_bytes(budget)}, its estimate's error)"
                if margin and isinstance(error, InfeasibleBudget) else "")
        if isinstance(error, SearchTimeLimit):
            kept = f" (the time limit: {options.time_limit:g} s, from reading the program)"
        diagnostics.error(where, f"spmd-auto-shard: {error}{kept}")
        return None
    except SpmdError as error:   # from compiling a plan to measure it
        diagnostics.error(where, f"spmd-auto-shard: cannot measure a plan's memory: {error}")
        return None
    if measure is not None and plan.measured_memory is None:
        diagnostics.warning(where, "spmd-auto-shard: the time limit left no time to compile "
                            "the plan and measure its memory; it fits the budget by the "
                            f"search's estimate, with {ESTIMATE_MARGIN:.0%} to spare")
        margin = ESTIMATE_MARGIN
    if plan.time_limited:
        diagnostics.warning(where, f"spmd-auto-shard: the search's time limit of "
                            f"{options.time_limit:g} s ended the search before it proved its "
                            "plan the cheapest; another run may find another (raise time-limit)")
    _write_plan(module, graph, mesh, plan)
    rematerialize(graph, plan.recomputations)
    if options.explain:
        solver = graph.solver
        for node, op in zip(graph.nodes, graph.node_ops):
            if node.is_tie or op is None or not node.results or node.results[0] == NO_VALUE:
                continue
            value = node.results[0]
            diagnostics.remark(op.location, f"{solver.sharding(value)}: {plan.why[value]}")
    return AutoShardResult(plan, mesh, budget, _rows(graph, plan, entry), margin)


def _read(module: ir.Operation, mesh: Mesh | None) -> tuple[ModuleGraph, Mesh] | None:
    """The module's propagation graph and its mesh (`mesh`, else the
    module's own); None after reporting why there is none."""
    try:
        import_shardy(module, lower_manual=True)
        untuple_custom_calls(module)
        mesh = checked_mesh(module, mesh)
    except ShardingError as error:
        diagnostics.error(error.location or module.location, error.message)
        return None
    if mesh is None:
        diagnostics.error(module.location, "spmd-auto-shard needs a mesh: give the pass "
                          "mesh=data=4,model=2 (or --mesh), or annotate the module first")
        return None
    graph = ModuleGraph.build(module, mesh)
    return None if graph is None else (graph, mesh)


def _write_plan(module: ir.Operation, graph: ModuleGraph, mesh: Mesh, plan: Plan) -> None:
    solver = graph.solver
    for value, layout in enumerate(plan.layouts):
        if layout is None:
            continue
        state = solver.states[value]
        solver.states[value] = ValueState(list(layout.dim_axes), layout.unreduced,
                                          layout.reduction, state.closed_dims, state.pinned,
                                          state.reserved)
    graph.sum_targets = plan.sum_targets
    graph.write(module, mesh, False, False)
    for value, index in graph.ids.items():
        axes = plan.factor_axes.get(index)
        if axes is not None and isinstance(value, ir.OpResult):
            value.owner.attributes[FACTOR_AXES] = cached_attr(_factor_axes_text(axes))


def _factor_axes_text(axes: tuple[tuple[str, ...], ...]) -> str:
    """`module_shardings.FACTOR_AXES`'s value: [["model"], [], ["data"]]."""
    return "[" + ", ".join("[" + ", ".join(f'"{axis}"' for axis in factor) + "]"
                           for factor in axes) + "]"


def _planned_text(pristine: str, context: ir.Context, mesh: Mesh, plan: Plan) -> str:
    """`plan` written into a fresh copy of the module, as text.  The copy is
    read the way the module was, so its value numbers are the plan's."""
    copy = ir.Module.parse(pristine, context).operation
    graph, _ = _read(copy, mesh)
    _write_plan(copy, graph, mesh, plan)
    rematerialize(graph, plan.recomputations)
    return copy.get_asm(enable_debug_info=True)


class _CompileClock:
    """How long compiling the program to measure a plan takes: predicted from
    its size before any compile, then from the last one timed.  `timed`
    wraps a measure so that it refuses, rather than starts, a compile the
    time left cannot hold (`_fit_measured` then keeps what it has)."""

    def __init__(self, ops: int):
        self.ops = ops
        self.seconds_per_op = COMPILE_SECONDS_PER_OP

    def predicted(self) -> float:
        return self.ops * self.seconds_per_op

    def timed(self, measure: Callable[[Plan], float]) -> Callable[[Plan, float], float | None]:
        def run(plan: Plan, deadline: float) -> float | None:
            started = time.perf_counter()
            if started + self.predicted() > deadline:
                return None
            memory = measure(plan)
            self.seconds_per_op = (time.perf_counter() - started) / max(1, self.ops)
            return memory
        return run


# How far under the budget a measured plan may fall before a larger estimate
# is tried, and how many plans one search may measure.
MEASURED_SLACK = 0.1
MEASURED_PLANS = 4
# How far the estimate may be off XLA's analysis: the cheapest plan of any
# size is measured first when its estimate is within this of the budget.
ESTIMATE_ERROR = 0.25
# The least time a gamble on a larger plan gets: a small problem's plan is
# found in milliseconds, and a busy machine must not lose the gamble for it.
GAMBLE_SECONDS = 1.0


def _fit_measured(searcher: Search, budget: float, deadline: float,
                  measure: Callable[[Plan, float], float | None]) -> Plan:
    """The cheapest plan that fits `budget` by XLA's own memory analysis.

    The search's liveness estimate is a model of XLA's buffer assignment
    (which fuses, schedules and combines collectives as it sees fit), and it
    can be off by several percent either way.  So plans are measured:

    - first the cheapest plan of any size, when its estimate is within
      `ESTIMATE_ERROR` of the budget: if it fits, nothing can beat it;
    - then the cheapest plan under the budget, and again under the budget
      scaled by how far the last measurement was from the budget: a plan that
      overflowed is searched again below its own estimate, and a plan that
      left more than `MEASURED_SLACK` unused, where a larger plan would move
      less, once above the estimate it was searched under (never as high as an
      estimate that overflowed before); once one plan fitted and another
      overflowed, at the estimate between them where the budget would be
      measured (`_bracketed_limit`).  Opening the search is a gamble on a
      cheaper plan, given as long as the plan that fitted took to find (at
      least `GAMBLE_SECONDS`): if its plan overflows, or none is found in
      that time, the plan that fitted stands.

    The search's problem is built once and reused, and the loop keeps within
    `deadline` (the end of the call's time limit, which the pass's errors name) and
    `MEASURED_PLANS` plans measured; `measure(plan, deadline)` returns None
    for a compile that would not end by then.  Without a plan that fits,
    the plan of least estimated memory is measured too, and the error names
    the least memory measured: a budget some plan fits.  Where the time
    runs out before any plan measured fits, a plan the estimate puts
    `ESTIMATE_MARGIN` under the budget stands, its memory the estimate's.
    """
    best: Plan | None = None
    smallest = math.inf
    seen: list[Plan] = []    # each plan measured, with its measurement
    overflowed = math.inf    # the least estimate of a plan that overflowed
    count = 0

    def measured(plan: Plan) -> Plan | None:
        nonlocal best, smallest, count, overflowed
        memory = measure(plan, deadline)
        if memory is None:
            return None
        count += 1
        plan = dataclasses.replace(plan, measured_memory=memory, measured_plans=count)
        smallest = min(smallest, plan.measured_memory)
        seen.append(plan)
        if plan.measured_memory <= budget:
            if best is None or plan.cost < best.cost:
                best = plan
        else:
            overflowed = min(overflowed, plan.peak_memory)
        return plan

    def unmeasured(plan: Plan | None) -> bool:
        return plan is not None and all(plan.layouts != p.layouts for p in seen)

    estimated: list[Plan] = []   # plans the estimate alone would trust, cheapest first

    def found(plan: Plan | None) -> Plan | None:
        if plan is not None and plan.peak_memory <= budget * (1 - ESTIMATE_MARGIN):
            estimated.append(plan)
            estimated.sort(key=lambda p: p.cost)
        return plan

    free = found(searcher.solve(None, max(1e-9, deadline - time.perf_counter())))
    out_of_time = False
    loosened = False
    if free.peak_memory <= budget * (1 + ESTIMATE_ERROR):
        plan, limit = free, math.inf     # if it fits, nothing can beat it
    else:
        limit = budget
        try:
            plan = found(searcher.solve(limit, max(1e-9, deadline - time.perf_counter())))
        except InfeasibleBudget:
            plan = searcher.least_memory(max(1e-9, deadline - time.perf_counter()))
        except SearchTimeLimit:
            plan, out_of_time = None, True
    for _attempt in range(MEASURED_PLANS):
        if not unmeasured(plan):
            break   # no new plan under the new limit
        # A gamble cut short by its time, or the same cost in other layouts
        # (the solver's rounding), cannot beat the plan that fits.
        if best is not None and plan.cost >= best.cost * (1 - 1e-9):
            break
        plan = measured(plan)
        if plan is None:
            out_of_time = True   # no time left to compile it
            break
        fits = plan.measured_memory <= budget
        if fits and (plan.measured_memory >= (1 - MEASURED_SLACK) * budget
                     or plan.cost <= free.cost * (1 + 1e-6) or loosened):
            break   # near the budget, as cheap as any plan of any size, or opened once
        if not fits and best is not None:
            break   # the opened search overflowed: the plan that fitted stands
        loosened = loosened or fits
        # An overflowing plan is excluded below its own estimate; one with
        # room to spare opens the search above the limit it was found under.
        scale = budget / plan.measured_memory
        limit = limit * scale if fits else plan.peak_memory * scale
        between = _bracketed_limit(seen, budget)
        if between is not None:
            limit = between
        elif limit >= overflowed:
            limit = (max(plan.peak_memory, limit / scale) + overflowed) / 2
        remaining = deadline - time.perf_counter()
        out_of_time = remaining <= 0
        if out_of_time or abs(limit - plan.peak_memory) < 1e-3 * budget:
            break
        # Opening the search is a gamble on a cheaper plan: it may take as
        # long as finding the plan that fits took (or `GAMBLE_SECONDS`), and
        # no longer.
        patience = min(remaining, max(plan.solve_seconds, GAMBLE_SECONDS)) if fits \
            else remaining
        try:
            plan = found(searcher.solve(limit, patience))
        except InfeasibleBudget:
            break
        except SearchTimeLimit:
            out_of_time = True
            break
    remaining = deadline - time.perf_counter()
    out_of_time = out_of_time or remaining <= 0
    if best is None and not out_of_time:
        least = searcher.least_memory(remaining)
        if unmeasured(least) and measured(least) is None:
            out_of_time = True
    if best is None and out_of_time and estimated:
        return dataclasses.replace(estimated[0], measured_plans=count)
    if best is None and out_of_time:
        raise SearchTimeLimit(
            f"no plan found within the time limit fits a memory budget of "
            f"{format_bytes(budget)} per device by XLA's memory analysis ("
            + (f"the least measured was {format_bytes(smallest)}" if count else
               "none could be compiled to measure it in that time")
            + "); give the search more time (time-limit)")
    if best is None:
        raise InfeasibleBudget(
            f"no plan fits a memory budget of {format_bytes(budget)} per device by XLA's "
            f"memory analysis; the smallest budget found feasible is {format_bytes(smallest)} "
            f"({int(smallest)} bytes)", smallest)
    return dataclasses.replace(best, measured_plans=count)


def _bracketed_limit(seen: list[Plan], budget: float) -> float | None:
    """The estimate at which a plan would measure `budget`, on the line
    through the largest plan measured to fit and the smallest measured to
    overflow (regula falsi); None without such a pair.

    The estimate's error is a plan's own (which buffers XLA keeps, as it
    fuses and schedules them), so it differs from plan to plan: on
    Mixtral's forward at 1.09 MiB one plan measured 13% over its estimate
    and the next 3% over.  Scaling by the last plan's error alone opened the
    search to 1.13 MiB, where the plans would measure about 13% over too;
    the line opened it to 1.06 MiB, where the gamble found a plan 5%
    cheaper, that fits, in its time."""
    fitted = [p for p in seen if p.measured_memory <= budget]
    overflowed = [p for p in seen if p.measured_memory > budget]
    if not fitted or not overflowed:
        return None
    low = max(fitted, key=lambda p: p.peak_memory)
    high = min(overflowed, key=lambda p: p.peak_memory)
    if high.peak_memory <= low.peak_memory or high.measured_memory <= low.measured_memory:
        return None
    return low.peak_memory + (budget - low.measured_memory) * (
        (high.peak_memory - low.peak_memory) / (high.measured_memory - low.measured_memory))


_HEAD = re.compile(r"^([A-Za-z_][A-Za-z_0-9]*)((?:\[.*\])?)$")
_FIRST_INDEX = re.compile(r"^\[(\d+)\]")


def carried_pairs(arguments, results) -> list[tuple[int, int]]:
    """(argument value, result value) pairs where the result is the argument's
    next value: jax's ``tf.aliasing_output``, else matching pytree paths."""
    pairs = []
    taken_results: set[int] = set()
    for value, index in arguments:
        alias = value.get("tf.aliasing_output")
        if alias is not None:
            position = ir.IntegerAttr(alias).value
            for result, result_index in results:
                if result.index == position and str(result.type) == str(value.type):
                    pairs.append((index, result_index))
                    taken_results.add(result_index)
    groups: list[str] = []
    by_path: dict[str, list[tuple[int, int, str]]] = {}
    for value, index in arguments:
        head = _HEAD.match(value.name or "")
        if not head or not head.group(2):
            continue
        if head.group(1) not in groups:
            groups.append(head.group(1))
        by_path.setdefault(head.group(2), []).append(
            (groups.index(head.group(1)), index, str(value.type)))
    for result, result_index in results:
        if result_index in taken_results or not result.name:
            continue
        head = _HEAD.match(result.name)
        if not head:
            continue
        first = _FIRST_INDEX.match(head.group(2))
        if not first:
            continue
        path = head.group(2)[first.end():]
        candidates = [c for c in by_path.get(path, ()) if c[2] == str(result.type)]
        if len(candidates) > 1:
            candidates = [c for c in candidates if c[0] == int(first.group(1))]
        if len(candidates) == 1:
            pairs.append((candidates[0][1], result_index))
    return pairs


def _rows(graph: ModuleGraph, plan: Plan, entry: str):
    """The table's rows: every argument of the entry function, then the ten
    largest values computed inside it."""
    rows = []
    for value, index in graph.entry_values()[0]:
        layout = plan.layouts[index]
        rows.append(("argument", value.name or f"#{value.index}",
                     str(layout) if layout is not None else "?",
                     _bytes_of(graph, index), plan.why[index]))
    computed = [(_bytes_of(graph, v), v)
                for node in graph.nodes if not node.is_tie
                for v in node.results if v != NO_VALUE and plan.layouts[v] is not None]
    seen = set()
    for size, value in sorted(computed, key=lambda x: -x[0]):
        describe = graph.describe_fns[value]
        name = describe(value) if describe else f"value {value}"
        if name in seen:
            continue
        seen.add(name)
        rows.append(("activation", name, str(plan.layouts[value]), size, plan.why[value]))
        if len(seen) == 10:
            break
    return rows


def _bytes_of(graph: ModuleGraph, value: int) -> float:
    size = graph.element_bytes[value]
    for n in graph.shapes[value]:
        size *= n
    return float(size)


def format_table(result: AutoShardResult) -> str:
    """The CLI's summary: the plan's figures, then each row's sharding and why."""
    plan = result.plan
    if plan.cost_in_seconds:
        step = (f"  estimated step: {plan.cost:.3g} s ({plan.cost - plan.compute_seconds:.3g} s "
                f"of collectives moving {format_bytes(plan.moved_bytes)} per device, "
                f"{plan.compute_seconds:.3g} s of contractions)")
    else:
        step = f"  estimated collectives per step: {format_bytes(plan.cost)} per device"
    lines = [
        f"spmd-auto-shard: mesh {result.mesh.describe_axes()}, memory budget "
        f"{format_bytes(result.memory_budget)} per device",
        f"{step}; estimated peak memory: {format_bytes(plan.peak_memory)} per device",
        f"  search: {plan.build_seconds + plan.solve_seconds:.2f} s ({plan.variables} ILP "
        f"variables, {plan.constraints} constraints; {plan.units} decision units in "
        f"{plan.unit_classes} classes after clustering repeated layers)"]
    if plan.recomputations:
        policies = sorted({r.policy for r in plan.recomputations})
        extra = (f"{plan.recompute_cost:.3g} s" if plan.cost_in_seconds
                 else format_bytes(plan.recompute_cost))
        lines.append(f"  recomputes {len(plan.recomputations)} segments of the forward in the "
                     f"backward ({', '.join(policies)}), for {extra} more a step")
    if plan.time_limited:
        lines.append("  the search's time limit ended the search before it proved this plan "
                     "the cheapest")
    if plan.measured_memory is not None:
        lines.append(f"  memory by XLA's analysis of the compiled plan: "
                     f"{format_bytes(plan.measured_memory)} per device ({plan.measured_plans} "
                     f"plan{'s' if plan.measured_plans != 1 else ''} measured)")
    elif result.margin and result.memory_budget is not None:
        lines.append(f"  memory by the search's estimate, kept {result.margin:.0%} under the "
                     "budget (compiling the plan to measure it would take longer than the "
                     "time limit allows; --measure-memory insists)")
    lines.append("")
    width = min(60, max((len(name) for _, name, *_ in result.rows), default=10))
    shard_width = max((len(s) for _, _, s, *_ in result.rows), default=10)
    lines.append(f"  {'kind':<10} {'value':<{width}} {'sharding':<{shard_width}} {'size':>10}  why")
    for kind, name, sharding, size, why in result.rows:
        short = name if len(name) <= width else "..." + name[-(width - 3):]
        lines.append(f"  {kind:<10} {short:<{width}} {sharding:<{shard_width}} "
                     f"{format_bytes(size):>10}  {why}")
    return "\n".join(lines)
