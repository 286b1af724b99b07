"""Partitioned programs compute what the single-device program computes.

Each workload is a JAX function: exported, partitioned with
`ss.partition` on 8 CPU devices (conftest), run with `ss.run`, and compared
with the same unpartitioned program run on one device.  Where the right
collectives are known from first principles (a Megatron MLP needs exactly
one all-reduce; an element-wise op on alike-sharded inputs needs none),
the partitioned text is checked for them too.
"""

import pathlib
import re
import subprocess
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_spmd as ss
from stablehlo_spmd.frontends.jax import load_object

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute")


def _random(*shape, seed=[0]):
    seed[0] += 1
    return jnp.asarray(np.random.default_rng(seed[0]).standard_normal(shape), jnp.float32)


def _partition_and_compare(fn, args, mesh, rules, rtol=1e-5, atol=1e-5):
    text = ss.export(fn, *args)
    partitioned = ss.partition(text, mesh, rules)
    leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(args)]
    got = ss.run(partitioned, leaves)
    want = ss.run_single_device(text, leaves)
    assert len(got) == len(want)
    for index, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol,
                                   err_msg=f"result #{index}")
    counts = {kind: len(re.findall(rf'"?stablehlo\.{kind}"?\(', partitioned)) for kind in COLLECTIVES}
    return partitioned, counts


def _run_and_compare(text, pipeline, shapes):
    """`text` through `pipeline`, run on random inputs of `shapes` against the
    unpartitioned text on one device, every result; returns the partitioned
    text and its collective counts."""
    partitioned = ss.run_passes(text, pipeline)
    inputs = [np.asarray(_random(*shape)) for shape in shapes]
    for got, want in zip(ss.run(partitioned, inputs), ss.run_single_device(text, inputs),
                         strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    counts = {kind: len(re.findall(rf'"?stablehlo\.{kind}"?\(', partitioned)) for kind in COLLECTIVES}
    return partitioned, counts


def _workload(name):
    return load_object(f"examples/workloads.py:{name}")


_mlp = _workload("mlp")


def test_megatron_mlp_needs_one_all_reduce():
    args = ({"w1": _random(16, 32), "w2": _random(32, 16)}, _random(8, 16))
    _, counts = _partition_and_compare(_mlp, args, "data=4,model=2", [
        (r"w1", (None, "model")), (r"w2", ("model", None)), (r"^x$", ("data", None)),
        (r"^result$", ("data", None))])
    assert counts == {"all_reduce": 1, "all_gather": 0, "reduce_scatter": 0, "all_to_all": 0,
                      "collective_permute": 0}


def test_two_d_sharded_mlp():
    args = ({"w1": _random(16, 32), "w2": _random(32, 16)}, _random(8, 16))
    _partition_and_compare(_mlp, args, "data=4,model=2", [
        (r"w1", ("data", "model")), (r"w2", ("model", "data")), (r"^x$", ("data", "model"))])


def test_attention_block():
    args = ({"wq": _random(32, 32), "wk": _random(32, 32), "wv": _random(32, 32),
             "wo": _random(32, 32)}, _random(4, 8, 32))
    _partition_and_compare(_workload("attention"), args, "data=4,model=2", [
        (r"w[qkv]'\]$", (None, "model")), (r"wo'\]$", ("model", None)),
        (r"^x$", ("data", None, None))], rtol=1e-4, atol=1e-4)


def test_fsdp_training_step():
    args = ({"w1": _random(16, 32), "w2": _random(32, 8)}, _random(16, 16), _random(16, 8))
    _partition_and_compare(_workload("sgd_step"), args, "data=8", [
        (r"w1'\]$", ("data", None)), (r"w2'\]$", ("data", None)), (r"^[xy]$", ("data", None))])


def test_dimensions_not_divisible_by_the_mesh():
    args = (_random(10, 6), _random(10, 6))
    _, counts = _partition_and_compare(_workload("uneven_elementwise"), args, "x=4",
                                       [(r"", ("x", None))])
    assert sum(counts.values()) == 0  # padded shards, no data movement


def test_uneven_reduction_is_masked_by_gathering():
    args = (_random(10, 6),)
    _partition_and_compare(_workload("uneven_reduce"), args, "x=4",
                           [(r"^x$", ("x", None))])


def test_uvw_keeps_the_partial_to_the_final_product():
    args = (_random(64, 32), _random(32, 64), _random(64, 8))
    partitioned, counts = _partition_and_compare(_workload("chain"), args, "x=4", [
        (r"^u$", (None, "x")), (r"^v$", ("x", None)), (r"^w$", (None, None)),
        (r"^result$", (None, None))], rtol=1e-4, atol=1e-4)
    assert counts["all_reduce"] == 1 and sum(counts.values()) == 1
    assert re.search(r'"stablehlo\.all_reduce"\(.*\n(.*\n)*.*\(tensor<64x8xf32>\) -> tensor<64x8xf32>',
                     partitioned)


def test_transformer_training_step_data_by_model():
    fn, args = load_object("examples/transformer.py:train_step_example")()
    text = ss.export(fn, *args)
    partitioned = ss.partition(text, rules="stablehlo_spmd/demo_rules.toml")
    leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(args)]
    got = ss.run(partitioned, leaves)
    want = ss.run_single_device(text, leaves)
    assert len(got) == 26  # 25 updated parameters and the loss
    for index, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-5,
                                   err_msg=f"result #{index}")


