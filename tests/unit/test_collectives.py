"""Tests for stablehlo_spmd.collectives: emitted reshards compiled and run on 8 CPU devices.

Each case builds the module JAX lowers a ``shard_map`` to (``sdy.mesh`` and an
``sdy.manual_computation`` over every mesh axis), fills the manual body with
`Emitter.reshard`, compiles it through the PJRT client with XLA's SPMD
partitioner, and compares every device's result with the target layout
computed in numpy, padding included.

To feed each device its own shard, padding and partial sums included, the
program's argument stacks the per-device arrays along a new leading dimension
split over all mesh axes: the manual body sees ``1 x local shape``.
"""

import re

import jax
import numpy as np
import pytest
from jax._src.lib import xla_client as xc
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from stablehlo_spmd.collectives import Emitter
from stablehlo_spmd.ir import make_context, parse_module
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.reshard import plan
from stablehlo_spmd.sharding import Sharding

MESH_4x2 = Mesh.from_string("x=4,y=2")
MESH_2x2x2 = Mesh.from_string("x=2,y=2,z=2", device_ids=[5, 0, 3, 6, 1, 7, 2, 4])
REDUCE = {"sum": np.add, "max": np.maximum, "min": np.minimum}


# ------------------------------------------------------------ the program

def manual_module(mesh: Mesh, in_shape, out_shape, dtype="f32") -> ir.Operation:
    """A shard_map-style module over `mesh` whose manual body still has to be written.

    The body returns a placeholder constant of the result type, replaced by `fill_body`.
    """
    axes = ", ".join(f'"{a}"={s}' for a, s in zip(mesh.axis_names, mesh.mesh_shape))
    devices = "" if mesh.is_iota else f", device_ids={list(mesh.device_ids)}"
    manual_axes = ", ".join(f'"{a}"' for a in mesh.axis_names)
    # The leading (stacking) dim is split over every axis, in mesh order.
    stacked = "[{" + manual_axes + "}" + ", {}" * len(in_shape) + "]"
    stacked_out = "[{" + manual_axes + "}" + ", {}" * len(out_shape) + "]"

    def tensor(leading, shape):
        return f"tensor<{'x'.join(map(str, (leading, *shape)))}x{dtype}>"

    n = mesh.size
    zero = "0.0" if dtype.startswith(("f", "bf")) else "0"
    text = f"""
module @reshard attributes {{mhlo.num_partitions = {n} : i32, mhlo.num_replicas = 1 : i32}} {{
  sdy.mesh @mesh = <[{axes}]{devices}>
  func.func public @main(
      %arg0: {tensor(n, in_shape)} {{sdy.sharding = #sdy.sharding<@mesh, {stacked}>}})
      -> ({tensor(n, out_shape)} {{sdy.sharding = #sdy.sharding<@mesh, {stacked_out}>}}) {{
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, {stacked}>]
        out_shardings=[<@mesh, {stacked_out}>] manual_axes={{{manual_axes}}}
        (%arg1: {tensor(1, in_shape)}) {{
      %placeholder = stablehlo.constant dense<{zero}> : {tensor(1, out_shape)}
      sdy.return %placeholder : {tensor(1, out_shape)}
    }} : ({tensor(n, in_shape)}) -> {tensor(n, out_shape)}
    return %0 : {tensor(n, out_shape)}
  }}
}}
"""
    return parse_module(text, "reshard.mlir")


def manual_body(module: ir.Operation) -> ir.Block:
    found = []

    def visit(op):
        if op.name == "sdy.manual_computation":
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return found[0].regions[0].blocks[0]


def fill_body(module: ir.Operation, build) -> None:
    """Replace the placeholder with ``reshape(build(local argument))``."""
    body = manual_body(module)
    placeholder, terminator = list(body.operations)
    argument = body.arguments[0]
    result_type = ir.RankedTensorType(terminator.operands[0].type)
    with ir.InsertionPoint(terminator), ir.Location.unknown():
        in_type = ir.RankedTensorType(argument.type)
        local = stablehlo.ReshapeOp(
            ir.RankedTensorType.get(in_type.shape[1:], in_type.element_type), argument).result
        result = build(local)
        stacked = stablehlo.ReshapeOp(result_type, result).result
    terminator.operands[0] = stacked
    placeholder.erase()
    assert module.verify()


