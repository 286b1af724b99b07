"""benchmarks/scale.py --sample: its cells at small widths, partitioned against one device.

The real-width cells only compile (nothing of model size can run here); the
sample runs the same models, programs and rule sets at hidden 64 on 16 host
devices, so a partitioner change that breaks one of those plans numerically
fails here and not only in the hour-long benchmark.  It runs in a subprocess
because XLA reads the host device count once per process (the unit tests'
conftest asks for 8).

keras-hub is needed (``pip install '.[bench]' && pip install --no-deps
'keras-hub==0.32.*'``); without it this test fails rather than skips, so a
test environment that lacks it is noticed.
"""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "scale.py"
DEVICES = 16
# Llama 2-D (SGD and AdamW), Megatron, FSDP and 3-D, and Mixtral's experts: the plans that
# differ in kind; and the forms trainers write, each layer under jax.checkpoint and the
# layers scanned with MaxText's default remat.  (ViT, the 70B widths and the other forms'
# rule sets add time, not kinds; `scale.py --sample` runs them.)
CELLS = ("llama3-8b-L2-", "mixtral", "llama3-8b-remat-L2-megatron", "llama3-8b-scan-full-L2-2d")


def test_scale_sample_matches_one_device(tmp_path):
    output = tmp_path / "sample.json"
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu",
               XLA_FLAGS=" ".join(flags + [f"--xla_force_host_platform_device_count={DEVICES}"]))
    done = subprocess.run([sys.executable, str(SCRIPT), "--sample", "--only", *CELLS,
                           "--json", str(output)], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert "needs keras-hub" not in done.stderr, (
        "benchmarks/scale.py --sample needs keras-hub: pip install '.[bench]' && "
        "pip install --no-deps 'keras-hub==0.32.*'\n" + done.stderr[-2000:])
    assert output.exists(), f"exit {done.returncode}\n{done.stderr[-4000:]}"
    results = json.loads(output.read_text())
    names = [r["name"] for r in results]
    for kind in ("-2d-16-sgd", "-2d-16-adamw", "-megatron-", "-fsdp-", "-3d-", "-expert-",
                 "-remat-", "-scan-full-"):
        assert any(kind in name for name in names), f"no {kind} cell ran: {names}"
    bad = [f"{r['name']} on {r['mesh']}: {r['failure'] or r['mismatch']}"
           for r in results if not r["ok"]]
    assert not bad, "\n".join(bad) + "\n" + done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]
