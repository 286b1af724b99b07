"""auto_sharding/remat.py: what a training step can recompute, and the search choosing it.

The programs are JAX training steps of residual MLP layers, with nothing
recomputed by the user; what the analysis finds is checked against the
program's structure counted by hand, and what the search chooses against
the budget it was given and against one device.
"""

import math
import warnings

import jax
import numpy as np
import pytest

import residual_mlp
import stablehlo_spmd as ss
from stablehlo_spmd import diagnostics
from stablehlo_spmd.auto_sharding.remat import find_layers
from stablehlo_spmd.collective_bytes import emitted_collectives, total_bytes
from stablehlo_spmd.ir import make_context, parse_module, print_module
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.passes.auto_shard import AutoShardPass, auto_shard_module, format_table
from stablehlo_spmd.passes.propagate import ModuleGraph

WIDTH, FFN, BATCH, LAYERS = 64, 256, 1024, 6


def _arguments(layers=LAYERS, batch=BATCH):
    return residual_mlp.arguments(layers, batch, WIDTH, FFN)


def _layers(text):
    with make_context() as context:
        module = parse_module(text, "<test>", context)
        graph = ModuleGraph.build(module.operation, Mesh((0,), (1,), ("_",)))
        nbytes = [math.prod(s) * b for s, b in zip(graph.shapes, graph.element_bytes)]
        arguments = {index for _, index in graph.entry_values()[0]}
        return graph, find_layers(graph.nodes, graph.shapes, nbytes, arguments)


def test_the_layers_of_an_unrolled_step_are_found_from_the_cut_alone():
    """Between two layers only the residual stream (BATCH x WIDTH) is still
    read later; inside one, the products are too.  The forward is cut there,
    and the layers after the first (whose input is an argument, so its cut
    differs) are copies of one class.  Each residual-layer segment frees what
    its backward reads: tanh(x @ w1) and the factor its derivative takes
    (jax's jvp of tanh computes 1 - tanh(.)**2 in the forward), x @ w2, and
    their product h (the backward of x + h @ w3 reads it), but not the
    residual stream, which the next layer reads too."""
    params, x = _arguments(layers=4, batch=16)
    graph, layers = _layers(ss.export(residual_mlp.step, params, x))
    shapes = graph.shapes
    copies = max(layers.classes.values(), key=len)
    assert len(copies) >= 2
    segment = layers.segments[copies[0]]
    assert sorted(shapes[v] for v in segment.residuals) == [(16, FFN)] * 4
    # The boundary is the loss: every forward op comes before it.
    assert all(s.end <= layers.boundary for s in layers.segments)
    full = layers.recomputation(graph.nodes, copies[0], "full")
    minimal = layers.recomputation(graph.nodes, copies[0], "minimal")
    labels = [graph.nodes[i].label for i in full.nodes]
    assert labels.count("stablehlo.dot_general") == 2 and "stablehlo.tanh" in labels
    # "minimal" keeps the two projections and recomputes the tanh and the product.
    kept = [graph.nodes[i].label for i in minimal.nodes]
    assert "stablehlo.dot_general" not in kept and "stablehlo.tanh" in kept
    assert minimal.flops == 0 and full.flops == 2 * 2 * 16 * WIDTH * FFN
    assert minimal.at == full.at > layers.boundary


def _planned(text, budget, mesh="x=8"):
    engine = diagnostics.DiagnosticEngine()
    with make_context() as context, diagnostics.collecting(engine):
        module = parse_module(text, "<test>", context)
        result = auto_shard_module(module.operation, AutoShardPass(
            mesh=mesh, memory_budget=budget, target="cpu"))
        errors = [str(d) for d in engine.diagnostics if d.severity == "error"]
        return result, errors, print_module(module, debug_info=True)


