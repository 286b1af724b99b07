"""Run a partitioned module on real devices through jax's PJRT client.

    exe = compile(partitioned_text)          # num_partitions devices of jax's backend
    outputs = exe(x, params_w1)              # global NumPy / jax arrays in, global jax.Arrays out
    outputs = run(partitioned_text, [x, params_w1])        # the same, executables cached by text hash
    expected = run_single_device(original_text, [x, params_w1])   # the oracle

The module is the form JAX lowers ``shard_map`` to: ``mhlo.num_partitions = N``,
an ``sdy.mesh``, and a public ``@main`` whose arguments and results have
*global* types and shardings and whose body is a manual computation holding
the per-device program.  The ``mhlo.sharding`` spelling (``custom_call
@SPMDFullToShardShape``) runs too, through XLA's GSPMD partitioner.

How it is compiled, and why this way
------------------------------------
Three routes were weighed on jax 0.10.2:

* ``jax.export``: wrap the text in an ``Exported`` and use ``exported.call``.
  ``Exported`` has no public constructor; building one means filling private,
  date-gated fields (``_has_named_shardings``, ``_in_named_shardings``;
  ``in_shardings_hlo`` is "not used for exports created after 3/17/2026"), and
  ``call`` does not compile the text: it inlines it into a fresh ``jit``
  module behind sharding constraints, which Shardy propagates and XLA
  partitions again.  Too many moving parts between our text and the devices.
* ``pxla.UnloadedMeshExecutable.from_hlo``: gives jax's own ``MeshExecutable``
  (argument handlers, C++ fast path), but through a long private keyword
  signature that changes from release to release.
* PJRT directly (chosen): ``client.compile_and_load(module, DeviceList,
  CompileOptions)`` with ``num_partitions = N`` and SPMD partitioning on
  (Shardy for sdy modules) compiles exactly this module (as parsed, sent as
  bytecode), the way ``jax.jit`` compiles its own
  lowering (the options come from jax's ``compiler.get_compile_options``
  when it is there, as ``jit`` uses them).  The loaded executable runs with
  ``execute_sharded`` (one global ``jax.Array`` per parameter, as ``pxla``
  calls it).

A call costs what jax's own compiled call costs: a host (NumPy) input is cut
into the slices its devices hold (worked out once per argument) and handed
to jaxlib's C++ ``batched_device_put``, the transfer jax's ``jit`` makes for
a host argument; a jax array laid out otherwise moves with the public
``jax.device_put``; results are built by jax's C++ result handlers, as its
``jit`` builds them (falling back to the public
``jax.make_array_from_single_device_arrays`` where a sharding lists its
devices in another order than the executable).  What comes from ``jax._src``
is guarded, each with a fallback: ``compiler.get_compile_options``,
``sharding_impls.GSPMDSharding`` (see below), the result handlers,
``xla_bridge.backends_are_initialized`` and the C++ log level.

The layouts the runtime uses are the ones XLA compiled
(``get_parameter_shardings`` / ``get_output_shardings``), so a shard always
lands where the executable expects it, even for a result the module left
unannotated.  Each is expressed as a ``NamedSharding`` on the module's mesh
when it is one (checked slice by slice with ``devices_indices_map``);
otherwise it stays XLA's sharding (a ``GSPMDSharding``).  ``execute_sharded``
takes every argument's shards in the executable's device order, which a mesh
with ``device_ids`` out of order does not list them in: such arguments are
handed over as ``GSPMDSharding`` arrays over the executable's devices (a
wrong order crashes the process rather than raising).

Devices: logical device ``i`` of the module (its partition id: the ids in
``replica_groups``, tile assignments and ``sdy.mesh`` ``device_ids``) runs on
``devices[i]``; by default the first N devices of jax's default backend, or
of the CPU backend when the default has fewer.  On CPU, N devices need
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before jax starts its
backends: `ensure_host_devices` does that.  This module imports jax only
inside its functions, so a command line can parse the module, learn N and
ask for the devices before jax is loaded.

Inputs are checked against the module's argument types before anything runs:
count, shape and dtype must match exactly (Python scalars take the
argument's dtype); an error names the argument by index and by the pytree
path JAX wrote in its location (``loc("params['w1']")``).  Results are
described by ``jax.result_info`` when present.  When the module donates
arguments (``tf.aliasing_output``, ``jax.buffer_donor``) the caller's jax
arrays are copied first, so running never deletes them.  64-bit arguments
stay 64-bit whatever jax's x64 flag says.  An argument or result XLA split
unevenly (XLA's own layout for a dimension its shards do not divide: ceil-
sized shards, the last ones padded) is handed over as such shards: a host
value is padded and cut on the host, and a result is cut back to its shape
after the call, where jax, which holds no uneven ``jax.Array``, gathers it.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import hashlib
import io
import os
import re
import sys
import tempfile
from typing import Any, Sequence

import numpy as np

from stablehlo_spmd.errors import SpmdError

__all__ = [
    "DeviceError", "Executable", "RuntimeCompileError", "RuntimeInputError", "TensorInfo",
    "clear_cache", "compile", "ensure_host_devices", "run", "run_files", "run_single_device",
]

_FORCE_DEVICES = "--xla_force_host_platform_device_count"


class RuntimeInputError(SpmdError, ValueError):
    """Inputs that do not match the module's arguments (count, shape, dtype, npz keys)."""


