"""Shrunk failures of the window-program fuzzer (test_window_programs.py), kept as tests.

Each case is the minimal program hypothesis found (trimmed by hand where
that made it clearer), checked the same way: partitioned, run on the mesh's
devices, compared exactly with one device.  Cases whose fix lies outside the
test suite's files are marked ``xfail(strict=True)`` with the reason, so
that the fix shows up as an XPASS to remove the mark.
"""

from __future__ import annotations

import numpy as np
import pytest

import stablehlo_spmd as ss
from generator import Program
from test_window_programs import check_window_program


# A result split over x=2, in either spelling: (what the module declares
# first, the result's attribute).
SPELLINGS = {"sdy": ('\n  sdy.mesh @mesh = <["x"=2]>', '{sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}'),
             "mhlo": ("", '{mhlo.sharding = "{devices=[2]<=[2]}"}')}


def check(text: str, mesh: str = "x=2", rules=(), seed: int = 0) -> None:
    """`mesh` and `rules` are used only by a module without an ``sdy.mesh``."""
    check_window_program(Program.from_text(text, mesh, rules, seed))


def test_concatenate_of_slices_of_one_sharded_tensor():
    # The bug class the family was written for: rows of x split over "x"
    # and columns over "y", concatenated with two slices of itself, the
    # result split the other way round.  A device kept two pieces of its
    # own shard and the plan put both in one place (collectives.py
    # permute_groups).
    check('''
module {
  sdy.mesh @mesh = <["x"=2, "y"=2]>
  func.func public @main(%arg0: tensor<40x6xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>}) -> (tensor<96x6xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"y"}, {"x"}]>}) {
    %0 = stablehlo.slice %arg0 [0:32, 0:6] : (tensor<40x6xf32>) -> tensor<32x6xf32>
    %1 = stablehlo.slice %arg0 [0:24, 0:6] : (tensor<40x6xf32>) -> tensor<24x6xf32>
    %2 = stablehlo.concatenate %0, %arg0, %1, dim = 0 : (tensor<32x6xf32>, tensor<40x6xf32>, tensor<24x6xf32>) -> tensor<96x6xf32>
    return %2 : tensor<96x6xf32>
  }
}
''')


def test_wrap_around_concatenate_split_the_other_way_on_a_4x2_mesh():
    # What the family found on the code before that fix (300 random
    # programs, 15 failures of this kind), trimmed by hand: x[1:9], x and
    # x[0:2] with rows over "x"=4 and columns over "y", the result's rows
    # over "y" and columns over "x".  Rows 0-3 came out wrong.
    check('''
module {
  sdy.mesh @mesh = <["x"=4, "y"=2]>
  func.func public @main(%arg0: tensor<9x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>}) -> (tensor<19x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"y"}, {"x"}]>}) {
    %0 = stablehlo.slice %arg0 [1:9, 0:8] : (tensor<9x8xf32>) -> tensor<8x8xf32>
    %1 = stablehlo.slice %arg0 [0:2, 0:8] : (tensor<9x8xf32>) -> tensor<2x8xf32>
    %2 = stablehlo.concatenate %0, %arg0, %1, dim = 0 : (tensor<8x8xf32>, tensor<9x8xf32>, tensor<2x8xf32>) -> tensor<19x8xf32>
    return %2 : tensor<19x8xf32>
  }
}
''')


@pytest.mark.parametrize("sharding", [
    'mhlo.sharding = "{devices=[2]<=[2]}"',
    'sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}]>]>'])
def test_concatenate_of_a_tensor_and_a_slice_with_its_per_device_form(sharding):
    # concatenate(x, x[0:3], x), split over x; x and the result stay whole.
    # x[0:3] split in two is x's own shards (x[0:2], x[2:3] padded), and the
    # partitioner's reshard cache, keyed by per-device value and layout,
    # handed the slice x's whole 4 elements when the concatenate was made
    # again replicated: a 12-element result typed 11 (a crash).  The cache
    # key holds the global type now (partitioner.py).
    mesh_op = '\n  sdy.mesh @mesh = <["x"=2]>' if sharding.startswith("sdy") else ""
    check(f'''
module {{{mesh_op}
  func.func public @main(%arg0: tensor<4xf32>) -> (tensor<11xf32>) {{
    %0 = stablehlo.slice %arg0 [0:3] : (tensor<4xf32>) -> tensor<3xf32>
    %1 = stablehlo.concatenate %arg0, %0, %arg0, dim = 0 {{{sharding}}} : (tensor<4xf32>, tensor<3xf32>, tensor<4xf32>) -> tensor<11xf32>
    return %1 : tensor<11xf32>
  }}
}}
''', "x=2")


