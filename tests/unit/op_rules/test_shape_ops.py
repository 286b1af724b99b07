"""Factor rules of stablehlo_spmd.op_rules.shape_ops (broadcast, reshape,
transpose, created values), against structures written by hand (see
factor_rules)."""

from stablehlo_spmd.op_rules.shape_ops import common_factorization

from .factor_rules import JOINT, N, P, expect, rule_of


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
