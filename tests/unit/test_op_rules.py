"""Tests for stablehlo_spmd.op_rules: the factor rule of every op family.

Each rule is checked against a factor structure written down by hand from the
op's semantics.  `expect` names factors with single letters: ``"hk"`` is a
dimension made of factor h (major) then k, ``""`` one with no factor.  The
letters are matched to the rule's factor ids by position, so the tests pin
the structure (which dims share a factor, in which order, with what size and
kind) but not the arbitrary numbering of factors.
"""

from __future__ import annotations

import math
import pathlib

import jax
import jax.numpy as jnp
import pytest
from jax import lax
from jaxlib.mlir import ir

import stablehlo_spmd
from stablehlo_spmd import op_rules
from stablehlo_spmd.export import load_object
from stablehlo_spmd.ir import make_context, parse_module
from stablehlo_spmd.op_rules import FactorKind, UnreducedFlow
# Every family is imported by name: `rule_for` loads the families only while
# the table is empty, so importing one family first (shape_ops, for
# common_factorization) would otherwise leave the others unregistered.  See
# test_importing_one_family_first_still_loads_the_rest.
from stablehlo_spmd.op_rules import (  # noqa: F401
    compute, control, elementwise, indexing, shape_ops, windowed)
from stablehlo_spmd.op_rules.shape_ops import common_factorization

P = FactorKind.PASS_THROUGH
R = FactorKind.REDUCTION
N = FactorKind.NEED_REPLICATION
M = FactorKind.PERMUTATION  # "moves": permutation

NONE, JOINT, SEPARATE = UnreducedFlow.NONE, UnreducedFlow.JOINT, UnreducedFlow.SEPARATE


# ------------------------------------------------------------------ helpers

def walk(module) -> list[ir.Operation]:
    ops = []

    def visit(op):
        ops.append(op.operation)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return ops


def rules_of(text: str, name: str) -> list:
    """The rules of every `name` op in `text`, in program order."""
    with make_context() as ctx:
        module = parse_module(text, "t.mlir", ctx)
        return [op_rules.rule_for(op) for op in walk(module) if op.name == name]


def rule_of(text: str, name: str):
    (rule,) = rules_of(text, name)
    return rule


def lowered(fn, *args) -> str:
    return jax.jit(fn).lower(*args).as_text()


def expect(rule, factors: dict[str, tuple[int, FactorKind]], operands, results,
           unreduced=NONE, linear=(), reduction=None):
    """Assert `rule` has exactly the named factors, mapped as written.

    A tensor is a string, one factor letter per dim, or a tuple with a
    string of letters (major to minor) per dim.
    """
    assert rule is not None
    operands = [tuple(t) for t in operands]
    results = [tuple(t) for t in results]
    assert len(rule.operands) == len(operands), "operand count"
    assert len(rule.results) == len(results), "result count"
    name_of: dict[int, str] = {}
    tensors = list(zip(rule.operands, operands)) + list(zip(rule.results, results))
    for index, (actual, wanted) in enumerate(tensors):
        assert len(actual) == len(wanted), f"rank of tensor {index}: {actual} vs {wanted}"
        for dim, (actual_dim, wanted_dim) in enumerate(zip(actual, wanted)):
            assert len(actual_dim) == len(wanted_dim), \
                f"tensor {index} dim {dim}: factors {actual_dim} vs {wanted_dim!r}"
            for factor, letter in zip(actual_dim, wanted_dim):
                assert name_of.setdefault(factor, letter) == letter, \
                    f"factor {factor} is both {name_of[factor]} and {letter}"
    assert len(set(name_of.values())) == len(name_of), f"two factors share a letter: {name_of}"
    assert sorted(name_of.values()) == sorted(factors), f"factors {name_of} vs {sorted(factors)}"
    assert rule.num_factors == len(factors)
    for factor, letter in name_of.items():
        got = (rule.factor_sizes[factor], rule.factor_kinds[factor])
        assert got == factors[letter], f"factor {letter}: {got} vs {factors[letter]}"
    assert rule.unreduced is unreduced
    assert tuple(rule.linear_operands) == tuple(linear)
    assert rule.reduction == reduction


def test_importing_one_family_first_still_loads_the_rest():
    import subprocess
    import sys
    script = ("import stablehlo_spmd.op_rules.shape_ops\n"
              "from stablehlo_spmd import op_rules\n"
              "assert op_rules.has_rule('stablehlo.add'), 'elementwise not loaded'\n")
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)


# ------------------------------------------------------------ element-wise

def test_add_is_joint_linear_elementwise():
    rule = rule_of("""
      func.func @main(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<4x8xf32> {
        %0 = stablehlo.add %a, %b : tensor<4x8xf32>
        return %0 : tensor<4x8xf32>
      }""", "stablehlo.add")
    expect(rule, {"i": (4, P), "j": (8, P)}, ["ij", "ij"], ["ij"], JOINT, (0, 1))
    assert rule.elementwise


@pytest.mark.parametrize("op, unreduced, linear", [
    ("multiply", SEPARATE, (0, 1)),
    ("divide", SEPARATE, (0,)),
    ("subtract", JOINT, (0, 1)),
    ("maximum", NONE, ()),
])
def test_binary_elementwise_linearity(op, unreduced, linear):
    rule = rule_of(f"""
      func.func @main(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<4x8xf32> {{
        %0 = stablehlo.{op} %a, %b : tensor<4x8xf32>
        return %0 : tensor<4x8xf32>
      }}""", f"stablehlo.{op}")
    expect(rule, {"i": (4, P), "j": (8, P)}, ["ij", "ij"], ["ij"], unreduced, linear)


def test_unary_elementwise_needs_full_values():
    rule = rule_of("""
      func.func @main(%a: tensor<3x5xf32>) -> tensor<3x5xf32> {
        %0 = stablehlo.exponential %a : tensor<3x5xf32>
        %1 = stablehlo.negate %0 : tensor<3x5xf32>
        return %1 : tensor<3x5xf32>
      }""", "stablehlo.exponential")
    expect(rule, {"i": (3, P), "j": (5, P)}, ["ij"], ["ij"])


