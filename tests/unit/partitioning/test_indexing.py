"""Gathers partition per device in each of GSPMD's patterns.

Index-parallel lookups (indices split on batch), operand pass-through dims
(a table split on its embedding dim), ``take_along_axis`` from a
cross-entropy loss, with the vocabulary whole or split, and its gradient;
each on 8 CPU devices against the single-device run, with the collectives
each pattern needs counted from first principles.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_spmd as ss

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute")


def _random(*shape, seed=[200]):
    seed[0] += 1
    return jnp.asarray(np.random.default_rng(seed[0]).standard_normal(shape), jnp.float32)


def _ids(high, *shape):
    return jnp.asarray(np.random.default_rng(high).integers(0, high, shape), jnp.int32)


def _compare(fn, args, mesh, rules):
    text = ss.export(fn, *args)
    partitioned = ss.partition(text, mesh, rules)
    leaves = [np.asarray(x) for x in args]
    got = ss.run(partitioned, leaves)
    want = ss.run_single_device(text, leaves)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)
    return {kind: len(re.findall(rf'"?stablehlo\.{kind}"?\(', partitioned)) for kind in COLLECTIVES}


def _lookup(table, ids):
    return jnp.take(table, ids, axis=0)


def _cross_entropy(logits, labels):
    log_probs = jax.nn.log_softmax(logits)
    return -jnp.take_along_axis(log_probs, labels[:, None], axis=1)[:, 0]


NOTHING = {kind: 0 for kind in COLLECTIVES}


@pytest.mark.parametrize("table_spec, result_spec", [
    ((None, None), ("data", None, None)),         # index-parallel: each device its rows of ids
    ((None, "model"), ("data", None, "model")),   # and its columns of the table
])
def test_lookups_with_batch_split_indices_need_no_communication(table_spec, result_spec):
    counts = _compare(_lookup, (_random(32, 16), _ids(32, 8, 6)), "data=4,model=2", [
        (r"^table$", table_spec), (r"^ids$", ("data", None)), (r"^result$", result_spec)])
    assert counts == NOTHING


def test_take_along_axis_on_batch_split_logits_is_local():
    counts = _compare(_cross_entropy, (_random(8, 24), _ids(24, 8)), "data=4,model=2", [
        (r"^logits$", ("data", None)), (r"^labels$", ("data",)), (r"^result$", ("data",))])
    assert counts == NOTHING


def test_take_along_axis_on_a_split_vocabulary():
    # log_softmax over a split vocabulary needs the max and the sum of
    # exponentials (two all-reduces); the picked log-probability is a
    # masked local gather, summed by a third.  Nothing is gathered.
    counts = _compare(_cross_entropy, (_random(8, 24), _ids(24, 8)), "data=4,model=2", [
        (r"^logits$", ("data", "model")), (r"^labels$", ("data",)), (r"^result$", ("data",))])
    assert counts["all_gather"] == 0 and counts["all_to_all"] == 0
    assert counts["all_reduce"] == 3


def test_cross_entropy_gradient_on_a_split_vocabulary():
    def gradient(logits, labels):
        return jax.grad(lambda l: jnp.sum(_cross_entropy(l, labels)))(logits)

    counts = _compare(gradient, (_random(8, 24), _ids(24, 8)), "data=4,model=2", [
        (r"^logits$", ("data", "model")), (r"^labels$", ("data",)),
        (r"^result$", ("data", "model"))])
    assert counts["all_gather"] == 0 and counts["all_to_all"] == 0


def _scatter_add(table, ids, updates):
    return table.at[ids].add(updates)


@pytest.mark.parametrize("table_spec, updates_spec, expected_all_reduces", [
    # Updates split on batch: each device adds its share; one sum.
    ((None, None), ("data", None, None), 1),
    # And the table split on its embedding dim: each its own columns.
    ((None, "model"), ("data", None, "model"), 1),
    # Updates whole on batch, table and updates split on columns: local.
    ((None, "model"), (None, None, "model"), 0),
])
def test_scatter_add_strategies(table_spec, updates_spec, expected_all_reduces):
    counts = _compare(_scatter_add, (_random(32, 16), _ids(32, 8, 6), _random(8, 6, 16)),
                      "data=4,model=2", [(r"^table$", table_spec), (r"^updates$", updates_spec),
                                         (r"^result$", table_spec)])
    assert counts == {**NOTHING, "all_reduce": expected_all_reduces}


def _unique_ids(high, count):
    return jnp.asarray(np.random.default_rng(high + count).permutation(high)[:count], jnp.int32)


@pytest.mark.parametrize("combine", ["set", "max", "min", "add"])
@pytest.mark.parametrize("table_spec, updates_spec", [
    # Rows split: each device applies the updates that land in its rows
    # (the others are out of bounds there and skipped).
    (("model", None), (None, None)),
    # Columns split, updates alike: each device its own columns.
    ((None, "model"), (None, "model")),
    # Both, on a 2-D mesh.
    (("data", "model"), (None, "model")),
])
def test_scatters_into_a_split_table_move_nothing(combine, table_spec, updates_spec):
    # GSPMD's scatter on trivially sliced (row) dims and pass-through
    # (column) dims: no collective for any combiner, overwrite included.
    def scatter(table, ids, updates):
        return getattr(table.at[ids], combine)(updates)

    counts = _compare(scatter, (_random(32, 16), _unique_ids(32, 8), _random(8, 16)),
                      "data=2,model=4", [(r"^table$", table_spec), (r"^ids$", (None,)),
                                         (r"^updates$", updates_spec),
                                         (r"^result$", table_spec)])
    assert counts == NOTHING


@pytest.mark.parametrize("combine, table_rows, updates, expected", [
    # Many updates into a small table: each device scatters its share into
    # the whole table and the partial tables combine by the body's own
    # max, min or sum (for max and min the table may count on every
    # device: max(t, t) = t).
    *[(combine, 8, 64, {"all_reduce": 1}) for combine in ("max", "min", "add")],
    # A few updates into a large table: gathering the updates (and their
    # indices) moves less than combining the table (GSPMD combines it).
    # (A scatter-add's result is left partial by propagation, which
    # decides where its sum is taken.)
    *[(combine, 512, 8, {"all_gather": 2}) for combine in ("max", "min")],
])
def test_scatter_of_updates_split_on_batch_takes_the_cheaper_plan(combine, table_rows, updates,
                                                                  expected):
    def scatter(table, ids, updates):
        return getattr(table.at[ids], combine)(updates)

    counts = _compare(scatter, (_random(table_rows, 16), _ids(table_rows, updates),
                                _random(updates, 16)), "data=8", [
        (r"^table$", (None, None)), (r"^ids$", ("data",)), (r"^updates$", ("data", None)),
        (r"^result$", (None, None))])
    assert counts == {**NOTHING, **expected}


def test_variadic_overwriting_scatter_into_split_rows_moves_nothing():
    # Two tables updated by one scatter (each keeps the new value), both
    # split on rows: one local scatter shifts the shared indices for both.
    text = """
    module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
      func.func @main(%a: tensor<16x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                      %b: tensor<16x8xi32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                      %i: tensor<3x1xi32>, %u: tensor<3x8xf32>, %v: tensor<3x8xi32>)
          -> (tensor<16x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
              tensor<16x8xi32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) {
        %0:2 = "stablehlo.scatter"(%a, %b, %i, %u, %v) <{scatter_dimension_numbers =
            #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0],
            scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = true}> ({
        ^bb0(%a0: tensor<f32>, %b0: tensor<i32>, %u0: tensor<f32>, %v0: tensor<i32>):
          stablehlo.return %u0, %v0 : tensor<f32>, tensor<i32>
        }) : (tensor<16x8xf32>, tensor<16x8xi32>, tensor<3x1xi32>, tensor<3x8xf32>,
              tensor<3x8xi32>) -> (tensor<16x8xf32>, tensor<16x8xi32>)
        return %0#0, %0#1 : tensor<16x8xf32>, tensor<16x8xi32>
      }
    }"""
    rng = np.random.default_rng(5)
    args = [rng.standard_normal((16, 8)).astype(np.float32),
            rng.integers(0, 9, (16, 8)).astype(np.int32), np.array([[13], [2], [7]], np.int32),
            rng.standard_normal((3, 8)).astype(np.float32),
            rng.integers(0, 9, (3, 8)).astype(np.int32)]
    partitioned = ss.partition(text)
    for got, want in zip(ss.run(partitioned, args), ss.run_single_device(text, args)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert not re.findall(r'"stablehlo\.(all_\w+|collective_permute)"', partitioned)
    assert partitioned.count('"stablehlo.scatter"') == 1


def test_lookup_into_unevenly_split_rows_stays_a_masked_local_gather():
    # 17 rows over 2 devices (9 and 8, plus a row of padding): indices are
    # clamped into the 17 rows before the shift, so none reads the padding.
    # (4 rows looked up: summing them moves less than gathering the table.)
    ids = jnp.asarray([16, 0, 8, 9], jnp.int32)
    counts = _compare(_lookup, (_random(17, 64), ids), "data=4,model=2", [
        (r"^table$", ("model", None)), (r"^ids$", (None,)), (r"^result$", (None, None))])
    assert counts == {**NOTHING, "all_reduce": 1}


@pytest.mark.parametrize("combine", ["set", "add", "max"])
def test_scatter_into_unevenly_split_rows_moves_nothing(combine):
    # XLA's ScatterPartitionedOnTrivialSliceDims shape: 17 rows over 2.
    # Indices past the end (17, 18) are skipped on one device; on the
    # device with padding they land in it, which no one reads.
    def scatter(table, ids, updates):
        return getattr(table.at[ids], combine)(updates, mode="drop")

    ids = jnp.asarray([3, 16, 8, 9, 17, 18, 0], jnp.int32)
    counts = _compare(scatter, (_random(17, 9), ids, _random(7, 9)), "data=4,model=2", [
        (r"^table$", ("model", None)), (r"^ids$", (None,)), (r"^updates$", (None, None)),
        (r"^result$", ("model", None))])
    assert counts == NOTHING


_WHOLE_WINDOW_GATHER = """
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @main(%a: tensor<4x16x8xf32> {mhlo.sharding = "{devices=[1,4,1]<=[4]}"},
                  %i: tensor<3x2xi32> {mhlo.sharding = "{replicated}"})
      -> (tensor<3x4x16x2xf32> {mhlo.sharding = "{devices=[1,1,4,1]<=[4]}"}) {
    %0 = "stablehlo.gather"(%a, %i) <{dimension_numbers = #stablehlo.gather<
        offset_dims = [1, 2, 3], start_index_map = [1, 2], index_vector_dim = 1>,
        slice_sizes = array<i64: 4, 16, 2>}>
      : (tensor<4x16x8xf32>, tensor<3x2xi32>) -> tensor<3x4x16x2xf32>
    return %0 : tensor<3x4x16x2xf32>
  }
}"""

_WHOLE_WINDOW_SCATTER = """
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @main(%a: tensor<6x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"},
                  %i: tensor<3x2xi32> {mhlo.sharding = "{replicated}"},
                  %u: tensor<3x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<6x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}) {
    %0 = "stablehlo.scatter"(%a, %i, %u) <{scatter_dimension_numbers = #stablehlo.scatter<
        update_window_dims = [1], inserted_window_dims = [0],
        scatter_dims_to_operand_dims = [0, 1], index_vector_dim = 1>}> ({
    ^bb0(%old: tensor<f32>, %new: tensor<f32>):
      stablehlo.return %new : tensor<f32>
    }) : (tensor<6x16xf32>, tensor<3x2xi32>, tensor<3x16xf32>) -> tensor<6x16xf32>
    return %0 : tensor<6x16xf32>
  }
}"""


@pytest.mark.parametrize("text, args", [
    # Column starts 0, 5 and 12 are all clamped to 0: every column is read.
    (_WHOLE_WINDOW_GATHER, [np.arange(512, dtype=np.float32).reshape(4, 16, 8),
                            np.array([[0, 1], [5, 6], [12, 0]], np.int32)]),
    # Only the update starting at column 0 lands; the others are out of
    # bounds (skipped) on every device as on one.
    (_WHOLE_WINDOW_SCATTER, [np.zeros((6, 16), np.float32),
                             np.array([[1, 0], [3, 4], [5, 0]], np.int32),
                             np.arange(48, dtype=np.float32).reshape(3, 16)]),
])
def test_indexed_dim_under_a_whole_window_is_a_pass_through(text, args):
    # XLA's GatherPassthrough and ScatterExplicitBatchAndOperandPassthroughDims:
    # an indexed dim whose window covers it whole stays split, untouched.
    partitioned = ss.partition(text)
    for got, want in zip(ss.run(partitioned, args), ss.run_single_device(text, args)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert not re.findall(r'"stablehlo\.(all_\w+|collective_permute)"', partitioned)


def _pick_per_row(x, ids):
    return x[jnp.arange(x.shape[0]), ids]


def _set_per_row(x, ids, u):
    return x.at[jnp.arange(x.shape[0]), ids].set(u)


def _add_per_row(x, ids, u):
    return x.at[jnp.arange(x.shape[0]), ids].add(u)


def test_picking_one_entry_per_row_by_position_keeps_rows_split():
    # x[arange(n), ids]: row j of the indices reads row j of x (XLA's
    # "parallel" gather dims), so rows split alike move nothing.
    counts = _compare(_pick_per_row, (_random(8, 16), _ids(16, 8)), "data=4,model=2", [
        (r"^x$", ("data", None)), (r"^ids$", ("data",)), (r"^result$", ("data",))])
    assert counts == NOTHING


@pytest.mark.parametrize("fn", [_set_per_row, _add_per_row])
def test_scattering_one_entry_per_row_by_position_keeps_rows_split(fn):
    counts = _compare(fn, (_random(8, 16), _ids(16, 8), _random(8)), "data=4,model=2", [
        (r"^x$", ("data", None)), (r"^ids$", ("data",)), (r"^u$", ("data",)),
        (r"^result$", ("data", None))])
    assert counts == NOTHING


def test_a_result_wanted_whole_is_gathered_after_a_split_scatter():
    # Operands split by rows, the result wanted whole: the scatter runs on
    # each device's rows and only its result is gathered (GSPMD's order),
    # not the table and the updates before it.
    counts = _compare(_add_per_row, (_random(8, 16), _ids(16, 8), _random(8)),
                      "data=4,model=2", [(r"^x$", ("data", None)), (r"^ids$", ("data",)),
                                         (r"^u$", ("data",)), (r"^result$", (None, None))])
    assert counts == {**NOTHING, "all_gather": 1}
