"""The measurement records of benchmarks/compare_xla.py and the reports made from them.

Plain data and text only (no jax), so the writers can be tested on made-up
records; the collective records and their costs are stablehlo_spmd/collective_bytes.py's:

* `print_text`: the plain-text tables compare_xla.py prints;
* `markdown` / `write_markdown`: benchmarks/results/latest.md;
* `write_chart`: benchmarks/results/latest.png, grouped bars of the bytes and
  step-time ratios (ours / XLA) per workload.  matplotlib is an optional
  extra (``pip install '.[report]'``), imported only here; without it the
  chart is skipped with a note and the markdown is written all the same.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import sys
from typing import Any, Callable

from stablehlo_spmd.collective_bytes import (
    COLLECTIVE_KINDS, Collective, executions, fmt_bytes, total_bytes)

SHORT = {"all-reduce": "AR", "all-gather": "AG", "reduce-scatter": "RS", "all-to-all": "A2A",
         "collective-permute": "CP"}
LEGEND = ("AR all-reduce, AG all-gather, RS reduce-scatter, A2A all-to-all, "
          "CP collective-permute")
MATPLOTLIB_NOTE = ("matplotlib is not installed: the chart was not drawn (the markdown was "
                   "written). For the chart: pip install '.[report]'")


# ------------------------------------------------------------------ records


@dataclasses.dataclass(frozen=True)
class Memory:
    """Per-device sizes from a compiled program's memory analysis, in bytes."""
    arguments: int
    outputs: int
    temp: int
    alias: int = 0

    @property
    def total(self) -> int:
        return self.arguments + self.outputs + self.temp - self.alias

    @classmethod
    def from_stats(cls, stats: Any) -> Memory | None:
        """From jax's / PJRT's ``CompiledMemoryStats`` (None stays None)."""
        if stats is None:
            return None
        return cls(stats.argument_size_in_bytes, stats.output_size_in_bytes,
                   stats.temp_size_in_bytes, stats.alias_size_in_bytes)

    def describe(self) -> str:
        return (f"args {fmt_bytes(self.arguments)}, out {fmt_bytes(self.outputs)}, temp "
                f"{fmt_bytes(self.temp)}, total {fmt_bytes(self.total)}")


@dataclasses.dataclass(frozen=True)
class PassTimes:
    """Milliseconds, each the median of a few runs on the same text."""
    annotate: float
    propagate: float
    partition: float          # spmd-partition + canonicalize + cse
    pipeline: float           # the whole ss.partition call (parse and print included)


@dataclasses.dataclass
class Row:
    """One workload, both sides, measured in one run."""
    name: str
    ours: list[Collective]          # counted in each side's compiled program
    xla: list[Collective]
    ours_emitted: list[Collective]  # ours as our partitioner emitted them, before XLA compiles
    ours_ms: float                  # step: each side's public call on device arrays, median
    xla_ms: float
    ours_host_ms: float             # host: the same call handed host (NumPy) arrays, median
    xla_host_ms: float
    ours_exec_ms: float | None      # exec: both through PJRT execute_sharded, median
    xla_exec_ms: float | None
    passes: PassTimes
    ours_compile_ms: float          # runtime.compile of the partitioned text (one call)
    xla_lower_ms: float             # jit(...).lower (one call)
    xla_compile_ms: float           # .compile(): XLA's partitioner and the rest (one call)
    ours_memory: Memory | None
    xla_memory: Memory | None
    max_error: float

    @property
    def ours_bytes(self) -> float:
        return total_bytes(self.ours)

    @property
    def xla_bytes(self) -> float:
        return total_bytes(self.xla)

    @property
    def ours_emitted_bytes(self) -> float:
        return total_bytes(self.ours_emitted)


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """What the header of a report says about the run."""
    date: str
    jax_version: str
    jaxlib_version: str
    devices: int
    platform: str
    command: str
    repeat: int
    unmatched: str
    revision: str = ""        # the commit measured, and whether its code had local changes


