"""Control flow, calls, sharding constraints and custom calls.

Values that are the same tensor seen from two places (a while carry as
operand, block argument, yielded value and result; a call's operand and its
callee's argument) must share a sharding: `tied_values` lists those pairs
and propagation treats each as an identity.  An `optimization_barrier` ties
each operand to its result the same way: its operands are independent
tensors that only share a scheduling point (`jax.checkpoint` passes a
layer's weights, its input and the cotangent through one), so a mesh axis
may split any number of them at once, which one rule over all of its
operands could not say.  The sharding constraints are identities op by op.

Shardy's propagation controls are ties too: ``sdy.propagation_barrier`` ties
its operand to its result in the directions it allows, and the values of one
``sdy.sharding_group`` are tied to each other wherever they are
(`register_group`), as Shardy's ``shard_as`` gives them one sharding.
"""

from __future__ import annotations

import math

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy

from stablehlo_spmd.module_shardings import (
    FULL_TO_SHARD, is_manual_boundary, is_sharding_constraint)
from stablehlo_spmd.op_rules import (
    FactorKind, OpRule, RuleBuilder, UnreducedFlow, register, register_group, register_ties)
from stablehlo_spmd.op_rules.custom_calls import TARGET_RULES
from stablehlo_spmd.shapes import shape_of


def _identities(op: ir.Operation) -> RuleBuilder:
    """Operand i is result i, dimension by dimension."""
    shapes = [shape_of(v) or () for v in op.operands]
    builder = RuleBuilder([len(s) for s in shapes], [len(s) for s in shapes])
    for index, shape in enumerate(shapes):
        for dim, size in enumerate(shape):
            dims = [None] * len(shapes)
            dims[index] = dim
            builder.factor(size, FactorKind.PASS_THROUGH, dims, dims)
    return builder


@register("stablehlo.all_reduce", "stablehlo.collective_permute",
          "stablehlo.collective_broadcast", "stablehlo.cross-replica-sum")
def _device_collective(op: ir.Operation):
    """A collective already in the program combines each element with the
    same element on other devices.  Across replicas (no channel) it never
    crosses partitions; across partitions it is per-device code, as in a
    manual region.  Either way a device's block meets only the matching
    blocks where every group keeps to devices holding the same block: an
    identity dim by dim, as for XLA's partitioner, which the partitioner
    checks against the groups (`partitioning.manual`)."""
    # Partial sums are reduced first: the body need not be a sum.
    return _identities(op).build(UnreducedFlow.NONE, (), keeps_attributes=True)


# The dims a collective already in the program resizes, by the attributes naming them.
_RESIZED_DIMS = {"stablehlo.all_gather": ("all_gather_dim",),
                 "stablehlo.reduce_scatter": ("scatter_dimension",),
                 "stablehlo.all_to_all": ("split_dimension", "concat_dimension")}


@register(*_RESIZED_DIMS)
def _resizing_collective(op: ir.Operation):
    """An all-gather, reduce-scatter or all-to-all already in the program
    (a shard_map body's): like `_device_collective`, an identity on every
    dim but the ones it gathers, scatters or splits, which it needs whole on
    each device.  A variadic one shares each dim among all its operands
    (and among all its results), as in Shardy, whose operands agree in shape."""
    if not op.operands or len(op.operands) != len(op.results):
        return None
    operands = [shape_of(v) for v in op.operands]
    results = [shape_of(v) for v in op.results]
    if any(s is None for s in operands + results):
        return None
    rank = len(operands[0])
    if any(len(s) != rank for s in operands + results):
        return None
    resized = {ir.IntegerAttr(op.attributes[name]).value for name in _RESIZED_DIMS[op.name]}
    if any(s[dim] != operands[0][dim] for s in operands for dim in range(rank)) or any(
            s[dim] != results[0][dim] for s in results for dim in range(rank)) or any(
            results[0][dim] != operands[0][dim] for dim in range(rank) if dim not in resized):
        return None
    count = len(op.operands)
    builder = RuleBuilder([rank] * count, [rank] * count)
    for dim in range(rank):
        if dim in resized:
            # The operands' dim is one factor, the results' another: nothing
            # crosses the collective there, but a split spreads among the
            # operands (and among the results), as Shardy's need-replication
            # factors shared by all operands propagate; the dim is whole at
            # the op all the same.
            builder.factor(operands[0][dim], FactorKind.PERMUTATION, [dim] * count,
                           [None] * count)
            builder.factor(results[0][dim], FactorKind.PERMUTATION, [None] * count,
                           [dim] * count)
        else:
            builder.factor(operands[0][dim], FactorKind.PASS_THROUGH, [dim] * count, [dim] * count)
    return builder.build(UnreducedFlow.NONE, (), keeps_attributes=True)


