"""Per-op strategies: how one op becomes per-device code, in two steps.

A `Strategy` is a pair of functions:

* ``plan(p, op) -> Plan | None`` decides, and emits nothing: the layout each
  operand must have for the local op (`Plan.required`), the layout each
  local result comes out in (`Plan.produced`), and anything else the
  emission needs (`Plan.detail`).  ``None`` declines: the op then takes the
  default strategy.  Because nothing is emitted before a strategy commits,
  declining can never leave half an op behind.
* ``emit_local(p, op, plan, operands) -> results`` emits the per-device op
  on operands the driver has already resharded to `Plan.required`, and
  returns per-device results in `Plan.produced`'s layouts.  The driver then
  settles each result to the sharding propagation chose (`Plan.wanted`).

Both take the driver as ``p``, seen through `context.PartitionContext`: the
few members of `partitioner.Partitioner` strategies use (its mesh, each
value's per-device form and sharding, `to`, `create`, ...), so that
strategies depend on that protocol and never on the driver's module.

`STRATEGIES` is keyed by op name, like the op-rule table: "where is op X
handled" has one answer, ``STRATEGIES[X]``, or, for an op with no entry, the
default: `RULE_DRIVEN` when its rule `keeps_attributes` (the same op on
per-device types), else `REPLICATED` (gather, run whole, slice).

Most strategies start from `rule_plan`, which reads the op's `OpRule`: each
factor runs over the mesh axes the result's sharding gives it
(`factor_axes`), and a strategy narrows that with a ``constrain(rule,
axes)`` hook.  Every factor a hook strips, and every PERMUTATION or
NEED_REPLICATION factor the rule itself keeps whole, is recorded in
`Plan.gathered`; the driver reports them all through one located warning,
so no strategy overrules the table silently.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from jaxlib.mlir import ir

from stablehlo_spmd import op_rules
from stablehlo_spmd.errors import ShardingError
from stablehlo_spmd.module_shardings import FACTOR_AXES
from stablehlo_spmd.op_rules import FactorKind, OpRule, UnreducedFlow, project_axes
from stablehlo_spmd.partitioning.context import PartitionContext
from stablehlo_spmd.reshard import plan as plan_reshard, plan_cost
from stablehlo_spmd.shapes import element_bytes, local_type, shape_of
from stablehlo_spmd.sharding import Sharding


@dataclasses.dataclass
class Plan:
    """What a strategy decided for one op, before anything is emitted."""

    wanted: list[Sharding | None]      # each result's sharding, as propagation chose it
    required: list[Sharding | None]    # each operand's layout for the local op (None: as is)
    produced: list[Sharding | None]    # each local result's layout (None: not a tensor)
    rule: OpRule | None = None
    axes: list[tuple] | None = None    # the mesh axes each factor of `rule` runs over
    # Factors kept whole although an operand is split on them: each is
    # reported where it gathers a large tensor (`Partitioner.report_gathered`).
    gathered: frozenset[int] = frozenset()
    replicates: bool = False           # the op runs on whole tensors (no partitioned form)
    detail: Any = None                 # the strategy's own decisions (windows, owners, ...)


PlanFn = Callable[[PartitionContext, ir.Operation], "Plan | None"]
EmitFn = Callable[[PartitionContext, ir.Operation, Plan, list], Sequence[ir.Value]]
ConstrainFn = Callable[[OpRule, list], None]


@dataclasses.dataclass(frozen=True)
class Strategy:
    plan: PlanFn
    emit_local: EmitFn
    # `emit_local` computes on the operands it is given and moves no data
    # between devices (no halo exchange, no tree of partial results): the
    # partitioner may then make a value again rather than move it.
    local: bool = False


STRATEGIES: dict[str, Strategy] = {}


def strategy(*op_names: str, plan: PlanFn | None = None,
             local: bool = False) -> Callable[[EmitFn], EmitFn]:
    """Register the decorated ``emit_local`` with `plan` (default `rule_plan`)
    as the strategy of `op_names` (`Strategy.local`: it moves no data)."""
    def register(emit_local: EmitFn) -> EmitFn:
        for name in op_names:
            # One strategy an op: a second would silently win by import order.
            assert name not in STRATEGIES, f"{name} already has a strategy"
            STRATEGIES[name] = Strategy(plan or rule_plan, emit_local, local)
        return emit_local
    return register


# ------------------------------------------------------------ rule-driven

def rule_plan(p: PartitionContext, op: ir.Operation, constrain: ConstrainFn | None = None,
              reduction_first: bool = False) -> Plan | None:
    """The plan the op's rule gives: factors on the axes the results want,
    narrowed by `constrain`; None for an op with no rule."""
    rule = op_rules.rule_for(op)
    if rule is None:
        return None
    wanted = p.result_shardings(op)
    axes = factor_axes(p, op, rule, wanted, reduction_first)
    stripped = set()
    if constrain is not None:
        before = list(axes)
        constrain(rule, axes)
        stripped = {f for f, (old, new) in enumerate(zip(before, axes)) if set(old) - set(new)}
    return plan_from_axes(p, op, rule, wanted, axes, stripped)


def plan_from_axes(p: PartitionContext, op: ir.Operation, rule: OpRule, wanted, axes,
                   stripped=frozenset()) -> Plan:
    """The plan of running each factor over `axes`; `stripped` are factors a
    strategy kept whole against the rule (reported like the rule's own)."""
    required, produced = layouts(p, op, rule, axes, wanted)
    whole = {f for f, kind in enumerate(rule.factor_kinds)
             if kind in (FactorKind.NEED_REPLICATION, FactorKind.PERMUTATION) and not axes[f]}
    return Plan(wanted, required, produced, rule, axes, frozenset(stripped | whole))


def _cheapest_rule_plan(p: PartitionContext, op: ir.Operation) -> Plan | None:
    """`rule_plan`, seating an axis that both a result dim and a reduced dim
    want where it moves fewer bytes: on the result (move the operands) or on
    the reduction (reduce-scatter the local partial); or, where a plan wrote
    the op's axes (`FACTOR_AXES`), as it wrote them."""
    rule = op_rules.rule_for(op)
    if rule is None or not rule.keeps_attributes:
        return None
    wanted = p.result_shardings(op)
    # The plan depends only on the rule (cached per op signature, element
    # types included: the rule object stands for them, and the cache holds
    # it so its id is not reused) and the shardings around the op: the
    # layers of a deep model ask the same question again and again.
    # An operand made from constants alone costs nothing to read in any
    # layout (`Partitioner.move_bytes`), so which operands are is part of
    # the question too.
    planned = _planned_axes(p, op, rule)
    key = (id(rule), tuple(wanted), tuple(p.shardings.get(v) for v in op.operands),
           tuple(p.made_from_constants(v) for v in op.operands), planned)
    known = p.rule_plans.get(key)
    if known is not None:
        return known[1]
    if planned is not None:
        # The plan's own way (spmd-auto-shard's): its bytes and memory are
        # what the plan was chosen by.  Chosen by the bytes around the op
        # alone, it might gather a weight once and hold it to the backward,
        # or sum a contraction whole on every device, where the plan turned
        # that down for its memory budget.
        return _remembered(p, key, rule, plan_from_axes(p, op, rule, wanted, list(planned)))
    # Where the result wants its factors (the reductions after them, or
    # before), or where the operands have them: the op then runs in place
    # and its (often smaller) result moves, as XLA's partitioner does when
    # a dot's output is cheaper to reshard than its operands.  Ties keep the
    # first.
    choices = [(False, False), (True, False), (False, True)]
    if FactorKind.REDUCTION not in rule.factor_kinds:
        choices.remove((True, False))
    candidates = []
    for reduction_first, operands_first in choices:
        plan = plan_from_axes(p, op, rule, wanted, factor_axes(
            p, op, rule, wanted, reduction_first, operands_first))
        candidates.append((plan_reshard_bytes(p, op, plan), plan))
    if FactorKind.REDUCTION in rule.factor_kinds:
        # A contraction may also run with one axis on a factor neither side
        # splits (a weight's free dim, say): moving a small weight and
        # gathering a small activation can cost less than gathering the
        # weight, whatever the result wants.
        pending = {a for s in (*wanted, *(p.shardings.get(v) for v in op.operands))
                   if s is not None for a in s.unreduced}
        for axes in _one_axis_moved(p, rule, candidates[0][1].axes, pending):
            plan = plan_from_axes(p, op, rule, wanted, axes)
            candidates.append((plan_reshard_bytes(p, op, plan), plan))
    return _remembered(p, key, rule, min(candidates, key=lambda c: c[0])[1])


def _planned_axes(p: PartitionContext, op: ir.Operation, rule: OpRule) -> tuple | None:
    """The axes per factor a plan wrote on `op` (`FACTOR_AXES`), or None;
    a `ShardingError` where they are not a way to run it."""
    if FACTOR_AXES not in op.attributes:
        return None
    try:
        axes = tuple(tuple(ir.StringAttr(axis).value for axis in ir.ArrayAttr(factor))
                     for factor in ir.ArrayAttr(op.attributes[FACTOR_AXES]))
    except ValueError:
        axes = None
    if axes is None or len(axes) != rule.num_factors:
        raise ShardingError(f"{FACTOR_AXES} must give the mesh axes of each of the op's "
                            f"{rule.num_factors} factors, as an array of arrays of axis names")
    named = [a for factor in axes for a in factor]
    unknown = [a for a in named if a not in p.axis_size]
    if unknown or len(set(named)) != len(named):
        raise ShardingError(f"{FACTOR_AXES}: " + (
            f"{unknown[0]!r} is not an axis of the mesh" if unknown
            else "an axis runs two factors"))
    for factor, factor_axes_ in enumerate(axes):
        if rule.factor_sizes[factor] % p.mesh.axes_size(factor_axes_):
            raise ShardingError(f"{FACTOR_AXES}: factor {factor} (size "
                                f"{rule.factor_sizes[factor]}) does not split evenly over "
                                f"{', '.join(factor_axes_)}")
    return axes


def _remembered(p: PartitionContext, key, rule: OpRule, plan: Plan) -> Plan:
    p.rule_plans[key] = (rule, plan)
    return plan


def _one_axis_moved(p: PartitionContext, rule: OpRule, axes: list[tuple], pending: set[str]):
    """`axes` with one mesh axis taken off the factor holding it (if any) and
    put, minor, on another factor that can run split and divides evenly; not
    an axis a partial value around the op is pending on."""
    compound = _compound_factors(rule)
    for axis in p.mesh.axis_names:
        if p.axis_size[axis] == 1 or axis in pending:
            continue
        for factor, kind in enumerate(rule.factor_kinds):
            if factor in compound or axis in axes[factor] or not (
                    kind is FactorKind.PASS_THROUGH
                    or (kind is FactorKind.REDUCTION and rule.reduction is not None)):
                continue
            moved = [tuple(a for a in held if a != axis) for held in axes]
            moved[factor] = moved[factor] + (axis,)
            if rule.factor_sizes[factor] % p.mesh.axes_size(moved[factor]) == 0:
                yield moved


def _emit_by_rule(p: PartitionContext, op: ir.Operation, plan: Plan,
                  operands) -> Sequence[ir.Value]:
    """The same op on per-device types, reading no padding it would reduce."""
    operands = [mask_uneven_reduction(p, op, plan, index, local)
                for index, local in enumerate(operands)]
    return p.create(op, operands, [local_type(r.type, s) for r, s in
                                   zip(op.results, plan.produced)]).results


RULE_DRIVEN = Strategy(_cheapest_rule_plan, _emit_by_rule, local=True)


def factor_axes(p: PartitionContext, op: ir.Operation, rule: OpRule, wanted: list[Sharding],
                reduction_first: bool = False, operands_first: bool = False) -> list[tuple]:
    """The mesh axes each factor runs over in the per-device op.

    Each factor takes the axes the op's result sharding gives it (REDUCTION
    factors: the axes an operand has there), except that PERMUTATION and
    NEED_REPLICATION factors, and factors the axes would split unevenly where
    the padding matters, get none: their data is gathered first.  With
    `operands_first`, each factor takes the axes the operands have instead
    (the op runs where its operands are), and the result's only for the
    factors no operand splits (less the axes the operands hold, where no
    factor is contracted).
    """
    mesh = p.mesh
    axes: list[tuple] = [()] * rule.num_factors
    assigned = [False] * rule.num_factors
    operand_axes = list(dealt_axes(p, rule, [p.shardings.get(v) for v in op.operands],
                                   rule.operands))
    if operands_first:
        for factor, dealt in operand_axes:
            if not assigned[factor]:
                axes[factor], assigned[factor] = dealt, True
    # Running where the operands are, a factor no operand splits takes only
    # the result's axes the operands leave free: an axis they hold stays on
    # their factor (else the first factor would win it back, and the op
    # would run where its result is after all, moving every operand).  Not
    # for a contraction: there the freed axis leaves a Partial result, and
    # Llama-3-70B's 2-D plan then reduce-scattered its head's whole weight
    # gradient (3.9 GiB more, by a price that missed it; not yet known why).
    held_by_operands = set() if FactorKind.REDUCTION in rule.factor_kinds else {
        a for f in range(rule.num_factors) if assigned[f] for a in axes[f]}
    for factor, dealt in dealt_axes(p, rule, wanted, rule.results):
        if not assigned[factor]:
            free = tuple(a for a in dealt if a not in held_by_operands)
            axes[factor], assigned[factor] = free, True
    for factor, dealt in operand_axes:
        if not assigned[factor] and rule.factor_kinds[factor] is FactorKind.REDUCTION:
            axes[factor], assigned[factor] = dealt, True
    compound = _compound_factors(rule)
    used: set[str] = set()
    # With `reduction_first`, reduction factors claim their axes before
    # the result's dims do (a result wanting the same axis then gets it by
    # a reduce-scatter of the local partial); without, after them (an
    # operand split on a reduced dim then moves instead).
    order = sorted(range(rule.num_factors), key=lambda f: (
        (rule.factor_kinds[f] is FactorKind.REDUCTION) != reduction_first))
    for factor in order:
        kind = rule.factor_kinds[factor]
        keep = kind is FactorKind.PASS_THROUGH or (kind is FactorKind.REDUCTION
                                                   and rule.reduction is not None)
        # A factor whose axes another factor took keeps the major axes before
        # the first one taken: a prefix is a coarser split of the same dim,
        # which the local op can run on while the rest of the split waits for
        # the result's reshard.  (XLA's partitioner likewise keeps a weight
        # split on its non-contracting dim when the contracting dim took the
        # other axis, and reduce-scatters the partial product onto the rest.)
        kept = []
        for axis in axes[factor] if keep else ():
            if axis in used:
                break
            kept.append(axis)
        # Padding of an uneven shard is harmless where each element is
        # computed on its own, but a reduction would read it and a
        # compound (reshaped) dim would misplace it: those must divide.
        uneven = rule.factor_sizes[factor] % mesh.axes_size(kept)
        if uneven and (factor in compound or (kind is FactorKind.REDUCTION
                                              and not rule.masks_padding)):
            kept = []
        axes[factor] = tuple(kept)
        used.update(kept)
    # A compound (reshaped) dim is split major to minor: a factor can run
    # over axes only when every factor before it in the dim is split into
    # exactly its size.  (8 -> 2x2x2 with the middle dim over x is no
    # split of the 8: device k holds elements {0,1,4,5} + 2k.)
    changed = True
    while changed:
        changed = False
        for tensor in (*rule.operands, *rule.results):
            for factors in tensor:
                for i, factor in enumerate(factors[1:], 1):
                    if axes[factor] and any(mesh.axes_size(axes[f]) != rule.factor_sizes[f]
                                            for f in factors[:i]):
                        axes[factor], changed = (), True
    return axes


def _compound_factors(rule: OpRule) -> set[int]:
    """Factors that share a dim with others (a reshaped dim)."""
    return {f for tensor in (*rule.operands, *rule.results) for dim in tensor
            if len(dim) > 1 for f in dim}


def dealt_axes(p: PartitionContext, rule: OpRule, shardings, tensors):
    """``(factor, axes)`` for each factor the shardings split, tensor by
    tensor (`tensors`: the rule's factors of each; a None sharding deals
    nothing), dim by dim, as `project_axes` deals a dim's axes."""
    for sharding, dims in zip(shardings, tensors):
        if sharding is None:
            continue
        for dim, factors in enumerate(dims):
            yield from project_axes(sharding.dim_axes[dim], factors, rule.factor_sizes,
                                    p.axis_size)


def layout(p: PartitionContext, dims, axes) -> Sharding:
    """The sharding a tensor has when each factor runs over its axes."""
    return Sharding(p.mesh, tuple(tuple(a for factor in factors for a in axes[factor])
                                  for factors in dims))


def layouts(p: PartitionContext, op: ir.Operation, rule: OpRule, axes, wanted):
    """Operand layouts the local op needs and result layouts it produces.

    A partial operand stays partial when the op is linear in it and its
    result stays partial over the same axes; a sharded REDUCTION factor
    leaves the results partial over its axes.
    """
    required, partial_operands = [], []
    result_partial = set(wanted[0].unreduced) if wanted else set()
    plain = []   # each operand's layout before a pending sum flows through it
    # An axis a result is split over cannot also be one it is pending on.
    result_split = {a for dims in rule.results for dim_axes in layout(p, dims, axes).dim_axes
                    for a in dim_axes}
    for index, (operand, dims) in enumerate(zip(op.operands, rule.operands)):
        if shape_of(operand) is None:
            required.append(None)
            plain.append(None)
            continue
        operand_layout = layout(p, dims, axes)
        plain.append(operand_layout)
        source = p.shardings.get(operand)
        # (Not when another operand claimed a pending axis for one of this
        # operand's dims, say a contracting dim split over it: a partial
        # value cannot also be split over the axis it is pending on, so it
        # is summed first.)
        # Linear in each operand alone (SEPARATE): one partial operand at most;
        # a product of pending sums is not the sum of the products.
        if (source is not None and source.unreduced and rule.unreduced is not UnreducedFlow.NONE
                and index in rule.linear_operands and set(source.unreduced) <= result_partial
                and set(source.unreduced).isdisjoint(
                    a for dim_axes in operand_layout.dim_axes for a in dim_axes)
                and set(source.unreduced).isdisjoint(result_split)
                and not (rule.unreduced is UnreducedFlow.SEPARATE and partial_operands)):
            operand_layout = dataclasses.replace(operand_layout, unreduced=source.unreduced,
                                                 reduction=source.reduction)
            partial_operands.append(index)
        required.append(operand_layout)
    if rule.unreduced is UnreducedFlow.JOINT and partial_operands:
        # Linear in its operands together (P + P = P), the op keeps a sum
        # pending only where every linear operand pends it alike: P + B
        # would add B once per device.  Otherwise each is summed first.
        linear = [i for i, o in enumerate(op.operands)
                  if i in rule.linear_operands and shape_of(o) is not None]
        pending = {frozenset(required[i].unreduced) for i in partial_operands}
        if partial_operands != linear or len(pending) != 1:
            for i in partial_operands:
                required[i] = plain[i]
            partial_operands = []
    reduction_axes = tuple(a for f, kind in enumerate(rule.factor_kinds)
                           if kind is FactorKind.REDUCTION for a in axes[f])
    flowed = p.shardings[op.operands[partial_operands[0]]].unreduced if partial_operands else ()
    unreduced = tuple(dict.fromkeys(reduction_axes + flowed))
    produced = []
    for dims in rule.results:
        result_layout = layout(p, dims, axes)
        if unreduced:
            result_layout = dataclasses.replace(result_layout, unreduced=unreduced,
                                                reduction=rule.reduction or "sum")
        produced.append(result_layout)
    return required, produced


def plan_reshard_bytes(p: PartitionContext, op: ir.Operation, plan: Plan) -> float:
    """Bytes per device the reshards around the local op would move."""
    total = 0.0
    for operand, required in zip(op.operands, plan.required):
        if required is not None:
            total += p.move_bytes(operand, required)
    for result, produced, target in zip(op.results, plan.produced, plan.wanted):
        if not set(target.unreduced) <= set(produced.unreduced):
            target = target.reduced()
        if produced != target:
            total += reshard_bytes(produced, target, result)
    return total


def reshard_bytes(source: Sharding, target: Sharding, value: ir.Value) -> float:
    """What the planner charges to move `value` from `source` to `target`."""
    value_type = ir.RankedTensorType(value.type)
    try:
        return plan_cost(plan_reshard(source, target, tuple(value_type.shape),
                                      element_bytes(value_type.element_type)))
    except ShardingError:
        return float("inf")


def mask_uneven_reduction(p: PartitionContext, op: ir.Operation, plan: Plan, index: int,
                          local: ir.Value) -> ir.Value:
    """Overwrite the padding of an uneven, sharded reduced dimension of
    operand `index` with the reduction's neutral value (its rule's
    `neutral_operands`; zero when it has none: 0 * NaN would still be NaN),
    so the local op never reads it.  A reduced dim is a REDUCTION factor, or
    a NEED_REPLICATION one, or a PERMUTATION one no result has, that a
    strategy splits anyway (`partitioning.reduction` reduces each shard of
    those)."""
    rule, axes = plan.rule, plan.axes
    if rule is None or index >= len(rule.operands) or shape_of(local) is None:
        return local
    for dim, factors in enumerate(rule.operands[index]):
        for factor in factors:
            dim_axes, size = axes[factor], rule.factor_sizes[factor]
            if not dim_axes or size % p.mesh.axes_size(dim_axes) == 0 \
                    or not _reduced(rule, factor):
                continue
            neutral = None
            if index < len(rule.neutral_operands):
                neutral = p.local[op.operands[rule.neutral_operands[index]]]
            local = p.emitter.mask_padding(local, dim, dim_axes, size, neutral)
    return local


def _reduced(rule, factor: int) -> bool:
    kind = rule.factor_kinds[factor]
    if kind is FactorKind.PERMUTATION:
        return not any(factor in dim for result in rule.results for dim in result)
    return kind in (FactorKind.REDUCTION, FactorKind.NEED_REPLICATION)


# -------------------------------------------------------------- replicated

def _replicated_plan(p: PartitionContext, op: ir.Operation) -> Plan:
    def whole(value):
        shape = shape_of(value)
        return None if shape is None else Sharding.replicated(p.mesh, len(shape))
    return Plan(p.result_shardings(op), [whole(v) for v in op.operands],
                [whole(r) for r in op.results], replicates=True)


def _emit_replicated(p: PartitionContext, op: ir.Operation, plan: Plan, operands):
    return p.create(op, operands, [r.type for r in op.results]).results


# Any op, correctly: gather the operands, run it whole, slice the results.
REPLICATED = Strategy(_replicated_plan, _emit_replicated, local=True)


def _on_owner_plan(p: PartitionContext, op: ir.Operation) -> Plan | None:
    """An op whose results all live on one device (``{maximal device=k}``)
    runs there, as in XLA: its operands are handed to that device whole and
    it runs on whole values.  (The SPMD program has one body, so every
    device runs it; only the owner's results are the values.)  None where
    the results do not share one owner."""
    wanted = p.result_shardings(op)
    owners = {s.maximal_device for s in wanted}
    if not wanted or len(owners) != 1 or None in owners:
        return None
    owner = owners.pop()

    def owned(value):
        shape = shape_of(value)
        return None if shape is None else Sharding.maximal(p.mesh, owner, len(shape))
    return Plan(wanted, [owned(v) for v in op.operands], [owned(r) for r in op.results])


ON_OWNER = Strategy(_on_owner_plan, _emit_replicated, local=True)
