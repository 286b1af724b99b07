"""spmd-auto-shard's plans against the hand-written ones, and its search time.

    pip install '.[bench]' && pip install --no-deps 'keras-hub==0.32.*'
    python3 benchmarks/auto_shard.py                 # everything; writes results/auto_shard.md/.png
    python3 benchmarks/auto_shard.py --only gpt2     # a quick look, no report
    python3 benchmarks/auto_shard.py --depths 1 4    # only the search time against depth

Plan quality.  The programs are benchmarks/real_models.py's (keras-hub
models, forward and training step).  Each program is partitioned under
every hand-written rule set real_models.py uses for its model (Megatron,
FSDP, 2-D, data parallel, spatial, expert; their own meshes), and each
plan is compiled and measured: collective bytes per device counted in the
compiled HLO by stablehlo_spmd/collective_bytes.py (the counter compare_xla.py
uses for both sides), and per-device memory by XLA's own memory analysis
(arguments + outputs + temporaries).  Two budgets are taken from them: the
largest and the smallest hand-plan memory.  At each, ``ss.auto_shard`` plans
the same program on a ``data=4,model=2`` mesh (which holds every 8-device
plan of one or two axes) with only the budget, and its plan is partitioned,
compiled, measured the same way, and run against the single-device program.
A plan passes when it matches one device, fits the budget by XLA's
analysis, and moves no more bytes than the best hand plan that fits the
same budget.

Search time.  ``ss.auto_shard`` on benchmarks/propagation_speed.py's
program (the demo's GPT-style training step, `stablehlo_spmd.demo_model`)
at several depths, up to 48 layers (about 19k ops), with the problem's size
after clustering repeated layers.

Printed, and with the whole run written to benchmarks/results/auto_shard.md
with a chart (auto_shard.png: bytes and memory of every plan per program).
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "jax"

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

from compare_xla import REPORT_DIR, ROOT, run_info  # noqa: E402  (sets XLA_FLAGS first)
from stablehlo_spmd.collective_bytes import collectives, fmt_bytes, total_bytes  # noqa: E402
from real_models import RULE_SETS, SEED, _arguments, _models, _programs  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

AUTO_MESH = "data=4,model=2"
RTOL = ATOL = 1e-4
REPORT = REPORT_DIR / "auto_shard.md"
CHART = REPORT_DIR / "auto_shard.png"


@dataclasses.dataclass
class Measured:
    plan: str                 # a rule set's name, or "auto @ <budget>"
    mesh: str
    bytes: float = float("nan")
    memory: int | None = None
    error: float = float("nan")
    seconds: float = 0.0      # the search, for auto plans
    estimate: float = 0.0     # the search's own bytes estimate
    failure: str = ""

    @property
    def ok(self) -> bool:
        return not self.failure and self.error <= ATOL + RTOL


@dataclasses.dataclass
class Program:
    name: str
    hands: list[Measured]
    autos: list[tuple[float, Measured]]    # (budget, plan)

    def verdicts(self) -> list[str]:
        lines = []
        for budget, auto in self.autos:
            fitting = [h for h in self.hands if h.ok and h.memory is not None
                       and h.memory <= budget]
            best = min(fitting, key=lambda h: h.bytes, default=None)
            fits = auto.memory is not None and auto.memory <= budget
            beats = best is None or auto.bytes <= best.bytes
            verdict = "PASS" if auto.ok and fits and beats else "FAIL"
            against = f"best hand plan {best.plan} {fmt_bytes(best.bytes)}" if best else \
                "no hand plan fits"
            lines.append(f"{verdict} {self.name} @ {fmt_bytes(budget)}: auto "
                         f"{fmt_bytes(auto.bytes)}, memory {fmt_bytes(auto.memory or 0)} "
                         f"({'fits' if fits else 'OVER'}), {against}; search "
                         f"{auto.seconds:.2f} s" + (f"; {auto.failure}" if auto.failure else ""))
        return lines


def _measure(label: str, mesh: str, partitioned: str, leaves, want) -> Measured:
    from stablehlo_spmd import runtime
    result = Measured(label, mesh)
    executable = runtime.compile(partitioned)
    got = executable(*leaves)
    result.error = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                       if np.asarray(a).size else 0.0 for a, b in zip(got, want))
    result.bytes = total_bytes(collectives(executable.compiled_text(), 8))
    # As the search's measured loop counts it: XLA's own fusion's buffers.
    result.memory = runtime.memory_per_device(partitioned)
    return result


def measure_program(model, keras_model, program: str) -> Program:
    import stablehlo_spmd as ss

    fn = _programs(keras_model)[program]
    args = _arguments(model, keras_model, program, SEED)
    text = ss.export(fn, *args)
    leaves = jax.tree_util.tree_leaves(args)
    want = ss.run_single_device(text, leaves)
    hands = []
    for rule_set, (mesh, make_rules, used_by) in RULE_SETS.items():
        if model.name not in used_by:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                partitioned = ss.partition(text, mesh, make_rules())
            hands.append(_measure(rule_set, mesh, partitioned, leaves, want))
        except Exception as error:  # noqa: BLE001 - reported, the run goes on
            hands.append(Measured(rule_set, mesh, failure=f"{type(error).__name__}: {error}"))
    memories = [h.memory for h in hands if h.ok and h.memory is not None]
    autos = []
    for budget in sorted({max(memories), min(memories)}, reverse=True) if memories else ():
        label = f"auto @ {fmt_bytes(budget)}"
        try:
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                planned = ss.auto_shard(text, AUTO_MESH, memory_budget=int(budget))
            seconds = time.perf_counter() - start
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                partitioned = ss.partition(planned)
            auto = _measure(label, AUTO_MESH, partitioned, leaves, want)
            auto.seconds = seconds
        except Exception as error:  # noqa: BLE001
            auto = Measured(label, AUTO_MESH, failure=f"{type(error).__name__}: "
                            f"{' '.join(str(error).split())[:300]}")
        autos.append((budget, auto))
    return Program(f"{model.name} {program}", hands, autos)


def search_times(depths) -> list[tuple[int, int, float, int, int]]:
    """(depth, ops, seconds, ILP variables, variable classes) of auto_shard on the demo step."""
    import stablehlo_spmd as ss
    from stablehlo_spmd import demo_model, diagnostics
    from stablehlo_spmd.ir import make_context, parse_module
    from stablehlo_spmd.passes.auto_shard import AutoShardPass, auto_shard_module

    rows = []
    for depth in depths:
        params, batch = demo_model.example_args(demo_model.Config(n_layers=depth))
        text = ss.export(demo_model.train_step, params, batch)
        engine = diagnostics.DiagnosticEngine()
        with make_context() as context, diagnostics.collecting(engine):
            module = parse_module(text, "<step>", context)
            ops = sum(1 for _ in _walk(module.operation))
            start = time.perf_counter()
            result = auto_shard_module(module.operation, AutoShardPass(mesh=AUTO_MESH))
            seconds = time.perf_counter() - start
        if result is None:
            raise SystemExit(f"auto-shard failed at depth {depth}: {engine.diagnostics}")
        rows.append((depth, ops, seconds, result.plan.variables, result.plan.unit_classes))
        print(f"  depth {depth}: {ops} ops, {seconds:.2f} s, {result.plan.variables} variables, "
              f"{result.plan.unit_classes} variable classes", file=sys.stderr, flush=True)
    return rows


def _walk(op):
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield inner
                yield from _walk(inner.operation)


def table(programs: list[Program]) -> list[str]:
    lines = ["| program | plan | mesh | bytes | memory | max err vs 1 device | search s |",
             "|---|---|---|---:|---:|---:|---:|"]
    for program in programs:
        for m in [*program.hands, *(a for _, a in program.autos)]:
            if m.failure:
                lines.append(f"| {program.name} | {m.plan} | {m.mesh} | FAILED: {m.failure} "
                             "| | | |")
                continue
            lines.append(f"| {program.name} | {m.plan} | {m.mesh} | {fmt_bytes(m.bytes)} | "
                         f"{fmt_bytes(m.memory or 0)} | {m.error:.1e} | "
                         f"{m.seconds:.2f} |" if m.seconds else
                         f"| {program.name} | {m.plan} | {m.mesh} | {fmt_bytes(m.bytes)} | "
                         f"{fmt_bytes(m.memory or 0)} | {m.error:.1e} | |")
    return lines


def chart(programs: list[Program], path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    columns = min(4, len(programs))
    rows = (len(programs) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.6 * rows), squeeze=False)
    for ax, program in zip(axes.flat, programs):
        plans = [m for m in [*program.hands, *(a for _, a in program.autos)] if not m.failure]
        for m in plans:
            auto = m.plan.startswith("auto")
            ax.scatter(m.memory or 0, m.bytes, marker="*" if auto else "o",
                       s=120 if auto else 40, color="tab:red" if auto else "tab:blue")
            ax.annotate(m.plan.replace("auto @ ", "auto\n"), (m.memory or 0, m.bytes),
                        fontsize=7, xytext=(3, 3), textcoords="offset points")
        for budget, _ in program.autos:
            ax.axvline(budget, color="gray", linestyle=":", linewidth=0.8)
        ax.set_title(program.name, fontsize=9)
        ax.set_xlabel("memory per device (bytes)", fontsize=8)
        ax.set_ylabel("collective bytes per device", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(programs):]:
        ax.axis("off")
    figure.suptitle("auto plans (red stars) against hand plans (blue), dotted: the budgets",
                    fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", default=(), metavar="MODEL")
    parser.add_argument("--depths", nargs="+", type=int, default=None,
                        help="only the search time at these depths")
    options = parser.parse_args()
    jax.block_until_ready(jax.jit(lambda x: x + 1)(1.0))
    depths = options.depths or [1, 4, 16, 48]
    programs: list[Program] = []
    if options.depths is None:
        import keras
        for model in _models():
            if options.only and model.name not in options.only:
                continue
            keras.utils.set_random_seed(SEED)
            keras_model = model.build()
            for program in ("forward", "step"):
                start = time.perf_counter()
                programs.append(measure_program(model, keras_model, program))
                print(f"  {programs[-1].name}: {time.perf_counter() - start:.1f} s",
                      file=sys.stderr, flush=True)
    times = search_times(depths) if not options.only else []
    verdicts = [line for p in programs for line in p.verdicts()]
    lines = table(programs)
    print("\n".join(lines))
    print()
    print("\n".join(verdicts))
    passed = sum(v.startswith("PASS") for v in verdicts)
    summary = f"{passed} of {len(verdicts)} auto plans pass"
    print(summary)
    depth_lines = ["| layers | ops | search s | ILP variables | variable classes |",
                   "|---:|---:|---:|---:|---:|",
                   *[f"| {d} | {ops} | {s:.2f} | {v} | {c} |" for d, ops, s, v, c in times]]
    if times:
        print("\n".join(depth_lines))
    if not options.only and options.depths is None:
        info = run_info(1, "ours")
        drew = chart(programs, CHART)
        report = [
            "# spmd-auto-shard against hand-written plans", "",
            f"- date: {info.date}", f"- jax {info.jax_version}, jaxlib {info.jaxlib_version}",
            f"- devices: {info.devices} ({info.platform})", f"- command: `{info.command}`",
            *([f"- revision: {info.revision}"] if info.revision else []), "",
            __doc__.split("\n\n", 2)[2].split("\n\nPrinted")[0], "",
            f"**Summary:** {summary}.", "", *[f"- {v}" for v in verdicts], "",
            *lines, "", *(["![bytes and memory per plan](auto_shard.png)", ""] if drew else []),
            "## Search time against depth", "",
            "`ss.auto_shard` (parse to plan, in-process, one run) on the demo's training "
            "step; the ILP's size stays flat once the layers are clustered.", "",
            *depth_lines, ""]
        REPORT.write_text("\n".join(report))
        print(f"wrote {REPORT.relative_to(ROOT)}", file=sys.stderr)
    if any(v.startswith("FAIL") for v in verdicts):
        sys.exit(1)


if __name__ == "__main__":
    main()
