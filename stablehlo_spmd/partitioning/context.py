"""What a strategy sees of the driver: `PartitionContext`.

Every strategy function (``plan(p, op)``, ``emit_local(p, op, plan,
operands)`` and the helpers they share in `strategy` and the per-op modules)
takes the driver as ``p``.  It is typed as this narrow protocol, not as
`partitioner.Partitioner`, so that the dependency runs one way:
``partitioner -> strategy modules -> context``.  The driver imports the
strategies to find and run them; the strategies import only this module,
and no strategy can reach for driver state the protocol does not list.
`Partitioner` satisfies the protocol structurally (it asserts so when made).

The module also owns the one driver routine a strategy calls itself,
`erase_unused`: the driver runs it over the per-device program it built,
and `control` over each per-device function it outlines for a call.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from jaxlib.mlir import ir

from stablehlo_spmd.collectives import Emitter
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.sharding import Sharding

# Block-argument and yielded-value shardings of one region (None: replicated).
RegionShardings = tuple["Sequence[Sharding] | None", "Sequence[Sharding] | None"]


@runtime_checkable
class PartitionContext(Protocol):
    """The members of the driver that strategies use, and no others."""

    mesh: Mesh                             # the mesh the program is partitioned over
    axis_size: dict[str, int]              # each mesh axis' size, by name
    emitter: Emitter                       # emits the collectives (reshards, halos, masks)
    module: ir.Operation                   # the module, where outlined functions go
    callees: dict[str, ir.Operation]       # the module's functions, by symbol (calls' callees)
    outlined: dict[tuple, str]             # (callee, arg, result shardings) -> per-device symbol
    local: dict[ir.Value, ir.Value]        # each global value's per-device value
    shardings: dict[ir.Value, Sharding]    # the layout each per-device value has
    rule_plans: dict[tuple, tuple]         # `strategy._cheapest_rule_plan`'s cache

    def result_shardings(self, op: ir.Operation) -> list[Sharding]:
        """The shardings propagation gave `op`'s results (replicated where none)."""
        ...

    def declared(self, value) -> Sharding | None:
        """The sharding a function's argument or result is declared with."""
        ...

    def bind(self, old: ir.Value, new: ir.Value, sharding: Sharding | None) -> None:
        """Record `new` as `old`'s per-device value, laid out as `sharding`."""
        ...

    def emit(self, op: ir.Operation) -> None:
        """Emit `op`'s per-device form here (a body the strategy walks itself)."""
        ...

    def to(self, value: ir.Value, target: Sharding) -> ir.Value:
        """`value`'s per-device form resharded to `target`, emitted here."""
        ...

    def move_bytes(self, value: ir.Value, target: Sharding) -> float:
        """The bytes `to(value, target)` will move: what a plan is priced with."""
        ...

    def made_from_constants(self, value: ir.Value) -> str | None:
        """The op making `value` where it is made from constants alone, else None."""
        ...

    def create(self, op: ir.Operation, operands: Sequence[ir.Value], result_types,
               regions: Sequence[RegionShardings] | None = None) -> ir.Operation:
        """`op` again on per-device operands and types, its regions per device."""
        ...


# Ops whose effect is more than their results: never erased unused.
EFFECTFUL = frozenset({
    "stablehlo.custom_call", "stablehlo.infeed", "stablehlo.outfeed", "stablehlo.send",
    "stablehlo.recv", "stablehlo.while", "stablehlo.if", "stablehlo.case", "func.call",
})


def erase_unused(block: ir.Block) -> None:
    """Erase the ops of `block` (and of the regions in it) whose results
    nothing reads: a value made again where it was needed
    (`Partitioner.rebuilt`) leaves its first, moved form unused, and an
    unused collective is not free.  Walking each block backwards sees users
    before what they read, so one walk clears whole chains."""
    for op in reversed(list(block.operations)):
        op = op.operation
        for region in op.regions:
            for inner in region.blocks:
                erase_unused(inner)
        if op.results and op.name not in EFFECTFUL and op.name.startswith("stablehlo.") and \
                not any(True for result in op.results for _ in result.uses):
            op.erase()
