"""Random StableHLO programs, meshes and shardings for differential testing.

`programs()` is a hypothesis strategy of `Program`s: a single-device
StableHLO module (text), a mesh of 2, 4 or 8 devices with 1 to 3 axes, the
shardings that drive the partitioner (``mhlo.sharding`` attributes on
arguments, results and intermediates, or partition-spec rules for the
arguments and results) and the inputs to run it on.  The test partitions
the program, runs it on the mesh's devices and compares with the program run
on one device.

Why text and not small JAX functions exported with ``ss.export``
-----------------------------------------------------------------
Writing the StableHLO ourselves gives exact control over what reaches the
partitioner: ``dot_general`` with any batch/contracting/free layout (JAX
canonicalises einsums into transposes + dots), ``pad`` with negative and
interior padding, strided ``slice``, ``reshape`` that splits or merges
exactly one dimension, and ``mhlo.sharding`` constraints (including pinned
``{unreduced}`` partial sums) on any intermediate, in both spellings the
project reads (a ``custom_call @Sharding`` and an attribute on the op).  A
JAX export would add its own ops around each of these, and a shrunk failure
would be a Python function rather than the few lines of IR the partitioner
actually saw; as text, a failure is pasted verbatim into a regression test.
Validity is not left to chance: every value's shape is tracked here, and the
test parses each program (MLIR's verifier) and runs it on one device first,
so a generator mistake shows up as such and never as a partitioner bug.

What is covered
---------------
* element-wise unary (tanh, negate, abs, sine, cosine, logistic; floor and
  sign only on values computed exactly) and binary (add, subtract, multiply,
  maximum, minimum; and/or/xor on integers and booleans), compare + select,
  converts (i32/i1 to f32), scalar constants broadcast into a shape;
* broadcast_in_dim (new dimensions, size-1 dimensions expanded), reshape
  (split one dimension, merge two adjacent ones, add/drop a unit dimension,
  and now and then an arbitrary refactoring), transpose;
* dot_general with batch, contracting and free dimensions on both sides, in
  any order; reduce (sum, max) over any set of dimensions;
* slice (with strides), concatenate (2 or 3 operands), pad (low/high may be
  negative, interior padding), iota (i32, and converted to f32);
* softmax chains (max-reduce, broadcast, subtract, exp, sum-reduce,
  broadcast, divide) along any dimension;
* meshes of 2, 4 or 8 devices with 1 to 3 axes (size-1 axes included), in id
  order or permuted; shardings on arguments, results and intermediates with
  uneven dimensions (shapes are small and rarely divisible), partial
  replication (unused axes: ``last_tile_dim_replicate``), several axes on one
  dimension in any order, and ``{unreduced}`` partial sums pinned on the
  result of a dot or reduce-sum (``last_tile_dims={unreduced}``).

Numerics: values are standard normal (f32) or small integers (i32), so
results stay O(1) to O(100).  Comparisons and discontinuous functions
(floor, sign) only see values that are computed element by element from the
inputs (the ``exact`` flag): a reordered sum may differ in its last bits,
and comparing it would make a tie flip into a false mismatch.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Callable

import numpy as np
from hypothesis import strategies as st

from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.module_shardings import mesh_attr_text
from stablehlo_spmd.sharding import Sharding

MAX_RANK = 4
DIM_SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 12)
MLIR_TYPES = {"f32": "f32", "i32": "i32", "i1": "i1"}
AXIS_NAMES = ("x", "y", "z")


# ------------------------------------------------------------------ values


@dataclasses.dataclass(frozen=True)
class Value:
    name: str                  # "%3", "%arg0"
    shape: tuple[int, ...]
    dtype: str                 # "f32" | "i32" | "i1"
    exact: bool                # computed element-wise from the inputs (no reordered sums)

    @property
    def type(self) -> str:
        return tensor_type(self.shape, self.dtype)

    @property
    def rank(self) -> int:
        return len(self.shape)


def tensor_type(shape, dtype: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + MLIR_TYPES[dtype] + ">"


@dataclasses.dataclass(frozen=True)
class Argument:
    shape: tuple[int, ...]
    dtype: str
    sharding: Sharding | None  # None: left to propagation


@dataclasses.dataclass(frozen=True)
class Program:
    """One generated case: module text, mesh, rules and how to make its inputs."""

    text: str
    mesh: Mesh
    rules: tuple               # ((regex, spec), ...) for ss.partition; () when all are in the text
    arguments: tuple[Argument, ...]
    seed: int
    ops: tuple[str, ...]       # the op kinds used, for statistics

    @classmethod
    def from_text(cls, text: str, mesh: Mesh | str, rules=(), seed: int = 0) -> "Program":
        """A program written by hand (a regression test): arguments read from `text`."""
        mesh = Mesh.from_string(mesh) if isinstance(mesh, str) else mesh
        arguments = []
        for dims, dtype in re.findall(r"%arg\d+: tensor<((?:\d+x)*)(f32|i32|i1)>", text):
            shape = tuple(int(d) for d in dims.split("x") if d)
            arguments.append(Argument(shape, dtype, None))
        return cls(text, mesh, tuple(rules), tuple(arguments), seed, ())

    def inputs(self) -> list[np.ndarray]:
        rng = np.random.default_rng(self.seed)
        arrays = []
        for argument in self.arguments:
            if argument.dtype == "f32":
                arrays.append(rng.standard_normal(argument.shape).astype(np.float32))
            elif argument.dtype == "i32":
                arrays.append(rng.integers(-4, 5, size=argument.shape).astype(np.int32))
            else:
                arrays.append(rng.integers(0, 2, size=argument.shape).astype(np.bool_))
        return arrays

    def __repr__(self) -> str:  # what hypothesis prints for a falsifying example
        return (f"Program(mesh={self.mesh!r}, rules={self.rules!r}, seed={self.seed},\n"
                f"text='''\n{self.text}''')")

    def _repr_pretty_(self, printer, cycle) -> None:  # hypothesis' pretty printer
        printer.text(repr(self))


# ------------------------------------------------------------------ the builder


class Builder:
    """Emits ops into one function body, tracking every value's shape."""

    def __init__(self, draw, mesh: Mesh, annotate_in_text: bool):
        self.draw = draw
        self.mesh = mesh
        self.annotate_in_text = annotate_in_text
        self.lines: list[str] = []
        self.arguments: list[tuple[Value, Sharding | None]] = []
        self.pool: list[Value] = []
        self.counter = 0
        self.ops: list[str] = []

    # ---- plumbing

    def fresh(self) -> str:
        self.counter += 1
        return f"%{self.counter - 1}"

    def emit(self, text: str, shape, dtype: str, exact: bool) -> Value:
        """`text` is the op after ``%N = `` with ``{type}`` placeholders already filled."""
        value = Value(self.fresh(), tuple(shape), dtype, exact)
        self.lines.append(f"{value.name} = {text}")
        return value

    def new_argument(self, shape, dtype: str) -> Value:
        value = Value(f"%arg{len(self.arguments)}", tuple(shape), dtype, True)
        sharding = self.draw(st.one_of(st.none(), shardings(self.mesh, len(shape))))
        self.arguments.append((value, sharding))
        return value

    def constant(self, literal: str, dtype: str) -> Value:
        return self.emit(f"stablehlo.constant dense<{literal}> : {tensor_type((), dtype)}",
                         (), dtype, True)

    def splat(self, literal: str, shape, dtype: str) -> Value:
        scalar = self.constant(literal, dtype)
        return self.broadcast(scalar, shape, ())

    def broadcast(self, value: Value, shape, dims) -> Value:
        return self.emit(f"stablehlo.broadcast_in_dim {value.name}, dims = {list(dims)} : "
                         f"({value.type}) -> {tensor_type(shape, value.dtype)}",
                         shape, value.dtype, value.exact)

    def unary(self, op: str, value: Value, exact: bool | None = None) -> Value:
        return self.emit(f"stablehlo.{op} {value.name} : {value.type}", value.shape, value.dtype,
                         value.exact if exact is None else exact)

    def binary(self, op: str, a: Value, b: Value) -> Value:
        return self.emit(f"stablehlo.{op} {a.name}, {b.name} : {a.type}", a.shape, a.dtype,
                         a.exact and b.exact)

    def convert(self, value: Value, dtype: str) -> Value:
        return self.emit(f"stablehlo.convert {value.name} : ({value.type}) -> "
                         f"{tensor_type(value.shape, dtype)}", value.shape, dtype, value.exact)

    def reduce(self, value: Value, dims, kind: str) -> Value:
        init = {("add", "f32"): "0.0", ("add", "i32"): "0",
                ("maximum", "f32"): "0xFF800000", ("maximum", "i32"): "-2147483648"}[
                    (kind, value.dtype)]
        start = self.constant(init, value.dtype)
        shape = tuple(s for d, s in enumerate(value.shape) if d not in dims)
        exact = value.exact and (kind == "maximum" or value.dtype != "f32")
        return self.emit(
            f"stablehlo.reduce({value.name} init: {start.name}) applies stablehlo.{kind} "
            f"across dimensions = {sorted(dims)} : ({value.type}, {start.type}) -> "
            f"{tensor_type(shape, value.dtype)}", shape, value.dtype, exact)

    def partner(self, shape, dtype: str, exact: bool = False) -> Value:
        """A value of this shape and dtype: one in the pool, or a new argument."""
        same = [v for v in self.pool if v.shape == tuple(shape) and v.dtype == dtype
                and (v.exact or not exact)]
        if same and self.draw(st.booleans()):
            return self.draw(st.sampled_from(same))
        return self.new_argument(shape, dtype)

    def pick(self, accept: Callable[[Value], bool]) -> Value | None:
        candidates = [v for v in self.pool if accept(v)]
        if not candidates:
            return None
        # Prefer recent values, so that ops chain into each other.
        index = self.draw(st.integers(0, len(candidates) - 1).map(lambda i: -1 - i)
                          | st.just(-1))
        return candidates[index]

    # ---- shardings on intermediates

    def maybe_constrain(self, value: Value) -> Value:
        """Now and then pin an intermediate's sharding (either spelling)."""
        if self.draw(st.integers(0, 3)) != 0:
            return value
        sharding = self.draw(shardings(self.mesh, value.rank))
        text = sharding_text(sharding)
        if self.draw(st.booleans()):
            self.ops.append("constraint")
            return self.emit(f'stablehlo.custom_call @Sharding({value.name}) '
                             f'{{mhlo.sharding = "{text}"}} : ({value.type}) -> {value.type}',
                             value.shape, value.dtype, value.exact)
        if self.attach(value, text):
            self.ops.append("op-sharding")
        return value

    def attach(self, value: Value, text: str) -> bool:
        """Put ``mhlo.sharding`` on the op defining `value`, unless it has one."""
        for i in range(len(self.lines) - 1, -1, -1):
            line = self.lines[i]
            if not line.startswith(value.name + " = "):
                continue
            if "mhlo.sharding" in line:
                return False
            attr = f'mhlo.sharding = "{text}"'
            head, _, rest = line.partition(" = ")
            if rest.startswith('"'):  # generic form: into its attribute dictionary, if any
                close = rest.index(")")
                if rest[close + 1:].startswith(" {"):
                    rest = f"{rest[:close + 3]}{attr}, {rest[close + 3:]}"
                else:
                    rest = f"{rest[:close + 1]} {{{attr}}}{rest[close + 1:]}"
            else:
                # the pretty forms take an attribute dictionary right before the
                # colon (reduce: after its region clause, before its type)
                before, sep, after = rest.rpartition(" : (" if " : (" in rest else " : ")
                rest = f"{before} {{{attr}}}{sep}{after}"
            self.lines[i] = f"{head} = {rest}"
            return True
        raise AssertionError(f"no op defines {value.name}")

    def maybe_unreduced(self, value: Value, reduced_axes_possible: bool) -> None:
        """Pin a partial sum on a dot / reduce-sum result now and then."""
        sized = [a for a, s in zip(self.mesh.axis_names, self.mesh.mesh_shape) if s > 1]
        if not (reduced_axes_possible and sized and value.dtype == "f32"):
            return
        if self.draw(st.booleans()):
            return
        unreduced = self.draw(st.lists(st.sampled_from(sized), min_size=1, unique=True))
        rest = [a for a in self.mesh.axis_names if a not in unreduced]
        dim_axes = self.draw(_assign_axes(rest, value.rank))
        sharding = Sharding(self.mesh, dim_axes, unreduced=tuple(unreduced))
        if self.attach(value, sharding_text(sharding)):
            self.ops.append("unreduced")


