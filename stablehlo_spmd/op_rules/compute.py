"""Contractions and reductions: dot_general (and the legacy dot) and reduce,
and the ops that transform whole matrices or signals per batch
(triangular_solve, cholesky, fft).

Their REDUCTION factors are where partial (unreduced) values are born: a
sharded contracting or reduced dimension leaves each device a partial result
that the reduction kind ("sum", "max", "min") would combine.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from stablehlo_spmd.op_rules import FactorKind, RuleBuilder, UnreducedFlow, int_array, register
from stablehlo_spmd.shapes import shape_of


@register("stablehlo.dot_general")
def _dot_general(op: ir.Operation):
    """``([b,m,k],[b,k,n])->([b,m,n])``, k a sum-reduction; bilinear in its operands."""
    numbers = stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    return _contraction(op, list(numbers.lhs_batching_dimensions),
                        list(numbers.rhs_batching_dimensions),
                        list(numbers.lhs_contracting_dimensions),
                        list(numbers.rhs_contracting_dimensions))


@register("stablehlo.dot")
def _dot(op: ir.Operation):
    """The legacy dot (what XLA's HLO ``dot`` of a matrix or vector converts
    to): ``([m,k],[k,n])->([m,n])``, a dot_general contracting the lhs's last
    dim with the rhs's first, with no batch dims."""
    lhs_shape, rhs_shape = shape_of(op.operands[0]), shape_of(op.operands[1])
    if lhs_shape is None or rhs_shape is None or not lhs_shape or not rhs_shape:
        return None
    return _contraction(op, [], [], [len(lhs_shape) - 1], [0])


def _contraction(op: ir.Operation, lhs_batch: list[int], rhs_batch: list[int],
                 lhs_contract: list[int], rhs_contract: list[int]):
    """The rule of a contraction: batch dims shared, free dims passed
    through in order (lhs's, then rhs's), contracting dims sum-reduced."""
    lhs_shape, rhs_shape = shape_of(op.operands[0]), shape_of(op.operands[1])
    builder = RuleBuilder([len(lhs_shape), len(rhs_shape)], [len(shape_of(op.results[0]))])
    result_dim = 0
    for lhs_dim, rhs_dim in zip(lhs_batch, rhs_batch):
        builder.factor(lhs_shape[lhs_dim], FactorKind.PASS_THROUGH, [lhs_dim, rhs_dim], [result_dim])
        result_dim += 1
    for lhs_dim, size in enumerate(lhs_shape):
        if lhs_dim not in lhs_batch and lhs_dim not in lhs_contract:
            builder.factor(size, FactorKind.PASS_THROUGH, [lhs_dim, None], [result_dim])
            result_dim += 1
    for rhs_dim, size in enumerate(rhs_shape):
        if rhs_dim not in rhs_batch and rhs_dim not in rhs_contract:
            builder.factor(size, FactorKind.PASS_THROUGH, [None, rhs_dim], [result_dim])
            result_dim += 1
    for lhs_dim, rhs_dim in zip(lhs_contract, rhs_contract):
        builder.factor(lhs_shape[lhs_dim], FactorKind.REDUCTION, [lhs_dim, rhs_dim], [None])
    return builder.build(UnreducedFlow.SEPARATE, (0, 1), reduction="sum",
                         keeps_attributes=True, masks_padding=True)


_COMBINERS = {"stablehlo.add": "sum", "stablehlo.maximum": "max", "stablehlo.minimum": "min"}


def reduction_kind(op: ir.Operation) -> str | None:
    """"sum"/"max"/"min" when the body is that one binary op on its arguments."""
    body = op.regions[0].blocks[0]
    operations = list(body.operations)
    if len(operations) != 2 or len(body.arguments) != 2:
        return None
    combine, terminator = operations
    if terminator.operands[0] != combine.results[0]:
        return None
    if {combine.operands[0], combine.operands[1]} != set(body.arguments):
        return None
    return _COMBINERS.get(combine.name)


def is_zero_constant(value: ir.Value) -> bool:
    owner = value.owner
    if not isinstance(owner, ir.Operation) and hasattr(owner, "operation"):
        owner = owner.operation
    if getattr(owner, "name", None) != "stablehlo.constant":
        return False
    attr = owner.attributes["value"]
    try:
        if isinstance(attr, ir.DenseFPElementsAttr):
            return attr.is_splat and float(attr.get_splat_value().value) == 0.0
        if isinstance(attr, ir.DenseIntElementsAttr):
            return attr.is_splat and int(attr.get_splat_value().value) == 0
    except (TypeError, ValueError):
        return False
    return False


def _reduce_signature(op: ir.Operation):
    count = len(op.results)
    body = tuple(o.name for o in op.regions[0].blocks[0].operations)
    return body, reduction_kind(op) if count == 1 else None, is_zero_constant(op.operands[count])


