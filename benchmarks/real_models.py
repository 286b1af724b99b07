"""Third-party models partitioned by this project and by XLA, side by side.

    pip install '.[bench]' && pip install --no-deps 'keras-hub==0.32.*'
    python3 benchmarks/real_models.py              # every program; writes results/real_models.md
    python3 benchmarks/real_models.py --only gpt2 llama --repeat 5   # a quick look, no report
    python3 benchmarks/real_models.py --only fsdp --dump-hlo /tmp/hlo  # also both optimized HLOs

The models are keras-hub's (GPT-2, Llama, Mixtral, BERT, ResNet), code
nobody here wrote, built from their config constructors with tiny sizes and
random weights (nothing is downloaded) on the JAX backend.  keras-hub is
installed without its dependencies because it requires tensorflow-text,
which only its tokenizers use; see the `bench` extra in pyproject.toml.

Each model gives two programs, plain JAX functions over the model's
parameter pytree (``params['transformer_layer_0/self_attention/query/kernel']``,
the keras variable paths) through keras' ``stateless_call``:

* forward: ``(params, state, batch) -> logits``, inference mode;
* step: ``(params, state, batch, labels) -> (params, state, loss)``: keras'
  sparse categorical cross-entropy on the task model's logits (plus the
  layers' own losses, Mixtral's load-balancing loss), its gradient by
  ``jax.value_and_grad`` and an SGD update, training mode (ResNet's batch
  norms use batch statistics and return updated moving statistics in
  ``state``; LMs have no state).

Each program is partitioned under the rule sets people use for it:
Megatron tensor parallelism (heads, MLP columns then rows, vocab-parallel
embeddings), FSDP (every large weight split over all devices on one dim),
2-D (FSDP over ``data`` times Megatron over ``model``), data parallelism
(weights replicated), spatial (ResNet images split over height and width)
and expert parallelism (Mixtral's expert banks split over ``expert``).
Rules are ``(regex, spec)`` pairs on the argument and result names; a short
spec replicates the trailing dims.

For each (model, rule set, program):

1. numerics against one device: ``ss.run(ss.partition(text, mesh, rules))``
   against ``ss.run_single_device(text)`` on the same inputs.  A mismatch is
   printed loudly, marked in the table, listed under the report's problems
   and counted in the summary; the program is still measured (step 2's own
   ours-against-XLA check is lifted for it, or it would stop there).  The
   rules spmd-annotate finds matching nothing are collected too: a rule that
   matches in no program of its rule set is listed as a problem (a typo, or
   a keras variable renamed);
2. benchmarks/compare_xla.py's `run_workload` on the same function, inputs
   and rules: ours against ``jax.jit`` with the same ``NamedSharding``s, in
   one run (collectives counted in both compiled HLOs by one counter, step
   time as the median of alternating runs, per-device memory from both
   memory analyses; see that script's docstring).  It compiles our program
   again: `run_workload` keeps its executable to itself.

A program that raises (the partitioner refusing it, say) is reported with
its error and the run goes on; the script exits 1 when any program failed or
mismatched.  Printed and written to benchmarks/results/real_models.md (the
whole run only): one table, the summary (the geometric mean of the
step-time ratios, how many programs move no more bytes, and use no more
memory, than XLA), the problems, and the programs moving more bytes than
XLA with each side's largest collectives.  The whole run takes 4 to 7
minutes on 2 busy cores, most of it XLA compiling each program three times
(ours twice, XLA's once).  On such a host these programs' times are mostly
dispatch and host-side collectives; bytes and memory are the figures that
carry over.
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "jax"   # before keras is imported; the programs are JAX

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
from typing import Any, Callable  # noqa: E402

# compare_xla sets XLA_FLAGS (8 host devices) and JAX_PLATFORMS before it imports jax.
from compare_xla import DEVICES, REPORT_DIR, ROOT, Workload, run_info, run_workload  # noqa: E402
from stablehlo_spmd.collective_bytes import fmt_bytes  # noqa: E402
from report import (  # noqa: E402
    UNMATCHED, ProgramResult, failure_lines, measured_cells, ratio, ratio_value)

import jax  # noqa: E402
import numpy as np  # noqa: E402

REPORT = REPORT_DIR / "real_models.md"
LEARNING_RATE = 0.1
SEED = 0
BATCH, SEQUENCE, VOCABULARY, HIDDEN = 8, 32, 512, 64


# ------------------------------------------------------------------ models (keras-hub)


@dataclasses.dataclass(frozen=True)
class Model:
    name: str
    config: str                                  # what the report says about its size
    build: Callable[[], Any]                     # () -> the keras-hub task model
    batch: Callable[[np.random.Generator], Any]  # the model's inputs
    classes: int                                 # labels are drawn below this
    label_shape: tuple[int, ...]


def _text_batch(rng, segments: bool = False) -> dict:
    batch = {"token_ids": rng.integers(0, VOCABULARY, (BATCH, SEQUENCE), dtype=np.int32),
             "padding_mask": np.ones((BATCH, SEQUENCE), np.int32)}
    if segments:
        batch["segment_ids"] = rng.integers(0, 2, (BATCH, SEQUENCE), dtype=np.int32)
    return batch


def _models() -> list[Model]:
    import keras_hub
    m = keras_hub.models

    def gpt2():
        backbone = m.GPT2Backbone(vocabulary_size=VOCABULARY, num_layers=2, num_heads=4,
                                  hidden_dim=HIDDEN, intermediate_dim=4 * HIDDEN, dropout=0.0,
                                  max_sequence_length=SEQUENCE)
        return m.GPT2CausalLM(backbone=backbone, preprocessor=None)

    def llama():
        backbone = m.LlamaBackbone(vocabulary_size=VOCABULARY, num_layers=2, num_query_heads=4,
                                   num_key_value_heads=2, hidden_dim=HIDDEN,
                                   intermediate_dim=2 * HIDDEN)
        return m.LlamaCausalLM(backbone=backbone, preprocessor=None)

    def mixtral():
        backbone = m.MixtralBackbone(vocabulary_size=VOCABULARY, num_layers=2, num_query_heads=4,
                                     num_key_value_heads=2, hidden_dim=HIDDEN,
                                     intermediate_dim=2 * HIDDEN, num_experts=8, top_k=2,
                                     sliding_window=SEQUENCE)
        return m.MixtralCausalLM(backbone=backbone, preprocessor=None)

    def bert():
        backbone = m.BertBackbone(vocabulary_size=VOCABULARY, num_layers=2, num_heads=4,
                                  hidden_dim=HIDDEN, intermediate_dim=2 * HIDDEN, dropout=0.0,
                                  max_sequence_length=SEQUENCE)
        return m.BertTextClassifier(backbone=backbone, num_classes=8, preprocessor=None,
                                    dropout=0.0)

    def resnet():
        # keras-hub's basic blocks need 64 filters in the stem and first stack.
        backbone = m.ResNetBackbone(input_conv_filters=[64], input_conv_kernel_sizes=[3],
                                    stackwise_num_filters=[64, 64], stackwise_num_blocks=[1, 1],
                                    stackwise_num_strides=[1, 2], block_type="basic_block",
                                    image_shape=(32, 32, 3))
        return m.ResNetImageClassifier(backbone=backbone, num_classes=8, preprocessor=None)

    text = (f"2 layers, hidden {HIDDEN}, 4 heads, vocab {VOCABULARY}, "
            f"batch {BATCH} x {SEQUENCE} tokens")
    return [
        Model("gpt2", f"GPT2CausalLM: {text}, MLP {4 * HIDDEN}", gpt2, _text_batch,
              VOCABULARY, (BATCH, SEQUENCE)),
        Model("llama", f"LlamaCausalLM: {text} (2 kv heads), MLP {2 * HIDDEN}", llama,
              _text_batch, VOCABULARY, (BATCH, SEQUENCE)),
        Model("mixtral", f"MixtralCausalLM: {text} (2 kv heads), 8 experts of MLP {2 * HIDDEN}, "
              "top 2", mixtral, _text_batch, VOCABULARY, (BATCH, SEQUENCE)),
        Model("bert", f"BertTextClassifier: {text}, MLP {2 * HIDDEN}, 8 classes", bert,
              lambda rng: _text_batch(rng, segments=True), 8, (BATCH,)),
        Model("resnet", f"ResNetImageClassifier: basic blocks, stem 64 + stacks [64, 64] "
              f"(strides 1, 2), {BATCH} images 32x32x3, 8 classes", resnet,
              lambda rng: rng.standard_normal((BATCH, 32, 32, 3)).astype(np.float32), 8,
              (BATCH,)),
    ]


# ------------------------------------------------------------------ programs


def _programs(model) -> dict[str, Callable]:
    """forward and step as plain JAX functions over dicts keyed by keras variable paths."""
    import keras

    trainable = [v.path for v in model.trainable_variables]
    non_trainable = [v.path for v in model.non_trainable_variables]
    cross_entropy = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def apply(params, state, batch, training):
        logits, new_state, losses = model.stateless_call(
            [params[path] for path in trainable], [state[path] for path in non_trainable],
            batch, training=training, return_losses=True)
        return logits, dict(zip(non_trainable, new_state)), losses

    def forward(params, state, batch):
        return apply(params, state, batch, training=False)[0]

    def step(params, state, batch, labels):
        def loss_fn(params):
            logits, new_state, losses = apply(params, state, batch, training=True)
            return cross_entropy(labels, logits) + sum(losses), new_state

        (loss, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        new_params = jax.tree_util.tree_map(lambda p, g: p - LEARNING_RATE * g, params, grads)
        return new_params, new_state, loss

    return {"forward": forward, "step": step}


def _arguments(model: Model, keras_model, program: str, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    params = {v.path: np.asarray(v.value) for v in keras_model.trainable_variables}
    state = {v.path: np.asarray(v.value) for v in keras_model.non_trainable_variables}
    batch = model.batch(rng)
    if program == "forward":
        return params, state, batch
    labels = rng.integers(0, model.classes, model.label_shape, dtype=np.int32)
    return params, state, batch, labels


# ------------------------------------------------------------------ rule sets
# Argument names are pytree paths: params['<keras variable path>'], state[...],
# batch['token_ids'] (or batch, for images), labels; results are result (forward's
# logits) and result[0]['<path>'] (the updated params), result[1][...], result[2].
# A weight rule matches the argument and the updated weight alike (re.search).

QKV = r"/(query|key|value)/kernel'\]$"                  # (hidden, heads, head_dim)
QKV_BIAS = r"/(query|key|value)/bias'\]$"               # (heads, head_dim)
ATTENTION_OUT = r"/attention_output/kernel'\]$"         # (heads, head_dim, hidden)
MLP_IN = r"/feedforward_(intermediate|gate)_dense/kernel'\]$"   # (hidden, mlp)
MLP_IN_BIAS = r"/feedforward_intermediate_dense/bias'\]$"       # (mlp,)
MLP_OUT = r"/feedforward_output_dense/kernel'\]$"       # (mlp, hidden)
EMBEDDING = r"token_embedding/embeddings'\]$"           # (vocab, hidden)
REVERSE_EMBEDDING = r"token_embedding/reverse_embeddings'\]$"   # (hidden, vocab), Llama's head
POSITIONS = r"position_embedding/embeddings'\]$"        # (sequence, hidden)
EXPERTS = r"/experts/expert_feedforward_\w+'\]$"        # (experts, ., .)
BATCH_NAMES = r"^(batch|labels|result$)"                # inputs, labels, forward's logits


def _batch_rules(axes) -> list:
    return [(BATCH_NAMES, (axes,))]


def megatron() -> list:
    """Megatron-LM: heads and MLP columns, then rows, over `model`; vocab-parallel embedding."""
    return [(QKV, (None, "model")), (QKV_BIAS, ("model",)), (ATTENTION_OUT, ("model",)),
            (MLP_IN, (None, "model")), (MLP_IN_BIAS, ("model",)), (MLP_OUT, ("model",)),
            (EMBEDDING, ("model",)), (REVERSE_EMBEDDING, (None, "model"))] + _batch_rules("data")


def fsdp() -> list:
    """ZeRO-3 / FSDP: every matrix split over all devices on one dim that divides; the
    small vectors (biases, norms) replicated; the batch over the same axis."""
    return [(QKV, ("data",)), (ATTENTION_OUT, (None, None, "data")), (MLP_IN, ("data",)),
            (MLP_OUT, ("data",)), (EMBEDDING, ("data",)), (REVERSE_EMBEDDING, ("data",)),
            (POSITIONS, ("data",)), (EXPERTS, (None, "data"))] + _batch_rules("data")


def two_d() -> list:
    """Megatron over `model` times FSDP over `data` on each weight's other dim."""
    return [(QKV, ("data", "model")), (QKV_BIAS, ("model",)),
            (ATTENTION_OUT, ("model", None, "data")), (MLP_IN, ("data", "model")),
            (MLP_IN_BIAS, ("model",)), (MLP_OUT, ("model", "data")),
            (EMBEDDING, ("model", "data")), (REVERSE_EMBEDDING, ("data", "model")),
            (POSITIONS, (None, "data"))] + _batch_rules("data")