# ------------------------------------------------------------------ ops


def op_unary(b: Builder) -> Value | None:
    value = b.pick(lambda v: v.dtype in ("f32", "i32"))
    if value is None:
        return None
    if value.dtype == "i32":
        return b.unary(b.draw(st.sampled_from(["negate", "abs"])), value)
    ops = ["tanh", "negate", "abs", "sine", "cosine", "logistic"]
    if value.exact:
        ops += ["floor", "sign"]
    return b.unary(b.draw(st.sampled_from(ops)), value)


def op_binary(b: Builder) -> Value | None:
    a = b.pick(lambda v: True)
    if a.dtype == "i1":
        op = b.draw(st.sampled_from(["and", "or", "xor"]))
    elif a.dtype == "i32":
        op = b.draw(st.sampled_from(["add", "subtract", "multiply", "maximum", "minimum", "and",
                                     "or"]))
    else:
        op = b.draw(st.sampled_from(["add", "subtract", "multiply", "maximum", "minimum"]))
    other = b.partner(a.shape, a.dtype)
    if b.draw(st.booleans()):
        a, other = other, a
    return b.binary(op, a, other)


def op_scale(b: Builder) -> Value | None:
    """x * broadcast(constant): a scalar constant broadcast into a shape."""
    a = b.pick(lambda v: v.dtype == "f32")
    if a is None:
        return None
    factor = b.splat(b.draw(st.sampled_from(["0.5", "-2.0", "3.0"])), a.shape, "f32")
    return b.binary("multiply", a, factor)


