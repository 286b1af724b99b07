"""``spmd-auto-shard``: choose every value's sharding from a mesh and a memory budget.

The pass reads the module into the propagation graph (`ModuleGraph`, the
one ``spmd-propagate`` builds), hands it to the search (`auto_sharding.py`),
and writes the plan back the way ``spmd-propagate`` writes its answer: an
``mhlo.sharding`` on every op and function argument and result, and a
marked reshard where a Partial value meets a consumer that needs its sum.
The output is an ordinary annotated module: ``spmd-propagate`` keeps every
sharding in it and ``spmd-partition`` takes it unchanged.

Annotations already in the module (from ``spmd-annotate``'s rules,
``mhlo.sharding`` or ``sdy.sharding``) are hard constraints; open dims
(``{?}``) may still be split.  The updated parameters of a training step
come out in the layout chosen for the parameters, since one step's outputs
are the next step's inputs: a result is the next value of an argument when
jax says so (``tf.aliasing_output``), or when its pytree path after the
leading index is the argument's after its leading key, with the same type
(``result[0]['w']`` and ``params['w']``; ``result[i]`` preferring the i-th
argument).  Gradients and optimizer state then follow their parameters
through the update's element-wise ops.

Options:
  mesh           axis sizes, ``data=4,model=2`` (else the module's mesh)
  memory-budget  bytes per device: ``2GiB``, ``512MB``, ``1000000`` (empty: no limit)
  bandwidth      bytes per second per axis, ``data=25e9,model=300e9``: the
                 search then minimizes seconds (alpha-beta) instead of bytes
  latency        seconds per collective, with `bandwidth`
  explain        a remark per op: its sharding and why the search chose it
  time-limit     seconds the solver may take
"""

from __future__ import annotations

import dataclasses
import re
from typing import ClassVar

from jaxlib.mlir import ir

from stablehlo_spmd import diagnostics
from stablehlo_spmd.auto_sharding import (
    CostModel, Graph, InfeasibleBudget, Plan, SearchTimeLimit, format_bytes, search)
from stablehlo_spmd.errors import ShardingError
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.module_shardings import (
    import_shardy, module_mesh, untuple_custom_calls)
from stablehlo_spmd.passes import ModulePass, register_pass
from stablehlo_spmd.passes.propagate import ModuleGraph
from stablehlo_spmd.propagation import NO_VALUE, ValueState

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str | int | float | None) -> float | None:
    """``"2GiB"``, ``"512MB"``, ``1e9`` or ``None`` as bytes (None: no limit)."""
    if text is None or text == "":
        return None
    if isinstance(text, (int, float)):
        if text <= 0:
            raise ValueError(f"a memory budget must be positive, got {text}")
        return float(text)
    found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if not found or found.group(2).lower() not in _UNITS:
        raise ValueError(f"cannot read the memory budget {text!r} (expected e.g. 2GiB, "
                         "512MB or a number of bytes)")
    size = float(found.group(1)) * _UNITS[found.group(2).lower()]
    if size <= 0:
        raise ValueError(f"a memory budget must be positive, got {text!r}")
    return size


def parse_bandwidths(text: str) -> tuple[tuple[str, float], ...]:
    """``data=25e9,model=300e9`` as ((axis, bytes per second), ...)."""
    if not text:
        return ()
    pairs = []
    for item in text.split(","):
        name, _, value = item.partition("=")
        try:
            speed = float(value)
        except ValueError:
            speed = -1.0
        if not name.strip() or speed <= 0:
            raise ValueError(f"cannot read the bandwidth {item!r} (expected axis=bytes_per_second)")
        pairs.append((name.strip(), speed))
    return tuple(pairs)


@dataclasses.dataclass
class AutoShardResult:
    """What one run of the search chose, for the CLI's table and `explain`."""

    plan: Plan
    mesh: Mesh
    memory_budget: float | None
    rows: list[tuple[str, str, str, float, str]]  # (kind, name, sharding, bytes, why)


