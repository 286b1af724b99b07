"""Control flow partitioned per device computes what the single-device program does.

Each program (if, case, a scanned layer stack, calls, an optimization
barrier) is partitioned on 8 CPU devices (conftest), run with `ss.run`, and
compared with the unpartitioned program run on one device.  The partitioner
runs with ``warn_bytes=0``, so any operand gathered whole by the replicated
fallback, or any reshard through a fully replicated copy, is a warning, and
the tests that expect every op partitioned turn warnings into failures.
"""

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_spmd as ss
from stablehlo_spmd.api import as_mesh, as_rule_set
from stablehlo_spmd.passes.annotate import AnnotatePass
from stablehlo_spmd.passes.partition import PartitionPass
from stablehlo_spmd.passes.propagate import PropagatePass
from stablehlo_spmd.pipeline import Pipeline

MESH = "data=4,model=2"


def _random(*shape, seed=[100]):
    seed[0] += 1
    return np.random.default_rng(seed[0]).standard_normal(shape).astype(np.float32)


def _partition(text, rules):
    """annotate -> propagate -> partition (warning on any whole-tensor gather)."""
    pipeline = Pipeline((AnnotatePass(rules=as_rule_set(rules, as_mesh(MESH))), PropagatePass(),
                         PartitionPass(warn_bytes=0), "canonicalize", "cse"))
    return ss.run_passes(text, pipeline)


def _compare(text, partitioned, inputs):
    got = ss.run(partitioned, inputs)
    want = ss.run_single_device(text, inputs)
    assert len(got) == len(want)
    for index, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5,
                                   err_msg=f"result #{index}")


def _partition_without_warnings(text, rules):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ss.SpmdWarning)
        return _partition(text, rules)


def _manual_body(partitioned):
    return partitioned[partitioned.index("sdy.manual_computation"):]


def test_if_runs_each_branch_per_device():
    # A hand-written `if` (JAX lowers cond to case): the true branch's dot is
    # contracted over `model`, so it sums its partial inside the branch
    # (reduce_scatter to the result's layout); the false branch is
    # element-wise on the 2x8 block.  Both yield 2x8, nothing is gathered.
    text = """
    func.func @main(%n: tensor<i32> loc("n"), %a: tensor<8x16xf32> loc("a"),
                    %w: tensor<16x16xf32> loc("w")) -> tensor<8x16xf32> {
      %zero = stablehlo.constant dense<0> : tensor<i32>
      %p = stablehlo.compare GT, %n, %zero : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %0 = "stablehlo.if"(%p) ({
        %1 = stablehlo.dot_general %a, %w, contracting_dims = [1] x [0]
            : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
        stablehlo.return %1 : tensor<8x16xf32>
      }, {
        %2 = stablehlo.exponential %a : tensor<8x16xf32>
        stablehlo.return %2 : tensor<8x16xf32>
      }) : (tensor<i1>) -> tensor<8x16xf32>
      return %0 : tensor<8x16xf32>
    }
    """
    partitioned = _partition_without_warnings(
        text, [(r"^a$", ("data", "model")), (r"^w$", ("model", None))])
    assert re.search(r'"stablehlo\.if"\(.*\n(.*\n)*?.*\}\) : \(tensor<i1>\) -> tensor<2x8xf32>',
                     partitioned)
    assert "all_gather" not in partitioned
    assert partitioned.count("stablehlo.reduce_scatter") == 1
    a, w = _random(8, 16), _random(16, 16)
    for taken in (1, 0):
        _compare(text, partitioned, [np.int32(taken), a, w])


def _case_fn(index, x, w):
    return jax.lax.switch(index, [lambda v: jnp.tanh(v @ w),
                                  lambda v: jnp.sin(v) @ w,
                                  lambda v: -v], x)


