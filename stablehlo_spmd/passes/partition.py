"""``spmd-partition``: rewrite a propagated module into one per-device program.

The output has the shape ``jax.shard_map`` lowers to, so any PJRT client (and
`jax`) can call it with global arrays: ``@main`` keeps its global argument and
result types with ``sdy.sharding`` attributes, and its body is one
``sdy.manual_computation`` over every mesh axis that holds the per-device
program, with stablehlo collectives (global device ids, one channel each).

The pass checks its input and hands the public function to
`stablehlo_spmd.partitioning`, which owns how each op is partitioned.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jaxlib.mlir import ir

from stablehlo_spmd import diagnostics
from stablehlo_spmd.errors import ShardingError
from stablehlo_spmd.module_shardings import checked_mesh, functions, is_entry
from stablehlo_spmd.partitioning import Partitioner
from stablehlo_spmd.partitioning.windowed import fold_slices_of_pads
from stablehlo_spmd.passes import ModulePass, register_pass


# The upstream passes `ss.partition` runs after ``spmd-partition``: what a
# user's partitioned program is (``spmd-propagate`` counts its trials after
# them too).
CLEANUP_PASSES = ("canonicalize", "cse")


@register_pass
@dataclasses.dataclass(frozen=True)
class PartitionPass(ModulePass):
    name: ClassVar[str] = "spmd-partition"
    description: ClassVar[str] = "rewrite global shapes into per-device shapes with collectives"

    warn_bytes: int = 64 * 2**20

    def run(self, module: ir.Operation) -> None:
        try:
            mesh = checked_mesh(module)
        except ShardingError as error:
            diagnostics.error(error.location or module.location, error.message)
            return
        if mesh is None:
            diagnostics.error(module.location, "spmd-partition needs a propagated module "
                              "(run spmd-annotate and spmd-propagate first)")
            return
        public = [f for f in functions(module) if is_entry(f)]
        if len(public) != 1:
            diagnostics.error(module.location, "spmd-partition expects one public function, "
                              f"found {len(public)}")
            return
        with module.location:  # the default for types and ops built along the way
            fold_slices_of_pads(module)
            Partitioner(module, public[0], mesh, self.warn_bytes).run()
