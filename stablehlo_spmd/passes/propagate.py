"""``spmd-propagate``: complete the shardings of every value in a module.

The pass reads the module once into the solver's graph (`propagation.py`):
one node per op with its `OpRule`, one identity node per pair of tied values
(while carries, call arguments, branch results, function results), and the
user's shardings pinned: function arguments and results, ``custom_call
@Sharding`` constraints, and any op that already carries ``mhlo.sharding``.
After solving it writes ``mhlo.sharding`` on every op with tensor results and
on every function argument and result, and inserts a marked reshard
(``custom_call @Sharding`` to the summed value) wherever a partial value
meets a consumer that needs it whole: this is where the partitioner will put
the all-reduce or reduce-scatter, and nowhere earlier.

Options:
  engine   "spmd" (this solver) or "shardy" (jaxlib's sdy-propagation-pipeline,
           converted back to mhlo.sharding; see `shardy_engine.py`)
  explain  emit a remark per value: its sharding and the chain it came through
  origins  also write that chain as a ``spmd.origin`` string attribute
  completion
           "whole-program" (the default): the greedy pass, then its contested
           choices settled by the whole program's cost (`settle_contests`),
           kept only where, partitioned, it moves no more bytes than the
           greedy answer (`_fewer_bytes_moved`);
           "local": the greedy pass alone, GSPMD's and Shardy's answer

An op with no rule runs on whole values, with a warning at its location;
its results are still free for their users to shard, as in Shardy.

Two things Shardy does at function boundaries happen here too.  Each call
site shards its own copy of its callee, and copies that come out the same
merge back afterwards (`call_graph`).  An entry point's argument or result
is split only by what divides it evenly (`ModuleGraph._at_boundary`):
that is what a JAX user can pass and get back; the ops inside keep their
uneven splits.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, NamedTuple, Sequence

from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import stablehlo

from stablehlo_spmd import call_graph, diagnostics, op_rules
from stablehlo_spmd.auto_sharding import Graph as SearchGraph, Search, SearchTimeLimit
from stablehlo_spmd.collective_bytes import module_collectives, total_bytes
from stablehlo_spmd.errors import ShardingError, SpmdError
from stablehlo_spmd.hlo_sharding import HloSharding
from stablehlo_spmd.ir import source_position
from stablehlo_spmd.loops import trip_count
from stablehlo_spmd.mesh import Mesh, parse_sub_axis, split_axes
from stablehlo_spmd.module_shardings import (
    MHLO_SHARDING, OPEN_DIMS, PRIORITIES, SHARDING_TARGET, ShardedValue, checked_mesh,
    checking_once, export_propagation_controls, function_values, functions, import_shardy,
    is_manual_boundary, is_entry, is_sharding_constraint, read_hlo, read_open_dims,
    read_priorities, set_attrs, sharding_attr, untuple_custom_calls, write_mesh)
from stablehlo_spmd.op_rules import FactorKind, RuleBuilder, UnreducedFlow
from stablehlo_spmd.op_graph import NO_VALUE, Node
from stablehlo_spmd.passes import ModulePass, register_pass
from stablehlo_spmd.passes.partition import CLEANUP_PASSES, PartitionPass
from stablehlo_spmd.propagation import Propagator
from stablehlo_spmd.shapes import element_bytes, tensor_bytes
from stablehlo_spmd.sharding import Sharding

class _Pin(NamedTuple):
    """A user's sharding of one value, with what XLA's text of it cannot say."""

    value: int
    sharding: Sharding
    annotation: str                          # where it comes from, for --explain
    priorities: dict[int, int] | None = None  # dim -> Shardy priority
    replicated: tuple[str, ...] = ()         # axes its open dims may not take


# What a module that names no mesh runs on.
ONE_DEVICE = Mesh((0,), (1,), ("one",))

_NO_RULE_NEEDED = {"func.func", "func.return", "stablehlo.return", "builtin.module", "sdy.mesh"}


@register_pass
@dataclasses.dataclass(frozen=True)
class PropagatePass(ModulePass):
    name: ClassVar[str] = "spmd-propagate"
    description: ClassVar[str] = "give every value a sharding (GSPMD sharding completion)"

    engine: str = "spmd"
    explain: bool = False
    origins: bool = False
    completion: str = "whole-program"

    def run(self, module: ir.Operation) -> None:
        if self.engine not in ("spmd", "shardy"):
            diagnostics.error(module.location, f"unknown propagation engine '{self.engine}' "
                              "(expected 'spmd' or 'shardy')")
            return
        if self.completion not in COMPLETIONS:
            diagnostics.error(module.location, f"unknown completion '{self.completion}' "
                              "(expected 'whole-program' or 'local')")
            return
        try:
            import_shardy(module, lower_manual=self.engine == "spmd")
        except ShardingError as error:
            diagnostics.error(error.location or module.location, error.message)
            return
        untuple_custom_calls(module)
        try:
            mesh = checked_mesh(module)
        except ShardingError as error:
            diagnostics.error(error.location or module.location, error.message)
            return
        if mesh is None:
            # Nothing says how to split anything: the module runs on one
            # device, and every value still gets its (replicated) sharding,
            # so later passes see a propagated module.  Said, since it is
            # usually a forgotten spmd-annotate.
            diagnostics.warning(module.location, "spmd-propagate found no mesh and no "
                                "shardings: every value is replicated on one device (run "
                                "spmd-annotate first, or give the module mhlo.sharding "
                                "annotations)")
            mesh = ONE_DEVICE
        if self.engine == "shardy":
            from stablehlo_spmd.passes.shardy_engine import run_shardy_propagation
            run_shardy_propagation(module, mesh)
            return
        if self.completion == "local":
            _complete(module, mesh, False, self.explain, self.origins)
            return
        greedy = module.clone().operation
        said = diagnostics.DiagnosticEngine()
        try:
            with diagnostics.collecting(said):
                settled = _complete(module, mesh, True, self.explain, self.origins)
            if settled is not None and not said.errors:
                said = _fewer_bytes_moved(module, greedy, mesh, settled, said, self.explain,
                                          self.origins)
        finally:
            greedy.erase()
            diagnostics.current().diagnostics.extend(said.diagnostics)


def _complete(module: ir.Operation, mesh: Mesh, settle: bool, explain: bool,
              origins: bool) -> float | None:
    """Propagate through `module` and write every sharding; with `settle`, the
    greedy pass's contests settled by the whole program's cost.  Returns
    `settle_contests`' price of what it settled, None where it changed nothing."""
    flat = call_graph.flatten(module)
    graph = ModuleGraph.build(module, mesh)
    if graph is None:
        return None
    graph.solver.run()
    settled = settle_contests(graph) if settle else None
    graph.write(module, mesh, explain, origins)
    call_graph.merge(flat)
    return settled