def revision(root: pathlib.Path) -> str:
    """The commit measured, and whether the measured code differs from it."""
    import subprocess

    def git(*arguments):
        return subprocess.run(["git", "-C", str(root), *arguments], capture_output=True,
                              text=True, check=False)

    head = git("rev-parse", "--short", "HEAD")
    if head.returncode != 0:
        return ""
    changed = git("status", "--porcelain", "--", "stablehlo_spmd", "examples").stdout.strip()
    return head.stdout.strip() + (" with uncommitted changes to stablehlo_spmd/ or examples/"
                                  if changed else "")


# ------------------------------------------------------------------ formatting


def ratio_value(a: float | None, b: float | None) -> float | None:
    """a / b; 1.0 for 0 / 0 (nothing on either side); None where it has no value."""
    if a is None or b is None:
        return None
    if b == 0:
        return 1.0 if a == 0 else None
    return a / b


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "n/a"
    if b == 0:
        return "=" if a == 0 else "inf"
    return f"{a / b:.2f}"


def counts(found: list[Collective]) -> str:
    parts = []
    for kind in COLLECTIVE_KINDS:
        count = executions(found, kind)   # a collective in a loop, once per iteration
        if count:
            parts.append(f"{count}{SHORT[kind]}")
    return " ".join(parts) or "none"


# spmd-annotate's warning for a rule that matched no argument or result.
UNMATCHED = "matched no argument or result"


@dataclasses.dataclass
class ProgramResult:
    """One (model, rule set, program) of a model benchmark, measured against XLA."""

    model: str
    rules: str
    program: str
    mesh: str
    row: Any = None                      # compare_xla's Row, or None when it failed
    failure: str = ""                    # an exception that stopped the measurement
    unmatched_rules: set | None = None   # spmd-annotate's warnings; None: it did not finish

    @property
    def name(self) -> str:
        return f"{self.model} {self.program} {self.rules}"


def failure_lines(results) -> list[str]:
    """One line per program that raised: its name and its error."""
    return [f"{r.name}: FAILED: {r.failure}" for r in results if r.failure]


def measured_cells(row) -> tuple[str, ...]:
    """A compare_xla row's measured columns, ours beside XLA's: collectives, bytes,
    step milliseconds and memory, each with its ratio."""
    ours_memory = row.ours_memory.total if row.ours_memory else None
    xla_memory = row.xla_memory.total if row.xla_memory else None
    return (
        counts(row.ours), counts(row.xla), fmt_bytes(row.ours_bytes), fmt_bytes(row.xla_bytes),
        ratio(row.ours_bytes, row.xla_bytes), f"{row.ours_ms:.3f}", f"{row.xla_ms:.3f}",
        ratio(row.ours_ms, row.xla_ms),
        "n/a" if ours_memory is None else fmt_bytes(ours_memory),
        "n/a" if xla_memory is None else fmt_bytes(xla_memory),
        ratio(ours_memory, xla_memory))


def _memory_text(memory: Memory | None) -> str:
    return "n/a" if memory is None else memory.describe()


def _memory_total(memory: Memory | None) -> str:
    return "n/a" if memory is None else fmt_bytes(memory.total)


def _call_cells(row: Row) -> tuple[str, ...]:
    """step ms ours / XLA / o/x, then host ms ours / XLA / o/x."""
    return (f"{row.ours_ms:.3f}", f"{row.xla_ms:.3f}", ratio(row.ours_ms, row.xla_ms),
            f"{row.ours_host_ms:.3f}", f"{row.xla_host_ms:.3f}",
            ratio(row.ours_host_ms, row.xla_host_ms))


# ------------------------------------------------------------------ plain text (stdout)