def test_select_with_scalar_predicate():
    rule = rule_of("""
      func.func @main(%p: tensor<i1>, %a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<4x8xf32> {
        %0 = stablehlo.select %p, %a, %b : tensor<i1>, tensor<4x8xf32>
        return %0 : tensor<4x8xf32>
      }""", "stablehlo.select")
    # The scalar predicate has no dims; a and b are linear together.
    expect(rule, {"i": (4, P), "j": (8, P)}, ["", "ij", "ij"], ["ij"], JOINT, (1, 2))


@pytest.mark.parametrize("source, target, linear", [
    ("f16", "f32", True),     # widening: a sum of f16 partials is exact in f32
    ("f32", "f32", True),
    ("f32", "bf16", False),   # narrowing rounds each partial
    ("i32", "f32", False),
    ("f32", "i32", False),
])
def test_convert_is_linear_only_when_widening_floats(source, target, linear):
    rule = rule_of(f"""
      func.func @main(%a: tensor<2x6x{source}>) -> tensor<2x6x{target}> {{
        %0 = stablehlo.convert %a : (tensor<2x6x{source}>) -> tensor<2x6x{target}>
        return %0 : tensor<2x6x{target}>
      }}""", "stablehlo.convert")
    expect(rule, {"i": (2, P), "j": (6, P)}, ["ij"], ["ij"],
           JOINT if linear else NONE, (0,) if linear else ())


# -------------------------------------------------------------- shape ops

def test_broadcast_in_dim_new_dim_is_result_only():
    rule = rule_of("""
      func.func @main(%a: tensor<8xf32>) -> tensor<4x8xf32> {
        %0 = stablehlo.broadcast_in_dim %a, dims = [1] : (tensor<8xf32>) -> tensor<4x8xf32>
        return %0 : tensor<4x8xf32>
      }""", "stablehlo.broadcast_in_dim")
    expect(rule, {"n": (4, P), "j": (8, P)}, ["j"], ["nj"], JOINT, (0,))


def test_broadcast_in_dim_size_one_expansion_gets_factors_of_its_own():
    rule = rule_of("""
      func.func @main(%a: tensor<1x8xf32>) -> tensor<4x8xf32> {
        %0 = stablehlo.broadcast_in_dim %a, dims = [0, 1] : (tensor<1x8xf32>) -> tensor<4x8xf32>
        return %0 : tensor<4x8xf32>
      }""", "stablehlo.broadcast_in_dim")
    # Operand dim 0 (size 1) and result dim 0 (size 4) are different loops.
    expect(rule, {"n": (4, P), "o": (1, N), "j": (8, P)}, ["oj"], ["nj"], JOINT, (0,))


def test_broadcast_in_dim_permuted_dims():
    rule = rule_of("""
      func.func @main(%a: tensor<3x5xf32>) -> tensor<5x2x3xf32> {
        %0 = stablehlo.broadcast_in_dim %a, dims = [2, 0] : (tensor<3x5xf32>) -> tensor<5x2x3xf32>
        return %0 : tensor<5x2x3xf32>
      }""", "stablehlo.broadcast_in_dim")
    expect(rule, {"a": (3, P), "b": (5, P), "n": (2, P)}, ["ab"], ["bna"], JOINT, (0,))


def reshape_rule(source, target):
    src = "x".join(map(str, source)) + "x"
    tgt = "x".join(map(str, target)) + "x"
    return rule_of(f"""
      func.func @main(%a: tensor<{src}f32>) -> tensor<{tgt}f32> {{
        %0 = stablehlo.reshape %a : (tensor<{src}f32>) -> tensor<{tgt}f32>
        return %0 : tensor<{tgt}f32>
      }}""", "stablehlo.reshape")


def test_reshape_split_and_merge_share_a_common_factorization():
    # [6,4] -> [2,12]: 6 = 2*3, 12 = 3*4.
    expect(reshape_rule((6, 4), (2, 12)), {"a": (2, P), "b": (3, P), "c": (4, P)},
           [("ab", "c")], [("a", "bc")], JOINT, (0,))


def test_reshape_merge():
    expect(reshape_rule((4, 8), (32,)), {"a": (4, P), "b": (8, P)},
           ["ab"], [("ab",)], JOINT, (0,))


def test_reshape_split_into_three():
    expect(reshape_rule((24,), (2, 3, 4)), {"a": (2, P), "b": (3, P), "c": (4, P)},
           [("abc",)], ["abc"], JOINT, (0,))


def test_reshape_size_one_dims_get_no_factor():
    expect(reshape_rule((1, 8), (8, 1)), {"a": (8, P)}, [("", "a")], [("a", "")], JOINT, (0,))


def test_reshape_non_nesting_rest_stays_whole():
    # [6,2] -> [4,3]: both major dims share a 2; what is left (3x2 elements
    # against 2x3) does not nest, so every piece of it must stay whole: the
    # source's 3 and 2, the target's 2 and 3, each a factor of its own side.
    expect(reshape_rule((6, 2), (4, 3)),
           {"a": (2, P), "b": (3, N), "c": (2, N), "d": (3, N), "e": (2, N)},
           [("ab", "e")], [("ac", "d")], JOINT, (0,))


def test_reshape_shares_dims_again_after_a_non_nesting_run():
    # [6,2,5] -> [4,3,5]: the 3x2 / 2x3 run in the middle stays whole, but the
    # trailing 5 lines up again and passes through.
    expect(reshape_rule((6, 2, 5), (4, 3, 5)),
           {"a": (2, P), "b": (3, N), "c": (2, N), "d": (3, N), "e": (2, N), "f": (5, P)},
           [("ab", "e", "f")], [("ac", "d", "f")], JOINT, (0,))


def test_common_factorization_directly():
    sizes, kinds, source, target = common_factorization((2, 6), (12,))
    assert (sizes, kinds, source, target) == ([2, 6], [P, P], [(0,), (1,)], [(0, 1)])


