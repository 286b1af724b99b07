"""The partitioned @main keeps what its arguments and results promise the caller."""

import re

import jax
import jax.numpy as jnp
import numpy as np

import stablehlo_spmd as ss
from stablehlo_spmd import runtime


def _step(params, x):
    return {"w": params["w"] - 0.1 * (x.T @ x)}, (x @ params["w"]).sum()


def _exported():
    params = {"w": jnp.ones((8, 8), jnp.float32)}
    x = jnp.ones((4, 8), jnp.float32)
    return ss.export(jax.jit(_step, donate_argnums=0), params, x)


def _main_signature(text: str) -> str:
    return re.search(r"func\.func public @main\(.*", text).group(0)


def test_donation_and_result_names_survive_partitioning():
    mesh = ss.Mesh.from_string("data=2,model=2")
    rules = [(r"params\['w'\]", (None, "model")), (r"result\[0\]\['w'\]", (None, "model"))]
    signature = _main_signature(ss.partition(_exported(), mesh, rules))
    assert re.search(r"loc\(\"params\['w'\]\"", signature)
    assert "tf.aliasing_output = 0" in signature
    assert "jax.result_info = \"result[0]['w']\"" in signature


def test_a_donation_whose_result_is_laid_out_otherwise_has_no_partner():
    mesh = ss.Mesh.from_string("data=2,model=2")
    rules = [(r"params\['w'\]", (None, "model")), (r"result\[0\]\['w'\]", ("model", None))]
    text = ss.partition(_exported(), mesh, rules)
    signature = _main_signature(text)
    assert "tf.aliasing_output" not in signature
    assert "jax.buffer_donor = true" in signature
    # XLA compiles and runs it, and the caller's value is what the program computes from.
    w = np.arange(64, dtype=np.float32).reshape(8, 8)
    x = np.ones((4, 8), np.float32)
    new_w, total = runtime.compile(text)(w, x)
    expected_w, expected_total = _step({"w": w}, x)
    assert np.allclose(np.asarray(new_w), np.asarray(expected_w["w"]))
    assert np.allclose(np.asarray(total), np.asarray(expected_total))
