"""Random chains of window and indexing ops, for differential testing.

`window_programs()` is a hypothesis strategy of `generator.Program`s whose
bodies only move data: ``slice``, ``concatenate``, ``pad``, ``reverse`` and
``dynamic_slice``, chained 1 to 6 deep over one or a few source tensors, on
2-D and 3-D meshes, with the sources, the results and some intermediates
sharded.  test_window_programs.py partitions each, runs it on the mesh's
devices and compares with one device, exactly: nothing is computed, so every
element must arrive bit for bit.

Why this family
---------------
The partitioner rebuilds these ops from pieces of shards: a slice or a
concatenate operand is a window of the source, and each device's window is
cut from one or more shards and sent where the result's sharding wants it.
The bugs live in that bookkeeping, and most of all where one tensor's shards
feed several windows at once: ``concatenate(slice(x, 0:32), x, slice(x,
0:24))``, ``concatenate(x, x)``, a rotation ``concatenate(slice(x, k:n),
slice(x, 0:k))``, wrap-around padding ``concatenate(slice(x, n-p:n), x,
slice(x, 0:p))``, with the concatenated dim and another dim split on
different axes.  There one device may send, or keep, two pieces of its own
shard, which a plan of one piece per device gets wrong (the
``collectives.permute_groups`` bug).  generator.py's `programs()` reaches
these shapes only by chance; here they are what is drawn.

What is covered
---------------
* ``slice``: along one dim or several, unit and non-unit strides;
* ``concatenate`` of 2 to 4 operands: slices, pads and reverses of one
  value along the concatenated dim, the value itself (once or twice),
  rotations, wrap-around padding, and unrelated tensors (new arguments, or
  other values of the program);
* ``pad``: negative low/high, interior padding, along one dim or all;
* ``reverse`` of any set of dims;
* ``dynamic_slice`` with constant starts (out of range too: the op clamps)
  and starts from i32 scalar arguments, alone or offset and scaled by
  constants, so the runtime start varies with the inputs and is clamped at
  either end;
* ranks 1 to 3, dims of 3 to 40 that are rarely divisible by their split;
* meshes x=2,y=2; x=2,y=2,z=2; x=4,y=2; x=2,y=4, now and then over permuted
  device ids; shardings that split several dims on different axes at once;
* both spellings: XLA's ``mhlo.sharding`` (in the text, on ops and as
  ``@Sharding`` custom calls, or given as rules with the mesh), and
  Shardy's (``sdy.mesh``, ``#sdy.sharding`` on arguments and results,
  ``sdy.sharding_constraint`` and ``#sdy.sharding_per_value`` on ops), with
  sub-axes of a size-4 axis (``"x":(1)2`` on one dim and ``"x":(2)2`` on
  another).  A Shardy program carries its own mesh and is partitioned with
  none given.

The one-device run is the oracle, so the programs avoid what XLA itself
gets wrong there: a dynamic_slice with a start known only at run time of a
value computed from another such dynamic_slice (`op_dynamic_slice`).
"""

from __future__ import annotations

import math
import re

from hypothesis import strategies as st

from generator import Argument, Builder, Program, Value, assemble, shardings, tensor_type
from stablehlo_spmd.mesh import Mesh, split_axes
from stablehlo_spmd.module_shardings import mesh_attr_text, sdy_sharding_text
from stablehlo_spmd.sharding import Sharding

SIZES = (3, 4, 5, 6, 7, 8, 9, 12, 13, 16, 17, 24, 31, 32, 40)
RANK3_SIZES = (3, 4, 5, 6, 7, 8, 12, 16)
MESHES = ((("x", 2), ("y", 2)), (("x", 2), ("y", 2), ("z", 2)),
          (("x", 4), ("y", 2)), (("x", 2), ("y", 4)))
# Concatenates and pads grow values; past this many elements they only
# rotate or pad by a few elements, so that a chain stays cheap to run.
MAX_ELEMENTS = 8192
SPELLINGS = ("mhlo-text", "mhlo-rules", "sdy")


def _array(xs) -> str:
    return "[" + ", ".join(map(str, xs)) + "]"


# ------------------------------------------------------------------ meshes and shardings


@st.composite
def window_meshes(draw) -> Mesh:
    axes = draw(st.sampled_from(MESHES))
    ids = list(range(math.prod(size for _, size in axes)))
    if draw(st.integers(0, 3)) == 0:
        ids = draw(st.permutations(ids))
    return Mesh.from_axes(axes, ids)


