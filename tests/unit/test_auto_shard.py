"""spmd-auto-shard: optima known by hand, constraints, budgets, numerics, clustering."""

from __future__ import annotations

import dataclasses
import math
import re
import subprocess
import sys
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_spmd as ss
from stablehlo_spmd import auto_sharding, demo_model, diagnostics
from stablehlo_spmd.auto_sharding import Search, hardware, program
from stablehlo_spmd.auto_sharding.program import _Milp, _Unit
from stablehlo_spmd.errors import SpmdError
from stablehlo_spmd.ir import make_context, parse_module
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.passes.auto_shard import (AutoShardPass, _bracketed_limit, _read,
                                              auto_shard_module, carried_pairs, format_table,
                                              parse_bytes)

HIDDEN, BATCH = 512, 8
WEIGHT_BYTES = HIDDEN * HIDDEN * 4          # 1 MiB each
ACTIVATION_BYTES = BATCH * HIDDEN * 4       # 16 KiB


def _mlp(x, w1, w2):
    return jnp.maximum(x @ w1, 0.0) @ w2


def _mlp_text() -> str:
    x = np.ones((BATCH, HIDDEN), np.float32)
    w = np.ones((HIDDEN, HIDDEN), np.float32)
    return ss.export(_mlp, x, w, w)


def _plan(text: str, **options):
    """(result of the pass, the planned text) for `text` with pass options."""
    engine = diagnostics.DiagnosticEngine()
    with make_context() as context, diagnostics.collecting(engine):
        module = parse_module(text, "<test>", context)
        result = auto_shard_module(module, AutoShardPass(**options))
        errors = [str(d) for d in engine.diagnostics if d.severity == "error"]
        return result, errors, module.get_asm(enable_debug_info=False)


def _argument_shardings(text: str) -> list[str]:
    signature = re.search(r"func.func public @main\((.*?)\) ->", text).group(1)
    return re.findall(r'mhlo.sharding = "([^"]*)"', signature)


def _batch_split_output() -> str:
    """The MLP with its output wanted split by batch, as a data-parallel
    training loop consumes it."""
    return ss.annotate(_mlp_text(), "x=8", [(r"^result$", ("x",))])


def test_loose_budget_chooses_data_parallel():
    """Forward MLP, weights 1 MiB each, activations 16 KiB: with room to
    replicate the weights, splitting the batch moves nothing at all."""
    result, errors, text = _plan(_batch_split_output())
    assert not errors
    assert result.plan.cost == pytest.approx(0, abs=1e-3)
    x, w1, w2 = _argument_shardings(text)
    assert x == "{devices=[8,1]<=[8]}"
    assert w1 == w2 == "{replicated}"


def test_a_search_out_of_time_says_so():
    """A solver stopped by its time limit before any plan is not an
    infeasible budget: the error names the limit, not the memory."""
    result, errors, _ = _plan(_batch_split_output(), memory_budget="1MiB", time_limit=1e-9)
    assert result is None
    assert len(errors) == 1
    assert "no plan within the time limit" in errors[0]
    assert "the time limit: 1e-09 s" in errors[0]
    assert "memory budget" not in errors[0]


def test_tight_budget_chooses_megatron():
    """With 1 MiB per device no weight can be whole.  Megatron (w1 by
    columns, w2 by rows) leaves a partial output that one reduce-scatter
    onto the batch split finishes: 16 KiB * 7/8 per device.  Splitting w2 by
    columns instead gathers the hidden activation (the same 14 KiB) and then
    moves the output from columns to rows too; gathering weights (FSDP)
    needs them whole."""
    result, errors, text = _plan(_batch_split_output(), memory_budget="1MiB")
    assert not errors
    x, w1, w2 = _argument_shardings(text)
    assert w1 == "{devices=[1,8]<=[8]}"
    assert w2 == "{devices=[8,1]<=[8]}"
    assert result.plan.cost == pytest.approx(ACTIVATION_BYTES * 7 / 8, abs=1)
    assert result.plan.peak_memory <= 2**20


def test_annotations_are_hard_constraints():
    """A weight the user pinned replicated stays replicated, even where the
    budget then forces the other weight to pay for it."""
    text = ss.annotate(_mlp_text(), "x=8", [(r"^w1$", ())])
    result, errors, planned = _plan(text, memory_budget="2MiB")
    assert not errors
    _, w1, w2 = _argument_shardings(planned)
    assert w1 == "{replicated}"
    assert w2 != "{replicated}"


def test_infeasible_budget_names_the_smallest_feasible_one():
    with pytest.raises(SpmdError) as caught:
        ss.auto_shard(_mlp_text(), "x=8", memory_budget="64KiB")
    message = str(caught.value)
    assert "no plan fits a memory budget of 64.00 KiB per device" in message
    smallest = int(re.search(r"\((\d+) bytes\)", message).group(1))
    assert smallest > 64 * 1024
    # The budget it names is one a plan really fits.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        planned = ss.auto_shard(_mlp_text(), "x=8", memory_budget=smallest)
    assert "mhlo.sharding" in planned


_DOT_TANH = """
func.func @main(%x: tensor<1024x256xf32>, %w: tensor<256x256xf32>) -> tensor<1024x256xf32> {
  %y = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0]
      : (tensor<1024x256xf32>, tensor<256x256xf32>) -> tensor<1024x256xf32>
  %z = stablehlo.tanh %y : tensor<1024x256xf32>
  return %z : tensor<1024x256xf32>
}
"""


def test_a_budget_under_the_memory_floor_is_refused_without_the_0_1_program(monkeypatch):
    """At its fullest point (the tanh) a plan on 8 devices holds at least an
    eighth of x (128 KiB), of w (32 KiB), of the dot's result y (128 KiB)
    and of z (128 KiB): 416 KiB, whatever layouts it picks.  A budget under
    that is refused at once, naming the floor, and the budget it names is
    one a plan fits; no 0-1 program bounded by the budget is solved."""
    bounded = []
    solve = _Milp.solve

    def recording(self, rows, budget, time_limit, minimize_peak=False, **more):
        bounded.append(bool(rows) or budget is not None or minimize_peak)
        return solve(self, rows, budget, time_limit, minimize_peak=minimize_peak, **more)

    monkeypatch.setattr(_Milp, "solve", recording)
    floor = (1024 * 256 * 4 * 3 + 256 * 256 * 4) // 8
    with pytest.raises(SpmdError) as caught:
        ss.auto_shard(_DOT_TANH, "x=8", memory_budget=floor - 1024, measure_memory=False)
    assert f"every plan holds at least 416.00 KiB ({floor} bytes)" in str(caught.value)
    assert not bounded
    # Where the cheapest plan is solved already, its peak is named too: a
    # budget a plan fits.
    with make_context() as context:
        module = parse_module(_DOT_TANH, "<test>", context)
        graph, _ = _read(module.operation, Mesh.from_string("x=8"))
        search = Search(graph.search_graph(carried_pairs(*graph.entry_values())))
    search.solve(None)
    with pytest.raises(auto_sharding.InfeasibleBudget) as caught:
        search.solve(floor - 1024)
    smallest = caught.value.smallest
    assert "smallest budget found feasible is" in str(caught.value) and smallest >= floor
    assert search.solve(smallest).peak_memory <= smallest


def test_a_least_memory_the_solver_gives_up_on_is_still_a_located_error(monkeypatch):
    """Where HiGHS returns no plan for the least-memory question either (out of
    time on a 70B model's rows), the user still gets the budget's error, not
    a Python one, and it names the least memory of the plans the search did
    find (the cheapest plan's, here)."""
    solve = _Milp.solve

    def no_least(self, rows, budget, time_limit, minimize_peak=False, start=None, **more):
        return None if minimize_peak else solve(self, rows, budget, time_limit, start=start)

    monkeypatch.setattr(_Milp, "solve", no_least)
    monkeypatch.setattr(_Milp, "least_on_support", lambda self, *a, **k: None)
    # Over the memory floor (264 KiB), under the least plan (278 KiB): the
    # least-memory program is asked.
    for measure in (False, None):   # the estimate alone, and XLA's analysis of each plan
        with pytest.raises(SpmdError, match=r"no plan fits a memory budget of 270\.00 KiB .*"
                                             r"smallest budget found feasible is \d"):
            ss.auto_shard(_mlp_text(), "x=8", memory_budget="270KiB", measure_memory=measure)


def _scaled_xla(factor: float):
    """A memory check that reports `factor` times XLA's real analysis of each
    plan: an allocator that needs more (or less) than the search estimates."""
    measured = []

    def check(mesh):
        real = ss.api.memory_check(required=True)(mesh)

        def measure(annotated: str) -> float:
            measured.append(factor * real(annotated))
            return measured[-1]

        return measure

    return check, measured


