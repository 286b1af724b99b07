"""Partitioning: one global program's ops rewritten into the per-device program.

* `partitioner.Partitioner`, the driver: walks the ops once, asks each op's
  strategy for a plan, reshards operands, emits, settles results;
* `context`: `PartitionContext`, the narrow view of the driver every
  strategy takes (partitioner -> strategies -> context, never back);
* `strategy`: the `Plan`/`Strategy` protocol, the registry keyed by op name,
  the rule-driven and replicated defaults, and the factor-axes planning
  every rule-based strategy starts from;
* `skeleton`: the frame around the per-device program (global signature,
  ``sdy.manual_computation``, or GSPMD's manual form where a boundary
  value does not divide);
* one module per family of ops whose per-device form needs more than new
  types: `basic` (constants, iota, sharding constraints, custom calls),
  `windowed` (halo exchange), `reshape` (reshapes that move block
  boundaries), `indexing` (gather, scatter), `sorting` (sort, top-k),
  `reduction` (reduces whose body leaves no partial result), `control`
  (loops, branches, calls, run-time-offset slices), `manual` (the edges of
  manual regions and the collectives already in the program).

Importing this package registers every strategy.
"""

from stablehlo_spmd.partitioning import (  # noqa: F401
    basic, control, indexing, manual, reduction, reshape, sorting, windowed)
from stablehlo_spmd.partitioning.partitioner import Partitioner
from stablehlo_spmd.partitioning.strategy import STRATEGIES

__all__ = ["Partitioner", "STRATEGIES"]