def data_parallel() -> list:
    return [(r"^(params|state|result\[[01]\])", ())] + _batch_rules("data")


def spatial() -> list:
    """Images split over height and width as well as batch; weights replicated."""
    return [(r"^batch$", ("data", "h", "w")), (r"^(labels|result$)", ("data",))]


def expert() -> list:
    """GShard: expert banks over `expert`, tokens over every device; the rest replicated."""
    return [(EXPERTS, ("expert",))] + _batch_rules(("data", "expert"))


RULE_SETS = {   # name -> (mesh, rules, which models use it)
    "megatron": ("data=4,model=2", megatron, ("gpt2", "llama", "bert")),
    "fsdp": ("data=8", fsdp, ("gpt2", "llama", "mixtral", "bert")),
    "2d": ("data=4,model=2", two_d, ("gpt2", "llama")),
    "dp": ("data=8", data_parallel, ("gpt2", "llama", "bert", "resnet")),
    "spatial": ("data=2,h=2,w=2", spatial, ("resnet",)),
    "expert": ("data=2,expert=4", expert, ("mixtral",)),
}


# ------------------------------------------------------------------ measuring


@dataclasses.dataclass
class Result(ProgramResult):
    one_device_error: float | None = None
    mismatch: str = ""              # numerics against one device, when they differ


