"""Ops that move data along a dimension: slicing, padding, concatenation,
reversal, windows (reduce_window, select_and_scatter, convolution).

The factor structure of each op follows Shardy's registry
(``op_sharding_rule_registry.cc``), restated here in this project's model:

* A dimension the op leaves alone (same size, no offset, no window) is one
  PASS_THROUGH factor shared by every tensor that has it.
* A dimension whose elements move (a slice, a pad, a reversal, a window) is
  one PERMUTATION factor shared by operand and result: it can stay sharded,
  at the price of a halo exchange or a shift between devices.
* A dimension that only a whole tensor can produce (the sliced dimension of a
  dynamic slice, whose offset is known only at run time) NEED_REPLICATION.

Where one factor spans dimensions of different sizes (operand 8 sliced to 5)
it takes the *larger* size, so a sharding that fits either tensor's dimension
fits the factor.  For slice, dynamic_slice and concatenate that is what
Shardy does (its choice, the operand's or the result's size, is the larger
one there).  For pad Shardy takes the operand's size and for reduce_window
the result's, the smaller ones when padding grows a dim or windows shrink
it; this module takes the larger there too, so that no tensor's own
sharding is refused by a factor smaller than its dimension.  (Convolution
is the exception: its spatial factors split the lhs dim, so they are
capped by it, as in Shardy.)

Shardy's "conservative propagation" mode and its "blocked propagation" flag
have no counterpart in this project's model: the rules here are Shardy's
non-conservative ones, and a blocked factor is simply its kind.
"""

from __future__ import annotations

import types
from typing import NamedTuple

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from stablehlo_spmd.op_rules import (
    FactorGroup, FactorKind, RuleBuilder, UnreducedFlow, Window, int_array, ranks, register)
from stablehlo_spmd.op_rules.compute import is_zero_constant, reduction_kind

PASS, PERM, NEED = FactorKind.PASS_THROUGH, FactorKind.PERMUTATION, FactorKind.NEED_REPLICATION


# ------------------------------------------------------------------ helpers

def static_shape(value: ir.Value) -> tuple[int, ...] | None:
    """The shape of a ranked tensor with no dynamic dimension, else None."""
    value_type = value.type
    if not isinstance(value_type, ir.RankedTensorType) or not value_type.has_static_shape:
        return None
    return tuple(value_type.shape)


def static_shapes(values) -> list[tuple[int, ...]] | None:
    shapes = [static_shape(v) for v in values]
    return None if any(s is None for s in shapes) else shapes


def producer(value: ir.Value) -> ir.Operation | None:
    """The op that defines `value`; None for a block argument."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    return owner.operation


def is_zero_scalar(value: ir.Value) -> bool:
    """A zero constant, seen through the scalar-to-scalar broadcasts and
    converts JAX puts around reduce_window's init value."""
    while True:
        owner = producer(value)
        if owner is None:
            return False
        if owner.name in ("stablehlo.broadcast_in_dim", "stablehlo.convert", "stablehlo.reshape") \
                and static_shape(owner.operands[0]) == ():
            value = owner.operands[0]
            continue
        return is_zero_constant(value)


def region_kind(op: ir.Operation, index: int) -> str | None:
    """`reduction_kind` of region `index` (it reads region 0 only)."""
    return reduction_kind(types.SimpleNamespace(regions=[op.regions[index]]))


def optional_array(op: ir.Operation, name: str, rank: int, default: int) -> list[int]:
    if name in op.attributes:
        return int_array(op.attributes[name])
    return [default] * rank


def padding_pairs(op: ir.Operation, rank: int) -> list[tuple[int, int]]:
    """A window op's ``padding`` attribute (a rank x 2 tensor) as (low, high) pairs."""
    if "padding" not in op.attributes:
        return [(0, 0)] * rank
    flat = int_array(op.attributes["padding"])
    if not flat:
        return [(0, 0)] * rank
    return [(flat[2 * d], flat[2 * d + 1]) for d in range(rank)]


