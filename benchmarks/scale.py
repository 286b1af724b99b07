"""Real widths, real device counts: ours against XLA's partitioner, compiled only.

    pip install '.[bench]' && pip install --no-deps 'keras-hub==0.32.*'
    python3 benchmarks/scale.py                      # every cell; writes results/scale.md/.png
    python3 benchmarks/scale.py --only llama3-8b-L2 --no-auto   # a quick look, no report
    python3 benchmarks/scale.py --layers 2 --write   # the 2-layer cells, report written anyway
    python3 benchmarks/scale.py --json run.json      # ... and later, without compiling again:
    python3 benchmarks/scale.py --from-json run.json --write
    python3 benchmarks/scale.py --sample             # small widths, 16 devices, run for numerics

benchmarks/real_models.py checks keras-hub models at toy widths on 8
devices, where every collective is small and a wasteful plan still fits.
Whether a plan is usable shows only at the sizes people train: Llama-3-8B
and -70B, Mixtral 8x7B and ViT-L/16 at their real widths, on 64, 256 and
1024 devices.  Nothing of that size can be allocated here, and nothing needs
to be: Keras builds a model inside ``keras.StatelessScope(
initialize_variables=False)`` with each variable's path, shape and dtype
only, the programs are traced on ``jax.ShapeDtypeStruct``s, and both sides
are compiled for host devices without running (DESIGN.md, "Real scale").

Each cell is (model, depth, rule set, mesh, program):

* models (keras-hub backbones, bf16 parameters): Llama-3-8B (vocab 128256,
  hidden 4096, 32/8 heads, FFN 14336, 32 layers), Llama-3-70B (hidden 8192,
  64/8 heads, FFN 28672, 80 layers), Mixtral 8x7B (vocab 32000, hidden 4096,
  32/8 heads, 8 experts of FFN 14336, top 2, 32 layers; keras-hub computes
  every expert on every token as one dense einsum, so there is no
  all-to-all to count), ViT-L/16 (224x224 images, hidden 1024, 16 heads,
  MLP 4096, 24 layers, 1000 classes); at 2 layers and at full depth;
* programs: ``sgd``, next-token cross-entropy on f32 logits (the untied head
  ``token_embedding/reverse_embeddings``, or a ``classifier/kernel`` on ViT's
  class token, multiplied with ``preferred_element_type=float32``), its
  gradient and an SGD update; ``adamw``, the same with AdamW written out
  (f32 moments m and v as arguments and results, bias correction, decoupled
  weight decay on matrices), since optimizer state decides memory;
* rule sets: ``2d`` (MaxText: every weight FSDP-split on ``data`` along its
  hidden dim, q/k/v/gate/up column- and out/down row-parallel on ``model``,
  vocabulary on ``model``, batch on ``data``), ``megatron`` (weights on
  ``model`` only, batch on ``data``), ``fsdp`` (every matrix split over all
  devices on one dim, batch over all devices), ``3d`` (``2d`` with FSDP on
  its own ``fsdp`` axis and the batch on ``data`` x ``fsdp``), ``expert``
  (Mixtral: expert banks split on ``model`` and FSDP on ``data``, attention
  as ``2d``); the regexes are benchmarks/real_models.py's where they fit;
* batch: 8 sequences of 2048 tokens per ``data`` shard (one per device where
  ``model`` is 8 wide; ``fsdp`` splits the batch over every device, one
  sequence each), 32 images per shard for ViT;
* forms (`FORMS`; Llama-3-8B, 2-D, Megatron and FSDP on 64 devices): the
  layers as keras-hub's backbone calls them (no suffix), each under
  jax.checkpoint through Keras' own ``RematScope`` (``remat``, at 2 layers
  and full depth), or as MaxText writes them at full depth: the layers'
  weights stacked on a leading dim, the decoder a ``jax.lax.scan`` calling
  keras-hub's own decoder layer, the body under no remat (``scan``),
  ``jax.checkpoint`` saving nothing (``scan-full``, MaxText's default) or
  saving the projections (``scan-minimal``).  A loop body's collectives
  count once per layer (collective_bytes counts by trip count), and the
  bound of a form that recomputes (``remat``, ``scan-full``) adds the
  recomputed forward's tensor-parallel sums.

For each cell, in a subprocess of its own (XLA reads the host device count
once, when jax starts; ``--jobs`` runs several at once):

1. ours: ``ss.partition`` (timed), its collectives counted as emitted
   (`collective_bytes.emitted_collectives`), then
   ``stablehlo_spmd.runtime.compile`` (timed) and its compiled HLO counted
   by `collective_bytes.collectives`, memory by XLA's memory analysis
   (arguments + outputs + temporaries, per device);
2. XLA: ``jax.jit`` with the ``NamedSharding``s the same rules give
   (compare_xla.py's `_rule_specs`, read back from ``ss.annotate``; a result
   no rule matches gets the layout ours returns it in), lowered on the
   ``ShapeDtypeStruct``s and compiled (timed), counted and measured the same
   way; ``--no-xla`` leaves it out;
3. auto: ``ss.auto_shard(text, mesh, rules=rules)`` with its defaults (the
   rules as hard constraints, no budget; timed), then ``ss.partition`` of
   its output, compiled, counted and measured as ours; ``--no-auto`` leaves
   it out (its search can run for its whole time limit, 60 s);
4. bound: `bound`, a hand count of the bytes the rules force, from the
   parameter shapes, the rules, the mesh and the batch alone (not from
   anybody's output), priced with collective_bytes' cost table (all-gather
   S_out(p-1)/p, reduce-scatter S_in(p-1)/p, all-reduce 2 S_in(p-1)/p):
   - a weight split on a batch axis (FSDP) is all-gathered over those axes
     before its forward use and again before its backward use (the
     embedding table, additive weights and the patch kernel, whose inputs
     need no gradient, only forward), to its size without those axes;
   - each weight's gradient, a partial sum over every batch axis, is
     reduce-scattered over the batch axes the weight is split on and
     all-reduced over the others (data parallelism's all-reduce);
   - tensor parallelism (a weight dim split on an axis the batch is not):
     one all-reduce of the activation per matmul whose contracted dims are
     split (row-parallel out/down, the experts' output summed over split
     experts) in the forward, and one per group of matmuls sharing an input
     whose output dims are split (q/k/v; gate/up) for the input gradient in
     the backward; a vocabulary-split embedding lookup all-reduces its
     output; a vocabulary-split head needs the backward all-reduce of its
     input gradient plus three all-reduces of one f32 per token for the
     softmax as written (max, sum of exponentials, the label's logit);
   - in the dtype the program moves them: bf16 activations and gradients,
     f32 for the head's (the logits are multiplied in f32, so the input and
     weight gradients are f32 partial sums until they are converted back).
   Scalars and per-expert statistics (the loss mean, Mixtral's router and
   load-balancing loss, under 0.1% of any cell) are left out.  Anything
   beyond the bound is something the plan chose; scale.md lists the largest
   collectives of each plan beside it.  It is not a floor: a plan that
   keeps a gathered weight alive from the forward to the backward skips the
   second gather (and holds the memory), and goes below it.

XLA's CPU backend carries out every bf16 collective in f32 (its float
normalization; no compiled program here keeps one in bf16), so compiled
bytes count bf16 traffic twice, on every side alike: ours/XLA and ours/auto
are fair, and the bound is priced both ways, in the program's dtypes (to
compare with ours as emitted) and with every float as f32 ("bound CPU", to
compare with ours compiled).  Memory has the same bias: temporaries of bf16
arithmetic are f32 on CPU, so a plan marked over 80 GiB may fit a
bf16-native accelerator; arguments and outputs are exact.  And XLA's CPU
pipeline forms no reduce-scatter (its FSDP gradients are all-reduced and
sliced, twice the bytes), which GPU and TPU pipelines would.

Printed and, for a whole run (or with ``--write``), written to
benchmarks/results/scale.md (one table, the plans that exceed an 80 GB
accelerator (80 GiB) and so would need rematerialization or offloading, the
cells where ours moves more than 1.2x the bound, each cell's bound by term,
memory by part and the largest collectives of each side) and scale.png
(bytes of ours, XLA, auto and the bound per cell, log scale).  A cell that
fails is reported with its error and the run goes on; the script exits 1
then.

``--sample`` runs the same cells at small widths (hidden 64-128, vocab 512,
2 layers, f32, 16 host devices) in this process and checks numerics:
``ss.run(ss.partition(text, mesh, rules))`` against
``ss.run_single_device(text)`` on random weights (allclose at 1e-4), for
every rule set and program; tests/benchmarks/test_scale_sample.py runs it
(`run_sample` is the importable entry).

Time on 2 cores (measured 2026-11 at a4eec1f): a 2-layer Llama-3-8B cell on
64 devices takes 15-30 s with every column, a 32-layer one 1-2 minutes, the
3-D cell about 5 minutes (partitioning and auto_shard's search both run
into the search's time limits there); the whole run, 20 cells, about 21
minutes.  ``--sample``: about a minute for its 8 cells, plus about 5 minutes
for the 3-D one at a4eec1f (5 s at f57c686).  Each cell's process stays
under 2.5 GiB (6 GiB where auto_shard runs long); its peak RSS is in the
report.
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "jax"   # before keras is imported; the programs are JAX
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
from collections import defaultdict  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from typing import Any, Callable  # noqa: E402

# compare_xla asks for 8 host devices in XLA_FLAGS when it is imported (real_models imports
# it); a cell sets its own count, so whatever was there before is put back.
_FLAGS_BEFORE = os.environ.get("XLA_FLAGS")
from compare_xla import REPORT_DIR, ROOT, _jax_mesh, _rule_specs, _with_none_leaves  # noqa: E402
from stablehlo_spmd.collective_bytes import (  # noqa: E402
    collective_cost, collectives, emitted_collectives, fmt_bytes, total_bytes)
from real_models import (  # noqa: E402
    ATTENTION_OUT, BATCH_NAMES, EMBEDDING, MLP_IN, MLP_OUT, POSITIONS, QKV,
    REVERSE_EMBEDDING, compare_outputs, megatron, two_d)
from report import Memory, counts, ratio, ratio_value, revision  # noqa: E402

if _FLAGS_BEFORE is None:
    os.environ.pop("XLA_FLAGS", None)
else:
    os.environ["XLA_FLAGS"] = _FLAGS_BEFORE

REPORT = REPORT_DIR / "scale.md"
CHART = REPORT_DIR / "scale.png"
FORCE_DEVICES = "--xla_force_host_platform_device_count"
ACCELERATOR_MEMORY = 80 * 2**30    # bytes: an 80 GB accelerator (H100, A100-80GB: 80 GiB)
BOUND_SLACK = 1.2                  # the notes list cells where ours moves more than this x bound
WELL_UNDER_BOUND = 0.8             # ... and those where it moves less than this x bound
LEARNING_RATE = 1e-2
ADAM_BETAS, ADAM_EPSILON, WEIGHT_DECAY = (0.9, 0.95), 1e-8, 0.1
SAMPLE_DEVICES = 16
SAMPLE_RTOL = SAMPLE_ATOL = 1e-4
SEED = 0


# ------------------------------------------------------------------ models


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """A keras-hub backbone's constructor arguments, real or sample widths."""
    family: str                      # "llama", "mixtral" or "vit"
    hidden: int
    heads: int
    ffn: int                         # MLP width (per expert for Mixtral)
    layers: int                      # full depth
    vocab: int = 0                   # language models
    kv_heads: int = 0
    experts: int = 0
    top_k: int = 0
    sequence: int = 0                # tokens per sequence (language models)
    image: int = 0                   # ViT: image side, patch side, classes
    patch: int = 0
    classes: int = 0

    @property
    def tokens_per_example(self) -> int:
        if self.family == "vit":
            return (self.image // self.patch) ** 2 + 1      # patches and the class token
        return self.sequence

    def describe(self) -> str:
        if self.family == "vit":
            return (f"ViT: {self.image}x{self.image} images, patch {self.patch}, hidden "
                    f"{self.hidden}, {self.heads} heads, MLP {self.ffn}, {self.layers} layers, "
                    f"{self.classes} classes")
        experts = (f", {self.experts} experts of FFN {self.ffn} top {self.top_k}"
                   if self.experts else f", FFN {self.ffn}")
        return (f"vocab {self.vocab}, hidden {self.hidden}, {self.heads}/{self.kv_heads} heads"
                f"{experts}, {self.layers} layers, {self.sequence} tokens per sequence")


MODELS = {
    "llama3-8b": ModelConfig("llama", vocab=128256, hidden=4096, heads=32, kv_heads=8,
                             ffn=14336, layers=32, sequence=2048),
    "llama3-70b": ModelConfig("llama", vocab=128256, hidden=8192, heads=64, kv_heads=8,
                              ffn=28672, layers=80, sequence=2048),
    "mixtral-8x7b": ModelConfig("mixtral", vocab=32000, hidden=4096, heads=32, kv_heads=8,
                                ffn=14336, layers=32, experts=8, top_k=2, sequence=2048),
    "vit-l16": ModelConfig("vit", hidden=1024, heads=16, ffn=4096, layers=24, image=224,
                           patch=16, classes=1000),
}
# The same families at widths one device runs in a blink (--sample): every split of the
# real meshes still divides (heads and experts by model=4, everything by 16).
SAMPLE_MODELS = {
    "llama3-8b": ModelConfig("llama", vocab=512, hidden=64, heads=8, kv_heads=4, ffn=128,
                             layers=2, sequence=16),
    "llama3-70b": ModelConfig("llama", vocab=512, hidden=128, heads=16, kv_heads=4, ffn=256,
                              layers=2, sequence=16),
    "mixtral-8x7b": ModelConfig("mixtral", vocab=512, hidden=64, heads=8, kv_heads=4, ffn=128,
                                layers=2, experts=8, top_k=2, sequence=16),
    "vit-l16": ModelConfig("vit", hidden=64, heads=4, ffn=128, layers=2, image=32, patch=8,
                           classes=16),
}


def build_backbone(config: ModelConfig, layers: int, dtype: str, abstract: bool,
                   remat: bool = False):
    """The keras-hub backbone; with `abstract`, its variables are shapes only (nothing of
    model size is allocated: keras.StatelessScope(initialize_variables=False)); with
    `remat`, each decoder layer's call is under jax.checkpoint, as Keras' own
    ``RematScope(mode="list_of_layers")`` puts it there."""
    import keras
    import keras_hub

    models = keras_hub.models

    def build():
        keras.config.set_dtype_policy(dtype)
        if config.family == "llama":
            return models.LlamaBackbone(
                vocabulary_size=config.vocab, num_layers=layers, num_query_heads=config.heads,
                num_key_value_heads=config.kv_heads, hidden_dim=config.hidden,
                intermediate_dim=config.ffn, rope_max_wavelength=500_000,
                layer_norm_epsilon=1e-5, dtype=dtype)
        if config.family == "mixtral":
            return models.MixtralBackbone(
                vocabulary_size=config.vocab, num_layers=layers, num_query_heads=config.heads,
                num_key_value_heads=config.kv_heads, hidden_dim=config.hidden,
                intermediate_dim=config.ffn, num_experts=config.experts, top_k=config.top_k,
                rope_max_wavelength=1_000_000, layer_norm_epsilon=1e-5,
                sliding_window=config.sequence, dtype=dtype)
        return models.ViTBackbone(
            image_shape=(config.image, config.image, 3), patch_size=config.patch,
            num_layers=layers, num_heads=config.heads, hidden_dim=config.hidden,
            mlp_dim=config.ffn, dtype=dtype)

    scopes = contextlib.ExitStack()
    if remat:
        scopes.enter_context(keras.RematScope(
            mode="list_of_layers", layer_names=[f"transformer_layer_{i}" for i in range(layers)]))
    if abstract:
        scopes.enter_context(keras.StatelessScope(initialize_variables=False))
    else:
        keras.utils.set_random_seed(SEED)
    with scopes:
        return build()


CLASSIFIER = "classifier/kernel"     # ViT's head, (hidden, classes): a parameter of ours
HEAD = {"llama": "token_embedding/reverse_embeddings",
        "mixtral": "token_embedding/reverse_embeddings", "vit": CLASSIFIER}


def parameter_shapes(backbone, config: ModelConfig, dtype: str,
                     form: str = "") -> dict[str, tuple]:
    """{path: (shape, dtype name)} of every trainable parameter, the head included; in a
    scanned form, each layer's weight stacked on a leading layers dim (`stacked`)."""
    shapes = {v.path: (tuple(v.shape), str(v.dtype)) for v in backbone.trainable_variables}
    if config.family == "vit":
        shapes[CLASSIFIER] = ((config.hidden, config.classes), dtype)
    if scanned(form):
        shapes = stacked(shapes, lambda layers: ((len(layers), *layers[0][0]), layers[0][1]))
    return shapes


# ------------------------------------------------------------------ forms
# How a step writes its decoder layers: as the keras-hub backbone calls them (unrolled),
# each under jax.checkpoint, or as MaxText writes them (weights stacked on a leading
# `layers` dim, the decoder a jax.lax.scan over them, the body under jax.checkpoint with
# its remat_policy).  The model and its numbers are the same in every form.

FORMS = {
    "": "unrolled, no rematerialization",
    "remat": "unrolled, each decoder layer under jax.checkpoint (Keras' RematScope, "
             "mode='list_of_layers')",
    "scan": "MaxText's scan_layers: stacked weights, a jax.lax.scan over the layers, no remat",
    "scan-full": "scanned, the body under jax.checkpoint saving nothing (MaxText's "
                 "remat_policy 'full')",
    "scan-minimal": "scanned, the body under jax.checkpoint saving its projections "
                    "(dots_with_no_batch_dims_saveable: MaxText's 'minimal' saves q/k/v, out "
                    "and the MLP's products)",
}
STACKED = "transformer_layers/"     # a stacked weight: this, then its path inside one layer
_LAYER_PATH = re.compile(r"transformer_layer_(\d+)/(.+)")


def scanned(form: str) -> bool:
    return form.startswith("scan")


def recomputes(form: str) -> bool:
    """Whether the form's backward runs each layer's forward again, saving nothing."""
    return form in ("remat", "scan-full")


def stacked(entries: dict, stack: Callable[[list], Any]) -> dict:
    """`entries` keyed by keras path with the layers' ``transformer_layer_<i>/<rest>``
    entries made one ``transformer_layers/<rest>`` entry each, `stack` of them in layer
    order; the others as they are."""
    kept: dict = {}
    layers: dict[str, dict[int, Any]] = defaultdict(dict)
    for path, entry in entries.items():
        found = _LAYER_PATH.fullmatch(path)
        if found:
            layers[STACKED + found.group(2)][int(found.group(1))] = entry
        else:
            kept[path] = entry
    for path, by_layer in layers.items():
        kept[path] = stack([by_layer[i] for i in sorted(by_layer)])
    return kept


def form_rules(rules: list, form: str) -> list:
    """`rules` for the form's parameter names: a stacked weight takes its layer's rule with
    the layers dim left whole (MaxText's `layers` axis, unsplit without pipelining)."""
    if not scanned(form):
        return rules
    return [(f"^(?=.*{re.escape(STACKED)}).*?(?:{pattern})", (None, *spec))
            for pattern, spec in rules] + rules


def _scanned_features(backbone, config: ModelConfig, form: str) -> Callable:
    """features(params, batch) of a scanned form: keras-hub's own embedding, decoder
    layer and norm, the layer called once per slice of the stacked weights."""
    import jax

    if config.family != "llama":
        raise ValueError(f"the scanned forms are written for Llama, not {config.family}")
    layer = backbone.transformer_layers[0]
    layer_paths = [STACKED + v.path.split("/", 1)[1] for v in layer.trainable_variables]

    def run_layer(x, weights, padding_mask):
        return layer.stateless_call(weights, [], x, decoder_padding_mask=padding_mask,
                                    training=True)[0]

    if form != "scan":
        # prevent_cse=False, as MaxText (and jax for any scanned body) writes it: the
        # loop already keeps the recomputation apart from the forward.
        policy = (None if form == "scan-full"
                  else jax.checkpoint_policies.dots_with_no_batch_dims_saveable)
        run_layer = jax.checkpoint(run_layer, policy=policy, prevent_cse=False)

    def weights_of(part, params):
        return [params[v.path] for v in part.trainable_variables]

    def features(params, batch):
        x = backbone.token_embedding.stateless_call(
            weights_of(backbone.token_embedding, params), [], batch["token_ids"])[0]

        def body(x, weights):
            return run_layer(x, weights, batch["padding_mask"]), None

        x, _ = jax.lax.scan(body, x, [params[path] for path in layer_paths])
        return backbone.layer_norm.stateless_call(
            weights_of(backbone.layer_norm, params), [], x)[0], 0.0

    return features


# ------------------------------------------------------------------ programs


def programs(backbone, config: ModelConfig, form: str = "") -> dict[str, Callable]:
    """``sgd`` and ``adamw``: plain JAX training steps over ``params`` (keras variable paths,
    or `stacked` ones in a scanned form).

    sgd(params, batch, labels) -> (params, loss);
    adamw(params, m, v, count, batch, labels) -> (params, m, v, count, loss).
    """
    import jax
    import jax.numpy as jnp

    paths = [v.path for v in backbone.trainable_variables]
    head = HEAD[config.family]
    # Keras' remat hands a layer's call arguments to jax.checkpoint, which cannot carry
    # a Python bool: `training` is left to the call context there (Llama's dropout is 0).
    training = None if form == "remat" else True

    def backbone_features(params, batch):
        features, _, losses = backbone.stateless_call(
            [params[path] for path in paths], [], batch, training=training, return_losses=True)
        return features, sum(losses)

    features_of = _scanned_features(backbone, config, form) if scanned(form) \
        else backbone_features

    def loss_fn(params, batch, labels):
        features, extra_loss = features_of(params, batch)
        if config.family == "vit":
            features = features[:, 0]                          # the class token
        logits = jnp.einsum("...h,hv->...v", features, params[head],
                            preferred_element_type=jnp.float32)
        log_normalizer = jax.nn.logsumexp(logits, axis=-1)
        label_logit = jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
        return jnp.mean(log_normalizer - label_logit) + extra_loss   # (Mixtral's aux loss)

    def sgd(params, batch, labels):
        loss, grads = jax.value_and_grad(loss_fn)(params, batch, labels)
        new = jax.tree_util.tree_map(
            lambda p, g: (p - LEARNING_RATE * g.astype(jnp.float32)).astype(p.dtype),
            params, grads)
        return new, loss

    def adamw(params, m, v, count, batch, labels):
        loss, grads = jax.value_and_grad(loss_fn)(params, batch, labels)
        (beta1, beta2), count = ADAM_BETAS, count + 1
        correction1 = 1 - beta1 ** count.astype(jnp.float32)
        correction2 = 1 - beta2 ** count.astype(jnp.float32)

        def update(p, g, m, v):
            g = g.astype(jnp.float32)
            m = beta1 * m + (1 - beta1) * g
            v = beta2 * v + (1 - beta2) * g * g
            step = (m / correction1) / (jnp.sqrt(v / correction2) + ADAM_EPSILON)
            p32 = p.astype(jnp.float32)
            if p.ndim >= 2:                                    # no decay on norms and biases
                step = step + WEIGHT_DECAY * p32
            return (p32 - LEARNING_RATE * step).astype(p.dtype), m, v

        updated = {path: update(params[path], grads[path], m[path], v[path]) for path in params}
        return ({path: u[0] for path, u in updated.items()},
                {path: u[1] for path, u in updated.items()},
                {path: u[2] for path, u in updated.items()}, count, loss)

    return {"sgd": sgd, "adamw": adamw}


def inputs(config: ModelConfig, examples: int, input_dtype: str) -> dict[str, tuple]:
    """{name: (shape, dtype)} of the batch and the labels: token ids or images."""
    if config.family == "vit":
        return {"batch": ((examples, config.image, config.image, 3), input_dtype),
                "labels": ((examples,), "int32")}
    tokens = (examples, config.sequence)
    return {"token_ids": (tokens, "int32"), "padding_mask": (tokens, "int32"),
            "labels": (tokens, "int32")}


def arguments(program: str, params: dict, data: dict, moment: Callable, count: Any) -> tuple:
    """The program's arguments from the parameters, `inputs`' values (`data`), a moment
    maker (`moment(path)`) and AdamW's step count."""
    batch = data["batch"] if "batch" in data else {
        "token_ids": data["token_ids"], "padding_mask": data["padding_mask"]}
    if program == "sgd":
        return params, batch, data["labels"]
    return (params, {path: moment(path) for path in params},
            {path: moment(path) for path in params}, count, batch, data["labels"])


# ------------------------------------------------------------------ rule sets
# real_models.py's regexes, and what they do not cover: ViT's MLP and head, the experts of
# Mixtral one by one (their FSDP dims differ).  The router stays replicated.

VIT_MLP_IN = r"/mlp/dense_1/kernel'\]$"                           # (hidden, mlp)
VIT_MLP_IN_BIAS = r"/mlp/dense_1/bias'\]$"                        # (mlp,)
VIT_MLP_OUT = r"/mlp/dense_2/kernel'\]$"                          # (mlp, hidden)
EXPERTS_IN = r"/experts/expert_feedforward_(gate|intermediate)_dense'\]$"   # (e, hidden, ffn)
EXPERTS_OUT = r"/experts/expert_feedforward_output_dense'\]$"     # (e, ffn, hidden)
CLASSIFIER_RULE = r"classifier/kernel'\]$"                        # (hidden, classes)


def tensor_2d(fsdp: str = "data", tensor: str = "model") -> list:
    """MaxText's 2-D plan: real_models.two_d, with the FSDP axis named, plus ViT's MLP and head."""
    rules = [(pattern, tuple(fsdp if axis == "data" else axis for axis in spec))
             for pattern, spec in two_d() if pattern != BATCH_NAMES]
    return rules + [(VIT_MLP_IN, (fsdp, tensor)), (VIT_MLP_IN_BIAS, (tensor,)),
                    (VIT_MLP_OUT, (tensor, fsdp)), (CLASSIFIER_RULE, (fsdp, tensor))]


def fsdp_only() -> list:
    """ZeRO-3: every matrix split over all devices on its hidden (or vocab) dim."""
    return [(QKV, ("data",)), (ATTENTION_OUT, (None, None, "data")), (MLP_IN, ("data",)),
            (MLP_OUT, (None, "data")), (EMBEDDING, ("data",)), (REVERSE_EMBEDDING, ("data",)),
            (POSITIONS, (None, "data")), (VIT_MLP_IN, ("data",)), (VIT_MLP_OUT, (None, "data")),
            (CLASSIFIER_RULE, ("data",))]


@dataclasses.dataclass(frozen=True)
class RuleSet:
    make: Callable[[], list]        # () -> weight rules
    batch_axes: tuple[str, ...]     # the axes the batch is split on, major first
    describe: str

    def rules(self) -> list:
        return self.make() + [(BATCH_NAMES, (self.batch_axes,))]


RULE_SETS = {
    "2d": RuleSet(tensor_2d, ("data",), "FSDP on data x tensor on model (MaxText)"),
    "megatron": RuleSet(lambda: [r for r in megatron() if r[0] != BATCH_NAMES] + [
        (VIT_MLP_IN, (None, "model")), (VIT_MLP_IN_BIAS, ("model",)),
        (VIT_MLP_OUT, ("model",)), (CLASSIFIER_RULE, (None, "model"))], ("data",),
        "weights on model, batch on data"),
    "fsdp": RuleSet(fsdp_only, ("data",), "every matrix split on data, batch on data"),
    "3d": RuleSet(lambda: tensor_2d(fsdp="fsdp"), ("data", "fsdp"),
                  "FSDP on fsdp x tensor on model, batch on data x fsdp"),
    "expert": RuleSet(lambda: [(EXPERTS_IN, ("model", "data")),
                               (EXPERTS_OUT, ("model", None, "data"))] + tensor_2d(),
                      ("data",), "experts on model with FSDP on data, attention as 2d"),
}


# ------------------------------------------------------------------ cells


@dataclasses.dataclass(frozen=True)
class Cell:
    model: str
    layers: int
    rules: str
    mesh: str                  # the real mesh, e.g. "data=8,model=8"
    program: str = "sgd"
    per_shard: int = 8         # examples per batch shard
    sample_mesh: str = ""      # the mesh --sample runs this cell on
    form: str = ""             # how the layers are written (`FORMS`)

    @property
    def devices(self) -> int:
        return math.prod(mesh_sizes(self.mesh).values())

    @property
    def name(self) -> str:
        form = f"-{self.form}" if self.form else ""
        return f"{self.model}{form}-L{self.layers}-{self.rules}-{self.devices}-{self.program}"

    def shards(self, mesh: str) -> int:
        sizes = mesh_sizes(mesh)
        return math.prod(sizes[a] for a in RULE_SETS[self.rules].batch_axes)


def mesh_sizes(mesh: str) -> dict[str, int]:
    return {name: int(size) for name, size in
            (part.split("=") for part in mesh.replace(" ", "").split(","))}


FULL = 0   # a cell's depth: the model's own


def cell_templates() -> list[Cell]:
    """Every cell, with `FULL` standing for the model's own depth."""
    tp, tp_small = "data=8,model=8", "data=4,model=4"
    cells = []
    for layers in (2, FULL):
        for devices, mesh in ((64, tp), (256, "data=32,model=8")):
            cells += [Cell("llama3-8b", layers, "2d", mesh, sample_mesh=tp_small),
                      Cell("llama3-8b", layers, "megatron", mesh, sample_mesh=tp_small),
                      Cell("llama3-8b", layers, "fsdp", f"data={devices}", per_shard=1,
                           sample_mesh=f"data={SAMPLE_DEVICES}")]
        cells.append(Cell("llama3-8b", layers, "2d", tp, "adamw", sample_mesh=tp_small))
        cells.append(Cell("vit-l16", layers, "2d", tp, per_shard=32, sample_mesh=tp_small))
    cells += [Cell("llama3-70b", 2, "2d", "data=32,model=8", sample_mesh=tp_small),
              Cell("llama3-70b", 2, "2d", "data=128,model=8", sample_mesh=tp_small),
              Cell("mixtral-8x7b", 2, "expert", tp, sample_mesh=tp_small),
              Cell("llama3-8b", 2, "3d", "data=2,fsdp=4,model=8",
                   sample_mesh="data=2,fsdp=2,model=4")]
    # The forms large-scale trainers write, beside the unrolled cells above: per-layer
    # remat unrolled (at 2 layers and full depth), and MaxText's scanned step (full depth).
    for form, depths in (("remat", (2, FULL)), ("scan", (FULL,)), ("scan-full", (FULL,)),
                         ("scan-minimal", (FULL,))):
        for layers in depths:
            cells += [Cell("llama3-8b", layers, "2d", tp, sample_mesh=tp_small, form=form),
                      Cell("llama3-8b", layers, "megatron", tp, sample_mesh=tp_small,
                           form=form),
                      Cell("llama3-8b", layers, "fsdp", "data=64", per_shard=1,
                           sample_mesh=f"data={SAMPLE_DEVICES}", form=form)]
    return cells


def select_cells(layers: list[str], only: list[str]) -> list[Cell]:
    """The cells at the depths asked for ('2', 'full', or a number that replaces the full
    depth), whose names contain one of `only` (all when empty)."""
    cells = []
    for template in cell_templates():
        for depth in layers:
            if depth == "full" and template.layers == FULL:
                layers_now = MODELS[template.model].layers
            elif depth == "2" and template.layers == 2:
                layers_now = 2
            elif depth.isdigit() and depth != "2" and template.layers == FULL:
                layers_now = int(depth)
            else:
                continue
            cell = dataclasses.replace(template, layers=layers_now)
            if cell not in cells and (not only or any(s in cell.name for s in only)):
                cells.append(cell)
    return cells


# ------------------------------------------------------------------ the bound


@dataclasses.dataclass(frozen=True)
class Role:
    """How a weight meets the activations, for `bound`."""
    kind: str                           # "matmul", "lookup" (embedding table) or "add"
    site: str = ""                      # matmuls sharing one input (gradients summed first)
    in_dims: tuple[int, ...] = ()       # contracted with the activation (or summed over after)
    out_dims: tuple[int, ...] = ()
    pooled: bool = False                # one token per example (ViT's head)
    head: bool = False                  # logits: softmax over out_dims, f32 products
    backward_use: bool = True           # needed again for an input gradient


ROLES = [   # (regex on the keras path, role); first match
    (r"/(query|key|value)/kernel$", Role("matmul", "attention in", (0,), (1, 2))),
    (r"/attention_output/kernel$", Role("matmul", "attention out", (0, 1), (2,))),
    (r"/(feedforward_(gate|intermediate)_dense|mlp/dense_1)/kernel$",
     Role("matmul", "mlp in", (0,), (1,))),
    (r"/(feedforward_output_dense|mlp/dense_2)/kernel$", Role("matmul", "mlp out", (0,), (1,))),
    (r"/experts/expert_feedforward_(gate|intermediate)_dense$",
     Role("matmul", "mlp in", (1,), (0, 2))),
    (r"/experts/expert_feedforward_output_dense$", Role("matmul", "mlp out", (0, 1), (2,))),
    (r"/sparse_feedforward_gate_dense/kernel$", Role("matmul", "router", (0,), (1,))),
    (r"patch_embedding/kernel$", Role("matmul", "patches", (0, 1, 2), (3,),
                                      backward_use=False)),
    (r"^token_embedding/embeddings$", Role("lookup", "embedding", (0,), (1,),
                                           backward_use=False)),
    (r"^token_embedding/reverse_embeddings$", Role("matmul", "head", (0,), (1,), head=True)),
    (r"^classifier/kernel$", Role("matmul", "head", (0,), (1,), pooled=True, head=True)),
    (r"(scale|gamma)$", Role("add")),                       # norms: used in the backward too
    (r"", Role("add", backward_use=False)),                 # biases, positions, class token
]

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def _role(path: str) -> tuple[Role, str]:
    """The weight's role and its site's key (the layer it is in)."""
    for pattern, role in ROLES:
        found = re.search(pattern, path)
        if found:
            return role, path[:found.start()] + role.site
    raise AssertionError("the last role matches everything")


def _spec(name: str, rank: int, rules: list) -> list[tuple[str, ...]]:
    """Per dim, the mesh axes the first matching rule puts on it (re.search, as spmd-annotate)."""
    for pattern, spec in rules:
        if re.search(pattern, name):
            entries = [() if e is None else (e,) if isinstance(e, str) else tuple(e)
                       for e in spec]
            return entries + [()] * (rank - len(entries))
    return [()] * rank


def bound(parameters: dict[str, tuple], rules: list, mesh: str, batch_axes: tuple[str, ...],
          per_shard: int, tokens_per_example: int, activation_dtype: str,
          float_bytes: int | None = None, recomputed: bool = False) -> dict[str, float]:
    """Bytes per device that the rules force, by term (see the module docstring).

    `float_bytes` prices every float at that width instead of its own: 4 for what a plan
    moving exactly this shows compiled for CPU, whose backend carries out bf16
    collectives in f32.  `recomputed`: each layer's forward runs again in the backward
    (jax.checkpoint saving nothing), which sums its row-parallel products again, all but
    the layer's last (its output, which no gradient reads); FSDP's backward gathers
    already serve the recomputation.
    """
    sizes = mesh_sizes(mesh)
    batch = set(batch_axes)

    def width(dtype: str) -> int:
        return float_bytes or DTYPE_BYTES[dtype]

    act, f32 = width(activation_dtype), width("float32")

    def size(axes) -> int:
        return math.prod(sizes[a] for a in axes)

    def all_reduce(operand: float, axes) -> float:
        return collective_cost("all-reduce", operand, operand, size(axes)) if axes else 0.0

    terms: dict[str, float] = defaultdict(float)
    backward_groups: dict[str, tuple[set, float]] = {}
    for path, (shape, dtype) in parameters.items():
        role, site = _role(path)
        spec = _spec(f"params['{path}']", len(shape), rules)
        weight = math.prod(shape) * width(dtype)
        axes = {a for dim in spec for a in dim}
        fsdp = axes & batch                          # gathered for every use
        tensor = axes - batch                        # kept split: tensor parallelism
        gathered = weight / size(tensor)
        p = size(fsdp)
        if p > 1:
            gather = collective_cost("all-gather", 0, gathered, p)
            terms["FSDP all-gather forward"] += gather
            if role.backward_use:
                terms["FSDP all-gather backward"] += gather
        # The gradient: a partial sum over every batch axis, as wide as the gathered weight
        # (in f32 for the head, whose products are f32 until converted back).
        gradient = gathered * (f32 / width(dtype) if role.head else 1)
        terms["gradient reduce-scatter"] += collective_cost("reduce-scatter", gradient, 0, p)
        terms["gradient all-reduce"] += all_reduce(gradient / p, batch - fsdp)

        if role.kind == "add":
            continue
        tokens = per_shard * (1 if role.pooled else tokens_per_example)
        in_split = {a for d in role.in_dims for a in spec[d]} - batch
        out_split = {a for d in role.out_dims for a in spec[d]} - batch
        out_width = math.prod(shape[d] for d in role.out_dims) / size(out_split)
        in_width = math.prod(shape[d] for d in role.in_dims) / size(in_split)
        if role.kind == "lookup":
            in_width = out_width = shape[1] / size({a for a in spec[1]} - batch)
        if in_split:      # row-parallel (or a split vocabulary's lookup): partial outputs
            terms["tensor all-reduce forward"] += all_reduce(tokens * out_width * act, in_split)
            if recomputed and role.kind == "matmul" and not role.head and \
                    role.site != "mlp out":
                terms["tensor all-reduce recomputed"] += all_reduce(
                    tokens * out_width * act, in_split)
        if role.head and out_split:
            terms["softmax all-reduces (f32 per token)"] += 3 * all_reduce(tokens * f32, out_split)
        if out_split and role.kind == "matmul" and role.backward_use:
            # column-parallel: the input gradient is a partial sum over the split outputs
            operand = tokens * in_width * (f32 if role.head else act)
            known_axes, known = backward_groups.get(site, (set(), 0.0))
            backward_groups[site] = (known_axes | out_split, max(known, operand))
    for axes, operand in backward_groups.values():
        terms["tensor all-reduce backward"] += all_reduce(operand, axes)
    return {name: value for name, value in terms.items() if value}


# ------------------------------------------------------------------ one cell, compile only


@dataclasses.dataclass
class Side:
    """One plan, compiled: bytes (compiled HLO, and as emitted for ours/auto), memory, time."""
    bytes: float | None = None
    emitted_bytes: float | None = None
    collectives: str = ""                 # counts per kind
    memory: dict | None = None            # report.Memory's fields
    seconds: float | None = None          # ours/auto: ss.partition (auto: + the search); XLA: -
    compile_seconds: float | None = None
    search_seconds: float | None = None   # auto only
    largest: list[str] = dataclasses.field(default_factory=list)
    failure: str = ""

    @property
    def memory_total(self) -> int | None:
        return None if self.memory is None else Memory(**self.memory).total


@dataclasses.dataclass
class CellResult:
    cell: dict
    name: str
    batch: str = ""
    export_seconds: float | None = None
    ours: Side = dataclasses.field(default_factory=Side)
    xla: Side = dataclasses.field(default_factory=Side)
    auto: Side = dataclasses.field(default_factory=Side)
    bound: dict = dataclasses.field(default_factory=dict)       # term -> bytes, program dtypes
    bound_cpu: dict = dataclasses.field(default_factory=dict)   # the same, floats as f32
    peak_rss: int | None = None           # bytes, the cell's subprocess
    failure: str = ""

    @property
    def bound_bytes(self) -> float | None:
        return sum(self.bound.values()) if self.bound else None

    @property
    def bound_cpu_bytes(self) -> float | None:
        return sum(self.bound_cpu.values()) if self.bound_cpu else None

    @classmethod
    def from_json(cls, data: dict) -> CellResult:
        sides = {k: Side(**data.pop(k)) for k in ("ours", "xla", "auto")}
        return cls(**data, **sides)


def _failure(error: BaseException) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())[:400]}"