def test_a_plan_xla_says_overflows_is_searched_again():
    """With room to replicate both weights by the estimate (3 MiB), but an
    allocator needing twice what XLA says, data parallel (about 2 MiB
    really) does not fit: the search is run again under a smaller estimate,
    and the plan it returns is one the measurement says fits."""
    check, measured = _scaled_xla(2.0)
    engine = diagnostics.DiagnosticEngine()
    with make_context() as context, diagnostics.collecting(engine):
        module = parse_module(_batch_split_output(), "<test>", context)
        unmeasured = auto_shard_module(module, AutoShardPass(memory_budget="3MiB"))
        assert unmeasured.plan.cost == pytest.approx(0, abs=1e-3)   # data parallel
        module = parse_module(_batch_split_output(), "<test>", context)
        result = auto_shard_module(module, AutoShardPass(memory_budget="3MiB"), check)
        planned = module.get_asm(enable_debug_info=False)
    assert not engine.errors
    assert measured[0] > 3 * 2**20                       # the first plan overflowed
    assert result.plan.measured_memory <= 3 * 2**20
    assert result.plan.measured_plans >= 2
    assert result.plan.cost > 0
    assert _argument_shardings(planned)[1] != "{replicated}"


def test_between_a_plan_that_fitted_and_one_that_overflowed_the_limit_is_interpolated():
    """Budget 200: the largest plan that fitted was estimated 150 and
    measured 160, the smallest that overflowed 180 and 240.  On the line
    through them, 200 is measured at 150 + 40 * 30 / 80 = 165.  Plans
    further off either side do not move it."""
    plan = auto_sharding.Plan([], [], 0.0, 0.0, 0.0, 0.0, 0, 0, 0, 0)

    def measured(estimate, memory):
        return dataclasses.replace(plan, peak_memory=estimate, measured_memory=memory)

    seen = [measured(120, 130), measured(190, 260), measured(150, 160), measured(180, 240)]
    assert _bracketed_limit(seen, 200) == pytest.approx(165)
    assert _bracketed_limit(seen[:1] + seen[2:3], 200) is None    # nothing overflowed
    assert _bracketed_limit(seen[1:2] + seen[3:], 200) is None    # nothing fitted


def test_a_plan_xla_says_has_room_to_spare_is_searched_again_larger():
    """The other way: by the estimate only the split weights fit 1.5 MiB,
    but an allocator needing half of what XLA says fits data parallel,
    which moves nothing."""
    check, measured = _scaled_xla(0.5)
    engine = diagnostics.DiagnosticEngine()
    with make_context() as context, diagnostics.collecting(engine):
        module = parse_module(_batch_split_output(), "<test>", context)
        unmeasured = auto_shard_module(module, AutoShardPass(memory_budget="1.5MiB"))
        assert unmeasured.plan.cost > 0
        module = parse_module(_batch_split_output(), "<test>", context)
        result = auto_shard_module(module, AutoShardPass(memory_budget="1.5MiB"), check)
    assert not engine.errors
    assert result.plan.cost == pytest.approx(0, abs=1e-3)
    assert result.plan.measured_memory <= 1.5 * 2**20
    assert len(measured) >= 2


def test_a_plan_too_slow_to_compile_is_kept_under_the_budget_by_the_estimate(monkeypatch):
    """By default a plan is measured only where compiling it is predicted to
    take a quarter of the time limit or less.  A program predicted to take
    longer (as a full-depth model does) is not compiled at all: the estimate
    decides, 3% under the budget, and the table says so."""
    from stablehlo_spmd.passes import auto_shard as pass_module

    unmeasured, _, _ = _plan(_batch_split_output(), memory_budget="3MiB")
    budget = unmeasured.plan.peak_memory * 1.01    # data parallel, 1% to spare: not 3%
    monkeypatch.setattr(pass_module, "COMPILE_SECONDS_PER_OP", 60.0)
    compiled = []

    def check(mesh):
        compiled.append(mesh)
        return lambda annotated: 0.0

    engine = diagnostics.DiagnosticEngine()
    with make_context() as context, diagnostics.collecting(engine):
        module = parse_module(_batch_split_output(), "<test>", context)
        result = auto_shard_module(module, AutoShardPass(memory_budget=str(budget)), check)
    assert not [d for d in engine.diagnostics if d.severity in ("error", "warning")]
    assert compiled == [Mesh.from_string("x=8")] and result.plan.measured_memory is None
    assert result.plan.peak_memory <= budget * (1 - pass_module.ESTIMATE_MARGIN)
    assert result.plan.cost > unmeasured.plan.cost       # it gave up data parallel for it
    assert "kept 3% under the budget" in format_table(result)


def test_the_time_limit_bounds_measuring_too():
    """Each compile to measure a plan takes 1 s here, and the allocator
    needs twice what XLA says, so the first plan overflows: with a limit of
    1.8 s, the second compile cannot end in time and is not started.  The
    call returns within its limit with a plan the estimate puts 3% under the
    budget, and warns that its memory was not measured."""
    scaled, measured = _scaled_xla(2.0)

    def slow(mesh):
        measure = scaled(mesh)

        def run(annotated):
            time.sleep(1.0)
            return measure(annotated)
        return run

    engine = diagnostics.DiagnosticEngine()
    with make_context() as context, diagnostics.collecting(engine):
        module = parse_module(_batch_split_output(), "<test>", context)
        started = time.perf_counter()
        result = auto_shard_module(module, AutoShardPass(memory_budget="3MiB", time_limit=1.8),
                                   slow, measure_always=True)
        seconds = time.perf_counter() - started
    assert not engine.errors
    assert len(measured) == 1 and measured[0] > 3 * 2**20      # one compile, and it overflowed
    assert seconds < 1.8
    assert result.plan.measured_memory is None
    assert result.plan.peak_memory <= 3 * 2**20 * 0.97
    assert any("no time to compile" in str(d) for d in engine.diagnostics
               if d.severity == "warning")


def _estimate_against_xla(fn, *args, mesh: str = "x=8") -> tuple[float, float]:
    """(the search's peak-memory estimate, XLA's memory analysis) of the plan
    of least traffic for `fn` on `mesh`, per device."""
    result, errors, planned = _plan(ss.export(fn, *args), mesh=mesh, target="cpu")
    assert not errors
    xla = ss.api.memory_check(required=True)(Mesh.from_string(mesh))(planned)
    return result.plan.peak_memory, xla


def _two_calls(x, w1, w2):
    layer = jax.jit(lambda h, w: jnp.tanh(h @ w))
    return layer(layer(x * 2.0, w1) * 3.0, w2)


def _two_inlined(x, w1, w2):
    def layer(h, w):
        return jnp.tanh(h @ w)
    return layer(layer(x * 2.0, w1) * 3.0, w2)


def test_a_function_called_twice_holds_its_buffers_once_per_call():
    """XLA inlines calls before it assigns buffers: a function called from
    two places costs what the same code written out twice does, and what
    XLA's analysis says, not one buffer stretched from the first call to
    the second."""
    x = np.ones((256, 512), np.float32)
    w = np.ones((512, 512), np.float32) / 512
    called, xla = _estimate_against_xla(_two_calls, x, w, w)
    inlined, _ = _estimate_against_xla(_two_inlined, x, w, w)
    assert called == pytest.approx(inlined, rel=1e-9)
    assert called == pytest.approx(xla, rel=0.1)


@pytest.mark.parametrize("transpose", [
    lambda a: a.T,                                            # a copy of its own
    lambda a: jnp.transpose(a[None], (1, 0, 2))[:, 0],        # a bitcast: no buffer
], ids=["2d", "unit-dim"])
def test_a_transpose_holds_a_buffer_unless_it_keeps_the_element_order(transpose):
    """XLA reads a reshape, or a transpose that moves only dims of size one,
    in place; a real transpose is a copy of its own.  The estimate follows."""
    x = np.ones((512, 512), np.float32)
    estimate, xla = _estimate_against_xla(lambda a, b: jnp.sum(transpose(a) * b, axis=0), x, x)
    assert estimate == pytest.approx(xla, rel=0.1)


