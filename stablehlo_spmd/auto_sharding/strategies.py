"""An op's strategies: the ways its rule lets mesh axes be dealt to its factors.

`_Strategies` reads an op's `OpRule` into the strategies it may take
(`anchor`: each axis dealt to one factor it divides, or to none, in every
order; a contraction keeps those that split its work the most) or the one
it takes where it follows an operand's layout (`follow`) or writes a
layout it is given (`follow_result`).  A strategy fixes
the layout the op reads each operand in and writes each result in, and
what a sum finished inside the op costs.  `_Layouts` builds each layout
once, so that layouts compare by identity.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Sequence

from stablehlo_spmd.auto_sharding.graph import _product
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.op_rules import FactorKind, OpRule, UnreducedFlow, project_axes
from stablehlo_spmd.sharding import Sharding

Axes = tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Strategy:
    operands: tuple[Sharding | None, ...]   # the layout each operand is read in
    results: tuple[Sharding | None, ...]    # the layout each result is written in
    cost: float                             # communication inside the op
    label: str
    # Per result: the Partial layout it is written in when its class (the
    # values it is tied to) holds the sum; the sum is made at the boundary.
    unsummed: tuple[Sharding | None, ...] = ()
    # Per result: the Partial layout a sum finished inside the op starts
    # from; the plan writes it so, with the sum, so that the partitioner
    # sums where the search priced it (`Search._write`).
    finished: tuple[Sharding | None, ...] = ()
    # Per factor of the rule: the mesh axes the op runs it over (what the
    # plan writes on a contraction, `Plan.factor_axes`).
    axes: tuple[Axes, ...] = ()
    # The bytes per device `cost` moves (the same number where the cost is bytes).
    moved: float = 0.0


class _Layouts:
    """Shardings built once per value (they are compared and hashed a lot)."""

    def __init__(self, mesh: Mesh):
        self.mesh = mesh
        self._made: dict[tuple, Sharding] = {}
        self.axis_size = dict(zip(mesh.axis_names, mesh.mesh_shape))
        self.axes = tuple(a for a in mesh.axis_names if self.axis_size[a] > 1)

    def get(self, dims: tuple[Axes, ...], unreduced: Axes = (), reduction: str = "sum") -> Sharding:
        key = (dims, unreduced, reduction)
        found = self._made.get(key)
        if found is None:
            found = self._made[key] = Sharding(self.mesh, dims, unreduced=unreduced,
                                               reduction=reduction)
        return found

    def all_for(self, shape: tuple[int, ...]) -> list[Sharding]:
        """Every layout of `shape` that splits dims evenly, axes in any order per dim."""
        key = ("all", shape)
        found = self._made.get(key)
        if found is not None:
            return found
        choices = []
        for assignment in itertools.product(range(len(shape) + 1), repeat=len(self.axes)):
            dims = [[] for _ in shape]
            for axis, dim in zip(self.axes, assignment):
                if dim < len(shape):
                    dims[dim].append(axis)
            if all(shape[d] % _product(self.axis_size, axes) == 0 for d, axes in enumerate(dims)):
                choices.extend(self.get(ordered) for ordered in _axis_orders(dims))
        self._made[key] = choices
        return choices


def _axis_orders(split: Sequence[Axes]) -> Iterable[tuple[Axes, ...]]:
    """`split` (axes per dim or per factor) with the axes of each taken in
    every order: which axis is major decides which devices share a block,
    and so which moves stay within a group (the token dim of expert
    parallelism is split by the expert axis minor)."""
    return itertools.product(*(itertools.permutations(axes) if len(axes) > 1 else (tuple(axes),)
                               for axes in split))


def work_split(axis_size: dict[str, int], strategy: Strategy) -> int:
    """How many devices share an op's work under `strategy`: the mesh axes any
    of its layouts splits (a device computes its blocks only)."""
    return _product(axis_size, {a for layout in (*strategy.operands, *strategy.results)
                                if layout is not None for d in layout.dim_axes for a in d})


def contraction_flops(rule: OpRule) -> float:
    """A contraction's FLOPs: a multiply and an add per point of its iteration space."""
    return 2.0 * math.prod(rule.factor_sizes)


def _is_contraction(rule: OpRule) -> bool:
    """Two operands share a REDUCTION factor: a dot or a convolution."""
    return rule.is_contraction


