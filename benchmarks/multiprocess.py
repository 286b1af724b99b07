"""The demo's training step over one process or several, in one run.

    python3 benchmarks/multiprocess.py [--steps 20]

Partitions the demo's GPT-style training step (data=4 x model=2) once, then
runs the same partitioned module three ways on this host's CPU devices:

- 1 process x 8 devices, started directly (the baseline);
- 1 process x 8 devices under ``stablehlo-spmd launch``;
- 2 processes x 4 devices under ``stablehlo-spmd launch`` (gloo collectives).

Printed per way: the median step time over ``--steps`` steps after the
first, and the time from starting the command to the end of the first step
(imports, joining, compiling and one step); the difference between the two
1 x 8 rows is what launch itself adds.  On a 2-core machine the processes
share two cores, so the 2 x 4 step time measures the transport's overhead
more than any speed-up.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

STEP_SCRIPT = """
import json, os, sys, time
import numpy as np
start = float(os.environ["BENCH_START"])
import stablehlo_spmd as ss
from stablehlo_spmd.runtime import distributed
if distributed.requested():
    distributed.initialize()
else:
    ss.ensure_host_devices(8)
import jax
text = open(sys.argv[1]).read()
with np.load(sys.argv[2]) as inputs:
    leaves = [inputs[f"arg{i}"] for i in range(len(inputs.files))]
executable = ss.compile(text)
placed = executable.place(leaves)
jax.block_until_ready(executable(*placed))
first = time.time() - start
times = []
for _ in range(int(sys.argv[3])):
    began = time.perf_counter()
    jax.block_until_ready(executable(*placed))
    times.append(time.perf_counter() - began)
if jax.process_index() == 0:
    print("RESULT " + json.dumps({"first": first, "steps": times,
                                  "processes": jax.process_count()}))
"""


def _prepare(where: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    import importlib.resources

    import jax
    import numpy as np

    import stablehlo_spmd as ss
    from stablehlo_spmd import demo_model

    fn, args = demo_model.train_step_example()
    text = ss.export(fn, *args)
    rules = importlib.resources.files("stablehlo_spmd") / "demo_rules.toml"
    with importlib.resources.as_file(rules) as path:
        annotated = ss.annotate(text, rules=str(path))
    partitioned = ss.partition(ss.propagate(annotated))
    module = where / "step.mlir"
    module.write_text(partitioned)
    inputs = where / "in.npz"
    leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(args)]
    np.savez(inputs, **{f"arg{i}": leaf for i, leaf in enumerate(leaves)})
    return module, inputs


def _measure(prefix: list[str], script: pathlib.Path, module, inputs, steps: int) -> dict:
    env = dict(os.environ, BENCH_START=repr(time.time()))
    done = subprocess.run([*prefix, sys.executable, str(script), str(module), str(inputs),
                           str(steps)], capture_output=True, text=True, env=env, timeout=600)
    line = next((l for l in done.stdout.splitlines() if "RESULT " in l), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"{' '.join(prefix) or 'direct'} failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(line.split("RESULT ", 1)[1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    options = parser.parse_args(argv)
    launch = [sys.executable, "-m", "stablehlo_spmd.cli.main", "launch"]
    with tempfile.TemporaryDirectory() as temp:
        where = pathlib.Path(temp)
        module, inputs = _prepare(where)
        script = where / "step.py"
        script.write_text(STEP_SCRIPT)
        env_flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{env_flags} --xla_force_host_platform_device_count=8".strip()
        ways = [
            ("1 process x 8 devices, direct", []),
            ("1 process x 8 devices, launch", [*launch, "--processes", "1",
                                               "--devices-per-process", "8", "--"]),
            ("2 processes x 4 devices, launch", [*launch, "--processes", "2",
                                                 "--devices-per-process", "4", "--"]),
        ]
        rows = [(name, _measure(prefix, script, module, inputs, options.steps))
                for name, prefix in ways]
    print(f"demo training step, {options.steps} steps after the first, on {os.cpu_count()} cores")
    print(f"{'how':<34} {'median step':>12} {'start to first step':>20}")
    for name, found in rows:
        print(f"{name:<34} {statistics.median(found['steps']) * 1e3:>9.2f} ms "
              f"{found['first']:>18.2f} s")
    added = rows[1][1]["first"] - rows[0][1]["first"]
    ratio = statistics.median(rows[2][1]["steps"]) / statistics.median(rows[0][1]["steps"])
    print(f"launch adds {added:.2f} s before the first step; 2 x 4 step / 1 x 8 step: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