def _fewer_bytes_moved(settled: ir.Operation, greedy: ir.Operation, mesh: Mesh,
                       price: float, said: diagnostics.DiagnosticEngine, explain: bool,
                       origins: bool) -> diagnostics.DiagnosticEngine:
    """Keep in `settled` whichever completion moves fewer bytes once
    partitioned: its own (the search priced it at `price`), or the greedy
    pass's alone, run on `greedy` (the module as it was before either).
    Returns the diagnostics of the one kept.

    The search prices moves as the reshard planner would make them, one
    value at a time; the partitioner also reuses a gathered value, sums a
    Partial value once for all its readers and picks each op's cheapest
    way around its operands, so its bytes may fall below the search's
    price on either answer, and further on the greedy one.  Where the two
    disagree, the partitioned program is what the user runs: both are
    partitioned and counted, and the settled answer stands only where it
    moves no more.  (keras-hub GPT-2's FSDP training step at toy widths:
    settled 1.06 MiB, greedy 0.91 MiB as emitted, where the search priced
    the greedy answer above the settled one.)

    Where the greedy answer moves more than `SETTLED_PRICE_SLACK` times the
    search's price of the settled one, the settled one is kept without
    partitioning it too: that price has not fallen more than a few percent
    below what a plan emits (2% at real widths, `benchmarks/auto_scale.py`;
    above it by 2-50% on benchmarks/real_models.py's settled programs), and
    partitioning takes a third of the pipeline's time (Llama-3-8B's 2-D
    step at full depth: 2.8 s of 17 s with both partitioned)."""
    said_greedy = diagnostics.DiagnosticEngine()
    with diagnostics.collecting(said_greedy):
        _complete(greedy, mesh, False, explain, origins)
    if said_greedy.errors:
        return said
    greedy_bytes = _bytes_moved(greedy, mesh)
    if greedy_bytes > SETTLED_PRICE_SLACK * price:
        return said
    settled_bytes = _bytes_moved(settled, mesh)
    if greedy_bytes >= settled_bytes:
        return said
    _take_contents(settled, greedy)
    if explain:
        said_greedy.emit("remark", settled.location,
                         f"the greedy completion is kept: partitioned, it moves "
                         f"{greedy_bytes:,.0f} bytes per device where the whole program's "
                         f"settling moves {settled_bytes:,.0f}")
    return said_greedy


def _bytes_moved(module: ir.Operation, mesh: Mesh) -> float:
    """What `module`, propagated, moves per device once ``spmd-partition``
    and the cleanup `ss.partition` runs after it have run on a copy of it, as
    `collective_bytes` counts it; infinite where it does not partition."""
    trial = module.clone().operation
    try:
        # Checked afresh, and forgotten: the copy is erased once counted.
        with diagnostics.collecting() as said, checking_once():
            PartitionPass().run(trial)
        if said.errors:
            return math.inf
        passmanager.PassManager.parse(f"builtin.module({','.join(CLEANUP_PASSES)})",
                                      module.context).run(trial)
        return total_bytes(module_collectives(trial, mesh.size))
    except SpmdError:
        return math.inf
    finally:
        trial.erase()


def _take_contents(module: ir.Operation, source: ir.Operation) -> None:
    """Replace `module`'s ops and attributes with `source`'s (moved, not copied)."""
    body = module.regions[0].blocks[0]
    for op in list(body.operations):
        op.erase()
    for op in list(source.regions[0].blocks[0].operations):
        body.append(op)
    given = {source.attributes[i].name: source.attributes[i].attr
             for i in range(len(source.attributes))}
    for name in [module.attributes[i].name for i in range(len(module.attributes))]:
        if name not in given:
            del module.attributes[name]
    for name, attribute in given.items():
        module.attributes[name] = attribute


