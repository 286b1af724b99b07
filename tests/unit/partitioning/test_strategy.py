"""The strategy table (`partitioning.strategy`): keyed like the op-rule table,
one strategy an op, and plans that emit nothing until a strategy commits."""

import re
import warnings

import numpy as np
import pytest

import stablehlo_spmd as ss
from stablehlo_spmd import op_rules
from stablehlo_spmd.partitioning import STRATEGIES
from stablehlo_spmd.partitioning.strategy import strategy


def test_every_strategy_is_for_an_op_the_rule_table_knows():
    # "Where is op X handled" has one answer: its strategy, keyed by the
    # same name as its rule; a strategy for an op with no rule would be a
    # typo that silently never runs.
    assert STRATEGIES
    assert [name for name in STRATEGIES if not op_rules.has_rule(name)] == []


def test_a_second_strategy_for_an_op_is_refused():
    with pytest.raises(AssertionError, match="stablehlo.slice already has a strategy"):
        strategy("stablehlo.slice")(lambda p, op, plan, operands: operands)


SCATTER_OF_A_SPLIT_WINDOW = """
module {
  func.func public @main(%table: tensor<8x4xf32> {mhlo.sharding = "{devices=[1,2]<=[2]}"},
                         %rows: tensor<2x1xi32>, %updates: tensor<2x2xf32>)
      -> (tensor<8x4xf32> {mhlo.sharding = "{devices=[1,2]<=[2]}"}) {
    %0 = "stablehlo.scatter"(%table, %rows, %updates) ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %s : tensor<f32>
    }) {scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1],
        inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>,
        indices_are_sorted = false, unique_indices = false}
      : (tensor<8x4xf32>, tensor<2x1xi32>, tensor<2x2xf32>) -> tensor<8x4xf32>
    return %0 : tensor<8x4xf32>
  }
}
"""


def test_a_declined_strategy_leaves_nothing_behind_and_the_default_is_exact():
    # The update windows cover only 2 of the table's 4 split columns, a
    # scatter the local strategy declines.  Declining happens while
    # planning, so the rule-driven default emits the op once, on the
    # gathered table, says so at the op, and computes what one device does.
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        partitioned = ss.run_passes(SCATTER_OF_A_SPLIT_WINDOW,
                                    "builtin.module(spmd-propagate,spmd-partition{warn-bytes=0})")
    assert partitioned.count('"stablehlo.scatter"') == 1
    assert any(re.search(r"^<input>:6:10: warning: 'stablehlo.scatter' needs dimension 1 of "
                         r"its operand tensor<8x4xf32> whole", str(w.message)) for w in seen)
    table = np.arange(32, dtype=np.float32).reshape(8, 4)
    rows = np.array([[1], [6]], dtype=np.int32)
    updates = np.ones((2, 2), dtype=np.float32)
    got = np.asarray(ss.run(partitioned, [table, rows, updates])[0])
    want = np.asarray(ss.run_single_device(SCATTER_OF_A_SPLIT_WINDOW, [table, rows, updates])[0])
    np.testing.assert_array_equal(got, want)


BATCHED_DOT_WANTED_ELSEWHERE = """
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=2]>} {
  func.func @main(%lhs: tensor<4x8x24x16xf32> {mhlo.sharding = "{devices=[2,1,2,1]<=[4]}"},
                  %rhs: tensor<4x8x32x16xf32> {mhlo.sharding = "{devices=[2,1,2,1]<=[4]}"})
      -> (tensor<4x8x24x32xf32> {mhlo.sharding = "{devices=[1,2,2,1]<=[4]}"}) {
    %0 = stablehlo.dot_general %lhs, %rhs, batching_dims = [0, 1] x [0, 1],
        contracting_dims = [3] x [3] : (tensor<4x8x24x16xf32>, tensor<4x8x32x16xf32>)
        -> tensor<4x8x24x32xf32>
    return %0 : tensor<4x8x24x32xf32>
  }
}
"""


def test_a_dot_runs_where_its_operands_are_when_its_result_is_cheaper_to_move():
    # The result wants its batch split on dim 1, the operands have it on
    # dim 0.  Moving both operands to dim 1 sends more than computing where
    # they are (only rhs's n is gathered) and moving the smaller result:
    # XLA's Dot2DPartitionedBatchAndReshard.
    rng = np.random.default_rng(7)
    lhs = rng.standard_normal((4, 8, 24, 16)).astype(np.float32)
    rhs = rng.standard_normal((4, 8, 32, 16)).astype(np.float32)
    partitioned = ss.run_passes(BATCHED_DOT_WANTED_ELSEWHERE, "spmd-propagate,spmd-partition")
    moved = re.findall(r'"stablehlo\.(all_gather|all_to_all|all_reduce|collective_permute)"\((%\w+)',
                       partitioned)
    assert [kind for kind, _ in moved] == ["all_gather", "all_to_all"]
    # The gather reads rhs (the second argument); the all_to_all, the product.
    assert moved[0][1] == "%arg3"
    got, = ss.run(partitioned, [lhs, rhs])
    want, = ss.run_single_device(BATCHED_DOT_WANTED_ELSEWHERE, [lhs, rhs])
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


