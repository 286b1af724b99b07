"""Rules for the custom calls XLA and JAX emit, by call target.

Every target Shardy's registry gives a rule has an entry in `TARGET_RULES`
(the custom call's own rule, `control._custom_call`, looks the target up
here).  Each entry says how it compares with Shardy's:

* Calls that act element by element (a placement or layout note, a host
  offload, ``erf``, the halves of a 64-bit split) are pointwise, as in
  Shardy: every dim passes through.
* Linear-algebra calls act on whole matrices: the leading dims are batch
  dims (pass through), the last two are the matrix.  Shardy lets shardings
  flow through the matrix dims an input shares with a result (Eigh's and
  Qr's, the Householder product's; pointwise, Cholesky's and the
  triangular-inverse helpers'), as pass-through or unblocked
  need-replication factors, accepting that the call then needs them
  whole; here those dims are PERMUTATION factors with no window, which
  propagate the same way while the partitioner gathers them at the call,
  so the call never runs on a piece of a matrix.  A dim of one tensor alone
  (Qr's taus) needs replication.
* ``ApproxTopK`` / ``PartialReduce`` keep every dim but the reduced one; the
  reduced dim, shared by the values and their iota, is read whole (a split
  there spreads from one to the other, as Shardy's factor does), and the
  result's k is made whole.
* ``X64Combine`` is pointwise, except that a random-number state (its use by
  ``rng_bit_generator``) must stay whole, as in Shardy.
* ``mhlo.topk`` is `indexing.top_k_rule`, and ``TopK`` (XLA's own) too.

Every rule here keeps the call's attributes: the per-device call is the same
call on per-device types, since none of these attributes names a size of a
dim the rule lets be split.
"""

from __future__ import annotations

from typing import Callable

from jaxlib.mlir import ir

from stablehlo_spmd.op_rules import FactorKind, OpRule, RuleBuilder, UnreducedFlow, ranks
from stablehlo_spmd.op_rules.indexing import top_k_rule
from stablehlo_spmd.shapes import shape_of

PASS, NEED, MOVE = FactorKind.PASS_THROUGH, FactorKind.NEED_REPLICATION, FactorKind.PERMUTATION


def _pointwise(op: ir.Operation) -> OpRule | None:
    """Every operand and result of one shape, dim d one factor; operands of
    another shape (scalars, a call's extra inputs) take no part."""
    if not op.results:
        return None
    shape = shape_of(op.results[0])
    if shape is None or any(shape_of(r) != shape for r in op.results):
        return None
    operand_shapes = [shape_of(v) for v in op.operands]
    builder = RuleBuilder(ranks(op.operands), [len(shape)] * len(op.results))
    for dim, size in enumerate(shape):
        builder.factor(size, PASS, [dim if s == shape else None for s in operand_shapes],
                       [dim] * len(op.results))
    return builder.build(UnreducedFlow.NONE, keeps_attributes=True)


def _matrix_shape(value: ir.Value) -> tuple[int, ...] | None:
    shape = shape_of(value)
    return shape if shape is not None and len(shape) >= 2 else None


def _batch_factors(builder: RuleBuilder, shape, operand_dims, result_dims) -> None:
    """The leading dims of a batched matrix op: one PASS_THROUGH factor each,
    in every tensor named (`operand_dims[i]` True: operand i has them)."""
    for dim, size in enumerate(shape[:-2]):
        builder.factor(size, PASS, [dim if has else None for has in operand_dims],
                       [dim if has else None for has in result_dims])


def _same_matrix(op: ir.Operation) -> OpRule | None:
    """``[..., m, n] -> [..., m, n]`` computed on whole matrices (Cholesky,
    the triangular-inverse helpers, the compact-WY helper): batch dims pass
    through, the matrix dims propagate but are gathered at the call."""
    if len(op.operands) != 1 or len(op.results) != 1:
        return None
    shape = _matrix_shape(op.operands[0])
    if shape is None or shape_of(op.results[0]) != shape:
        return None
    builder = RuleBuilder([len(shape)], [len(shape)])
    _batch_factors(builder, shape, [True], [True])
    for dim in (len(shape) - 2, len(shape) - 1):
        builder.factor(shape[dim], MOVE, [dim], [dim])
    return builder.build(keeps_attributes=True)


def _eigh(op: ir.Operation) -> OpRule | None:
    """``[..., n, n] -> ([..., n, n] vectors, [..., n] values)``: the values'
    last dim is the vectors' last dim (each eigenvalue's eigenvector is a
    column)."""
    if len(op.operands) != 1 or len(op.results) != 2:
        return None
    shape = _matrix_shape(op.operands[0])
    rank = len(shape) if shape is not None else 0
    if (shape is None or shape_of(op.results[0]) != shape
            or shape_of(op.results[1]) != shape[:-2] + shape[-1:]):
        return None
    builder = RuleBuilder([rank], [rank, rank - 1])
    _batch_factors(builder, shape, [True], [True, True])
    builder.factor(shape[-2], MOVE, [rank - 2], [rank - 2, None])
    builder.factor(shape[-1], MOVE, [rank - 1], [rank - 1, rank - 2])
    return builder.build(keeps_attributes=True)