class _Strategies:
    """An op's strategies from its rule, cached by rule: a 13k-op step has few rules."""

    def __init__(self, layouts: _Layouts, reshard_cost, reshard_bytes):
        self.layouts = layouts
        self.reshard_cost = reshard_cost
        self.reshard_bytes = reshard_bytes
        self._anchors: dict[OpRule, list[Strategy]] = {}
        self._followed: dict[tuple, Strategy | None] = {}

    # An assignment is a tuple over factors of their axes.

    def _tensor_layout(self, rule: OpRule, tensor, assignment, unreduced: Axes = (),
                       reduction: str = "sum") -> Sharding | None:
        dims = []
        for factors in tensor:
            axes: list[str] = []
            whole = True
            for factor in factors:
                factor_axes = assignment[factor]
                if factor_axes and not whole:
                    return None   # a minor factor split under an unsplit major one
                axes.extend(factor_axes)
                whole = _product(self.layouts.axis_size, factor_axes) == rule.factor_sizes[factor]
            dims.append(tuple(axes))
        return self.layouts.get(tuple(dims), unreduced, reduction)

    def _build(self, rule: OpRule, assignment, carried: Axes = (), carrier: int | None = None,
               finish: bool = False) -> Strategy | None:
        """The strategy dealing `assignment`; `carried` axes are Partial on
        operand `carrier` (every linear operand for a JOINT op) and the
        results; `finish` sums a born Partial inside the op."""
        born: list[str] = []
        if rule.reduction is not None:
            for factor, kind in enumerate(rule.factor_kinds):
                if kind is FactorKind.REDUCTION:
                    born.extend(assignment[factor])
        operands = []
        for position, tensor in enumerate(rule.operands):
            partial = ()
            if carried and (position == carrier or (
                    rule.unreduced is UnreducedFlow.JOINT and position in rule.linear_operands)):
                partial = carried
            layout = self._tensor_layout(rule, tensor, assignment, partial)
            if layout is None:
                return None
            operands.append(layout)
        pending = tuple(a for a in self.layouts.axes if a in set(born) | set(carried))
        kind = rule.reduction if born else "sum"
        cost = moved = 0.0
        results = []
        finished = []
        for tensor in rule.results:
            try:
                layout = self._tensor_layout(rule, tensor, assignment, pending, kind or "sum")
            except Exception:  # noqa: BLE001 - e.g. an unreduced axis also on a dim
                return None
            if layout is None:
                return None
            partial = None
            if pending and (finish or kind != "sum"):
                summed = self.layouts.get(layout.dim_axes)
                cost += self.reshard_cost(layout, summed, tensor, rule)
                moved += self.reshard_bytes(layout, summed, tensor, rule)
                partial = layout if finish and kind == "sum" else None
                layout = summed
            results.append(layout)
            finished.append(partial)
        label = _describe(rule, assignment, carried, finish)
        return Strategy(tuple(operands), tuple(results), cost, label,
                        finished=tuple(finished) if any(finished) else (),
                        axes=tuple(assignment), moved=moved)

    def anchor(self, rule: OpRule) -> list[Strategy]:
        found = self._anchors.get(rule)
        if found is not None:
            return found
        axis_size = self.layouts.axis_size
        choosable = [f for f, kind in enumerate(rule.factor_kinds)
                     if kind in (FactorKind.PASS_THROUGH, FactorKind.REDUCTION)]
        strategies = []
        for choice in itertools.product([None, *choosable], repeat=len(self.layouts.axes)):
            assignment: list[Axes] = [()] * rule.num_factors
            ok = True
            for axis, factor in zip(self.layouts.axes, choice):
                if factor is None:
                    continue
                axes = assignment[factor] + (axis,)
                if rule.factor_sizes[factor] % _product(axis_size, axes):
                    ok = False
                    break
                assignment[factor] = axes
            if not ok:
                continue
            free = tuple(a for a, f in zip(self.layouts.axes, choice) if f is None)
            splits_sum = rule.reduction == "sum" and any(
                assignment[f] for f, k in enumerate(rule.factor_kinds)
                if k is FactorKind.REDUCTION)
            for ordered in _axis_orders(assignment):
                for finish in ((False, True) if splits_sum else (False,)):
                    strategy = self._build(rule, ordered, finish=finish)
                    if strategy is not None:
                        strategies.append(strategy)
                if rule.unreduced is not UnreducedFlow.NONE and free and not splits_sum:
                    carriers = ([None] if rule.unreduced is UnreducedFlow.JOINT
                                else list(rule.linear_operands))
                    for size in range(1, len(free) + 1):
                        for carried in itertools.combinations(free, size):
                            for carrier in carriers:
                                strategy = self._build(rule, ordered, carried, carrier)
                                if strategy is not None:
                                    strategies.append(strategy)
        if _is_contraction(rule):
            # Alpa's rule: a contraction is never computed twice; keep the
            # strategies that split its iteration space the most.
            best = max((work_split(axis_size, s) for s in strategies), default=1)
            strategies = [s for s in strategies if work_split(axis_size, s) == best and not any(
                layout.unreduced for layout in s.operands if layout is not None)]
        if not strategies:
            strategies = [self._build(rule, (((),) * rule.num_factors))]
        self._anchors[rule] = strategies
        return strategies

    def follow(self, rule: OpRule, leader: int, layout: Sharding) -> Strategy:
        """The strategy of a follower whose operand `leader` is laid out as `layout`."""
        key = (rule, leader, layout)
        found = self._followed.get(key)
        if found is not None:
            return found
        assignment = self._dealt(rule, rule.operands[leader], layout)
        carried: Axes = ()
        carrier = None
        if layout.unreduced and layout.reduction == "sum" and \
                rule.unreduced is not UnreducedFlow.NONE and leader in rule.linear_operands:
            carried, carrier = layout.unreduced, leader
        strategy = None
        if carried:
            strategy = self._build(rule, assignment, carried, carrier)
        if strategy is None:
            strategy = self._build(rule, assignment)
        if strategy is None:
            strategy = self._build(rule, ((),) * rule.num_factors)
        self._followed[key] = strategy
        return strategy

    def follow_result(self, rule: OpRule, leader: int, layout: Sharding) -> Strategy | None:
        """The strategy of a follower that writes its one result in `layout`
        (a Partial one carried from operand `leader`), reading its operands
        as that needs: how the partitioner runs an op where its result is
        wanted.  None where no strategy writes exactly `layout`."""
        key = ("result", rule, leader, layout)
        if key in self._followed:
            return self._followed[key]
        assignment = self._dealt(rule, rule.results[0], layout)
        strategy = None
        if not layout.unreduced:
            strategy = self._build(rule, assignment)
        elif layout.reduction == "sum" and rule.unreduced is not UnreducedFlow.NONE \
                and leader in rule.linear_operands:
            strategy = self._build(rule, assignment, layout.unreduced, leader)
        if strategy is not None and strategy.results[0] is not layout:
            strategy = None
        self._followed[key] = strategy
        return strategy

    def _dealt(self, rule: OpRule, tensor, layout: Sharding) -> tuple[Axes, ...]:
        """The assignment that lays `tensor` (an operand's or a result's
        factors per dim) out as `layout`, on its PASS_THROUGH factors."""
        assignment: list[Axes] = [()] * rule.num_factors
        used: set[str] = set()
        for dim, factors in enumerate(tensor):
            axes = layout.dim_axes[dim] if dim < len(layout.dim_axes) else ()
            if not axes or not factors:
                continue
            for factor, factor_axes in project_axes(axes, factors, rule.factor_sizes,
                                                    self.layouts.axis_size):
                if rule.factor_kinds[factor] is not FactorKind.PASS_THROUGH:
                    continue
                if rule.factor_sizes[factor] % _product(self.layouts.axis_size, factor_axes):
                    continue
                kept = tuple(a for a in factor_axes if a not in used)
                used.update(kept)
                assignment[factor] = kept
        return tuple(assignment)


def _describe(rule: OpRule, assignment, carried: Axes, finish: bool) -> str:
    parts = [f"f{f}({rule.factor_kinds[f].value[0].upper()},{rule.factor_sizes[f]})="
             + ",".join(axes) for f, axes in enumerate(assignment) if axes]
    if carried:
        parts.append("carries partial " + ",".join(carried))
    if finish:
        parts.append("sums inside")
    return "; ".join(parts) or "replicated"


def _shards(layouts: _Layouts, layout: Sharding | None) -> int:
    return 1 if layout is None else layout.tile_count