PRODUCT_WANTED_ELSEWHERE = """
module attributes {spmd.mesh = #sdy.mesh<["data"=4, "model"=2]>} {
  func.func @main(%a: tensor<4x8x6xf32> {mhlo.sharding = "{devices=[1,4,2]<=[8]}"},
                  %b: tensor<4x8x6xf32> {mhlo.sharding = "{devices=[1,4,2]<=[8]}"})
      -> (tensor<4x8x6xf32> {mhlo.sharding = "{devices=[4,1,2]<=[8]}"}) {
    %0 = stablehlo.multiply %a, %b {mhlo.sharding = "{devices=[4,1,2]<=[8]}"} : tensor<4x8x6xf32>
    return %0 : tensor<4x8x6xf32>
  }
}
"""


def test_an_elementwise_op_runs_where_its_operands_are_when_one_result_moves_less():
    # Mixtral's expert product: both operands split on tokens, the product
    # wanted split on experts (data) and on its last dim (model) as they
    # are.  Running where the product is wanted moves both operands; where
    # they are, the product alone moves (one all_to_all over data).
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((4, 8, 6)).astype(np.float32) for _ in range(2))
    partitioned = ss.run_passes(PRODUCT_WANTED_ELSEWHERE, "spmd-propagate,spmd-partition")
    moved = re.findall(r'"stablehlo\.(all_gather|all_to_all|all_reduce|collective_permute)"\((%\w+)',
                       partitioned)
    product = re.search(r"(%\w+) = stablehlo\.multiply", partitioned).group(1)
    assert moved == [("all_to_all", product)]
    got, = ss.run(partitioned, [a, b])
    want, = ss.run_single_device(PRODUCT_WANTED_ELSEWHERE, [a, b])
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


FSDP_MATMUL = """
module attributes {spmd.mesh = #sdy.mesh<["data"=8]>} {
  func.func @main(%x: tensor<16x16xf32> {mhlo.sharding = "{devices=[8,1]<=[8]}"},
                  %w: tensor<16x32xf32> {mhlo.sharding = "{devices=[8,1]<=[8]}"})
      -> (tensor<16x32xf32> {mhlo.sharding = "{devices=[8,1]<=[8]}"}) {
    %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0]
        : (tensor<16x16xf32>, tensor<16x32xf32>) -> tensor<16x32xf32>
    return %0 : tensor<16x32xf32>
  }
}
"""


def test_a_matmul_may_split_a_dim_neither_side_splits_when_that_moves_less():
    # x's batch and the weight's rows are both split 8 ways.  Gathering the
    # weight moves 7/8 of 2 KiB; moving the weight to a column split (1/8
    # of its 2-row block stays), gathering the smaller x (7/8 of 1 KiB) and
    # moving the product back to a batch split costs 1344 bytes instead.
    x = np.random.default_rng(8).standard_normal((16, 16)).astype(np.float32)
    w = np.random.default_rng(9).standard_normal((16, 32)).astype(np.float32)
    partitioned = ss.run_passes(FSDP_MATMUL, "spmd-propagate,spmd-partition")
    moved = re.findall(r'"stablehlo\.(all_gather|all_to_all|all_reduce|reduce_scatter)"'
                       r'\((%\w+)\).*: \((tensor<[^>]*>)\)', partitioned)
    assert sorted((kind, shape) for kind, _, shape in moved) == [
        ("all_gather", "tensor<2x16xf32>"), ("all_to_all", "tensor<16x4xf32>"),
        ("all_to_all", "tensor<2x32xf32>")]
    got, = ss.run(partitioned, [x, w])
    want, = ss.run_single_device(FSDP_MATMUL, [x, w])
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


PARTIAL_INTO_A_SPLIT_RESULT = """
module attributes {spmd.mesh = #sdy.mesh<["x"=2]>} {
  func.func @main(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,2]<=[2]}"},
                  %w: tensor<16x8xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"},
                  %b: tensor<8x8xf32> {mhlo.sharding = "{devices=[1,2]<=[2]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{replicated}"}) {
    %0 = stablehlo.dot_general %a, %w, contracting_dims = [1] x [0] {mhlo.sharding = "{unreduced}"} : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
    %1 = stablehlo.dot_general %0, %b, contracting_dims = [1] x [0] {mhlo.sharding = "{unreduced}"} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %2 = stablehlo.custom_call @Sharding(%1) {mhlo.sharding = "{replicated}"} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %2 : tensor<8x8xf32>
  }
}
"""


def test_a_partial_does_not_flow_into_a_result_split_over_its_axis():
    # %0 is pending a sum over x; %1 is linear in it, but the plan that keeps
    # %b's columns where they are splits %1's columns over x too, and a value
    # cannot be split over the axis it is pending on.  That plan sums %0
    # first (it used to build the impossible layout and fail).
    partitioned = ss.partition(PARTIAL_INTO_A_SPLIT_RESULT)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(shape).astype(np.float32) for shape in [(8, 16), (16, 8), (8, 8)]]
    got = np.asarray(ss.run(partitioned, inputs)[0])
    want = np.asarray(ss.run_single_device(PARTIAL_INTO_A_SPLIT_RESULT, inputs)[0])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