@register("stablehlo.reduce", signature=_reduce_signature)
def _reduce(op: ir.Operation):
    """``([i,j,k],[])->([i,k])``, j reduced.  Variadic: every input alike.

    A reduce whose body is not one add/max/min (argmax's variadic reduce, say)
    cannot leave partial results, so its reduced dims are read whole (or
    reduced per shard and again, `partitioning.reduction`): PERMUTATION
    factors of the inputs alone, so a split spreads from one input to the
    others, as Shardy's reduction factor shared by all inputs does.  A
    reduce-sum with a zero init is linear in its input, so a partial input
    gives a partial result.
    """
    count = len(op.results)
    inputs = list(op.operands)[:count]
    shape = shape_of(inputs[0])
    reduced = set(int_array(op.attributes["dimensions"]))
    kind = reduction_kind(op) if count == 1 else None
    builder = RuleBuilder([len(shape)] * count + [0] * count, [len(shape) - len(reduced)] * count)
    result_dim = 0
    for dim, size in enumerate(shape):
        if dim in reduced:
            factor_kind = FactorKind.REDUCTION if kind else FactorKind.PERMUTATION
            builder.factor(size, factor_kind, [dim] * count, [None] * count)
        else:
            builder.factor(size, FactorKind.PASS_THROUGH, [dim] * count, [result_dim] * count)
            result_dim += 1
    linear = kind == "sum" and is_zero_constant(op.operands[1])
    return builder.build(UnreducedFlow.JOINT if linear else UnreducedFlow.NONE,
                         (0,) if linear else (), reduction=kind,
                         keeps_attributes=True, masks_padding=True,
                         neutral_operands=range(count, 2 * count))


@register("stablehlo.triangular_solve")
def _triangular_solve(op: ir.Operation):
    """``([..., m, m], [..., m, n]) -> [..., m, n]`` (``[..., n, m]`` with
    ``left_side`` false): each batch's system is solved whole, so the
    matrix's dims and b's m dim need every element; b's other dim holds
    independent right-hand sides (a column of x reads only that column of
    b), so it passes through split, as do the batch dims.  XLA's partitioner
    keeps the batch dims only."""
    a_shape, b_shape = shape_of(op.operands[0]), shape_of(op.operands[1])
    if not a_shape or not b_shape or len(a_shape) < 2 or len(a_shape) != len(b_shape):
        return None
    rank = len(a_shape)
    left = ir.BoolAttr(op.attributes["left_side"]).value
    m_dim, n_dim = (rank - 2, rank - 1) if left else (rank - 1, rank - 2)
    builder = RuleBuilder([rank, rank], [rank])
    for dim in range(rank - 2):
        builder.factor(a_shape[dim], FactorKind.PASS_THROUGH, [dim, dim], [dim])
    builder.factor(a_shape[rank - 2], FactorKind.NEED_REPLICATION, [rank - 2, m_dim], [m_dim])
    builder.factor(a_shape[rank - 1], FactorKind.NEED_REPLICATION, [rank - 1, None])
    builder.factor(b_shape[n_dim], FactorKind.PASS_THROUGH, [None, n_dim], [n_dim])
    return builder.build(keeps_attributes=True)


@register("stablehlo.cholesky")
def _cholesky(op: ir.Operation):
    """``[..., n, n] -> [..., n, n]``: each batch's matrix is factored whole;
    the batch dims pass through split."""
    shape = shape_of(op.operands[0])
    if not shape or len(shape) < 2:
        return None
    rank = len(shape)
    builder = RuleBuilder([rank], [rank])
    for dim in range(rank):
        kind = FactorKind.PASS_THROUGH if dim < rank - 2 else FactorKind.NEED_REPLICATION
        builder.factor(shape[dim], kind, [dim], [dim])
    return builder.build(keeps_attributes=True)


@register("stablehlo.fft")
def _fft(op: ir.Operation):
    """The transform runs over the last ``len(fft_length)`` dims, which need
    every element; the leading dims are batch and pass through split.  A
    transform dim the op keeps in size is one PERMUTATION factor of operand
    and result: a split there propagates (as Shardy's need-replication
    factor does) and the partitioner gathers it for the transform, then
    keeps its own part of the result, which moves nothing more than
    gathering alone and leaves the result split.  A real transform changes
    the last dim's size: operand and result get a factor each there, and
    nothing crosses (Shardy blocks that factor too)."""
    shape, result_shape = shape_of(op.operands[0]), shape_of(op.results[0])
    if shape is None or result_shape is None or len(shape) != len(result_shape):
        return None
    rank, count = len(shape), len(int_array(op.attributes["fft_length"]))
    builder = RuleBuilder([rank], [rank])
    for dim in range(rank):
        if dim < rank - count:
            builder.factor(shape[dim], FactorKind.PASS_THROUGH, [dim], [dim])
        elif shape[dim] == result_shape[dim]:
            builder.factor(shape[dim], FactorKind.PERMUTATION, [dim], [dim])
        else:
            builder.factor(shape[dim], FactorKind.NEED_REPLICATION, [dim], [None])
            builder.factor(result_shape[dim], FactorKind.NEED_REPLICATION, [None], [dim])
    return builder.build(keeps_attributes=True)
