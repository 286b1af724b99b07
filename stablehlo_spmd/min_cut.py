"""The cheapest cut of a flow network: which nodes stay with the source.

Propagation asks where to sum partial values (`Propagator._choose_where_to_sum`):
each value is kept partial (the source's side) or made whole (the sink's
side), and a cut edge is a sum paid for.  The networks are one partial
region each, tens to a few hundred nodes, so a plain augmenting-path
max-flow (Edmonds-Karp, breadth first) is enough; capacities are bytes,
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
        while True:
            path = _shortest_path(residual)
            if path is None:
                break
            pushed = min(residual[tail][head] for tail, head in path)
            if math.isinf(pushed):
                raise ValueError("no finite cut separates the source from the sink")
            for tail, head in path:
                residual[tail][head] -= pushed
                residual[head][tail] += pushed
        return _reaching(residual, SINK)


def _shortest_path(residual) -> list[tuple[Hashable, Hashable]] | None:
    previous: dict[Hashable, Hashable] = {SOURCE: SOURCE}
    queue = collections.deque([SOURCE])
    while queue:
        tail = queue.popleft()
        for head, left in residual[tail].items():
            if left > _SPENT and head not in previous:
                previous[head] = tail
                if head == SINK:
                    path, node = [], SINK
                    while node != SOURCE:
                        path.append((previous[node], node))
                        node = previous[node]
                    return path[::-1]
                queue.append(head)
    return None


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