RTOL, ATOL = 1e-4, 1e-4


def _against_one_device(text: str, mesh: str, rules: list, leaves: list, names: list[str],
                        result: Result) -> None:
    """Max |partitioned - single device| over every output, and which outputs (`names`)
    are not allclose; also the rules spmd-annotate found matching nothing."""
    import stablehlo_spmd as ss
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = ss.run(ss.partition(text, ss.Mesh.from_string(mesh), rules), leaves)
    result.unmatched_rules = {found.group(0) for w in caught
                              if (found := re.search(f"rule .* {UNMATCHED}", str(w.message)))}
    worst, problems = compare_outputs(names, got, ss.run_single_device(text, leaves), RTOL, ATOL)
    result.one_device_error, result.mismatch = worst, ", ".join(problems)


def compare_outputs(names: list[str], got: list, want: list, rtol: float,
                    atol: float) -> tuple[float, list[str]]:
    """(max |got - want| over every output, the outputs (`names`) not allclose,
    with their max |diff|; a count that differs is one more problem)."""
    worst, problems = 0.0, []
    for name, a, b in zip(names, got, want):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        error = float(np.max(np.abs(a - b))) if a.size and a.shape == b.shape else math.inf
        worst = max(worst, error)
        if a.shape != b.shape or not np.allclose(a, b, rtol=rtol, atol=atol):
            problems.append(f"{name} (max |diff| {error:.3g})")
    if len(got) != len(want):
        problems.append(f"{len(got)} results, {len(want)} on one device")
    return worst, problems


