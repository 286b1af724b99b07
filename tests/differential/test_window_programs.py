"""Differential testing of window and indexing ops: partitioned against one device.

Each hypothesis example (`window_programs.window_programs()`) is a chain of
slice, concatenate, pad, reverse and dynamic_slice ops over one or a few
sharded sources (see window_programs.py for what is drawn and why).  It is
partitioned with ``ss.partition`` (a Shardy-spelled program with its own
mesh, any other with the program's mesh and rules), run on the mesh's
devices with ``ss.run`` and compared with ``ss.run_single_device``.  The
ops only move data, so the comparison is exact, for f32 as for i32.

Budget: ``STABLEHLO_SPMD_DIFF_EXAMPLES`` cases (60 by default, derandomized
so that CI always runs the same ones); ``STABLEHLO_SPMD_LONG=1`` runs 2,000
fresh random ones unless a count is given:

    STABLEHLO_SPMD_LONG=1 STABLEHLO_SPMD_DIFF_EXAMPLES=2000 python3 -m pytest \\
        tests/differential/test_window_programs.py -p no:cacheprovider \\
        --hypothesis-show-statistics -x

A failure is shrunk by hypothesis to a short program; paste it (the printed
``Program(...)``) into test_window_regressions.py.
"""

from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, event, given, settings

from generator import Program
from test_differential import check_program, declares_shardy_mesh
from window_programs import window_programs

LONG = os.environ.get("STABLEHLO_SPMD_LONG", "") not in ("", "0")
EXAMPLES = int(os.environ.get("STABLEHLO_SPMD_DIFF_EXAMPLES") or (2000 if LONG else 60))


def check_window_program(program: Program) -> None:
    """`check_program`, compared bit for bit: these ops compute nothing."""
    check_program(program, assert_exact)


def assert_exact(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal bit for bit; a mismatch names the largest error and the rows
    (indices along dim 0) where the elements differ, which is what tells
    a misplaced piece of a shard from a wrong value."""
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape)
    if np.array_equal(got, want):
        return
    wrong = got != want
    error = np.abs(got.astype(np.float64) - want.astype(np.float64))
    rows = sorted({int(i) for i in np.argwhere(wrong)[:, 0]}) if got.ndim else []
    raise AssertionError(
        f"{what}: {int(wrong.sum())} of {want.size} elements differ, max |error| "
        f"{float(error.max()):g}, rows {rows}\ngot:\n{got}\nwant:\n{want}")


@settings(max_examples=EXAMPLES, deadline=None, derandomize=not LONG, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(window_programs())
def test_partitioned_window_program_matches_single_device(program: Program) -> None:
    event(f"mesh {'x'.join(map(str, program.mesh.mesh_shape))}"
          + (" permuted" if not program.mesh.is_iota else ""))
    if declares_shardy_mesh(program.text):
        event("sdy" + (" with sub-axes" if '":(' in program.text else ""))
    else:
        event("mhlo rules" if program.rules else "mhlo in the text")
    event(f"rank {len(program.arguments[0].shape)}")
    for kind in sorted(set(program.ops)):
        event(f"op: {kind}")
    check_window_program(program)
