"""Ops that move data along a sharded dimension, kept sharded by halo exchange.

A slice, a pad, a concatenation, a reversal or a window (reduce_window,
convolution, select_and_scatter) along a dimension split over mesh axes
needs, on each device, a run of global elements that starts near its own
shard: GSPMD's halo exchange.  Every such dimension is described as a
window (`Emitter.halo_window`): the device at coordinate q needs
``length`` elements from global index ``q*s + offset + q*step`` (s its shard
size), which its own shard and one collective_permute from each neighbour
provide; elements outside the tensor are the op's padding value.  The op
then runs per device with that dimension's offsets and padding made local.

The rule table says which dims these are (their PERMUTATION factors).  A
handler gives those factors the mesh axes the op's result wants, checks
that every window fits within the neighbours' shards (`halo_extent`), and
otherwise leaves the dimension to the generic path (gathered whole).  When
the result wants a layout the operands do not have, the handler also plans
the op aligned with each operand's layout and keeps the plan that moves the
fewest bytes, halos included (`_setup`), as XLA's partitioner does for
convolutions: a grouped convolution runs on the groups each device holds
and only its result moves.

A base-dilated dim (a convolution's lhs dilation, reduce_window's base
dilation, pad's interior padding) is a window over the dilated input: each
device reads the elements its windows touch and the local op dilates them
again, with its padding made local (`_strided_halo`).

* slice: ``offset = start``, one strided local slice;
* pad: ``offset = -low``, filled with the pad value (interior padding: a
  base dilation);
* concatenate: each operand windowed at ``offset = -its start``, merged by
  position (the pipeline-parallel shift ``concat(new, state[:-1])`` is a
  single collective_permute to the next stage);
* reverse: each shard reversed in place and sent to its mirror device, then
  shifted by the padding of an uneven dimension;
* reduce_window / convolution: ``offset = -low padding``, ``length`` the
  input that the device's windows read; the local op has no padding there
  (but where a base dilation leaves some); a grouped convolution's local
  op has the group count of the groups a device holds;
* select_and_scatter: the operand windowed as for pooling (padded with a
  value the select never picks), the local scatter lands on the window, and
  each device adds what its neighbours scattered into its shard
  (`Emitter.halo_return`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo as hlo

from stablehlo_spmd import op_rules
from stablehlo_spmd.collectives import Piece, permute_groups
from stablehlo_spmd.halos import halo_extent, pieces_elements, window_pieces, within_one_shard
from stablehlo_spmd.ir import cached_attr
from stablehlo_spmd.module_shardings import MHLO_SHARDING, is_sharding_constraint
from stablehlo_spmd.op_rules import FactorKind, OpRule, int_array
from stablehlo_spmd.op_rules.windowed import (
    conv_window, is_zero_scalar, padding_pairs, parallel_spatial_dims, producer)
from stablehlo_spmd.partitioning.context import PartitionContext
from stablehlo_spmd.partitioning.strategy import (
    Plan, factor_axes, plan_from_axes, plan_reshard_bytes, reshard_bytes, strategy)
from stablehlo_spmd.shapes import (
    element_bytes, int_constant, local_type, shape_of, tensor_bytes, zeros)
from stablehlo_spmd.sharding import Sharding


@dataclasses.dataclass(frozen=True)
class Halo:
    """Operand `operand`'s dim `dim` is read as windows (see `halo_window`;
    `starts`, when given, is each device's start instead of `offset` and
    `step`); the local op pads each window by `padding` (low, high) along
    `dim`.  Devices from coordinate `live` on compute padding only (None:
    none).  When `keep` is given, the local op computes ``max(keep)`` more
    results than its share along the dim, the device at coordinate q keeps
    its share from ``keep[q]`` on and reads only the first ``needed[q]``
    elements of its window (the rest feeds results it drops).
    """

    operand: int
    dim: int
    offset: int
    length: int
    step: int = 0
    padding: tuple[int, int] = (0, 0)
    live: int | None = None
    starts: tuple[int, ...] | None = None
    keep: tuple[int, ...] = ()
    needed: tuple[int, ...] | None = None


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _setup(p: PartitionContext, op: ir.Operation,
           halos: Callable[[Plan], list[Halo]],
           forced: Callable[[OpRule, list[tuple]], None] | None = None,
           always: bool = False,
           windowed_kinds: tuple[FactorKind, ...] = (FactorKind.PERMUTATION,),
           returned: bool = False,
           seed: Callable[[OpRule, list[tuple]], None] | None = None) -> Plan | None:
    """The cheapest of the plans that align the op with its result or with
    one of its operands (`_alignments`), priced in bytes moved
    (`_moved_bytes`).  None when no window is left, unless `always` (the op
    has no generic path).  The plan's `detail` is the windows found.
    `returned`: the op returns what it computes on its windows to their
    owners, which only neighbour halos serve (see `_fits`).  `seed` may give
    factors axes the rule's defaults leave out, before windows are checked.

    Aligning with an operand is what XLA's partitioner does when the result
    wants a layout the operands do not have (a grouped convolution whose
    output is split on its windows, its operands on the groups): the op
    runs where the data is and only its (often much smaller) result moves.
    """
    rule = op_rules.rule_for(op)
    if rule is None or any(shape_of(r) is None for r in op.results):
        return None
    wanted = p.result_shardings(op)
    best: tuple[float, Plan] | None = None
    for target in _alignments(p, op, rule, wanted):
        plan = _aligned_plan(p, op, rule, wanted, target, halos, forced, windowed_kinds,
                             returned, seed)
        cost = _moved_bytes(p, op, plan)
        if best is None or cost < best[0]:
            best = (cost, plan)
        if not cost:
            break
    plan = best[1]
    return plan if plan.detail or always else None


def _alignments(p: PartitionContext, op: ir.Operation, rule: OpRule, wanted: list[Sharding]):
    """Result shardings to plan the op for: the one propagation chose, then
    the ones each operand's sharding implies (its factors' axes carried to
    the results), then the one all operands imply together (each factor
    from the first operand that splits it).  Lazily: the driver stops at a
    plan that moves nothing."""
    yield wanted
    seen = {tuple(wanted)}
    given: list[dict[int, tuple[str, ...]]] = []
    for operand, dims in zip(op.operands, rule.operands):
        source = p.shardings.get(operand)
        if source is None or not dims:
            continue
        factor_axes_of = {}
        for dim, factors in enumerate(dims):
            for factor, dealt in op_rules.project_axes(source.dim_axes[dim], factors,
                                                       rule.factor_sizes, p.axis_size):
                factor_axes_of[factor] = dealt
        given.append(factor_axes_of)
    joint: dict[int, tuple[str, ...]] = {}
    for factor_axes_of in given:
        for factor, dealt in factor_axes_of.items():
            joint.setdefault(factor, dealt)
    for factor_axes_of in (*given, joint):
        implied = [_implied_sharding(p, dims, factor_axes_of) for dims in rule.results]
        if tuple(implied) not in seen:
            seen.add(tuple(implied))
            yield implied


def _implied_sharding(p: PartitionContext, dims, factor_axes_of) -> Sharding:
    """The sharding a tensor with factor `dims` has when each factor runs over
    ``factor_axes_of[factor]`` (an axis already used by an earlier dim is
    left out)."""
    used: set[str] = set()
    dim_axes = []
    for factors in dims:
        axes = tuple(a for f in factors for a in factor_axes_of.get(f, ()) if a not in used)
        used.update(axes)
        dim_axes.append(axes)
    return Sharding(p.mesh, tuple(dim_axes))


def _aligned_plan(p: PartitionContext, op: ir.Operation, rule: OpRule, wanted: list[Sharding],
                  target: list[Sharding], halos: Callable[[Plan], list[Halo]],
                  forced: Callable[[OpRule, list[tuple]], None] | None,
                  windowed_kinds: tuple[FactorKind, ...], returned: bool,
                  seed: Callable[[OpRule, list[tuple]], None] | None = None) -> Plan:
    """Factor axes from `target` (as if the results wanted it), with the
    factors of `windowed_kinds` sharded as it wants them, less those on
    operand dims whose windows do not fit (reported as gathered); the
    results then move to `wanted`."""
    axes = factor_axes(p, op, rule, target)
    used = {a for factor_axes in axes for a in factor_axes}
    for sharding, dims in zip(target, rule.results):
        for dim, factors in enumerate(dims):
            if len(factors) != 1 or rule.factor_kinds[factors[0]] not in windowed_kinds:
                continue
            factor, dim_axes = factors[0], sharding.dim_axes[dim]
            if dim_axes and not axes[factor] and not used & set(dim_axes):
                axes[factor] = dim_axes
                used.update(dim_axes)
    if seed is not None:
        seed(rule, axes)
    stripped: set[int] = set()  # factors kept whole here against the rule: reported
    while True:
        if forced is not None:
            before = list(axes)
            forced(rule, axes)
            stripped.update(f for f, (old, new) in enumerate(zip(before, axes))
                            if set(old) - set(new))
        plan = plan_from_axes(p, op, rule, wanted, axes, stripped)
        found = halos(plan)
        misfits = [h for h in found if not _fits(p, op, plan.required, h, returned)]
        if not misfits:
            plan.detail = found
            return plan
        for halo in misfits:
            for factor in rule.operands[halo.operand][halo.dim]:
                if axes[factor]:
                    stripped.add(factor)
                axes[factor] = ()


def _moved_bytes(p: PartitionContext, op: ir.Operation, plan: Plan) -> float:
    """Bytes per device a plan moves: the reshards around the local op and
    its halo exchanges."""
    total = plan_reshard_bytes(p, op, plan)
    for halo in plan.detail:
        layout = plan.required[halo.operand]
        received = _halo_elements(p, op, plan.required, halo)
        if not received:
            continue
        operand = op.operands[halo.operand]
        shard = _shard(p, shape_of(operand)[halo.dim], layout.dim_axes[halo.dim])
        total += tensor_bytes(local_type(operand.type, layout)) * received / shard
    return total


def _gathered(operand: int, dim: int) -> Halo:
    """A dimension no window describes: it is left to the generic path."""
    return Halo(operand, dim, 0, -1)


def _halo_elements(p: PartitionContext, op: ir.Operation, required, halo: Halo,
                   returned: bool = False) -> int | None:
    """Elements along the dim a device receives for `halo`'s window, by the
    cheaper of `halo_window`'s ways (neighbour halos, or each piece from
    the shard that holds it, which only serves where it moves less than
    gathering the dim); None where neither serves it.  Where the op
    returns what it computes on the windows (`returned`), only neighbour
    halos serve."""
    if halo.length < 0:
        return None
    dim_axes = required[halo.operand].dim_axes[halo.dim]
    if not dim_axes:
        return 0
    size = shape_of(op.operands[halo.operand])[halo.dim]
    count = p.mesh.axes_size(dim_axes)
    shard = _ceil(size, count)
    extent = halo_extent(shard, count, halo.offset, halo.length, halo.step, size, halo.live,
                         halo.starts, halo.needed)
    if returned:
        return None if extent is None else sum(extent)
    if halo.starts is None and within_one_shard(shard, halo.offset, halo.length, halo.step):
        return halo.length   # no halo: the whole window comes from one other shard
    starts = halo.starts or [halo.offset + q * halo.step for q in range(count)]
    pieces = pieces_elements(window_pieces(shard, count, size, starts, halo.length, halo.live,
                                           halo.needed))
    if extent is not None:
        return min(sum(extent), pieces)
    return pieces if pieces <= (count - 1) * shard else None


def _fits(p: PartitionContext, op: ir.Operation, required, halo: Halo,
          returned: bool = False) -> bool:
    return _halo_elements(p, op, required, halo, returned) is not None


def _window(p: PartitionContext, op: ir.Operation, plan: Plan, local: ir.Value, halo: Halo,
            fill: ir.Value | None = None) -> ir.Value:
    dim_axes = plan.required[halo.operand].dim_axes[halo.dim]
    size = shape_of(op.operands[halo.operand])[halo.dim]
    return p.emitter.halo_window(local, halo.dim, dim_axes, size, halo.offset, halo.length,
                                 halo.step, fill, halo.live, halo.starts, halo.needed)


def _computed_type(result: ir.Value, plan: Plan, kept: dict[int, Halo]) -> ir.Type:
    """The local op's result type: its share of the result, and the extra
    windows a `Halo.keep` asks for along the result dims of `kept`."""
    local = ir.RankedTensorType(local_type(result.type, plan.produced[0]))
    shape = list(local.shape)
    for dim, halo in kept.items():
        shape[dim] += max(halo.keep, default=0)
    return ir.RankedTensorType.get(shape, local.element_type)


def _own_results(p: PartitionContext, plan: Plan, local: ir.Value,
                 kept: dict[int, Halo]) -> ir.Value:
    """Each device's share of `local` (see `Halo.keep`)."""
    for dim, halo in kept.items():
        if halo.keep:
            share = shape_of(local)[dim] - max(halo.keep)
            local = p.emitter.per_device_slice(local, dim, plan.produced[0].dim_axes[dim],
                                               halo.keep, share)
    return local