class DeviceError(SpmdError, RuntimeError):
    """Not enough devices for the module, or a bad `devices` argument."""


class RuntimeCompileError(SpmdError, RuntimeError):
    """The module cannot be compiled or run as asked (XLA refused it, or it is unsupported)."""


# ------------------------------------------------------------------ the module


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


# ------------------------------------------------------------------ devices


def ensure_host_devices(n: int) -> None:
    """Make sure jax will have at least `n` devices; on CPU, ask for `n` host devices.

    Before jax's backends start (jax not imported, or imported but unused),
    this raises ``--xla_force_host_platform_device_count`` in ``XLA_FLAGS``
    (and ``jax_num_cpu_devices`` when jax is loaded) to at least `n`.  After
    they have started it can only check, and raises `DeviceError` when
    neither the default backend nor the CPU backend has `n` devices.
    """
    if n < 1:
        raise DeviceError(f"a device count must be positive, got {n}")
    if "jax" in sys.modules and _backends_started():
        if _available_devices(n) is None:
            raise DeviceError(_too_few_message(n, started=True))
        return
    count = _raise_flag(n)
    if "jax" in sys.modules:  # loaded, backends not started: its own setting wins over the flag
        import jax

        try:
            current = jax.config.jax_num_cpu_devices
        except AttributeError:
            return
        if current < count:
            jax.config.update("jax_num_cpu_devices", count)


def set_host_device_count(n: int) -> None:
    """Give this process exactly `n` CPU host devices (one process's share of
    a multi-process mesh), replacing any count ``XLA_FLAGS`` has; must run
    before jax's backends start."""
    if n < 1:
        raise DeviceError(f"a device count must be positive, got {n}")
    if "jax" in sys.modules and _backends_started():
        import jax
        if jax.local_device_count() != n:
            raise DeviceError(f"this process already has {jax.local_device_count()} devices; "
                              f"ask for {n} before jax starts its backends")
        return
    os.environ["XLA_FLAGS"] = with_host_device_count(os.environ.get("XLA_FLAGS", ""), n)
    if "jax" in sys.modules:
        import jax
        try:
            jax.config.update("jax_num_cpu_devices", n)
        except AttributeError:
            pass


def with_host_device_count(flags: str, n: int) -> str:
    """`flags` (an ``XLA_FLAGS`` value) with the CPU host device count set to `n`."""
    kept = re.sub(re.escape(_FORCE_DEVICES) + r"=\d+", "", flags)
    return f"{kept} {_FORCE_DEVICES}={n}".strip()


def _backends_started() -> bool:
    try:
        from jax._src import xla_bridge

        return xla_bridge.backends_are_initialized()
    except (ImportError, AttributeError):  # jax moved it: assume started, and only check
        return True


def _raise_flag(n: int) -> int:
    """Raise the host device count in XLA_FLAGS to at least `n`; returns the count now there."""
    flags = os.environ.get("XLA_FLAGS", "")
    pattern = re.compile(re.escape(_FORCE_DEVICES) + r"=(\d+)")
    match = pattern.search(flags)
    if match is None:
        os.environ["XLA_FLAGS"] = (flags + f" {_FORCE_DEVICES}={n}").strip()
        return n
    if int(match.group(1)) < n:
        os.environ["XLA_FLAGS"] = pattern.sub(f"{_FORCE_DEVICES}={n}", flags)
        return n
    return int(match.group(1))


def _available_devices(n: int) -> list | None:
    """The first `n` devices of the default backend, else of the CPU backend; None if neither.

    With several processes these are global devices, in id order: logical
    device i runs on global device i whichever process holds it."""
    import jax

    devices = sorted(jax.devices(), key=lambda d: d.id)
    if len(devices) >= n:
        return list(devices[:n])
    if devices[0].platform != "cpu":
        try:
            cpu = jax.devices("cpu")
        except RuntimeError:
            cpu = []
        if len(cpu) >= n:
            return list(cpu[:n])
    return None


def _too_few_message(n: int, started: bool = False) -> str:
    import jax

    have = jax.devices()
    if jax.process_count() > 1:
        return (f"the module needs {n} devices but the {jax.process_count()} processes have "
                f"{len(have)} {have[0].platform} devices in all ({jax.local_device_count()} "
                "here); start more processes or give each more devices")
    message = (f"the module needs {n} devices but jax has {len(have)} {have[0].platform} "
               f"device{'s' if len(have) != 1 else ''}")
    if started:
        return (message + f"; jax's backends have already started, so set "
                f"XLA_FLAGS={_FORCE_DEVICES}={n} before they start (in a new process)")
    return (message + f"; on CPU, set XLA_FLAGS={_FORCE_DEVICES}={n} before jax starts, or "
            f"call stablehlo_spmd.runtime.ensure_host_devices({n}) first")


