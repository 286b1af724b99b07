"""Factor rules of stablehlo_spmd.op_rules.indexing (gather, scatter, sort,
top_k), against structures written by hand (see factor_rules)."""

import jax.numpy as jnp
from jax import lax

from .factor_rules import JOINT, M, N, NONE, P, R, expect, lowered, rule_of, rules_of


def test_gather_take_rows():
    text = lowered(lambda a, i: jnp.take(a, i, axis=0), jnp.zeros((10, 5)),
                   jnp.zeros((3,), jnp.int32))
    # Operand [10,5], indices [3,1], result [3,5].  Row r of the result is
    # row idx[r]: the indexed (collapsed) operand dim can be sharded with a
    # masked local gather and a sum; the index vector dim stays whole.
    expect(rule_of(text, "stablehlo.gather"),
           {"t": (3, P), "c": (5, P), "r": (10, R), "v": (1, N)},
           ["rc", "tv"], ["tc"], JOINT, (0,), "sum")


def test_gather_take_along_axis_has_explicit_batching_dims():
    text = lowered(lambda a, i: jnp.take_along_axis(a, i, axis=1), jnp.zeros((4, 10)),
                   jnp.zeros((4, 3), jnp.int32))
    # Operand [4,10], indices [4,3,1], result [4,3]; dim 0 is a batching
    # dim of operand and indices alike.
    expect(rule_of(text, "stablehlo.gather"),
           {"b": (4, P), "t": (3, P), "r": (10, R), "v": (1, N)},
           ["br", "btv"], ["bt"], JOINT, (0,), "sum")


GATHER = """
  func.func @main(%a: tensor<{operand}xf32>, %i: tensor<3x1xi32>) -> tensor<{result}xf32> {{
    %0 = "stablehlo.gather"(%a, %i) <{{dimension_numbers = #stablehlo.gather<
        offset_dims = {offset}, collapsed_slice_dims = {collapsed}, start_index_map = [0],
        index_vector_dim = 1>, slice_sizes = array<i64: {sizes}>}}>
      : (tensor<{operand}xf32>, tensor<3x1xi32>) -> tensor<{result}xf32>
    return %0 : tensor<{result}xf32>
  }}"""


def test_gather_partial_window_needs_replication():
    # Windows of 2 rows at data-dependent offsets.
    rule = rule_of(GATHER.format(operand="10x5", result="3x2x5", offset="[1, 2]",
                                 collapsed="[]", sizes="2, 5"), "stablehlo.gather")
    expect(rule, {"t": (3, P), "s": (10, N), "c": (5, P), "v": (1, N)},
           ["sc", "tv"], ["tsc"], JOINT, (0,))


def test_gather_window_of_one_that_is_kept_reduces_like_a_collapsed_dim():
    rule = rule_of(GATHER.format(operand="10x5", result="3x1x5", offset="[1, 2]",
                                 collapsed="[]", sizes="1, 5"), "stablehlo.gather")
    expect(rule, {"t": (3, P), "r": (10, R), "k": (1, N), "c": (5, P), "v": (1, N)},
           ["rc", "tv"], ["tkc"], JOINT, (0,), "sum")


def test_gather_collapsed_dim_of_size_one_needs_replication():
    rule = rule_of(GATHER.format(operand="1x5", result="3x5", offset="[1]",
                                 collapsed="[0]", sizes="1, 5"), "stablehlo.gather")
    expect(rule, {"t": (3, P), "c": (5, P), "r": (1, N), "v": (1, N)},
           ["rc", "tv"], ["tc"], JOINT, (0,))


def test_gather_with_implicit_index_vector_dim():
    # index_vector_dim equal to the indices' rank: each index is a scalar.
    rule = rule_of("""
      func.func @main(%a: tensor<10x5xf32>, %i: tensor<3xi32>) -> tensor<3x5xf32> {
        %0 = "stablehlo.gather"(%a, %i) <{dimension_numbers = #stablehlo.gather<
            offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0],
            index_vector_dim = 1>, slice_sizes = array<i64: 1, 5>}>
          : (tensor<10x5xf32>, tensor<3xi32>) -> tensor<3x5xf32>
        return %0 : tensor<3x5xf32>
      }""", "stablehlo.gather")
    expect(rule, {"t": (3, P), "c": (5, P), "r": (10, R)}, ["rc", "t"], ["tc"],
           JOINT, (0,), "sum")


