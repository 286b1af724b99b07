"""The partitioner's core: per-device values, the rule-driven path, the fallback.

`Partitioner` walks the public function once, in order, and keeps for every
global value its per-device value (`local`) and the sharding that per-device
value has (`shardings`).  Each op is emitted by

* the handler registered for its name in `HANDLERS`, when there is one and it
  does not decline (returns False): ops whose per-device form needs more
  than new types (windows with halos, gathers, loops, calls, top-k);
* else the rule-driven path, when its rule `keeps_attributes`;
* else the replicated fallback.

Every op is partitioned by the same rule table propagation used:

* each factor of the op gets the mesh axes the op's result sharding gives it
  (REDUCTION factors: the axes its first operand has there), except that
  PERMUTATION and NEED_REPLICATION factors, and factors the axes do not
  divide evenly, get none: their data is gathered first;
* each operand is resharded (`collectives.Emitter.reshard`, planned by
  `reshard.plan`) to the layout those factor axes give it, keeping a partial
  operand partial when the op is linear in it and its result stays partial;
* the op is re-created with per-device types (its attributes do not change
  for the ops that take this path: they name dimensions, not sizes);
* its per-device result, partial on the axes of its sharded REDUCTION
  factors, is resharded to the result's own sharding: this is where the
  all-reduce or reduce-scatter a marked reshard asked for is emitted.

The fallback gathers the operands, runs the op on global shapes and slices
the results to their sharding.  That is always correct; it is reported with a
located warning when it replicates a tensor larger than `warn_bytes`.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo as hlo

from stablehlo_spmd import diagnostics, op_rules
from stablehlo_spmd.collectives import Emitter
from stablehlo_spmd.errors import ShardingError
from stablehlo_spmd.ir import parse_module
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.module_shardings import (
    MESH_ATTR, MHLO_SHARDING, NUM_PARTITIONS, SHARDING_TARGET, ShardedValue, function_values,
    functions, mesh_attr_text, read_hlo, sdy_sharding_text)
from stablehlo_spmd.op_rules import FactorKind, OpRule, UnreducedFlow, project_axes
from stablehlo_spmd.reshard import plan, plan_cost
from stablehlo_spmd.sharding import Sharding

_MESH_NAME = "mesh"

Handler = Callable[["Partitioner", ir.Operation], "bool | None"]

# Per-op handlers, filled by the handler modules of this package: a handler
# emits the op's per-device form and returns None/True, or returns False
# (before emitting anything) to leave the op to the generic paths.
HANDLERS: dict[str, Handler] = {}


def handles(*op_names: str) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of `op_names`."""
    def register(handler: Handler) -> Handler:
        for name in op_names:
            # One handler an op: a second would silently win by import order.
            assert name not in HANDLERS, f"{name} already handled by {HANDLERS[name].__name__}"
            HANDLERS[name] = handler
        return handler
    return register


