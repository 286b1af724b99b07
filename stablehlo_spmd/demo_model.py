"""A small GPT-style decoder-only transformer in plain ``jax.numpy``.

This is the main end-to-end example for the partitioner and the model
``stablehlo-spmd demo`` runs, shipped in the package so that an installed
demo has it (``examples/transformer.py`` is this module under its examples
name): lower ``train_step`` (or ``forward``) with ``jax.jit(...).lower(...)``
and shard it with the rules in ``demo_rules.toml`` next to this file
(Megatron-style tensor parallelism on ``model``, data parallelism on
``data``).  It is the demo's user code: the collectives the demo lists are
located at lines of this file.

Parameters are a nested dict pytree with readable names.  Layers are kept as a
Python list of dicts (not stacked), so lowered argument names look like
``params['layers'][0]['attn']['wq']``::

    params['embed']                          [vocab, d_model]
    params['pos_embed']                      [seq_len, d_model]
    params['layers'][i]['ln1']['scale'|'bias']       [d_model]
    params['layers'][i]['attn']['wq'|'wk'|'wv']      [d_model, d_model]
    params['layers'][i]['attn']['wo']                [d_model, d_model]
    params['layers'][i]['ln2']['scale'|'bias']       [d_model]
    params['layers'][i]['mlp']['w_in']               [d_model, d_ff]
    params['layers'][i]['mlp']['w_out']              [d_ff, d_model]
    params['ln_f']['scale'|'bias']                   [d_model]
    params['unembed']                        [d_model, vocab]

CLI entry points (``MODULE:FUNCTION``, called with no arguments) return
``(function, example_args)``: ``train_step_example`` and ``forward_example``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class Config:
    vocab: int = 256
    d_model: int = 64
    n_heads: int = 4
    d_ff: int = 256
    n_layers: int = 2
    seq_len: int = 16
    batch: int = 8


# ---------------------------------------------------------------------------
# Parameters
# ---------------------------------------------------------------------------


def _dense(key, fan_in: int, fan_out: int):
    """A weight matrix drawn from N(0, 1/fan_in)."""
    return jax.random.normal(key, (fan_in, fan_out), jnp.float32) / jnp.sqrt(fan_in)


def _layer_norm_params(d_model: int):
    return {
        "scale": jnp.ones((d_model,), jnp.float32),
        "bias": jnp.zeros((d_model,), jnp.float32),
    }


def _init_layer(key, config: Config):
    kq, kk, kv, ko, kin, kout = jax.random.split(key, 6)
    d, f = config.d_model, config.d_ff
    return {
        "ln1": _layer_norm_params(d),
        "attn": {
            "wq": _dense(kq, d, d),
            "wk": _dense(kk, d, d),
            "wv": _dense(kv, d, d),
            "wo": _dense(ko, d, d),
        },
        "ln2": _layer_norm_params(d),
        "mlp": {
            "w_in": _dense(kin, d, f),
            "w_out": _dense(kout, f, d),
        },
    }


def init_params(key, config: Config = Config()):
    """Scaled-normal weights, unit/zero layer norms; layers as a list of dicts."""
    k_embed, k_pos, k_unembed, *k_layers = jax.random.split(key, 3 + config.n_layers)
    return {
        "embed": 0.02 * jax.random.normal(k_embed, (config.vocab, config.d_model)),
        "pos_embed": 0.02 * jax.random.normal(k_pos, (config.seq_len, config.d_model)),
        "layers": [_init_layer(k, config) for k in k_layers],
        "ln_f": _layer_norm_params(config.d_model),
        "unembed": _dense(k_unembed, config.d_model, config.vocab),
    }


# ---------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------


def layer_norm(x, params, eps: float = 1e-5):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * params["scale"] + params["bias"]


def _split_heads(x, n_heads: int):
    """[B, S, D] -> [B, H, S, D/H]."""
    b, s, d = x.shape
    return x.reshape(b, s, n_heads, d // n_heads).transpose(0, 2, 1, 3)


def _merge_heads(x):
    """[B, H, S, Dh] -> [B, S, H*Dh]."""
    b, h, s, dh = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, s, h * dh)


def causal_self_attention(x, params, n_heads: int):
    q = _split_heads(x @ params["wq"], n_heads)
    k = _split_heads(x @ params["wk"], n_heads)
    v = _split_heads(x @ params["wv"], n_heads)
    seq_len, d_head = q.shape[-2], q.shape[-1]

    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(d_head).astype(x.dtype)
    causal_mask = jnp.tril(jnp.ones((seq_len, seq_len), dtype=bool))
    scores = jnp.where(causal_mask, scores, jnp.finfo(scores.dtype).min)
    weights = jax.nn.softmax(scores, axis=-1)

    attended = jnp.einsum("bhqk,bhkd->bhqd", weights, v)
    return _merge_heads(attended) @ params["wo"]


def mlp(x, params):
    return jax.nn.gelu(x @ params["w_in"]) @ params["w_out"]


def decoder_layer(x, params, n_heads: int):
    """Pre-LN block: x + attn(ln1(x)), then x + mlp(ln2(x))."""
    x = x + causal_self_attention(layer_norm(x, params["ln1"]), params["attn"], n_heads)
    x = x + mlp(layer_norm(x, params["ln2"]), params["mlp"])
    return x


def forward(params, tokens, n_heads: int = Config.n_heads):
    """tokens int32[B, S] -> logits float32[B, S, vocab].

    The head count cannot be read off the weight shapes, so it is a static
    Python argument (defaulting to Config's) rather than part of `params`.
    """
    seq_len = tokens.shape[-1]
    x = params["embed"][tokens] + params["pos_embed"][:seq_len]
    for layer_params in params["layers"]:
        x = decoder_layer(x, layer_params, n_heads)
    x = layer_norm(x, params["ln_f"])
    return x @ params["unembed"]


def loss_fn(params, batch):
    """Mean next-token cross-entropy of `batch['targets']` under the model."""
    logits = forward(params, batch["tokens"])
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    target_log_probs = jnp.take_along_axis(
        log_probs, batch["targets"][..., None], axis=-1
    )
    return -jnp.mean(target_log_probs)


def train_step(params, batch, lr: float = 1e-2):
    """One plain-SGD step; returns (new_params, loss)."""
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    new_params = jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
    return new_params, loss


# ---------------------------------------------------------------------------
# Example inputs and CLI entry points
# ---------------------------------------------------------------------------


def example_batch(key, config: Config = Config()):
    """Random tokens; targets are the tokens shifted left by one (wrapping)."""
    tokens = jax.random.randint(
        key, (config.batch, config.seq_len), 0, config.vocab, dtype=jnp.int32
    )
    return {"tokens": tokens, "targets": jnp.roll(tokens, -1, axis=-1)}


def example_args(config: Config = Config()):
    """Deterministic `(params, batch)` derived from PRNGKey(0)."""
    param_key, batch_key = jax.random.split(jax.random.PRNGKey(0))
    return init_params(param_key, config), example_batch(batch_key, config)


def train_step_example():
    return train_step, example_args()


def forward_example():
    params, batch = example_args()
    return forward, (params, batch["tokens"])


def print_training_steps(steps: int = 5) -> None:
    """Train on the example batch for a few steps, printing the loss of each."""
    params, batch = example_args()
    step = jax.jit(train_step)
    for i in range(steps):
        params, loss = step(params, batch)
        print(f"step {i}: loss {float(loss):.4f}")


if __name__ == "__main__":
    print_training_steps()
