"""Located diagnostics, collected the way ``mlir-opt`` reports them.

Passes report problems with `error`, `warning` and `note` against an MLIR
location; the engine that is current (a context variable, so nested pipelines
and threads do not mix) records them as `Diagnostic` values printed as
``file:line:col: error: message``.  The CLI prints them and exits 1 on errors,
``--verify-diagnostics`` matches them against ``expected-*`` comments, and the
Python API raises the first error as an `SpmdError` and turns warnings into
Python warnings.  MLIR's own diagnostics (parser, verifier, upstream passes)
are converted into the same values so every consumer sees one stream.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import sys
from typing import Iterator

from jaxlib.mlir import ir

from stablehlo_spmd.errors import SpmdError
from stablehlo_spmd.ir import source_position

SEVERITIES = ("error", "warning", "note", "remark")


@dataclasses.dataclass(frozen=True)
class Diagnostic:
    severity: str
    message: str
    position: str | None = None  # "file:line:col", or a bare file name
    # The SpmdError subclass the API raises for this error (RulesError, ...);
    # not part of what the diagnostic says, so not compared.
    kind: type[SpmdError] | None = dataclasses.field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        prefix = f"{self.position}: " if self.position else ""
        return f"{prefix}{self.severity}: {self.message}"

    @property
    def file(self) -> str | None:
        parts = (self.position or "").rsplit(":", 2)
        return parts[0] if len(parts) == 3 else self.position

    @property
    def line(self) -> int | None:
        parts = (self.position or "").rsplit(":", 2)
        return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


class SpmdWarning(UserWarning):
    """A located warning from a pass, raised through Python's warnings module."""


class DiagnosticEngine:
    """Collects the diagnostics of one run."""

    def __init__(self) -> None:
        self.diagnostics: list[Diagnostic] = []

    def emit(self, severity: str, where: "ir.Location | str | None", message: str,
             kind: type[SpmdError] | None = None) -> Diagnostic:
        position = where if isinstance(where, str) or where is None else source_position(where)
        if kind is None and severity == "error":
            # A pass that reports an error while handling a typed one (``except
            # ShardingError: diagnostics.error(...)``) is reporting that error:
            # the API should raise it with its type, not as a bare SpmdError.
            handled = sys.exc_info()[1]
            kind = type(handled) if isinstance(handled, SpmdError) else None
        diagnostic = Diagnostic(severity, message, position, kind)
        self.diagnostics.append(diagnostic)
        return diagnostic

    def error(self, where, message: str, kind: type[SpmdError] | None = None) -> Diagnostic:
        return self.emit("error", where, message, kind)

    def warning(self, where, message: str) -> Diagnostic:
        return self.emit("warning", where, message)

    def note(self, where, message: str) -> Diagnostic:
        return self.emit("note", where, message)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    def raise_if_errors(self) -> None:
        errors = self.errors
        if errors:
            first = errors[0]
            # Only kinds built from (message, location) can be rebuilt here;
            # the others (ParseError, ShardingSyntaxError) carry more.
            kind = first.kind
            if kind is None or kind.__init__ is not SpmdError.__init__:
                kind = SpmdError
            raise kind(first.message, first.position)


_CURRENT: contextvars.ContextVar[DiagnosticEngine | None] = contextvars.ContextVar(
    "stablehlo_spmd_diagnostics", default=None)


def current() -> DiagnosticEngine:
    """The engine of the run in progress (a throwaway one outside any run)."""
    engine = _CURRENT.get()
    return engine if engine is not None else DiagnosticEngine()


@contextlib.contextmanager
def collecting(engine: DiagnosticEngine | None = None) -> Iterator[DiagnosticEngine]:
    engine = engine or DiagnosticEngine()
    token = _CURRENT.set(engine)
    try:
        yield engine
    finally:
        _CURRENT.reset(token)


def error(where, message: str, kind: type[SpmdError] | None = None) -> Diagnostic:
    return current().error(where, message, kind)


def warning(where, message: str) -> Diagnostic:
    return current().warning(where, message)


def note(where, message: str) -> Diagnostic:
    return current().note(where, message)


def remark(where, message: str) -> Diagnostic:
    return current().emit("remark", where, message)


def from_mlir(diagnostic: "ir.Diagnostic | ir.DiagnosticInfo") -> list[Diagnostic]:
    """MLIR's diagnostic (and its notes) as our values."""
    severity = str(diagnostic.severity).rsplit(".", 1)[-1].lower()
    result = [Diagnostic(severity, diagnostic.message, source_position(diagnostic.location))]
    for attached in diagnostic.notes:
        result.extend(from_mlir(attached))
    return result
