"""Automatic sharding: choose every value's layout from a mesh and a memory budget.

This module is the search, over the same plain graph the propagation solver
uses (`op_graph.Node`s: an `OpRule` and value ids; shapes and element
sizes); the ``spmd-auto-shard`` pass builds the graph from a module and
writes the answer back.  Every layout the search can pick is one the
op-rule table allows, and every move between layouts is priced by the
reshard planner, so the plan it prices is the program the partitioner emits.

The formulation (Alpa's, made smaller)
--------------------------------------
*Strategies.*  An op's strategy deals mesh axes out to its factors
(`OpRule`): each axis goes to one PASS_THROUGH or REDUCTION factor it
divides, or to none, and a factor's axes are taken in every order (which
is major decides which devices share a block: expert parallelism splits
its tokens with the expert axis minor).  That fixes the layout the op
reads each operand in and writes each result in.  A sum whose REDUCTION
factor is split writes a Partial result (OneFlow's P), or, as a second
strategy, finishes the sum inside the op; an op linear in its operands
(`UnreducedFlow`) may also carry a Partial through.  A *contraction* (an
op with two operands that share a REDUCTION factor: dot, convolution)
never computes the same block twice (Alpa's rule): only its strategies
that split its work the most are kept.

*Decision units.*  Each strategy set is one decision unit with one binary
variable per strategy.  Most ops add no unit: an op with no REDUCTION
factor that creates no data (element-wise ops, transposes, reshapes,
slices) *follows* its largest operand, its strategy read off that
operand's layout; it only adds the costs of what it needs.  Values tied
together (while carries, call arguments, function results) are one value
class.  A class with no single producer (an argument, a loop carry) is a
unit of its own whose strategies are its layouts.  So is a value read by
two ops or more: the partitioner reshards a value once per layout, and
every reader of that layout shares it, so a sum or a gather that serves
several readers (or a layout several element-wise readers take) is paid
once.  Its layouts are every even one and each Partial one its op writes;
where the op writes it Partial and it is kept summed, the plan says so
(`Plan.sum_targets`) and its readers share the one sum.  An op whose
operands are all scalars (a broadcast constant) takes whatever layout its
one consumer wants, at no cost, and adds nothing; but never a Partial one,
as every device holds the whole constant.

*Costs.*  Where a value's layout differs from the layout a consumer reads
it in, the reshard planner's plan is priced: bytes per device, or, when
bandwidths are given, seconds (alpha + bytes / bandwidth per collective, the
slowest axis of its group).  Every layout priced splits evenly, so a plan
is priced once per class of moves (the dims either layout splits, their
axes and which axis groups divide them; in any order where bytes are the
price: `_move_class`) and scaled to each tensor.  Between two units the
cost is a matrix over their strategy pairs, linearized with one continuous
variable per pair of distinct strategy groups and the transportation
constraints (exact: the marginals are one-hot).  Within one unit it is a
linear term.

*Memory.*  Each value's bytes per device is linear in its unit's variables;
a value lives from its producer to its last consumer in program order
(arguments and results: throughout); a contraction that cannot read an
operand as a matrix holds a transposed copy of it.  A read in another
layout than its value's is a copy, shared by the value's later reads in
that layout; whether one is live depends on two units' choices, so a row
charges the last plan's copies to their first readers and each read that
plan makes in place to its pair variables, which see a source moving its
layout under a reader (`_memory_row`).  The peak over the program is
bounded by the budget at the program points where it is largest: the
search solves, measures every point under the plan, adds the points that
overflow, and solves again (a cutting-plane loop).

*Repeated layers.*  Units whose ops look the same from three hops away
(Weisfeiler-Lehman hashes over the op graph: op, rule, shapes and
annotations, then their neighbours') share one set of variables, and the
cost matrices of their edges are summed.  The layers of an unrolled stack
fall into one class each, so the problem's size does not grow with depth;
only its building does, linearly, with every cost and strategy cached.

The solver is HiGHS.  The LP relaxation goes first, in one instance kept
warm across solves (highspy): unbounded it is integral on most models
measured; bounded, it blends a few choices, and the 0-1 program restricted
to the LP's support decides them in a fraction of a second, with a plan the
LP's value proves where the LP is tight (`_Milp.relaxed`).  Where it is
not, the blend is divided on the class whose blended choices differ most
in the bytes a bounded point holds, a few levels deep, each child's LP
solved on the same warm instance and rounded the same way: a small branch
and bound that needs none of the cuts the whole program spends its root on
(`_Milp._divide`).  Where that proof falls short too, the whole 0-1
program is solved (highspy too: scipy's `milp` bundles an older HiGHS,
whose branch and bound took 57 s on Mixtral's bounded forward where
highspy 1.16 took 9.6 s, to a dearer plan), stopped within 0.2% of the
optimum, or 2% with memory bounded: there the LP bound is weak, closing
the last percent is most of the solve, and the estimate itself is only
within a few percent of what XLA compiles.  The proof asks the same 2%.
Unbounded, the 0-1 program starts from the relaxation's plan; bounded,
from the last solve's plan where that fits the budget.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import math
import time
from typing import Callable, Iterable, Sequence

import numpy as np

from stablehlo_spmd.errors import SpmdError
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.op_graph import NO_VALUE, Node
from stablehlo_spmd.op_rules import FactorKind, OpRule, UnreducedFlow, project_axes
from stablehlo_spmd.reshard import ReshardError, plan
from stablehlo_spmd.sharding import Sharding

Axes = tuple[str, ...]
WL_ROUNDS = 3
TIE_BREAK = 1e-6
PREFERENCE = 1e-3
# How close to the optimum of its estimate the solver must prove a plan.
# With memory bounded, closing the last percent or two is most of the
# solve (the LP bound is weak there), and the estimate itself is only
# within a few percent of what XLA compiles: proving more is false precision.
MIP_GAP = 2e-3
BOUNDED_GAP = 2e-2
# How many levels a bounded LP is divided on blended classes before the
# whole 0-1 program is asked (`_Milp._divide`).
DIVIDE_DEPTH = 4
# How close to a node's bound a plan must be for the division to stop
# rounding below it: the proof asks BOUNDED_GAP, better plans are sought to this.
DIVIDE_GAP = MIP_GAP
_INFEASIBLE = 2   # `_Milp._highs_milp`'s status for a problem with no solution


class SearchTimeLimit(SpmdError):
    """The solver ran out of time before it found any plan."""


class InfeasibleBudget(SpmdError):
    """No plan fits the memory budget; `smallest` is the least peak found."""

    def __init__(self, message: str, smallest: float):
        super().__init__(message)
        self.smallest = smallest


@dataclasses.dataclass(frozen=True)
class CostModel:
    """What a reshard costs: bytes per device, or seconds when bandwidths are given.

    `bandwidths` are bytes per second per mesh axis; a collective over
    several axes runs at the slowest one's.  `latency` is each
    collective's fixed cost in seconds (the alpha of an alpha-beta model).
    """

    bandwidths: tuple[tuple[str, float], ...] = ()
    latency: float = 0.0

    def price(self, steps) -> float:
        fixed, moved = self.parts(steps)
        return fixed + moved

    def parts(self, steps) -> tuple[float, float]:
        """The price of `steps` as (latencies, the part that grows with the bytes)."""
        if not self.bandwidths:
            return 0.0, float(sum(step.bytes_per_device for step in steps))
        speed = dict(self.bandwidths)
        fixed = moved = 0.0
        for step in steps:
            if step.bytes_per_device <= 0:
                continue
            slowest = min((speed.get(axis, math.inf) for axis in step.axes), default=math.inf)
            fixed += self.latency
            moved += step.bytes_per_device / slowest if slowest < math.inf else 0
        return fixed, moved


@dataclasses.dataclass
class Graph:
    """What the search reads: the propagation graph plus what the module says.

    `pins` are the user's layouts (hard constraints); `open_dims` the dims
    of a pin the search may still split.  `carried` are pairs of values
    that must share a layout (a training step's updated parameter and the
    parameter).  `outputs` live to the end of the program."""

    mesh: Mesh
    shapes: Sequence[tuple[int, ...]]
    element_bytes: Sequence[int]
    nodes: Sequence[Node]
    pins: dict[int, Sharding] = dataclasses.field(default_factory=dict)
    open_dims: dict[int, frozenset[int]] = dataclasses.field(default_factory=dict)
    carried: Sequence[tuple[int, int]] = ()
    outputs: Iterable[int] = ()
    arguments: Iterable[int] = ()
    # A layout per value that wins where plans tie: a plan pays `PREFERENCE`
    # of a value's bytes per device for each value it lays out otherwise.
    preferred: dict[int, Sharding] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Plan:
    """The search's answer: a layout per value, and how it was reached."""

    layouts: list[Sharding | None]
    why: list[str]                 # per value: pinned, searched, follows ...
    cost: float                    # the objective: bytes (or seconds) per step
    peak_memory: float             # estimated bytes per device at the peak
    solve_seconds: float
    build_seconds: float
    variables: int
    constraints: int
    units: int
    unit_classes: int
    cost_in_seconds: bool = False
    # Partial values read by several ops, each summed once into this layout
    # for all of them (their layouts are the Partial ones their ops write).
    sum_targets: dict[int, Sharding] = dataclasses.field(default_factory=dict)
    # XLA's own memory analysis of the partitioned plan, where the pass was
    # given a way to compile it; and how many plans it measured.
    measured_memory: float | None = None
    measured_plans: int = 0


# ------------------------------------------------------------------ strategies


@dataclasses.dataclass(frozen=True)
class Strategy:
    operands: tuple[Sharding | None, ...]   # the layout each operand is read in
    results: tuple[Sharding | None, ...]    # the layout each result is written in
    cost: float                             # communication inside the op
    label: str
    # Per result: the Partial layout it is written in when its class (the
    # values it is tied to) holds the sum; the sum is made at the boundary.
    unsummed: tuple[Sharding | None, ...] = ()


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


def _product(axis_size: dict[str, int], axes: Iterable[str]) -> int:
    result = 1
    for axis in axes:
        result *= axis_size[axis]
    return result