@pytest.mark.parametrize("spelling", ["sdy", "mhlo"])
def test_dynamic_slice_with_a_clamped_runtime_start_split_on_its_result(spelling):
    # The start is max(%arg1, 3), past the last valid start (1) whatever the
    # input, so the op clamps it.  Each device cut its half out of the whole
    # slice with a dynamic_slice of its own, and XLA folded the two into one
    # at the summed start, clamping only the sum: device 0 got x[2], not
    # x[1].  The partitioner now clamps the start first (control.py
    # emit_dynamic_slice, commit 76ccd11).
    mesh_op, result_sharding = SPELLINGS[spelling]
    check(f'''
module {{{mesh_op}
  func.func public @main(%arg0: tensor<3xf32>, %arg1: tensor<i32>) -> (tensor<2xf32> {result_sharding}) {{
    %0 = stablehlo.constant dense<3> : tensor<i32>
    %1 = stablehlo.maximum %arg1, %0 : tensor<i32>
    %2 = stablehlo.dynamic_slice %arg0, %1, sizes = [2] : (tensor<3xf32>, tensor<i32>) -> tensor<2xf32>
    return %2 : tensor<2xf32>
  }}
}}
''', "x=2")


@pytest.mark.parametrize("spelling", ["sdy", "mhlo"])
def test_pad_window_inside_one_interior_gap(spelling):
    # x = [a, b] with 4 zeros between them: a 0 0 0 0 b; low = high = -1
    # keep the four zeros, two on each device.  Each device's window read
    # no element of x, and its local pad of that empty slice came out
    # `interior` elements wider than its share: an ill-typed module, which
    # the manual computation's verifier, XLA's SPMD RET_CHECK or the
    # reshard's shape check refused, by result sharding.  The family found
    # it on a 3-d chain (reverse, rotation, then this pad).  Such a dim is
    # now read whole (windowed.py, commit 80cfeb9).
    mesh_op, result_sharding = SPELLINGS[spelling]
    check(f'''
module {{{mesh_op}
  func.func public @main(%arg0: tensor<2xf32>) -> (tensor<4xf32> {result_sharding}) {{
    %0 = stablehlo.constant dense<0.0> : tensor<f32>
    %1 = stablehlo.pad %arg0, %0, low = [-1], high = [-1], interior = [4] : (tensor<2xf32>, tensor<f32>) -> tensor<4xf32>
    return %1 : tensor<4xf32>
  }}
}}
''', "x=2")


@pytest.mark.xfail(strict=True, reason=(
    "XLA CPU (jaxlib 0.10) folds dynamic_slice(dynamic_slice(x, s), t) with both starts known "
    "only at run time into dynamic_slice(x, s + t) and clamps only the sum. When this passes, "
    "window_programs.op_dynamic_slice may give such pairs runtime starts again"))
def test_xla_still_folds_nested_dynamic_slices_without_clamping():
    text = '''
module {
  func.func public @main(%arg0: tensor<8xf32>, %arg1: tensor<i32>, %arg2: tensor<i32>) -> tensor<2xf32> {
    %0 = stablehlo.dynamic_slice %arg0, %arg1, sizes = [5] : (tensor<8xf32>, tensor<i32>) -> tensor<5xf32>
    %1 = stablehlo.dynamic_slice %0, %arg2, sizes = [2] : (tensor<5xf32>, tensor<i32>) -> tensor<2xf32>
    return %1 : tensor<2xf32>
  }
}
'''
    x = np.arange(8, dtype=np.float32)
    # x[0:5] is [0 .. 4]; its window at 4 is clamped to 3: [3, 4] (XLA gives x[4:6]).
    got = ss.run_single_device(text, [x, np.int32(0), np.int32(4)])[0]
    np.testing.assert_array_equal(np.asarray(got), [3.0, 4.0])