@register_pass
@dataclasses.dataclass(frozen=True)
class AutoShardPass(ModulePass):
    name: ClassVar[str] = "spmd-auto-shard"
    description: ClassVar[str] = ("choose every value's sharding from a mesh and a memory "
                                  "budget (an ILP over the op-rule table's strategies)")

    mesh: str = ""
    memory_budget: str = ""
    bandwidth: str = ""
    latency: float = 0.0
    explain: bool = False
    time_limit: float = 60.0

    def run(self, module: ir.Operation) -> None:
        auto_shard_module(module, self)


def auto_shard_module(module: ir.Operation, options: AutoShardPass) -> AutoShardResult | None:
    """Run the search on `module` and write its plan; None after reporting an error."""
    try:
        budget = parse_bytes(options.memory_budget)
        cost_model = CostModel(parse_bandwidths(options.bandwidth), options.latency)
        mesh = Mesh.from_string(options.mesh) if options.mesh else None
    except (ValueError, ShardingError) as error:
        diagnostics.error(module.location, f"spmd-auto-shard: {error}")
        return None
    try:
        import_shardy(module, lower_manual=True)
        untuple_custom_calls(module)
        found = module_mesh(module)
    except ShardingError as error:
        diagnostics.error(error.location or module.location, error.message)
        return None
    mesh = mesh or found
    if mesh is None:
        diagnostics.error(module.location, "spmd-auto-shard needs a mesh: give the pass "
                          "mesh=data=4,model=2 (or --mesh), or annotate the module first")
        return None
    graph = ModuleGraph.build(module, mesh)
    if graph is None:
        return None
    entry = _entry_name(graph)
    search_graph = _search_graph(graph, mesh, entry)
    try:
        plan = search(search_graph, budget, cost_model, options.time_limit)
    except (InfeasibleBudget, SearchTimeLimit) as error:
        diagnostics.error(graph.functions[entry].location, f"spmd-auto-shard: {error}")
        return None
    solver = graph.solver
    for value, layout in enumerate(plan.layouts):
        if layout is None:
            continue
        state = solver.states[value]
        solver.states[value] = ValueState(list(layout.dim_axes), layout.unreduced,
                                          layout.reduction, state.closed_dims, state.pinned,
                                          state.reserved)
    graph.write(module, mesh, False, False)
    if options.explain:
        for node, op in zip(graph.nodes, graph.node_ops):
            if node.is_tie or op is None or not node.results or node.results[0] == NO_VALUE:
                continue
            value = node.results[0]
            diagnostics.remark(op.location, f"{solver.sharding(value)}: {plan.why[value]}")
    return AutoShardResult(plan, mesh, budget, _rows(graph, plan, entry))


def _entry_name(graph: ModuleGraph) -> str:
    names = list(graph.functions)
    public = [n for n, f in graph.functions.items()
              if "sym_visibility" not in f.attributes
              or ir.StringAttr(f.attributes["sym_visibility"]).value == "public"]
    return "main" if "main" in names else (public or names)[0]


def _search_graph(graph: ModuleGraph, mesh: Mesh, entry: str) -> Graph:
    pins = {}
    open_dims = {}
    for pin in graph.pins:
        pins[pin.value] = pin.sharding
        if pin.sharding.open_dims:
            open_dims[pin.value] = pin.sharding.open_dims
    arguments, results = [], []
    for value, index, _annotated in graph.result_slots:
        if index == NO_VALUE or _function_name(value.owner) != entry:
            continue
        (arguments if value.kind == "argument" else results).append((value, index))
    return Graph(mesh, graph.shapes, graph.element_bytes, graph.nodes, pins, open_dims,
                 carried_pairs(arguments, results), [i for _, i in results],
                 [i for _, i in arguments])


def _function_name(func: ir.Operation) -> str:
    return ir.StringAttr(func.attributes["sym_name"]).value


_HEAD = re.compile(r"^([A-Za-z_][A-Za-z_0-9]*)((?:\[.*\])?)$")
_FIRST_INDEX = re.compile(r"^\[(\d+)\]")