@register("sdy.sharding_constraint")
def _constraint(op: ir.Operation):
    """A sharding constraint is an identity whose result sharding is the user's."""
    if len(op.operands) != 1:
        return None
    shape = shape_of(op.results[0]) or ()
    builder = RuleBuilder([len(shape)], [len(shape)])
    for dim, size in enumerate(shape):
        builder.factor(size, FactorKind.PASS_THROUGH, [dim], [dim])
    return builder.build(UnreducedFlow.JOINT, (0,))


SHARDING_RULE = "sdy.sharding_rule"


@register("stablehlo.custom_call")
def _custom_call(op: ir.Operation):
    """A custom call's rule, by what it is:

    * a ``@Sharding`` constraint: the identity (`_constraint`);
    * the edge of a manual region (`_manual_boundary`);
    * one carrying Shardy's ``sdy.sharding_rule`` (as JAX puts on its
      batched linear-algebra calls): that rule's factors, read by
      `sharding_rule_factors`;
    * a target in `custom_calls.TARGET_RULES` (every target Shardy's
      registry knows, and XLA's ``@TopK``): that target's rule.

    Other custom calls are opaque: no rule, so they are replicated with a
    warning.
    """
    if is_sharding_constraint(op):
        return _constraint(op)
    if is_manual_boundary(op):
        return _manual_boundary(op)
    if SHARDING_RULE in op.attributes:
        return sharding_rule_factors(op)
    known = TARGET_RULES.get(ir.StringAttr(op.attributes["call_target_name"]).value)
    return known(op) if known is not None else None