def _failed(side, error: BaseException) -> None:
    """One side's failure is reported in its row and on stderr, not fatal to the cell."""
    side.failure = _failure(error)
    traceback.print_exc(limit=4, file=sys.stderr)


def _dump(directory: str | None, name: str, text: str) -> None:
    if directory:
        with open(os.path.join(directory, name), "w") as out:
            out.write(text)


def _largest(found, shown: int = 6) -> list[str]:
    merged: dict[tuple, list] = {}
    for c in found:
        key = (c.kind, c.shape, c.group)
        merged.setdefault(key, [0, 0.0])
        merged[key][0] += c.times   # runs, as the bytes beside it count them
        merged[key][1] += c.bytes
    top = sorted(merged.items(), key=lambda kv: -kv[1][1])[:shown]
    return [f"{count:>3} x {kind:<15} {shape:<34} p={group:<4} {fmt_bytes(total):>10}"
            for (kind, shape, group), (count, total) in top]


def _compile_ours(partitioned: str, devices: int, side: Side):
    from stablehlo_spmd import runtime

    side.emitted_bytes = total_bytes(emitted_collectives(partitioned, devices))
    start = time.perf_counter()
    executable = runtime.compile(partitioned)
    side.compile_seconds = time.perf_counter() - start
    found = collectives(executable.compiled_text(), devices)
    side.bytes, side.collectives, side.largest = total_bytes(found), counts(found), \
        _largest(found)
    side.memory = dataclasses.asdict(Memory.from_stats(executable.memory_analysis()))
    return executable


