"""The driver: one walk over the global program, emitting the per-device one.

`Partitioner` walks the public function once, in order, and keeps for every
global value its per-device value (`local`) and the sharding that per-device
value has (`shardings`).  For each op it

1. asks the op's strategy (`strategy.STRATEGIES`, keyed by op name like the
   op-rule table; the rule-driven default, else the replicated one) for a
   `Plan`: operand layouts in, result layouts out;
2. reports, at the op, every sharded dimension the plan gathers whole
   (`report_gathered`, the one place that warning is made);
3. reshards each operand to its planned layout (`to`, planned by
   `reshard.plan`, emitted by `collectives.Emitter`);
4. lets the strategy emit the per-device op (`emit_local`);
5. settles each result to the sharding propagation chose (`settle`): this
   is where the all-reduce or reduce-scatter of a partial result is
   emitted, and where a partial that could not be kept is dropped.

A value moved to a layout once is not moved there again where that move
dominates the reader (`to` keeps the moves by per-device value and layout,
as XLA's partitioner keeps its reshard cache).  A value of a cheap op (a
slice, a concatenation, a broadcast, a constant) is made again in another
layout (`rebuilt`) rather than moved there where that moves fewer bytes: a
value made from constants then moves nothing, as XLA's constant folding
would leave nothing to move.  What that leaves unused is erased at the end
(`erase_unused`).

Regions are walked by the same driver (`create`), with block-argument and
yield shardings the op's strategy gives; the frame around the per-device
program is `skeleton.ShardMapSkeleton`.  Per-run state (the per-device
functions outlined for calls) lives on the instance.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from jaxlib.mlir import ir

from stablehlo_spmd import diagnostics
from stablehlo_spmd.collectives import Emitter
from stablehlo_spmd.errors import ShardingError, SpmdError
from stablehlo_spmd.hlo_sharding import HloSharding
from stablehlo_spmd.ir import source_position
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.module_shardings import (
    FACTOR_AXES, MESH_ATTR, MHLO_SHARDING, NUM_PARTITIONS, ShardedValue, function_values,
    functions, is_manual_boundary, read_hlo)
from stablehlo_spmd.op_rules import REMADE_NOT_MOVED
from stablehlo_spmd.partitioning.context import (
    EFFECTFUL, PartitionContext, RegionShardings, erase_unused)
from stablehlo_spmd.partitioning.skeleton import skeleton as make_skeleton
from stablehlo_spmd.partitioning.strategy import (
    ON_OWNER, REPLICATED, RULE_DRIVEN, STRATEGIES, Plan, reshard_bytes)
from stablehlo_spmd.reshard import order_pairs, plan as plan_reshard, plan_cost
from stablehlo_spmd.shapes import element_bytes, local_type, shape_of, tensor_bytes
from stablehlo_spmd.sharding import Sharding
from stablehlo_spmd.tile_axes import tile_dim_axes


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
        self.shardings: dict[ir.Value, Sharding] = {}
        self.callees = {ir.StringAttr(f.attributes["sym_name"]).value: f
                        for f in functions(module)}
        # (callee, argument shardings, result shardings) -> per-device function.
        self.outlined: dict[tuple, str] = {}
        self._result_shardings: dict[tuple, tuple[Sharding, ...]] = {}
        self.rule_plans: dict[tuple, tuple] = {}  # see strategy._cheapest_rule_plan
        self._from_constants: dict[ir.Value, str | None] = {}
        # (per-device value, layout, global type) -> [(moved value, the block
        # it was moved in)].  The global type is part of the key: two values
        # can share a per-device form (x[0:3] split in two is x's own shards
        # where x has 4 elements) and still differ once made whole.
        self._reshards: dict[tuple, list[tuple[ir.Value, ir.Block]]] = {}
        # value -> [(per-device form, its layout, the block it was made in)]:
        # the forms an op produced before its results were settled to their
        # sharding (an op that read a dim whole and kept its own part of it
        # still holds the whole result), so a reader wanting more of the
        # value can start from there.
        self._earlier_forms: dict[ir.Value, list[tuple[ir.Value, Sharding, ir.Block]]] = {}
        # (op, result shardings) while `rebuilt` plans an op at a layout of its choosing.
        self._rebuilding: tuple[ir.Operation, tuple[Sharding, ...]] | None = None
        # Strategies see the driver as this narrow protocol (context.py).
        assert isinstance(self, PartitionContext)

    # -------------------------------------------------------------- driver

    def run(self) -> None:
        values = list(function_values(self.func))
        arg_shardings = [self.declared(v) for v in values if v.kind == "argument"]
        result_shardings = [self.declared(v) for v in values if v.kind == "result"]
        if any(s is None for s in arg_shardings + result_shardings):
            return
        # Boundary values in a device order of their own: the frame keeps
        # their order, the body works in the mesh's and permutes at the edge.
        own_orders = [self._own_order(v) for v in values]
        arg_orders = own_orders[:len(arg_shardings)]
        result_orders = own_orders[len(arg_shardings):]
        replaced = [op.operation for op in self.module.regions[0].blocks[0].operations
                    if op.operation.name in ("func.func", "sdy.mesh")]
        skeleton = make_skeleton(self.module, self.mesh, self.func, arg_shardings,
                                 result_shardings, own_orders)
        entry = self.func.regions[0].blocks[0]
        operations = list(entry.operations)
        terminator = operations[-1].operation
        with ir.InsertionPoint(skeleton.body):
            for old, new, sharding, own in zip(entry.arguments, skeleton.local_arguments,
                                               arg_shardings, arg_orders):
                if own is not None:
                    with old.location:
                        new = self._permuted(new, order_pairs(own, sharding))
                self.bind(old, new, sharding)
            for op in operations[:-1]:
                self.emit(op.operation)
            with terminator.location:
                returned = [self.to(v, s) for v, s in zip(terminator.operands, result_shardings)]
                returned = [value if own is None else self._permuted(
                    value, [(b, a) for a, b in order_pairs(own, sharding)])
                    for value, sharding, own in zip(returned, result_shardings, result_orders)]
        skeleton.finish(returned)
        cancel_inverse_permutes(skeleton.body, self.mesh.size)
        erase_unused(skeleton.body)
        # A function an op names in `called_computations` (a sort or top-k
        # comparator on scalars, say) is not called per device: it stays as
        # it is, unless a call site re-created it under its name.
        referenced = _called_computations(self.module) - set(self.outlined.values())
        for op in replaced:
            if op.name == "func.func" and op is not self.func and \
                    ir.StringAttr(op.attributes["sym_name"]).value in referenced:
                continue
            op.erase()
        attributes = self.module.attributes
        i32 = ir.IntegerType.get_signless(32, self.context)
        attributes[NUM_PARTITIONS] = ir.IntegerAttr.get(i32, self.mesh.size)
        attributes["mhlo.num_replicas"] = ir.IntegerAttr.get(i32, 1)
        if MESH_ATTR in attributes:
            del attributes[MESH_ATTR]

    def emit(self, op: ir.Operation) -> None:
        """Emit `op`'s per-device form (see the module docstring)."""
        with op.location:
            try:
                strategy, plan = self.choose(op)
                self.report_gathered(op, plan)
                results = strategy.emit_local(self, op, plan, self.operands_in(op, plan.required))
                for old, new, produced, wanted in zip(op.results, results, plan.produced,
                                                      plan.wanted):
                    self.bind(old, new, produced)
                    if produced is not None and wanted is not None:
                        self.settle(old, wanted)
            except SpmdError as error:
                if error.location is None:  # the innermost op it arose at says where
                    error.location = source_position(op.location)
                raise

    def choose(self, op: ir.Operation):
        """`op`'s strategy and its plan: on its results' one owner device
        where they have one (ops whose own strategy knows better aside), else
        the op's own, else the rule-driven default, else the replicated one."""
        if op.name not in _OWNS_ITS_PLACEMENT:
            plan = ON_OWNER.plan(self, op)
            if plan is not None:
                return ON_OWNER, plan
        strategy = STRATEGIES.get(op.name)
        plan = strategy.plan(self, op) if strategy is not None else None
        if plan is None:
            strategy = RULE_DRIVEN
            plan = strategy.plan(self, op)
            if plan is None:
                strategy, plan = REPLICATED, REPLICATED.plan(self, op)
        return strategy, self._in_manual_region(op, plan)

    def _in_manual_region(self, op: ir.Operation, plan: Plan) -> Plan:
        """`plan` for an op inside a manual region: strategies plan over the
        free axes only, and every layout of the op keeps the region's manual
        axes (the axes its results are manual on, else its operands).  An
        operand from outside the region is then read whole over them
        (`reshard.plan`).  The boundary ops themselves plan their own."""
        if is_manual_boundary(op):
            return plan
        manual = next((s.manual for s in plan.wanted if s is not None and s.manual), ())
        if not manual:
            manual = next((s.manual for s in map(self.shardings.get, op.operands)
                           if s is not None and s.manual), ())
        if not manual:
            return plan

        def lifted(layouts):
            return [s.in_manual(manual) if s is not None else None for s in layouts]

        return dataclasses.replace(plan, wanted=lifted(plan.wanted),
                                   required=lifted(plan.required), produced=lifted(plan.produced))

    def operands_in(self, op: ir.Operation, layouts) -> list[ir.Value]:
        """`op`'s per-device operands in `layouts` (None: as they are); an
        operand read twice in one layout is moved once."""
        moved: dict[tuple, ir.Value] = {}
        operands = []
        for value, layout in zip(op.operands, layouts):
            if layout is None:
                operands.append(self.local[value])
                continue
            if (value, layout) not in moved:
                moved[value, layout] = self.to(value, layout)
            operands.append(moved[value, layout])
        return operands

    def _own_order(self, value) -> HloSharding | None:
        """`value`'s sharding where it lists its devices in an order the
        mesh's axes cannot express (`tile_axes.block_axes`), else None."""
        hlo = read_hlo(value)
        if hlo is None or hlo.kind != "tiled" or tile_dim_axes(hlo, self.mesh) is not None:
            return None
        return hlo

    def _permuted(self, local: ir.Value, pairs: list[tuple[int, int]]) -> ir.Value:
        if all(a == b for a, b in pairs):
            return local
        return self.emitter.collective_permute(local, pairs)

    def declared(self, value) -> Sharding | None:
        """The sharding a function's argument or result is declared with
        (read in the mesh's device order: see `run` for the boundary)."""
        try:
            hlo = read_hlo(value)
            if hlo is None or hlo.kind == "unknown":
                return Sharding.replicated(self.mesh, value.rank or 0)
            sharding = Sharding.from_hlo(hlo, self.mesh, value.rank or 0, any_order=True)
        except ShardingError as error:
            diagnostics.error(error.location or value.location, error.message)
            return None
        if sharding.unreduced:  # a function boundary carries full values
            sharding = sharding.reduced()
        if sharding.is_maximal:
            # A value on one device crosses the boundary whole on every
            # device (the same global value; the frame's mesh has no
            # single-device form), and is handed to its owner inside.
            sharding = Sharding.replicated(self.mesh, value.rank or 0)
        return sharding

    def bind(self, old: ir.Value, new: ir.Value, sharding: Sharding | None) -> None:
        """`new` is `old`'s per-device value, laid out as `sharding` (None:
        not a tensor, e.g. a token, which has no layout)."""
        self.local[old] = new
        if sharding is not None:
            self.shardings[old] = sharding

    def result_shardings(self, op: ir.Operation) -> list[Sharding]:
        """The shardings propagation gave `op`'s results (replicated where none).

        A sharding that does not parse or fit is the user's error: reported at
        the op, and the op carries on replicated so the rest is still checked.
        """
        if self._rebuilding is not None and self._rebuilding[0] == op:
            return list(self._rebuilding[1])
        shapes = tuple(shape_of(r) or () for r in op.results)
        attributes = op.attributes
        if MHLO_SHARDING not in attributes:
            return [Sharding.replicated(self.mesh, len(s)) for s in shapes]
        # A 13k-op step has a few hundred distinct (sharding, shapes) pairs.
        key = (ir.StringAttr(attributes[MHLO_SHARDING]).value, shapes)
        known = self._result_shardings.get(key)
        if known is not None:
            return list(known)
        replicated = [Sharding.replicated(self.mesh, len(s)) for s in shapes]
        try:
            parsed = read_hlo(ShardedValue("op", op, 0, None, op.location, op.results[0].type))
            elements = parsed.elements if parsed.kind == "tuple" else (parsed,) * len(shapes)
            found = [fallback if element.kind == "unknown"
                     else Sharding.from_hlo(element, self.mesh, len(shape), any_order=True)
                     for element, shape, fallback in zip(elements, shapes, replicated)]
        except ShardingError as error:
            diagnostics.error(error.location or op.location, f"op '{op.name}': {error.message}")
            return replicated
        self._result_shardings[key] = tuple(found)
        return found

    def settle(self, value: ir.Value, target: Sharding) -> None:
        """Give `value` the sharding propagation chose, where that is possible.

        When the op could not leave the partial propagation planned (an
        uneven reduction was gathered, an op ran replicated), its full value
        serves every consumer the same: the partial axes are dropped.
        """
        source = self.shardings[value]
        if not set(target.unreduced) <= set(source.unreduced):
            target = target.reduced()
        if source != target:
            self._earlier_forms.setdefault(value, []).append(
                (self.local[value], source, ir.InsertionPoint.current.block))
            self.bind(value, self.to(value, target, rebuild=False), target)

    def to(self, value: ir.Value, target: Sharding, rebuild: bool = True) -> ir.Value:
        """`value`'s per-device form, resharded to `target`: a form made
        earlier that dominates here (XLA's partitioner keeps such a reshard
        cache), else the value's op made again in `target`'s layout where
        that moves fewer bytes (`rebuilt`), else collectives."""
        source = self.shardings.get(value)
        local = self.local[value]
        if source is None or source == target or not shape_of(value):
            if source is not None and source != target and not shape_of(value):
                return self.emitter.reshard(local, source, target, ())
            return local
        key = (local, target, value.type)
        here = ir.InsertionPoint.current.block
        for earlier, block in self._reshards.get(key, ()):
            if _encloses(block, here):
                return earlier
        steps = self._reshard_steps(value, source, target)
        moved = plan_cost(steps)
        for form, layout, block in self._earlier_forms.get(value, ()):
            if moved > 0 and _encloses(block, here):
                try:
                    from_form = self._reshard_steps(value, layout, target)
                except ShardingError:
                    continue
                cost = plan_cost(from_form)
                if cost < moved:
                    local, source, steps, moved = form, layout, from_form, cost
        remade = self._rebuild_plan(value, target, _REBUILD_DEPTH) \
            if rebuild and moved > 0 else None
        if remade is not None and remade[2] < moved:
            result = self.rebuilt(value, target, remade)
        else:
            if any(step.replicates_fully for step in steps):
                # XLA's "involuntary full rematerialization", but with a location.
                diagnostics.warning(ir.Location.current, f"resharding {value.type} from "
                                    f"{source} to {target} goes through a fully replicated copy")
            result = self.emitter.reshard(local, source, target, shape_of(value), steps=steps)
        self._reshards.setdefault(key, []).append((result, here))
        return result

    def move_bytes(self, value: ir.Value, target: Sharding) -> float:
        """What `to(value, target)` will move: the planner's bytes, or what
        making `value` again in `target`'s layout moves where it is made
        from constants alone (nothing, as a rule).  Strategies price their
        operands' moves with it, so a plan that reads a constant in a new
        layout is not charged a collective it will never emit."""
        source = self.shardings.get(value)
        if source is None or source == target or not shape_of(value):
            return 0.0
        moved = reshard_bytes(source, target, value)
        # Only values made from constants alone: their remake is free
        # whatever surrounds them, so a plan priced with it may serve every
        # op of the same signature (`strategy._cheapest_rule_plan` caches
        # plans across a model's layers).  Not while planning a remake
        # itself: `_rebuild_plan` prices its own operands.
        if moved and self._rebuilding is None and self.made_from_constants(value):
            remade = self._rebuild_plan(value, target, _REBUILD_DEPTH)
            if remade is not None:
                moved = min(moved, remade[2])
        return moved

    def made_from_constants(self, value: ir.Value) -> str | None:
        """The op that makes `value` where it is made from constants alone
        by cheap ops (a constant, an iota, a broadcast or reshape of one, a
        few ops deep), else None."""
        known = self._from_constants.get(value, False)
        if known is not False:
            return known
        found = self._from_constants[value] = self._made_from_constants(value, _REBUILD_DEPTH)
        return found

    def _made_from_constants(self, value: ir.Value, depth: int) -> str | None:
        owner = value.owner
        if depth <= 0 or not isinstance(owner, ir.OpView | ir.Operation):
            return None
        op = owner.operation
        if op.name not in REMADE_NOT_MOVED:
            return None
        if all(self._made_from_constants(operand, depth - 1) for operand in op.operands):
            return op.name
        return None

    def _reshard_steps(self, value: ir.Value, source: Sharding, target: Sharding):
        return plan_reshard(source, target, shape_of(value),
                            element_bytes(ir.RankedTensorType(value.type).element_type),
                            self.warn_bytes)

    # ------------------------------------------------------ rematerializing

    def _rebuild_plan(self, value: ir.Value, target: Sharding, depth: int):
        """(strategy, plan, bytes): the cheapest way to make `value`'s op
        again with its result in `target`'s layout, and the bytes that moves.
        The plan is a `Strategy.local` one: it moves nothing itself, only its
        operands, each to the layout it needs, or made again that way in turn
        (at most `depth` ops deep).  The op's own strategy is tried with
        `target` as its result sharding, then, for a small value, running it
        whole.  None where no such plan exists.

        XLA constant-folds what is made from constants alone and so never
        moves it; an iota or a broadcast splat is as cheap to make in any
        layout; and a concatenation of two copies of a split vector is
        cheaper to make whole from the vector gathered than to gather.
        """
        if depth <= 0 or target.unreduced or not isinstance(value.owner, ir.OpView | ir.Operation):
            return None  # a block argument's owner is its block
        op = value.owner.operation
        if op.name not in REMADE_NOT_MOVED or len(op.results) != 1:
            return None
        before, self._rebuilding = self._rebuilding, (op, (target,))
        try:
            candidates = [self.choose(op)]
        finally:
            self._rebuilding = before
        if tensor_bytes(value.type) <= _MAKE_WHOLE_BYTES:
            candidates.append((REPLICATED, REPLICATED.plan(self, op)))
        best = None
        for strategy, plan in candidates:
            cost = self._making_cost(value, target, plan, depth) if strategy.local else None
            if cost is not None and (best is None or cost < best[2]):
                best = (strategy, plan, cost)
        return best

    def _making_cost(self, value: ir.Value, target: Sharding, plan: Plan,
                     depth: int) -> float | None:
        """Bytes `plan` moves to make `value` in `target`'s layout: its
        operands' moves (or their making), and its result's, which must be
        free (a local slice); None where the result would move."""
        produced = plan.produced[0]
        if produced is None or produced.unreduced or reshard_bytes(produced, target, value):
            return None
        total, seen = 0.0, set()
        for operand, layout in zip(value.owner.operands, plan.required):
            current = self.shardings.get(operand)
            if layout is None or current is None or not shape_of(operand) or current == layout \
                    or (operand, layout) in seen:  # one move serves a value read twice
                continue
            seen.add((operand, layout))
            moved = reshard_bytes(current, layout, operand)
            if moved:
                remade = self._rebuild_plan(operand, layout, depth - 1)
                moved = min(moved, remade[2]) if remade is not None else moved
            total += moved
        return total

    def rebuilt(self, value: ir.Value, target: Sharding, remade) -> ir.Value:
        """`value` made again, here, in `target`'s layout (`_rebuild_plan`)."""
        op = value.owner.operation
        strategy, plan, _ = remade
        with op.location:
            local = strategy.emit_local(self, op, plan, self.operands_in(op, plan.required))[0]
        produced = plan.produced[0]
        if produced == target:
            return local
        return self.emitter.reshard(local, produced, target, shape_of(value),
                                    steps=self._reshard_steps(value, produced, target))

    # ------------------------------------------------------------ helpers

    def _replicated_like(self, value: ir.Value) -> Sharding:
        """Replicated, within the manual region `value` is in (if any)."""
        replicated = Sharding.replicated(self.mesh, len(shape_of(value) or ()))
        current = self.shardings.get(value)
        return replicated.in_manual(current.manual) if current is not None else replicated

    def report_gathered(self, op: ir.Operation, plan: Plan) -> None:
        """Warn, at the op, where its plan gathers a sharded operand dimension
        and that moves at least `warn_bytes`: the user asked for it split.

        Every strategy's plan comes through here, so a dimension is never
        gathered silently: a replicated plan is reported for any sharded
        operand; a rule-based one for the dims of factors it keeps whole
        (`Plan.gathered`).
        """
        for index, (operand, layout) in enumerate(zip(op.operands, plan.required)):
            source = self.shardings.get(operand)
            if layout is None or source is None or source == layout:
                continue
            if plan.replicates:
                size = tensor_bytes(operand.type)
                if size and size >= self.warn_bytes:
                    diagnostics.warning(op.location, f"'{op.name}' has no partitioned form: its "
                                        f"operand {operand.type} ({size} bytes, sharded {source}) "
                                        "is gathered in full")
                continue
            if plan.rule is None or not plan.gathered:
                continue
            for dim, factors in enumerate(plan.rule.operands[index]):
                lost = [a for a in source.dim_axes[dim] if a not in layout.dim_axes[dim]]
                if not lost or not plan.gathered.intersection(factors):
                    continue
                size = tensor_bytes(operand.type) / self.mesh.axes_size(
                    [a for axes in layout.dim_axes for a in axes])
                if size >= self.warn_bytes:
                    diagnostics.warning(ir.Location.current,
                                        f"'{op.name}' needs dimension {dim} of its operand "
                                        f"{operand.type} whole: gathering it over "
                                        f"{', '.join(lost)} ({int(size)} bytes per device)")

    def create(self, op: ir.Operation, operands: Sequence[ir.Value], result_types,
               regions: Sequence[RegionShardings] | None = None) -> ir.Operation:
        """`op` again on per-device operands and types, its attributes kept
        and its regions emitted per device.  `regions` gives each region's
        block-argument and yield shardings (default: replicated, as the
        scalar bodies of reduce, sort and scatter are)."""
        attributes = {n: op.attributes[n] for n in op.attributes
                      if n != MHLO_SHARDING and n != FACTOR_AXES}
        new_op = ir.Operation.create(op.name, results=list(result_types), operands=list(operands),
                                     attributes=attributes, regions=len(op.regions))
        for index, (old_region, new_region) in enumerate(zip(op.regions, new_op.regions)):
            arguments, yields = regions[index] if regions is not None else (None, None)
            self._emit_region(old_region, new_region, arguments, yields)
        return new_op

    def _emit_region(self, old_region, new_region, arguments, yields) -> None:
        for old_block in old_region.blocks:
            shardings = list(arguments) if arguments is not None else [
                Sharding.replicated(self.mesh, len(shape_of(a) or ())) for a in old_block.arguments]
            new_block = new_region.blocks.append(
                *[local_type(a.type, s) for a, s in zip(old_block.arguments, shardings)])
            for old, new, sharding in zip(old_block.arguments, new_block.arguments, shardings):
                self.bind(old, new, sharding)
            with ir.InsertionPoint(new_block):
                operations = list(old_block.operations)
                for inner in operations[:-1]:
                    self.emit(inner.operation)
                terminator = operations[-1].operation
                with terminator.location:
                    targets = list(yields) if yields is not None else [
                        self._replicated_like(v) for v in terminator.operands]
                    ir.Operation.create(terminator.name, operands=[
                        self.to(v, s) if shape_of(v) is not None else self.local[v]
                        for v, s in zip(terminator.operands, targets)])


