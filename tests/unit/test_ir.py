"""MLIR plumbing (`stablehlo_spmd.ir`): contexts, and the caches scoped to them."""

import gc

from jaxlib.mlir import ir

import stablehlo_spmd as ss
from stablehlo_spmd import op_rules
from stablehlo_spmd.ir import cached_attr, make_context, parse_module, per_context

PROGRAM = """module {
  func.func public @main(%arg0: tensor<8x16xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"},
                         %arg1: tensor<16x4xf32>) -> tensor<8x4xf32> {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0]
        : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    %1 = stablehlo.tanh %0 : tensor<8x4xf32>
    return %1 : tensor<8x4xf32>
  }
}"""


def _live_contexts() -> int:
    gc.collect()
    return ir.Context._get_live_count()


def test_repeated_partitioning_keeps_no_context_alive():
    # A notebook or a server partitions many programs: each call's context
    # (and everything cached for it) must go when the call returns.
    ss.partition(PROGRAM, "x=2", [])
    baseline = _live_contexts()
    for _ in range(5):
        ss.partition(PROGRAM, "x=2", [])
    assert _live_contexts() == baseline


def test_caches_are_dropped_with_their_context():
    before = _live_contexts()
    with make_context() as context:
        module = parse_module(PROGRAM, "<test>", context)
        attr = cached_attr('"{replicated}"')
        assert cached_attr('"{replicated}"') is attr
        dot = module.regions[0].blocks[0].operations[0].regions[0].blocks[0].operations[0]
        assert op_rules.rule_for(dot) is op_rules.rule_for(dot)
        assert per_context("op_rules", context)
    del module, attr, dot, context
    assert _live_contexts() == before