def with_sub_axes(mesh: Mesh) -> Mesh:
    """`mesh` with every axis of 4 split into its halves ("x:(1)2", "x:(2)2"),
    so that shardings drawn on it can put the halves on different dims."""
    cuts = {name: [2] for name, size in zip(mesh.axis_names, mesh.mesh_shape) if size == 4}
    return split_axes(mesh, cuts)


@st.composite
def spread_shardings(draw, mesh: Mesh, rank: int) -> Sharding:
    """Every axis on some dim, the axes dealt over the dims in a random order
    so that several dims are split at once and on different axes."""
    axes = list(draw(st.permutations(mesh.axis_names)))
    dims = list(draw(st.permutations(range(rank))))
    dim_axes: list[list[str]] = [[] for _ in range(rank)]
    for i, axis in enumerate(axes):
        if draw(st.integers(0, 5)) != 0:  # now and then an axis is left replicated
            dim_axes[dims[i % rank]].append(axis)
    return Sharding(mesh, dim_axes)


def source_shardings(mesh: Mesh, rank: int):
    if rank == 0:
        return st.none()
    return st.one_of(st.none(), spread_shardings(mesh, rank), spread_shardings(mesh, rank),
                     shardings(mesh, rank))


def sdy_inner(sharding: Sharding) -> str:
    """``<@mesh, [...]>``: Shardy's sharding without its ``#sdy.sharding`` prefix."""
    return sdy_sharding_text(sharding).removeprefix("#sdy.sharding")


# ------------------------------------------------------------------ the builder


