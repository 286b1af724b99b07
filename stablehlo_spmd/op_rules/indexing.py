"""Data-dependent indexing and ordering: gather, scatter, sort, top_k.

Gather and scatter share one walk (Shardy's ``addGatherScatterFactors``,
restated in this project's model).  Call the gathered result, or the
scatter's updates, the *slices* tensor.  Each slices dim is either

* an *offset* (window) dim, which ranges over an operand dim that is neither
  collapsed nor a batching dim, taken in order: a dim the slice covers whole
  is one PASS_THROUGH factor of operand and slices; a partial one cannot
  follow the operand's sharding (the slice starts at a data-dependent
  offset), see below; or
* a *batch* dim, which ranges over a dim of the indices (skipping
  ``index_vector_dim``): PASS_THROUGH with the indices, and with the
  operand's batching dim too when it is an explicit batching dim.

Then every collapsed (gather) or inserted (scatter) operand dim gets a factor
of the operand alone, and the indices' ``index_vector_dim``, if present, a
NEED_REPLICATION factor of its own (the coordinates of one index stay
together).

A collapsed or inserted dim whose index is an iota along an indices dim of
its size (`implicit_batching_dims`: row j takes operand row j) is a batching
dim in all but name, and is factored as one.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from stablehlo_spmd.op_rules import (
    FactorKind, RuleBuilder, UnreducedFlow, int_array, ranks, register)
from stablehlo_spmd.op_rules.compute import reduction_kind
from stablehlo_spmd.op_rules.windowed import (
    is_zero_scalar, producer, static_shape, static_shapes)

PASS, NEED, REDUCE = FactorKind.PASS_THROUGH, FactorKind.NEED_REPLICATION, FactorKind.REDUCTION
MOVE = FactorKind.PERMUTATION


def _walk(input_shape, slices_shape, indices_rank, index_vector_dim, offset_dims,
          collapsed_dims, input_batching_dims, indices_batching_dims, is_scatter,
          batch_kind, add):
    """Calls ``add(size, kind, input_dim, indices_dim, slices_dim)`` for every
    factor of a gather or scatter (None: the tensor does not have it)."""
    input_dim = 0
    batch_position = 0
    for slices_dim, slices_size in enumerate(slices_shape):
        if slices_dim in offset_dims:
            while input_dim in collapsed_dims or input_dim in input_batching_dims:
                input_dim += 1
            input_size = input_shape[input_dim]
            if input_size == slices_size:
                add(input_size, PASS, input_dim, None, slices_dim)
            elif is_scatter:
                # Updates land at data-dependent offsets: the input dim is
                # whole at the op, and so is the update's.  The input's is
                # one factor with the result's: a split there flows from
                # input to result (as Shardy's need-replication factor
                # does), the partitioner gathering it for the scatter.
                add(input_size, MOVE, input_dim, None, None)
                add(slices_size, NEED, None, None, slices_dim)
            elif slices_size == 1:
                # A one-element window is a collapsed dim that kept its place:
                # a sharded operand dim gives a masked local gather whose
                # results are summed across devices.
                add(input_size, REDUCE, input_dim, None, None)
                add(slices_size, NEED, None, None, slices_dim)
            else:
                add(input_size, NEED, input_dim, None, slices_dim)
            input_dim += 1
        else:
            indices_dim = batch_position if batch_position < index_vector_dim else batch_position + 1
            if indices_dim in indices_batching_dims:
                batching_input_dim = input_batching_dims[indices_batching_dims.index(indices_dim)]
                add(slices_size, PASS, batching_input_dim, indices_dim, slices_dim)
            else:
                add(slices_size, batch_kind, None, indices_dim, slices_dim)
            batch_position += 1
    for dim in collapsed_dims:
        size = input_shape[dim]
        if is_scatter:
            kind = PASS
        else:
            kind = NEED if size == 1 else REDUCE
        add(size, kind, dim, None, None)
    if index_vector_dim < indices_rank:
        add(None, NEED, None, index_vector_dim, None)


def implicit_batching_dims(op: ir.Operation) -> tuple[tuple[int, int], ...]:
    """``(operand dim, indices dim)`` pairs of a gather or scatter that index
    by position: operand dim d, collapsed (gather) or inserted (scatter),
    takes index component k, and component k at position j along indices
    dim b is j itself (an iota along b, seen through the concatenates,
    broadcasts, reshapes and converts that build index vectors), b having
    d's size.  Row j of the slices then reads or writes operand row j: the
    pair is a batching dim in all but name.  XLA's partitioner finds these
    "parallel" dims from iotas the same way."""
    if op.name == "stablehlo.gather":
        numbers = stablehlo.GatherDimensionNumbers(op.attributes["dimension_numbers"])
        index_map, singles = list(numbers.start_index_map), set(numbers.collapsed_slice_dims)
        taken = set(numbers.start_indices_batching_dims)
        indices = op.operands[1]
    else:
        numbers = stablehlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
        index_map = list(numbers.scattered_dims_to_operand_dims)
        singles = set(numbers.inserted_window_dims)
        taken = set(numbers.scatter_indices_batching_dims)
        indices = op.operands[len(op.results)]
    operand_shape, indices_shape = static_shape(op.operands[0]), static_shape(indices)
    vector_dim = numbers.index_vector_dim
    if operand_shape is None or indices_shape is None:
        return ()
    pairs = []
    for k, dim in enumerate(index_map):
        along = _position_dim(indices, k, vector_dim)
        if (dim in singles and along is not None and along != vector_dim and along not in taken
                and indices_shape[along] == operand_shape[dim]):
            pairs.append((dim, along))
            taken.add(along)
    return tuple(pairs)


def _position_dim(value: ir.Value, component: int, vector_dim: int) -> int | None:
    """The dim of `value` along which component `component` of the vectors
    along `vector_dim` (the whole value when `vector_dim` is its rank) equals
    its own position; None when there is none or it cannot be told."""
    op = producer(value)
    shape = static_shape(value)
    if op is None or shape is None:
        return None
    name = op.name
    if name == "stablehlo.iota":
        dim = ir.IntegerAttr(op.attributes["iota_dimension"]).value
        return dim if dim != vector_dim else None
    if name == "stablehlo.constant":
        return _constant_position_dim(op, shape, vector_dim)
    if name == "stablehlo.convert":
        return _position_dim(op.operands[0], component, vector_dim)
    if name == "stablehlo.concatenate" and vector_dim < len(shape):
        if ir.IntegerAttr(op.attributes["dimension"]).value != vector_dim:
            return None
        for operand in op.operands:
            size = static_shape(operand)[vector_dim]
            if component < size:
                return _position_dim(operand, component, vector_dim)
            component -= size
        return None
    if name == "stablehlo.broadcast_in_dim":
        source = op.operands[0]
        source_shape = static_shape(source)
        dims = list(int_array(op.attributes["broadcast_dimensions"]))
        source_vector, source_component = len(source_shape), 0
        if vector_dim in dims:
            source_vector = dims.index(vector_dim)
            source_component = component if source_shape[source_vector] > 1 else 0
        along = _position_dim(source, source_component, source_vector)
        if along is None or source_shape[along] != shape[dims[along]]:
            return None
        return dims[along]
    if name == "stablehlo.reshape":
        return _position_dim_through_unit_dims(op, shape, component, vector_dim)
    if name == "stablehlo.select" and _wraps_negatives(op):
        # JAX's wrap of negative indices, select(i < 0, i + n, i): a
        # position is never negative, so the select is the position.
        return _position_dim(op.operands[2], component, vector_dim)
    return None


def _wraps_negatives(select: ir.Operation) -> bool:
    """``select(i < 0, anything, i)``."""
    test = producer(select.operands[0])
    return (test is not None and test.name == "stablehlo.compare"
            and test.operands[0] == select.operands[2]
            and stablehlo.ComparisonDirectionAttr(
                test.attributes["comparison_direction"]).value == "LT"
            and is_zero_scalar(test.operands[1]))


def _constant_position_dim(op: ir.Operation, shape, vector_dim: int) -> int | None:
    """A dense 1-D integer constant holding 0, 1, 2, ...: an iota along dim 0."""
    attr = op.attributes["value"]
    if len(shape) != 1 or vector_dim == 0 or not isinstance(attr, ir.DenseIntElementsAttr):
        return None
    values = ir.DenseIntElementsAttr(attr)
    return 0 if all(values[i] == i for i in range(shape[0])) else None


def _position_dim_through_unit_dims(op: ir.Operation, shape, component: int,
                                    vector_dim: int) -> int | None:
    """Through a reshape that only adds or drops dims of size 1."""
    source = op.operands[0]
    source_shape = static_shape(source)
    kept = [d for d, size in enumerate(shape) if size != 1]
    source_kept = [d for d, size in enumerate(source_shape) if size != 1]
    if [shape[d] for d in kept] != [source_shape[d] for d in source_kept]:
        return None
    if vector_dim < len(shape) and (shape[vector_dim] != 1 or component):
        return None  # a vector dim of more than one component moved: not followed
    along = _position_dim(source, 0, len(source_shape))
    if along is None or along not in source_kept:
        return None
    return kept[source_kept.index(along)]


@register("stablehlo.gather", signature=implicit_batching_dims)
def _gather(op: ir.Operation):
    """``(operand, start_indices) -> result``, the result being the slices.

    A collapsed operand dim (and an offset dim of slice size 1) of size > 1
    is a REDUCTION factor of the operand alone: each device gathers from its
    shard, with zeros where an index falls outside it, and the partial
    results are summed.  A collapsed dim of size 1 NEED_REPLICATION, there
    being nothing to shard.  An offset dim sliced short of its operand dim
    is one NEED_REPLICATION factor of both (the operand's size).

    Linear in the operand; the indices must be whole.  The masked local
    gather never reads the padding of an uneven indexed dim (indices are
    clamped into the dim first), so such a dim may be split unevenly
    (`masks_padding`).
    """
    shapes = static_shapes([op.operands[0], op.operands[1], op.results[0]])
    if shapes is None:
        return None
    input_shape, indices_shape, result_shape = shapes
    numbers = stablehlo.GatherDimensionNumbers(op.attributes["dimension_numbers"])
    builder = RuleBuilder([len(input_shape), len(indices_shape)], [len(result_shape)])
    kinds = []

    def add(size, kind, input_dim, indices_dim, slices_dim):
        if size is None:
            size = indices_shape[indices_dim]
        kinds.append(kind)
        builder.factor(size, kind, [input_dim, indices_dim], [slices_dim])

    implicit = implicit_batching_dims(op)
    _walk(input_shape, result_shape, len(indices_shape), numbers.index_vector_dim,
          list(numbers.offset_dims),
          [d for d in numbers.collapsed_slice_dims if d not in dict(implicit)],
          [*numbers.operand_batching_dims, *(d for d, _ in implicit)],
          [*numbers.start_indices_batching_dims, *(b for _, b in implicit)],
          False, PASS, add)
    reduces = any(kind is REDUCE for kind in kinds)
    return builder.build(UnreducedFlow.JOINT, (0,), reduction="sum" if reduces else None,
                         masks_padding=reduces)


def _overwrites(op: ir.Operation) -> bool:
    """The scatter body returns the update: ``x.at[i].set(v)``."""
    body = op.regions[0].blocks[0]
    operations = list(body.operations)
    return (len(operations) == 1 and len(body.arguments) == 2
            and operations[0].operands[0] == body.arguments[1])


def _scatter_signature(op: ir.Operation):
    """What the scatter rule reads besides types and attributes: the body's
    combiner and whether it overwrites, and the indices' producers."""
    kind = reduction_kind(op) if len(op.results) == 1 else None
    return kind, _overwrites(op), implicit_batching_dims(op)


@register("stablehlo.scatter", signature=_scatter_signature)
def _scatter(op: ir.Operation):
    """``(inputs..., scatter_indices, updates...) -> results...``, N inputs,
    N updates and N results, all inputs (and all updates) alike.

    Results have the inputs' factors.  An update window dim covering its
    input dim is PASS_THROUGH of input, update and result; one that covers
    part of it is a PERMUTATION factor of input and result (whole at the
    op, but a split flows through, as in Shardy) and a NEED_REPLICATION one
    of the update.  An inserted window dim is PASS_THROUGH of input and
    result: each device applies the updates that land in its shard.  An
    update scatter dim that is not an explicit batching dim lives only in
    indices and updates: a device holding part of the updates scatters those
    into its input and the results are combined, so it is a REDUCTION factor
    when the body is one add/max/min (the combiner, `reduction`), else
    NEED_REPLICATION.  (Shardy also accepts multiply and logical and/or
    bodies and variadic ones with a common combiner; this project's
    unreduced values combine by sum, max or min only.)

    A scatter-add is linear in inputs and updates together; so is an
    overwriting scatter whose indices are unique (with repeated indices each
    device might keep a different update).
    """
    count = len(op.results)
    shapes = static_shapes(list(op.operands) + list(op.results))
    if shapes is None:
        return None
    input_shape, indices_shape, update_shape = shapes[0], shapes[count], shapes[count + 1]
    numbers = stablehlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
    kind = reduction_kind(op) if count == 1 else None
    builder = RuleBuilder(ranks(op.operands), ranks(op.results))

    def add(size, factor_kind, input_dim, indices_dim, update_dim):
        if size is None:
            size = indices_shape[indices_dim]
        builder.factor(size, factor_kind,
                       [input_dim] * count + [indices_dim] + [update_dim] * count,
                       [input_dim] * count)

    implicit = implicit_batching_dims(op)
    _walk(input_shape, update_shape, len(indices_shape), numbers.index_vector_dim,
          list(numbers.update_window_dims),
          [d for d in numbers.inserted_window_dims if d not in dict(implicit)],
          [*numbers.input_batching_dims, *(d for d, _ in implicit)],
          [*numbers.scatter_indices_batching_dims, *(b for _, b in implicit)],
          True, REDUCE if kind else NEED, add)
    linear = count == 1 and (kind == "sum" or (
        _overwrites(op) and "unique_indices" in op.attributes
        and ir.BoolAttr(op.attributes["unique_indices"]).value))
    if linear:
        return builder.build(UnreducedFlow.JOINT, (0, 2), reduction=kind)
    return builder.build(reduction=kind)


@register("stablehlo.sort")
def _sort(op: ir.Operation):
    """All operands and results share one shape: the sorted dim
    NEED_REPLICATION, every other dim PASS_THROUGH.  Sorting is not linear."""
    shape = static_shape(op.operands[0])
    if shape is None:
        return None
    axis = ir.IntegerAttr(op.attributes["dimension"]).value
    count = len(op.operands)
    builder = RuleBuilder([len(shape)] * count, [len(shape)] * count)
    for dim, size in enumerate(shape):
        builder.factor(size, NEED if dim == axis else PASS, [dim] * count, [dim] * count)
    return builder.build(keeps_attributes=True)


@register("chlo.top_k")
def top_k_rule(op: ir.Operation):
    """``([i,n]) -> ([i,k], [i,k])`` (values, indices): the batch dims are
    PASS_THROUGH; the last dim is one NEED_REPLICATION factor of size n shared
    by the operand and both results, as Shardy has for ``mhlo.topk``.  The
    rule of ``chlo.top_k`` and of XLA's ``custom_call @TopK`` (which takes k
    from its result type) alike.

    Shardy makes it pass-through when k equals n; here it always needs
    replication, since top_k then sorts the whole dim.  That is what the
    rule-driven path does; a last dim the operand already has sharded is
    partitioned by `partitioning.sorting` (local top-k, candidates gathered,
    a final top-k) when k fits in a shard.  ``k`` names a size, but of the
    dim that is whole wherever the op runs by rule, so the attributes hold
    per device.
    """
    if len(op.operands) != 1:
        return None
    shape = static_shape(op.operands[0])
    result_shapes = static_shapes(list(op.results))
    if shape is None or not shape or result_shapes is None:
        return None
    last = len(shape) - 1
    if len(result_shapes) != 2 or any(s[:-1] != shape[:-1] or s[-1] != result_shapes[0][-1]
                                      for s in result_shapes):
        return None
    builder = RuleBuilder([len(shape)], [len(shape)] * len(op.results))
    for dim, size in enumerate(shape):
        builder.factor(size, NEED if dim == last else PASS, [dim], [dim] * len(op.results))
    return builder.build(keeps_attributes=True)