def _sharded(layout: Sharding | None, dim: int) -> tuple:
    return layout.dim_axes[dim] if layout is not None else ()


def _shard(p: PartitionContext, size: int, dim_axes: tuple) -> int:
    return _ceil(size, p.mesh.axes_size(dim_axes))


def windowed_strategy(op_name: str, plan: Callable[[PartitionContext, ir.Operation], Plan | None]):
    """Register a window strategy: its `plan` reads the op's attributes once
    and leaves, as the plan's `detail`, the emission that uses them."""
    strategy(op_name, plan=plan)(lambda p, op, plan, operands: plan.detail(operands))


def _array_attr(values) -> ir.Attribute:
    return ir.DenseI64ArrayAttr.get(list(values))


def _padding_attr(pairs) -> ir.Attribute | None:
    """A window op's ``padding`` attribute: a rank x 2 tensor of (low, high)."""
    if not pairs:
        return None
    rows = [list(pair) for pair in pairs]
    return cached_attr(f"dense<{rows}> : tensor<{len(rows)}x2xi64>")


def _strided_halo(p: PartitionContext, operand: int, dim: int, dim_axes: tuple, size: int,
                  out_size: int, offset: int, stride: int = 1, extent: int = 1,
                  dilation: int = 1) -> Halo:
    """The input a device's share of `out_size` results reads along `dim`
    when result j reads `extent` elements from ``offset + j*stride``.

    With a base `dilation` those positions are in the dilated input, whose
    element i sits at ``i * dilation`` (the holes between are the op's
    padding value): each device reads the elements its windows touch and
    the local op, dilating them again, pads the window by what its first
    and last windows reach past them.  That padding is the same on every
    device when each device's windows start at the same phase of the
    dilation (``s_out * stride`` a multiple of it, as in the input gradient
    of an evenly split strided convolution).  Otherwise, at stride 1, each
    device reads from its own first element and the local op computes a
    few more windows than its share, padded as the device whose first
    window starts furthest before its first element needs, and each device
    keeps its own windows (`Halo.keep`).  XLA's partitioner does the same.
    At a larger stride the dim is gathered.
    """
    s_in, s_out = _shard(p, size, dim_axes), _shard(p, out_size, dim_axes)
    live = _ceil(out_size, s_out)
    if (s_out * stride) % dilation:
        if stride != 1:
            return _gathered(operand, dim)
        # Device q's first window starts at dilated position q*s_out + offset.
        starts = [q * s_out + offset for q in range(p.mesh.axes_size(dim_axes))]
        firsts = [-(-start // dilation) for start in starts]
        lasts = [(start + s_out + extent - 2) // dilation for start in starts]
        before = [first * dilation - start for first, start in zip(firsts, starts)]
        low = max(before)
        keep = tuple(low - b for b in before)
        needed = tuple(last - first + 1 for first, last in zip(firsts, lasts))
        length = max(needed[:live])
        if length <= 0:
            # No device's windows touch an element (all of them fall in
            # the holes): as for a window past the input below.
            return _gathered(operand, dim)
        windows = s_out + max(keep)
        return Halo(operand, dim, 0, length, 0,
                    (low, windows + extent - 2 - low - (length - 1) * dilation), live,
                    tuple(first - q * s_in for q, first in enumerate(firsts)), keep, needed)
    first = -(-offset // dilation)                      # the first element read
    reach = offset + (s_out - 1) * stride + extent - 1  # the last position read
    last = reach // dilation
    if last < first:
        return _gathered(operand, dim)
    return Halo(operand, dim, first, last - first + 1, s_out * stride // dilation - s_in,
                (first * dilation - offset, reach - last * dilation), live)


# ------------------------------------------------------------ slice, pad

def _window_halo(p: PartitionContext, op: ir.Operation, plan: Plan, operand: int,
                 dim: int) -> Halo | None:
    """What operand `operand` must read along its split `dim`, from the
    rule: the `Window` of its PERMUTATION factor (in the dilated input where
    the op dilates it), or the whole dim where that factor has none; None
    where the dim moves no data."""
    rule = plan.rule
    moved = [f for f in rule.operands[operand][dim]
             if rule.factor_kinds[f] is FactorKind.PERMUTATION]
    if not moved:
        return None
    # (A convolution's lhs dim also holds the window-size factor, which
    # moves nothing: each device sums its part of every window.)
    window = rule.windows[moved[0]] if len(moved) == 1 and rule.windows else None
    if window is None:
        return _gathered(operand, dim)
    return _strided_halo(p, operand, dim, plan.required[operand].dim_axes[dim],
                         shape_of(op.operands[operand])[dim], window.count, window.offset,
                         window.stride, window.extent, window.dilation)


def _permuted_halos(p: PartitionContext, op: ir.Operation, plan: Plan, skip=()) -> list[Halo]:
    """`_window_halo` of every split dim of operand 0 (but `skip`)."""
    found = []
    for dim, dim_axes in enumerate(plan.required[0].dim_axes):
        halo = _window_halo(p, op, plan, 0, dim) if dim_axes and dim not in skip else None
        if halo is not None:
            found.append(halo)
    return found


def _slice_attributes(op: ir.Operation):
    return (int_array(op.attributes["start_indices"]), int_array(op.attributes["limit_indices"]),
            int_array(op.attributes["strides"]))


def _slice_plan(p: PartitionContext, op: ir.Operation) -> Plan | None:
    """Windows on split dims; a small slice of a split dim the result wants
    whole comes from its owner, where that moves less than the cheapest
    windowed plan.  The plan's `detail` is (windows, owned)."""
    starts, _, strides = _slice_attributes(op)

    def halos(plan):
        return _permuted_halos(p, op, plan)

    # Slices have no generic per-device form (their attributes hold sizes).
    plan = _setup(p, op, halos, always=True)
    if plan is None:
        return None
    rule, wanted = plan.rule, plan.wanted
    as_wanted = _aligned_plan(p, op, rule, wanted, wanted, halos, None,
                              (FactorKind.PERMUTATION,), True)
    owned = _owned_slices(p, op, as_wanted, starts, strides)
    if owned:
        broadcast = _own_pieces(p, op, as_wanted, owned)
        if _moved_bytes(p, op, as_wanted) + broadcast < _moved_bytes(p, op, plan):
            plan = as_wanted
        else:
            owned = {}
    plan.detail = (_permuted_halos(p, op, plan, owned), owned)
    return plan


def _own_pieces(p: PartitionContext, op: ir.Operation, plan: Plan, owned) -> float:
    """Give `plan` the operand layout that leaves each owned slice with its
    owner, and return the bytes per device its broadcasts move."""
    dim_axes = list(plan.required[0].dim_axes)
    for dim, (axes, _) in owned.items():
        dim_axes[dim] = axes
    plan.required[0] = plan.required[0].with_dim_axes(dim_axes)
    shape = list(ir.RankedTensorType(local_type(op.operands[0].type, plan.required[0])).shape)
    count = 1
    for dim, (axes, _) in owned.items():
        shape[dim] = shape_of(op.results[0])[dim]
        count *= p.mesh.axes_size(axes)
    piece = math.prod(shape) * element_bytes(ir.RankedTensorType(op.operands[0].type).element_type)
    return 2 * piece * (count - 1) / count   # an all_reduce


@strategy("stablehlo.slice", plan=_slice_plan)
def emit_slice(p: PartitionContext, op: ir.Operation, plan: Plan, operands):
    n_in, m_out = shape_of(op.operands[0]), shape_of(op.results[0])
    starts, limits, strides = _slice_attributes(op)
    windows, owned = plan.detail
    value = operands[0]
    for dim, (axes, owner) in owned.items():
        value = _broadcast_piece(p, value, dim, axes, owner,
                                 _shard(p, n_in[dim], axes), starts[dim], m_out[dim], strides[dim])
    for halo in windows:
        value = _window(p, op, plan, value, halo)
    local_shape = shape_of(value)
    new_starts, new_limits, new_strides = [], [], []
    for dim in range(len(n_in)):
        if dim in owned:
            new_starts.append(0)
            new_limits.append(local_shape[dim])
            new_strides.append(1)
        elif _sharded(plan.required[0], dim):
            new_starts.append(0)
            new_limits.append(local_shape[dim])
            new_strides.append(strides[dim] if n_in[dim] != m_out[dim] else 1)
        else:
            new_starts.append(starts[dim])
            new_limits.append(limits[dim])
            new_strides.append(strides[dim])
    if (new_starts, new_limits, new_strides) != ([0] * len(n_in), list(local_shape),
                                                [1] * len(n_in)):
        value = hlo.SliceOp(value, new_starts, new_limits, new_strides).result
    return [value]


def _owned_slices(p: PartitionContext, op: ir.Operation, plan: Plan, starts, strides):
    """Dims the result wants whole although the operand is split there, whose
    slice lies inside one device's shard and is less than half the dim: the
    owner broadcasts it (a masked all-reduce, 2(p-1)/p of the slice) rather
    than everyone gathering the dim ((p-1)/p of all of it)."""
    source = p.shardings.get(op.operands[0])
    element = ir.RankedTensorType(op.operands[0].type).element_type
    if source is None or source.unreduced or (
            isinstance(element, ir.IntegerType) and element.width == 1):
        return {}
    n_in, m_out = shape_of(op.operands[0]), shape_of(op.results[0])
    used = {a for axes in plan.required[0].dim_axes for a in axes}
    owned = {}
    for dim, axes in enumerate(source.dim_axes):
        if not axes or plan.required[0].dim_axes[dim] or used & set(axes) \
                or 2 * m_out[dim] >= n_in[dim]:
            continue
        shard = _shard(p, n_in[dim], axes)
        first, last = starts[dim], starts[dim] + (m_out[dim] - 1) * strides[dim]
        if first // shard == last // shard:
            owned[dim] = (axes, first // shard)
            used.update(axes)
    return owned


def _broadcast_piece(p: PartitionContext, value: ir.Value, dim: int, axes: tuple, owner: int,
                     shard: int, start: int, size: int, stride: int) -> ir.Value:
    """Every device gets the `size` elements (every `stride`-th from global
    `start`) that the device at coordinate `owner` over `axes` holds."""
    shape = shape_of(value)
    begin, end = [0] * len(shape), list(shape)
    begin[dim] = start - owner * shard
    end[dim] = begin[dim] + (size - 1) * stride + 1
    steps = [1] * len(shape)
    steps[dim] = stride
    piece = hlo.SliceOp(value, begin, end, steps).result
    index = p.emitter.axis_index(axes)
    owner_index = int_constant(owner, index.type)
    mine = hlo.CompareOp(index, owner_index, hlo.ComparisonDirectionAttr.get("EQ")).result
    mask = hlo.BroadcastInDimOp(ir.RankedTensorType.get(
        shape_of(piece), ir.IntegerType.get_signless(1)), mine, []).result
    return p.emitter.all_reduce(hlo.SelectOp(mask, piece, zeros(piece.type)).result, axes)


def _pad_plan(p: PartitionContext, op: ir.Operation) -> Plan | None:
    n_in = shape_of(op.operands[0])
    low = int_array(op.attributes["edge_padding_low"])
    high = int_array(op.attributes["edge_padding_high"])
    interior = int_array(op.attributes["interior_padding"])

    def halos(plan):
        return _permuted_halos(p, op, plan)

    plan = _setup(p, op, halos, always=True)  # as for slices
    if plan is None:
        return None

    def emit(operands):
        value, pad_value = operands
        found = halos(plan)
        for halo in found:
            value = _window(p, op, plan, value, halo, pad_value)
        edges = [(low[d], high[d]) for d in range(len(n_in))]
        for halo in found:
            edges[halo.dim] = halo.padding
        result = hlo.PadOp(value, pad_value, [lo for lo, _ in edges], [hi for _, hi in edges],
                           interior).result
        return [_own_results(p, plan, result, {h.dim: h for h in found})]

    plan.detail = emit
    return plan


windowed_strategy("stablehlo.pad", _pad_plan)

# ------------------------------------------------------- concatenate, reverse

def _concatenate_plan(p: PartitionContext, op: ir.Operation) -> Plan | None:
    axis = ir.IntegerAttr(op.attributes["dimension"]).value
    sizes = [shape_of(v)[axis] for v in op.operands]
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    total = shape_of(op.results[0])[axis]

    def halos(plan):
        dim_axes = plan.produced[0].dim_axes[axis]
        if not dim_axes:
            return []
        s_out = _shard(p, total, dim_axes)
        return [Halo(i, axis, -start, s_out, s_out - _shard(p, size, dim_axes),
                     live=_ceil(total, s_out))
                for i, (start, size) in enumerate(zip(starts, sizes))]

    # The concatenated dim is a PERMUTATION factor whatever the operands
    # (op_rules.windowed); a NEED_REPLICATION one (a rule that needs it
    # whole) is served by windows as well once a result is sharded there.
    plan = _setup(p, op, halos, windowed_kinds=(FactorKind.PERMUTATION,
                                                 FactorKind.NEED_REPLICATION))
    if plan is None or not plan.produced[0].dim_axes[axis]:
        return None
    by_pieces = _pieces_plan(p, op, plan, axis)
    if by_pieces is not None:
        return by_pieces

    def emit(operands):
        dim_axes = plan.produced[0].dim_axes[axis]
        s_out = _shard(p, total, dim_axes)
        merged = None
        for halo, local, start, size in zip(halos(plan),
                                            operands, starts, sizes):
            window = _window(p, op, plan, local, halo)
            if merged is None:
                merged = window
                continue
            # Each result position comes from exactly one operand: pick it.
            mine = p.emitter.inside(shape_of(window), axis, dim_axes, s_out, 0, start, start + size)
            merged = hlo.SelectOp(mine, window, merged).result
        return [merged]

    plan.detail = emit
    return plan


windowed_strategy("stablehlo.concatenate", _concatenate_plan)


def _windows_of_one_source(op: ir.Operation, axis: int):
    """(x, spans, fill) when every operand is one tensor x, a unit-stride
    slice of it along `axis` alone, or an interior-free pad of it along
    `axis` alone (all pads with one padding value, `fill`; None when there
    is no pad); else None.  Each span is ``(start, limit, lead, length)``:
    ``x[start:limit]`` at `lead` of an operand `length` long, the rest of
    it padding."""
    source, spans, fill = None, [], None
    for value in op.operands:
        owner = producer(value)
        length = shape_of(value)[axis]
        if owner is not None and owner.name == "stablehlo.slice":
            starts, limits, strides = _slice_attributes(owner)
            whole = shape_of(owner.operands[0])
            if any(stride != 1 for stride in strides) or any(
                    (starts[d], limits[d]) != (0, whole[d]) for d in range(len(whole)) if d != axis):
                return None
            value, span = owner.operands[0], (starts[axis], limits[axis], 0, length)
        elif owner is not None and owner.name == "stablehlo.pad":
            low = int_array(owner.attributes["edge_padding_low"])
            high = int_array(owner.attributes["edge_padding_high"])
            if any(int_array(owner.attributes["interior_padding"])) or any(
                    (low[d], high[d]) != (0, 0) for d in range(len(low)) if d != axis) or \
                    (fill is not None and owner.operands[1] != fill):
                return None
            value, fill = owner.operands[0], owner.operands[1]
            n = shape_of(value)[axis]
            span = (max(0, -low[axis]), n - max(0, -high[axis]), max(0, low[axis]), length)
        else:
            span = (0, length, 0, length)
        if source is None:
            source = value
        elif value != source:
            return None
        spans.append(span)
    return source, spans, fill


def _source_pieces(spans, count: int, s_x: int, s_out: int, total: int) -> list[Piece]:
    """The pieces of x that make each device's block of `s_out` (of `total`)
    when the operands of `spans` (`_windows_of_one_source`) are laid side by
    side; x is split in shards of `s_x` over `count` devices."""
    pieces, placed = [], 0
    for start, limit, lead, length in spans:
        at = placed + lead  # where x[start] lands
        for q in range(count):
            low, high = max(at, q * s_out), min(at + limit - start, (q + 1) * s_out, total)
            first, last = low - at + start, high - at + start  # in x
            for r in range(first // s_x, -(-last // s_x)) if high > low else ():
                begin, end = max(first, r * s_x), min(last, (r + 1) * s_x)
                pieces.append(Piece(r, q, begin - r * s_x, begin - first + low - q * s_out,
                                    end - begin))
        placed += length
    return pieces


def _received(pieces: list[Piece]) -> int:
    """Elements a device receives for `pieces`: each permute carries its widest."""
    return sum(max(x.size for x in group) for moves, group in permute_groups(pieces) if moves)


def _pieces_plan(p: PartitionContext, op: ir.Operation, plan: Plan, axis: int) -> Plan | None:
    """A concatenation of slices or pads of one tensor x (a rotation, a
    wrap-around padding): each device's block is pieces of x's shards, sent
    straight from x (`Emitter.gather_pieces`) in as few collective_permutes
    as the pieces allow, as XLA's partitioner turns such a concatenation
    into one cyclic shift.  Taken where it moves no more than the halos of the
    concatenation and of the slices it reads (each priced as its own pieces)."""
    found = _windows_of_one_source(op, axis)
    layout = plan.produced[0]
    if found is None or layout.unreduced:
        return None
    source, spans, fill = found
    current = p.shardings.get(source)
    if current is None or current.unreduced:
        return None
    dim_axes = layout.dim_axes[axis]
    count = p.mesh.axes_size(dim_axes)
    total = shape_of(op.results[0])[axis]
    s_x, s_out = _shard(p, shape_of(source)[axis], dim_axes), _shard(p, total, dim_axes)
    pieces = _source_pieces(spans, count, s_x, s_out, total)
    row = tensor_bytes(local_type(op.results[0].type, layout)) / s_out
    moved = _received(pieces) * row + reshard_bytes(current, layout, source)
    before = _moved_bytes(p, op, plan)
    for value, span in zip(op.operands, spans):
        if value != source and len(list(value.uses)) == 1:  # the operand's own halo goes too
            length = span[3]
            before += _received(_source_pieces([span], count, s_x, _shard(p, length, dim_axes),
                                               length)) * row
    if moved > before:
        return None

    def emit(operands):
        padding = None if fill is None else p.to(fill, Sharding.replicated(p.mesh, 0))
        return [p.emitter.gather_pieces(p.to(source, layout), axis, dim_axes, s_out, pieces,
                                        padding)]

    return dataclasses.replace(plan, required=[None] * len(op.operands), detail=emit)


def _reverse_plan(p: PartitionContext, op: ir.Operation) -> Plan | None:
    shape = shape_of(op.results[0])
    dims = list(int_array(op.attributes["dimensions"]))

    def halos(plan):
        found = []
        for dim in dims:
            dim_axes = plan.required[0].dim_axes[dim]
            if dim_axes:
                count = p.mesh.axes_size(dim_axes)
                shard = _ceil(shape[dim], count)
                found.append(Halo(0, dim, count * shard - shape[dim], shard))
        return found

    plan = _setup(p, op, halos)
    if plan is None:
        return None

    def emit(operands):
        value = hlo.ReverseOp(operands[0], dims).result
        for halo in halos(plan):
            dim_axes = plan.required[0].dim_axes[halo.dim]
            # Shard q reversed is shard p-1-q of the reversed, padded tensor; the
            # padding now leads it, so the result starts `offset` elements in.
            value = p.emitter.mirror(value, dim_axes)
            if halo.offset:
                padded = p.mesh.axes_size(dim_axes) * halo.length
                value = p.emitter.halo_window(value, halo.dim, dim_axes, padded, halo.offset,
                                              halo.length)
        return [value]

    plan.detail = emit
    return plan


windowed_strategy("stablehlo.reverse", _reverse_plan)

# ------------------------------------------------------------------ windows

def _reduce_window_plan(p: PartitionContext, op: ir.Operation) -> Plan | None:
    if len(op.results) != 1:
        return None
    rank = len(shape_of(op.operands[0]))
    padding = padding_pairs(op, rank)

    def halos(plan):
        return _permuted_halos(p, op, plan)

    plan = _setup(p, op, halos)
    if plan is None:
        return None

    def emit(operands):
        value, init = operands
        found = halos(plan)
        for halo in found:
            value = _window(p, op, plan, value, halo, init)
        kept = {h.dim: h for h in found}
        new_op = p.create(op, [value, init], [_computed_type(op.results[0], plan, kept)])
        windowed = {h.dim: h.padding for h in found}
        attr = _padding_attr([windowed.get(d, padding[d]) for d in range(rank)])
        if attr is not None:
            new_op.attributes["padding"] = attr
        return [_own_results(p, plan, new_op.results[0], kept)]

    plan.detail = emit
    return plan


windowed_strategy("stablehlo.reduce_window", _reduce_window_plan)

def _convolution_plan(p: PartitionContext, op: ir.Operation) -> Plan | None:
    rule = op_rules.rule_for(op)
    if rule is None:
        return None
    numbers = hlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
    groups = rule.groups
    lhs_spatial = list(numbers.input_spatial_dimensions)
    rhs_spatial = list(numbers.kernel_spatial_dimensions)
    out_spatial = list(numbers.output_spatial_dimensions)
    n_lhs, n_rhs, m_out = (shape_of(v) for v in (*op.operands[:2], op.results[0]))
    spatial = len(lhs_spatial)
    strides, lhs_dilation, rhs_dilation, padding, reversed_window = conv_window(op, spatial)
    parallel = parallel_spatial_dims(op)

    def one_split_per_dim(rule, axes):
        # Devices must hold whole groups: then only the group count changes.
        for group in groups:
            for factor in group.members:
                axes[factor] = ()
        # An lhs spatial dim split both by windows and by the kernel's window
        # has no single halo: keep the window whole there.
        for lhs_dim, rhs_dim in zip(lhs_spatial, rhs_spatial):
            if any(axes[f] for f in rule.operands[0][lhs_dim] if f not in rule.operands[1][rhs_dim]):
                for factor in rule.operands[1][rhs_dim]:
                    axes[factor] = ()

    def kernel_window_split(rule, axes):
        # Input and kernel split alike along a spatial dim (a kernel gradient,
        # whose "kernel" is the output gradient): each device sums its part of
        # every window (see `halos`), however unevenly the split divides the
        # kernel's window (its padding is masked), which the factors' own
        # major-to-minor split does not express.
        lhs_source, rhs_source = (p.shardings.get(v) for v in op.operands[:2])
        if lhs_source is None or rhs_source is None:
            return
        used = {a for factor_axes in axes for a in factor_axes}
        for lhs_dim, rhs_dim in zip(lhs_spatial, rhs_spatial):
            split = lhs_source.dim_axes[lhs_dim]
            window = rule.operands[1][rhs_dim]
            if (split and split == rhs_source.dim_axes[rhs_dim] and len(window) == 1
                    and not used & set(split)
                    and not any(axes[f] for f in rule.operands[0][lhs_dim])):
                axes[window[0]] = split
                used.update(split)

    def kernel_split(plan, i) -> tuple:
        """The axes splitting spatial dim i's kernel window between devices
        (each sums its part of every window), or ()."""
        dim_axes = plan.required[0].dim_axes[lhs_spatial[i]]
        if (not dim_axes or dim_axes == plan.produced[0].dim_axes[out_spatial[i]]
                or lhs_dilation[i] != 1 or dim_axes != plan.required[1].dim_axes[rhs_spatial[i]]):
            return ()
        return dim_axes

    def halos(plan):
        found = []
        for i, (lhs_dim, rhs_dim, out_dim) in enumerate(zip(lhs_spatial, rhs_spatial,
                                                           out_spatial)):
            dim_axes = plan.required[0].dim_axes[lhs_dim]
            if not dim_axes:
                continue
            size, windows, kernel = n_lhs[lhs_dim], m_out[out_dim], n_rhs[rhs_dim]
            if dim_axes == plan.produced[0].dim_axes[out_dim]:
                # Windows split: each device reads the input under its windows.
                halo = _window_halo(p, op, plan, 0, lhs_dim)
                if halo is not None:
                    found.append(halo)
            elif kernel_split(plan, i):
                # Kernel window split (a kernel gradient's "kernel" is the
                # output gradient): each device reads the input under its part
                # of every window and sums a partial result.  A reversed
                # kernel's part p-1-q pairs with the window positions part q
                # of an unreversed one does, less the last part's padding:
                # the parts are mirrored first (see `emit`).
                s_in, s_kernel = _shard(p, size, dim_axes), _shard(p, kernel, dim_axes)
                padded = s_kernel * p.mesh.axes_size(dim_axes) - kernel
                first = -padded * rhs_dilation[i] if reversed_window[i] else 0
                found.append(Halo(0, lhs_dim, first - padding[i][0],
                                  (windows - 1) * strides[i] + (s_kernel - 1) * rhs_dilation[i] + 1,
                                  s_kernel * rhs_dilation[i] - s_in))
            else:
                found.append(_gathered(0, lhs_dim))
        return found

    plan = _setup(p, op, halos, forced=one_split_per_dim, always=True, seed=kernel_window_split)
    if plan is None:
        return None

    def emit(operands):
        lhs, rhs = operands
        # The padding of an uneven split must add nothing: zero the kernel's
        # (every dim a device sums over is one of its dims) and the input
        # features'; the windows' halos are zero outside the input already.
        for rhs_dim, size in enumerate(n_rhs):
            rhs = _zero_padding(p, rhs, rhs_dim, plan.required[1].dim_axes[rhs_dim], size)
        lhs_feature = numbers.input_feature_dimension
        lhs = _zero_padding(p, lhs, lhs_feature, plan.required[0].dim_axes[lhs_feature],
                            n_lhs[lhs_feature])
        for i in range(spatial):
            if reversed_window[i] and kernel_split(plan, i):
                rhs = p.emitter.mirror(rhs, kernel_split(plan, i))
        found = halos(plan)
        for halo in found:
            lhs = _window(p, op, plan, lhs, halo)
        kept = {out_spatial[lhs_spatial.index(h.dim)]: h for h in found}
        new_op = p.create(op, [lhs, rhs], [_computed_type(op.results[0], plan, kept)])
        windowed = {h.dim: h.padding for h in found}
        attr = _padding_attr([windowed.get(lhs_spatial[i], padding[i]) for i in range(spatial)])
        if attr is not None:
            new_op.attributes["padding"] = attr
        for count_attr, group, _ in groups:
            if plan.axes[group]:
                # An uneven split pads the last devices with whole groups.
                count = ir.IntegerAttr(op.attributes[count_attr]).value
                new_op.attributes[count_attr] = ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(64), _shard(p, count, plan.axes[group]))
        # A split parallel dim is the same pattern over the device's share.
        shares = [shape_of(lhs)[lhs_spatial[i]] if parallel[i] else None for i in range(spatial)]
        if any(share is not None and share != n_lhs[lhs_spatial[i]]
               for i, share in enumerate(shares)):
            new_op.attributes["lhs_dilation"] = _array_attr(
                share or lhs_dilation[i] for i, share in enumerate(shares))
            new_op.attributes["window_strides"] = _array_attr(
                max(share - 1, 1) if share else strides[i] for i, share in enumerate(shares))
        return [_own_results(p, plan, new_op.results[0], kept)]

    plan.detail = emit
    return plan


windowed_strategy("stablehlo.convolution", _convolution_plan)


def _zero_padding(p: PartitionContext, local: ir.Value, dim: int, dim_axes: tuple,
                  size: int) -> ir.Value:
    """`local` with the padding of an uneven split of `dim` zeroed."""
    if not dim_axes or size % p.mesh.axes_size(dim_axes) == 0:
        return local
    return p.emitter.mask_padding(local, dim, dim_axes, size)


def _select_and_scatter_plan(p: PartitionContext, op: ir.Operation) -> Plan | None:
    n_in, m_src = shape_of(op.operands[0]), shape_of(op.operands[1])
    rank = len(n_in)
    padding = padding_pairs(op, rank)
    never_selected = _never_selected(op)
    if never_selected is None or not is_zero_scalar(op.operands[2]):
        return None

    def source_follows_operand(rule, axes):
        # The source's windows dim (a NEED_REPLICATION factor of its own)
        # is split like the operand's: each device scatters its windows.
        for dim in range(rank):
            operand_factors, source_factors = rule.operands[0][dim], rule.operands[1][dim]
            if len(operand_factors) == 1 and len(source_factors) == 1 \
                    and operand_factors != source_factors:
                axes[source_factors[0]] = axes[operand_factors[0]]

    def halos(plan):
        return _permuted_halos(p, op, plan)

    # The scatter returns its windows to their owners (`halo_window_transpose`).
    plan = _setup(p, op, halos, forced=source_follows_operand, returned=True)
    if plan is None:
        return None

    def emit(operands):
        operand, source, init = operands
        found = halos(plan)
        element = ir.RankedTensorType(op.operands[0].type).element_type
        fill = hlo.ConstantOp(ir.DenseElementsAttr.get_splat(
            ir.RankedTensorType.get([], element), ir.FloatAttr.get(element, never_selected))).result
        for halo in found:
            operand = _window(p, op, plan, operand, halo, fill)
            dim_axes = plan.required[1].dim_axes[halo.dim]
            # Windows past the source's end must scatter nothing.
            source = p.emitter.mask_padding(source, halo.dim, dim_axes, m_src[halo.dim])
        windowed_type = ir.RankedTensorType.get(shape_of(operand), element)
        new_op = p.create(op, [operand, source, init], [windowed_type])
        attr = _padding_attr([(0, 0) if any(h.dim == d for h in found) else padding[d]
                              for d in range(rank)])
        if attr is not None:
            new_op.attributes["padding"] = attr
        result = new_op.results[0]
        for halo in found:
            dim_axes = plan.required[0].dim_axes[halo.dim]
            size = _shard(p, n_in[halo.dim], dim_axes)
            result = p.emitter.halo_window_transpose(result, halo.dim, dim_axes, size,
                                                     halo.offset, halo.step, n_in[halo.dim],
                                                     halo.live)
        return [result]

    plan.detail = emit
    return plan


windowed_strategy("stablehlo.select_and_scatter", _select_and_scatter_plan)

def _never_selected(op: ir.Operation) -> float | None:
    """A padding value the select region never prefers to a real element."""
    select = op.regions[0].blocks[0]
    compare = next((o for o in select.operations if o.operation.name == "stablehlo.compare"), None)
    if compare is None or not isinstance(
            ir.RankedTensorType(op.operands[0].type).element_type, ir.FloatType):
        return None
    direction = hlo.ComparisonDirectionAttr(compare.attributes["comparison_direction"]).value
    return {"GE": float("-inf"), "GT": float("-inf"),
            "LE": float("inf"), "LT": float("inf")}.get(direction)


# ------------------------------------------------- slices of pads, folded

def fold_slices_of_pads(module: ir.Operation) -> None:
    """Rewrite each unit-stride slice of an interior-free pad as one pad of
    the pad's operand, with the edges the slice leaves (negative where it
    cuts into the operand): ``slice(pad(x, 1, 0), [0:n])`` is
    ``pad(x, 1, -1)``.  The pair along a split dim would exchange a halo
    twice, once for the pad and once for the slice; the one pad exchanges
    one window, as XLA merges them.

    Sharding constraints between the two that pin the pad's own sharding,
    and that nothing else reads, are looked through: they ask for no move.
    The slice's sharding is the new pad's.  A pad left unused is emitted,
    then erased unused with the moves it made (`context.erase_unused`).
    """
    slices = []

    def visit(op):
        if op.operation.name == "stablehlo.slice":
            slices.append(op.operation)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    for op in slices:
        pad = _padded_source(op.operands[0])
        starts, limits, strides = _slice_attributes(op)
        if pad is None or any(s != 1 for s in strides):
            continue
        low = int_array(pad.attributes["edge_padding_low"])
        high = int_array(pad.attributes["edge_padding_high"])
        size = shape_of(pad.results[0])
        with ir.InsertionPoint(op), op.location:
            folded = hlo.PadOp(pad.operands[0], pad.operands[1],
                               _array_attr([lo - s for lo, s in zip(low, starts)]),
                               _array_attr([hi - (n - e) for hi, n, e in zip(high, size, limits)]),
                               _array_attr([0] * len(low)))
        if MHLO_SHARDING in op.attributes:
            folded.attributes[MHLO_SHARDING] = op.attributes[MHLO_SHARDING]
        op.results[0].replace_all_uses_with(folded.result)
        op.erase()


def _padded_source(value: ir.Value) -> ir.Operation | None:
    """The interior-free pad `value` is, through constraints that pin the
    pad's sharding and have no other reader; None where it is not one."""
    chain = []
    while isinstance(value.owner, ir.OpView | ir.Operation) and \
            is_sharding_constraint(value.owner.operation):
        chain.append(value.owner.operation)
        value = value.owner.operation.operands[0]
    if not isinstance(value.owner, ir.OpView | ir.Operation):
        return None
    pad = value.owner.operation
    if pad.name != "stablehlo.pad" or any(int_array(pad.attributes["interior_padding"])):
        return None
    sharding = pad.attributes[MHLO_SHARDING] if MHLO_SHARDING in pad.attributes else None
    for constraint in chain:
        pinned = constraint.attributes[MHLO_SHARDING] \
            if MHLO_SHARDING in constraint.attributes else None
        if pinned != sharding or len(list(constraint.results[0].uses)) != 1:
            return None
    return pad