# ------------------------------------------------------------ compile and run

def compile_and_run(module: ir.Operation, mesh: Mesh, inputs: dict[int, np.ndarray]):
    """Run the module on `mesh.size` CPU devices; device id d is partition d."""
    devices = jax.devices()[:mesh.size]
    options = xc.CompileOptions()
    options.num_replicas = 1
    options.num_partitions = mesh.size
    options.executable_build_options.use_spmd_partitioning = True
    options.executable_build_options.use_shardy_partitioner = True
    options.device_assignment = xc.DeviceAssignment.create(np.arange(mesh.size).reshape(1, -1))
    client = devices[0].client
    executable = client.compile_and_load(str(module), xc.DeviceList(tuple(devices)), options)

    # PJRT hands partition p the argument's buffer on device p, whatever the
    # program's mesh order: so stack in device-id order, one row per device.
    stacked = jax.sharding.NamedSharding(
        jax.sharding.Mesh(np.array(devices), ("devices",)), jax.sharding.PartitionSpec("devices"))
    local_shape = next(iter(inputs.values())).shape
    argument = jax.make_array_from_single_device_arrays(
        (mesh.size, *local_shape), stacked,
        [jax.device_put(inputs[d.id][None], d) for d in devices])
    (outputs,) = executable.execute_sharded([argument]).disassemble_into_single_device_arrays()
    return {next(iter(out.devices())).id: np.asarray(out)[0] for out in outputs}


# ------------------------------------------------------------ layouts in numpy

def block(array, sharding, device):
    """`device`'s zero-padded shard of the global `array`."""
    mesh = sharding.mesh
    sizes = sharding.shard_shape(array.shape)
    index = []
    for axes, size in zip(sharding.dim_axes, sizes):
        k = np.ravel_multi_index(coordinates(mesh, device, axes),
                                 [mesh.axis_size(a) for a in axes]) if axes else 0
        index.append(slice(k * size, (k + 1) * size))
    padded = np.pad(array, [(0, s * sharding.num_shards(d) - n)
                            for d, (n, s) in enumerate(zip(array.shape, sizes))])
    return padded[tuple(index)]


def layout(array, sharding, rng):
    """Per-device arrays; along unreduced axes, partials that reduce to the shard."""
    noise = rng.integers(1, 20, array.shape).astype(array.dtype)  # shared: partials must agree
    count = sharding.mesh.axes_size(sharding.unreduced)
    arrays = {}
    for device in sharding.mesh.device_ids:
        shard, extra = block(array, sharding, device), block(noise, sharding, device)
        first = all(c == 0 for c in coordinates(sharding.mesh, device, sharding.unreduced))
        if sharding.reduction == "sum":
            arrays[device] = shard - (count - 1) * extra if first else extra
        elif first:
            arrays[device] = shard
        else:
            arrays[device] = shard - extra if sharding.reduction == "max" else shard + extra
    return arrays


def coordinates(mesh, device, axes):
    coords = np.unravel_index(mesh.device_positions[device], mesh.mesh_shape)
    return [int(coords[mesh.axis_index(a)]) for a in axes]


def partial_group(mesh, device, axes):
    """The devices that differ from `device` only along `axes`."""
    others = [a for a in mesh.axis_names if a not in axes]
    return [d for d in mesh.device_ids
            if coordinates(mesh, d, others) == coordinates(mesh, device, others)]


# ------------------------------------------------------------ cases

def spec(mesh, *dims, unreduced=(), reduction="sum"):
    return Sharding(mesh, dims, unreduced=unreduced, reduction=reduction)