def measure(model: Model, keras_model, rule_set: str, program: str, repeat: int,
            seed: int, dump_hlo: str = "") -> Result:
    import stablehlo_spmd as ss

    mesh, make_rules, _ = RULE_SETS[rule_set]
    result = Result(model.name, rule_set, program, mesh)
    fn = _programs(keras_model)[program]
    args = _arguments(model, keras_model, program, seed)
    rules = make_rules()
    try:
        text = ss.export(fn, *args)
        leaves = jax.tree_util.tree_leaves(args)
        names = ["result" + jax.tree_util.keystr(path) for path, _ in
                 jax.tree_util.tree_flatten_with_path(jax.eval_shape(fn, *args))[0]]
        _against_one_device(text, mesh, rules, leaves, names, result)
        if result.mismatch:
            print(f"!!! NUMERICS MISMATCH: {result.name}: {result.mismatch} differ from the "
                  "single-device run", file=sys.stderr, flush=True)
        # run_workload checks ours against XLA too; a program already found wrong against
        # one device is still measured (and stays marked), so its tolerance is lifted there.
        atol = 1e30 if result.mismatch else ATOL   # (numpy warns on an infinite one)
        workload = Workload(result.name.replace(" ", "-"), lambda: (fn, args), mesh, rules,
                            rtol=RTOL, atol=atol)
        result.row = run_workload(workload, repeat, "ours", dump_hlo)
    except Exception as error:  # noqa: BLE001  (one program's failure is reported, not fatal)
        result.failure = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
        print(f"!!! FAILED: {result.name}: {result.failure}", file=sys.stderr, flush=True)
        traceback.print_exc(limit=3, file=sys.stderr)
    return result