def measure_cell(cell: Cell, run_xla: bool = True, run_auto: bool = True,
                 dump: str = "") -> CellResult:
    """One cell compiled for `cell.devices` host devices (this process must have them)."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    import stablehlo_spmd as ss

    config = MODELS[cell.model]
    result = CellResult(dataclasses.asdict(cell), cell.name)
    rule_set = RULE_SETS[cell.rules]
    mesh = ss.Mesh.from_string(cell.mesh)
    examples = cell.per_shard * cell.shards(cell.mesh)
    result.batch = (f"{examples} x {config.tokens_per_example}" if config.family != "vit"
                    else f"{examples} images")
    backbone = build_backbone(config, cell.layers, "bfloat16", abstract=True,
                              remat=cell.form == "remat")
    result.bound, result.bound_cpu = (
        bound(parameter_shapes(backbone, config, "bfloat16"), rule_set.rules(), cell.mesh,
              rule_set.batch_axes, cell.per_shard, config.tokens_per_example, "bfloat16",
              float_bytes=width, recomputed=recomputes(cell.form))
        for width in (None, 4))
    rules = form_rules(rule_set.rules(), cell.form)
    parameters = parameter_shapes(backbone, config, "bfloat16", cell.form)
    fn = programs(backbone, config, cell.form)[cell.program]

    def abstract(shape, dtype):
        return jax.ShapeDtypeStruct(shape, dtype)

    args = arguments(
        cell.program, {path: abstract(*spec) for path, spec in parameters.items()},
        {name: abstract(*spec) for name, spec in inputs(config, examples, "bfloat16").items()},
        lambda path: abstract(parameters[path][0], "float32"), abstract((), "int32"))
    start = time.perf_counter()
    text = ss.export(fn, *args)
    result.export_seconds = time.perf_counter() - start
    if dump:
        os.makedirs(dump, exist_ok=True)
    _dump(dump, f"{cell.name}.mlir", text)

    # 1. ours
    ours_out_shardings = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            partitioned = ss.partition(text, mesh, rules)
            result.ours.seconds = time.perf_counter() - start
        executable = _compile_ours(partitioned, mesh.size, result.ours)
        ours_out_shardings = executable.out_shardings
        _dump(dump, f"{cell.name}.ours.hlo", executable.compiled_text() if dump else "")
        del executable, partitioned
    except Exception as error:  # noqa: BLE001
        _failed(result.ours, error)

    # 2. XLA, with the shardings the same rules give
    if run_xla:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                arg_specs, result_specs = _rule_specs(text, mesh, rules)
            jax_mesh = _jax_mesh(mesh)
            leaves, in_tree = jax.tree_util.tree_flatten(args)
            out_leaves, out_tree = jax.tree_util.tree_flatten(jax.eval_shape(fn, *args))
            assert len(arg_specs) == len(leaves) and len(result_specs) == len(out_leaves)

            def named(spec):
                return NamedSharding(jax_mesh, PartitionSpec(*(spec or ())))

            in_shardings = [named(spec) for spec in arg_specs]
            out_shardings = [named(spec) if spec is not None
                             else (ours_out_shardings[i] if ours_out_shardings else None)
                             for i, spec in enumerate(result_specs)]
            jitted = jax.jit(fn, keep_unused=True,
                             in_shardings=jax.tree_util.tree_unflatten(in_tree, in_shardings),
                             out_shardings=_with_none_leaves(out_tree, out_shardings))
            start = time.perf_counter()
            compiled = jitted.lower(*args).compile()
            result.xla.compile_seconds = time.perf_counter() - start
            xla_text = compiled.as_text()
            found = collectives(xla_text, mesh.size)
            result.xla.bytes, result.xla.collectives = total_bytes(found), counts(found)
            result.xla.largest = _largest(found)
            result.xla.memory = dataclasses.asdict(Memory.from_stats(compiled.memory_analysis()))
            _dump(dump, f"{cell.name}.xla.hlo", xla_text)
            del compiled, xla_text
        except Exception as error:  # noqa: BLE001
            _failed(result.xla, error)

    # 3. auto_shard with the same rules as hard constraints
    if run_auto:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                start = time.perf_counter()
                annotated = ss.auto_shard(text, mesh, rules=rules)
                result.auto.search_seconds = time.perf_counter() - start
                start = time.perf_counter()
                partitioned = ss.partition(annotated, mesh)
                result.auto.seconds = time.perf_counter() - start
            del annotated
            _compile_ours(partitioned, mesh.size, result.auto)
        except Exception as error:  # noqa: BLE001
            _failed(result.auto, error)
    return result


# ------------------------------------------------------------------ the sample (numerics)


@dataclasses.dataclass
class SampleResult:
    name: str
    mesh: str
    max_error: float | None = None
    mismatch: str = ""                 # outputs not allclose, with their |diff|
    emitted_bytes: float | None = None
    bound_bytes: float | None = None
    seconds: float = 0.0
    failure: str = ""

    @property
    def ok(self) -> bool:
        return not self.failure and not self.mismatch


def sample_cells() -> list[Cell]:
    """Each distinct (model, rule set, program) of the real cells, once, at 2 layers."""
    seen, cells = set(), []
    for cell in cell_templates():
        key = (cell.model, cell.rules, cell.program, cell.form)
        if key not in seen:
            seen.add(key)
            cells.append(dataclasses.replace(cell, layers=2, mesh=cell.sample_mesh,
                                             per_shard=2 if cell.per_shard > 1 else 1))
    return cells


def run_sample_cell(cell: Cell) -> SampleResult:
    """`cell` at sample widths in f32: partitioned against one device, on random inputs."""
    import jax
    import numpy as np

    import stablehlo_spmd as ss

    config = SAMPLE_MODELS[cell.model]
    result = SampleResult(cell.name, cell.mesh)
    start = time.perf_counter()
    try:
        rng = np.random.default_rng(SEED)
        backbone = build_backbone(config, cell.layers, "float32", abstract=False,
                                  remat=cell.form == "remat")
        values = {v.path: np.asarray(v.value) for v in backbone.trainable_variables}
        if scanned(cell.form):
            values = stacked(values, np.stack)
        parameters = parameter_shapes(backbone, config, "float32", cell.form)

        params = {}
        for path, (shape, _) in parameters.items():
            params[path] = values.get(path)
            if params[path] is None:   # ViT's classifier: ours, not keras'
                params[path] = (rng.standard_normal(shape) / math.sqrt(shape[0])).astype(
                    np.float32)
        examples = cell.per_shard * cell.shards(cell.mesh)
        data = {}
        for name, (shape, dtype) in inputs(config, examples, "float32").items():
            if name == "padding_mask":
                data[name] = np.ones(shape, np.int32)
            elif dtype == "int32":
                high = config.classes if config.family == "vit" else config.vocab
                data[name] = rng.integers(0, high, shape, dtype=np.int32)
            else:
                data[name] = rng.standard_normal(shape).astype(np.float32)
        args = arguments(cell.program, params, data,
                         lambda path: rng.uniform(0.1, 1.0, parameters[path][0]).astype(
                             np.float32), np.int32(3))
        fn = programs(backbone, config, cell.form)[cell.program]
        text = ss.export(fn, *args)
        rule_set = RULE_SETS[cell.rules]
        leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(args)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            partitioned = ss.partition(text, ss.Mesh.from_string(cell.mesh),
                                       form_rules(rule_set.rules(), cell.form))
        result.emitted_bytes = total_bytes(emitted_collectives(partitioned, cell.devices))
        result.bound_bytes = sum(bound(
            parameter_shapes(backbone, config, "float32"), rule_set.rules(), cell.mesh,
            rule_set.batch_axes, cell.per_shard, config.tokens_per_example, "float32",
            recomputed=recomputes(cell.form)).values())
        got = ss.run(partitioned, leaves)
        want = ss.run_single_device(text, leaves)
        names = ["result" + jax.tree_util.keystr(path) for path, _ in
                 jax.tree_util.tree_flatten_with_path(jax.eval_shape(fn, *args))[0]]
        worst, problems = compare_outputs(names, got, want, SAMPLE_RTOL, SAMPLE_ATOL)
        result.max_error, result.mismatch = worst, ", ".join(problems[:6]) + (
            f" and {len(problems) - 6} more" if len(problems) > 6 else "")
    except Exception as error:  # noqa: BLE001
        _failed(result, error)
    result.seconds = time.perf_counter() - start
    return result


def run_sample(only: list[str] = ()) -> list[SampleResult]:
    """Every sample cell (names containing one of `only`, or all) run against one device.

    Needs 16 host devices: call it before jax starts its backends, or in a process started
    with ``XLA_FLAGS=--xla_force_host_platform_device_count=16``.
    """
    from stablehlo_spmd import runtime

    runtime.ensure_host_devices(SAMPLE_DEVICES)
    results = []
    for cell in sample_cells():
        if only and not any(s in cell.name for s in only):
            continue
        results.append(run_sample_cell(cell))
        r = results[-1]
        status = "ok" if r.ok else f"FAILED: {r.failure}" if r.failure else \
            f"MISMATCH: {r.mismatch}"
        print(f"  sample {r.name} on {r.mesh}: max |diff| "
              f"{'n/a' if r.max_error is None else f'{r.max_error:.2e}'}, emitted "
              f"{fmt_bytes(r.emitted_bytes or 0)} (bound {fmt_bytes(r.bound_bytes or 0)}), "
              f"{r.seconds:.1f} s: {status}", file=sys.stderr, flush=True)
    return results


# ------------------------------------------------------------------ running cells


def _cell_command(cell: Cell, options, output: str) -> list[str]:
    command = [sys.executable, os.path.abspath(__file__), "--cell",
               json.dumps(dataclasses.asdict(cell)), "--json", output]
    if options.no_xla:
        command.append("--no-xla")
    if options.no_auto:
        command.append("--no-auto")
    if options.dump:
        command += ["--dump", options.dump]
    return command


def _host_flags(flags: str, devices: int) -> str:
    kept = re.sub(re.escape(FORCE_DEVICES) + r"=\d+", "", flags)
    return f"{kept} {FORCE_DEVICES}={devices}".strip()


def run_cell_subprocess(cell: Cell, options) -> CellResult:
    """One cell in a fresh process with `cell.devices` host devices; its JSON read back."""
    env = dict(os.environ, XLA_FLAGS=_host_flags(os.environ.get("XLA_FLAGS", ""), cell.devices),
               JAX_PLATFORMS="cpu", KERAS_BACKEND="jax")
    with tempfile.TemporaryDirectory() as directory:
        output = os.path.join(directory, "cell.json")
        start = time.perf_counter()
        try:
            done = subprocess.run(_cell_command(cell, options, output), env=env,
                                  timeout=options.timeout, capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            print(f"!!! {cell.name}: timed out after {options.timeout} s", file=sys.stderr)
            return CellResult(dataclasses.asdict(cell), cell.name,
                              failure=f"timed out after {options.timeout} s")
        seconds = time.perf_counter() - start
        if done.returncode != 0 or not os.path.exists(output):
            tail = " | ".join(done.stderr.strip().splitlines()[-3:])
            print(f"!!! {cell.name}: FAILED (exit {done.returncode}): {tail[-400:]}",
                  file=sys.stderr, flush=True)
            return CellResult(dataclasses.asdict(cell), cell.name,
                              failure=f"exit {done.returncode}: {tail[-400:]}")
        with open(output) as file:
            result = CellResult.from_json(json.load(file))
        for side in ("ours", "xla", "auto"):
            if getattr(result, side).failure:
                print(f"!!! {cell.name}: {side} FAILED: {getattr(result, side).failure}",
                      file=sys.stderr, flush=True)
        print(f"  {cell.name}: {seconds:.0f} s, peak RSS "
              f"{(result.peak_rss or 0) / 2**30:.1f} GiB", file=sys.stderr, flush=True)
        return result


def _cell_main(options) -> None:
    """--cell: one cell in this process (the parent set XLA_FLAGS); JSON to --json."""
    import resource

    import jax

    cell = Cell(**json.loads(options.cell))
    if jax.device_count() < cell.devices:
        raise SystemExit(f"{cell.name} needs {cell.devices} host devices; this process has "
                         f"{jax.device_count()} (XLA_FLAGS={os.environ.get('XLA_FLAGS')})")
    result = measure_cell(cell, run_xla=not options.no_xla, run_auto=not options.no_auto,
                          dump=options.dump)
    result.peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with open(options.json, "w") as out:
        json.dump(dataclasses.asdict(result), out)


# ------------------------------------------------------------------ report

GB = 1e9
HEADER = ("cell", "mesh", "batch", "ours", "XLA", "auto", "bound CPU", "o/XLA", "o/auto",
          "o/bound", "ours emitted", "auto emitted", "bound", "emitted o/bound", "mem ours GiB",
          "mem XLA GiB", "mem auto GiB", "partition s", "ours compile s", "XLA compile s",
          "auto search s", "peak RSS")
TEXT_COLUMNS = 3   # left-aligned


def _gb(value: float | None) -> str:
    return "n/a" if value is None else f"{value / GB:.2f}"


GIB = 2**30


def _memory(side: Side) -> str:
    total = side.memory_total
    if total is None:
        return "FAILED" if side.failure else "n/a"
    return f"{total / GIB:.1f}" + (" >80" if total > ACCELERATOR_MEMORY else "")


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def _bytes_cell(side: Side, value: float | None) -> str:
    return "FAILED" if side.failure else _gb(value)


def table_row(r: CellResult) -> tuple[str, ...]:
    cell = r.cell
    if r.failure:
        return (r.name, cell["mesh"], r.batch, "FAILED") + ("",) * (len(HEADER) - 4)
    return (r.name, cell["mesh"], r.batch, _bytes_cell(r.ours, r.ours.bytes),
            _bytes_cell(r.xla, r.xla.bytes), _bytes_cell(r.auto, r.auto.bytes),
            _gb(r.bound_cpu_bytes), ratio(r.ours.bytes, r.xla.bytes),
            ratio(r.ours.bytes, r.auto.bytes), ratio(r.ours.bytes, r.bound_cpu_bytes),
            _gb(r.ours.emitted_bytes), _gb(r.auto.emitted_bytes), _gb(r.bound_bytes),
            ratio(r.ours.emitted_bytes, r.bound_bytes), _memory(r.ours), _memory(r.xla),
            _memory(r.auto), _seconds(r.ours.seconds), _seconds(r.ours.compile_seconds),
            _seconds(r.xla.compile_seconds), _seconds(r.auto.search_seconds),
            "n/a" if r.peak_rss is None else f"{r.peak_rss / 2**30:.1f} GiB")


def text_table(results: list[CellResult]) -> str:
    rows = [HEADER] + [table_row(r) for r in results]
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(HEADER))]
    lines = [" | ".join(str(c).ljust(w) if i < TEXT_COLUMNS else str(c).rjust(w)
                        for i, (c, w) in enumerate(zip(row, widths))) for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def notes(results: list[CellResult]) -> list[str]:
    """Plans over 80 GiB, cells over 1.2x the bound (and well under it), failures."""
    lines = []
    sides = (("ours", "ours"), ("XLA", "xla"), ("auto", "auto"))
    for r in results:
        over = [f"{label} {getattr(r, side).memory_total / GIB:.1f}" for label, side in sides
                if (getattr(r, side).memory_total or 0) > ACCELERATOR_MEMORY]
        if over:
            lines.append(f"{r.name}: over 80 GiB per device ({', '.join(over)} GiB): would "
                         "need rematerialization or offloading")
    for r in results:
        compiled = ratio_value(r.ours.bytes, r.bound_cpu_bytes)
        emitted = ratio_value(r.ours.emitted_bytes, r.bound_bytes)
        if max(compiled or 0, emitted or 0) > BOUND_SLACK:
            lines.append(f"{r.name}: ours over {BOUND_SLACK}x the bound: "
                         f"{ratio(r.ours.bytes, r.bound_cpu_bytes)}x compiled "
                         f"({_gb(r.ours.bytes)} against {_gb(r.bound_cpu_bytes)} GB), "
                         f"{ratio(r.ours.emitted_bytes, r.bound_bytes)}x as emitted "
                         f"({_gb(r.ours.emitted_bytes)} against {_gb(r.bound_bytes)} GB)")
    for r in results:
        emitted = ratio_value(r.ours.emitted_bytes, r.bound_bytes)
        if emitted is not None and emitted < WELL_UNDER_BOUND:
            lines.append(f"{r.name}: ours well under the bound ({emitted:.2f}x as emitted): "
                         "the bound is no floor (it gathers every FSDP weight again for the "
                         "backward, which a plan keeping the forward's copy does not); see its "
                         "largest collectives below")
    for r in results:
        if r.failure:
            lines.append(f"{r.name}: FAILED: {r.failure}")
        for label, side in sides:
            if getattr(r, side).failure:
                lines.append(f"{r.name}: {label} FAILED: {getattr(r, side).failure}")
    return lines


def details(results: list[CellResult]) -> list[str]:
    """Each cell's bound by term, memory by part and each side's largest collectives."""
    lines = []
    for r in results:
        if r.failure:
            continue
        lines.append(f"{r.name} ({r.cell['mesh']}, batch {r.batch}):")
        for term, value in sorted(r.bound.items(), key=lambda kv: -kv[1]):
            lines.append(f"    bound {term:<38} {value / GB:9.3f} GB "
                         f"(CPU {r.bound_cpu.get(term, 0) / GB:.3f})")
        for label, side in (("ours", r.ours), ("XLA ", r.xla), ("auto", r.auto)):
            if side.memory:
                lines.append(f"    {label}: memory {Memory(**side.memory).describe()}")
            if side.collectives:
                lines.append(f"    {label}: {side.collectives}")
            lines += [f"    {label}  {line}" for line in side.largest]
    return lines


def _imported_from() -> str:
    """Where stablehlo_spmd came from, when not this checkout (a snapshot on PYTHONPATH)."""
    import pathlib

    import stablehlo_spmd
    where = pathlib.Path(stablehlo_spmd.__file__).resolve().parent
    return "" if where == ROOT / "stablehlo_spmd" else f"imported from {where}, not this checkout"


def run_header() -> dict:
    """What the report's header says about the run, taken when it starts."""
    import datetime

    import jax
    import jaxlib

    def version(module: str) -> str:
        try:
            return __import__(module).__version__
        except ImportError:
            return "not installed"

    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "versions": f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, keras "
                        f"{version('keras')}, keras-hub {version('keras_hub')}",
            "command": " ".join(["python3", "benchmarks/scale.py", *sys.argv[1:]]),
            "revision": revision(ROOT), "imported_from": _imported_from()}


