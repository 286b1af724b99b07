"""Tests for stablehlo_spmd.reshard: plans checked by executing them on numpy devices.

The simulator below runs each `Step` over per-device numpy arrays, with replica
groups worked out from mesh coordinates on its own (not through the module
under test), starting from the source layout built from a random global array,
and must end at exactly the target layout, padding included.  It also counts
the bytes each device moves, which must equal the plan's price for each step.
"""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from stablehlo_spmd.auto_sharding import CostModel
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.reshard import (DETOUR_TOLL, ReshardError, Step, axis_coordinate, plan,
                                    plan_cost, replica_groups, shard_offsets)
from stablehlo_spmd.sharding import Sharding

from mesh_strategies import meshes

REDUCE = {"sum": np.add, "max": np.maximum, "min": np.minimum}
ELEMENT_BYTES = 8  # the simulator works on int64, so sums are exact


# ------------------------------------------------------------ numpy devices

def coordinates(mesh, device):
    return dict(zip(mesh.axis_names, np.unravel_index(mesh.device_positions[device],
                                                      mesh.mesh_shape)))


def group_of(mesh, device, axes):
    """The devices that differ from `device` only along `axes`, by row-major coordinate there."""
    mine = coordinates(mesh, device)
    members = [d for d in mesh.device_ids
               if all(coordinates(mesh, d)[a] == mine[a] for a in mesh.axis_names if a not in axes)]

    def position(d):
        coords, index = coordinates(mesh, d), 0
        for axis in axes:
            index = index * mesh.axis_size(axis) + int(coords[axis])
        return index

    return sorted(members, key=position), position(device)


def block(array, sharding, device):
    """The shard of global `array` that `device` holds under `sharding` (zero padded)."""
    mesh = sharding.mesh
    sizes = sharding.shard_shape(array.shape)
    padded = np.pad(array, [(0, s * sharding.num_shards(d) - n)
                            for d, (n, s) in enumerate(zip(array.shape, sizes))])
    index = []
    for axes, size in zip(sharding.dim_axes, sizes):
        _, k = group_of(mesh, device, axes)
        index.append(slice(k * size, (k + 1) * size))
    return padded[tuple(index)]


def source_layout(global_array, sharding, rng):
    """Per-device arrays; unreduced axes get random partials that reduce to the shard."""
    mesh = sharding.mesh
    arrays = {}
    for device in mesh.device_ids:
        if device in arrays:
            continue
        members, _ = group_of(mesh, device, sharding.unreduced)
        shard = block(global_array, sharding, device)
        mask = block(np.ones_like(global_array), sharding, device)  # padding stays zero
        noise = [rng.integers(0, 50, shard.shape) * mask for _ in members]
        chosen = rng.integers(len(members))
        for index, member in enumerate(members):
            if sharding.reduction == "sum":
                arrays[member] = (shard - sum(noise[1:]) if index == 0 else noise[index])
            elif index == chosen:
                arrays[member] = shard.copy()
            else:
                sign = -1 if sharding.reduction == "max" else 1
                arrays[member] = shard + sign * noise[index]
    return arrays


def pad_to(array, dim, size):
    widths = [(0, 0)] * array.ndim
    widths[dim] = (0, size - array.shape[dim])
    return np.pad(array, widths)


def trim_to(array, dim, size):
    kept = [slice(None)] * array.ndim
    dropped = list(kept)
    kept[dim], dropped[dim] = slice(0, size), slice(size, None)
    assert not array[tuple(dropped)].any(), "trimmed data that was not padding"
    return array[tuple(kept)]


