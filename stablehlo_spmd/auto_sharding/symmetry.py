"""Mirror plans: the swaps of two mesh axes that leave the 0-1 program as it is.

Two mesh axes of one size that nothing in the program tells apart (no
layout pinned on one of them, no preference, no bandwidth of their own)
move and hold the same bytes whichever is which: a plan, and the plan with
the two axes' names swapped in every layout, cost the same and peak at the
same.  The LP relaxation of a bounded program then blends a plan with its
mirror, and dividing on a blended class (`program._Milp._divide`) solves
both halves: on Mixtral-8x7B's training step over ``data=8,model=8`` at
80 GiB, two of the root's children had the same bound and the same subtrees
below them, a third of the search.  The swaps serve twice: the division
drops a child whose plans are another's mirrors, and the LP itself is
solved folded, one variable per column and its mirror
(`program._Milp._folded`), half the columns and half the rows.

`axis_swaps` finds, per pair of equal axes, the permutation of every
variable class's choices the swap makes, from the strategies' layouts
alone.  Whether the program really is unchanged by it is a question of its
numbers (costs, memory, a preference, a pin that prices one layout
otherwise), which `_Milp` answers before using a swap: the objective and
the bounds of every column at once, and each solve's memory rows as they
come.  A swap the numbers do not bear out is never used, so this module
only has to be right about which choice mirrors which.
"""

from __future__ import annotations

import collections
import itertools

import numpy as np


def axis_swaps(units, classes: list[int],
               axis_size: dict[str, int]) -> list[dict[int, np.ndarray]]:
    """Per pair of mesh axes of one size (larger than one), where every
    choice of every class has a mirror: class -> the index of each
    strategy's mirror among the class's strategies."""
    axes = sorted(a for a, n in axis_size.items() if n > 1)
    first_unit: dict[int, int] = {}
    for unit, cls in enumerate(classes):
        first_unit.setdefault(cls, unit)
    swaps = []
    for a, b in itertools.combinations(axes, 2):
        if axis_size[a] != axis_size[b]:
            continue
        mirror = _mirror(units, first_unit, {a: b, b: a})
        if mirror is not None:
            swaps.append(mirror)
    return swaps


def _mirror(units, first_unit: dict[int, int], rename: dict[str, str]):
    mirror: dict[int, np.ndarray] = {}
    for cls, unit in first_unit.items():
        strategies = units[unit].strategies
        same = _positions([_key(s, {}) for s in strategies])
        if same is None:
            return None
        swapped = _positions([_key(s, rename) for s in strategies])
        if swapped is None or swapped.keys() != same.keys():
            return None
        found = np.empty(len(strategies), dtype=np.int64)
        for key, positions in swapped.items():
            if len(positions) != len(same[key]):
                return None
            found[positions] = same[key]
        mirror[cls] = found
    return mirror


def _positions(keys: list):
    """key -> the positions it is at, in order; None where a key is unknowable."""
    if any(key is _UNKNOWN for key in keys):
        return None
    positions: dict = collections.defaultdict(list)
    for position, key in enumerate(keys):
        positions[key].append(position)
    return positions


_UNKNOWN = object()


def _key(strategy, rename: dict[str, str]):
    """A strategy (an op's `Strategy`, or a value's layout) with its axes
    renamed, as a value; `_UNKNOWN` for a layout no swap maps (manual axes,
    a maximal device)."""
    if strategy is None or not hasattr(strategy, "operands"):
        return _layout_key(strategy, rename)
    parts = []   # not the label, which names the axes it describes
    for layouts in (strategy.operands, strategy.results, strategy.unsummed, strategy.finished):
        keys = tuple(_layout_key(layout, rename) for layout in layouts)
        if _UNKNOWN in keys:
            return _UNKNOWN
        parts.append(keys)
    parts.append(tuple(_axes(axes, rename) for axes in strategy.axes))
    return tuple(parts)


def _layout_key(layout, rename: dict[str, str]):
    if layout is None:
        return None
    if layout.manual or layout.maximal_device is not None or layout.open_dims:
        return _UNKNOWN
    return (tuple(_axes(axes, rename) for axes in layout.dim_axes),
            tuple(sorted(_axes(layout.unreduced, rename))), layout.reduction)


def _axes(axes, rename: dict[str, str]) -> tuple[str, ...]:
    return tuple(rename.get(axis, axis) for axis in axes)
