"""PyTorch models through the torch front end, against eager torch and XLA's partitioner.

    python3 benchmarks/torch_models.py              # every program; writes results/torch_models.md
    python3 benchmarks/torch_models.py --only gpt2 megatron --repeat 5   # a quick look, no report
    python3 benchmarks/torch_models.py --sample     # CI's sample: GPT-2's SGD step, Megatron
    python3 benchmarks/torch_models.py --platform gpu --mesh data=1   # one GPU: step times only

The models are transformers' GPT-2 and Llama and torchvision's ResNet-18,
code nobody here wrote, built from their configs with tiny sizes and random
weights (nothing is downloaded).  Each is driven as a PyTorch user drives
it, through ``import stablehlo_spmd.torch as xs`` (the PyTorch/XLA-style
front end): the user's function, unmodified, is compiled for a mesh with
rules on its argument names, called, and the torch objects read back with
``state_dict()``.  Programs:

* forward: ``xs.compile(model, batch)``, the module in eval mode (its outputs
  are the program's: the LMs' logits, ResNet's class scores);
* step-adamw / step-sgd: ``loss.backward(); optimizer.step();
  optimizer.zero_grad()`` in train mode, with ``torch.optim.AdamW(lr=1e-3)``
  or ``torch.optim.SGD(lr=0.1, momentum=0.9)`` (ResNet: SGD only; its batch
  norms update their running statistics).

Rule sets, on 8 CPU host devices; the batch is split over ``data`` in each:
megatron (``data=4,model=2``: attention's QKV and the MLP's in-projections
split on their output dim over ``model``, the out-projections on their input
dim, the embedding over its vocabulary; GPT-2's ``Conv1D`` weights are
(in, out), Llama's ``nn.Linear`` weights (out, in)), fsdp (``data=8``: every
weight of rank 2 or more split over ``data`` on its largest dim that 8
divides; ResNet's convolutions so on their output channels) and dp
(``data=8``: weights replicated).  A weight's rule also lays out its
gradient and its optimizer state of the same rank, as arguments and as the
program's results; everything else in the state is replicated.

For each (model, rule set, program):

1. numerics against eager torch on one CPU: two copies of the model
   (``copy.deepcopy`` before anything is compiled) and their optimizers, 3
   steps of ours and 3 eager steps on the same batches; each step's loss is
   compared, and at the end every parameter, buffer and optimizer-state
   tensor (through ``state_dict()``); the forward compares its outputs on 3
   batches.  The figure is ``max|ours - eager| / max|eager|``, worst over the
   tensors (and which).  What float32 itself costs is measured beside it,
   with two more eager copies run through the same steps: one in float64
   (``.double()``, the inputs cast; "eager f32/f64" is eager float32's
   distance from it, the error torch itself makes) and one in float32 from
   weights each moved by one rounding ("eager spread": how far the model
   carries rounding in 3 steps).  A tensor passes when ours is within
   ``TOLERANCE`` (1e-5) of eager, or within ``CONDITIONING`` (10) times the
   largest of: eager f32/f64 and the eager spread on that tensor, and the
   median of eager f32/f64 over all the program's tensors (what float32
   typically costs in that program).  There the model's conditioning, not
   the partitioning, sets the error:

   - GPT-2's attention key bias under AdamW: softmax is invariant to it, its
     gradient is pure rounding noise, and Adam normalizes noise to about
     +-lr, so float32 runs disagree with each other (and with float64) by
     about 1e-3 there.  Milder, AdamW's division by the root of the
     gradient's second moment amplifies the rounding of small gradient
     entries: a few weights (Llama's first down_proj) move by 1e-5 to 4e-5
     under FSDP and Megatron, whose sums run in another order than eager's,
     where eager float32 is 1e-5 from float64.
   - ResNet-18's training step: its last stage's batch norms see 8 values
     per channel (1x1 images), their gradients are ill-conditioned, and at
     lr 0.1 the loss climbs (2.9, 7.3, 10.3); after 3 steps eager float32
     is typically 4e-2 from float64.  The same program unpartitioned, on
     one device, is as far from eager as the partitioned one; after one
     step everything agrees within 3e-5.

   SGD's steps of the language models and every forward stay within 1e-6.
2. benchmarks/compare_xla.py's `run_workload` on the traced program of the
   last step (``step.program_for(args).traced``: the JAX function
   ``(params, buffers, grads, optimizer, lr, args, seed) -> (outputs,
   state)`` that torchax lowered, jitted with ``keep_unused``, with the real
   state as its example arguments and the trace's rules): ours against
   ``jax.jit`` of the same function with the same ``NamedSharding``s,
   collectives counted in both compiled HLOs by one counter, step time as
   the median of alternating runs, per-device memory from both memory
   analyses (see that script's docstring).

A program that raises (the front end refusing a model, say) is reported
with its error and the run goes on; the script exits 1 when any program
failed or any numerics are beyond tolerance.  Printed, and written to
benchmarks/results/torch_models.md (the whole run only): one table, the
summary (geometric mean of the step-time ratios, how many programs move no
more bytes than XLA, the worst numerics), the problems.  On 2 busy cores
the whole run takes about 7 minutes, most of it XLA compiling.

``--platform gpu`` leaves ``JAX_PLATFORMS`` unset, so jax takes the
accelerator, and keeps it simple: only the dp rule set on ``--mesh``
(default ``data=1``, one GPU), ours against XLA's step time in absolute ms;
no eager comparison (XLA's GPU matmuls may use TF32) and no report file.
On one H200 (torch 2.11, jax 0.11.2, torchax 0.0.13 carried as a wheel)
the 8 programs ran at 0.88x to 1.09x XLA's step time (1 to 5 ms a step).
"""

