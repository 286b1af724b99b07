"""What the search reads and answers, and what a move between layouts costs.

`Graph` is the problem (the propagation graph plus what the module says:
pins, ties, preferences), `Plan` the answer, `CostModel` the unit of price
(bytes per device, or seconds when bandwidths are given), and `Pricer` the
price of a move from one layout to another: the reshard planner's plan,
priced once per class of moves and scaled to each tensor.  The rest of the
package reads this file; it reads none of the rest.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Sequence

from stablehlo_spmd.errors import SpmdError
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.op_graph import Node
from stablehlo_spmd.op_rules import OpRule
from stablehlo_spmd.reshard import ReshardError, plan
from stablehlo_spmd.sharding import Sharding


class SearchTimeLimit(SpmdError):
    """The solver ran out of time before it found any plan."""


class InfeasibleBudget(SpmdError):
    """No plan fits the memory budget; `smallest` is the least peak found,
    or, where the memory floor refused the budget before any plan was
    solved, the floor (no plan holds less)."""

    def __init__(self, message: str, smallest: float):
        super().__init__(message)
        self.smallest = smallest


@dataclasses.dataclass(frozen=True)
class CostModel:
    """What a plan costs: bytes per device, or seconds when bandwidths are given.

    `bandwidths` are bytes per second per mesh axis; a collective over
    several axes runs at the slowest one's.  `latency` is each
    collective's fixed cost in seconds (the alpha of an alpha-beta model),
    or, per axis, `latencies` (a collective over several pays the longest).
    `flops_per_second`, in seconds only, prices what each device computes:
    a contraction's multiply-adds (2 FLOPs each) over the devices its
    strategy splits it across, at this peak (`hardware.py` names profiles).

    `float_compute_bytes` is what memory the target's arithmetic takes: the
    fewest bytes it computes a float element in.  XLA's CPU backend
    normalizes bf16 and f16 arithmetic to f32 (4): there a temporary of
    either type read by such arithmetic takes f32's bytes, and a
    contraction with a 16-bit result reads an f32 copy of a 16-bit
    argument (one copy, shared by every contraction that reads it, and by
    the program's own converts of it); a contraction with an f32 result
    reads 16-bit operands as they are.  0: each type at its own width, as
    GPUs and TPUs compute them.

    `windowed_reduction_above`: where a reduction over a dim longer than
    this is computed as a tree of windowed reductions, which read their
    operand from memory, so that it is a buffer even where a fusion would
    compute it inside the reduction (XLA's CPU backend: 32); 0 for none.
    """

    bandwidths: tuple[tuple[str, float], ...] = ()
    latency: float = 0.0
    float_compute_bytes: int = 0
    windowed_reduction_above: int = 0
    latencies: tuple[tuple[str, float], ...] = ()
    flops_per_second: float = 0.0

    @property
    def in_seconds(self) -> bool:
        return bool(self.bandwidths)

    def price(self, steps) -> float:
        fixed, moved = self.parts(steps)
        return fixed + moved

    def parts(self, steps) -> tuple[float, float]:
        """The price of `steps` as (latencies, the part that grows with the bytes)."""
        if not self.bandwidths:
            return 0.0, float(sum(step.bytes_per_device for step in steps))
        speed = dict(self.bandwidths)
        alpha = dict(self.latencies)
        fixed = moved = 0.0
        for step in steps:
            if step.bytes_per_device <= 0:
                continue
            slowest = min((speed.get(axis, math.inf) for axis in step.axes), default=math.inf)
            fixed += max((alpha.get(axis, self.latency) for axis in step.axes),
                         default=self.latency)
            moved += step.bytes_per_device / slowest if slowest < math.inf else 0
        return fixed, moved

    def compute_seconds(self, flops: float) -> float:
        """Seconds a device takes for `flops` of its own (0 where compute is not priced)."""
        if not self.in_seconds or not self.flops_per_second:
            return 0.0
        return flops / self.flops_per_second


@dataclasses.dataclass
class Graph:
    """What the search reads: the propagation graph plus what the module says.

    `pins` are the user's layouts (hard constraints); `open_dims` the dims
    of a pin the search may still split.  `carried` are pairs of values
    that must share a layout (a training step's updated parameter and the
    parameter).  `outputs` live to the end of the program."""

    mesh: Mesh
    shapes: Sequence[tuple[int, ...]]
    element_bytes: Sequence[int]
    nodes: Sequence[Node]
    pins: dict[int, Sharding] = dataclasses.field(default_factory=dict)
    open_dims: dict[int, frozenset[int]] = dataclasses.field(default_factory=dict)
    carried: Sequence[tuple[int, int]] = ()
    outputs: Iterable[int] = ()
    arguments: Iterable[int] = ()
    # A layout per value that wins where plans tie: a plan pays `search.PREFERENCE`
    # of a value's bytes per device for each value it lays out otherwise.
    preferred: dict[int, Sharding] = dataclasses.field(default_factory=dict)
    # Per value, whether its elements are floats (what a target that
    # computes narrow floats wider holds wider); empty: none are.
    floating: Sequence[bool] = ()


@dataclasses.dataclass
class Plan:
    """The search's answer: a layout per value, and how it was reached."""

    layouts: list[Sharding | None]
    why: list[str]                 # per value: pinned, searched, follows ...
    cost: float                    # the objective: bytes (or seconds) per step
    peak_memory: float             # estimated bytes per device at the peak
    solve_seconds: float
    build_seconds: float
    variables: int
    constraints: int
    units: int
    unit_classes: int
    cost_in_seconds: bool = False
    # Partial values read by several ops, each summed once into this layout
    # for all of them (their layouts are the Partial ones their ops write).
    sum_targets: dict[int, Sharding] = dataclasses.field(default_factory=dict)
    # Per contraction the search laid out, keyed by its first result: the
    # mesh axes each factor of its rule runs over.  The partitioner runs it
    # so (`module_shardings.FACTOR_AXES`), whatever else would move less
    # around it: the plan's bytes and memory are those of this way.
    factor_axes: dict[int, tuple[tuple[str, ...], ...]] = dataclasses.field(
        default_factory=dict)
    # XLA's own memory analysis of the partitioned plan, where the pass was
    # given a way to compile it; and how many plans it measured.
    measured_memory: float | None = None
    measured_plans: int = 0
    # Whether the search's time limit ended it before it proved
    # its plan: then another run (or a busier machine) may find another.
    time_limited: bool = False
    # Where `cost` is in seconds: the bytes per device the plan's collectives
    # deliver, and the seconds of its contractions' arithmetic within `cost`.
    moved_bytes: float | None = None
    compute_seconds: float = 0.0
    # The segments the plan recomputes in the backward (`remat.Recomputation`),
    # and what running them again costs, within `cost`.
    recomputations: tuple = ()
    recompute_cost: float = 0.0


def format_bytes(size: float | None) -> str:
    if size is None:
        return "unlimited"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.2f} {unit}"
        size /= 1024
    return f"{size}"


def _product(axis_size: dict[str, int], axes: Iterable[str]) -> int:
    result = 1
    for axis in axes:
        result *= axis_size[axis]
    return result


class Pricer:
    """What a move between two layouts costs under `cost_model`, with every
    price paid kept: a `Search` holds one for all its strategies and edges.
    The reshard planner's plan of a move is priced once per class of moves
    (`_move_class`) and scaled to each tensor."""

    def __init__(self, mesh: Mesh, cost_model: CostModel):
        self.cost_model = cost_model
        self.axis_size = dict(zip(mesh.axis_names, mesh.mesh_shape))
        self._costs: dict[tuple, float] = {}
        self._bytes: dict[tuple, float] = {}    # the same moves, in bytes delivered
        self._plans: dict[tuple, tuple[float, float, float]] = {}   # see `_price`
        self._divide_masks: dict[int, int] = {}
        sizes = [n for n in mesh.mesh_shape if n > 1]
        self._group_sizes = sorted({math.prod(group) for r in range(1, len(sizes) + 1)
                                    for group in itertools.combinations(sizes, r)})

    def cost(self, source: Sharding, target: Sharding, shape, element_bytes: int) -> float:
        if source is target:   # layouts are interned (`_Layouts.get`)
            return 0.0
        return self._price(source, target, shape, element_bytes)

    def bytes(self, source: Sharding, target: Sharding, shape, element_bytes: int) -> float:
        """The bytes per device the move delivers, whatever the cost model's unit."""
        if source is target:
            return 0.0
        if not self.cost_model.in_seconds:
            return self._price(source, target, shape, element_bytes)
        self._price(source, target, shape, element_bytes)
        return self._bytes[(id(source), id(target), shape, element_bytes)]

    def _price(self, source: Sharding, target: Sharding, shape, element_bytes: int) -> float:
        key = (id(source), id(target), shape, element_bytes)
        found = self._costs.get(key)
        if found is None:
            # Where both layouts split every dim evenly (all the search makes;
            # a user's pin may not), a plan's moves are fractions of the
            # tensor that depend on the shape only through which dims each
            # group of axes divides: one plan serves every tensor alike (a
            # 13k-op step has few).
            size = math.prod(shape) * element_bytes
            even = self._even(source, shape) and self._even(target, shape)
            like = (self._move_class(source, target, shape) if even else None) or \
                (id(source), id(target), len(shape), self._divides(shape) if even else shape)
            parts = self._plans.get(like)
            if parts is None or not size:
                try:
                    steps = plan(source, target, shape, element_bytes, with_pairs=False)
                    fixed, moved = self.cost_model.parts(steps)
                    delivered = sum(step.bytes_per_device for step in steps)
                    parts = (fixed, moved / size if size else 0.0,
                             delivered / size if size else 0.0)
                except ReshardError:
                    parts = (math.inf, 0.0, math.inf)
                if size:
                    self._plans[like] = parts
            found = self._costs[key] = parts[0] + parts[1] * size
            self._bytes[key] = parts[2] * size
        return found

    def _move_class(self, source: Sharding, target: Sharding, shape) -> tuple | None:
        """What an even move's price per byte depends on: for each dim that
        either layout splits, its axes on each side and which axis groups
        divide it; and the pending sums.  None for layouts with manual axes,
        a maximal device or two meshes, which are priced as they are.

        A dim neither layout splits matters only as a place to park axes
        on a detour, where a group divides it (the planner pads no detour):
        so the same move on tensors of other ranks, with such dims alike,
        moves the same fraction over the same axes.  And the planner's moves
        act on each dim alike, so a transposed move moves the same bytes
        (bytes only: a tie between two dims goes to the first, and may put
        a slower axis first).  On BERT's training
        step 24k moves are priced: keyed by their layouts they took 14.6k
        plans, 2 s of building the problem; as classes, 413 plans, and the
        problem builds in 0.45 s.  `test_reshard.py` keeps both facts."""
        if source.manual or target.manual or source.maximal_device is not None \
                or target.maximal_device is not None \
                or (source.mesh is not target.mesh and source.mesh != target.mesh):
            return None
        masks = self._divides(shape)
        split = [(s, t, mask) for s, t, mask in zip(source.dim_axes, target.dim_axes, masks)
                 if s or t]
        if not self.cost_model.bandwidths:
            # Ties between moves go to the first dim, so a transposed move may
            # take another axis first: the same bytes, but not the same time.
            split.sort()
        parking = tuple(sorted(mask for s, t, mask in zip(source.dim_axes, target.dim_axes, masks)
                               if not (s or t) and mask))
        return (tuple(split), parking, source.unreduced, target.unreduced, source.reduction,
                target.reduction)

    def _even(self, layout: Sharding, shape) -> bool:
        """Whether `layout` splits every dim of `shape` evenly by whole mesh axes."""
        axis_size = self.axis_size
        for n, axes in zip(shape, layout.dim_axes):
            if any(axis not in axis_size for axis in axes) or n % _product(axis_size, axes):
                return False
        return True

    def _divides(self, shape) -> tuple[int, ...]:
        """Per dim, the mask of the mesh's axis-group sizes that divide it."""
        masks = []
        for n in shape:
            found = self._divide_masks.get(n)
            if found is None:
                found = self._divide_masks[n] = sum(
                    1 << i for i, size in enumerate(self._group_sizes) if n % size == 0)
            masks.append(found)
        return tuple(masks)

    def rule_tensor_cost(self, source: Sharding, target: Sharding, tensor, rule: OpRule) -> float:
        # A result's shape from its factors (the rule is all a strategy knows);
        # its element size is the node's, so the rule's cost is per byte of
        # element and `Search._add_node` scales it.
        return self._price(source, target, _rule_shape(tensor, rule), 1)

    def rule_tensor_bytes(self, source: Sharding, target: Sharding, tensor, rule: OpRule) -> float:
        return self.bytes(source, target, _rule_shape(tensor, rule), 1)


def _rule_shape(tensor, rule: OpRule) -> tuple[int, ...]:
    return tuple(math.prod(rule.factor_sizes[f] for f in dim) for dim in tensor)
