"""``spmd-rematerialize``: every layer recomputed in the backward, computing what the step computes.

The step is a JAX training step of residual MLP layers with no
``jax.checkpoint``; the pass must give it ``jax.checkpoint``'s form: one
optimization barrier per recomputed segment, the recomputed ops reading
through it, and the backward reading the recomputed values.  Numerics are
held against the unchanged step on one device, and partitioned.
"""

import re
import warnings

import jax
import numpy as np
import pytest

import residual_mlp
import stablehlo_spmd as ss
from stablehlo_spmd.errors import SpmdError
from stablehlo_spmd.passes.rematerialize import RematerializePass
from stablehlo_spmd.pipeline import Pipeline


def _arguments():
    return residual_mlp.arguments(layers=4, batch=16, width=32, ffn=64, seed=1)


@pytest.mark.parametrize("policy, tanh_again, products_again", [
    # Full: each of the 4 layers' tanh runs again, and the two products
    # feeding what its backward reads (x @ w1, x @ w2).
    ("full", 4, 8),
    # Minimal: the projections' results are kept; only the tanh runs again.
    ("minimal", 4, 0),
])
def test_every_layer_is_recomputed_behind_a_barrier(policy, tanh_again, products_again):
    params, x = _arguments()
    text = ss.export(residual_mlp.step, params, x)
    out = ss.run_passes(text, Pipeline((RematerializePass(policy=policy),)))
    barriers = out.count("stablehlo.optimization_barrier")
    assert barriers >= 4
    assert out.count("stablehlo.tanh") == text.count("stablehlo.tanh") + tanh_again
    assert out.count("stablehlo.dot_general") == \
        text.count("stablehlo.dot_general") + products_again
    # Each recomputed tanh reads the barrier's results (through its products).
    for line in out.splitlines():
        if "stablehlo.optimization_barrier" in line:
            assert re.search(r"%\w+:\d+ = stablehlo\.optimization_barrier", line)
    leaves = jax.tree_util.tree_leaves((params, x))
    want = ss.run_single_device(text, leaves)
    for got, expected in zip(ss.run_single_device(out, leaves), want):
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-6, atol=1e-7)
    rules = [(r"w[12]'\]$", (None, "model")), (r"w3'\]$", ("model", None)),
             (r"^x$", ("data", None))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        partitioned = ss.partition(out, "data=4,model=2", rules)
    # The recomputation survives partitioning and its cse: nothing merged it back.
    assert partitioned.count("stablehlo.tanh") == out.count("stablehlo.tanh")
    assert "all_gather" not in partitioned   # the barrier keeps each weight's split
    for got, expected in zip(ss.run(partitioned, leaves), want):
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-5, atol=1e-6)


def test_an_unknown_policy_is_refused():
    params, x = _arguments()
    with pytest.raises(SpmdError, match="unknown policy 'some'"):
        ss.run_passes(ss.export(residual_mlp.step, params, x),
                      "builtin.module(spmd-rematerialize{policy=some})")
