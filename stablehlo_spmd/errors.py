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


class ShardingSyntaxError(SpmdError, ValueError):
    """Sharding text (``mhlo.sharding`` or ``sdy``) that does not parse.

    `column` is the 1-based column in the sharding text where parsing failed.
    """

    def __init__(self, message: str, text: str = "", column: int | None = None):
        super().__init__(message)
        self.text = text
        self.column = column


class ShardingError(SpmdError, ValueError):
    """A well-formed sharding that does not fit its tensor or mesh."""


class RulesError(SpmdError, ValueError):
    """A rules file or rule list that is malformed or names unknown axes."""


class PipelineError(SpmdError, ValueError):
    """A pass pipeline that does not parse, or names an unknown pass or option."""
