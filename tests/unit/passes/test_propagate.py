"""Propagation on a 2-D (data x model) Megatron transformer training step.

Only the parameters and the batch are annotated (Megatron's layout: Q/K/V
and the MLP's first weight column-sharded on `model`, the output
projections row-sharded, embedding and unembedding vocab-parallel, tokens
batch-sharded on `data`).  A careful
engineer would then expect, and this test asserts from the shapes alone:

* every attention score tensor [batch, heads, q, k] has heads on `model`
  and batch on `data`;
* every MLP hidden activation [batch, seq, d_ff] has d_ff on `model` and
  batch on `data`;
* every updated parameter (``result[0][...]``) is sharded exactly like the
  parameter it replaces, i.e. the gradients are sharded like their
  parameters.
"""

import re

import pytest

import stablehlo_spmd as ss
from stablehlo_spmd.frontends.jax import load_object
from stablehlo_spmd.hlo_sharding import parse_hlo_sharding
from stablehlo_spmd.ir import make_context, parse_module
from stablehlo_spmd.module_shardings import MHLO_SHARDING, function_values, functions, read_mesh
from stablehlo_spmd.sharding import Sharding

RULES = [
    (r"^params\['layers'\]\[\d+\]\['attn'\]\['w[qkv]'\]$", (None, "model")),
    (r"^params\['layers'\]\[\d+\]\['attn'\]\['wo'\]$", ("model", None)),
    (r"^params\['layers'\]\[\d+\]\['mlp'\]\['w_in'\]$", (None, "model")),
    (r"^params\['layers'\]\[\d+\]\['mlp'\]\['w_out'\]$", ("model", None)),
    (r"^params\['embed'\]$", ("model", None)),      # vocab-parallel embedding
    (r"^params\['unembed'\]$", (None, "model")),    # vocab-parallel logits
    (r"^params\['pos_embed'\]$", (None, None)),
    (r"^params\[.*\['(scale|bias)'\]$", (None,)),
    (r"^batch\['(tokens|targets)'\]$", ("data", None)),
]


@pytest.fixture(scope="module")
def propagated():
    config_class = load_object("examples/transformer.py:Config")
    config = config_class(n_layers=2, batch=8, seq_len=16, d_model=64, n_heads=4, d_ff=256)
    params, batch = load_object("examples/transformer.py:example_args")(config)
    text = ss.export(load_object("examples/transformer.py:train_step"), params, batch)
    annotated = ss.annotate(text, "data=4,model=2", RULES)
    return config, ss.propagate(annotated)


def _op_shardings(text):
    """(result type shape, axis sharding) of every single-result op with a sharding."""
    found = []
    with make_context() as context:
        module = parse_module(text, "propagated.mlir", context)
        mesh = read_mesh(module)

        def visit(op):
            if MHLO_SHARDING in op.attributes and len(op.results) == 1 and op.name != "func.func":
                shape = tuple(op.results[0].type.shape)
                hlo = parse_hlo_sharding(str(op.attributes[MHLO_SHARDING]).strip('"'))
                if hlo.kind != "tuple":
                    found.append((op.name, shape, Sharding.from_hlo(hlo, mesh, len(shape))))
            from jaxlib.mlir import ir
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
        arguments, results = {}, {}
        for func in functions(module):
            for value in function_values(func):
                attr = value.get(MHLO_SHARDING)
                if attr is not None and value.name:
                    target = arguments if value.kind == "argument" else results
                    target[value.name] = str(attr).strip('"')
    return found, arguments, results


def test_attention_scores_split_heads_on_model_and_batch_on_data(propagated):
    config, text = propagated
    found, _, _ = _op_shardings(text)
    scores = [(name, s) for name, shape, s in found
              if shape == (config.batch, config.n_heads, config.seq_len, config.seq_len)]
    assert len(scores) >= 4 * config.n_layers  # scores, masks, softmax pieces, grads
    for name, sharding in scores:
        assert sharding.dim_axes[0] == ("data",), (name, sharding)
        assert sharding.dim_axes[1] == ("model",), (name, sharding)


def test_mlp_hidden_split_on_model_and_batch_on_data(propagated):
    config, text = propagated
    found, _, _ = _op_shardings(text)
    hidden = [(name, s) for name, shape, s in found
              if shape == (config.batch, config.seq_len, config.d_ff)]
    assert len(hidden) >= 2 * config.n_layers
    for name, sharding in hidden:
        assert sharding.dim_axes == (("data",), (), ("model",)), (name, sharding)


def test_updated_parameters_are_sharded_like_parameters(propagated):
    _, text = propagated
    _, arguments, results = _op_shardings(text)
    params = {name: sharding for name, sharding in arguments.items() if name.startswith("params")}
    assert len(params) == 25
    for name, sharding in params.items():
        updated = "result[0]" + name[len("params"):]
        assert results[updated] == sharding, updated
    assert results["result[1]"] == "{replicated}"  # the loss