class WindowBuilder(Builder):
    """generator.Builder with the window ops, and Shardy's spelling of
    intermediate shardings when the program is written in it."""

    def __init__(self, draw, mesh: Mesh, spelling: str):
        super().__init__(draw, mesh, spelling == "mhlo-text")
        self.spelling = spelling
        # Values computed from a dynamic_slice with a start known only at
        # run time: see op_dynamic_slice.
        self.after_moving_window: set[str] = set()

    def new_argument(self, shape, dtype: str) -> Value:
        value = Value(f"%arg{len(self.arguments)}", tuple(shape), dtype, True)
        self.arguments.append((value, self.draw(source_shardings(self.mesh, len(shape)))))
        return value

    def emit(self, text: str, shape, dtype: str, exact: bool) -> Value:
        value = super().emit(text, shape, dtype, exact)
        if self.after_moving_window.intersection(re.findall(r"%\w+", text)):
            self.after_moving_window.add(value.name)
        return value

    def maybe_constrain(self, value: Value) -> Value:
        """Now and then pin an intermediate's sharding: generator.Builder's
        ``mhlo.sharding`` (a custom call or an attribute on the op), or
        Shardy's (a ``sdy.sharding_constraint`` or ``sdy.sharding`` on the op)."""
        if self.spelling != "sdy":
            return super().maybe_constrain(value)
        if self.draw(st.integers(0, 3)) != 0:
            return value
        sharding = self.draw(st.one_of(shardings(self.mesh, value.rank),
                                       spread_shardings(self.mesh, value.rank)))
        if self.draw(st.booleans()) and self.attach_sdy(value, sharding):
            self.ops.append("op-sharding")
            return value
        self.ops.append("constraint")
        return self.emit(f"sdy.sharding_constraint {value.name} {sdy_inner(sharding)} : "
                         f"{value.type}", value.shape, value.dtype, True)

    def attach_sdy(self, value: Value, sharding: Sharding) -> bool:
        """``sdy.sharding`` on the stablehlo op defining `value`: an attribute
        dictionary right before the op's type (every op here is in its
        pretty form)."""
        index = next(i for i, line in enumerate(self.lines) if line.startswith(value.name + " = "))
        head, _, rest = self.lines[index].partition(" = ")
        if not rest.startswith("stablehlo.") or "sharding" in rest:
            return False
        attr = f"sdy.sharding = #sdy.sharding_per_value<[{sdy_inner(sharding)}]>"
        before, sep, after = rest.rpartition(" : (" if " : (" in rest else " : ")
        self.lines[index] = f"{head} = {before} {{{attr}}}{sep}{after}"
        return True

    # ---- the ops, each on values of this builder

    def slice(self, value: Value, starts, limits, strides) -> Value:
        shape = [-(-(hi - lo) // s) for lo, hi, s in zip(starts, limits, strides)]
        windows = ", ".join(f"{lo}:{hi}" + (f":{s}" if s != 1 else "")
                            for lo, hi, s in zip(starts, limits, strides))
        return self.emit(f"stablehlo.slice {value.name} [{windows}] : "
                         f"({value.type}) -> {tensor_type(shape, value.dtype)}",
                         shape, value.dtype, True)

    def slice_dim(self, value: Value, dim: int, start: int, limit: int, stride: int = 1) -> Value:
        starts, limits = [0] * value.rank, list(value.shape)
        strides = [1] * value.rank
        starts[dim], limits[dim], strides[dim] = start, limit, stride
        return self.slice(value, starts, limits, strides)

    def concatenate(self, operands: list[Value], dim: int) -> Value:
        shape = list(operands[0].shape)
        shape[dim] = sum(o.shape[dim] for o in operands)
        return self.emit(
            f"stablehlo.concatenate {', '.join(o.name for o in operands)}, dim = {dim} : "
            f"({', '.join(o.type for o in operands)}) -> {tensor_type(shape, operands[0].dtype)}",
            shape, operands[0].dtype, True)

    def pad(self, value: Value, low, high, interior) -> Value:
        shape = [s + (s - 1) * i + lo + hi
                 for s, lo, hi, i in zip(value.shape, low, high, interior)]
        literal = self.draw(st.sampled_from(["0", "7", "-3"]))
        pad = self.constant(literal + (".0" if value.dtype == "f32" else ""), value.dtype)
        return self.emit(f"stablehlo.pad {value.name}, {pad.name}, low = {_array(low)}, "
                         f"high = {_array(high)}, interior = {_array(interior)} : "
                         f"({value.type}, {pad.type}) -> {tensor_type(shape, value.dtype)}",
                         shape, value.dtype, True)

    def reverse(self, value: Value, dims) -> Value:
        return self.emit(f"stablehlo.reverse {value.name}, dims = {_array(dims)} : {value.type}",
                         value.shape, value.dtype, True)

    def dynamic_slice(self, value: Value, starts: list[Value], sizes) -> Value:
        return self.emit(
            f"stablehlo.dynamic_slice {value.name}, {', '.join(s.name for s in starts)}, "
            f"sizes = {_array(sizes)} : ({value.type}, "
            f"{', '.join(s.type for s in starts)}) -> {tensor_type(sizes, value.dtype)}",
            sizes, value.dtype, True)


# ------------------------------------------------------------------ ops


def _window(draw, size: int) -> tuple[int, int]:
    """(start, limit) of a window of a dim of `size`: half the time a long
    one, so that it spans several shards, else any."""
    if draw(st.booleans()):
        start = draw(st.integers(0, size // 3))
        return start, draw(st.integers(max(start + 1, size - size // 3), size))
    start = draw(st.integers(0, size - 1))
    return start, draw(st.integers(start + 1, size))


def _pad_amounts(draw, size: int, interior_choices=(0, 0, 0, 1, 2)) -> tuple[int, int, int]:
    """(low, high, interior) for one dim of `size`, keeping at least one element."""
    interior = draw(st.sampled_from(interior_choices))
    padded = size + (size - 1) * interior
    low = draw(st.integers(max(-4, -(padded - 1)), 4))
    high = draw(st.integers(max(-4, -(padded + low - 1)), 4))
    return low, high, interior


def op_slice(b: WindowBuilder, value: Value) -> Value:
    dims = (b.draw(st.lists(st.integers(0, value.rank - 1), min_size=1, unique=True))
            if b.draw(st.booleans()) else [b.draw(st.integers(0, value.rank - 1))])
    starts, limits, strides = [0] * value.rank, list(value.shape), [1] * value.rank
    for dim in dims:
        size = value.shape[dim]
        starts[dim], limits[dim] = _window(b.draw, size)
        strides[dim] = b.draw(st.sampled_from([1, 1, 2, 3]))
    b.ops.append("slice-" + ("one-dim" if len(dims) == 1 else "several-dims"))
    if any(s != 1 for s in strides):
        b.ops.append("slice-strided")
    return b.slice(value, starts, limits, strides)


def op_pad(b: WindowBuilder, value: Value) -> Value:
    one_dim = b.draw(st.booleans())
    dims = [b.draw(st.integers(0, value.rank - 1))] if one_dim else list(range(value.rank))
    low, high, interior = [0] * value.rank, [0] * value.rank, [0] * value.rank
    grows = math.prod(value.shape) * 3 > MAX_ELEMENTS
    for dim in dims:
        low[dim], high[dim], interior[dim] = _pad_amounts(
            b.draw, value.shape[dim], (0,) if grows else (0, 0, 0, 1, 2))
    b.ops.append("pad-one-dim" if one_dim else "pad")
    if any(x < 0 for x in low + high):
        b.ops.append("pad-negative")
    if any(interior):
        b.ops.append("pad-interior")
    return b.pad(value, low, high, interior)


def op_reverse(b: WindowBuilder, value: Value) -> Value:
    dims = sorted(b.draw(st.lists(st.integers(0, value.rank - 1), min_size=1, unique=True)))
    b.ops.append("reverse")
    return b.reverse(value, dims)


def _start_index(b: WindowBuilder, size: int, window: int,
                 may_move: bool) -> tuple[Value, bool]:
    """A start for a window of `window` in a dim of `size`, and whether it
    moves: a constant (out of range now and then, which the op clamps) or,
    if `may_move`, one computed from an i32 scalar argument, whose runtime
    value (-4..4) moves it, and clamps it at either end."""
    kind = b.draw(st.sampled_from(["constant", "argument", "offset argument"]
                                  if may_move else ["constant"]))
    b.ops.append(f"dynamic_slice-{kind}")
    if kind == "constant":
        return b.constant(str(b.draw(st.integers(-2, size - window + 2))), "i32"), False
    argument = b.new_argument((), "i32")
    if kind == "argument":
        return argument, True
    scale = b.draw(st.sampled_from([1, 1, 3]))
    if scale != 1:
        argument = b.binary("multiply", argument, b.constant(str(scale), "i32"))
    offset = b.constant(str(b.draw(st.integers(0, size - window))), "i32")
    return b.binary("add", argument, offset), True


def op_dynamic_slice(b: WindowBuilder, value: Value) -> Value:
    # XLA CPU (jaxlib 0.10) folds a dynamic_slice of a dynamic_slice, both
    # with starts known only at run time, into one whose start is the sum,
    # and clamps only that: the one-device oracle itself comes out wrong
    # (test_window_regressions.py).  It finds such pairs through what lies
    # between them too (a dynamic_slice at constant 0 taking the whole
    # value, a concatenate of one-row copies), so a dynamic_slice of
    # anything computed from a moving one gets constant starts.
    may_move = value.name not in b.after_moving_window
    sizes, starts, moves = [], [], False
    for size in value.shape:
        start, limit = _window(b.draw, size)
        window = size if b.draw(st.integers(0, 3)) == 0 else limit - start
        index, moving = _start_index(b, size, window, may_move)
        sizes.append(window)
        starts.append(index)
        moves |= moving
    result = b.dynamic_slice(value, starts, sizes)
    if moves:
        b.after_moving_window.add(result.name)
    return result


# ---- concatenates


def _piece(b: WindowBuilder, value: Value, dim: int) -> Value:
    """An operand for a concatenate along `dim` beside `value`: a window of
    `value` along `dim` (most often), `value` itself, or an unrelated tensor."""
    size = value.shape[dim]
    kind = b.draw(st.sampled_from(["itself", "slice", "slice", "prefix", "suffix", "pad",
                                   "reverse", "unrelated"]))
    b.ops.append(f"concatenate-of-{kind}")
    if kind == "itself":
        return value
    if kind in ("slice", "prefix", "suffix"):
        start, limit = _window(b.draw, size)
        start, limit = {"prefix": (0, limit), "suffix": (start, size)}.get(kind, (start, limit))
        stride = b.draw(st.sampled_from([1, 1, 1, 2])) if kind == "slice" else 1
        return b.slice_dim(value, dim, start, limit, stride)
    if kind == "pad":
        low, high, interior = [0] * value.rank, [0] * value.rank, [0] * value.rank
        low[dim], high[dim], interior[dim] = _pad_amounts(b.draw, size, (0, 0, 1))
        return b.pad(value, low, high, interior)
    if kind == "reverse":
        return b.reverse(value, [dim])
    shape = list(value.shape)
    shape[dim] = b.draw(st.sampled_from((size,) + SIZES[:8]))
    return b.partner(shape, value.dtype)


def op_concatenate(b: WindowBuilder, value: Value) -> Value:
    dim = b.draw(st.integers(0, value.rank - 1))
    size = value.shape[dim]
    elements = math.prod(value.shape)
    forms = ["pieces", "pieces", "rotate", "wrap", "twice"]
    if elements * 8 > MAX_ELEMENTS:  # up to 4 operands, padded up to twice the size
        forms = ["rotate", "wrap"]
    if elements * 3 > MAX_ELEMENTS:
        forms = ["rotate"]  # keeps the size
    form = b.draw(st.sampled_from(forms))
    if size < 2 and form == "rotate":
        form = "twice"
    b.ops.append(f"concatenate-{form}")
    if form == "rotate":
        k = b.draw(st.integers(1, size - 1))
        operands = [b.slice_dim(value, dim, k, size), b.slice_dim(value, dim, 0, k)]
    elif form == "wrap":
        before, after = b.draw(st.integers(1, size)), b.draw(st.integers(1, size))
        operands = [b.slice_dim(value, dim, size - before, size), value,
                    b.slice_dim(value, dim, 0, after)]
    elif form == "twice":
        operands = [value, value] + [_piece(b, value, dim)
                                     for _ in range(b.draw(st.integers(0, 1)))]
        operands = b.draw(st.permutations(operands))
    else:
        operands = [_piece(b, value, dim) for _ in range(b.draw(st.integers(2, 4)))]
    return b.concatenate(list(operands), dim)


OPS = {"slice": op_slice, "concatenate": op_concatenate, "pad": op_pad,
       "reverse": op_reverse, "dynamic_slice": op_dynamic_slice}
# Concatenates carry the bug class: drawn twice as often as the others.
OP_WEIGHTS = ("concatenate", "concatenate", "slice", "pad", "reverse", "dynamic_slice")


# ------------------------------------------------------------------ programs


def _shape(draw, rank: int) -> tuple[int, ...]:
    return tuple(draw(st.sampled_from(RANK3_SIZES if rank == 3 else SIZES))
                 for _ in range(rank))


@st.composite
def window_programs(draw, max_ops: int = 6) -> Program:
    mesh = draw(window_meshes())
    spelling = draw(st.sampled_from(SPELLINGS))
    # Shardy's shardings are drawn over the halves of a size-4 axis: both
    # halves on one dim in order spell the whole axis, anything else sub-axes.
    b = WindowBuilder(draw, with_sub_axes(mesh) if spelling == "sdy" else mesh, spelling)
    dtype = draw(st.sampled_from(["f32", "f32", "i32"]))
    rank = draw(st.integers(1, 3))
    for _ in range(draw(st.integers(1, 2))):
        b.pool.append(b.new_argument(_shape(draw, rank), dtype))
    for _ in range(draw(st.integers(1, max_ops))):
        value = b.pick(lambda v: True)
        kind = draw(st.sampled_from(OP_WEIGHTS))
        b.ops.append(kind)
        b.pool.append(b.maybe_constrain(OPS[kind](b, value)))
    uses = " ".join(line.partition(" = ")[2] for line in b.lines)
    unused = [v for v in b.pool if not v.name.startswith("%arg")
              and not re.search(re.escape(v.name) + r"(?![0-9])", uses)]
    results = (unused[::-1] or [b.pool[-1]])[:2]
    result_shardings = [draw(st.one_of(st.none(), shardings(b.mesh, v.rank),
                                       spread_shardings(b.mesh, v.rank))) for v in results]
    seed = draw(st.integers(0, 2**32 - 1))
    if spelling == "sdy":
        return _assemble_shardy(b, mesh, results, result_shardings, seed)
    return assemble(b, results, result_shardings, spelling == "mhlo-text",
                     draw(st.booleans()), seed)


def _assemble_shardy(b: WindowBuilder, mesh: Mesh, results, result_shardings,
                     seed: int) -> Program:
    """The module in Shardy's spelling: its mesh declared at the top (parts
    of split axes merged back, as Shardy declares them)."""
    def attrs(sharding: Sharding | None) -> str:
        return "" if sharding is None else f" {{sdy.sharding = {sdy_sharding_text(sharding)}}}"

    params = [f"{value.name}: {value.type}{attrs(sharding)}" for value, sharding in b.arguments]
    outs = [f"{value.type}{attrs(sharding)}" for value, sharding in zip(results, result_shardings)]
    body = "".join(f"    {line}\n" for line in b.lines)
    declared = mesh_attr_text(b.mesh, sdy_axes=True).removeprefix("#sdy.mesh")
    text = (f"module {{\n  sdy.mesh @mesh = {declared}\n"
            f"  func.func public @main({', '.join(params)}) -> ({', '.join(outs)}) {{\n"
            f"{body}    return {', '.join(v.name for v in results)} : "
            f"{', '.join(v.type for v in results)}\n  }}\n}}\n")
    arguments = tuple(Argument(v.shape, v.dtype, s) for v, s in b.arguments)
    return Program(text, mesh, (), arguments, seed, tuple(b.ops))
