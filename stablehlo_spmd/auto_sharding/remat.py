"""Where a training step can recompute activations instead of holding them.

A step's forward writes values its backward reads again (autodiff's
residuals); held from the forward to the backward, they are most of what
a full-depth step holds at its fullest point.  Recomputing a layer's
forward in the backward, from what the layer read (its input and its
weights), frees them in between: ``jax.checkpoint``'s trade.  This module
finds, in a program without any such annotation, the spans it can
recompute; `Search` decides which to (`Search.solve`), and
`passes/rematerialize.py` writes the recomputation into the program.

*The boundary* between forward and backward is the program point where the
values read both before and after it take the most bytes
(`Layers.boundary`): where every residual is held, which the forward has
read and the backward will read again.  JAX writes a step's forward ops
before its backward ones, and so does every front end here.

*Segments.*  Between two layers of a residual network only the residual
stream crosses: the values the forward made and its later ops still read
(the *cut*) are a single activation there, and more inside a layer.  The
forward is cut at the local minima of the cut that the most minima share
(`_boundaries`: the residual stream's size, which a transformer reaches
after each attention block and each MLP block), and each stretch between
two cuts is a `Segment`.  Segments whose ops are the same ops on the same
shapes are copies of one *class* (the layers of an unrolled stack),
recomputed alike.

*Residuals.*  A segment's residuals are the values it makes that the
backward reads, except those a later segment reads too (the residual stream
at a cut: a recomputation reads it, so it is held in any case) and those a
tie reads (a value the program returns, or hands to a loop or a call).
Recomputing a segment frees each residual from its last forward read to the
first backward read of any (`Recomputation.at`), where the recomputation
makes it again.  Under ``full`` every residual is recomputed from the
segment's inputs; under ``minimal`` (``jax.checkpoint_policies.
dots_with_no_batch_dims_saveable``, MaxText's ``minimal``) the results of
the contractions without batch dims (the projections) are kept, held until
the recomputation, and the rest is recomputed from them: no projection runs
twice, and so none of the collectives a projection needs.

Loops are left alone: a scanned step's layers are one loop, whose body
``jax.checkpoint`` already decides (`Layers.segments` holds no op inside a
loop).
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import math
import time
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from stablehlo_spmd.auto_sharding.graph import (
    InfeasibleBudget, Plan, SearchTimeLimit, format_bytes)
from stablehlo_spmd.auto_sharding.program import BOUNDED_GAP
from stablehlo_spmd.auto_sharding.strategies import _is_contraction, _shards, contraction_flops
from stablehlo_spmd.op_graph import NO_VALUE, Node
from stablehlo_spmd.op_rules import FactorKind, OpRule

POLICIES = ("full", "minimal")
# Minima of the cut within this of each other are one value (`_boundaries`).
CUT_SLACK = 0.05


@dataclasses.dataclass(frozen=True)
class Segment:
    first: int                          # its nodes: [first, end) in program order
    end: int
    signature: int                      # equal for copies of one layer
    residuals: tuple[int, ...]          # values the backward reads, freed when recomputed
    forward_last: dict                  # residual -> its last read before the boundary


@dataclasses.dataclass(frozen=True)
class Recomputation:
    """One segment recomputed under a policy: the nodes to run again, in
    program order (the freed residuals' producers and what they need within
    the segment, stopping at the contractions' results under ``minimal``),
    where (`at`: before the first backward read of a freed residual), what
    it frees (each from its last forward read to `at`) and what it reads
    that must be held until `at` (the segment's inputs, and the kept
    contractions' results)."""

    segment: Segment
    policy: str
    nodes: tuple[int, ...]
    freed: tuple[int, ...]
    held: tuple[int, ...]
    at: int
    flops: float                        # of the contractions run again
    boundary: int                       # `Layers.boundary`: the backward's first node

    def spans(self) -> dict[int, tuple[int, int]]:
        """Each freed residual's (last forward read, where it is made again)."""
        return {v: (self.segment.forward_last[v], self.at) for v in self.freed}


@dataclasses.dataclass
class Layers:
    boundary: int                       # the node before which the backward starts
    segments: list[Segment]
    classes: dict[int, list[int]]       # signature -> its segments' indices, forward order
    reads: dict[int, list[int]]         # value -> the nodes reading it, in program order

    def recomputation(self, graph_nodes: Sequence[Node], index: int,
                      policy: str) -> Recomputation | None:
        """Segment `index` recomputed under `policy`; None where it frees nothing."""
        segment = self.segments[index]
        made_here = {}
        for position in range(segment.first, segment.end):
            for value in graph_nodes[position].results:
                if value != NO_VALUE:
                    made_here[value] = position
        kept = frozenset(v for v, p in made_here.items()
                         if policy == "minimal" and _saveable(graph_nodes[p].rule))
        freed = tuple(v for v in segment.residuals if v not in kept)
        if not freed:
            return None
        needed: set[int] = set()
        stack = [made_here[v] for v in freed]
        while stack:
            position = stack.pop()
            if position in needed:
                continue
            needed.add(position)
            for operand in graph_nodes[position].operands:
                source = made_here.get(operand)
                if source is not None and operand not in kept:
                    stack.append(source)
        nodes = tuple(sorted(needed))
        made = {v for p in nodes for v in graph_nodes[p].results if v != NO_VALUE}
        held = tuple(sorted({v for p in nodes for v in graph_nodes[p].operands
                             if v != NO_VALUE and v not in made}))
        at = min(r for v in freed for r in self.reads[v] if r >= self.boundary)
        flops = sum(contraction_flops(graph_nodes[p].rule) for p in nodes
                    if _is_contraction(graph_nodes[p].rule))
        return Recomputation(segment, policy, nodes, freed, held, at, flops, self.boundary)


def _saveable(rule: OpRule) -> bool:
    """A contraction with no batch dims (a projection, not attention's
    scores): what ``dots_with_no_batch_dims_saveable`` keeps."""
    if not _is_contraction(rule):
        return False
    shared = collections.Counter(f for tensor in rule.operands for f in
                                 {f for dim in tensor for f in dim})
    return not any(count >= 2 and rule.factor_kinds[f] is FactorKind.PASS_THROUGH
                   for f, count in shared.items())


def find_layers(nodes: Sequence[Node], shapes: Sequence[tuple[int, ...]],
                nbytes: Sequence[float], arguments: set[int]) -> Layers | None:
    """The program's recomputable segments, or None where it has no backward
    to hold residuals for."""
    produced: dict[int, int] = {}
    reads: dict[int, list[int]] = collections.defaultdict(list)
    tied: set[int] = set()   # values a tie reads: returned, or handed to a loop or call
    for index, node in enumerate(nodes):
        for value in node.results:
            if value != NO_VALUE:
                produced.setdefault(value, index)
        for value in node.operands:
            if value != NO_VALUE:
                reads[value].append(index)
                if node.is_tie:
                    tied.add(value)
    boundary = _boundary(len(nodes), produced, reads, nbytes, arguments)
    if boundary is None:
        return None
    cuts = _boundaries(nodes, produced, reads, nbytes, arguments, boundary)
    segments = []
    for first, end in zip([0, *cuts], [*cuts, boundary]):
        if end <= first or any(nodes[i].loops for i in range(first, end)):
            continue
        segment = _segment(nodes, shapes, reads, tied, first, end, boundary)
        if segment.residuals:
            segments.append(segment)
    classes: dict[int, list[int]] = collections.defaultdict(list)
    for index, segment in enumerate(segments):
        classes[segment.signature].append(index)
    return Layers(boundary, segments, dict(classes), dict(reads))


def _boundary(count: int, produced, reads, nbytes, arguments) -> int | None:
    """The node where the values read both before and after it take the most
    bytes (see the module docstring); None for a program none is read across.

    Read across, not merely held: a gradient made in the backward and read
    once by the update at the end is held across every node in between, and
    where weights are as large as activations (a small model, a large
    batch of them) such gradients would put the peak of what is held deep in
    the backward."""
    delta = [0.0] * (count + 2)
    for value, index in produced.items():
        read = reads.get(value)
        if value in arguments or not read or read[0] == read[-1]:
            continue
        delta[read[0] + 1] += nbytes[value]
        delta[read[-1] + 1] -= nbytes[value]
    best, at, live = 0.0, None, 0.0
    for index in range(count):
        live += delta[index]
        if live > best:
            best, at = live, index
    return at


def _boundaries(nodes, produced, reads, nbytes, arguments, boundary: int) -> list[int]:
    """The forward's cuts of least bytes (`CUT_SLACK`), each the first of a run."""
    delta = [0.0] * (boundary + 2)
    for value, index in produced.items():
        if value in arguments or index >= boundary:
            continue
        # (The boundary's own node reads what the forward ends in: a cut
        # before it still holds that.)
        forward = [r for r in reads.get(value, ()) if r <= boundary]
        if forward and max(forward) > index:
            delta[index + 1] += nbytes[value]
            delta[max(forward) + 1] -= nbytes[value]
    cut, live = [], 0.0
    for index in range(boundary):
        live += delta[index]
        cut.append(live)
    # The layers start after the first contraction: what comes before is the
    # embedding's prologue, whose cuts are the inputs' alone.
    start = next((i for i in range(boundary) if _is_contraction(nodes[i].rule)), boundary)
    minima = [t for t in range(start + 1, boundary - 1)
              if 0 < cut[t] < cut[t - 1] and cut[t] <= cut[t + 1] and not nodes[t].loops]
    if not minima:
        return []
    # The cut a layer stack repeats: the value the most minima share (within
    # `CUT_SLACK`), the least of those that tie.  The forward's tail (a loss
    # reduced to scalars) cuts smaller, but once.
    ordered = sorted(minima, key=lambda t: cut[t])
    sizes = [cut[t] for t in ordered]
    best = (0, 0)   # the run of `ordered` within CUT_SLACK of its first, longest
    for first, size in enumerate(sizes):
        end = bisect.bisect_right(sizes, size * (1 + CUT_SLACK), lo=first)
        if end - first > best[1] - best[0]:
            best = (first, end)
    return sorted(ordered[best[0]:best[1]])


def _segment(nodes, shapes, reads, tied: set[int], first: int, end: int,
             boundary: int) -> Segment:
    residuals, forward_last = [], {}
    signature = []
    for index in range(first, end):
        node = nodes[index]
        signature.append((node.label, tuple(shapes[v] for v in node.results if v != NO_VALUE)))
        for value in node.results:
            if value == NO_VALUE:
                continue
            backward = [r for r in reads.get(value, ()) if r >= boundary]
            forward = [r for r in reads.get(value, ()) if r < boundary]
            if not backward or any(r >= end for r in forward) or value in tied:
                continue
            residuals.append(value)
            forward_last[value] = max(forward, default=index)
    return Segment(first, end, hash(tuple(signature)), tuple(residuals), forward_last)


class SitePrices(NamedTuple):
    """What a plan costs where each node runs (`_Rematerializing._site_prices`).

    `per_node`: node -> (price, bytes): its own sums and arithmetic, and the
    moves made where it runs.  `summed`: (node, value) -> (price, bytes) of
    the moves among those that only sum a pending partial value (the same
    dims split, the unreduced axes reduced).  A recomputation does not pay
    those again for a value it holds: the partitioner sums a partial once,
    where propagation settles it, and the barrier carries the sum (a
    residual stream's all-reduce, which a Megatron layer's recomputed
    forward starts from)."""

    per_node: dict[int, tuple[float, float]]
    summed: dict[tuple[int, int], tuple[float, float]]


class _Rematerializing:
    """The part of `Search` that decides what to recompute, where no plan fits
    the budget holding every residual: which layer classes (`Layers.classes`),
    under which policy, and how many of their copies (the earliest first:
    their residuals are held the longest, from early in the forward to late
    in the backward).

    A recomputation reruns its segment's ops in the layouts the plan gives
    the originals, so it adds no variable to the 0-1 program: it changes the
    memory terms (`_Memory.recomputed`, `_Memory.held_until`) and adds its
    price, what its ops cost again under the plan (the sums and moves into
    them, and in seconds their arithmetic).  The choice is greedy on the
    price per byte freed, priced under the cheapest plan of any size: add
    copies of the cheapest option until the memory floor fits the budget,
    solve, and add more where the program still finds no plan.  The plan's
    own price is then counted under its own strategies.  (A joint choice,
    with a recompute count per class inside the 0-1 program, is the package
    docstring's design; the greedy one finds the least recomputation that
    fits, which is what a budget asks for.)
    """

    # Where a solve finds no plan with the floor under the budget, the next
    # step frees at least this share of the budget more.
    REMAT_STEP = 0.05
    # The share of the time limit a plan holding every residual is sought in,
    # before recomputing.
    FIRST_SHARE = 1 / 3
    # A class whose copies together free less than this share of the budget
    # is not recomputed.
    REMAT_LEAST = 1e-3
    # The least time a gamble on less recomputation gets, beside a plan found.
    GAMBLE_SECONDS = 1.0

    def _layers(self) -> Layers | None:
        if not hasattr(self, "_found_layers"):
            graph = self.graph
            self._found_layers = find_layers(graph.nodes, graph.shapes, self.nbytes,
                                             set(graph.arguments))
        return self._found_layers

    def _recompute(self, recomputations: Sequence[Recomputation]) -> None:
        """Set the memory terms to those of a plan recomputing `recomputations`."""
        if not recomputations and not self.recomputed and not self.held_until:
            return
        self.recomputed = {v: span for r in recomputations for v, span in r.spans().items()}
        held: dict[int, int] = {}
        for r in recomputations:
            for value in r.held:
                held[value] = max(held.get(value, 0), r.at)
        self.held_until = held
        self._memory_built = None

    def _site_prices(self, strategies: list[int]) -> SitePrices:
        """What each node costs under plan `strategies` (`SitePrices`), once per
        run of the loops around it.  (The last plan's are kept: one walk over
        every edge serves its recomputations and its bytes.)"""
        key = tuple(strategies)
        kept = getattr(self, "_site_prices_of", None)
        if kept is not None and kept[0] == key:
            return kept[1]
        nodes = self.graph.nodes
        prices: dict[int, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
        summed: dict[tuple[int, int], tuple[float, float]] = {}
        for index, strategy in self._chosen(strategies):
            entry = prices[index]
            repeats = nodes[index].repeats
            entry[0] += (strategy.cost + float(np.sum(self._compute(nodes[index], [strategy])))) \
                * repeats
            entry[1] += strategy.moved * repeats
        for unit_a, layouts_a, unit_b, layouts_b, value, reader, site in self._pairs():
            held, read = layouts_a[strategies[unit_a]], layouts_b[strategies[unit_b]]
            if reader in self.stored_followers and \
                    nodes[reader].operands[self.leader[reader]] == value:
                price = self._follower_price(reader, value, held, strategies[unit_b])
            elif held is None or read is None:
                continue
            else:
                price = (self.cost(held, read, value), self.moved_bytes(held, read, value))
            repeats = nodes[site].repeats
            entry = prices[site]
            entry[0] += price[0] * repeats
            entry[1] += price[1] * repeats
            if held is not None and read is not None and held.unreduced and \
                    not read.unreduced and held.dim_axes == read.dim_axes:
                summed[site, value] = (price[0] * repeats, price[1] * repeats)
        found = SitePrices({index: (a, b) for index, (a, b) in prices.items()}, summed)
        self._site_prices_of = (key, found)
        return found

    @staticmethod
    def _rerun_price(recomputation: Recomputation, prices: SitePrices) -> tuple[float, float]:
        """(price, bytes) of running `recomputation`'s nodes again: their own
        costs and the moves made where they run, but not the sum of a pending
        partial value it holds (`SitePrices.summed`)."""
        price = moved = 0.0
        for index in recomputation.nodes:
            found = prices.per_node.get(index)
            if found is not None:
                price += found[0]
                moved += found[1]
        for value in recomputation.held:
            for index in recomputation.nodes:
                found = prices.summed.get((index, value))
                if found is not None:
                    price -= found[0]
                    moved -= found[1]
        return price, moved

    def _held_bytes(self, value: int, strategies: list[int] | None) -> float:
        """The bytes a device holds of `value` under the plan `strategies` (the
        fewest in any layout it may take, without a plan)."""
        found = self.value_layouts(value)
        if found is None:
            return float(self.computed_nbytes[value])
        unit, layouts = found
        if strategies is not None and layouts[strategies[unit]] is not None:
            return self.computed_nbytes[value] / _shards(self.layouts, layouts[strategies[unit]])
        return min(self.computed_nbytes[value] / _shards(self.layouts, layout)
                   for layout in layouts if layout is not None)

    def _solve_recomputing(self, budget: float, deadline: float) -> Plan:
        """The cheapest plan within `budget` that recomputes what it must (see
        the class docstring)."""
        layers = self._layers()
        last_read = {v: rs[-1] for v, rs in layers.reads.items()}
        reference = self._cheapest_strategies(deadline)
        prices = self._site_prices(reference) if reference is not None else SitePrices({}, {})
        options = {}   # (class, policy) -> (recomputations in forward order, price of one)
        for signature, members in layers.classes.items():
            for policy in POLICIES:
                found = [layers.recomputation(self.graph.nodes, i, policy) for i in members]
                if not found or any(r is None for r in found):
                    continue
                first = found[0]
                freed = sum(self._held_bytes(v, reference) for v in first.freed)
                if freed * len(found) <= self.REMAT_LEAST * budget:
                    continue   # (a norm's statistics: not worth a barrier)
                options[signature, policy] = (found, self._rerun_price(first, prices)[0])
        if not options:
            return self._solve(budget, max(1e-9, deadline - time.perf_counter()))
        chosen: dict[int, tuple[str, int]] = {}   # class -> (policy, copies)
        self._recompute([])
        self._memory()
        holding_all = self.memory_floor
        smallest = math.inf
        best = None
        least_fitting = None   # the least recomputation whose floor fits the budget
        fullest = (math.inf, [])   # the least the cheapest plan held, and with what
        while time.perf_counter() < deadline:
            recomputations = [r for signature, (policy, count) in chosen.items()
                              for r in options[signature, policy][0][:count]]
            self._recompute(recomputations)
            memory = self._memory()
            smallest = min(smallest, self.memory_floor)
            fits = self.memory_floor <= budget * (1 + 1e-9)
            if chosen and fits and least_fitting is None:
                least_fitting = recomputations
            points = sorted({t for *_, b, last in memory for t in (b, last)})
            peak, at = self._peak(memory, reference, points) if reference else (math.inf, None)
            if chosen and peak >= fullest[0] * (1 - self.REMAT_STEP / 10):
                # Recomputing more no longer shrinks what the cheapest plan
                # holds (what else it holds is over the budget): a plan that
                # moves more must fit instead.
                break
            fullest = min(fullest, (peak, recomputations), key=lambda found: found[0])
            if chosen and peak <= budget * (1 + 1e-9):
                # The cheapest plan of any size fits: recomputing more could
                # only cost more.
                best = self._with_recomputations(self._solve(
                    None, max(1e-9, deadline - time.perf_counter())), recomputations, reference)
                break
            # Recompute enough for the cheapest plan to fit (past the floor
            # by at least a step, where its own estimate fits already).
            needed = (peak if reference else self.memory_floor) - budget


            if fits:
                needed = max(needed, self.REMAT_STEP * budget)
            gains = {key: [self._gain(r, at, reference, last_read) for r in found]
                     for key, (found, _) in options.items()}
            step = _next_recomputation(options, gains, chosen, needed)
            if step is None:
                break
            chosen[step[0]] = step[1:]
        # Less recomputation, where the floor fits, with a plan that moves more
        # to fit: worth a solve only where its price could undercut the best by
        # more than the gap a bounded plan is proved to (`BOUNDED_GAP`).  Where
        # the cheapest plan fitted under no recomputation, the one it came
        # nearest under is tried first, with whatever plan fits it.
        tries = [least_fitting] if best is not None else [fullest[1], least_fitting]
        least_found = math.inf   # the least peak a plan recomputing some was found to hold
        for number, trial in enumerate(tries):
            if trial is None or trial in tries[:number] or (best is not None and (
                    trial == list(best.recomputations) or reference is None or
                    self._unbounded[1] / self.objective_scale
                    + sum(self._rerun_price(r, prices)[0] for r in trial)
                    >= best.cost * (1 - BOUNDED_GAP))):
                continue
            self._recompute(trial)
            # A gamble where a plan stands already: as long as the cheapest
            # plan took to find (`GAMBLE_SECONDS` at least), and no longer.
            left = deadline - time.perf_counter()
            if best is not None:
                left = min(left, max(self.GAMBLE_SECONDS, self.cheapest_seconds))
            # Without a plan yet, the solve seeks one of least memory where none
            # fits: a start that fits, or the least the error names.
            seek_least = best is None
            try:
                plan = self._with_recomputations(self._solve(
                    budget, max(1e-9, left), seek_least=seek_least), trial, self._reference)
            except InfeasibleBudget as error:
                if seek_least:
                    least_found = min(least_found, error.smallest)
                continue
            except SearchTimeLimit:
                continue
            if best is None or plan.cost < best.cost:
                best = plan
            break
        if best is not None:
            self._recompute(best.recomputations)
            return best
        self._recompute([])
        if smallest >= holding_all * (1 - 1e-9):
            # Recomputing frees nothing at the fullest point: the budget is
            # refused as one holding every residual is.
            return self._solve(budget, max(1e-9, deadline - time.perf_counter()))
        if time.perf_counter() >= deadline:
            raise SearchTimeLimit(
                "the solver found no plan within the time limit that fits a memory budget of "
                f"{format_bytes(budget)} per device, holding every residual or recomputing some; "
                "give the search more time (time-limit)")
        if math.isinf(least_found):
            raise InfeasibleBudget(
                f"no plan fits a memory budget of {format_bytes(budget)} per device, even "
                f"recomputing every layer's activations it can in the backward (the plans hold "
                f"then at least {format_bytes(smallest)}, {int(math.ceil(smallest))} bytes)",
                smallest)
        # The least found is not offered as a budget: with another budget the
        # search recomputes other layers, and its least-memory rounding is
        # unproved (a step of residual layers: 42.5 MiB found under a budget
        # of 38.7, 43.0 under one of 42.5).
        raise InfeasibleBudget(
            f"no plan fits a memory budget of {format_bytes(budget)} per device, even "
            "recomputing every layer's activations it can in the backward (the least a plan "
            f"was found to hold is {format_bytes(least_found)}, not proved the least; no plan "
            f"holds less than {format_bytes(smallest)}, {int(math.ceil(smallest))} bytes)",
            smallest)

    def _gain(self, recomputation: Recomputation, at: int | None, strategies,
              last_read: dict[int, int]) -> float:
        """The bytes `recomputation` frees at program point `at` under the plan
        `strategies` (what it frees there, less what it holds longer there);
        without a point, what it frees."""
        freed = sum(self._held_bytes(v, strategies) for v, (last, again)
                    in recomputation.spans().items() if at is None or last < at < again)
        held = sum(self._held_bytes(v, strategies) for v in recomputation.held
                   if v not in self.argument_roots and at is not None
                   and last_read.get(v, 0) < at <= recomputation.at)
        return freed - held

    def _with_recomputations(self, plan: Plan, recomputations, strategies) -> Plan:
        """`plan` (solved with `recomputations`' memory, `strategies` its
        choices) with their price under it added to its cost."""
        prices = self._site_prices(strategies)
        price = moved = compute = 0.0
        for r in recomputations:
            p, b = self._rerun_price(r, prices)
            price, moved = price + p, moved + b
            compute += sum(float(np.sum(self._compute(self.graph.nodes[i], [
                self.node_strategy[i][strategies[self.unit_of_node[i]]]])))
                for i in r.nodes if self.unit_of_node.get(i, -1) >= 0)
        return dataclasses.replace(
            plan, cost=plan.cost + price, recomputations=tuple(recomputations),
            recompute_cost=price, compute_seconds=plan.compute_seconds + compute,
            moved_bytes=None if plan.moved_bytes is None else plan.moved_bytes + moved)


def _next_recomputation(options, gains, chosen, needed: float):
    """(class, policy, copies): the step that frees `needed` more bytes at the
    fullest point (or as many as it can) at the least price per byte freed;
    None where nothing frees more.  A class's copies are taken in forward
    order, and a class takes one policy."""
    best, best_ratio = None, math.inf
    for (signature, policy), (found, price) in options.items():
        current_policy, current = chosen.get(signature, (policy, 0))
        old = gains[signature, current_policy][:current] if current else []
        now_freed, now_price = sum(old), options[signature, current_policy][1] * len(old)
        mine = gains[signature, policy]
        start = current if policy == current_policy else 0
        copies, freed = start, sum(mine[:start])
        while copies < len(found) and freed - now_freed < needed:
            freed += mine[copies]
            copies += 1
        gained = freed - now_freed
        if copies == current and policy == current_policy or gained <= 0:
            continue
        ratio = (price * copies - now_price) / gained
        if ratio < best_ratio:
            best, best_ratio = (signature, policy, copies), ratio
    return best
