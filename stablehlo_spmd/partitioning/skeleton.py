"""The frame of the output: a global signature around one per-device body.

The partitioned ``@main`` keeps the global argument and result types, each
with its ``sdy.sharding``, and holds the per-device program in one
``sdy.manual_computation`` over every mesh axis: the form ``jax.shard_map``
lowers to, which any PJRT client compiles.  `ShardMapSkeleton` builds that
frame with the MLIR op builders, in the module being partitioned, and hands
the driver the body block and its per-device arguments; `finish` returns the
per-device results from the body.

When a value at the boundary does not divide (``sdy.manual_computation``
needs dimensions its axes divide), the frame is written in GSPMD's own
manual form instead, as XLA's partitioner writes it: each argument goes
through ``custom_call @Sharding`` and ``@SPMDFullToShardShape`` to its
ceil-sized shard, each result back through ``@SPMDShardToFullShape``, and
XLA keeps uneven shards in place, padding the last ones, with no collective
at the boundary.  (Padding such a value to whole shards in the global
program instead made XLA gather it: a boundary all-gather XLA's own layout
never needs.)
"""

from __future__ import annotations

from typing import Sequence

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import func, sdy
from jaxlib.mlir.dialects import stablehlo as hlo

from stablehlo_spmd.hlo_sharding import HloSharding
from stablehlo_spmd.ir import cached_attr
from stablehlo_spmd.mesh import Mesh, sdy_mesh_axes
from stablehlo_spmd.module_shardings import (
    FULL_TO_SHARD, MHLO_SHARDING, SDY_SHARDING, SHARD_TO_FULL, SHARDING_TARGET, mesh_attr_text,
    sdy_sharding_text, sharding_attr)
from stablehlo_spmd.shapes import local_type
from stablehlo_spmd.sharding import Sharding

MESH_NAME = "mesh"


def skeleton(module: ir.Operation, mesh: Mesh, old_main: ir.Operation,
             arg_shardings: Sequence[Sharding], result_shardings: Sequence[Sharding],
             own_orders: Sequence[HloSharding | None] = ()):
    """The frame for `old_main`'s per-device program: shard_map's form, or
    GSPMD's manual form when a boundary value does not divide, is manual
    already (a manual value has no global form to hand shard_map), or lists
    its devices in an order of its own.  `own_orders` gives, per argument
    then result, such a value's sharding as the user wrote it (None for the
    others): the frame says that one, and the body holds its blocks as
    that order places them."""
    entry = old_main.regions[0].blocks[0]
    result_types = ir.FunctionType(ir.TypeAttr(old_main.attributes["function_type"]).value).results
    values = [*zip((a.type for a in entry.arguments), arg_shardings),
              *zip(result_types, result_shardings)]
    shard_map_form = all(_divides(t, s) and not s.manual for t, s in values) and \
        not any(o is not None for o in own_orders)
    if shard_map_form:
        return ShardMapSkeleton(module, mesh, old_main, arg_shardings, result_shardings)
    orders = list(own_orders) or [None] * len(values)
    written = [o if o is not None else s for o, (_, s) in zip(orders, values)]
    count = len(arg_shardings)
    return GspmdManualSkeleton(module, mesh, old_main, arg_shardings, result_shardings,
                               written[:count], written[count:])


def _divides(value_type: ir.Type, sharding: Sharding) -> bool:
    if not isinstance(value_type, ir.RankedTensorType):
        return True
    return all(size % sharding.num_shards(d) == 0
               for d, size in enumerate(ir.RankedTensorType(value_type).shape))


def _new_main(module: ir.Operation, old_main: ir.Operation, arg_attrs: ir.Attribute,
              res_attrs: ir.Attribute, mesh: Mesh | None = None):
    """A public ``@main`` with `old_main`'s signature at the top of `module`
    (after an ``sdy.mesh`` when `mesh` is given): (function, entry block)."""
    context = module.context
    entry = old_main.regions[0].blocks[0]
    signature = ir.FunctionType(ir.TypeAttr(old_main.attributes["function_type"]).value)
    top = module.regions[0].blocks[0]
    first = top.operations[0] if len(top.operations) else None
    with ir.InsertionPoint.at_block_begin(top) if first is None else ir.InsertionPoint(first):
        with old_main.location:
            if mesh is not None:
                sdy.MeshOp(MESH_NAME, cached_attr(mesh_attr_text(mesh, sdy_axes=True), context))
            function = func.FuncOp("main", (list(signature.inputs), list(signature.results)),
                                   visibility="public")
    res_attrs = _with_kept(res_attrs, old_main, "res_attrs", context)
    function.attributes["arg_attrs"] = _aliases_that_fit(
        _with_kept(arg_attrs, old_main, "arg_attrs", context), res_attrs, context)
    function.attributes["res_attrs"] = res_attrs
    # The arguments keep their locations: they carry the pytree names.
    return function, function.add_entry_block(arg_locs=[a.location for a in entry.arguments])