def test_spmd_jit_compiles_once_per_signature_and_returns_pytrees():
    step = ss.spmd_jit(_mlp, "data=4,model=2", [
        (r"w1", (None, "model")), (r"w2", ("model", None)), (r"^x$", ("data", None))])
    params = {"w1": _random(16, 32), "w2": _random(32, 16)}
    first = step(params, _random(8, 16))
    x = _random(8, 16)
    second = step(params, x)
    assert len(step.cache) == 1
    np.testing.assert_allclose(np.asarray(second), np.asarray(_mlp(params, x)), rtol=1e-5, atol=1e-5)
    assert first.shape == (8, 16)
    step(params, _random(4, 16))  # a new batch size is a new signature
    assert len(step.cache) == 2


def test_uneven_contracting_dimension_is_masked_on_both_operands():
    # 10 contracted elements over 4 devices: shards of 3 padded to 12; a
    # NaN in the padding of one operand must not reach the sum (0 * NaN).
    args = (_random(8, 10), _random(10, 4))
    partitioned, counts = _partition_and_compare(lambda x, y: jnp.log1p(jnp.abs(x @ y)), args,
                                                 "x=4", [(r"^x$", (None, "x")), (r"^y$", ("x", None))])
    assert counts["all_reduce"] == 1 and counts["all_gather"] == 0
    assert "stablehlo.select" in partitioned  # the padding mask


def test_while_loop_with_a_sharded_carry():
    def loop(x, w):
        return jax.lax.fori_loop(0, 3, lambda i, h: jnp.tanh(h @ w), x)

    _, counts = _partition_and_compare(loop, (_random(8, 16), _random(16, 16)), "x=4",
                                       [(r"^x$", ("x", None)), (r"^w$", (None, None))])
    assert sum(counts.values()) == 0  # rows stay on their devices across iterations


def test_vocab_sharded_embedding_lookup_is_a_masked_local_gather():
    table = _random(16, 8)
    ids = jnp.asarray(np.random.default_rng(7).integers(0, 16, size=(4, 6)), jnp.int32)
    partitioned, counts = _partition_and_compare(
        lambda t, i: jnp.tanh(jnp.take(t, i, axis=0)), (table, ids), "data=2,model=4",
        [(r"^t$", ("model", None)), (r"^i$", ("data", None))])
    assert counts["all_gather"] == 0  # the table never moves
    assert counts["all_reduce"] + counts["reduce_scatter"] >= 1


