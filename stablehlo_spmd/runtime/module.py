"""Reading a partitioned module: what it asks of the runtime.

`_read_module` parses the text once and keeps what compiling and calling
need: its ``mhlo.num_partitions``, its mesh, the global type and pytree name
of each argument and result of ``@main`` (`TensorInfo`), whether it donates
arguments, whether it is in Shardy's spelling, and its bytecode.  For the
single-device oracle it strips shardings, constraints and meshes first.
The errors a module or its inputs give the runtime are defined here:
`RuntimeCompileError` and `RuntimeInputError`.
"""

from __future__ import annotations

import dataclasses
import io
import re
from typing import Any

import numpy as np

from stablehlo_spmd.errors import SpmdError


class RuntimeInputError(SpmdError, ValueError):
    """Inputs that do not match the module's arguments (count, shape, dtype, npz keys)."""


class RuntimeCompileError(SpmdError, RuntimeError):
    """The module cannot be compiled or run as asked (XLA refused it, or it is unsupported)."""


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """One argument or result of ``@main``: its global type and its pytree name."""

    kind: str                 # "argument" | "result"
    index: int
    name: str | None          # loc("params['w1']") for arguments, jax.result_info for results
    shape: tuple[int, ...]
    dtype: np.dtype
    type_text: str            # "tensor<8x4xf32>"

    def describe(self) -> str:
        return f"{self.kind} #{self.index}" + (f" {self.name!r}" if self.name else "")

    @property
    def is_token(self) -> bool:
        return self.type_text == TOKEN_TYPE


TOKEN_TYPE = "!stablehlo.token"


@dataclasses.dataclass
class _ModuleInfo:
    bytecode: bytes
    num_partitions: int
    mesh: Any                 # stablehlo_spmd.mesh.Mesh | None
    arguments: tuple[TensorInfo, ...]
    results: tuple[TensorInfo, ...]
    donates: bool
    uses_shardy: bool


def _read_module(text: str, filename: str | None, single_device: bool = False) -> _ModuleInfo:
    from jaxlib.mlir import ir

    from stablehlo_spmd import ir as spmd_ir
    from stablehlo_spmd import module_shardings as ms

    with spmd_ir.make_context() as context:
        module = spmd_ir.parse_module(text, filename or "<module>", context)
        if single_device:
            _strip_partitioning(module, filename)
        main = next((f for f in ms.functions(module)
                     if ir.StringAttr(f.attributes["sym_name"]).value == "main"), None)
        if main is None or not main.regions[0].blocks:
            raise RuntimeCompileError("the module has no function @main to run", filename)
        if ms.is_private(main) and ms.is_entry(main):
            # The entry of a module whose functions are all private: XLA's
            # import looks for a public @main.
            del main.attributes["sym_visibility"]
        arguments, results, donates = [], [], False
        for value in ms.function_values(main):
            info = _tensor_info(value, filename)
            (arguments if value.kind == "argument" else results).append(info)
            if value.kind == "argument":
                donates = donates or any(value.get(a) is not None
                                         for a in ("tf.aliasing_output", "jax.buffer_donor"))
        replicas = _int_attr(module, "mhlo.num_replicas")
        if replicas not in (None, 1):
            raise RuntimeCompileError(
                f"mhlo.num_replicas = {replicas}: only partitioned (num_replicas = 1) modules run",
                filename)
        mesh = None if single_device else _module_mesh(module)
        partitions = 1 if single_device else ms.num_partitions(module)
        if partitions is None:
            partitions = mesh.size if mesh is not None else 1
        if partitions < 1:
            raise RuntimeCompileError(f"mhlo.num_partitions = {partitions} is not positive", filename)
        if mesh is not None and mesh.size != partitions:
            mesh = None  # a mesh over other devices than the partitions: use XLA's shardings
        uses_shardy = _uses_shardy(module)
        if not single_device and not uses_shardy:
            _refuse_pending_sums(module, filename)
        buffer = io.BytesIO()
        module.write_bytecode(buffer)
    return _ModuleInfo(buffer.getvalue(), partitions, mesh, tuple(arguments), tuple(results),
                       donates, uses_shardy)


def _int_attr(module, name: str) -> int | None:
    from jaxlib.mlir import ir

    return ir.IntegerAttr(module.attributes[name]).value if name in module.attributes else None