# What an argument or result says to whoever calls the program, which the
# partitioned program must keep saying: which arguments the caller donates
# (and to which result), and the results' names.
_CALLER_CONTRACT = ("tf.aliasing_output", "jax.buffer_donor", "jax.result_info")


def _with_kept(new_attrs: ir.Attribute, old_main: ir.Operation, key: str,
               context: ir.Context) -> ir.Attribute:
    """`new_attrs` (one dict per value) with the caller's contract copied from `old_main`."""
    if key not in old_main.attributes:
        return new_attrs
    merged = []
    for new, old in zip(ir.ArrayAttr(new_attrs), ir.ArrayAttr(old_main.attributes[key])):
        new, old = ir.DictAttr(new), ir.DictAttr(old)
        entries = {new[i].name: new[i].attr for i in range(len(new))}
        for name in _CALLER_CONTRACT:
            if name in old:
                entries[name] = old[name]
        merged.append(ir.DictAttr.get(entries, context))
    return ir.ArrayAttr.get(merged, context)


def _aliases_that_fit(arg_attrs: ir.Attribute, res_attrs: ir.Attribute,
                      context: ir.Context) -> ir.Attribute:
    """A donated argument whose result is laid out otherwise cannot share its
    buffers with it: it is donated without a partner (``jax.buffer_donor``),
    and XLA reuses it where a result fits."""
    results = [ir.DictAttr(r) for r in ir.ArrayAttr(res_attrs)]
    fitted = []
    for argument in ir.ArrayAttr(arg_attrs):
        argument = ir.DictAttr(argument)
        if "tf.aliasing_output" in argument:
            partner = results[ir.IntegerAttr(argument["tf.aliasing_output"]).value]
            if _layout(argument) != _layout(partner):
                entries = {argument[i].name: argument[i].attr for i in range(len(argument))
                           if argument[i].name != "tf.aliasing_output"}
                entries["jax.buffer_donor"] = ir.BoolAttr.get(True, context)
                argument = ir.DictAttr.get(entries, context)
        fitted.append(argument)
    return ir.ArrayAttr.get(fitted, context)


def _layout(attrs: ir.DictAttr) -> str | None:
    for name in (SDY_SHARDING, MHLO_SHARDING):
        if name in attrs:
            return str(attrs[name])
    return None


class ShardMapSkeleton:
    """A new public ``@main`` (and its ``sdy.mesh``) at the top of `module`,
    whose manual body the driver fills: `body` is the block to emit into and
    `local_arguments` the per-device arguments.  (Every boundary value
    divides here: `skeleton` picks the GSPMD form otherwise.)"""

    def __init__(self, module: ir.Operation, mesh: Mesh, old_main: ir.Operation,
                 arg_shardings: Sequence[Sharding], result_shardings: Sequence[Sharding]):
        context = module.context
        self.function, outer = _new_main(module, old_main,
                                         _sharding_dicts(arg_shardings, context),
                                         _sharding_dicts(result_shardings, context), mesh)
        result_types = list(self.function.type.results)
        with ir.InsertionPoint(outer), old_main.location:
            manual = sdy.ManualComputationOp(
                result_types, list(outer.arguments), _per_value(arg_shardings, context),
                _per_value(result_shardings, context),
                cached_attr("#sdy<manual_axes{"
                            + ", ".join(f'"{a}"' for a, _ in sdy_mesh_axes(mesh)) + "}>",
                            context))
            self.body = manual.regions[0].blocks.append(
                *[local_type(a.type, s) for a, s in zip(outer.arguments, arg_shardings)],
                arg_locs=[a.location for a in outer.arguments])
            func.ReturnOp(list(manual.results))
        self.local_arguments = list(self.body.arguments)

    def finish(self, local_results: Sequence[ir.Value]) -> None:
        """End the manual body: it returns these per-device results."""
        with ir.InsertionPoint(self.body), self.function.location:
            sdy.ReturnOp(list(local_results))