def _per_dim(op: ir.Operation, operand_shape, result_shape, moved,
             kind: FactorKind = PERM, window=lambda dim: None):
    """Operand 0 and every result share one factor per dim: PASS_THROUGH where
    `moved(dim)` is false, else `kind` with the larger of the two sizes and
    the `window(dim)` it reads."""
    builder = RuleBuilder(ranks(op.operands), ranks(op.results))
    other_operands = [None] * (len(op.operands) - 1)
    for dim, (in_size, out_size) in enumerate(zip(operand_shape, result_shape)):
        is_moved = moved(dim)
        builder.factor(max(in_size, out_size), kind if is_moved else PASS, [dim] + other_operands,
                       [dim] * len(op.results), window(dim) if is_moved else None)
    return builder


# ---------------------------------------------------------- slices and pads

@register("stablehlo.slice")
def _slice(op: ir.Operation):
    """``([i,j])->([i,j'])``, j' a strided sub-range of j: a PERMUTATION
    factor of j's size (the static offset is known, so the data can be
    shifted to keep it sharded).  Linear in its operand."""
    shapes = static_shapes([op.operands[0], op.results[0]])
    if shapes is None:
        return None
    operand_shape, result_shape = shapes
    starts, strides = int_array(op.attributes["start_indices"]), int_array(op.attributes["strides"])
    builder = _per_dim(op, operand_shape, result_shape,
                       lambda d: operand_shape[d] != result_shape[d],
                       window=lambda d: Window(starts[d], strides[d], 1, result_shape[d]))
    return builder.build(UnreducedFlow.JOINT, (0,))


@register("stablehlo.pad", signature=lambda op: is_zero_scalar(op.operands[1]))
def _pad(op: ir.Operation):
    """``([i,j],[])->([i,j'])``: padded dims are PERMUTATION factors; the
    padding value is a scalar with no factor.

    A dim counts as padded when any of its low/high/interior padding is not
    zero.  (Shardy compares sizes instead, which calls low=1, high=-1 a
    pass-through although it shifts every element by one.)  Linear in the
    operand only when the padding value is zero: a partial sum padded with
    anything else would add the padding once per device.
    """
    shapes = static_shapes([op.operands[0], op.results[0]])
    if shapes is None:
        return None
    operand_shape, result_shape = shapes
    low = int_array(op.attributes["edge_padding_low"])
    high = int_array(op.attributes["edge_padding_high"])
    interior = int_array(op.attributes["interior_padding"])
    # Interior padding is a base dilation: result j is dilated element j - low.
    builder = _per_dim(op, operand_shape, result_shape,
                       lambda d: (low[d], high[d], interior[d]) != (0, 0, 0),
                       window=lambda d: Window(-low[d], 1, 1, result_shape[d], interior[d] + 1))
    if is_zero_scalar(op.operands[1]):
        return builder.build(UnreducedFlow.JOINT, (0,))
    return builder.build()


@register("stablehlo.reverse")
def _reverse(op: ir.Operation):
    """Reversed dims are PERMUTATION factors (a sharded one swaps shards
    end for end), the others PASS_THROUGH."""
    shape = static_shape(op.results[0])
    if shape is None:
        return None
    reversed_dims = set(int_array(op.attributes["dimensions"]))
    builder = _per_dim(op, shape, shape, lambda d: d in reversed_dims)
    return builder.build(UnreducedFlow.JOINT, (0,), keeps_attributes=True)


