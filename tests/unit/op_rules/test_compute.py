"""Factor rules of stablehlo_spmd.op_rules.compute (dot_general, reduce),
against structures written by hand (see factor_rules)."""

import jax.numpy as jnp

from .factor_rules import JOINT, M, NONE, P, R, SEPARATE, expect, lowered, rule_of


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


def test_legacy_dot_of_matrices_and_of_a_matrix_and_a_vector():
    # XLA's HLO dot converts to stablehlo.dot: the lhs's last dim against the
    # rhs's first, as dot_general with no batch dims.
    rule = rule_of("""
      func.func @main(%a: tensor<8x16xf32>, %b: tensor<16x4xf32>) -> tensor<8x4xf32> {
        %0 = stablehlo.dot %a, %b : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
        return %0 : tensor<8x4xf32>
      }""", "stablehlo.dot")
    expect(rule, {"m": (8, P), "n": (4, P), "k": (16, R)}, ["mk", "kn"], ["mn"],
           SEPARATE, (0, 1), "sum")
    rule = rule_of("""
      func.func @main(%a: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<8xf32> {
        %0 = stablehlo.dot %a, %b : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8xf32>
        return %0 : tensor<8xf32>
      }""", "stablehlo.dot")
    expect(rule, {"m": (8, P), "k": (16, R)}, ["mk", "k"], ["m"], SEPARATE, (0, 1), "sum")


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
    # Whole at the op, but a split spreads between inputs: a PERMUTATION
    # factor no result has.
    rule = rule_of(REDUCE.format(init="1.0", op="multiply"), "stablehlo.reduce")
    expect(rule, {"i": (4, P), "j": (8, M)}, ["ij", ""], ["i"])


def test_variadic_reduce_argmax_keeps_reduced_dim_whole():
    text = lowered(lambda x: jnp.argmax(x, 1), jnp.zeros((8, 4)))
    rule = rule_of(text, "stablehlo.reduce")
    expect(rule, {"i": (8, P), "j": (4, M)}, ["ij", "ij", "", ""], ["i", "i"])
