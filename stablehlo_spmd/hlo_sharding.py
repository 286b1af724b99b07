"""XLA's HloSharding text format: the ``mhlo.sharding`` attribute string.

This module owns the *text* of a GSPMD sharding and nothing else:

* `parse_hlo_sharding` turns a string such as
  ``{devices=[4,2]<=[2,4]T(1,0) last_tile_dim_replicate}`` into an
  `HloSharding`, applying every canonicalization XLA applies while parsing
  (so the result is what ``xla_client.HloSharding.from_string`` would build);
* `format_hlo_sharding` prints an `HloSharding` exactly as XLA's
  ``HloSharding::ToString()`` does, byte for byte;
* `TileAssignment` and `HloSharding` are small immutable values that mirror
  XLA's classes of the same names, including the iota ("V2") compact form
  of a device list and the rules XLA uses to keep it compact.

It is pure Python (numpy only).  It does not know about tensor shapes or
device meshes: checking a sharding's rank against a tensor, or its device
ids against a mesh, belongs to the callers.

Where XLA's own parser accepts text that has no sensible meaning (duplicate
device ids, a device list of the wrong length, an iota whose size does not
match its tile, conflicting kind keywords, ...), this parser rejects it with
a `ShardingSyntaxError` that says what is wrong and where.  Columns in those
errors are 1-based offsets into the sharding text.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from stablehlo_spmd.errors import ShardingSyntaxError

__all__ = [
    "SUBGROUP_KINDS",
    "TileAssignment",
    "HloSharding",
    "parse_hlo_sharding",
    "format_hlo_sharding",
]

# The kinds a trailing ("subgroup") tile dim can have, in the order XLA sorts
# and prints them: manual first, replicated always last.
SUBGROUP_KINDS = ("manual", "unreduced", "replicated")

# Sharding kinds that carry no tile assignment of their own.
_TILELESS_KINDS = ("replicated", "manual", "unknown", "unreduced")

_INT64_MAX = 2**63 - 1


# ---------------------------------------------------------------------------
# Iota ("V2") tile assignments
#
# An iota tile assignment describes its devices as
#   arange(N).reshape(reshape_dims).transpose(transpose_perm).reshape(dims)
# XLA keeps (reshape_dims, transpose_perm) in a canonical form, and tries to
# stay in this form across transposes; both are reproduced here because they
# decide what the printed text looks like.
# ---------------------------------------------------------------------------


def _canonical_iota(
    reshape_dims: Sequence[int], transpose_perm: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Returns the canonical (reshape_dims, transpose_perm) of an iota.

    Size-1 reshape dims are dropped, and reshape dims that stay adjacent and
    in order after the transpose are fused into one, until neither applies.
    """
    dims = list(reshape_dims)
    perm = list(transpose_perm)
    if len(dims) <= 1:
        return tuple(dims), tuple(perm)
    while True:
        kept = [axis for axis, size in enumerate(dims) if size != 1]
        if len(kept) != len(dims):
            new_axis = {old: new for new, old in enumerate(kept)}
            perm = [new_axis[axis] for axis in perm if axis in new_axis]
            dims = [dims[axis] for axis in kept]
        # A run of perm entries p, p+1, p+2, ... reads consecutive source dims
        # in order, so the run is a single dim of their product.  The fused
        # away dims become size 1 and are dropped on the next pass.
        fused = False
        run_start = 0
        for i in range(1, len(dims)):
            if perm[run_start] + (i - run_start) == perm[i]:
                dims[perm[run_start]] *= dims[perm[i]]
                dims[perm[i]] = 1
                fused = True
            else:
                run_start = i
        if not fused:
            break
    if not dims:
        return (1,), (0,)
    return tuple(dims), tuple(perm)


def _transpose_kind(dims: Sequence[int], perm: Sequence[int]) -> str:
    """Classifies a transpose of an array of shape `dims` by `perm`.

    "noop": nothing moves; "reshape": only size-1 dims move, so the flat
    device order is unchanged; "transpose": devices really move.
    """
    kind = "noop"
    last_moved_axis = -1
    for i, axis in enumerate(perm):
        if dims[axis] == 1:
            if axis != i and dims[i] != 1:
                kind = "reshape"
            continue
        if axis <= last_moved_axis:
            return "transpose"
        last_moved_axis = axis
    return kind


def _prime_factors(n: int) -> list[int]:
    """Prime factors of n, smallest first (n itself if it is prime)."""
    factors = []
    while n % 2 == 0:
        factors.append(2)
        n //= 2
    factor = 3
    while factor * factor <= n:
        while n % factor == 0:
            factors.append(factor)
            n //= factor
        factor += 2
    if n > 1:
        factors.append(n)
    return factors


def _split_into_prime_dims(reshape_dims, transpose_perm):
    """Splits every reshape dim of an iota into its prime factors.

    Returns (prime_dims, prime_perm, owner, positions_of): the split reshape
    dims, the transpose over them, which original reshape dim each prime_perm
    position came from, and for each original reshape dim the prime_perm
    positions holding its factors.
    """
    prime_dims: list[int] = []
    first_prime_of: list[int] = []
    for size in reshape_dims:
        first_prime_of.append(len(prime_dims))
        prime_dims.extend(_prime_factors(size))
    first_prime_of.append(len(prime_dims))

    prime_perm: list[int] = []
    owner: list[int] = []
    positions_of: list[list[int]] = [[] for _ in reshape_dims]
    for original in transpose_perm:
        for prime_axis in range(first_prime_of[original], first_prime_of[original + 1]):
            positions_of[original].append(len(prime_perm))
            prime_perm.append(prime_axis)
            owner.append(original)
    return prime_dims, prime_perm, owner, positions_of


