"""The oracle the partitioning tests share: a JAX function partitioned by
the project and run on 8 CPU devices, against the same function run on one."""

import numpy as np

import stablehlo_spmd as ss


def partition_and_check(fn, args, mesh, rules, tolerance=None) -> str:
    """Partition ``fn(*args)`` with `rules` on `mesh`, run it, and check every
    output against the single-device run: exactly, or to `tolerance`
    (relative and absolute) where given.  Returns the partitioned text."""
    text = ss.export(fn, *args)
    partitioned = ss.partition(text, mesh, rules)
    got = ss.run(partitioned, list(args))
    want = ss.run_single_device(text, list(args))
    assert len(got) == len(want)
    for index, (g, w) in enumerate(zip(got, want)):
        if tolerance is None:
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=f"output {index}")
        else:
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=tolerance,
                                       atol=tolerance, err_msg=f"output {index}")
    return partitioned
