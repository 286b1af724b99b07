"""What stablehlo_spmd.op_rules itself owns: the registry (every family
loaded by any import, every op of real training steps covered by a rule
consistent with the op's types) and the OpRule flags read per device."""

from __future__ import annotations

import math
import pathlib

import jax
import jax.numpy as jnp
import pytest
from jax import lax
from jaxlib.mlir import ir

import stablehlo_spmd
from stablehlo_spmd import op_rules
from stablehlo_spmd.frontends.jax import load_object
from stablehlo_spmd.ir import make_context, parse_module

from .factor_rules import P, lowered, rule_of, walk


def test_importing_one_family_first_still_loads_the_rest():
    import subprocess
    import sys
    script = ("import stablehlo_spmd.op_rules.shape_ops\n"
              "from stablehlo_spmd import op_rules\n"
              "assert op_rules.has_rule('stablehlo.add'), 'elementwise not loaded'\n")
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)


def mlp_step():
    def loss(params, x, y):
        h = jax.nn.relu(x @ params["w1"] + params["b1"])
        logits = h @ params["w2"] + params["b2"]
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))

    def step(params, x, y):
        grads = jax.grad(loss)(params, x, y)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    params = {"w1": jnp.zeros((16, 32)), "b1": jnp.zeros((32,)),
              "w2": jnp.zeros((32, 10)), "b2": jnp.zeros((10,))}
    return step, (params, jnp.zeros((8, 16)), jnp.zeros((8, 10)))


def cnn_step():
    def loss(params, x, y):
        h = lax.conv_general_dilated(x, params["conv"], (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        h = jax.nn.relu(h + params["bias"])
        h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        h = h.reshape(h.shape[0], -1)
        logits = h @ params["dense"]
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))

    def step(params, x, y):
        grads = jax.grad(loss)(params, x, y)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    params = {"conv": jnp.zeros((3, 3, 3, 8)), "bias": jnp.zeros((8,)),
              "dense": jnp.zeros((4 * 4 * 8, 10))}
    return step, (params, jnp.zeros((4, 8, 8, 3)), jnp.zeros((4, 10)))


def moe_step():
    experts, top, capacity = 4, 2, 6

    def layer(params, x):
        probs = jax.nn.softmax(x @ params["gate"])                       # [T, E]
        gates, index = lax.top_k(probs, top)                              # [T, K]
        mask = jax.nn.one_hot(index, experts)                             # [T, K, E]
        position = jnp.cumsum(mask.reshape(-1, experts), axis=0).reshape(mask.shape) - 1
        keep = mask * (position < capacity)
        slot = jax.nn.one_hot(jnp.sum(position * keep, -1).astype(jnp.int32), capacity)
        dispatch = jnp.einsum("tke,tkc->tec", keep, slot)                 # [T, E, C]
        combine = jnp.einsum("tk,tke,tkc->tec", gates, keep, slot)
        expert_in = jnp.einsum("tec,td->ecd", dispatch, x)
        hidden = jax.nn.gelu(jnp.einsum("ecd,edf->ecf", expert_in, params["w_in"]))
        expert_out = jnp.einsum("ecf,efd->ecd", hidden, params["w_out"])
        return jnp.einsum("tec,ecd->td", combine, expert_out)

    def step(params, x):
        grads = jax.grad(lambda p: jnp.sum(layer(p, x) ** 2))(params)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    params = {"gate": jnp.zeros((16, experts)), "w_in": jnp.zeros((experts, 16, 32)),
              "w_out": jnp.zeros((experts, 32, 16))}
    return step, (params, jnp.zeros((12, 16)))


def transformer_step():
    # By absolute path, so the test does not depend on the working directory.
    return load_object(f"{REPO_ROOT}/examples/transformer.py:train_step_example")()


REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
STRUCTURAL = {"func.func", "func.return", "stablehlo.return", "builtin.module"}


@pytest.fixture(scope="module", params=["mlp", "cnn", "moe", "transformer"])
def program(request):
    make = {"mlp": mlp_step, "cnn": cnn_step, "moe": moe_step,
            "transformer": transformer_step}[request.param]
    fn, args = make()
    return request.param, stablehlo_spmd.export(fn, *args)


def test_every_op_of_real_programs_has_a_rule(program):
    name, text = program
    with make_context() as ctx:
        module = parse_module(text, f"{name}.mlir", ctx)
        ops = [op for op in walk(module) if op.name not in STRUCTURAL]
        missing = sorted({op.name for op in ops if not op_rules.has_rule(op.name)})
        assert not missing, f"{name}: no rule for {missing}"
        for op in ops:
            rule = op_rules.rule_for(op)
            if rule is None:
                continue
            check_consistent(op, rule)