def _is_contraction(rule: OpRule) -> bool:
    """Two operands share a REDUCTION factor: a dot or a convolution."""
    reduction = {f for f, kind in enumerate(rule.factor_kinds) if kind is FactorKind.REDUCTION}
    holders = sum(1 for tensor in rule.operands
                  if any(f in reduction for dim in tensor for f in dim))
    return holders >= 2


class _Strategies:
    """An op's strategies from its rule, cached by rule: a 13k-op step has few rules."""

    def __init__(self, layouts: _Layouts, reshard_cost):
        self.layouts = layouts
        self.reshard_cost = reshard_cost
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
        cost = 0.0
        results = []
        for tensor in rule.results:
            try:
                layout = self._tensor_layout(rule, tensor, assignment, pending, kind or "sum")
            except Exception:  # noqa: BLE001 - e.g. an unreduced axis also on a dim
                return None
            if layout is None:
                return None
            if pending and (finish or kind != "sum"):
                summed = self.layouts.get(layout.dim_axes)
                cost += self.reshard_cost(layout, summed, tensor, rule)
                layout = summed
            results.append(layout)
        label = _describe(rule, assignment, carried, finish)
        return Strategy(tuple(operands), tuple(results), cost, label)

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
            def split(s: Strategy) -> int:
                return _product(axis_size, {a for layout in (*s.operands, *s.results)
                                            if layout is not None
                                            for d in layout.dim_axes for a in d})
            best = max(map(split, strategies), default=1)
            strategies = [s for s in strategies if split(s) == best and not any(
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
        assignment: list[Axes] = [()] * rule.num_factors
        used: set[str] = set()
        for dim, factors in enumerate(rule.operands[leader]):
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
        carried: Axes = ()
        carrier = None
        if layout.unreduced and layout.reduction == "sum" and \
                rule.unreduced is not UnreducedFlow.NONE and leader in rule.linear_operands:
            carried, carrier = layout.unreduced, leader
        strategy = None
        if carried:
            strategy = self._build(rule, tuple(assignment), carried, carrier)
        if strategy is None:
            strategy = self._build(rule, tuple(assignment))
        if strategy is None:
            strategy = self._build(rule, ((),) * rule.num_factors)
        self._followed[key] = strategy
        return strategy


def _describe(rule: OpRule, assignment, carried: Axes, finish: bool) -> str:
    parts = [f"f{f}({rule.factor_kinds[f].value[0].upper()},{rule.factor_sizes[f]})="
             + ",".join(axes) for f, axes in enumerate(assignment) if axes]
    if carried:
        parts.append("carries partial " + ",".join(carried))
    if finish:
        parts.append("sums inside")
    return "; ".join(parts) or "replicated"


# ------------------------------------------------------------------ the search


class _UnionFind:
    def __init__(self, size: int):
        self.parent = list(range(size))

    def find(self, item: int) -> int:
        parent = self.parent
        while parent[item] != item:
            parent[item] = parent[parent[item]]
            item = parent[item]
        return item

    def union(self, a: int, b: int) -> None:
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[max(a, b)] = min(a, b)


@dataclasses.dataclass
class _Unit:
    kind: str                    # "op" (an op's strategies) or "value" (a class's layouts)
    owner: int                   # node index, or class root value
    strategies: list             # Strategy for ops, Sharding for values
    variable_class: int = -1     # shared with the units of its repeated copies


def search(graph: Graph, memory_budget: float | None = None,
           cost_model: CostModel = CostModel(), time_limit: float = 60.0,
           cluster: bool = True) -> Plan:
    """The cheapest layouts for `graph` within `memory_budget` bytes per device."""
    return Search(graph, cost_model, cluster).solve(memory_budget, time_limit)


class Search:
    """One program's problem, built once: `solve` may be called again with
    another budget (the measured-memory loop of the pass) and reuses every
    strategy, cost matrix and memory term."""

    def __init__(self, graph: Graph, cost_model: CostModel = CostModel(), cluster: bool = True):
        started = time.perf_counter()
        self.graph = graph
        self.cost_model = cost_model
        self.layouts = _Layouts(graph.mesh)
        self._costs: dict[tuple, float] = {}
        self._plans: dict[tuple, tuple[float, float]] = {}   # see `_price`
        self._divide_masks: dict[int, int] = {}
        sizes = [n for n in graph.mesh.mesh_shape if n > 1]
        self._group_sizes = sorted({math.prod(group) for r in range(1, len(sizes) + 1)
                                    for group in itertools.combinations(sizes, r)})
        self._scaled_strategies: dict[tuple, Strategy] = {}
        self.strategies = _Strategies(self.layouts, self._rule_tensor_cost)
        n_values = len(graph.shapes)
        self.nbytes = [math.prod(s) * b for s, b in zip(graph.shapes, graph.element_bytes)]
        # Value classes: tied values share one layout.
        classes = _UnionFind(n_values)
        for node in graph.nodes:
            if node.is_tie and node.directions != "none" and node.operands[0] != NO_VALUE \
                    and node.results[0] != NO_VALUE:
                classes.union(node.operands[0], node.results[0])
        for a, b in graph.carried:
            classes.union(a, b)
        self.root = [classes.find(v) for v in range(n_values)]
        self.class_size = collections.Counter(self.root)
        producers: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
        self.consumers: list[list[tuple[int, int]]] = [[] for _ in range(n_values)]
        self.real_nodes = [i for i, node in enumerate(graph.nodes)
                           if not (node.is_tie and node.directions != "none")]
        for index in self.real_nodes:
            node = graph.nodes[index]
            for position, value in enumerate(node.results):
                if value != NO_VALUE:
                    producers[self.root[value]].append((index, position))
            for position, value in enumerate(node.operands):
                if value != NO_VALUE:
                    self.consumers[value].append((index, position))
        arguments = {self.root[v] for v in graph.arguments}
        self.argument_roots = arguments
        pinned_roots: dict[int, Sharding] = {}
        for value, sharding in graph.pins.items():
            pinned_roots.setdefault(self.root[value], sharding)
        self.pinned_roots = pinned_roots
        self.class_open = {self.root[v]: dims for v, dims in graph.open_dims.items()}
        self.producers = producers

        # Units, in program order: a class with no single producer first.
        self.units: list[_Unit] = []
        self.unit_of_class: dict[int, int] = {}
        self.unit_of_node: dict[int, int] = {}
        self.node_strategy: dict[int, list[Strategy]] = {}   # per node, indexed by its unit's
        self.free_sources: dict[int, tuple[int, int]] = {}   # value -> its one (node, position)
        self.leader: dict[int, int] = {}                     # follower node -> operand position
        self.shared_reads: list[int] = []   # values read by several ops: their own units
        for root in sorted({self.root[v] for v in range(n_values)}):
            if root in arguments or len(producers.get(root, ())) != 1:
                self.unit_of_class[root] = self._add_unit("value", root, self._class_layouts(root))
        for index in self.real_nodes:
            self._add_node(index)
        self.build_seconds = time.perf_counter() - started
        self.variable_classes = self._cluster() if cluster else list(range(len(self.units)))
        self._built = None
        self._cuts: list[int] = []
        self._reference: list[int] | None = None
        self._unbounded = None   # the cheapest plan of any size, once solved

    # --------------------------------------------------------------- build

    def _add_unit(self, kind: str, owner: int, strategies: list) -> int:
        self.units.append(_Unit(kind, owner, strategies))
        return len(self.units) - 1

    def _class_layouts(self, root: int) -> list[Sharding]:
        shape = self.graph.shapes[root]
        pin = self.pinned_roots.get(root)
        if pin is None:
            return self.layouts.all_for(shape)
        open_dims = self.class_open.get(root, frozenset())
        if not open_dims:
            return [self.layouts.get(pin.dim_axes)]
        return [layout for layout in self.layouts.all_for(shape)
                if all(layout.dim_axes[d] == pin.dim_axes[d] for d in range(len(shape))
                       if d not in open_dims)
                and all(layout.dim_axes[d][:len(pin.dim_axes[d])] == pin.dim_axes[d]
                        for d in open_dims)] or [self.layouts.get(pin.dim_axes)]

    def value_layouts(self, value: int) -> tuple[int, list[Sharding]] | None:
        """(unit, layout per strategy of that unit) of `value`, once known."""
        root = self.root[value]
        unit = self.unit_of_class.get(root)
        if unit is not None and self.units[unit].kind == "value":
            return unit, self.units[unit].strategies
        found = self.producers.get(root)
        if not found:
            return None
        node, position = found[0]
        strategies = self.node_strategy.get(node)
        if strategies is None:
            return None
        return self.unit_of_node[node], [s.results[position] for s in strategies]

    def _add_node(self, index: int) -> None:
        node = self.graph.nodes[index]
        rule = node.rule
        tensors = [(p, v) for p, v in enumerate(node.operands)
                   if v != NO_VALUE and self.graph.shapes[v]]
        results = [v for v in node.results if v != NO_VALUE]
        if not tensors and len(results) == 1 and self.class_size[self.root[results[0]]] == 1 \
                and len(self.consumers[results[0]]) == 1 \
                and results[0] not in self.pinned_roots:
            # Built from scalars only (a broadcast constant): it takes the
            # layout its one consumer reads it in, for free.
            self.free_sources[results[0]] = self.consumers[results[0]][0]
            self.unit_of_node[index] = -1
            return
        has_reduction = any(k is FactorKind.REDUCTION for k in rule.factor_kinds)
        leader = None
        if not has_reduction and not node.is_broadcast:
            known = [(self.nbytes[v], -p, p) for p, v in tensors
                     if v not in self.free_sources and self.value_layouts(v) is not None]
            if known:
                leader = max(known)[2]
        if leader is None:
            strategies = self.strategies.anchor(rule)
            unit = self._add_unit("op", index, strategies)
        else:
            unit, leader_layouts = self.value_layouts(node.operands[leader])
            strategies = [self.strategies.follow(rule, leader, layout) for layout in leader_layouts]
            self.leader[index] = leader
        scale = self.graph.element_bytes[results[0]] if results else 1
        strategies = [self._pinned_results(node, self._scaled(s, scale)) for s in strategies]
        self.unit_of_node[index] = unit
        self.node_strategy[index] = strategies
        if leader is None:
            self.units[unit].strategies = strategies
        for position, value in enumerate(node.results):
            if value != NO_VALUE and self._read_by_several(value):
                written = [s.results[position] for s in strategies]
                self.unit_of_class[value] = self._add_unit(
                    "value", value, self._stored_layouts(value, written))
                self.shared_reads.append(value)

    def _read_by_several(self, value: int) -> bool:
        """Whether `value` is read by two ops or more, so that a reshard of it
        (the partitioner makes each once per layout) may serve several: a
        sum several readers need, or a layout several followers take."""
        root = self.root[value]
        if root != value or self.class_size[root] != 1 or root in self.unit_of_class \
                or root in self.pinned_roots:
            return False
        return len({node for node, _ in self.consumers[value]}) >= 2

    def _stored_layouts(self, value: int, written: list) -> list[Sharding]:
        """The layouts a value read by several ops may be kept in: any even
        layout, and each Partial layout its producer can write."""
        partial = [layout for layout in written if layout is not None and layout.unreduced]
        return _distinct(self.layouts.all_for(self.graph.shapes[value]) + partial)[0]

    def _scaled(self, strategy: Strategy, element_bytes: int) -> Strategy:
        """A rule's strategy costs a sum per byte of element (`_rule_tensor_cost`)."""
        if not strategy.cost or element_bytes == 1:
            return strategy
        key = (id(strategy), element_bytes)
        found = self._scaled_strategies.get(key)
        if found is None:
            found = self._scaled_strategies[key] = dataclasses.replace(
                strategy, cost=strategy.cost * element_bytes)
        return found

    def _pinned_results(self, node: Node, strategy: Strategy) -> Strategy:
        """A result whose class is pinned is written in the pinned layout (a
        reshard if need be); one tied to other values (a function result, a
        call's operand) is summed: a Partial never crosses a boundary."""
        extra = 0.0
        results = list(strategy.results)
        unsummed: list[Sharding | None] = [None] * len(results)
        for position, value in enumerate(node.results):
            if value == NO_VALUE or results[position] is None:
                continue
            pin = self.pinned_roots.get(self.root[value])
            if results[position].unreduced and self.class_size[self.root[value]] > 1:
                # Summed into the pinned layout at once where there is one
                # (a reduce-scatter onto its split), else onto the same dims.
                summed = self.layouts.get(pin.dim_axes if pin is not None
                                          else results[position].dim_axes)
                extra += self.cost(results[position], summed, value)
                unsummed[position] = results[position]
                results[position] = summed
            if pin is None or self.root[value] in self.unit_of_class:
                continue
            target = self.layouts.get(pin.dim_axes, pin.unreduced, pin.reduction)
            move = self.cost(results[position], target, value)
            if math.isinf(move):
                # A Partial pinned where this strategy leaves none: the
                # annotation stays in the module (the partitioner honours
                # it); the search plans with its summed layout.
                target = self.layouts.get(pin.dim_axes)
                move = self.cost(results[position], target, value)
            if results[position] is not target:
                extra += move
                results[position] = target
        if not extra and results == list(strategy.results) and not any(unsummed):
            return strategy
        return dataclasses.replace(strategy, results=tuple(results), cost=strategy.cost + extra,
                                   unsummed=tuple(unsummed))

    def cost(self, source: Sharding, target: Sharding, value: int) -> float:
        if source is target:   # layouts are interned (`_Layouts.get`)
            return 0.0
        return self._price(source, target, self.graph.shapes[value],
                           self.graph.element_bytes[value])

    def _price(self, source: Sharding, target: Sharding, shape, element_bytes: int) -> float:
        key = (id(source), id(target), shape, element_bytes)
        found = self._costs.get(key)
        if found is None:
            # Where both layouts split every dim evenly (all the search makes;
            # a user's pin may not), a plan's moves are fractions of the
            # tensor that depend on the shape only through which dims each
            # group of axes divides: one plan serves every tensor alike (a
            # 13k-op step has few).
            size = math.prod(shape) * element_bytes
            even = self._even(source, shape) and self._even(target, shape)
            like = (self._move_class(source, target, shape) if even else None) or \
                (id(source), id(target), len(shape), self._divides(shape) if even else shape)
            parts = self._plans.get(like)
            if parts is None or not size:
                try:
                    fixed, moved = self.cost_model.parts(plan(source, target, shape, element_bytes))
                    parts = (fixed, moved / size if size else 0.0)
                except ReshardError:
                    parts = (math.inf, 0.0)
                if size:
                    self._plans[like] = parts
            found = self._costs[key] = parts[0] + parts[1] * size
        return found

    def _move_class(self, source: Sharding, target: Sharding, shape) -> tuple | None:
        """What an even move's price per byte depends on: for each dim that
        either layout splits, its axes on each side and which axis groups
        divide it; and the pending sums.  None for layouts with manual axes,
        a maximal device or two meshes, which are priced as they are.

        A dim neither layout splits matters only as a place to park axes
        on a detour, where a group divides it (the planner pads no detour):
        so the same move on tensors of other ranks, with such dims alike,
        moves the same fraction over the same axes.  And the planner's moves
        act on each dim alike, so a transposed move moves the same bytes
        (bytes only: a tie between two dims goes to the first, and may put
        a slower axis first).  On BERT's training
        step 24k moves are priced: keyed by their layouts they took 14.6k
        plans, 2 s of building the problem; as classes, 413 plans, and the
        problem builds in 0.45 s.  `test_reshard.py` keeps both facts."""
        if source.manual or target.manual or source.maximal_device is not None \
                or target.maximal_device is not None \
                or (source.mesh is not target.mesh and source.mesh != target.mesh):
            return None
        masks = self._divides(shape)
        split = [(s, t, mask) for s, t, mask in zip(source.dim_axes, target.dim_axes, masks)
                 if s or t]
        if not self.cost_model.bandwidths:
            # Ties between moves go to the first dim, so a transposed move may
            # take another axis first: the same bytes, but not the same time.
            split.sort()
        parking = tuple(sorted(mask for s, t, mask in zip(source.dim_axes, target.dim_axes, masks)
                               if not (s or t) and mask))
        return (tuple(split), parking, source.unreduced, target.unreduced, source.reduction,
                target.reduction)

    def _even(self, layout: Sharding, shape) -> bool:
        """Whether `layout` splits every dim of `shape` evenly by whole mesh axes."""
        axis_size = self.layouts.axis_size
        for n, axes in zip(shape, layout.dim_axes):
            if any(axis not in axis_size for axis in axes) or n % _product(axis_size, axes):
                return False
        return True

    def _divides(self, shape) -> tuple[int, ...]:
        """Per dim, the mask of the mesh's axis-group sizes that divide it."""
        masks = []
        for n in shape:
            found = self._divide_masks.get(n)
            if found is None:
                found = self._divide_masks[n] = sum(
                    1 << i for i, size in enumerate(self._group_sizes) if n % size == 0)
            masks.append(found)
        return tuple(masks)

    def _rule_tensor_cost(self, source: Sharding, target: Sharding, tensor, rule: OpRule) -> float:
        # A result's shape from its factors (the rule is all a strategy knows);
        # its element size is the node's, so the rule's cost is per byte of
        # element and `_add_node` scales it.
        shape = tuple(math.prod(rule.factor_sizes[f] for f in dim) for dim in tensor)
        return self._price(source, target, shape, 1)

    # ------------------------------------------------------------ clusters

    def _cluster(self) -> list[int]:
        """Variable class per unit: units that look alike from WL_ROUNDS hops share."""
        graph = self.graph
        nodes = graph.nodes
        value_label = [hash((s, b, self.pinned_roots.get(self.root[v])))
                       for v, (s, b) in enumerate(zip(graph.shapes, graph.element_bytes))]
        rule_hashes: dict[int, int] = {}   # rules are shared objects: hash each once
        node_label = [hash((n.label, rule_hashes.setdefault(id(n.rule), hash(n.rule)), n.is_tie))
                      for n in nodes]
        producers_of = [[] for _ in graph.shapes]
        for index, node in enumerate(nodes):
            for position, value in enumerate(node.results):
                if value != NO_VALUE:
                    producers_of[value].append((index, position))
        for _ in range(WL_ROUNDS):
            new_nodes = [hash((node_label[i],
                               tuple(value_label[v] if v != NO_VALUE else 0 for v in n.operands),
                               tuple(value_label[v] if v != NO_VALUE else 0 for v in n.results)))
                         for i, n in enumerate(nodes)]
            new_values = [hash((value_label[v],
                                tuple(sorted((node_label[i], p) for i, p in producers_of[v])),
                                tuple(sorted((node_label[i], p) for i, p in self.consumers[v]))))
                          for v in range(len(graph.shapes))]
            node_label, value_label = new_nodes, new_values
        members: dict[int, list[int]] = collections.defaultdict(list)
        for root in range(len(graph.shapes)):
            members[self.root[root]].append(root)
        classes: dict[tuple, int] = {}
        result = []
        for index, unit in enumerate(self.units):
            if unit.kind == "op":
                key = ("op", node_label[unit.owner], len(unit.strategies))
            else:
                key = ("value", tuple(sorted(value_label[v] for v in members[unit.owner])),
                       len(unit.strategies))
            result.append(classes.setdefault(key, len(classes)))
        return result

    # --------------------------------------------------------------- solve

    def _edges(self):
        """Linear terms per unit and cost blocks between unit classes."""
        linear = [np.zeros(len(u.strategies)) for u in self.units]
        blocks: dict[tuple[int, int], np.ndarray] = {}
        classes = self.variable_classes
        matrices: dict[tuple, np.ndarray] = {}   # repeated layers repeat their edges

        def add_pair(unit_a: int, layouts_a: list, unit_b: int, layouts_b: list, value: int):
            # cost[s, t] of unit_a's strategy s giving `value` in layouts_a[s] and
            # unit_b's strategy t reading it in layouts_b[t]
            rows, cols, key = self._edge_kind(layouts_a, layouts_b, value)
            small = matrices.get(key)
            if small is None:
                small = matrices[key] = np.array(
                    [[self.cost(a, b, value) if a is not None and b is not None else 0.0
                      for b in cols[0]] for a in rows[0]])
            if unit_a == unit_b or classes[unit_a] == classes[unit_b]:
                if unit_a == unit_b or len(layouts_a) == len(layouts_b):
                    diagonal = small[rows[1], cols[1]]
                    linear[unit_a] += diagonal
                    return
            matrix = small[np.ix_(rows[1], cols[1])]
            key = (classes[unit_a], classes[unit_b])
            if key in blocks:
                blocks[key] = blocks[key] + matrix
            else:
                blocks[key] = matrix

        for index in self.real_nodes:
            unit = self.unit_of_node.get(index, -1)
            if unit < 0:
                continue
            strategies = self.node_strategy[index]
            linear[unit] += np.array([s.cost for s in strategies])
            for position, value in enumerate(self.graph.nodes[index].operands):
                if value in self.free_sources:
                    # A constant is no partial sum: laid out Partial, every
                    # device would hold all of it, and the sum N times it.
                    linear[unit] += np.array([
                        math.inf if s.operands[position] is not None
                        and s.operands[position].unreduced else 0.0 for s in strategies])
        for pair in self._pairs():
            add_pair(*pair)
        return linear, blocks

    def _pairs(self):
        """(producer unit, the layout it writes a value in per strategy, reader
        unit, the layout it reads it in per strategy, the value): every edge
        a cost matrix prices."""
        for index in self.real_nodes:
            unit = self.unit_of_node.get(index, -1)
            if unit < 0:
                continue
            strategies = self.node_strategy[index]
            for position, value in enumerate(self.graph.nodes[index].operands):
                if value == NO_VALUE or value in self.free_sources:
                    continue
                found = self.value_layouts(value)
                if found is not None:
                    yield (*found, unit, [s.operands[position] for s in strategies], value)
        # Producers into classes that are units of their own.
        for root, unit in self.unit_of_class.items():
            for node, position in self.producers.get(root, ()):
                producer_unit = self.unit_of_node.get(node, -1)
                if producer_unit < 0:
                    continue
                value = self.graph.nodes[node].results[position]
                yield (producer_unit, [s.results[position] for s in self.node_strategy[node]],
                       unit, self.units[unit].strategies, value)

    def pricings(self) -> int:
        """How many moves building the problem prices: per kind of edge, its
        distinct written layouts times its distinct read ones.  Known before
        any is priced; each costs microseconds to tens of them (a mesh of
        three axes deals many more layouts to a rank-4 tensor than one of two)."""
        seen, total = set(), 0
        for _unit_a, layouts_a, _unit_b, layouts_b, value in self._pairs():
            rows, cols, key = self._edge_kind(layouts_a, layouts_b, value)
            if key not in seen:
                seen.add(key)
                total += len(rows[0]) * len(cols[0])
        return total

    def _edge_kind(self, layouts_a: list, layouts_b: list, value: int):
        """The distinct written and read layouts of an edge (`_distinct`'s
        pairs), and the key its cost matrix is shared by."""
        rows, cols = _distinct(layouts_a), _distinct(layouts_b)
        return rows, cols, (tuple(map(id, rows[0])), tuple(map(id, cols[0])),
                            self.graph.shapes[value], self.graph.element_bytes[value])

    def _memory_terms(self):
        """Per buffer: (class root, unit, bytes per device per strategy, born, last use).

        Tied values share a layout, but not always a buffer.  A function result
        and the value returned, a call's operand and the callee's argument, are
        one buffer: their spans touch at the tie.  A callee called from two
        layers ties both calls' values into one class, and those are two
        buffers, one per call: so a class holds one buffer per run of
        overlapping member spans, each member live from its definition (its
        first read, where nothing in the graph defines it) to its last use in
        program order.  Arguments and results live throughout: XLA gives each
        its own allocation, never shared with a temporary, and its memory
        analysis counts them so.  A value XLA fuses into its one reader (see
        `_fused`) is never a buffer of its own.
        """
        graph = self.graph
        end = len(graph.nodes)
        spans: dict[int, list[int]] = {}
        producer_of: dict[int, int] = {}
        for index, node in enumerate(graph.nodes):
            for value in node.results:
                if value != NO_VALUE:
                    spans.setdefault(value, [index, index])
                    producer_of.setdefault(value, index)
            for value in node.operands:
                if value != NO_VALUE:
                    span = spans.setdefault(value, [index, index])
                    span[1] = max(span[1], index)
        # Each argument and each result is its own buffer for the whole
        # program (a step's updated parameter is tied to the parameter, but
        # without donation XLA holds both); a class's other values live in them.
        held_throughout = collections.Counter(self.root[v]
                                              for v in (*graph.outputs, *graph.arguments))
        members: dict[int, list[tuple[int, int, int]]] = collections.defaultdict(list)
        for value, (first, last) in spans.items():
            members[self.root[value]].append((first, last, value))
        # A read in another layout than the value's is a copy; reads of one
        # value in one layout share it (CSE), from the first to the last.
        self.reads: dict[int, list] = collections.defaultdict(list)   # value -> reads
        self.read_sources: dict[int, tuple] = {}
        for index in self.real_nodes:
            unit = self.unit_of_node.get(index, -1)
            if unit < 0:
                continue
            for position, value in enumerate(graph.nodes[index].operands):
                if value == NO_VALUE or value in self.free_sources:
                    continue
                found = self.value_layouts(value)
                if found is None:
                    continue
                wanted = [s.operands[position] for s in self.node_strategy[index]]
                sizes = np.array([self.nbytes[value] / _shards(self.layouts, l) for l in wanted])
                self.reads[value].append((index, unit, wanted, sizes))
                self.read_sources[value] = found
        terms = self._transposed_operands(producer_of)
        for root in sorted(members):
            found = self._layouts_of(root)
            if found is None:
                continue
            unit, layouts = found
            per_device = np.array([self.nbytes[root] / _shards(self.layouts, l) for l in layouts])
            if held_throughout[root]:
                terms.extend([(root, unit, per_device, 0, end)] * held_throughout[root])
                continue
            for start, last, values in _merged(members[root]):
                if not self._fused(values, producer_of):
                    terms.append((root, unit, per_device, start, last))
        return terms

    def _transposed_operands(self, producer_of: dict[int, int]) -> list:
        """The copy a contraction makes of each operand whose dims are not in
        a matrix multiply's order: XLA's dot canonicalization transposes it
        to (batch, free, contracting) (or contracting before free) so that it
        reads as one batched matrix.  The copy is its operand's size in the
        layout the contraction reads, and lives at the contraction (a copy of
        an argument: from the start, see below).  Where the operand is
        computed by a loop fusion only the contraction reads, the fusion
        writes the transposed order itself and no copy is made."""
        graph = self.graph
        terms = []
        for index in self.real_nodes:
            node = graph.nodes[index]
            unit = self.unit_of_node.get(index, -1)
            if unit < 0 or not _is_contraction(node.rule) or node.rule.windows:
                continue
            for position in _transposed_positions(node.rule):
                value = node.operands[position]
                if value == NO_VALUE or value in self.free_sources:
                    continue
                producer = graph.nodes[producer_of[value]] if value in producer_of else None
                if producer is not None and len(self.consumers[value]) == 1 and (
                        producer.rule.elementwise or producer.is_broadcast):
                    continue
                sizes = np.array([self.nbytes[value] / _shards(self.layouts, s.operands[position])
                                  for s in self.node_strategy[index]])
                # A copy of an argument needs nothing else: XLA's schedule
                # makes it at the start, as it does an argument's gathers.
                born = 0 if self.root[value] in self.argument_roots else index
                terms.append((self.root[value], unit, sizes, born, index))
        return terms

    def _fused(self, buffer: list[int], producer_of: dict[int, int]) -> bool:
        """Whether XLA's loop fusion computes the values of `buffer` (tied
        values, one buffer) inside their one reader: an element-wise op, a
        broadcast, a reshape or transpose that keeps the elements' order, or
        a value built from scalars, read by anything but a contraction.  XLA
        inlines calls before it fuses, so the ties of a call are seen through."""
        producers = [producer_of[v] for v in buffer
                     if v in producer_of and not self.graph.nodes[producer_of[v]].is_tie]
        readers = [read for v in buffer for read in self.consumers[v]]
        if len(producers) != 1 or len(readers) != 1:
            return False
        node = self.graph.nodes[producers[0]]
        built_from_scalars = any(v in self.free_sources for v in buffer)
        if not (built_from_scalars or node.rule.elementwise or node.is_broadcast
                or _is_bitcast(node.rule)):
            return False
        return not _is_contraction(self.graph.nodes[readers[0][0]].rule)

    def _problem(self):
        """(the 0-1 program, memory terms, tie-break weight), built on first use."""
        if self._built is None:
            linear, blocks = self._edges()
            memory = self._memory_terms()
            # Among plans that move as much, the one that holds less: a millionth
            # of a byte moved per byte held breaks ties and decides nothing else.
            tie_break = TIE_BREAK / max((speed for _, speed in self.cost_model.bandwidths),
                                        default=1.0)
            for _value, unit, per_device, _born, _last in memory:
                linear[unit] = linear[unit] + tie_break * per_device
            self._prefer(linear)
            self._built = (_Milp(self.units, self.variable_classes, linear, blocks), memory,
                           tie_break)
        return self._built

    def _choices(self, values: Iterable[int]):
        """(value, unit, its layout per strategy of the unit) for each of
        `values` whose layout a unit decides (not one built from scalars)."""
        for value in values:
            if value in self.free_sources:
                continue
            found = self.value_layouts(value)
            if found is not None:
                yield value, *found

    def _prefer(self, linear) -> None:
        """Charge each strategy `PREFERENCE` of the bytes per device of every
        value it lays out otherwise than `Graph.preferred` says."""
        preferred = self.graph.preferred
        for value, unit, options in self._choices(preferred):
            wanted = preferred[value]
            key = (wanted.dim_axes, wanted.unreduced)
            held = self.nbytes[value] / max(1, _shards(self.layouts, wanted))
            linear[unit] = linear[unit] + np.array(
                [0.0 if layout is None or (layout.dim_axes, layout.unreduced) == key
                 else PREFERENCE * held for layout in options])

    def solve(self, memory_budget: float | None, time_limit: float = 60.0) -> Plan:
        started = time.perf_counter()
        problem, memory, tie_break = self._problem()
        # A point that overflowed one budget is worth bounding at the next.
        cuts: list[int] = self._cuts
        points = sorted({t for *_, b, l in memory for t in (b, l)})
        choice = None
        # Rows are linearized around the last plan, of this solve or the last.
        reference = self._reference
        for _round in range(12):
            rows = [self._memory_row(memory, t, reference) for t in cuts]
            # The deadline is the whole solve's, cutting-plane rounds and all.
            if memory_budget is None or not rows:
                # Without a bounded point the budget bounds nothing: the
                # measured loop asks for this plan again and again.
                if self._unbounded is None:
                    self._unbounded = self._within_gap(problem, [], None, started + time_limit)
                choice = self._unbounded
            else:
                def overflow(strategies, reference=reference):
                    # A cut where the relaxation's plan overflows, before the
                    # 0-1 program is asked: its plan would likely overflow
                    # there too, and cost a round.  The row is linearized
                    # around the round's reference, not this rough plan.
                    peak, at = self._peak(memory, strategies, points)
                    if peak <= memory_budget * (1 + 1e-9) or at in cuts:
                        return None
                    cuts.append(at)
                    return self._memory_row(memory, at, reference)
                # The plan the rows are exact at, where it fits, is one the
                # 0-1 program can start from: the last solve's, when the
                # budget is opened above it.
                fits = reference is not None and \
                    self._peak(memory, reference, points)[0] <= memory_budget * (1 + 1e-9)
                choice = self._within_gap(problem, rows, memory_budget, started + time_limit,
                                          overflow, start=reference if fits else None)
            if choice is None:
                smallest, _ = self._smallest_peak(problem, memory, points, cuts, time_limit)
                raise InfeasibleBudget(
                    f"no plan fits a memory budget of {format_bytes(memory_budget)} per device; "
                    f"the smallest budget found feasible is {format_bytes(smallest)} "
                    f"({int(math.ceil(smallest))} bytes)", smallest)
            peak, at = self._peak(memory, choice[0], points)
            if memory_budget is None or peak <= memory_budget * (1 + 1e-9):
                break
            if at in cuts and reference == choice[0]:
                break
            reference = choice[0]
            if at not in cuts:
                cuts.append(at)
        strategies, objective = choice
        if memory_budget is not None:
            self._reference = strategies
        objective = max(0.0, objective - tie_break * sum(
            per_device[strategies[unit]] for _v, unit, per_device, _b, _l in memory))
        return self._plan(strategies, objective, points, started)

    @staticmethod
    def _within_gap(problem: "_Milp", rows, budget, deadline: float, overflow=None,
                    start: list[int] | None = None):
        """The relaxation's plan where it proves itself; else the 0-1
        program's, or, out of time for that, the relaxation's best.  Where
        `overflow` gives a new row for a plan of the relaxation's, the
        relaxation is solved again with it first.  `start`, a plan that
        satisfies `rows` within `budget`, is where the 0-1 program starts."""
        while True:
            found: list = []    # the row a rounded plan overflowed, before dividing

            def overflows(strategies: list[int]) -> bool:
                row = overflow(strategies) if overflow is not None else None
                if row is not None:
                    found.append(row)
                return row is not None

            best, proved = problem.relaxed(rows, budget, max(1e-9, deadline - time.perf_counter()),
                                           overflows)
            if proved:
                return best
            row = found[0] if found else \
                overflow(best[0]) if overflow is not None and best is not None else None
            if row is None:
                break
            rows = [*rows, row]
        # Unbounded, the LP is within a percent or so of the optimum, and its
        # support's plan, given as a start, lets HiGHS fix columns by their
        # reduced costs from the root: ResNet's step 6.5 s -> 1.8 s, to the
        # same plan.  Bounded, the LP is weak, the support's plan is far from
        # the optimum, and as a start it cost as often as it saved.  A plan
        # known to fit (`start`: the last solve's, under a budget opened
        # above it) is a start of another kind: the 0-1 program, stopped at
        # its gap, can no longer return a dearer plan than the one that fits
        # (Mixtral's forward: 253.1k bytes above the fitting 251.5k; from
        # it, 242.8k).
        if start is None and best is not None and not rows:
            start = best[0]
        try:
            return problem.solve(rows, budget, max(1e-9, deadline - time.perf_counter()),
                                 start=start)
        except SearchTimeLimit:
            if best is None:
                raise
            return best

    def least_memory(self, time_limit: float = 60.0) -> Plan:
        """The plan with the least estimated peak memory, whatever it moves."""
        started = time.perf_counter()
        problem, memory, _ = self._problem()
        points = sorted({t for *_, b, l in memory for t in (b, l)})
        _, strategies = self._smallest_peak(problem, memory, points, self._cuts, time_limit)
        objective = self._objective(strategies)
        return self._plan(strategies, objective, points, started)

    def _objective(self, strategies: list[int]) -> float:
        """What a plan moves, by the search's own prices."""
        problem, memory, tie_break = self._problem()
        linear, blocks = problem.parts
        total = -tie_break * sum(per_device[strategies[unit]]
                                 for _v, unit, per_device, _b, _l in memory)
        total += sum(linear[unit][strategies[unit]] for unit in range(len(self.units))
                    if math.isfinite(linear[unit][strategies[unit]]))
        chosen = dict(zip(self.variable_classes, strategies))
        total += sum(matrix[chosen[a], chosen[b]] for (a, b), matrix in blocks.items()
                     if math.isfinite(matrix[chosen[a], chosen[b]]))
        return max(0.0, total)

    def _plan(self, strategies: list[int], objective: float, points, started: float) -> Plan:
        problem, memory, _ = self._problem()
        peak, _ = self._peak(memory, strategies, points)
        layouts, why, sum_targets = self._write(strategies)
        solve_seconds = time.perf_counter() - started
        return Plan(layouts, why, objective, peak, solve_seconds, self.build_seconds,
                    problem.variables, problem.constraints, len(self.units),
                    len(set(self.variable_classes)), bool(self.cost_model.bandwidths),
                    sum_targets=sum_targets)

    def _smallest_peak(self, problem: "_Milp", memory, points, cuts: list[int],
                       time_limit: float) -> tuple[float, list[int]]:
        """The least peak memory of any plan, by the same cutting planes:
        minimize the peak over the cut points, measure the plan everywhere,
        cut where it overflows, until the measured peak is the minimized one."""
        cuts = list(cuts)
        best, best_strategies = math.inf, []
        reference = None
        deadline = time.perf_counter() + time_limit
        for _round in range(12):
            rows = [self._memory_row(memory, t, reference) for t in cuts]
            if best_strategies and time.perf_counter() >= deadline:
                break
            left = max(1e-9, deadline - time.perf_counter())
            strategies, bound = problem.solve(rows, None, left, minimize_peak=True)
            peak, at = self._peak(memory, strategies, points)
            if peak < best:
                best, best_strategies = peak, strategies
            if peak <= bound * (1 + 1e-9) or (at in cuts and reference == strategies):
                break
            reference = strategies
            if at not in cuts:
                cuts.append(at)
        return best, best_strategies

    def _layouts_of(self, value: int) -> tuple[int, list[Sharding]] | None:
        """`value_layouts`, and for a value built from scalars its consumer's reading."""
        reader = self.free_sources.get(value)
        if reader is None:
            return self.value_layouts(value)
        node, position = reader
        unit = self.unit_of_node.get(node, -1)
        if unit < 0:
            return None
        return unit, [s.operands[position] for s in self.node_strategy[node]]

    def _memory_row(self, memory, point: int, reference: list[int] | None) -> dict:
        """Bytes live at `point`, linear in the program's variables: a unit's
        bytes per strategy, keyed by the unit, and a read's copy per pair of
        strategies, keyed by (source unit, reader unit), which the solver
        prices on the pair's variables where the two units have them.

        A copy is made at the first read of a value in another layout and
        shared by its later reads in that layout, so whether one is live
        depends on several choices at once.  Around the `reference` plan
        (the previous round's) the row is exact: each of its copies live at
        `point` is charged to its first reader, as if the value kept its
        layout.  Each read the reference makes in place is charged by the
        pair, where a copy would be live at `point`: a plan that moves the
        value's layout under such a read pays for the copy it makes there,
        which the reader alone cannot see."""
        row: dict = {}
        for _value, unit, per_device, born, last in memory:
            if born <= point <= last:
                row[unit] = row.get(unit, 0) + per_device
        if reference is None:
            return row
        for value, (held, first, _size, start, end) in self._copies(reference):
            if start <= point <= end:
                _time, unit, wanted, sizes = first
                copies = np.array([0.0 if w is held else size
                                   for w, size in zip(wanted, sizes)])
                row[unit] = row.get(unit, 0) + copies
        for value, reads in self.reads.items():
            if max(read[0] for read in reads) < point:
                continue
            source_unit, source_layouts = self.read_sources[value]
            held = source_layouts[reference[source_unit]]
            # A copy lives from its first read, or, of an argument, from the start.
            argument = self.root[value] in self.argument_roots
            for time_, unit, wanted, sizes in reads:
                if wanted[reference[unit]] is not held or (time_ < point if argument
                                                           else time_ > point):
                    continue
                key = (source_unit, unit)
                copies = np.array([[0.0 if w is layout else size for w, size in zip(wanted, sizes)]
                                   for layout in source_layouts])
                row[key] = row.get(key, 0) + copies
        return row

    def _copies(self, strategies: list[int]):
        """(value, (its layout, first read, bytes, first time, last time)) for
        each copy of a value in another layout under the plan `strategies`."""
        for value, reads in self.reads.items():
            source_unit, source_layouts = self.read_sources[value]
            held = source_layouts[strategies[source_unit]]
            spans: dict[int, list] = {}
            for read in reads:
                time_, unit, wanted, sizes = read
                layout = wanted[strategies[unit]]
                if layout is held:
                    continue
                span = spans.get(id(layout))
                if span is None:
                    spans[id(layout)] = [held, read, sizes[strategies[unit]], time_, time_]
                else:
                    span[3] = min(span[3], time_)
                    span[4] = max(span[4], time_)
            for span in spans.values():
                if self.root[value] in self.argument_roots:
                    # XLA combines the independent gathers of arguments into
                    # one, at the start: each copy lives from there.
                    span[3] = 0
                yield value, tuple(span)

    def _peak(self, memory, strategies: list[int], points: list[int]) -> tuple[float, int]:
        delta = collections.defaultdict(float)
        for _value, unit, per_device, born, last in memory:
            size = per_device[strategies[unit]]
            delta[born] += size
            delta[last + 1] -= size
        for _value, (_held, _first, size, start, end) in self._copies(strategies):
            delta[start] += size
            delta[end + 1] -= size
        live, peak, at = 0.0, 0.0, 0
        for point in sorted(delta):
            live += delta[point]
            if live > peak:
                peak, at = live, point
        return peak, at

    def _write(self, strategies: list[int]):
        graph = self.graph
        layouts: list[Sharding | None] = [None] * len(graph.shapes)
        why = [""] * len(graph.shapes)
        sharing = collections.Counter(self.variable_classes)
        for value, unit, options in self._choices(range(len(graph.shapes))):
            layouts[value] = options[strategies[unit]]
            owner = self.units[unit]
            shared = sharing[self.variable_classes[unit]]
            repeat = f", one choice for {shared} repeated copies" if shared > 1 else ""
            if self.root[value] in self.pinned_roots and len(owner.strategies) == 1:
                why[value] = "annotated (a hard constraint)"
            elif owner.kind == "value":
                why[value] = (f"searched: one of {len(owner.strategies)} layouts of its "
                              f"class{repeat}")
            else:
                op = graph.nodes[owner.owner]
                strategy = self.node_strategy[owner.owner][strategies[unit]]
                why[value] = (f"searched: {op.label} strategy [{strategy.label}], one of "
                              f"{len(owner.strategies)}{repeat}")
        for index in self.real_nodes:
            if index in self.leader and self.unit_of_node.get(index, -1) >= 0:
                node = graph.nodes[index]
                leader = node.operands[self.leader[index]]
                for value in node.results:
                    if value != NO_VALUE and self.root[value] == value and \
                            not why[value].startswith("annotated"):
                        why[value] = f"follows its operand #{self.leader[index]} through " \
                                     f"{node.label}: " + why[leader]
        for index in self.real_nodes:
            unit = self.unit_of_node.get(index, -1)
            if unit < 0:
                continue
            strategy = self.node_strategy[index][strategies[unit]]
            for value, partial in zip(graph.nodes[index].results, strategy.unsummed):
                if partial is not None:
                    layouts[value] = partial   # summed where it crosses into its tied values
        for value, (node_index, position) in self.free_sources.items():
            unit = self.unit_of_node.get(node_index, -1)
            if unit >= 0:
                layouts[value] = self.node_strategy[node_index][strategies[unit]].operands[position]
            else:
                layouts[value] = self.layouts.get(((),) * len(graph.shapes[value]))
            why[value] = "built from scalars: laid out as its one consumer reads it"
        sum_targets = {}
        for root in self.shared_reads:
            (node_index, position), = self.producers[root]
            unit = self.unit_of_node[node_index]
            written = self.node_strategy[node_index][strategies[unit]].results[position]
            kept = layouts[root]
            if written is not None and written.unreduced and not kept.unreduced:
                layouts[root] = written
                sum_targets[root] = kept
                why[root] += f"; written Partial and summed once into {kept} for its readers"
        return layouts, why, sum_targets


def _quiet_highs():
    """A HiGHS instance that writes nothing.  highspy's `Highs` hooks a
    logging callback in as it is made, and HiGHS prints its banner to the
    process's stdout then, before any option can be set: into the module the
    CLI writes there.  The class it extends, the bindings' own, has every
    method this search calls and prints nothing."""
    import highspy

    highs = getattr(highspy._core, "_Highs", highspy.Highs)()
    highs.setOptionValue("output_flag", False)
    return highs


def _highs_lp(objective, matrix, col_lower, col_upper, row_lower, row_upper):
    """A HiGHS model of min objective . x, row_lower <= matrix x <= row_upper,
    col_lower <= x <= col_upper."""
    import highspy

    csc = matrix.tocsc()
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = csc.shape[1], csc.shape[0]
    lp.col_cost_ = np.asarray(objective, dtype=float)
    lp.col_lower_ = np.asarray(col_lower, dtype=float)
    lp.col_upper_ = np.asarray(col_upper, dtype=float)
    lp.row_lower_ = np.asarray(row_lower, dtype=float)
    lp.row_upper_ = np.asarray(row_upper, dtype=float)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = csc.indptr
    lp.a_matrix_.index_ = csc.indices
    lp.a_matrix_.value_ = csc.data
    return lp


def _merged(spans: list[tuple[int, int, int]]) -> list[tuple[int, int, list[int]]]:
    """The runs of overlapping (first, last, value) spans: (first, last, values)."""
    runs: list[tuple[int, int, list[int]]] = []
    for first, last, value in sorted(spans):
        if runs and first <= runs[-1][1]:
            start, end, values = runs[-1]
            values.append(value)
            runs[-1] = (start, max(end, last), values)
        else:
            runs.append((first, last, [value]))
    return runs


def _is_bitcast(rule: OpRule) -> bool:
    """A reshape, or a transpose that moves only dimensions of size one: the
    elements keep their order, so XLA reads the operand's buffer as is."""
    if len(rule.operands) != 1 or len(rule.results) != 1 or any(rule.windows) \
            or any(kind is not FactorKind.PASS_THROUGH for kind in rule.factor_kinds):
        return False

    def order(tensor) -> list[int]:
        return [f for dim in tensor for f in dim if rule.factor_sizes[f] > 1]

    return order(rule.operands[0]) == order(rule.results[0])


def _transposed_positions(rule: OpRule) -> list[int]:
    """The operands of a contraction whose dims, major to minor, are not
    batch dims, then free and contracting dims in two runs (either first):
    the ones a matrix multiply cannot read in place.  A batch factor is in
    every operand; dims of size one are placed anywhere."""
    in_all = set.intersection(*({f for dim in tensor for f in dim} for tensor in rule.operands))
    positions = []
    for position, tensor in enumerate(rule.operands):
        kinds = []
        for dim in tensor:
            factors = [f for f in dim if rule.factor_sizes[f] > 1]
            if not factors:
                continue
            if all(f in in_all and rule.factor_kinds[f] is FactorKind.PASS_THROUGH
                   for f in factors):
                kind = "batch"
            elif all(rule.factor_kinds[f] is FactorKind.REDUCTION for f in factors):
                kind = "contracting"
            else:
                kind = "free"
            if not kinds or kinds[-1] != kind:
                kinds.append(kind)
        runs = kinds[1:] if kinds[:1] == ["batch"] else kinds
        if "batch" in runs or len(runs) > 2:
            positions.append(position)
    return positions


def _distinct(items: list, key=id) -> tuple[list, list[int]]:
    """The distinct items (by `key`; layouts are interned, so by identity)
    and each item's position among them."""
    index: dict = {}
    found = []
    positions = []
    for item in items:
        k = key(item)
        position = index.get(k)
        if position is None:
            position = index[k] = len(found)
            found.append(item)
        positions.append(position)
    return found, positions


def _shards(layouts: _Layouts, layout: Sharding | None) -> int:
    if layout is None:
        return 1
    return _product(layouts.axis_size, (a for d in layout.dim_axes for a in d))


def format_bytes(size: float | None) -> str:
    if size is None:
        return "unlimited"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.2f} {unit}"
        size /= 1024
    return f"{size}"


class _Milp:
    """The 0-1 program over variable classes, and its LP relaxation."""

    BIG = 1e30

    def __init__(self, units: list[_Unit], classes: list[int], linear, blocks):
        self.class_size: dict[int, int] = {}
        for unit, cls in zip(units, classes):
            self.class_size.setdefault(cls, len(unit.strategies))
        offsets = {}
        count = 0
        for cls in sorted(self.class_size):
            offsets[cls] = count
            count += self.class_size[cls]
        self.offsets = offsets
        self.n_choice = count
        objective = np.zeros(count)
        upper = np.ones(count)
        for unit, cls in zip(range(len(units)), classes):
            terms = linear[unit]
            start = offsets[cls]
            objective[start:start + len(terms)] += np.where(np.isfinite(terms), terms, 0)
            upper[start:start + len(terms)][~np.isfinite(terms)] = 0
        self.rows: list[tuple[list[int], list[float], float, float]] = []
        for cls in sorted(self.class_size):
            start = offsets[cls]
            size = self.class_size[cls]
            self.rows.append((list(range(start, start + size)), [1.0] * size, 1.0, 1.0))
        pair_costs = []
        pair_upper = []
        # (source class, reader class) -> (first pair variable, row group of
        # each source strategy, column group of each reader strategy, columns)
        self.pairs: dict[tuple[int, int], tuple[int, np.ndarray, np.ndarray, int]] = {}
        for (a, b), matrix in blocks.items():
            if not matrix.any() and np.isfinite(matrix).all():
                continue
            row_groups = _distinct([tuple(r) for r in matrix], key=lambda r: r)
            col_groups = _distinct([tuple(c) for c in matrix.T], key=lambda c: c)
            small = matrix[np.ix_([row_groups[1].index(i) for i in range(len(row_groups[0]))],
                                  [col_groups[1].index(j) for j in range(len(col_groups[0]))])]
            base = count + len(pair_costs)
            n_rows, n_cols = small.shape
            self.pairs[(a, b)] = (base, np.array(row_groups[1]), np.array(col_groups[1]), n_cols)
            for i in range(n_rows):
                for j in range(n_cols):
                    finite = math.isfinite(small[i, j])
                    pair_costs.append(small[i, j] if finite else 0.0)
                    pair_upper.append(1.0 if finite else 0.0)
            for i in range(n_rows):
                members = [offsets[a] + s for s, g in enumerate(row_groups[1]) if g == i]
                self.rows.append(([base + i * n_cols + j for j in range(n_cols)] + members,
                                  [1.0] * n_cols + [-1.0] * len(members), 0.0, 0.0))
            for j in range(n_cols):
                members = [offsets[b] + t for t, g in enumerate(col_groups[1]) if g == j]
                self.rows.append(([base + i * n_cols + j for i in range(n_rows)] + members,
                                  [1.0] * n_rows + [-1.0] * len(members), 0.0, 0.0))
        self.objective = np.concatenate([objective, np.array(pair_costs)])
        self.upper = np.concatenate([upper, np.array(pair_upper)])
        self.variables = len(self.objective)
        self.constraints = len(self.rows)
        self.classes = classes
        self.parts = (linear, blocks)   # to price a plan found otherwise
        self._warm = None       # a HiGHS instance kept warm on the LP relaxation
        self._base = None       # the choice and pair rows, as `_base_rows` gives them
        self._base_csc = None   # the same matrix by columns, for `_on_support`
        self._held_rows: list[np.ndarray] = []   # the memory rows the warm LP holds

    def _columns(self, memory_row: dict) -> tuple[np.ndarray, np.ndarray]:
        """A memory row (unit -> bytes per strategy; (source unit, reader
        unit) -> bytes per pair of strategies) over the program's columns.
        Pairs of strategies that share a pair variable are charged the most
        any of them holds; the units of one class choose alike, so their
        pair is charged on the class's own variables; and a pair of units
        without pair variables (their edge moves nothing) is not charged."""
        columns: dict[int, float] = collections.defaultdict(float)
        for key, per_device in memory_row.items():
            if isinstance(key, tuple):
                source, reader = self.classes[key[0]], self.classes[key[1]]
                if source == reader and per_device.shape[0] == per_device.shape[1]:
                    # One class's units choose alike: the pair is the diagonal.
                    start = self.offsets[source]
                    for s, size in enumerate(np.diagonal(per_device)):
                        columns[start + s] += size
                    continue
                pair = self.pairs.get((source, reader))
                if pair is None:
                    continue
                base, row_group, col_group, n_cols = pair
                grouped = np.zeros((row_group.max() + 1, n_cols))
                np.maximum.at(grouped, (row_group[:, None], col_group[None, :]), per_device)
                for r, c in zip(*np.nonzero(grouped)):
                    columns[base + r * n_cols + c] += grouped[r, c]
                continue
            start = self.offsets[self.classes[key]]
            for s, size in enumerate(per_device):
                columns[start + s] += size
        return (np.fromiter(columns, dtype=np.int64, count=len(columns)),
                np.fromiter(columns.values(), dtype=float, count=len(columns)))

    def _base_rows(self):
        """(the choice and pair rows as a matrix, their lower and upper
        bounds), built once: every 0-1 solve, and each rounding of the
        division's, adds only its memory rows to them."""
        if self._base is None:
            self._base = (self._matrix(self.rows, self.variables),
                          [lo for _c, _v, lo, _hi in self.rows],
                          [hi for _c, _v, _lo, hi in self.rows])
        return self._base

    @staticmethod
    def _matrix(rows, n: int):
        from scipy import sparse

        data, row_ids, col_ids = [], [], []
        for r, (cols, values, _lo, _hi) in enumerate(rows):
            col_ids.extend(cols)
            data.extend(values)
            row_ids.extend([r] * len(cols))
        return sparse.csr_array((data, (row_ids, col_ids)), shape=(len(rows), n))

    def solve(self, memory_rows, budget, time_limit, minimize_peak: bool = False,
              start: list[int] | None = None):
        """The 0-1 program's plan and cost (its peak, with `minimize_peak`),
        or None where no plan fits.  A plan that fits may be given as the
        solver's `start`."""
        from scipy import sparse

        rows = []
        n = self.variables + (1 if minimize_peak else 0)
        for row in memory_rows if (budget is not None or minimize_peak) else ():
            cols, values = self._columns(row)
            if minimize_peak:
                rows.append(([*cols, n - 1], [*values, -1.0], -np.inf, 0.0))
            else:
                rows.append((cols, values, -np.inf, budget))
        base, base_lower, base_upper = self._base_rows()
        if minimize_peak:
            base = sparse.hstack([base, sparse.csr_array((base.shape[0], 1))], format="csr")
        matrix = sparse.vstack([base, self._matrix(rows, n)], format="csr") if rows else base
        lower = [*base_lower, *(lo for _c, _v, lo, _hi in rows)]
        upper = [*base_upper, *(hi for _c, _v, _lo, hi in rows)]
        col_lower = np.zeros(n)
        if minimize_peak:
            objective = np.zeros(n)
            objective[-1] = 1.0
            col_upper = np.concatenate([self.upper, [np.inf]])
        else:
            objective = self.objective
            col_upper = self.upper.copy()
        gap = BOUNDED_GAP if rows else MIP_GAP
        # The program gains little from HiGHS's presolve, and with it HiGHS
        # restarts its root each time reduced-cost fixing frees columns: off,
        # the real models' solves took a quarter less time, to the same plans.
        x, status = self._highs_milp(objective, matrix, col_lower, col_upper, lower, upper,
                                     self.n_choice, time_limit, False, gap,
                                     None if start is None else self._point(start, n))
        if x is None:
            if status == _INFEASIBLE:
                return None
            # Out of time (or of HiGHS's patience) before any plan: saying
            # "no plan fits" here would send the user after the wrong knob.
            raise SearchTimeLimit(
                f"the solver found no plan within its time limit of {time_limit:g} s; "
                "give the search more time (time-limit)")
        strategies = self._strategies(x)
        if minimize_peak:
            return strategies, float(x[-1])
        return strategies, float(objective @ x)

    def _point(self, strategies: list[int], n: int) -> np.ndarray:
        """A plan as the program's columns: each class's choice, and the
        pair variable of each pair of strategy groups it picks."""
        x = np.zeros(n)
        chosen = dict(zip(self.classes, strategies))
        for cls, start in self.offsets.items():
            x[start + chosen[cls]] = 1.0
        for (a, b), (base, row_group, col_group, n_cols) in self.pairs.items():
            x[base + row_group[chosen[a]] * n_cols + col_group[chosen[b]]] = 1.0
        return x

    @staticmethod
    def _highs_milp(objective, matrix, col_lower, col_upper, row_lower, row_upper,
                    n_integer: int, time_limit: float, presolve: bool, gap: float, start):
        """The 0-1 program (its first `n_integer` columns whole) solved by
        highspy, from `start` where one is given: (the solution or None, a
        status: 0 solved, 1 out of time, 2 infeasible)."""
        import highspy

        lp = _highs_lp(objective, matrix, col_lower, col_upper, row_lower, row_upper)
        lp.integrality_ = [highspy.HighsVarType.kInteger] * n_integer + \
            [highspy.HighsVarType.kContinuous] * (len(objective) - n_integer)
        highs = _quiet_highs()
        highs.setOptionValue("presolve", "on" if presolve else "off")
        highs.setOptionValue("mip_rel_gap", gap)
        highs.setOptionValue("time_limit", float(time_limit))
        highs.passModel(lp)
        if start is not None:
            solution = highspy.HighsSolution()
            solution.col_value = list(start)
            solution.value_valid = True
            highs.setSolution(solution)
        highs.run()
        status = highs.getModelStatus()
        if status == highspy.HighsModelStatus.kInfeasible:
            return None, _INFEASIBLE
        if highs.getInfo().primal_solution_status != highspy.SolutionStatus.kSolutionStatusFeasible:
            return None, 1
        return np.asarray(highs.getSolution().col_value), \
            0 if status == highspy.HighsModelStatus.kOptimal else 1

    def _strategies(self, x: np.ndarray) -> list[int]:
        chosen = {cls: int(np.argmax(x[start:start + self.class_size[cls]]))
                  for cls, start in self.offsets.items()}
        return [chosen[cls] for cls in self.classes]

    def _relaxation(self):
        """The HiGHS instance kept warm on the LP relaxation (with the
        memory rows `_lp_with_rows` last gave it), built on first use."""
        if self._warm is None:
            matrix, lower, upper = self._base_rows()
            self._warm = self._highs(_highs_lp(self.objective, matrix, np.zeros(self.variables),
                                               self.upper, lower, upper))
        return self._warm

    @staticmethod
    def _highs(lp):
        highs = _quiet_highs()
        # As for the 0-1 program: the unbounded LP took half the time
        # without presolve on every model measured (Mixtral's step 3.6 s
        # -> 1.9 s), and a warm start skips it anyway.
        highs.setOptionValue("presolve", "off")
        # The serial dual simplex.  The parallel one (PAMI) was 20% faster
        # on an idle machine, but with another process on the cores its
        # threads wait on each other: Llama's 2-layer step's LP took 1.4 s,
        # then 16 s and 25 s on the same input (serial: 1.7-2.4 s).  Every
        # ``spmd-propagate`` runs this LP now, on whatever else is running.
        highs.setOptionValue("simplex_strategy", 1)
        highs.passModel(lp)
        return highs

    def relaxed(self, memory_rows, budget, time_limit,
                overflows: Callable[[list[int]], bool] | None = None):
        """(the best plan found, or None; whether it is proved within
        BOUNDED_GAP (MIP_GAP unbounded) of the optimum, or proved
        infeasible when there is no plan), from the LP relaxation.

        Unbounded, the LP is integral on most models measured, and its
        optimum is the plan.  Bounded, it is not: a memory row makes the
        cheapest plan a blend of one over and one under the budget.  The
        blend is rounded by the 0-1 program on the LP's support (RENS,
        `_on_support`): the choices the LP makes whole are kept and
        the few it blends are decided exactly, in a fraction of a second.
        Its plan is proved by the LP's value where that is close: on
        Mixtral's training step the LP is 0.5% under the optimum, which
        the whole program took twenty seconds to find.  Where it is not,
        the LP is divided (`_divide`), unless `overflows` says the rounded
        plan overflows a point no row bounds yet: the caller adds that row
        and asks again, and a division for plans the row cuts off is
        wasted (on Mixtral's forward at 1.09 MiB, 1.7 s of the first
        solve's 3.5 s).  (Pricing memory at
        the rows' duals rounded worse on every model measured: 41% dearer
        than this on BERT's forward.)  Each LP starts from the last one's
        basis.  Where no plan is proved, the caller solves the whole 0-1
        program."""
        import highspy

        deadline = time.perf_counter() + time_limit
        optimal = highspy.HighsModelStatus.kOptimal

        def run(highs):
            """The instance's model status once run, or None where no time
            was left to run it (its status is then the last run's)."""
            left = deadline - time.perf_counter()
            if left <= 0:
                return None
            # HiGHS's limit is on the instance's run time, all runs together.
            highs.setOptionValue("time_limit", highs.getRunTime() + left)
            highs.run()
            return highs.getModelStatus()

        def integral(x: np.ndarray) -> bool:
            choices = x[:self.n_choice]
            return bool(np.all(np.abs(choices - np.round(choices)) < 1e-6))

        columns = [self._columns(row) for row in memory_rows]
        if not columns:
            warm = self._lp_with_rows([], None)
            if run(warm) != optimal:
                return None, False
            x = np.asarray(warm.getSolution().col_value)
            if integral(x):
                return (self._strategies(x), float(self.objective @ x)), True
            best = self._on_support(x, [], None, deadline)
            bound = warm.getInfo().objective_function_value
            return best, best is not None and best[1] - bound <= MIP_GAP * abs(best[1])
        bounded = self._lp_with_rows(columns, budget)
        status = run(bounded)
        if status != optimal:
            return None, status == highspy.HighsModelStatus.kInfeasible
        bound = bounded.getInfo().objective_function_value
        x = np.asarray(bounded.getSolution().col_value)
        if integral(x):
            return (self._strategies(x), float(self.objective @ x)), True
        best = self._on_support(x, memory_rows, budget, deadline)
        if best is not None and best[1] - bound <= BOUNDED_GAP * abs(best[1]):
            return best, True
        if best is not None and overflows is not None and overflows(best[0]):
            return best, False
        held = np.zeros((len(columns), self.n_choice))
        for row, (cols, values) in zip(held, columns):
            choices = cols < self.n_choice
            row[cols[choices]] = values[choices]
        best, bound = self._divide(bounded, run, held, memory_rows, budget, deadline,
                                   x, bound, {}, DIVIDE_DEPTH, best)
        return best, best is not None and best[1] - bound <= BOUNDED_GAP * abs(best[1])

    def _divide(self, highs, run, held: np.ndarray, memory_rows, budget, deadline: float,
                x: np.ndarray, bound: float, fixed: dict, depth: int, best):
        """(the best plan found, a bound on every plan) below an LP node.

        A bounded LP blends a plan over the budget with one under it: the
        whole blend moves together, and dividing on one class's choice
        often splits it.  The class divided on is the blended one whose
        choices differ most in the bytes a bounded point holds (the
        memory row's own columns): one child per choice the LP blends, and
        one where it takes none of them.  Each child's LP (on the kept
        instance, with those columns fixed) bounds it.  A child whose bound
        is within `DIVIDE_GAP` of the best plan is done; otherwise its LP's
        support is rounded (`_on_support`), which may find a better plan,
        and where the child is still not within `BOUNDED_GAP` it is divided
        again, `depth` levels in all.  (Rounding to the tighter gap costs a
        few roundings and finds the plans the whole program finds: proved
        at 2% alone, Mixtral's forward at 1.44 MiB kept a plan 1% dearer
        by the estimate, and 51% dearer by XLA's count.)  A child whose LP
        runs out of time keeps its parent's bound.

        On Mixtral's forward at 1.09 MiB the bounded LP is 10% under the
        optimum, and the whole 0-1 program took 9.6 s to close that (most
        of it cuts at the root); divided, the same plan is proved within
        0.6%, and the next budget's within 1.2%, where the whole program
        took 9 s.  The search there went from 31 s to 14 s."""
        import highspy

        blended = self._most_held_blend(x, held)
        if depth == 0 or blended is None or time.perf_counter() >= deadline:
            return best, bound
        start, support, size = blended
        children = [{start + j: float(j == s) for j in range(size)} for s in support]
        children.append({start + s: 0.0 for s in support})
        solved_children = []
        least = math.inf
        for child in children:
            fix = {**fixed, **child}
            columns = np.fromiter(fix, dtype=np.int32, count=len(fix))
            values = np.fromiter(fix.values(), dtype=float, count=len(fix))
            highs.changeColsBounds(len(columns), columns, values, values)
            status = run(highs)
            solved = status == highspy.HighsModelStatus.kOptimal
            child_x = np.asarray(highs.getSolution().col_value) if solved else None
            child_bound = highs.getInfo().objective_function_value if solved else bound
            highs.changeColsBounds(len(columns), columns, np.zeros(len(columns)),
                                   self.upper[columns])
            if status == highspy.HighsModelStatus.kInfeasible:
                continue
            if child_x is None:
                least = min(least, child_bound)
                continue
            solved_children.append((child_bound, len(solved_children), fix, child_x))
        # The most promising child first: its plan, found early, is what
        # the others are pruned against.
        for child_bound, _, fix, child_x in sorted(solved_children, key=lambda c: c[:2]):
            if best is not None and best[1] - child_bound <= DIVIDE_GAP * abs(best[1]):
                least = min(least, child_bound)
                continue
            found = self._on_support(child_x, memory_rows, budget, deadline)
            if found is not None and (best is None or found[1] < best[1]):
                best = found
            if best is None or best[1] - child_bound > BOUNDED_GAP * abs(best[1]):
                best, child_bound = self._divide(highs, run, held, memory_rows, budget,
                                                 deadline, child_x, child_bound, fix,
                                                 depth - 1, best)
            least = min(least, child_bound)
        return best, least

    def _most_held_blend(self, x: np.ndarray, held: np.ndarray):
        """(first column, the choices it blends, size) of the class the LP
        solution `x` blends whose blended choices differ most in the bytes
        any memory row charges them; None where no class is blended."""
        found, widest = None, 0.0
        for cls in sorted(self.class_size):
            start, size = self.offsets[cls], self.class_size[cls]
            support = np.flatnonzero(x[start:start + size] > 1e-6)
            if len(support) < 2:
                continue
            charged = held[:, start + support]
            width = float((charged.max(axis=1) - charged.min(axis=1)).max())
            if found is None or width > widest:
                found, widest = (start, support.tolist(), size), width
        return found

    def _lp_with_rows(self, columns, budget):
        """The HiGHS instance on the LP relaxation, holding these memory
        rows: one instance for every solve, unbounded or not.  A
        cutting-plane round changes a row's copies in a few columns, or adds
        a row, and each re-solve starts from the last one's basis and
        pricing weights (on Mixtral's training step, a second or two where a
        fresh instance took nine).  A second instance started from this
        one's basis took 5.4 s on BERT's step where this one took 2.9 s: it
        must rebuild the weights, and pivots more without them."""
        import highspy

        highs = self._relaxation()
        held = self._held_rows
        first = len(self.rows)
        for r, (cols, values) in enumerate(columns):
            row = np.zeros(self.variables)
            row[cols] = values
            if r < len(held):
                for col in np.flatnonzero(row != held[r]):
                    highs.changeCoeff(first + r, int(col), float(row[col]))
                highs.changeRowBounds(first + r, -highspy.kHighsInf, budget)
                held[r] = row
            else:
                highs.addRow(-highspy.kHighsInf, budget, len(cols), cols.astype(np.int32), values)
                held.append(row)
        if len(held) > len(columns):
            highs.deleteRows(len(held) - len(columns),
                             np.arange(first + len(columns), first + len(held), dtype=np.int32))
            del held[len(columns):]
        return highs

    def _on_support(self, x: np.ndarray, memory_rows, budget, deadline: float):
        """The 0-1 program's plan on the LP solution `x`'s support (RENS):
        each choice `x` makes whole is fixed, and the program decides only
        the few it blends; None where it finds no plan in time.

        The program is built on the columns left open only: the blended
        choices, and the pair variables between choices still possible.
        (Built whole, with the rest fixed by their bounds for HiGHS's
        presolve to remove, each rounding took 0.09 s on Mixtral's forward,
        where pair variables are 48k of its 50k columns.)"""
        from scipy import sparse

        left = deadline - time.perf_counter()
        if left <= 0:
            return None
        open_columns, ones = self._open_on(x)
        matrix, lower, upper = self._base_rows()
        if self._base_csc is None:
            self._base_csc = matrix.tocsc()
        fixed = np.zeros(self.variables)
        fixed[ones] = 1.0
        held = self._base_csc @ fixed
        sub = self._base_csc[:, open_columns].tocsr()
        row_lower = np.asarray(lower) - held
        row_upper = np.asarray(upper) - held
        used = np.diff(sub.indptr) > 0
        if np.any(row_lower[~used] > 1e-9) or np.any(row_upper[~used] < -1e-9):
            return None
        position = np.full(self.variables, -1, dtype=np.int64)
        position[open_columns] = np.arange(len(open_columns))
        rows = [sub[used]]
        row_lower, row_upper = list(row_lower[used]), list(row_upper[used])
        for row in memory_rows if budget is not None else ():
            cols, values = self._columns(row)
            kept = position[cols] >= 0
            rows.append(self._matrix([(position[cols[kept]], values[kept], 0, 0)],
                                     len(open_columns)))
            row_lower.append(-np.inf)
            row_upper.append(budget - float(values[~kept] @ fixed[cols[~kept]]))
        n_integer = int(np.searchsorted(open_columns, self.n_choice))
        x_open, status = self._highs_milp(
            self.objective[open_columns], sparse.vstack(rows, format="csr"),
            np.zeros(len(open_columns)), self.upper[open_columns], row_lower, row_upper,
            n_integer, left, True, MIP_GAP, None)
        if x_open is None:
            return None
        point = fixed
        point[open_columns] = x_open
        return self._strategies(point), float(self.objective @ point)

    def _open_on(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the columns RENS leaves open on `x`, sorted; the choice columns
        it fixes at one).  A pair variable stays open where both its
        strategy groups hold a choice still possible."""
        choice = x[:self.n_choice]
        rounded = np.round(choice)
        whole = np.abs(choice - rounded) < 1e-6
        possible = ~whole | (rounded == 1)
        columns = [np.flatnonzero(~whole)]
        for (a, b), (base, row_group, col_group, n_cols) in self.pairs.items():
            start_a, start_b = self.offsets[a], self.offsets[b]
            rows = np.unique(row_group[possible[start_a:start_a + len(row_group)]])
            cols = np.unique(col_group[possible[start_b:start_b + len(col_group)]])
            columns.append((base + rows[:, None] * n_cols + cols[None, :]).ravel())
        return np.concatenate(columns), np.flatnonzero(whole & (rounded == 1))