def test_scatter_add_rows():
    text = lowered(lambda a, i, v: a.at[i].add(v), jnp.zeros((10, 5)),
                   jnp.zeros((3,), jnp.int32), jnp.zeros((3, 5)))
    # Input [10,5], indices [3,1], updates [3,5].  The inserted input dim
    # stays sharded (each device applies the updates that land in it); the
    # update scatter dim is a sum over updates.
    expect(rule_of(text, "stablehlo.scatter"),
           {"r": (10, P), "c": (5, P), "t": (3, R), "v": (1, N)},
           ["rc", "tv", "tc"], ["rc"], JOINT, (0, 2), "sum")


def test_scatter_set_with_repeated_indices_is_neither_reduction_nor_linear():
    text = lowered(lambda a, i, v: a.at[i].set(v), jnp.zeros((10, 5)),
                   jnp.zeros((3,), jnp.int32), jnp.zeros((3, 5)))
    expect(rule_of(text, "stablehlo.scatter"),
           {"r": (10, P), "c": (5, P), "t": (3, N), "v": (1, N)},
           ["rc", "tv", "tc"], ["rc"])


def test_scatter_set_with_unique_indices_is_linear():
    text = lowered(lambda a, i, v: a.at[i].set(v, unique_indices=True), jnp.zeros((10, 5)),
                   jnp.zeros((3,), jnp.int32), jnp.zeros((3, 5)))
    expect(rule_of(text, "stablehlo.scatter"),
           {"r": (10, P), "c": (5, P), "t": (3, N), "v": (1, N)},
           ["rc", "tv", "tc"], ["rc"], JOINT, (0, 2))


def test_scatter_partial_window_and_explicit_batching():
    rule = rule_of("""
      func.func @main(%a: tensor<4x10x6xf32>, %i: tensor<4x3x1xi32>, %u: tensor<4x3x2x6xf32>)
          -> tensor<4x10x6xf32> {
        %0 = "stablehlo.scatter"(%a, %i, %u) <{scatter_dimension_numbers = #stablehlo.scatter<
            update_window_dims = [2, 3], input_batching_dims = [0],
            scatter_indices_batching_dims = [0], scatter_dims_to_operand_dims = [1],
            index_vector_dim = 2>}> ({
          ^bb0(%x: tensor<f32>, %y: tensor<f32>):
            %m = stablehlo.maximum %x, %y : tensor<f32>
            stablehlo.return %m : tensor<f32>
          }) : (tensor<4x10x6xf32>, tensor<4x3x1xi32>, tensor<4x3x2x6xf32>) -> tensor<4x10x6xf32>
        return %0 : tensor<4x10x6xf32>
      }""", "stablehlo.scatter")
    # Dim 0 is a batching dim of input, indices and updates.  Update window
    # dim 2 covers 2 of input dim 1's 10 rows: both whole at the op, apart;
    # the input's split flows to the result (a PERMUTATION factor).
    expect(rule, {"b": (4, P), "t": (3, R), "s": (10, M), "w": (2, N), "c": (6, P),
                  "v": (1, N)},
           ["bsc", "btv", "btwc"], ["bsc"], NONE, (), "max")



def test_sort_dimension_needs_replication_for_every_operand():
    text = lowered(lambda a: jnp.argsort(a, axis=1), jnp.zeros((4, 10)))
    expect(rule_of(text, "stablehlo.sort"), {"b": (4, P), "s": (10, N)},
           ["bs", "bs"], ["bs", "bs"])


def test_top_k():
    text = lowered(lambda a: lax.top_k(a, 3), jnp.zeros((2, 4, 10)))
    expect(rule_of(text, "chlo.top_k"), {"a": (2, P), "b": (4, P), "n": (10, N)},
           ["abn"], ["abn", "abn"])