def run_step(step, arrays, shape):
    """Execute one step on every device; return the new arrays and bytes sent per device."""
    mesh = step.result.mesh
    size = step.result.shard_shape(shape)
    out, moved = {}, {}
    for device, local in arrays.items():
        members, me = group_of(mesh, device, step.axes)
        q = len(members)
        if step.kind == "all_gather":
            gathered = np.concatenate([arrays[m] for m in members], axis=step.dim)
            out[device] = trim_to(gathered, step.dim, size[step.dim])
            moved[device] = local.nbytes * (q - 1)
        elif step.kind == "gather_by_sum":
            gathered = np.concatenate([arrays[m] for m in members], axis=step.dim)
            out[device] = trim_to(gathered, step.dim, size[step.dim])
            moved[device] = 2 * out[device].nbytes * (q - 1) / q
        elif step.kind == "slice":
            padded = pad_to(local, step.dim, q * size[step.dim])
            out[device] = np.split(padded, q, axis=step.dim)[me]
            moved[device] = 0
        elif step.kind == "all_reduce":
            out[device] = _reduce(step, [arrays[m] for m in members])
            moved[device] = 2 * local.nbytes * (q - 1) / q
        elif step.kind == "reduce_scatter":
            padded = [pad_to(arrays[m], step.dim, q * size[step.dim]) for m in members]
            out[device] = np.split(_reduce(step, padded), q, axis=step.dim)[me]
            moved[device] = padded[0].nbytes * (q - 1) / q
        elif step.kind == "all_to_all" and step.groups:
            out[device], moved[device] = _joint_exchange(step, arrays, members, me, size)
        elif step.kind == "all_to_all":
            padded = [pad_to(arrays[m], step.dim2, q * size[step.dim2]) for m in members]
            received = [np.split(p, q, axis=step.dim2)[me] for p in padded]
            out[device] = trim_to(np.concatenate(received, axis=step.dim), step.dim,
                                  size[step.dim])
            moved[device] = padded[0].nbytes * (q - 1) / q
        elif step.kind in ("halo_slice", "halo_gather"):
            out[device], moved[device] = _halo_block(step, arrays, device, shape)
        elif step.kind == "collective_permute":
            sources = [s for s, t in step.pairs if t == device]
            out[device] = arrays[sources[0]] if sources else np.zeros_like(local)
            moved[device] = max([local.nbytes for s, t in step.pairs if s == device and t != s],
                                default=0)
        else:
            raise AssertionError(step.kind)
    if step.kind == "collective_permute":  # the busiest device sets the price
        moved = dict.fromkeys(moved, max(moved.values()))
    if step.kind in ("halo_slice", "halo_gather"):
        # One exchange per distance, as wide as its widest piece, after the
        # all_gather of a halo_gather.
        widest: dict[int, int] = {}
        for pieces in moved.values():
            for distance, count in pieces.items():
                widest[distance] = max(widest.get(distance, 0), count)
        local = next(iter(arrays.values()))
        row = local.nbytes // local.shape[step.dim]
        gathered = 0
        if step.kind == "halo_gather":
            gathered = local.nbytes * (step.result.mesh.axes_size(step.axes) - 1)
        moved = dict.fromkeys(moved, gathered + row * sum(widest.values()))
    return out, moved


def _joint_exchange(step, arrays, members, me, size):
    """A joint all_to_all of two groups: member (j1, j2) (the first group
    major) sends block (me1, me2) of its destination dims, and what comes
    from it goes to block j1 of the first source dim and j2 of the second."""
    (_, source1, dest1), (_, source2, dest2) = step.groups
    q1, q2 = (step.result.mesh.axes_size(axes) for axes, _, _ in step.groups)
    mine = divmod(me, q2)

    def sent(member):
        padded = pad_to(pad_to(arrays[member], dest1, q1 * size[dest1]), dest2, q2 * size[dest2])
        return np.split(np.split(padded, q1, axis=dest1)[mine[0]], q2, axis=dest2)[mine[1]], \
            padded.nbytes

    rows = [np.concatenate([sent(members[j1 * q2 + j2])[0] for j2 in range(q2)], axis=source2)
            for j1 in range(q1)]
    whole = trim_to(trim_to(np.concatenate(rows, axis=source1), source1, size[source1]),
                    source2, size[source2])
    q = q1 * q2
    return whole, sent(members[me])[1] * (q - 1) / q


