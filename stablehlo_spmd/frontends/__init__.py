"""The front ends, which turn a user's program into StableHLO text with named arguments.

    jax.py    a JAX function (`stablehlo_spmd.export`), and ``MODULE:NAME``
              loading for the command line
    torch/    a PyTorch module or training step

The text names every argument by its pytree path in its location
(``loc("params['w1']")``) and every result by ``jax.result_info``: the names
partition rules match.  This file imports no front end, so loading one never
loads another's framework.
"""