def test_transpose():
    rule = rule_of("""
      func.func @main(%a: tensor<2x3x4xf32>) -> tensor<4x2x3xf32> {
        %0 = stablehlo.transpose %a, dims = [2, 0, 1] : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
        return %0 : tensor<4x2x3xf32>
      }""", "stablehlo.transpose")
    expect(rule, {"a": (2, P), "b": (3, P), "c": (4, P)}, ["abc"], ["cab"], JOINT, (0,))


def test_iota_and_constant_dims_are_free():
    text = """
      func.func @main() -> tensor<4x8xi32> {
        %0 = stablehlo.iota dim = 1 : tensor<4x8xi32>
        return %0 : tensor<4x8xi32>
      }"""
    expect(rule_of(text, "stablehlo.iota"), {"i": (4, P), "j": (8, P)}, [], ["ij"])


# ---------------------------------------------------- dot_general and reduce

def test_dot_general_batch_and_contracting():
    rule = rule_of("""
      func.func @main(%a: tensor<2x8x16xf32>, %b: tensor<2x16x32xf32>) -> tensor<2x8x32xf32> {
        %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1]
          : (tensor<2x8x16xf32>, tensor<2x16x32xf32>) -> tensor<2x8x32xf32>
        return %0 : tensor<2x8x32xf32>
      }""", "stablehlo.dot_general")
    expect(rule, {"b": (2, P), "m": (8, P), "n": (32, P), "k": (16, R)},
           ["bmk", "bkn"], ["bmn"], SEPARATE, (0, 1), "sum")


def test_dot_general_contracting_major_on_lhs():
    # x^T y: lhs [k, m], rhs [k, n].
    rule = rule_of("""
      func.func @main(%a: tensor<16x8xf32>, %b: tensor<16x4xf32>) -> tensor<8x4xf32> {
        %0 = stablehlo.dot_general %a, %b, contracting_dims = [0] x [0]
          : (tensor<16x8xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
        return %0 : tensor<8x4xf32>
      }""", "stablehlo.dot_general")
    expect(rule, {"m": (8, P), "n": (4, P), "k": (16, R)}, ["km", "kn"], ["mn"],
           SEPARATE, (0, 1), "sum")


REDUCE = """
  func.func @main(%a: tensor<4x8xf32>) -> tensor<4xf32> {{
    %init = stablehlo.constant dense<{init}> : tensor<f32>
    %0 = stablehlo.reduce(%a init: %init) applies stablehlo.{op} across dimensions = [1]
      : (tensor<4x8xf32>, tensor<f32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }}"""


def test_reduce_sum_with_zero_init_is_linear():
    rule = rule_of(REDUCE.format(init="0.0", op="add"), "stablehlo.reduce")
    expect(rule, {"i": (4, P), "j": (8, R)}, ["ij", ""], ["i"], JOINT, (0,), "sum")


def test_reduce_sum_with_nonzero_init_is_not_linear():
    rule = rule_of(REDUCE.format(init="1.0", op="add"), "stablehlo.reduce")
    expect(rule, {"i": (4, P), "j": (8, R)}, ["ij", ""], ["i"], NONE, (), "sum")


def test_reduce_max():
    rule = rule_of(REDUCE.format(init="0xFF800000", op="maximum"), "stablehlo.reduce")
    expect(rule, {"i": (4, P), "j": (8, R)}, ["ij", ""], ["i"], NONE, (), "max")


def test_reduce_with_other_body_keeps_reduced_dim_whole():
    rule = rule_of(REDUCE.format(init="1.0", op="multiply"), "stablehlo.reduce")
    expect(rule, {"i": (4, P), "j": (8, N)}, ["ij", ""], ["i"])


def test_variadic_reduce_argmax_keeps_reduced_dim_whole():
    text = lowered(lambda x: jnp.argmax(x, 1), jnp.zeros((8, 4)))
    rule = rule_of(text, "stablehlo.reduce")
    expect(rule, {"i": (8, P), "j": (4, N)}, ["ij", "ij", "", ""], ["i", "i"])


# ------------------------------------------------- control flow and calls

def located(value: ir.Value) -> str:
    """A value as ``loc-name#result`` or ``loc-name.region.arg``."""
    def loc_name(op):
        text = str(op.location)
        return text[text.index('"') + 1:text.rindex('"')]
    if isinstance(value.owner, ir.Block):
        block = value.owner
        parent = block.owner.operation
        region = next(i for i, r in enumerate(parent.regions) if r.blocks[0] == block)
        return f"{loc_name(parent)}.{region}.{ir.BlockArgument(value).arg_number}"
    return f"{loc_name(value.owner.operation)}#{ir.OpResult(value).result_number}"


def ties_of(text: str, name: str) -> set[frozenset[str]]:
    with make_context() as ctx:
        module = parse_module(text, "t.mlir", ctx)
        (op,) = [op for op in walk(module) if op.name == name]
        return {frozenset((located(a), located(b))) for a, b in op_rules.tied_values(op)}


def pairs(*items):
    return {frozenset(p) for p in items}


def test_while_ties_carry_operand_result_block_args_and_yield():
    text = """
      func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
        %c = stablehlo.constant dense<0> : tensor<i32> loc("zero")
        %0:2 = stablehlo.while(%i = %c, %x = %arg0) : tensor<i32>, tensor<4xf32>
        cond {
          %lim = stablehlo.constant dense<3> : tensor<i32> loc("limit")
          %p = stablehlo.compare LT, %i, %lim, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1> loc("lt")
          stablehlo.return %p : tensor<i1> loc("cond_ret")
        } do {
          %one = stablehlo.constant dense<1> : tensor<i32> loc("one")
          %n = stablehlo.add %i, %one : tensor<i32> loc("next")
          %y = stablehlo.multiply %x, %x : tensor<4xf32> loc("square")
          stablehlo.return %n, %y : tensor<i32>, tensor<4xf32> loc("body_ret")
        } loc("loop")
        return %0#1 : tensor<4xf32> loc("ret")
      } loc("main")"""
    assert ties_of(text, "stablehlo.while") == pairs(
        ("zero#0", "loop#0"), ("loop#0", "loop.0.0"), ("loop#0", "loop.1.0"), ("loop#0", "next#0"),
        ("main.0.0", "loop#1"), ("loop#1", "loop.0.1"), ("loop#1", "loop.1.1"),
        ("loop#1", "square#0"))


