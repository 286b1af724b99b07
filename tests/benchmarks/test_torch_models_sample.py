"""benchmarks/torch_models.py --sample: GPT-2's training step through the torch front end.

The sample is transformers' tiny GPT-2 (random weights) trained for 3 steps
with ``torch.optim.SGD`` under the Megatron rules on 8 host devices, through
``import stablehlo_spmd.torch as xs`` as a PyTorch user writes it, against
the same 3 steps in eager torch on one CPU: every loss, parameter and
optimizer-state tensor within 1e-5 relative; then the traced program against
``jax.jit`` with the same shardings, where ours must move no more bytes than
XLA's.  It runs in a subprocess because XLA reads the host device count once
per process (the unit tests' conftest asks for 8 as well, but jax may already
be started here).

torch, torchax, transformers and torchvision are needed (the ``torch`` and
``bench`` extras); without them this test fails rather than skips, so a test
environment that lacks them is noticed.
"""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "torch_models.py"
TOLERANCE = 1e-5


def test_torch_models_sample_matches_eager_and_moves_no_more_than_xla(tmp_path):
    output = tmp_path / "sample.json"
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=" ".join(flags + ["--xla_force_host_platform_device_count=8"]))
    done = subprocess.run([sys.executable, str(SCRIPT), "--sample", "--json", str(output)],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          check=False)
    assert output.exists(), f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    results = json.loads(output.read_text())
    assert [(r["model"], r["rules"], r["program"]) for r in results] == [
        ("gpt2", "megatron", "step-sgd")], results
    result = results[0]
    assert not result["failure"], result["failure"] + "\n" + done.stderr[-3000:]
    numerics = result["numerics"]
    assert numerics is not None and not numerics["failures"], numerics
    assert numerics["loss_error"] <= TOLERANCE, numerics
    assert numerics["worst"] <= TOLERANCE, numerics
    assert result["ours_bytes"] <= result["xla_bytes"], (result["ours_bytes"], result["xla_bytes"])
    assert done.returncode == 0, done.stdout[-2000:] + "\n" + done.stderr[-3000:]