def test_case_runs_each_branch_per_device():
    # The index is clamped per device from a replicated scalar; x is
    # [data, model]: two branches contract over model (a partial each, summed
    # inside the branch), the third negates the local block.
    x, w = _random(8, 16), _random(16, 16)
    text = ss.export(_case_fn, np.int32(0), x, w)
    partitioned = _partition_without_warnings(
        text, [(r"^x$", ("data", "model")), (r"^w$", ("model", None)),
               (r"^result$", ("data", "model"))])
    assert re.search(r'"stablehlo\.case"\(.*\n(.*\n)*?.*\}\) : \(tensor<i32>\) -> tensor<2x8xf32>',
                     partitioned)
    assert "all_gather" not in partitioned
    for index in (0, 1, 2, 7):  # 7: case clamps an out-of-range index to the last branch
        _compare(text, partitioned, [np.int32(index), x, w])


def test_predicate_from_a_sharded_tensor_is_summed_before_the_branch():
    # The predicate reads the whole batch: every device must agree on it.
    def fn(x):
        return jax.lax.cond(jnp.sum(x) > 0, lambda v: v * 2, lambda v: v - 1, x)

    x = _random(8, 16)
    text = ss.export(fn, x)
    partitioned = _partition_without_warnings(text, [(r"^x$", ("data", None))])
    body = _manual_body(partitioned)
    assert body.index("stablehlo.all_reduce") < body.index("stablehlo.case")
    _compare(text, partitioned, [x])
    _compare(text, partitioned, [-np.abs(x)])


def _layer_stack(params, x):
    """A scanned stack of Megatron MLP blocks with a residual, and each
    layer's per-row activation sum stacked as the scan's output."""
    def layer(h, weights):
        w_in, w_out = weights
        h = h + jnp.tanh(h @ w_in) @ w_out
        return h, jnp.sum(h, axis=1)

    return jax.lax.scan(layer, x, (params["w_in"], params["w_out"]))


def test_scanned_layer_stack_slices_each_layer_locally():
    layers, batch, d, f = 3, 8, 16, 32
    params = {"w_in": _random(layers, d, f) / 4, "w_out": _random(layers, f, d) / 4}
    x = _random(batch, d)
    text = ss.export(_layer_stack, params, x)
    assert "stablehlo.while" in text and "stablehlo.dynamic_slice" in text
    partitioned = _partition_without_warnings(text, [
        (r"w_in", (None, None, "model")), (r"w_out", (None, "model", None)),
        (r"^x$", ("data", None)), (r"^result\[0\]$", ("data", None))])
    # Each layer's weights (w_in 16x32 split on columns, w_out 32x16 on rows)
    # are read from the device's own 3x16x16 shard of its stack ...
    assert len(re.findall(r"stablehlo\.dynamic_slice %\S+, .* sizes = \[1, 16, 16\] "
                          r": \(tensor<3x16x16xf32>", partitioned)) == 2
    # ... the stack is never gathered whole, and neither is anything else:
    # the loop's only collective is the row-parallel block's all-reduce.
    assert "all_gather" not in partitioned and "all_to_all" not in partitioned
    assert partitioned.count("stablehlo.all_reduce") == 1
    # The carry stays batch-sharded through the loop (2 of 8 rows a device).
    assert re.search(r"stablehlo\.while\(.*\) : .*tensor<2x16xf32>", partitioned)
    # The stacked outputs are written per device too: [layers, batch/4].
    assert re.search(r"stablehlo\.dynamic_update_slice .*-> tensor<3x2xf32>", partitioned)
    leaves = [np.asarray(v) for v in jax.tree_util.tree_leaves((params, x))]
    _compare(text, partitioned, leaves)


def test_stack_sharded_on_its_layer_dimension_gathers_and_says_so():
    # A stack split over layers has no local slice: each iteration's
    # dynamic_slice needs the whole stack.  That is correct, and warned about.
    params = {"w_in": _random(4, 16, 16) / 4, "w_out": _random(4, 16, 16) / 4}
    x = _random(8, 16)
    text = ss.export(_layer_stack, params, x)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        partitioned = _partition(text, [(r"w_", ("model", None, None)), (r"^x$", ("data", None))])
    assert any("dynamic_slice" in str(w.message) and "whole" in str(w.message) for w in seen)
    assert "all_gather" in partitioned
    leaves = [np.asarray(v) for v in jax.tree_util.tree_leaves((params, x))]
    _compare(text, partitioned, leaves)