def _qr(op: ir.Operation) -> OpRule | None:
    """``[..., m, n] -> ([..., m, n], [..., min(m, n)] taus)``: QR reads
    whole matrices, and the taus belong to no input dim."""
    if len(op.operands) != 1 or len(op.results) != 2:
        return None
    shape = _matrix_shape(op.operands[0])
    taus = shape_of(op.results[1])
    if shape is None or shape_of(op.results[0]) != shape or taus is None \
            or taus[:-1] != shape[:-2]:
        return None
    rank = len(shape)
    builder = RuleBuilder([rank], [rank, rank - 1])
    _batch_factors(builder, shape, [True], [True, True])
    builder.factor(shape[-2], MOVE, [rank - 2], [rank - 2, None])
    builder.factor(shape[-1], MOVE, [rank - 1], [rank - 1, None])
    builder.factor(taus[-1], NEED, [None], [None, rank - 2])
    return builder.build(keeps_attributes=True)


def _householder_product(op: ir.Operation) -> OpRule | None:
    """``([..., m, n] reflectors, [..., k] taus) -> [..., m, n]``."""
    if len(op.operands) != 2 or len(op.results) != 1:
        return None
    shape = _matrix_shape(op.operands[0])
    taus = shape_of(op.operands[1])
    if shape is None or shape_of(op.results[0]) != shape or taus is None \
            or taus[:-1] != shape[:-2]:
        return None
    rank = len(shape)
    builder = RuleBuilder([rank, rank - 1], [rank])
    _batch_factors(builder, shape, [True, True], [True])
    builder.factor(shape[-2], MOVE, [rank - 2, None], [rank - 2])
    builder.factor(shape[-1], MOVE, [rank - 1, None], [rank - 1])
    builder.factor(taus[-1], NEED, [None, rank - 2], [None])
    return builder.build(keeps_attributes=True)


def _approx_top_k(op: ir.Operation) -> OpRule | None:
    """``(operand, iota, init value, init index) -> (values, indices)``: the
    dim whose size changes is the reduced one; it is read whole, and the k
    it keeps are whole too.  Every other dim passes through operand, iota
    and both results."""
    if len(op.operands) != 4 or len(op.results) != 2:
        return None
    shape, out = shape_of(op.operands[0]), shape_of(op.results[0])
    if shape is None or out is None or len(shape) != len(out) \
            or shape_of(op.operands[1]) != shape or shape_of(op.results[1]) != out:
        return None
    rank = len(shape)
    builder = RuleBuilder([rank, rank, 0, 0], [rank, rank])
    for dim, (size_in, size_out) in enumerate(zip(shape, out)):
        if size_in == size_out:
            builder.factor(size_in, PASS, [dim, dim, None, None], [dim, dim])
        else:
            builder.factor(size_in, MOVE, [dim, dim, None, None], [None, None])
            builder.factor(size_out, NEED, [None] * 4, [dim, dim])
    return builder.build(keeps_attributes=True)


def _x64_combine(op: ir.Operation) -> OpRule | None:
    feeds_rng_state = any(use.owner.name == "stablehlo.rng_bit_generator"
                          for result in op.results for use in result.uses)
    if not feeds_rng_state:
        return _pointwise(op)
    shape = shape_of(op.results[0])
    if shape is None:
        return None
    builder = RuleBuilder(ranks(op.operands), [len(shape)])
    for dim, size in enumerate(shape):
        builder.factor(size, NEED, [dim if shape_of(v) == shape else None for v in op.operands],
                       [dim])
    return builder.build(keeps_attributes=True)


_POINTWISE_TARGETS = (
    "annotate_device_placement", "InspectSharding", "LayoutConstraint", "mhlo.erf",
    "MoveToDevice", "MoveToHost", "X64SplitHigh", "X64SplitLow", "xla.megascale.provide_metadata",
    # XLA's partitioner's own collective-permute helpers: every result is laid
    # out as the input is.
    "_SPMDInternalOp_MultiPad", "_SPMDInternalOp_RotateRight", "_SPMDInternalOp_MultiRotate",
    "_SPMDInternalOp_MultiSlice", "_SPMDInternalOp_Wrap")

TARGET_RULES: dict[str, Callable[[ir.Operation], OpRule | None]] = {
    **{target: _pointwise for target in _POINTWISE_TARGETS},
    **{target: _same_matrix for target in ("Cholesky", "CompactWyHelper",
                                           "InvertDiagBlocksLowerTriangular",
                                           "InvertDiagBlocksUpperTriangular")},
    "Eigh": _eigh,
    "Qr": _qr,
    "QrDecompositionBlock": _qr,
    "ProductOfElementaryHouseholderReflectors": _householder_product,
    "ApproxTopK": _approx_top_k,
    "PartialReduce": _approx_top_k,
    "X64Combine": _x64_combine,
    "TopK": top_k_rule,
    "mhlo.topk": top_k_rule,
}
