"""Several processes as one program: `stablehlo-spmd launch`, multi-controller
`run`, and the failures a user meets.

Every test starts real processes on the loopback (2 processes x 4 CPU
devices, gloo collectives), as a user's `launch` does.  Numerics are
checked against the single-device run of the same program, or, for
collectives written by hand, against NumPy.
"""

import os
import pathlib
import re
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import stablehlo_spmd as ss
from stablehlo_spmd.runtime import distributed
from stablehlo_spmd.runtime.launch import LaunchOptions, _failure, launch

LAUNCH = [sys.executable, "-m", "stablehlo_spmd.cli.main", "launch"]
RUN = [sys.executable, "-m", "stablehlo_spmd.cli.main", "run"]
RULES = """\
[mesh]
axes = "data=4,model=2"
[[rules]]
pattern = "^w"
spec = "(None, 'model')"
[[rules]]
pattern = "^x$"
spec = "('data', None)"
"""


def _train_step(w, x):
    def loss(w):
        return jnp.mean(jnp.tanh(x @ w) ** 2)
    value, grad = jax.value_and_grad(loss)(w)
    return w - 0.1 * grad, value


@pytest.fixture(scope="module")
def training_step(tmp_path_factory):
    """A partitioned 8-device training step, its inputs and its one-device results."""
    where = tmp_path_factory.mktemp("step")
    w = np.random.RandomState(0).randn(16, 32).astype(np.float32)
    x = np.random.RandomState(1).randn(64, 16).astype(np.float32)
    text = ss.export(_train_step, w, x)
    (where / "rules.toml").write_text(RULES)
    partitioned = ss.partition(ss.propagate(ss.annotate(text, rules=str(where / "rules.toml"))))
    (where / "step.mlir").write_text(partitioned)
    (where / "single.mlir").write_text(text)
    np.savez(where / "in.npz", arg0=w, arg1=x)
    want = [np.asarray(r) for r in ss.run_single_device(text, [w, x])]
    return where, want