@pytest.mark.parametrize("weight, contraction, copied", [
    ((256, 4, 32), "bshk,dhk->bsd", True),    # summed over two dims: w copied to [h, k, d]
    ((4, 32, 256), "bshk,hkd->bsd", False),   # already [contracting, free]
    ((256, 128), "bsk,dk->bsd", False),       # one dim each: read transposed in place
], ids=["multi-dim", "in-order", "matrix"])
def test_a_contraction_copies_an_argument_it_cannot_read_as_a_matrix(weight, contraction, copied):
    """XLA rewrites a dot summed or kept over several dims into a matrix
    multiply of [free, contracting] by [contracting, free] operands; an
    argument in another order is copied into that one (the backward of an
    attention projection copies its [d, h, k] weight).  On one device:
    the two arguments, the result and, where made, the copy (128 KiB)."""
    dq = np.ones((16, 32, 4, 32) if len(weight) == 3 else (16, 32, 128), np.float32)
    w = np.ones(weight, np.float32)
    estimate, xla = _estimate_against_xla(lambda a, b: jnp.einsum(contraction, a, b), dq, w,
                                          mesh="x=1")
    held = dq.nbytes + w.nbytes + 16 * 32 * 256 * 4
    assert estimate == held + (w.nbytes if copied else 0)
    assert estimate == pytest.approx(xla, rel=0.02)


def test_a_value_several_ops_read_is_made_again_where_its_operands_are_held():
    """x * s, read by a tanh and an exp: XLA's fusion makes the product
    again inside each (x and s are arguments, held anyway), so it is no
    buffer.  Held: x (256 KiB), s (1 KiB) and the two results (256 KiB
    each), on one device."""
    def remade(x, s):
        product = x * s
        return jnp.tanh(product), jnp.exp(product)

    x, s = np.ones((256, 256), np.float32), np.ones((256, 1), np.float32)
    estimate, xla = _estimate_against_xla(remade, x, s, mesh="x=1")
    assert estimate == (256 + 1 + 256 + 256) * 1024
    assert estimate == pytest.approx(xla, rel=0.02)


def test_a_mask_read_early_and_late_is_made_again_from_what_it_is_made_from():
    """An attention-style mask (a compare of a sorted vector against an iota,
    a unit dim moved by a transpose) read by a select first and by another
    at the end: XLA makes it again inside each select, holding the sorted
    vector (2 KiB) until the second rather than the mask (256 KiB).  Held,
    on one device: x (1 MiB), the lengths and their sorted copy (2 KiB
    each), and the result (1 MiB), in whose allocation the temporaries
    between the selects wait; and a few scalars."""
    def masked(x, lengths):
        limit = jnp.sort(lengths)
        keep = jnp.transpose((limit[:, None] > jnp.arange(512)[None, :])[None], (1, 0, 2))
        hidden = jnp.exp(jnp.where(keep, x[:, None, :], 0.0))
        hidden = jnp.tanh(hidden * 2.0) + hidden
        return jnp.where(keep, hidden, 1.0)

    x, lengths = np.ones((512, 512), np.float32), np.arange(512, dtype=np.int32)
    estimate, xla = _estimate_against_xla(masked, x, lengths, mesh="x=1")
    assert estimate == pytest.approx((1024 + 2 + 2 + 1024) * 1024, abs=64)
    assert estimate == pytest.approx(xla, rel=0.02)


def test_a_temporary_waits_in_a_results_allocation_before_the_result_is_written():
    """exp(x @ x) @ x, subtracted from w: the result's allocation (256 KiB)
    is free until the subtraction, and XLA places exp's output, last read
    by the second product, in it.  Held at the exp: w, x and the result
    (768 KiB) and x @ x (256 KiB); exp's output is in the result's."""
    def step(w, x):
        return w - 0.1 * (jnp.exp(x @ x) @ x)

    x = np.ones((256, 256), np.float32)
    estimate, xla = _estimate_against_xla(step, x, x, mesh="x=1")
    assert estimate == (256 * 3 + 256) * 1024
    assert estimate == pytest.approx(xla, rel=0.02)


def test_a_contraction_copies_an_operand_it_cannot_read_as_a_matrix():
    """Experts' weights [e, h, m] contracted on h: their free dims are not
    one run, so XLA transposes a copy of the weights to multiply them, and
    the copy is as large as the weights each device holds.  Without it the
    estimate is a third under XLA's analysis."""
    x = np.ones((64, 512), np.float32)
    w = np.ones((8, 512, 256), np.float32) / 512
    estimate, xla = _estimate_against_xla(
        lambda x, w: jnp.tanh(jnp.einsum("th,ehm->etm", x, w)), x, w)
    assert estimate == pytest.approx(xla, rel=0.05)


def test_a_step_holds_its_parameters_and_their_updates_both():
    """Without donation XLA keeps a parameter and its updated value in two
    buffers, though the plan gives them one layout: the estimate counts both."""
    params = {"w": np.ones((512, 512), np.float32)}
    x = np.ones((512, 512), np.float32)
    estimate, xla = _estimate_against_xla(
        lambda p, x: ({"w": p["w"] - 0.1 * jnp.tanh(x)}, x * 2.0), params, x)
    assert estimate == pytest.approx(xla, rel=0.1)


def test_without_the_mesh_s_devices_the_estimate_stands_with_a_warning():
    with pytest.warns(ss.SpmdWarning, match="estimate only: this process cannot compile for "
                                            "the mesh's 16 devices"):
        planned = ss.auto_shard(_mlp_text(), "x=16", memory_budget="4MiB")
    assert "mhlo.sharding" in planned


def _auto_shard_cli(source, output, budget: str, *more: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stablehlo_spmd.cli.main", "auto-shard",
                           str(source), "--mesh", "x=8", "--memory-budget", budget, *more,
                           "-o", str(output)], capture_output=True, text=True)


def _assert_cli_refuses(tmp_path, error: str, budget: str, *more: str) -> None:
    """The MLP through the command: one located error line matching `error`,
    exit 1, no traceback, no output file."""
    source = tmp_path / "mlp.mlir"
    source.write_text(_mlp_text())
    output = tmp_path / "planned.mlir"
    run = _auto_shard_cli(source, output, budget, *more)
    assert run.returncode == 1
    assert "Traceback" not in run.stderr
    assert re.search(r"mlp.mlir: error: spmd-auto-shard: " + error, run.stderr)
    assert not output.exists()


def test_cli_error_is_one_located_line_and_writes_nothing(tmp_path):
    _assert_cli_refuses(tmp_path, "no plan fits", "64KiB")


def test_cli_time_limit_reaches_the_solver(tmp_path):
    _assert_cli_refuses(tmp_path,
                        r"the solver found no plan within the time limit.*time limit: 1e-09 s",
                        "1MiB", "--time-limit", "1e-9")


def test_cli_prints_the_plan_table(tmp_path):
    source = tmp_path / "mlp.mlir"
    source.write_text(_batch_split_output())
    output = tmp_path / "planned.mlir"
    run = _auto_shard_cli(source, output, "1MiB")
    assert run.returncode == 0, run.stderr
    assert "estimated collectives per step: 14.00 KiB per device" in run.stderr
    assert re.search(r"memory by XLA's analysis of the compiled plan: [0-9.]+ KiB per device",
                     run.stderr)
    assert re.search(r"argument\s+w1\s+\(None, 'x'\)\s", run.stderr)
    assert "searched:" in run.stderr
    assert _argument_shardings(output.read_text())[1] == "{devices=[1,8]<=[8]}"


def test_cli_writes_nothing_but_the_module_to_stdout(tmp_path):
    """The planned module piped on: the solver's banner, or anything else,
    on stdout would make it unreadable to the next tool."""
    source = tmp_path / "mlp.mlir"
    source.write_text(_mlp_text())
    run = _auto_shard_cli(source, "-", "1MiB")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("module ")
    with make_context() as context:
        parse_module(run.stdout, "<stdout>", context)


@pytest.mark.parametrize("budget", [None, "1MiB"])
def test_planned_mlp_matches_one_device(budget):
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((BATCH, HIDDEN)).astype(np.float32),
              rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32) / 20,
              rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32) / 20]
    text = _mlp_text()
    planned = ss.auto_shard(text, "x=8", memory_budget=budget)
    got = ss.run(ss.partition(planned), inputs)
    want = ss.run_single_device(text, inputs)
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=1e-5, atol=1e-5)


def test_a_constant_is_never_read_as_a_partial_sum():
    """(x @ w + 1) @ v with the contraction of x @ w split: carrying the
    Partial product through the add to the last, narrow matmul would sum
    512 times fewer bytes, but a Partial broadcast constant is held whole
    by each of the 8 devices, and the sum would add 8.  The plan sums
    before the add, and matches one device."""
    def model(x, w, v):
        return (x @ w + 1.0) @ v

    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((BATCH, HIDDEN)).astype(np.float32),
              rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32) / 20,
              rng.standard_normal((HIDDEN, 1)).astype(np.float32)]
    text = ss.annotate(ss.export(model, *inputs), "x=8",
                       [(r"^x$", (None, "x")), (r"^w$", ("x", None))])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        planned = ss.auto_shard(text, "x=8")
        got, = ss.run(ss.partition(planned), inputs)
    add, = re.findall(r"stablehlo.add .*", planned)
    assert "unreduced" not in add
    want, = ss.run_single_device(text, inputs)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-3)