from __future__ import annotations

import os
import sys


def _platform(argv: list[str]) -> str:
    """``--platform``'s value, read before jax is imported (it decides JAX_PLATFORMS)."""
    for index, argument in enumerate(argv):
        if argument == "--platform" and index + 1 < len(argv):
            return argv[index + 1]
        if argument.startswith("--platform="):
            return argument.split("=", 1)[1]
    return "cpu"


if _platform(sys.argv[1:]) != "cpu":
    os.environ["JAX_PLATFORMS"] = ""    # jax chooses (the accelerator); compare_xla keeps it

import argparse  # noqa: E402
import contextlib  # noqa: E402
import copy  # noqa: E402
import dataclasses  # noqa: E402
import importlib.metadata  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import types  # noqa: E402
import warnings  # noqa: E402
from typing import Callable  # noqa: E402

# compare_xla sets XLA_FLAGS (8 host devices) and, unless set above, JAX_PLATFORMS=cpu,
# before it imports jax.
from compare_xla import DEVICES, REPORT_DIR, ROOT, Workload, run_info, run_workload  # noqa: E402
from report import (  # noqa: E402
    UNMATCHED, ProgramResult, failure_lines, measured_cells, ratio_value)

import jax  # noqa: E402
import numpy as np  # noqa: E402

REPORT = REPORT_DIR / "torch_models.md"
SEED = 0
STEPS = 3                       # compared steps (and forward batches) per program
TOLERANCE = 1e-5                # max|ours - eager| / max|eager|, per tensor
CONDITIONING = 10.0             # ... or at most this times eager float32's own error
BATCH, SEQUENCE, VOCABULARY, HIDDEN = 8, 32, 128, 64
IMAGE, CLASSES = (3, 32, 32), 10
ADAMW_LR, SGD_LR, SGD_MOMENTUM = 1e-3, 0.1, 0.9


def allow_torchvision_import() -> None:
    """Let torchvision, and transformers (which imports it when it is installed), load
    beside this CPU torch.

    torchvision 0.28's wheel from PyPI cannot load its C extension beside a CPU
    build of torch 2.13, and ``import torchvision`` then fails with "operator
    torchvision::nms does not exist": at import, its modules
    ``torchvision._meta_registrations`` and ``torchvision._autograd_registrations``
    register meta and autograd kernels for the detection operators (nms,
    roi_align, ...) that the extension would have defined.  Empty modules in
    their place in ``sys.modules`` skip those registrations and nothing else;
    ResNet-18 and the language models never call those operators.  Must run
    before the first import of torchvision or transformers.
    """
    for name in ("torchvision._meta_registrations", "torchvision._autograd_registrations"):
        sys.modules.setdefault(name, types.ModuleType(name))


allow_torchvision_import()

import torch  # noqa: E402
import torch.utils._pytree as torch_pytree  # noqa: E402

import stablehlo_spmd.torch as xs  # noqa: E402


# ------------------------------------------------------------------ models


@dataclasses.dataclass(frozen=True)
class Model:
    name: str
    config: str                                     # what the report says about its size
    build: Callable[[], torch.nn.Module]
    batch: Callable[[torch.Generator], tuple]       # a training step's arguments
    loss: Callable[..., torch.Tensor]               # (module, *batch) -> loss
    forward_args: Callable[[tuple], tuple]          # a step's arguments -> the forward's
    programs: tuple[str, ...]


def _token_batch(generator: torch.Generator) -> tuple:
    return (torch.randint(0, VOCABULARY, (BATCH, SEQUENCE), generator=generator),)


def _image_batch(generator: torch.Generator) -> tuple:
    return (torch.randn((BATCH, *IMAGE), generator=generator),
            torch.randint(0, CLASSES, (BATCH,), generator=generator))


def _language_model_loss(module, ids):
    return module(input_ids=ids, labels=ids).loss