def carried_pairs(arguments, results) -> list[tuple[int, int]]:
    """(argument value, result value) pairs where the result is the argument's
    next value: jax's ``tf.aliasing_output``, else matching pytree paths."""
    pairs = []
    taken_results: set[int] = set()
    for value, index in arguments:
        alias = value.get("tf.aliasing_output")
        if alias is not None:
            position = ir.IntegerAttr(alias).value
            for result, result_index in results:
                if result.index == position and str(result.type) == str(value.type):
                    pairs.append((index, result_index))
                    taken_results.add(result_index)
    groups: list[str] = []
    by_path: dict[str, list[tuple[int, int, str]]] = {}
    for value, index in arguments:
        head = _HEAD.match(value.name or "")
        if not head or not head.group(2):
            continue
        if head.group(1) not in groups:
            groups.append(head.group(1))
        by_path.setdefault(head.group(2), []).append(
            (groups.index(head.group(1)), index, str(value.type)))
    for result, result_index in results:
        if result_index in taken_results or not result.name:
            continue
        head = _HEAD.match(result.name)
        if not head:
            continue
        first = _FIRST_INDEX.match(head.group(2))
        if not first:
            continue
        path = head.group(2)[first.end():]
        candidates = [c for c in by_path.get(path, ()) if c[2] == str(result.type)]
        if len(candidates) > 1:
            candidates = [c for c in candidates if c[0] == int(first.group(1))]
        if len(candidates) == 1:
            pairs.append((candidates[0][1], result_index))
    return pairs


def _rows(graph: ModuleGraph, plan: Plan, entry: str):
    """The table's rows: every argument of the entry function, then the ten
    largest values computed inside it."""
    rows = []
    for value, index, _annotated in graph.result_slots:
        if index == NO_VALUE or value.kind != "argument" or _function_name(value.owner) != entry:
            continue
        layout = plan.layouts[index]
        rows.append(("argument", value.name or f"#{value.index}",
                     str(layout) if layout is not None else "?",
                     _bytes_of(graph, index), plan.why[index]))
    computed = [(_bytes_of(graph, v), v)
                for node in graph.nodes if not node.is_tie
                for v in node.results if v != NO_VALUE and plan.layouts[v] is not None]
    seen = set()
    for size, value in sorted(computed, key=lambda x: -x[0]):
        describe = graph.describe_fns[value]
        name = describe(value) if describe else f"value {value}"
        if name in seen:
            continue
        seen.add(name)
        rows.append(("activation", name, str(plan.layouts[value]), size, plan.why[value]))
        if len(seen) == 10:
            break
    return rows


def _bytes_of(graph: ModuleGraph, value: int) -> float:
    size = graph.element_bytes[value]
    for n in graph.shapes[value]:
        size *= n
    return float(size)


def format_table(result: AutoShardResult) -> str:
    """The CLI's summary: the plan's figures, then each row's sharding and why."""
    plan = result.plan
    unit = "s" if result.plan.cost_in_seconds else "bytes"
    cost = f"{plan.cost:.3g} s" if unit == "s" else format_bytes(plan.cost)
    lines = [
        f"spmd-auto-shard: mesh {result.mesh.describe_axes()}, memory budget "
        f"{format_bytes(result.memory_budget)} per device",
        f"  estimated collectives per step: {cost} per device; estimated peak memory: "
        f"{format_bytes(plan.peak_memory)} per device",
        f"  search: {plan.build_seconds + plan.solve_seconds:.2f} s ({plan.variables} ILP "
        f"variables, {plan.constraints} constraints; {plan.units} decision units in "
        f"{plan.unit_classes} classes after clustering repeated layers)",
        ""]
    width = min(60, max((len(name) for _, name, *_ in result.rows), default=10))
    shard_width = max((len(s) for _, _, s, *_ in result.rows), default=10)
    lines.append(f"  {'kind':<10} {'value':<{width}} {'sharding':<{shard_width}} {'size':>10}  why")
    for kind, name, sharding, size, why in result.rows:
        short = name if len(name) <= width else "..." + name[-(width - 3):]
        lines.append(f"  {kind:<10} {short:<{width}} {sharding:<{shard_width}} "
                     f"{format_bytes(size):>10}  {why}")
    return "\n".join(lines)
