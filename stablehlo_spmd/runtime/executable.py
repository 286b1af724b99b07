"""Compiling a partitioned module for its devices and calling it, through jax's PJRT client.

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

Which devices run it, and how many a CPU process has, is `devices`'s
business; with several processes, `distributed`'s.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import os
from typing import Any, Sequence

import numpy as np

from stablehlo_spmd.errors import SpmdError
from stablehlo_spmd.runtime import distributed
from stablehlo_spmd.runtime.devices import _pick_devices, ensure_host_devices
from stablehlo_spmd.runtime.module import (
    RuntimeCompileError, RuntimeInputError, TensorInfo, _ModuleInfo, _read_module)


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
    backends compile as they run, not having been measured so.

    On CPU the buffers are those of XLA's own fusion passes, without the
    CPU backend's experimental YNNPACK library fusions (on by default in
    jaxlib 0.10; keras-hub's tests turn them off too).  Those kernels read
    a broadcast that several of them share as a buffer of its own, where
    XLA's loop fusion makes the broadcast again inside each reader: a
    norm's broadcast statistics, held from the forward to the backward,
    add a fifth to a Llama step's figure (one plan of Llama-3-8B, four
    layers on 64 devices: 6.76 GiB against 5.51), a CPU kernel library's
    choice rather than the plan's.  `stablehlo_spmd.auto_sharding`
    estimates the buffers of XLA's fusion, so this is the figure it is
    checked against."""
    stats = _compile(partitioned_text, None, None, single_device=False,
                     memory_only=True).memory_analysis()
    return (stats.argument_size_in_bytes + stats.output_size_in_bytes
            + stats.temp_size_in_bytes - stats.alias_size_in_bytes)


def _compile(text: str, devices, filename: str | None, single_device: bool,
             memory_only: bool = False) -> "Executable":
    return _executable(_read_module(text, filename, single_device), text, devices, filename,
                       single_device, memory_only=memory_only)


def _executable(info: _ModuleInfo, text: str, devices, filename: str | None,
                single_device: bool = False, ask_for_devices: bool = False,
                memory_only: bool = False) -> "Executable":
    """Compile for the module's devices: those of every process when this one
    runs with others (`distributed`), which must all run the
    same module; with `ask_for_devices`, a lone process asks for host devices.
    `memory_only`: the executable is compiled for its memory analysis only
    (see `memory_per_device`)."""
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
            # XLA's own fusion's buffers: see `memory_per_device`.
            options.env_option_overrides = [("xla_cpu_experimental_ynn_fusion_type", "")]
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

    def place(self, inputs: Sequence[Any], consume: bool = False) -> list:
        """Check `inputs` against the arguments and put each on the devices as it is sharded.

        The arrays returned are laid out as `in_shardings` say, with their shards listed in
        the executable's device order (the order `execute_sharded` takes them in).  An
        argument the module donates gets a copy of a caller's jax.Array, unless
        `consume` says the caller gives its arrays up (see `call_consuming`).
        """
        import jax

        copies_donated = self._donates and not consume
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
            if (not copies_donated and isinstance(value, jax.Array)
                    and value.sharding == sharding and value.shape == argument.shape
                    and value.dtype == argument.dtype):
                placed.append(value)
                continue
            value = _checked_value(value, argument, self.filename)
            if not isinstance(value, jax.Array):
                placed.append(transfer(value))
            elif not copies_donated and value.sharding.is_equivalent_to(sharding, value.ndim):
                placed.append(value)  # already laid out as the executable wants it
            else:
                placed.append(jax.device_put(value, sharding, may_alias=False))
        return placed

    def __call__(self, *inputs: Any) -> list:
        """Run on global inputs (NumPy or jax arrays); returns global `jax.Array`s."""
        results = self._loaded.execute_sharded(self.place(inputs))
        return results.consume_with_handlers(self._output_handlers)

    def call_consuming(self, *inputs: Any) -> list:
        """Run as `__call__` does, but hand the module the caller's jax arrays for the
        arguments it donates: a training loop's state, which the results replace.
        Those arrays are deleted by the call; host values are copied as always."""
        return self.run_placed(self.place(inputs, consume=True))

    def run_placed(self, placed: Sequence[Any]) -> list:
        """Run on arrays `place` returned (for a caller that keeps some of them: those
        the module does not donate stay valid)."""
        results = self._loaded.execute_sharded(list(placed))
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