def test_data_parallel_cnn_step_partitions_conv_and_pooling_per_device():
    # Batch-sharded images: convolution, max-pool and its gradient
    # (select_and_scatter) run on each device's images; only the weight
    # gradients and the loss are summed.
    args = ({"kernel": _random(3, 3, 3, 4), "dense": _random(64, 5)},
            _random(8, 8, 8, 3), _random(8, 5))
    partitioned, counts = _partition_and_compare(
        _workload("cnn_step"), args, "data=8",
        [(r"^x$", ("data", None, None, None)), (r"^y$", ("data", None))], rtol=1e-4, atol=1e-3)
    assert counts["all_reduce"] >= 2
    assert '"stablehlo.select_and_scatter"' in partitioned or "select_and_scatter" in partitioned
    assert re.search(r"stablehlo.convolution.*tensor<1x8x8x3xf32>", partitioned)


def test_embedding_gradient_is_a_local_scatter_add():
    # d/dtable of a lookup is a scatter-add of the row gradients into a
    # vocab-sharded zeros table: each device adds the rows it holds, from its
    # own batch shard, and the partial sums over the batch are reduced.
    def grad_of_lookup(table, ids):
        return jax.grad(lambda t: jnp.sum(jnp.tanh(jnp.take(t, ids, axis=0)) ** 2))(table)

    table = _random(16, 8)
    ids = jnp.asarray(np.random.default_rng(11).integers(0, 16, size=(4, 6)), jnp.int32)
    partitioned, counts = _partition_and_compare(
        grad_of_lookup, (table, ids), "data=2,model=4",
        [(r"^table$", ("model", None)), (r"^ids$", ("data", None)), (r"^result$", ("model", None))])
    assert counts["all_gather"] == 0  # neither the table nor the updates are gathered
    assert "stablehlo.scatter" in partitioned


def test_sort_along_a_sharded_dimension_gathers_it():
    args = (_random(8, 16),)
    _, counts = _partition_and_compare(lambda x: jnp.sort(x, axis=1), args, "x=4",
                                       [(r"^x$", (None, "x")), (r"^result$", (None, "x"))])
    assert counts["all_gather"] == 1 or counts["all_to_all"] >= 1


def test_moe_layer_exchanges_tokens_with_all_to_all():
    # Token groups split over the expert axis and experts split over it too:
    # dispatch and combine move tokens to their experts and back by
    # all-to-all (GShard), never gathering the experts' weights.
    # By hand, from the shapes: x [g=8, t=4, d=16] is split on its group g,
    # the experts' weights on e (8 experts, one a device).  The gate and the
    # softmax are per token, local.  Dispatch `gte,gtd->egd` yields expert
    # inputs split on g; the experts need them split on e: one all-to-all.
    # The expert MLPs are local.  Combine `gte,egd->gtd` has dispatch*probs
    # split on g and the expert outputs on e: the outputs go back to g (one
    # all-to-all) and the combine runs per group, its result [8,4,16] split
    # on g.  Seating the axis on the contracted e instead would leave that
    # whole result partial and all-reduce it: no all-reduce, no gather.
    args = ({"gate": _random(16, 8), "w_in": _random(8, 16, 32), "w_out": _random(8, 32, 16)},
            _random(8, 4, 16))
    partitioned, counts = _partition_and_compare(_workload("moe_layer"), args, "expert=8", [
        (r"w_(in|out)'\]$", ("expert", None, None)), (r"gate", (None, None)),
        (r"^x$", ("expert", None, None))], rtol=1e-4, atol=1e-4)
    assert counts == {"all_reduce": 0, "all_gather": 0, "reduce_scatter": 0, "all_to_all": 2,
                      "collective_permute": 0}
    # Each device returns its own token group of the result: [1, 4, 16].
    assert re.search(r"sdy\.return %\S+ : tensor<1x4x16xf32>", partitioned)


LEGACY_DOT = """
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=4]>} {
  func.func @main(%a: tensor<16x32xf32> {mhlo.sharding = "{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}"},
                  %b: tensor<32x16xf32> {mhlo.sharding = "{devices=[4,2]<=[2,4]T(1,0)}"})
      -> (tensor<16x16xf32> {mhlo.sharding = "{devices=[1,8]<=[8]}"}) {
    %0 = stablehlo.dot %a, %b : (tensor<16x32xf32>, tensor<32x16xf32>) -> tensor<16x16xf32>
    return %0 : tensor<16x16xf32>
  }
}
"""