def test_if_ties_results_to_both_branches():
    text = """
      func.func @main(%p: tensor<i1>, %x: tensor<4xf32>) -> tensor<4xf32> {
        %0 = "stablehlo.if"(%p) ({
          %a = stablehlo.add %x, %x : tensor<4xf32> loc("then_add")
          stablehlo.return %a : tensor<4xf32> loc("then_ret")
        }, {
          %b = stablehlo.multiply %x, %x : tensor<4xf32> loc("else_mul")
          stablehlo.return %b : tensor<4xf32> loc("else_ret")
        }) : (tensor<i1>) -> tensor<4xf32> loc("branch")
        return %0 : tensor<4xf32> loc("ret")
      } loc("main")"""
    assert ties_of(text, "stablehlo.if") == pairs(("branch#0", "then_add#0"),
                                                   ("branch#0", "else_mul#0"))


def test_case_ties_every_branch():
    text = """
      func.func @main(%k: tensor<i32>, %x: tensor<4xf32>) -> tensor<4xf32> {
        %0 = "stablehlo.case"(%k) ({
          stablehlo.return %x : tensor<4xf32> loc("r0")
        }, {
          %b = stablehlo.negate %x : tensor<4xf32> loc("neg")
          stablehlo.return %b : tensor<4xf32> loc("r1")
        }) : (tensor<i32>) -> tensor<4xf32> loc("switch")
        return %0 : tensor<4xf32> loc("ret")
      } loc("main")"""
    assert ties_of(text, "stablehlo.case") == pairs(("switch#0", "main.0.1"),
                                                     ("switch#0", "neg#0"))


def test_call_ties_arguments_and_results_to_the_callee():
    text = """
      func.func @main(%x: tensor<4xf32>, %y: tensor<2xf32>) -> tensor<4xf32> {
        %0 = func.call @f(%x, %y) : (tensor<4xf32>, tensor<2xf32>) -> tensor<4xf32> loc("call")
        return %0 : tensor<4xf32> loc("ret")
      } loc("main")
      func.func private @f(%a: tensor<4xf32>, %b: tensor<2xf32>) -> tensor<4xf32> {
        %s = stablehlo.sine %a : tensor<4xf32> loc("sin")
        return %s : tensor<4xf32> loc("f_ret")
      } loc("f")"""
    assert ties_of(text, "func.call") == pairs(("main.0.0", "f.0.0"), ("main.0.1", "f.0.1"),
                                               ("call#0", "sin#0"))


def test_while_and_call_have_no_factor_rule_but_count_as_handled():
    assert op_rules.has_rule("stablehlo.while") and op_rules.has_rule("func.call")
    assert not op_rules.has_rule("stablehlo.no_such_op")


def test_optimization_barrier_is_identity_per_operand():
    rule = rule_of("""
      func.func @main(%a: tensor<4xf32>, %b: tensor<2x3xf32>) -> tensor<4xf32> {
        %0:2 = stablehlo.optimization_barrier %a, %b : tensor<4xf32>, tensor<2x3xf32>
        return %0#0 : tensor<4xf32>
      }""", "stablehlo.optimization_barrier")
    expect(rule, {"a": (4, P), "b": (2, P), "c": (3, P)}, ["a", "bc"], ["a", "bc"],
           JOINT, (0, 1))


def test_custom_call_sharding_is_identity_and_others_have_no_rule():
    text = """
      func.func @main(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
        %0 = stablehlo.custom_call @Sharding(%a) {mhlo.sharding = "{replicated}"}
          : (tensor<4x8xf32>) -> tensor<4x8xf32>
        %1 = stablehlo.custom_call @my_kernel(%0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
        return %1 : tensor<4x8xf32>
      }"""
    sharding, opaque = rules_of(text, "stablehlo.custom_call")
    expect(sharding, {"i": (4, P), "j": (8, P)}, ["ij"], ["ij"], JOINT, (0,))
    assert opaque is None


# ------------------------------------------------------ slices and padding

def slice_text(spec, result):
    return f"""
      func.func @main(%a: tensor<4x10xf32>) -> tensor<{result}xf32> {{
        %0 = stablehlo.slice %a [{spec}] : (tensor<4x10xf32>) -> tensor<{result}xf32>
        return %0 : tensor<{result}xf32>
      }}"""


def test_slice_sliced_dims_are_permutations_of_the_operand_size():
    rule = rule_of(slice_text("1:3, 0:10:2", "2x5"), "stablehlo.slice")
    expect(rule, {"a": (4, M), "b": (10, M)}, ["ab"], ["ab"], JOINT, (0,))


def test_slice_full_dim_passes_through():
    rule = rule_of(slice_text("0:4, 2:5", "4x3"), "stablehlo.slice")
    expect(rule, {"a": (4, P), "b": (10, M)}, ["ab"], ["ab"], JOINT, (0,))


def pad_text(value, low, high, interior, result):
    return f"""
      func.func @main(%a: tensor<4x10xf32>) -> tensor<{result}xf32> {{
        %v = stablehlo.constant dense<{value}> : tensor<f32>
        %0 = stablehlo.pad %a, %v, low = {low}, high = {high}, interior = {interior}
          : (tensor<4x10xf32>, tensor<f32>) -> tensor<{result}xf32>
        return %0 : tensor<{result}xf32>
      }}"""


def test_pad_with_zero_is_linear_and_padded_dim_permutes_at_the_larger_size():
    rule = rule_of(pad_text("0.0", "[1, 0]", "[2, 0]", "[0, 0]", "7x10"), "stablehlo.pad")
    expect(rule, {"a": (7, M), "b": (10, P)}, ["ab", ""], ["ab"], JOINT, (0,))