def _tensor_info(value, filename: str | None) -> TensorInfo:
    from jaxlib.mlir import ir

    label = f"{value.kind} #{value.index}" + (f" {value.name!r}" if value.name else "")
    if value.kind == "result" and str(value.type) == TOKEN_TYPE:
        # An outfeed's or a send's ordering token: nothing to hand back.
        return TensorInfo(value.kind, value.index, value.name, (), np.dtype(bool), TOKEN_TYPE)
    if not isinstance(value.type, ir.RankedTensorType) or not value.type.has_static_shape:
        raise RuntimeCompileError(
            f"{label} has type {value.type}; only statically shaped tensors can be run", filename)
    tensor = ir.RankedTensorType(value.type)
    return TensorInfo(value.kind, value.index, value.name, tuple(tensor.shape),
                      _numpy_dtype(tensor.element_type, label, filename), str(tensor))


def _numpy_dtype(element_type, label: str, filename: str | None) -> np.dtype:
    text = str(element_type)
    table = _dtype_table()
    dtype = table.get(text, table.get(text.lower()))  # (a dtype is falsy: no `or` here)
    if dtype is None:
        raise RuntimeCompileError(f"{label} has element type {text}, which has no NumPy dtype",
                                  filename)
    return dtype


_DTYPES: dict[str, np.dtype] | None = None


def _dtype_table() -> dict[str, np.dtype]:
    global _DTYPES
    if _DTYPES is None:
        import ml_dtypes  # a jax dependency: bfloat16, float8_*, int4, ...

        table = {"i1": np.dtype(bool), "f16": np.dtype(np.float16), "f32": np.dtype(np.float32),
                 "f64": np.dtype(np.float64), "complex<f32>": np.dtype(np.complex64),
                 "complex<f64>": np.dtype(np.complex128), "bf16": np.dtype(ml_dtypes.bfloat16)}
        for bits in (8, 16, 32, 64):
            table[f"i{bits}"] = table[f"si{bits}"] = np.dtype(f"int{bits}")
            table[f"ui{bits}"] = np.dtype(f"uint{bits}")
        for name in dir(ml_dtypes):
            match = re.fullmatch(r"(u?)int(\d)", name)
            # i1 is StableHLO's boolean, not ml_dtypes' 1-bit integer.
            if match and hasattr(ml_dtypes, name) and match.group(2) != "1":
                signed = "u" if match.group(1) else ""
                table[f"{signed}i{match.group(2)}"] = np.dtype(getattr(ml_dtypes, name))
                if not signed:
                    table[f"si{match.group(2)}"] = table[f"i{match.group(2)}"]
            elif re.fullmatch(r"float\d+_e\w+", name):
                # float8_e4m3fn <-> f8E4M3FN (matched lower-cased)
                table["f" + name[len("float"):].replace("_", "")] = np.dtype(getattr(ml_dtypes, name))
        _DTYPES = table
    return _DTYPES