def print_text(rows: list[Row], info: RunInfo, out: Callable[[str], None] = print) -> None:
    header = ("workload", "coll ours", "coll XLA", "bytes ours", "bytes ours emitted",
              "bytes XLA", "bytes o/x",
              "step ms ours", "step ms XLA", "step o/x", "host ms ours", "host ms XLA",
              "host o/x", "exec ms ours", "exec ms XLA", "exec o/x", "partition ms")
    table = []
    for row in rows:
        exec_cells = (("n/a",) * 3 if row.ours_exec_ms is None else
                      (f"{row.ours_exec_ms:.3f}", f"{row.xla_exec_ms:.3f}",
                       ratio(row.ours_exec_ms, row.xla_exec_ms)))
        table.append((row.name, counts(row.ours), counts(row.xla), fmt_bytes(row.ours_bytes),
                      fmt_bytes(row.ours_emitted_bytes), fmt_bytes(row.xla_bytes),
                      ratio(row.ours_bytes, row.xla_bytes),
                      *_call_cells(row), *exec_cells, f"{row.passes.pipeline:.1f}"))
    widths = [max(len(str(r[i])) for r in table + [header]) for i in range(len(header))]
    out(f"ours (stablehlo_spmd) vs XLA (jax.jit: Shardy + GSPMD partitioner), {info.devices} "
        f"{info.platform.upper()} host devices, jax {info.jax_version}, median of {info.repeat} "
        f"alternating runs, unmatched results: {info.unmatched}")
    out(f"coll: {LEGEND} (counted in the optimized HLO); bytes: per device, DESIGN.md cost "
        "table; bytes ours emitted: ours counted in our partitioned StableHLO, before XLA "
        "compiles it")
    out("step: public call (Executable.__call__ / Compiled.__call__) on arrays already on the "
        "devices; host: the same call handed NumPy arrays (placing them included); exec: both "
        "through PJRT execute_sharded; partition: ss.partition "
        "(annotate+propagate+partition), median of 3")
    line = " | ".join(h.ljust(w) if i < 3 else h.rjust(w)
                      for i, (h, w) in enumerate(zip(header, widths)))
    out(line)
    out("-" * len(line))
    for r in table:
        out(" | ".join(str(c).ljust(w) if i < 3 else str(c).rjust(w)
                       for i, (c, w) in enumerate(zip(r, widths))))
    out("")
    out("pass and compile time, ms (ours: annotate / propagate / partition+canonicalize+cse, "
        "median of 3; runtime.compile; XLA: jit lower; compile, one call each):")
    for row in rows:
        p = row.passes
        out(f"  {row.name:<20} ours {p.annotate:7.1f} / {p.propagate:7.1f} / {p.partition:7.1f}"
            f"   compile {row.ours_compile_ms:7.1f}    XLA lower {row.xla_lower_ms:7.1f}"
            f"   compile {row.xla_compile_ms:7.1f}")
    out("")
    out("per-device memory (compiled memory analysis: Executable.memory_analysis() for ours, "
        "Compiled.memory_analysis() for XLA):")
    for row in rows:
        out(f"  {row.name:<20} ours: {_memory_text(row.ours_memory)}")
        out(f"  {'':<20} XLA:  {_memory_text(row.xla_memory)}")
    out("")
    out("numerics: every output of ours allclose to XLA's; max |ours - XLA|:")
    out("  " + ", ".join(f"{row.name} {row.max_error:.1e}" for row in rows))
    out("")
    out("collectives in each compiled program (per-device operand shapes, group size, bytes)")
    for row in rows:
        out(f"  {row.name}")
        for side, found in (("ours", row.ours), ("XLA ", row.xla)):
            if not found:
                out(f"    {side}: none")
            for c in found:
                out(f"    {side}: {c.describe()}")


# ------------------------------------------------------------------ markdown

TABLE_HEADER = ("workload", "collectives ours", "collectives XLA", "bytes ours",
                "bytes ours as emitted", "bytes XLA", "bytes o/x", "step ms ours", "step ms XLA", "step o/x", "host ms ours",
                "host ms XLA", "host o/x", "exec o/x",
                "memory ours", "memory XLA", "ours ms: annotate / propagate / partition",
                "ours compile ms", "XLA ms: lower / compile")