class Partitioner:
    """The state of one partitioning: each global value's per-device value and
    the sharding that per-device value has."""

    def __init__(self, module: ir.Operation, func: ir.Operation, mesh: Mesh, warn_bytes: int):
        self.module = module
        self.func = func
        self.mesh = mesh
        self.warn_bytes = warn_bytes
        self.context = module.context
        self.emitter = Emitter(mesh, self.context)
        self.axis_size = dict(zip(mesh.axis_names, mesh.mesh_shape))
        self.local: dict[ir.Value, ir.Value] = {}
        self.callees = {ir.StringAttr(f.attributes["sym_name"]).value: f
                        for f in functions(module)}
        self.shardings: dict[ir.Value, Sharding] = {}

    # -------------------------------------------------------------- driver

    def run(self) -> None:
        values = list(function_values(self.func))
        arguments = [v for v in values if v.kind == "argument"]
        results = [v for v in values if v.kind == "result"]
        arg_shardings = [self.declared(v) for v in arguments]
        result_shardings = [self.declared(v) for v in results]
        if any(s is None for s in arg_shardings + result_shardings):
            return
        skeleton = self._skeleton(arguments, results, arg_shardings, result_shardings)
        new_func = skeleton.regions[0].blocks[0].operations[1].operation
        manual = next(op.operation for op in new_func.regions[0].blocks[0].operations
                      if op.operation.name == "sdy.manual_computation")
        body = manual.regions[0].blocks[0]
        placeholder_return = body.operations[len(body.operations) - 1]
        placeholders = [op.operation for op in list(body.operations)[:-1]]

        entry = self.func.regions[0].blocks[0]
        for old, new, sharding in zip(entry.arguments, body.arguments, arg_shardings):
            self.local[old] = new
            self.shardings[old] = sharding
        terminator = entry.operations[len(entry.operations) - 1]
        with ir.InsertionPoint(placeholder_return):
            for op in list(entry.operations)[:-1]:
                self.emit(op.operation)
            returned = []
            for index, operand in enumerate(terminator.operands):
                with terminator.location:
                    returned.append(self.to(operand, result_shardings[index]))
        for index, value in enumerate(returned):
            placeholder_return.operands[index] = value
        for op in placeholders:
            op.erase()
        self._install(skeleton, new_func)

    def declared(self, value) -> Sharding | None:
        try:
            hlo = read_hlo(value)
            if hlo is None or hlo.kind == "unknown":
                return Sharding.replicated(self.mesh, value.rank or 0)
            sharding = Sharding.from_hlo(hlo, self.mesh, value.rank or 0)
        except ShardingError as error:
            diagnostics.error(error.location or value.location, error.message)
            return None
        if sharding.unreduced:  # a function boundary carries full values
            sharding = dataclasses.replace(sharding, unreduced=())
        return sharding

    def _skeleton(self, arguments, results, arg_shardings, result_shardings) -> ir.Operation:
        """The output @main as text: global signature, an empty manual body
        returning zeros of the per-device result types (replaced later).

        ``sdy.manual_computation`` needs dimensions its axes divide, so an
        uneven argument is zero-padded to whole shards before it (GSPMD's
        padding, made explicit) and an uneven result sliced back after it.
        """
        def sdy(sharding):
            return "<" + sdy_sharding_text(sharding, _MESH_NAME)[len("#sdy.sharding<"):]

        def padded_type(value, sharding) -> ir.RankedTensorType:
            local = sharding.shard_shape(tuple(value.type.shape))
            whole = [size * sharding.num_shards(d) for d, size in enumerate(local)]
            return ir.RankedTensorType.get(whole, value.type.element_type)

        lines = []
        operands = []
        for i, (value, sharding) in enumerate(zip(arguments, arg_shardings)):
            padded = padded_type(value, sharding)
            if padded == value.type:
                operands.append(f"%arg{i}")
                continue
            high = [p - g for p, g in zip(padded.shape, value.type.shape)]
            zero = zero_literal(value.type.element_type)
            element = value.type.element_type
            lines.append(f"    %pad_value{i} = stablehlo.constant dense<{zero}> : tensor<{element}>")
            lines.append(f"    %padded{i} = stablehlo.pad %arg{i}, %pad_value{i}, "
                         f"low = {[0] * len(high)}, high = {high}, interior = {[0] * len(high)} "
                         f": ({value.type}, tensor<{element}>) -> {padded}")
            operands.append(f"%padded{i}")
        args = ", ".join(f"%arg{i}: {v.type} {{sdy.sharding = #sdy.sharding{sdy(s)}}}"
                         for i, (v, s) in enumerate(zip(arguments, arg_shardings)))
        outs = ", ".join(f"{v.type} {{sdy.sharding = #sdy.sharding{sdy(s)}}}"
                         for v, s in zip(results, result_shardings))
        block_args = ", ".join(f"%local{i}: {local_type(v.type, s)}"
                               for i, (v, s) in enumerate(zip(arguments, arg_shardings)))
        zeros = [f"      %zero{i} = stablehlo.constant dense<{zero_literal(v.type.element_type)}> : "
                 f"{local_type(v.type, s)}" for i, (v, s) in enumerate(zip(results, result_shardings))]
        padded_results = [padded_type(v, s) for v, s in zip(results, result_shardings)]
        count = f":{len(results)}" if len(results) > 1 else ""
        returned = []
        for i, (value, padded) in enumerate(zip(results, padded_results)):
            name = f"%out#{i}" if len(results) > 1 else "%out"
            if padded != value.type:
                limits = ", ".join(f"0:{n}" for n in value.type.shape)
                lines_after = f"    %sliced{i} = stablehlo.slice {name} [{limits}] : ({padded}) -> {value.type}"
                returned.append((f"%sliced{i}", lines_after))
            else:
                returned.append((name, None))
        manual_axes = ", ".join(f'"{a}"' for a in self.mesh.axis_names)
        text = f"""module {{
  sdy.mesh @{_MESH_NAME} = {mesh_attr_text(self.mesh)[len('#sdy.mesh'):]}
  func.func public @main({args}) -> ({outs}) {{
{chr(10).join(lines)}
    %out{count} = sdy.manual_computation({", ".join(operands)}) in_shardings=[{", ".join(sdy(s) for s in arg_shardings)}] out_shardings=[{", ".join(sdy(s) for s in result_shardings)}] manual_axes={{{manual_axes}}} ({block_args}) {{
{chr(10).join(zeros)}
      sdy.return {", ".join(f"%zero{i}" for i in range(len(results)))} : {", ".join(str(local_type(v.type, s)) for v, s in zip(results, result_shardings))}
    }} : ({", ".join(str(p) if o.startswith("%padded") else str(v.type) for o, v, p in zip(operands, arguments, [padded_type(v, s) for v, s in zip(arguments, arg_shardings)]))}) -> ({", ".join(str(p) for p in padded_results)})
{chr(10).join(line for _, line in returned if line)}
    return {", ".join(name for name, _ in returned)} : {", ".join(str(v.type) for v in results)}
  }}
}}"""
        return parse_module(text, "<spmd-partition>", self.context)

    def _install(self, skeleton: ir.Operation, new_func: ir.Operation) -> None:
        """Move the new @main and mesh into the module, replacing the old function."""
        body = self.module.regions[0].blocks[0]
        old_ops = list(body.operations)
        skeleton_ops = list(skeleton.regions[0].blocks[0].operations)
        for op in skeleton_ops:
            op.operation.move_before(old_ops[0].operation) if old_ops else None
        for op in old_ops:
            if op.operation.name in ("func.func", "sdy.mesh"):
                op.operation.erase()
        new_func.attributes["sym_name"] = ir.StringAttr.get("main", self.context)
        attributes = self.module.attributes
        attributes[NUM_PARTITIONS] = ir.IntegerAttr.get(
            ir.IntegerType.get_signless(32, self.context), self.mesh.size)
        attributes["mhlo.num_replicas"] = ir.IntegerAttr.get(
            ir.IntegerType.get_signless(32, self.context), 1)
        if MESH_ATTR in attributes:
            del attributes[MESH_ATTR]

    # ------------------------------------------------------------ per op

    def emit(self, op: ir.Operation) -> None:
        name = op.name
        with op.location:
            if name == "stablehlo.custom_call" and call_target(op) == SHARDING_TARGET:
                target = self.result_shardings(op)[0]
                operand = op.operands[0]
                self.bind(op.results[0], self.local[operand], self.shardings[operand])
                self.settle(op.results[0], target)
                return
            if name in ("stablehlo.constant", "stablehlo.iota"):
                self._emit_created(op)
                return
            handler = HANDLERS.get(name)
            if handler is not None and handler(self, op) is not False:
                return
            rule = op_rules.rule_for(op)
            if rule is not None and rule.keeps_attributes:
                self.emit_by_rule(op, rule)
            else:
                self.emit_replicated(op)

    def bind(self, old: ir.Value, new: ir.Value, sharding: Sharding) -> None:
        self.local[old] = new
        self.shardings[old] = sharding

    def result_shardings(self, op: ir.Operation) -> list[Sharding]:
        """The shardings propagation gave `op`'s results (replicated where none).

        A sharding that does not parse or fit is the user's error: reported at
        the op, and the op carries on replicated so the rest is still checked.

        A dimension of size 1 is kept whole: split, it would sit on one device
        and pad the others, and every consumer wanting it whole would gather
        the padding too (propagation's factors can carry an axis onto it from
        a larger dim, as `x[-1:]` of a sharded `x` does).
        """
        shapes = [shape_of(r) or () for r in op.results]
        replicated = [Sharding.replicated(self.mesh, len(s)) for s in shapes]
        if MHLO_SHARDING not in op.attributes:
            return replicated
        try:
            parsed = read_hlo(ShardedValue("op", op, 0, None, op.location, op.results[0].type))
            elements = parsed.elements if parsed.kind == "tuple" else (parsed,) * len(shapes)
            return [fallback if element.kind == "unknown"
                    else _whole_unit_dims(Sharding.from_hlo(element, self.mesh, len(shape)), shape)
                    for element, shape, fallback in zip(elements, shapes, replicated)]
        except ShardingError as error:
            diagnostics.error(error.location or op.location, f"op '{op.name}': {error.message}")
            return replicated

    def settle(self, value: ir.Value, target: Sharding) -> None:
        """Give `value` the sharding propagation chose, where that is possible.

        When the op could not leave the partial propagation planned (an
        uneven reduction was gathered, an op ran replicated), its full value
        serves every consumer the same: the partial axes are dropped.
        """
        source = self.shardings[value]
        if not set(target.unreduced) <= set(source.unreduced):
            target = dataclasses.replace(target, unreduced=(), reduction="sum")
        if source != target:
            self.bind(value, self.to(value, target), target)

    def to(self, value: ir.Value, target: Sharding) -> ir.Value:
        """`value`'s per-device form, resharded to `target`."""
        source = self.shardings.get(value)
        local = self.local[value]
        if source is None or source == target or not shape_of(value):
            if source is not None and source != target and not shape_of(value):
                return self.emitter.reshard(local, source, target, ())
            return local
        shape = shape_of(value)
        element_bytes = max(1, getattr(value.type.element_type, "width", 32) // 8)
        steps = plan(source, target, shape, element_bytes, self.warn_bytes)
        if any(step.replicates_fully for step in steps):
            # XLA's "involuntary full rematerialization", but with a location.
            diagnostics.warning(ir.Location.current, f"resharding {value.type} from {source} to "
                                f"{target} goes through a fully replicated copy")
        return self.emitter.reshard(local, source, target, shape, steps=steps)

    # ----------------------------------------------------- rule-driven ops

    def emit_by_rule(self, op: ir.Operation, rule: OpRule) -> None:
        wanted = self.result_shardings(op)
        # Two ways to seat an axis both a result dim and a reduced dim want:
        # on the result (move the operands) or on the reduction (reduce-scatter
        # the local partial).  Take whichever moves fewer bytes.
        candidates = []
        for reduction_first in (False, True):
            axes = self.factor_axes(op, rule, wanted, reduction_first)
            required, produced = self.layouts(op, rule, axes, wanted)
            candidates.append((self._cost(op, required, produced, wanted), axes, required, produced))
            if not any(k is FactorKind.REDUCTION for k in rule.factor_kinds):
                break
        _, axes, required, produced = min(candidates, key=lambda c: c[0])
        operands = []
        for index, (operand, dims, layout) in enumerate(zip(op.operands, rule.operands, required)):
            if layout is not None:
                self.warn_if_dims_gathered(op, rule, operand, dims, layout)
            local = self.to(operand, layout) if layout is not None else self.local[operand]
            operands.append(self._mask_uneven_reduction(op, rule, axes, index, dims, local))
        result_types = [local_type(r.type, s) for r, s in zip(op.results, produced)]
        new_op = self.create(op, operands, result_types)
        for old, new, layout, target in zip(op.results, new_op.results, produced, wanted):
            self.bind(old, new, layout)
            self.settle(old, target)

    def warn_if_dims_gathered(self, op: ir.Operation, rule: OpRule, operand: ir.Value,
                               dims, layout: Sharding) -> None:
        """Say so, at the op, when it needs a sharded dimension whole (a sort's
        dimension, a concatenation, ...) and gathering it moves more than
        `warn_bytes`: the user asked for that dimension split."""
        source = self.shardings.get(operand)
        if source is None:
            return
        for dim, factors in enumerate(dims):
            lost = [a for a in source.dim_axes[dim] if a not in layout.dim_axes[dim]]
            whole = any(rule.factor_kinds[f] in (FactorKind.NEED_REPLICATION,
                                                 FactorKind.PERMUTATION) for f in factors)
            if not lost or not whole:
                continue
            size = tensor_bytes(operand.type) / self.mesh.axes_size(
                [a for axes in layout.dim_axes for a in axes])
            if size >= self.warn_bytes:
                diagnostics.warning(ir.Location.current,
                                    f"'{op.name}' needs dimension {dim} of its operand "
                                    f"{operand.type} whole: gathering it over "
                                    f"{', '.join(lost)} ({int(size)} bytes per device)")

    def layouts(self, op: ir.Operation, rule: OpRule, axes, wanted):
        """Operand layouts the local op needs and result layouts it produces."""
        required, partial_operands = [], set()
        result_partial = wanted[0].unreduced if wanted else ()
        for index, (operand, dims) in enumerate(zip(op.operands, rule.operands)):
            if shape_of(operand) is None:
                required.append(None)
                continue
            layout = self.layout(dims, axes)
            source = self.shardings.get(operand)
            if (source is not None and source.unreduced and rule.unreduced is not UnreducedFlow.NONE
                    and index in rule.linear_operands
                    and set(source.unreduced) <= set(result_partial)):
                layout = dataclasses.replace(layout, unreduced=source.unreduced,
                                             reduction=source.reduction)
                partial_operands.add(index)
            required.append(layout)
        reduction_axes = tuple(a for f, kind in enumerate(rule.factor_kinds)
                               if kind is FactorKind.REDUCTION for a in axes[f])
        flowed = ()
        if partial_operands:
            flowed = self.shardings[op.operands[min(partial_operands)]].unreduced
        produced = []
        for dims in rule.results:
            layout = self.layout(dims, axes)
            unreduced = tuple(dict.fromkeys(reduction_axes + flowed))
            if unreduced:
                layout = dataclasses.replace(layout, unreduced=unreduced,
                                             reduction=rule.reduction or "sum")
            produced.append(layout)
        return required, produced

    def _cost(self, op: ir.Operation, required, produced, wanted) -> float:
        """Bytes per device the reshards around the local op would move."""
        total = 0.0
        for operand, layout in zip(op.operands, required):
            source = self.shardings.get(operand)
            if layout is not None and source is not None and source != layout:
                total += plan_bytes(source, layout, operand)
        for result, layout, target in zip(op.results, produced, wanted):
            if not set(target.unreduced) <= set(layout.unreduced):
                target = dataclasses.replace(target, unreduced=(), reduction="sum")
            if layout != target:
                total += plan_bytes(layout, target, result)
        return total

    def _mask_uneven_reduction(self, op: ir.Operation, rule: OpRule, axes, index: int, dims,
                               local: ir.Value) -> ir.Value:
        """Overwrite the padding of an uneven, sharded reduced dimension with the
        reduction's neutral value (the init of a reduce, zero for a dot's
        operands: 0 * NaN would still be NaN), so the local op never reads it."""
        for dim, factors in enumerate(dims):
            for factor in factors:
                factor_axes = axes[factor]
                size = rule.factor_sizes[factor]
                if (rule.factor_kinds[factor] is not FactorKind.REDUCTION or not factor_axes
                        or size % self.mesh.axes_size(factor_axes) == 0):
                    continue
                if op.name == "stablehlo.reduce":
                    neutral = self.local[op.operands[len(op.results) + index]]
                else:
                    neutral = None  # zero
                local = self.emitter.mask_padding(local, dim, factor_axes, size, neutral)
        return local

    def factor_axes(self, op: ir.Operation, rule: OpRule, wanted: list[Sharding],
                     reduction_first: bool = False) -> list[tuple]:
        """The mesh axes each factor runs over in the per-device op."""
        axes: list[tuple] = [()] * rule.num_factors
        assigned = [False] * rule.num_factors
        for sharding, dims in zip(wanted, rule.results):
            for dim, factors in enumerate(dims):
                dealt = project_axes(sharding.dim_axes[dim], factors, rule.factor_sizes,
                                     self.axis_size)
                for factor, factor_axes in dealt:
                    if not assigned[factor]:
                        axes[factor], assigned[factor] = factor_axes, True
        for operand, dims in zip(op.operands, rule.operands):
            source = self.shardings.get(operand)
            if source is None:
                continue
            for dim, factors in enumerate(dims):
                dealt = project_axes(source.dim_axes[dim], factors, rule.factor_sizes,
                                     self.axis_size)
                for factor, factor_axes in dealt:
                    if not assigned[factor] and rule.factor_kinds[factor] is FactorKind.REDUCTION:
                        axes[factor], assigned[factor] = factor_axes, True
        compound = {f for tensor in (*rule.operands, *rule.results) for dim in tensor
                    if len(dim) > 1 for f in dim}
        used: set[str] = set()
        # With `reduction_first`, reduction factors claim their axes before
        # the result's dims do (a result wanting the same axis then gets it by
        # a reduce-scatter of the local partial).
        order = sorted(range(rule.num_factors),
                       key=lambda f: reduction_first and rule.factor_kinds[f] is not FactorKind.REDUCTION)
        for factor in order:
            kind = rule.factor_kinds[factor]
            keep = kind in (FactorKind.PASS_THROUGH, FactorKind.REDUCTION)
            if kind is FactorKind.REDUCTION and not rule.reduction:
                keep = False
            # Padding of an uneven shard is harmless where each element is
            # computed on its own, but a reduction would read it and a
            # compound (reshaped) dim would misplace it: those must divide.
            uneven = rule.factor_sizes[factor] % self.mesh.axes_size(axes[factor])
            if uneven and (factor in compound or (kind is FactorKind.REDUCTION
                                                  and not rule.masks_padding)):
                keep = False
            if not keep or used & set(axes[factor]):
                axes[factor] = ()
            used.update(axes[factor])
        # A compound (reshaped) dim is split major to minor: a factor can run
        # over axes only when every factor before it in the dim is split into
        # exactly its size.  (8 -> 2x2x2 with the middle dim over x is no
        # split of the 8: device k holds elements {0,1,4,5} + 2k.)
        changed = True
        while changed:
            changed = False
            for tensor in (*rule.operands, *rule.results):
                for factors in tensor:
                    for i, factor in enumerate(factors[1:], 1):
                        if axes[factor] and any(self.mesh.axes_size(axes[f]) != rule.factor_sizes[f]
                                                for f in factors[:i]):
                            axes[factor], changed = (), True
        return axes

    def layout(self, dims, axes) -> Sharding:
        """The sharding a tensor has when each factor runs over its axes."""
        dim_axes = []
        for factors in dims:
            collected = []
            for factor in factors:
                collected.extend(axes[factor])
            dim_axes.append(tuple(collected))
        return Sharding(self.mesh, tuple(dim_axes))

    def create(self, op: ir.Operation, operands, result_types) -> ir.Operation:
        attributes = {n: op.attributes[n] for n in op.attributes if n != MHLO_SHARDING}
        new_op = ir.Operation.create(op.name, results=result_types, operands=operands,
                                     attributes=attributes, regions=len(op.regions))
        for old_region, new_region in zip(op.regions, new_op.regions):
            self._clone_region(op, old_region, new_region)
        return new_op

    def _clone_region(self, parent: ir.Operation, old_region, new_region) -> None:
        """Bodies of reduce/sort/scatter (scalars), of while (carries) and of
        if/case branches (which yield the op's results)."""
        arg_shardings, yield_shardings = self._region_shardings(parent, old_region)
        for old_block in old_region.blocks:
            arg_types, block_shardings = [], []
            for index, argument in enumerate(old_block.arguments):
                sharding = arg_shardings[index] if arg_shardings else Sharding.replicated(
                    self.mesh, len(shape_of(argument) or ()))
                block_shardings.append(sharding)
                arg_types.append(local_type(argument.type, sharding))
            new_block = new_region.blocks.append(*arg_types)
            for old, new, sharding in zip(old_block.arguments, new_block.arguments, block_shardings):
                self.bind(old, new, sharding)
            with ir.InsertionPoint(new_block):
                operations = list(old_block.operations)
                for inner in operations[:-1]:
                    self.emit(inner.operation)
                terminator = operations[-1].operation
                with terminator.location:
                    if yield_shardings:
                        operands = [self.to(v, s) if shape_of(v) else self.local[v]
                                    for v, s in zip(terminator.operands, yield_shardings)]
                    else:
                        operands = [self.to(v, Sharding.replicated(self.mesh, len(shape_of(v) or ())))
                                    if shape_of(v) else self.local[v] for v in terminator.operands]
                    ir.Operation.create(terminator.name, operands=operands)

    def _region_shardings(self, parent: ir.Operation, region):
        """(block argument shardings, yielded value shardings) of one of
        `parent`'s regions; None for either means replicated.

        A while's carries are both arguments of its regions and what its body
        yields.  An if/case branch yields the op's results as full values
        (every branch must hand back the same thing, and one branch's partial
        sum is not another's); the results are settled to any partial
        sharding propagation gave them after the op.
        """
        if parent.name == "stablehlo.while":
            carries = self.result_shardings(parent)
            return carries, (carries if region == parent.regions[1] else None)
        if parent.name in ("stablehlo.if", "stablehlo.case"):
            return None, [dataclasses.replace(s, unreduced=(), reduction="sum")
                          for s in self.result_shardings(parent)]
        return None, None

    # ------------------------------------------------- created and fallback

    def _emit_created(self, op: ir.Operation) -> None:
        """constant / iota: build the global value, keep this device's part."""
        target = self.result_shardings(op)[0]
        shape = shape_of(op.results[0])
        shard_type = local_type(op.results[0].type, target)
        if op.name == "stablehlo.constant":
            value = op.attributes["value"]
            if isinstance(value, ir.DenseElementsAttr) and value.is_splat:
                splat = ir.DenseElementsAttr.get_splat(shard_type, value.get_splat_value())
                new = ir.Operation.create(op.name, results=[shard_type], attributes={"value": splat})
                self.bind(op.results[0], new.results[0], target)
                return
        new = self.create(op, [], [op.results[0].type])
        replicated = Sharding.replicated(self.mesh, len(shape))
        self.bind(op.results[0], new.results[0], replicated)
        self.settle(op.results[0], target)

    def emit_replicated(self, op: ir.Operation) -> None:
        """Any op, correctly: gather the operands, run it whole, slice the results."""
        operands = []
        for operand in op.operands:
            shape = shape_of(operand)
            if shape is None:
                operands.append(self.local[operand])
                continue
            full = Sharding.replicated(self.mesh, len(shape))
            source = self.shardings.get(operand)
            if source is not None and source != full:
                self._warn_if_large(op, operand, source)
            operands.append(self.to(operand, full))
        new_op = self.create(op, operands, [r.type for r in op.results])
        for old, new, target in zip(op.results, new_op.results, self.result_shardings(op)):
            self.bind(old, new, Sharding.replicated(self.mesh, len(shape_of(old) or ())))
            if shape_of(old) is not None:
                self.settle(old, target)

    def _warn_if_large(self, op: ir.Operation, operand: ir.Value, source: Sharding) -> None:
        shaped = operand.type
        size = 1
        for d in shaped.shape:
            size *= d
        size *= max(1, shaped.element_type.width // 8) if hasattr(shaped.element_type, "width") else 4
        if size > 0 and size >= self._warn_limit():
            diagnostics.warning(op.location, f"'{op.name}' has no partitioned form: its operand "
                                f"{shaped} ({size} bytes, sharded {source}) is gathered in full")

    def _warn_limit(self) -> int:
        return self.warn_bytes


def _whole_unit_dims(sharding: Sharding, shape: tuple[int, ...]) -> Sharding:
    """`sharding` without axes on dims of size 1."""
    if not any(axes and size == 1 for axes, size in zip(sharding.dim_axes, shape)):
        return sharding
    dim_axes = tuple(() if size == 1 else axes for axes, size in zip(sharding.dim_axes, shape))
    return dataclasses.replace(sharding, dim_axes=dim_axes)


def plan_bytes(source: Sharding, target: Sharding, value: ir.Value) -> float:
    element_type = value.type.element_type
    element_bytes = max(1, getattr(element_type, "width", 32) // 8)
    try:
        return plan_cost(plan(source, target, tuple(value.type.shape), element_bytes))
    except ShardingError:
        return float("inf")


def tensor_bytes(tensor_type: ir.Type) -> int:
    count = 1
    for size in tensor_type.shape:
        count *= size
    return count * max(1, getattr(tensor_type.element_type, "width", 32) // 8)


def shape_of(value: ir.Value) -> tuple[int, ...] | None:
    value_type = value.type
    return tuple(value_type.shape) if isinstance(value_type, ir.RankedTensorType) else None


def local_type(value_type: ir.Type, sharding: Sharding) -> ir.Type:
    if not isinstance(value_type, ir.RankedTensorType):
        return value_type
    local = sharding.shard_shape(tuple(value_type.shape))
    return ir.RankedTensorType.get(local, value_type.element_type)


def scalar(value: int, element_type: ir.Type) -> ir.Value:
    return hlo.ConstantOp(ir.DenseElementsAttr.get_splat(
        ir.RankedTensorType.get([], element_type), ir.IntegerAttr.get(element_type, value))).result


def splat(value: int, tensor_type: ir.Type) -> ir.Value:
    return hlo.ConstantOp(ir.DenseElementsAttr.get_splat(
        tensor_type, ir.IntegerAttr.get(tensor_type.element_type, value))).result


def clamp(value: ir.Value, low: int, high: int, element_type: ir.Type) -> ir.Value:
    """Clamp indices as gather itself would, before shifting them into a shard."""
    return hlo.ClampOp(scalar(low, element_type), value, scalar(high, element_type)).result


def zero_like_index(index: ir.Value) -> ir.Value:
    """A scalar zero of the same type as a device index."""
    return hlo.ConstantOp(ir.DenseElementsAttr.get_splat(
        index.type, ir.IntegerAttr.get(index.type.element_type, 0))).result


def zeros(tensor_type: ir.Type) -> ir.Value:
    element = tensor_type.element_type
    value = (ir.FloatAttr.get(element, 0.0) if isinstance(element, ir.FloatType)
             else ir.IntegerAttr.get(element, 0))
    return hlo.ConstantOp(ir.DenseElementsAttr.get_splat(tensor_type, value)).result


def zero_literal(element_type: ir.Type) -> str:
    """A zero literal of `element_type` for a dense attribute."""
    if isinstance(element_type, ir.IntegerType):
        return "false" if element_type.width == 1 else "0"
    if isinstance(element_type, ir.ComplexType):
        return "(0.0, 0.0)"
    return "0.0"


def call_target(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["call_target_name"]).value


def is_private(func: ir.Operation) -> bool:
    return ("sym_visibility" in func.attributes
            and ir.StringAttr(func.attributes["sym_visibility"]).value == "private")
