"""Sharding completion: give every value a sharding from a few annotations.

This module is the solver, over a plain graph with no MLIR in it: values
(shapes and element sizes) and nodes (an `OpRule` and the value ids it reads
and writes).  The `spmd-propagate` pass builds the graph from a module, runs
`Propagator`, and writes the answer back.  Keeping the solver apart keeps it
fast (ints and tuples, not IR handles) and testable on its own.

How a node propagates (Shardy's factor propagation):

1. *Project*: each tensor dimension's axes are dealt out to the dimension's
   factors (`op_rules.project_axes`, which the partitioner uses too).
2. *Resolve*: per factor, the candidates from all tensors agree when one is
   a prefix of another (the longest wins); otherwise the one from the larger
   tensor (in bytes) wins, ties going to the first.  An axis can serve one
   factor only, the factor whose candidate came from the larger tensor
   keeping it (what the losing layout would cost to move), except that
   until partial sums may be born (below) a REDUCTION factor yields a
   contested axis to the factors the results carry.
   NEED_REPLICATION factors take no axes.
3. *Refine*: each tensor dimension may only grow: its axes become the
   factors' axes when its current axes are a prefix of them.  User shardings
   are closed (never change) except their open dimensions.
4. *Partial values*: a sharded REDUCTION factor of a sum (dot, reduce-add)
   leaves the results unreduced on its axes; an op that is linear in its
   operands (`UnreducedFlow`) passes unreduced operands on.  Unreduced sets
   only grow and only flow forward.  Max/min reductions finish their
   reduction at once (``mhlo.sharding`` has no spelling for a pending max,
   and nothing downstream is linear in one).

Nodes run from a worklist until nothing changes, in five stages as the
issue and Shardy's op-priority propagation order them: element-wise ops and
ties whose operands have no other reader, and dynamic slices forward only;
then the same ops whatever their operands' other readers; then every op
except broadcasts forward only (results refined, operands left alone); then
every op, broadcasts only backward; then everything.  (The first stage is
Shardy's: an op whose operand has several readers neither pushes the
operand's sharding onto all of them nor pulls one reader's onto the operand
before the others have spoken.)  The forward-only stage lets each value
hear from its own producers before any consumer imposes a sharding on it
backward: a consumer that reached first would seat its own layout on the
value and the value's real layout, arriving later, would find its axes
taken (XLA and Shardy both prefer forward propagation for the same
reason).  For the same reason the
worklist runs the earliest dirty node first, nodes being numbered in program
order: an op then reads operands their producers have settled, and a
pinned weight cannot seat its layout on a matmul's result before the
activation's batch split arrives through its longer chain.  (A broadcast
that only adds unit dims is a reshape, not a broadcast, for the stages.)

Partial sums are born in the last stage only.  Until then a sharded
REDUCTION factor leaves its results alone and yields any axis it contests
with a factor of the results, so that a split which arrives late (the batch
reaching an embedding lookup through its index arithmetic, after the
table's vocabulary split) still finds its axis free.  Seating a result's
split never costs more than the partial it displaces: the partitioner can
still compute the local partial and reduce-scatter it onto that split, or
gather the reduced operand instead, whichever moves fewer bytes
(`partitioning.strategy`); a partial born early would instead leave the
result unsplit for every op downstream.  (GSPMD's propagation likewise
reads a dot's result sharding off its operands' batch and free dims, never
off the contracting dim, and leaves partial sums to its partitioner.)
Every change only extends a sharding, so propagation terminates, and the
work is linear in the graph times the (small) number of refinements.

Each value remembers the node and the neighbouring value its sharding came
from, so `explain` can walk the chain back to the user's annotation.

The greedy resolution is right at each node and blind beyond it, so the
solver records the nodes where a candidate lost (`contested`): two
candidates for one factor, one axis wanted by two factors, or a split a
NEED_REPLICATION factor drops.  Where there are any, the ``spmd-propagate``
pass completes by the whole program's cost and runs the solver again from
what that settled, pinned; see `passes.propagate.settle_contests`.

Every sum is priced by the reshard planner (`reshard.plan`), the cost model
the partitioner uses to emit it, in bytes per device: values carry their
element sizes so that a partial in bf16 and one in f32 are told apart.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import math
from typing import Iterable, Sequence

from stablehlo_spmd import min_cut
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.op_graph import NO_VALUE, Node
from stablehlo_spmd.op_rules import FactorKind, OpRule, UnreducedFlow, project_axes
from stablehlo_spmd.reshard import plan, plan_cost
from stablehlo_spmd.sharding import Sharding

Axes = tuple[str, ...]
# Ops that take their operand's sharding forward in the pass-through stages,
# as Shardy's op priorities do: a slice's result is small, so reading the
# operand where it lies and moving the slice is the cheap order.
_FORWARD_PASS_THROUGH = frozenset({"stablehlo.dynamic_slice", "stablehlo.dynamic_update_slice"})


@dataclasses.dataclass
class ValueState:
    dims: list[Axes]
    unreduced: Axes = ()
    reduction: str = "sum"
    closed_dims: frozenset[int] = frozenset()  # dims nothing may change
    pinned: bool = False                         # a user sharding: unreduced fixed too
    reserved: frozenset[str] = frozenset()       # axes a held dim will take, manual axes


@dataclasses.dataclass(frozen=True)
class Origin:
    """Why a value has its sharding: a user annotation, or a node and a neighbour."""

    annotation: str | None = None
    node: int | None = None
    source: int | None = None


class Propagator:
    STAGES = ("single-use pass-through", "pass-through", "forward",
              "all-but-broadcast-forward", "all")
    BIRTH_STAGE = "all"   # the first stage in which a sum may leave a partial result

    def __init__(self, mesh: Mesh, shapes: Sequence[tuple[int, ...]], nodes: Sequence[Node],
                 element_bytes: Sequence[int] | None = None):
        """`element_bytes[v]` is the size of one element of value v; without
        them every element counts one byte, so costs are element counts."""
        self.mesh = mesh
        self.births = False  # whether REDUCTION factors may leave partial results yet
        self.shapes = list(shapes)
        self.nodes = list(nodes)
        self.sizes = [_element_count(s) for s in self.shapes]
        self.element_bytes = [1] * len(self.shapes) if element_bytes is None \
            else list(element_bytes)
        if len(self.element_bytes) != len(self.shapes):
            raise ValueError(f"{len(self.element_bytes)} element sizes for "
                             f"{len(self.shapes)} values")
        self.nbytes = [n * b for n, b in zip(self.sizes, self.element_bytes)]
        self.axis_size = dict(zip(mesh.axis_names, mesh.mesh_shape))
        self.axis_order = {name: i for i, name in enumerate(mesh.axis_names)}
        self.states = [ValueState([()] * len(s)) for s in self.shapes]
        self.origins: list[Origin | None] = [None] * len(self.shapes)
        # A node's step depends only on its values' states (and, for a
        # broadcast, on the stage's direction): a node none of whose values
        # changed since its last step has nothing new to say.
        # Partial bookkeeping: the roots (values where a partial sum was born)
        # each partial value carries, and the values chosen to be whole
        # however partial their operands (`_choose_where_to_sum`).
        self.roots: list[frozenset[int]] = [frozenset()] * len(self.shapes)
        self.kept_whole: set[int] = set()
        # Once the sums are placed, the only values that may be partial.
        self.partial_region: set[int] | None = None
        # Nodes where a candidate lost an axis (to another candidate, or to a
        # NEED_REPLICATION factor): the choices a local rule makes blind to
        # what follows (``spmd-propagate`` weighs them by the whole program).
        self.contested: set[int] = set()
        self._dirty = set(range(len(self.nodes)))
        self.held: list[tuple[int, int, int, Axes, bool]] = []  # (priority, value, dim, axes, closed)
        self._projections: dict[tuple, list] = {}
        self._shardings: dict[tuple, Sharding] = {}
        self._sum_costs: dict[tuple, float] = {}
        self.users: list[list[int]] = [[] for _ in self.shapes]
        self.uses = [0] * len(self.shapes)   # reads as an operand, as MLIR counts uses
        for index, node in enumerate(self.nodes):
            for value in (*node.operands, *node.results):
                if value != NO_VALUE:
                    self.users[value].append(index)
            for value in node.operands:
                if value != NO_VALUE:
                    self.uses[value] += 1

    # ------------------------------------------------------------- inputs

    def pin(self, value: int, sharding: Sharding, annotation: str,
            priorities: dict[int, int] | None = None,
            replicated: Iterable[str] = ()) -> None:
        """A user sharding: closed dims stay as given; open dims may be refined,
        over any axis but the `replicated` ones (Shardy's ``replicated={...}``).

        `priorities` (dim -> priority, Shardy's ``p<N>``; a dim without one is
        p0) orders propagation: dims of priority N are held back, empty and
        closed, until every dim of a smaller priority has propagated through
        the whole program (`run`).
        """
        rank = len(self.shapes[value])
        self.states[value] = ValueState(
            list(sharding.dim_axes), sharding.unreduced, sharding.reduction,
            frozenset(range(rank)) - sharding.open_dims, pinned=True)
        self.origins[value] = Origin(annotation=annotation)
        state = self.states[value]
        # A manual axis is the region's, never a dim's (`Sharding.in_manual`).
        state.reserved = frozenset(sharding.manual) | set(replicated)
        for dim, priority in (priorities or {}).items():
            axes = sharding.dim_axes[dim] if dim < rank else ()
            if priority > 0 and dim < rank:   # empty too: it holds back what flows through
                self.held.append((priority, value, dim, axes, dim not in sharding.open_dims))
                state.dims[dim] = ()
                state.closed_dims = state.closed_dims | {dim}
                state.reserved = state.reserved | set(axes)

    # ---------------------------------------------------------------- run

    def run(self) -> None:
        """Propagate, one round of every stage per user priority (Shardy's
        user-priority propagation wraps its op-priority stages the same way)."""
        rounds = sorted({priority for priority, *_ in self.held} | {0})
        for priority in rounds:
            self._release(priority)
            for stage in self.STAGES:
                if stage == self.BIRTH_STAGE and priority == rounds[-1]:
                    self.births = True
                    self._dirty.update(i for i, node in enumerate(self.nodes)
                                       if node.rule.reduction == "sum")
                active = [i for i, node in enumerate(self.nodes) if self._in_stage(node, stage)]
                self._run_stage(active, stage)
        if self._choose_where_to_sum():
            self._run_stage(list(range(len(self.nodes))), self.STAGES[-1])

    def _release(self, priority: int) -> None:
        """Give the held dims of `priority` their axes back, open or closed as written."""
        for held_priority, value, dim, axes, closed in self.held:
            if held_priority != priority:
                continue
            state = self.states[value]
            state.dims[dim] = axes
            state.reserved = state.reserved - set(axes)
            if not closed:
                state.closed_dims = state.closed_dims - {dim}
            self._dirty.update(self.users[value])

    # ------------------------------------------------- where partials are summed

    def _choose_where_to_sum(self) -> bool:
        """Sum each partial where that moves the fewest bytes, then settle again.

        A partial value flows through the ops linear in it until an op
        needs it whole; there it is summed.  Summing it earlier may move
        fewer bytes: where it is born (XLA sums every dot's partial result
        at once), or anywhere along the way, such as before a convert that
        widens it (a bf16 gradient summed before the norm's backward turns
        it to f32 moves half the bytes), or after several partials are
        added into one (one sum for all of them).  Summing later may move
        fewer too: after a reduction shrinks it.

        Every value of the partial region is kept partial or made whole,
        and a sum is paid for each partial value some reader needs whole
        (`_sum_cut`): the cheapest such choice is a minimum cut
        (`min_cut.sink_side`).  Values made whole stay whole
        (`kept_whole`): their op reads its operands summed, or finishes its
        own reduction.  Where cuts tie, values stay partial: the IR then
        shows where the sum is really needed.  Returns True when anything
        changed and propagation must settle again.
        """
        region = [v for v, state in enumerate(self.states) if state.unreduced]
        if not region:
            return False
        edges, carried_to = self._sum_cut(region)
        whole = min_cut.sink_side(edges)
        # A value born partial that the ops linear in it all read summed
        # costs the same summed at once: its op finishes the reduction, free
        # to choose how (a reduce-scatter onto its result's split, say).
        # (Read only by ops that need it whole, it stays partial, summed
        # once where it is read.)
        whole |= {("value", v) for v in region if v in self.roots[v] and carried_to[v] and all(
            ("value", r) in whole for r in carried_to[v])}
        chosen = {v for v in region if ("value", v) in whole and not self.states[v].pinned}
        if not chosen:
            return False
        self.kept_whole |= chosen
        # Settling again, the chosen values stay whole, and so does every
        # value whole so far: an op that read two partial operands (and
        # summed both) may keep the one left partial, and carry it where no
        # sum was priced.
        self.partial_region = set(region) - chosen
        for value in chosen:
            state = self.states[value]
            state.unreduced, state.reduction = (), "sum"
            self.roots[value] = frozenset()
            self._dirty.update(self.users[value])
        return True

    def _sum_cut(self, region: list[int]):
        """The flow network whose cheapest cut places the sums of `region`'s
        partial values, as (tail, head, capacity) edges.

        Value v is node ("value", v): on the source's side it stays
        partial, on the sink's it is made whole.  Node ("summed", v) is its
        sum, paid once however many readers take it (the edge between the
        two costs `sum_cost`).  An op that keeps an operand partial keeps it
        so only while its result is partial too (result -> operand, no cut
        allowed), and a result made whole from a partial operand pays for
        that operand's sum (sum -> result); a reader that needs the operand
        whole always pays it (sum -> sink).  A value born partial is whole
        only at the price of its own sum (source -> value): its op finishes
        the reduction.  A user's partial value stays partial.  Also returns,
        per partial value, the partial values it is carried into."""
        states, edges = self.states, []
        carried_to: dict[int, list[int]] = collections.defaultdict(list)
        for value in region:
            edges.append((("value", value), ("summed", value), self.sum_cost(value)))
            if value in self.roots[value]:
                edges.append((min_cut.SOURCE, ("value", value), self.sum_cost(value)))
            if states[value].pinned:
                edges.append((min_cut.SOURCE, ("value", value), math.inf))
        for index, node in enumerate(self.nodes):
            if node.is_tie:
                a, b = node.operands[0], node.results[0]
                for one, other in ((a, b), (b, a)):
                    if one == NO_VALUE or not states[one].unreduced:
                        continue
                    if other != NO_VALUE and states[other].unreduced == states[one].unreduced:
                        edges.append((("value", other), ("value", one), math.inf))
                        carried_to[one].append(other)
                    else:
                        edges.append((("summed", one), min_cut.SINK, math.inf))
                continue
            results = [r for r in node.results if r != NO_VALUE and states[r].unreduced]
            for position, operand in enumerate(node.operands):
                if operand == NO_VALUE or not states[operand].unreduced:
                    continue
                if not self.accepts_unreduced(index, position):
                    edges.append((("summed", operand), min_cut.SINK, math.inf))
                    continue
                for result in results:
                    edges.append((("value", result), ("value", operand), math.inf))
                    edges.append((("summed", operand), ("value", result), math.inf))
                    carried_to[operand].append(result)
        return edges, carried_to

    def sum_cost(self, value: int) -> float:
        """Bytes per device that summing `value`'s partial, as it is laid out, moves."""
        return self._planned_sum(self.sharding(value), value)

    def _planned_sum(self, partial: Sharding, value: int) -> float:
        """The reshard planner's price of turning `partial`, the layout of a
        tensor shaped like `value`, into its summed layout (the same dims)."""
        key = (partial, self.shapes[value], self.element_bytes[value])
        cost = self._sum_costs.get(key)
        if cost is None:
            cost = self._sum_costs[key] = plan_cost(
                plan(partial, partial.reduced(), self.shapes[value], self.element_bytes[value]))
        return cost

    def sum_sites(self) -> list[int]:
        """Partial values some consumer needs summed, each once, in value order."""
        sites = set()
        for index, node in enumerate(self.nodes):
            if node.is_tie:
                for a, b in ((node.operands[0], node.results[0]), (node.results[0], node.operands[0])):
                    if a != NO_VALUE and self.states[a].unreduced and \
                            (b == NO_VALUE or self.states[b].unreduced != self.states[a].unreduced):
                        sites.add(a)
                continue
            for position, value in enumerate(node.operands):
                if value != NO_VALUE and self.states[value].unreduced and \
                        not self.accepts_unreduced(index, position):
                    sites.add(value)
        return sorted(sites)

    def _in_stage(self, node: Node, stage: str) -> bool:
        if stage.endswith("pass-through"):
            if not (node.is_tie or node.rule.elementwise or node.label in _FORWARD_PASS_THROUGH):
                return False
            # Shardy's first op priority: an op reading a value that has other
            # readers waits a stage, so that it neither pushes the value's
            # sharding onto every reader nor pulls one reader's onto the value.
            return stage == "pass-through" or node.is_tie or all(
                v == NO_VALUE or not self.shapes[v] or self.uses[v] == 1 for v in node.operands)
        if stage == "forward":  # a broadcast has no forward step before the last stage
            return not node.is_broadcast
        return True

    def _run_stage(self, active: list[int], stage: str) -> None:
        active_set = set(active)
        last = stage == "all"
        if last:  # broadcasts may now propagate forward too
            self._dirty.update(i for i in active if self.nodes[i].is_broadcast)
        # Earliest node first: nodes are numbered in program order (callees
        # where they are first called), so a forward step reads operands
        # their producers have already settled.
        queue = [i for i in active if i in self._dirty]
        queued = set(queue)
        dirty = self._dirty
        forward_only = stage == "forward"
        first_stages = stage.endswith("pass-through")
        while queue:
            index = heapq.heappop(queue)
            queued.discard(index)
            dirty.discard(index)
            node = self.nodes[index]
            directions = node.directions
            # A tie is an identity with no direction: it runs both ways always
            # (unless it is a barrier's, which says which ways it runs).
            forward_allowed = (last or not node.is_broadcast) and \
                directions in ("both", "forward")
            backward_allowed = (not forward_only or node.is_tie) and \
                directions in ("both", "backward") and \
                not (first_stages and node.label in _FORWARD_PASS_THROUGH)
            if directions == "none":
                continue
            for value in self._propagate(index, forward_allowed, backward_allowed):
                for user in self.users[value]:
                    if user != index:
                        dirty.add(user)
                    if user in active_set and user not in queued and user != index:
                        queued.add(user)
                        heapq.heappush(queue, user)

    # ------------------------------------------------------ one node's step

    def _propagate(self, index: int, forward_allowed: bool,
                   backward_allowed: bool = True) -> list[int]:
        """One node's step: the values it changed.

        Without `backward_allowed` the operands are left as they are; a node
        that would have refined one stays dirty, so the next stage that lets
        it run backward takes the step up again.
        """
        node = self.nodes[index]
        rule = node.rule
        tensors = [(v, dims) for v, dims in zip(node.operands, rule.operands)] + \
                  [(v, dims) for v, dims in zip(node.results, rule.results)]
        states = self.states
        if not any(v != NO_VALUE and (states[v].unreduced or any(states[v].dims))
                   for v, _ in tensors):
            return []
        winners, contested = self._resolve(rule, tensors)
        if contested:
            self.contested.add(index)
        changed = []
        operand_count = len(node.operands)
        # Results first: what they end up holding may cap what the operands
        # take from each other (`_sideways_cap`).
        if forward_allowed:
            for value, dim_factors in tensors[operand_count:]:
                if value != NO_VALUE and self._refine(value, dim_factors, rule, winners, index):
                    changed.append(value)
        if rule.elementwise:
            winners = self._sideways_cap(node, winners)
        for value, dim_factors in tensors[:operand_count]:
            if value == NO_VALUE:
                continue
            if not backward_allowed:
                if index not in self._dirty and \
                        self._refine(value, dim_factors, rule, winners, index, commit=False):
                    self._dirty.add(index)
                continue
            if self._refine(value, dim_factors, rule, winners, index):
                changed.append(value)
        if forward_allowed and node.results:
            changed += self._flow_unreduced(node, index, winners)
        return changed

    def _sideways_cap(self, node: Node, winners) -> list[tuple[Axes, int, int]]:
        """An elementwise op's operands take from each other only what its
        result holds.  A split the result cannot take (its dim is closed, or
        the axis is reserved there) would only be gathered again before the
        op, so an operand with no split of its own is better left whole; this
        is Shardy's rule too (aggressive_factor_propagation.cc)."""
        capped = list(winners)
        for result in node.results:
            if result == NO_VALUE:
                continue
            for factor, held in enumerate(self.states[result].dims):
                axes = capped[factor][0]
                if len(held) < len(axes) and axes[:len(held)] == held:
                    capped[factor] = (held, *capped[factor][1:])
        return capped

    def _resolve(self, rule: OpRule, tensors) -> tuple[list[tuple[Axes, int, int]], bool]:
        """Per factor: (axes, weight, source value) of the winning candidate;
        and whether any candidate lost an axis."""
        best: list[tuple[Axes, int, int]] = [((), -1, NO_VALUE)] * rule.num_factors
        contested = False
        for value, dim_factors in tensors:
            if value == NO_VALUE:
                continue
            state = self.states[value]
            weight = self.nbytes[value]
            for dim, factors in enumerate(dim_factors):
                axes = state.dims[dim] if dim < len(state.dims) else ()
                if not axes or not factors:
                    continue
                key = (axes, factors, rule.factor_sizes)
                projection = self._projections.get(key)
                if projection is None:
                    projection = self._projections[key] = project_axes(
                        axes, factors, rule.factor_sizes, self.axis_size)
                for factor, factor_axes in projection:
                    current = best[factor]
                    if not current[0]:
                        best[factor] = (factor_axes, weight, value)
                    elif _is_prefix(current[0], factor_axes):
                        best[factor] = (factor_axes, max(weight, current[1]), value)
                    elif _is_prefix(factor_axes, current[0]):
                        continue
                    else:
                        contested = True
                        if weight > current[1]:
                            best[factor] = (factor_axes, weight, value)
        kinds = rule.factor_kinds
        # Until partial sums may be born, a REDUCTION factor yields a
        # contested axis: the result dims keep the split, and the partitioner
        # chooses per op how to make them (gather the reduced operand, or
        # reduce-scatter a local partial).
        yielding = not self.births
        order = sorted((f for f in range(rule.num_factors) if best[f][0]),
                       key=lambda f: (yielding and kinds[f] is FactorKind.REDUCTION,
                                      -best[f][1], f))
        used: set[str] = set()
        for factor in order:
            axes, weight, source = best[factor]
            if kinds[factor] is FactorKind.NEED_REPLICATION:
                best[factor] = ((), -1, NO_VALUE)
                contested = True
                continue
            kept = []
            for axis in axes:
                if axis in used:
                    contested = True
                    break
                kept.append(axis)
            used.update(kept)
            best[factor] = (tuple(kept), weight, source)
        return best, contested

    def _refine(self, value: int, dim_factors, rule: OpRule, winners, node_index: int,
                commit: bool = True) -> bool:
        """Grow `value`'s dims toward the winners; whether anything grew.

        With ``commit=False`` nothing is changed: it only says whether it would.
        """
        state = self.states[value]
        sizes = rule.factor_sizes
        shape = self.shapes[value]
        used = None
        new_dims = None
        source = NO_VALUE
        for dim, factors in enumerate(dim_factors):
            # A dim of size 1 split would sit on one device and pad the
            # others, and every consumer wanting it whole would gather the
            # padding too: propagation leaves it whole.  A user may still
            # split it (`x[-1:]` of a split `x`, the slice pinned split).
            if not factors or dim in state.closed_dims or shape[dim] == 1:
                continue
            if len(factors) == 1:
                proposed = winners[factors[0]][0]
            else:
                proposed = []
                for factor in factors:
                    axes = winners[factor][0]
                    proposed.extend(axes)
                    if _product(self.axis_size, axes) < sizes[factor]:
                        break
                proposed = tuple(proposed)
            current = state.dims[dim]
            if len(proposed) <= len(current) or proposed[:len(current)] != current:
                continue
            if used is None:
                used = set(state.unreduced) | state.reserved
                for axes in state.dims:
                    used.update(axes)
            extension = []
            for axis in proposed[len(current):]:
                if axis in used:
                    break
                extension.append(axis)
            if not extension:
                continue
            used.update(extension)
            if new_dims is None:
                new_dims = list(state.dims)
            new_dims[dim] = current + tuple(extension)
            if source == NO_VALUE:
                source = next((winners[f][2] for f in factors if winners[f][0]), NO_VALUE)
        if new_dims is None:
            return False
        if not commit:
            return True
        state.dims = new_dims
        self.origins[value] = Origin(node=node_index, source=source)
        return True

    def _flow_unreduced(self, node: Node, index: int, winners) -> list[int]:
        rule = node.rule
        pending: set[str] = set()
        kind = None
        if rule.reduction == "sum" and self.births:
            for factor, factor_kind in enumerate(rule.factor_kinds):
                axes = winners[factor][0]
                # An uneven reduced dim would sum its shards' padding: it is
                # gathered instead, so no partial is born there.
                if factor_kind is FactorKind.REDUCTION and axes and \
                        rule.factor_sizes[factor] % _product(self.axis_size, axes) == 0:
                    if self._operands_carry(node, factor, axes):
                        pending.update(axes)
                        kind = rule.reduction
        born = bool(pending)
        flowed, flowed_kind = self._linear_flow(node)
        if flowed:
            if kind is not None and flowed_kind != kind:
                return []
            pending.update(flowed)
            kind = flowed_kind
        if not pending:
            return []
        inherited = frozenset().union(*(self.roots[v] for v in node.operands
                                        if v != NO_VALUE and self.states[v].unreduced))
        changed = []
        for value in node.results:
            if value == NO_VALUE:
                continue
            state = self.states[value]
            if state.pinned or (self.partial_region is not None
                                and value not in self.partial_region):
                continue
            self.roots[value] = self.roots[value] | inherited | ({value} if born else frozenset())
            in_dims = {a for axes in state.dims for a in axes}
            grown = (pending - in_dims) | set(state.unreduced)
            if len(grown) == len(state.unreduced) or (state.unreduced and state.reduction != kind):
                continue
            state.unreduced = tuple(sorted(grown, key=self.axis_order.__getitem__))
            state.reduction = kind
            source = next((v for v in node.operands if v != NO_VALUE and self.states[v].unreduced),
                          node.operands[0] if node.operands else NO_VALUE)
            self.origins[value] = Origin(node=index, source=source)
            changed.append(value)
        return changed

    def _operands_carry(self, node: Node, factor: int, axes: Axes) -> bool:
        """Every operand holding a REDUCTION factor is really sharded on its axes."""
        for value, dim_factors in zip(node.operands, node.rule.operands):
            for dim, factors in enumerate(dim_factors):
                if factor in factors:
                    if value == NO_VALUE or not set(axes) <= set(self.states[value].dims[dim]):
                        return False
        return True

    def _linear_flow(self, node: Node) -> tuple[set[str], str | None]:
        rule = node.rule
        if rule.unreduced is UnreducedFlow.NONE:
            return set(), None
        linear = [node.operands[i] for i in rule.linear_operands if i < len(node.operands)]
        others = [v for i, v in enumerate(node.operands) if i not in rule.linear_operands]
        if any(v != NO_VALUE and self.states[v].unreduced for v in others):
            return set(), None
        partial = [self.states[v] for v in linear if v != NO_VALUE and self.states[v].unreduced]
        if not partial:
            return set(), None
        if rule.unreduced is UnreducedFlow.JOINT:
            if len(partial) != len(linear):
                return set(), None
            first = partial[0]
            if any(p.unreduced != first.unreduced or p.reduction != first.reduction
                   for p in partial):
                return set(), None
            return set(first.unreduced), first.reduction
        if len(partial) != 1 or partial[0].reduction != "sum":
            return set(), None
        return set(partial[0].unreduced), "sum"

    # ------------------------------------------------------------ outputs

    def sharding(self, value: int) -> Sharding:
        """The value's sharding; equal states share one `Sharding` object."""
        state = self.states[value]
        key = (tuple(state.dims), state.unreduced, state.reduction if state.unreduced else "sum")
        found = self._shardings.get(key)
        if found is None:
            found = self._shardings[key] = Sharding(self.mesh, key[0], unreduced=key[1],
                                                    reduction=key[2])
        return found

    def summed_layout(self, node_index: int, operand: int) -> Sharding:
        """The layout to sum a partial operand into, for this consumer.

        The consumer's factors take their axes from its results (reduction
        factors from the operand itself); laid out that way, a sum whose
        partial axes land on a dimension is a reduce-scatter, not an
        all-reduce followed by a slice.  Axes the operand is partial on but
        no dimension takes are simply summed, except those a consumer linear
        in it keeps pending in its results: it is summed over the others
        only (a reduce-scatter over ``model``, pending over ``data``, into an
        add whose result is pending over ``data``; summed over both, the
        add's other operand was summed too: two all-reduces a plan of
        ``spmd-auto-shard`` never priced, 3.5 GiB on Mixtral's step).
        """
        node = self.nodes[node_index]
        rule = node.rule
        state = self.states[node.operands[operand]]
        pending = self._kept_pending(node, operand)
        axes = [()] * rule.num_factors
        for value, dims in zip(node.results, rule.results):
            if value == NO_VALUE:
                continue
            for dim, factors in enumerate(dims):
                for factor, factor_axes in project_axes(self.states[value].dims[dim], factors,
                                                        rule.factor_sizes, self.axis_size):
                    if not axes[factor]:
                        axes[factor] = factor_axes
        dims = []
        used: set[str] = set(pending)
        for dim, factors in enumerate(rule.operands[operand]):
            collected = [a for f in factors for a in axes[f]] or list(state.dims[dim])
            kept = tuple(a for a in collected if a not in used)
            used.update(kept)
            dims.append(kept)
        try:
            return Sharding(self.mesh, tuple(dims), unreduced=pending)
        except Exception:  # noqa: BLE001 - fall back to the operand's own layout
            return Sharding(self.mesh, tuple(state.dims))

    def _kept_pending(self, node: Node, operand: int) -> tuple[str, ...]:
        """The axes `operand` is pending on that `node`, linear in it, keeps
        pending in every result: those it need not be summed over."""
        rule = node.rule
        if rule.unreduced is UnreducedFlow.NONE or operand not in rule.linear_operands \
                or rule.unreduced is UnreducedFlow.SEPARATE:
            return ()
        results = [self.states[r] for r in node.results if r != NO_VALUE]
        if not results:
            return ()
        return tuple(a for a in self.states[node.operands[operand]].unreduced
                     if all(a in r.unreduced for r in results))

    def accepts_unreduced(self, node_index: int, operand: int) -> bool:
        """Whether node keeps operand's partial value partial (else it needs the sum)."""
        node = self.nodes[node_index]
        value = node.operands[operand]
        state = self.states[value]
        if not state.unreduced or node.rule.unreduced is UnreducedFlow.NONE:
            return not state.unreduced
        if operand not in node.rule.linear_operands:
            return False
        if not all(set(state.unreduced) <= set(self.states[r].unreduced)
                   for r in node.results if r != NO_VALUE):
            return False
        if node.rule.unreduced is UnreducedFlow.SEPARATE:
            # Linear in each operand alone: a product of two pending sums is
            # not the sum of the products, so one partial operand is kept
            # and the others are summed.  (Unreduced only grows, so a second
            # operand can turn partial after the result already did.)
            return operand == self._kept_partial(node)
        return True

    def _kept_partial(self, node: Node) -> int | None:
        """The one partial operand a SEPARATE node keeps partial: the first
        whose pending axes its results carry."""
        results = [self.states[r] for r in node.results if r != NO_VALUE]
        for index in node.rule.linear_operands:
            if index >= len(node.operands) or node.operands[index] == NO_VALUE:
                continue
            pending = set(self.states[node.operands[index]].unreduced)
            if pending and all(pending <= set(r.unreduced) for r in results):
                return index
        return None

    def explain(self, value: int, describe) -> list[str]:
        """The chain from `value` back to an annotation, one line per step."""
        lines, seen = [], set()
        while value is not None and value != NO_VALUE and value not in seen:
            seen.add(value)
            origin = self.origins[value]
            sharding = self.sharding(value)
            if origin is None:
                lines.append(f"{describe(value)}: {sharding} (no annotation reaches it)")
                break
            if origin.annotation is not None:
                lines.append(f"{describe(value)}: {sharding} from {origin.annotation}")
                break
            node = self.nodes[origin.node]
            via = "tied to" if node.is_tie else f"through {node.label} from"
            lines.append(f"{describe(value)}: {sharding} {via} {describe(origin.source)}")
            value = origin.source
        return lines


def _is_prefix(prefix: Axes, axes: Axes) -> bool:
    return len(prefix) <= len(axes) and axes[:len(prefix)] == prefix


def _product(axis_size: dict[str, int], axes) -> int:
    result = 1
    for axis in axes:
        result *= axis_size[axis]
    return result


def _element_count(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count
