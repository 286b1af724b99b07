"""The search: decision units and their edges, and the measured loop that solves them.

`Search` reads a `Graph` into decision units (an op's strategies, or a
value class's layouts; a follower and a constant add none), prices the
edges between them (`_edges`: a linear term per unit, a cost block per pair
of variable classes), and solves the 0-1 program (`program.py`) within a
memory budget, bounded at the program points where memory is largest: it
measures every point under each plan and adds those that overflow (`solve`,
a cutting-plane loop; `least_memory` minimizes the peak the same way).
`_write` reads the chosen strategies back into a layout, and why, per value.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import time
from collections.abc import Iterable

import numpy as np

from stablehlo_spmd.auto_sharding.clustering import _UnionFind, cluster_units
from stablehlo_spmd.auto_sharding.graph import (
    CostModel, Graph, InfeasibleBudget, Plan, Pricer, SearchTimeLimit, format_bytes)
from stablehlo_spmd.auto_sharding.memory import _Memory
from stablehlo_spmd.auto_sharding.program import BOUNDED_GAP, _distinct, _Milp, _Unit
from stablehlo_spmd.auto_sharding.remat import _Rematerializing
from stablehlo_spmd.auto_sharding.strategies import (
    Strategy, _is_contraction, _Layouts, _shards, _Strategies, contraction_flops, work_split)
from stablehlo_spmd.auto_sharding.symmetry import axis_swaps
from stablehlo_spmd.op_graph import NO_VALUE, Node
from stablehlo_spmd.op_rules import REMADE_NOT_MOVED, FactorKind
from stablehlo_spmd.sharding import Sharding

TIE_BREAK = 1e-6
PREFERENCE = 1e-3
# What the cheapest plan's cost weighs against its peak when the least
# memory is sought (`Search._smallest_peak`).
LEAST_MEMORY_COST_WEIGHT = 1e-3


def search(graph: Graph, memory_budget: float | None = None,
           cost_model: CostModel = CostModel(), time_limit: float = 60.0,
           cluster: bool = True) -> Plan:
    """The cheapest layouts for `graph` within `memory_budget` bytes per device."""
    return Search(graph, cost_model, cluster).solve(memory_budget, time_limit)


class Search(_Memory, _Rematerializing):
    """One program's problem, built once: `solve` may be called again with
    another budget (the measured-memory loop of the pass) and reuses every
    strategy, cost matrix and memory term."""

    def __init__(self, graph: Graph, cost_model: CostModel = CostModel(), cluster: bool = True,
                 recompute: bool = True):
        started = time.perf_counter()
        self.recompute = recompute   # may recompute activations where no plan fits otherwise
        # The 0-1 program's prices are the cost model's times this: seconds in
        # microseconds, bytes as they are.
        self.objective_scale = 1e6 if cost_model.in_seconds else 1.0
        self.graph = graph
        self.cost_model = cost_model
        self.layouts = _Layouts(graph.mesh)
        self.pricer = Pricer(graph.mesh, cost_model)
        self._scaled_strategies: dict[tuple, tuple[Strategy, Strategy]] = {}
        self.strategies = _Strategies(self.layouts, self.pricer.rule_tensor_cost,
                                      self.pricer.rule_tensor_bytes)
        n_values = len(graph.shapes)
        self.nbytes = [math.prod(s) * b for s, b in zip(graph.shapes, graph.element_bytes)]
        # What a temporary of each value takes where the target computes
        # narrow floats wider (`CostModel.float_compute_bytes`).
        wide = cost_model.float_compute_bytes
        floating = list(graph.floating) or [False] * n_values
        self.computed_nbytes = [size * wide / b if floating[v] and wide > b > 0 else size
                                for v, (size, b) in enumerate(zip(self.nbytes,
                                                                  graph.element_bytes))]
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
        # Followers whose result is kept for several readers, run in its layout
        # (`_add_stored_follower`); their leaders are in `leader` too.
        self.stored_followers: set[int] = set()
        self._follower_matrices: dict[tuple, np.ndarray] = {}
        self.shared_reads: list[int] = []   # values read by several ops: their own units
        for root in sorted({self.root[v] for v in range(n_values)}):
            if root in arguments or len(producers.get(root, ())) != 1:
                self.unit_of_class[root] = self._add_unit("value", root, self._class_layouts(root))
        for index in self.real_nodes:
            self._add_node(index)
        self.build_seconds = time.perf_counter() - started
        self.variable_classes = (
            cluster_units(graph, self.root, self.pinned_roots, self.consumers, self.units)
            if cluster else list(range(len(self.units))))
        self._built = None
        self._groups: dict[tuple, tuple] = {}   # `_layout_groups`
        self._cuts: list[int] = []
        self._reference: list[int] | None = None
        self._unbounded = None   # the cheapest plan of any size, once solved
        self.cheapest_seconds = 0.0   # what solving it took
        self._memory_built = None
        self.recomputed: dict[int, tuple[int, int]] = {}   # see `_Memory`
        self.held_until: dict[int, int] = {}
        self.memory_floor = 0.0  # `_floor` of the memory terms, with them

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
        if leader is not None and len(tensors) == 1 and len(node.results) == 1 and results \
                and self._read_by_several(results[0]):
            self._add_stored_follower(index, leader, strategies, scale)
            return
        strategies = [self._scaled(s, scale) for s in strategies]
        if any(v != NO_VALUE and (self.root[v] in self.pinned_roots
                                  or self.class_size[self.root[v]] > 1) for v in node.results):
            strategies = [self._pinned_results(node, s) for s in strategies]
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

    def _add_stored_follower(self, index: int, leader: int, followed: list[Strategy],
                             scale: int) -> None:
        """A follower of one tensor operand (a convert, a reshape, a unary
        element-wise op) whose result several ops read: a unit of its own over
        the layouts the result may be kept in, and the op runs in the kept
        one, reading its operands as that needs (`follow_result`), as the
        partitioner runs an op where its result is wanted.  Where running it
        where its leader is and moving the result moves less, the partitioner
        does that instead: the leader's edge is priced with both
        (`_follower_read`).  A follower of several tensors keeps its leader's
        layout and its result is moved: its other operands' moves are priced
        where they are read, and a sum of Partial operands is made once, on
        the result (tests/lit/auto_shard/keep_partial.mlir)."""
        node = self.graph.nodes[index]
        value = node.results[0]
        stored = self._stored_layouts(value, [s.results[0] for s in followed])
        unwritable = None
        strategies = []
        for layout in stored:
            strategy = self.strategies.follow_result(node.rule, leader, layout)
            if strategy is None:
                if unwritable is None:
                    unwritable = dataclasses.replace(followed[0], cost=math.inf)
                strategy = unwritable
            strategies.append(self._pinned_results(node, self._scaled(strategy, scale)))
        unit = self._add_unit("value", value, stored)
        self.unit_of_class[value] = unit
        self.shared_reads.append(value)
        self.unit_of_node[index] = unit
        self.node_strategy[index] = strategies
        self.stored_followers.add(index)

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
        """A rule's strategy costs a sum per byte of element (`Pricer.rule_tensor_cost`).

        Kept by the strategy's id, with the strategy itself: a strategy made
        for one node (a follower's unwritable layout) dies with the call, and
        another node's, made at the same address, would otherwise be handed
        the first one's scaled copy, with its rule's operands (an IndexError
        in Mixtral's step, one run in a few)."""
        if not strategy.cost or element_bytes == 1:
            return strategy
        key = (id(strategy), element_bytes)
        found = self._scaled_strategies.get(key)
        if found is None or found[0] is not strategy:
            found = self._scaled_strategies[key] = (strategy, dataclasses.replace(
                strategy, cost=strategy.cost * element_bytes,
                moved=strategy.moved * element_bytes))
        return found[1]

    def _pinned_results(self, node: Node, strategy: Strategy) -> Strategy:
        """A result whose class is pinned is written in the pinned layout (a
        reshard if need be); one tied to other values (a function result, a
        call's operand) is summed: a Partial never crosses a boundary."""
        extra = extra_moved = 0.0
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
                extra_moved += self.moved_bytes(results[position], summed, value)
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
                extra_moved += self.moved_bytes(results[position], target, value)
                results[position] = target
        if not extra and results == list(strategy.results) and not any(unsummed):
            return strategy
        return dataclasses.replace(strategy, results=tuple(results), cost=strategy.cost + extra,
                                   moved=strategy.moved + extra_moved, unsummed=tuple(unsummed))

    def cost(self, source: Sharding, target: Sharding, value: int) -> float:
        """Bytes (or seconds) to move `value` from `source` to `target`; or,
        where its op is one the partitioner makes again rather than moves
        (`REMADE_NOT_MOVED`: a widening convert, a reshape) and that moves
        less, what making it again in `target` costs: its operands' moves.
        The partitioner chooses by bytes, so the choice is made by bytes
        whatever the price is in."""
        return self._priced_move(source, target, value, with_bytes=False)[0]

    def moved_bytes(self, source: Sharding, target: Sharding, value: int) -> float:
        """The bytes per device what `cost` chose delivers (the same number as
        `cost` where the cost is bytes)."""
        return self._priced_move(source, target, value)[1]

    def _priced_move(self, source: Sharding, target: Sharding, value: int,
                     with_bytes: bool = True) -> tuple[float, float | None]:
        """(price, bytes) of what the partitioner does to read `value` in
        `target`: move it, or make it again where that moves fewer bytes
        (bytes None where not `with_bytes` and the choice needs none)."""
        in_seconds = self.cost_model.in_seconds
        move = self._move(source, target, value)
        if move and math.isfinite(move):
            remade = self._remade(source, target, value)
            if remade is not None:
                moved = self._move(source, target, value, in_bytes=True) if in_seconds \
                    else move
                return remade if remade[1] < moved else (move, moved)
        if not in_seconds:
            return move, move
        return move, (self._move(source, target, value, in_bytes=True) if with_bytes else None)

    def _move(self, source: Sharding, target: Sharding, value: int,
              in_bytes: bool = False) -> float:
        price = self.pricer.bytes if in_bytes else self.pricer.cost
        return price(source, target, self.graph.shapes[value], self.graph.element_bytes[value])

    def _remaker(self, value: int) -> int | None:
        """The node that makes `value` where the partitioner may make it again
        rather than move it (a follower in `REMADE_NOT_MOVED`), else None."""
        found = self.producers.get(value) if self.root[value] == value else None
        if not found or len(found) != 1:
            return None
        index, position = found[0]
        node = self.graph.nodes[index]
        if index not in self.leader or node.label not in REMADE_NOT_MOVED \
                or node.results[position] != value:
            return None
        return index

    def _remade(self, source: Sharding, target: Sharding,
                value: int) -> tuple[float, float] | None:
        """(price, bytes) of what `value`'s op moves to make it again in
        `target` from the operands that made it in `source` (one op deep),
        or None."""
        index = self._remaker(value)
        if index is None or source.unreduced or target.unreduced:
            return None
        node = self.graph.nodes[index]
        leader = self.leader[index]
        made = self.strategies.follow_result(node.rule, leader, source)
        wanted = self.strategies.follow_result(node.rule, leader, target)
        if made is None or wanted is None:
            return None
        in_seconds = self.cost_model.in_seconds
        price = moved = 0.0
        for position, operand in enumerate(node.operands):
            if operand == NO_VALUE or not self.graph.shapes[operand] \
                    or operand in self.free_sources:
                continue
            step = self._move(made.operands[position], wanted.operands[position], operand)
            price += step
            moved += self._move(made.operands[position], wanted.operands[position], operand,
                                in_bytes=True) if in_seconds else step
        return price, moved

    def _follower_read(self, reader: int, value: int, layouts_a: list) -> np.ndarray:
        """The cost matrix of a stored follower `reader` reading its leader
        `value`: per (leader layout, kept layout), the cheaper of moving the
        leader to where the op runs in the kept layout, and running the op
        where the leader is and moving its result (the partitioner's choice,
        `partitioning.strategy._cheapest_rule_plan`)."""
        node = self.graph.nodes[reader]
        kept = self.units[self.unit_of_node[reader]].strategies
        rows = _distinct(layouts_a)
        key = ("follower", tuple(map(id, rows[0])), tuple(map(id, kept)), node.rule,
               self.graph.shapes[value], self.graph.element_bytes[value],
               self.graph.element_bytes[node.results[0]])
        small = self._follower_matrices.get(key)
        if small is None:
            small = np.zeros((len(rows[0]), len(kept)))
            for i, held in enumerate(rows[0]):
                for j in range(len(kept)):
                    small[i, j] = self._follower_price(reader, value, held, j)[0]
            self._follower_matrices[key] = small
        return small[rows[1]]

    def _follower_price(self, reader: int, value: int, held: Sharding | None,
                        kept: int) -> tuple[float, float]:
        """(cost, bytes) of stored follower `reader` keeping its result in its
        unit's layout `kept` when its leader `value` is laid out `held`."""
        node = self.graph.nodes[reader]
        position = self.leader[reader]
        strategy = self.node_strategy[reader][kept]
        layout = self.units[self.unit_of_node[reader]].strategies[kept]
        wanted = strategy.operands[position]
        # A layout the op cannot write is never chosen (its strategy costs
        # infinity), and its stand-in strategy (`_add_stored_follower`)
        # reads no layout of its own.
        if held is None or wanted is None or math.isinf(strategy.cost):
            return 0.0, 0.0
        price = self._priced_move(held, wanted, value)
        if price[0] and not held.unreduced:
            # Where the leader's layout is not one the op can run in (a
            # reshape merging a split minor dim), it runs in the nearest
            # one, and its leader moves there; the partitioner picks the
            # way that moves fewer bytes.
            ran = self.strategies.follow(node.rule, position, held)
            here, read = ran.results[0], ran.operands[position]
            if here is not None and read is not None:
                first = self._priced_move(held, read, value)
                then = self._priced_move(here, layout, node.results[0])
                if first[1] + then[1] < price[1]:
                    return first[0] + then[0], first[1] + then[1]
        return price

    # --------------------------------------------------------------- solve

    def _edges(self):
        """Linear terms per unit and cost blocks between unit classes."""
        linear = [np.zeros(len(u.strategies)) for u in self.units]
        blocks: dict[tuple[int, int], np.ndarray] = {}
        classes = self.variable_classes
        matrices: dict[tuple, np.ndarray] = {}   # repeated layers repeat their edges

        def add_pair(unit_a: int, layouts_a: list, unit_b: int, layouts_b: list, value: int,
                     reader: int | None, repeats: int):
            # cost[s, t] of unit_a's strategy s giving `value` in layouts_a[s] and
            # unit_b's strategy t reading it in layouts_b[t], paid `repeats` times
            if reader in self.stored_followers and \
                    self.graph.nodes[reader].operands[self.leader[reader]] == value:
                full = self._follower_read(reader, value, layouts_a)
                diagonal = np.diagonal(full) if full.shape[0] == full.shape[1] else None
            else:
                rows, cols, key = self._edge_kind(layouts_a, layouts_b, value)
                small = matrices.get(key)
                if small is None:
                    small = matrices[key] = np.array(
                        [[self.cost(a, b, value) if a is not None and b is not None else 0.0
                          for b in cols[0]] for a in rows[0]])
                full = None
                diagonal = small[rows[1], cols[1]] if len(rows[1]) == len(cols[1]) else None
            if unit_a == unit_b or classes[unit_a] == classes[unit_b]:
                if unit_a == unit_b or len(layouts_a) == len(layouts_b):
                    linear[unit_a] += diagonal * repeats
                    return
            matrix = full if full is not None else small[np.ix_(rows[1], cols[1])]
            if repeats != 1:
                matrix = matrix * repeats
            key = (classes[unit_a], classes[unit_b])
            if key in blocks:
                blocks[key] = blocks[key] + matrix
            else:
                blocks[key] = matrix

        nodes = self.graph.nodes
        for index in self.real_nodes:
            unit = self.unit_of_node.get(index, -1)
            if unit < 0:
                continue
            strategies = self.node_strategy[index]
            linear[unit] += (np.array([s.cost for s in strategies])
                             + self._compute(nodes[index], strategies)) * nodes[index].repeats
            for position, value in enumerate(nodes[index].operands):
                if value in self.free_sources:
                    # A constant is no partial sum: laid out Partial, every
                    # device would hold all of it, and the sum N times it.
                    linear[unit] += np.array([
                        math.inf if s.operands[position] is not None
                        and s.operands[position].unreduced else 0.0 for s in strategies])
        for *pair, site in self._pairs():
            # A move is made where its reader (else its writer) runs: inside a
            # loop, once per iteration.
            add_pair(*pair, repeats=nodes[site].repeats)
        return linear, blocks

    def _compute(self, node: Node, strategies: list[Strategy]) -> np.ndarray | float:
        """Seconds a device computes `node` for under each of `strategies`: a
        contraction's FLOPs over the devices that share them, at the cost
        model's peak; 0 where compute is not priced (bytes, or no peak)."""
        if not self.cost_model.flops_per_second or not self.cost_model.in_seconds or \
                not _is_contraction(node.rule):
            return 0.0
        flops = contraction_flops(node.rule)
        return np.array([self.cost_model.compute_seconds(
            flops / work_split(self.layouts.axis_size, s)) for s in strategies])

    def _pairs(self):
        """(producer unit, the layout it writes a value in per strategy, reader
        unit, the layout it reads it in per strategy, the value, the reading
        node or None, the node the move is made at: its reader, or for a
        class that is a unit of its own, its writer): every edge a cost
        matrix prices."""
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
                    yield (*found, unit, [s.operands[position] for s in strategies], value,
                           index, index)
        # Producers into classes that are units of their own.
        for root, unit in self.unit_of_class.items():
            for node, position in self.producers.get(root, ()):
                producer_unit = self.unit_of_node.get(node, -1)
                if producer_unit < 0:
                    continue
                value = self.graph.nodes[node].results[position]
                yield (producer_unit, [s.results[position] for s in self.node_strategy[node]],
                       unit, self.units[unit].strategies, value, None, node)

    def pricings(self) -> int:
        """How many moves building the problem prices: per kind of edge, its
        distinct written layouts times its distinct read ones.  Known before
        any is priced; each costs microseconds to tens of them (a mesh of
        three axes deals many more layouts to a rank-4 tensor than one of two)."""
        seen, total = set(), 0
        for _unit_a, layouts_a, _unit_b, layouts_b, value, *_reader in self._pairs():
            rows, cols, key = self._edge_kind(layouts_a, layouts_b, value)
            if key not in seen:
                seen.add(key)
                total += len(rows[0]) * len(cols[0])
        return total

    def _edge_kind(self, layouts_a: list, layouts_b: list, value: int):
        """The distinct written and read layouts of an edge (`_distinct`'s
        pairs), and the key its cost matrix is shared by."""
        rows, cols = self._layout_groups(layouts_a), self._layout_groups(layouts_b)
        # A value its op may be made again from prices by that op's operands too.
        remaker = self._remaker(value)
        remade = None if remaker is None else (self.graph.nodes[remaker].rule, tuple(
            (self.graph.shapes[v], self.graph.element_bytes[v])
            for v in self.graph.nodes[remaker].operands if v != NO_VALUE))
        return rows, cols, (tuple(map(id, rows[0])), tuple(map(id, cols[0])),
                            self.graph.shapes[value], self.graph.element_bytes[value], remade)

    def _layout_groups(self, layouts: list):
        """`_distinct(layouts)`, once per list of layouts: repeated layers
        read and write the same lists, and Mixtral's step prices 26k edges
        over a few hundred of them."""
        key = tuple(map(id, layouts))
        found = self._groups.get(key)
        if found is None:
            found = self._groups[key] = _distinct(layouts)
        return found

    def _memory(self) -> list:
        """The memory terms (`_memory_terms`), and with them `memory_floor`,
        built on first use: before the edges, which a budget under the floor
        never needs."""
        if self._memory_built is None:
            self._memory_built = self._memory_terms()
            self.memory_floor = self._floor(self._memory_built)
        return self._memory_built

    def _problem(self):
        """(the 0-1 program, memory terms, tie-break weight), the program built
        on first use; the memory terms are those of the recomputations set
        (`_Rematerializing`), the program's the same whatever they are."""
        memory = self._memory()
        if self._built is None:
            linear, blocks = self._edges()
            # Among plans that move as much, the one that holds less: a millionth
            # of a byte moved per byte held breaks ties and decides nothing else.
            tie_break = TIE_BREAK / max((speed for _, speed in self.cost_model.bandwidths),
                                        default=1.0)
            for _value, unit, per_device, _born, _last in memory:
                linear[unit] = linear[unit] + tie_break * per_device
            self._prefer(linear)
            # HiGHS's tolerances are absolute: prices of a few microseconds
            # sit under them, and its simplex wandered (Llama-3-8B's LP: 3.8 s
            # in seconds, 2.1 s in microseconds, the same optimum).
            scale = self.objective_scale
            if scale != 1.0:
                linear = [terms * scale for terms in linear]
                blocks = {key: matrix * scale for key, matrix in blocks.items()}
            problem = _Milp(self.units, self.variable_classes, linear, blocks)
            problem.take_mirrors(axis_swaps(self.units, self.variable_classes,
                                            self.layouts.axis_size))
            self._built = (problem, tie_break)
        problem, tie_break = self._built
        return problem, memory, tie_break

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
        """The cheapest plan within `memory_budget` (None: any size), found
        within `time_limit` seconds; where none fits holding every residual,
        the cheapest that recomputes what it must (`_Rematerializing`)."""
        started = time.perf_counter()
        self._recompute([])
        layers = self._layers() if memory_budget is not None and self.recompute else None
        if layers is None or not layers.segments:
            return self._solve(memory_budget, time_limit)
        # A program that can recompute does not seek the least memory a plan
        # holds without doing so (the least-memory program, for most of the
        # time left): where no plan fits in a share of the time, it recomputes.
        self._memory()
        if self.memory_floor <= memory_budget * (1 + 1e-9):
            try:
                return self._solve(memory_budget, time_limit * self.FIRST_SHARE,
                                   seek_least=False)
            except InfeasibleBudget:
                pass
            except SearchTimeLimit:
                if time.perf_counter() >= started + time_limit:
                    raise
        return self._solve_recomputing(memory_budget, started + time_limit)

    def _cheapest_strategies(self, deadline: float) -> list[int] | None:
        """The cheapest plan's strategies, of any size (solved once)."""
        if self._unbounded is None and time.perf_counter() < deadline:
            problem, _, _ = self._problem()
            started = time.perf_counter()
            try:
                self._unbounded = self._within_gap(problem, [], None, deadline)
            except SearchTimeLimit:
                return None
            self.cheapest_seconds = time.perf_counter() - started
        return None if self._unbounded is None else self._unbounded[0]

    def _solve(self, memory_budget: float | None, time_limit: float = 60.0,
               seek_least: bool = True) -> Plan:
        """`solve` with the memory terms as they are set; where no plan fits,
        the error names the least memory a plan reaches, unless not
        `seek_least` (the floor then: the search will recompute instead)."""
        started = time.perf_counter()
        self._memory()
        if memory_budget is not None and self.memory_floor > memory_budget * (1 + 1e-9):
            self._below_floor(memory_budget)
        problem, memory, tie_break = self._problem()
        problem.out_of_time = False
        # A point that overflowed one budget is worth bounding at the next.
        cuts: list[int] = self._cuts
        points = sorted({t for *_, b, l in memory for t in (b, l)})
        choice = None
        # Rows are linearized around the last plan, of this solve or the last.
        reference = self._reference
        # The cheapest plan seen that fits at every point (each round's
        # choice, and the relaxation's rounding beside the 0-1 program's): a
        # round whose plan overflows a point no row bounded is solved again,
        # and where the time limit ends that round, this plan is the answer.
        # (Llama-3-70B's step at 80 GiB: the 0-1 program's plan overflowed a
        # point beside the row's, and the next round had no time left.)
        seen: list = []
        fitting = None
        least: list = []   # (least peak, its plan, a floor) of each least-memory search
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

                def fitting_start(cuts=cuts):
                    # The least-memory plan, where the relaxation rounded to
                    # none: a start that fits, or the proof that none does.
                    # (Llama-3-8B on 256 devices at 40 GiB: the 0-1 program
                    # searched its 60 s for a plan where none fits.)
                    # A third of the time left: where it proves nothing, the
                    # 0-1 program gets the rest (Mixtral's least-memory
                    # program took 53 s to a plan twice the least).
                    left = max(1e-9, started + time_limit - time.perf_counter()) / 3
                    least.append(self._smallest_peak(problem, memory, points, cuts, left))
                    smallest, strategies, lower = least[-1]
                    if smallest <= memory_budget * (1 + 1e-9):
                        return strategies, False
                    return None, lower > memory_budget

                try:
                    choice = self._within_gap(problem, rows, memory_budget,
                                              started + time_limit, overflow,
                                              start=reference if fits else None,
                                              fallback=fitting_start if seek_least else None,
                                              seen=seen)
                except SearchTimeLimit:
                    if fitting is None and least and least[-1][1] and \
                            least[-1][0] <= memory_budget * (1 + 1e-9):
                        fitting = (least[-1][1], self._program_objective(least[-1][1]))
                    if fitting is not None:
                        choice = fitting
                        break
                    if not least or math.isinf(least[-1][0]):
                        raise
                    raise SearchTimeLimit(
                        f"no plan that fits a memory budget of {format_bytes(memory_budget)} "
                        "per device was found within the time limit; the "
                        f"least memory found is {format_bytes(least[-1][0])}, not proved the "
                        f"least (no plan holds less than {format_bytes(self.memory_floor)}); give "
                        "the search more time (time-limit)") from None
            if choice is None and least and least[-1][1] and \
                    least[-1][0] <= memory_budget * (1 + 1e-9):
                # The least-memory plan fits, though the rows, which bound a
                # plan's memory from above, cut it off as the 0-1 program's start.
                choice = (least[-1][1], self._program_objective(least[-1][1]))
            if choice is None and not seek_least:
                raise InfeasibleBudget(
                    f"no plan found fits a memory budget of {format_bytes(memory_budget)} per "
                    "device holding every residual", self.memory_floor)
            if choice is None:
                smallest = least[-1][0] if memory_budget is not None and rows and least else \
                    self._smallest_peak(problem, memory, points, cuts, time_limit)[0]
                if math.isinf(smallest):
                    raise InfeasibleBudget(
                        f"no plan fits a memory budget of {format_bytes(memory_budget)} per "
                        "device, and the least memory any plan reaches was not found within "
                        "the time limit", smallest)
                cut_short = (" (found when the time limit ended the search: the least may be "
                             "lower)" if time.perf_counter() >= started + time_limit else "")
                raise InfeasibleBudget(
                    f"no plan fits a memory budget of {format_bytes(memory_budget)} per device; "
                    f"the smallest budget found feasible is {format_bytes(smallest)} "
                    f"({int(math.ceil(smallest))} bytes){cut_short} {self._holding_all()}",
                    smallest)
            peak, at = self._peak(memory, choice[0], points)
            if memory_budget is None or peak <= memory_budget * (1 + 1e-9):
                break
            fitting = self._cheapest_fitting(memory, points, memory_budget, seen, fitting)
            if fitting is not None and time.perf_counter() >= started + time_limit:
                choice = fitting
                break
            if at in cuts and reference == choice[0]:
                if fitting is not None:
                    choice = fitting
                break
            reference = choice[0]
            if at not in cuts:
                cuts.append(at)
        if fitting is not None and choice is not fitting and (
                fitting[1] < choice[1] or
                self._peak(memory, choice[0], points)[0] > memory_budget * (1 + 1e-9)):
            choice = fitting
        strategies, objective = choice
        if memory_budget is not None:
            self._reference = strategies
        objective = max(0.0, objective / self.objective_scale - tie_break * sum(
            per_device[strategies[unit]] for _v, unit, per_device, _b, _l in memory))
        plan = self._plan(strategies, objective, points, started)
        # Every solve above runs to the one deadline, so reaching it means
        # one of them stopped on time rather than on its gap; one may also
        # not have started, with less time left than it would take.
        plan.time_limited = time.perf_counter() >= started + time_limit or problem.out_of_time
        return plan

    def _holding_all(self) -> str:
        """Why the figure is what every plan holds: no recomputation was allowed,
        or none the search can make frees any of it."""
        if not self.recompute:
            return "holding every value the backward reads (recomputing none)"
        return "holding every value the backward reads (no recomputation the search can " \
            "make frees any of it)"

    def _below_floor(self, memory_budget: float):
        """Refuse a budget under the memory floor, at once: with the floor,
        and with the cheapest plan's peak (a budget a plan fits) where that
        plan is solved already (the measured loop solves it first).  No
        program is solved for it: Llama-3-70B's on 1024 devices takes 4 s to
        build and 1.5 s to solve, for a peak of 227 GiB against a floor of
        107; the least-memory program (`least_memory`) finds less, in far
        more time than the refusal needs."""
        floor = self.memory_floor
        message = (f"no plan fits a memory budget of {format_bytes(memory_budget)} per device: "
                   f"every plan holds at least {format_bytes(floor)} ({int(math.ceil(floor))} "
                   f"bytes) at its fullest point, {self._holding_all()}")
        if self._unbounded is None:
            raise InfeasibleBudget(message, floor)
        memory = self._memory()
        points = sorted({t for *_, b, l in memory for t in (b, l)})
        smallest = self._peak(memory, self._unbounded[0], points)[0]
        raise InfeasibleBudget(
            f"{message}; the smallest budget found feasible is {format_bytes(smallest)} "
            f"({int(math.ceil(smallest))} bytes), the cheapest plan's", smallest)

    def _cheapest_fitting(self, memory, points, budget: float, seen: list, fitting):
        """The cheapest of `fitting` and the plans in `seen` (emptied) that fit
        `budget` at every point."""
        for strategies, cost in sorted(seen, key=lambda found: found[1]):
            if fitting is not None and cost >= fitting[1]:
                break
            if self._peak(memory, strategies, points)[0] <= budget * (1 + 1e-9):
                fitting = (strategies, cost)
                break
        seen.clear()
        return fitting

    @staticmethod
    def _within_gap(problem: _Milp, rows, budget, deadline: float, overflow=None,
                    start: list[int] | None = None, fallback=None, seen: list | None = None):
        """The relaxation's plan where it proves itself; else the 0-1
        program's, or, out of time for that, the relaxation's best.  Where
        `overflow` gives a new row for a plan of the relaxation's, the
        relaxation is solved again with it first.  `start`, a plan that
        satisfies `rows` within `budget`, is where the 0-1 program starts;
        without one, where the relaxation rounded to no plan, `fallback`
        gives (a plan that fits to start from, or None; whether none fits,
        proved): proved, None is the answer.  Each plan found is added to
        `seen`, where given."""
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
        if start is None and best is None and rows and fallback is not None:
            start, none_fits = fallback()
            if none_fits:
                return None
        if best is not None and deadline - time.perf_counter() < problem.lp_seconds:
            problem.out_of_time = True    # its root alone would not end in time
            return best
        if seen is not None and best is not None:
            seen.append(best)
        try:
            solved = problem.solve(rows, budget, max(1e-9, deadline - time.perf_counter()),
                                   start=start)
        except SearchTimeLimit:
            if best is None:
                raise
            return best
        if seen is not None and solved is not None:
            seen.append(solved)
        # Stopped by its time limit, the 0-1 program may return a plan dearer
        # than the relaxation's rounding (Mixtral's step at 80 GiB: 1,076 GiB
        # moved against 40 GiB), and both satisfy the rows.
        if best is not None and (solved is None or best[1] < solved[1]):
            return best
        return solved

    def least_memory(self, time_limit: float = 60.0) -> Plan:
        """The plan with the least estimated peak memory, whatever it moves."""
        started = time.perf_counter()
        problem, memory, _ = self._problem()
        points = sorted({t for *_, b, l in memory for t in (b, l)})
        _, strategies, _ = self._smallest_peak(problem, memory, points, self._cuts, time_limit)
        if not strategies:
            raise SearchTimeLimit("the solver found no plan of least memory within the time "
                                  "limit; give the search more time (time-limit)")
        objective = self._objective(strategies)
        return self._plan(strategies, objective, points, started)

    def _objective(self, strategies: list[int]) -> float:
        """What a plan moves, by the search's own prices."""
        _, memory, tie_break = self._problem()
        return max(0.0, self._program_objective(strategies) / self.objective_scale - tie_break
                   * sum(per_device[strategies[unit]] for _v, unit, per_device, _b, _l in memory))

    def _program_objective(self, strategies: list[int]) -> float:
        """The 0-1 program's objective at a plan (scaled, tie-break included)."""
        problem, _, _ = self._problem()
        linear, blocks = problem.parts
        total = sum(linear[unit][strategies[unit]] for unit in range(len(self.units))
                    if math.isfinite(linear[unit][strategies[unit]]))
        chosen = dict(zip(self.variable_classes, strategies))
        return total + sum(matrix[chosen[a], chosen[b]] for (a, b), matrix in blocks.items()
                           if math.isfinite(matrix[chosen[a], chosen[b]]))

    def _plan(self, strategies: list[int], objective: float, points, started: float) -> Plan:
        problem, memory, _ = self._problem()
        peak, _ = self._peak(memory, strategies, points)
        layouts, why, sum_targets, factor_axes = self._write(strategies)
        in_seconds = self.cost_model.in_seconds
        solve_seconds = time.perf_counter() - started
        return Plan(layouts, why, objective, peak, solve_seconds, self.build_seconds,
                    problem.variables, problem.constraints, len(self.units),
                    len(set(self.variable_classes)), in_seconds,
                    sum_targets=sum_targets, factor_axes=factor_axes,
                    moved_bytes=self._plan_bytes(strategies) if in_seconds else None,
                    compute_seconds=self._plan_compute(strategies))

    def _chosen(self, strategies: list[int]):
        """(node index, its strategy under the plan `strategies`) of each node with a unit."""
        for index in self.real_nodes:
            unit = self.unit_of_node.get(index, -1)
            if unit >= 0:
                yield index, self.node_strategy[index][strategies[unit]]

    def _plan_compute(self, strategies: list[int]) -> float:
        nodes = self.graph.nodes
        return float(sum(np.sum(self._compute(nodes[index], [strategy])) * nodes[index].repeats
                         for index, strategy in self._chosen(strategies)))

    def _plan_bytes(self, strategies: list[int]) -> float:
        """The bytes per device the plan's collectives deliver: `_edges` on its
        strategies alone, priced in bytes (the objective is, where it is bytes)."""
        return float(sum(moved for _, moved in self._site_prices(strategies).per_node.values()))

    def _smallest_peak(self, problem: _Milp, memory, points, cuts: list[int],
                       time_limit: float) -> tuple[float, list[int], float]:
        """The least peak memory of any plan, by the same cutting planes:
        minimize the peak over the cut points, measure the plan everywhere,
        cut where it overflows, until the measured peak is the minimized one.
        Returns (the least peak found, its plan, a peak no plan goes under):
        the last is the memory floor (`_floor`); a budget under it is proved
        infeasible.  Each round solves the program's LP relaxation and
        rounds it on its support (`_Milp.least_on_support`), and the rounds
        stop where the plan's measured peak is within `BOUNDED_GAP` of the
        rows' count: the whole 0-1 program, which proves its plan, took its
        60 s on Mixtral-8x7B's full-depth step, out of time, to 63.7 GiB;
        the first rounding, 2.6 s to 64.2 GiB.

        The rows start linearized around the cheapest plan of any size, so
        that its copies count from the first round, and each plan pays
        `LEAST_MEMORY_COST_WEIGHT` of its cost scaled to the cheapest plan's
        peak: without either, the first round's plan moved everything it
        could (copies free at the rows' points) and Llama-3-8B's least
        memory came out at 434 GiB, its cost 2,000 times the cheapest."""
        cuts = list(cuts)
        best, best_strategies, lower = math.inf, [], self.memory_floor
        deadline = time.perf_counter() + time_limit
        cheapest = self._cheapest(problem, deadline)
        reference, weight = None, 0.0
        if cheapest is not None:
            reference = cheapest[0]
            peak, at = self._peak(memory, reference, points)
            weight = LEAST_MEMORY_COST_WEIGHT * peak / max(
                cheapest[1], LEAST_MEMORY_COST_WEIGHT * peak, 1e-30)
            if reference and not cuts:
                cuts = [at]
            # A plan of any size is a plan: the least is never above its peak
            # (Mixtral's least-memory program had found 213 GiB, against plans
            # of 77 GiB the search had measured).
            best, best_strategies = peak, reference
        for _round in range(12):
            rows = [self._memory_row(memory, t, reference) for t in cuts]
            if _round and time.perf_counter() >= deadline:
                break
            left = max(1e-9, deadline - time.perf_counter())
            found = problem.least_on_support(rows, left, weight)
            if found is None:
                # Where the rounding finds none, the whole program, in the
                # time left.  No start: given the cheapest plan, HiGHS
                # returned it unimproved at its time limit where, left to its
                # own heuristics, it found Llama-3-70B a plan of 141 GiB.
                try:
                    found = problem.solve(rows, None, max(1e-9, deadline - time.perf_counter()),
                                          minimize_peak=True, cost_weight=weight)
                except SearchTimeLimit:   # out of time: the least found so far stands
                    found = None
            if found is None:
                break
            strategies, bound = found
            peak, at = self._peak(memory, strategies, points)
            if peak < best:
                best, best_strategies = peak, strategies
            # The rows are the estimate's, as close as it is to XLA's count.
            if peak <= bound * (1 + BOUNDED_GAP) or (at in cuts and reference == strategies):
                break
            reference = strategies
            if at not in cuts:
                cuts.append(at)
        return best, best_strategies, lower

    def _cheapest(self, problem: _Milp, deadline: float):
        """The cheapest plan of any size, (strategies, cost), solved once;
        None where no time is left for it."""
        if self._unbounded is None and time.perf_counter() < deadline:
            try:
                self._unbounded = self._within_gap(problem, [], None, deadline)
            except SearchTimeLimit:
                return None
        return self._unbounded

    def _write(self, strategies: list[int]):
        graph = self.graph
        layouts: list[Sharding | None] = [None] * len(graph.shapes)
        why = [""] * len(graph.shapes)
        sum_targets: dict[int, Sharding] = {}
        factor_axes: dict[int, tuple] = {}
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
            node = graph.nodes[index]
            if self.units[unit].owner == index and self.units[unit].kind == "op" \
                    and _is_contraction(node.rule) and node.results \
                    and node.results[0] != NO_VALUE:
                factor_axes[node.results[0]] = strategy.axes
            for value, partial in zip(node.results, strategy.unsummed):
                if partial is not None:
                    layouts[value] = partial   # summed where it crosses into its tied values
            for position, partial in enumerate(strategy.finished):
                value = graph.nodes[index].results[position]
                if partial is None or self.class_size[self.root[value]] > 1 or \
                        self.root[value] in self.pinned_roots or \
                        layouts[value] is not strategy.results[position]:
                    continue
                # Written Partial and summed at once, so that one sum
                # serves every reader.
                layouts[value] = partial
                sum_targets[value] = strategy.results[position]
                why[value] += f"; written Partial and summed at once into {sum_targets[value]}"
        for value, (node_index, position) in self.free_sources.items():
            unit = self.unit_of_node.get(node_index, -1)
            if unit >= 0:
                layouts[value] = self.node_strategy[node_index][strategies[unit]].operands[position]
            else:
                layouts[value] = self.layouts.get(((),) * len(graph.shapes[value]))
            why[value] = "built from scalars: laid out as its one consumer reads it"
        for root in self.shared_reads:
            (node_index, position), = self.producers[root]
            unit = self.unit_of_node[node_index]
            written = self.node_strategy[node_index][strategies[unit]].results[position]
            kept = layouts[root]
            if written is not None and written.unreduced and not kept.unreduced:
                layouts[root] = written
                sum_targets[root] = kept
                why[root] += f"; written Partial and summed once into {kept} for its readers"
        return layouts, why, sum_targets, factor_axes