def test_training_step_matches_one_device_and_keeps_parameter_layouts():
    """The demo's training step planned on a 2-D mesh: right numbers, and each
    updated parameter comes out in the layout chosen for the parameter."""
    params, batch = demo_model.example_args(demo_model.Config(n_layers=1))
    text = ss.export(demo_model.train_step, params, batch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        planned = ss.auto_shard(text, "data=4,model=2")
        partitioned = ss.partition(planned)
    leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves((params, batch))]
    got = ss.run(partitioned, leaves)
    want = ss.run_single_device(text, leaves)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
    main = re.search(r"func.func public @main\((.*?)\) -> \((.*?)\) \{", planned, re.S)
    arguments = re.findall(r'%arg\d+: (tensor<[^>]*>) \{mhlo.sharding = "([^"]*)"', main.group(1))
    results = re.findall(r'(tensor<[^>]*>) \{[^}]*mhlo.sharding = "([^"]*)"', main.group(2))
    parameters = len(jax.tree_util.tree_leaves(params))
    assert [s for _, s in results[:parameters]] == [s for _, s in arguments[:parameters]]
    assert any(s != "{replicated}" for _, s in arguments[:parameters])


def _switches(costs, saved: float = 10.0):
    """A 0-1 program of independent units, each either free and holding
    `saved` bytes, or holding none at its cost."""
    units = [_Unit("value", i, [0, 1]) for i in range(len(costs))]
    linear = [np.array([0.0, c]) for c in costs]
    row = {i: np.array([saved, 0.0]) for i in range(len(costs))}
    return _Milp(units, list(range(len(costs))), linear, {}), [row]


def test_the_relaxation_proves_the_plan_its_support_decides():
    """100 units, unit i dearer to switch the larger i: a budget of 50 whole
    units and a half forces the 50 cheapest off.  The LP holds the 50th
    half-switched; the 0-1 program on the LP's support switches it whole,
    and that plan is within the gap of the LP's value (the half unit's cost,
    against 50 units'), so it is proved."""
    costs = [1 + i / 100 for i in range(100)]
    problem, rows = _switches(costs)
    (strategies, cost), proved = problem.relaxed(rows, 10.0 * 50 + 5, time_limit=30)
    assert proved
    assert strategies == [1] * 50 + [0] * 50
    assert cost == pytest.approx(sum(costs[:50]))
    # With the rows gone again, nothing bounds memory: the free plan.
    (strategies, cost), proved = problem.relaxed([], None, time_limit=30)
    assert proved and cost == 0 and strategies == [0] * 100


@pytest.mark.parametrize("saved", [10.0, 4e12])
def test_the_least_memory_program_solves_rows_of_any_size(saved):
    """Ten units each holding `saved` bytes unless switched at a cost: the
    least peak switches all ten, whether the bytes are tens or terabytes
    (the program counts the peak in units of its largest term: on
    Llama-3-8B's rows, in bytes, HiGHS answered infeasible, and a fixed
    unit of a GiB lost rows of tens of bytes below its tolerances)."""
    problem, rows = _switches([1.0] * 10, saved)
    for weight in (0.0, 1e-3):
        for strategies, peak in (
                problem.solve(rows, None, 30, minimize_peak=True, cost_weight=weight),
                problem.least_on_support(rows, 30, cost_weight=weight)):
            assert strategies == [1] * 10
            assert peak == pytest.approx(0.0, abs=1e-6 * saved)


def test_the_least_memory_plan_moves_nothing_it_need_not():
    """Two ways to hold the same bytes, one free and one dear: with the cost
    weighed in, the least-memory plan takes the free one."""
    units = [_Unit("value", 0, [0, 1])]
    problem = _Milp(units, [0], [np.array([0.0, 5.0])], {})
    rows = [{0: np.array([10.0, 10.0])}]
    strategies, peak = problem.solve(rows, None, 30, minimize_peak=True, cost_weight=1e-3)
    assert strategies == [0] and peak == pytest.approx(10.0)
    strategies, peak = problem.least_on_support(rows, 30, cost_weight=1e-3)
    assert strategies == [0] and peak == pytest.approx(10.0)



def _three_switches(ballast: float | None = None):
    """Three units, one saving each worth 8 of the 30 held, against a budget
    of 20: two must switch.  Units 0 and 1 pay 2 to differ.  Switching 0
    and 1 costs 3 + 5; 0 and 2, 3 + 4 + 2; 1 and 2, 5 + 4 + 2.  The LP
    blends them at 5 (switching 0 and 1 together, or 2, costs 4 a unit of
    the 1.25 units needed).  A `ballast` unit adds a cost no plan avoids."""
    units = [_Unit("value", i, [0, 1]) for i in range(3)]
    linear = [np.array([0.0, 3.0]), np.array([0.0, 5.0]), np.array([0.0, 4.0])]
    if ballast is not None:
        units.append(_Unit("value", 3, [0]))
        linear.append(np.array([ballast]))
    problem = _Milp(units, list(range(len(units))), linear,
                    {(0, 1): np.array([[0.0, 2.0], [2.0, 0.0]])})
    return problem, [{unit: np.array([10.0, 2.0]) for unit in range(3)}]



def _mirrored_switches(y_cost: float = 3.0, y_holds: float = 2.0):
    """Three units that each keep 10 bytes, or hold 2 laid out over ``x``
    or over ``y`` at a cost (3, 5, 4), and pay 2 to differ from a neighbour;
    against a budget of 20 two must switch.  Swapping ``x`` and ``y``
    changes nothing where unit 0's ``y`` costs and holds what its ``x``
    does (`y_cost`, `y_holds`): then the optimum, units 0 and 1 switched
    alike (3 + 5 + 2), has a mirror."""
    units = [_Unit("value", i, ["keep", "x", "y"]) for i in range(3)]
    linear = [np.array([0.0, c, c]) for c in (3.0, 5.0, 4.0)]
    linear[0][2] = y_cost
    differ = np.array([[0.0, 2.0, 2.0], [2.0, 0.0, 2.0], [2.0, 2.0, 0.0]])
    problem = _Milp(units, [0, 1, 2], linear, {(0, 1): differ, (1, 2): differ})
    rows = [{unit: np.array([10.0, 2.0, 2.0]) for unit in range(3)}]
    rows[0][0] = np.array([10.0, 2.0, y_holds])
    return problem, rows, [{cls: np.array([0, 2, 1]) for cls in range(3)}]


def _record_divisions(monkeypatch) -> list:
    """(the columns fixed, the mirrors used) at each node the division divides."""
    nodes = []
    divide = _Milp._divide

    def spy(self, *args):
        nodes.append((dict(args[8]), len(args[11]) if len(args) > 11 else 0))
        return divide(self, *args)

    monkeypatch.setattr(_Milp, "_divide", spy)
    return nodes


def test_a_plan_and_its_mirror_are_divided_on_once(monkeypatch):
    """The LP blends unit 0's ``x`` with its ``y``.  Without the swap both
    children are solved and divided; with it, ``y``'s child is not (its
    plans' mirrors are in ``x``'s), and the same optimum is proved."""
    nodes = _record_divisions(monkeypatch)
    problem, rows, _ = _mirrored_switches()
    answer = problem.relaxed(rows, 20.0, time_limit=30)
    without = list(nodes)
    nodes.clear()
    problem, rows, swaps = _mirrored_switches()
    problem.take_mirrors(swaps)
    assert len(problem.mirrors) == 1
    assert problem.relaxed(rows, 20.0, time_limit=30)[0][1] == answer[0][1] == 10.0
    assert answer[1]
    assert any(fixed.get(2) == 1.0 for fixed, _ in without)   # unit 0 on y, divided
    assert not any(fixed.get(2) == 1.0 for fixed, _ in nodes)
    assert len(nodes) < len(without)


def test_a_swap_the_costs_do_not_bear_out_is_not_kept():
    problem, _, swaps = _mirrored_switches(y_cost=3.5)
    problem.take_mirrors(swaps)
    assert problem.mirrors == []


def test_a_swap_a_memory_row_does_not_bear_out_is_not_used(monkeypatch):
    """Unit 0's ``y`` holds a byte more than its ``x``: the costs are the
    swap's, the row is not, and the division uses no mirror."""
    nodes = _record_divisions(monkeypatch)
    problem, rows, swaps = _mirrored_switches(y_holds=3.0)
    problem.take_mirrors(swaps)
    assert len(problem.mirrors) == 1
    (_, cost), proved = problem.relaxed(rows, 20.0, time_limit=30)
    assert proved and cost == 10.0
    assert nodes and all(used == 0 for _, used in nodes)