def test_legacy_dot_runs_on_local_blocks_and_reduce_scatters_the_product():
    # XLA's HLO dot arrives as stablehlo.dot: contracting dim split on both
    # operands, the result wanting the rhs's free dim over every device.  No
    # operand moves; the partial product is summed onto the result's split.
    _, counts = _run_and_compare(LEGACY_DOT, "builtin.module(spmd-propagate,spmd-partition)",
                                 [(16, 32), (32, 16)])
    assert counts == {"all_reduce": 0, "all_gather": 0, "reduce_scatter": 1, "all_to_all": 0,
                      "collective_permute": 0}


PARTIAL_INTO_A_SPLIT_CONTRACTION = """
module attributes {spmd.mesh = #sdy.mesh<["x"=2]>} {
  func.func @main(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,2]<=[2]}"},
                  %b: tensor<16x4xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"},
                  %c: tensor<4x8xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{replicated}"}) {
    %p = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] {mhlo.sharding = "{unreduced}"}
      : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    %q = stablehlo.dot_general %p, %c, contracting_dims = [1] x [0] {mhlo.sharding = "{unreduced}"}
      : (tensor<8x4xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
    return %q : tensor<8x8xf32>
  }
}
"""


def test_a_partial_operand_is_summed_before_a_contraction_splits_it_over_the_same_axis():
    # p is pending a sum over x, and c splits the second contraction over x
    # too: p cannot stay partial and be split over x at once (it used to be
    # an invalid sharding, raised from inside the partitioner), so it is
    # summed and split, and q's own partial is summed at the result.
    _run_and_compare(PARTIAL_INTO_A_SPLIT_CONTRACTION, "builtin.module(spmd-partition)",
                     [(8, 16), (16, 4), (4, 8)])


PARTIAL_FROM_UNSPLIT_OPERANDS = """
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @main(%a: tensor<16x64xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                  %b: tensor<64x32xf32> {mhlo.sharding = "{replicated}"})
      -> (tensor<16x32xf32> {mhlo.sharding = "{replicated}"}) {
    %p = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0]
      {mhlo.sharding = "{unreduced}", spmd.factor_axes = [[], [], ["x"]]}
      : (tensor<16x64xf32>, tensor<64x32xf32>) -> tensor<16x32xf32>
    return %p : tensor<16x32xf32>
  }
}
"""


@pytest.mark.parametrize("made_here, expected", [
    # The plan says the op makes its Partial: the contraction runs split
    # over x (a's rows become columns, b is sliced) and the sum is made
    # once, at the result; not by gathering a and computing the sum whole,
    # a layout spmd-auto-shard's plan may have turned down for the memory
    # it holds.
    (True, {"all_reduce": 1, "all_to_all": 1, "contracted": 16}),
    # Left to itself, the partitioner moves the least around the op: a's
    # rows as they are, the sum whole on each, and the result gathered.
    (False, {"all_gather": 1, "contracted": 64}),
])
def test_a_result_the_plan_makes_partial_splits_the_contraction_over_its_axes(
        made_here, expected):
    text = PARTIAL_FROM_UNSPLIT_OPERANDS if made_here else \
        PARTIAL_FROM_UNSPLIT_OPERANDS.replace(', spmd.factor_axes = [[], [], ["x"]]', "")
    partitioned, counts = _run_and_compare(
        text, "builtin.module(spmd-partition)", [(16, 64), (64, 32)])
    contracted = expected.pop("contracted")
    assert {kind: n for kind, n in counts.items() if n} == expected
    assert re.search(rf"stablehlo\.dot_general .*\(tensor<\d+x{contracted}xf32>, "
                     rf"tensor<{contracted}x32xf32>\)", partitioned)