def _write_rows(buffer, rows, start):
    return jax.lax.dynamic_update_slice(buffer, rows, (start, 0)) * 2.0


@pytest.mark.parametrize("start", [0, 3, 5, 6, 13, 27, 31, -4])
def test_update_at_a_runtime_offset_writes_each_shard_in_place(start):
    # A row-sharded buffer updated at a run-time row: the rule keeps the
    # buffer split there, so each device writes only the rows of the update
    # that fall in its shard (rows can straddle two shards, or miss all).
    buffer, rows = _random(32, 8), _random(5, 8)
    text = ss.export(_write_rows, buffer, rows, np.int32(0))
    partitioned = _partition_without_warnings(text, [(r"^buffer$", ("data", None)),
                                                     (r"^result", ("data", None))])
    body = _manual_body(partitioned)
    assert re.search(r"stablehlo\.dynamic_update_slice .*-> tensor<18x8xf32>", body)
    assert not re.search(r"all_gather|all_reduce|all_to_all|collective_permute", body)
    _compare(text, partitioned, [buffer, rows, np.int32(start)])


def test_update_sharded_along_its_offset_dim_is_gathered_and_says_so():
    # The update must be whole where it is written at a run-time offset
    # (its factor needs replication): splitting it there is warned about.
    buffer, rows = _random(32, 8), _random(8, 8)
    text = ss.export(_write_rows, buffer, rows, np.int32(0))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        partitioned = _partition(text, [(r"^buffer$", ("data", None)), (r"^rows$", ("data", None))])
    assert any("dynamic_update_slice" in str(w.message) and "dimension 0" in str(w.message)
               for w in seen)
    _compare(text, partitioned, [buffer, rows, np.int32(11)])


def test_calls_become_one_per_device_function_per_signature():
    # `act` is called from two sites with differently sharded operands and
    # `scale` from one: propagation shards a copy of `act` per site, so the
    # column-sharded site keeps its columns (nothing moves), and each
    # signature is one per-device function called (not inlined) from the
    # manual body.
    @jax.jit
    def act(h):
        return jnp.tanh(h) * 2

    @jax.jit
    def scale(h):
        return h * 3

    def fn(a, b):
        return act(a) + scale(a), act(b)

    a, b = _random(8, 16), _random(8, 16)
    text = ss.export(fn, a, b)
    assert len(re.findall(r"\bcall @", text)) == 3
    partitioned = _partition(text, [(r"^a$", ("data", None)), (r"^b$", (None, "data"))])
    body = partitioned[partitioned.index("sdy.manual_computation"):partitioned.index("func.func private")]
    calls = re.findall(r"\bcall @(\w+)\(", body)
    assert len(calls) == 3 and len(set(calls)) == 3
    private = dict(re.findall(r"func\.func private @(\w+)\(%arg0: (tensor<\w+>)", partitioned))
    assert set(private) == set(calls)
    assert sorted(private.values()) == ["tensor<2x16xf32>", "tensor<2x16xf32>", "tensor<8x4xf32>"]
    assert "stablehlo.all_to_all" not in partitioned
    _compare(text, partitioned, [a, b])