def _launch(args, cwd, timeout=120, env=None):
    return subprocess.run([*LAUNCH, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _left_running(marker: str) -> list[int]:
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def test_cli_run_over_two_processes_equals_one_device(training_step):
    where, want = training_step
    done = _launch(["--processes", "2", "--devices-per-process", "4", "--",
                    *RUN, "step.mlir", "--inputs", "in.npz", "--outputs", "out.npz"], where)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[0] result1: float32[]" in done.stdout
    assert "[1] result" not in done.stdout   # process 0 reports and writes
    with np.load(where / "out.npz") as got:
        for i, expected in enumerate(want):
            np.testing.assert_allclose(got[f"result{i}"], expected, rtol=1e-5, atol=1e-6)


API_SCRIPT = """
import sys
import numpy as np
import stablehlo_spmd as ss

ss.distributed.initialize(devices_per_process=4)
import jax

text = open("step.mlir").read()
with np.load("in.npz") as inputs:
    w, x = inputs["arg0"], inputs["arg1"]
executable = ss.compile(text)
# x arrives as process-local rows: each process holds only its devices' rows.
x_sharding = executable.in_shardings[1]
rows = sorted({index[0].start or 0 for device, index in
               x_sharding.devices_indices_map(x.shape).items()
               if device.process_index == jax.process_index()})
size = x.shape[0] // 4
local = np.concatenate([x[r:r + size] for r in rows])
x_global = jax.make_array_from_process_local_data(x_sharding, local, x.shape)
got = executable(w, x_global)
assert all(isinstance(g, jax.Array) for g in got)
got = [ss.distributed.to_host(g) for g in got]
want = ss.run_single_device(open("single.mlir").read(), [w, x], device=jax.local_devices()[0])
for g, v in zip(got, want):
    np.testing.assert_allclose(g, np.asarray(v), rtol=1e-5, atol=1e-6)
print("matches", jax.process_index(), jax.process_count(), len(jax.devices()))
"""


def test_python_api_over_two_processes_equals_one_device(training_step):
    where, _ = training_step
    (where / "api.py").write_text(API_SCRIPT)
    done = _launch(["--processes", "2", "--", sys.executable, "api.py"], where)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[0] matches 0 2 8" in done.stdout and "[1] matches 1 2 8" in done.stdout


def _collectives_module() -> str:
    """jax's own shard_map lowering with one of each collective over all 8 devices."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]), ("x",))

    def body(block):                      # block: one row, (1, 8)
        summed = jax.lax.psum(block, "x")
        gathered = jax.lax.all_gather(block, "x", axis=0, tiled=True)
        scattered = jax.lax.psum_scatter(block, "x", scatter_dimension=1, tiled=True)
        exchanged = jax.lax.all_to_all(block, "x", 1, 0, tiled=True)
        shifted = jax.lax.ppermute(block, "x", [(i, (i + 1) % 8) for i in range(8)])
        return summed, gathered, scattered, exchanged, shifted

    mapped = jax.shard_map(body, mesh=mesh, in_specs=P("x", None),
                           out_specs=(P(), P(), P(None, "x"), P(None, "x"), P("x", None)),
                           check_vma=False)
    return jax.jit(mapped).lower(jax.ShapeDtypeStruct((8, 8), np.float32)).as_text()


def test_every_collective_crosses_the_process_boundary(tmp_path):
    x = np.arange(64, dtype=np.float32).reshape(8, 8) ** 1.5
    (tmp_path / "collectives.mlir").write_text(_collectives_module())
    np.savez(tmp_path / "in.npz", arg0=x)
    done = _launch(["--processes", "2", "--devices-per-process", "4", "--",
                    *RUN, "collectives.mlir", "--inputs", "in.npz", "--outputs", "out.npz"],
                   tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    columns = x.sum(axis=0, keepdims=True)
    with np.load(tmp_path / "out.npz") as got:
        np.testing.assert_allclose(got["result0"], columns, rtol=1e-6)        # all-reduce
        np.testing.assert_array_equal(got["result1"], x)                      # all-gather
        np.testing.assert_allclose(got["result2"], columns, rtol=1e-6)        # reduce-scatter
        np.testing.assert_array_equal(got["result3"], x)                      # all-to-all
        np.testing.assert_array_equal(got["result4"], np.roll(x, 1, axis=0))  # permute


def test_a_process_that_exits_stops_the_launch(training_step):
    where, _ = training_step
    marker = f"marker-{os.getpid()}-exits"
    command = (f'[ "$STABLEHLO_SPMD_PROCESS_ID" = 1 ] && exit 3; '
               f'exec {sys.executable} -m stablehlo_spmd.cli.main run step.mlir '
               f'--inputs in.npz --outputs out-exit.npz # {marker}')
    start = time.monotonic()
    done = _launch(["--processes", "2", "--", "sh", "-c", command], where)
    assert time.monotonic() - start < 90
    assert done.returncode == 3
    assert "error: process 1 of 2 exited with code 3" in done.stderr
    assert not (where / "out-exit.npz").exists()
    assert _left_running(marker) == []


KILLED_SCRIPT = """
import os, signal, sys
from stablehlo_spmd.cli.main import main
if os.environ["STABLEHLO_SPMD_PROCESS_ID"] == "1":
    import stablehlo_spmd as ss
    ss.distributed.initialize(devices_per_process=4)
    import jax
    jax.devices()
    os.kill(os.getpid(), signal.SIGKILL)   # gone once both have joined
main(["run", "step.mlir", "--inputs", "in.npz", "--outputs", "out-killed.npz"])
"""


def test_a_process_killed_mid_run_stops_the_launch(training_step):
    where, _ = training_step
    (where / "killed.py").write_text(KILLED_SCRIPT)
    marker = f"marker-{os.getpid()}-killed"
    start = time.monotonic()
    done = _launch(["--processes", "2", "--devices-per-process", "4", "--",
                    sys.executable, "killed.py", marker], where)
    assert time.monotonic() - start < 90
    assert done.returncode == 128 + 9, done.stdout + done.stderr
    assert "error: process 1 of 2 was killed by SIGKILL" in done.stderr
    assert not (where / "out-killed.npz").exists()
    assert not list(where.glob(".stablehlo-spmd-*"))
    assert _left_running(marker) == []


def test_unreachable_coordinator_is_one_line(training_step):
    where, _ = training_step
    env = {**os.environ, distributed.TIMEOUT: "2"}
    done = subprocess.run([*RUN, "step.mlir", "--inputs", "in.npz", "--outputs", "o.npz",
                           "--coordinator", "127.0.0.1:1", "--num-processes", "2",
                           "--process-id", "1"], cwd=where, capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 1
    assert done.stderr.strip() == ("error: cannot reach the coordinator at 127.0.0.1:1 within "
                                   "2 s (is process 0 running, and is the address right?)")
    assert not (where / "o.npz").exists()


def test_too_few_devices_and_different_modules_are_one_line(training_step):
    where, _ = training_step
    done = _launch(["--processes", "2", "--devices-per-process", "2", "--",
                    *RUN, "step.mlir", "--inputs", "in.npz", "--outputs", "o.npz"], where)
    assert done.returncode == 1
    # Both processes find too few devices; the first to fail decides and the
    # other is ended, maybe before it prints: its line is the one to show.
    first = re.search(r"process (\d) of 2 exited with code 1", done.stderr)
    assert first, done.stderr
    assert (f"[{first.group(1)}] error: the module needs 8 devices but the 2 processes have "
            "4 cpu devices in all (2 here)") in done.stdout
    text = (where / "step.mlir").read_text()
    (where / "other.mlir").write_text(text.replace("1.000000e-01", "2.000000e-01", 1))
    pick = ('f=step.mlir; [ "$STABLEHLO_SPMD_PROCESS_ID" = 1 ] && f=other.mlir; exec '
            f'{sys.executable} -m stablehlo_spmd.cli.main run $f --inputs in.npz --outputs o.npz')
    done = _launch(["--processes", "2", "--", "sh", "-c", pick], where)
    assert done.returncode == 1
    assert "error: the processes run different modules: process 1's text hashes to" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_launch_prefixes_lines_and_sets_each_process_apart():
    lines = []
    outcome = launch(["sh", "-c", 'echo "$STABLEHLO_SPMD_PROCESS_ID of $STABLEHLO_SPMD_NUM_'
                      'PROCESSES at $STABLEHLO_SPMD_COORDINATOR $XLA_FLAGS"'],
                     LaunchOptions(3, devices_per_process=2), lines.append)
    assert outcome.exit_code == 0
    assert len(lines) == 3
    for process_id in range(3):
        line = next(l for l in lines if l.startswith(f"[{process_id}] "))
        assert f"{process_id} of 3 at 127.0.0.1:" in line
        assert line.endswith("--xla_force_host_platform_device_count=2")


def test_a_line_written_in_pieces_to_stderr_stays_whole():
    # As Gloo writes its lines: half to stderr, then the other half after a
    # line on stdout has gone out.
    script = ("import sys, time; sys.stderr.write('half '); sys.stderr.flush(); "
              "print('whole', flush=True); time.sleep(0.2); sys.stderr.write('line\\n')")
    lines = []
    outcome = launch([sys.executable, "-c", script], LaunchOptions(1), lines.append)
    assert outcome.exit_code == 0
    assert sorted(lines) == ["[0] half line", "[0] whole"]


def test_failure_reports_code_or_signal():
    assert _failure(1, 3) == type(_failure(1, 3))(3, 1, "exited with code 3")
    assert _failure(0, -9).exit_code == 137 and _failure(0, -9).how == "was killed by SIGKILL"


@pytest.mark.parametrize("kwargs, message", [
    (dict(coordinator="h:1"), "a coordinator, a process count and a process id are needed"),
    (dict(coordinator="h:1", num_processes=2, process_id=2), "process id 2 is not in 0..1"),
    (dict(coordinator="nohostport", num_processes=2, process_id=0), "is not HOST:PORT"),
])
def test_settings_are_checked(kwargs, message, monkeypatch):
    monkeypatch.delenv(distributed.COORDINATOR, raising=False)
    with pytest.raises(distributed.DistributedError, match=message):
        distributed.settings(**kwargs)


def test_demo_over_two_processes(tmp_path):
    done = _launch(["--processes", "2", "--", sys.executable, "-m", "stablehlo_spmd.cli.main",
                    "demo"], tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "on 8 CPU devices in 2 processes" in done.stdout
    assert "[0] all results match the single-device run: True" in done.stdout
