"""Propagation prices data movement in bytes, with the reshard planner's costs.

The choices these tests pin down depend on element sizes: where a partial
sum is taken (at its birth or where a consumer needs it), and which of two
tensors keeps a contested mesh axis.  Each case has tensors of two element
types, so that counting elements and counting bytes disagree; the expected
choice is the one that moves fewer bytes, worked out by hand in the test.
"""

from __future__ import annotations

import pytest
from jaxlib.mlir import ir

import stablehlo_spmd as ss
from stablehlo_spmd.hlo_sharding import parse_hlo_sharding
from stablehlo_spmd.ir import make_context, parse_module
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.module_shardings import MHLO_SHARDING, functions, read_mesh
from stablehlo_spmd.op_rules import FactorKind, RuleBuilder, UnreducedFlow
from stablehlo_spmd.op_graph import Node
from stablehlo_spmd.propagation import Propagator
from stablehlo_spmd.sharding import Sharding

X = ("x",)
MESH = Mesh.from_string("x=2")

# x (8x16) @ y (16x4) with the contracting dim split over x=2: a partial
# 8x4 sum in f16, widened to f32 (linear: the partial flows on), cut to
# 6x4 (linear too), then tanh, which needs the sum.
#
#   summed at birth:      8x4 f16 = 64 bytes,  all-reduce 2*64*(2-1)/2 = 64 per device
#   summed before tanh:   6x4 f32 = 96 bytes,  all-reduce 2*96*(2-1)/2 = 96 per device
#
# Counted in elements (32 at birth, 24 before tanh) carrying would look cheaper.
WIDENED_PARTIAL = """
module attributes {spmd.mesh = #sdy.mesh<["x"=2]>, mhlo.num_partitions = 2 : i32} {
  func.func @main(%x: tensor<8x16xf16> {mhlo.sharding = "{devices=[1,2]<=[2]}"},
                  %y: tensor<16x4xf16> {mhlo.sharding = "{devices=[2,1]<=[2]}"})
      -> (tensor<6x4xf32> {mhlo.sharding = "{replicated}"}) {
    %0 = stablehlo.dot_general %x, %y, contracting_dims = [1] x [0]
        : (tensor<8x16xf16>, tensor<16x4xf16>) -> tensor<8x4xf16>
    %1 = stablehlo.convert %0 : (tensor<8x4xf16>) -> tensor<8x4xf32>
    %2 = stablehlo.slice %1 [0:6, 0:4] : (tensor<8x4xf32>) -> tensor<6x4xf32>
    %3 = stablehlo.tanh %2 : tensor<6x4xf32>
    return %3 : tensor<6x4xf32>
  }
}
"""


def _shardings_by_op(text: str) -> dict[str, list[Sharding]]:
    """The axis shardings written on each op name's (single) result, in order."""
    found: dict[str, list[Sharding]] = {}
    with make_context() as context:
        module = parse_module(text, "propagated.mlir", context)
        mesh = read_mesh(module)
        for op in functions(module)[0].regions[0].blocks[0].operations:
            if MHLO_SHARDING in op.attributes:
                hlo = parse_hlo_sharding(str(op.attributes[MHLO_SHARDING]).strip('"'))
                rank = len(op.results[0].type.shape)
                found.setdefault(op.name, []).append(Sharding.from_hlo(hlo, mesh, rank))
    return found


def test_a_widened_partial_is_summed_at_its_birth_where_it_has_fewer_bytes():
    ops = _shardings_by_op(ss.propagate(WIDENED_PARTIAL))
    assert ops["stablehlo.dot_general"] == [Sharding(MESH, ((), ()))]
    assert ops["stablehlo.convert"] == [Sharding(MESH, ((), ()))]
    assert ops["stablehlo.slice"] == [Sharding(MESH, ((), ()))]
    # Nothing pending is left to sum before tanh: no marked reshard.
    assert "stablehlo.custom_call" not in ops


def test_the_partitioned_program_all_reduces_the_f16_dot_output():
    collectives = []

    def visit(op):
        if op.name.startswith("stablehlo.all_") or op.name.startswith("stablehlo.reduce_scatter"):
            collectives.append((op.name, str(op.operands[0].type)))
        return ir.WalkResult.ADVANCE

    with make_context() as context:
        parse_module(ss.partition(WIDENED_PARTIAL), "partitioned.mlir", context).walk(visit)
    assert collectives == [("stablehlo.all_reduce", "tensor<8x4xf16>")]


# select(pred, on_true, on_false): pred (i1, 1 byte) split on its rows, on_true
# (f32, 4 bytes) on its columns, both over x.  The op's two factors contest x;
# the result and on_false follow the winner.  Letting pred win would reshard
# the 128-byte on_true; letting on_true win reshards the 32-byte pred.  By
# elements (32 each) the two tie, and the tie goes to the rows.
CONTESTED_SELECT = """
module attributes {spmd.mesh = #sdy.mesh<["x"=2]>, mhlo.num_partitions = 2 : i32} {
  func.func @main(%pred: tensor<8x4xi1> {mhlo.sharding = "{devices=[2,1]<=[2]}"},
                  %on_true: tensor<8x4xf32> {mhlo.sharding = "{devices=[1,2]<=[2]}"},
                  %on_false: tensor<8x4xf32>) -> tensor<8x4xf32> {
    %0 = stablehlo.select %pred, %on_true, %on_false : tensor<8x4xi1>, tensor<8x4xf32>
    return %0 : tensor<8x4xf32>
  }
}
"""