COMPLETIONS = ("whole-program", "local")
# How long the search may take to settle the contests; past it the greedy
# answer stands (with a warning).
SETTLE_SECONDS = 30.0
# How many moves the search may price to weigh the whole program: about 10 s
# on one core of this project's CI machine.  Llama-3-8B's 2-D step prices
# 0.1M on a mesh of two axes; on data x fsdp x model it would price 6M, 4 min.
SETTLE_PRICINGS = 1_000_000
SETTLE_ROUNDS = 8
# How far under the search's price a settled plan's partitioned bytes may be
# trusted to stay (`_fewer_bytes_moved`).
SETTLED_PRICE_SLACK = 1.25


def settle_contests(graph: "ModuleGraph") -> float | None:
    """Where the greedy pass contested an axis, complete by the whole program's cost.

    Where two candidates wanted one mesh axis at a node, the greedy pass
    gave it to the larger tensor: right at the node, blind to what the
    choice forces downstream (an embedding table's FSDP split of the hidden
    dim, taken over the batch split of the ids, leaves every later matmul
    moving activations instead of gathering a weight shard).  When the
    greedy answer has such a contest, the search (`auto_sharding.Search`:
    the same op-rule strategies, every move priced by the reshard planner)
    solves the whole program with the user's shardings pinned and the
    greedy answer preferred where plans tie (`auto_sharding.Graph.preferred`).

    Its plan is taken for every value whose greedy layout it could have
    chosen (`_weighed`), Partial layouts included, and the greedy pass runs
    again from those to lay out the rest.  A value whose greedy layout the
    search never priced keeps the greedy pass's say: it deals axes only to
    pass-through and reduction factors, in even splits, so a window split
    that a halo serves, or an uneven split, is not its to overrule.  Taking
    only the contested nodes' layouts was tried first: the greedy pass then
    joins them to layouts of its own with all-to-alls (keras-hub Llama's
    FSDP step at toy widths: 1.30 MB moved, against 0.86 MB for either
    answer alone).  `explain` names the search where a layout came from it.
    Returns the search's price of the plan it settled on (bytes per device),
    or None where nothing changed.
    """
    solver = graph.solver
    if graph.mesh.size == 1 or not solver.contested or graph.manual or graph.groups \
            or any(pin.priorities for pin in graph.pins):
        # Shardy's priorities and sharding groups order the propagation
        # themselves; a manual region's axes are not the search's to deal.
        return None
    search_graph = graph.search_graph()
    search_graph.preferred = {v: solver.sharding(v) for v in range(len(graph.shapes))}
    search = Search(search_graph)
    pricings = search.pricings()
    if pricings > SETTLE_PRICINGS:
        diagnostics.warning(graph.functions[graph.entry_name()].location,
                            "spmd-propagate: contested shardings keep the local choice: weighing "
                            f"the whole program would price {pricings:,} moves (more than "
                            f"{SETTLE_PRICINGS:,}); completion=local says the same without this")
        return None
    try:
        plan = search.solve(None, SETTLE_SECONDS)
    except SearchTimeLimit:
        diagnostics.warning(graph.functions[graph.entry_name()].location,
                            "spmd-propagate: the whole-program search found no plan within "
                            f"{SETTLE_SECONDS:.0f} s; contested shardings keep the local choice")
        return None
    settled: dict[int, Sharding] = {}
    # A value the plan lays out otherwise, whose greedy layout it could not
    # have chosen, keeps it; the greedy pass run again from what was taken
    # may then give it one the plan could have chosen, to take in turn.
    for _round in range(SETTLE_ROUNDS):
        taken = {}
        for value, layout in enumerate(plan.layouts):
            if layout is None or value in graph.pinned or value in settled:
                continue
            found = solver.sharding(value)
            if (found.dim_axes, found.unreduced) != (layout.dim_axes, layout.unreduced) \
                    and _weighed(search, value, found):
                taken[value] = layout
        if not taken:
            break
        settled.update(taken)
        solver = graph.solver = graph.new_solver()
        for value, layout in settled.items():
            solver.pin(value, layout, f"the whole program's cost ({plan.why[value]})")
        solver.run()
    return plan.cost if settled else None


def _weighed(search: Search, value: int, layout: Sharding) -> bool:
    """Whether the search priced `layout` for `value` among its choices.

    The search deals axes to pass-through and reduction factors only, in
    even splits; a greedy choice it cannot make (a window split that a
    halo serves, an uneven split) it never priced, so it has no say there.
    """
    found = search.value_layouts(value)
    key = (layout.dim_axes, layout.unreduced)
    return found is not None and any(
        option is not None and (option.dim_axes, option.unreduced) == key
        for option in found[1])


