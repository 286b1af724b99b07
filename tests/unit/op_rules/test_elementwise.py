"""Factor rules of stablehlo_spmd.op_rules.elementwise, against structures
written by hand from each op's semantics (see factor_rules)."""

import pytest

from .factor_rules import JOINT, NONE, P, SEPARATE, expect, rule_of


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