def test_a_budget_no_plan_fits_holding_every_residual_is_met_by_recomputing():
    """At half the cheapest plan's peak, no plan holds every residual (its
    floor is over the budget); the search recomputes layers in the backward,
    and the plan it returns fits by its estimate and computes what one
    device computes."""
    params, x = _arguments()
    text = ss.export(residual_mlp.step, params, x)
    free, errors, _ = _planned(text, "")
    assert not errors and not free.plan.recomputations
    budget = int(0.5 * free.plan.peak_memory)
    result, errors, planned = _planned(text, str(budget))
    assert not errors
    plan = result.plan
    assert plan.recomputations and plan.peak_memory <= budget
    assert plan.cost == pytest.approx(free.plan.cost + plan.recompute_cost, rel=0.5)
    assert "recomputes" in format_table(result)
    assert planned.count("stablehlo.optimization_barrier") == len(plan.recomputations)
    leaves = jax.tree_util.tree_leaves((params, x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        partitioned = ss.partition(planned)
    for got, want in zip(ss.run(partitioned, leaves), ss.run_single_device(text, leaves)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


def test_a_budget_only_the_least_memory_plan_fits_is_met():
    """At 30% of the cheapest plan's peak, recomputing every layer, the
    memory rows (which bound a plan from above) cut off every plan, and the
    least-memory search finds one that fits: that plan is the answer, not a
    refusal naming a smaller peak than the budget.  Under the memory
    floor, the refusal names the floor and the least plan found."""
    params, x = _arguments()
    text = ss.export(residual_mlp.step, params, x)
    free, _, _ = _planned(text, "")
    budget = int(0.3 * free.plan.peak_memory)
    result, errors, _ = _planned(text, str(budget))
    assert not errors
    assert result.plan.recomputations and result.plan.peak_memory <= budget
    _, errors, _ = _planned(text, str(int(0.15 * free.plan.peak_memory)))
    assert len(errors) == 1
    assert "even recomputing" in errors[0] and "no plan holds less than" in errors[0]


def test_a_search_that_may_not_recompute_refuses_the_same_budget():
    params, x = _arguments()
    text = ss.export(residual_mlp.step, params, x)
    free, _, _ = _planned(text, "")
    budget = int(0.5 * free.plan.peak_memory)
    from stablehlo_spmd.auto_sharding import Search
    from stablehlo_spmd.passes.auto_shard import _read, carried_pairs
    with make_context() as context:
        module = parse_module(text, "<test>", context)
        graph, _ = _read(module.operation, Mesh.from_string("x=8"))
        search = Search(graph.search_graph(carried_pairs(*graph.entry_values())),
                        recompute=False)
    with pytest.raises(ss.SpmdError, match="no plan fits"):
        search.solve(budget)


def test_a_recomputation_is_priced_at_what_the_partitioner_emits_for_it(monkeypatch):
    """Each layer's weights split over both axes, its last product partial
    over ``data`` until the residual add sums it: under a budget that makes
    the search recompute every layer, the recomputed forward gathers the
    layer's two weights again behind its barrier.  The copy whose segment
    starts at the previous layer's residual add reads the sum the forward
    made, which its barrier carries: it pays no second all-reduce.  The
    search's price of the recomputations is what the partitioned program
    moves beyond the same plan written without them."""
    params, x = residual_mlp.arguments(LAYERS, 2048, 512, 2048)
    text = ss.export(residual_mlp.step, params, x)
    free, errors, _ = _planned(text, "", mesh="data=4,model=2")
    assert not errors
    budget = str(int(0.6 * free.plan.peak_memory))
    result, errors, planned = _planned(text, budget, mesh="data=4,model=2")
    assert not errors and len(result.plan.recomputations) == LAYERS
    monkeypatch.setattr("stablehlo_spmd.passes.auto_shard.rematerialize",
                        lambda graph, recomputations: None)
    again, errors, unrecomputed = _planned(text, budget, mesh="data=4,model=2")
    assert not errors and again.plan.recomputations == result.plan.recomputations
    assert "optimization_barrier" not in unrecomputed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        moved = [total_bytes(emitted_collectives(ss.partition(program), 8))
                 for program in (planned, unrecomputed)]
    assert result.plan.recompute_cost > 0
    assert moved[0] - moved[1] == pytest.approx(result.plan.recompute_cost, rel=0.01)
