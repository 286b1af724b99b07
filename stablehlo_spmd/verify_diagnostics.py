"""``--verify-diagnostics``: match produced diagnostics against expectations in the input.

An expectation is a comment ``// expected-<severity>[@<where>] {{<text>}}``
where severity is error, warning, note or remark, and where is ``+N`` / ``-N``
(lines below or above the comment), ``above`` / ``below`` (+/-1), or absent (the
comment's own line).  As in MLIR, a produced diagnostic matches when severity
and line agree and its message contains the text; several expectations may
name the same line.  Anything expected but not produced, or produced but not
expected, is reported as an error located in the input.  Diagnostics located
in another file (a rules file, say) cannot be expected, so they are reported
as unexpected.
"""

from __future__ import annotations

import dataclasses
import re

from stablehlo_spmd.diagnostics import Diagnostic

_EXPECTATION = re.compile(
    r"//\s*expected-(?P<severity>error|warning|note|remark)"
    r"(?:@(?P<where>[+-]\d+|above|below))?\s*\{\{(?P<text>.*?)\}\}")


@dataclasses.dataclass
class Expected:
    severity: str
    file: str
    line: int
    text: str
    comment_position: str
    matched: bool = False


def expected_diagnostics(text: str, filename: str) -> list[Expected]:
    expectations = []
    for number, line in enumerate(text.split("\n"), start=1):
        for found in _EXPECTATION.finditer(line):
            where = found.group("where")
            offset = {"above": -1, "below": 1, None: 0}.get(where)
            if offset is None:
                offset = int(where)
            expectations.append(Expected(found.group("severity"), filename, number + offset,
                                         found.group("text"),
                                         f"{filename}:{number}:{found.start() + 1}"))
    return expectations


def verify(expected: list[Expected], produced: list[Diagnostic]) -> list[Diagnostic]:
    """Problems found (empty when every expectation matched exactly once over all)."""
    problems = []
    for diagnostic in produced:
        match = next((e for e in expected if not e.matched and _matches(e, diagnostic)), None)
        if match is None:
            match = next((e for e in expected if _matches(e, diagnostic)), None)
        if match is None:
            problems.append(Diagnostic(
                "error", f"unexpected {diagnostic.severity}: {diagnostic.message}",
                diagnostic.position))
        else:
            match.matched = True
    for expectation in expected:
        if not expectation.matched:
            problems.append(Diagnostic(
                "error", f"expected {expectation.severity} \"{expectation.text}\" was not produced",
                expectation.comment_position))
    return problems


def _matches(expectation: Expected, diagnostic: Diagnostic) -> bool:
    return (diagnostic.severity == expectation.severity
            and diagnostic.file == expectation.file
            and diagnostic.line == expectation.line
            and expectation.text in diagnostic.message)