def op_select(b: Builder) -> Value | None:
    """compare on exactly computed values, then select."""
    a = b.pick(lambda v: v.exact and v.dtype in ("f32", "i32"))
    if a is None:
        return None
    other = b.partner(a.shape, a.dtype, exact=True)
    direction = b.draw(st.sampled_from(["LT", "LE", "GT", "GE", "EQ", "NE"]))
    kind = "FLOAT" if a.dtype == "f32" else "SIGNED"
    pred = b.emit(f"stablehlo.compare  {direction}, {a.name}, {other.name},  {kind} : "
                  f"({a.type}, {other.type}) -> {tensor_type(a.shape, 'i1')}", a.shape, "i1", True)
    b.pool.append(pred)
    dtype = b.draw(st.sampled_from(["f32", "i32"]))
    on_true = b.partner(a.shape, dtype)
    on_false = b.partner(a.shape, dtype)
    return b.emit(f'"stablehlo.select"({pred.name}, {on_true.name}, {on_false.name}) : '
                  f"({pred.type}, {on_true.type}, {on_false.type}) -> {on_true.type}",
                  a.shape, dtype, on_true.exact and on_false.exact)


def op_convert(b: Builder) -> Value | None:
    value = b.pick(lambda v: v.dtype in ("i32", "i1"))
    if value is None:
        return None
    return b.convert(value, "f32")


