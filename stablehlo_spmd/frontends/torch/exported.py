"""Finishing the module JAX exported for a torch program: what only the torch side knows.

Three facts, written into the module once it is exported:

* where each op came from in the user's torch code;
* how many devices the marks' mesh has;
* which argument each updated tensor of the state replaces.

**Locations.**
JAX locates an op by the Python stack that made it, which for a lowered
torch graph is torchax's code and the lowering's interpreter: true, and of
no use to someone whose ``forward`` caused a collective.  The lowering
therefore opens a JAX name scope ``@<node>`` around each graph node; here
each op under such a scope is relocated to what made that node: the
innermost frame of the user's code in torch's recorded stack, named by the
module path (``transformer.h.0.attn``).  Diagnostics and the partitioner's
"caused by" then name a line of the model.

**Mesh size.** The mesh's device count becomes ``mhlo.num_partitions``: a
constraint marked in ``forward`` already names the mesh's devices, which a
module that says it has one partition would contradict.

**Donation.** Each argument of the state that the program returns updated
(``params['w']`` and ``result[1]['params']['w']``) is donated to that
result (``tf.aliasing_output``), so a step updates its state in place.
Pairing by name, not by shape as ``jax.jit``'s ``donate_argnums`` would,
keeps a parameter the step leaves alone from lending its buffer to some
other result of its shape.
"""

from __future__ import annotations

import re
from typing import Callable

import torch.fx
from jaxlib.mlir import ir

from stablehlo_spmd.ir import location_name, make_context, print_module

NODE_SCOPE = "@"
_SCOPED = re.compile(r"(?:\"|/)@([A-Za-z_][A-Za-z0-9_]*)(?:/|\")")
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def node_scope(node: torch.fx.Node) -> str:
    return NODE_SCOPE + node.name


def finish(text: str, graph: torch.fx.GraphModule, partitions: int | None,
           result_of: Callable[[str], str | None]) -> str:
    """`text` with torch's locations, `partitions` (None: as it is) and donations;
    `result_of` names the result that replaces an argument, given the argument's name."""
    sources = {node.name: torch_source(node) for node in graph.graph.nodes}
    with make_context() as context:
        module = ir.Module.parse(text, context).operation
        if partitions is not None:
            module.attributes["mhlo.num_partitions"] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(32), partitions)
        _donate(module, result_of, context)
        made: dict[str, ir.Location] = {}

        def relocate(op: ir.Operation) -> None:
            # The scope may sit inside other names: an op torchax lowers through a
            # jax.jit of its own is named "jit:"(... "@node/..." ...).
            match = None
            for match in _SCOPED.finditer(str(op.location)):
                pass   # the innermost node scope
            if match is not None:
                node = match.group(1)
                if node not in made:
                    made[node] = _location(*sources.get(node, ("", None, None)))
                op.location = made[node]
            elif op.name not in ("builtin.module", "func.func"):
                op.location = ir.Location.unknown()   # the lowering's own (the random key)
            for region in op.regions:
                for block in region.blocks:
                    for inner in block.operations:
                        relocate(inner.operation)

        relocate(module.operation)
        return print_module(module, debug_info=True)


def _donate(module: ir.Operation, result_of: Callable[[str], str | None],
            context: ir.Context) -> None:
    main = next(op for op in module.regions[0].blocks[0].operations
                if op.operation.name == "func.func"
                and ir.StringAttr(op.attributes["sym_name"]).value == "main")
    results = {}
    for index, attrs in enumerate(_per_value(main, "res_attrs")):
        if "jax.result_info" in attrs:
            results[ir.StringAttr(attrs["jax.result_info"]).value] = index
    donated = []
    entry = main.regions[0].blocks[0]
    for argument, attrs in zip(entry.arguments, _per_value(main, "arg_attrs")):
        entries = {attrs[i].name: attrs[i].attr for i in range(len(attrs))}
        partner = results.get(result_of(location_name(argument.location) or ""))
        if partner is not None:
            entries["tf.aliasing_output"] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(32), partner)
        donated.append(ir.DictAttr.get(entries, context))
    main.attributes["arg_attrs"] = ir.ArrayAttr.get(donated, context)


def _per_value(function: ir.Operation, key: str) -> list[ir.DictAttr]:
    """The function's argument or result attribute dicts (empty ones where it has none)."""
    count = len(ir.FunctionType(ir.TypeAttr(function.attributes["function_type"]).value).inputs
                if key == "arg_attrs" else
                ir.FunctionType(ir.TypeAttr(function.attributes["function_type"]).value).results)
    if key not in function.attributes:
        return [ir.DictAttr.get({}) for _ in range(count)]
    return [ir.DictAttr(a) for a in ir.ArrayAttr(function.attributes[key])]


def torch_source(node: torch.fx.Node) -> tuple[str, str | None, int | None]:
    """(module path or the node's name, file, line) of the user code that made `node`."""
    stack = node.meta.get("nn_module_stack") or {}
    path = ""
    if stack:
        path, module_type = list(stack.values())[-1]
        path = path or module_type   # the root module: its class
    filename, line = None, None
    for frame_file, frame_line in reversed(_FRAME.findall(node.meta.get("stack_trace") or "")):
        if "/torch/" not in frame_file and "/stablehlo_spmd/" not in frame_file:
            filename, line = frame_file, int(frame_line)
            break
    return path or node.name, filename, line


def _location(name: str, filename: str | None, line: int | None) -> ir.Location:
    if filename is None:
        return ir.Location.name(name)
    return ir.Location.name(name, childLoc=ir.Location.file(filename, line, 1))