def test_pad_with_nonzero_value_is_not_linear():
    rule = rule_of(pad_text("0xFF800000", "[0, 0]", "[0, 0]", "[0, 1]", "4x19"), "stablehlo.pad")
    expect(rule, {"a": (4, P), "b": (19, M)}, ["ab", ""], ["ab"])


def test_pad_that_shifts_without_resizing_is_a_permutation():
    # low 1, high -1: same size, every element moves by one.
    rule = rule_of(pad_text("0.0", "[0, 1]", "[0, -1]", "[0, 0]", "4x10"), "stablehlo.pad")
    expect(rule, {"a": (4, P), "b": (10, M)}, ["ab", ""], ["ab"], JOINT, (0,))


def test_pad_of_a_broadcast_zero_from_jax_is_linear():
    text = lowered(lambda a: lax.pad(a, 0.0, ((1, 2, 0), (0, 0, 0))), jnp.zeros((4, 10)))
    expect(rule_of(text, "stablehlo.pad"), {"a": (7, M), "b": (10, P)}, ["ab", ""], ["ab"],
           JOINT, (0,))


def test_reverse():
    rule = rule_of("""
      func.func @main(%a: tensor<4x10xf32>) -> tensor<4x10xf32> {
        %0 = stablehlo.reverse %a, dims = [1] : tensor<4x10xf32>
        return %0 : tensor<4x10xf32>
      }""", "stablehlo.reverse")
    expect(rule, {"a": (4, P), "b": (10, M)}, ["ab"], ["ab"], JOINT, (0,))


def test_concatenate_of_unrelated_tensors_needs_replication():
    rule = rule_of("""
      func.func @main(%a: tensor<4x10xf32>, %b: tensor<4x6xf32>) -> tensor<4x16xf32> {
        %0 = stablehlo.concatenate %a, %b, dim = 1 : (tensor<4x10xf32>, tensor<4x6xf32>) -> tensor<4x16xf32>
        return %0 : tensor<4x16xf32>
      }""", "stablehlo.concatenate")
    expect(rule, {"a": (4, P), "c": (16, N)}, ["ac", "ac"], ["ac"], JOINT, (0, 1))


def test_concatenate_of_slices_of_one_tensor_is_a_permutation():
    # jnp.roll: concat(slice(x), slice(x)).
    text = lowered(lambda a: jnp.roll(a, 1, axis=1), jnp.zeros((4, 10)))
    expect(rule_of(text, "stablehlo.concatenate"), {"a": (4, P), "c": (10, M)},
           ["ac", "ac"], ["ac"], JOINT, (0, 1))


def test_concatenate_of_a_tensor_and_its_slice_is_a_permutation():
    rule = rule_of("""
      func.func @main(%a: tensor<8x4xf32>) -> tensor<10x4xf32> {
        %s = stablehlo.slice %a [6:8, 0:4] : (tensor<8x4xf32>) -> tensor<2x4xf32>
        %0 = stablehlo.concatenate %s, %a, dim = 0 : (tensor<2x4xf32>, tensor<8x4xf32>) -> tensor<10x4xf32>
        return %0 : tensor<10x4xf32>
      }""", "stablehlo.concatenate")
    expect(rule, {"c": (10, M), "b": (4, P)}, ["cb", "cb"], ["cb"], JOINT, (0, 1))


def test_concatenate_of_a_tensor_and_another_ones_slice_needs_replication():
    rule = rule_of("""
      func.func @main(%a: tensor<8x4xf32>, %b: tensor<8x4xf32>) -> tensor<10x4xf32> {
        %s = stablehlo.slice %b [6:8, 0:4] : (tensor<8x4xf32>) -> tensor<2x4xf32>
        %0 = stablehlo.concatenate %s, %a, dim = 0 : (tensor<2x4xf32>, tensor<8x4xf32>) -> tensor<10x4xf32>
        return %0 : tensor<10x4xf32>
      }""", "stablehlo.concatenate")
    expect(rule, {"c": (10, N), "b": (4, P)}, ["cb", "cb"], ["cb"], JOINT, (0, 1))


def test_dynamic_slice():
    text = lowered(lambda a, i: lax.dynamic_slice(a, (i, 0), (2, 10)), jnp.zeros((4, 10)), 1)
    expect(rule_of(text, "stablehlo.dynamic_slice"), {"a": (4, N), "b": (10, P)},
           ["ab", "", ""], ["ab"], JOINT, (0,))


def test_dynamic_update_slice():
    text = lowered(lambda a, u, i: lax.dynamic_update_slice(a, u, (i, 0)),
                   jnp.zeros((4, 10)), jnp.zeros((2, 10)), 1)
    # Operand and result keep dim 0 (each device writes its part); the
    # update's dim 0 is a loop of its own that must be whole.
    expect(rule_of(text, "stablehlo.dynamic_update_slice"),
           {"a": (4, P), "u": (2, N), "b": (10, P)},
           ["ab", "ub", "", ""], ["ab"], JOINT, (0, 1))


# ------------------------------------------------------------------ windows

def test_reduce_window_max_pool():
    text = lowered(lambda a: lax.reduce_window(a, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1),
                                               "VALID"), jnp.zeros((4, 8, 8, 3)))
    expect(rule_of(text, "stablehlo.reduce_window"),
           {"n": (4, P), "h": (8, M), "w": (8, M), "c": (3, P)},
           ["nhwc", ""], ["nhwc"], NONE, (), "max")


def test_reduce_window_cumsum_is_linear_with_its_broadcast_zero_init():
    text = lowered(lambda a: jnp.cumsum(a, 0), jnp.zeros((8, 4)))
    # Window 8 with padding 7 along dim 0; dim 1 is a window of one.
    expect(rule_of(text, "stablehlo.reduce_window"), {"i": (8, M), "j": (4, P)},
           ["ij", ""], ["ij"], JOINT, (0,), "sum")


