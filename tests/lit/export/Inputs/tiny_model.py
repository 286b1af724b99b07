"""A two-parameter model for the export lit test."""
import jax.numpy as jnp


def loss(params, x):
    return {"out": jnp.tanh(x @ params["w"]) + params["b"], "norm": (x * x).sum()}


def example():
    params = {"w": jnp.ones((8, 4), jnp.float32), "b": jnp.zeros((4,), jnp.float32)}
    return loss, (params, jnp.ones((2, 8), jnp.float32))


def example_args():
    return example()[1]