@pytest.mark.parametrize("axes, message", [
    ('[["x"]]', "must give the mesh axes of each of the op's 3 factors"),
    ('[[], [], ["y"]]', "'y' is not an axis of the mesh"),
    ('[["x"], [], ["x"]]', "an axis runs two factors"),
    ('[[], ["x", "x"], []]', "an axis runs two factors"),
    ('[[], [], [1]]', "must give the mesh axes"),
])
def test_factor_axes_that_are_no_way_to_run_the_op_are_refused_where_they_are_written(
        axes, message, tmp_path):
    text = PARTIAL_FROM_UNSPLIT_OPERANDS.replace('[[], [], ["x"]]', axes)
    with pytest.raises(ss.SpmdError) as raised:
        ss.partition(text)
    source = tmp_path / "in.mlir"
    source.write_text(text)
    done = subprocess.run([sys.executable, "-m", "stablehlo_spmd.cli.opt", str(source),
                           "--spmd-partition"], capture_output=True, text=True)
    assert done.returncode == 1 and not done.stdout
    # The op's line and column: the dot_general the attribute is on.
    located = f"{source}:6:10: error: spmd.factor_axes"
    assert done.stderr.splitlines()[-1].startswith(located), done.stderr
    assert message in done.stderr.splitlines()[-1]
    assert str(raised.value).split(": error: ", 1)[1] == \
        done.stderr.splitlines()[-1].split(": error: ", 1)[1]


PRODUCT_OF_TWO_PARTIALS = """
module attributes {spmd.mesh = #sdy.mesh<["x"=2]>} {
  func.func @main(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,2]<=[2]}"},
                  %b: tensor<16x4xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"},
                  %c: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,2]<=[2]}"},
                  %d: tensor<16x4xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"})
      -> (tensor<8x4xf32> {mhlo.sharding = "{replicated}"}) {
    %p = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] {mhlo.sharding = "{unreduced}"}
      : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    %q = stablehlo.dot_general %c, %d, contracting_dims = [1] x [0] {mhlo.sharding = "{unreduced}"}
      : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    %r = stablehlo.multiply %p, %q {mhlo.sharding = "{unreduced}"} : tensor<8x4xf32>
    return %r : tensor<8x4xf32>
  }
}
"""


def test_a_product_of_two_partial_values_sums_one_of_them_first():
    # (The state propagation can leave behind, see test_propagation.)  The
    # local product of two partials would be sum(p_i * q_i), not
    # sum(p_i) * sum(q_i): one operand is summed, the other stays partial.
    _, counts = _run_and_compare(PRODUCT_OF_TWO_PARTIALS, "builtin.module(spmd-partition)",
                                 [(8, 16), (16, 4), (8, 16), (16, 4)])
    assert counts["all_reduce"] == 2  # q before the product, r after


PARTIAL_PLUS_A_CONSTANT = """
module attributes {spmd.mesh = #sdy.mesh<["x"=2]>} {
  func.func @main(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,2]<=[2]}"},
                  %b: tensor<16x4xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"})
      -> (tensor<8x4xf32> {mhlo.sharding = "{replicated}"}) {
    %p = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] {mhlo.sharding = "{unreduced}"}
      : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    %one = stablehlo.constant dense<1.0> : tensor<f32>
    %c = stablehlo.broadcast_in_dim %one, dims = [] {mhlo.sharding = "{unreduced}"}
      : (tensor<f32>) -> tensor<8x4xf32>
    %r = stablehlo.add %p, %c {mhlo.sharding = "{unreduced}"} : tensor<8x4xf32>
    return %r : tensor<8x4xf32>
  }
}
"""


def test_a_partial_plus_a_whole_value_sums_the_partial_first():
    # An add keeps a sum pending only where both operands pend it (P + P):
    # the constant cannot be a partial sum, each device holds all of it, and
    # p_i + 1 summed over 2 devices added 2.
    _, counts = _run_and_compare(PARTIAL_PLUS_A_CONSTANT, "builtin.module(spmd-partition)",
                                 [(8, 16), (16, 4)])
    assert counts["all_reduce"] == 1


WITH_COMPARATOR = """
module attributes {spmd.mesh = #sdy.mesh<["x"=2]>} {
  func.func private @less(%a: tensor<f32>, %b: tensor<f32>) -> tensor<i1> {
    %0 = stablehlo.compare LT, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
    return %0 : tensor<i1>
  }
  func.func @main(%x: tensor<8xf32> {mhlo.sharding = "{devices=[2]<=[2]}"}) -> tensor<8xf32> {
    %0 = stablehlo.custom_call @opaque(%x) {called_computations = [@less]}
      : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
"""