# ------------------------------------------------------------------ report

HEADER = ("model", "program", "rules", "mesh", "coll ours", "coll XLA", "bytes ours",
          "bytes XLA", "bytes o/x", "step ms ours", "step ms XLA", "step o/x", "memory ours",
          "memory XLA", "memory o/x", "max err vs 1 device")


def _cells(result: Result) -> tuple[str, ...]:
    row = result.row
    base = (result.model, result.program, result.rules, result.mesh)
    error = "n/a" if result.one_device_error is None else f"{result.one_device_error:.1e}"
    if result.mismatch:
        error += " MISMATCH"
    if row is None:
        return base + ("FAILED",) + ("",) * (len(HEADER) - len(base) - 2) + (error,)
    return base + measured_cells(row) + (error,)


def problems(results: list[Result]) -> list[str]:
    """One line per program that failed or whose numbers differ from one device's, and one
    per rule that matched nothing in any program of its rule set (a typo, or a renamed
    keras variable)."""
    lines = []
    for rule_set, (_, _, used_by) in RULE_SETS.items():
        runs = [r for r in results if r.rules == rule_set and r.unmatched_rules is not None]
        if {r.model for r in runs} != set(used_by):
            continue   # (a partial run: --only, or a model whose programs all failed)
        for warning in sorted(set.intersection(*(r.unmatched_rules for r in runs))):
            lines.append(f"rule set {rule_set}: {warning} in any program")
    lines += [f"{r.name}: NUMERICS differ from the single-device run: {r.mismatch}"
              for r in results if r.mismatch]
    return lines + failure_lines(results)


def losers(results: list[Result], shown: int = 4) -> list[str]:
    """Programs moving more bytes than XLA, worst first, each with both sides' largest
    collectives: where to start looking for the cause."""
    rows = sorted((r for r in results if r.row is not None
                   and r.row.ours_bytes > r.row.xla_bytes),
                  key=lambda r: -(ratio_value(r.row.ours_bytes, r.row.xla_bytes) or math.inf))
    lines = []
    for r in rows:
        lines.append(f"{r.name}: {fmt_bytes(r.row.ours_bytes)} vs {fmt_bytes(r.row.xla_bytes)} "
                     f"({ratio(r.row.ours_bytes, r.row.xla_bytes)}x)")
        for side, found in (("ours", r.row.ours), ("XLA ", r.row.xla)):
            for c in sorted(found, key=lambda c: -c.bytes)[:shown]:
                lines.append(f"    {side}: {c.describe()}")
    return lines