def _halo_block(step, arrays, device, shape):
    """A `halo_slice` or `halo_gather` on one device: its block of the
    result, element by element from whichever device (same coordinates but
    along the dim's axes) holds it, zero past the end; and how many elements
    came, beyond what the step's own slice or all_gather gives, from each
    distance between the devices' coarse coordinates."""
    mesh, dim = step.result.mesh, step.dim
    after = step.result.dim_axes[dim]
    before = after[:-len(step.axes)] if step.kind == "halo_slice" else after + step.axes
    coarse_axes = after[:-len(step.axes)] if step.kind == "halo_slice" else after
    holders, _ = group_of(mesh, device, before)
    _, mine = group_of(mesh, device, coarse_axes)
    held = arrays[device].shape[dim]   # elements each holder has along dim
    group = mesh.axes_size(step.axes)
    # The coarse block a device covers once its own step is done.
    covered = held if step.kind == "halo_slice" else held * group
    size = step.result.shard_shape(shape)[dim]
    _, k = group_of(mesh, device, after)
    rows, pieces = [], {}
    for position in range(k * size, (k + 1) * size):
        if position >= shape[dim]:
            rows.append(np.zeros_like(np.take(arrays[device], [0], axis=dim)))
            continue
        owner = position // held
        rows.append(np.take(arrays[holders[owner]], [position - owner * held], axis=dim))
        distance = position // covered - mine
        if distance:
            pieces[distance] = pieces.get(distance, 0) + 1
    return np.concatenate(rows, axis=dim), pieces


def _reduce(step, values):
    result = values[0]
    for value in values[1:]:
        result = REDUCE[step.reduction](result, value)
    return result


def check_plan(source, target, global_array, rng):
    steps = plan(source, target, global_array.shape, ELEMENT_BYTES)
    arrays = source_layout(global_array, source, rng)
    for step in steps:
        arrays, moved = run_step(step, arrays, global_array.shape)
        for device, local in arrays.items():
            assert local.shape == step.result.shard_shape(global_array.shape), step
            assert moved[device] == pytest.approx(step.bytes_per_device, abs=1e-9), step
    reduced_target = Sharding(target.mesh, target.dim_axes)
    for device in target.mesh.device_ids:
        members, _ = group_of(target.mesh, device, target.unreduced)
        got = _reduce(Step("all_reduce", reduction=target.reduction),
                      [arrays[m] for m in members]) if target.unreduced else arrays[device]
        np.testing.assert_array_equal(got, block(global_array, reduced_target, device),
                                      err_msg=f"device {device} after {steps}")
    return steps


# ------------------------------------------------------------ strategies



@st.composite
def shardings(draw, mesh, rank, may_be_unreduced, reduction):
    places = {}
    for axis in mesh.axis_names:
        choices = [*range(rank), "replicated"] + (["unreduced"] if axis in may_be_unreduced else [])
        places[axis] = draw(st.sampled_from(choices))
    dims = [tuple(draw(st.permutations([a for a in mesh.axis_names if places[a] == d])))
            for d in range(rank)]
    unreduced = [a for a in mesh.axis_names if places[a] == "unreduced"]
    return Sharding(mesh, dims, unreduced=unreduced, reduction=reduction)


@st.composite
def problems(draw):
    mesh = draw(meshes())
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=3)))
    reduction = draw(st.sampled_from(["sum", "max", "min"]))
    source = draw(shardings(mesh, len(shape), mesh.axis_names, reduction))
    target = draw(shardings(mesh, len(shape), source.unreduced, reduction))
    assume(source != target)
    seed = draw(st.integers(0, 2**32 - 1))
    return source, target, shape, seed