def test_a_function_named_by_called_computations_is_kept():
    # Only called functions were re-created per device; a comparator that a
    # custom call names was dropped, leaving the call's reference dangling
    # (the module did not verify).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        partitioned = ss.run_passes(WITH_COMPARATOR, "builtin.module(spmd-propagate,spmd-partition)")
    assert "called_computations = [@less]" in partitioned
    assert re.search(r"func\.func private @less\(", partitioned)


def _lit_chunk(path: str, needle: str) -> str:
    """The module of the lit test file `path` (under tests/lit) whose text
    holds `needle`, without its comments."""
    text = (pathlib.Path(__file__).parents[2] / "lit" / path).read_text()
    case = next(c for c in text.split("// -----") if needle in c)
    return "\n".join(line for line in case.splitlines() if not line.startswith("//"))


def _lit_case(path: str, function: str) -> str:
    """The module of `path` that defines `function`, renamed @main to run."""
    return _lit_chunk(path, f"@{function}(").replace(f"@{function}(", "@main(")


def test_a_move_is_reused_where_it_dominates_and_made_again_where_not():
    # a goes from rows to columns inside the loop body and again after the
    # loop (the first move does not dominate the multiply); the add and the
    # multiply are each exact.
    partitioned, counts = _run_and_compare(_lit_case("partition/reshard.mlir", "moved_in_a_loop"),
                                           "spmd-propagate,spmd-partition", [(8, 8), (8, 8)])
    assert counts["all_to_all"] == 2 and counts["all_gather"] == 0


def test_a_value_on_one_device_runs_there_and_comes_back():
    # The lit case: rows gathered to device 2, exp there, rows kept after.
    _, counts = _run_and_compare(_lit_case("partition/reshard.mlir", "on_one_device"),
                                 "spmd-propagate,spmd-partition", [(8, 4)])
    assert counts["all_gather"] == 1 and sum(counts.values()) == 1


ON_ONE_DEVICE_AT_THE_BOUNDARY = """
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @main(%a: tensor<8x4xf32> {mhlo.sharding = "{maximal device=1}"},
                  %b: tensor<8x4xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"})
      -> (tensor<8x4xf32> {mhlo.sharding = "{maximal device=3}"}) {
    %0 = stablehlo.add %a, %b {mhlo.sharding = "{devices=[4,1]<=[4]}"} : tensor<8x4xf32>
    return %0 : tensor<8x4xf32>
  }
}
"""


def test_values_on_one_device_cross_the_function_boundary_whole():
    # XLA's SingleDeviceToSingleDevice family: an argument on device 1 and a
    # result on device 3 cross the boundary whole on every device (the frame
    # has no single-device form); inside, the argument is sliced to rows for
    # free and the sum is gathered to hand it to device 3.
    partitioned, counts = _run_and_compare(ON_ONE_DEVICE_AT_THE_BOUNDARY,
                                           "spmd-propagate,spmd-partition", [(8, 4), (8, 4)])
    assert "maximal_mesh" not in partitioned
    assert counts["all_gather"] == 1 and sum(counts.values()) == 1


def test_open_dims_are_split_where_propagation_splits_them():
    # Shardy's {?} argument takes its partner's split ([{"a"}, {"b"}]): the
    # sum then runs on local blocks, and both sums match one device.
    partitioned, counts = _run_and_compare(_lit_case("propagate/shardy_controls.mlir", "main"),
                                           "spmd-propagate,spmd-partition", [(8, 8)] * 3)
    assert "tensor<4x4xf32>" in partitioned and sum(counts.values()) == 0