@dataclasses.dataclass(frozen=True)
class Summary:
    measured: int
    failed: int
    mismatched: int
    step_geomean: float | None
    bytes_at_most_xla: int
    memory_at_most_xla: int
    bytes_total_ratio: float | None

    def describe(self) -> str:
        geomean = "n/a" if self.step_geomean is None else f"{self.step_geomean:.2f}"
        total = "n/a" if self.bytes_total_ratio is None else f"{self.bytes_total_ratio:.2f}"
        return (f"{self.measured} programs measured ({self.failed} failed, {self.mismatched} "
                f"mismatched the single-device run): step time ours/XLA geometric mean "
                f"{geomean}; bytes <= XLA on {self.bytes_at_most_xla}/{self.measured} "
                f"(all programs' bytes together {total}x XLA's); memory <= XLA on "
                f"{self.memory_at_most_xla}/{self.measured}")


def summarize(results: list[Result]) -> Summary:
    rows = [r.row for r in results if r.row is not None]
    steps = [ratio_value(r.ours_ms, r.xla_ms) for r in rows]
    steps = [s for s in steps if s]
    return Summary(
        measured=len(rows), failed=sum(r.row is None for r in results),
        mismatched=sum(bool(r.mismatch) for r in results),
        step_geomean=math.exp(sum(map(math.log, steps)) / len(steps)) if steps else None,
        bytes_at_most_xla=sum(r.ours_bytes <= r.xla_bytes for r in rows),
        memory_at_most_xla=sum(r.ours_memory is not None and r.xla_memory is not None
                               and r.ours_memory.total <= r.xla_memory.total for r in rows),
        bytes_total_ratio=ratio_value(sum(r.ours_bytes for r in rows),
                                      sum(r.xla_bytes for r in rows)))


def text_table(results: list[Result]) -> str:
    table = [_cells(r) for r in results]
    widths = [max(len(str(row[i])) for row in table + [HEADER]) for i in range(len(HEADER))]
    lines = [" | ".join(h.ljust(w) if i < 6 else h.rjust(w)
                        for i, (h, w) in enumerate(zip(HEADER, widths)))]
    lines.append("-" * len(lines[0]))
    lines += [" | ".join(str(c).ljust(w) if i < 6 else str(c).rjust(w)
                         for i, (c, w) in enumerate(zip(row, widths))) for row in table]
    return "\n".join(lines)


def markdown(results: list[Result], models: list[Model], info, summary: Summary) -> str:
    lines = [
        "# Real models: stablehlo-spmd against XLA's partitioner",
        "",
        f"- date: {info.date}",
        f"- jax {info.jax_version}, jaxlib {info.jaxlib_version}, keras "
        f"{_version('keras')}, keras-hub {_version('keras_hub')} (JAX backend)",
        f"- devices: {info.devices} ({info.platform})",
        f"- command: `{info.command}`",
        *([f"- revision: {info.revision}"] if info.revision else []),
        f"- timing: median of {info.repeat} alternating runs per side",
        "",
        "Models (keras-hub task models from their config constructors, random weights):",
        "",
        *[f"- {m.name}: {m.config}" for m in models],
        "",
        "Programs: `forward` (inference-mode logits) and `step` (cross-entropy, its gradient "
        f"and an SGD update, learning rate {LEARNING_RATE}, training mode), both plain JAX "
        "functions over the parameter pytree through keras' `stateless_call`. Rule sets: "
        "megatron (heads, MLP columns/rows and vocab over `model`, batch over `data`), "
        "fsdp (each matrix split 8 ways on one dim, batch over the same axis), 2d (fsdp over "
        "`data` times megatron over `model`), dp (weights replicated), spatial (images over "
        "batch, height and width), expert (Mixtral's expert banks over `expert`, tokens over "
        "every device); the regexes are in benchmarks/real_models.py.",
        "",
        f"**Summary:** {summary.describe()}.",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join("---" if i < 6 else "---:" for i in range(len(HEADER))) + "|",
        *["| " + " | ".join(_cells(r)) + " |" for r in results],
        "",
        "Ours is `ss.partition` compiled by `stablehlo_spmd.runtime.compile`; XLA's is "
        "`jax.jit` with the same `NamedSharding`s, measured by benchmarks/compare_xla.py's "
        "`run_workload`. Collectives (AR all-reduce, AG all-gather, RS reduce-scatter, A2A "
        "all-to-all, CP collective-permute) are counted in each compiled program's HLO; bytes "
        "are per device by DESIGN.md's cost table; o/x is ours / XLA. step is each side's "
        "public call on arrays already on the devices; memory the per-device total of each "
        "compiled program's memory analysis. `max err vs 1 device` is the largest |ours - "
        "single-device run| over every output (allclose at rtol "
        f"{RTOL:g}, atol {ATOL:g}, or marked MISMATCH).",
    ]
    found = problems(results)
    if found:
        lines += ["", "## Failures and numerics mismatches", "", *[f"- {line}" for line in found]]
    lines += ["", "## Programs moving more bytes than XLA", "",
              "Worst first, with each side's largest collectives (per-device operands, group "
              "size, bytes):", "", "```", *(losers(results) or ["none"]), "```"]
    return "\n".join(lines) + "\n"