def check_consistent(op: ir.Operation, rule) -> None:
    """Ranks match the op, and a dim made only of pass-through factors is
    exactly their product."""
    where = f"{op.name} at {op.location}"
    assert len(rule.operands) == len(op.operands), where
    assert len(rule.results) == len(op.results), where
    for values, tensors in ((op.operands, rule.operands), (op.results, rule.results)):
        for value, tensor in zip(values, tensors):
            shape = tuple(ir.RankedTensorType(value.type).shape)
            assert len(tensor) == len(shape), where
            for size, factors in zip(shape, tensor):
                kinds = {rule.factor_kinds[f] for f in factors}
                if factors and kinds == {P}:
                    assert math.prod(rule.factor_sizes[f] for f in factors) == size, where


def test_models_exercise_the_new_families(program):
    name, text = program
    expected = {"cnn": {"stablehlo.convolution", "stablehlo.reduce_window",
                        "stablehlo.select_and_scatter"},
                "moe": {"chlo.top_k", "stablehlo.reduce_window"},
                "transformer": {"stablehlo.gather", "stablehlo.scatter"},
                "mlp": {"stablehlo.dot_general"}}[name]
    with make_context() as ctx:
        module = parse_module(text, f"{name}.mlir", ctx)
        names = {op.name for op in walk(module)}
    assert expected <= names


def test_which_rules_keep_their_attributes_per_device():
    # Attributes that name dimensions carry over to the per-device op; ones
    # that hold sizes (slice's limits, a grouped conv's feature split) do not.
    def rule(fn, *args, name):
        return rule_of(lowered(fn, *args), name)

    x = jnp.zeros((8, 16), jnp.float32)
    assert rule(lambda a: a @ a.T, x, name="stablehlo.dot_general").keeps_attributes
    assert rule(lambda a: a @ a.T, x, name="stablehlo.dot_general").masks_padding
    assert rule(lambda a: jnp.sum(a, 0), x, name="stablehlo.reduce").masks_padding
    assert rule(lambda a: jnp.tanh(a), x, name="stablehlo.tanh").keeps_attributes
    assert not rule(lambda a: a[2:6], x, name="stablehlo.slice").keeps_attributes
    assert not rule(lambda a: jnp.tanh(a), x, name="stablehlo.tanh").masks_padding
    image = jnp.zeros((2, 6, 6, 4), jnp.float32)
    def conv(groups):
        return lambda a, k: jax.lax.conv_general_dilated(
            a, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
            feature_group_count=groups)
    assert rule(conv(1), image, jnp.zeros((3, 3, 4, 4)), name="stablehlo.convolution").keeps_attributes
    assert not rule(conv(4), image, jnp.zeros((3, 3, 1, 4)),
                    name="stablehlo.convolution").keeps_attributes


# Every StableHLO op Shardy's op_sharding_rule_registry.cc gives a rule to
# (openxla/shardy, 2026-11), by its StableHLO name.  Ops Shardy deliberately
# leaves without one (constants, tokens, while/case, send/recv) are not here.
SHARDY_REGISTERED_OPS = """
abs add all_gather all_reduce all_to_all and atan2 batch_norm_inference bitcast_convert
broadcast_in_dim cbrt ceil cholesky clamp collective_broadcast collective_permute compare
complex concatenate convert convolution cosine count_leading_zeros cross-replica-sum
custom_call divide dot dot_general dynamic_slice dynamic_update_slice exponential
exponential_minus_one fft floor gather imag is_finite log log_plus_one logistic maximum
minimum multiply negate not or pad popcnt power real reduce reduce_precision reduce_scatter
reduce_window remainder reshape reverse rng_bit_generator round_nearest_afz
round_nearest_even rsqrt scatter select select_and_scatter shift_left
shift_right_arithmetic shift_right_logical sign sine slice sort sqrt subtract tan tanh
transpose triangular_solve xor
""".split()

# Every custom-call target Shardy's registry gives a rule to.
SHARDY_REGISTERED_TARGETS = """
annotate_device_placement ApproxTopK Cholesky CompactWyHelper Eigh InspectSharding
InvertDiagBlocksLowerTriangular InvertDiagBlocksUpperTriangular LayoutConstraint mhlo.erf
mhlo.topk MoveToDevice MoveToHost PartialReduce ProductOfElementaryHouseholderReflectors Qr
QrDecompositionBlock X64Combine X64SplitHigh X64SplitLow xla.megascale.provide_metadata
_SPMDInternalOp_MultiPad _SPMDInternalOp_MultiRotate _SPMDInternalOp_MultiSlice
_SPMDInternalOp_RotateRight _SPMDInternalOp_Wrap
""".split()


@pytest.mark.parametrize("name", SHARDY_REGISTERED_OPS)
def test_every_op_shardy_registers_has_a_rule(name):
    assert op_rules.has_rule(f"stablehlo.{name}")


def test_every_custom_call_target_shardy_registers_has_a_rule():
    from stablehlo_spmd.op_rules.custom_calls import TARGET_RULES
    assert sorted(set(SHARDY_REGISTERED_TARGETS) - set(TARGET_RULES)) == []
