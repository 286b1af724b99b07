"""The cheapest cut of a flow network: which nodes stay with the source.

Propagation asks where to sum partial values (`Propagator._choose_where_to_sum`):
each value is kept partial (the source's side) or made whole (the sink's
side), and a cut edge is a sum paid for.  The networks are one partial
region each, from a few nodes to a few thousand (a residual stream whose
partial adds chain every layer), so the max-flow is Dinic's: one
breadth-first pass per round of shortest paths, where a pass per path took
half of propagation's added time on a 16-layer step.  Capacities are bytes,
floats, and `math.inf` marks an edge no cut may cross.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Hashable, Iterable

SOURCE = "source"
SINK = "sink"
# Residual capacity below this is spent: capacities are bytes, so this is
# far below any real difference.
_SPENT = 1e-6


class FlowNetwork:
    """Directed edges with capacities; parallel edges add up."""

    def __init__(self) -> None:
        self.capacity: dict[Hashable, dict[Hashable, float]] = collections.defaultdict(dict)

    def edge(self, tail: Hashable, head: Hashable, capacity: float) -> None:
        out = self.capacity[tail]
        out[head] = out.get(head, 0.0) + capacity
        self.capacity[head].setdefault(tail, 0.0)   # the residual reverse edge

    def sink_side(self) -> set[Hashable]:
        """The nodes on the sink's side of a cheapest cut: those that still
        reach the sink once the most flow runs.  Where several cuts cost the
        same, this is the smallest sink side: ties stay with the source."""
        residual = {tail: dict(heads) for tail, heads in self.capacity.items()}
        if SOURCE not in residual or SINK not in residual:
            return set()
        heads = {node: list(out) for node, out in residual.items()}   # reverse edges included
        while True:
            level = _levels(residual)
            if SINK not in level:
                break
            next_edge = dict.fromkeys(level, 0)
            while _augment(residual, level, heads, next_edge):
                pass
        return _reaching(residual, SINK)


def _levels(residual) -> dict[Hashable, int]:
    """Each node's distance from the source over residual edges."""
    level = {SOURCE: 0}
    queue = collections.deque([SOURCE])
    while queue:
        tail = queue.popleft()
        for head, left in residual[tail].items():
            if left > _SPENT and head not in level:
                level[head] = level[tail] + 1
                queue.append(head)
    return level


def _augment(residual, level, heads, next_edge) -> bool:
    """Push flow along one shortest residual path (Dinic's blocking flow, one
    path at a time: each node resumes at the edge it last tried); False where
    none is left at these levels."""
    path = [SOURCE]
    while path:
        node = path[-1]
        if node == SINK:
            edges = list(zip(path, path[1:]))
            pushed = min(residual[tail][head] for tail, head in edges)
            if math.isinf(pushed):
                raise ValueError("no finite cut separates the source from the sink")
            for tail, head in edges:
                residual[tail][head] -= pushed
                residual[head][tail] += pushed
            return True
        out = heads[node]
        while next_edge[node] < len(out):
            head = out[next_edge[node]]
            if level.get(head) == level[node] + 1 and residual[node][head] > _SPENT:
                path.append(head)
                break
            next_edge[node] += 1
        else:
            path.pop()   # a dead end at these levels
            if path:
                next_edge[path[-1]] += 1
    return False


def _reaching(residual, target: Hashable) -> set[Hashable]:
    """Every node with a residual path to `target`."""
    into: dict[Hashable, list[Hashable]] = collections.defaultdict(list)
    for tail, heads in residual.items():
        for head, left in heads.items():
            if left > _SPENT:
                into[head].append(tail)
    found, queue = {target}, collections.deque([target])
    while queue:
        for tail in into[queue.popleft()]:
            if tail not in found:
                found.add(tail)
                queue.append(tail)
    return found


def sink_side(edges: Iterable[tuple[Hashable, Hashable, float]]) -> set[Hashable]:
    """`FlowNetwork.sink_side` of the network these edges make, solved one
    weakly connected part at a time (the source and sink shared)."""
    edges = list(edges)
    parent: dict[Hashable, Hashable] = {}

    def find(node):
        while parent.setdefault(node, node) != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for tail, head, _ in edges:
        if tail in (SOURCE, SINK):
            find(head)
        elif head in (SOURCE, SINK):
            find(tail)
        else:
            parent[find(tail)] = find(head)
    parts: dict[Hashable, FlowNetwork] = collections.defaultdict(FlowNetwork)
    for tail, head, capacity in edges:
        parts[find(head if tail in (SOURCE, SINK) else tail)].edge(tail, head, capacity)
    found: set[Hashable] = set()
    for network in parts.values():
        found |= network.sink_side() - {SINK}
    return found