def test_reduce_window_base_dilation_is_a_permutation_at_the_larger_size():
    text = lowered(lambda a: lax.reduce_window(a, 0.0, lax.add, (1, 1), (1, 1), "VALID",
                                               base_dilation=(1, 2)), jnp.zeros((3, 5)))
    # Dim 1: 5 elements dilated to 9, window 1: the result has 9 elements.
    expect(rule_of(text, "stablehlo.reduce_window"), {"i": (3, P), "j": (9, M)},
           ["ij", ""], ["ij"], JOINT, (0,), "sum")


def test_variadic_reduce_window():
    rule = rule_of("""
      func.func @main(%a: tensor<8x3xf32>, %b: tensor<8x3xi32>) -> tensor<4x3xf32> {
        %i0 = stablehlo.constant dense<0.0> : tensor<f32>
        %i1 = stablehlo.constant dense<0> : tensor<i32>
        %0:2 = "stablehlo.reduce_window"(%a, %b, %i0, %i1) <{
            window_dimensions = array<i64: 2, 1>, window_strides = array<i64: 2, 1>}> ({
          ^bb0(%x0: tensor<f32>, %x1: tensor<i32>, %y0: tensor<f32>, %y1: tensor<i32>):
            stablehlo.return %x0, %x1 : tensor<f32>, tensor<i32>
          }) : (tensor<8x3xf32>, tensor<8x3xi32>, tensor<f32>, tensor<i32>)
             -> (tensor<4x3xf32>, tensor<4x3xi32>)
        return %0#0 : tensor<4x3xf32>
      }""", "stablehlo.reduce_window")
    expect(rule, {"i": (8, M), "j": (3, P)}, ["ij", "ij", "", ""], ["ij", "ij"])