@settings(derandomize=True, max_examples=400, deadline=None)
@given(problems())
def test_plans_reach_the_target_layout(problem):
    source, target, shape, seed = problem
    rng = np.random.default_rng(seed)
    global_array = rng.integers(-100, 100, shape)
    check_plan(source, target, global_array, rng)


@st.composite
def four_dim_problems(draw):
    """Rank 4, where two groups can change dims in one exchange (pending
    sums included, which an exchange carries along)."""
    mesh = draw(meshes())
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=4, max_size=4)))
    reduction = draw(st.sampled_from(["sum", "max", "min"]))
    source = draw(shardings(mesh, 4, mesh.axis_names, reduction))
    target = draw(shardings(mesh, 4, source.unreduced, reduction))
    assume(source != target)
    return source, target, shape, draw(st.integers(0, 2**32 - 1))


@settings(derandomize=True, max_examples=200, deadline=None)
@given(four_dim_problems())
def test_four_dim_plans_reach_the_target_layout(problem):
    source, target, shape, seed = problem
    rng = np.random.default_rng(seed)
    check_plan(source, target, rng.integers(-100, 100, shape), rng)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(problems())
def test_plans_cost_no_more_than_gathering_everything(problem):
    source, target, shape, _ = problem
    steps = plan(source, target, shape, ELEMENT_BYTES)
    assert plan_cost(steps) <= naive_cost(source, target, shape) + 1e-9
    assert all(s.axes or s.kind == "collective_permute" for s in steps)


def _priced_steps(steps, size):
    """What a price reads of a plan, per byte of the tensor: each step that
    moves bytes, by its axes (an alpha-beta price takes its slowest)."""
    return sorted((tuple(sorted(s.axes)), round(s.bytes_per_device / size, 12))
                  for s in steps if s.bytes_per_device > 0)


@st.composite
def even_problems(draw):
    source, target, shape, _ = draw(problems())
    mesh = source.mesh
    shape = tuple(n * math.lcm(mesh.axes_size(a), mesh.axes_size(b))
                  for n, a, b in zip(shape, source.dim_axes, target.dim_axes))
    order = draw(st.permutations(range(len(shape))))
    return source, target, shape, order, draw(st.integers(1, 9)), draw(st.integers(0, len(shape)))


@settings(derandomize=True, max_examples=300, deadline=None)
@given(even_problems())
def test_even_moves_price_alike_in_any_dim_order_and_rank(problem):
    """The search prices one move per class of transposes and ranks
    (`auto_sharding.graph.Pricer._move_class`): between layouts that split evenly,
    naming the dims in another order moves the same fraction of the tensor
    (a tie may go to another axis first), and adding a dim neither layout
    splits moves the same fraction over the same axes where no axis divides
    it; where one does, axes may take a detour through it, which ranks no
    worse."""
    source, target, shape, order, extra, where = problem
    size = math.prod(shape) * ELEMENT_BYTES
    priced = _priced_steps(plan(source, target, shape, ELEMENT_BYTES), size)

    def reordered(layout, dims):
        return Sharding(layout.mesh, dims, unreduced=layout.unreduced,
                        reduction=layout.reduction)

    permuted = plan(reordered(source, [source.dim_axes[d] for d in order]),
                    reordered(target, [target.dim_axes[d] for d in order]),
                    tuple(shape[d] for d in order), ELEMENT_BYTES)
    assert round(plan_cost(permuted) / size, 12) == round(sum(f for _, f in priced), 12)
    wider = plan(reordered(source, [*source.dim_axes[:where], (), *source.dim_axes[where:]]),
                 reordered(target, [*target.dim_axes[:where], (), *target.dim_axes[where:]]),
                 (*shape[:where], extra, *shape[where:]), ELEMENT_BYTES)
    parks = any(extra % source.mesh.axis_size(a) == 0 and source.mesh.axis_size(a) > 1
                for a in source.mesh.axis_names)
    if parks:
        # Ranked with its detours' tolls, the wider plan is no worse; each
        # detour the narrower plan took may be one toll it saved.
        exchanges = sum(1 for s in plan(source, target, shape, ELEMENT_BYTES)
                        if s.kind == "all_to_all")
        assert plan_cost(wider) / (size * extra) <= \
            sum(f for _, f in priced) + float(DETOUR_TOLL) * exchanges + 1e-12
    else:
        assert _priced_steps(wider, size * extra) == priced