def test_shardy_data_only_ops_run_split():
    # sdy.constant and an edge without a sharding take the argument's split:
    # nothing moves, and the result matches one device.
    module = _lit_chunk("propagate/shardy_controls.mlir", "sdy.data_flow_edge")
    partitioned = ss.run_passes(module, "spmd-propagate,spmd-partition")
    assert "sdy.constant" not in partitioned and "sdy.data_flow_edge" not in partitioned
    assert "tensor<4x4xf32>" in partitioned and "stablehlo.all_" not in partitioned
    # XLA compiles no sdy op on one device: the reference is the same program
    # in plain stablehlo.
    reference = module.replace("sdy.constant", "stablehlo.constant").replace(
        "%1 = sdy.data_flow_edge %0 : tensor<8x8xf32>", "").replace("multiply %1, %1",
                                                                    "multiply %0, %0")
    x = np.asarray(_random(8, 8))
    (got,), (want,) = ss.run(partitioned, [x]), ss.run_single_device(reference, [x])
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)


def test_an_open_constraint_is_split_where_propagation_splits_it():
    module = _lit_chunk("propagate/shardy_controls.mlir", "sdy.sharding_constraint")
    partitioned = ss.run_passes(module, "spmd-propagate,spmd-partition")
    # Rows over a as the constraint allows; columns whole as it says.
    assert "tensor<4x8xf32>" in partitioned
    reference = module.replace("%0 = sdy.sharding_constraint %arg1 <@mesh, [{?}, {}]> : "
                               "tensor<8x8xf32>", "").replace("add %0, %arg0", "add %arg1, %arg0")
    x, y = np.asarray(_random(8, 8)), np.asarray(_random(8, 8))
    (got,), (want,) = ss.run(partitioned, [x, y]), ss.run_single_device(reference, [x, y])
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)


_TWO_PERMUTES = """
func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {{
  %0 = "stablehlo.collective_permute"(%x) <{{source_target_pairs = dense<{there}> : tensor<{n}x2xi64>}}> : (tensor<2xf32>) -> tensor<2xf32>
  %1 = stablehlo.reverse %0, dims = [0] : tensor<2xf32>
  %2 = "stablehlo.collective_permute"(%1) <{{source_target_pairs = dense<{back}> : tensor<{n}x2xi64>}}> : (tensor<2xf32>) -> tensor<2xf32>
  return %2 : tensor<2xf32>
}}
"""


def _permutes_left(there: str, back: str, n: int) -> int:
    from stablehlo_spmd.ir import make_context, parse_module, print_module
    from stablehlo_spmd.partitioning.partitioner import cancel_inverse_permutes

    with make_context() as context:
        module = parse_module(_TWO_PERMUTES.format(there=there, back=back, n=n), "t", context)
        body = module.regions[0].blocks[0].operations[0].regions[0].blocks[0]
        cancel_inverse_permutes(body, 2)
        return print_module(module).count("collective_permute")


def test_a_permute_and_its_inverse_cancel_across_a_per_block_op():
    assert _permutes_left("[[0, 1], [1, 0]]", "[[1, 0], [0, 1]]", 2) == 0


def test_permutes_that_leave_a_device_zeros_do_not_cancel():
    # Device 0 receives nothing from the first (zeros), device 1 nothing from
    # the second: the pair is not the identity although each pair is undone.
    assert _permutes_left("[[0, 1]]", "[[1, 0]]", 1) == 2


def test_a_jax_sharding_constraint_says_where_its_input_is_computed():
    # jax.lax.with_sharding_constraint closes the tanh's rows: Shardy's import
    # (for parity with GSPMD) gives the constraint's sharding to the tanh
    # itself, so the dot's row split is gathered before the tanh rather than
    # after it.  The result matches one device.
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model"))
    columns = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(None, "model"))

    def f(x, w):
        return jax.lax.with_sharding_constraint(jnp.tanh(x @ w), columns)

    x, w = np.asarray(_random(16, 32)), np.asarray(_random(32, 8))
    annotated = ss.annotate(ss.export(f, x, w), "data=4,model=2", [(r"^x$", ("data", None))])
    propagated = ss.propagate(annotated)
    constraint = re.search(r'custom_call @Sharding\(%\w+\) \{mhlo.sharding = "([^"]*)"',
                           propagated).group(1)
    tanh = re.search(r'stablehlo.tanh %\w+ \{mhlo.sharding = "([^"]*)"', propagated).group(1)
    assert tanh == constraint
    (got,) = ss.run(ss.partition(annotated), [x, w])
    (want,) = ss.run_single_device(annotated, [x, w])
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