def test_select_and_scatter_of_max_pool_gradient():
    def pool(a):
        return lax.reduce_window(a, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID").sum()
    text = lowered(jax.grad(pool), jnp.zeros((4, 8, 8, 3)))
    # operand [4,8,8,3], source [4,4,4,3] (one value per window), scalar init.
    expect(rule_of(text, "stablehlo.select_and_scatter"),
           {"n": (4, P), "h": (8, M), "w": (8, M), "c": (3, P), "x": (4, N), "y": (4, N)},
           ["nhwc", "nxyc", ""], ["nhwc"], JOINT, (1,), "sum")


CONV = """
  func.func @main(%x: tensor<{lhs}xf32>, %w: tensor<{rhs}xf32>) -> tensor<{out}xf32> {{
    %0 = stablehlo.convolution(%x, %w) dim_numbers = {dims},
        window = {{stride = {stride}, pad = {pad}, lhs_dilate = {lhs_dilate}, rhs_dilate = [1, 1]}}
        {{batch_group_count = {bgc} : i64, feature_group_count = {fgc} : i64}}
        : (tensor<{lhs}xf32>, tensor<{rhs}xf32>) -> tensor<{out}xf32>
    return %0 : tensor<{out}xf32>
  }}"""


def conv_rule(lhs, rhs, out, stride="[1, 1]", pad="[[0, 0], [0, 0]]", fgc=1, bgc=1,
              dims="[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]", lhs_dilate="[1, 1]"):
    return rule_of(CONV.format(lhs=lhs, rhs=rhs, out=out, stride=stride, pad=pad, fgc=fgc,
                               bgc=bgc, dims=dims, lhs_dilate=lhs_dilate),
                   "stablehlo.convolution")


def test_convolution_same_padding():
    rule = conv_rule("4x8x8x3", "3x3x3x16", "4x8x8x16", pad="[[1, 1], [1, 1]]")
    # 8 windows of 3 over 8 (padded) pixels: the windows factor takes the
    # whole lhs dim; nothing is left for a window-size factor, so the
    # kernel's spatial dims get none.
    expect(rule, {"n": (4, P), "h": (8, M), "w": (8, M), "i": (3, R), "o": (16, P)},
           ["nhwi", ("", "", "i", "o")], ["nhwo"], SEPARATE, (0, 1), "sum")


def test_convolution_one_by_one_window_passes_through():
    rule = conv_rule("4x8x8x3", "1x1x3x16", "4x8x8x16")
    expect(rule, {"n": (4, P), "h": (8, P), "w": (8, P), "i": (3, R), "o": (16, P)},
           ["nhwi", ("", "", "i", "o")], ["nhwo"], SEPARATE, (0, 1), "sum")


@pytest.mark.parametrize("out, options, h, w", [
    # stride 2 on dim 0: 4 windows over 8 pixels, 8 // 4 = 2 left over for a
    # window of 1, which gets no factor.
    ("4x4x8x16", {"stride": "[2, 1]"}, (4, M), (8, P)),
    # padding on dim 1 shifts every window.
    ("4x8x10x16", {"pad": "[[0, 0], [1, 1]]"}, (8, P), (8, M)),
    # lhs dilation 2 on dim 0: 8 pixels spread over 15 windows, capped at 8.
    ("4x15x8x16", {"lhs_dilate": "[2, 1]"}, (8, M), (8, P)),
])
def test_convolution_one_by_one_window_that_moves_data_is_a_permutation(out, options, h, w):
    rule = conv_rule("4x8x8x3", "1x1x3x16", out, **options)
    expect(rule, {"n": (4, P), "h": h, "w": w, "i": (3, R), "o": (16, P)},
           ["nhwi", ("", "", "i", "o")], ["nhwo"], SEPARATE, (0, 1), "sum")


def test_convolution_patchify_splits_spatial_dims_into_windows_and_window():
    # Window 2 at stride 2: pixel = 2 * window index + offset in window.
    rule = conv_rule("4x8x8x3", "2x2x3x16", "4x4x4x16", stride="[2, 2]")
    expect(rule, {"n": (4, P), "h": (4, M), "k": (2, R), "w": (4, M), "l": (2, R),
                  "i": (3, R), "o": (16, P)},
           [("n", "hk", "wl", "i"), ("k", "l", "i", "o")], ["nhwo"], SEPARATE, (0, 1), "sum")


def test_convolution_window_larger_than_windows_comes_first():
    # A weight-gradient-like conv: 10 pixels, window 8, 3 windows.  The
    # window factor (8) is major; 10 // 8 = 1 leaves nothing for the windows.
    rule = conv_rule("2x10x10x3", "8x8x3x5", "2x3x3x5")
    expect(rule, {"n": (2, P), "h": (8, R), "w": (8, R), "i": (3, R), "o": (5, P)},
           ["nhwi", "hwio"], [("n", "", "", "o")], SEPARATE, (0, 1), "sum")


def test_convolution_depthwise_feature_groups():
    # 3 channels, channel multiplier 2: kernel [3,3,1,6], feature_group_count 3.
    rule = conv_rule("4x8x8x3", "3x3x1x6", "4x6x6x6", fgc=3)
    # Groups are the major part of the kernel's and output's feature dims;
    # one input feature per group leaves no contraction.
    expect(rule, {"n": (4, P), "h": (6, M), "w": (6, M), "g": (3, P), "o": (2, P)},
           ["nhwg", ("", "", "", "go")], [("n", "h", "w", "go")], SEPARATE, (0, 1), "sum")


def test_convolution_grouped_with_several_features_per_group():
    rule = conv_rule("4x8x8x4", "3x3x2x6", "4x8x8x6", pad="[[1, 1], [1, 1]]", fgc=2)
    expect(rule, {"n": (4, P), "h": (8, M), "w": (8, M), "g": (2, P), "i": (2, R), "o": (3, P)},
           [("n", "h", "w", "gi"), ("", "", "i", "go")], [("n", "h", "w", "go")],
           SEPARATE, (0, 1), "sum")


def test_convolution_batch_groups():
    # lhs batch 4 in 2 groups; each group pairs with 3 of the 6 kernel outputs.
    rule = rule_of("""
      func.func @main(%x: tensor<4x8x2xf32>, %w: tensor<3x2x6xf32>) -> tensor<2x6x6xf32> {
        %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, f]x[0, i, o]->[b, 0, f],
            window = {stride = [1], pad = [[0, 0]], lhs_dilate = [1], rhs_dilate = [1]}
            {batch_group_count = 2 : i64, feature_group_count = 1 : i64}
            : (tensor<4x8x2xf32>, tensor<3x2x6xf32>) -> tensor<2x6x6xf32>
        return %0 : tensor<2x6x6xf32>
      }""", "stablehlo.convolution")
    expect(rule, {"g": (2, P), "b": (2, P), "h": (6, M), "i": (2, R), "o": (3, P)},
           [("gb", "h", "i"), ("", "i", "go")], [("b", "h", "go")], SEPARATE, (0, 1), "sum")


def test_convolution_gradients_from_jax_have_rules():
    def loss(x, w):
        return lax.conv_general_dilated(x, w, (2, 2), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC")).sum()
    text = lowered(jax.grad(loss, argnums=(0, 1)), jnp.zeros((4, 8, 8, 3)),
                   jnp.zeros((3, 3, 3, 16)))
    weight_grad, input_grad = rules_of(text, "stablehlo.convolution")
    # Weight gradient: lhs is x as [f=N, 0, 1, b=C], rhs the output
    # gradient [i=N, 0, 1, o=O] (dilated by 2), result [0, 1, b=C, f=O].
    # Per spatial dim: window 4 > 3 windows, so the window factor (4,
    # with the gradient's spatial dim) is major, then 8 // 4 = 2 of windows.
    expect(weight_grad, {"c": (3, P), "h": (4, R), "p": (2, M), "w": (4, R), "q": (2, M),
                         "n": (4, R), "o": (16, P)},
           [("n", "hp", "wq", "c"), ("n", "h", "w", "o")], [("p", "q", "c", "o")],
           SEPARATE, (0, 1), "sum")
    # Input gradient: the output gradient [4,4,4,16] dilated by 2 and
    # convolved with the reversed kernel (i and o swapped) gives [4,8,8,3].
    expect(input_grad, {"n": (4, P), "h": (4, M), "w": (4, M), "o": (16, R), "c": (3, P)},
           [("n", "h", "w", "o"), ("", "", "c", "o")], [("n", "h", "w", "c")],
           SEPARATE, (0, 1), "sum")


# --------------------------------------------------------- gather, scatter

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


def test_dynamic_shapes_have_no_rule():
    rule = rule_of("""
      func.func @main(%a: tensor<?x10xf32>) -> tensor<?x10xf32> {
        %0 = stablehlo.reverse %a, dims = [1] : tensor<?x10xf32>
        return %0 : tensor<?x10xf32>
      }""", "stablehlo.reverse")
    assert rule is None


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
    # dim 2 covers 2 of input dim 1's 10 rows: both whole, apart.
    expect(rule, {"b": (4, P), "t": (3, R), "s": (10, N), "w": (2, N), "c": (6, P),
                  "v": (1, N)},
           ["bsc", "btv", "btwc"], ["bsc"], NONE, (), "max")


# ------------------------------------------------------------ sort, top_k

def test_sort_dimension_needs_replication_for_every_operand():
    text = lowered(lambda a: jnp.argsort(a, axis=1), jnp.zeros((4, 10)))
    expect(rule_of(text, "stablehlo.sort"), {"b": (4, P), "s": (10, N)},
           ["bs", "bs"], ["bs", "bs"])


def test_top_k():
    text = lowered(lambda a: lax.top_k(a, 3), jnp.zeros((2, 4, 10)))
    expect(rule_of(text, "chlo.top_k"), {"a": (2, P), "b": (4, P), "n": (10, N)},
           ["abn"], ["abn", "abn"])


# ------------------------------------------------ coverage of real programs

def mlp_step():
    def loss(params, x, y):
        h = jax.nn.relu(x @ params["w1"] + params["b1"])
        logits = h @ params["w2"] + params["b2"]
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))

    def step(params, x, y):
        grads = jax.grad(loss)(params, x, y)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    params = {"w1": jnp.zeros((16, 32)), "b1": jnp.zeros((32,)),
              "w2": jnp.zeros((32, 10)), "b2": jnp.zeros((10,))}
    return step, (params, jnp.zeros((8, 16)), jnp.zeros((8, 10)))


