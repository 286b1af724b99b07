"""Element-wise ops: every dimension is one pass-through factor shared by all.

What differs between them is only how unreduced (partial-sum) operands flow:
add/subtract are linear in both operands together, multiply in either alone,
divide in its numerator, negate/real/imag/widening converts in their one
operand; everything else needs full values.
"""

from __future__ import annotations

import functools

from jaxlib.mlir import ir

from stablehlo_spmd.op_rules import (
    FactorKind, RuleBuilder, UnreducedFlow, elementwise_rule, register)
from stablehlo_spmd.shapes import shape_of

_UNARY = [
    "abs", "cbrt", "ceil", "cosine", "count_leading_zeros", "exponential",
    "exponential_minus_one", "floor", "is_finite", "log", "log_plus_one", "logistic",
    "not", "popcnt", "round_nearest_afz", "round_nearest_even", "rsqrt", "sign", "sine",
    "sqrt", "tan", "tanh", "reduce_precision",
]
_BINARY = [
    "remainder", "maximum", "minimum", "power", "atan2", "and", "or", "xor",
    "shift_left", "shift_right_arithmetic", "shift_right_logical", "compare",
]
_CHLO_UNARY = [
    "acos", "acosh", "asin", "asinh", "atan", "atanh", "bessel_i1e", "conj", "cosh", "digamma",
    "erf", "erf_inv", "erfc", "is_inf", "is_neg_inf", "is_pos_inf", "lgamma", "sinh", "square",
    "tan",
]
_CHLO_BINARY = ["next_after", "polygamma", "zeta"]

register(*(f"stablehlo.{n}" for n in _UNARY + _BINARY + ["clamp"]),
         *(f"chlo.{n}" for n in _CHLO_UNARY + _CHLO_BINARY))(elementwise_rule)

register("stablehlo.add", "stablehlo.subtract", "stablehlo.complex")(
    functools.partial(elementwise_rule, unreduced=UnreducedFlow.JOINT, linear_operands=(0, 1)))
register("stablehlo.negate", "stablehlo.real", "stablehlo.imag")(
    functools.partial(elementwise_rule, unreduced=UnreducedFlow.JOINT, linear_operands=(0,)))
register("stablehlo.multiply")(
    functools.partial(elementwise_rule, unreduced=UnreducedFlow.SEPARATE, linear_operands=(0, 1)))
register("stablehlo.divide")(
    functools.partial(elementwise_rule, unreduced=UnreducedFlow.SEPARATE, linear_operands=(0,)))
# select(pred, a, b) is linear in (a, b) together when pred is a full value.
register("stablehlo.select")(
    functools.partial(elementwise_rule, unreduced=UnreducedFlow.JOINT, linear_operands=(1, 2)))


@register("stablehlo.convert")
def _convert(op: ir.Operation):
    """A widening float convert keeps partial sums exact; anything else needs full values."""
    source = ir.RankedTensorType(op.operands[0].type).element_type
    target = ir.RankedTensorType(op.results[0].type).element_type
    widening = (isinstance(source, ir.FloatType) and isinstance(target, ir.FloatType)
                and target.width >= source.width)
    if widening:
        return elementwise_rule(op, UnreducedFlow.JOINT, (0,))
    return elementwise_rule(op)


@register("stablehlo.bitcast_convert")
def _bitcast_convert(op: ir.Operation):
    """Same-width bitcasts are element-wise; width changes add or drop a minor dim."""
    source = ir.RankedTensorType(op.operands[0].type)
    target = ir.RankedTensorType(op.results[0].type)
    if source.rank == target.rank:
        return elementwise_rule(op)
    common = min(source.rank, target.rank)
    builder = RuleBuilder([source.rank], [target.rank])
    for dim in range(common):
        builder.factor(target.shape[dim], FactorKind.PASS_THROUGH, [dim], [dim])
    if source.rank > common:
        builder.factor(source.shape[common], FactorKind.NEED_REPLICATION, [common], [None])
    if target.rank > common:
        builder.factor(target.shape[common], FactorKind.NEED_REPLICATION, [None], [common])
    return builder.build()


@register("stablehlo.batch_norm_inference")
def _batch_norm_inference(op: ir.Operation):
    """``(x, scale, offset, mean, variance) -> y``, element-wise in x: the
    four per-feature vectors share x's feature dim, and every dim passes
    through, as in Shardy."""
    shape = shape_of(op.operands[0])
    if shape is None or len(op.operands) != 5 or any(size < 0 for size in shape):
        return None
    feature = ir.IntegerAttr(op.attributes["feature_index"]).value
    builder = RuleBuilder([len(shape), 1, 1, 1, 1], [len(shape)])
    for dim, size in enumerate(shape):
        vectors = [0 if dim == feature else None] * 4
        builder.factor(size, FactorKind.PASS_THROUGH, [dim, *vectors], [dim])
    return builder.build(keeps_attributes=True)