@pytest.mark.parametrize("mesh, mirrors", [("x=2,y=2", 1), ("x=2,y=4", 0)])
def test_only_axes_of_one_size_are_mirrors(mesh, mirrors):
    with make_context() as context:
        module = parse_module(_mlp_text(), "<test>", context)
        graph, _ = _read(module.operation, Mesh.from_string(mesh))
        search = Search(graph.search_graph(carried_pairs(*graph.entry_values())))
    assert len(search._problem()[0].mirrors) == mirrors


def test_the_lp_folded_by_its_mirrors_has_the_lps_bound_on_fewer_columns():
    """`_mirrored_switches`' LP, by hand: switching all three units alike
    saves 24 bytes for 3 + 5 + 4 = 12 (no neighbour differs), the cheapest
    byte saved; 10 must be, so the bound is 12 * 10 / 24 = 5.  Folded by
    the swap, one variable per column and its mirror, the LP has that
    bound, and its optimum unfolds to a point the whole LP's rows hold,
    the same under the swap."""
    problem, rows, swaps = _mirrored_switches()
    problem.take_mirrors(swaps)
    columns = [problem._columns(row) for row in rows]
    matrix, lower, upper = problem._with_rows(columns, 20.0)
    whole = problem._lp_with_rows(columns, 20.0)
    whole.run()
    folded, orbit = problem._folded(problem.objective, (matrix, lower, upper), problem.upper,
                                    problem.mirrors)
    folded.run()
    assert whole.getInfo().objective_function_value == pytest.approx(5.0)
    assert folded.getInfo().objective_function_value == pytest.approx(5.0)
    assert folded.getNumCol() < problem.variables
    assert folded.getNumRow() < matrix.shape[0]
    x = np.asarray(folded.getSolution().col_value)[orbit]
    held = matrix @ x
    assert np.all(held >= np.asarray(lower) - 1e-9) and np.all(held <= np.asarray(upper) + 1e-9)
    assert np.allclose(x[problem.mirrors[0]], x)


@pytest.mark.parametrize("y_holds, folds", [(2.0, True), (3.0, False)])
def test_the_lp_is_folded_only_where_its_memory_rows_are_mirrored(monkeypatch, y_holds, folds):
    """Unit 0's ``y`` holding a byte more than its ``x`` breaks the swap
    for the memory row: the LP is then solved whole.  Either way the
    optimum, units 0 and 1 switched alike (3 + 5 + 2), is proved."""
    folded = []
    fold = _Milp._folded

    def spy(self, *args, **more):
        folded.append(True)
        return fold(self, *args, **more)

    monkeypatch.setattr(_Milp, "_folded", spy)
    problem, rows, swaps = _mirrored_switches(y_holds=y_holds)
    problem.take_mirrors(swaps)
    (_, cost), proved = problem.relaxed(rows, 20.0, time_limit=30)
    assert proved and cost == 10.0
    assert bool(folded) == folds


class _SlowHighs:
    """A HiGHS instance whose every run first waits `seconds`."""

    def __init__(self, highs, seconds: float):
        self._highs, self._seconds = highs, seconds

    def run(self):
        time.sleep(self._seconds)
        return self._highs.run()

    def __getattr__(self, name):
        return getattr(self._highs, name)


def test_a_division_that_cannot_end_in_the_time_left_is_not_started(monkeypatch):
    """`_three_switches`' LP (5) is far under its plans (8 or more), so its
    rounding is divided, with time.  Made to take 1 s, the LP leaves less
    than that of a 1.5 s limit: the division, whose LPs are the LP again
    with columns fixed, is not started; the rounded plan comes back
    unproved, and the program says it ran out of time."""
    nodes = _record_divisions(monkeypatch)
    highs = _Milp._highs
    monkeypatch.setattr(_Milp, "_highs", staticmethod(lambda lp: _SlowHighs(highs(lp), 1.0)))
    problem, rows = _three_switches()
    best, proved = problem.relaxed(rows, 20.0, time_limit=1.5)
    assert best is not None and not proved
    assert problem.out_of_time
    assert problem.lp_seconds >= 1.0
    assert nodes == []


def test_a_layout_pinned_on_one_axis_tells_the_axes_apart():
    """``x`` split over ``a`` alone: a plan and its mirror no longer cost
    the same, and no swap is kept."""
    text = ss.annotate(_mlp_text(), "a=2,b=2", [(r"^x$", ("a",))])
    with make_context() as context:
        module = parse_module(text, "<test>", context)
        graph, _ = _read(module.operation, Mesh.from_string("a=2,b=2"))
        search = Search(graph.search_graph(carried_pairs(*graph.entry_values())))
    assert search._problem()[0].mirrors == []

@pytest.fixture
def undivided(monkeypatch):
    """Bounded LPs are not divided: the whole 0-1 program decides what the
    relaxation and its rounding leave unproved."""
    monkeypatch.setattr(program, "DIVIDE_DEPTH", 0)


def _record_whole_solves(monkeypatch) -> list:
    """The budgets of the 0-1 solves not restricted to an LP's support."""
    budgets = []
    solve = _Milp.solve

    def spy(self, memory_rows, budget, time_limit, *args, **kwargs):
        if kwargs.get("support") is None:
            budgets.append(budget)
        return solve(self, memory_rows, budget, time_limit, *args, **kwargs)

    monkeypatch.setattr(_Milp, "solve", spy)
    return budgets


def test_dividing_on_a_blended_class_proves_the_optimum(monkeypatch):
    """The LP's 5 is far under any plan's 8 or more, and its support's
    rounding does not prove itself.  Divided on unit 0 (every unit's
    choices differ by 8 held; the first is taken): switching it leaves one
    more switch to choose, 1 (5) or 2 (4 + 2 to differ from 0); keeping it
    leaves 1 and 2 both to switch (11).  The optimum, 0 and 1 at 8, is
    proved without the whole 0-1 program."""
    problem, rows = _three_switches()
    whole = _record_whole_solves(monkeypatch)
    assert problem.relaxed(rows, 20.0, time_limit=30) == (([1, 1, 0], 8.0), True)
    assert whole == []


def test_a_division_out_of_time_keeps_its_parent_s_bound():
    """Children whose LPs get no time to run bound nothing: the node keeps
    its own bound (the LP's 5), and no plan is found or proved."""
    problem, rows = _three_switches()
    columns = [problem._columns(row) for row in rows]
    highs = problem._lp_with_rows(columns, 20.0)
    held = np.zeros((1, problem.n_choice))
    cols, values = columns[0]
    held[0, cols[cols < problem.n_choice]] = values[cols < problem.n_choice]
    blend = np.zeros(problem.variables)
    blend[:problem.n_choice] = 0.5
    assert problem._divide(highs, lambda _highs: None, held, rows, 20.0,
                           time.perf_counter() + 30, blend, 5.0, {}, 4, None) == (None, 5.0)


def test_a_plan_the_relaxation_cannot_prove_comes_from_the_0_1_program(undivided):
    """The LP's 5 is far under any plan's 8 or more: undivided, the 0-1
    program decides."""
    problem, rows = _three_switches()
    _, proved = problem.relaxed(rows, 20.0, time_limit=30)
    assert not proved
    assert Search._within_gap(problem, rows, 20.0, time.perf_counter() + 30) == ([1, 1, 0], 8.0)
    # A budget below every plan is proved infeasible by the LP alone.
    assert problem.relaxed(rows, 5.0, time_limit=30) == (None, True)


def test_a_row_the_relaxation_s_plan_overflows_is_added_before_the_0_1_program(undivided):
    """The three units, with a second point where unit 0's switch holds 30
    more: the relaxation's plan is shown to `overflow`, which adds that
    row once, and the plan found respects both: 1 and 2 switch."""
    problem, rows = _three_switches()
    shown = []

    def overflow(strategies):
        shown.append(strategies)
        return {0: np.array([0.0, 30.0])} if len(shown) == 1 else None

    assert Search._within_gap(problem, rows, 20.0, time.perf_counter() + 30,
                              overflow) == ([0, 1, 1], 11.0)
    # The relaxation's first plan switched unit 0 (on any optimum's support,
    # 0 and 1 switch, or 0 and 2), which the added row rules out.
    assert shown[0][0] == 1


