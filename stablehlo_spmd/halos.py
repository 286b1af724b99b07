"""Halo arithmetic: which elements of a split dimension each device's window reads.

Pure integers, no IR: `halo_extent` and `window_pieces` say what
`collectives.Emitter.halo_window` would exchange for a set of windows, so
that the reshard planner and the windowed strategies can price a halo
exchange before anything is emitted.  A dimension of ``n`` elements split
over ``count`` devices holds ``shard_size = ceil(n / count)`` on each, the
device at coordinate q elements ``[q*shard_size, (q+1)*shard_size)``.
"""

from __future__ import annotations

from typing import Sequence


def halo_extent(shard_size: int, count: int, offset: int, length: int, step: int = 0,
                global_size: int | None = None, live: int | None = None,
                starts: Sequence[int] | None = None,
                needed: Sequence[int] | None = None) -> tuple[int, int] | None:
    """(left, right): the halo widths `Emitter.halo_window` exchanges for these
    windows, or None when one would reach past a neighbour's shard.

    With `global_size`, only elements inside ``[0, global_size)`` are sent
    (the rest of a window is the op's padding value), and only the first
    `live` devices' windows count (the others compute padding only).
    `starts` gives each device's start instead of `offset` and `step`, and
    `needed` how much of its window each device uses.
    """
    if starts is None and within_one_shard(shard_size, offset, length, step):
        return 0, 0
    starts = list(starts) if starts is not None else [offset + q * step for q in range(count)]
    if global_size is None:
        left = max(0, -min(starts))
        right = max(0, max(starts) + length - shard_size)
    else:
        live = count if live is None else min(live, count)
        # Device 0 has nothing on its left, the last device nothing on its
        # right, inside the tensor.
        left = max([0] + [min(-start, q * shard_size) for q, start in enumerate(starts[:live])
                          if q > 0])
        used = needed if needed is not None else [length] * count
        right = max([0] + [min(start + used[q], global_size - q * shard_size) - shard_size
                           for q, start in enumerate(starts[:live]) if q < count - 1])
    if left > shard_size or right > shard_size:
        return None
    return left, right


def window_pieces(shard_size: int, count: int, global_size: int, starts: Sequence[int],
                  length: int, live: int | None = None,
                  needed: Sequence[int] | None = None) -> list[tuple[int, dict]]:
    """The pieces of `halo_window`'s windows (device q: global elements from
    ``q*shard_size + starts[q]``, the first ``needed[q]`` of `length`, inside
    ``[0, global_size)``, devices before `live`) by the shard that holds them:
    ``[(k, {q: (global start, elements)})]``, k the distance from device q
    to that shard."""
    live = count if live is None else min(live, count)
    pieces: dict[int, dict[int, tuple[int, int]]] = {}
    for q in range(live):
        start = q * shard_size + starts[q]
        low = max(start, 0)
        high = min(start + (length if needed is None else needed[q]), global_size)
        for shard in range(low // shard_size, -(-high // shard_size)):
            begin = max(low, shard * shard_size)
            end = min(high, (shard + 1) * shard_size)
            if end > begin and 0 <= shard < count:
                pieces.setdefault(shard - q, {})[q] = (begin, end - begin)
    return sorted(pieces.items())


def pieces_elements(pieces) -> int:
    """Elements a device receives for `window_pieces`' pieces (each distance
    sends the widest piece; its own shard's costs nothing)."""
    return sum(max(n for _, n in by_target.values()) for k, by_target in pieces if k)


def within_one_shard(shard_size: int, offset: int, length: int, step: int) -> bool:
    """Whether every device's window lies inside one shard other than its own."""
    start = offset % shard_size
    return step == 0 and abs(offset) >= shard_size and start + length <= shard_size