# Ops whose own strategy places them even on one device: constraints move
# their operand, control flow ties its regions, constants are made in place.
_OWNS_ITS_PLACEMENT = frozenset({
    "stablehlo.custom_call", "stablehlo.while", "stablehlo.if", "stablehlo.case", "func.call",
    "stablehlo.optimization_barrier", "stablehlo.constant", "stablehlo.iota",
})

_REBUILD_DEPTH = 4
# A value made again may be made whole on every device first (a slice of a
# constant, say), where it is no larger than this: a small temporary, never
# a table's worth of memory.
_MAKE_WHOLE_BYTES = 1 << 20


def _encloses(outer: ir.Block, inner: ir.Block) -> bool:
    """Whether `inner` is `outer` or a block nested in it (what is defined in
    `outer` before the insertion point dominates what `inner` will hold)."""
    block = inner
    while True:
        if block == outer:
            return True
        owner = block.owner
        if owner is None or owner.operation.name in ("func.func", "builtin.module"):
            return False
        block = owner.operation.block


# Ops that are not one device's work on its own block alone (effects, a
# device's identity, partners): moving blocks between devices before them
# is not the same as after them.
_NOT_PER_BLOCK = EFFECTFUL | frozenset({
    "stablehlo.partition_id", "stablehlo.replica_id", "stablehlo.rng",
    "stablehlo.rng_bit_generator", "stablehlo.all_reduce", "stablehlo.all_gather",
    "stablehlo.all_to_all", "stablehlo.reduce_scatter", "stablehlo.collective_permute",
    "stablehlo.collective_broadcast",
})


