"""A training step of residual MLP layers, with nothing recomputed by the user.

The recomputation tests' program (`test_remat.py`, `passes/test_rematerialize.py`):
each layer is ``x + (tanh(x @ w1) * (x @ w2)) @ w3``, the loss the mean square
of the last layer's output, the update plain SGD.
"""

import jax
import jax.numpy as jnp
import numpy as np


def layer(x, p):
    h = jnp.tanh(x @ p["w1"]) * (x @ p["w2"])
    return x + h @ p["w3"]


def step(params, x):
    def loss(params):
        y = x
        for p in params:
            y = layer(y, p)
        return jnp.mean(y * y)
    value, grads = jax.value_and_grad(loss)(params)
    return jax.tree_util.tree_map(lambda a, g: a - 0.1 * g, params, grads), value


def arguments(layers: int, batch: int, width: int, ffn: int, seed: int = 0):
    """(params, x) scaled as initializers scale them, so values stay near 1."""
    rng = np.random.default_rng(seed)
    def weight(rows, columns):
        return (rng.standard_normal((rows, columns)) / np.sqrt(rows)).astype(np.float32)

    params = [{"w1": weight(width, ffn), "w2": weight(width, ffn), "w3": weight(ffn, width)}
              for _ in range(layers)]
    return params, rng.standard_normal((batch, width)).astype(np.float32)