def _module_mesh(module):
    """The module's mesh: its full ``sdy.mesh`` (preferring @mesh), ``spmd.mesh``, or inferred."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import sdy

    from stablehlo_spmd import module_shardings as ms

    meshes = {}
    for op in module.regions[0].blocks[0].operations:
        if op.operation.name == "sdy.mesh":
            attr = sdy.MeshAttr(op.attributes["mesh"])
            if list(attr.axes):
                meshes[ir.StringAttr(op.attributes["sym_name"]).value] = op.attributes["mesh"]
    try:
        if meshes:
            return ms.mesh_from_attr(meshes.get("mesh", next(iter(meshes.values()))))
        return ms.module_mesh(module)
    except SpmdError:
        return None  # shardings are then taken as XLA compiled them, without a mesh


def _uses_shardy(module) -> bool:
    """Shardy, unless the module is in the GSPMD spelling (``mhlo.sharding``, no sdy at all).

    XLA would fall back to GSPMD for such a module by itself, with a warning.
    """
    from jaxlib.mlir import ir

    seen = set()

    def visit(op):
        names = [a if isinstance(a, str) else a.name for a in op.attributes]
        texts = names + [str(op.attributes[n]) for n in ("arg_attrs", "res_attrs") if n in names]
        if op.name.startswith("sdy.") or any("sdy." in t for t in texts):
            seen.add("sdy")
            return ir.WalkResult.INTERRUPT
        if any("mhlo.sharding" in t for t in texts):
            seen.add("mhlo")
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return "sdy" in seen or "mhlo" not in seen


def _refuse_pending_sums(module, filename: str | None) -> None:
    """Refuse a GSPMD-spelled module that holds a pending partial sum (``{unreduced}``).

    XLA's GSPMD partitioner (jaxlib 0.10) reads ``{unreduced}`` but never sums
    it: a reduce over a sharded dim marked so, then a ``custom_call
    @Sharding`` to ``{replicated}``, hands back one device's partial sum,
    without a word.  Shardy sums the same value in its own spelling
    (``unreduced={"x"}``), and `spmd-partition` emits the sum itself, so the
    user is pointed to those instead of getting wrong numbers.
    """
    from jaxlib.mlir import ir

    from stablehlo_spmd import module_shardings as ms

    found = []

    def visit(op):
        if ms.MHLO_SHARDING in op.attributes and \
                "unreduced" in str(op.attributes[ms.MHLO_SHARDING]):
            found.append(op)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    if not found:
        for func in ms.functions(module):
            for value in ms.function_values(func):
                attr = value.get(ms.MHLO_SHARDING)
                if attr is not None and "unreduced" in str(attr):
                    found.append(func)
                    break
    if found:
        op = found[0]
        raise RuntimeCompileError(
            f"'{op.name}' holds a pending partial sum ('{{unreduced}}' in mhlo.sharding), which "
            "XLA's GSPMD partitioner does not sum (it would hand back one device's part); "
            "partition the module first (stablehlo-spmd-opt --spmd-partition, or "
            "stablehlo_spmd.partition), or write its shardings in Shardy's spelling",
            _position(op.location) or filename)


_PASS_THROUGH_OPS = ("sdy.sharding_constraint", "sdy.reshard", "sdy.propagation_barrier")
_PARTITIONED_OPS = ("sdy.manual_computation", "sdy.named_computation_manual")
_SHARDING_ATTRS = ("mhlo.sharding", "sdy.sharding", "sdy.sharding_rule")


def _strip_partitioning(module, filename: str | None) -> None:
    """Make an annotated single-device program run on one device: drop shardings and meshes."""
    from jaxlib.mlir import ir

    from stablehlo_spmd import module_shardings as ms

    pass_through, erase, annotated, partitioned = [], [], [], []

    def visit(op):
        name = op.name
        if name in _PARTITIONED_OPS or (
                name == "stablehlo.custom_call"
                and ir.StringAttr(op.attributes["call_target_name"]).value in (
                    "SPMDFullToShardShape", "SPMDShardToFullShape")):
            partitioned.append(op)  # (an exception raised here would come out as RuntimeError)
            return ir.WalkResult.INTERRUPT
        if name in _PASS_THROUGH_OPS or ms.is_sharding_constraint(op):
            pass_through.append(op)
        elif name in ("sdy.mesh", "sdy.sharding_group"):
            erase.append(op)
        elif name != "func.func" and any(a in op.attributes for a in _SHARDING_ATTRS):
            annotated.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    if partitioned:
        op = partitioned[0]
        raise RuntimeCompileError(
            f"the module is already partitioned ('{op.name}' at "
            f"{_position(op.location) or 'unknown location'}); "
            "run_single_device runs the original single-device program", filename)
    for op in annotated:
        for attr in _SHARDING_ATTRS:
            if attr in op.attributes:
                del op.attributes[attr]
    for op in pass_through:
        op.results[0].replace_all_uses_with(op.operands[0])
        op.erase()
    updates = [(value, attr, None) for func in ms.functions(module)
               for value in ms.function_values(func)
               for attr in (ms.MHLO_SHARDING, ms.SDY_SHARDING) if value.get(attr) is not None]
    ms.set_attrs(updates)
    for op in erase:
        op.erase()
    i32 = ir.IntegerType.get_signless(32, module.context)
    for name in ("mhlo.num_partitions", "mhlo.num_replicas"):
        module.attributes[name] = ir.IntegerAttr.get(i32, 1)
    if ms.MESH_ATTR in module.attributes:
        del module.attributes[ms.MESH_ATTR]


def _position(location) -> str | None:
    from stablehlo_spmd.ir import source_position

    return source_position(location)
