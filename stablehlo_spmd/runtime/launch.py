"""``stablehlo-spmd launch``: N local processes of one command, as ``torchrun`` starts them.

    stablehlo-spmd launch --processes 2 --devices-per-process 4 -- stablehlo-spmd demo

Each process gets the variables `distributed` reads
(``STABLEHLO_SPMD_COORDINATOR``, ``_NUM_PROCESSES``, ``_PROCESS_ID``, and
``_DEVICES_PER_PROCESS`` with ``--devices-per-process``, which also sets
XLA's CPU host device count), so ``stablehlo-spmd run``, the demo and
``ss.run`` join each other without flags.  The coordinator defaults to a
free port on the loopback.  Every line a process prints comes out prefixed
with ``[id]``.  A process's stdout and stderr are read through separate
pipes, so a line stays whole: a C++ library that writes one line to stderr
in two pieces (Gloo does) cannot have a Python error line land inside it.

Failure is loud and bounded.  The first process to fail decides: launch
says which process it was and how it ended (exit code or signal), ends the
others at once (SIGTERM to each process's own process group, SIGKILL after
`GRACE_S`), and exits with that code (128 + the signal number for a
signal).  A process blocked in a collective waiting for a dead peer never
answers SIGTERM, so the SIGKILL is what keeps launch from waiting on jax's
own heartbeat timeout (100 s and more).  Interrupting launch ends them too.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Callable, Sequence

from stablehlo_spmd.runtime import distributed
from stablehlo_spmd.runtime.devices import with_host_device_count

GRACE_S = 3.0
_POLL_S = 0.05


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
    processes: int
    devices_per_process: int | None = None
    coordinator: str | None = None
    grace_s: float = GRACE_S


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How the launch ended: 0, or the first failure's process and status."""

    exit_code: int
    failed_process: int | None = None
    how: str = ""


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def process_environment(base: dict[str, str], options: LaunchOptions, coordinator: str,
                        process_id: int) -> dict[str, str]:
    env = dict(base)
    env[distributed.COORDINATOR] = coordinator
    env[distributed.NUM_PROCESSES] = str(options.processes)
    env[distributed.PROCESS_ID] = str(process_id)
    env["PYTHONUNBUFFERED"] = "1"   # lines come out as they are printed, not at exit
    if options.devices_per_process is not None:
        env[distributed.DEVICES_PER_PROCESS] = str(options.devices_per_process)
        # For any jax program, not only ours, which would read the variable above.
        env["XLA_FLAGS"] = with_host_device_count(env.get("XLA_FLAGS", ""),
                                                  options.devices_per_process)
    return env


def launch(command: Sequence[str], options: LaunchOptions,
           write: Callable[[str], None] | None = None) -> Outcome:
    """Run `command` in `options.processes` processes until all succeed or one fails."""
    if options.processes < 1:
        raise distributed.DistributedError(
            f"--processes must be positive, got {options.processes}")
    if not command:
        raise distributed.DistributedError("no command to launch (put it after '--')")
    coordinator = options.coordinator or f"127.0.0.1:{free_loopback_port()}"
    write = write or _write_stdout
    lock = threading.Lock()
    children: list[subprocess.Popen] = []
    pumps: list[threading.Thread] = []
    try:
        for process_id in range(options.processes):
            try:
                child = subprocess.Popen(
                    list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                    env=process_environment(os.environ, options, coordinator, process_id))
            except OSError as error:
                raise distributed.DistributedError(
                    f"cannot start {command[0]!r}: {error.strerror}") from None
            children.append(child)
            for stream in (child.stdout, child.stderr):
                pump = threading.Thread(target=_pump, args=(stream, process_id, write, lock),
                                        daemon=True)
                pump.start()
                pumps.append(pump)
        outcome = _watch(children)
    except BaseException:
        _stop(children, options.grace_s)
        raise
    if outcome.exit_code != 0:
        _stop(children, options.grace_s)
    for pump in pumps:
        pump.join(timeout=options.grace_s)
    return outcome


def _watch(children: list[subprocess.Popen]) -> Outcome:
    while True:
        running = False
        for process_id, child in enumerate(children):
            code = child.poll()
            if code is None:
                running = True
            elif code != 0:
                return _failure(process_id, code)
        if not running:
            return Outcome(0)
        time.sleep(_POLL_S)


def _failure(process_id: int, code: int) -> Outcome:
    if code < 0:
        number = -code
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return Outcome(128 + number, process_id, f"was killed by {name}")
    return Outcome(code, process_id, f"exited with code {code}")


def _stop(children: list[subprocess.Popen], grace_s: float) -> None:
    """End every child still running, and whatever it started, at once."""
    live = [c for c in children if c.poll() is None]
    for child in live:
        _signal_group(child, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while live and time.monotonic() < deadline:
        live = [c for c in live if c.poll() is None]
        time.sleep(_POLL_S)
    for child in children:
        _signal_group(child, signal.SIGKILL)   # stragglers, and grandchildren of the finished
    for child in children:
        try:
            child.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass


def _signal_group(child: subprocess.Popen, number: int) -> None:
    try:
        os.killpg(child.pid, number)
    except (ProcessLookupError, PermissionError):
        pass


def _pump(stream, process_id: int, write, lock: threading.Lock) -> None:
    prefix = f"[{process_id}] "
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace").rstrip("\n")
        with lock:
            write(prefix + line)
    stream.close()


def _write_stdout(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