def _transpose_iota(tile: "TileAssignment", perm: Sequence[int]) -> "TileAssignment | None":
    """Transposes an iota tile assignment and keeps it in iota form.

    Returns None where XLA gives up on the iota form (the caller then falls
    back to an explicit device list, as XLA does).
    """
    dims = tile.dims
    kind = _transpose_kind(dims, perm)
    if kind == "noop":
        return tile
    new_dims = tuple(dims[axis] for axis in perm)
    if kind == "reshape":
        return TileAssignment.iota(new_dims, tile.reshape_dims, tile.transpose_perm)
    if len(tile.reshape_dims) == 1:
        # A plain iota: the tile dims themselves are a valid reshape.
        return TileAssignment.iota(new_dims, dims, perm)

    reshape_dims, transpose_perm = tile.reshape_dims, tile.transpose_perm
    non_one_dims = [size for size in dims if size != 1]
    rank_among_non_one = {}
    for axis, size in enumerate(dims):
        if size != 1:
            rank_among_non_one[axis] = len(rank_among_non_one)

    # Easy case: the non-trivial tile dims are exactly the transposed reshape
    # dims, so transposing the tile just permutes the transpose.
    transposed_reshape = [reshape_dims[axis] for axis in transpose_perm]
    if non_one_dims == transposed_reshape:
        new_perm = [
            transpose_perm[rank_among_non_one[axis]] for axis in perm if dims[axis] != 1
        ]
        return TileAssignment.iota(new_dims, reshape_dims, new_perm)

    # General case: split the reshape dims into primes and try to group
    # consecutive primes (in transposed order) so that each group multiplies
    # to one tile dim; then the groups can be permuted like tile dims.
    prime_dims, prime_perm, owner, positions_of = _split_into_prime_dims(
        reshape_dims, transpose_perm
    )

    def next_factor(target: int, position: int) -> int | None:
        """The prime axis at `position` if it divides target.

        If it does not, a later prime of the same original reshape dim that
        does divide target may take its place (the factors of one reshape
        dim can be listed in any order).
        """
        prime_axis = prime_perm[position]
        if target % prime_dims[prime_axis] == 0:
            return prime_axis
        for later in positions_of[owner[position]]:
            if later <= position:
                continue
            later_axis = prime_perm[later]
            if target % prime_dims[later_axis] == 0:
                prime_dims[prime_axis], prime_dims[later_axis] = (
                    prime_dims[later_axis],
                    prime_dims[prime_axis],
                )
                return prime_axis
        return None

    groups: list[list[int]] = [[] for _ in non_one_dims]
    position = 0
    for group, target in zip(groups, non_one_dims):
        if position >= len(prime_perm):
            break
        prime_axis = next_factor(target, position)
        while prime_axis is not None:
            target //= prime_dims[prime_axis]
            group.append(prime_axis)
            position += 1
            if position >= len(prime_perm):
                break
            prime_axis = next_factor(target, position)
        if target != 1:
            return None

    grouped_perm = []
    for axis in perm:
        if dims[axis] != 1:
            grouped_perm.extend(groups[rank_among_non_one[axis]])
    return TileAssignment.iota(new_dims, prime_dims, grouped_perm)