def markdown(results: list[CellResult], header: dict) -> str:
    rev, elsewhere = header["revision"], header["imported_from"]
    used = sorted({r.cell["model"] for r in results})
    lines = [
        "# Real scale: stablehlo-spmd against XLA's partitioner at real widths, compiled only",
        "",
        f"- date: {header['date']}",
        f"- {header['versions']} (JAX backend), CPU host devices, compile only",
        f"- command: `{header['command']}`",
        *([f"- revision: {rev}"] if rev and not elsewhere else []),
        *([f"- stablehlo_spmd: {elsewhere}"] if elsewhere else []),
        "",
        "Models (keras-hub backbones built from shapes only, bf16 parameters):",
        "",
        *[f"- {m}: {MODELS[m].describe()}" for m in used],
        "",
        "Rule sets: " + "; ".join(f"{name}: {rs.describe}" for name, rs in RULE_SETS.items())
        + " (regexes in benchmarks/scale.py and real_models.py). Programs: sgd (next-token "
        "cross-entropy on f32 logits, untied head, SGD) and adamw (the same with f32 moments). "
        "Cell names: model[-form]-L<layers>-<rules>-<devices>-<program>.",
        "",
        "Forms (how the step writes its layers; the model and its numbers are the same): "
        + "; ".join(f"{name or 'no suffix'}: {text}" for name, text in FORMS.items())
        + ". A loop body's collectives count once per iteration (its trip count).",
        "",
        "Bytes are per device in GB (1e9), counted by stablehlo_spmd/collective_bytes.py. `ours`, "
        "`XLA`, `auto`: in each compiled program's HLO. XLA's CPU backend carries out every "
        "bf16 collective in f32 (none is left in bf16 in any compiled program here), so these "
        "count bf16 traffic twice, on every side alike; `bound CPU` is the bound priced the "
        "same way (floats as f32), and `o/bound` compares ours compiled with it. `ours "
        "emitted` and `auto emitted` count our partitioned StableHLO before XLA compiles it, "
        "in the program's own dtypes, as `bound` does (`emitted o/bound`). `auto` is "
        "`ss.auto_shard` with the same rules as hard constraints, then `ss.partition`. The "
        "bound is the hand count of what the rules force (benchmarks/scale.py's docstring; "
        "by term below). XLA's CPU pipeline forms no reduce-scatter: where its partitioner "
        "reduces a value it then splits (FSDP gradients) it all-reduces and slices, twice a "
        "reduce-scatter's bytes (GPU and TPU pipelines turn those into reduce-scatters).",
        "",
        "Memory: per-device GiB from XLA's memory analysis of each compiled program "
        "(arguments + outputs + temporaries); `>80` marks a plan over an 80 GB accelerator "
        "(80 GiB: H100, A100-80GB). "
        "On CPU, bf16 arithmetic is carried out in f32, so temporaries count up to twice what "
        "a bf16-native backend holds; arguments and outputs are exact. Times in seconds on a "
        "2-core host: `partition` is `ss.partition`, `ours compile` "
        "stablehlo_spmd.runtime.compile, `XLA compile` jit's lower + compile (XLA's "
        "partitioner runs inside it), `auto search` ss.auto_shard. XLA is given the "
        "arguments' and results' shardings only, as jit users do without activation "
        "constraints.",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join("---" if i < TEXT_COLUMNS else "---:" for i in range(len(HEADER))) + "|",
        *["| " + " | ".join(table_row(r)) + " |" for r in results],
        "",
        "![bytes per cell](scale.png)",
        "",
        "## Notes",
        "",
        *[f"- {line}" for line in notes(results) or ["nothing over 80 GB, nothing over "
                                                     f"{BOUND_SLACK}x the bound, no failures"]],
        "",
        "## Bound by term, memory, and each plan's largest collectives",
        "",
        "Bound terms in program dtypes (CPU pricing in brackets). Largest collectives as "
        "compiled: count x kind, per-device operand shape, group size, bytes per device in all.",
        "",
        "```",
        *details(results),
        "```",
    ]
    return "\n".join(lines) + "\n"


