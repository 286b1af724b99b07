"""User-facing error types.

Every error a user can cause (bad IR, bad sharding text, bad rules, bad
pipeline) is an `SpmdError`.  The CLI turns these into one located
diagnostic line and exit status 1; the Python API lets them propagate as
typed exceptions carrying the same message.  Anything that is *not* an
`SpmdError` is a bug in this project and keeps its traceback.
"""

from __future__ import annotations


class SpmdError(Exception):
    """An error caused by user input, with an optional source location.

    `location` is a `file:line:col` prefix (or `file` alone) when known.
    """

    def __init__(self, message: str, location: str | None = None):
        super().__init__(message)
        self.message = message
        self.location = location

    def __str__(self) -> str:
        return f"{self.location}: error: {self.message}" if self.location else self.message


class ParseError(SpmdError):
    """Text that is not a valid module: MLIR's parser or verifier refused it,
    or it is empty or binary.  `diagnostics` holds every message, notes
    included, as ``(severity, message, position)``; the error itself is the first."""

    def __init__(self, diagnostics: list[tuple[str, str, str | None]]):
        self.diagnostics = diagnostics
        first = diagnostics[0] if diagnostics else ("error", "unable to parse module", None)
        super().__init__(first[1], first[2])


class ShardingSyntaxError(SpmdError, ValueError):
    """Sharding text (``mhlo.sharding`` or ``sdy``) that does not parse.

    `column` is the 1-based column in the sharding text where parsing failed.
    """

    def __init__(self, message: str, text: str = "", column: int | None = None):
        super().__init__(message)
        self.text = text
        self.column = column


class MeshError(SpmdError, ValueError):
    """A device mesh that is malformed (axis text, sizes, names, device ids),
    or a question about an axis the mesh does not have."""


class ShardingError(SpmdError, ValueError):
    """A well-formed sharding that does not fit its tensor or mesh."""


class RulesError(SpmdError, ValueError):
    """A rules file or rule list that is malformed or names unknown axes."""


class PipelineError(SpmdError, ValueError):
    """A pass pipeline that does not parse, or names an unknown pass or option."""


def not_utf8(data: bytes, error: UnicodeDecodeError, filename: str, what: str) -> tuple[str, str]:
    """(message, ``file:line:col``) for bytes that are not UTF-8, located at the
    first bad byte (columns count bytes, as MLIR's do) so an editor can jump to it."""
    start = error.start
    line = data.count(b"\n", 0, start) + 1
    column = start - (data.rfind(b"\n", 0, start) + 1) + 1
    return (f"byte 0x{data[start]:02x} is not UTF-8: {what} must be UTF-8 text",
            f"{filename}:{line}:{column}")
