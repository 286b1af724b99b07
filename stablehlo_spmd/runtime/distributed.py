"""Several processes, one program: joining JAX's distributed runtime.

    ss.distributed.initialize()                    # from launch's variables, flags or SLURM/MPI
    ss.distributed.initialize("10.0.0.1:4321", num_processes=2, process_id=0)

A partitioned module runs multi-controller, as jax does: every process
compiles the same module for all the devices of all processes (global
device ``i`` runs logical device ``i``), feeds only the shards of its own
devices, and gets global ``jax.Array`` results.  The transport is jax's own:
its coordination service to meet, and PJRT's collectives to run (gloo on
CPU, NCCL on GPU, ICI on TPU); this module only sets it up.

Where the settings come from, first match wins:

1. arguments to `initialize`, or ``stablehlo-spmd run --coordinator ...``;
2. ``STABLEHLO_SPMD_COORDINATOR`` / ``_NUM_PROCESSES`` / ``_PROCESS_ID``,
   which ``stablehlo-spmd launch`` sets for each process it starts (and
   ``STABLEHLO_SPMD_DEVICES_PER_PROCESS``, the CPU host device count);
3. jax's cluster detection (SLURM, Open MPI, ...), when it finds one.

What jax leaves to its C++ side is checked here first, because a failure
there aborts the process with a stack trace rather than raising: a process
other than the coordinator's first waits (up to `timeout`) for the
coordinator's port to accept connections, and says so in one line when it
never does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
import time

from stablehlo_spmd.errors import SpmdError
from stablehlo_spmd.runtime.devices import set_host_device_count

COORDINATOR = "STABLEHLO_SPMD_COORDINATOR"
NUM_PROCESSES = "STABLEHLO_SPMD_NUM_PROCESSES"
PROCESS_ID = "STABLEHLO_SPMD_PROCESS_ID"
DEVICES_PER_PROCESS = "STABLEHLO_SPMD_DEVICES_PER_PROCESS"
TIMEOUT = "STABLEHLO_SPMD_TIMEOUT"

DEFAULT_TIMEOUT_S = 60


class DistributedError(SpmdError, RuntimeError):
    """The processes cannot form one program: settings, coordinator, or disagreement."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """How this process joins: all three set, or none (jax detects a cluster)."""

    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    devices_per_process: int | None = None
    timeout_s: int = DEFAULT_TIMEOUT_S

    @property
    def explicit(self) -> bool:
        return self.coordinator is not None


def settings(coordinator: str | None = None, num_processes: int | None = None,
             process_id: int | None = None, devices_per_process: int | None = None,
             timeout_s: int | None = None) -> Settings:
    """The settings from the arguments, else from the environment."""
    env = os.environ
    given = (coordinator, num_processes, process_id)
    if all(v is None for v in given) and env.get(COORDINATOR):
        coordinator = env[COORDINATOR]
        num_processes = _int_env(NUM_PROCESSES)
        process_id = _int_env(PROCESS_ID)
    if devices_per_process is None and env.get(DEVICES_PER_PROCESS):
        devices_per_process = _int_env(DEVICES_PER_PROCESS)
    if timeout_s is None:
        timeout_s = _int_env(TIMEOUT) if env.get(TIMEOUT) else DEFAULT_TIMEOUT_S
    named = (coordinator, num_processes, process_id)
    if any(v is not None for v in named) and any(v is None for v in named):
        raise DistributedError("a coordinator, a process count and a process id are needed "
                               "together (or none of them, to let jax detect the cluster)")
    if num_processes is not None:
        if num_processes < 1:
            raise DistributedError(f"the process count must be positive, got {num_processes}")
        if not 0 <= process_id < num_processes:
            raise DistributedError(f"process id {process_id} is not in 0..{num_processes - 1}")
    if coordinator is not None:
        _host_port(coordinator)
    if devices_per_process is not None and devices_per_process < 1:
        raise DistributedError(f"the device count per process must be positive, "
                               f"got {devices_per_process}")
    return Settings(coordinator, num_processes, process_id, devices_per_process, timeout_s)


def requested() -> bool:
    """Whether this process is meant to join others: launch's variables, or a
    cluster jax knows how to detect (SLURM, Open MPI)."""
    if os.environ.get(COORDINATOR):
        return True
    try:
        from jax._src import clusters
        return any(env.is_env_present() for env in clusters.ClusterEnv._cluster_types
                   if env.__name__ in ("SlurmCluster", "OmpiCluster"))
    except (ImportError, AttributeError):
        return False


def is_initialized() -> bool:
    try:
        from jax._src import distributed
        return distributed.global_state.client is not None
    except (ImportError, AttributeError):
        return False


def join(device_count: int = 0) -> bool:
    """Join the other processes when this one is meant to run with them (see
    `requested`); whether it runs with others.  On CPU each process asks for
    its share of `device_count` devices unless told how many."""
    if is_initialized():
        return True
    if not requested():
        return False
    found = settings()
    per_process = found.devices_per_process
    if per_process is None and found.num_processes and device_count > 0:
        per_process = -(-device_count // found.num_processes)
    initialize(devices_per_process=per_process)
    return True


def process_index() -> int:
    """This process's id among those running the program (0 when alone)."""
    if not is_initialized():
        return 0
    import jax
    return jax.process_index()