def write_chart(results: list[CellResult], path) -> bool:
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no chart (pip install '.[report]')", file=sys.stderr)
        return False
    matplotlib.use("Agg")
    from matplotlib import pyplot

    shown = [r for r in results if not r.failure]
    series = {"ours": [r.ours.bytes for r in shown], "XLA": [r.xla.bytes for r in shown],
              "auto": [r.auto.bytes for r in shown],
              "bound (CPU pricing)": [r.bound_cpu_bytes for r in shown]}
    width = 0.2
    figure, axes = pyplot.subplots(figsize=(max(8.0, 0.9 * len(shown) + 2), 5.2))
    for index, (label, values) in enumerate(series.items()):
        positions = [i + (index - 1.5) * width for i in range(len(shown))]
        axes.bar(positions, [math.nan if v is None else v / GB for v in values], width,
                 label=label)
    axes.set_yscale("log")
    axes.set_ylabel("collective bytes per device, GB, compiled (log scale)")
    axes.set_xticks(range(len(shown)))
    axes.set_xticklabels([r.name for r in shown], rotation=35, ha="right", fontsize=8)
    axes.set_title("Real widths, compiled for CPU host devices: ours, XLA, auto_shard and the "
                   "hand bound", fontsize=10)
    axes.legend(fontsize=8, loc="upper left", ncol=4)
    axes.set_ylim(top=axes.get_ylim()[1] * 4)          # room for the legend
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot.close(figure)
    return True


