"""``spmd-annotate``: attach ``mhlo.sharding`` to a module from partition rules.

For every argument and result of the module's public functions, the first
rule whose pattern matches the value's name (its JAX pytree path, or
``argN`` / ``result[N]`` when the exporter gave none) gives its partition
spec on the rules' mesh.  The pass then writes:

* ``mhlo.sharding`` on each matched argument and result, in XLA's canonical
  text, exactly what ``jax.sharding.NamedSharding`` would give;
* ``spmd.mesh`` and ``mhlo.num_partitions`` on the module.

Shardings the program already carries are accepted as they are: Shardy's
(``sdy.mesh``/``#sdy.sharding``/``sdy.sharding_constraint``, as JAX lowers
them) are imported first, and every existing ``mhlo.sharding`` (arguments,
results, ``custom_call @Sharding`` constraints) must fit the mesh.  An
existing sharding wins over a rule for the same value: it was written by
someone closer to the program.

User errors are reported at the value's location, with a note at the rule
that caused them: a spec longer than the rank (a shorter one leaves the
trailing dimensions replicated, as JAX's ``PartitionSpec`` does), an unknown
or repeated axis, a mesh that disagrees with the module's existing annotations.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jaxlib.mlir import ir

from stablehlo_spmd import diagnostics
from stablehlo_spmd.errors import MeshError, PipelineError, ShardingError
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.module_shardings import (
    MHLO_SHARDING, OPEN_DIMS, PRIORITIES, ShardedValue, checked_mesh, dynamic_shape_error,
    function_values, functions, has_dynamic_shape, import_shardy, is_entry, set_attrs,
    sharding_attr, write_mesh)
from stablehlo_spmd.passes import ModulePass, register_pass
from stablehlo_spmd.rules import Rule, RuleSet, load_rules
from stablehlo_spmd.sharding import Sharding


@register_pass
@dataclasses.dataclass(frozen=True)
class AnnotatePass(ModulePass):
    """Options: `rules` is a rules-file path (or, from Python, a `RuleSet`);
    `mesh` (``"data=4,model=2"``) overrides or supplies the rules' mesh."""

    name: ClassVar[str] = "spmd-annotate"
    description: ClassVar[str] = "attach mhlo.sharding to arguments and results from partition rules"

    rules: "str | RuleSet" = ""
    mesh: str = ""

    def run(self, module: ir.Operation) -> None:
        rule_set = self._rule_set()
        import_shardy(module)
        try:
            mesh = checked_mesh(module, rule_set.mesh)
        except ShardingError as error:
            diagnostics.error(error.location or module.location, error.message)
            return
        if mesh is None:
            diagnostics.error(module.location, "spmd-annotate needs a mesh: give the rules "
                              "file a [mesh] table or pass the 'mesh' option")
            return
        used_rules, updates = set(), []
        for func in functions(module):
            if not is_entry(func):
                continue
            for value in function_values(func):
                rule = rule_set.match(_match_name(value))
                if rule is None:
                    continue
                used_rules.add(rule)
                attr = _sharding_for(value, rule, mesh)
                if attr is not None:
                    updates.append((value, MHLO_SHARDING, attr))
                    # The rule's sharding is the user's whole answer: what
                    # the module's own Shardy sharding left open goes too.
                    updates += [(value, note, None) for note in (OPEN_DIMS, PRIORITIES)
                                if value.get(note) is not None]
        set_attrs(updates)
        write_mesh(module, mesh)
        for rule in rule_set.rules:
            if rule not in used_rules:
                diagnostics.warning(rule.position or module.location,
                                    f"{rule.describe()} matched no argument or result")

    def _rule_set(self) -> RuleSet:
        if isinstance(self.rules, RuleSet):
            rule_set = self.rules
        elif self.rules:
            rule_set = load_rules(self.rules)
        else:
            rule_set = RuleSet(())
        if self.mesh:
            try:
                rule_set = dataclasses.replace(rule_set, mesh=Mesh.from_string(self.mesh))
            except MeshError as error:
                raise PipelineError(f"invalid 'mesh' option of spmd-annotate: {error}") from None
        return rule_set


def _sharding_for(value: ShardedValue, rule: Rule, mesh: Mesh) -> ir.Attribute | None:
    """The attribute `rule` gives `value`, or None (after reporting why) to leave it."""
    if value.rank is None:
        diagnostics.error(value.location, f"{value.describe()} is matched by {rule.describe()} "
                          f"but has no ranked tensor type ({value.type})", ShardingError)
        return None
    try:
        sharding = Sharding.from_spec(mesh, rule.spec_for_rank(value.rank), rank=value.rank,
                                      unreduced=rule.unreduced, reduction=rule.reduction)
        attr = sharding_attr(sharding, value.owner.context)
    except ShardingError as error:
        diagnostics.error(value.location, f"{value.describe()} of type {value.type}: "
                          f"{error.message}")
        if rule.position:
            diagnostics.note(rule.position, f"from {rule.describe()}")
        return None
    if has_dynamic_shape(value) and sharding.to_hlo().kind == "tiled":
        error = dynamic_shape_error(value)
        diagnostics.error(error.location or value.location, error.message, ShardingError)
        if rule.position:
            diagnostics.note(rule.position, f"from {rule.describe()}")
        return None
    existing = value.get(MHLO_SHARDING)
    if existing is not None:
        if existing != attr:
            diagnostics.warning(value.location, f"{value.describe()} keeps its existing sharding "
                                f"{existing}; {rule.describe()} would give {attr}")
        return None
    return attr


def _match_name(value: ShardedValue) -> str:
    if value.name:
        return value.name
    if value.kind == "argument":
        return f"arg{value.index}"
    results = len(ir.FunctionType(ir.TypeAttr(value.owner.attributes["function_type"]).value).results)
    return "result" if results == 1 else f"result[{value.index}]"
