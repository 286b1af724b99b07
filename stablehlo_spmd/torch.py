"""``import stablehlo_spmd.torch as xs``: PyTorch/XLA's SPMD names, for PyTorch users.

The front end itself lives with the JAX one, in `stablehlo_spmd.frontends.torch`;
this module is the short name a PyTorch/XLA script's imports change to.
"""

from stablehlo_spmd.frontends.torch import (
    CompiledFunction, Mesh, SpmdError, clear_sharding, compile, export, mark_sharding)

__all__ = ["CompiledFunction", "Mesh", "SpmdError", "clear_sharding", "compile", "export",
           "mark_sharding"]