def table_rows(rows: list[Row]) -> list[tuple[str, ...]]:
    """The cells of the report's main table, one tuple per workload."""
    cells = []
    for row in rows:
        p = row.passes
        cells.append((
            row.name, counts(row.ours), counts(row.xla), fmt_bytes(row.ours_bytes),
            fmt_bytes(row.ours_emitted_bytes), fmt_bytes(row.xla_bytes),
            ratio(row.ours_bytes, row.xla_bytes),
            *_call_cells(row), ratio(row.ours_exec_ms, row.xla_exec_ms),
            _memory_total(row.ours_memory), _memory_total(row.xla_memory),
            f"{p.annotate:.1f} / {p.propagate:.1f} / {p.partition:.1f}",
            f"{row.ours_compile_ms:.1f}",
            f"{row.xla_lower_ms:.1f} / {row.xla_compile_ms:.1f}"))
    return cells


def markdown_table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(TABLE_HEADER) + " |",
             "|" + "|".join("---" if i < 3 else "---:" for i in range(len(TABLE_HEADER))) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in table_rows(rows)]
    return "\n".join(lines)


def markdown(rows: list[Row], info: RunInfo, chart: str | None = "latest.png") -> str:
    """The whole report: header, main table, what the columns mean, then per workload."""
    lines = [
        "# stablehlo-spmd against XLA's partitioner",
        "",
        f"- date: {info.date}",
        f"- jax {info.jax_version}, jaxlib {info.jaxlib_version}",
        f"- devices: {info.devices} ({info.platform})",
        f"- command: `{info.command}`",
        *([f"- revision: {info.revision}"] if info.revision else []),
        f"- timing: median of {info.repeat} alternating runs per side; unmatched results: "
        f"{info.unmatched}",
        "",
        "Ours is `ss.partition` (annotate, propagate, partition) compiled by "
        "`stablehlo_spmd.runtime.compile`; XLA's is `jax.jit` with the same `NamedSharding`s "
        "(Shardy + XLA's SPMD partitioner). Both compiled programs' outputs are checked "
        "allclose against each other.",
        "",
        markdown_table(rows),
        "",
        f"Collectives ({LEGEND}) are counted in each optimized HLO; bytes are per device by "
        "DESIGN.md's cost table; o/x is ours / XLA (below 1.0: ours moves less or runs "
        "faster). `bytes ours as emitted` counts ours in our partitioned StableHLO, before "
        "XLA compiles it: where it differs from `bytes ours`, XLA's backend combined, split or "
        "added collectives. step is each side's public call on arrays already on the devices, host the "
        "same call handed NumPy arrays (cutting them into shards and placing those "
        "included), exec both programs through the same PJRT `execute_sharded` call. memory "
        "is the per-device total (arguments + outputs + temp - aliased) of each compiled "
        "program's memory analysis. Our pass times are medians of 3 runs on a parsed module "
        "(partition includes canonicalize and cse). XLA's partitioner runs inside its "
        "compile and its time cannot be read apart from it, so XLA's figures are "
        "`jit(...).lower` (trace and lower to StableHLO) and `.compile()` (Shardy, SPMD "
        "partitioning, optimization and code generation), one call each; `ours compile ms` "
        "is the same XLA compile of our partitioned program, for comparison.",
    ]
    if chart:
        lines += ["", f"![bytes and step time, ours / XLA]({chart})"]
    lines += ["", "## Per workload", ""]
    for row in rows:
        lines += [f"### {row.name}", "",
                  f"- memory ours: {_memory_text(row.ours_memory)}",
                  f"- memory XLA: {_memory_text(row.xla_memory)}",
                  f"- pass ms ours: annotate {row.passes.annotate:.1f}, propagate "
                  f"{row.passes.propagate:.1f}, partition {row.passes.partition:.1f}; "
                  f"ss.partition {row.passes.pipeline:.1f}",
                  f"- max |ours - XLA|: {row.max_error:.1e}",
                  ""]
        if not row.ours and not row.xla:
            lines += ["No collectives on either side.", ""]
            continue
        lines += ["| side | kind | per-device operands | p | bytes |",
                  "|---|---|---|---:|---:|"]
        for side, found in (("ours", row.ours), ("XLA", row.xla)):
            if not found:
                lines.append(f"| {side} | none | | | |")
            for c in found:
                lines.append(f"| {side} | {c.kind} | `{c.shape}` | {c.group} | "
                             f"{fmt_bytes(c.bytes)} |")
        lines.append("")
    return "\n".join(lines)