def naive_cost(source, target, shape):
    """Reduce every pending axis at once, gather each dim whole, then slice."""
    mesh = source.mesh
    local = math.prod(source.shard_shape(shape)) * ELEMENT_BYTES
    cost = 0.0
    to_reduce = [a for a in source.unreduced if a not in target.unreduced]
    if to_reduce:
        q = mesh.axes_size(to_reduce)
        cost += 2 * local * (q - 1) / q
    sizes = list(source.shard_shape(shape))
    for dim, axes in enumerate(source.dim_axes):
        q = mesh.axes_size(axes)
        cost += math.prod(sizes) * ELEMENT_BYTES * (q - 1)
        sizes[dim] = shape[dim]
    return cost


# ------------------------------------------------------------ exact plans

MESH = Mesh.from_string("x=4,y=2")
T = 16 * 8 * 4  # bytes of the f32[16, 8] tensor below


def S(*dims, unreduced=(), reduction="sum"):
    return Sharding(MESH, dims, unreduced=unreduced, reduction=reduction)


def exact(source, target, shape=(16, 8), element_bytes=4, **kwargs):
    return plan(source, target, shape, element_bytes, **kwargs)


def test_gather_to_replicated():
    assert exact(S(("x",), ()), S((), ())) == [
        Step("all_gather", ("x",), dim=0, bytes_per_device=T * 3 / 4)]


def test_slice_from_replicated_is_free():
    assert exact(S((), ()), S(("x",), ())) == [Step("slice", ("x",), dim=0)]


def test_all_to_all_between_dims():
    assert exact(S(("x",), ()), S((), ("x",))) == [
        Step("all_to_all", ("x",), dim=0, dim2=1, bytes_per_device=T * 3 / 16)]


def test_partial_to_replicated_all_reduces():
    assert exact(S((), (), unreduced=("x",)), S((), ())) == [
        Step("all_reduce", ("x",), reduction="sum", bytes_per_device=2 * T * 3 / 4)]


def test_partial_to_sharded_reduce_scatters():
    assert exact(S((), (), unreduced=("x",), reduction="max"), S(("x",), ())) == [
        Step("reduce_scatter", ("x",), dim=0, reduction="max", bytes_per_device=T * 3 / 4)]


def test_slice_before_reducing_over_another_axis():
    # Slicing along y first halves what the all_reduce over x moves.
    assert exact(S((), (), unreduced=("x",)), S((), ("y",))) == [
        Step("slice", ("y",), dim=1),
        Step("all_reduce", ("x",), reduction="sum", bytes_per_device=2 * (T / 2) * 3 / 4)]


def test_unreduced_axes_the_target_keeps_stay_pending():
    assert exact(S((), (), unreduced=("x", "y")), S((), (), unreduced=("y",))) == [
        Step("all_reduce", ("x",), reduction="sum", bytes_per_device=2 * T * 3 / 4)]


def test_minor_axis_added_and_removed_in_place():
    assert exact(S(("x",), ()), S(("x", "y"), ())) == [Step("slice", ("y",), dim=0)]
    assert exact(S(("x", "y"), ()), S(("x",), ())) == [
        Step("all_gather", ("y",), dim=0, bytes_per_device=T / 8)]


def test_reordered_axes_permute():
    (step,) = exact(S(("x", "y"), ()), S(("y", "x"), ()))
    assert step.kind == "collective_permute" and step.bytes_per_device == T / 8
    assert sorted(s for s, _ in step.pairs) == sorted(t for _, t in step.pairs) == list(range(8))
    # Devices trade blocks along both axes: a cost model in seconds prices it
    # at the slower one's link (with no axes it had priced it at nothing).
    assert step.axes == ("x", "y")