M, C = MESH_4x2, MESH_2x2x2
CASES = {
    "gather": (spec(M, ("x",), ()), spec(M, (), ()), (8, 6)),
    "slice": (spec(M, (), ()), spec(M, ("x",), ("y",)), (8, 6)),
    "all_to_all": (spec(M, ("x",), ()), spec(M, (), ("x",)), (8, 8)),
    "all_reduce": (spec(M, (), (), unreduced=("x", "y")), spec(M, (), ()), (4, 3)),
    "reduce_scatter": (spec(M, (), (), unreduced=("x",)), spec(M, ("x",), ()), (8, 3)),
    "reduce_scatter_max": (spec(M, (), (), unreduced=("y",), reduction="max"),
                           spec(M, ("y",), ("x",)), (4, 8)),
    "uneven_gather": (spec(M, ("x",), ("y",)), spec(M, (), ()), (5, 3)),
    "uneven_slice": (spec(M, (), ()), spec(M, ("x", "y"), ()), (7, 2)),
    "uneven_all_to_all": (spec(M, ("x",), ()), spec(M, (), ("x",)), (6, 5)),
    "uneven_reduce_scatter": (spec(M, (), (), unreduced=("x",), reduction="min"),
                              spec(M, (), ("x",)), (3, 7)),
    "minor_axis_needs_gather": (spec(M, ("y",), ()), spec(M, ("y", "x"), ()), (5, 2)),
    "permute": (spec(C, ("x", "y"), ()), spec(C, ("y", "x"), ()), (4, 3)),
    "swap_dims": (spec(C, ("x",), ("y", "z")), spec(C, ("z", "y"), ("x",)), (4, 4)),
    "partial_and_move": (spec(C, ("z",), (), unreduced=("x", "y")),
                         spec(C, (), ("z", "x"), unreduced=("y",)), (6, 4)),
}


@pytest.mark.parametrize("name", CASES)
def test_reshard_runs_on_devices(name):
    source, target, shape = CASES[name]
    mesh = source.mesh
    rng = np.random.default_rng(sum(map(ord, name)))
    array = rng.integers(-50, 50, shape).astype(np.float32)
    steps = plan(source, target, shape, 4)
    with make_context():
        module = manual_module(mesh, source.shard_shape(shape), target.shard_shape(shape))
        emitter = Emitter(mesh)
        fill_body(module, lambda local: emitter.reshard(local, source, target, shape))
        text = str(module)
        results = compile_and_run(module, mesh, layout(array, source, rng))
    assert text.count("channel_handle<handle") == sum(s.kind != "slice" for s in steps)
    reduced_target = Sharding(mesh, target.dim_axes)
    for device in mesh.device_ids:
        group = partial_group(mesh, device, target.unreduced)
        got = _reduce(target.reduction, [results[d] for d in group])
        np.testing.assert_array_equal(got, block(array, reduced_target, device),
                                      err_msg=f"device {device}, plan {steps}")


def _reduce(reduction, values):
    result = values[0]
    for value in values[1:]:
        result = REDUCE[reduction](result, value)
    return result


def test_axis_index_is_the_device_coordinate():
    mesh = MESH_2x2x2
    with make_context():
        module = manual_module(mesh, (1,), (1,), dtype="i32")
        emitter = Emitter(mesh)

        def coordinate(local):
            index = emitter.axis_index(("z", "x"))
            return stablehlo.ReshapeOp(ir.RankedTensorType.get([1], index.type.element_type),
                                       index).result

        fill_body(module, coordinate)
        results = compile_and_run(module, mesh, {d: np.zeros(1, np.int32) for d in range(8)})
    for device in mesh.device_ids:
        x, y, z = np.unravel_index(mesh.device_positions[device], mesh.mesh_shape)
        assert results[device].tolist() == [z * 2 + x]


def test_channel_handles_are_fresh_and_follow_the_module():
    mesh = MESH_4x2
    source, target = spec(mesh, (), (), unreduced=("x",)), spec(mesh, ("y",), ())
    with make_context():
        module = manual_module(mesh, (4, 2), (2, 2))
        emitter = Emitter(mesh, first_channel=7)
        fill_body(module, lambda local: emitter.all_gather(
            emitter.reshard(local, source, target, (4, 2)), 1, ()))
        handles = [int(h) for h in re.findall(r"channel_handle<handle = (\d+)", str(module))]
        assert handles == [7, 8]
        assert Emitter.for_module(mesh, module).next_channel == 9


def test_ops_go_where_ip_and_loc_say():
    mesh = MESH_4x2
    with make_context():
        module = manual_module(mesh, (4,), (4,))
        body = manual_body(module)
        Emitter(mesh).all_reduce(body.arguments[0], ("x",), "max",
                                 ip=ir.InsertionPoint.at_block_begin(body),
                                 loc=ir.Location.name("reduced"))
        first = body.operations[0]
        assert first.name == "stablehlo.all_reduce"
        assert 'loc("reduced")' in first.get_asm(enable_debug_info=True)
        assert "stablehlo.maximum" in str(first)
