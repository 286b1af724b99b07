"""Small JAX programs the partitioner is tested and benchmarked on.

`tests/unit/partitioning/test_partitioner.py` checks each against a single-device
run; `benchmarks/compare_xla.py` measures each against XLA's partitioner.
Both load them from here, so the two always talk about the same programs.
"""

import jax
import jax.numpy as jnp


def mlp(params, x):
    """Two dense layers: Megatron's MLP when w1 is column- and w2 row-sharded."""
    return jnp.tanh(x @ params["w1"]) @ params["w2"]


def attention(params, x, heads: int = 4):
    """One multi-head self-attention block with output projection."""
    b, s, d = x.shape

    def split(t):
        return t.reshape(b, s, heads, d // heads).transpose(0, 2, 1, 3)

    q, k, v = (split(x @ params[name]) for name in ("wq", "wk", "wv"))
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(d // heads)
    weights = jax.nn.softmax(scores, axis=-1)
    out = jnp.einsum("bhqk,bhkd->bhqd", weights, v).transpose(0, 2, 1, 3).reshape(b, s, d)
    return out @ params["wo"]


def sgd_step(params, x, y, lr: float = 0.1):
    """One SGD step of the MLP on a squared error: FSDP when params are split on data."""
    def loss(p):
        return jnp.mean((mlp(p, x) - y) ** 2)

    value, grads = jax.value_and_grad(loss)(params)
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads), value


def uneven_elementwise(x, y):
    return jnp.sin(x) * 2 + y


def uneven_reduce(x):
    return jnp.sum(jnp.exp(x), axis=0)


def chain(u, v, w):
    """(U@V)@W: a partial U@V that a dot with a full W keeps partial."""
    return (u @ v) @ w


def cnn_step(params, x, y, lr: float = 0.1):
    """One SGD step of a conv -> relu -> 2x2 max-pool -> dense net (NHWC)."""
    def loss(p):
        h = jax.lax.conv_general_dilated(x, p["kernel"], (1, 1), "SAME",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
        h = jax.lax.reduce_window(jax.nn.relu(h), -jnp.inf, jax.lax.max,
                                  (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        return jnp.mean((h.reshape(h.shape[0], -1) @ p["dense"] - y) ** 2)

    value, grads = jax.value_and_grad(loss)(params)
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads), value


def moe_layer(params, x):
    """A top-1 mixture-of-experts layer, GShard style (toy capacity: every token).

    x is [groups, tokens, d]; the gate picks an expert per token, dispatch
    and combine are one-hot einsums, and each expert is a 2-layer MLP.
    """
    probs = jax.nn.softmax(jnp.einsum("gtd,de->gte", x, params["gate"]), axis=-1)
    dispatch = jax.nn.one_hot(jnp.argmax(probs, axis=-1), params["w_in"].shape[0], dtype=x.dtype)
    expert_in = jnp.einsum("gte,gtd->egd", dispatch, x)
    hidden = jax.nn.relu(jnp.einsum("egd,edf->egf", expert_in, params["w_in"]))
    expert_out = jnp.einsum("egf,efd->egd", hidden, params["w_out"])
    return jnp.einsum("gte,egd->gtd", dispatch * probs, expert_out)
