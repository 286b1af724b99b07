"""Partition rules: ordered ``(regex, partition spec)`` pairs over tensor names.

This is the convention of Keras' LayoutMap, EasyLM and MaxText: a tensor's
name (its pytree path, e.g. ``params['layers'][0]['attn']['wq']``) is matched
with `re.search` against each rule in order, and the first match gives its
partition spec.  Rules come from Python or from a TOML rules file::

    [mesh]
    axes = "data=4,model=2"          # major to minor
    devices = [0, 1, 2, 3, 4, 5, 6, 7]  # optional device order

    [[rules]]
    pattern = "attn'\\]\\['w[qkv]'\\]"
    spec = "(None, 'model')"         # a Python tuple literal: None, 'axis', ('a', 'b')
    unreduced = ["data"]             # optional: partial sums pending over these axes
    reduction = "sum"                # optional: how unreduced partials combine

TOML (read with the standard library's `tomllib`, so no new dependency) was
chosen over JSON/YAML because it has comments and literal strings for regexes.
Specs are written as Python literals because that is how JAX and PyTorch/XLA
users already write them, and TOML has no ``None``.

The loader checks everything that can be checked without a module (TOML
syntax, regexes, spec literals, the mesh) and locates its errors in the rules
file.  Whether a spec fits a tensor (rank, axis names) is checked where the
rule is applied, at the tensor's location.  A spec shorter than the tensor's
rank leaves the trailing dimensions replicated, as a JAX ``PartitionSpec``
does: ``()`` is replicated at any rank and ``('data',)`` splits only the
first dimension of an activation.  A longer spec is an error.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import os
import re
import sys
import warnings
from typing import Any, Iterable, Sequence

from stablehlo_spmd.errors import MeshError, RulesError, not_utf8
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.sharding import REDUCTIONS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 has no tomllib; tomli is its backport
    import tomli as tomllib


SpecEntry = Any  # None | str | tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Rule:
    """One ``pattern -> spec`` rule; `position` says where it was written."""

    pattern: str
    spec: tuple[SpecEntry, ...]
    unreduced: tuple[str, ...] = ()
    reduction: str = "sum"
    position: str | None = None

    @functools.cached_property
    def regex(self) -> re.Pattern:
        return _compile_quietly(self.pattern)

    def describe(self) -> str:
        return f"rule {self.pattern!r} -> {_format_spec(self.spec)}"

    def spec_for_rank(self, rank: int) -> tuple[SpecEntry, ...]:
        """The spec padded with None up to `rank`; a longer spec is left for the caller to refuse."""
        return self.spec + (None,) * max(0, rank - len(self.spec))


@dataclasses.dataclass(frozen=True)
class RuleSet:
    """An ordered list of rules and, optionally, the mesh they refer to."""

    rules: tuple[Rule, ...]
    mesh: Mesh | None = None

    def match(self, name: str) -> Rule | None:
        for rule in self.rules:
            if rule.regex.search(name):
                return rule
        return None


# ------------------------------------------------------------- from Python

def rules_from_python(rules: Iterable[Any], mesh: Mesh | None = None) -> RuleSet:
    """Accept `Rule`s, ``(pattern, spec)`` or ``(pattern, spec, unreduced)`` tuples.

    A spec may be a tuple/list or a `jax.sharding.PartitionSpec` (whose
    ``unreduced`` axes are taken too).
    """
    if isinstance(rules, RuleSet):
        return rules if mesh is None else dataclasses.replace(rules, mesh=mesh)
    built = []
    for index, item in enumerate(rules):
        where = f"rule #{index}"
        if isinstance(item, Rule):
            built.append(item)
            continue
        if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
            raise RulesError(f"{where} must be (pattern, spec) or (pattern, spec, unreduced), "
                             f"got {item!r}")
        pattern, spec = item[0], item[1]
        unreduced = item[2] if len(item) == 3 else getattr(spec, "unreduced", ()) or ()
        built.append(Rule(_check_pattern(pattern, where), _normalize_spec(spec, where),
                          tuple(unreduced)))
    return RuleSet(tuple(built), mesh)


def _check_pattern(pattern: Any, where: str) -> str:
    if not isinstance(pattern, str):
        raise RulesError(f"{where}: pattern must be a string, got {pattern!r}")
    try:
        _compile_quietly(pattern)
    except re.error as error:
        raise RulesError(f"{where}: invalid regular expression {pattern!r}: {error}") from None
    except (OverflowError, RecursionError):  # a repeat count or nesting past re's limits
        raise RulesError(f"{where}: regular expression {pattern!r} is too large") from None
    return pattern


def _compile_quietly(pattern: str) -> re.Pattern:
    """re.compile without its FutureWarnings ("possible nested set"): they
    would print as a stray Python warning line among the tool's diagnostics."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return re.compile(pattern)


