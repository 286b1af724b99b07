"""Reshard plans executed for real: emitted as StableHLO collectives and run
on the CPU devices through PJRT.

For random (source, target) pairs on random meshes (device orders
shuffled), a program that only returns its argument, with the argument
sharded `source` and the result `target`, is partitioned: the partitioner
plans the reshard and emits its collectives.  Running it must leave on
every device exactly its block of the input under `target` (checked shard
by shard, so a wrong replica cannot hide behind a right one), and the bytes
the emitted collectives move, counted from their operand types with the
cost table of DESIGN.md, must equal the plan's price.

(`test_reshard.py` checks the same plans on a numpy simulator, unreduced
sources included, which a function argument cannot be.)
"""

import math
import re

import jax
import numpy as np
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from stablehlo_spmd import runtime
from stablehlo_spmd.api import run_passes
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.module_shardings import mesh_attr_text
from stablehlo_spmd.reshard import plan, plan_cost
from stablehlo_spmd.sharding import Sharding

from mesh_strategies import meshes

ELEMENT_BYTES = 4  # i32: exact, and a size the cost table prices

@st.composite
def layouts(draw, mesh, rank):
    places = {axis: draw(st.sampled_from([*range(rank), None])) for axis in mesh.axis_names}
    dims = [tuple(draw(st.permutations([a for a in mesh.axis_names if places[a] == d])))
            for d in range(rank)]
    return Sharding(mesh, dims)


@st.composite
def problems(draw):
    mesh = draw(meshes())
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=3)))
    source = draw(layouts(mesh, len(shape)))
    target = draw(layouts(mesh, len(shape)))
    assume(source != target)
    return source, target, shape, draw(st.integers(0, 2**31 - 1))


def _identity_program(source: Sharding, target: Sharding, shape) -> str:
    tensor = f"tensor<{'x'.join(map(str, shape))}xi32>"
    return f"""module attributes {{spmd.mesh = {mesh_attr_text(source.mesh)}}} {{
  func.func @main(%a: {tensor} {{mhlo.sharding = "{source.to_hlo()}"}})
      -> ({tensor} {{mhlo.sharding = "{target.to_hlo()}"}}) {{
    return %a : {tensor}
  }}
}}"""


def _tensor_bytes(text: str) -> int:
    dims = text[len("tensor<"):-1].split("x")[:-1]
    return math.prod(int(d) for d in dims) * ELEMENT_BYTES


def _moved_bytes(partitioned: str) -> float:
    """Bytes per device the collectives move, by DESIGN.md's table (B: the
    operand's bytes, p: the group size)."""
    total = 0.0
    lines = partitioned.splitlines()
    for index, line in enumerate(lines):
        found = re.search(r'"stablehlo\.(all_gather|all_reduce|reduce_scatter|all_to_all|'
                          r'collective_permute)"', line)
        if not found:
            continue
        kind = found.group(1)
        if kind == "all_reduce":   # a gather by sum: the types follow its combiner region
            line += next(later for later in lines[index + 1:] if later.strip().startswith("})"))
        operand = re.search(r": \((tensor<[^>]*>)\) -> tensor<", line)
        # Sources here are never partial: no reduce_scatter.
        assert operand is not None, f"unexpected collective: {line}"
        size = _tensor_bytes(operand.group(1))
        if kind == "collective_permute":
            total += size
            continue
        groups = re.search(r"replica_groups = dense<(\[\[[^>]*\]\])>", line).group(1)
        p = len(eval(groups)[0])
        total += {"all_gather": (p - 1) * size, "all_to_all": size * (p - 1) / p,
                  "all_reduce": 2 * size * (p - 1) / p}[kind]
    return total


@settings(derandomize=True, max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(problems())
# 6 rows in blocks of 3 cut into blocks of 2: the device at a=0, b=1 takes
# row 3 from a=1 by halo exchange (XLA's PartialReplicateToTiledHaloExchange).
@example((Sharding(Mesh.from_string("a=2,b=2"), (("a",), ())),
          Sharding(Mesh.from_string("a=2,b=2"), (("a", "b"), ())), (6, 3), 0))
# ... and back: b's gather, then row 3 from a=0 (PartialReplicateToPartial-
# ReplicateReshardHaloExchange).
@example((Sharding(Mesh.from_string("a=2,b=2"), (("a", "b"), ())),
          Sharding(Mesh.from_string("a=2,b=2"), (("a",), ())), (6, 3), 0))
# A row on one device of four, the others padding: its owner's broadcast by a sum.
@example((Sharding(Mesh.from_string("a=2,b=2"), (("a", "b"), ())),
          Sharding(Mesh.from_string("a=2,b=2"), ((), ())), (1, 3), 0))
# Detours: both axes parked on the columns and y sent back; y parked on the
# columns while x is sliced off the rows (test_reshard.py prices both).
@example((Sharding(Mesh.from_string("x=4,y=2"), (("x", "y"), ())),
          Sharding(Mesh.from_string("x=4,y=2"), (("y",), ("x",))), (16, 8), 0))
@example((Sharding(Mesh.from_string("x=4,y=2"), (("y",), ())),
          Sharding(Mesh.from_string("x=4,y=2"), (("x",), ())), (3, 8), 0))
# Two groups change dims in one all_to_all (XLA's multi-dim exchange), even
# and with padded destinations and trimmed sources.
@example((Sharding(Mesh.from_string("x=4,y=2"), ((), ("x",), ("y",), ())),
          Sharding(Mesh.from_string("x=4,y=2"), (("y",), (), (), ("x",))), (4, 8, 2, 4), 0))
@example((Sharding(Mesh.from_string("x=4,y=2"), ((), ("x",), ("y",), ())),
          Sharding(Mesh.from_string("x=4,y=2"), (("y",), (), (), ("x",))), (3, 8, 6, 5), 0))
def test_planned_collectives_leave_each_device_its_target_block(problem):
    source, target, shape, seed = problem
    partitioned = run_passes(_identity_program(source, target, shape), "spmd-partition")
    data = np.random.default_rng(seed).integers(-1000, 1000, shape, dtype=np.int32)
    executable = runtime.compile(partitioned)
    (result,) = executable(data)
    np.testing.assert_array_equal(np.asarray(result), data)
    device_of_id = {device.id: device for device in jax.devices()}
    mesh_devices = {device_of_id[i] for i in source.mesh.device_ids}
    for shard in result.addressable_shards:
        assert shard.device in mesh_devices
        np.testing.assert_array_equal(np.asarray(shard.data), data[shard.index],
                                      err_msg=f"device {shard.device.id}")
    steps = plan(source, target, shape, ELEMENT_BYTES)
    assert _moved_bytes(partitioned) == plan_cost(steps)