def _version(module: str) -> str:
    try:
        return __import__(module).__version__
    except ImportError:
        return "not installed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", default=(),
                        help="models or rule sets to run (e.g. gpt2 fsdp); the report is "
                             "written only when everything runs")
    parser.add_argument("--repeat", type=int, default=10,
                        help="timed runs of each executable per program (default 10)")
    parser.add_argument("--dump-hlo", metavar="DIR", default="",
                        help="write both optimized HLO texts of each program into DIR")
    options = parser.parse_args()
    try:
        import keras_hub  # noqa: F401
    except ImportError as error:
        raise SystemExit(f"real_models.py needs keras-hub ({error}): pip install '.[bench]' "
                         "&& pip install --no-deps 'keras-hub==0.32.*'") from None
    if len(jax.devices()) < DEVICES:
        raise SystemExit(f"need {DEVICES} devices; XLA_FLAGS was set too late")
    jax.block_until_ready(jax.jit(lambda x: x + 1)(1.0))   # the backend's one-time start-up

    import keras

    models = _models()
    unknown = set(options.only) - {m.name for m in models} - set(RULE_SETS)
    if unknown:
        parser.error(f"--only: unknown {', '.join(sorted(unknown))} (models: "
                     f"{', '.join(m.name for m in models)}; rule sets: {', '.join(RULE_SETS)})")
    results = []
    for model in models:
        keras.utils.set_random_seed(SEED)
        keras_model = None
        for rule_set, (_, _, used_by) in RULE_SETS.items():
            if model.name not in used_by:
                continue
            if options.only and model.name not in options.only and rule_set not in options.only:
                continue
            if keras_model is None:
                keras_model = model.build()
            for program in ("forward", "step"):
                start = time.perf_counter()
                results.append(measure(model, keras_model, rule_set, program, options.repeat,
                                       SEED, options.dump_hlo))
                print(f"  {results[-1].name}: {time.perf_counter() - start:.1f} s",
                      file=sys.stderr, flush=True)
    info = run_info(options.repeat, "ours")
    summary = summarize(results)
    print(text_table(results))
    print()
    print("summary: " + summary.describe())
    for line in problems(results):
        print("!!! " + line)
    print()
    print("programs moving more bytes than XLA, worst first, with each side's largest "
          "collectives:")
    print("\n".join(losers(results) or ["  none"]))
    if not options.only:
        REPORT.write_text(markdown(results, models, info, summary))
        print(f"wrote {REPORT.relative_to(ROOT)}", file=sys.stderr)
    if summary.failed or summary.mismatched:
        sys.exit(1)


if __name__ == "__main__":
    main()
