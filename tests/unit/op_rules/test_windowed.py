"""Factor rules of stablehlo_spmd.op_rules.windowed (slice, pad, reverse,
concatenate, dynamic slices, reduce_window, select_and_scatter, convolution),
against structures written by hand (see factor_rules)."""

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from .factor_rules import JOINT, M, N, NONE, P, R, SEPARATE, expect, lowered, rule_of, rules_of


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


def test_concatenate_of_unrelated_tensors_is_a_permutation_too():
    # Shardy's need-replication factor here still propagates; a PERMUTATION
    # factor is what does that in this project's model (gathered at the op
    # where the partitioner cannot serve it with windows).
    rule = rule_of("""
      func.func @main(%a: tensor<4x10xf32>, %b: tensor<4x6xf32>) -> tensor<4x16xf32> {
        %0 = stablehlo.concatenate %a, %b, dim = 1 : (tensor<4x10xf32>, tensor<4x6xf32>) -> tensor<4x16xf32>
        return %0 : tensor<4x16xf32>
      }""", "stablehlo.concatenate")
    expect(rule, {"a": (4, P), "c": (16, M)}, ["ac", "ac"], ["ac"], JOINT, (0, 1))


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


def test_concatenate_of_a_tensor_and_another_ones_slice_is_a_permutation_too():
    rule = rule_of("""
      func.func @main(%a: tensor<8x4xf32>, %b: tensor<8x4xf32>) -> tensor<10x4xf32> {
        %s = stablehlo.slice %b [6:8, 0:4] : (tensor<8x4xf32>) -> tensor<2x4xf32>
        %0 = stablehlo.concatenate %s, %a, dim = 0 : (tensor<2x4xf32>, tensor<8x4xf32>) -> tensor<10x4xf32>
        return %0 : tensor<10x4xf32>
      }""", "stablehlo.concatenate")
    expect(rule, {"c": (10, M), "b": (4, P)}, ["cb", "cb"], ["cb"], JOINT, (0, 1))


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



def test_convolution_padding_of_an_uneven_split_is_zeroed_before_it_is_summed():
    # The kernel's window and the input features are REDUCTION factors an
    # uneven split may keep: the padding is masked to zero, as dot_general's.
    assert conv_rule("4x9x8x3", "9x3x3x16", "4x3x6x16", pad="[[1, 1], [0, 0]]").masks_padding


def test_convolution_parallel_spatial_dim_is_a_batch_of_input_kernel_and_output():
    # XLA's spelling of a dot's batch dim: 4 elements, the input dilated by
    # 4, windows of 4 at stride 3: window j meets input j and kernel j only.
    rule = conv_rule("2x4x6x3", "4x3x3x5", "2x4x4x5", stride="[3, 1]", lhs_dilate="[4, 1]")
    expect(rule, {"n": (2, P), "j": (4, P), "w": (4, M), "i": (3, R), "o": (5, P)},
           ["njwi", ("j", "", "i", "o")], ["njwo"], SEPARATE, (0, 1), "sum")


def test_dynamic_shapes_have_no_rule():
    rule = rule_of("""
      func.func @main(%a: tensor<?x10xf32>) -> tensor<?x10xf32> {
        %0 = stablehlo.reverse %a, dims = [1] : tensor<?x10xf32>
        return %0 : tensor<?x10xf32>
      }""", "stablehlo.reverse")
    assert rule is None


# ------------------------------------------------- windows of moved factors

def _windows_by_operand_dim(rule, operand=0):
    """{operand dim: Window} for the dims of `operand` whose PERMUTATION
    factor carries a window (None: it has none)."""
    found = {}
    for dim, factors in enumerate(rule.operands[operand]):
        for factor in factors:
            if rule.factor_kinds[factor] is M:
                found[dim] = rule.windows[factor] if rule.windows else None
    return found


def test_slice_windows_read_from_the_start_at_the_stride():
    rule = rule_of(slice_text("1:3, 0:10:2", "2x5"), "stablehlo.slice")
    # (offset, stride, extent, count, dilation): row j reads row 1 + j; column j, 2j.
    assert _windows_by_operand_dim(rule) == {0: (1, 1, 1, 2, 1), 1: (0, 2, 1, 5, 1)}


def test_pad_window_starts_before_the_tensor_and_interior_padding_dilates_it():
    rule = rule_of(pad_text("0.0", "[1, 2]", "[3, 0]", "[0, 0]", "8x12"), "stablehlo.pad")
    assert _windows_by_operand_dim(rule) == {0: (-1, 1, 1, 8, 1), 1: (-2, 1, 1, 12, 1)}
    # One hole between the 10 columns: result j is element j/2 of a 2-dilated input.
    spread = rule_of(pad_text("0.0", "[0, 0]", "[0, 0]", "[0, 1]", "4x19"), "stablehlo.pad")
    assert _windows_by_operand_dim(spread) == {1: (0, 1, 1, 19, 2)}


def test_pooling_window_reads_its_dilated_extent_and_a_base_dilated_input():
    x = jnp.zeros((2, 9, 9, 3))
    pooled = lowered(lambda v: lax.reduce_window(
        v, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (1, 1), (0, 0)),
        window_dilation=(1, 2, 1, 1)), x)
    rule = rule_of(pooled, "stablehlo.reduce_window")
    # Rows: 3 taps 2 apart span 5 rows; 9 + 2 padded rows give (11 - 5) // 2 + 1 = 4 windows.
    assert _windows_by_operand_dim(rule) == {1: (-1, 2, 5, 4, 1), 2: (-1, 2, 3, 5, 1)}
    # 9 rows 2-dilated span 17 positions; windows of 2 at stride 1: 16 of them.
    dilated = lowered(lambda v: lax.reduce_window(
        v, 0.0, lax.add, (1, 2, 1, 1), (1, 1, 1, 1), "VALID", base_dilation=(1, 2, 1, 1)), x)
    assert _windows_by_operand_dim(rule_of(dilated, "stablehlo.reduce_window")) == {
        1: (0, 1, 2, 16, 2)}


def test_convolution_windows_factor_reads_the_dilated_kernel():
    x, k = jnp.zeros((1, 16, 8, 3)), jnp.zeros((3, 3, 3, 4))
    conv = lowered(lambda a, b: lax.conv_general_dilated(
        a, b, (2, 1), ((1, 1), (0, 0)), rhs_dilation=(1, 2),
        dimension_numbers=("NHWC", "HWIO", "NHWC")), x, k)
    rule = rule_of(conv, "stablehlo.convolution")
    # H: (16 + 2 - 3) // 2 + 1 = 8 windows, 3 rows each, from row -1;
    # W: a 3-tap kernel 2 apart spans 5 columns, (8 - 5) + 1 = 4 windows.
    assert _windows_by_operand_dim(rule) == {1: (-1, 2, 3, 8, 1), 2: (0, 1, 5, 4, 1)}


def test_lhs_dilated_convolution_window_is_in_the_dilated_input():
    # A strided convolution's input gradient: 8 rows 2-dilated span 15
    # positions, padded 2 each side, so a 3-row kernel has 17 windows.
    x, k = jnp.zeros((1, 8, 4, 3)), jnp.zeros((3, 1, 3, 4))
    conv = lowered(lambda a, b: lax.conv_general_dilated(
        a, b, (1, 1), ((2, 2), (0, 0)), lhs_dilation=(2, 1),
        dimension_numbers=("NHWC", "HWIO", "NHWC")), x, k)
    assert _windows_by_operand_dim(rule_of(conv, "stablehlo.convolution")) == {
        1: (-2, 1, 3, 17, 2)}
