"""The two propagation engines side by side: ``spmd`` and ``shardy``.

``ss.propagate(text, engine="spmd")`` is this project's solver;
``engine="shardy"`` hands the same annotated module to jaxlib's in-process
``sdy-propagation-pipeline`` and converts the answer back
(`stablehlo_spmd.passes.shardy_engine`).  Three workloads are compared op by
op, in program order: the MLP training step, one multi-head attention block
(Megatron rules on a data=4,model=2 mesh) and the transformer training step.

Shardings are compared as device layouts (`parse_hlo_sharding`, then kind,
tile shape, subgroup kinds and the device array), not as text.  Constant
expressions are left out of the op-by-op alignment: Shardy's
``sdy-constant-or-scalar-splitter``/``-merger`` pair deduplicates them, so the
two outputs do not have the same constants.  Marked reshards (``custom_call
@Sharding``) are counted separately: each engine inserts its own.

What must agree (and is asserted): the program itself (same functions, same
non-constant ops in the same order), the function results, the parameters'
gradients once the spmd engine's pending partial sums are summed, and which
activations are batch-sharded over ``data``.  What may differ is classified
(`Disagreement.category`) and printed; ``docs/engine_comparison.md`` is
written from that output.  The op-rule table is still growing, so ops the
spmd engine has no rule for are recorded, not failed on.

Run ``pytest tests/unit/passes/test_shardy_engine.py -q -s`` to see the summaries.
"""

from __future__ import annotations

import collections
import dataclasses
import difflib
import functools
import pathlib
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_spmd as ss
from stablehlo_spmd.errors import ShardingError, SpmdError
from stablehlo_spmd.frontends.jax import load_object
from stablehlo_spmd.hlo_sharding import HloSharding, parse_hlo_sharding
from stablehlo_spmd.ir import make_context, parse_module, source_position
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.module_shardings import (
    MHLO_SHARDING, SHARDING_TARGET, function_values, functions, read_mesh)
from stablehlo_spmd.sharding import Sharding
from example_files import rules_file
from jaxlib.mlir import ir

ROOT = pathlib.Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"

# The constant-expression roots Shardy's splitter copies per use and its merger dedups.
_CONSTANT_ROOTS = {"stablehlo.constant", "stablehlo.iota"}

# Ops whose region is a scalar combiner, not a computation on sharded values:
# neither engine shards the ops inside (and the printer's compact
# ``applies stablehlo.add`` form drops their attributes anyway).
_COMBINER_OWNERS = {"stablehlo.reduce", "stablehlo.reduce_window", "stablehlo.scatter",
                    "stablehlo.select_and_scatter", "stablehlo.sort", "stablehlo.all_reduce",
                    "stablehlo.reduce_scatter"}

# ---------------------------------------------------------------- workloads

ATTENTION_BATCH, ATTENTION_SEQ, ATTENTION_D, ATTENTION_HEADS = 8, 16, 64, 4

ATTENTION_RULES = [
    (r"\['w[qkv]'\]$", (None, "model")),
    (r"\['wo'\]$", ("model", None)),
    (r"^x$", ("data", None, None)),
]