def _sort_minor_group_of_iota(
    reshape_dims: Sequence[int], transpose_perm: Sequence[int], group_size: int
) -> tuple[list[int], list[int]] | None:
    """Rewrites an iota so each run of `group_size` devices is ascending.

    Partial replication keeps the devices of each replication group sorted.
    For an iota, that means the reshape dims feeding the innermost
    `group_size` devices must be read in ascending order; this reorders them
    (splitting one dim in two where the group boundary falls inside it).
    Returns the new (reshape_dims, transpose_perm), or None if the group
    boundary cannot be expressed that way.
    """
    remaining = group_size
    grouped = 0
    split = None  # (reshape axis, size of its major part)
    for axis in reversed(transpose_perm):
        size = reshape_dims[axis]
        if size <= remaining:
            if remaining % size != 0:
                return None
            remaining //= size
            grouped += 1
        else:
            if size % remaining != 0:
                return None
            split = (axis, size // remaining)
            grouped += 1
            remaining = 1
            break

    if split is None:
        new_dims = list(reshape_dims)
        new_perm = list(transpose_perm)
    else:
        split_axis, major = split
        new_dims = (
            list(reshape_dims[:split_axis])
            + [major, reshape_dims[split_axis] // major]
            + list(reshape_dims[split_axis + 1 :])
        )
        new_perm = []
        for axis in transpose_perm:
            new_perm.append(axis if axis <= split_axis else axis + 1)
            if axis == split_axis:
                new_perm.append(split_axis + 1)
    if grouped:
        new_perm[-grouped:] = sorted(new_perm[-grouped:])
    return new_dims, new_perm


# ---------------------------------------------------------------------------
# TileAssignment
# ---------------------------------------------------------------------------


def _int_tuple(values: Iterable, what: str) -> tuple[int, ...]:
    result = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{what} must be integers, got {value!r}")
        result.append(int(value))
    return tuple(result)


def _check_permutation(perm: Sequence[int], rank: int, what: str) -> None:
    if sorted(perm) != list(range(rank)):
        raise ValueError(f"{what} {list(perm)} is not a permutation of 0..{rank - 1}")


@dataclass(frozen=True, eq=False)
class TileAssignment:
    """The device array of a tiled sharding, shape `dims`.

    Exactly one representation is held: the iota form (`reshape_dims` and
    `transpose_perm`, kept canonical as XLA keeps them) or an `explicit`
    flattened device list.  `TileAssignment(dims)` alone is the plain iota
    ``arange(prod(dims)).reshape(dims)``.  Two tile assignments are equal when
    their device arrays are, whatever their form (as in XLA).
    """

    dims: tuple[int, ...]
    reshape_dims: tuple[int, ...] | None = None
    transpose_perm: tuple[int, ...] | None = None
    explicit: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        dims = _int_tuple(self.dims, "tile dims")
        if not dims:
            raise ValueError("a tile assignment needs at least one dim")
        if any(size < 1 for size in dims):
            raise ValueError(f"tile dims must be positive, got {list(dims)}")
        object.__setattr__(self, "dims", dims)
        num_devices = math.prod(dims)

        if self.explicit is not None:
            if self.reshape_dims is not None or self.transpose_perm is not None:
                raise ValueError("a tile assignment is either iota or explicit, not both")
            devices = _int_tuple(self.explicit, "device ids")
            if len(devices) != num_devices:
                raise ValueError(
                    f"tile dims {list(dims)} need {num_devices} devices "
                    f"but the list has {len(devices)}"
                )
            object.__setattr__(self, "explicit", devices)
            return

        reshape_dims = (
            (num_devices,) if self.reshape_dims is None else _int_tuple(self.reshape_dims, "iota reshape dims")
        )
        if not reshape_dims or any(size < 1 for size in reshape_dims):
            raise ValueError(f"iota reshape dims must be positive, got {list(reshape_dims)}")
        perm = (
            tuple(range(len(reshape_dims)))
            if self.transpose_perm is None
            else _int_tuple(self.transpose_perm, "iota transpose")
        )
        _check_permutation(perm, len(reshape_dims), "iota transpose")
        if math.prod(reshape_dims) != num_devices:
            raise ValueError(
                f"tile dims {list(dims)} need {num_devices} devices "
                f"but iota reshape dims {list(reshape_dims)} hold {math.prod(reshape_dims)}"
            )
        reshape_dims, perm = _canonical_iota(reshape_dims, perm)
        object.__setattr__(self, "reshape_dims", reshape_dims)
        object.__setattr__(self, "transpose_perm", perm)

    # -- construction ------------------------------------------------------

    @classmethod
    def iota(cls, dims, reshape_dims=None, transpose_perm=None) -> "TileAssignment":
        """``arange(N).reshape(reshape_dims).transpose(transpose_perm).reshape(dims)``,
        canonicalized like XLA's IotaTileAssignment."""
        return cls(
            tuple(dims),
            None if reshape_dims is None else tuple(reshape_dims),
            None if transpose_perm is None else tuple(transpose_perm),
        )

    @classmethod
    def from_devices(cls, array_like) -> "TileAssignment":
        """An explicit tile assignment with the array's shape and contents."""
        array = np.asarray(array_like)
        if array.ndim == 0:
            array = array.reshape(1)
        if array.size and not np.issubdtype(array.dtype, np.integer):
            raise TypeError(f"device ids must be integers, got dtype {array.dtype}")
        return cls(tuple(array.shape), explicit=tuple(int(d) for d in array.reshape(-1)))

    # -- queries -----------------------------------------------------------

    @property
    def is_iota(self) -> bool:
        return self.explicit is None

    @property
    def num_devices(self) -> int:
        return math.prod(self.dims)

    @property
    def rank(self) -> int:
        return len(self.dims)

    def device_array(self) -> np.ndarray:
        """The devices as a read-only int64 array of shape `dims` (cached)."""
        cached = self.__dict__.get("_device_array")
        if cached is None:
            if self.is_iota:
                cached = (
                    np.arange(self.num_devices, dtype=np.int64)
                    .reshape(self.reshape_dims)
                    .transpose(self.transpose_perm)
                    .reshape(self.dims)
                )
            else:
                cached = np.array(self.explicit, dtype=np.int64).reshape(self.dims)
            cached.setflags(write=False)
            # The dataclass is frozen; the cache is not a field, so it takes
            # no part in equality or hashing.
            object.__setattr__(self, "_device_array", cached)
        return cached

    # -- derived tile assignments -------------------------------------------

    def transpose(self, perm) -> "TileAssignment":
        """The device array transposed by `perm`; stays iota where XLA's does."""
        perm = _int_tuple(perm, "transpose permutation")
        _check_permutation(perm, self.rank, "transpose permutation")
        if _transpose_kind(self.dims, perm) == "noop":
            return self
        if self.is_iota:
            transposed = _transpose_iota(self, perm)
            if transposed is not None:
                return transposed
        return TileAssignment.from_devices(self.device_array().transpose(perm))

    def reshape(self, dims) -> "TileAssignment":
        """The same flat device order viewed with new dims."""
        dims = _int_tuple(dims, "tile dims")
        if math.prod(dims) != self.num_devices:
            raise ValueError(
                f"cannot reshape tile dims {list(self.dims)} to {list(dims)}: "
                "the device counts differ"
            )
        if self.is_iota:
            return TileAssignment.iota(dims, self.reshape_dims, self.transpose_perm)
        return TileAssignment(dims, explicit=self.explicit)

    # -- value semantics ---------------------------------------------------

    def __eq__(self, other) -> bool:
        if not isinstance(other, TileAssignment):
            return NotImplemented
        if self.dims != other.dims:
            return False
        if self.is_iota and other.is_iota:
            if (self.reshape_dims, self.transpose_perm) == (other.reshape_dims, other.transpose_perm):
                return True
        return bool(np.array_equal(self.device_array(), other.device_array()))

    def __hash__(self) -> int:
        return hash((self.dims, self.device_array().tobytes()))

    def __str__(self) -> str:
        return _format_tile_assignment(self)


# ---------------------------------------------------------------------------
# HloSharding
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HloSharding:
    """One sharding, mirroring XLA's HloSharding.

    kind is one of "replicated", "manual", "unknown", "unreduced", "maximal"
    (`device` set), "tiled" (`tile` set) or "tuple" (`elements` set, flat).
    For "tiled", the trailing ``len(subgroup_kinds)`` dims of ``tile.dims`` are
    subgroup dims; ``subgroup_kinds == ("replicated",)`` is XLA's
    ``last_tile_dim_replicate``.  `shard_group` is ("as", id) or ("like", id).

    Build values with the classmethods: `tiled` applies XLA's subgroup
    canonicalization, which the raw constructor does not.
    """

    kind: str
    tile: TileAssignment | None = None
    subgroup_kinds: tuple[str, ...] = ()
    device: int | None = None
    elements: tuple["HloSharding", ...] = ()
    shard_group: tuple[str, int] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "subgroup_kinds", tuple(self.subgroup_kinds))
        object.__setattr__(self, "elements", tuple(self.elements))
        if self.kind == "tiled":
            if self.tile is None:
                raise ValueError("a tiled sharding needs a tile assignment")
            for subgroup_kind in self.subgroup_kinds:
                if subgroup_kind not in SUBGROUP_KINDS:
                    raise ValueError(f"unknown subgroup kind {subgroup_kind!r}")
            if len(self.subgroup_kinds) > self.tile.rank:
                raise ValueError(
                    f"{len(self.subgroup_kinds)} subgroup kinds but the tile "
                    f"assignment has only {self.tile.rank} dims"
                )
        elif self.kind == "maximal":
            if self.device is None:
                raise ValueError("a maximal sharding needs a device")
        elif self.kind == "tuple":
            if any(element.kind == "tuple" for element in self.elements):
                raise ValueError("tuple shardings are flat: an element cannot be a tuple")
            if self.shard_group is not None:
                raise ValueError("a tuple sharding cannot have a shard group")
        elif self.kind not in _TILELESS_KINDS:
            raise ValueError(f"unknown sharding kind {self.kind!r}")
        if self.shard_group is not None:
            relation, group_id = self.shard_group
            if relation not in ("as", "like") or group_id < 0:
                raise ValueError(f"bad shard group {self.shard_group!r}")

    # -- constructors ------------------------------------------------------

    @classmethod
    def replicated(cls) -> "HloSharding":
        return cls("replicated")

    @classmethod
    def manual(cls) -> "HloSharding":
        return cls("manual")

    @classmethod
    def unknown(cls) -> "HloSharding":
        return cls("unknown")

    @classmethod
    def unreduced(cls) -> "HloSharding":
        return cls("unreduced")

    @classmethod
    def maximal(cls, device: int) -> "HloSharding":
        return cls("maximal", device=int(device))

    @classmethod
    def tuple_of(cls, elements) -> "HloSharding":
        return cls("tuple", elements=tuple(elements))

    @classmethod
    def tiled(cls, tile: TileAssignment, subgroup_kinds=()) -> "HloSharding":
        """A tiled sharding, canonicalized as XLA does when it builds one.

        Subgroup dims of size 1 are dropped, dims of the same kind merged,
        kinds sorted into `SUBGROUP_KINDS` order (moving devices with them),
        the devices of each replication group sorted, and a sharding with no
        data tiling collapses to {replicated}/{manual}/{unreduced}.
        """
        subgroup_kinds = tuple(subgroup_kinds)
        for subgroup_kind in subgroup_kinds:
            if subgroup_kind not in SUBGROUP_KINDS:
                raise ValueError(
                    f"unknown subgroup kind {subgroup_kind!r} "
                    f"(expected one of {', '.join(SUBGROUP_KINDS)})"
                )
        if len(subgroup_kinds) > tile.rank:
            raise ValueError(
                f"{len(subgroup_kinds)} subgroup kinds but the tile assignment "
                f"has only {tile.rank} dims"
            )
        return _canonical_subgroup_sharding(tile, subgroup_kinds)

    def with_shard_group(self, shard_group: tuple[str, int] | None) -> "HloSharding":
        return dataclasses.replace(self, shard_group=shard_group)

    # -- queries -----------------------------------------------------------

    @property
    def is_tiled(self) -> bool:
        return self.kind == "tiled"

    @property
    def is_tuple(self) -> bool:
        return self.kind == "tuple"

    @property
    def replicate_on_last_tile_dim(self) -> bool:
        return self.subgroup_kinds == ("replicated",)

    @property
    def data_rank(self) -> int:
        """Number of tile dims that split data (tiled shardings only)."""
        self._require_tiled("data_rank")
        return self.tile.rank - len(self.subgroup_kinds)

    @property
    def tile_shape(self) -> tuple[int, ...]:
        """How many ways each data dim is split (tiled shardings only)."""
        return self.tile.dims[: self.data_rank]

    def subgroup_dims(self) -> dict[str, int]:
        """Maps each subgroup kind to the size of its trailing tile dim."""
        self._require_tiled("subgroup_dims")
        sizes = self.tile.dims[self.data_rank :]
        return dict(zip(self.subgroup_kinds, sizes))

    def _require_tiled(self, what: str) -> None:
        if self.kind != "tiled":
            raise ValueError(f"{what} is only defined for tiled shardings, not {self.kind}")

    def __str__(self) -> str:
        return format_hlo_sharding(self)


def _canonical_subgroup_sharding(tile: TileAssignment, kinds: tuple[str, ...]) -> HloSharding:
    """XLA's HloSharding::Subgroup: normalizes the trailing subgroup dims."""
    if not kinds:
        return HloSharding("tiled", tile)
    data_rank = tile.rank - len(kinds)
    if len(set(kinds)) == 1 and math.prod(tile.dims[:data_rank]) == 1:
        # Nothing splits the data: the whole thing is one kind.
        return HloSharding(kinds[0])

    axes_by_kind: dict[str, list[int]] = {kind: [] for kind in SUBGROUP_KINDS}
    size_one_axes = []
    needs_merging = False
    for offset, kind in enumerate(kinds):
        axis = data_rank + offset
        if tile.dims[axis] == 1:
            size_one_axes.append(axis)
            needs_merging = True
            continue
        if axes_by_kind[kind]:
            needs_merging = True
        axes_by_kind[kind].append(axis)
    present_kinds = tuple(kind for kind in SUBGROUP_KINDS if axes_by_kind[kind])
    if len(present_kinds) > 1:
        needs_merging = True

    if needs_merging:
        if data_rank == 0 and not present_kinds:
            # XLA would build a tile with no dims at all here, printed as
            # "{devices=[]<=[1]}", which its own parser cannot read back.
            raise ValueError(
                "a one-device tile whose dims are all subgroup dims of mixed kinds "
                "has no tile dims left once its size-1 subgroup dims are dropped"
            )
        # Move each kind's dims together (in SUBGROUP_KINDS order), then fuse
        # them into one dim per kind; size-1 dims go last and vanish.
        perm = list(range(data_rank))
        merged_dims = list(tile.dims[:data_rank])
        for kind in present_kinds:
            perm.extend(axes_by_kind[kind])
            merged_dims.append(math.prod(tile.dims[axis] for axis in axes_by_kind[kind]))
        perm.extend(size_one_axes)
        tile = tile.transpose(perm).reshape(merged_dims)
        kinds = present_kinds
    return _finish_subgroup_sharding(tile, kinds)


def _finish_subgroup_sharding(tile: TileAssignment, kinds: tuple[str, ...]) -> HloSharding:
    """Builds the sharding once each kind has at most one (sorted) dim."""
    if kinds == ("replicated",):
        return _partially_replicated(tile)
    if kinds == ("manual",) and tile.num_devices == tile.dims[-1]:
        # All devices form one manual group: nothing is tiled.
        return HloSharding.manual()
    if kinds and kinds[-1] == "replicated":
        # Sort each replication group as partial replication does, then put
        # the full list of subgroup kinds back.
        partial = _partially_replicated(tile)
        if partial.kind != "tiled":
            return partial
        return dataclasses.replace(partial, subgroup_kinds=kinds)
    return HloSharding("tiled", tile, kinds)


def _partially_replicated(tile: TileAssignment) -> HloSharding:
    """XLA's HloSharding::PartialTile: the last tile dim replicates.

    The devices of each replication group (a run of dims[-1] devices in the
    flat order) end up in ascending order.
    """
    group_size = tile.dims[-1]
    if tile.rank == 1 or group_size == tile.num_devices:
        # Every device holds the whole tensor.
        return HloSharding.replicated()
    if group_size == 1:
        return HloSharding("tiled", tile.reshape(tile.dims[:-1]))
    if tile.is_iota:
        # An iota group is already ascending when the innermost reshape dim
        # is exactly the group.
        if tile.reshape_dims[tile.transpose_perm[-1]] == group_size:
            return HloSharding("tiled", tile, ("replicated",))
        regrouped = _sort_minor_group_of_iota(tile.reshape_dims, tile.transpose_perm, group_size)
        if regrouped is not None:
            return HloSharding("tiled", TileAssignment.iota(tile.dims, *regrouped), ("replicated",))
    groups = np.sort(tile.device_array().reshape(-1, group_size), axis=1)
    return HloSharding("tiled", TileAssignment.from_devices(groups.reshape(tile.dims)), ("replicated",))


# ---------------------------------------------------------------------------
# Printing
# ---------------------------------------------------------------------------


def _join_ints(values: Iterable[int]) -> str:
    return ",".join(str(value) for value in values)


def _format_tile_assignment(tile: TileAssignment) -> str:
    dims = f"devices=[{_join_ints(tile.dims)}]"
    if not tile.is_iota:
        return dims + _join_ints(tile.explicit)
    text = f"{dims}<=[{_join_ints(tile.reshape_dims)}]"
    if len(tile.reshape_dims) > 1:
        text += f"T({_join_ints(tile.transpose_perm)})"
    return text


def format_hlo_sharding(sharding: HloSharding) -> str:
    """XLA's canonical text for `sharding` (metadata is never printed)."""
    if sharding.kind == "tuple":
        parts = []
        for index, element in enumerate(sharding.elements):
            text = format_hlo_sharding(element)
            # XLA numbers every fifth element to help readers of long tuples.
            if index and index % 5 == 0:
                text = f"/*index={index}*/{text}"
            parts.append(text)
        return "{" + ", ".join(parts) + "}"

    if sharding.kind == "maximal":
        body = f"maximal device={sharding.device}"
    elif sharding.kind == "tiled":
        body = _format_tile_assignment(sharding.tile)
        if sharding.subgroup_kinds == ("replicated",):
            body += " last_tile_dim_replicate"
        elif sharding.subgroup_kinds:
            body += " last_tile_dims={" + ", ".join(sharding.subgroup_kinds) + "}"
    else:
        body = sharding.kind
    if sharding.shard_group is not None:
        relation, group_id = sharding.shard_group
        body += f" shard_{relation} {group_id}"
    return "{" + body + "}"


# ---------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------

_PUNCTUATION = {"{", "}", "[", "]", "(", ")", ",", "="}
_SIMPLE_ESCAPES = set("abfnrtv\\'\"?")


@dataclass(frozen=True)
class _Token:
    kind: str  # "punct", "<=", "int", "ident", "attr", "string", "eof"
    text: str  # source text ("attr" tokens: the name without '=')
    offset: int
    value: int | None = None

    def describe(self) -> str:
        if self.kind == "eof":
            return "end of text"
        if self.kind == "attr":
            return f"'{self.text}='"
        return f"'{self.text}'"


def _is_ident_start(char: str) -> bool:
    return char.isascii() and (char.isalpha() or char == "_")


def _is_ident_char(char: str) -> bool:
    # XLA's lexer lets identifiers contain '-' and '.' too.
    return char.isascii() and (char.isalnum() or char in "_-.")


class _Tokenizer:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def error(self, message: str, offset: int) -> ShardingSyntaxError:
        return ShardingSyntaxError(message, self.text, offset + 1)

    def tokens(self) -> list[_Token]:
        tokens = []
        while True:
            token = self._next()
            tokens.append(token)
            if token.kind == "eof":
                return tokens

    def _next(self) -> _Token:
        self._skip_space_and_comments()
        text, start = self.text, self.pos
        if start == len(text):
            return _Token("eof", "", start)
        char = text[start]
        if char in _PUNCTUATION:
            self.pos += 1
            return _Token("punct", char, start)
        if text.startswith("<=", start):
            self.pos += 2
            return _Token("<=", "<=", start)
        if char.isdigit() or (char == "-" and text[start + 1 : start + 2].isdigit()):
            return self._integer()
        if _is_ident_start(char):
            return self._identifier()
        if char in "\"'":
            return self._string()
        raise self.error(f"unexpected character {char!r}", start)

    def _skip_space_and_comments(self) -> None:
        text = self.text
        while self.pos < len(text):
            if text[self.pos] in " \t\r\n":
                self.pos += 1
            elif text.startswith("/*", self.pos):
                end = text.find("*/", self.pos + 2)
                if end < 0:
                    raise self.error("unterminated /* comment", self.pos)
                self.pos = end + 2
            elif text.startswith("//", self.pos):
                # XLA's line comments run to the end of the line.
                while self.pos < len(text) and text[self.pos] not in "\r\n":
                    self.pos += 1
            else:
                return

    def _integer(self) -> _Token:
        text, start = self.text, self.pos
        end = start + 1
        while end < len(text) and text[end].isdigit():
            end += 1
        # "1.5", "2x3" or "1e3" are one malformed token, not an int and junk.
        bad_end = end
        while bad_end < len(text) and (_is_ident_char(text[bad_end])):
            bad_end += 1
        if bad_end != end:
            raise self.error(f"expected an integer, got '{text[start:bad_end]}'", start)
        value = int(text[start:end])
        if not -_INT64_MAX - 1 <= value <= _INT64_MAX:
            raise self.error(f"integer {text[start:end]} is out of range", start)
        self.pos = end
        return _Token("int", text[start:end], start, value)

    def _identifier(self) -> _Token:
        text, start = self.text, self.pos
        end = start + 1
        while end < len(text) and _is_ident_char(text[end]):
            end += 1
        name = text[start:end]
        # As in XLA, "name=" with no space is one attribute-name token.
        if text.startswith("=", end):
            self.pos = end + 1
            return _Token("attr", name, start)
        self.pos = end
        return _Token("ident", name, start)

    def _string(self) -> _Token:
        text, start = self.text, self.pos
        quote = text[start]
        pos = start + 1
        while pos < len(text):
            char = text[pos]
            if char == quote:
                self.pos = pos + 1
                return _Token("string", text[start : pos + 1], start)
            if char == "\\":
                pos = self._check_escape(pos)
            else:
                pos += 1
        raise self.error("unterminated string", start)

    def _check_escape(self, pos: int) -> int:
        """Validates the C-style escape at text[pos] and returns where it ends."""
        text = self.text
        code = text[pos + 1 : pos + 2]
        if not code:
            raise self.error("unterminated string", pos)
        if code in _SIMPLE_ESCAPES:
            return pos + 2
        if code in "01234567":
            end = pos + 1
            while end < len(text) and end < pos + 4 and text[end] in "01234567":
                end += 1
            if int(text[pos + 1 : end], 8) > 0xFF:
                raise self.error(f"octal escape '{text[pos:end]}' is over 0xff", pos)
            return end
        if code == "x":
            end = pos + 2
            while end < len(text) and text[end] in "0123456789abcdefABCDEF":
                end += 1
            if end == pos + 2 or int(text[pos + 2 : end], 16) > 0xFF:
                raise self.error(f"bad hex escape '{text[pos:end]}' in string", pos)
            return end
        if code in "uU":
            width = 4 if code == "u" else 8
            digits = text[pos + 2 : pos + 2 + width]
            if len(digits) != width or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise self.error(f"bad unicode escape '\\{code}{digits}' in string", pos)
            return pos + 2 + width
        raise self.error(f"unknown escape sequence '\\{code}' in string", pos)


# ---------------------------------------------------------------------------
# Parser
#
#   sharding  ::= '{' '}'                          empty tuple
#               | '{' single '}'
#               | '{' '{' single '}' (',' '{' single '}')* '}'    flat tuple
#   single    ::= item*
#   item      ::= 'replicated' | 'manual' | 'unknown' | 'unreduced' | 'maximal'
#               | 'device=' int | 'devices=' tile | 'last_tile_dim_replicate'
#               | 'last_tile_dims=' '{' kind (',' kind)* '}'
#               | ('shard_as' | 'shard_like') int | 'metadata=' metadata
#   tile      ::= '[' ints ']' ( ints | '<=' '[' ints ']' ('T' '(' ints ')')? )
#   metadata  ::= '{' attrs '}' | '{' '{' attrs '}' (',' '{' attrs '}')* '}'
# ---------------------------------------------------------------------------

_KIND_KEYWORDS = ("replicated", "manual", "unknown", "unreduced", "maximal")

# OpMetadata fields XLA's parser accepts, by value type.
_METADATA_STRING_FIELDS = frozenset(
    {"op_type", "op_name", "source_file", "deduplicated_name", "scheduling_name", "metadata_payload"}
)
_METADATA_INT32_FIELDS = frozenset(
    {"source_line", "source_end_line", "source_column", "source_end_column", "stack_frame_id"}
)
_METADATA_FIELDS = sorted(_METADATA_STRING_FIELDS | _METADATA_INT32_FIELDS | {"profile_type"})
_PROFILE_TYPES = range(0, 4)  # xla.ProfileType: INVALID, WINDOW, FLAG, INTEGER


@dataclass
class _Iota:
    reshape_dims: list[int]
    reshape_token: _Token
    transpose_perm: list[int] | None
    transpose_token: _Token | None


@dataclass
class _TileSpec:
    """A parsed `devices=` value, before validation."""

    token: _Token  # the 'devices=' token
    dims: list[int]
    dim_tokens: list[_Token]
    devices: list[int] | None = None
    device_tokens: list[_Token] | None = None
    iota: _Iota | None = None


@dataclass
class _SingleSpec:
    """Everything written inside one '{...}' sharding, before it is built."""

    open_brace: _Token
    kinds: list[_Token] = dataclasses.field(default_factory=list)
    device: _Token | None = None
    device_attr: _Token | None = None
    tile: _TileSpec | None = None
    replicate_last: _Token | None = None
    subgroup_kinds: list[_Token] | None = None
    subgroup_attr: _Token | None = None
    shard_group: tuple[str, int] | None = None
    shard_group_token: _Token | None = None


class _Parser:
    """Recursive descent over the token list; see the grammar above."""

    def __init__(self, text: str):
        self.text = text
        self.tokens = _Tokenizer(text).tokens()
        self.index = 0

    # -- token helpers -----------------------------------------------------

    @property
    def token(self) -> _Token:
        return self.tokens[self.index]

    def peek(self, ahead: int = 1) -> _Token:
        return self.tokens[min(self.index + ahead, len(self.tokens) - 1)]

    def advance(self) -> _Token:
        token = self.tokens[self.index]
        if token.kind != "eof":
            self.index += 1
        return token

    def at(self, text: str) -> bool:
        return self.token.kind in ("punct", "<=") and self.token.text == text

    def error(self, message: str, token: _Token | None = None) -> ShardingSyntaxError:
        token = token or self.token
        return ShardingSyntaxError(message, self.text, token.offset + 1)

    def expect(self, text: str, message: str) -> _Token:
        if not self.at(text):
            raise self.error(f"{message}, got {self.token.describe()}")
        return self.advance()

    def expect_int(self, what: str) -> _Token:
        if self.token.kind != "int":
            raise self.error(f"expected {what}, got {self.token.describe()}")
        return self.advance()

    # -- top level ---------------------------------------------------------

    def parse(self) -> HloSharding:
        self._check_braces_balance()
        if not self.at("{"):
            raise self.error(f"expected '{{' to start the sharding, got {self.token.describe()}")
        open_brace = self.advance()
        if self.at("}") or self.at("{"):
            sharding = self._parse_tuple_rest()
        else:
            sharding = self._parse_single_rest(open_brace)
        if self.token.kind != "eof":
            raise self.error(f"unexpected {self.token.describe()} after the sharding")
        return sharding

    def _check_braces_balance(self) -> None:
        """Reports a missing or stray brace up front, where it really is."""
        open_braces: list[_Token] = []
        for token in self.tokens:
            if token.kind != "punct":
                continue
            if token.text == "{":
                open_braces.append(token)
            elif token.text == "}":
                if not open_braces:
                    raise self.error("unbalanced braces: this '}' closes nothing", token)
                open_braces.pop()
        if open_braces:
            raise self.error("unbalanced braces: this '{' is never closed", open_braces[-1])

    def _parse_tuple_rest(self) -> HloSharding:
        """The elements of a tuple sharding after its opening brace."""
        elements = []
        if not self.at("}"):
            while True:
                element_brace = self.expect("{", "expected '{' to start a tuple element")
                if self.at("{"):
                    raise self.error("tuple shardings cannot be nested")
                if self.at("}"):
                    raise self.error(
                        "empty tuple element: expected replicated, manual, maximal, "
                        "unknown, unreduced or devices=[...]"
                    )
                elements.append(self._parse_single_rest(element_brace))
                if not self.at(","):
                    break
                self.advance()
        self.expect("}", "expected ',' or '}' after a tuple element")
        return HloSharding.tuple_of(elements)

    def _parse_single_rest(self, open_brace: _Token) -> HloSharding:
        """One sharding's items after its opening brace, through its closing one."""
        spec = _SingleSpec(open_brace)
        while not self.at("}"):
            self._parse_item(spec)
        self.advance()
        return _SingleBuilder(self, spec).build()

    # -- items of a single sharding -------------------------------------------

    def _parse_item(self, spec: _SingleSpec) -> None:
        token = self.token
        if token.kind == "ident":
            self._parse_keyword(spec)
        elif token.kind == "attr":
            self._parse_attribute(spec)
        elif token.kind == "eof":
            raise self.error("expected '}' to end the sharding")
        else:
            raise self.error(f"unexpected {token.describe()} in sharding")

    def _parse_keyword(self, spec: _SingleSpec) -> None:
        token = self.advance()
        word = token.text
        if self.at("="):
            raise self.error(f"write '{word}=' with no space before '='", token)
        if word in _KIND_KEYWORDS:
            for seen in spec.kinds:
                if seen.text == word:
                    raise self.error(f"'{word}' given twice", token)
                raise self.error(f"conflicting sharding kinds '{seen.text}' and '{word}'", token)
            spec.kinds.append(token)
        elif word == "last_tile_dim_replicate":
            if spec.replicate_last is not None:
                raise self.error("'last_tile_dim_replicate' given twice", token)
            spec.replicate_last = token
        elif word in ("shard_as", "shard_like"):
            if spec.shard_group_token is not None:
                raise self.error(
                    f"'{word}' after '{spec.shard_group_token.text}': "
                    "a sharding has at most one shard group",
                    token,
                )
            group = self.expect_int(f"an integer shard group id after '{word}'")
            if group.value < 0:
                raise self.error(f"shard group id must not be negative, got {group.value}", group)
            spec.shard_group = (word[len("shard_") :], group.value)
            spec.shard_group_token = token
        elif word == "mesh" and self.at("["):
            raise self.error(
                "named (mesh) shardings are not supported here; use the devices=[...] form", token
            )
        else:
            raise self.error(f"unknown sharding keyword '{word}'", token)

    def _parse_attribute(self, spec: _SingleSpec) -> None:
        token = self.advance()
        name = token.text
        if name == "device":
            if spec.device_attr is not None:
                raise self.error("'device=' given twice", token)
            spec.device_attr = token
            spec.device = self.expect_int("an integer device id after 'device='")
        elif name == "devices":
            if spec.tile is not None:
                raise self.error("'devices=' given twice", token)
            spec.tile = self._parse_tile_assignment(token)
        elif name == "last_tile_dims":
            if spec.subgroup_attr is not None:
                raise self.error("'last_tile_dims=' given twice", token)
            spec.subgroup_attr = token
            spec.subgroup_kinds = self._parse_subgroup_kinds()
        elif name == "metadata":
            # XLA accepts several metadata= attributes and prints none of them.
            self._parse_metadata()
        else:
            raise self.error(
                f"unknown sharding attribute '{name}=' "
                "(expected device=, devices=, last_tile_dims= or metadata=)",
                token,
            )

    def _parse_int_list(self, what: str, closer: str, close_message: str) -> list[_Token]:
        """One or more comma-separated ints, then `closer` (consumed)."""
        tokens = [self.expect_int(what)]
        while self.at(","):
            self.advance()
            tokens.append(self.expect_int(what))
        self.expect(closer, close_message)
        return tokens

    def _parse_tile_assignment(self, devices_attr: _Token) -> _TileSpec:
        self.expect("[", "expected '[' to open tile dims after 'devices='")
        dim_tokens = self._parse_int_list("a tile dim", "]", "expected ']' to close tile dims")
        spec = _TileSpec(devices_attr, [t.value for t in dim_tokens], dim_tokens)
        if self.at("<="):
            spec.iota = self._parse_iota()
        else:
            device_tokens = [self.expect_int("a device id or '<=' after tile dims")]
            while self.at(","):
                self.advance()
                device_tokens.append(self.expect_int("a device id"))
            spec.device_tokens = device_tokens
            spec.devices = [t.value for t in device_tokens]
        return spec

    def _parse_iota(self) -> _Iota:
        self.advance()  # '<='
        reshape_token = self.expect("[", "expected '[' after '<=' to open iota reshape dims")
        reshape = self._parse_int_list(
            "an iota reshape dim", "]", "expected ']' to close iota reshape dims"
        )
        iota = _Iota([t.value for t in reshape], reshape_token, None, None)
        at_transpose = self.token.kind == "ident" and self.token.text == "T"
        if len(reshape) == 1:
            if at_transpose and self.peek().text == "(":
                raise self.error("an iota with one reshape dim takes no transpose T(...)")
        else:
            if not at_transpose:
                raise self.error(
                    f"expected 'T(' after iota reshape dims {_bracketed(iota.reshape_dims)}: "
                    "a multi-dim iota needs a transpose"
                )
            iota.transpose_token = self.advance()
            self.expect("(", "expected '(' after 'T'")
            perm = self._parse_int_list(
                "an iota transpose index", ")", "expected ')' to close the iota transpose"
            )
            iota.transpose_perm = [t.value for t in perm]
        return iota

    def _parse_subgroup_kinds(self) -> list[_Token]:
        self.expect("{", "expected '{' to open the last_tile_dims list")
        kinds: list[_Token] = []
        if self.at("}"):
            self.advance()
            return kinds
        while True:
            token = self.token
            if token.kind != "ident" or token.text not in SUBGROUP_KINDS:
                raise self.error(
                    f"expected a subgroup kind (manual, replicated or unreduced) "
                    f"in last_tile_dims, got {token.describe()}"
                )
            kinds.append(self.advance())
            if not self.at(","):
                break
            self.advance()
        self.expect("}", "expected ',' or '}' in the last_tile_dims list")
        return kinds

    # -- metadata (checked like XLA, then dropped) ----------------------------

    def _parse_metadata(self) -> None:
        self.expect("{", "expected '{' to open metadata")
        if self.at("{"):
            while True:
                self.expect("{", "expected '{' to open a metadata entry")
                self._parse_metadata_fields()
                if not self.at(","):
                    break
                self.advance()
            self.expect("}", "expected ',' or '}' in the metadata list")
        else:
            self._parse_metadata_fields()

    def _parse_metadata_fields(self) -> None:
        """Fields of one OpMetadata up to and including its closing '}'."""
        seen = set()
        while not self.at("}"):
            if seen and self.at(","):
                self.advance()
            token = self.token
            if token.kind != "attr":
                raise self.error(f"expected a metadata field name=, got {token.describe()}")
            name = token.text
            if name not in _METADATA_FIELDS:
                raise self.error(
                    f"unknown metadata field '{name}' (expected one of {', '.join(_METADATA_FIELDS)})"
                )
            if name in seen:
                raise self.error(f"metadata field '{name}' given twice")
            seen.add(name)
            self.advance()
            self._parse_metadata_value(name)
        self.advance()

    def _parse_metadata_value(self, name: str) -> None:
        if name in _METADATA_STRING_FIELDS:
            if self.token.kind != "string":
                raise self.error(f"metadata field '{name}' expects a quoted string")
            self.advance()
        elif name in _METADATA_INT32_FIELDS:
            token = self.expect_int(f"an integer for metadata field '{name}'")
            if not -(2**31) <= token.value < 2**31:
                raise self.error(f"metadata field '{name}' is out of int32 range", token)
        else:  # profile_type: a braced list of ProfileType numbers
            self.expect("{", "metadata field 'profile_type' expects a braced list like {1}")
            if self.at("}"):
                self.advance()
                return
            for token in self._parse_int_list("a profile type", "}", "expected '}' after profile types"):
                if token.value not in _PROFILE_TYPES:
                    raise self.error(f"unknown profile type {token.value}", token)


def _bracketed(values: Sequence[int]) -> str:
    return f"[{_join_ints(values)}]"


class _SingleBuilder:
    """Checks a parsed single sharding and builds it the way XLA does."""

    def __init__(self, parser: _Parser, spec: _SingleSpec):
        self.parser = parser
        self.spec = spec

    def error(self, message: str, token: _Token) -> ShardingSyntaxError:
        return self.parser.error(message, token)

    def build(self) -> HloSharding:
        sharding = self._build_without_group()
        if self.spec.shard_group is not None:
            sharding = sharding.with_shard_group(self.spec.shard_group)
        return sharding

    def _build_without_group(self) -> HloSharding:
        spec = self.spec
        if spec.replicate_last is not None and spec.subgroup_attr is not None:
            raise self.error(
                "use either last_tile_dim_replicate or last_tile_dims={...}, not both",
                spec.replicate_last,
            )
        kind = spec.kinds[0].text if spec.kinds else None
        if kind == "maximal":
            return self._build_maximal()
        if kind is not None:
            # XLA ignores last_tile_dim(s) here, so they are accepted and
            # dropped; a device list, though, contradicts the kind.
            for token in (spec.device_attr, spec.tile and spec.tile.token):
                if token is not None:
                    raise self.error(f"{kind} shardings cannot have devices", token)
            return HloSharding(kind)
        if spec.device_attr is not None:
            raise self.error("device=N is only valid in a maximal sharding", spec.device_attr)
        if spec.tile is None:
            raise self.error(
                "expected a sharding kind (replicated, manual, maximal, unknown, unreduced) "
                "or devices=[...]",
                spec.open_brace,
            )
        return self._build_tiled()

    def _build_maximal(self) -> HloSharding:
        spec = self.spec
        if spec.tile is not None:
            raise self.error(
                "maximal shardings take one device=N, not a devices= list", spec.tile.token
            )
        if spec.device is None:
            raise self.error("maximal shardings need a device: write {maximal device=N}", spec.kinds[0])
        if spec.device.value < 0:
            raise self.error(f"device ids must not be negative, got {spec.device.value}", spec.device)
        return HloSharding.maximal(spec.device.value)

    def _build_tiled(self) -> HloSharding:
        tile_spec = self.spec.tile
        for size, token in zip(tile_spec.dims, tile_spec.dim_tokens):
            if size < 1:
                raise self.error(f"tile dims must be positive, got {size}", token)
        tile = self._iota_tile(tile_spec) if tile_spec.iota else self._explicit_tile(tile_spec)
        subgroup_kinds = self._subgroup_kinds(tile)
        try:
            return HloSharding.tiled(tile, subgroup_kinds)
        except ValueError as error:
            raise self.error(str(error), tile_spec.token) from None

    def _iota_tile(self, tile_spec: _TileSpec) -> TileAssignment:
        iota = tile_spec.iota
        for size in iota.reshape_dims:
            if size < 1:
                raise self.error(
                    f"iota reshape dims must be positive, got {_bracketed(iota.reshape_dims)}",
                    iota.reshape_token,
                )
        need, have = math.prod(tile_spec.dims), math.prod(iota.reshape_dims)
        if need != have:
            raise self.error(
                f"tile dims {_bracketed(tile_spec.dims)} need {need} devices but iota "
                f"reshape dims {_bracketed(iota.reshape_dims)} hold {have}",
                iota.reshape_token,
            )
        perm = iota.transpose_perm
        if perm is not None:
            rank = len(iota.reshape_dims)
            if len(perm) != rank:
                raise self.error(
                    f"iota transpose T({_join_ints(perm)}) has {len(perm)} entries but the "
                    f"reshape dims {_bracketed(iota.reshape_dims)} have {rank}",
                    iota.transpose_token,
                )
            if sorted(perm) != list(range(rank)):
                raise self.error(
                    f"iota transpose T({_join_ints(perm)}) is not a permutation of 0..{rank - 1}",
                    iota.transpose_token,
                )
        return TileAssignment.iota(tile_spec.dims, iota.reshape_dims, perm)

    def _explicit_tile(self, tile_spec: _TileSpec) -> TileAssignment:
        devices, tokens = tile_spec.devices, tile_spec.device_tokens
        need = math.prod(tile_spec.dims)
        if len(devices) != need:
            raise self.error(
                f"tile dims {_bracketed(tile_spec.dims)} need {need} devices "
                f"but the list has {len(devices)}",
                tokens[0],
            )
        if need == 1:
            # XLA refuses this; a one-device sharding is {maximal device=N}.
            raise self.error(
                "a tiled sharding needs more than one device; for one device write "
                "{maximal device=N}",
                tokens[0],
            )
        seen = set()
        for device, token in zip(devices, tokens):
            if device < 0:
                raise self.error(f"device ids must not be negative, got {device}", token)
            if device in seen:
                raise self.error(f"device {device} appears twice in the tile assignment", token)
            seen.add(device)
        return TileAssignment(tuple(tile_spec.dims), explicit=tuple(devices))

    def _subgroup_kinds(self, tile: TileAssignment) -> tuple[str, ...]:
        spec = self.spec
        if spec.replicate_last is not None:
            return ("replicated",)
        if not spec.subgroup_kinds:
            return ()
        kinds = tuple(token.text for token in spec.subgroup_kinds)
        if len(kinds) > tile.rank:
            raise self.error(
                f"last_tile_dims lists {len(kinds)} kinds but the tile assignment "
                f"has only {tile.rank} dims",
                spec.subgroup_attr,
            )
        return kinds


def parse_hlo_sharding(text: str) -> HloSharding:
    """Parses XLA sharding text, canonicalizing it exactly as XLA does.

    Raises ShardingSyntaxError (with a 1-based column) for text XLA rejects,
    and for text XLA would accept without a sensible meaning.
    """
    if not isinstance(text, str):
        raise TypeError(f"sharding text must be a str, got {type(text).__name__}")
    return _Parser(text).parse()