def test_a_permute_is_priced_on_the_links_it_crosses():
    (step,) = exact(S(("x", "y"), ()), S(("y", "x"), ()))
    model = CostModel((("x", 1e9), ("y", 1e10)), latencies=(("x", 1e-3), ("y", 1e-5)))
    assert model.price([step]) == pytest.approx(1e-3 + step.bytes_per_device / 1e9)


def test_blocks_move_before_the_gather_that_drops_an_axis():
    # (x, y) -> (y): gathering x first and then moving the y blocks would
    # send 3/4 of the tensor and then half of it.  Permuting the blocks to
    # (y, x) first (an eighth of the tensor) and then gathering x moves less.
    first, second = exact(S(("x", "y"), ()), S(("y",), ()))
    assert (first.kind, first.bytes_per_device) == ("collective_permute", T / 8)
    assert second == Step("all_gather", ("x",), dim=0, bytes_per_device=T / 8 * 3)


def test_a_merge_in_another_order_exchanges_then_permutes():
    # Rows over x and columns over y, wanted as rows over (y, x): no axis
    # the target adds next can move by itself, but moving y to the rows
    # splits them 8 ways as the target does, and one permute then puts the
    # blocks in the (y, x) order: T/8 exchanged and T/8 moved, where
    # gathering x first would move 3/4 of T.
    first, second = exact(S(("x",), ("y",)), S(("y", "x"), ()))
    assert first == Step("all_to_all", ("y",), dim=1, dim2=0, bytes_per_device=T / 16)
    assert (second.kind, second.bytes_per_device) == ("collective_permute", T / 8)


def test_axes_take_a_detour_through_a_dim_the_target_splits_otherwise():
    # Rows over (x, y), wanted as rows over y and columns over x.  Only y
    # can leave the rows in place, and the columns want x first, so the
    # direct way gathers y (T/8 sent) and then exchanges x into the columns
    # (3/4 of the T/4 each then holds): 5T/16.  Parking both axes on the
    # columns (7/8 of T/8) and sending y back to the rows (1/2 of T/8)
    # moves 11T/64, 45% less.
    steps = exact(S(("x", "y"), ()), S(("y",), ("x",)))
    assert steps == [Step("all_to_all", ("x", "y"), dim=0, dim2=1, bytes_per_device=7 * T / 64),
                     Step("all_to_all", ("y",), dim=1, dim2=0, bytes_per_device=T / 16)]
    assert plan_cost(steps) == 11 * T / 64


def test_uneven_minor_split_takes_a_halo_where_blocks_straddle_shards():
    # 5 rows over x=4 are blocks of 2; over (x, y) blocks of 1: 2 % 2 == 0, in place.
    assert exact(S(("x",), ()), S(("x", "y"), ()), shape=(5, 8)) == [
        Step("slice", ("y",), dim=0)]
    # 5 rows over y=2 are blocks of 3 (rows 0-2, then 3-4 and padding), which
    # x=4 cannot cut in place: the device at y=0, x=3 wants row 3, held at
    # y=1.  One row of 8 elements comes from there, where gathering the dim
    # would move a whole block of 3.
    assert exact(S(("y",), ()), S(("y", "x"), ()), shape=(5, 8)) == [
        Step("halo_slice", ("x",), dim=0, bytes_per_device=8 * 4)]


def test_uneven_minor_group_removed_by_a_gather_and_a_halo():
    # 6 rows in blocks of 2 over (a, b) back into blocks of 3 over a: b's
    # gather leaves the device at a=1 rows 4-7, and row 3 comes from a=0.
    mesh = Mesh.from_string("a=2,b=2")
    steps = exact(Sharding(mesh, (("a", "b"), ())), Sharding(mesh, (("a",), ())),
                  shape=(6, 3))
    assert steps == [Step("halo_gather", ("b",), dim=0, bytes_per_device=2 * 12 + 12)]


