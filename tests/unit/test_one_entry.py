"""One entry path: the Python API and ``stablehlo-spmd-opt`` read a module's
mesh and shardings in one place (`module_shardings.checked_mesh`), so they
accept and refuse the same modules, and a pipeline checks a module once per
pass that writes shardings, not once per question a pass asks.

Each module below is a pattern that once made ``ss.partition`` refuse what
the CLI partitioned: device orders of their own beside the mesh's, several
orders in one module, and sub-axes of one axis that cut it at different
points; and a module whose @main is private, which both refused.  Each goes through both, and both results are run against one
device.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import stablehlo_spmd as ss
from stablehlo_spmd import module_shardings

# The argument in device order 0,1 and the result in order 1,0: the mesh
# inferred for the module has one order, so one of the two reads as "the
# same blocks, in another order".
TWO_ORDERS = """
module attributes {mhlo.num_partitions = 2 : i32} {
  func.func @main(%arg0: tensor<8xf32> {mhlo.sharding = "{devices=[2]0,1}"})
      -> (tensor<8xf32> {mhlo.sharding = "{devices=[2]1,0}"}) {
    %0 = stablehlo.reverse %arg0, dims = [0] : tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
"""

# Three orders of 4 devices over a 2x2 tiling, on an argument, a constraint
# and the result of a dot.
THREE_ORDERS = """
module attributes {mhlo.num_partitions = 4 : i32} {
  func.func @main(%a: tensor<8x6xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"},
                  %b: tensor<6x4xf32> {mhlo.sharding = "{devices=[2,2]1,0,3,2}"})
      -> (tensor<8x4xf32> {mhlo.sharding = "{devices=[2,1,2]2,3,0,1 last_tile_dim_replicate}"}) {
    %0 = stablehlo.custom_call @Sharding(%b) {mhlo.sharding = "{devices=[2,2]3,2,1,0}"} : (tensor<6x4xf32>) -> tensor<6x4xf32>
    %1 = stablehlo.dot_general %a, %0, contracting_dims = [1] x [0] : (tensor<8x6xf32>, tensor<6x4xf32>) -> tensor<8x4xf32>
    return %1 : tensor<8x4xf32>
  }
}
"""

# An axis of 6 cut at 2 on the argument and at 3 on the result: no split of
# the axis serves both, so one of them is a device order of its own.
SUB_AXES_CUT_APART = """
sdy.mesh @mesh = <["a"=6]>
func.func @main(%arg0: tensor<2x6xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a":(1)2}, {}]>})
    -> (tensor<2x6xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"a":(3)2}]>}) {
  %0 = stablehlo.sine %arg0 : tensor<2x6xf32>
  return %0 : tensor<2x6xf32>
}
"""

# A module whose every function is private, as a converter may leave it: its
# @main is the entry all the same (XLA's entry computation).
PRIVATE_MAIN = TWO_ORDERS.replace("func.func @main", "func.func private @main")

CASES = {"two device orders": TWO_ORDERS, "three device orders": THREE_ORDERS,
         "sub-axes cut apart": SUB_AXES_CUT_APART, "private @main": PRIVATE_MAIN}


def _inputs(text: str) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    shapes = {TWO_ORDERS: [(8,)], PRIVATE_MAIN: [(8,)], THREE_ORDERS: [(8, 6), (6, 4)],
              SUB_AXES_CUT_APART: [(2, 6)]}[text]
    # Small integers: a partitioned dot sums the same terms exactly.
    return [rng.integers(-3, 4, size=s).astype(np.float32) for s in shapes]


def _cli_partition(text: str, tmp_path) -> str:
    source, output = tmp_path / "in.mlir", tmp_path / "out.mlir"
    source.write_text(text)
    done = subprocess.run([sys.executable, "-m", "stablehlo_spmd.cli.opt", str(source),
                           "--spmd-annotate", "--spmd-propagate", "--spmd-partition",
                           "-o", str(output)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return output.read_text()


@pytest.mark.parametrize("name", sorted(CASES))
def test_api_and_cli_partition_the_same_module_and_both_match_one_device(name, tmp_path):
    text = CASES[name]
    inputs = _inputs(text)
    (want,) = ss.run_single_device(text, inputs)
    for partitioned in (ss.partition(text), _cli_partition(text, tmp_path)):
        (got,) = ss.run(partitioned, inputs)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_api_and_cli_refuse_the_same_module_with_the_same_message(tmp_path):
    # Two rows of tiles from a 4-way axis: no device order makes that whole axes.
    text = TWO_ORDERS.replace("{devices=[2]1,0}", "{devices=[2,2]0,1,2,3}").replace(
        "tensor<8xf32>", "tensor<8x2xf32>")
    with pytest.raises(ss.SpmdError) as raised:
        ss.partition(text)
    source = tmp_path / "in.mlir"
    source.write_text(text)
    done = subprocess.run([sys.executable, "-m", "stablehlo_spmd.cli.opt", str(source),
                           "--spmd-annotate", "--spmd-propagate", "--spmd-partition"],
                          capture_output=True, text=True)
    assert done.returncode == 1
    api_message = str(raised.value).split(": error: ", 1)[1]
    assert done.stderr.splitlines()[-1].split(": error: ", 1)[1] == api_message


@pytest.fixture
def count_checks(monkeypatch):
    counted = []
    check = module_shardings._check_shardings
    monkeypatch.setattr(module_shardings, "_check_shardings",
                        lambda module, mesh: (counted.append(mesh), check(module, mesh))[1])
    return counted


def test_a_pipeline_checks_once_per_pass_that_writes_shardings(count_checks):
    ss.propagate(THREE_ORDERS)
    assert len(count_checks) == 1
    count_checks.clear()
    # annotate, propagate and partition each write shardings, so each reads
    # a module the pass before changed; canonicalize and cse write none.
    ss.partition(THREE_ORDERS)
    assert len(count_checks) == 3


def test_within_one_pass_the_check_is_not_repeated(count_checks):
    with module_shardings.checking_once():
        from stablehlo_spmd.ir import make_context, parse_module
        with make_context() as context:
            module = parse_module(THREE_ORDERS, "<test>", context).operation
            first = module_shardings.checked_mesh(module)
            assert module_shardings.checked_mesh(module) is first
            assert len(count_checks) == 1
            module_shardings.forget_checks()
            module_shardings.checked_mesh(module)
            assert len(count_checks) == 2
