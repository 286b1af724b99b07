"""The registry of this project's passes.

A pass is a frozen dataclass with a class-level `name` (its pipeline
mnemonic, e.g. ``spmd-annotate``) and a `run(module)` method.  Its dataclass
fields are its options: ``spmd-annotate{rules=r.toml mesh=data=4}`` builds
``AnnotatePass(rules="r.toml", mesh="data=4")``.  One pass per module, named
after the pass; each registers itself with `register_pass` when imported.

A pass reports user errors through `stablehlo_spmd.diagnostics` and returns;
the pipeline fails the run when any error was reported.  It may also raise an
`SpmdError` for a single fatal problem.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from jaxlib.mlir import ir

from stablehlo_spmd.errors import PipelineError


@dataclasses.dataclass(frozen=True)
class ModulePass:
    """Base of every pass: subclasses add option fields and implement `run`."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""

    def run(self, module: ir.Operation) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def options(cls) -> list[dataclasses.Field]:
        return [f for f in dataclasses.fields(cls) if f.init]

    @classmethod
    def from_options(cls, options: dict[str, str]) -> "ModulePass":
        """Build the pass from textual options, converting each to its field's type."""
        fields = {f.name.replace("_", "-"): f for f in cls.options()}
        values: dict[str, Any] = {}
        for key, text in options.items():
            field = fields.get(key)
            if field is None:
                known = ", ".join(sorted(fields)) or "none"
                raise PipelineError(f"pass '{cls.name}' has no option '{key}' (options: {known})")
            values[field.name] = _convert(cls.name, key, text, field)
        return cls(**values)

    def pipeline_text(self) -> str:
        defaults = type(self)()
        options = [f"{f.name.replace('_', '-')}={getattr(self, f.name)}" for f in self.options()
                   if getattr(self, f.name) != getattr(defaults, f.name)]
        return f"{self.name}{{{' '.join(options)}}}" if options else self.name


def _convert(pass_name: str, key: str, text: str, field: dataclasses.Field) -> Any:
    kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")
    try:
        if kind.startswith("bool"):
            if text.lower() in ("1", "true", "on", "yes", ""):
                return True
            if text.lower() in ("0", "false", "off", "no"):
                return False
            raise ValueError(text)
        if kind.startswith("int"):
            return int(text)
        if kind.startswith("float"):
            return float(text)
    except ValueError:
        raise PipelineError(
            f"option '{key}' of pass '{pass_name}' expects a {kind.split(' ')[0]}, got {text!r}"
        ) from None
    return text


PASS_REGISTRY: dict[str, type[ModulePass]] = {}


def register_pass(cls: type[ModulePass]) -> type[ModulePass]:
    if not cls.name or cls.name in PASS_REGISTRY:
        raise ValueError(f"pass name {cls.name!r} is empty or already registered")
    PASS_REGISTRY[cls.name] = cls
    return cls


def registered_passes() -> dict[str, type[ModulePass]]:
    # Importing the pass modules registers them; done lazily to keep this
    # module free of import cycles.
    from stablehlo_spmd.passes import (  # noqa: F401
        annotate, auto_shard, inline_calls, partition, propagate, rematerialize)
    return PASS_REGISTRY