def test_a_dim_held_by_one_device_is_gathered_by_a_sum():
    # One row split 8 ways: seven devices hold padding only.  Summing the
    # owner's row into everyone's zeros moves 2 * 7/8 of a row; an all_gather
    # would move 7 rows.
    assert exact(S(("x", "y"), ()), S((), ()), shape=(1, 8)) == [
        Step("gather_by_sum", ("x", "y"), dim=0, bytes_per_device=2 * 8 * 4 * 7 / 8)]


def test_a_detour_through_a_dim_neither_layout_splits_never_holds_it_all():
    # 3 rows over y (blocks of 2, one padded), wanted over x.  Gathering y
    # sends the 2x8 block (64 B) and holds all 24 elements.  Parking y on
    # the 8 columns instead exchanges half of that block (32 B), slices x
    # off the now whole rows (1 of 3 each, padded), and gathers y back on
    # the columns: one 1x4 block (16 B).  A sixth of the tensor saved pays
    # the detour's toll (an eighth).
    steps = exact(S(("y",), ()), S(("x",), ()), shape=(3, 8))
    assert steps == [Step("all_to_all", ("y",), dim=0, dim2=1, bytes_per_device=32),
                     Step("slice", ("x",), dim=0),
                     Step("all_gather", ("y",), dim=1, bytes_per_device=16)]
    assert not any(s.replicates_fully for s in exact(S(("y",), ()), S(("x",), ()),
                                                     shape=(3, 8), warn_bytes=1))


def test_two_groups_change_dims_in_one_exchange():
    # XLA's MultipleSourceTargetDimsInOneAllToAll: x leaves dim 1 for dim 3
    # and y dim 2 for dim 0.  One all_to_all over all 8 devices sends 7/8
    # of the block; x's exchange and then y's would send 3/4 and then 1/2.
    mesh = Mesh.from_string("x=4,y=2")
    source = Sharding(mesh, ((), ("x",), ("y",), ()))
    target = Sharding(mesh, (("y",), (), (), ("x",)))
    block = 8 * 8 * 8 * 8 * 4 // 8
    assert exact(source, target, shape=(8, 8, 8, 8)) == [
        Step("all_to_all", ("x", "y"), groups=((("x",), 1, 3), (("y",), 2, 0)),
             bytes_per_device=block * 7 / 8)]
    rng = np.random.default_rng(0)
    check_plan(source, target, rng.integers(-100, 100, (8, 8, 8, 8)), rng)
    # Uneven destinations are padded, and the sources trimmed, as alone.
    check_plan(source, target, rng.integers(-100, 100, (3, 8, 6, 5)), rng)
    # A pending sum rides along: each device's partial moves as it is.
    mesh = Mesh.from_string("x=2,y=2,z=2")
    source = Sharding(mesh, ((), ("x",), ("y",), ()), unreduced=("z",))
    target = Sharding(mesh, (("y",), (), (), ("x",)), unreduced=("z",))
    assert [s.groups for s in exact(source, target, shape=(4, 4, 4, 4))] == [
        ((("x",), 1, 3), (("y",), 2, 0))]
    check_plan(source, target, rng.integers(-100, 100, (4, 4, 4, 4)), rng)


def test_a_detour_saving_less_than_its_toll_is_not_taken():
    # 5 rows: the detour above moves 80 B where gathering moves 96 B, a
    # tenth of the 160 B tensor, less than the eighth a detour must save.
    steps = exact(S(("y",), ()), S(("x",), ()), shape=(5, 8))
    assert [(s.kind, s.bytes_per_device) for s in steps] == [("all_gather", 96), ("slice", 0)]