class ModuleGraph:
    """The solver's graph plus what is needed to write its answer back."""

    def __init__(self, mesh: Mesh):
        self.ids: dict[ir.Value, int] = {}
        self.shapes: list[tuple[int, ...]] = []
        self.element_bytes: list[int] = []  # per value, so the solver prices sums in bytes
        self._bytes_by_type: dict[ir.Type, int] = {}
        self.describe_fns: list = []
        self.nodes: list[Node] = []
        self.node_ops: list[ir.Operation | None] = []
        self.pins: list[_Pin] = []
        self.pinned: set[int] = set()   # values with a pin
        self.refined: set[int] = set()  # pinned values with open dims: written as solved
        self.from_shardy: set[int] = set()  # function values whose pin is Shardy's
        self.refined_ops: list[tuple[ir.Operation, list[int]]] = []  # the same, on ops
        # Ops with no rule, with their results' ids: written as solved.
        self.unruled: list[tuple[ir.Operation, list[int]]] = []
        self.result_slots: list[tuple[ShardedValue, int, bool]] = []  # (result, value id, annotated)
        self.return_ops: dict[int, tuple[ir.Operation, list[int]]] = {}
        self.mesh = mesh
        self.solver: Propagator | None = None
        self._attrs: dict[Sharding, ir.Attribute] = {}  # by identity-shared Sharding
        self._summed_values: dict[tuple, ir.Value] = {}  # (partial value, layout) -> its sum
        # Partial values summed once into one layout for every use that needs
        # the sum (a plan of spmd-auto-shard's), not into each use's own.
        self.sum_targets: dict[int, Sharding] = {}
        self.functions: dict[str, ir.Operation] = {}
        self.groups: dict[int, int] = {}    # sharding group id -> its first value
        self.added: set[str] = set()        # functions whose nodes are in
        self.ok = True                      # False once an annotation failed to read
        self.manual: dict[int, tuple[str, ...]] = {}  # value -> its region's manual axes
        self._boundary_cuts: dict[str, set[int]] = {}  # axis -> where a boundary cut it
        self._repeats = 1   # the trip counts of the loops around the ops being added

    # ---------------------------------------------------------------- build

    @classmethod
    def build(cls, module: ir.Operation, mesh: Mesh) -> "ModuleGraph | None":
        graph = cls(mesh)
        graph.functions = {ir.StringAttr(f.attributes["sym_name"]).value: f
                           for f in functions(module)}
        for func in graph.functions.values():
            graph._add_function(func)
        if not graph.ok:
            return None
        graph.solver = graph.new_solver()
        return graph

    def new_solver(self) -> Propagator:
        """A greedy solver over this graph with the user's shardings pinned."""
        solver = Propagator(self.mesh, self.shapes, self.nodes, self.element_bytes)
        for pin in self.pins:
            solver.pin(pin.value, pin.sharding, pin.annotation, pin.priorities, pin.replicated)
        return solver

    def entry_name(self) -> str:
        """The function whose arguments and results are the program's."""
        names = list(self.functions)
        public = [n for n, f in self.functions.items()
                  if "sym_visibility" not in f.attributes
                  or ir.StringAttr(f.attributes["sym_visibility"]).value == "public"]
        return "main" if "main" in names else (public or names)[0]

    def search_graph(self, carried: Sequence[tuple[int, int]] = ()) -> SearchGraph:
        """What the search reads: this graph, the user's shardings as hard
        constraints (open dims may still be split), the entry function's
        arguments and results, and `carried` (argument, result) pairs that
        must share a layout."""
        pins = {pin.value: pin.sharding for pin in self.pins}
        open_dims = {pin.value: pin.sharding.open_dims for pin in self.pins
                     if pin.sharding.open_dims}
        arguments, results = self.entry_values()
        return SearchGraph(self.mesh, self.shapes, self.element_bytes, self.nodes, pins,
                           open_dims, carried, [i for _, i in results],
                           [i for _, i in arguments], floating=self._floating())

    def _floating(self) -> list[bool]:
        """Per value, whether its elements are floats: one look at each type."""
        floating = [False] * len(self.shapes)
        by_type: dict[ir.Type, bool] = {}
        for value, index in self.ids.items():
            value_type = value.type
            found = by_type.get(value_type)
            if found is None:
                found = by_type[value_type] = isinstance(
                    ir.RankedTensorType(value_type).element_type, ir.FloatType)
            floating[index] = found
        return floating

    def entry_values(self) -> tuple[list, list]:
        """The entry function's (argument, value id) and (result, value id) pairs."""
        entry = self.entry_name()
        arguments, results = [], []
        for value, index, _annotated in self.result_slots:
            if index == NO_VALUE or \
                    ir.StringAttr(value.owner.attributes["sym_name"]).value != entry:
                continue
            (arguments if value.kind == "argument" else results).append((value, index))
        return arguments, results

    def _value(self, value: ir.Value, describe) -> int:
        found = self.ids.get(value)
        if found is not None:
            return found
        value_type = value.type
        if not isinstance(value_type, ir.RankedTensorType):
            return NO_VALUE
        index = len(self.shapes)
        self.ids[value] = index
        self.shapes.append(tuple(value_type.shape))
        self.element_bytes.append(self._bytes_of(value_type))
        self.describe_fns.append(describe)
        return index

    def _bytes_of(self, tensor_type: ir.Type) -> int:
        # Keyed by the type object (uniqued per context, and the graph dies with
        # the pass): text-keyed shapes.element_bytes would print every type.
        found = self._bytes_by_type.get(tensor_type)
        if found is None:
            found = self._bytes_by_type[tensor_type] = element_bytes(
                ir.RankedTensorType(tensor_type).element_type)
        return found

    def _virtual(self, like: int, describe) -> int:
        """A value of its own with `like`'s type (a function result's slot)."""
        self.shapes.append(self.shapes[like])
        self.element_bytes.append(self.element_bytes[like])
        self.describe_fns.append(describe)
        return len(self.shapes) - 1

    def _add_function(self, func: ir.Operation) -> None:
        """Add a function's values and nodes, once; `ok` turns False on a bad annotation."""
        symbol = ir.StringAttr(func.attributes["sym_name"]).value
        if symbol in self.added:
            return
        self.added.add(symbol)
        if not func.regions[0].blocks:
            return
        entry = func.regions[0].blocks[0]
        values = list(function_values(func))
        arguments = [v for v in values if v.kind == "argument"]
        for value, block_arg in zip(arguments, entry.arguments):
            label = f"argument #{value.index}" + (f" '{value.name}'" if value.name else "") \
                + f" of @{symbol}"
            index = self._value(block_arg, _fixed(label))
            self.ok &= self._pin_existing(value, index, label)
            if index != NO_VALUE:
                self.result_slots.append((value, index, value.get(MHLO_SHARDING) is not None))
        self._add_block_ops(entry)
        terminator = entry.operations[len(entry.operations) - 1]
        returned = []
        for value in (v for v in values if v.kind == "result"):
            label = f"result #{value.index}" + (f" '{value.name}'" if value.name else "") \
                + f" of @{symbol}"
            operand = terminator.operands[value.index]
            source = self._value(operand, _fixed(f"returned value #{value.index} of @{symbol}"))
            if source == NO_VALUE:
                returned.append(NO_VALUE)
                continue
            virtual = self._virtual(source, _fixed(label))
            self._add_tie(source, virtual, None)
            self.ok &= self._pin_existing(value, virtual, label)
            self.result_slots.append((value, virtual, value.get(MHLO_SHARDING) is not None))
            returned.append(virtual)
        self.return_ops[len(self.return_ops)] = (terminator, returned)

    def _pin_existing(self, value: ShardedValue, index: int, label: str) -> bool:
        try:
            hlo = read_hlo(value)
        except ShardingError as error:
            diagnostics.error(error.location or value.location, error.message)
            return False
        if hlo is None or index == NO_VALUE or hlo.kind == "unknown":
            return True
        try:
            sharding = Sharding.from_hlo(hlo, self.mesh, len(self.shapes[index]),
                                         any_order=True)
        except ShardingError as error:
            diagnostics.error(value.location, f"{label}: {error.message}")
            return False
        open_dims = read_open_dims(value.get(OPEN_DIMS))
        if value.get(OPEN_DIMS) is not None:
            self.from_shardy.add(index)
            if open_dims:
                sharding = _opened(sharding, open_dims.dims)
                self.refined.add(index)
        self._add_pin(_Pin(index, sharding, f"the annotation on {label}",
                              read_priorities(value.get(PRIORITIES)), open_dims.replicated))
        return True

    def _add_block_ops(self, block: ir.Block) -> None:
        # The hot loop of the build (one pass over ~20k ops): IR handles are
        # fetched once per op and values get ids inline.
        ids, shapes, describers = self.ids, self.shapes, self.describe_fns
        element_sizes, bytes_by_type = self.element_bytes, self._bytes_by_type
        for op in block.operations:
            op = op.operation
            name = op.name
            regions = op.regions
            if len(regions):
                for region in regions:
                    for inner in region.blocks:
                        for position, argument in enumerate(inner.arguments):
                            self._value(argument, _fixed(f"block argument #{position} of {name}"))
            results = []
            for position, result in enumerate(op.results):
                known = ids.get(result)  # a call earlier in the module may have tied it
                if known is not None:
                    results.append(known)
                    describers[known] = _op_result(op, position)
                    continue
                result_type = result.type
                if isinstance(result_type, ir.RankedTensorType):
                    ids[result] = len(shapes)
                    results.append(len(shapes))
                    shapes.append(tuple(result_type.shape))
                    size = bytes_by_type.get(result_type)
                    element_sizes.append(size if size is not None else self._bytes_of(result_type))
                    describers.append(_op_result(op, position))
                else:
                    results.append(NO_VALUE)
            if name == "func.call":
                # The callee's nodes go where it is first called: the solver
                # runs nodes in the order they were added.
                callee = self.functions.get(ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
                if callee is not None:
                    self._add_function(callee)
            if name not in _NO_RULE_NEEDED:
                self._add_op(op, name, results)
            if len(regions):
                outside, first = self._repeats, len(self.nodes)
                if name == "stablehlo.while":
                    # Unknown: once, as the collective counter counts such a loop.
                    self._repeats *= max(1, trip_count(op) or 1)
                for region in regions:
                    for inner in region.blocks:
                        self._add_block_ops(inner)
                self._repeats = outside
                if name == "stablehlo.while" and len(self.nodes) > first:
                    span = (first, len(self.nodes) - 1)
                    for node in self.nodes[first:]:
                        node.loops = (span, *node.loops)

    def _add_op(self, op: ir.Operation, name: str, results: list[int]) -> None:
        if op_rules.has_ties(name):
            for a, b, *direction in op_rules.tied_values(op):
                self._add_tie(self._value(a, None), self._value(b, None), op, *direction)
        group = op_rules.group_of(op)
        if group is not None:
            self._join_group(*group, op)
            return
        rule = op_rules.rule_for(op)
        if rule is None:
            if not op_rules.has_rule(name) or name == "stablehlo.custom_call":
                self._replicate_unknown(op)
            elif MHLO_SHARDING in op.attributes:
                # Control flow (while, if, case, call) has only ties, but its
                # results' annotation is the user's like any op's.
                self._pin_op(op, results)
            return
        operands = [self.ids.get(v, NO_VALUE) for v in op.operands]
        if len(rule.operands) != len(operands) or len(rule.results) != len(results):
            self._replicate_unknown(op)
            return
        # A broadcast that adds no elements (unit dims) is a reshape: it
        # propagates forward like any op.
        grows = name == "stablehlo.broadcast_in_dim" and \
            tensor_bytes(op.results[0].type) > tensor_bytes(op.operands[0].type)
        self.nodes.append(Node(rule, operands, results, name, is_broadcast=grows,
                               repeats=self._repeats))
        self.node_ops.append(op)
        if MHLO_SHARDING in op.attributes:
            pinned = len(self.pins)
            self._pin_op(op, results)
            if len(self.pins) == pinned + 1 and is_sharding_constraint(op):
                self._constrain_input(op, operands[0], self.pins[-1])

    def _constrain_input(self, op: ir.Operation, source: int, pin: _Pin) -> None:
        """A closed sharding constraint also shards its input, as Shardy's
        import does (for parity with GSPMD): the constraint then says where
        the input is computed, not only where it is moved to.

        Only an input nothing else shards, and no other constraint on it
        asks to have another way, takes it: a function argument or an op's
        result.  The block arguments and results of control flow are tied
        to other values, which the constraint must not reach (Shardy moves
        the constraint after them instead)."""
        sharding = pin.sharding
        if source == NO_VALUE or source in self.pinned or sharding.open_dims or \
                sharding.unreduced or sharding.manual or pin.priorities or pin.replicated:
            return
        operand = op.operands[0]
        owner = operand.owner
        if isinstance(owner, ir.Block):
            if owner.owner.operation.name != "func.func":
                return   # a region's argument: tied to its loop or branch
        elif op_rules.has_ties(owner.operation.name) or \
                owner.operation.name == "stablehlo.custom_call":
            return   # control flow's result, or a custom call's (a manual edge, a kernel)
        mine = str(op.attributes[MHLO_SHARDING])
        for use in operand.uses:
            reader = use.owner.operation
            if reader != op and is_sharding_constraint(reader) and (
                    MHLO_SHARDING not in reader.attributes
                    or str(reader.attributes[MHLO_SHARDING]) != mine):
                return
        self._add_pin(_Pin(source, sharding, f"{pin.annotation}, applied to its input"))

    def _pin_op(self, op: ir.Operation, results: list[int]) -> None:
        value = ShardedValue("op", op, 0, None, op.location, op.results[0].type)
        try:
            hlo = read_hlo(value)
        except ShardingError as error:
            diagnostics.error(error.location or op.location, error.message)
            return
        elements = hlo.elements if hlo.kind == "tuple" else (hlo,)
        label = ("the sharding constraint" if is_sharding_constraint(op)
                 else f"the sharding on {op.name}")
        where = source_position(op.location)
        label += f" at {where}" if where else ""
        attributes = op.attributes
        open_note = attributes[OPEN_DIMS] if OPEN_DIMS in attributes else None
        priority_note = attributes[PRIORITIES] if PRIORITIES in attributes else None
        opened = False
        for position, (index, element) in enumerate(zip(results, elements)):
            if index == NO_VALUE or element.kind == "unknown":
                continue
            try:
                sharding = Sharding.from_hlo(element, self.mesh, len(self.shapes[index]),
                                             any_order=True)
            except ShardingError as error:
                diagnostics.error(op.location, f"op '{op.name}': {error.message}")
                continue
            open_dims = read_open_dims(open_note, position)
            if open_dims:
                sharding = _opened(sharding, open_dims.dims)
                opened = True
            self._add_pin(_Pin(index, sharding, label, read_priorities(priority_note, position),
                                  open_dims.replicated))
        if opened:
            self.refined_ops.append((op, results))

    def _add_pin(self, pin: _Pin) -> None:
        self.pins.append(pin)
        self.pinned.add(pin.value)

    def _replicate_unknown(self, op: ir.Operation) -> None:
        """An op with no rule runs on whole values; nothing propagates through it.

        Its results are still values like any other, as in Shardy: their
        users may shard them, and the partitioner then cuts each device's
        block out of the whole result, which moves nothing.  Only the
        user's own annotation on the op pins them."""
        diagnostics.warning(op.location, f"no sharding rule for '{op.name}': it runs on "
                            "whole values, so its operands will be gathered")
        indices = [self.ids.get(result, NO_VALUE) for result in op.results]
        if MHLO_SHARDING in op.attributes and op.results:
            self._pin_op(op, indices)
        self.unruled.append((op, indices))

    def _add_tie(self, a: int, b: int, op: ir.Operation | None,
                 directions: str = "both") -> None:
        if a == NO_VALUE or b == NO_VALUE or self.shapes[a] != self.shapes[b]:
            return
        shape = self.shapes[a]
        builder = RuleBuilder([len(shape)], [len(shape)])
        for dim, size in enumerate(shape):
            builder.factor(size, FactorKind.PASS_THROUGH, [dim], [dim])
        self.nodes.append(Node(builder.build(UnreducedFlow.NONE), [a], [b], "tie",
                               repeats=self._repeats,
                               is_tie=True, directions=directions))
        self.node_ops.append(op)

    def _join_group(self, group: int, value: ir.Value, op: ir.Operation) -> None:
        """Tie `value` to the first value of its sharding group (Shardy's shard_as)."""
        index = self._value(value, None)
        first = self.groups.setdefault(group, index)
        if first != index:
            if self.shapes[first] != self.shapes[index]:
                # One sharding cannot fit both: Shardy's verifier refuses this too.
                diagnostics.error(op.location, f"sharding group {group} holds values of "
                                  f"different shapes ({_shape_text(self.shapes[first])} and "
                                  f"{_shape_text(self.shapes[index])}); its values must share "
                                  "one sharding")
                self.ok = False
            self._add_tie(first, index, None)

    # ---------------------------------------------------------------- write

    def write(self, module: ir.Operation, mesh: Mesh, explain: bool, origins: bool) -> None:
        context = module.context
        self.manual = self._manual_regions()
        updates = []
        left_open = {pin.value: pin.sharding.open_dims for pin in self.pins}
        for value, index, annotated in self.result_slots:
            # Only an entry point's boundary is what a user passes and gets
            # back; a private callee's is internal (XLA inlines it).
            entry = is_entry(value.owner)
            if not annotated or index in self.refined:
                sharding = self._solved(index).reduced()
                if entry:
                    sharding = self._at_boundary(index, sharding, left_open,
                                                 index in self.from_shardy)
                updates.append((value, MHLO_SHARDING, sharding_attr(sharding, context)))
            elif entry and index in self.from_shardy:
                given = self._solved(index)
                sharding = self._at_boundary(index, given, left_open, True)
                if sharding != given:
                    updates.append((value, MHLO_SHARDING, sharding_attr(sharding, context)))
            for note in (OPEN_DIMS, PRIORITIES):
                if value.get(note) is not None:
                    updates.append((value, note, None))
        set_attrs(updates)
        for node_index, (node, op) in enumerate(zip(self.nodes, self.node_ops)):
            if node.is_tie or op is None or not op.results:
                continue
            if is_sharding_constraint(op) or MHLO_SHARDING in op.attributes:
                continue
            op.attributes[MHLO_SHARDING] = self._result_attr(node.results, context)
        for op, indices in self.refined_ops:
            op.attributes[MHLO_SHARDING] = self._result_attr(indices, context)
        for op in [*self.node_ops, *(op for op, _ in self.unruled)]:
            if op is not None:
                for note in (OPEN_DIMS, PRIORITIES):
                    if note in op.attributes:
                        del op.attributes[note]
        # Every value has a sharding: an op with no rule, whatever its users gave it.
        for op, indices in self.unruled:
            if op.results and MHLO_SHARDING not in op.attributes:
                op.attributes[MHLO_SHARDING] = self._result_attr(indices, context)
        for op in self._tie_ops():  # while, if, case, call: no rule node of their own
            if op.results and MHLO_SHARDING not in op.attributes:
                results = [self.ids.get(r, NO_VALUE) for r in op.results]
                op.attributes[MHLO_SHARDING] = self._result_attr(results, context)
        self._insert_reshards(module)
        export_propagation_controls(module)
        # A boundary that keeps part of an axis names a sub-axis: the
        # module's mesh is cut there too, so that every sharding written is
        # a choice of its axes.
        write_mesh(module, split_axes(mesh, self._boundary_cuts) if self._boundary_cuts else mesh)
        if explain or origins:
            self._explain(explain, origins)

    def _manual_regions(self) -> dict[int, tuple[str, ...]]:
        """The manual axes of every value inside a manual region.

        The solver works on the free axes only; a value is in a region where
        its annotation says so (an ``@SPMDFullToShardShape``, or XLA's
        manual shardings on every op) or where it is computed from one:
        manual-ness flows forward through ops and both ways through ties,
        and stops at ``@SPMDShardToFullShape``, whose result is global.
        Two sweeps in program order settle loops, whose carries come back
        through a tie."""
        manual: dict[int, tuple[str, ...]] = {}
        pinned = {pin.value: pin.sharding.manual for pin in self.pins}
        manual.update((i, m) for i, m in pinned.items() if m)
        if not manual:
            return manual   # no region: nothing to walk
        for _sweep in range(2):
            for node, op in zip(self.nodes, self.node_ops):
                if op is not None and is_manual_boundary(op):
                    continue
                tied = [*node.operands, *node.results] if node.is_tie else None
                found = next((manual[v] for v in tied or node.operands if v in manual), ())
                for value in (tied or node.results) if found else ():
                    if value != NO_VALUE and value not in pinned:
                        manual.setdefault(value, found)
        return manual

    def _at_boundary(self, value: int, sharding: Sharding,
                     left_open: dict[int, frozenset[int]], from_shardy: bool) -> Sharding:
        """An entry point's argument or result with `sharding`: split on the
        dims propagation chose only by what divides them evenly (see
        `Sharding.evenly_dividing`), and on the dims a Shardy sharding
        closed too, as Shardy's export does.  An uneven split XLA's own
        sharding asked for is kept: XLA pads it.  The ops inside keep their
        split; the partitioner moves the value across the boundary."""
        if sharding.is_maximal:
            return sharding
        rank = len(self.shapes[value])
        dims = left_open.get(value, range(rank))
        closed = [d for d in range(rank) if d not in dims] if from_shardy else ()
        evened = sharding.evenly_dividing(self.shapes[value], dims, closed)
        if evened.mesh != sharding.mesh:
            for name in evened.mesh.axis_names:
                part = parse_sub_axis(name)
                if part is not None and not sharding.mesh.has_axis(name):
                    self._boundary_cuts.setdefault(part[0], set()).add(part[1] * part[2])
        return evened

    def _result_attr(self, results: list[int], context) -> ir.Attribute:
        shardings = [self._solved(r) if r != NO_VALUE else None for r in results]
        if len(shardings) == 1 and shardings[0] is not None:
            attr = self._attrs.get(shardings[0])
            if attr is None:
                attr = self._attrs[shardings[0]] = sharding_attr(shardings[0], context)
            return attr
        elements = [s.to_hlo() if s is not None else HloSharding.replicated() for s in shardings]
        return sharding_attr(HloSharding.tuple_of(elements), context)

    def _solved(self, value: int) -> Sharding:
        sharding = self.solver.sharding(value)
        manual = self.manual.get(value)
        return sharding.in_manual(manual) if manual else sharding

    def _insert_reshards(self, module: ir.Operation) -> None:
        """A marked reshard before every use of a partial value that needs the sum."""
        solver = self.solver
        for node_index, (node, op) in enumerate(zip(self.nodes, self.node_ops)):
            if node.is_tie or op is None:
                continue
            for position, value in enumerate(node.operands):
                if value == NO_VALUE or not solver.states[value].unreduced:
                    continue
                if not solver.accepts_unreduced(node_index, position):
                    self._reshard_use(op, position, value, self.sum_targets.get(value) or
                                      solver.summed_layout(node_index, position))
        for op in self._tie_ops():
            for position, operand in enumerate(op.operands):
                value = self.ids.get(operand, NO_VALUE)
                if value != NO_VALUE and solver.states[value].unreduced:
                    self._reshard_use(op, position, value)
        for terminator, returned in self.return_ops.values():
            for position, virtual in enumerate(returned):
                value = self.ids.get(terminator.operands[position], NO_VALUE)
                if value == NO_VALUE or not solver.states[value].unreduced:
                    continue
                if solver.states[virtual].unreduced != solver.states[value].unreduced:
                    # Summed straight into the result's layout (a reduce-scatter
                    # where the result is split further than the value).
                    summed = solver.sharding(virtual)
                    self._reshard_use(terminator, position, value,
                                      None if summed.unreduced else summed)

    def _tie_ops(self) -> list[ir.Operation]:
        seen, ops = set(), []
        for node, op in zip(self.nodes, self.node_ops):
            if node.is_tie and op is not None and id(op) not in seen:
                seen.add(id(op))
                ops.append(op)
        return ops

    def _reshard_use(self, op: ir.Operation, position: int, value: int,
                     layout: Sharding | None = None) -> None:
        """Make `op` read the summed value: one marked reshard per partial value
        and layout, placed right after its definition so it serves every use
        that wants it that way."""
        target = layout if layout is not None else self.solver.sharding(value).reduced()
        if self.manual.get(value):
            target = target.in_manual(self.manual[value])
        summed_value = self._summed_values.get((value, target))
        if summed_value is None:
            operand = op.operands[position]
            owner = operand.owner
            if isinstance(owner, ir.Block):
                point = ir.InsertionPoint.at_block_begin(owner)
            else:
                point = ir.InsertionPoint.after(owner.operation)
            with point, op.location:
                call = stablehlo.CustomCallOp([operand.type], [operand], SHARDING_TARGET)
            call.operation.attributes[MHLO_SHARDING] = sharding_attr(target, op.context)
            summed_value = self._summed_values[(value, target)] = call.results[0]
        op.operands[position] = summed_value

    def _explain(self, explain: bool, origins: bool) -> None:
        solver = self.solver

        def describe(value: int) -> str:
            return self.describe_fns[value](value) if self.describe_fns[value] else f"value {value}"

        for node, op in zip(self.nodes, self.node_ops):
            if node.is_tie or op is None or not node.results or node.results[0] == NO_VALUE:
                continue
            chain = solver.explain(node.results[0], describe)
            text = " <- ".join(chain)
            if explain:
                diagnostics.remark(op.location, text)
            if origins:
                op.attributes["spmd.origin"] = ir.StringAttr.get(text, op.context)


def _shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(str(n) for n in shape) or "scalar"


def _fixed(text: str):
    return lambda _value: text


class _op_result:
    """Describes an op's result lazily: locations are only read for explanations."""

    __slots__ = ("op", "position")

    def __init__(self, op: ir.Operation, position: int):
        self.op, self.position = op, position

    def __call__(self, _value: int) -> str:
        op = self.op
        where = source_position(op.location)
        result = f" result #{self.position}" if len(op.results) > 1 else ""
        return f"{op.name}{result}" + (f" at {where}" if where else "")


def _opened(sharding: Sharding, dims: frozenset[int]) -> Sharding:
    """`sharding` with `dims` open (Shardy's ``{?}``): propagation may split
    them further."""
    return dataclasses.replace(sharding, open_dims=dims & set(range(sharding.rank)))