def test_a_rounded_plan_that_overflows_a_new_point_is_not_divided(monkeypatch):
    """The same overflow, the LP divided: its rounded plan (switching unit
    0) is shown before any division, and the division runs once, under
    both rows, for the plan that respects them."""
    problem, rows = _three_switches()
    shown, divided_under = [], []

    def overflow(strategies):
        shown.append(strategies)
        return {0: np.array([0.0, 30.0])} if len(shown) == 1 else None

    divide = _Milp._divide

    def spy(self, highs, run, held, memory_rows, *args):
        divided_under.append(len(memory_rows))
        return divide(self, highs, run, held, memory_rows, *args)

    monkeypatch.setattr(_Milp, "_divide", spy)
    assert Search._within_gap(problem, rows, 20.0, time.perf_counter() + 30,
                              overflow) == ([0, 1, 1], 11.0)
    assert shown[0][0] == 1
    assert divided_under and set(divided_under) == {2}


def test_the_rounding_is_built_on_the_columns_the_lp_leaves_open():
    """Unit 0 switched whole, unit 1 blended, unit 2 kept whole: the
    rounding decides unit 1's two choices (columns 2, 3) and the pair
    variables of units 0 and 1 that go with unit 0's switch (its row of
    the 2x2 block after the six choice columns: 6 + 2 + 0 and 6 + 2 + 1);
    unit 0's switch (1) and unit 2's keep (4) are fixed at one."""
    problem, rows = _three_switches()
    x = np.zeros(problem.variables)
    x[[1, 4]] = 1.0
    x[[2, 3]] = 0.5
    open_columns, ones = problem._open_on(x)
    assert open_columns.tolist() == [2, 3, 8, 9]
    assert ones.tolist() == [1, 4]
    # Within 20 held, unit 1 must switch too: 3 + 5, and no pair cost.
    memory = [problem._columns(row) for row in rows]
    assert problem._on_support(x, memory, 20.0, time.perf_counter() + 30) == ([1, 1, 0], 8.0)


def test_a_tight_relaxation_proves_its_support_s_plan():
    """With 250 that every plan pays, the LP's 255 is within the gap of the
    plans switching 0 and 1 (258) or 0 and 2 (259), not of 1 and 2 (261).
    Every optimum of the LP switches 0 and 1 alike (apart, they pay 2
    more), so on its support the 0-1 program finds one of the first two,
    and proves it."""
    problem, rows = _three_switches(ballast=250.0)
    (strategies, cost), proved = problem.relaxed(rows, 20.0, time_limit=30)
    assert proved
    assert sum(strategies[:3]) == 2
    assert (strategies[:3], cost) in (([1, 1, 0], 258.0), ([1, 0, 1], 259.0))


def test_a_copy_is_charged_on_the_pair_of_strategies_that_makes_it():
    """A source that prefers layout B and a reader that prefers A: apart
    they cost 3 to reshard and hold a copy of 8; together, in either
    layout, 5.  Each holds 10.  Unbounded, they differ; within 25 bytes,
    only a plan without the copy fits, which neither unit's own bytes
    tell: the copy is charged on the pair's variables."""
    units = [_Unit("value", 0, [0, 1]), _Unit("value", 1, [0, 1])]
    linear = [np.array([5.0, 0.0]), np.array([0.0, 5.0])]
    apart = np.array([[0.0, 3.0], [3.0, 0.0]])
    problem = _Milp(units, [0, 1], linear, {(0, 1): apart})
    held = {0: np.array([10.0, 10.0]), 1: np.array([10.0, 10.0])}
    rows = [{**held, (0, 1): np.array([[0.0, 8.0], [8.0, 0.0]])}]
    assert Search._within_gap(problem, [], None, time.perf_counter() + 30) == ([1, 0], 3.0)
    strategies, cost = Search._within_gap(problem, rows, 25.0, time.perf_counter() + 30)
    assert strategies[0] == strategies[1] and cost == 5.0
    # Without the pair's charge, the row cannot see the copy.
    assert Search._within_gap(problem, [held], 25.0, time.perf_counter() + 30) == ([1, 0], 3.0)


def test_a_copy_within_one_class_is_charged_on_its_strategies():
    """Two units of one class (two layers alike) choose alike: a read of one
    by the other copies only under strategy 1, the cheaper, and within 25
    bytes that copy rules it out."""
    units = [_Unit("value", 0, [0, 1]), _Unit("value", 1, [0, 1])]
    problem = _Milp(units, [0, 0], [np.array([2.0, 0.0]), np.array([2.0, 0.0])], {})
    held = {0: np.array([10.0, 10.0]), 1: np.array([10.0, 10.0])}
    rows = [{**held, (0, 1): np.array([[0.0, 8.0], [8.0, 8.0]])}]
    assert Search._within_gap(problem, [held], 25.0, time.perf_counter() + 30) == ([1, 1], 0.0)
    assert Search._within_gap(problem, rows, 25.0, time.perf_counter() + 30) == ([0, 0], 4.0)


def _record_starts(monkeypatch) -> list:
    """The starts the 0-1 solves are given, as columns (a solve without one
    records nothing)."""
    starts = []
    solved = _Milp._highs_milp

    def spy(*args):
        if args[-1] is not None:
            starts.append(args[-1])
        return solved(*args)

    monkeypatch.setattr(_Milp, "_highs_milp", staticmethod(spy))
    return starts


def test_a_frustrated_cycle_is_decided_by_the_0_1_program_from_the_lp_s_plan(monkeypatch):
    """Three units in a cycle, each pair paying 4 to choose alike, unit i
    paying i + 1 for strategy 1.  Some pair must choose alike: the optimum
    is (1, 0, 0), 1 + 4.  The LP holds every unit half in each strategy and
    pays no pair (3 in all), so nothing is proved before the 0-1 program,
    which starts from the relaxation's plan and must still find the optimum;
    so must a start from the dearest plan (all 0: 12)."""
    units = [_Unit("value", i, [0, 1]) for i in range(3)]
    linear = [np.array([0.0, i + 1.0]) for i in range(3)]
    alike = np.array([[4.0, 0.0], [0.0, 4.0]])
    problem = _Milp(units, [0, 1, 2], linear, {(0, 1): alike, (1, 2): alike, (0, 2): alike})
    (relaxed_plan, _), proved = problem.relaxed([], None, time_limit=30)
    assert not proved
    starts = _record_starts(monkeypatch)
    assert Search._within_gap(problem, [], None, time.perf_counter() + 30) == ([1, 0, 0], 5.0)
    assert len(starts) == 1
    assert np.array_equal(starts[0], problem._point(relaxed_plan, problem.variables))
    assert problem.solve([], None, 30, start=[0, 0, 0]) == ([1, 0, 0], 5.0)
    # A start is the plan's columns: its choices and the pair of each edge.
    assert problem.objective @ problem._point([0, 1, 0], problem.variables) == 6.0
    assert problem.objective @ problem._point([0, 0, 0], problem.variables) == 12.0


def test_a_plan_that_fits_is_where_the_bounded_0_1_program_starts(monkeypatch, undivided):
    """The three units within 20: switching 0 and 2 (9, holding 14) fits, so
    it may be the 0-1 program's start, and the optimum (0 and 1, 8) is
    still found from it; a bounded program is otherwise started cold."""
    problem, rows = _three_switches()
    starts = _record_starts(monkeypatch)
    assert Search._within_gap(problem, rows, 20.0, time.perf_counter() + 30) == ([1, 1, 0], 8.0)
    assert starts == []
    assert Search._within_gap(problem, rows, 20.0, time.perf_counter() + 30,
                              start=[1, 0, 1]) == ([1, 1, 0], 8.0)
    assert len(starts) == 1
    assert np.array_equal(starts[0], problem._point([1, 0, 1], problem.variables))


def _row_bytes(problem: _Milp, row: dict, strategies: list[int]) -> float:
    """A memory row's bytes under a plan, through the program's columns."""
    chosen = dict(zip(problem.classes, strategies))
    x = np.zeros(problem.variables)
    for cls, start in problem.offsets.items():
        x[start + chosen[cls]] = 1
    for (a, b), (base, row_group, col_group, n_cols) in problem.pairs.items():
        x[base + row_group[chosen[a]] * n_cols + col_group[chosen[b]]] = 1
    columns, values = problem._columns(row)
    return float(values @ x[columns])


@pytest.fixture(scope="module")
def demo_step_search():
    """The demo's training step searched without a budget, then within 80%
    of its cheapest plan's memory: (the search, both plans, the second's
    strategies).  Searching it takes half a minute: tests share it."""
    params, batch = demo_model.example_args(demo_model.Config(n_layers=1))
    text = ss.export(demo_model.train_step, params, batch)
    with make_context() as context:
        module = parse_module(text, "<test>", context)
        graph, mesh = _read(module.operation, Mesh.from_string("data=4,model=2"))
        search = Search(graph.search_graph(carried_pairs(*graph.entry_values())))
    free = search.solve(None)
    tight = search.solve(0.8 * free.peak_memory)
    return search, free, tight, search._reference