def test_full_replication_of_a_large_tensor_is_flagged():
    # One dim, and no axis of the source stays: y is gathered, the whole
    # vector held everywhere, and x sliced.  (With a second dim, y takes a
    # detour through it instead.)
    mesh = Mesh.from_string("x=4,y=2")
    source, target = Sharding(mesh, (("y",),)), Sharding(mesh, (("x",),))
    steps = exact(source, target, shape=(40,), warn_bytes=100)
    assert [s.replicates_fully for s in steps] == [True, False]
    assert not any(s.replicates_fully for s in exact(source, target, shape=(40,)))
    # Replicating because the target asks for it is not flagged.
    assert not any(s.replicates_fully for s in exact(S(("x",), ()), S((), ()), warn_bytes=1))


def test_same_sharding_needs_nothing():
    assert exact(S(("x",), ("y",)), S(("x",), ("y",))) == []


def test_size_one_axes_never_move():
    mesh = Mesh.from_string("x=4,one=1")
    source = Sharding(mesh, (("x", "one"), ()), )
    target = Sharding(mesh, ((), ("one",)))
    assert [s.kind for s in plan(source, target, (8, 8), 4)] == ["all_gather"]


def test_new_unreduced_axes_are_an_error():
    with pytest.raises(ReshardError, match="unreduced"):
        exact(S(("x",), ()), S((), (), unreduced=("x",)))


def test_different_reductions_are_an_error():
    with pytest.raises(ReshardError, match="max"):
        exact(S((), (), unreduced=("x", "y")), S((), (), unreduced=("y",), reduction="max"))


# ------------------------------------------------------------ helpers

def test_device_layout_helpers():
    mesh = Mesh.from_string("x=2,y=2", device_ids=[3, 1, 0, 2])
    assert replica_groups(mesh, ("y",)) == [[3, 1], [0, 2]]
    assert replica_groups(mesh, ("y", "x")) == [[3, 0, 1, 2]]
    assert axis_coordinate(mesh, 2, ("x", "y")) == 3
    offsets = shard_offsets(Sharding(mesh, (("y",), ("x",))), (5, 4))
    assert offsets == {3: (0, 0), 1: (3, 0), 0: (0, 2), 2: (3, 2)}


@pytest.mark.parametrize("reduction", ["sum", "max"])
@pytest.mark.parametrize("seed", range(4))
def test_permute_keeps_partials_apart(reduction, seed):
    # r replicates: each block's holders span two groups of partials, which must not mix.
    ids = np.random.default_rng(seed).permutation(16).tolist()
    mesh = Mesh.from_string("x=2,y=2,z=2,r=2", device_ids=ids)
    source = Sharding(mesh, (("x", "y"), ()), unreduced=("z",), reduction=reduction)
    target = Sharding(mesh, (("y", "x"), ()), unreduced=("z",), reduction=reduction)
    rng = np.random.default_rng(0)
    steps = check_plan(source, target, rng.integers(-9, 9, (6, 3)), rng)
    assert [s.kind for s in steps] == ["collective_permute"]


def test_a_value_on_one_device_is_whole_everywhere_so_leaving_it_is_a_slice():
    # Every device holds a {maximal device=2} value whole (its ops run on
    # every device of the one SPMD body), so rows over x are a local slice.
    owned = Sharding.maximal(MESH, 2, 2)
    assert exact(owned, S(("x",), ())) == [Step("slice", ("x",), dim=0)]
    assert exact(owned, S((), ())) == [] and exact(owned, owned) == []
    assert exact(owned, Sharding.maximal(MESH, 3, 2)) == [Step("to_owner", device=3)]


def test_a_value_wanted_on_one_device_is_gathered_and_handed_to_it():
    # Gathered whole as for a replicated target, then handed over for free.
    steps = exact(S(("x",), ("y",)), Sharding.maximal(MESH, 5, 2))
    assert steps[:-1] == exact(S(("x",), ("y",)), S((), ())) and len(steps) >= 2
    assert steps[-1] == Step("to_owner", device=5)