def cnn_step():
    def loss(params, x, y):
        h = lax.conv_general_dilated(x, params["conv"], (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        h = jax.nn.relu(h + params["bias"])
        h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        h = h.reshape(h.shape[0], -1)
        logits = h @ params["dense"]
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))

    def step(params, x, y):
        grads = jax.grad(loss)(params, x, y)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    params = {"conv": jnp.zeros((3, 3, 3, 8)), "bias": jnp.zeros((8,)),
              "dense": jnp.zeros((4 * 4 * 8, 10))}
    return step, (params, jnp.zeros((4, 8, 8, 3)), jnp.zeros((4, 10)))


def moe_step():
    experts, top, capacity = 4, 2, 6

    def layer(params, x):
        probs = jax.nn.softmax(x @ params["gate"])                       # [T, E]
        gates, index = lax.top_k(probs, top)                              # [T, K]
        mask = jax.nn.one_hot(index, experts)                             # [T, K, E]
        position = jnp.cumsum(mask.reshape(-1, experts), axis=0).reshape(mask.shape) - 1
        keep = mask * (position < capacity)
        slot = jax.nn.one_hot(jnp.sum(position * keep, -1).astype(jnp.int32), capacity)
        dispatch = jnp.einsum("tke,tkc->tec", keep, slot)                 # [T, E, C]
        combine = jnp.einsum("tk,tke,tkc->tec", gates, keep, slot)
        expert_in = jnp.einsum("tec,td->ecd", dispatch, x)
        hidden = jax.nn.gelu(jnp.einsum("ecd,edf->ecf", expert_in, params["w_in"]))
        expert_out = jnp.einsum("ecf,efd->ecd", hidden, params["w_out"])
        return jnp.einsum("tec,ecd->td", combine, expert_out)

    def step(params, x):
        grads = jax.grad(lambda p: jnp.sum(layer(p, x) ** 2))(params)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    params = {"gate": jnp.zeros((16, experts)), "w_in": jnp.zeros((experts, 16, 32)),
              "w_out": jnp.zeros((experts, 32, 16))}
    return step, (params, jnp.zeros((12, 16)))


def transformer_step():
    # By absolute path, so the test does not depend on the working directory.
    return load_object(f"{REPO_ROOT}/examples/transformer.py:train_step_example")()


REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
STRUCTURAL = {"func.func", "func.return", "stablehlo.return", "builtin.module"}


@pytest.fixture(scope="module", params=["mlp", "cnn", "moe", "transformer"])
def program(request):
    make = {"mlp": mlp_step, "cnn": cnn_step, "moe": moe_step,
            "transformer": transformer_step}[request.param]
    fn, args = make()
    return request.param, stablehlo_spmd.export(fn, *args)


def test_every_op_of_real_programs_has_a_rule(program):
    name, text = program
    with make_context() as ctx:
        module = parse_module(text, f"{name}.mlir", ctx)
        ops = [op for op in walk(module) if op.name not in STRUCTURAL]
        missing = sorted({op.name for op in ops if not op_rules.has_rule(op.name)})
        assert not missing, f"{name}: no rule for {missing}"
        for op in ops:
            rule = op_rules.rule_for(op)
            if rule is None:
                continue
            check_consistent(op, rule)


def check_consistent(op: ir.Operation, rule) -> None:
    """Ranks match the op, and a dim made only of pass-through factors is
    exactly their product."""
    where = f"{op.name} at {op.location}"
    assert len(rule.operands) == len(op.operands), where
    assert len(rule.results) == len(op.results), where
    for values, tensors in ((op.operands, rule.operands), (op.results, rule.results)):
        for value, tensor in zip(values, tensors):
            shape = tuple(ir.RankedTensorType(value.type).shape)
            assert len(tensor) == len(shape), where
            for size, factors in zip(shape, tensor):
                kinds = {rule.factor_kinds[f] for f in factors}
                if factors and kinds == {P}:
                    assert math.prod(rule.factor_sizes[f] for f in factors) == size, where


def test_models_exercise_the_new_families(program):
    name, text = program
    expected = {"cnn": {"stablehlo.convolution", "stablehlo.reduce_window",
                        "stablehlo.select_and_scatter"},
                "moe": {"chlo.top_k", "stablehlo.reduce_window"},
                "transformer": {"stablehlo.gather", "stablehlo.scatter"},
                "mlp": {"stablehlo.dot_general"}}[name]
    with make_context() as ctx:
        module = parse_module(text, f"{name}.mlir", ctx)
        names = {op.name for op in walk(module)}
    assert expected <= names


def test_which_rules_keep_their_attributes_per_device():
    # Attributes that name dimensions carry over to the per-device op; ones
    # that hold sizes (slice's limits, a grouped conv's feature split) do not.
    def rule(fn, *args, name):
        return rule_of(lowered(fn, *args), name)

    x = jnp.zeros((8, 16), jnp.float32)
    assert rule(lambda a: a @ a.T, x, name="stablehlo.dot_general").keeps_attributes
    assert rule(lambda a: a @ a.T, x, name="stablehlo.dot_general").masks_padding
    assert rule(lambda a: jnp.sum(a, 0), x, name="stablehlo.reduce").masks_padding
    assert rule(lambda a: jnp.tanh(a), x, name="stablehlo.tanh").keeps_attributes
    assert not rule(lambda a: a[2:6], x, name="stablehlo.slice").keeps_attributes
    assert not rule(lambda a: jnp.tanh(a), x, name="stablehlo.tanh").masks_padding
    image = jnp.zeros((2, 6, 6, 4), jnp.float32)
    def conv(groups):
        return lambda a, k: jax.lax.conv_general_dilated(
            a, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
            feature_group_count=groups)
    assert rule(conv(1), image, jnp.zeros((3, 3, 4, 4)), name="stablehlo.convolution").keeps_attributes
    assert not rule(conv(4), image, jnp.zeros((3, 3, 1, 4)),
                    name="stablehlo.convolution").keeps_attributes