def _normalize_spec(spec: Any, where: str | None) -> tuple[SpecEntry, ...]:
    """`where` prefixes messages ("rule #2"); a rules file locates them instead."""
    prefix = f"{where}: " if where else ""
    # Tuples, lists and jax.sharding.PartitionSpec (which has `partitions`); a
    # set or dict would iterate in an order the user never wrote.
    if not isinstance(spec, (tuple, list)) and not hasattr(spec, "partitions"):
        raise RulesError(f"{prefix}spec must be a tuple like (None, 'model'), got {spec!r}")
    entries = []
    for entry in getattr(spec, "partitions", spec):  # a PartitionSpec iterates its partitions
        if entry is None or isinstance(entry, str):
            entries.append(entry)
        elif isinstance(entry, (tuple, list)) and all(isinstance(a, str) for a in entry):
            entries.append(tuple(entry))
        else:
            raise RulesError(f"{prefix}spec entry {entry!r} must be None, an axis name, "
                             f"or a tuple of axis names")
    return tuple(entries)


# ------------------------------------------------------------ from a file

def load_rules(path: str | os.PathLike) -> RuleSet:
    path = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise RulesError(f"cannot read rules file: {error.strerror}", path) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        message, position = not_utf8(data, error, path, "the rules file")
        raise RulesError(message, position) from None
    return parse_rules(text, path)


_TOML_POSITION = re.compile(r"\(at line (\d+), column (\d+)\)")
_RULES_HEADER = re.compile(r"^[ \t]*\[\[[ \t]*rules[ \t]*\]\]", re.MULTILINE)


def parse_rules(text: str, filename: str = "<rules>") -> RuleSet:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        message = str(error)
        found = _TOML_POSITION.search(message)
        position = f"{filename}:{found.group(1)}:{found.group(2)}" if found else filename
        raise RulesError(f"invalid TOML: {_TOML_POSITION.sub('', message).strip()}",
                         position) from None

    unknown = sorted(set(document) - {"mesh", "rules"})
    if unknown:
        raise RulesError(f"unknown top-level key(s) {', '.join(map(repr, unknown))}; "
                         "expected [mesh] and [[rules]]", _key_position(text, unknown[0], filename))
    mesh = _parse_mesh(document.get("mesh"), text, filename)
    raw_rules = document.get("rules", [])
    if not isinstance(raw_rules, list) or not all(isinstance(r, dict) for r in raw_rules):
        raise RulesError("'rules' must be an array of tables, written [[rules]]",
                         _key_position(text, "rules", filename))
    if not raw_rules:
        raise RulesError("the rules file has no [[rules]] entries", filename)
    header_lines = [text.count("\n", 0, m.start()) + 1 for m in _RULES_HEADER.finditer(text)]
    rules = []
    for index, raw in enumerate(raw_rules):
        line = header_lines[index] if index < len(header_lines) else None
        position = f"{filename}:{line}:1" if line else filename
        rules.append(_parse_rule(raw, position))
    return RuleSet(tuple(rules), mesh)


