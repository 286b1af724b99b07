"""Ops that move data between dimensions: broadcast, reshape, transpose, and
the ops that create a tensor from nothing (constant, iota).

All of them are linear in their operand, so partial sums flow through.
"""

from __future__ import annotations

import math

from jaxlib.mlir import ir

from stablehlo_spmd.op_rules import (
    FactorKind, OpRule, RuleBuilder, UnreducedFlow, int_array, ranks, register)
from stablehlo_spmd.shapes import shape_of


@register("stablehlo.broadcast_in_dim")
def _broadcast_in_dim(op: ir.Operation):
    """Operand dim i is result dim ``broadcast_dimensions[i]``; a size-1 dim
    that is expanded gets a factor of its own on each side."""
    operand_shape, result_shape = shape_of(op.operands[0]), shape_of(op.results[0])
    mapping = int_array(op.attributes["broadcast_dimensions"])
    builder = RuleBuilder([len(operand_shape)], [len(result_shape)])
    source_of = {result_dim: dim for dim, result_dim in enumerate(mapping)}
    for result_dim, size in enumerate(result_shape):
        dim = source_of.get(result_dim)
        if dim is not None and operand_shape[dim] == size:
            builder.factor(size, FactorKind.PASS_THROUGH, [dim], [result_dim])
        else:
            builder.factor(size, FactorKind.PASS_THROUGH, [None], [result_dim])
            if dim is not None:
                builder.factor(1, FactorKind.NEED_REPLICATION, [dim], [None])
    return builder.build(UnreducedFlow.JOINT, (0,), keeps_attributes=True)


@register("stablehlo.transpose")
def _transpose(op: ir.Operation):
    result_shape = shape_of(op.results[0])
    permutation = int_array(op.attributes["permutation"])
    builder = RuleBuilder([len(permutation)], [len(result_shape)])
    for result_dim, operand_dim in enumerate(permutation):
        builder.factor(result_shape[result_dim], FactorKind.PASS_THROUGH,
                       [operand_dim], [result_dim])
    return builder.build(UnreducedFlow.JOINT, (0,), keeps_attributes=True)


def common_factorization(source: tuple[int, ...], target: tuple[int, ...]):
    """Factors shared by two shapes of equal size, for a reshape.

    Returns ``(sizes, kinds, source_dims, target_dims)``: factor sizes and
    kinds, and for each dimension of either shape the factor ids it is made
    of, major to minor.  Walking both shapes from the major end, each step
    takes the largest size both current dims still have a multiple of, so
    [6,4] -> [2,12] gives factors 2, 3, 4.  Where the dims stop nesting (the
    3x2 vs 2x3 middle of [6,2,5] -> [4,3,5], after the shared 2) the run up
    to the next boundary both shapes share must stay whole: each piece of it
    is a NEED_REPLICATION factor of its own side, and the walk goes on from
    there (the trailing 5 is shared again).  Size-1 dims get no factor.
    """
    sizes: list[int] = []
    kinds: list[FactorKind] = []
    source_dims: list[list[int]] = [[] for _ in source]
    target_dims: list[list[int]] = [[] for _ in target]

    def add(size: int, kind: FactorKind, i: int | None, j: int | None) -> None:
        sizes.append(size)
        kinds.append(kind)
        if i is not None:
            source_dims[i].append(len(sizes) - 1)
        if j is not None:
            target_dims[j].append(len(sizes) - 1)

    i = j = -1
    left_i = left_j = 1
    while True:
        while left_i == 1 and i + 1 < len(source):
            i += 1
            left_i = source[i]
        while left_j == 1 and j + 1 < len(target):
            j += 1
            left_j = target[j]
        if left_i == 1 or left_j == 1:
            break
        step = math.gcd(left_i, left_j)
        if step > 1:
            add(step, FactorKind.PASS_THROUGH, i, j)
            left_i //= step
            left_j //= step
            continue
        # Coprime remainders: grow both runs until they cover the same elements.
        # Nothing in the run can stay sharded, so each piece of it is its own
        # NEED_REPLICATION factor (keeping every dim the product of its factors).
        add(left_i, FactorKind.NEED_REPLICATION, i, None)
        add(left_j, FactorKind.NEED_REPLICATION, None, j)
        run_i, run_j = left_i, left_j
        while run_i != run_j:
            if run_i < run_j:
                i += 1
                run_i *= source[i]
                add(source[i], FactorKind.NEED_REPLICATION, i, None)
            else:
                j += 1
                run_j *= target[j]
                add(target[j], FactorKind.NEED_REPLICATION, None, j)
        left_i = left_j = 1
    return sizes, kinds, [tuple(d) for d in source_dims], [tuple(d) for d in target_dims]


@register("stablehlo.reshape")
def _reshape(op: ir.Operation):
    sizes, kinds, source_dims, target_dims = common_factorization(
        shape_of(op.operands[0]), shape_of(op.results[0]))
    return OpRule(tuple(sizes), tuple(kinds), (tuple(source_dims),), (tuple(target_dims),),
                  UnreducedFlow.JOINT, (0,), keeps_attributes=True)


@register("stablehlo.constant", "stablehlo.iota", "stablehlo.rng_bit_generator", "stablehlo.rng")
def _created(op: ir.Operation):
    """A tensor made from nothing: its dims are free to take any sharding.

    (rng ops take shape/state operands, which stay whole.)
    """
    operand_ranks = ranks(op.operands)
    result_shapes = [shape_of(r) or () for r in op.results]
    builder = RuleBuilder(operand_ranks, [len(s) for s in result_shapes])
    for result, shape in enumerate(result_shapes):
        for dim, size in enumerate(shape):
            dims = [None] * len(result_shapes)
            dims[result] = dim
            builder.factor(size, FactorKind.PASS_THROUGH, [None] * len(operand_ranks), dims)
    for operand, rank in enumerate(operand_ranks):
        for dim in range(rank):
            dims = [None] * len(operand_ranks)
            dims[operand] = dim
            builder.factor(shape_of(op.operands[operand])[dim], FactorKind.NEED_REPLICATION, dims,
                           [None] * len(result_shapes))
    return builder.build()
