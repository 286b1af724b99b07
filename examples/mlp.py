"""A 2-layer MLP regression model in plain ``jax.numpy``.

The smallest end-to-end example for the partitioner: lower ``train_step`` with
``jax.jit(...).lower(...)`` and shard it data-parallel with ``mlp_rules.toml``.
Lowered argument names are ``params['b1']``, ``params['b2']``, ``params['w1']``,
``params['w2']``, ``x`` and ``y``; results are ``result[0][...]`` (the updated
params) and ``result[1]`` (the scalar loss).

Shapes: x float32[batch, d_in] -> hidden [batch, hidden] -> y float32[batch, d_out].
The output width differs from the input width on purpose, so that a transposed
or mis-sharded weight shows up as a shape error.

CLI entry point (``MODULE:FUNCTION``, called with no arguments):
``train_step_example`` returns ``(train_step, (params, x, y))``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class Config:
    batch: int = 16
    d_in: int = 32
    hidden: int = 64
    d_out: int = 8


def init_params(key, config: Config = Config()):
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (config.d_in, config.hidden)) / jnp.sqrt(config.d_in),
        "b1": jnp.zeros((config.hidden,), jnp.float32),
        "w2": jax.random.normal(k2, (config.hidden, config.d_out)) / jnp.sqrt(config.hidden),
        "b2": jnp.zeros((config.d_out,), jnp.float32),
    }


def predict(params, x):
    hidden = jax.nn.relu(x @ params["w1"] + params["b1"])
    return hidden @ params["w2"] + params["b2"]


def loss(params, x, y):
    """Mean squared error of the predictions against `y`."""
    return jnp.mean(jnp.square(predict(params, x) - y))


def train_step(params, x, y, lr: float = 1e-2):
    """One plain-SGD step; returns (new_params, loss)."""
    loss_value, grads = jax.value_and_grad(loss)(params, x, y)
    new_params = jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
    return new_params, loss_value


def example_args(config: Config = Config()):
    """Deterministic `(params, x, y)` from PRNGKey(0); y is a noisy linear map of x."""
    param_key, x_key, target_key = jax.random.split(jax.random.PRNGKey(0), 3)
    x = jax.random.normal(x_key, (config.batch, config.d_in))
    true_map = jax.random.normal(target_key, (config.d_in, config.d_out)) / jnp.sqrt(config.d_in)
    y = jnp.tanh(x @ true_map)
    return init_params(param_key, config), x, y


def train_step_example():
    return train_step, example_args()


if __name__ == "__main__":
    params, x, y = example_args()
    step = jax.jit(train_step)
    for i in range(5):
        params, loss_value = step(params, x, y)
        print(f"step {i}: loss {float(loss_value):.4f}")