def test_memory_rows_are_exact_at_their_reference_plan(demo_step_search):
    """The demo's training step, its cheapest plan and one within 80% of
    that plan's memory: a row linearized around a plan charges that plan
    what the liveness sweep finds live at its point, copies and all, so
    the rows' largest is the plan's peak before temporaries wait in the
    results' allocations, and no less than its peak after."""
    search, _free, _tight, bounded = demo_step_search
    problem, memory, _ = search._problem()
    points = sorted({t for *_, born, last in memory for t in (born, last)})
    copies = 0
    for strategies in (search._unbounded[0], bounded):
        copies += sum(1 for _ in search._copies(strategies))
        peak, _ = search._peak(memory, strategies, points, lend=False)
        live = [_row_bytes(problem, search._memory_row(memory, t, strategies), strategies)
                for t in points]
        assert max(live) == pytest.approx(peak)
        assert search._peak(memory, strategies, points)[0] <= peak
    assert copies   # the plans reshard: the rows charge copies


def test_a_budget_opened_above_the_last_plan_starts_from_it(demo_step_search, monkeypatch):
    """Then within 90%: the plan found within 80% fits, so the solve may
    start from it, and finds nothing dearer."""
    search, free, tight, bounded = demo_step_search
    starts = []
    within_gap = Search._within_gap

    def spy(*args, start=None, **more):
        starts.append(start)
        return within_gap(*args, start=start, **more)

    monkeypatch.setattr(Search, "_within_gap", staticmethod(spy))
    search._reference = bounded
    looser = search.solve(0.9 * free.peak_memory)
    assert tight.peak_memory <= 0.8 * free.peak_memory < 0.9 * free.peak_memory
    assert starts[0] == bounded   # the first round starts from it; later ones from their own
    assert looser.cost <= tight.cost


def test_repeated_layers_share_one_problem():
    """Depth does not grow the program the solver sees, once the stack has
    a layer between its first and its last (whose edges differ)."""
    sizes = []
    for depth in (3, 6):
        params, batch = demo_model.example_args(demo_model.Config(n_layers=depth))
        result, errors, _ = _plan(ss.export(demo_model.train_step, params, batch),
                                  mesh="data=4,model=2")
        assert not errors
        sizes.append((result.plan.variables, result.plan.unit_classes))
        units = result.plan.units
    assert sizes[0] == sizes[1]
    assert units > sizes[1][1]   # the deeper step has more units than classes


@pytest.mark.parametrize("text, expected", [
    ("2GiB", 2 * 2**30), ("512MB", 512e6), ("1000", 1000.0), ("1.5KiB", 1536.0), (None, None)])
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["two gigs", "-5", "0", "3PB"])
def test_parse_bytes_refuses(text):
    with pytest.raises(ValueError):
        parse_bytes(text)


def test_axes_of_one_dim_are_taken_in_either_order():
    """Which axis is major on a dim decides which devices hold which rows.
    With x's rows split `model`-major (as expert parallelism splits its
    tokens) and the result wanted the same way, the row-wise matmul moves
    nothing; a search that only knew the mesh's order would move x twice."""
    rows = (("model", "data"),)
    text = ss.annotate(_mlp_text(), "data=4,model=2",
                       [(r"^x$", rows), (r"^result$", rows), (r"^w[12]$", ())])
    result, errors, planned = _plan(text)
    assert not errors
    assert result.plan.cost == pytest.approx(0, abs=1e-3)
    leaves = [np.random.default_rng(0).standard_normal(s).astype(np.float32)
              for s in ((BATCH, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, HIDDEN))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        partitioned = ss.partition(planned)
    assert "all_to_all" not in partitioned and "collective_permute" not in partitioned
    got, = ss.run(partitioned, leaves)
    want = np.asarray(ss.run_single_device(_mlp_text(), leaves)[0])
    # Sums of 512 products of order 20: compared at float32's precision of them.
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4,
                               atol=1e-5 * np.abs(want).max())


def test_an_uneven_pin_is_priced_for_its_own_shape():
    """The search prices a reshard once for all tensors the mesh divides
    alike, which is exact for even splits only.  Rows 7 and 9 split over 2
    devices pad differently (4 and 5 rows a device), so each is gathered at
    its own price."""
    from stablehlo_spmd.reshard import plan as reshard_plan
    from stablehlo_spmd.sharding import Sharding

    text = """
    func.func @main(%a: tensor<7x16xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"},
                    %b: tensor<9x16xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"})
        -> (tensor<7x16xf32> {mhlo.sharding = "{replicated}"},
            tensor<9x16xf32> {mhlo.sharding = "{replicated}"}) {
      %0 = stablehlo.negate %a : tensor<7x16xf32>
      %1 = stablehlo.negate %b : tensor<9x16xf32>
      return %0, %1 : tensor<7x16xf32>, tensor<9x16xf32>
    }"""
    result, errors, _ = _plan(text, mesh="x=2")
    assert not errors
    mesh = Mesh.from_string("x=2")
    split, whole = Sharding(mesh, (("x",), ())), Sharding(mesh, ((), ()))
    want = sum(step.bytes_per_device for rows in (7, 9)
               for step in reshard_plan(split, whole, (rows, 16), 4))
    assert result.plan.cost == pytest.approx(want)


def test_an_unknown_target_is_refused_alike_by_the_api_and_the_cli(tmp_path):
    with pytest.raises(ss.SpmdError, match="unknown target 'npu'"):
        ss.auto_shard(_mlp_text(), "x=8", target="npu", measure_memory=False)
    _assert_cli_refuses(tmp_path, "unknown target 'npu'", "1MiB", "--target", "npu")



def test_a_search_the_time_limit_ends_says_so(monkeypatch):
    """A solve that reaches the deadline (here one made to: the first solve
    sleeps past it) may have stopped before proving its plan; the plan says
    so, and the pass warns, since another run may find another plan."""
    within_gap = Search._within_gap

    def slow(*args, **more):
        found = within_gap(*args, **more)
        time.sleep(0.6)
        return found

    monkeypatch.setattr(Search, "_within_gap", staticmethod(slow))
    with pytest.warns(ss.SpmdWarning, match="time limit of 0.5 s ended the search"):
        planned = ss.auto_shard(_mlp_text(), "x=8", time_limit=0.5, measure_memory=False)
    assert "mhlo.sharding" in planned
    monkeypatch.setattr(Search, "_within_gap", staticmethod(within_gap))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ss.SpmdWarning)
        ss.auto_shard(_mlp_text(), "x=8", time_limit=60, measure_memory=False)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_search_leaves_the_cyclic_collector_as_it_found_it(enabled):
    """The pass pauses Python's cyclic collector while it searches, and
    gives it back as it was: after a plan, and after an error."""
    import gc

    from stablehlo_spmd.passes import auto_shard as auto_shard_pass

    paused = []
    read = auto_shard_pass._read

    def spy(*args):
        paused.append(gc.isenabled())
        return read(*args)

    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(auto_shard_pass, "_read", spy)
            assert "mhlo.sharding" in ss.auto_shard(_mlp_text(), "x=8", measure_memory=False)
            assert gc.isenabled() == enabled
            with pytest.raises(SpmdError, match="memory budget"):
                ss.auto_shard(_mlp_text(), "x=8", memory_budget=1, measure_memory=False)
            assert gc.isenabled() == enabled
    finally:
        (gc.enable if was else gc.disable)()
    assert paused and not any(paused)


def test_the_time_limit_counts_reading_the_program(monkeypatch):
    """Reading the program is part of the search its limit bounds: made to
    take the whole limit, it leaves the solver none, and the search says
    it found no plan in time, where a fresh limit for the solver would
    have found this small one's plan at once."""
    from stablehlo_spmd.passes import auto_shard as auto_shard_pass

    read = auto_shard_pass._read

    def slow(*args):
        time.sleep(1.0)
        return read(*args)

    monkeypatch.setattr(auto_shard_pass, "_read", slow)
    with pytest.raises(SpmdError, match="time limit"):
        ss.auto_shard(_mlp_text(), "x=8", time_limit=1.0, measure_memory=False)
    assert "mhlo.sharding" in ss.auto_shard(_mlp_text(), "x=8", time_limit=60,
                                            measure_memory=False)