def _classifier_loss(module, images, labels):
    return torch.nn.functional.cross_entropy(module(images), labels)


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(n_embd=HIDDEN, n_layer=2, n_head=4, vocab_size=VOCABULARY,
                        n_positions=SEQUENCE, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        use_cache=False, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=2 * HIDDEN,
                         vocab_size=VOCABULARY, max_position_embeddings=SEQUENCE,
                         use_cache=False, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    return LlamaForCausalLM(config)


def _resnet():
    import torchvision
    return torchvision.models.resnet18(num_classes=CLASSES)


LM_PROGRAMS = ("forward", "step-adamw", "step-sgd")
MODELS = (
    Model("gpt2", f"transformers GPT2LMHeadModel: 2 layers, hidden {HIDDEN}, 4 heads, vocab "
          f"{VOCABULARY}, MLP {4 * HIDDEN}, dropout 0; batch {BATCH} x {SEQUENCE} tokens",
          _gpt2, _token_batch, _language_model_loss, lambda batch: batch, LM_PROGRAMS),
    Model("llama", f"transformers LlamaForCausalLM: 2 layers, hidden {HIDDEN}, 4 heads (2 kv "
          f"heads), MLP {2 * HIDDEN}, vocab {VOCABULARY}; batch {BATCH} x {SEQUENCE} tokens",
          _llama, _token_batch, _language_model_loss, lambda batch: batch, LM_PROGRAMS),
    Model("resnet", f"torchvision resnet18(num_classes={CLASSES}); batch {BATCH} images "
          f"{'x'.join(map(str, IMAGE))}", _resnet, _image_batch, _classifier_loss,
          lambda batch: batch[:1], ("forward", "step-sgd")),
)


def _optimizer(program: str, module: torch.nn.Module) -> torch.optim.Optimizer | None:
    if program == "step-adamw":
        return torch.optim.AdamW(module.parameters(), lr=ADAMW_LR)
    if program == "step-sgd":
        return torch.optim.SGD(module.parameters(), lr=SGD_LR, momentum=SGD_MOMENTUM)
    return None


def _train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                loss_fn: Callable) -> Callable:
    """The user's training step, as a PyTorch user writes it."""
    def train_step(*batch):
        loss = loss_fn(model, *batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss
    return train_step


# ------------------------------------------------------------------ rule sets
# Argument names: params['transformer.h.0.attn.c_attn.weight'], buffers['bn1.running_mean'],
# grads[...], optimizer['<param>']['exp_avg'], lr[0], args[0]; results result[0][i] (the
# function's outputs) and result[1]['params'][...] (the state it leaves).  First
# re.search match wins; a short spec replicates the trailing dims.


def _weight(pattern: str) -> str:
    """`pattern` (the end of a parameter's name) as the parameter, its gradient and its
    optimizer state (exp_avg, momentum_buffer; not AdamW's scalar step), as arguments and
    as results."""
    return pattern + r"'\](?!\['step'\])"


BATCH_RULE = (r"^args\[", ("data",))          # every argument is a batch: ids, images, labels
REPLICATED = (r"^(params|buffers|grads|optimizer|lr|result\[1\])", ())   # the rest of the state


def _outputs_rule(program: str) -> tuple:
    """The forward's outputs (logits, class scores) over `data`; a step's loss replicated."""
    return (r"^result\[0\]", ("data",) if program == "forward" else ())


def megatron(model: Model, module: torch.nn.Module) -> list:
    """Megatron-LM: QKV and MLP in-projections on their output dim, out-projections on
    their input dim, over `model`; the embedding over its vocabulary."""
    if model.name == "gpt2":     # transformers' Conv1D: weight (in, out)
        return [(_weight(r"attn\.c_attn\.weight"), (None, "model")),
                (_weight(r"attn\.c_attn\.bias"), ("model",)),
                (_weight(r"attn\.c_proj\.weight"), ("model", None)),
                (_weight(r"mlp\.c_fc\.weight"), (None, "model")),
                (_weight(r"mlp\.c_fc\.bias"), ("model",)),
                (_weight(r"mlp\.c_proj\.weight"), ("model", None)),
                (_weight(r"\.wte\.weight"), ("model", None))]    # (vocab, hidden), tied head
    if model.name == "llama":    # nn.Linear: weight (out, in)
        return [(_weight(r"self_attn\.[qkv]_proj\.weight"), ("model", None)),
                (_weight(r"self_attn\.o_proj\.weight"), (None, "model")),
                (_weight(r"mlp\.(gate|up)_proj\.weight"), ("model", None)),
                (_weight(r"mlp\.down_proj\.weight"), (None, "model")),
                (_weight(r"embed_tokens\.weight"), ("model", None)),
                (_weight(r"lm_head\.weight"), ("model", None))]
    raise ValueError(f"no Megatron rules for {model.name}")


def fsdp(model: Model, module: torch.nn.Module, size: int = 8) -> list:
    """ZeRO-3 / FSDP: each weight of rank 2 or more split over `data` on its largest dim
    that `size` divides (the first of equals: a convolution's output channels)."""
    rules = []
    for name, parameter in module.named_parameters():
        if parameter.dim() < 2:
            continue
        dims = sorted(range(parameter.dim()), key=lambda d: -parameter.shape[d])
        dim = next((d for d in dims if parameter.shape[d] % size == 0), None)
        if dim is not None:
            rules.append((_weight(r"\['" + re.escape(name)), (None,) * dim + ("data",)))
    return rules


def data_parallel(model: Model, module: torch.nn.Module) -> list:
    return []        # weights replicated (REPLICATED, below)


RULE_SETS = {   # name -> (mesh, weight rules, which models use it)
    "megatron": ("data=4,model=2", megatron, ("gpt2", "llama")),
    "fsdp": ("data=8", fsdp, ("gpt2", "llama", "resnet")),
    "dp": ("data=8", data_parallel, ("gpt2", "llama", "resnet")),
}


def rules_for(model: Model, rule_set: str, program: str, module: torch.nn.Module) -> list:
    _, weights, _ = RULE_SETS[rule_set]
    return [BATCH_RULE, _outputs_rule(program), *weights(model, module), REPLICATED]


# ------------------------------------------------------------------ numerics


@dataclasses.dataclass
class Numerics:
    """Ours against eager float32, beside what float32 itself costs there."""
    loss_error: float | None = None        # worst over the steps; None for a forward
    worst: float = 0.0                     # max|ours - eager| / max|eager|, worst tensor
    worst_tensor: str = ""
    eager_f64: float = 0.0                 # that tensor: eager float32 against float64
    eager_spread: float = 0.0              # that tensor: eager against eager perturbed
    ours_f64: float = 0.0                  # that tensor: ours against float64
    typical_f64: float = 0.0               # eager float32 against float64, median over tensors
    failures: list[str] = dataclasses.field(default_factory=list)


def relative(got, want) -> float:
    """max|got - want| / max|want| (max|got - want| where want is all zeros)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return math.inf
    if not got.size:
        return 0.0
    scale = float(np.max(np.abs(want)))
    difference = float(np.max(np.abs(got - want)))
    return difference / scale if scale else difference


def compare(ours: dict, references: dict[str, dict]) -> Numerics:
    """Every tensor of `ours` against eager float32 (``references['f32']``), by name, judged
    by what float32 itself costs: eager float32 against float64 (``'f64'``) and against
    eager float32 from perturbed weights (``'perturbed'``), on that tensor and, as the
    median over the tensors, on the program as a whole."""
    numerics = Numerics()
    eager, f64, perturbed = references["f32"], references["f64"], references["perturbed"]
    if set(ours) != set(eager):
        numerics.failures.append(f"tensors differ: ours only {sorted(set(ours) - set(eager))}, "
                                 f"eager only {sorted(set(eager) - set(ours))}")
    names = sorted(set(ours) & set(eager))
    eager_f64 = {name: relative(eager[name], f64[name]) for name in names}
    typical = float(np.median(list(eager_f64.values()))) if names else 0.0
    numerics.typical_f64 = typical
    for name in names:
        error = relative(ours[name], eager[name])
        spread = relative(perturbed[name], eager[name])
        ours_f64 = relative(ours[name], f64[name])
        if error > numerics.worst or not numerics.worst_tensor:
            numerics.worst, numerics.worst_tensor = error, name
            numerics.eager_f64, numerics.eager_spread = eager_f64[name], spread
            numerics.ours_f64 = ours_f64
        if not within(error, eager_f64[name], spread, typical):
            numerics.failures.append(
                f"{name}: {error:.2e} from eager (eager float32 is {eager_f64[name]:.2e} from "
                f"float64 and {spread:.2e} from itself perturbed, median {typical:.2e} from "
                f"float64 over the tensors; ours {ours_f64:.2e} from float64)")
    return numerics


def within(error: float, *float32_costs: float) -> bool:
    """Within TOLERANCE, or within CONDITIONING times the largest of what float32 costs."""
    return error <= TOLERANCE or error <= CONDITIONING * max(float32_costs)


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().cpu().to(torch.float64).numpy()


def module_state(module: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> dict:
    """Every parameter, buffer and optimizer-state tensor, through ``state_dict()`` (which
    brings a compiled function's values back from the devices), by name."""
    state = {f"state[{name!r}]": _numpy(t) for name, t in module.state_dict().items()}
    if optimizer is not None:
        names = {id(p): name for name, p in module.named_parameters()}
        order = [p for group in optimizer.param_groups for p in group["params"]]
        for index, entries in optimizer.state_dict()["state"].items():
            for key, value in entries.items():
                if isinstance(value, torch.Tensor):
                    state[f"optimizer[{names[id(order[index])]!r}][{key!r}]"] = _numpy(value)
    return state


def _double(batch: tuple) -> tuple:
    return tuple(t.double() if t.is_floating_point() else t for t in batch)


# ------------------------------------------------------------------ measuring


@dataclasses.dataclass
class Result(ProgramResult):
    numerics: Numerics | None = None   # None: not compared (--platform gpu, or it failed)
    seconds: float = 0.0

    @property
    def numerics_failed(self) -> bool:
        return bool(self.numerics and self.numerics.failures)


def example_arguments(traced, module: torch.nn.Module, optimizer, args: tuple) -> tuple:
    """The traced program's arguments with the real values, as NumPy, in the structure of
    ``traced.in_structs`` ``(params, buffers, grads, optimizer, lr, args, seed)``; the
    random seed (used by dropout, which these models do not draw) is 0."""
    params_s, buffers_s, grads_s, optimizer_s, lr_s, args_s, *rest = traced.in_structs
    parameters, buffers = dict(module.named_parameters()), dict(module.named_buffers())

    def value(tensor, struct):
        array = tensor.detach().cpu().numpy().astype(struct.dtype)
        assert array.shape == tuple(struct.shape), (array.shape, struct.shape)
        return array

    groups = optimizer.param_groups if optimizer is not None else []
    assert len(lr_s) == len(groups), (len(lr_s), len(groups))
    return ({name: value(parameters[name], s) for name, s in params_s.items()},
            {name: value(buffers[name], s) for name, s in buffers_s.items()},
            {name: value(parameters[name].grad, s) for name, s in grads_s.items()},
            {name: {key: value(optimizer.state[parameters[name]][key], s)
                    for key, s in entries.items()} for name, entries in optimizer_s.items()},
            [np.float32(group["lr"]) for group in groups],
            [value(t, s) for t, s in zip(args, args_s)],
            *jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), rest))


