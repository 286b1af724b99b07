"""Differential testing: random programs, partitioned, against one device.

Each hypothesis example (`generator.programs()`) is a StableHLO module, a
mesh of 2, 4 or 8 devices and shardings for its arguments, results and some
intermediates.  The module is partitioned with ``ss.partition``, run on the
mesh's devices (the first N of the 8 CPU host devices, conftest) with
``ss.run``, and compared with the same module run on one device
(``ss.run_single_device``): exactly for integers and booleans, and for
floats within a tolerance that allows for sums taken in another order.

Budget: ``STABLEHLO_SPMD_DIFF_EXAMPLES`` cases (200 by default, derandomized
so that CI always runs the same ones); ``STABLEHLO_SPMD_LONG=1`` runs 2,000
fresh random ones unless a count is given.  For example:

    STABLEHLO_SPMD_LONG=1 STABLEHLO_SPMD_DIFF_EXAMPLES=5000 \\
        python3 -m pytest tests/differential -p no:cacheprovider --hypothesis-show-statistics

A failure is shrunk by hypothesis to a short program; paste it (the printed
``Program(...)``) into test_regressions.py.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
from hypothesis import HealthCheck, event, given, settings

import stablehlo_spmd as ss
from generator import Program, programs
from stablehlo_spmd.ir import make_context, parse_module

LONG = os.environ.get("STABLEHLO_SPMD_LONG", "") not in ("", "0")
EXAMPLES = int(os.environ.get("STABLEHLO_SPMD_DIFF_EXAMPLES") or (2000 if LONG else 200))


def check_program(program: Program, compare=None) -> None:
    """Partition, run, and compare with the single-device run (`compare`,
    `assert_same` by default).  A program that declares a Shardy mesh is
    partitioned on that mesh, as a user calling ``ss.partition(text)`` on it
    would; any other with the program's mesh and rules."""
    compare = compare or assert_same
    with make_context() as context:  # a generator mistake must not look like a partitioner bug
        parse_module(program.text, "<generated>", context)
    inputs = program.inputs()
    want = ss.run_single_device(program.text, inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ss.SpmdWarning)  # e.g. "gathers the whole dimension"
        if declares_shardy_mesh(program.text):
            partitioned = ss.partition(program.text)
        else:
            partitioned = ss.partition(program.text, program.mesh, program.rules)
    got = ss.run(partitioned, inputs)
    assert len(got) == len(want)
    for index, (g, w) in enumerate(zip(got, want)):
        compare(np.asarray(g), np.asarray(w), f"result #{index}")


def declares_shardy_mesh(text: str) -> bool:
    return "sdy.mesh @" in text


def assert_same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape)
    if want.dtype.kind == "f":
        # Reordered sums differ by a few ulps of the terms summed, which are at
        # most the size of the largest result: an absolute tolerance on that
        # scale, so that a cancellation to ~0 does not count as a mismatch.
        scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * scale, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=not LONG, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(programs())
def test_partitioned_program_matches_single_device(program: Program) -> None:
    event(f"mesh of {program.mesh.size} devices, {program.mesh.rank} axes")
    event("shardings from rules" if program.rules else "shardings in the text")
    for kind in sorted(set(program.ops)):
        event(f"op: {kind}")
    check_program(program)