@pytest.mark.parametrize("proved", [False, True])
def test_a_least_memory_it_did_not_prove_never_says_no_plan_fits(monkeypatch, proved):
    """Where the relaxation rounds to no plan under a budget, the least-memory
    plan is asked first.  One over the budget ends the search only where
    the least is proved (a bound over the budget); unproved (out of time,
    as on Mixtral's step, whose 121 GiB was twice a plan the same search
    found at 60 GiB), the 0-1 program still looks for a plan that fits.
    (Holding every value: a search that may recompute would free some.)"""
    with make_context() as context:
        module = parse_module(_mlp_text(), "<test>", context)
        graph, _ = _read(module.operation, Mesh.from_string("x=8"))
        search = Search(graph.search_graph(carried_pairs(*graph.entry_values())),
                        recompute=False)
    free = search.solve(None)
    budget = 0.7 * free.peak_memory
    monkeypatch.setattr(_Milp, "relaxed", lambda self, rows, *a, **k: (None, False) if rows
                        else _Milp.__dict__["relaxed"](self, rows, *a, **k))
    too_much = 10 * free.peak_memory
    monkeypatch.setattr(Search, "_smallest_peak", lambda self, *a, **k:
                        (too_much, [], too_much if proved else 0.0))
    if proved:
        with pytest.raises(auto_sharding.InfeasibleBudget, match="no plan fits"):
            search.solve(budget)
    else:
        assert search.solve(budget).peak_memory <= budget


def test_a_0_1_plan_dearer_than_the_relaxations_rounding_is_not_taken(monkeypatch):
    """Stopped by its time limit, the 0-1 program may return a plan dearer
    than the one the relaxation rounded to, which fits the same rows
    (Mixtral's step at 80 GiB: 1,076 GiB moved against 40 GiB): the
    cheaper of the two is the answer."""
    with make_context() as context:
        module = parse_module(_mlp_text(), "<test>", context)
        graph, _ = _read(module.operation, Mesh.from_string("x=8"))
        search = Search(graph.search_graph(carried_pairs(*graph.entry_values())))
    free = search.solve(None)
    relaxed = _Milp.__dict__["relaxed"]
    rounded = []

    def unproved(self, rows, *args, **kwargs):
        best, proved = relaxed(self, rows, *args, **kwargs)
        if rows and best is not None:
            rounded.append(best)
            return best, False
        return best, proved

    def dearer(self, rows, budget, time_limit, minimize_peak=False, **more):
        strategies, cost = rounded[-1]
        return strategies, 10 * cost

    monkeypatch.setattr(_Milp, "relaxed", unproved)
    monkeypatch.setattr(_Milp, "solve", dearer)
    plan = search.solve(0.7 * free.peak_memory)
    assert rounded and plan.peak_memory <= 0.7 * free.peak_memory
    assert plan.cost == pytest.approx(search._objective(rounded[-1][0]))
    assert plan.cost < 2 * rounded[-1][1]


def test_a_scaled_strategy_is_never_another_strategys_made_at_the_same_address():
    """Strategies made for one node and dropped (a follower's unwritable
    layout) leave their address to the next: the scaled copy kept for the
    first must not be handed to the second, whose rule has other operands
    (an IndexError in Mixtral's training step, one run in a few)."""
    with make_context() as context:
        module = parse_module(_mlp_text(), "<test>", context)
        graph, _ = _read(module.operation, Mesh.from_string("x=8"))
        search = Search(graph.search_graph(carried_pairs(*graph.entry_values())))
    by_operands = {s.operands: s for strategies in search.node_strategy.values()
                   for s in strategies}
    assert len(by_operands) >= 2
    unlike = list(by_operands.values())[:2]
    for step in range(200):
        made = dataclasses.replace(unlike[step % 2], cost=math.inf)
        assert search._scaled(made, 4).operands == made.operands
        del made


def test_a_search_out_of_time_names_the_least_found_and_the_floor(monkeypatch):
    """Over the floor (262 KiB: at the ReLU, x, w1, w2, the first product
    and the ReLU's result, each an eighth; the result of the step is not
    written yet), with the 0-1 program and the least-memory
    program out of time: the error names the least memory found, not
    proved, and the floor no plan goes under."""
    with make_context() as context:
        module = parse_module(_mlp_text(), "<test>", context)
        graph, _ = _read(module.operation, Mesh.from_string("x=8"))
        search = Search(graph.search_graph(carried_pairs(*graph.entry_values())))
    solve, relaxed = _Milp.__dict__["solve"], _Milp.__dict__["relaxed"]

    def out_of_time(self, rows, budget, time_limit, minimize_peak=False, **more):
        if not minimize_peak and rows:
            raise auto_sharding.SearchTimeLimit("out of time")
        return solve(self, rows, budget, time_limit, minimize_peak=minimize_peak, **more)

    monkeypatch.setattr(_Milp, "solve", out_of_time)
    monkeypatch.setattr(_Milp, "relaxed", lambda self, rows, *a, **k: (None, False) if rows
                        else relaxed(self, rows, *a, **k))
    # The least-memory program, out of time too: a plan of 300 KiB, unproved.
    monkeypatch.setattr(Search, "_smallest_peak", lambda self, *a, **k:
                        (300 * 1024, [], self.memory_floor))
    with pytest.raises(auto_sharding.SearchTimeLimit,
                       match=r"least memory found is 300\.00 KiB, not proved the least "
                             r"\(no plan holds less than 262\.00 KiB\)"):
        search.solve(270 * 1024)


# ------------------------------------------------------------------ seconds on named hardware

def test_a_profile_runs_an_axis_within_a_node_over_its_fast_link():
    """H100s sit 8 to a node: on data=8,model=8 each model group is one node
    (NVLink) and each data group spans eight (InfiniBand); on data=2,model=4
    all of it is one node.  A TPU slice holds every device."""
    h100, tpu = hardware.profile("h100"), hardware.profile("tpu-v5p")
    mesh = Mesh.from_string("data=8,model=8")
    assert h100.link(mesh, "model") == h100.near and h100.link(mesh, "data") == h100.far
    small = Mesh.from_string("data=2,model=4")
    assert h100.link(small, "data") == h100.near == h100.link(small, "model")
    # The same axes over devices dealt the other way round: data within a node.
    swapped = Mesh.from_string("data=8,model=8", device_ids=[
        8 * (i % 8) + i // 8 for i in range(64)])
    assert h100.link(swapped, "data") == h100.near and h100.link(swapped, "model") == h100.far
    assert tpu.link(mesh, "data") == tpu.near == tpu.link(mesh, "model")


def test_a_collective_over_two_axes_pays_the_slower_link_and_the_longer_latency():
    model = hardware.profile("h100").cost_model(Mesh.from_string("data=8,model=8"))
    step = dataclasses.make_dataclass("Step", ["bytes_per_device", "axes"])
    fixed, moved = model.parts([step(1e9, ("data", "model")), step(1e9, ("model",))])
    assert fixed == pytest.approx(25e-6 + 10e-6)
    assert moved == pytest.approx(1e9 / 50e9 + 1e9 / 450e9)


def test_seconds_on_a_profile_count_collectives_and_arithmetic_with_the_bytes_beside():
    """Megatron's MLP pinned on x=8 (one H100 node): one all-reduce of the
    8x512 f32 output, 2 * 16 KiB * 7/8 bytes, over NVLink (450 GB/s, 10 us),
    and two 8x512x512 products split 8 ways at 989 TFLOP/s."""
    rules = [(r"^x$", ()), (r"^w1$", (None, "x")), (r"^w2$", ("x", None)), (r"^result$", ())]
    text = ss.annotate(_mlp_text(), "x=8", rules)
    result, errors, _ = _plan(text, hardware="h100")
    assert not errors
    moved = 2 * ACTIVATION_BYTES * 7 / 8
    compute = 2 * (2 * BATCH * HIDDEN * HIDDEN / 8) / 989e12
    assert result.plan.cost_in_seconds
    assert result.plan.moved_bytes == pytest.approx(moved)
    assert result.plan.compute_seconds == pytest.approx(compute)
    assert result.plan.cost == pytest.approx(10e-6 + moved / 450e9 + compute)
    in_bytes, _, _ = _plan(text)
    assert in_bytes.plan.cost == pytest.approx(moved) and in_bytes.plan.moved_bytes is None
    assert "of collectives moving 28.00 KiB per device" in format_table(result)


def test_bandwidth_latency_and_flops_override_the_profile():
    rules = [(r"^x$", ()), (r"^w1$", (None, "x")), (r"^w2$", ("x", None)), (r"^result$", ())]
    text = ss.annotate(_mlp_text(), "x=8", rules)
    result, errors, _ = _plan(text, hardware="h100", bandwidth="x=1e9", latency=1e-3,
                              flops=1e12)
    assert not errors
    moved = 2 * ACTIVATION_BYTES * 7 / 8
    compute = 2 * (2 * BATCH * HIDDEN * HIDDEN / 8) / 1e12
    assert result.plan.cost == pytest.approx(1e-3 + moved / 1e9 + compute)
    _, errors, _ = _plan(text, hardware="a100")
    assert any("unknown hardware 'a100'" in e for e in errors)
