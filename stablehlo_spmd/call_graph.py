"""Each call site its own callee while propagating; one callee per distinct result after.

A function is one set of values with one sharding each.  A callee shared by
two call sites would make the two sites agree, and each would then be
resharded into whatever the other one needed.  Shardy gives every site its
own copy of the callee (``sdy-flatten-call-graph`` at import, a named
computation per call), and XLA inlines calls before it partitions, so both
let each site shard the callee its own way.  `flatten` does the same before
``spmd-propagate`` builds its graph: the first call of a function keeps it
(functions taken callees first, calls in program order, as Shardy walks
them), and every later call gets a copy, whose own calls get copies in turn.

After the shardings are written, `merge` folds the copies back
(``sdy-unflatten-call-graph``): copies of one function that came out the
same, shardings included, become one function again, so a callee no site
needed to shard differently is emitted once.  Shardy merges copies whose
argument and result shardings agree and keeps the first copy's body; here
the whole copy must agree, so that no site's inner shardings are dropped
for another's.  The original keeps its name where a copy merges into it.

A recursive call graph (which XLA cannot compile anyway) is left as it is:
its functions stay shared by their sites.
"""

from __future__ import annotations

import dataclasses

from jaxlib.mlir import ir

from stablehlo_spmd.ir import ops_named
from stablehlo_spmd.module_shardings import functions


@dataclasses.dataclass
class FlatCallGraph:
    """What `merge` needs: the copies made, each with the function it copies,
    and every function's calls (kept, so that merging walks no op again)."""

    module: ir.Operation
    origin: dict[str, str] = dataclasses.field(default_factory=dict)    # copy -> original
    calls: dict[str, list[ir.Operation]] = dataclasses.field(default_factory=dict)


def flatten(module: ir.Operation) -> FlatCallGraph:
    """Give every call of a function called more than once its own copy of it."""
    graph = FlatCallGraph(module)
    by_name = {_name(f): f for f in functions(module)}
    calls = graph.calls = {name: _calls(func) for name, func in by_name.items()}
    if _recursive(calls):
        return graph
    taken = set(by_name)
    claimed: set[str] = set()
    for name in _callees_first(calls):
        for call in calls[name]:
            callee = _callee(call)
            if not _has_body(by_name, callee):
                continue   # unknown, or a declaration: nothing to copy
            if callee in claimed:
                copy = _copy(by_name, calls, callee, taken, graph)
                call.attributes["callee"] = ir.FlatSymbolRefAttr.get(copy, call.context)
            claimed.add(callee)
    return graph


def merge(graph: FlatCallGraph) -> None:
    """Fold copies that came out the same back into one function."""
    if not graph.origin:
        return
    by_name = {_name(f): f for f in functions(graph.module)}
    calls = graph.calls
    sites: dict[str, list[ir.Operation]] = {}
    for name in by_name:
        for call in calls[name]:
            sites.setdefault(_callee(call), []).append(call)
    first_site = {name: i for i, name in enumerate(sites)}
    copied = set(graph.origin.values())
    kept: dict[tuple[str, str], str] = {}
    # Callees first: a caller's text names its callees, which must be
    # merged before their callers are compared.
    for name in _callees_first(calls):
        origin = graph.origin.get(name, name)
        if origin not in copied:
            continue   # never copied
        key = (origin, _body_text(by_name[name], name))
        other = kept.setdefault(key, name)
        if other == name:
            continue
        # The original keeps its name if it is one of the two; else the
        # copy called first does.  The other one's calls move over to it.
        keep, drop = sorted((other, name), key=lambda n: (n in graph.origin,
                                                          first_site.get(n, len(first_site))))
        kept[key] = keep
        for site in sites.pop(drop, ()):
            site.attributes["callee"] = ir.FlatSymbolRefAttr.get(keep, site.context)
            sites.setdefault(keep, []).append(site)
        by_name.pop(drop).erase()


# ------------------------------------------------------------------ helpers

def _name(func: ir.Operation) -> str:
    return ir.StringAttr(func.attributes["sym_name"]).value


def _callee(call: ir.Operation) -> str:
    return ir.FlatSymbolRefAttr(call.attributes["callee"]).value


def _calls(func: ir.Operation) -> list[ir.Operation]:
    return ops_named(func, ("func.call",))


def _recursive(calls: dict[str, list[ir.Operation]]) -> bool:
    """Whether any function reaches itself through calls."""
    state: dict[str, int] = {}   # 1: on the path, 2: done

    def visit(name: str) -> bool:
        state[name] = 1
        for call in calls.get(name, ()):
            callee = _callee(call)
            if state.get(callee) == 1 or (callee not in state and callee in calls
                                          and visit(callee)):
                return True
        state[name] = 2
        return False

    return any(name not in state and visit(name) for name in calls)


def _callees_first(calls: dict[str, list[ir.Operation]]) -> list[str]:
    """Every function, each after all it calls (a post-order of the call
    graph from the functions in module order, as Shardy walks calls)."""
    done: set[str] = set()
    order: list[str] = []

    def visit(name: str) -> None:
        done.add(name)
        for call in calls[name]:
            callee = _callee(call)
            if callee in calls and callee not in done:
                visit(callee)
        order.append(name)

    for name in calls:
        if name not in done:
            visit(name)
    return order


def _has_body(by_name: dict[str, ir.Operation], name: str) -> bool:
    return name in by_name and bool(by_name[name].regions[0].blocks)


def _copy(by_name: dict[str, ir.Operation], calls: dict[str, list[ir.Operation]],
          name: str, taken: set[str], graph: FlatCallGraph) -> str:
    """A copy of `name` next to it, and copies of everything it calls."""
    original = by_name[name]
    copy = original.clone(ip=ir.InsertionPoint(original))
    new_name = _fresh(graph.origin.get(name, name), taken)
    copy.attributes["sym_name"] = ir.StringAttr.get(new_name, copy.context)
    copy.attributes["sym_visibility"] = ir.StringAttr.get("private", copy.context)
    by_name[new_name] = copy
    graph.origin[new_name] = graph.origin.get(name, name)
    calls[new_name] = _calls(copy)
    for call in calls[new_name]:
        callee = _callee(call)
        if _has_body(by_name, callee):
            below = _copy(by_name, calls, callee, taken, graph)
            call.attributes["callee"] = ir.FlatSymbolRefAttr.get(below, call.context)
    return new_name


def _fresh(base: str, taken: set[str]) -> str:
    suffix = 0
    while f"{base}_{suffix}" in taken:
        suffix += 1
    taken.add(f"{base}_{suffix}")
    return f"{base}_{suffix}"


def _body_text(func: ir.Operation, name: str) -> str:
    """The function as printed, its own name left out."""
    text = func.get_asm(assume_verified=True, use_local_scope=True)
    return text.replace(f"@{name}(", "@(", 1)