def _perturbed(module: torch.nn.Module) -> torch.nn.Module:
    """`module` with each parameter moved by one float32 rounding (2**-24 relative, random
    sign): a run from it shows how far this model carries rounding in STEPS steps."""
    generator = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for parameter in module.parameters():
            signs = torch.randint(0, 2, parameter.shape, generator=generator) * 2 - 1
            parameter.mul_(1 + 2.0 ** -24 * signs.to(parameter.dtype))
    return module


def _run_steps(model: Model, program: str, base: torch.nn.Module, compiled_fn: Callable,
               ours: torch.nn.Module, ours_optimizer, batches: list, numerics: bool):
    """STEPS calls of ours and, with `numerics`, of eager copies of `base` (float32, float64
    and float32 perturbed); returns the comparison."""
    def outputs(value):
        return [_numpy(t) for t in torch_pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]

    references = {}
    if numerics:
        for kind, convert in (("f32", None), ("f64", lambda m: m.double()),
                              ("perturbed", _perturbed)):
            module = copy.deepcopy(base)
            module = convert(module) if convert else module
            optimizer = _optimizer(program, module)
            fn = module if program == "forward" else _train_step(module, optimizer, model.loss)
            references[kind] = (module, optimizer, fn)
    ours_out, reference_out = [], {kind: [] for kind in references}
    for batch in batches:
        args = model.forward_args(batch) if program == "forward" else batch
        ours_out.append(outputs(compiled_fn(*args)))
        for kind, (_, _, fn) in references.items():
            with torch.no_grad() if program == "forward" else contextlib.nullcontext():
                reference_out[kind].append(
                    outputs(fn(*(_double(args) if kind == "f64" else args))))
    if not numerics:
        return None
    if program == "forward":
        def by_name(steps):
            return {f"batch {i} output {j}": out for i, step in enumerate(steps)
                    for j, out in enumerate(step)}
        return compare(by_name(ours_out), {k: by_name(v) for k, v in reference_out.items()})
    result = compare(module_state(ours, ours_optimizer),
                     {kind: module_state(module, optimizer)
                      for kind, (module, optimizer, _) in references.items()})
    for index, got in enumerate(ours_out):
        losses = {kind: steps[index][0] for kind, steps in reference_out.items()}
        error = relative(got[0], losses["f32"])
        result.loss_error = max(result.loss_error or 0.0, error)
        eager_f64 = relative(losses["f32"], losses["f64"])
        spread = relative(losses["perturbed"], losses["f32"])
        if not within(error, eager_f64, spread):
            result.failures.append(f"loss of step {index + 1}: {error:.2e} from eager (eager "
                                   f"float32 is {eager_f64:.2e} from float64 and {spread:.2e} "
                                   "from itself perturbed)")
    return result


