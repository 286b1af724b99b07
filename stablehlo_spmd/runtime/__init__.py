"""Compiling and running partitioned modules on PJRT, in one process or several.

    exe = runtime.compile(partitioned_text)        # num_partitions devices of jax's backend
    outputs = exe(x, params_w1)                    # global arrays in, global jax.Arrays out
    outputs = runtime.run(partitioned_text, [x, params_w1])   # executables cached by text hash
    expected = runtime.run_single_device(original_text, [x, params_w1])   # the oracle

Its modules, in import order: each imports only modules above it, and no
two import each other, not even inside a function.

    devices       how many devices this process has (XLA's CPU host device
                  count) and which ones a module runs on
    distributed   several processes, one program: joining JAX's distributed
                  runtime (reads devices)
    module        reading a module: partitions, mesh, argument and result
                  types, and the errors a module or its inputs give
    executable    compiling for the module's devices and calling it:
                  `Executable`, `compile`, `run`, the cache behind `run`
                  (reads devices, distributed, module)
    files         ``stablehlo-spmd run``: a module file and .npz inputs in,
                  .npz outputs out (reads distributed, module, executable)
    launch        ``stablehlo-spmd launch``: N local processes of one command
                  (reads devices, distributed; not imported here)

The public names are re-exported here, so ``runtime.compile`` and the rest
need no module path.  Nothing here imports jax at module level, so a
command line can parse a module, learn how many devices it needs and ask
for them before jax is loaded.
"""

from stablehlo_spmd.runtime import distributed
from stablehlo_spmd.runtime.devices import (
    DeviceError, compile_platform, ensure_host_devices, has_devices, set_host_device_count,
    with_host_device_count)
from stablehlo_spmd.runtime.module import (
    TOKEN_TYPE, RuntimeCompileError, RuntimeInputError, TensorInfo)
from stablehlo_spmd.runtime.executable import (
    Executable, clear_cache, compile, memory_per_device, run, run_single_device)
from stablehlo_spmd.runtime.files import run_files

# `from runtime import *` gives what it gave as one module; the other names
# imported above are reached as `runtime.has_devices` and the like.
__all__ = [
    "DeviceError", "Executable", "RuntimeCompileError", "RuntimeInputError", "TensorInfo",
    "clear_cache", "compile", "ensure_host_devices", "run", "run_files", "run_single_device",
]
