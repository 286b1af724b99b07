"""Top-k along a sharded dimension: local top-k, k candidates gathered, final top-k.

Each case exports `jax.lax.top_k`, partitions it on 8 CPU devices and checks
values and indices exactly against the single-device run; the partitioned
text is checked for what crosses devices: k candidates per device, not the
shard.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np

import stablehlo_spmd as ss

from .single_device import partition_and_check

_ALL_GATHER = re.compile(r'"stablehlo\.all_gather".* : \((tensor<[^>]*>)\) -> (tensor<[^>]*>)')


def _top_k(k, axis=-1):
    def top_k(x):
        return jax.lax.top_k(x, k, axis=axis)
    return top_k


def _partition_and_compare(fn, x, mesh, spec):
    return partition_and_check(fn, (x,), mesh, [(r"^x$", spec)])


def _gathers(partitioned):
    """(operand type, result type) of every all_gather in the text."""
    return _ALL_GATHER.findall(partitioned)


def _rng(seed):
    return np.random.default_rng(seed)


def test_sharded_last_dim_gathers_only_k_candidates():
    x = _rng(1).standard_normal((8, 64)).astype(np.float32)
    partitioned = _partition_and_compare(_top_k(4), x, "x=8", (None, "x"))
    # Values and indices, 4 of each per row and device, gathered to 8 * 4.
    assert sorted(_gathers(partitioned)) == [("tensor<8x4xf32>", "tensor<8x32xf32>"),
                                             ("tensor<8x4xi32>", "tensor<8x32xi32>")]
    assert partitioned.count("chlo.top_k(") == 2
    assert "all_reduce" not in partitioned


def test_ties_break_towards_the_lower_global_index():
    # Few distinct values, so most of the top k are ties spread over shards.
    x = _rng(2).integers(0, 3, (6, 32)).astype(np.float32)
    _partition_and_compare(_top_k(5), x, "x=4", (None, "x"))


def test_uneven_shards_never_pick_the_padding():
    # 10 split 4 ways: shards of 3, the last holding 1 real element and 2 of
    # padding (zeros).  Most values are -inf, so unmasked padding would win.
    x = np.full((4, 10), -np.inf, np.float32)
    x[0, 9], x[1, 0], x[2, 4], x[3, 5] = 1.0, -2.0, 3.0, -4.0
    partitioned = _partition_and_compare(_top_k(3), x, "x=4", (None, "x"))
    assert sorted(_gathers(partitioned)) == [("tensor<4x3xf32>", "tensor<4x12xf32>"),
                                             ("tensor<4x3xi32>", "tensor<4x12xi32>")]


def test_uneven_integers_with_the_minimum_value_present():
    # int32's minimum is the padding's filler too: ties with real elements
    # must still go to the real (lower) index.
    low = np.iinfo(np.int32).min
    x = _rng(3).integers(-5, 5, (3, 13)).astype(np.int32)
    x[:, 6:] = low
    x[2, :] = low
    _partition_and_compare(_top_k(3), jnp.asarray(x), "x=8", (None, "x"))


def test_batch_and_last_dim_sharded():
    x = _rng(4).standard_normal((6, 20)).astype(np.float32)
    partitioned = _partition_and_compare(_top_k(5), x, "data=2,model=4", ("data", "model"))
    # Rows stay split over data; the 5 candidates are gathered over model only.
    assert sorted(_gathers(partitioned)) == [("tensor<3x5xf32>", "tensor<3x20xf32>"),
                                             ("tensor<3x5xi32>", "tensor<3x20xi32>")]
    assert "replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7]]>" in partitioned


def test_three_d_operand_and_top_k_along_another_axis():
    # lax.top_k(axis=0) is a transpose around chlo.top_k; the sharding follows it.
    x = _rng(5).standard_normal((32, 2, 3)).astype(np.float32)
    partitioned = _partition_and_compare(_top_k(2, axis=0), x, "x=8", ("x", None, None))
    assert partitioned.count("chlo.top_k(") == 2
    assert sorted(_gathers(partitioned)) == [("tensor<3x2x2xf32>", "tensor<3x2x16xf32>"),
                                             ("tensor<3x2x2xi32>", "tensor<3x2x16xi32>")]


def test_k_larger_than_a_shard_gathers_the_dim():
    x = _rng(6).standard_normal((4, 16)).astype(np.float32)
    partitioned = _partition_and_compare(_top_k(3), x, "x=8", (None, "x"))
    # Shards of 2 cannot hold 3 candidates: the dim is gathered, one top_k runs.
    assert partitioned.count("chlo.top_k(") == 1
    assert _gathers(partitioned) == [("tensor<4x2xf32>", "tensor<4x16xf32>")]


def test_batch_sharded_top_k_runs_locally():
    # The rule keeps k per device: a top-k over an unsharded last dim runs on
    # each device's rows, with nothing moved.
    x = _rng(7).standard_normal((16, 12)).astype(np.float32)
    partitioned = _partition_and_compare(_top_k(3), x, "x=8", ("x", None))
    assert "chlo.top_k(%arg1, k = 3) : tensor<2x12xf32>" in partitioned
    assert not _gathers(partitioned)


# ----------------------------------------------------------------- sort

_COLLECTIVE = re.compile(r'"stablehlo\.(all_gather|all_to_all|all_reduce|collective_permute)"')


def _sort_and_compare(fn, args, mesh, rules):
    """The collectives of the partitioned sort, checked against one device."""
    return sorted(_COLLECTIVE.findall(partition_and_check(fn, args, mesh, rules)))


def test_sort_along_a_split_dim_moves_the_split_to_another_dim():
    # Columns split 8 ways; each device sorts 8 whole rows after one
    # all_to_all and sends the columns back with another: nothing gathered.
    x = _rng(10).standard_normal((64, 128)).astype(np.float32)
    found = _sort_and_compare(lambda x: jnp.sort(x, axis=1), (x,), "x=8",
                              [(r"^x$", (None, "x")), (r"^result$", (None, "x"))])
    assert found == ["all_to_all", "all_to_all"]


def test_argsort_sorts_keys_and_their_positions_together():
    # argsort sorts (x, iota) pairs and returns the sorted iota: x goes to
    # the row split by an all_to_all (the iota, whole on every device, is
    # sliced there), and only the positions come back; the sorted keys,
    # read by nothing, are not moved.  Ties (few distinct values) must keep
    # the single-device order.
    x = _rng(11).integers(0, 4, (16, 64)).astype(np.float32)
    found = _sort_and_compare(lambda x: jnp.argsort(x, axis=1, stable=True), (x,), "x=4",
                              [(r"^x$", (None, "x")), (r"^result$", (None, "x"))])
    assert found == ["all_to_all", "all_to_all"]


def test_sort_on_a_two_axis_mesh_moves_only_the_sorted_dims_axis():
    x = _rng(12).standard_normal((16, 32)).astype(np.float32)
    found = _sort_and_compare(lambda x: jnp.sort(x, axis=1), (x,), "a=2,b=4",
                              [(r"^x$", ("a", "b")), (r"^result$", ("a", "b"))])
    assert found == ["all_to_all", "all_to_all"]


def test_sort_wanted_whole_gathers_once():
    # Moving the split would still leave the sorted rows to gather: the
    # cheaper plan is one all_gather of the operand.
    x = _rng(13).standard_normal((64, 16)).astype(np.float32)
    found = _sort_and_compare(lambda x: jnp.sort(x, axis=0), (x,), "x=8",
                              [(r"^x$", ("x", None)), (r"^result$", (None, None))])
    assert found == ["all_gather"]


def test_sort_with_no_dim_to_move_the_split_to_gathers_it():
    x = _rng(14).standard_normal((3, 64)).astype(np.float32)
    found = _sort_and_compare(lambda x: jnp.sort(x, axis=1), (x,), "x=8",
                              [(r"^x$", (None, "x")), (r"^result$", (None, "x"))])
    assert found == ["all_gather"]


# ------------------------------------------------------- custom_call @TopK

_TOP_K_CALL = """
module attributes {{spmd.mesh = #sdy.mesh<[{mesh}]>}} {{
  func.func @main(%x: tensor<{rows}x{n}xf32> {{mhlo.sharding = "{sharding}"}})
      -> (tensor<{rows}x{k}xf32> {{mhlo.sharding = "{{replicated}}"}},
          tensor<{rows}x{k}xi32> {{mhlo.sharding = "{{replicated}}"}}) {{
    %0:2 = stablehlo.custom_call @TopK(%x)
        : (tensor<{rows}x{n}xf32>) -> (tensor<{rows}x{k}xf32>, tensor<{rows}x{k}xi32>)
    return %0#0, %0#1 : tensor<{rows}x{k}xf32>, tensor<{rows}x{k}xi32>
  }}
}}
"""


def _top_k_call(x, k, mesh, sharding):
    """XLA's TopK custom call on `x` (split as `sharding`), partitioned and
    checked exactly against the single-device run; the partitioned text."""
    rows, n = x.shape
    text = _TOP_K_CALL.format(mesh=mesh, rows=rows, n=n, k=k, sharding=sharding)
    partitioned = ss.partition(text)
    got, want = ss.run(partitioned, [x]), ss.run_single_device(text, [x])
    for name, g, w in zip(("values", "indices"), got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=name)
    return partitioned


def test_top_k_custom_call_gathers_only_k_candidates():
    x = _rng(20).standard_normal((16, 256)).astype(np.float32)
    partitioned = _top_k_call(x, 8, '"x"=8', "{devices=[1,8]<=[8]}")
    assert sorted(_gathers(partitioned)) == [("tensor<16x8xf32>", "tensor<16x64xf32>"),
                                             ("tensor<16x8xi32>", "tensor<16x64xi32>")]
    assert partitioned.count("custom_call @TopK(") == 2


def test_top_k_custom_call_on_uneven_shards_never_picks_the_padding():
    # 20 over 8: shards of 3, the last device holding padding only.
    x = np.full((4, 20), -np.inf, np.float32)
    x[0, 19], x[1, 0], x[2, 17], x[3, 10] = 1.0, -2.0, 3.0, -4.0
    partitioned = _top_k_call(x, 2, '"x"=8', "{devices=[1,8]<=[8]}")
    assert sorted(_gathers(partitioned)) == [("tensor<4x2xf32>", "tensor<4x16xf32>"),
                                             ("tensor<4x2xi32>", "tensor<4x16xi32>")]


def test_top_k_custom_call_on_split_rows_runs_locally_by_rule():
    x = _rng(21).standard_normal((16, 32)).astype(np.float32)
    partitioned = _top_k_call(x, 4, '"x"=8', "{devices=[8,1]<=[8]}")
    assert "custom_call @TopK(%arg1) : (tensor<2x32xf32>)" in partitioned
    assert partitioned.count("custom_call @TopK(") == 1
    assert not _gathers(partitioned[:partitioned.index("custom_call @TopK(")])


def test_tuple_top_k_custom_call_runs_on_its_split_rows():
    # XLA's converter writes TopK with one tuple result read by
    # get_tuple_element (which carry the shardings): rows split 8 ways stay
    # split, each device ranks its own 2 rows and nothing gathers the input.
    text = """
    module attributes {spmd.mesh = #sdy.mesh<["x"=8]>} {
      func.func @main(%x: tensor<16x32xf32> {mhlo.sharding = "{devices=[8,1]<=[8]}"})
          -> (tensor<16x4xf32> {mhlo.sharding = "{replicated}"},
              tensor<16x4xi32> {mhlo.sharding = "{replicated}"}) {
        %0 = stablehlo.custom_call @TopK(%x) : (tensor<16x32xf32>)
            -> tuple<tensor<16x4xf32>, tensor<16x4xi32>>
        %1 = stablehlo.get_tuple_element %0[0] {mhlo.sharding = "{devices=[8,1]<=[8]}"}
            : (tuple<tensor<16x4xf32>, tensor<16x4xi32>>) -> tensor<16x4xf32>
        %2 = stablehlo.get_tuple_element %0[1] {mhlo.sharding = "{devices=[8,1]<=[8]}"}
            : (tuple<tensor<16x4xf32>, tensor<16x4xi32>>) -> tensor<16x4xi32>
        return %1, %2 : tensor<16x4xf32>, tensor<16x4xi32>
      }
    }"""
    x = _rng(22).standard_normal((16, 32)).astype(np.float32)
    partitioned = ss.partition(text)
    got, want = ss.run(partitioned, [x]), ss.run_single_device(text, [x])
    for name, g, w in zip(("values", "indices"), got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=name)
    assert "custom_call @TopK(%arg1) : (tensor<2x32xf32>)" in partitioned
    assert sorted(_gathers(partitioned)) == [("tensor<2x4xf32>", "tensor<16x4xf32>"),
                                             ("tensor<2x4xi32>", "tensor<16x4xi32>")]


def test_top_k_custom_call_with_its_own_comparator_gathers_the_dim():
    # The candidates' filler and order assume largest-first; a TopK given a
    # comparator (here smallest-first) gathers the dim and runs once.
    text = """
    module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
      func.func private @smaller(%l: tensor<f32>, %r: tensor<f32>) -> tensor<i1> {
        %lt = stablehlo.compare LT, %l, %r, TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>
        return %lt : tensor<i1>
      }
      func.func @main(%a: tensor<8x16xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
          -> (tensor<8x2xf32> {mhlo.sharding = "{replicated}"},
              tensor<8x2xi32> {mhlo.sharding = "{replicated}"}) {
        %0:2 = stablehlo.custom_call @TopK(%a) {called_computations = [@smaller]}
            : (tensor<8x16xf32>) -> (tensor<8x2xf32>, tensor<8x2xi32>)
        return %0#0, %0#1 : tensor<8x2xf32>, tensor<8x2xi32>
      }
    }
    """
    partitioned = ss.partition(text)
    assert _gathers(partitioned) == [("tensor<8x4xf32>", "tensor<8x16xf32>")]
    assert partitioned.count("custom_call @TopK(") == 1