def torch_mesh(text: str) -> xs.Mesh:
    """``data=4,model=2`` as PyTorch/XLA spells a mesh: ``Mesh(device_ids, shape, names)``."""
    axes = [part.split("=") for part in text.split(",")]
    shape = tuple(int(size) for _, size in axes)
    return xs.Mesh(list(range(math.prod(shape))), shape, tuple(name for name, _ in axes))


def measure(model: Model, rule_set: str, program: str, mesh: str, repeat: int,
            numerics: bool = True, rtol: float = 1e-4, atol: float = 1e-4) -> Result:
    result = Result(model.name, rule_set, program, mesh)
    start = time.perf_counter()
    try:
        torch.manual_seed(SEED)
        base = model.build()
        base.train(program != "forward")
        generator = torch.Generator().manual_seed(SEED)
        batches = [model.batch(generator) for _ in range(STEPS)]
        ours = copy.deepcopy(base)
        ours_optimizer = _optimizer(program, ours)
        rules = rules_for(model, rule_set, program, ours)
        fn = ours if program == "forward" else _train_step(ours, ours_optimizer, model.loss)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled_fn = xs.compile(fn, mesh=torch_mesh(mesh), rules=rules)
            result.numerics = _run_steps(model, program, base, compiled_fn, ours,
                                         ours_optimizer, batches, numerics)
            last = model.forward_args(batches[-1]) if program == "forward" else batches[-1]
            traced = compiled_fn.program_for(last).traced
        result.unmatched_rules = {found.group(0) for w in caught
                                  if (found := re.search(f"rule .* {UNMATCHED}", str(w.message)))}
        if result.numerics_failed:
            print(f"!!! NUMERICS: {result.name}: " + "; ".join(result.numerics.failures[:5]),
                  file=sys.stderr, flush=True)
        arguments = example_arguments(traced, ours, ours_optimizer, last)
        # Jitted with keep_unused, as the trace exported it: an input the program never reads
        # (Llama's rotary `original_inv_freq`, ResNet's `num_batches_tracked` in eval) stays
        # an argument, so the arguments line up with `traced.in_structs` and the rules.
        jitted = jax.jit(traced.program, keep_unused=True)
        workload = Workload(result.name.replace(" ", "-"), lambda: (jitted, arguments),
                            mesh, traced.rules, rtol=rtol, atol=atol)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result.row = run_workload(workload, repeat, "ours", False)
    except Exception as error:  # noqa: BLE001  (one program's failure is reported, not fatal)
        result.failure = f"{type(error).__name__}: {' '.join(str(error).split())[:400]}"
        print(f"!!! FAILED: {result.name}: {result.failure}", file=sys.stderr, flush=True)
        traceback.print_exc(limit=-4, file=sys.stderr)
    result.seconds = time.perf_counter() - start
    return result