def write_markdown(path: pathlib.Path, rows: list[Row], info: RunInfo,
                   chart: str | None = "latest.png") -> pathlib.Path:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(markdown(rows, info, chart))
    return path


# ------------------------------------------------------------------ chart


def write_chart(path: pathlib.Path, rows: list[Row], info: RunInfo) -> bool:
    """Grouped bars of bytes o/x and step o/x per workload, with a line at 1.0.

    Returns False (after printing how to get matplotlib) when it is not installed.
    """
    try:
        import matplotlib
    except ImportError:
        print(MATPLOTLIB_NOTE, file=sys.stderr)
        return False
    matplotlib.use("Agg")
    import matplotlib.ticker
    from matplotlib import pyplot

    names = [row.name for row in rows]
    series = {
        "bytes ours / XLA": [ratio_value(r.ours_bytes, r.xla_bytes) for r in rows],
        "step time ours / XLA": [ratio_value(r.ours_ms, r.xla_ms) for r in rows],
    }
    width = 0.4
    figure, axes = pyplot.subplots(figsize=(max(8.0, 0.85 * len(rows) + 2), 4.8))
    for index, (label, values) in enumerate(series.items()):
        positions = [i + (index - 0.5) * width for i in range(len(rows))]
        heights = [math.nan if v is None else v - 1.0 for v in values]   # bars from 1.0
        bars = axes.bar(positions, heights, width, bottom=1.0, label=label)
        for bar, value in zip(bars, values):
            text = "n/a" if value is None else f"{value:.2f}"
            y = 1.0 if value is None else value
            below = value is not None and value < 1.0
            axes.annotate(text, (bar.get_x() + bar.get_width() / 2, y), ha="center",
                          va="top" if below else "bottom", fontsize=7,
                          xytext=(0, -2 if below else 2), textcoords="offset points")
    axes.axhline(1.0, color="black", linewidth=1, linestyle="--", label="XLA (1.0)")
    axes.set_yscale("log")
    finite = [v for values in series.values() for v in values if v is not None and v > 0]
    low, high = min(finite + [1.0]), max(finite + [1.0])
    axes.set_ylim(low / 1.6, high * 1.6)
    ticks = [t for t in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100)
             if low / 1.6 <= t <= high * 1.6]
    axes.set_yticks(ticks, [f"{t:g}" for t in ticks])
    axes.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes.set_ylabel("ours / XLA (log scale; below 1: better)")
    axes.set_xticks(range(len(rows)))
    axes.set_xticklabels(names, rotation=30, ha="right")
    axes.set_title(f"stablehlo-spmd vs XLA, {info.devices} {info.platform} devices, "
                   f"jax {info.jax_version}, {info.date}", fontsize=10)
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figure.tight_layout()
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    pyplot.close(figure)
    return True


def write_report(directory: pathlib.Path, rows: list[Row], info: RunInfo,
                 stem: str = "latest") -> list[pathlib.Path]:
    """``<stem>.md`` and, with matplotlib, ``<stem>.png`` in `directory`; the paths written."""
    directory = pathlib.Path(directory)
    chart = directory / f"{stem}.png"
    drawn = write_chart(chart, rows, info)
    written = [write_markdown(directory / f"{stem}.md", rows, info,
                              chart.name if drawn else None)]
    return written + ([chart] if drawn else [])
