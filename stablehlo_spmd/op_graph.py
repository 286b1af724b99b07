"""The plain op graph both solvers read: values by id, nodes by op rule.

`propagation.Propagator` (GSPMD's greedy completion) and
`auto_sharding.Search` (the 0-1 program over the same strategies) work on
one graph with no MLIR in it: a value is an int (its shape and element
size live in lists beside the graph), a node is an op's `OpRule` and the
value ids it reads and writes.  It sits below both so that neither solver
imports the other: the ``spmd-propagate`` pass runs the search to settle
what the greedy pass contested, and the search never needs propagation.
"""

from __future__ import annotations

import dataclasses

from stablehlo_spmd.op_rules import OpRule

# A tensor slot with no value behind it (a token, a tuple, a dropped result).
NO_VALUE = -1


@dataclasses.dataclass
class Node:
    rule: OpRule
    operands: list[int]
    results: list[int]
    label: str               # op name, or "tie" for identities between tied values
    is_broadcast: bool = False
    is_tie: bool = False
    directions: str = "both"  # or "forward", "backward", "none" (a propagation barrier)
    # How many times the op runs per run of the program: the trip counts of the
    # loops around it (a scanned layer's op runs once per layer), multiplied.
    repeats: int = 1
    # The loops around the op, outermost first, each as the (first, last) node of
    # its regions: a value made before a loop and read inside is read on every
    # iteration, so it is held until the loop ends.
    loops: tuple[tuple[int, int], ...] = ()