# ------------------------------------------------------------------ report

HEADER = ("model", "program", "rules", "mesh", "coll ours", "coll XLA", "bytes ours",
          "bytes XLA", "bytes o/x", "step ms ours", "step ms XLA", "step o/x", "memory ours",
          "memory XLA", "memory o/x", "loss err", "state err", "worst tensor", "eager f32/f64",
          "eager spread", "median f32/f64")
LEFT = 4      # columns aligned left


def _error(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.1e}"


def _cells(result: Result) -> tuple[str, ...]:
    row, numerics = result.row, result.numerics
    base = (result.model, result.program, result.rules, result.mesh)
    if numerics is None:
        checks = ("n/a",) * 6
    else:
        state = _error(numerics.worst) + (" FAIL" if numerics.failures else "")
        checks = (_error(numerics.loss_error), state, numerics.worst_tensor,
                  _error(numerics.eager_f64), _error(numerics.eager_spread),
                  _error(numerics.typical_f64))
    if row is None:
        blank = ["FAILED" if h in ("coll ours", "step ms ours") else ""
                 for h in HEADER[len(base):len(HEADER) - len(checks)]]
        return base + tuple(blank) + checks
    return base + measured_cells(row) + checks


def problems(results: list[Result]) -> list[str]:
    """One line per program that failed or whose numerics are beyond tolerance, and one per
    rule that matched nothing in any program of its (model, rule set)."""
    lines = []
    groups: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        if r.unmatched_rules is not None:
            groups.setdefault((r.model, r.rules), []).append(r)
    for (model, rule_set), runs in groups.items():
        for warning in sorted(set.intersection(*(r.unmatched_rules for r in runs))):
            lines.append(f"{model} {rule_set}: {warning} in any program")
    lines += [f"{r.name}: NUMERICS beyond tolerance: " + "; ".join(r.numerics.failures)
              for r in results if r.numerics_failed]
    return lines + failure_lines(results)


@dataclasses.dataclass(frozen=True)
class Summary:
    programs: int
    measured: int
    failed: int
    numerics_failed: int
    step_geomean: float | None
    bytes_at_most_xla: int
    worst: Result | None

    def describe(self) -> str:
        geomean = "n/a" if self.step_geomean is None else f"{self.step_geomean:.2f}"
        text = (f"{self.programs} programs ({self.failed} failed, {self.numerics_failed} with "
                f"numerics beyond tolerance): step time ours/XLA geometric mean {geomean}; bytes "
                f"<= XLA on {self.bytes_at_most_xla}/{self.measured}")
        if self.worst is not None:
            n = self.worst.numerics
            text += (f"; worst numerics {n.worst:.1e} ({self.worst.name}, {n.worst_tensor}; "
                     f"eager float32 is {_error(n.eager_f64)} from float64 and "
                     f"{_error(n.eager_spread)} from itself perturbed there)")
        return text