def initialize(coordinator: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, *, devices_per_process: int | None = None,
               timeout_s: int | None = None) -> None:
    """Join the other processes through ``jax.distributed.initialize``.

    A thin wrapper: on CPU it selects gloo collectives (jax's CPU client has
    none by default) and `devices_per_process` host devices; it waits for
    the coordinator with a clear error instead of jax's abort; and it is a
    no-op once this process has joined.  Must run before jax starts its
    backends (before the first ``jax.devices()``).
    """
    if is_initialized():
        return
    found = settings(coordinator, num_processes, process_id, devices_per_process, timeout_s)
    import jax

    if found.devices_per_process is not None:
        set_host_device_count(found.devices_per_process)
    if found.num_processes == 1:
        return   # nobody to meet: in-process collectives are far faster than gloo's
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    deadline = time.monotonic() + found.timeout_s
    if found.explicit and found.process_id != 0:
        _wait_for_coordinator(found.coordinator, deadline, found.timeout_s)
    remaining = max(1, int(deadline - time.monotonic()))
    try:
        jax.distributed.initialize(
            found.coordinator, found.num_processes, found.process_id,
            initialization_timeout=remaining, heartbeat_timeout_seconds=max(10, remaining))
    except (RuntimeError, ValueError) as error:
        raise DistributedError(f"jax.distributed could not start: {_first_line(error)}") from None


def _wait_for_coordinator(address: str, deadline: float, timeout_s: int) -> None:
    host, port = _host_port(address)
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            if time.monotonic() >= deadline:
                raise DistributedError(
                    f"cannot reach the coordinator at {address} within {timeout_s} s "
                    "(is process 0 running, and is the address right?)") from None
            time.sleep(0.2)


def check_same_module(text: str) -> None:
    """Every process must run the same module: compare hashes of the text
    through the coordinator before anything is compiled."""
    import jax

    if jax.process_count() == 1:
        return
    import numpy as np
    from jax.experimental import multihost_utils

    digest = hashlib.sha256(text.encode("utf-8")).digest()
    mine = np.frombuffer(digest, dtype=np.uint8)
    everyone = np.asarray(multihost_utils.process_allgather(mine))
    differ = [p for p in range(everyone.shape[0]) if not np.array_equal(everyone[p], everyone[0])]
    if differ:
        raise DistributedError(
            f"the processes run different modules: process {differ[0]}'s text hashes to "
            f"{bytes(everyone[differ[0]]).hex()[:12]}, process 0's to "
            f"{bytes(everyone[0]).hex()[:12]} (give every process the same file)")


def to_host(array):
    """The whole value of a global ``jax.Array`` on this host, from every
    process's shards (a collective: every process must call it)."""
    import numpy as np

    if getattr(array, "is_fully_addressable", True):
        return np.asarray(array)
    from jax.experimental import multihost_utils
    return np.asarray(multihost_utils.process_allgather(array, tiled=True))


def _host_port(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise DistributedError(f"coordinator address {address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def _int_env(name: str) -> int:
    value = os.environ[name]
    try:
        return int(value)
    except ValueError:
        raise DistributedError(f"{name}={value!r} is not an integer") from None


def _first_line(error: BaseException) -> str:
    lines = [line for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
