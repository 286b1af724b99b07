"""spmd-inline-calls: each call written out where it is made, as XLA does."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import stablehlo_spmd as ss
from stablehlo_spmd.ir import make_context, parse_module
from stablehlo_spmd.passes.inline_calls import inline_calls


def _nested(x, w):
    inner = jax.jit(lambda h: jnp.tanh(h) * 2.0)
    outer = jax.jit(lambda h, w: inner(h @ w) + inner(h))
    return outer(outer(x, w), w)


def _inlined(text: str) -> tuple[int, str]:
    with make_context() as context:
        module = parse_module(text, "<test>", context)
        count = inline_calls(module.operation)
        return count, module.operation.get_asm(enable_debug_info=False)


def test_nested_calls_are_all_written_out_and_compute_the_same():
    """Two calls of a function that calls another twice: no call left
    (however many inlinings that took: a callee's own calls go first), no
    callee left, and the numbers of the program as exported."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w = rng.standard_normal((16, 16)).astype(np.float32) / 4
    text = ss.export(_nested, x, w)
    assert text.count("call @") == 4   # outer twice in main, inner twice in outer
    count, inlined = _inlined(text)
    assert count >= 4
    assert "call @" not in inlined and "func.func private" not in inlined
    want = ss.run_single_device(text, [x, w])
    got = ss.run_single_device(inlined, [x, w])
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))


def test_a_program_without_calls_is_left_as_it_is():
    text = ss.export(lambda x: jnp.tanh(x) * 2.0, np.ones((4, 4), np.float32))
    count, inlined = _inlined(text)
    assert count == 0
    with make_context() as context:
        assert inlined == parse_module(text, "<test>", context).operation.get_asm(
            enable_debug_info=False)
