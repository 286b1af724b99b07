"""A full-depth plan's small-width twin, timed on the GPUs of one machine: ours against XLA's.

    python3 benchmarks/gpu_twin.py prepare DIR --devices N   # here, on CPU: export, search,
                                                             # partition; writes DIR/*.mlir
    python3 benchmarks/gpu_twin.py time DIR                  # on the GPU machine: compile and
                                                             # time both; prints a table
    python3 benchmarks/gpu_twin.py prepare DIR --sample ...  # 2 layers at hidden 64: the same
                                                             # route on host devices (its test)

The twin is Llama-3-8B's training step (SGD, bf16) at its full depth of 32
layers with every width cut down (hidden 1024, 16/4 heads, FFN 3584, vocab
32768, 8 sequences of 1024 tokens): auto_scale.py's program, small enough for
one GPU.  ``prepare`` runs the search with the mesh ``data=N`` and a budget
alone, as auto_scale.py does, and writes:

- ``xla.mlir``: the exported program with the plan's shardings on its
  arguments and results only, which XLA propagates and partitions itself
  (the same annotations, as the project's goals compare); on one device,
  the exported single-device program.  (The plan's inner shardings are left
  out: they hold pending sums, ``{unreduced}``, which XLA's GSPMD
  partitioner does not sum, and the runtime refuses them.)
- ``ours.mlir``: the same plan partitioned by this project (``ss.partition``).

``time`` needs only jax with a GPU backend and this package's runtime (no
keras, no highspy): it compiles both modules through PJRT on the first N
devices, runs each on the same random arguments (three warm-up steps each,
then four rounds of ten synchronized steps, the modules taking turns so that
a drift of the card's clocks falls on all alike), checks that they give the
same loss and parameters, and prints the median step and the compile times.
Any further ``ours-*.mlir`` placed in DIR (a variant of the pipeline under
study) is timed the same way.  Full
numbers go to ``$OUT/gpu_twin.json`` where ``OUT`` is set.

On a machine with one GPU the mesh has one device: the plan is trivial and
the figure says only that our pipeline's output runs as fast as the
program XLA compiles from jax's own export; a plan over several devices
needs a machine with that many.  Measured on one H200 (2026-11-30, jax
0.11.2 there): XLA 119.1 ms a step, ours 120.0 ms (1.007x; the four rounds'
medians of XLA's alone spread from 117.2 to 121.1 ms), the same loss to the
last bit; the first compile (XLA's) took 23.6 s, ours 10.8 s after it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

TWIN = dict(vocab=32768, hidden=1024, heads=16, kv_heads=4, ffn=3584, layers=32,
            sequence=1024)
# The same route at widths host devices run in a blink (tests/benchmarks/test_gpu_twin_sample.py).
SAMPLE = dict(vocab=512, hidden=64, heads=8, kv_heads=4, ffn=128, layers=2, sequence=16)
EXAMPLES = 8                       # sequences; --devices must divide it
WARMUP, REPEAT, ROUNDS = 3, 10, 4


def prepare(directory: str, devices: int, budget_gib: float, widths: dict = TWIN) -> None:
    os.environ["KERAS_BACKEND"] = "jax"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import auto_scale
    import scale

    import stablehlo_spmd as ss

    model = scale.ModelConfig("llama", **widths)
    config = auto_scale.Config("llama3-8b", "sgd", f"data={devices}",
                               per_shard=EXAMPLES // devices, sequence=widths["sequence"],
                               budgets=(), hands=())
    start = time.perf_counter()
    text, _ = auto_scale.export(config, model, model.layers, "bfloat16")
    exported = time.perf_counter() - start
    os.makedirs(directory, exist_ok=True)
    planned, plan, searched = auto_scale.search(text, config.mesh, budget_gib * auto_scale.GiB)
    start = time.perf_counter()
    partitioned = ss.partition(planned)
    partitioned_s = time.perf_counter() - start
    with open(os.path.join(directory, "xla.mlir"), "w") as f:
        f.write(text if devices == 1 else boundary_shardings_only(planned))
    with open(os.path.join(directory, "ours.mlir"), "w") as f:
        f.write(partitioned)
    info = dict(twin=widths, examples=EXAMPLES, devices=devices, budget_gib=budget_gib,
                export_s=exported, search_s=searched, partition_s=partitioned_s,
                estimated_bytes=plan.cost, estimated_memory=plan.peak_memory)
    with open(os.path.join(directory, "prepared.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps(info))


def boundary_shardings_only(planned: str) -> str:
    """`planned` with its shardings kept on ``@main``'s arguments and results only: every
    op's ``mhlo.sharding`` dropped and every ``custom_call @Sharding`` bypassed."""
    from jaxlib.mlir import ir

    from stablehlo_spmd import module_shardings as ms
    from stablehlo_spmd.ir import make_context, parse_module, print_module

    with make_context() as context:
        module = parse_module(planned, "<planned>", context)
        annotated, constraints = [], []

        def visit(op):
            if ms.is_sharding_constraint(op):
                constraints.append(op)
            elif op.name != "func.func" and ms.MHLO_SHARDING in op.attributes:
                annotated.append(op)
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
        for op in annotated:
            del op.attributes[ms.MHLO_SHARDING]
        for op in constraints:
            op.results[0].replace_all_uses_with(op.operands[0])
            op.erase()
        return print_module(module)


