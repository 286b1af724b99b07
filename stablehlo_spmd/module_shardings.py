"""Where shardings live in a module, and how they are read and written.

A partitionable module carries:

* ``spmd.mesh = #sdy.mesh<["data"=4, "model"=2]>`` on the module: the named
  mesh every sharding refers to (Shardy's own mesh attribute, so it parses
  and prints with the sdy dialect and keeps axis names through every stage);
* ``mhlo.num_partitions`` on the module: the device count XLA compiles for;
* ``mhlo.sharding`` strings on function arguments and results, on
  ``stablehlo.custom_call @Sharding`` constraints, and on any op whose result
  layout is pinned.

`checked_mesh` is the one place a module's mesh is read and its shardings
checked, for every pass and API call alike; `is_entry` says which functions
are entry points.  `import_shardy` turns what today's JAX lowers
(``sdy.mesh`` ops, ``#sdy.sharding`` attributes, ``sdy.sharding_constraint``
ops) into that form, so both spellings are accepted as input;
`mesh_attr_text` and `sdy_sharding_text` write Shardy's spelling back out.
`sharding_attr` builds the string attribute for a `Sharding` through a
value-keyed cache.

Shardy's sub-axes (``"x":(2)4``) become axes: the import splits each axis
that shardings name parts of at the points they name (`mesh.split_axes`),
so ``spmd.mesh`` lists the parts, and the Shardy spelling written back
merges them again.  A sub-axis that cuts its axis where the others do not
reads as the devices it lists (an order of its own: `tile_axes`).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import math
import re
from typing import Iterable, Iterator

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy, stablehlo

from stablehlo_spmd.errors import MeshError, ShardingError, ShardingSyntaxError
from stablehlo_spmd.hlo_sharding import (
    HloSharding, TileAssignment, format_hlo_sharding, parse_hlo_sharding)
from stablehlo_spmd.ir import cached_attr, location_name, ops_named, source_position
from stablehlo_spmd.mesh import Mesh, parse_sub_axis, sdy_axis_refs, sdy_mesh_axes, split_axes
from stablehlo_spmd.shapes import tensor_bytes
from stablehlo_spmd.sharding import Sharding
from stablehlo_spmd.tile_axes import infer_mesh

MHLO_SHARDING = "mhlo.sharding"
# The open dims (Shardy's ``{?}``) of a sharding Shardy wrote, "0,2", and the
# priorities of its dims (``{"x"}p1``), "0:1": XLA's sharding text has
# neither, so the import keeps them beside it for spmd-propagate, which may
# split open dims further and propagates dims in priority order.  Axes the
# sharding says are replicated (``replicated={"b"}``) are ones its open dims
# may not take: they follow the open dims after a "/", "0,2/b".  On an op
# with several results the notes of its results are joined by ";".
OPEN_DIMS = "spmd.open_dims"
PRIORITIES = "spmd.priorities"
# On a contraction whose strategy a plan of spmd-auto-shard's chose: per
# factor of its op rule (`op_rules.OpRule`, factors in the rule's order), the
# mesh axes the per-device op runs it over, major first, as an array of arrays
# of axis names.  The partitioner then runs the op so, wherever its operands
# are and its result is wanted, rather than by the bytes around the op alone:
# a way that moves less there may hold what the plan turned down for its
# memory budget (a weight gathered at the start and held to the backward, a
# sum made whole on every device).
FACTOR_AXES = "spmd.factor_axes"


@dataclasses.dataclass(frozen=True)
class OpenDims:
    """The dims propagation may split further, and the axes it may not use there."""

    dims: frozenset[int] = frozenset()
    replicated: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.dims)

    def text(self) -> str:
        dims = ",".join(str(d) for d in sorted(self.dims))
        return f"{dims}/{','.join(self.replicated)}" if self.dims and self.replicated else dims


def open_dims_attr(open_dims: OpenDims, context: ir.Context) -> ir.Attribute:
    """The `OPEN_DIMS` note for `open_dims`."""
    return ir.StringAttr.get(open_dims.text(), context)


def _priorities_text(priorities: dict[int, int]) -> str:
    return ",".join(f"{d}:{p}" for d, p in sorted(priorities.items()))


def _note_of(attr: ir.Attribute, position: int) -> str:
    notes = ir.StringAttr(attr).value.split(";")
    return notes[position] if position < len(notes) else ""


def read_open_dims(attr: ir.Attribute | None, position: int = 0) -> OpenDims:
    """What an `OPEN_DIMS` note says (for an op's result #`position`)."""
    if attr is None:
        return OpenDims()
    dims, _, replicated = _note_of(attr, position).partition("/")
    return OpenDims(frozenset(int(d) for d in dims.split(",") if d),
                    tuple(a for a in replicated.split(",") if a))


def read_priorities(attr: ir.Attribute | None, position: int = 0) -> dict[int, int]:
    """dim -> priority, from a `PRIORITIES` note (for an op's result #`position`)."""
    if attr is None:
        return {}
    pairs = (item.split(":") for item in _note_of(attr, position).split(",") if item)
    return {int(d): int(p) for d, p in pairs}


SDY_SHARDING = "sdy.sharding"
NUM_PARTITIONS = "mhlo.num_partitions"
MESH_ATTR = "spmd.mesh"
RESULT_INFO = "jax.result_info"
FULL_TO_SHARD = "SPMDFullToShardShape"
SHARD_TO_FULL = "SPMDShardToFullShape"
SHARDING_TARGET = "Sharding"


def is_manual_boundary(op: ir.Operation) -> bool:
    """Whether `op` enters or leaves a manual region in GSPMD's spelling:
    ``custom_call @SPMDFullToShardShape`` (its result is each device's own
    block, manual) or ``@SPMDShardToFullShape`` (the blocks made one global
    value again)."""
    return (op.name == "stablehlo.custom_call"
            and ir.StringAttr(op.attributes["call_target_name"]).value in (FULL_TO_SHARD,
                                                                           SHARD_TO_FULL))


def is_sharding_constraint(op: ir.Operation) -> bool:
    """Whether `op` only pins its operand's sharding: a ``custom_call
    @Sharding`` (XLA's spelling) or an ``sdy.sharding_constraint``."""
    name = op.name
    if name == "sdy.sharding_constraint":
        return True
    return (name == "stablehlo.custom_call"
            and ir.StringAttr(op.attributes["call_target_name"]).value == SHARDING_TARGET)


# --------------------------------------------------------------------- mesh

def mesh_attr_text(mesh: Mesh, sdy_axes: bool = False) -> str:
    """The mesh as an ``#sdy.mesh`` attribute: with `sdy_axes`, as Shardy
    declares it (split axes merged back: `mesh.sdy_mesh_axes`), else with
    every part as an axis of its own (the module's own ``spmd.mesh``)."""
    pairs = sdy_mesh_axes(mesh) if sdy_axes else zip(mesh.axis_names, mesh.mesh_shape)
    axes = ", ".join(f'"{n}"={s}' for n, s in pairs)
    ids = "" if mesh.is_iota else f", device_ids=[{', '.join(map(str, mesh.device_ids))}]"
    return f"#sdy.mesh<[{axes}]{ids}>"


def sdy_sharding_text(sharding: Sharding, mesh_name: str = "mesh") -> str:
    """Shardy's spelling of `sharding`, as JAX lowers it for a mesh named `mesh_name`.

    Open dimensions print as ``{"x", ?}``; a maximal sharding refers to a
    ``maximal_mesh_<device>`` mesh, as JAX names the one-device meshes it
    declares for them.  Manual axes have no place in a tensor sharding (Shardy
    puts them on ``sdy.manual_computation``), so they are refused.
    """
    if sharding.manual:
        raise ShardingError("manual axes cannot be written as an sdy tensor sharding")
    if sharding.is_maximal:
        return f"#sdy.sharding<@maximal_mesh_{sharding.maximal_device}, []>"  # no dims, as JAX

    mesh = sharding.mesh

    def dimension(dim: int, axes: tuple[str, ...]) -> str:
        names = sdy_axis_refs(mesh, axes) + (["?"] if dim in sharding.open_dims else [])
        return "{" + ", ".join(names) + "}"

    dims = ", ".join(dimension(d, axes) for d, axes in enumerate(sharding.dim_axes))
    unreduced = ""
    if sharding.unreduced:
        unreduced = ", unreduced={" + ", ".join(sdy_axis_refs(mesh, sharding.unreduced)) + "}"
    return f"#sdy.sharding<@{mesh_name}, [{dims}]{unreduced}>"


def mesh_from_attr(attr: ir.Attribute) -> Mesh:
    mesh_attr = sdy.MeshAttr(attr)
    axes = [(sdy.MeshAxisAttr(a).name, sdy.MeshAxisAttr(a).size) for a in mesh_attr.axes]
    device_ids = list(mesh_attr.device_ids) or None
    if not axes and device_ids and len(device_ids) == 1:
        raise ShardingError("a maximal sdy mesh has no axes to build a device mesh from")
    return Mesh.from_axes(axes, device_ids)


def read_mesh(module: ir.Operation) -> Mesh | None:
    if MESH_ATTR not in module.attributes:
        return None
    return mesh_from_attr(module.attributes[MESH_ATTR])


def write_mesh(module: ir.Operation, mesh: Mesh) -> None:
    module.attributes[MESH_ATTR] = cached_attr(mesh_attr_text(mesh), module.context)
    module.attributes[NUM_PARTITIONS] = ir.IntegerAttr.get(
        ir.IntegerType.get_signless(32, module.context), mesh.size)


def num_partitions(module: ir.Operation) -> int | None:
    if NUM_PARTITIONS not in module.attributes:
        return None
    return ir.IntegerAttr(module.attributes[NUM_PARTITIONS]).value


# ---------------------------------------------------------------- shardings

@functools.lru_cache(maxsize=None)
def sharding_text(sharding: Sharding) -> str:
    return format_hlo_sharding(sharding.to_hlo())


def sharding_attr(sharding: Sharding | HloSharding, context: ir.Context | None = None) -> ir.Attribute:
    text = sharding_text(sharding) if isinstance(sharding, Sharding) else format_hlo_sharding(sharding)
    return cached_attr(_quote(text), context)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclasses.dataclass
class ShardedValue:
    """One place a sharding is (or may be) attached: an argument, a result or an op."""

    kind: str                 # "argument" | "result" | "op"
    owner: ir.Operation       # the func.func for arguments/results, else the op itself
    index: int
    name: str | None          # pytree path for arguments/results exported by JAX
    location: ir.Location
    type: ir.Type

    @property
    def rank(self) -> int | None:
        shaped = self.type
        return shaped.rank if isinstance(shaped, ir.ShapedType) and shaped.has_rank else None

    def describe(self) -> str:
        label = f" {self.name!r}" if self.name else ""
        return f"{self.kind} #{self.index}{label}" if self.kind != "op" else f"op '{self.owner.name}'"

    # Attribute access on function arguments/results goes through arg_attrs /
    # res_attrs arrays of dictionaries; for ops it is the op's own dictionary.
    def get(self, attr_name: str) -> ir.Attribute | None:
        if self.kind == "op":
            return self.owner.attributes[attr_name] if attr_name in self.owner.attributes else None
        entries = _dict_entries(self.owner, self._array_name(), self.index)
        return entries.get(attr_name)

    def set(self, attr_name: str, value: ir.Attribute | None) -> None:
        """Set (or, with None, remove) one attribute; use `set_attrs` for many."""
        set_attrs([(self, attr_name, value)])

    def _array_name(self) -> str:
        return "arg_attrs" if self.kind == "argument" else "res_attrs"


def functions(module: ir.Operation) -> list[ir.Operation]:
    return [op.operation for op in module.regions[0].blocks[0].operations
            if op.operation.name == "func.func"]


def is_private(func: ir.Operation) -> bool:
    return ("sym_visibility" in func.attributes
            and ir.StringAttr(func.attributes["sym_visibility"]).value == "private")


def is_entry(func: ir.Operation) -> bool:
    """Whether `func` is an entry point, whose boundary is what a caller
    passes and gets back: a public function, or, in a module with none, its
    @main (XLA runs the entry computation whatever its visibility, and a
    converter may leave every function private)."""
    if not is_private(func):
        return True
    if ir.StringAttr(func.attributes["sym_name"]).value != "main":
        return False
    return all(is_private(f) for f in functions(func.parent))


def function_values(func: ir.Operation) -> Iterator[ShardedValue]:
    """The arguments then the results of `func`, named the way JAX names them."""
    function_type = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    has_body = bool(func.regions[0].blocks)
    arguments = list(func.regions[0].blocks[0].arguments) if has_body else []
    for index, arg_type in enumerate(function_type.inputs):
        location = arguments[index].location if has_body else func.location
        yield ShardedValue("argument", func, index, location_name(location), location, arg_type)
    return_location = func.location
    if has_body:
        terminator = func.regions[0].blocks[0].operations[
            len(func.regions[0].blocks[0].operations) - 1]
        return_location = terminator.location
    for index, result_type in enumerate(function_type.results):
        value = ShardedValue("result", func, index, None, return_location, result_type)
        info = value.get(RESULT_INFO)
        value.name = ir.StringAttr(info).value if info is not None else None
        yield value


def _dict_entries(func: ir.Operation, array_name: str, index: int) -> dict[str, ir.Attribute]:
    if array_name not in func.attributes:
        return {}
    entry = ir.ArrayAttr(func.attributes[array_name])[index]
    dictionary = ir.DictAttr(entry)
    return {named.name: named.attr for named in dictionary}


def set_attrs(updates: Iterable[tuple[ShardedValue, str, ir.Attribute | None]]) -> None:
    """Apply attribute updates (None removes), rewriting each function's
    ``arg_attrs``/``res_attrs`` array once however many of its values change:
    rebuilding the array per value would make annotating n arguments O(n^2)."""
    per_array: dict[tuple[int, str], tuple[ir.Operation, dict[int, dict[str, ir.Attribute | None]]]] = {}
    for value, attr_name, attr in updates:
        if value.kind == "op":
            if attr is not None:
                value.owner.attributes[attr_name] = attr
            elif attr_name in value.owner.attributes:
                del value.owner.attributes[attr_name]
            continue
        key = (id(value.owner), value._array_name())
        _, changes = per_array.setdefault(key, (value.owner, {}))
        changes.setdefault(value.index, {})[attr_name] = attr
    for (_, array_name), (func, changes) in per_array.items():
        _rewrite_dict_array(func, array_name, changes)


def _rewrite_dict_array(func: ir.Operation, array_name: str,
                        changes: dict[int, dict[str, ir.Attribute | None]]) -> None:
    function_type = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    count = len(function_type.inputs if array_name == "arg_attrs" else function_type.results)
    context = func.context
    if array_name in func.attributes:
        dictionaries = list(ir.ArrayAttr(func.attributes[array_name]))
    else:
        dictionaries = [ir.DictAttr.get({}, context)] * count
    for index, entry_changes in changes.items():
        entries = {named.name: named.attr for named in ir.DictAttr(dictionaries[index])}
        for attr_name, attr in entry_changes.items():
            if attr is None:
                entries.pop(attr_name, None)
            else:
                entries[attr_name] = attr
        dictionaries[index] = ir.DictAttr.get(entries, context)
    func.attributes[array_name] = ir.ArrayAttr.get(dictionaries, context)


def read_hlo(value: ShardedValue) -> HloSharding | None:
    """The value's ``mhlo.sharding``, parsed; errors are located at the value."""
    attr = value.get(MHLO_SHARDING)
    if attr is None:
        return None
    if not isinstance(attr, ir.StringAttr):
        raise _located(value, f"{value.describe()}: {MHLO_SHARDING} must be a string, got {attr}")
    text = ir.StringAttr(attr).value
    try:
        return _parse_cached(text)
    except ShardingSyntaxError as error:
        column = f" at column {error.column}" if error.column else ""
        raise _located(value, f"{value.describe()}: invalid {MHLO_SHARDING} {text!r}{column}: "
                              f"{error.message}") from None


@functools.lru_cache(maxsize=4096)
def _parse_cached(text: str) -> HloSharding:
    return parse_hlo_sharding(text)  # errors are raised, not cached


def _located(value: ShardedValue, message: str) -> ShardingError:
    return ShardingError(message, source_position(value.location))


def all_sharded_values(module: ir.Operation) -> Iterator[ShardedValue]:
    """Every function argument and result, then every op carrying an ``mhlo.sharding``."""
    for func in functions(module):
        yield from function_values(func)
    yield from _ops_with(module, MHLO_SHARDING)


def _ops_with(module: ir.Operation, attr_name: str) -> Iterator[ShardedValue]:
    ops = []

    def visit(op):
        if attr_name in op.attributes and op.name != "func.func":
            ops.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    for op in ops:
        result_type = op.results[0].type if len(op.results) == 1 else ir.NoneType.get(op.context)
        yield ShardedValue("op", op, 0, None, op.location, result_type)


def module_mesh(module: ir.Operation) -> Mesh | None:
    """The module's mesh: `spmd.mesh` if set, else one inferred from its tile assignments."""
    mesh = read_mesh(module)
    if mesh is not None:
        _check_named_devices(module, mesh.size)
        return mesh
    count, shardings, weights = _checked_shardings(module)
    if not any(_has_tiles(h) for h in shardings):
        return Mesh.from_axes([("axis_0", count)]) if count and count > 1 else None
    return infer_mesh(shardings, count, weights)


def module_device_count(module: ir.Operation) -> int | None:
    """How many devices the module's mesh, shardings or `mhlo.num_partitions`
    say it runs on (None when nothing says more than one), after the same checks as
    `module_mesh`, without inferring a mesh: a caller that brings its own
    mesh needs only the count to agree."""
    mesh = read_mesh(module)
    if mesh is not None:
        _check_named_devices(module, mesh.size)
        return mesh.size
    count, shardings, _ = _checked_shardings(module)
    tiled = [element.tile.num_devices for h in shardings
             for element in (h.elements if h.kind == "tuple" else (h,)) if element.kind == "tiled"]
    if tiled:
        return tiled[0]
    return count if count and count > 1 else None  # 1: JAX's single-device export


def _checked_shardings(module: ir.Operation):
    """(num_partitions, every HloSharding in the module, the bytes of each
    one's value), each tiled one's device count checked against the
    module's and the first one's."""
    count = num_partitions(module)
    shardings, weights, first_tiled = [], [], None
    for value in all_sharded_values(module):
        hlo = read_hlo(value)
        if hlo is None:
            continue
        shardings.append(hlo)
        weights.append(tensor_bytes(value.type) if isinstance(value.type, ir.RankedTensorType)
                       else 1)
        for element in hlo.elements if hlo.kind == "tuple" else (hlo,):
            if element.kind == "tiled":
                _check_device_count(value, element, count, first_tiled)
                first_tiled = first_tiled or (value, element.tile.num_devices)
    return count, shardings, weights


def _check_named_devices(module: ir.Operation, size: int) -> None:
    """Explicit device lists of the mesh's size must name its devices 0..size-1;
    reading one that names others as mesh axes would index past the mesh."""
    for value in all_sharded_values(module):
        hlo = read_hlo(value)
        for element in () if hlo is None else hlo.elements if hlo.kind == "tuple" else (hlo,):
            if element.kind == "tiled" and element.tile.num_devices == size:
                _check_device_count(value, element, size, None)


def _check_device_count(value: ShardedValue, tiled: HloSharding, count: int | None,
                        first: tuple[ShardedValue, int] | None) -> None:
    """Device counts checked per value, so that the error points at the value
    that disagrees (the mesh inference that follows sees only the set of counts)."""
    devices = tiled.tile.num_devices
    text = ir.StringAttr(value.get(MHLO_SHARDING)).value
    what = f"{value.describe()}: {MHLO_SHARDING} {text!r}"
    if count is not None and devices != count:
        raise _located(value, f"{what} uses {devices} devices but the module says "
                              f"{NUM_PARTITIONS} = {count}")
    if count is None and first is not None and devices != first[1]:
        raise _located(value, f"{what} uses {devices} devices but {first[0].describe()} "
                              f"uses {first[1]}")
    if not tiled.tile.is_iota:
        # The parser has refused negative and repeated ids; a list of n
        # distinct ids that is not 0..n-1 names a device the module lacks.
        outside = [int(d) for d in tiled.tile.device_array().reshape(-1) if d >= devices]
        if outside:
            raise _located(value, f"{what} names device {outside[0]} but the module has "
                                  f"devices 0 to {devices - 1}")


# ------------------------------------------------------------ the one entry
#
# Every pass and API call that reads a module's mesh goes through
# `checked_mesh`: one reading of which mesh the module is on (its own
# ``spmd.mesh``, a mesh the caller gives, or one inferred from its device
# lists) and one check that every sharding in it reads on that mesh, the way
# propagation and the partitioner read them (any device order, as the same
# blocks in the mesh's order).  So the API and the CLI, and every pass of a
# pipeline, accept and refuse the same modules.  Within one pipeline run
# (`checking_once`) the answer is kept until a pass that writes shardings
# runs (`forget_checks`), so a pipeline checks a module once per such pass,
# not once per question asked of it.

_CHECKED: contextvars.ContextVar[dict | None] = contextvars.ContextVar("checked_meshes",
                                                                       default=None)


@contextlib.contextmanager
def checking_once() -> Iterator[None]:
    """Keep `checked_mesh`'s answers for the duration (one pipeline run)."""
    token = _CHECKED.set({})
    try:
        yield
    finally:
        _CHECKED.reset(token)


def forget_checks() -> None:
    """Shardings may have changed: the next `checked_mesh` checks again."""
    kept = _CHECKED.get()
    if kept is not None:
        kept.clear()


def checked_mesh(module: ir.Operation, given: Mesh | None = None) -> Mesh | None:
    """The mesh `module`'s shardings are on, after checking every one of them.

    `given` (a caller's mesh, e.g. the rules') is taken as it is where the
    module names none: inferring one from the device lists could fail, or
    differ, where the given one fits; only the device counts must agree.
    None when nothing says the module runs on more than one device.  Raises
    a located `ShardingError` at the first value whose sharding does not
    read on the mesh."""
    kept = _CHECKED.get()
    key = (module, given)
    if kept is not None and key in kept:
        return kept[key]
    mesh = _mesh_of(module, given)
    if mesh is not None:
        _check_shardings(module, mesh)
    if kept is not None:
        kept[key] = mesh
    return mesh


def _mesh_of(module: ir.Operation, given: Mesh | None) -> Mesh | None:
    own = read_mesh(module)
    if given is None:
        return module_mesh(module) if own is None else _named(module, own)
    partitions = num_partitions(module)
    if partitions not in (None, 1, given.size):
        raise ShardingError(f"the mesh [{given.describe_axes()}] has {given.size} devices but "
                            f"the module says {NUM_PARTITIONS} = {partitions}",
                            source_position(module.location))
    count = module_device_count(module)
    if count is not None and count != given.size:
        raise ShardingError(f"the mesh [{given.describe_axes()}] has {given.size} devices but "
                            f"the module's existing shardings use {count}",
                            source_position(module.location))
    return given


def _named(module: ir.Operation, mesh: Mesh) -> Mesh:
    _check_named_devices(module, mesh.size)
    return mesh


def _check_shardings(module: ir.Operation, mesh: Mesh) -> None:
    for value in all_sharded_values(module):
        hlo = read_hlo(value)
        if hlo is None or hlo.kind in ("tuple", "unknown") or value.rank is None:
            continue
        if hlo.kind == "tiled" and has_dynamic_shape(value):
            raise dynamic_shape_error(value)
        try:
            Sharding.from_hlo(hlo, mesh, value.rank, any_order=True)
        except ShardingError as error:
            raise _located(value, f"{_label(value)}: {error.message}") from None


def has_dynamic_shape(value: ShardedValue) -> bool:
    value_type = value.type
    return (isinstance(value_type, ir.ShapedType) and value_type.has_rank
            and not value_type.has_static_shape)


def dynamic_shape_error(value: ShardedValue) -> ShardingError:
    """Per-device shapes are global shapes divided by the tile: a '?' cannot
    be divided, so a split dynamic tensor is refused at the value, rather
    than by a later pass that would not know which input caused it."""
    return _located(value, f"{_label(value)} has a dynamic shape ({value.type}); "
                           "stablehlo-spmd partitions static shapes only")


def _label(value: ShardedValue) -> str:
    """`value.describe()`, with the function it belongs to: a module's
    private functions have arguments #0 too."""
    if value.kind == "op":
        return value.describe()
    return f"{value.describe()} of @{ir.StringAttr(value.owner.attributes['sym_name']).value}"


def _has_tiles(sharding: HloSharding) -> bool:
    if sharding.kind == "tuple":
        return any(_has_tiles(e) for e in sharding.elements)
    return sharding.kind == "tiled"


# ------------------------------------------------------------ Shardy input

def import_shardy(module: ir.Operation, lower_manual: bool = True) -> Mesh | None:
    """Rewrite Shardy's mesh, shardings and constraints into ``mhlo.sharding`` form.

    Returns the imported mesh (None when the module has no ``sdy.mesh``, or
    uses several).  A module may use several meshes over the same devices:
    each sharding is then the device list its own mesh gives it, and the
    module's mesh is inferred from them all.  The single-device meshes JAX
    uses for maximal shardings and the empty mesh ``<[]>`` (a sharding on it
    is replicated) are meshes too; meshes of different device counts are
    refused; a declared mesh nothing refers to is dropped, as Shardy's own
    clean-up drops it.  Manual regions are written in GSPMD's spelling
    (`_lower_manual_computations`) unless `lower_manual` is False (Shardy's
    engine reads them itself).
    """
    meshes: dict[str, Mesh | int | None] = {}
    mesh_ops = []
    for op in module.regions[0].blocks[0].operations:
        if op.operation.name == "sdy.mesh":
            name = ir.StringAttr(op.attributes["sym_name"]).value
            meshes[name] = _mesh_or_device(op.attributes["mesh"])
            mesh_ops.append(op.operation)
    if meshes:
        _list_replica_groups(module, meshes)
    if not meshes and not _uses_shardy(module):
        return None
    full = _full_meshes(mesh_ops, meshes, _referenced_meshes(module, meshes))
    if len({m.size for m in full}) > 1:
        raise ShardingError(
            "the module's shardings use sdy meshes of different device counts "
            f"({', '.join(f'{m} on {m.size}' for m in full)}); one program runs on one set "
            "of devices", list(full.values())[1])
    if len(full) > 1:
        # Meshes over the same devices: each sharding becomes the device
        # list its own mesh gives it, and the module's mesh is inferred from
        # them all (`tile_axes.infer_mesh`), as for XLA's own shardings.
        mesh = None
    elif full:
        mesh = next(iter(full))
    else:
        # No sharding names an axis: every one is replicated, on whichever
        # mesh it refers to first (else the one the module declares).
        referred = _full_meshes(mesh_ops, meshes, _referenced_meshes(module, meshes, True))
        mesh = next(iter(referred or _declared_mesh(mesh_ops, meshes)), None)
    if mesh is not None:
        # Axes that shardings name sub-axes of are split into parts there.
        refined = split_axes(mesh, _sub_axis_cuts(module, mesh))
        meshes = {name: refined if found == mesh else found for name, found in meshes.items()}
        mesh = refined

    updates = []
    for value in all_values_with(module, SDY_SHARDING):
        attr = value.get(SDY_SHARDING)
        if value.kind == "op":
            per_value = sdy.TensorShardingPerValueAttr(attr)
            converted = [_from_sdy(s, meshes, mesh, value) for s in per_value.shardings]
            elements = [hlo for hlo, _, _ in converted]
            hlo = elements[0] if len(elements) == 1 else HloSharding.tuple_of(elements)
            open_notes = [open_dims.text() for _, open_dims, _ in converted]
            priority_notes = [_priorities_text(p) for _, _, p in converted]
        else:
            hlo, open_dims, priorities = _from_sdy(attr, meshes, mesh, value)
            open_notes, priority_notes = [open_dims.text()], \
                [_priorities_text(priorities)]
        for name, notes in ((OPEN_DIMS, open_notes), (PRIORITIES, priority_notes)):
            # A function's argument or result split unevenly keeps its
            # open-dims note even when every dim is closed: it says the
            # sharding is Shardy's, which propagation evens out at an entry
            # point (`Sharding.evenly_dividing`), where XLA's is kept as it is.
            if any(notes) or (name == OPEN_DIMS and value.kind != "op"
                              and _splits_unevenly(hlo, value.type)):
                updates.append((value, name, ir.StringAttr.get(";".join(notes), module.context)))
        updates.append((value, MHLO_SHARDING, sharding_attr(hlo, module.context)))
        updates.append((value, SDY_SHARDING, None))
    set_attrs(updates)

    for op in _sdy_constraints(module):
        _replace_sdy_data_op(op, meshes, mesh)
    if lower_manual:
        _lower_manual_computations(module, meshes, mesh)
    for op in mesh_ops:
        op.erase()
    if mesh is not None:
        write_mesh(module, mesh)
    return mesh


def _splits_unevenly(hlo: HloSharding, value_type: ir.Type) -> bool:
    if not hlo.is_tiled or not isinstance(value_type, ir.RankedTensorType):
        return False
    return any(size % ways for size, ways in zip(value_type.shape, hlo.tile_shape))


def export_propagation_controls(module: ir.Operation) -> None:
    """What Shardy's export leaves of its propagation controls once propagation
    is over: a sharding group goes, and a barrier becomes the constraint its
    result's sharding (written by propagation) is."""
    for op in ops_named(module, ("sdy.sharding_group", "sdy.propagation_barrier")):
        if op.name == "sdy.propagation_barrier":
            with ir.InsertionPoint(op), op.location:
                call = stablehlo.CustomCallOp([op.results[0].type], [op.operands[0]],
                                              SHARDING_TARGET)
            call.operation.attributes[MHLO_SHARDING] = op.attributes[MHLO_SHARDING]
            op.results[0].replace_all_uses_with(call.results[0])
        op.erase()


def _lower_manual_computations(module: ir.Operation, meshes, mesh: Mesh | None) -> None:
    """Rewrite each ``sdy.manual_computation`` (what ``jax.shard_map``
    lowers to) in GSPMD's spelling, as XLA's Shardy export does: each
    operand pinned to its in-sharding and taken through
    ``@SPMDFullToShardShape`` to the body's per-device type, the body inlined
    with its values manual over the region's axes, and each returned value
    taken through ``@SPMDShardToFullShape`` to its out-sharding.  One
    spelling then serves both inputs: only free axes cross the edges, and
    the partitioner leaves the body's manual axes alone
    (`partitioning.manual`).  Inner regions go first (the walk is
    post-order), so an outer one adds its axes to theirs."""
    clones: dict[tuple[str, tuple[str, ...]], str] = {}
    for op in ops_named(module, ("sdy.manual_computation",)):
        _lower_manual_computation(op.operation, module, meshes, mesh, clones)


def _manual_axes_of(op: ir.Operation) -> tuple[str, ...]:
    return tuple(re.findall(r'"([^"]+)"', str(op.attributes["manual_axes"])))


def _lower_manual_computation(op: ir.Operation, module: ir.Operation, meshes,
                              mesh: Mesh | None,
                              clones: dict[tuple[str, tuple[str, ...]], str]) -> None:
    value = ShardedValue("op", op, 0, None, op.location, None)
    if mesh is None:
        raise _located(value, "sdy.manual_computation needs a mesh")
    own = _manual_axes_of(op)
    enclosing: tuple[str, ...] = ()
    parent = op.parent
    while parent is not None and parent.name != "builtin.module":
        if parent.name == "sdy.manual_computation":
            enclosing += _manual_axes_of(parent)
        parent = parent.parent
    inside = enclosing + own

    def layouts(name: str) -> list[tuple[Sharding, OpenDims]]:
        per_value = sdy.TensorShardingPerValueAttr(op.attributes[name])
        found = []
        for attr in per_value.shardings:
            hlo, open_dims, _ = _from_sdy(attr, meshes, mesh, value)
            rank = len(sdy.TensorShardingAttr(attr).dimension_shardings)
            found.append((Sharding.from_hlo(hlo, mesh, rank, any_order=True), open_dims))
        return found

    # Open dims (``{"x", ?}``: what shard_map writes for the axes it leaves
    # free) stay open on both sides of each edge, so propagation splits the
    # body over the free axes as it would the code around it.
    context = op.context
    body = op.regions[0].blocks[0]
    with ir.InsertionPoint(op), op.location:
        for argument, (outer, open_dims), operand in zip(body.arguments,
                                                         layouts("in_shardings"), op.operands):
            pinned = _custom_call(SHARDING_TARGET, operand, operand.type,
                                  outer.in_manual(enclosing), open_dims, context)
            local = _custom_call(FULL_TO_SHARD, pinned, argument.type, outer.in_manual(inside),
                                 open_dims, context)
            argument.replace_all_uses_with(local)
        operations = list(body.operations)
        for inner in operations[:-1]:
            inner.operation.move_before(op)
            _add_manual_axes(inner.operation, inside, mesh)
            _call_manual_copies(inner.operation, module, inside, mesh, clones)
        returned = operations[-1].operation
        for result, (outer, open_dims), local in zip(op.results, layouts("out_shardings"),
                                                     list(returned.operands)):
            pinned = _custom_call(SHARDING_TARGET, local, local.type, outer.in_manual(inside),
                                  open_dims, context)
            result.replace_all_uses_with(_custom_call(SHARD_TO_FULL, pinned, result.type,
                                                      outer.in_manual(enclosing), open_dims,
                                                      context))
    op.erase()


def _call_manual_copies(op: ir.Operation, module: ir.Operation, manual: tuple[str, ...],
                        mesh: Mesh, clones: dict[tuple[str, tuple[str, ...]], str]) -> None:
    """Make the calls in `op` (moved out of a body manual over `manual`)
    call a copy of their callee made for that region, and so on down.  A
    function is one set of values with one sharding each: the same function
    called from manual code and from the code around it would otherwise
    make the code around it manual too."""
    for call in ops_named(op, ("func.call",)):
        callee = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
        key = (callee, manual)
        if key not in clones:
            original = next(f for f in functions(module)
                            if ir.StringAttr(f.attributes["sym_name"]).value == callee)
            copy = original.clone(ip=ir.InsertionPoint(original))
            taken = {ir.StringAttr(f.attributes["sym_name"]).value for f in functions(module)}
            name = f"{callee}_manual_{'_'.join(manual)}"
            while name in taken:
                name += "_"
            copy.attributes["sym_name"] = ir.StringAttr.get(name, op.context)
            clones[key] = name
            _add_manual_axes(copy, manual, mesh)
            _call_manual_copies(copy, module, manual, mesh, clones)
        call.attributes["callee"] = ir.FlatSymbolRefAttr.get(clones[key], op.context)


def _custom_call(target: str, operand: ir.Value, result_type: ir.Type, sharding: Sharding,
                 open_dims: OpenDims, context: ir.Context) -> ir.Value:
    call = stablehlo.CustomCallOp([result_type], [operand], target)
    call.operation.attributes[MHLO_SHARDING] = sharding_attr(sharding, context)
    if open_dims:
        call.operation.attributes[OPEN_DIMS] = open_dims_attr(open_dims, context)
    return call.results[0]


def _add_manual_axes(op: ir.Operation, manual: tuple[str, ...], mesh: Mesh) -> None:
    """Make the shardings of `op` (moved out of a manual body) and of the ops
    nested in it say that they are manual over `manual` too."""
    def visit(inner):
        if MHLO_SHARDING not in inner.attributes:
            return ir.WalkResult.ADVANCE
        hlo = _parse_cached(ir.StringAttr(inner.attributes[MHLO_SHARDING]).value)
        elements = hlo.elements if hlo.kind == "tuple" else (hlo,)
        rewritten = []
        for element, result in zip(elements, inner.results):
            if element.kind in ("unknown", "maximal") or \
                    not isinstance(result.type, ir.RankedTensorType):
                rewritten.append(element)
                continue
            sharding = Sharding.from_hlo(element, mesh, ir.RankedTensorType(result.type).rank)
            rewritten.append(sharding.in_manual(
                tuple(set(sharding.manual) | set(manual))).to_hlo())
        hlo = HloSharding.tuple_of(rewritten) if hlo.kind == "tuple" else rewritten[0]
        inner.attributes[MHLO_SHARDING] = sharding_attr(hlo, inner.context)
        return ir.WalkResult.ADVANCE

    op.walk(visit)


def _declared_mesh(mesh_ops, meshes) -> dict[Mesh, ir.Location]:
    """The mesh of a module whose shardings name none: the one full mesh it
    declares, else one over the devices its maximal meshes name (a maximal
    mesh is one more mesh over the same devices)."""
    full = _full_meshes(mesh_ops, meshes, set(meshes))
    if len(full) == 1:
        return full
    devices = [m for m in meshes.values() if isinstance(m, int)]
    if not full and devices:
        return {Mesh.from_axes([("devices", max(devices) + 1)]): mesh_ops[0].location}
    return {}


def _full_meshes(mesh_ops, meshes, names: set[str]) -> dict[Mesh, ir.Location]:
    """The distinct meshes with axes among those declared as `names`, each
    with where it is first declared."""
    full: dict[Mesh, ir.Location] = {}
    for op in mesh_ops:
        name = ir.StringAttr(op.attributes["sym_name"]).value
        if isinstance(meshes[name], Mesh) and name in names:
            full.setdefault(meshes[name], op.location)
    return full


def _referenced_meshes(module: ir.Operation, meshes, any_use: bool = False) -> set[str]:
    """The names of the declared meshes whose axes some sharding in `module`
    names (or that a manual computation works over; with `any_use`, that
    any sharding refers to).  A sharding that names no axis is replicated
    whatever its mesh, as one on the empty mesh is: Shardy's suite puts such
    shardings on a mesh of another size beside the one in use, and they do
    not make the module two meshes."""
    used: set[str] = set()
    pattern = {name: re.compile(re.escape(f"@{name},") + r' \[([^\]]*)\]'
                                r'(?:, (?:un)?reduced=\{([^}]*)\})?') for name in meshes}

    def note(printed: str, every: bool = False) -> None:
        for name, found in pattern.items():
            for dims, unreduced in found.findall(printed):
                if every or any_use or '"' in dims or '"' in unreduced:
                    used.add(name)

    # Sharding attributes nest in ops of every kind (per-value shardings,
    # constraints, manual computations): the printed attribute is the one
    # place they all show their mesh reference.
    def visit(op):
        attributes = op.attributes
        for position in range(len(attributes)):
            named = attributes[position]
            if "sharding" in named.name:
                note(str(named.attr), every=op.name == "sdy.manual_computation")
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    for func in functions(module):
        for value in function_values(func):
            attr = value.get(SDY_SHARDING)
            if attr is not None:
                note(str(attr))
    return used


def untuple_custom_calls(module: ir.Operation) -> None:
    """Give each custom call that returns an HLO tuple one result per element.

    XLA's HLO -> StableHLO converter keeps a tuple-shaped custom call (XLA's
    ``@TopK``) as one ``tuple<...>`` value that ``get_tuple_element`` ops
    read; no tensor flows out of it for propagation to follow, so it would
    run replicated.  A call whose tuple only those ops read becomes a call
    with the elements as results (the form JAX writes), and each read that
    carried a sharding becomes a ``@Sharding`` constraint of its element.
    """
    calls = []

    def visit(op):
        if op.name == "stablehlo.custom_call" and len(op.results) == 1 \
                and isinstance(op.results[0].type, ir.TupleType) \
                and all(use.owner.name == "stablehlo.get_tuple_element"
                        for use in op.results[0].uses):
            calls.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    for op in calls:
        tuple_type = ir.TupleType(op.results[0].type)
        types = [tuple_type.get_type(i) for i in range(tuple_type.num_types)]
        if any(isinstance(t, ir.TupleType) for t in types):
            continue
        with ir.InsertionPoint(op), op.location:
            call = ir.Operation.create(
                op.name, results=types, operands=list(op.operands),
                attributes={name: op.attributes[name] for name in op.attributes})
        for read in [use.owner for use in op.results[0].uses]:
            element = call.results[ir.IntegerAttr(read.attributes["index"]).value]
            if MHLO_SHARDING in read.attributes:
                with ir.InsertionPoint(read), read.location:
                    constraint = stablehlo.CustomCallOp([element.type], [element],
                                                        SHARDING_TARGET)
                constraint.operation.attributes[MHLO_SHARDING] = read.attributes[MHLO_SHARDING]
                element = constraint.results[0]
            read.results[0].replace_all_uses_with(element)
            read.erase()
        op.erase()


def _uses_shardy(module: ir.Operation) -> bool:
    return any(True for _ in all_values_with(module, SDY_SHARDING)) or bool(_sdy_constraints(module))


def all_values_with(module: ir.Operation, attr_name: str) -> Iterator[ShardedValue]:
    for func in functions(module):
        for value in function_values(func):
            if value.get(attr_name) is not None:
                yield value
    yield from _ops_with(module, attr_name)


_SDY_DATA_OPS = ("sdy.sharding_constraint", "sdy.reshard", "sdy.data_flow_edge",
                 "sdy.func_data_flow_edge", "sdy.constant")


def _sdy_constraints(module: ir.Operation) -> list[ir.Operation]:
    """Shardy's ops that only carry data: constraints, data-flow edges and
    constants."""
    return ops_named(module, _SDY_DATA_OPS)


def _replace_sdy_data_op(op: ir.Operation, meshes, mesh) -> None:
    """A constraint, a reshard, or a data-flow edge with a sharding, becomes
    XLA's ``@Sharding`` constraint (a reshard says where the layout must be,
    which is all a constraint says); an edge without one is its operand (it only
    names where a region's value flows, which spmd-propagate ties itself);
    ``sdy.constant`` (a constant Shardy keeps from folding) is a stablehlo
    constant.  As Shardy's export does."""
    if op.name == "sdy.constant":
        with ir.InsertionPoint(op), op.location:
            made = stablehlo.ConstantOp(op.attributes["value"])
        op.results[0].replace_all_uses_with(made.result)
        op.erase()
    elif "sharding" in op.attributes:
        _replace_constraint(op, meshes, mesh)
    else:
        op.results[0].replace_all_uses_with(op.operands[0])
        op.erase()


_MESH_AXES_GROUPS = re.compile(
    r"#stablehlo\.replica_group_mesh_axes<\s*mesh(?:_name)?\s*=\s*"
    r"(?P<mesh>@[\w.$-]+|#stablehlo\.mesh<.*?\]>)\s*,\s*axes\s*=\s*\[(?P<axes>.*)\]\s*>", re.S)
_INLINE_MESH_AXIS = re.compile(r'mesh_axis<name = "(?P<name>[^"]+)", size = (?P<size>\d+)>')
_GROUP_AXIS = re.compile(r'"(?P<name>[^"]+)"(?:\s*:\s*\((?P<pre>\d+)\)(?P<size>\d+)'
                         r'|, sub_axis_info = \((?P<pre2>\d+)\)(?P<size2>\d+))?')


def _list_replica_groups(module: ir.Operation, meshes: dict[str, Mesh | int | None]) -> None:
    """Collectives that name their groups by mesh axes, as newer JAX writes
    them in a shard_map body (``#stablehlo.replica_group_mesh_axes<mesh =
    @m, axes = [...]>``), get the device lists those axes make, as older
    JAX wrote them: the sdy meshes they name are gone after the import."""
    found: list[ir.Operation] = []

    def visit(op):
        if "replica_groups" in op.attributes and \
                str(op.attributes["replica_groups"]).startswith("#stablehlo.replica_group_mesh"):
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    for op in found:
        text = str(op.attributes["replica_groups"])
        parsed = _MESH_AXES_GROUPS.fullmatch(text)
        mesh = None
        if parsed is not None:
            named = parsed["mesh"]
            mesh = meshes.get(named[1:]) if named.startswith("@") else Mesh.from_axes(
                (m["name"], int(m["size"])) for m in _INLINE_MESH_AXIS.finditer(named))
        if not isinstance(mesh, Mesh):
            raise ShardingError(f"'{op.name}': cannot read its replica groups {text}", op.location)
        try:
            refs = []
            for found_axis in _GROUP_AXIS.finditer(parsed["axes"]):
                name = found_axis["name"]
                pre = int(found_axis["pre"] or found_axis["pre2"] or 1)
                size = int(found_axis["size"] or found_axis["size2"] or 0)
                refs.append((name, pre, size or mesh.axis_size(name) // pre))
            groups = _mesh_axes_groups(mesh, refs)
        except (MeshError, ValueError) as error:
            raise ShardingError(f"'{op.name}': replica groups {text}: {error}", op.location) from None
        op.attributes["replica_groups"] = ir.DenseElementsAttr.get(groups, context=op.context)


def _mesh_axes_groups(mesh: Mesh, refs: list[tuple[str, int, int]]) -> np.ndarray:
    """The device groups that vary along `refs` (axis, pre-size, size; major
    to minor), one group per coordinate of the other axes."""
    digits: list[tuple[str, int, int]] = []   # every axis cut into the parts refs name
    for name, size in zip(mesh.axis_names, mesh.mesh_shape):
        cuts = sorted({1, size} | {p for n, p, _ in refs if n == name}
                      | {p * k for n, p, k in refs if n == name})
        if cuts[-1] != size or any(size % c for c in cuts):
            raise ValueError(f"a part of axis {name!r} does not divide its size {size}")
        digits += [(name, low, high // low) for low, high in zip(cuts, cuts[1:])]
    grouped = [i for n, p, k in refs for i, (name, low, part) in enumerate(digits)
               if name == n and p <= low and low * part <= p * k]
    others = [i for i in range(len(digits)) if i not in grouped]
    devices = np.asarray(mesh.device_ids, dtype=np.int64).reshape([d[2] for d in digits])
    return np.ascontiguousarray(
        devices.transpose(others + grouped).reshape(-1, math.prod(digits[i][2] for i in grouped)))


def _mesh_or_device(attr: ir.Attribute) -> Mesh | int | None:
    """A mesh; a device for JAX's "maximal" meshes (one device, no axes); None
    for the empty mesh ``<[]>``, on which every sharding is replicated."""
    mesh_attr = sdy.MeshAttr(attr)
    device_ids = list(mesh_attr.device_ids)
    if not list(mesh_attr.axes):
        if len(device_ids) == 1:
            return device_ids[0]
        if not device_ids:
            return None
    return mesh_from_attr(attr)


def _from_sdy(attr: ir.Attribute, meshes: dict[str, Mesh | int | None], mesh: Mesh | None,
              value: ShardedValue) -> tuple[HloSharding, OpenDims, dict[int, int]]:
    """The sharding as XLA's text, its open dims (``{?}``, with the axes
    they may not take) and its dims' priorities, which that text cannot say."""
    sharding = sdy.TensorShardingAttr(attr)
    ref = sharding.mesh_or_ref
    if isinstance(ref, ir.FlatSymbolRefAttr):
        name = ir.FlatSymbolRefAttr(ref).value
        if name not in meshes:
            raise _located(value, f"sdy sharding refers to unknown mesh {ref}")
        target = meshes[name]
    else:
        target = _mesh_or_device(ref)
    if isinstance(target, int):
        return HloSharding.maximal(target), OpenDims(), {}
    dim_refs, open_dims, priorities = [], [], {}
    for dim, dim_attr in enumerate(sharding.dimension_shardings):
        dimension = sdy.DimensionShardingAttr(dim_attr)
        dim_refs.append([_axis_ref(a) for a in dimension.axes])
        if not dimension.is_closed:
            open_dims.append(dim)
        if dimension.priority is not None:
            priorities[dim] = dimension.priority
    if target is None:  # the empty mesh: no axes to split over
        if any(dim_refs):
            raise _located(value, "a sharding on the empty mesh <[]> cannot name axes")
        return HloSharding.replicated(), OpenDims(frozenset(open_dims)), {}
    try:
        dim_axes = [_mesh_axes(refs, target) for refs in dim_refs]
        unreduced = _mesh_axes([_axis_ref(a) for a in sharding.unreduced_axes], target)
        replicated_refs = [_axis_ref(a) for a in sharding.replicated_axes]
        replicated = _mesh_axes(replicated_refs, target)
    except ShardingError as error:
        raise _located(value, error.message) from None
    if unreduced is None:
        raise _located(value, "unreduced sub-axes that cut their axis differently from the "
                              "module's other sub-axes are not supported")
    if replicated is None:
        # A replicated sub-axis off the parts' boundaries: keep the open dims
        # off every part of its axis, which never splits what the user said not to.
        replicated = _mesh_axes([(axis, None, None) for axis, _, _ in replicated_refs], target)
    if any(axes is None for axes in dim_axes):
        # Sub-axes that split an axis differently from the module's others
        # (Shardy's "x":(1)2 beside "x":(3)2 on x=6): the devices each
        # block lives on, listed as XLA does.
        return _explicit_tiles(dim_refs, target), OpenDims(frozenset(open_dims), replicated), \
            priorities
    try:
        axis_sharding = Sharding(target, tuple(dim_axes), unreduced=unreduced,
                                 open_dims=frozenset(open_dims))
    except ShardingError as error:
        raise _located(value, error.message) from None
    return axis_sharding.to_hlo(), OpenDims(axis_sharding.open_dims, replicated), priorities


def _axis_ref(attr: ir.Attribute) -> tuple[str, int | None, int | None]:
    """(axis, pre-size, size) of an axis reference; None, None for a whole axis."""
    axis = sdy.AxisRefAttr(attr)
    if axis.sub_axis_info is None:
        return axis.name, None, None
    info = sdy.SubAxisInfoAttr(axis.sub_axis_info)
    return axis.name, info.pre_size, info.size


def _parts(mesh: Mesh, axis: str) -> list[tuple[str, int, int]]:
    """(part name, pre-size, size) of every part of `axis`, major first."""
    if axis in mesh.axis_names:
        return [(axis, 1, mesh.axis_size(axis))]
    return [(name, part[1], part[2]) for name in mesh.axis_names
            if (part := parse_sub_axis(name)) is not None and part[0] == axis]


def _mesh_axes(refs, mesh: Mesh) -> tuple[str, ...] | None:
    """The mesh axes (parts) the references name, major first; None where a
    sub-axis does not fall on the parts' boundaries."""
    axes: list[str] = []
    for axis, pre, size in refs:
        parts = _parts(mesh, axis)
        if not parts:
            raise ShardingError(f"unknown mesh axis {axis!r}; the mesh has "
                                f"{', '.join(n for n, _ in sdy_mesh_axes(mesh))}")
        if pre is None:
            axes += [name for name, _, _ in parts]
            continue
        taken = [(name, p, n) for name, p, n in parts if p >= pre and p * n <= pre * size]
        if math.prod(n for _, _, n in taken) != size:
            return None
        axes += [name for name, _, _ in taken]
    return tuple(axes)


def _explicit_tiles(dim_refs, mesh: Mesh) -> HloSharding:
    """The tile assignment of a sharding over (sub-)axes as a device list:
    each device's block is read off its coordinate on each named axis."""
    # Row i: the coordinate of the device at mesh position i on each axis.
    positions = np.array(np.unravel_index(np.arange(mesh.size), mesh.mesh_shape)).T
    axis_sizes = dict(sdy_mesh_axes(mesh))
    coordinates: dict[str, np.ndarray] = {}
    for axis in axis_sizes:
        value = np.zeros(mesh.size, dtype=np.int64)
        for name, _, size in _parts(mesh, axis):
            value = value * size + positions[:, mesh.axis_index(name)]
        coordinates[axis] = value
    counts, blocks = [], []
    for refs in dim_refs:
        block, count = np.zeros(mesh.size, dtype=np.int64), 1
        for axis, pre, size in refs:
            whole = axis_sizes[axis]
            pre, size = (1, whole) if pre is None else (pre, size)
            digit = (coordinates[axis] // (whole // (pre * size))) % size
            block, count = block * size + digit, count * size
        counts.append(count)
        blocks.append(block)
    flat = np.zeros(mesh.size, dtype=np.int64)
    for block, count in zip(blocks, counts):
        flat = flat * count + block
    replicas = mesh.size // math.prod(counts)
    devices = np.array(mesh.device_ids)[np.argsort(flat, kind="stable")]
    tile = TileAssignment.from_devices(devices.reshape(*counts, replicas))
    return HloSharding.tiled(tile, ("replicated",) if replicas > 1 else ())


def _sub_axis_cuts(module: ir.Operation, mesh: Mesh) -> dict[str, list[int]]:
    """Where each axis is cut by the sub-axes the module's shardings name:
    every sub-axis's pre-size and its end, kept while they divide one
    another (a sub-axis that cuts elsewhere is read as explicit tiles)."""
    found: list[tuple[str, int, int]] = []

    def visit(op):
        attributes = op.attributes
        for name in _SDY_SHARDING_ATTRS:
            if name in attributes:
                text = str(attributes[name])
                if '":(' in text:
                    found.extend((a, int(p), int(n)) for a, p, n in _SUB_AXIS_REF.findall(text))
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    for func in functions(module):
        for name in ("arg_attrs", "res_attrs"):
            if name in func.attributes:
                text = str(func.attributes[name])
                found.extend((a, int(p), int(n)) for a, p, n in _SUB_AXIS_REF.findall(text))
    cuts: dict[str, list[int]] = {}
    for axis, pre, size in found:
        if axis not in mesh.axis_names:
            continue
        chain = cuts.setdefault(axis, [1, mesh.axis_size(axis)])
        for point in (pre, pre * size):
            if point in chain:
                continue
            merged = sorted(chain + [point])
            if all(high % low == 0 for low, high in zip(merged, merged[1:])):
                chain[:] = merged
    return {axis: chain for axis, chain in cuts.items() if len(chain) > 2}


_SDY_SHARDING_ATTRS = (SDY_SHARDING, "sharding", "in_shardings", "out_shardings")
_SUB_AXIS_REF = re.compile(r'"([A-Za-z_][A-Za-z0-9_]*)":\((\d+)\)(\d+)')


def _replace_constraint(op: ir.Operation, meshes, mesh) -> None:
    value = ShardedValue("op", op, 0, None, op.location, op.results[0].type)
    hlo, open_dims, priorities = _from_sdy(op.attributes["sharding"], meshes, mesh, value)
    with ir.InsertionPoint(op), op.location:
        call = stablehlo.CustomCallOp([op.results[0].type], [op.operands[0]], SHARDING_TARGET)
        call.operation.attributes[MHLO_SHARDING] = sharding_attr(hlo, op.context)
        if open_dims:
            call.operation.attributes[OPEN_DIMS] = open_dims_attr(open_dims, op.context)
        if priorities:
            call.operation.attributes[PRIORITIES] = ir.StringAttr.get(
                _priorities_text(priorities), op.context)
    op.results[0].replace_all_uses_with(call.results[0])
    op.erase()