def summarize(results: list[Result]) -> Summary:
    rows = [r.row for r in results if r.row is not None]
    steps = [s for r in rows if (s := ratio_value(r.ours_ms, r.xla_ms))]
    compared = [r for r in results if r.numerics is not None]
    return Summary(
        programs=len(results), measured=len(rows),
        failed=sum(bool(r.failure) for r in results),
        numerics_failed=sum(r.numerics_failed for r in results),
        step_geomean=math.exp(sum(map(math.log, steps)) / len(steps)) if steps else None,
        bytes_at_most_xla=sum(r.ours_bytes <= r.xla_bytes for r in rows),
        worst=max(compared, key=lambda r: r.numerics.worst) if compared else None)


STEP_ONLY = ("model", "program", "rules", "mesh", "step ms ours", "step ms XLA", "step o/x",
             "memory ours", "memory XLA", "memory o/x")   # --platform gpu: no numerics, no bytes


def text_table(results: list[Result], header: tuple[str, ...] = HEADER) -> str:
    positions = [HEADER.index(name) for name in header]
    table = [tuple(_cells(r)[i] for i in positions) for r in results]
    widths = [max(len(str(row[i])) for row in table + [header]) for i in range(len(header))]

    def line(cells):
        return " | ".join(str(c).ljust(w) if i < LEFT or header[i] == "worst tensor"
                          else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(header), "-" * len(line(header)), *map(line, table)])


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def markdown(results: list[Result], info, summary: Summary) -> str:
    versions = ", ".join(f"{name} {_version(name)}" for name in
                         ("torch", "torchax", "transformers", "torchvision", "jax", "jaxlib"))
    lines = [
        "# PyTorch models: the torch front end against eager torch and XLA's partitioner",
        "",
        f"- date: {info.date}",
        f"- {versions}",
        f"- devices: {info.devices} ({info.platform})",
        f"- command: `{info.command}`",
        *([f"- revision: {info.revision}"] if info.revision else []),
        f"- timing: median of {info.repeat} alternating runs per side",
        "",
        "Models (random weights, nothing downloaded):",
        "",
        *[f"- {m.name}: {m.config}" for m in MODELS],
        "",
        "Programs, each the user's torch code through `import stablehlo_spmd.torch as xs`: "
        "`forward` (`xs.compile(model, batch)`, eval mode) and `step-adamw` / `step-sgd` "
        "(`loss.backward(); optimizer.step(); optimizer.zero_grad()` in train mode, "
        f"`AdamW(lr={ADAMW_LR:g})` or `SGD(lr={SGD_LR:g}, momentum={SGD_MOMENTUM:g})`). "
        "Rule sets: megatron (`data=4,model=2`: QKV and MLP in-projections on their output "
        "dim, out-projections on their input dim, the embedding on its vocabulary, over "
        "`model`), fsdp (`data=8`: each weight of rank >= 2 on its largest dim that 8 divides) "
        "and dp (`data=8`, weights replicated); the batch over `data` in each, a weight's "
        "rule also lays out its optimizer state; the regexes are in benchmarks/torch_models.py.",
        "",
        f"**Summary:** {summary.describe()}.",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join("---" if i < LEFT or h == "worst tensor" else "---:"
                       for i, h in enumerate(HEADER)) + "|",
        *["| " + " | ".join(c.replace("|", "\\|") for c in _cells(r)) + " |" for r in results],
        "",
        "Ours is the program `xs.compile` traced (torch's autograd and optimizer through "
        "`make_fx`, lowered by torchax), partitioned by `ss.partition` and compiled by "
        "`stablehlo_spmd.runtime.compile`; XLA's is `jax.jit` of the same JAX function with "
        "the same `NamedSharding`s, both measured by benchmarks/compare_xla.py's "
        "`run_workload` on the last step's program and state. Collectives (AR all-reduce, AG "
        "all-gather, RS reduce-scatter, A2A all-to-all, CP collective-permute) are counted in "
        "each compiled program's HLO; bytes are per device; o/x is ours / XLA. step is each "
        "side's public call on arrays already on the devices; memory the per-device total of "
        "each compiled program's memory analysis.",
        "",
        f"Numerics: {STEPS} steps (a forward: {STEPS} batches) of ours against the same in "
        "eager torch on one CPU, from copies of the same model. `loss err` is the worst "
        "step's relative loss difference; `state err` the worst `max|ours - eager| / "
        "max|eager|` over every parameter, buffer and optimizer-state tensor after the last "
        "step (a forward: over its outputs), in `worst tensor`. What float32 itself costs "
        "there, for that tensor: `eager f32/f64` is the same measure between eager float32 "
        "and an eager float64 run (`.double()`, the inputs cast), the error torch itself "
        "makes; `eager spread` between eager float32 and eager float32 from weights each "
        "moved by one rounding (2^-24 relative), how far the model carries rounding; "
        "`median f32/f64` the median of eager float32's distance from float64 over all the "
        "program's tensors, what float32 typically costs in it. A tensor passes within "
        f"{TOLERANCE:g}, or within {CONDITIONING:g}x the largest of those three (a loss: of "
        "the first two), FAIL otherwise: there the model's conditioning, not the "
        "partitioning, sets the error (GPT-2's attention key bias under AdamW; ResNet's "
        "training step, whose batch norms see 8 values per channel in the last stage).",
    ]
    found = problems(results)
    lines += ["", "## Failures and numerics beyond tolerance", "",
              *([f"- {line}" for line in found] or ["none"])]
    return "\n".join(lines) + "\n"