class GspmdManualSkeleton:
    """The same frame in GSPMD's manual form (see the module docstring):
    the body is the new ``@main``'s own block, between the full-to-shard and
    shard-to-full conversions."""

    def __init__(self, module: ir.Operation, mesh: Mesh, old_main: ir.Operation,
                 arg_shardings: Sequence[Sharding], result_shardings: Sequence[Sharding],
                 arg_written: Sequence[Sharding | HloSharding],
                 result_written: Sequence[Sharding | HloSharding]):
        context = self._context = module.context
        self.function, self.body = _new_main(module, old_main,
                                             _hlo_sharding_dicts(arg_written, context),
                                             _hlo_sharding_dicts(result_written, context))
        self._result_types = list(self.function.type.results)
        self._result_shardings = list(result_shardings)
        self._result_written = list(result_written)
        with ir.InsertionPoint(self.body), old_main.location:
            self.local_arguments = [
                _to_shard(argument, sharding, written, context)
                if isinstance(argument.type, ir.RankedTensorType) else argument
                for argument, sharding, written in zip(self.body.arguments, arg_shardings,
                                                       arg_written)]

    def finish(self, local_results: Sequence[ir.Value]) -> None:
        # XLA's partitioner wants an op with effects to say where it runs:
        # here, on each device as it is.  (An outfeed's sharding covers what
        # it sends, its operands, in XLA's spelling.)
        for op in self.body.operations:
            op = op.operation
            if op.name in _SIDE_EFFECT_OPS and MHLO_SHARDING not in op.attributes:
                count = len(op.operands if op.name == "stablehlo.outfeed" else op.results)
                op.attributes[MHLO_SHARDING] = cached_attr(
                    _MANUAL if count <= 1 else '"{' + ", ".join(["{manual}"] * count) + '}"',
                    self._context)
        with ir.InsertionPoint(self.body), self.function.location:
            func.ReturnOp([
                _to_full(value, global_type, sharding, written, self._context)
                if isinstance(global_type, ir.RankedTensorType) else value
                for value, global_type, sharding, written in zip(
                    local_results, self._result_types, self._result_shardings,
                    self._result_written)])


_MANUAL = '"{manual}"'
_SIDE_EFFECT_OPS = frozenset({"stablehlo.outfeed", "stablehlo.infeed", "stablehlo.send",
                              "stablehlo.recv"})


def _hlo_sharding_dicts(shardings: Sequence[Sharding | HloSharding],
                        context: ir.Context) -> ir.Attribute:
    return ir.ArrayAttr.get([ir.DictAttr.get({MHLO_SHARDING: sharding_attr(s, context)}, context)
                             for s in shardings], context)


def _custom_call(target: str, operand: ir.Value, result_type: ir.Type,
                 sharding: ir.Attribute) -> ir.Value:
    call = hlo.CustomCallOp([result_type], [operand], target)
    call.attributes[MHLO_SHARDING] = sharding
    return call.result


def _to_shard(argument: ir.Value, sharding: Sharding, written: Sharding | HloSharding,
              context: ir.Context) -> ir.Value:
    """A global argument, laid out as `written` says, as its (ceil-sized)
    shard on each device (a fully manual one is that already)."""
    if _fully_manual(sharding):
        return argument
    pinned = _custom_call(SHARDING_TARGET, argument, argument.type,
                          sharding_attr(written, context))
    return _custom_call(FULL_TO_SHARD, pinned, local_type(argument.type, sharding),
                        cached_attr(_MANUAL, context))


def _to_full(local: ir.Value, global_type: ir.Type, sharding: Sharding,
             written: Sharding | HloSharding, context: ir.Context) -> ir.Value:
    """A per-device result as the global value laid out as `written` says."""
    if _fully_manual(sharding):
        return local
    manual = _custom_call(SHARDING_TARGET, local, local.type, cached_attr(_MANUAL, context))
    return _custom_call(SHARD_TO_FULL, manual, global_type, sharding_attr(written, context))


def _fully_manual(sharding: Sharding) -> bool:
    return bool(sharding.manual) and len(sharding.manual) == sharding.mesh.rank


def _sharding_dicts(shardings: Sequence[Sharding], context: ir.Context) -> ir.Attribute:
    return ir.ArrayAttr.get([ir.DictAttr.get(
        {SDY_SHARDING: cached_attr(sdy_sharding_text(s, MESH_NAME), context)}, context)
        for s in shardings], context)


def _per_value(shardings: Sequence[Sharding], context: ir.Context) -> ir.Attribute:
    inner = ", ".join(sdy_sharding_text(s, MESH_NAME)[len("#sdy.sharding"):] for s in shardings)
    return cached_attr(f"#sdy.sharding_per_value<[{inner}]>", context)
