"""Partitioning: one global program's ops rewritten into the per-device program.

`partitioner.Partitioner` holds the walk, the rule-driven path and the
replicated fallback; the other modules register handlers for ops whose
per-device form needs more than new types, one family a module, as XLA's
SPMD partitioner has one visitor method per op kind.  Importing this package
registers them all.
"""

from stablehlo_spmd.partitioning import control, indexing, sorting, windowed  # noqa: F401  (registers handlers)
from stablehlo_spmd.partitioning.partitioner import HANDLERS, Partitioner

__all__ = ["HANDLERS", "Partitioner"]