def to_json(result: Result) -> dict:
    row, n = result.row, result.numerics
    return {
        "name": result.name, "model": result.model, "program": result.program,
        "rules": result.rules, "mesh": result.mesh, "seconds": result.seconds,
        "ok": not result.failure and not result.numerics_failed,
        "failure": result.failure,
        "numerics": None if n is None else dataclasses.asdict(n),
        "ours_bytes": None if row is None else row.ours_bytes,
        "xla_bytes": None if row is None else row.xla_bytes,
        "ours_ms": None if row is None else row.ours_ms,
        "xla_ms": None if row is None else row.xla_ms,
        "ours_memory": None if row is None or row.ours_memory is None else row.ours_memory.total,
        "xla_memory": None if row is None or row.xla_memory is None else row.xla_memory.total,
    }


# ------------------------------------------------------------------ main

SAMPLE = ("gpt2", "megatron", "step-sgd")      # CI's sample (tests/benchmarks/)


def _selected(only: set[str], model: str, rule_set: str, program: str) -> bool:
    """--only: within a kind (models, rule sets, programs) any named one; across kinds, all."""
    for kind, value in (({m.name for m in MODELS}, model), (set(RULE_SETS), rule_set),
                        ({p for m in MODELS for p in m.programs}, program)):
        named = only & kind
        if named and value not in named:
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", default=(),
                        help="models, rule sets or programs to run (e.g. gpt2 megatron "
                             "step-sgd: within a kind any, across kinds all); the report is "
                             "written only when everything runs")
    parser.add_argument("--sample", action="store_true",
                        help="CI's sample: --only " + " ".join(SAMPLE) + ", --repeat 3")
    parser.add_argument("--repeat", type=int, default=None,
                        help="timed runs of each executable per program (default 10)")
    parser.add_argument("--platform", choices=("cpu", "gpu"), default="cpu",
                        help="cpu (default): 8 host devices, every rule set, numerics against "
                             "eager torch; gpu: jax's accelerator, the dp rule set on --mesh, "
                             "step times only")
    parser.add_argument("--mesh", default="data=1",
                        help="with --platform gpu: the mesh (default data=1, one GPU)")
    parser.add_argument("--json", metavar="PATH", default="",
                        help="also write each program's result as JSON to PATH")
    options = parser.parse_args()
    only = set(options.only) | (set(SAMPLE) if options.sample else set())
    repeat = options.repeat or (3 if options.sample else 10)
    known = ({m.name for m in MODELS} | set(RULE_SETS)
             | {p for m in MODELS for p in m.programs})
    if only - known:
        parser.error(f"--only: unknown {', '.join(sorted(only - known))} (known: "
                     f"{', '.join(sorted(known))})")
    gpu = options.platform == "gpu"
    if not gpu and len(jax.devices()) < DEVICES:
        raise SystemExit(f"need {DEVICES} devices; XLA_FLAGS was set too late")
    jax.block_until_ready(jax.jit(lambda x: x + 1)(1.0))   # the backend's one-time start-up
    import transformers
    transformers.logging.set_verbosity_error()   # tiny vocabularies, an unset loss_type

    results = []
    for model in MODELS:
        for rule_set, (mesh, _, used_by) in RULE_SETS.items():
            if model.name not in used_by or (gpu and rule_set != "dp"):
                continue
            for program in model.programs:
                if not _selected(only, model.name, rule_set, program):
                    continue
                result = measure(model, rule_set, program, options.mesh if gpu else mesh,
                                 repeat, numerics=not gpu,
                                 rtol=1e-2 if gpu else 1e-4, atol=1e-2 if gpu else 1e-4)
                results.append(result)
                print(f"  {result.name}: {result.seconds:.1f} s", file=sys.stderr, flush=True)
    info = run_info(repeat, "ours")
    summary = summarize(results)
    if gpu:
        print(f"device: {jax.devices()[0].device_kind} ({jax.devices()[0].platform}); "
              f"median of {repeat} alternating runs per side")
    print(text_table(results, STEP_ONLY if gpu else HEADER))
    print()
    print("summary: " + summary.describe())
    for line in problems(results):
        print("!!! " + line)
    if options.json:
        with open(options.json, "w") as f:
            json.dump([to_json(r) for r in results], f, indent=1)
    if not only and not gpu:
        REPORT.write_text(markdown(results, info, summary))
        print(f"wrote {REPORT.relative_to(ROOT)}", file=sys.stderr)
    if summary.failed or summary.numerics_failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
