"""stablehlo_spmd/min_cut.py: the cheapest cut, and which side each node takes.

Each expected cut is worked out by hand from the capacities beside it.
"""

import math

import pytest

from stablehlo_spmd.min_cut import SINK, SOURCE, FlowNetwork, sink_side


def test_the_cheap_edge_of_a_chain_is_cut():
    # source -3-> a -1-> b -inf-> sink: cutting a -> b costs 1.
    assert sink_side([(SOURCE, "a", 3.0), ("a", "b", 1.0), ("b", SINK, math.inf)]) == {"b"}


def test_where_cuts_cost_the_same_nodes_stay_with_the_source():
    # source -2-> a -2-> sink: either edge is a cut of 2; a stays.
    assert sink_side([(SOURCE, "a", 2.0), ("a", SINK, 2.0)]) == set()


def test_one_cut_edge_serves_every_path_through_it():
    # Three sources of 2 each meet at m, which feeds s -1-> sink through
    # "sum" nodes: cutting m -> m' (1) beats cutting each source (6) and
    # the far edge (4).
    edges = [(SOURCE, r, 2.0) for r in ("r1", "r2", "r3")]
    edges += [(r, "m", math.inf) for r in ("r1", "r2", "r3")]
    edges += [("m", "m'", 1.0), ("m'", "w", math.inf), ("w", "w'", 4.0), ("w'", SINK, math.inf)]
    assert sink_side(edges) == {"m'", "w", "w'"}


def test_parallel_edges_add_up():
    network = FlowNetwork()
    network.edge(SOURCE, "a", 1.0)
    network.edge(SOURCE, "a", 1.0)
    network.edge("a", SINK, 3.0)
    # source -> a holds 2 in all, cheaper than a -> sink's 3.
    assert network.sink_side() - {SINK} == {"a"}


def test_separate_parts_are_cut_alike_and_together():
    first = [(SOURCE, "a", 3.0), ("a", "b", 1.0), ("b", SINK, math.inf)]
    second = [(SOURCE, "c", 1.0), ("c", "d", 5.0), ("d", SINK, math.inf)]
    assert sink_side(first + second) == {"b", "c", "d"}


def test_a_network_no_finite_cut_separates_is_refused():
    with pytest.raises(ValueError, match="no finite cut"):
        sink_side([(SOURCE, "a", math.inf), ("a", SINK, math.inf)])


def test_a_network_without_a_sink_cuts_nothing():
    assert sink_side([(SOURCE, "a", 1.0), ("a", "b", 1.0)]) == set()