def _manual_boundary(op: ir.Operation):
    """``@SPMDFullToShardShape`` / ``@SPMDShardToFullShape``: each dim of
    the global side is the manual axes' part (major: it is what the region
    cuts away) times the region value's dim, and only the second part
    crosses.  So the free axes propagate through the edge, as Shardy's do
    through a manual computation, and the manual ones cannot; the
    partitioner lines the two sides up (`partitioning.manual`)."""
    if len(op.operands) != 1 or len(op.results) != 1:
        return None
    operand, result = shape_of(op.operands[0]), shape_of(op.results[0])
    if operand is None or result is None or len(operand) != len(result):
        return None
    entering = ir.StringAttr(op.attributes["call_target_name"]).value == FULL_TO_SHARD
    whole, block = (operand, result) if entering else (result, operand)
    builder = RuleBuilder([len(operand)], [len(result)])
    for dim, (size, local) in enumerate(zip(whole, block)):
        if local == 0 or size % local:
            # No block of the global value: nothing crosses (the partitioner
            # says where the region's type is wrong).
            builder.factor(operand[dim], FactorKind.PASS_THROUGH, [dim], [None])
            builder.factor(result[dim], FactorKind.PASS_THROUGH, [None], [dim])
            continue
        if size // local > 1:
            on_whole = ([dim], [None]) if entering else ([None], [dim])
            builder.factor(size // local, FactorKind.PASS_THROUGH, *on_whole)
        builder.factor(local, FactorKind.PASS_THROUGH, [dim], [dim])
    return builder.build(UnreducedFlow.NONE)


def sharding_rule_factors(op: ir.Operation):
    """An ``sdy.sharding_rule`` attribute as an `OpRule`.

    Shardy's factors map one to one: its reduction factors are REDUCTION
    (a partial sum, as Shardy's partitioner all-reduces them), its
    need-replication factors NEED_REPLICATION, its permutation factors
    PERMUTATION (no window: gathered where split); the rest PASS_THROUGH.
    Some are made stricter here, because nothing but the rule says what the
    call computes: a factor found only among the results or only among the
    operands (and no reduction) is NEED_REPLICATION, the call making or
    reading that dim whole (JAX's Cholesky rule has such factors for the
    matrix dims), and so is a factor Shardy blocks propagation along.  The
    per-device op is the same call on per-device types, which is what a
    rule on a custom call promises (`keeps_attributes`).  None for a rule
    that does not fit the op.
    """
    rule = sdy.OpShardingRuleAttr(op.attributes[SHARDING_RULE])

    def dims_of(mappings):
        return [[tuple(sdy.DimMappingAttr(d).factor_indices)
                 for d in sdy.TensorMappingAttr(t).dim_mappings] for t in mappings]

    operands, results = dims_of(rule.operand_mappings), dims_of(rule.result_mappings)
    sizes = list(rule.factor_sizes)
    values = [*op.operands, *op.results]
    if len(values) != len(operands) + len(results):
        return None
    for value, dims in zip(values, operands + results):
        shape = shape_of(value)
        if shape is None or len(shape) != len(dims) or any(
                math.prod(sizes[f] for f in factors) != size for factors, size in zip(dims, shape)):
            return None
    in_operands = {f for tensor in operands for dim in tensor for f in dim}
    in_results = {f for tensor in results for dim in tensor for f in dim}
    kinds = {f: FactorKind.PERMUTATION for f in rule.permutation_factors}
    for factor in [*rule.need_replication_factors, *rule.blocked_propagation_factors,
                   *(in_operands ^ in_results)]:
        kinds[factor] = FactorKind.NEED_REPLICATION
    kinds.update((f, FactorKind.REDUCTION) for f in rule.reduction_factors)
    # Built whole rather than factor by factor: a dim's factors keep the
    # rule's major-to-minor order whatever their numbering.
    return OpRule(tuple(sizes), tuple(kinds.get(f, FactorKind.PASS_THROUGH)
                                      for f in range(len(sizes))),
                  tuple(tuple(t) for t in operands), tuple(tuple(t) for t in results),
                  reduction="sum" if rule.reduction_factors else None, keeps_attributes=True)


def _terminator(block: ir.Block) -> ir.Operation:
    operations = block.operations
    return operations[len(operations) - 1]


@register_ties("stablehlo.while")
def _while_ties(op: ir.Operation):
    condition, body = op.regions[0].blocks[0], op.regions[1].blocks[0]
    yielded = _terminator(body).operands
    ties = []
    for index, operand in enumerate(op.operands):
        result = op.results[index]
        ties += [(operand, result), (result, condition.arguments[index]),
                 (result, body.arguments[index]), (result, yielded[index])]
    return ties


@register_ties("stablehlo.optimization_barrier")
def _barrier_ties(op: ir.Operation):
    return list(zip(op.operands, op.results))


@register_ties("stablehlo.if", "stablehlo.case")
def _branch_ties(op: ir.Operation):
    ties = []
    for region in op.regions:
        yielded = _terminator(region.blocks[0]).operands
        ties += [(result, yielded[index]) for index, result in enumerate(op.results)]
    return ties


@register_ties("func.call")
def _call_ties(op: ir.Operation):
    callee = _lookup_function(op, ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
    if callee is None or not callee.regions[0].blocks:
        return []
    entry = callee.regions[0].blocks[0]
    returned = _terminator(entry).operands
    ties = [(operand, entry.arguments[i]) for i, operand in enumerate(op.operands)]
    ties += [(result, returned[i]) for i, result in enumerate(op.results)]
    return ties


# Shardy's PropagationDirection enum, by value (NONE, FORWARD, BACKWARD, BOTH).
_BARRIER_DIRECTIONS = ("none", "forward", "backward", "both")


@register_ties("sdy.propagation_barrier")
def _propagation_barrier_ties(op: ir.Operation):
    """The operand and the result, tied only in the direction the barrier allows."""
    direction = _BARRIER_DIRECTIONS[ir.IntegerAttr(op.attributes["allowed_direction"]).value]
    return [(op.operands[0], op.results[0], direction)]


@register_group("sdy.sharding_group")
def _sharding_group(op: ir.Operation):
    return ir.IntegerAttr(op.attributes["group_id"]).value, op.operands[0]


def _lookup_function(op: ir.Operation, name: str) -> ir.Operation | None:
    module = op.operation
    while module.name != "builtin.module":
        module = module.parent
    for candidate in module.regions[0].blocks[0].operations:
        if (candidate.operation.name == "func.func"
                and ir.StringAttr(candidate.attributes["sym_name"]).value == name):
            return candidate.operation
    return None
