"""GSPMD-style pipeline parallelism, written as a single-device program.

The stage weights are stacked on a leading stage dimension and the stage
computation is vmapped over it; a state buffer holds each stage's current
microbatch.  Every step shifts the buffer by one stage
(``concatenate([next_input, state[:-1]])``), runs all stages at once and
collects what the last stage finished.  Sharding the stage dimension of the
weights and of the buffer over a ``stage`` mesh axis is all it takes to run
it as a pipeline: each device holds one stage, and the shift becomes a
collective_permute to the next stage (GSPMD paper, section 3.3).  The
README's "Beyond matmuls" section runs it; tests/unit/partitioning/test_windowed.py
checks it against `sequential` on 4 devices.
"""

import jax
import jax.numpy as jnp
import numpy as np

STAGES, MICROBATCHES, BATCH, WIDTH = 4, 6, 8, 32


def stage(weights, bias, x):
    """One stage: a residual tanh layer."""
    return x + jnp.tanh(x @ weights + bias)


def pipeline(params, inputs):
    """Run `inputs` [microbatches, batch, width] through the stacked stages.

    After ``microbatches + stages - 1`` steps every microbatch has passed
    every stage; the result equals applying the stages one after another.
    """
    weights, bias = params["weights"], params["bias"]
    stages = weights.shape[0]
    microbatches = inputs.shape[0]
    state = jnp.zeros((stages,) + inputs.shape[1:], inputs.dtype)
    outputs = jnp.zeros_like(inputs)

    def step(i, carry):
        state, outputs = carry
        fresh = inputs[jnp.minimum(i, microbatches - 1)]
        state = jnp.concatenate([fresh[None], state[:-1]], axis=0)  # the shift
        state = jax.vmap(stage)(weights, bias, state)
        done = i - (stages - 1)
        outputs = jax.lax.dynamic_update_index_in_dim(
            outputs, state[-1], jnp.maximum(done, 0), axis=0)
        return state, outputs

    _, outputs = jax.lax.fori_loop(0, microbatches + stages - 1, step, (state, outputs))
    return outputs


def sequential(params, inputs):
    """The same computation without a pipeline, for checking."""
    x = inputs
    for s in range(params["weights"].shape[0]):
        x = jax.vmap(lambda m: stage(params["weights"][s], params["bias"][s], m))(x)
    return x


def example_args():
    rng = np.random.default_rng(0)
    params = {"weights": jnp.asarray(rng.standard_normal((STAGES, WIDTH, WIDTH)) / WIDTH ** 0.5,
                                     jnp.float32),
              "bias": jnp.asarray(rng.standard_normal((STAGES, WIDTH)) * 0.1, jnp.float32)}
    inputs = jnp.asarray(rng.standard_normal((MICROBATCHES, BATCH, WIDTH)), jnp.float32)
    return params, inputs