def _quiet_backend_start() -> None:
    """Keep XLA's INFO lines off stderr when jax's backends start, as ``import jax`` means to.

    jax sets ``TF_CPP_MIN_LOG_LEVEL=1`` when imported, but jaxlib's MLIR
    bindings (which this package loads first) have set up C++ logging by then.
    """
    if _backends_started():
        return
    try:
        from jax._src.lib import utils

        utils.absl_set_min_log_level(int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1")))
    except (ImportError, AttributeError, ValueError):
        pass


@contextlib.contextmanager
def _gspmd_notice_off(uses_shardy: bool):
    """Keep XLA's notice that GSPMD propagation will be deprecated off stderr.

    XLA logs it (a C++ warning) on every compile of a module in GSPMD's
    spelling, which spmd-partition writes on purpose where a boundary value
    does not divide (`partitioning.skeleton`); the module is fully manual,
    so nothing is propagated and the notice tells the user nothing.  A log
    level the user chose is left alone.
    """
    if uses_shardy or os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1") != "1":
        yield
        return
    try:
        from jax._src.lib import utils
        set_level = utils.absl_set_min_log_level
    except (ImportError, AttributeError):
        yield
        return
    set_level(2)
    try:
        yield
    finally:
        set_level(1)


def _pick_devices(n: int, devices: Sequence[Any] | None) -> list:
    import jax

    _quiet_backend_start()

    if devices is None:
        picked = _available_devices(n)
        if picked is None:
            raise DeviceError(_too_few_message(n))
        return picked
    by_id = None
    picked = []
    for device in devices:
        if isinstance(device, (int, np.integer)):
            by_id = by_id or {d.id: d for d in jax.devices()}
            if int(device) not in by_id:
                raise DeviceError(f"no device with id {int(device)}; jax has ids {sorted(by_id)}")
            device = by_id[int(device)]
        picked.append(device)
    if len(picked) != n:
        raise DeviceError(f"the module has mhlo.num_partitions = {n} but {len(picked)} devices "
                          "were given")
    if len({(d.platform, d.id) for d in picked}) != n:
        raise DeviceError(f"devices must be distinct, got {[d.id for d in picked]}")
    if len({d.client for d in picked}) != 1:
        raise DeviceError("devices must all belong to one backend")
    return picked


# ------------------------------------------------------------------ compiling


def compile(partitioned_text: str, devices: Sequence[Any] | None = None,
            filename: str | None = None) -> "Executable":
    """Compile a partitioned module for its ``mhlo.num_partitions`` devices.

    `devices` (jax devices or device ids) is the device assignment: logical
    device ``i`` of the module runs on ``devices[i]``.  By default the first N
    devices of jax's default backend (or of the CPU backend if it has too few).
    `filename`, when the text came from a file, prefixes error messages.
    """
    return _compile(partitioned_text, devices, filename, single_device=False)


def memory_per_device(partitioned_text: str) -> int:
    """Bytes per device XLA's memory analysis gives the compiled module:
    arguments, outputs and temporaries, less what outputs alias.

    Buffers are assigned on HLO, before any machine code: on CPU the code is
    generated without LLVM's optimizations, which changes no buffer and
    takes a third less time (BERT's training step: 1.7 -> 1.2 s).  Other
    backends compile as they run, not having been measured so."""
    stats = _compile(partitioned_text, None, None, single_device=False,
                     memory_only=True).memory_analysis()
    return (stats.argument_size_in_bytes + stats.output_size_in_bytes
            + stats.temp_size_in_bytes - stats.alias_size_in_bytes)


def has_devices(n: int) -> bool:
    """Whether this process can compile for `n` devices (on CPU it asks for
    `n` host devices while jax's backends have not started)."""
    try:
        ensure_host_devices(n)
        return _available_devices(n) is not None
    except DeviceError:
        return False


def _compile(text: str, devices, filename: str | None, single_device: bool,
             memory_only: bool = False) -> "Executable":
    return _executable(_read_module(text, filename, single_device), text, devices, filename,
                       single_device, memory_only=memory_only)


def _executable(info: _ModuleInfo, text: str, devices, filename: str | None,
                single_device: bool = False, ask_for_devices: bool = False,
                memory_only: bool = False) -> "Executable":
    """Compile for the module's devices: those of every process when this one
    runs with others (`stablehlo_spmd.distributed`), which must all run the
    same module; with `ask_for_devices`, a lone process asks for host devices.
    `memory_only`: the executable is compiled for its memory analysis only
    (see `memory_per_device`)."""
    from stablehlo_spmd import distributed

    # A one-device run says nothing about how many devices each process needs.
    several = distributed.join(0 if single_device else info.num_partitions)
    if several and not single_device:
        distributed.check_same_module(text)
    elif ask_for_devices and not several:
        ensure_host_devices(info.num_partitions)  # before jax is imported, if it is not yet
    picked = _pick_devices(info.num_partitions, devices)
    return Executable(info, picked, filename, memory_only)


def _compile_options(n: int, devices: list, uses_shardy: bool):
    from jaxlib import xla_client as xc

    ids = np.array([[d.id for d in devices]], dtype=np.int64)
    try:
        from jax._src import compiler

        options = compiler.get_compile_options(
            num_replicas=1, num_partitions=n, device_assignment=ids, backend=devices[0].client)
    except (ImportError, AttributeError, TypeError):  # jax moved it: the same options by hand
        options = xc.CompileOptions()
        options.num_replicas = 1
        options.num_partitions = n
        options.executable_build_options.use_spmd_partitioning = True
        options.device_assignment = xc.DeviceAssignment.create(ids.T)
    # Shardy for sdy modules; GSPMD for the mhlo.sharding spelling (XLA would fall back to it,
    # with a warning).
    options.executable_build_options.use_shardy_partitioner = uses_shardy
    return options


class Executable:
    """A compiled partitioned module: call it with one global array per argument.

    Attributes: `arguments` and `results` (`TensorInfo`), `devices` (the
    device assignment), `num_partitions`, `mesh` (the module's
    `stablehlo_spmd.Mesh`, or None), `jax_mesh` (the same over `devices`),
    `in_shardings` / `out_shardings` (jax shardings, as XLA compiled them).
    """

    def __init__(self, info: _ModuleInfo, devices: list, filename: str | None = None,
                 memory_only: bool = False):
        import jax
        from jaxlib import xla_client as xc

        self.num_partitions = info.num_partitions
        self.devices = tuple(devices)
        self.arguments = info.arguments
        self.results = info.results
        self.mesh = info.mesh
        self.filename = filename
        self._donates = info.donates
        self.jax_mesh = None
        if info.mesh is not None:
            mesh_devices = np.empty(info.mesh.size, dtype=object)
            for position, logical in enumerate(info.mesh.device_ids):
                mesh_devices[position] = self.devices[logical]
            self.jax_mesh = jax.sharding.Mesh(mesh_devices.reshape(info.mesh.mesh_shape),
                                              info.mesh.axis_names)
        options = _compile_options(self.num_partitions, list(self.devices), info.uses_shardy)
        if memory_only and self.devices[0].platform == "cpu":
            options.executable_build_options.debug_options.xla_backend_optimization_level = 0
        client = self.devices[0].client
        try:
            with _gspmd_notice_off(info.uses_shardy):
                self._loaded = client.compile_and_load(
                    info.bytecode, xc.DeviceList(self.devices), options)
        except jax.errors.JaxRuntimeError as error:
            raise RuntimeCompileError(f"XLA cannot compile the module: {_first_lines(error)}",
                                      filename) from None
        in_hlo = _hlo_shardings(self._loaded.get_parameter_shardings(), len(self.arguments))
        out_hlo = _hlo_shardings(self._loaded.get_output_shardings(), len(self.results))
        # A value XLA splits unevenly is held as its ceil-sized shards, the last
        # ones padded: on the jax side it is the padded global array, which
        # splits evenly (see `_HostTransfer` and `_output_handler`).
        self._padded_in = [_whole_shards_shape(h, t.shape) for h, t in zip(in_hlo, self.arguments)]
        self._padded_out = [_whole_shards_shape(h, t.shape) for h, t in zip(out_hlo, self.results)]
        if jax.process_count() > 1:
            uneven = next((t for t, padded in zip(self.results, self._padded_out) if padded), None)
            if uneven is not None:
                raise RuntimeCompileError(
                    f"{uneven.describe()} is split unevenly, which cannot come back as one "
                    "jax.Array across processes; shard it evenly", filename)
        self.in_shardings = tuple(self._jax_sharding(h, padded or t.shape)
                                  for h, t, padded in zip(in_hlo, self.arguments, self._padded_in))
        self.out_shardings = tuple(self._jax_sharding(h, padded or t.shape)
                                   for h, t, padded in zip(out_hlo, self.results, self._padded_out))
        # The executable takes each argument's shards in its own device order; a mesh with
        # device_ids lists them in another, so such arguments are handed over in XLA's terms.
        self._call_shardings = tuple(self._in_executable_order(s, h)
                                     for s, h in zip(self.in_shardings, in_hlo))
        self._host_transfers = tuple(
            _HostTransfer(argument, sharding, self.devices, padded)
            for argument, sharding, padded in zip(self.arguments, self._call_shardings,
                                                  self._padded_in))
        self._output_handlers = [
            _output_handler(result, sharding, self.devices, hlo, padded)
            for result, sharding, hlo, padded in zip(self.results, self.out_shardings, out_hlo,
                                                     self._padded_out)]

    # ------------------------------------------------------------ shardings

    def _jax_sharding(self, hlo, shape: tuple[int, ...]):
        """XLA's compiled sharding as a jax sharding: a NamedSharding on the mesh when it is one."""
        import jax
        from jax.sharding import NamedSharding, PartitionSpec

        rank = len(shape)
        if self.num_partitions == 1:
            return jax.sharding.SingleDeviceSharding(self.devices[0])
        if hlo is None or hlo.is_replicated():
            mesh = self.jax_mesh or jax.sharding.Mesh(np.array(self.devices, dtype=object),
                                                      ("devices",))
            return NamedSharding(mesh, PartitionSpec())
        exact = _gspmd_sharding(self.devices, hlo)
        if self.jax_mesh is not None:
            named = self._named_sharding(hlo, rank)
            if named is not None and (exact is None or _same_layout(named, exact, shape)):
                return named
        if exact is None:
            raise RuntimeCompileError(
                f"XLA's sharding {hlo} is not a sharding over the module's mesh, and this jax "
                "has no GSPMDSharding to express it", self.filename)
        return exact

    def _in_executable_order(self, sharding, hlo):
        from jaxlib import xla_client as xc

        if _device_order(sharding) == self.devices:
            return sharding
        exact = _gspmd_sharding(self.devices, hlo if hlo is not None else xc.HloSharding.replicate())
        if exact is None:
            raise RuntimeCompileError(
                "a mesh whose device_ids are not in order needs jax's GSPMDSharding, which this "
                "jax does not have", self.filename)
        return exact

    def _named_sharding(self, hlo, rank: int):
        from jax.sharding import NamedSharding, PartitionSpec

        from stablehlo_spmd.hlo_sharding import parse_hlo_sharding
        from stablehlo_spmd.sharding import Sharding

        try:
            sharding = Sharding.from_hlo(parse_hlo_sharding(str(hlo)), self.mesh, rank)
        except (SpmdError, ValueError):
            return None
        if sharding.unreduced or sharding.manual or sharding.is_maximal:
            return None
        return NamedSharding(self.jax_mesh, PartitionSpec(*sharding.to_spec()))

    # ------------------------------------------------------------ running

    def place(self, inputs: Sequence[Any]) -> list:
        """Check `inputs` against the arguments and put each on the devices as it is sharded.

        The arrays returned are laid out as `in_shardings` say, with their shards listed in
        the executable's device order (the order `execute_sharded` takes them in).
        """
        import jax

        if len(inputs) != len(self.arguments):
            listed = ", ".join(a.describe() for a in self.arguments) or "none"
            raise RuntimeInputError(
                f"expected {len(self.arguments)} input{'s' if len(self.arguments) != 1 else ''} "
                f"({listed}), got {len(inputs)}", self.filename)
        placed = []
        for value, argument, transfer in zip(inputs, self.arguments, self._host_transfers):
            sharding = transfer.sharding
            if transfer.padding is not None:
                # Held padded (see __init__): a jax.Array cannot be split unevenly, so
                # the value is padded on the host and cut into the padded shards
                # (unless it is such shards already, as `place` returns them).
                if (isinstance(value, jax.Array) and value.sharding == sharding
                        and value.shape == transfer.shape and value.dtype == argument.dtype):
                    placed.append(value)
                    continue
                value = _checked_value(value, argument, self.filename)
                placed.append(transfer(np.asarray(value)))
                continue
            # The common steady-state call: a jax.Array already laid out as the
            # executable wants it, checked with three cheap comparisons.
            if (not self._donates and isinstance(value, jax.Array)
                    and value.sharding == sharding and value.shape == argument.shape
                    and value.dtype == argument.dtype):
                placed.append(value)
                continue
            value = _checked_value(value, argument, self.filename)
            if not isinstance(value, jax.Array):
                placed.append(transfer(value))
            elif not self._donates and value.sharding.is_equivalent_to(sharding, value.ndim):
                placed.append(value)  # already laid out as the executable wants it
            else:
                placed.append(jax.device_put(value, sharding, may_alias=False))
        return placed

    def __call__(self, *inputs: Any) -> list:
        """Run on global inputs (NumPy or jax arrays); returns global `jax.Array`s."""
        results = self._loaded.execute_sharded(self.place(inputs))
        return results.consume_with_handlers(self._output_handlers)

    def memory_analysis(self):
        """Per-device memory of the compiled program (argument, output, temp and
        alias sizes in bytes), as `jax.stages.Compiled.memory_analysis` gives."""
        return self._loaded.get_compiled_memory_stats()

    def compiled_text(self) -> str:
        """XLA's optimized HLO of the compiled program (e.g. to count collectives)."""
        return "\n".join(m.to_string() for m in self._loaded.hlo_modules())

    def __repr__(self) -> str:
        return (f"<Executable {len(self.arguments)} arguments -> {len(self.results)} results on "
                f"{self.num_partitions} {self.devices[0].platform} devices>")


class _HostTransfer:
    """Puts a host (NumPy) value of one argument on the devices, as the executable takes it.

    Which slice of the value each device holds is worked out once, here; a call
    only cuts those slices (views, whatever the value's strides) and hands them
    to jaxlib's batched transfer, the C++ call jax's own jit makes for a host
    argument.  ``jax.device_put`` on each argument spends Python on checks
    `_checked_value` already made: a call took 1.4x jax's own through it.
    ``enable_x64``: the executable was compiled for the module's types, so a
    64-bit value must not be narrowed the way jax narrows it when x64 is off.
    """

    def __init__(self, argument: TensorInfo, sharding, devices: tuple,
                 padded: tuple[int, ...] | None = None):
        import jax

        self.sharding = sharding
        self.shape = shape = padded or argument.shape
        # An argument XLA splits unevenly is padded to whole shards first.
        self.padding = None if padded is None else [
            (0, whole - size) for whole, size in zip(padded, argument.shape)]
        self._aval = jax.core.ShapedArray(shape, argument.dtype)
        # With several processes each feeds the shards of its own devices only.
        here = jax.process_index()
        self._devices = [device for device in devices if device.process_index == here]
        by_device = sharding.devices_indices_map(shape)
        self._slices = [by_device[device] for device in self._devices]

    def __call__(self, value: np.ndarray):
        from jaxlib import xla_client as xc

        if self.padding is not None:
            value = np.pad(value, self.padding)
        return xc.batched_device_put(self._aval, self.sharding,
                                     [value[where] for where in self._slices], self._devices,
                                     True, enable_x64=True)


def _output_handler(result: TensorInfo, sharding, devices: tuple, hlo=None,
                    padded: tuple[int, ...] | None = None):
    if result.is_token:
        return lambda buffers: None  # a token result comes back as None
    """What builds one result's global array from its per-device buffers
    (see `_array_handler`).

    A result XLA split unevenly comes back as each device's ceil-sized shard
    (PJRT may already have cut the padding off one that holds none of the
    value): a jax.Array cannot be split unevenly, so the shards, cut to
    their blocks, are put together on the host and handed back replicated on
    the devices (outside the compiled program, which keeps them in place).
    """
    if padded is None:
        return _array_handler(result, sharding, devices)
    import jax

    where = _uneven_blocks(hlo, result.shape, len(devices))
    replicated = jax.sharding.NamedSharding(
        jax.sharding.Mesh(np.array(devices, dtype=object), ("devices",)),
        jax.sharding.PartitionSpec())

    def assemble(buffers):
        whole = np.empty(result.shape, dtype=result.dtype)
        for buffer, block in zip(buffers, where):
            whole[block] = np.asarray(buffer)[tuple(slice(0, b.stop - b.start) for b in block)]
        return jax.device_put(whole, replicated)
    return assemble


def _uneven_blocks(hlo, shape: tuple[int, ...], count: int) -> list[tuple[slice, ...]]:
    """The block of `shape` logical device i holds under the tiled `hlo`:
    ceil-sized tiles, cut at the end of each dim (XLA's uneven layout)."""
    tiles = list(hlo.tile_assignment_dimensions())
    grid = np.array(list(hlo.tile_assignment_devices())).reshape(tiles)
    sizes = [-(-size // pieces) for size, pieces in zip(shape, tiles)]
    blocks = []
    for device in range(count):
        coordinates = np.argwhere(grid == device)[0][:len(shape)]
        blocks.append(tuple(slice(min(c * s, n), min((c + 1) * s, n))
                            for c, s, n in zip(coordinates, sizes, shape)))
    return blocks


def _whole_shards_shape(hlo, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """`shape` grown to whole shards of the tiled `hlo`; None when it divides."""
    if hlo is None or not hlo.is_tiled() or hlo.is_manual():
        return None
    tiles = list(hlo.tile_assignment_dimensions())[:len(shape)]
    if len(tiles) != len(shape) or all(size % count == 0 for size, count in zip(shape, tiles)):
        return None
    return tuple(-(-size // count) * count for size, count in zip(shape, tiles))


def _array_handler(result: TensorInfo, sharding, devices: tuple):
    """What builds one result's global jax.Array from its per-device buffers.

    The buffers come back in the executable's device order.  When the
    sharding lists its devices in that order, jax's own C++ result handler
    (what its jit uses; private API, skipped if missing) wraps them as they
    are; otherwise jax's public assembly matches each buffer to its device.
    """
    import jax

    if _device_order(sharding) == devices:
        try:
            from jax._src import array as jax_array
            return jax_array._array_global_result_handler(
                jax.core.ShapedArray(result.shape, result.dtype), sharding, True)
        except (ImportError, AttributeError, TypeError):
            pass
    return functools.partial(jax.make_array_from_single_device_arrays, result.shape, sharding)


def _checked_value(value: Any, argument: TensorInfo, filename: str | None) -> Any:
    import jax

    label = argument.describe()
    if isinstance(value, (bool, int, float, complex)) and not isinstance(value, np.generic):
        value = np.asarray(value, dtype=argument.dtype)  # Python scalars are weakly typed
    elif not isinstance(value, (jax.Array, np.ndarray)):
        try:
            value = np.asarray(value)
        except (TypeError, ValueError) as error:
            raise RuntimeInputError(f"{label}: cannot be read as an array ({error})",
                                    filename) from None
    dtype = np.dtype(value.dtype)
    if (isinstance(value, np.ndarray) and dtype.kind == "V" and argument.dtype.kind == "V"
            and dtype.itemsize == argument.dtype.itemsize and dtype != argument.dtype):
        value, dtype = value.view(argument.dtype), argument.dtype  # bfloat16 & co. out of an .npz
    if tuple(value.shape) != argument.shape:
        raise RuntimeInputError(
            f"{label}: expected shape {argument.shape} ({argument.type_text}), "
            f"got {tuple(value.shape)}", filename)
    if dtype != argument.dtype:
        raise RuntimeInputError(
            f"{label}: expected dtype {argument.dtype.name} ({argument.type_text}), "
            f"got {dtype.name}", filename)
    return value


def _hlo_shardings(protos, count: int) -> list:
    from jaxlib import xla_client as xc

    if protos is None:
        return [None] * count
    # A tuple of results (or of none) may come back as one tuple sharding.
    if len(protos) == 1 and count != 1 and protos[0] is not None and \
            protos[0].type == xc.OpSharding.Type.TUPLE:
        protos = list(protos[0].tuple_shardings)
    shardings = [None if p is None else _manual_as_replicated(xc.HloSharding.from_proto(p))
                 for p in protos]
    if len(shardings) != count:
        return [None] * count if not shardings else shardings + [None] * (count - len(shardings))
    return shardings


def _manual_as_replicated(hlo):
    """A manual sharding at the boundary as jax can hold it: each device's
    buffer has the shape of the manual layout with its manual axes read as
    replicated, so a caller's global array reaches every manual instance
    whole, and a manual result comes back as the first instance's value
    (jax has no manual array; each instance's own is not recoverable)."""
    from jaxlib import xla_client as xc

    from stablehlo_spmd.hlo_sharding import HloSharding, parse_hlo_sharding

    if hlo.is_manual():
        return xc.HloSharding.replicate()
    if not hlo.is_tiled() or xc.OpSharding.Type.MANUAL not in hlo.subgroup_types():
        return hlo
    ours = parse_hlo_sharding(str(hlo))
    kinds = tuple("replicated" if k == "manual" else k for k in ours.subgroup_kinds)
    return xc.HloSharding.from_string(str(HloSharding.tiled(ours.tile, kinds)))


def _device_order(sharding) -> tuple:
    """The devices of a sharding in the order its shards are listed."""
    import jax

    if isinstance(sharding, jax.sharding.NamedSharding):
        return tuple(sharding.mesh.devices.flat)
    if isinstance(sharding, jax.sharding.SingleDeviceSharding):
        return tuple(sharding.device_set)
    return tuple(sharding._device_assignment)


def _same_layout(a, b, shape: tuple[int, ...]) -> bool:
    """Whether two shardings put the same slices of `shape` on the same devices (in any order)."""
    try:
        return a.devices_indices_map(shape) == b.devices_indices_map(shape)
    except ValueError:  # a shape the sharding does not divide: jax's stricter test
        return a.is_equivalent_to(b, len(shape))


def _gspmd_sharding(devices, hlo):
    try:
        from jax._src.sharding_impls import GSPMDSharding
    except ImportError:
        return None
    return GSPMDSharding(tuple(devices), hlo)


def _first_lines(error: Exception, limit: int = 6) -> str:
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    text = "\n".join(lines[:limit])
    return text + ("\n..." if len(lines) > limit else "")


# ------------------------------------------------------------------ one-shot helpers

_CACHE_SIZE = 32
_EXECUTABLES: "collections.OrderedDict[tuple, Executable]" = collections.OrderedDict()


def _cached(text: str, devices, single_device: bool) -> Executable:
    key = (hashlib.sha256(text.encode("utf-8")).hexdigest(), single_device,
           None if devices is None else tuple((getattr(d, "platform", None), getattr(d, "id", d))
                                              for d in devices))
    executable = _EXECUTABLES.get(key)
    if executable is None:
        executable = _compile(text, devices, None, single_device)
        _EXECUTABLES[key] = executable
        while len(_EXECUTABLES) > _CACHE_SIZE:
            _EXECUTABLES.popitem(last=False)
    else:
        _EXECUTABLES.move_to_end(key)
    return executable


def run(partitioned_text: str, inputs: Sequence[Any], devices: Sequence[Any] | None = None) -> list:
    """Compile (cached by the text's SHA-256 and the devices) and run on global inputs."""
    return _cached(partitioned_text, devices, single_device=False)(*inputs)


def run_single_device(text: str, inputs: Sequence[Any], device: Any = None) -> list:
    """Run an unpartitioned (single-device) module on one device: the oracle for `run`.

    Sharding annotations, sharding constraints and meshes are dropped first,
    so an annotated module runs as the program it annotates; an already
    partitioned module (a manual computation) is refused.
    """
    devices = None if device is None else [device]
    return _cached(text, devices, single_device=True)(*inputs)


def clear_cache() -> None:
    _EXECUTABLES.clear()


# ------------------------------------------------------------------ files


def run_files(module_path: str, inputs_npz: str | None, outputs_npz: str) -> list[tuple[str, Any]]:
    """``stablehlo-spmd run MODULE --inputs IN.npz --outputs OUT.npz``.

    Input keys: argument ``i`` is read from the key that is its name (the
    pytree path in its location, e.g. ``params['w1']``) or, failing that,
    ``arg<i>`` (``arg0``, ``arg1``, ...); an argument found under neither, a
    key naming no argument, or one argument under both keys is an error.
    `inputs_npz` may be None for a module without arguments.  Outputs are
    written as ``result0``, ``result1``, ... (positional, whatever the
    results' names), to a temporary file renamed onto `outputs_npz` only when
    everything succeeded.  Returns (key, NumPy array) for each output written.

    With several processes (`stablehlo_spmd.distributed`: launch's
    variables, or a cluster jax detects) every process runs this with the
    same files: each feeds its own devices' shards, and process 0 writes the
    outputs.
    """
    try:
        with open(module_path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise SpmdError(f"cannot open input file '{module_path}': {error.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SpmdError(f"the input is not UTF-8 text (byte {error.start})", module_path) from None
    info = _read_module(text, module_path)
    arrays = _read_inputs(inputs_npz, info.arguments, module_path)
    from stablehlo_spmd import distributed

    executable = _executable(info, text, None, module_path, ask_for_devices=True)
    outputs = executable(*arrays)
    # Every process takes part in gathering a result spread over processes;
    # process 0 writes them.
    written = [(f"result{i}", distributed.to_host(output)) for i, output in enumerate(outputs)]
    if distributed.process_index() == 0:
        _write_npz(outputs_npz, written)
    return written


def _read_inputs(path: str | None, arguments: Sequence[TensorInfo], module_path: str) -> list:
    if path is None:
        if arguments:
            raise RuntimeInputError(f"the module has {len(arguments)} arguments; give them with "
                                    "--inputs FILE.npz", module_path)
        return []
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        message = getattr(error, "strerror", None) or str(error)
        raise RuntimeInputError(f"cannot read inputs '{path}': {message}") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise RuntimeInputError(f"inputs '{path}' is a single .npy array, not an .npz archive")
    with archive:
        keys = set(archive.files)
        arrays, used = [], set()
        for argument in arguments:
            # Three spellings: the argument's name, ``argN``, and NumPy's own
            # ``arr_N`` (what ``np.savez(path, *arrays)`` writes).
            spellings = [key for key in (argument.name, f"arg{argument.index}",
                                         f"arr_{argument.index}") if key and key in keys]
            if len(spellings) > 1:
                raise RuntimeInputError(
                    f"{argument.describe()} is given twice in '{path}', as {spellings[0]!r} and "
                    f"as {spellings[1]!r}", module_path)
            if not spellings:
                raise RuntimeInputError(
                    f"{argument.describe()} is missing from '{path}': expected the key "
                    + (f"{argument.name!r}, " if argument.name else "")
                    + f"'arg{argument.index}' or 'arr_{argument.index}'", module_path)
            key = spellings[0]
            used.add(key)
            arrays.append(archive[key])
        unknown = sorted(keys - used)
        if unknown:
            names = ", ".join(repr(a.name or f"arg{a.index}") for a in arguments) or "none"
            raise RuntimeInputError(
                f"'{path}' has key{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(map(repr, unknown))} naming no argument (the arguments are "
                f"{names}, or arg0..arg{max(len(arguments) - 1, 0)}, or "
                f"arr_0..arr_{max(len(arguments) - 1, 0)})", module_path)
    return arrays


def _write_npz(path: str, arrays: Sequence[tuple[str, Any]]) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise SpmdError(f"cannot write output file '{path}': directory '{directory}' does not exist")
    handle = tempfile.NamedTemporaryFile("wb", dir=directory, delete=False,
                                         prefix=".stablehlo-spmd-", suffix=".npz")
    try:
        with handle:
            np.savez(handle, **dict(arrays))
        os.replace(handle.name, path)
    except OSError as error:
        os.unlink(handle.name)
        raise SpmdError(f"cannot write output file '{path}': {error.strerror}") from None
