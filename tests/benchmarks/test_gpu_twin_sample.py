"""benchmarks/gpu_twin.py --sample: the GPU twin's route on two host devices.

The twin itself runs only where a GPU is lent; its route (export, search,
partition here; compile both modules and compare them there) runs here at
hidden 64, so that a change that breaks it, or that makes our partitioned
step differ from the one XLA partitions from the same boundary shardings,
fails in the tests and not on a lent machine's clock.  Subprocesses: XLA
reads the host device count once per process.
"""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_twin.py"
DEVICES = 2


def _run(*arguments, env):
    return subprocess.run([sys.executable, str(SCRIPT), *arguments], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_the_twins_route_gives_xlas_numbers_on_host_devices(tmp_path):
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", OUT=str(tmp_path),
               XLA_FLAGS=" ".join(flags + [f"--xla_force_host_platform_device_count={DEVICES}"]))
    prepared = _run("prepare", str(tmp_path / "twin"), "--devices", str(DEVICES), "--sample",
                    "--budget-gib", "1", env=env)
    assert prepared.returncode == 0, prepared.stderr[-2000:]
    xla = (tmp_path / "twin" / "xla.mlir").read_text()
    # XLA is given the plan's shardings on the boundary only: no pending sum inside.
    assert "mhlo.sharding" in xla and "unreduced" not in xla and "@Sharding" not in xla
    timed = _run("time", str(tmp_path / "twin"), env=env)
    assert timed.returncode == 0, timed.stdout[-2000:] + timed.stderr[-2000:]
    report = json.loads((tmp_path / "gpu_twin.json").read_text())
    assert report["prepared"]["devices"] == DEVICES
    assert abs(report["loss"]["ours"] - report["loss"]["xla"]) <= 1e-5 * abs(report["loss"]["xla"])
    assert report["worst_relative_difference"]["ours"] < 1e-2
    assert all(len(result["steps_ms"]) == 40 for result in report["results"].values())