def cancel_inverse_permutes(block: ir.Block, devices: int) -> None:
    """Drop a collective_permute and the one that undoes it, where only ops
    that work on each device's block alone lie between them (a chain of
    single-use, one-operand ops).  A value in a device order of its own is
    permuted into the mesh's order at the boundary and back at the end; an
    op that is local either way (a reverse, say) then needs neither.  Only
    permutes that every one of the `devices` receives from cancel: a device
    no pair reaches gets zeros, which the two together would not give."""
    for op in list(block.operations):
        op = op.operation
        if op.name != "stablehlo.collective_permute":
            continue
        chain, value = [], op.operands[0]
        while True:
            if not isinstance(value.owner, ir.OpView | ir.Operation):
                first = None  # a block argument: no permute to cancel
                break
            first = value.owner.operation
            if first.name == "stablehlo.collective_permute":
                break
            if len(first.operands) != 1 or len(first.results) != 1 or len(first.regions) \
                    or first.name in _NOT_PER_BLOCK or _uses(first.results[0]) != 1:
                first = None
                break
            chain.append(first)
            value = first.operands[0]
        if first is None or _uses(first.results[0]) != 1:
            continue
        sent = _pairs(first)
        back = dict(_pairs(op))
        if len({target for _, target in sent}) != devices or len(back) != devices or \
                any(back.get(target) != source for source, target in sent):
            continue
        # The chain now reads the first permute's operand, and the second
        # permute's readers read the chain.
        (chain[-1] if chain else op).operands[0] = first.operands[0]
        op.results[0].replace_all_uses_with(chain[0].results[0] if chain else first.operands[0])
        op.erase()
        first.erase()


def _pairs(permute: ir.Operation) -> list[tuple[int, int]]:
    flat = list(ir.DenseIntElementsAttr(permute.attributes["source_target_pairs"]))
    return list(zip(flat[0::2], flat[1::2]))


def _uses(value: ir.Value) -> int:
    return sum(1 for _ in value.uses)


def _called_computations(module: ir.Operation) -> set[str]:
    """The symbols ops of `module` name in their ``called_computations``."""
    found: set[str] = set()

    def visit(op):
        if "called_computations" in op.attributes:
            for ref in ir.ArrayAttr(op.attributes["called_computations"]):
                found.add(ir.FlatSymbolRefAttr(ref).value)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return found