def test_a_contested_axis_stays_with_the_tensor_of_more_bytes():
    ops = _shardings_by_op(ss.propagate(CONTESTED_SELECT))
    assert ops["stablehlo.select"] == [Sharding(MESH, ((), X))]


# ------------------------------------------------------------- the solver alone

def _one_to_one(shape, kinds=(), unreduced=UnreducedFlow.NONE) -> object:
    """Operand dim d is result dim d; `kinds` overrides PASS_THROUGH per dim."""
    builder = RuleBuilder([len(shape)], [len(shape)])
    for dim, size in enumerate(shape):
        kind = kinds[dim] if dim < len(kinds) else FactorKind.PASS_THROUGH
        builder.factor(size, kind, [dim], [dim])
    return builder.build(unreduced, (0,) if unreduced is not UnreducedFlow.NONE else ())


def _widened_partial_graph():
    """WIDENED_PARTIAL as ids: x, y, dot, convert, slice, tanh (values 0-5)."""
    dot = RuleBuilder([2, 2], [2])
    dot.factor(8, FactorKind.PASS_THROUGH, [0, None], [0])
    dot.factor(4, FactorKind.PASS_THROUGH, [None, 1], [1])
    dot.factor(16, FactorKind.REDUCTION, [1, 0], [None])
    shapes = [(8, 16), (16, 4), (8, 4), (8, 4), (6, 4), (6, 4)]
    nodes = [
        Node(dot.build(UnreducedFlow.SEPARATE, (0, 1), reduction="sum"), [0, 1], [2], "dot"),
        Node(_one_to_one((8, 4), unreduced=UnreducedFlow.JOINT), [2], [3], "convert"),
        Node(_one_to_one((8, 4), (FactorKind.PERMUTATION,), UnreducedFlow.JOINT), [3], [4],
             "slice"),
        Node(_one_to_one((6, 4)), [4], [5], "tanh"),
    ]
    return shapes, nodes


def _solve(element_bytes):
    shapes, nodes = _widened_partial_graph()
    propagator = Propagator(MESH, shapes, nodes, element_bytes)
    propagator.pin(0, Sharding(MESH, ((), X)), "x")
    propagator.pin(1, Sharding(MESH, (X, ())), "y")
    propagator.run()
    return propagator


def test_the_solver_sums_at_birth_given_element_bytes():
    propagator = _solve([2, 2, 2, 4, 4, 4])
    assert propagator.kept_whole == {2, 3, 4}
    assert [propagator.sharding(v).unreduced for v in (2, 3, 4)] == [(), (), ()]


def test_the_solver_without_element_bytes_counts_elements_and_carries():
    # The constructor's old form: every element is one byte, so the 24
    # elements before tanh look cheaper than the 32 at the dot.
    propagator = _solve(None)
    assert propagator.kept_whole == set()
    assert [propagator.sharding(v).unreduced for v in (2, 3, 4)] == [X, X, X]
    assert propagator.sum_sites() == [4]
    assert propagator.sum_cost(4) == 24  # 2 * 24 * (2-1)/2


def test_sum_cost_counts_the_padding_of_uneven_shards():
    # 10 f32 elements split over x=4 hold 3 per device (the last one padded),
    # 12 bytes; all-reducing them over y=2 moves 2 * 12 * (2-1)/2 = 12 bytes.
    mesh = Mesh.from_string("x=4,y=2")
    propagator = Propagator(mesh, [(10,)], [], element_bytes=[4])
    propagator.pin(0, Sharding(mesh, (X,), unreduced=("y",)), "test")
    assert propagator.sum_cost(0) == 12


def test_element_bytes_must_cover_every_value():
    with pytest.raises(ValueError, match="1 element sizes for 2 values"):
        Propagator(MESH, [(4,), (4,)], [], element_bytes=[4])


# ------------------------------------------------------ where partial sums go

def _three_partial_products(a, b1, b2, b3):
    import jax.numpy as jnp
    return jnp.tanh((a @ b1 + a @ b2 + a @ b3).astype(jnp.float32))


def test_partials_added_then_widened_are_summed_once_between():
    """Three bf16 products, each partial over x, added, then widened to f32
    for tanh.  Summing each at its dot moves 3 x 64 bytes, the f32 value
    where tanh reads it 128, the bf16 sum of the three where they meet 64:
    that is where it goes, and the program computes what one device does."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from stablehlo_spmd.collective_bytes import emitted_collectives, total_bytes

    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.standard_normal((8, 16)), jnp.bfloat16)
    bs = [jnp.asarray(rng.standard_normal((16, 4)) / 4, jnp.bfloat16) for _ in range(3)]
    text = ss.export(_three_partial_products, a, *bs)
    rules = [(r"^a$", (None, "x")), (r"^b\d$", ("x", None))]
    partitioned = ss.partition(text, "x=2", rules)
    found = emitted_collectives(partitioned, 2)
    # An all-reduce of a bf16 [8,4] over 2 devices: 2 * 64 * (2-1)/2 bytes.
    assert [(c.kind, c.shape) for c in found] == [("all-reduce", "bf16[8,4]")]
    assert total_bytes(found) == 64
    leaves = jax.tree_util.tree_leaves((a, *bs))
    want = np.asarray(ss.run_single_device(text, leaves)[0])
    got = np.asarray(ss.run(partitioned, leaves)[0])
    # Each device rounds its partial products to bf16 before they are summed.
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)