@register("stablehlo.concatenate")
def _concatenate(op: ir.Operation):
    """``([i,j1],[i,j2])->([i,j1+j2])``: every dim but the concatenated one
    is PASS_THROUGH across all operands and the result.

    The concatenated dim is one PERMUTATION factor of the result's size,
    shared by all.  Where every operand is a slice (of any tensor), or each
    is one tensor `x` or a slice of it, this is Shardy's rule: pieces cut
    from sharded tensors and put back side by side (``jnp.roll``, circular
    padding, halo building), which a sharded result gets by shifting data
    between devices (collective permutes) rather than gathering it.  For
    other concatenations Shardy's factor needs replication but still
    propagates; here it is a PERMUTATION factor as well, so a split flows
    through alike, and the partitioner moves each operand's pieces to the
    devices that hold its range of the result (`partitioning.windowed`), or
    gathers an operand where its pieces would move more: never more than
    gathering every operand whole, which a result kept whole there needs.

    Linear in all operands together.
    """
    shapes = static_shapes(list(op.operands) + [op.results[0]])
    if shapes is None:
        return None
    result_shape = shapes[-1]
    axis = ir.IntegerAttr(op.attributes["dimension"]).value
    operands = list(op.operands)
    builder = RuleBuilder(ranks(operands), [len(result_shape)])
    for dim, size in enumerate(result_shape):
        builder.factor(size, PERM if dim == axis else PASS,
                       [dim] * len(operands), [dim])
    return builder.build(UnreducedFlow.JOINT, range(len(operands)), keeps_attributes=True)


@register("stablehlo.dynamic_slice")
def _dynamic_slice(op: ir.Operation):
    """``([i,j],[],[])->([i,j'])``: a dim sliced at a run-time offset is one
    NEED_REPLICATION factor of the operand's size, shared with the result
    (Shardy's blocked need-replication factor: unlike a static slice the
    data cannot be shifted ahead of time); full dims are PASS_THROUGH.  The
    start indices are scalars with no factors.  Linear in the operand."""
    shapes = static_shapes([op.operands[0], op.results[0]])
    if shapes is None:
        return None
    operand_shape, result_shape = shapes
    builder = _per_dim(op, operand_shape, result_shape,
                       lambda d: operand_shape[d] != result_shape[d], NEED)
    return builder.build(UnreducedFlow.JOINT, (0,))


@register("stablehlo.dynamic_update_slice")
def _dynamic_update_slice(op: ir.Operation):
    """``([i,j],[i,j'],[],[])->([i,j])``.

    A dim the update fills entirely is one PASS_THROUGH factor of operand,
    update and result.  Where the update is smaller, Shardy gives the operand
    and result a PASS_THROUGH factor of their own (each device writes the
    part of the update that falls in its shard, at offsets made local) and
    the update a NEED_REPLICATION factor (every device needs the whole
    update, as it cannot know ahead of time which part is its own).

    Shardy lets the update's factor pass through when every start index is a
    constant, relying on a later communication optimization; this project
    has none, so the update's factor is always NEED_REPLICATION.

    Linear in operand and update together.
    """
    shapes = static_shapes([op.operands[0], op.operands[1], op.results[0]])
    if shapes is None:
        return None
    operand_shape, update_shape, _ = shapes
    indices = [None] * (len(op.operands) - 2)
    builder = RuleBuilder(ranks(op.operands), [len(operand_shape)])
    for dim, (size, update_size) in enumerate(zip(operand_shape, update_shape)):
        if size == update_size:
            builder.factor(size, PASS, [dim, dim] + indices, [dim])
        else:
            builder.factor(size, PASS, [dim, None] + indices, [dim])
            builder.factor(update_size, NEED, [None, dim] + indices, [None])
    return builder.build(UnreducedFlow.JOINT, (0, 1))


# ------------------------------------------------------------------ windows

def _window_passes(window: list[int], strides: list[int], padding: list[tuple[int, int]],
                   dilations: list[int], dim: int) -> bool:
    """A window of one element, stride 1, no padding, no base dilation: each
    result element is its own operand element."""
    return (window[dim] == 1 and strides[dim] == 1 and padding[dim] == (0, 0)
            and dilations[dim] == 1)