def test_top_k_custom_call_has_top_ks_rule():
    # XLA's TopK custom call (k from its result type) is factored as
    # chlo.top_k is; the tuple-returning form has no tensor results to
    # factor and no rule.
    text = """
      func.func @main(%a: tensor<2x4x10xf32>) -> tensor<2x4x3xi32> {
        %0:2 = stablehlo.custom_call @TopK(%a)
          : (tensor<2x4x10xf32>) -> (tensor<2x4x3xf32>, tensor<2x4x3xi32>)
        %1 = stablehlo.custom_call @TopK(%a)
          : (tensor<2x4x10xf32>) -> tuple<tensor<2x4x3xf32>, tensor<2x4x3xi32>>
        return %0#1 : tensor<2x4x3xi32>
      }"""
    multiple, tupled = rules_of(text, "stablehlo.custom_call")
    expect(multiple, {"a": (2, P), "b": (4, P), "n": (10, N)}, ["abn"], ["abn", "abn"])
    assert multiple.keeps_attributes
    assert tupled is None


def test_gather_indexed_by_position_is_a_batching_dim():
    # x[arange(8), ids]: JAX builds the first index component from an iota
    # (wrapped for negatives, broadcast, concatenated).  Operand row j is
    # read by index row j: one PASS factor b of operand, indices and result,
    # where a data-dependent index would be a REDUCTION factor.
    text = lowered(lambda x, i: x[jnp.arange(8), i], jnp.zeros((8, 16)),
                   jnp.zeros((8,), jnp.int32))
    expect(rule_of(text, "stablehlo.gather"),
           {"b": (8, P), "c": (16, R), "v": (2, N)}, ["bc", "bv"], ["b"], JOINT, (0,), "sum")


def test_gather_indexed_by_a_scaled_iota_is_not():
    text = lowered(lambda x, i: x[2 * jnp.arange(4), i], jnp.zeros((8, 16)),
                   jnp.zeros((4,), jnp.int32))
    expect(rule_of(text, "stablehlo.gather"),
           {"t": (4, P), "r": (8, R), "c": (16, R), "v": (2, N)}, ["rc", "tv"], ["t"],
           JOINT, (0,), "sum")


def test_scatter_indexed_by_position_is_a_batching_dim():
    text = lowered(lambda x, i, u: x.at[jnp.arange(8), i].set(u), jnp.zeros((8, 16)),
                   jnp.zeros((8,), jnp.int32), jnp.zeros((8,)))
    # Operand, indices, updates, result.  The column dim c is inserted
    # (PASS of operand and result); the update rows are operand rows.
    expect(rule_of(text, "stablehlo.scatter"),
           {"b": (8, P), "c": (16, P), "v": (2, N)}, ["bc", "bv", "b"], ["bc"])


def test_position_is_seen_through_xlas_constant_and_unit_reshapes():
    # XLA's form: a constant 0, 1, 2, 3 broadcast along dim 2, and an iota
    # reshaped from [8] to [1,8] and broadcast: both index by position.
    rule = rule_of("""
      func.func @main(%a: tensor<8x4x2xf32>) -> tensor<8x4x2xf32> {
        %c = stablehlo.constant dense<[0, 1, 2, 3]> : tensor<4xi32>
        %rows = stablehlo.broadcast_in_dim %c, dims = [2] : (tensor<4xi32>) -> tensor<1x8x4xi32>
        %i = stablehlo.iota dim = 0 : tensor<8xi32>
        %r = stablehlo.reshape %i : (tensor<8xi32>) -> tensor<1x8xi32>
        %cols = stablehlo.broadcast_in_dim %r, dims = [0, 1] : (tensor<1x8xi32>) -> tensor<1x8x4xi32>
        %idx = stablehlo.concatenate %rows, %cols, dim = 0 : (tensor<1x8x4xi32>, tensor<1x8x4xi32>) -> tensor<2x8x4xi32>
        %0 = "stablehlo.gather"(%a, %idx) <{dimension_numbers = #stablehlo.gather<
            offset_dims = [2], collapsed_slice_dims = [0, 1], start_index_map = [1, 0],
            index_vector_dim = 0>, slice_sizes = array<i64: 1, 1, 2>}>
          : (tensor<8x4x2xf32>, tensor<2x8x4xi32>) -> tensor<8x4x2xf32>
        return %0 : tensor<8x4x2xf32>
      }""", "stablehlo.gather")
    # Operand dim 1 (4) takes component 0, position along indices dim 2;
    # operand dim 0 (8) takes component 1, position along indices dim 1.
    expect(rule, {"a": (8, P), "b": (4, P), "w": (2, P), "v": (2, N)},
           ["abw", "vab"], ["abw"], JOINT, (0,))
