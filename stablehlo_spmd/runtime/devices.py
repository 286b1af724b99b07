"""How many devices this process has, and which ones a module runs on.

Logical device ``i`` of a module (its partition id: the ids in
``replica_groups``, tile assignments and ``sdy.mesh`` ``device_ids``) runs on
``devices[i]``; by default the first N devices of jax's default backend, or
of the CPU backend when the default has fewer.  On CPU, N devices need
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before jax starts its
backends: `ensure_host_devices` does that (and `set_host_device_count`, one
process's exact share of a multi-process mesh).  This module imports jax
only inside its functions, so a command line can parse the module, learn N
and ask for the devices before jax is loaded.

The bottom of `stablehlo_spmd.runtime`: it imports none of the package's
other modules.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Sequence

import numpy as np

from stablehlo_spmd.errors import SpmdError

_FORCE_DEVICES = "--xla_force_host_platform_device_count"


class DeviceError(SpmdError, RuntimeError):
    """Not enough devices for the module, or a bad `devices` argument."""


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



def has_devices(n: int) -> bool:
    """Whether this process can compile for `n` devices (on CPU it asks for
    `n` host devices while jax's backends have not started)."""
    try:
        ensure_host_devices(n)
        return _available_devices(n) is not None
    except DeviceError:
        return False


def compile_platform(n: int) -> str:
    """The platform a program for `n` devices compiles on here: the default
    backend's where it has `n` devices, else the CPU backend's (as
    `_available_devices` picks); the default backend's where neither has."""
    import jax

    try:
        ensure_host_devices(n)
    except DeviceError:
        pass
    picked = _available_devices(n)
    return picked[0].platform if picked else jax.default_backend()


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
