"""The op-rule table: for every op, how its tensors' dimensions relate.

This is the one place that knows ops.  Propagation, partitioning and the cost
model all read an op through its `OpRule`, Shardy's factor model:

* A *factor* is one loop of the op's iteration space, with a size.  Each
  operand and result dimension is a list of factors, major to minor (one
  factor normally; several for a reshape that splits or merges dimensions).
* A factor's *kind* says what sharding it means for data movement:
  ``PASS_THROUGH`` (sharded alike on every tensor, no communication),
  ``REDUCTION`` (only on operands: a sharded one leaves a partial result),
  ``NEED_REPLICATION`` (must stay whole: sort's dimension, a concatenation),
  ``PERMUTATION`` (operands and results, but data moves along it: slice, pad,
  reverse, windows; shardable with halos or resharding).
* `unreduced` says how a partial (unreduced) operand flows: ``JOINT`` ops are
  linear in all their `linear_operands` together (add, concatenate,
  reshape: partial in, partial out when every linear operand is partial
  alike), ``SEPARATE`` ops are linear in each separately (multiply, dot: one
  partial operand times full ones), ``NONE`` needs full values.
* `reduction` is the combiner a sharded REDUCTION factor leaves pending:
  "sum" for dot and reduce-add, "max"/"min" for those reduces.

A rule is built from the op itself (its types and attributes) by a builder
registered for the op name with `register`; a new op is one builder.  Ops
whose results are tied to values in regions or other functions (while, if,
case, call) also register `tied_values`, the pairs of values that must share a
sharding.  An op with no builder has no rule: propagation replicates it and
says so at its location.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from typing import Callable, Iterable, NamedTuple, Sequence

from jaxlib.mlir import ir

from stablehlo_spmd.ir import per_context
from stablehlo_spmd.kept_hash import kept_hash, state_without_hash
from stablehlo_spmd.shapes import rank_of, shape_of


class FactorKind(enum.Enum):
    PASS_THROUGH = "pass-through"
    REDUCTION = "reduction"
    NEED_REPLICATION = "need-replication"
    PERMUTATION = "permutation"


class UnreducedFlow(enum.Enum):
    NONE = "none"          # needs full values
    JOINT = "joint"        # linear in all linear operands together: P op P -> P
    SEPARATE = "separate"  # linear in each linear operand alone: P op B -> P


DimFactors = tuple[int, ...]          # factor ids of one dimension, major to minor
TensorFactors = tuple[DimFactors, ...]


class Window(NamedTuple):
    """How a PERMUTATION factor moves data: window j of `count` reads
    `extent` positions from ``offset + j * stride`` of the operand's dim
    dilated by `dilation` (element i at position ``i * dilation``; the holes
    and anything outside the dim are the op's padding).  A sharded dim with
    a window is served by halo exchange; one without is gathered."""

    offset: int
    stride: int
    extent: int
    count: int
    dilation: int = 1


class FactorGroup(NamedTuple):
    """A grouped op's groups (a convolution's feature or batch groups): the
    attribute holding the group count, the factor that counts the groups,
    and the per-group factors that share its dimensions.  A device holding
    whole groups runs the same op with fewer groups."""

    count_attribute: str
    factor: int
    members: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class OpRule:
    factor_sizes: tuple[int, ...]
    factor_kinds: tuple[FactorKind, ...]
    operands: tuple[TensorFactors, ...]
    results: tuple[TensorFactors, ...]
    unreduced: UnreducedFlow = UnreducedFlow.NONE
    linear_operands: tuple[int, ...] = ()
    reduction: str | None = None
    elementwise: bool = False
    # The op's attributes name dimensions, never sizes, so the per-device op
    # is the same op on per-device types (else it runs replicated unless the
    # partitioner has a strategy for it).
    keeps_attributes: bool = False
    # Padding of an uneven, sharded REDUCTION factor can be overwritten with
    # the reduction's neutral value before the local op reads it.
    masks_padding: bool = False
    # For each operand, the operand holding that neutral value (a reduce's
    # init); none: zero.
    neutral_operands: tuple[int, ...] = ()
    groups: tuple[FactorGroup, ...] = ()
    # Per factor: its `Window` where it has one (slice, pad, window ops).
    windows: tuple[Window | None, ...] = ()

    @property
    def num_factors(self) -> int:
        return len(self.factor_sizes)

    @functools.cached_property
    def is_contraction(self) -> bool:
        """Two operands share a REDUCTION factor: a dot or a convolution.  (Kept:
        the search asks it of every node, again for each memory model it builds.)"""
        reduction = {f for f, kind in enumerate(self.factor_kinds)
                     if kind is FactorKind.REDUCTION}
        holders = sum(1 for tensor in self.operands
                      if any(f in reduction for dim in tensor for f in dim))
        return holders >= 2

    __hash__ = kept_hash
    __getstate__ = state_without_hash


class RuleBuilder:
    """Builds an `OpRule` factor by factor (the shape Shardy's builder has)."""

    def __init__(self, operand_ranks: Sequence[int], result_ranks: Sequence[int]):
        self._sizes: list[int] = []
        self._kinds: list[FactorKind] = []
        self._windows: list[Window | None] = []
        self._operands = [[[] for _ in range(rank)] for rank in operand_ranks]
        self._results = [[[] for _ in range(rank)] for rank in result_ranks]

    def factor(self, size: int, kind: FactorKind = FactorKind.PASS_THROUGH,
               operand_dims: Sequence[int | None] = (),
               result_dims: Sequence[int | None] = (), window: Window | None = None) -> int:
        """Add a factor; ``operand_dims[i]`` is the dim of operand i it is in (None: absent)."""
        factor_id = len(self._sizes)
        self._sizes.append(int(size))
        self._kinds.append(kind)
        self._windows.append(window)
        for tensors, dims in ((self._operands, operand_dims), (self._results, result_dims)):
            for tensor, dim in zip(tensors, dims):
                if dim is not None:
                    tensor[dim].append(factor_id)
        return factor_id

    def build(self, unreduced: UnreducedFlow = UnreducedFlow.NONE,
              linear_operands: Iterable[int] = (), reduction: str | None = None,
              elementwise: bool = False, keeps_attributes: bool = False,
              masks_padding: bool = False, neutral_operands: Iterable[int] = (),
              groups: Iterable[FactorGroup] = ()) -> OpRule:
        freeze = lambda tensors: tuple(tuple(tuple(d) for d in t) for t in tensors)  # noqa: E731
        return OpRule(tuple(self._sizes), tuple(self._kinds), freeze(self._operands),
                      freeze(self._results), unreduced, tuple(linear_operands), reduction,
                      elementwise, keeps_attributes, masks_padding, tuple(neutral_operands),
                      tuple(groups),
                      tuple(self._windows) if any(self._windows) else ())

    def dim_factors(self, tensor: int, dim: int, result: bool = False) -> tuple[int, ...]:
        """The factors added so far to dim `dim` of operand (or result) `tensor`."""
        return tuple((self._results if result else self._operands)[tensor][dim])


# ------------------------------------------------------------------ registry

RuleFn = Callable[[ir.Operation], "OpRule | None"]
TiesFn = Callable[[ir.Operation], "list[tuple[ir.Value, ir.Value]]"]
GroupFn = Callable[[ir.Operation], "tuple[int, ir.Value]"]

_RULES: dict[str, RuleFn] = {}
_TIES: dict[str, TiesFn] = {}
_GROUPS: dict[str, GroupFn] = {}
_SIGNATURES: dict[str, Callable[[ir.Operation], object]] = {}


def register(*op_names: str, signature: Callable[[ir.Operation], object] | None = None):
    """Decorator: `fn(op) -> OpRule` is the rule of every op named.

    A rule is cached by the op's name, types and attributes: a 13k-op
    training step has fewer than 200 distinct ones.  A rule that also looks
    at something else (a region's body, an operand's producer) must say so
    with `signature(op)`, a hashable summary of it; ops with regions and no
    signature are not cached.
    """
    def decorate(fn: RuleFn) -> RuleFn:
        for name in op_names:
            if name in _RULES:
                raise ValueError(f"op {name} already has a rule")
            _RULES[name] = fn
            if signature is not None:
                _SIGNATURES[name] = signature
        return fn
    return decorate


def register_ties(*op_names: str):
    """Decorator: `fn(op) -> [(a, b), ...]` pairs of values that share a sharding.

    A pair may carry a third element, the direction a sharding may travel
    ("forward": a to b only, "backward", "none"; "both" when left out)."""
    def decorate(fn: TiesFn) -> TiesFn:
        for name in op_names:
            _TIES[name] = fn
        return fn
    return decorate


def register_group(*op_names: str):
    """Decorator: `fn(op) -> (group id, value)` for ops that put a value in a
    sharding group, whose values all share one sharding wherever they are."""
    def decorate(fn: GroupFn) -> GroupFn:
        for name in op_names:
            _GROUPS[name] = fn
        return fn
    return decorate


def rule_for(op: ir.Operation) -> OpRule | None:
    name = op.name
    fn = _RULES.get(name)
    if fn is None:
        return None
    signature = _SIGNATURES.get(name)
    if signature is None and len(op.regions):
        return fn(op)
    attributes = op.attributes
    key = (name, tuple(v.type for v in op.operands), tuple(r.type for r in op.results),
           _attributes_key(attributes) if len(attributes) else (),
           signature(op) if signature is not None else None)
    cache = per_context("op_rules", op.context)  # keys hold MLIR types: scoped to their context
    try:
        return cache[key]
    except KeyError:
        rule = cache[key] = fn(op)
        return rule


def _attributes_key(attributes) -> tuple:
    found = []
    for name in attributes:
        try:
            found.append((name, attributes[name]))
        except TypeError:
            # jaxlib's bindings cannot read a dense attribute of complex
            # elements (a complex constant's value); no rule reads a payload.
            found.append((name, None))
    return tuple(found)


def tied_values(op: ir.Operation) -> list[tuple[ir.Value, ir.Value]]:
    fn = _TIES.get(op.name)
    return fn(op) if fn is not None else []


def has_ties(op_name: str) -> bool:
    return op_name in _TIES


def group_of(op: ir.Operation) -> tuple[int, ir.Value] | None:
    """(group id, value) when `op` puts a value in a sharding group."""
    fn = _GROUPS.get(op.name)
    return fn(op) if fn is not None else None


def has_rule(op_name: str) -> bool:
    return op_name in _RULES or op_name in _TIES or op_name in _GROUPS


# ------------------------------------------------------------- shared bits

# Ops whose value the partitioner makes again, from its operands moved, rather
# than moves, where that moves fewer bytes (a widening convert, say): cheap,
# region-free, one result.  The search prices reads of their values the same way.
REMADE_NOT_MOVED = frozenset({
    "stablehlo.constant", "stablehlo.iota", "stablehlo.broadcast_in_dim", "stablehlo.reshape",
    "stablehlo.transpose", "stablehlo.slice", "stablehlo.concatenate", "stablehlo.convert",
})


def project_axes(axes, factors: tuple[int, ...], factor_sizes: tuple[int, ...],
                 axis_size: dict[str, int]) -> list[tuple[int, tuple[str, ...]]]:
    """Deal a dimension's mesh axes out to its factors, major to minor.

    A factor takes whole axes while they divide what is left of it; the
    minor-most factor may take one last axis that does not divide it (an
    uneven split: its shards are padded).  An axis that would straddle two
    factors stops the dealing.  Returns ``[(factor, axes), ...]``.
    """
    if not factors:
        return []
    result = []
    k, remaining, taken = 0, factor_sizes[factors[0]], []
    last = len(factors) - 1
    for axis in axes:
        size = axis_size[axis]
        while remaining == 1 and k < last:
            if taken:
                result.append((factors[k], tuple(taken)))
            k += 1
            remaining, taken = factor_sizes[factors[k]], []
        if remaining % size == 0:
            taken.append(axis)
            remaining //= size
        elif k == last and remaining > 1:
            taken.append(axis)
            remaining = 1
        else:
            break
    if taken:
        result.append((factors[k], tuple(taken)))
    return result


def ranks(values) -> list[int]:
    return [rank_of(v) for v in values]


def elementwise_rule(op: ir.Operation, unreduced: UnreducedFlow = UnreducedFlow.NONE,
                     linear_operands: Iterable[int] = ()) -> OpRule | None:
    """Every operand and result has the result's shape; dim d is factor d.

    Scalar (rank-0) operands of an op with a ranked result are allowed, as
    some CHLO and select/clamp forms broadcast them.
    """
    shape = shape_of(op.results[0])
    if shape is None:
        return None
    operand_ranks = ranks(op.operands)
    builder = RuleBuilder(operand_ranks, [len(shape)] * len(op.results))
    for dim, size in enumerate(shape):
        builder.factor(size, FactorKind.PASS_THROUGH,
                       [dim if rank == len(shape) else None for rank in operand_ranks],
                       [dim] * len(op.results))
    return builder.build(unreduced, linear_operands, elementwise=True, keeps_attributes=True)


def int_array(attr: ir.Attribute) -> list[int]:
    """Dense i64 arrays and ArrayAttrs of integers as a list."""
    try:
        return [int(x) for x in ir.DenseI64ArrayAttr(attr)]
    except (TypeError, ValueError):
        pass
    try:
        return [int(x) for x in ir.DenseIntElementsAttr(attr)]
    except (TypeError, ValueError):
        return [int(ir.IntegerAttr(x).value) for x in ir.ArrayAttr(attr)]


# The families register themselves on import; importing them here, after
# everything they use is defined, means any import of the table loads all of it.
from stablehlo_spmd.op_rules import (  # noqa: E402,F401
    compute, control, custom_calls, elementwise, indexing, shape_ops, windowed)