@register("stablehlo.reduce_window")
def _reduce_window(op: ir.Operation):
    """``([i,j],[])->([i,j'])``, j' the windows along j.  Variadic like reduce:
    N inputs, N scalar inits, N results, all inputs alike.

    Each dim is one factor shared by the inputs and results: PERMUTATION
    (a sharded window dim needs a halo from the neighbour) unless the
    window along it is a single element at stride 1 with no padding and no
    base dilation, which is PASS_THROUGH.

    `reduction` is the body's combiner (add/max/min), which a halo exchange
    pads with.  A single reduce-sum with a zero init (sum and average
    pooling) is linear in its input.
    """
    count = len(op.results)
    shapes = static_shapes(list(op.operands)[:count] + list(op.results))
    if shapes is None:
        return None
    operand_shape, result_shape = shapes[0], shapes[count]
    rank = len(operand_shape)
    window = int_array(op.attributes["window_dimensions"])
    strides = optional_array(op, "window_strides", rank, 1)
    dilations = optional_array(op, "base_dilations", rank, 1)
    padding = padding_pairs(op, rank)
    builder = RuleBuilder(ranks(op.operands), ranks(op.results))
    window_dilations = optional_array(op, "window_dilations", rank, 1)
    for dim in range(rank):
        if _window_passes(window, strides, padding, dilations, dim):
            kind, reads = PASS, None
        else:
            kind, reads = PERM, Window(
                -padding[dim][0], strides[dim], (window[dim] - 1) * window_dilations[dim] + 1,
                result_shape[dim], dilations[dim])
        builder.factor(max(operand_shape[dim], result_shape[dim]), kind,
                       [dim] * count + [None] * count, [dim] * count, reads)
    kind = reduction_kind(op) if count == 1 else None
    if kind == "sum" and is_zero_scalar(op.operands[1]):
        return builder.build(UnreducedFlow.JOINT, (0,), reduction=kind, keeps_attributes=True)
    return builder.build(reduction=kind, keeps_attributes=True)


@register("stablehlo.select_and_scatter")
def _select_and_scatter(op: ir.Operation):
    """``(operand [i,j], source [i,j'], init [])->([i,j])``, j' the windows
    along j (the gradient of max pooling).

    A dim whose window is one element at stride 1 without padding is one
    PASS_THROUGH factor of operand, source and result.  Any other dim is,
    as in Shardy, a PERMUTATION factor of operand and result (the selection
    needs a halo of the operand, the scatter one of the result) and a
    NEED_REPLICATION factor of the source alone.

    With an add scatter body and a zero init the result is a sum of placed
    source values, so it is linear in the source (the operand only selects
    and must be whole).  `reduction` is the scatter body's combiner.
    """
    shapes = static_shapes([op.operands[0], op.operands[1], op.results[0]])
    if shapes is None:
        return None
    operand_shape, source_shape, _ = shapes
    rank = len(operand_shape)
    window = optional_array(op, "window_dimensions", rank, 1)
    strides = optional_array(op, "window_strides", rank, 1)
    padding = padding_pairs(op, rank)
    builder = RuleBuilder(ranks(op.operands), [rank])
    for dim, size in enumerate(operand_shape):
        if _window_passes(window, strides, padding, [1] * rank, dim):
            builder.factor(size, PASS, [dim, dim, None], [dim])
        else:
            builder.factor(source_shape[dim], NEED, [None, dim, None], [None])
            builder.factor(size, PERM, [dim, None, None], [dim], Window(
                -padding[dim][0], strides[dim], window[dim], source_shape[dim]))
    kind = region_kind(op, 1)
    if kind == "sum" and is_zero_scalar(op.operands[2]):
        return builder.build(UnreducedFlow.JOINT, (1,), reduction=kind, keeps_attributes=True)
    return builder.build(reduction=kind, keeps_attributes=True)


class ConvWindow(NamedTuple):
    """A convolution's window attributes, one entry per spatial dim."""

    strides: list[int]
    lhs_dilation: list[int]
    rhs_dilation: list[int]
    padding: list[tuple[int, int]]
    reversed: list[bool]


