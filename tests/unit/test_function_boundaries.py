"""Function boundaries under spmd-propagate: each call site shards its own
copy of a callee (copies that agree merge back), and an entry point's
arguments and results divide evenly.  Each program is partitioned and run
against one device."""

import re

import numpy as np

import stablehlo_spmd as ss

TWO_SITES = """
module attributes {spmd.mesh = #sdy.mesh<["x"=4]>} {
  func.func @main(%rows: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
                  %cols: tensor<8x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"})
      -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"},
          tensor<8x8xf32> {mhlo.sharding = "{devices=[1,4]<=[4]}"}) {
    %0 = func.call @softsign(%rows) : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %1 = func.call @softsign(%cols) : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %2 = func.call @softsign(%0) : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %2, %1 : tensor<8x8xf32>, tensor<8x8xf32>
  }
  func.func private @softsign(%v: tensor<8x8xf32>) -> tensor<8x8xf32> {
    %0 = stablehlo.abs %v : tensor<8x8xf32>
    %1 = stablehlo.constant dense<1.0> : tensor<8x8xf32>
    %2 = stablehlo.add %0, %1 : tensor<8x8xf32>
    %3 = stablehlo.divide %v, %2 : tensor<8x8xf32>
    return %3 : tensor<8x8xf32>
  }
}
"""

UNEVEN_INSIDE = """
sdy.mesh @mesh = <["b"=2, "c"=3]>
func.func @main(%x: tensor<4x9xf32>, %y: tensor<3x9xf32>) -> (tensor<4x9xf32>, tensor<3x9xf32>) {
  %0 = stablehlo.sine %x {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"b", "c"}, {}]>]>} : tensor<4x9xf32>
  %1 = stablehlo.cosine %y {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"b"}, {"c"}]>]>} : tensor<3x9xf32>
  return %0, %1 : tensor<4x9xf32>, tensor<3x9xf32>
}
"""

CLOSED_UNEVEN_ARGUMENT = """
sdy.mesh @mesh = <["x"=4, "y"=2]>
func.func @main(%v: tensor<2x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>})
    -> tensor<2x8xf32> {
  %0 = stablehlo.exponential %v : tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}
"""


def _random(*shape, seed=[900]):
    seed[0] += 1
    return np.random.default_rng(seed[0]).standard_normal(shape).astype(np.float32)


def _partition_and_compare(text, args):
    partitioned = ss.run_passes(text, "spmd-propagate,spmd-partition,canonicalize")
    got, want = ss.run(partitioned, args), ss.run_single_device(text, args)
    for index, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6, atol=1e-6,
                                   err_msg=f"result #{index}")
    return partitioned


def test_each_call_site_keeps_its_own_layout_and_agreeing_copies_merge():
    propagated = ss.run_passes(TWO_SITES, "spmd-propagate")
    # Three sites: the two on rows share one copy, the one on columns has its own.
    assert re.findall(r"call @(\w+)\(", propagated) == ["softsign", "softsign_0", "softsign"]
    assert len(re.findall(r"func\.func private", propagated)) == 2
    partitioned = _partition_and_compare(TWO_SITES, [_random(8, 8), _random(8, 8)])
    # Neither site is moved into the other's layout.
    assert not re.search(r"stablehlo\.(all_to_all|all_gather|collective_permute)", partitioned)
    signatures = re.findall(r"func\.func private @\w+\(%arg0: (tensor<\w+>)", partitioned)
    assert sorted(signatures) == ["tensor<2x8xf32>", "tensor<8x2xf32>"]


def test_entry_values_divide_evenly_while_the_ops_inside_stay_uneven():
    propagated = ss.run_passes(UNEVEN_INSIDE, "spmd-propagate")
    # 4 rows over "b" only (2 each), not "c" after it; 3 rows not at all,
    # 9 columns over "c": arguments and results alike.
    on_b = '{mhlo.sharding = "{devices=[2,1,3]<=[6] last_tile_dim_replicate}"}'
    on_c = '{mhlo.sharding = "{devices=[1,3,2]<=[2,3]T(1,0) last_tile_dim_replicate}"}'
    assert f"%arg0: tensor<4x9xf32> {on_b}" in propagated
    assert f"%arg1: tensor<3x9xf32> {on_c}" in propagated
    assert f"-> (tensor<4x9xf32> {on_b}, tensor<3x9xf32> {on_c})" in propagated
    # The ops inside keep the uneven splits their annotations asked for.
    assert 'stablehlo.sine %arg0 {mhlo.sharding = "{devices=[6,1]<=[6]}"}' in propagated
    assert 'stablehlo.cosine %arg1 {mhlo.sharding = "{devices=[2,3]<=[6]}"}' in propagated
    partitioned = _partition_and_compare(UNEVEN_INSIDE, [_random(4, 9), _random(3, 9)])
    # Each device's blocks, in the manual body: 2x9 and 3x3.
    assert re.search(r"\(%arg2: tensor<2x9xf32>[^,]*, %arg3: tensor<3x3xf32>", partitioned)


def test_a_closed_shardy_argument_keeps_the_part_of_an_axis_that_divides():
    propagated = ss.run_passes(CLOSED_UNEVEN_ARGUMENT, "spmd-propagate")
    # 2 rows keep the major half of "x" (the sub-axis "x":(1)2), on a mesh
    # cut there; the columns keep "y"; the exp inside keeps all of "x".
    assert '["x:(1)2"=2, "x:(2)2"=2, "y"=2]' in propagated
    assert '%arg0: tensor<2x8xf32> {mhlo.sharding = "{devices=[2,2,2]<=[2,2,2]T(0,2,1) ' \
        'last_tile_dim_replicate}"}' in propagated
    assert 'stablehlo.exponential %arg0 {mhlo.sharding = "{devices=[4,2]<=[8]}"}' in propagated
    partitioned = _partition_and_compare(CLOSED_UNEVEN_ARGUMENT, [_random(2, 8)])
    assert re.search(r"\(%arg1: tensor<1x4xf32>", partitioned)
