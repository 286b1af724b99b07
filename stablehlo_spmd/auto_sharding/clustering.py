"""Which choices are made once: tied values, and the units of repeated layers.

Values tied together (while carries, call arguments, function results, a
step's carried pairs) share one layout: `_UnionFind` joins them into a
value class.  Units whose ops look the same from WL_ROUNDS hops away
(Weisfeiler-Lehman hashes over the op graph: op, rule, shapes and
annotations, then their neighbours') share one set of variables
(`cluster_units`), so the layers of an unrolled stack fall into one class
each and the program's size does not grow with depth.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

from stablehlo_spmd.auto_sharding.graph import Graph
from stablehlo_spmd.op_graph import NO_VALUE
from stablehlo_spmd.sharding import Sharding

WL_ROUNDS = 3


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


def cluster_units(graph: Graph, roots: Sequence[int], pinned_roots: dict[int, Sharding],
                  consumers: Sequence[list[tuple[int, int]]], units: Sequence) -> list[int]:
    """Variable class per unit: units that look alike from WL_ROUNDS hops share.

    `roots` is each value's class root, `pinned_roots` the pinned classes,
    `consumers` each value's (node, operand position) reads, and `units`
    the decision units (`program._Unit`), in order."""
    nodes = graph.nodes
    value_label = [hash((s, b, pinned_roots.get(roots[v])))
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
                            tuple(sorted((node_label[i], p) for i, p in consumers[v]))))
                      for v in range(len(graph.shapes))]
        node_label, value_label = new_nodes, new_values
    members: dict[int, list[int]] = collections.defaultdict(list)
    for root in range(len(graph.shapes)):
        members[roots[root]].append(root)
    classes: dict[tuple, int] = {}
    result = []
    for index, unit in enumerate(units):
        if unit.kind == "op":
            key = ("op", node_label[unit.owner], len(unit.strategies))
        else:
            key = ("value", tuple(sorted(value_label[v] for v in members[unit.owner])),
                   len(unit.strategies))
        result.append(classes.setdefault(key, len(classes)))
    return result