def conv_window(op: ir.Operation, rank: int) -> ConvWindow:
    """`op`'s window attributes over its `rank` spatial dims, defaults filled in."""
    reversed_window = ([bool(r) for r in ir.DenseBoolArrayAttr(op.attributes["window_reversal"])]
                       if "window_reversal" in op.attributes else [False] * rank)
    return ConvWindow(optional_array(op, "window_strides", rank, 1),
                      optional_array(op, "lhs_dilation", rank, 1),
                      optional_array(op, "rhs_dilation", rank, 1),
                      padding_pairs(op, rank), reversed_window)


def parallel_spatial_dims(op: ir.Operation) -> list[bool]:
    """Per spatial dim of a convolution, whether window j meets only input
    element j and kernel element j: n elements each, the input dilated by
    n and windows n - 1 apart (window j, at dilated position j*(n-1), holds
    one element, j*n, at its offset j), no padding, kernel dilation or
    reversal.  XLA writes a dot's batch dim this way."""
    numbers = stablehlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
    lhs_spatial = list(numbers.input_spatial_dimensions)
    rank = len(lhs_spatial)
    shapes = static_shapes([op.operands[0], op.operands[1], op.results[0]])
    if shapes is None:
        return [False] * rank
    lhs_shape, rhs_shape, out_shape = shapes
    strides, lhs_dilation, rhs_dilation, padding, reversed_window = conv_window(op, rank)
    found = []
    for i, (lhs_dim, rhs_dim, out_dim) in enumerate(zip(
            lhs_spatial, numbers.kernel_spatial_dimensions, numbers.output_spatial_dimensions)):
        n = lhs_shape[lhs_dim]
        found.append(n > 1 and rhs_shape[rhs_dim] == n and out_shape[out_dim] == n
                     and lhs_dilation[i] == n and strides[i] == n - 1 and rhs_dilation[i] == 1
                     and padding[i] == (0, 0) and not reversed_window[i])
    return found