def attention_block(params, x):
    """Causal multi-head self-attention, [B, S, D] -> [B, S, D]."""
    b, s, d = x.shape
    h = ATTENTION_HEADS

    def heads(t):
        return t.reshape(b, s, h, d // h).transpose(0, 2, 1, 3)

    q, k, v = (heads(x @ params[name]) for name in ("wq", "wk", "wv"))
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(jnp.float32(d // h))
    mask = jnp.tril(jnp.ones((s, s), dtype=bool))
    weights = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1)
    attended = jnp.einsum("bhqk,bhkd->bhqd", weights, v)
    return attended.transpose(0, 2, 1, 3).reshape(b, s, d) @ params["wo"]


def _attention_args():
    keys = jax.random.split(jax.random.PRNGKey(0), 5)
    d = ATTENTION_D
    params = {name: jax.random.normal(key, (d, d)) / np.sqrt(d)
              for name, key in zip(("wq", "wk", "wv", "wo"), keys)}
    x = jax.random.normal(keys[4], (ATTENTION_BATCH, ATTENTION_SEQ, d))
    return params, x


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    batch: int          # the leading dimension of every activation
    train_step: bool    # results are (new params, loss): gradients can be found

    def annotated(self) -> str:
        if self.name == "attention":
            text = ss.export(attention_block, *_attention_args())
            return ss.annotate(text, mesh="data=4,model=2", rules=ATTENTION_RULES)
        fn, args = load_object(f"{EXAMPLES / self.name}.py:train_step_example")()
        return ss.annotate(ss.export(fn, *args), rules=str(rules_file(self.name)))


WORKLOADS = [Workload("mlp", 16, True), Workload("attention", ATTENTION_BATCH, False),
             Workload("transformer", 8, True)]

# ------------------------------------------------------- reading the output


@dataclasses.dataclass
class OpRecord:
    index: int                          # module-wide, pre-order
    function: str
    name: str
    types: tuple[str, ...]
    shapes: tuple[tuple[int, ...] | None, ...]
    hlo: HloSharding | None
    shardings: tuple[Sharding | None, ...]  # the axis view of each result
    location: str | None
    constant: bool                      # part of a constant expression
    reshard: bool                       # custom_call @Sharding
    combiner: bool                      # inside a reduce/scatter/sort body
    operands: tuple[int | None, ...]    # producing op's index; None for block arguments

    @property
    def key(self):
        return self.name, self.types


@dataclasses.dataclass
class FunctionResult:
    function: str
    index: int
    name: str | None
    hlo: HloSharding | None
    producer: int | None


@dataclasses.dataclass
class Program:
    mesh: Mesh
    functions: list[str]
    ops: list[OpRecord]
    results: list[FunctionResult]
    warnings: list[str]
    no_rule: set[str] = dataclasses.field(default_factory=set)  # op names the engine lacks

    def compared_ops(self) -> list[OpRecord]:
        return [op for op in self.ops if not (op.constant or op.reshard or op.combiner)]

    def through_reshards(self, index: int | None) -> int | None:
        while index is not None and self.ops[index].reshard:
            index = self.ops[index].operands[0]
        return index


def _hlo(attr) -> HloSharding | None:
    return parse_hlo_sharding(ir.StringAttr(attr).value) if attr is not None else None


def _axis_view(hlo: HloSharding | None, mesh: Mesh, shapes) -> tuple[Sharding | None, ...]:
    if hlo is None:
        return (None,) * len(shapes)
    elements = hlo.elements if hlo.kind == "tuple" else (hlo,) * len(shapes)
    view = []
    for element, shape in zip(elements, shapes):
        try:
            view.append(Sharding.from_hlo(element, mesh, len(shape)) if shape is not None else None)
        except ShardingError:
            view.append(None)
    return tuple(view)


def read_program(text: str, warnings_seen: list[str]) -> Program:
    with make_context() as context:
        module = parse_module(text, "<propagated>", context)
        mesh = read_mesh(module)
        ops: list[OpRecord] = []
        constant_ops: set[int] = set()
        results: list[FunctionResult] = []
        names = []
        for func in functions(module):
            symbol = ir.StringAttr(func.attributes["sym_name"]).value
            names.append(symbol)
            found = []

            def visit(op, found=found):
                if op.name != "func.func":
                    found.append(op)
                return ir.WalkResult.ADVANCE

            func.walk(visit, ir.WalkOrder.PRE_ORDER)
            # Pre-order visits producers before users; the index rides on an
            # attribute so that an operand's owner can be looked up.
            for op in found:
                index = len(ops)
                op.attributes["test.index"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                                 index)
                operands = tuple(_producer(v) for v in op.operands)
                constant = op.name in _CONSTANT_ROOTS or (
                    bool(operands) and not len(op.regions)
                    and all(o is not None and o in constant_ops for o in operands))
                if constant:
                    constant_ops.add(index)
                shapes = tuple(tuple(r.type.shape) if isinstance(r.type, ir.RankedTensorType)
                               else None for r in op.results)
                hlo = _hlo(op.attributes[MHLO_SHARDING]) if MHLO_SHARDING in op.attributes else None
                ops.append(OpRecord(
                    index, symbol, op.name, tuple(str(r.type) for r in op.results), shapes, hlo,
                    _axis_view(hlo, mesh, shapes), source_position(op.location), constant,
                    op.name == "stablehlo.custom_call" and ir.StringAttr(
                        op.attributes["call_target_name"]).value == SHARDING_TARGET,
                    _in_combiner(op), operands))
            terminator = found[-1] if found else None
            for value in function_values(func):
                if value.kind != "result":
                    continue
                producer = _producer(terminator.operands[value.index]) if terminator else None
                results.append(FunctionResult(symbol, value.index, value.name,
                                              _hlo(value.get(MHLO_SHARDING)), producer))
        return Program(mesh, names, ops, results, warnings_seen)


def _in_combiner(op: ir.Operation) -> bool:
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        if parent.name in _COMBINER_OWNERS:
            return True
        parent = parent.parent
    return False


def _producer(value: ir.Value) -> int | None:
    if not isinstance(value, ir.OpResult):
        return None
    owner = value.owner
    if "test.index" not in owner.attributes:
        return None
    return ir.IntegerAttr(owner.attributes["test.index"]).value


# ---------------------------------------------------------------- comparing


def layout(hlo: HloSharding | None):
    """What a sharding does with the devices: kind, tiling, and the device array."""
    if hlo is None:
        return None
    if hlo.kind == "tuple":
        return ("tuple", tuple(layout(e) for e in hlo.elements))
    if hlo.kind == "tiled":
        return ("tiled", hlo.tile_shape, hlo.subgroup_kinds, hlo.tile.device_array().tolist())
    if hlo.kind == "maximal":
        return ("maximal", hlo.device)
    return (hlo.kind,)


def summed(sharding: Sharding | None) -> Sharding | None:
    """The value once its pending partial sums are reduced (unreduced axes replicated)."""
    if sharding is None or not sharding.unreduced:
        return sharding
    return dataclasses.replace(sharding, unreduced=())


def same(a: Sharding | None, b: Sharding | None) -> bool:
    if a is None or b is None:
        return a is b
    return layout(a.to_hlo()) == layout(b.to_hlo())


def same_once_reduced(ours: Sharding | None, theirs: Sharding | None) -> bool:
    """`theirs` is `ours` with its partial sums reduced, either to a replicated
    value (all-reduce) or onto a dimension split over a pending axis
    (reduce-scatter): dropping those axes from `theirs` gives `ours`'s tiling."""
    if ours is None or theirs is None or theirs.unreduced or ours.rank != theirs.rank:
        return False
    pending = set(ours.unreduced)
    stripped = tuple(tuple(a for a in axes if a not in pending) for axes in theirs.dim_axes)
    return same(summed(ours), theirs.with_dim_axes(stripped))


PARTIAL_ALL_REDUCE = "partial kept; Shardy reduces at once (all-reduce)"
PARTIAL_REDUCE_SCATTER = ("partial kept; Shardy reduces at once into a sharded value "
                          "(reduce-scatter)")
PARTIAL_OTHER = "partial kept, and a different tiling"
NOT_ANNOTATED = "the spmd engine writes no sharding on this op"
NO_RULE_SPMD = "no rule in the spmd engine"
NO_RULE_SHARDY = "no rule in Shardy"
CHOICE = "different choice (conflict resolution, propagation order)"


@dataclasses.dataclass
class Disagreement:
    category: str
    ours: OpRecord
    theirs: OpRecord


@dataclasses.dataclass
class Comparison:
    workload: Workload
    ours: Program
    theirs: Program
    pairs: list[tuple[OpRecord, OpRecord]]
    unaligned: list[tuple[str, list[OpRecord], list[OpRecord]]]
    agree: int
    disagreements: list[Disagreement]

    def by_category(self) -> dict[str, list[Disagreement]]:
        grouped = collections.defaultdict(list)
        for disagreement in self.disagreements:
            grouped[disagreement.category].append(disagreement)
        return dict(grouped)

    def summary(self) -> str:
        reshards = [sum(op.reshard for op in p.ops) for p in (self.ours, self.theirs)]
        constants = [sum(op.constant for op in p.ops) for p in (self.ours, self.theirs)]
        lines = [f"== {self.workload.name}: {len(self.pairs)} ops compared, {self.agree} agree, "
                 f"{len(self.disagreements)} differ; marked reshards spmd {reshards[0]} / "
                 f"shardy {reshards[1]}; constant-expression ops {constants[0]} / {constants[1]}"]
        for category, items in sorted(self.by_category().items(), key=lambda kv: -len(kv[1])):
            names = collections.Counter(d.ours.name for d in items)
            lines.append(f"  {len(items):4d}  {category}: "
                         + ", ".join(f"{n} x{c}" for n, c in names.most_common()))
            for d in items[:2]:
                lines.append(f"          {d.ours.name} {d.ours.types[0] if d.ours.types else ''}"
                             f" at {d.ours.location}: spmd {d.ours.hlo} / shardy {d.theirs.hlo}")
        return "\n".join(lines)


def spmd_ruleless_ops(messages: list[str]) -> set[str]:
    """Op names the spmd engine warned it has no rule for (it warns on every run)."""
    marker = "no sharding rule for '"
    return {m.split(marker, 1)[1].split("'")[0] for m in messages if marker in m}


# Ops Shardy shards without a factor rule: constants (split per use), calls
# (call-graph flattening), control flow (data-flow edges), and terminators.
_SHARDY_WITHOUT_RULES = {
    "stablehlo.constant", "stablehlo.iota", "stablehlo.return", "func.return", "func.call",
    "func.func", "builtin.module", "stablehlo.while", "stablehlo.case", "stablehlo.if",
    "stablehlo.optimization_barrier"}


def shardy_ruleless_ops(text: str) -> set[str]:
    """Op names in `text` that Shardy's rule registry does not know.

    Shardy warns about such an op only once per process, so its warnings
    cannot say this reliably; instead ``sdy-populate-op-sharding-rules`` is
    run and the ops left without an ``sdy.sharding_rule`` are collected.
    """
    from jaxlib.mlir import passmanager

    with make_context() as context:
        module = parse_module(text, "<annotated>", context)
        passmanager.PassManager.parse(
            "builtin.module(func.func(sdy-populate-op-sharding-rules))").run(module)
        found = set()

        def visit(op):
            if "sdy.sharding_rule" not in op.attributes and op.name not in _SHARDY_WITHOUT_RULES:
                found.add(op.name)
            return ir.WalkResult.ADVANCE

        module.walk(visit)
    return found


def classify(ours: OpRecord, theirs: OpRecord, no_rule_spmd: set[str],
             no_rule_shardy: set[str]) -> str:
    """Why `ours` and `theirs` (the same op) differ; the first reason that applies."""
    if ours.hlo is None:
        return NOT_ANNOTATED
    partial = [s for s in ours.shardings if s is not None and s.unreduced]
    if partial:
        if all(same(summed(a), b) for a, b in zip(ours.shardings, theirs.shardings)):
            return PARTIAL_ALL_REDUCE
        if all(same_once_reduced(a, b) for a, b in zip(ours.shardings, theirs.shardings)):
            return PARTIAL_REDUCE_SCATTER
        return PARTIAL_OTHER
    if ours.name in no_rule_spmd:
        return NO_RULE_SPMD
    if ours.name in no_rule_shardy:
        return NO_RULE_SHARDY
    return CHOICE


def compare(workload: Workload, ours: Program, theirs: Program) -> Comparison:
    a, b = ours.compared_ops(), theirs.compared_ops()
    matcher = difflib.SequenceMatcher(None, [op.key for op in a], [op.key for op in b],
                                      autojunk=False)
    pairs, unaligned = [], []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            pairs.extend(zip(a[i1:i2], b[j1:j2]))
        else:
            unaligned.append((tag, a[i1:i2], b[j1:j2]))
    no_rule_spmd, no_rule_shardy = ours.no_rule, theirs.no_rule
    agree, disagreements = 0, []
    for x, y in pairs:
        if layout(x.hlo) == layout(y.hlo):
            agree += 1
        else:
            disagreements.append(Disagreement(classify(x, y, no_rule_spmd, no_rule_shardy), x, y))
    return Comparison(workload, ours, theirs, pairs, unaligned, agree, disagreements)


def _propagate(annotated: str, engine: str) -> Program:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        text = ss.propagate(annotated, engine=engine)
    return read_program(text, [str(w.message) for w in seen])


@functools.lru_cache(maxsize=None)
def comparison(name: str) -> Comparison:
    workload = next(w for w in WORKLOADS if w.name == name)
    annotated = workload.annotated()
    ours, theirs = _propagate(annotated, "spmd"), _propagate(annotated, "shardy")
    ours.no_rule = spmd_ruleless_ops(ours.warnings)
    theirs.no_rule = shardy_ruleless_ops(annotated)
    return compare(workload, ours, theirs)


# ------------------------------------------------------------------- tests

NAMES = [w.name for w in WORKLOADS]


@pytest.mark.parametrize("name", NAMES)
def test_both_engines_see_the_same_program(name):
    result = comparison(name)
    print("\n" + result.summary())
    assert result.ours.functions == result.theirs.functions
    assert not result.unaligned, [
        (tag, [o.name for o in x], [o.name for o in y]) for tag, x, y in result.unaligned]
    assert len(result.pairs) == len(result.ours.compared_ops()) > 10
    # Every op of the shardy engine's output is annotated (the round trip fills replicated in).
    assert all(op.hlo is not None for op in result.theirs.ops if op.types and not op.combiner)
    assert result.theirs.mesh == result.ours.mesh


@pytest.mark.parametrize("name", NAMES)
def test_function_results_agree(name):
    result = comparison(name)
    assert len(result.ours.results) == len(result.theirs.results)
    for ours, theirs in zip(result.ours.results, result.theirs.results):
        assert (ours.function, ours.index, ours.name) == (
            theirs.function, theirs.index, theirs.name)
        assert layout(ours.hlo) == layout(theirs.hlo), (ours.function, ours.name)


def _gradients(program: Program) -> dict[str, OpRecord]:
    """result[0][...] = param - lr * grad: the op producing `grad`, per parameter."""
    found = {}
    for result in program.results:
        if result.function != "main" or not (result.name or "").startswith("result[0]"):
            continue
        update = program.ops[program.through_reshards(result.producer)]
        assert update.name == "stablehlo.subtract", update
        scaled = program.ops[program.through_reshards(update.operands[1])]
        assert scaled.name == "stablehlo.multiply", scaled
        grads = [i for i in scaled.operands if not program.ops[i].constant]
        assert len(grads) == 1, scaled
        found[result.name] = program.ops[program.through_reshards(grads[0])]
    return found


@pytest.mark.parametrize("name", [w.name for w in WORKLOADS if w.train_step])
def test_parameter_gradients_agree(name):
    result = comparison(name)
    ours, theirs = _gradients(result.ours), _gradients(result.theirs)
    assert ours.keys() == theirs.keys() and len(ours) >= 4
    for param, grad in ours.items():
        (mine,), (shardy,) = grad.shardings, theirs[param].shardings
        assert mine is not None and shardy is not None, param
        # Shardy never keeps a partial sum; the spmd engine may (the gradient of
        # a weight is a sum over the batch), and once it is summed the gradient
        # must be laid out as Shardy lays it out, up to Shardy scattering the
        # sum over a dimension (reduce-scatter) instead of replicating it.
        assert not shardy.unreduced
        assert same_once_reduced(mine, shardy), (param, str(mine), str(shardy))
        # A parameter's gradient is summed over the batch: never batch-sharded.
        assert "data" not in {a for axes in shardy.dim_axes for a in axes}, param


def _batch_sharded(side: list[OpRecord], batch: int, skip: set[str]) -> dict[int, tuple]:
    """Aligned position -> the axes splitting the batch dimension, for activations."""
    marked = {}
    for position, op in enumerate(side):
        if op.name in skip:
            continue
        for shape, sharding in zip(op.shapes, op.shardings):
            if shape and len(shape) >= 2 and shape[0] == batch and sharding is not None \
                    and sharding.dim_axes[0]:
                marked[position] = sharding.dim_axes[0]
    return marked


@pytest.mark.parametrize("name", NAMES)
def test_batch_sharded_activations_agree(name):
    """Every activation one engine splits over the batch, the other splits the same way.

    Ops either engine has no rule for are left out: a value produced by an op
    Shardy does not know is replicated in Shardy's answer (``chlo.square`` in
    jaxlib 0.10.2), which is a gap in coverage, not a different plan.
    """
    result = comparison(name)
    batch = result.workload.batch
    skip = result.ours.no_rule | result.theirs.no_rule
    ours = _batch_sharded([x for x, _ in result.pairs], batch, skip)
    theirs = _batch_sharded([y for _, y in result.pairs], batch, skip)
    assert len(ours) >= 5, "too few batch-sharded activations found"
    differ = {p: (ours.get(p), theirs.get(p)) for p in set(ours) | set(theirs)
              if ours.get(p) != theirs.get(p)}
    assert not differ, [(result.pairs[p][0].name, result.pairs[p][0].location, d)
                        for p, d in sorted(differ.items())]
    assert set(ours.values()) == {("data",)}


@pytest.mark.parametrize("name", NAMES)
def test_partials_are_where_shardy_reduces(name):
    """The spmd engine's Partial values are the only disagreement on reductions:
    summed, each is what Shardy has, or Shardy reduce-scatters onto the same axis."""
    result = comparison(name)
    assert not any(s is not None and s.unreduced for op in result.theirs.ops for s in op.shardings)
    categories = result.by_category()
    assert PARTIAL_OTHER not in categories, [
        (d.ours.name, d.ours.location, str(d.ours.hlo), str(d.theirs.hlo))
        for d in categories[PARTIAL_OTHER]]


# ------------------------------------------------------- the engine itself

SMALL = """
module {
  func.func @main(%x: tensor<8x16xf32> {mhlo.sharding = "{devices=[4,1,2]<=[8] last_tile_dim_replicate}"},
                  %w: tensor<16x32xf32> {mhlo.sharding = "{devices=[1,2,4]<=[4,2]T(1,0) last_tile_dim_replicate}"})
      -> tensor<8x32xf32> {
    %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
    %1 = stablehlo.custom_call @Sharding(%0) {mhlo.sharding = "{devices=[4,2]<=[8]}"} : (tensor<8x32xf32>) -> tensor<8x32xf32>
    %2 = stablehlo.tanh %1 : tensor<8x32xf32>
    %c = stablehlo.constant dense<1.0> : tensor<f32>
    %3 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<8x32xf32>
    %4 = stablehlo.add %2, %3 : tensor<8x32xf32>
    return %4 : tensor<8x32xf32>
  }
}
"""


def test_round_trip_gives_mhlo_form():
    text = ss.propagate(SMALL, engine="shardy")
    # No Shardy op or attribute is left but the mesh attribute itself.
    assert "sdy." not in text.replace("spmd.mesh = #sdy.mesh", "")
    program = read_program(text, [])
    assert program.mesh == read_program(ss.propagate(SMALL, engine="spmd"), []).mesh
    assert program.mesh.size == 8
    by_name = {op.name: op for op in program.ops}
    assert all(op.hlo is not None for op in program.ops if op.types)
    constraint = by_name["stablehlo.custom_call"]
    assert constraint.reshard and str(constraint.hlo) == "{devices=[4,2]<=[8]}"
    # The constraint's layout flows on to the ops after it and to the result.
    assert layout(by_name["stablehlo.tanh"].hlo) == layout(constraint.hlo)
    assert layout(by_name["stablehlo.add"].hlo) == layout(constraint.hlo)
    assert layout(program.results[0].hlo) == layout(constraint.hlo)
    assert str(by_name["stablehlo.constant"].hlo) == "{replicated}"


def test_shardy_engine_matches_spmd_engine_on_a_small_module():
    theirs = read_program(ss.propagate(SMALL, engine="shardy"), [])
    ours = read_program(ss.propagate(SMALL, engine="spmd"), [])
    result = compare(WORKLOADS[0], ours, theirs)
    assert not result.unaligned and not result.disagreements, result.summary()


def test_shardy_warnings_are_located_warnings():
    # Two values in one sharding group with different shardings: Shardy warns
    # and relaxes the group.  The warning comes back located at the input.
    text = """
module {
  func.func @main(%a: tensor<8x8xf32> {mhlo.sharding = "{devices=[8,1]<=[8]}"},
                  %b: tensor<8x8xf32> {mhlo.sharding = "{devices=[1,8]<=[8]}"}) -> tensor<8x8xf32> {
    sdy.sharding_group %a group_id = 0 : tensor<8x8xf32>
    sdy.sharding_group %b group_id = 0 : tensor<8x8xf32>
    %0 = stablehlo.add %a, %b : tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}
"""
    with pytest.warns(ss.SpmdWarning, match=r"group\.mlir:\d+:\d+: warning: Shardy propagation: "
                      r"The initial operand shardings on the sharding groups"):
        ss.propagate(text, filename="group.mlir", engine="shardy")


def test_shardy_errors_are_located_diagnostics():
    # A sharding group whose values cross a manual computation's boundary:
    # Shardy's sharding-group import refuses it.  The error must come back as
    # an SpmdError pointing at the offending op, not as a traceback.
    text = """
sdy.mesh @mesh = <["a"=2, "b"=4]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}) -> tensor<8x8xf32> {
  %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{?}, {?}]>] out_shardings=[<@mesh, [{?}, {?}]>] manual_axes={} (%arg1: tensor<8x8xf32>) {
    %1 = stablehlo.add %arg1, %arg1 : tensor<8x8xf32>
    sdy.sharding_group %1 group_id = 7 : tensor<8x8xf32>
    sdy.return %1 : tensor<8x8xf32>
  } : (tensor<8x8xf32>) -> tensor<8x8xf32>
  sdy.sharding_group %0 group_id = 7 : tensor<8x8xf32>
  func.return %0 : tensor<8x8xf32>
}
"""
    with pytest.raises(SpmdError, match="cannot cross ManualComputationOp") as caught:
        ss.propagate(text, filename="cross.mlir", engine="shardy")
    assert caught.value.location == "cross.mlir:9:3"


def test_conversion_errors_are_located_diagnostics():
    # A manual axis has no place in a Shardy tensor sharding.
    text = """
module {
  func.func @main(%a: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,1,4]<=[8] last_tile_dims={manual}}"})
      -> tensor<8x4xf32> {
    %0 = stablehlo.negate %a : tensor<8x4xf32>
    return %0 : tensor<8x4xf32>
  }
}
"""
    with pytest.raises(SpmdError, match="manual") as caught:
        ss.propagate(text, filename="manual.mlir", engine="shardy")
    assert caught.value.location == "manual.mlir:3:19"


def test_pinned_ops_maximal_and_unknown_shardings():
    text = """
module attributes {spmd.mesh = #sdy.mesh<["x"=2, "y"=4]>} {
  func.func @main(%x: tensor<8x16xf32> {mhlo.sharding = "{devices=[2,1,4]<=[8] last_tile_dim_replicate}"},
                  %m: tensor<4xf32> {mhlo.sharding = "{maximal device=3}"})
      -> (tensor<8x16xf32>, tensor<4xf32>) {
    %0 = stablehlo.tanh %x {mhlo.sharding = "{devices=[2,4]<=[8]}"} : tensor<8x16xf32>
    %1 = stablehlo.negate %0 : tensor<8x16xf32>
    %2 = stablehlo.abs %m : tensor<4xf32>
    %3 = stablehlo.custom_call @Sharding(%1) {mhlo.sharding = "{unknown}"} : (tensor<8x16xf32>) -> tensor<8x16xf32>
    return %3, %2 : tensor<8x16xf32>, tensor<4xf32>
  }
}
"""
    program = read_program(ss.propagate(text, engine="shardy"), [])
    by_name = {op.name: op for op in program.ops}
    # An op that already carries a sharding keeps it (it is a pin for Shardy too),
    # and it flows on.
    assert str(by_name["stablehlo.tanh"].hlo) == "{devices=[2,4]<=[8]}"
    assert str(by_name["stablehlo.negate"].hlo) == "{devices=[2,4]<=[8]}"
    # {unknown} constrains nothing: the custom call is gone.
    assert "stablehlo.custom_call" not in by_name
    # A maximal argument survives the round trip (Shardy does not propagate it).
    with make_context() as context:
        module = parse_module(ss.propagate(text, engine="shardy"), "<out>", context)
        arguments = [v for v in function_values(functions(module)[0]) if v.kind == "argument"]
        assert str(_hlo(arguments[1].get(MHLO_SHARDING))) == "{maximal device=3}"


CALLER = """
module {
  func.func @caller(%x: tensor<8x8xf32> {mhlo.sharding = "{devices=[1,8]<=[8]}"}) -> tensor<8x8xf32> {
    %0 = func.call @square(%x) : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
  func.func private @square(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
    %0 = stablehlo.multiply %x, %x : tensor<8x8xf32>
    return %0 : tensor<8x8xf32>
  }
}
"""


def test_entry_not_named_main():
    # Shardy finds the entry by the name @main (and aborts the process when a
    # module with calls has none): a lone public function stands in for it,
    # and keeps its own name in the output.
    program = read_program(ss.propagate(CALLER, engine="shardy"), [])
    assert program.functions == ["caller", "square"]
    assert all(str(op.hlo) == "{devices=[1,8]<=[8]}" for op in program.ops
               if op.name in ("func.call", "stablehlo.multiply"))


def test_several_entries_without_main_are_refused():
    text = CALLER.replace("func.func private @square", "func.func @square")
    with pytest.raises(SpmdError, match="one entry function.*@caller, @square"):
        ss.propagate(text, filename="two.mlir", engine="shardy")