def op_broadcast(b: Builder) -> Value | None:
    value = b.pick(lambda v: v.rank < MAX_RANK)
    if value is None:
        return None
    extra = b.draw(st.integers(0 if 1 in value.shape else 1, MAX_RANK - value.rank))
    rank = value.rank + extra
    dims = sorted(b.draw(st.lists(st.integers(0, rank - 1), min_size=value.rank,
                                  max_size=value.rank, unique=True)))
    shape = [b.draw(st.sampled_from(DIM_SIZES)) for _ in range(rank)]
    for operand_dim, dim in enumerate(dims):
        size = value.shape[operand_dim]
        shape[dim] = size if size != 1 else b.draw(st.sampled_from([1, 2, 3, 4]))
    return b.broadcast(value, shape, dims)


def _factor_pairs(n: int) -> list[tuple[int, int]]:
    return [(a, n // a) for a in range(2, n) if n % a == 0]


def op_reshape(b: Builder) -> Value | None:
    value = b.pick(lambda v: v.rank >= 1)
    if value is None:
        return None
    shape = list(value.shape)
    choices = []
    if len(shape) < MAX_RANK and any(_factor_pairs(s) for s in shape):
        choices.append("split")
    if len(shape) >= 2:
        choices.append("merge")
    if len(shape) < MAX_RANK:
        choices.append("unit")
    if 1 in shape and len(shape) >= 2:
        choices.append("drop-unit")
    choices.append("refactor")
    kind = b.draw(st.sampled_from(choices))
    if kind == "split":
        dim = b.draw(st.sampled_from([d for d, s in enumerate(shape) if _factor_pairs(s)]))
        pair = b.draw(st.sampled_from(_factor_pairs(shape[dim])))
        shape[dim:dim + 1] = list(pair)
    elif kind == "merge":
        dim = b.draw(st.integers(0, len(shape) - 2))
        shape[dim:dim + 2] = [shape[dim] * shape[dim + 1]]
    elif kind == "unit":
        shape.insert(b.draw(st.integers(0, len(shape))), 1)
    elif kind == "drop-unit":
        shape.pop(b.draw(st.sampled_from([d for d, s in enumerate(shape) if s == 1])))
    else:
        total = math.prod(shape)
        shape = [total]
        for _ in range(b.draw(st.integers(0, 2))):
            splittable = [d for d, s in enumerate(shape) if _factor_pairs(s)]
            if not splittable:
                break
            dim = b.draw(st.sampled_from(splittable))
            shape[dim:dim + 1] = list(b.draw(st.sampled_from(_factor_pairs(shape[dim]))))
    b.ops.append(f"reshape-{kind}")
    return b.emit(f"stablehlo.reshape {value.name} : ({value.type}) -> "
                  f"{tensor_type(shape, value.dtype)}", shape, value.dtype, value.exact)


def op_transpose(b: Builder) -> Value | None:
    value = b.pick(lambda v: v.rank >= 2)
    if value is None:
        return None
    perm = b.draw(st.permutations(range(value.rank)))
    shape = [value.shape[p] for p in perm]
    return b.emit(f"stablehlo.transpose {value.name}, dims = {list(perm)} : ({value.type}) -> "
                  f"{tensor_type(shape, value.dtype)}", shape, value.dtype, value.exact)


def op_dot(b: Builder) -> Value | None:
    lhs = b.pick(lambda v: v.dtype == "f32" and v.rank >= 1)
    if lhs is None:
        return None
    roles = [b.draw(st.sampled_from(["batch", "contract", "contract", "free", "free"]))
             for _ in lhs.shape]
    lhs_batch = [d for d, r in enumerate(roles) if r == "batch"]
    lhs_batch = list(b.draw(st.permutations(lhs_batch))) if lhs_batch else []
    lhs_contract = [d for d, r in enumerate(roles) if r == "contract"]
    lhs_contract = list(b.draw(st.permutations(lhs_contract))) if lhs_contract else []
    lhs_free = [d for d, r in enumerate(roles) if r == "free"]
    max_rhs_free = MAX_RANK - len(lhs_batch) - len(lhs_free)
    rhs_free_sizes = b.draw(st.lists(st.sampled_from(DIM_SIZES), min_size=0,
                                     max_size=min(2, max(0, max_rhs_free))))
    # rhs dims: batch, contracting and free, in a random order
    pieces = ([("batch", i) for i in range(len(lhs_batch))]
              + [("contract", i) for i in range(len(lhs_contract))]
              + [("free", i) for i in range(len(rhs_free_sizes))])
    order = b.draw(st.permutations(pieces)) if pieces else []
    rhs_shape, rhs_batch, rhs_contract = [], [None] * len(lhs_batch), [None] * len(lhs_contract)
    for position, (role, i) in enumerate(order):
        if role == "batch":
            rhs_batch[i] = position
            rhs_shape.append(lhs.shape[lhs_batch[i]])
        elif role == "contract":
            rhs_contract[i] = position
            rhs_shape.append(lhs.shape[lhs_contract[i]])
        else:
            rhs_shape.append(rhs_free_sizes[i])
    rhs = b.partner(rhs_shape, "f32")
    if b.draw(st.booleans()):  # the same dot with its operands the other way round
        lhs, rhs = rhs, lhs
        lhs_batch, rhs_batch = rhs_batch, lhs_batch
        lhs_contract, rhs_contract = rhs_contract, lhs_contract
    shape = ([lhs.shape[d] for d in lhs_batch]
             + [s for d, s in enumerate(lhs.shape) if d not in lhs_batch + lhs_contract]
             + [s for d, s in enumerate(rhs.shape) if d not in rhs_batch + rhs_contract])
    numbers = []
    if lhs_batch:
        numbers += [f"lhs_batching_dimensions = {lhs_batch}",
                    f"rhs_batching_dimensions = {rhs_batch}"]
    if lhs_contract:
        numbers += [f"lhs_contracting_dimensions = {lhs_contract}",
                    f"rhs_contracting_dimensions = {rhs_contract}"]
    dot = b.emit(f'"stablehlo.dot_general"({lhs.name}, {rhs.name}) {{dot_dimension_numbers = '
                 f'#stablehlo.dot<{", ".join(numbers)}>}} : ({lhs.type}, {rhs.type}) -> '
                 f"{tensor_type(shape, 'f32')}", shape, "f32", False)
    b.maybe_unreduced(dot, bool(lhs_contract))
    return dot


def op_reduce(b: Builder) -> Value | None:
    value = b.pick(lambda v: v.dtype in ("f32", "i32") and v.rank >= 1)
    if value is None:
        return None
    dims = b.draw(st.lists(st.integers(0, value.rank - 1), min_size=1, max_size=value.rank,
                           unique=True))
    kind = b.draw(st.sampled_from(["add", "maximum"]))
    b.ops.append(f"reduce-{kind}")
    result = b.reduce(value, dims, kind)
    if kind == "add":
        b.maybe_unreduced(result, True)
    return result


def op_slice(b: Builder) -> Value | None:
    value = b.pick(lambda v: v.rank >= 1)
    if value is None:
        return None
    starts, limits, strides, shape = [], [], [], []
    for size in value.shape:
        start = b.draw(st.integers(0, size - 1))
        limit = b.draw(st.integers(start + 1, size))
        stride = b.draw(st.sampled_from([1, 1, 2, 3]))
        starts.append(start)
        limits.append(limit)
        strides.append(stride)
        shape.append(-(-(limit - start) // stride))
    def arr(xs):
        return "array<i64: " + ", ".join(map(str, xs)) + ">"
    return b.emit(f'"stablehlo.slice"({value.name}) {{start_indices = {arr(starts)}, '
                  f"limit_indices = {arr(limits)}, strides = {arr(strides)}}} : "
                  f"({value.type}) -> {tensor_type(shape, value.dtype)}",
                  shape, value.dtype, value.exact)


def op_concatenate(b: Builder) -> Value | None:
    value = b.pick(lambda v: v.rank >= 1)
    if value is None:
        return None
    dim = b.draw(st.integers(0, value.rank - 1))
    operands = [value]
    for _ in range(b.draw(st.integers(1, 2))):
        shape = list(value.shape)
        if b.draw(st.booleans()):
            shape[dim] = b.draw(st.sampled_from(DIM_SIZES))
        operands.append(b.partner(shape, value.dtype))
    operands = b.draw(st.permutations(operands))
    shape = list(value.shape)
    shape[dim] = sum(o.shape[dim] for o in operands)
    return b.emit(f"stablehlo.concatenate {', '.join(o.name for o in operands)}, dim = {dim} : "
                  f"({', '.join(o.type for o in operands)}) -> {tensor_type(shape, value.dtype)}",
                  shape, value.dtype, all(o.exact for o in operands))


def op_pad(b: Builder) -> Value | None:
    value = b.pick(lambda v: v.rank >= 1 and v.dtype in ("f32", "i32"))
    if value is None:
        return None
    low, high, interior, shape = [], [], [], []
    for size in value.shape:
        i = b.draw(st.sampled_from([0, 0, 0, 1, 2]))
        padded = size + (size - 1) * i
        lo = b.draw(st.integers(max(-2, -(padded - 1)), 3))
        hi = b.draw(st.integers(max(-2, -(padded + lo - 1)), 3))
        low.append(lo)
        high.append(hi)
        interior.append(i)
        shape.append(padded + lo + hi)
    pad = b.constant(b.draw(st.sampled_from(["0", "1", "-3"])) + (".0" if value.dtype == "f32"
                                                                  else ""), value.dtype)
    return b.emit(f"stablehlo.pad {value.name}, {pad.name}, low = {low}, high = {high}, "
                  f"interior = {interior} : ({value.type}, {pad.type}) -> "
                  f"{tensor_type(shape, value.dtype)}", shape, value.dtype, value.exact)


def op_iota(b: Builder) -> Value | None:
    value = b.pick(lambda v: v.rank >= 1)
    shape = value.shape if value is not None else (b.draw(st.sampled_from(DIM_SIZES)),)
    dim = b.draw(st.integers(0, len(shape) - 1))
    iota = b.emit(f"stablehlo.iota dim = {dim} : {tensor_type(shape, 'i32')}", shape, "i32", True)
    if b.draw(st.booleans()):
        return iota
    b.pool.append(iota)
    return b.convert(iota, "f32")


def op_softmax(b: Builder) -> Value | None:
    value = b.pick(lambda v: v.dtype == "f32" and v.rank >= 1)
    if value is None:
        return None
    dim = b.draw(st.integers(0, value.rank - 1))
    keep = [d for d in range(value.rank) if d != dim]
    peak = b.broadcast(b.reduce(value, [dim], "maximum"), value.shape, keep)
    shifted = b.maybe_constrain(b.binary("subtract", value, peak))
    exp = b.unary("exponential", shifted, exact=False)
    total = b.broadcast(b.reduce(exp, [dim], "add"), value.shape, keep)
    return b.binary("divide", exp, total)


OPS = {
    "unary": op_unary, "binary": op_binary, "scale": op_scale, "select": op_select,
    "convert": op_convert, "broadcast": op_broadcast, "reshape": op_reshape,
    "transpose": op_transpose, "dot": op_dot, "reduce": op_reduce, "slice": op_slice,
    "concatenate": op_concatenate, "pad": op_pad, "iota": op_iota, "softmax": op_softmax,
}


# ------------------------------------------------------------------ meshes and shardings


@st.composite
def meshes(draw) -> Mesh:
    size = draw(st.sampled_from([2, 4, 8]))
    count = draw(st.integers(1, 3))
    # Split log2(size) among the axes; size-1 axes are allowed (a 2-device
    # mesh with 2 axes needs one).
    bits = [0] * count
    for _ in range(int(math.log2(size))):
        bits[draw(st.integers(0, count - 1))] += 1
    sizes = [2 ** k for k in bits]
    names = AXIS_NAMES[:count]
    ids = list(range(size))
    if draw(st.integers(0, 4)) == 0:
        ids = draw(st.permutations(ids))
    return Mesh(tuple(ids), tuple(sizes), names)


def _assign_axes(axes, rank: int):
    """Each axis to one dimension or to none, in a random order (major to minor)."""
    @st.composite
    def assign(draw):
        dim_axes = [[] for _ in range(rank)]
        for axis in draw(st.permutations(list(axes))) if axes else []:
            target = draw(st.integers(-1, rank - 1)) if rank else -1
            if target >= 0:
                dim_axes[target].append(axis)
        return tuple(tuple(a) for a in dim_axes)
    return assign()


def shardings(mesh: Mesh, rank: int):
    return _assign_axes(mesh.axis_names, rank).map(lambda dim_axes: Sharding(mesh, dim_axes))


def sharding_text(sharding: Sharding) -> str:
    from stablehlo_spmd.api import format_sharding
    return format_sharding(sharding)


# ------------------------------------------------------------------ programs


@st.composite
def programs(draw, max_ops: int = 10) -> Program:
    mesh = draw(meshes())
    annotate_in_text = draw(st.booleans())
    b = Builder(draw, mesh, annotate_in_text)
    first_shape = tuple(draw(st.lists(st.sampled_from(DIM_SIZES), min_size=1, max_size=3)))
    b.pool.append(b.new_argument(first_shape, draw(st.sampled_from(["f32", "f32", "f32", "i32"]))))
    count = draw(st.integers(1, max_ops))
    names = sorted(OPS)
    for _ in range(count):
        kind = draw(st.sampled_from(names))
        value = OPS[kind](b)
        if value is None:
            continue
        b.ops.append(kind)
        value = b.maybe_constrain(value)
        b.pool.append(value)
    # Return the values nothing else reads (most recent first, at most 3), so
    # that few ops are dead code.
    uses = " ".join(line.partition(" = ")[2] for line in b.lines)
    unused = [v for v in b.pool if not v.name.startswith("%arg")
              and not re.search(re.escape(v.name) + r"(?![0-9])", uses)]
    results = (unused[::-1] or [b.pool[-1]])[:3]
    result_shardings = [draw(st.one_of(st.none(), shardings(mesh, v.rank))) for v in results]
    return assemble(b, results, result_shardings, annotate_in_text, draw(st.booleans()),
                     draw(st.integers(0, 2**32 - 1)))


def assemble(b: Builder, results, result_shardings, annotate_in_text: bool, declare_mesh: bool,
              seed: int) -> Program:
    rules = []

    def attrs(sharding, pattern):
        if sharding is None:
            return ""
        if annotate_in_text:
            return f' {{mhlo.sharding = "{sharding_text(sharding)}"}}'
        rules.append((pattern, sharding.to_spec()))
        return ""

    params = []
    for index, (value, sharding) in enumerate(b.arguments):
        params.append(f"{value.name}: {value.type}{attrs(sharding, f'^arg{index}$')}")
    outs = []
    for index, (value, sharding) in enumerate(zip(results, result_shardings)):
        name = "^result$" if len(results) == 1 else f"^result\\[{index}\\]$"
        outs.append(f"{value.type}{attrs(sharding, name)}")
    body = "".join(f"    {line}\n" for line in b.lines)
    header = "module"
    if "mhlo.sharding" in "".join(params + outs + b.lines) and declare_mesh:
        # Half the programs name their mesh, as an annotated module does; the
        # others leave it to the mesh given with the rules (which must be
        # taken as given even where the device lists alone are ambiguous:
        # test_regressions.py).
        header += f" attributes {{spmd.mesh = {mesh_attr_text(b.mesh)}}}"
    text = (f"{header} {{\n  func.func public @main({', '.join(params)}) -> ({', '.join(outs)}) {{\n"
            f"{body}    return {', '.join(v.name for v in results)} : "
            f"{', '.join(v.type for v in results)}\n  }}\n}}\n")
    arguments = tuple(Argument(v.shape, v.dtype, s) for v, s in b.arguments)
    return Program(text, b.mesh, tuple(rules), arguments, seed, tuple(b.ops))
