"""``stablehlo-spmd demo``: the whole tool chain on a GPT-style training step.

Exports the training step of `stablehlo_spmd.demo_model`, annotates it from
the package's ``demo_rules.toml`` (data=4 x model=2, Megatron layout),
propagates, partitions, runs the per-device program on 8 CPU host devices,
and checks the loss and every updated parameter against a single-device run
of the same program.  It prints the collectives the partitioner inserted
(kind, bytes per device, the line of the model that caused each, or "no
location" when no model line did) and the time each stage took.

Under ``stablehlo-spmd launch --processes N`` the same 8 devices are those
of N processes (8 / N host devices each): every process partitions the
same module, feeds its own devices and checks the gathered results against
its own single-device run; process 0 prints the report.

The model and its rules ship inside the package, so an installed demo runs
from any directory; ``examples/transformer.py`` is the same model for the
README's other commands.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import time

DEVICES = 8
NO_LOCATION = "no location"


@dataclasses.dataclass
class Collective:
    kind: str
    bytes_per_device: float
    where: str


def run_demo(echo=print) -> bool:
    from stablehlo_spmd.runtime import distributed
    from stablehlo_spmd.runtime.devices import ensure_host_devices
    # Under `stablehlo-spmd launch` the 8 devices are every process's together.
    several = distributed.join(DEVICES)
    if not several:
        ensure_host_devices(DEVICES)
    import numpy as np
    import jax

    import stablehlo_spmd as ss
    from stablehlo_spmd import demo_model

    if several and jax.process_index() != 0:
        echo = _quiet   # one report, from process 0; every process still checks

    timings = {}
    start = time.perf_counter()
    fn, args = demo_model.train_step_example()
    text = ss.export(fn, *args)
    timings["export"] = time.perf_counter() - start

    rules_file = importlib.resources.files("stablehlo_spmd") / "demo_rules.toml"
    start = time.perf_counter()
    with importlib.resources.as_file(rules_file) as rules:
        annotated = ss.annotate(text, rules=str(rules), filename="train_step.mlir")
    timings["annotate"] = time.perf_counter() - start
    start = time.perf_counter()
    propagated = ss.propagate(annotated, filename="train_step.mlir")
    timings["propagate"] = time.perf_counter() - start
    start = time.perf_counter()
    partitioned = ss.run_passes(propagated, "builtin.module(spmd-partition)", "train_step.mlir")
    timings["partition"] = time.perf_counter() - start

    leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(args)]
    start = time.perf_counter()
    got = ss.run(partitioned, leaves)
    jax.block_until_ready(got)
    timings[f"compile + run on {DEVICES} devices"] = time.perf_counter() - start
    got = [distributed.to_host(g) for g in got]
    start = time.perf_counter()
    want = ss.run_single_device(text, leaves, device=jax.local_devices()[0])
    timings["single-device run"] = time.perf_counter() - start

    worst = max(float(np.max(np.abs(np.asarray(g) - np.asarray(w)))) for g, w in zip(got, want))
    matches = all(np.allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-5)
                  for g, w in zip(got, want))
    collectives = list_collectives(partitioned)

    where = (f"{DEVICES} CPU devices in {jax.process_count()} processes"
             if jax.process_count() > 1 else f"{DEVICES} CPU devices")
    echo(f"GPT-style training step: {len(leaves)} arguments, {len(got)} results, "
         f"mesh data=4 x model=2 on {where}")
    echo(f"loss: partitioned {float(np.asarray(got[-1])):.6f}, "
         f"single device {float(np.asarray(want[-1])):.6f}")
    echo(f"all results match the single-device run: {matches} (largest difference {worst:.2e})")
    echo("")
    echo(f"{'collective':<20} {'bytes/device':>13}  caused by")
    for collective in collectives:
        echo(f"{collective.kind:<20} {collective.bytes_per_device:>13,.0f}  {collective.where}")
    total = sum(c.bytes_per_device for c in collectives)
    echo(f"{len(collectives)} collectives, {total:,.0f} bytes per device")
    echo("")
    for stage, seconds in timings.items():
        echo(f"{stage:<28} {seconds * 1e3:9.1f} ms")
    return matches


def _quiet(line: str = "") -> None:
    pass


def list_collectives(partitioned: str) -> list[Collective]:
    """Every collective in a partitioned module, with its cost and origin."""
    from stablehlo_spmd.ir import make_context, parse_module, source_position
    from jaxlib.mlir import ir

    found: list[Collective] = []
    with make_context() as context:
        module = parse_module(partitioned, "partitioned.mlir", context)

        def visit(op):
            name = op.name
            if name.startswith("stablehlo.") and name[len("stablehlo."):] in (
                    "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                    "collective_permute"):
                found.append(_describe(op, name[len("stablehlo."):], source_position))
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
    return found


def _describe(op, kind: str, source_position) -> Collective:
    from stablehlo_spmd.shapes import tensor_bytes as size

    operand = op.operands[0].type
    result = op.results[0].type
    group = 1
    if "replica_groups" in op.attributes:
        groups = op.attributes["replica_groups"].type.shape
        group = groups[1] if len(groups) == 2 else 1
    fraction = (group - 1) / group if group else 0.0
    cost = {
        "all_reduce": 2 * size(operand) * fraction,
        "all_gather": size(result) * fraction,
        "reduce_scatter": size(operand) * fraction,
        "all_to_all": size(operand) * fraction / max(group, 1),
        "collective_permute": float(size(operand)),
    }[kind]
    return Collective(kind, cost, source_position(op.location) or NO_LOCATION)