@register("stablehlo.convolution")
def _convolution(op: ir.Operation):
    """A convolution is a dot_general whose spatial dims are windows.

    Factors, in Shardy's order (a dim listing several is major to minor):

    * batch groups (``batch_group_count`` > 1): lhs batch, kernel output
      feature and output feature, PASS_THROUGH (each group its own conv);
    * per-group batch: lhs batch and output batch, PASS_THROUGH;
    * a spatial dim where window j meets only input element j and kernel
      element j (`parallel_spatial_dims`) is one PASS_THROUGH factor of lhs,
      kernel and output, like a batch dim (XLA's "parallel" conv dims);
    * per other spatial dim, an lhs spatial dim splits into up to two factors, the
      larger of the two first: the number of windows (with the output
      spatial dim, PERMUTATION: halo exchange) and the window size (with the
      kernel spatial dim, REDUCTION: each device sums its part of every
      window).  Each is capped at what is left of the lhs dim and left out
      when 1.  A window of one element at stride 1 with no padding or lhs
      dilation moves nothing, so its windows factor is PASS_THROUGH (Shardy
      calls it a permutation all the same);
    * feature groups (``feature_group_count`` > 1, e.g. depthwise): lhs
      input feature, kernel output feature and output feature,
      PASS_THROUGH;
    * per-group input feature: lhs input feature and kernel input feature,
      REDUCTION (the contraction); left out when it is 1 beside feature
      groups, as depthwise's kernel input feature is (Shardy adds it to the
      empty kernel dim only);
    * per-group output feature: kernel output feature and output feature,
      PASS_THROUGH, left out when 1.

    Linear in each operand separately; a sharded REDUCTION factor leaves a
    partial sum.  Its padding, where the split is uneven, is zeroed before
    the local convolution reads it (as dot_general's is), so an uneven
    window or input feature split is kept.
    """
    shapes = static_shapes([op.operands[0], op.operands[1], op.results[0]])
    if shapes is None:
        return None
    lhs_shape, rhs_shape, out_shape = shapes
    numbers = stablehlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
    batch_groups = ir.IntegerAttr(op.attributes["batch_group_count"]).value
    feature_groups = ir.IntegerAttr(op.attributes["feature_group_count"]).value
    lhs_batch, lhs_feature = numbers.input_batch_dimension, numbers.input_feature_dimension
    rhs_in, rhs_out = numbers.kernel_input_feature_dimension, numbers.kernel_output_feature_dimension
    out_batch, out_feature = numbers.output_batch_dimension, numbers.output_feature_dimension
    lhs_spatial = list(numbers.input_spatial_dimensions)
    rhs_spatial = list(numbers.kernel_spatial_dimensions)
    out_spatial = list(numbers.output_spatial_dimensions)
    spatial_rank = len(lhs_spatial)
    strides, lhs_dilation, rhs_dilation, padding, _ = conv_window(op, spatial_rank)

    builder = RuleBuilder([len(lhs_shape), len(rhs_shape)], [len(out_shape)])
    group_factors = []  # (count attribute, group factor, its lhs dim)
    if batch_groups > 1:
        group_factors.append(("batch_group_count", builder.factor(
            batch_groups, PASS, [lhs_batch, rhs_out], [out_feature]), lhs_batch))
    builder.factor(out_shape[out_batch], PASS, [lhs_batch, None], [out_batch])

    parallel = parallel_spatial_dims(op)
    for index, (lhs_dim, rhs_dim, out_dim) in enumerate(zip(lhs_spatial, rhs_spatial, out_spatial)):
        windows, window_size = out_shape[out_dim], rhs_shape[rhs_dim]
        if parallel[index]:
            builder.factor(windows, PASS, [lhs_dim, rhs_dim], [out_dim])
            continue
        left = lhs_shape[lhs_dim]
        one_to_one = _window_passes([window_size], [strides[index]], [padding[index]],
                                    [lhs_dilation[index]], 0)
        order = ([(windows, False), (window_size, True)] if windows >= window_size
                 else [(window_size, True), (windows, False)])
        for size, is_window in order:
            size = min(left, size)
            if size <= 1:
                continue
            if is_window:
                builder.factor(size, FactorKind.REDUCTION, [lhs_dim, rhs_dim], [None])
            else:
                reads = None if one_to_one else Window(
                    -padding[index][0], strides[index],
                    (window_size - 1) * rhs_dilation[index] + 1, windows, lhs_dilation[index])
                builder.factor(size, PASS if one_to_one else PERM, [lhs_dim, None], [out_dim],
                               reads)
            left //= size

    if feature_groups > 1:
        group_factors.append(("feature_group_count", builder.factor(
            feature_groups, PASS, [lhs_feature, rhs_out], [out_feature]), lhs_feature))
    in_per_group = rhs_shape[rhs_in]
    if in_per_group > 1 or feature_groups == 1:
        builder.factor(in_per_group, FactorKind.REDUCTION, [lhs_feature, rhs_in], [None])
    out_per_group = out_shape[out_feature] // (batch_groups * feature_groups)
    if out_per_group > 1:
        builder.factor(out_per_group, PASS, [None, rhs_out], [out_feature])
    # The group counts are attributes that hold sizes: a grouped convolution
    # does not keep its attributes per device, and the partitioner's
    # strategy rewrites the counts of groups it splits (`groups`).
    groups = [FactorGroup(attribute, factor, tuple(sorted(
        {f for dims in (builder.dim_factors(0, lhs_dim), builder.dim_factors(1, rhs_out),
                        builder.dim_factors(0, out_feature, result=True))
         for f in dims if f != factor})))
        for attribute, factor, lhs_dim in group_factors]
    return builder.build(UnreducedFlow.SEPARATE, (0, 1), reduction="sum",
                         keeps_attributes=feature_groups == 1 and batch_groups == 1,
                         masks_padding=True, groups=groups)