def _arguments(executable, vocab: int, seed: int = 0) -> list:
    """Random arguments of the module's global shapes: small weights, token ids (and the
    padding mask and labels) below `vocab`."""
    import ml_dtypes

    rng = np.random.default_rng(seed)
    values = []
    for argument in executable.arguments:
        shape, dtype = tuple(argument.shape), np.dtype(
            ml_dtypes.bfloat16 if "bf16" in str(argument.dtype) else argument.dtype)
        if np.issubdtype(dtype, np.integer):
            values.append(rng.integers(0, vocab, size=shape, dtype=dtype))
        else:
            values.append((rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(dtype))
    return values


def _steps(executable, arguments, count: int) -> tuple[list, list[float]]:
    import jax

    outputs, steps = None, []
    for _ in range(count):
        start = time.perf_counter()
        outputs = jax.block_until_ready(executable(*arguments))
        steps.append(time.perf_counter() - start)
    return outputs, steps


def time_all(directory: str) -> int:
    """Compile every module in `directory` (``xla.mlir``, ``ours*.mlir``), then time them
    in alternating rounds on one set of arguments, so that a drift of the card's clocks
    falls on every side alike."""
    import glob

    import jax

    from stablehlo_spmd import runtime

    with open(os.path.join(directory, "prepared.json")) as f:
        info = json.load(f)
    devices = jax.devices()[:info["devices"]]
    sides = ["xla"] + sorted(os.path.basename(path)[:-5]
                             for path in glob.glob(os.path.join(directory, "ours*.mlir")))
    compiled, results, outputs, arguments = {}, {}, {}, None
    for side in sides:
        with open(os.path.join(directory, f"{side}.mlir")) as f:
            text = f.read()
        start = time.perf_counter()
        compiled[side] = runtime.compile(text, devices)
        results[side] = dict(compile_s=time.perf_counter() - start, steps_ms=[])
        if arguments is None:
            arguments = _arguments(compiled[side], info["twin"]["vocab"])
            if info["devices"] == 1:
                arguments = jax.device_put(arguments, devices[0])
        outputs[side], _ = _steps(compiled[side], arguments, WARMUP)
    for round_ in range(ROUNDS):
        for side in (sides if round_ % 2 == 0 else sides[::-1]):
            _, steps = _steps(compiled[side], arguments, REPEAT)
            results[side]["steps_ms"] += [1e3 * step for step in steps]
    worst = {}
    for side in sides[1:]:
        worst[side] = 0.0
        for got, want in zip(outputs[side], outputs["xla"]):
            got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
            scale_ = float(np.max(np.abs(want))) or 1.0
            worst[side] = max(worst[side], float(np.max(np.abs(got - want))) / scale_)
    for result in results.values():
        result["step_ms"] = statistics.median(result["steps_ms"])
    loss = {side: float(np.asarray(outputs[side][-1], np.float32)) for side in sides}
    report = dict(prepared=info, device=str(devices[0].device_kind), results=results,
                  loss=loss, worst_relative_difference=worst)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gpu_twin.json"), "w") as f:
            json.dump(report, f, indent=1)
    print(f"device: {report['device']} x {info['devices']}; {ROUNDS} rounds of {REPEAT} steps")
    print(f"{'module':12} {'compile s':>10} {'step ms (median)':>17} {'/ xla':>7} "
          f"{'loss':>10} {'max rel diff':>13}")
    base = results["xla"]["step_ms"]
    for side in sides:
        print(f"{side:12} {results[side]['compile_s']:10.1f} {results[side]['step_ms']:17.2f} "
              f"{results[side]['step_ms'] / base:7.3f} {loss[side]:10.6f} "
              f"{worst.get(side, 0.0):13.2e}")
    return 0 if all(value < 1e-2 for value in worst.values()) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("prepare", "time"))
    parser.add_argument("directory")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--budget-gib", type=float, default=120.0)
    parser.add_argument("--sample", action="store_true", help="2 layers at hidden 64")
    args = parser.parse_args()
    if args.mode == "prepare":
        prepare(args.directory, args.devices, args.budget_gib, SAMPLE if args.sample else TWIN)
        return 0
    return time_all(args.directory)


if __name__ == "__main__":
    sys.exit(main())