def test_call_inside_a_loop_and_a_nested_call():
    # A call in a while body (fori_loop's body is itself a call of
    # @closed_call), whose callee calls another function: each per-device
    # function is made once and called from where it is needed.
    inner = jax.jit(lambda h: jnp.sin(h))
    outer = jax.jit(lambda h, w: inner(h @ w))

    def fn(x, w):
        return jax.lax.fori_loop(0, 3, lambda i, h: outer(h, w), x)

    x, w = _random(8, 16), _random(16, 16) / 4
    text = ss.export(fn, x, w)
    partitioned = _partition_without_warnings(text, [(r"^x$", ("data", None))])
    # One per-device function per private function of the export (how many
    # jax emits depends on its version: 3 in 0.10, 2 in 0.11).
    private = len(re.findall(r"func\.func private", text))
    assert private >= 2 and len(re.findall(r"func\.func private", partitioned)) == private
    assert re.search(r"stablehlo\.while(.*\n)*.*func\.call @\w+\(.*tensor<2x16xf32>",
                     partitioned)
    assert sum(partitioned.count(k) for k in ("all_gather", "all_reduce", "all_to_all")) == 0
    _compare(text, partitioned, [x, w])


def test_optimization_barrier_keeps_its_operands_sharded():
    def fn(x, w):
        h, v = jax.lax.optimization_barrier((jnp.tanh(x), w))
        return h @ v

    x, w = _random(8, 16), _random(16, 16)
    text = ss.export(fn, x, w)
    partitioned = _partition_without_warnings(text, [(r"^x$", ("data", None)),
                                                     (r"^w$", (None, "model"))])
    assert re.search(r"stablehlo\.optimization_barrier .*: tensor<2x16xf32>, tensor<16x8xf32>",
                     partitioned)
    assert "all_gather" not in partitioned
    _compare(text, partitioned, [x, w])


def _megatron_layer(x, w_in, w_gate, w_out):
    h = jnp.tanh(x @ w_in) * (x @ w_gate)
    return x + h @ w_out


@pytest.mark.parametrize("checkpoint, barriers", [
    pytest.param(lambda f: jax.checkpoint(f), True, id="full"),
    # (as scans write it: no barrier, the recomputation is plain ops)
    pytest.param(lambda f: jax.checkpoint(f, prevent_cse=False), False, id="no-prevent-cse"),
    pytest.param(lambda f: jax.checkpoint(
        f, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable), True,
        id="save-dots"),
])
def test_a_checkpointed_layer_recomputes_with_the_forwards_collectives_alone(checkpoint,
                                                                            barriers):
    # Megatron's layer under jax.checkpoint: three weights split on "model"
    # pass through one barrier.  Each keeps its split, so the step moves
    # what the same step without remat moves, plus the recomputed forward's
    # sums, and gathers no weight.
    def step(params, x):
        def loss(params):
            y = x
            for layer in params:
                y = checkpoint(_megatron_layer)(y, *layer)
            return jnp.sum(y * y)
        return jax.grad(loss)(params)

    def plain_step(params, x):
        def loss(params):
            y = x
            for layer in params:
                y = _megatron_layer(y, *layer)
            return jnp.sum(y * y)
        return jax.grad(loss)(params)

    # Scaled as initializers scale them, so that the values stay near 1.
    params = [(_random(16, 32) / 4, _random(16, 32) / 4, _random(32, 16) / 6) for _ in range(2)]
    x = _random(8, 16)
    rules = [(r"\]\[[01]\]$", (None, "model")), (r"\]\[2\]$", ("model", None)),
             (r"^x$", ("data", None))]
    text = ss.export(step, params, x)
    assert ("optimization_barrier" in text) == barriers
    partitioned = _partition_without_warnings(text, rules)
    plain = _partition_without_warnings(ss.export(plain_step, params, x), rules)
    assert "all_gather" not in partitioned and "all_to_all" not in partitioned
    sums = partitioned.count('"stablehlo.all_reduce"')
    plain_sums = plain.count('"stablehlo.all_reduce"')
    # The policy that saves the products recomputes no sum; the others recompute
    # the first layer output's sum, which the second layer reads.
    assert plain_sums <= sums <= plain_sums + 1
    inputs = [leaf for leaf in jax.tree_util.tree_leaves((params, x))]
    _compare(text, partitioned, inputs)