def _key_position(text: str, key: str, filename: str) -> str:
    """Where a top-level key is written: a [table], [[array]] or key = value line."""
    found = re.search(r"^[ \t]*(\[\[?[ \t]*" + re.escape(key) + r"[ \t]*\]|" + re.escape(key)
                      + r"[ \t]*=)", text, re.MULTILINE)
    return f"{filename}:{text.count(chr(10), 0, found.start()) + 1}:1" if found else filename


def _parse_mesh(raw: Any, text: str, filename: str) -> Mesh | None:
    if raw is None:
        return None
    position = _key_position(text, "mesh", filename)
    if not isinstance(raw, dict):
        raise RulesError("'mesh' must be a table with 'axes' (and optionally 'devices')", position)
    unknown = sorted(set(raw) - {"axes", "devices"})
    if unknown:
        raise RulesError(f"unknown mesh key(s) {', '.join(map(repr, unknown))}; "
                         "expected 'axes' and 'devices'", position)
    axes = raw.get("axes")
    if not isinstance(axes, str):
        raise RulesError("mesh 'axes' must be a string like \"data=4,model=2\"", position)
    devices = raw.get("devices")
    if devices is not None and (not isinstance(devices, list)
                                or not all(isinstance(d, int) for d in devices)):
        raise RulesError("mesh 'devices' must be a list of integer device ids", position)
    try:
        return Mesh.from_string(axes, devices)
    except MeshError as error:
        raise RulesError(f"invalid mesh: {error}", position) from None


def _parse_rule(raw: dict, position: str) -> Rule:
    unknown = sorted(set(raw) - {"pattern", "spec", "unreduced", "reduction"})
    if unknown:
        raise RulesError(f"unknown rule key(s) {', '.join(map(repr, unknown))}; expected "
                         "'pattern', 'spec', 'unreduced', 'reduction'", position)
    for key in ("pattern", "spec"):
        if key not in raw:
            raise RulesError(f"rule is missing '{key}'", position)
    pattern = raw["pattern"]
    if not isinstance(pattern, str):
        raise RulesError("rule 'pattern' must be a string", position)
    try:
        _compile_quietly(pattern)
    except re.error as error:
        raise RulesError(f"invalid regular expression {pattern!r}: {error}", position) from None
    except (OverflowError, RecursionError):  # a repeat count or nesting past re's limits
        raise RulesError(f"regular expression {pattern!r} is too large", position) from None
    spec = _parse_spec_literal(raw["spec"], position)
    unreduced = raw.get("unreduced", [])
    if not isinstance(unreduced, list) or not all(isinstance(a, str) for a in unreduced):
        raise RulesError("rule 'unreduced' must be a list of axis names", position)
    reduction = raw.get("reduction", "sum")
    if reduction not in REDUCTIONS:
        raise RulesError(f"rule 'reduction' must be one of {', '.join(REDUCTIONS)}, "
                         f"got {reduction!r}", position)
    return Rule(pattern, spec, tuple(unreduced), reduction, position)


def _parse_spec_literal(raw: Any, position: str) -> tuple[SpecEntry, ...]:
    if not isinstance(raw, str):
        raise RulesError("rule 'spec' must be a string holding a tuple, e.g. \"(None, 'model')\"",
                         position)
    try:
        with warnings.catch_warnings():  # e.g. "invalid escape sequence": not ours to print
            warnings.simplefilter("ignore")
            value = ast.literal_eval(raw.strip())
    # TypeError: an unhashable set element ("{[]}"); RecursionError and
    # MemoryError: nesting deeper than the compiler takes.
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
        raise RulesError(f"spec {raw!r} is not a Python tuple literal like (None, 'model')",
                         position) from None
    if value is None or isinstance(value, str):
        value = (value,)  # "('data')" is just a parenthesized string: one entry
    try:
        return _normalize_spec(value, None)
    except RulesError as error:
        raise RulesError(error.message, position) from None


def _format_spec(spec: Sequence[SpecEntry]) -> str:
    return "(" + ", ".join(repr(e) for e in spec) + ("," if len(spec) == 1 else "") + ")"