# ------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", metavar="SUBSTR", default=[],
                        help="cells whose names contain one of these (e.g. llama3-8b-L2 "
                             "mixtral); the report is written only for a whole run or --write")
    parser.add_argument("--layers", nargs="+", default=["2", "full"], metavar="DEPTH",
                        help="'2' and/or 'full' (default both); another number runs the "
                             "full-depth cells at that depth")
    parser.add_argument("--no-xla", action="store_true", help="leave XLA's side out")
    parser.add_argument("--no-auto", action="store_true",
                        help="leave the auto_shard column out")
    parser.add_argument("--jobs", type=int, default=1, help="cells run at once (default 1)")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per cell")
    parser.add_argument("--write", action="store_true",
                        help="write results/scale.md and scale.png even for a partial run")
    parser.add_argument("--sample", action="store_true",
                        help="small widths on 16 host devices, run: numerics against one "
                             "device (exits 1 on a mismatch)")
    parser.add_argument("--list", action="store_true", help="print the cells and exit")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--dump", metavar="DIR", default="",
                        help="write each cell's exported program and both compiled HLOs")
    parser.add_argument("--from-json", metavar="PATH",
                        help="report the results a run wrote with --json instead of running")
    parser.add_argument("--cell", help=argparse.SUPPRESS)      # one cell, in a subprocess
    options = parser.parse_args()

    if options.cell:
        _cell_main(options)
        return
    try:
        import keras_hub  # noqa: F401
    except ImportError as error:
        raise SystemExit(f"scale.py needs keras-hub ({error}): pip install '.[bench]' "
                         "&& pip install --no-deps 'keras-hub==0.32.*'") from None
    if options.sample:
        results = run_sample(options.only)
        if options.json:
            with open(options.json, "w") as out:
                json.dump([dataclasses.asdict(r) | {"ok": r.ok} for r in results], out)
        bad = [r for r in results if not r.ok]
        print(f"sample: {len(results) - len(bad)}/{len(results)} cells match one device",
              file=sys.stderr)
        sys.exit(1 if bad or not results else 0)

    cells = select_cells(options.layers, options.only)
    if options.list or not cells:
        print("\n".join(f"{c.name}  ({c.mesh})" for c in cells) or "no cell matches")
        return
    start, header = time.perf_counter(), run_header()
    if options.from_json:
        with open(options.from_json) as file:
            saved = json.load(file)
        header = saved["header"]
        results = [CellResult.from_json(data) for data in saved["results"]]
        results = [r for r in results if Cell(**r.cell) in cells]
    else:
        with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
            results = list(pool.map(lambda c: run_cell_subprocess(c, options), cells))
    print(text_table(results))
    print()
    for line in notes(results):
        print("!!! " + line)
    print()
    print("\n".join(details(results)))
    print(f"\n{len(results)} cells in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    if options.json:
        with open(options.json, "w") as out:
            json.dump({"header": header, "results": [dataclasses.asdict(r) for r in results]},
                      out)
    whole = not options.only and set(options.layers) == {"2", "full"} \
        and not options.no_xla and not options.no_auto
    if whole or options.write:
        REPORT.write_text(markdown(results, header))
        written = [REPORT] + ([CHART] if write_chart(results, CHART) else [])
        for path in written:
            print(f"wrote {path.relative_to(ROOT)}", file=sys.stderr)
    if any(r.failure or r.ours.failure or r.xla.failure or r.auto.failure for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
