"""Every bad input in tests/bad_inputs/ fails cleanly, with the diagnostic it states.

Each case is one file named ``NNN_what.<ext>`` whose comment lines (``//`` or
``#``) hold directives; inputs that cannot carry comments (an empty file,
binary bytes, a file that does not exist) are described by a ``NNN_what.case``
sidecar instead, whose ``INPUT:`` names the input.  Directives:

``CLI: <tool> <args>``
    the command (``stablehlo-spmd-opt`` or ``stablehlo-spmd``), shell-quoted;
``STDERR: <line>``
    one line of the exact expected stderr, in order (all of them, nothing else);
``API: <function> [key=value ...]``
    the same input through the Python API (``parse``, ``propagate``,
    ``annotate``, ``partition``, ``run_passes pipeline=...``, ``load_rules``,
    ``parse_pipeline``), whose exception must print as the first STDERR line;
    or ``API: none -- <why>`` where the API has no equivalent (it takes text,
    not paths, and has no flags);
``RAISES: <name>``
    the `stablehlo_spmd.errors` class the API must raise (or a subclass).

In directive values ``%s`` is the case's input, ``%S`` this directory and
``%t`` a fresh temporary directory, all absolute.  The CLI must exit 1 with
exactly the expected stderr and no traceback, leave ``%t`` empty (no output
file, no temporary left behind) and every file here byte for byte unchanged.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

import stablehlo_spmd as ss
from stablehlo_spmd import errors
from stablehlo_spmd.pipeline import parse_pipeline

HERE = pathlib.Path(__file__).resolve().parent
CASES_DIR = HERE / "bad_inputs"
REPO = HERE.parent
TOOLS = {"stablehlo-spmd-opt": "stablehlo_spmd.cli.opt", "stablehlo-spmd": "stablehlo_spmd.cli.main"}
_DIRECTIVE = re.compile(r"^\s*(?://|#)\s*(CLI|STDERR|API|RAISES|INPUT):[ ]?(.*?)\s*$")


@dataclasses.dataclass
class Case:
    name: str
    input: pathlib.Path
    cli: str
    stderr: list[str]
    api: str
    raises: str | None


def _load(path: pathlib.Path) -> Case:
    directives: dict[str, list[str]] = {}
    # Case files may hold deliberately broken bytes after their header.
    for line in path.read_bytes().decode("utf-8", "replace").splitlines():
        found = _DIRECTIVE.match(line)
        if found:
            directives.setdefault(found.group(1), []).append(found.group(2))
    for required in ("CLI", "STDERR", "API"):
        assert required in directives, f"{path.name} has no {required}: directive"
    assert len(directives["CLI"]) == 1 and len(directives["API"]) == 1, path.name
    input_path = CASES_DIR / directives["INPUT"][0] if "INPUT" in directives else path
    return Case(path.stem, input_path, directives["CLI"][0], directives["STDERR"],
                directives["API"][0], (directives.get("RAISES") or [None])[0])


CASE_FILES = sorted(p for p in CASES_DIR.iterdir() if re.match(r"\d{3}_", p.name)
                    and (p.suffix == ".case" or not (p.with_suffix(".case")).exists()))
CASES = [_load(p) for p in CASE_FILES]


def _substitute(text: str, case: Case, tmp: pathlib.Path) -> str:
    return (text.replace("%s", str(case.input)).replace("%S", str(CASES_DIR))
            .replace("%t", str(tmp)))


def _snapshot() -> dict[str, str]:
    return {str(p.relative_to(CASES_DIR)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(CASES_DIR.rglob("*")) if p.is_file()}


def test_the_corpus_is_large_and_names_are_unique():
    assert len(CASES) >= 50
    numbers = [c.name[:3] for c in CASES]
    assert len(numbers) == len(set(numbers)), "two cases share a number"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_cli(case: Case, tmp_path: pathlib.Path):
    out_dir = tmp_path / "t"
    out_dir.mkdir()
    argv = shlex.split(_substitute(case.cli, case, out_dir))
    assert argv[0] in TOOLS, f"{case.name}: unknown tool {argv[0]}"
    before = _snapshot()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("STABLEHLO_SPMD_TRACEBACK", None)
    result = subprocess.run([sys.executable, "-m", TOOLS[argv[0]], *argv[1:]],
                            capture_output=True, stdin=subprocess.DEVNULL, env=env, cwd=tmp_path)
    stderr = result.stderr.decode("utf-8", "replace")
    expected = [_substitute(line, case, out_dir) for line in case.stderr]
    assert "Traceback" not in stderr
    assert stderr.splitlines() == expected
    assert result.returncode == 1
    assert result.stdout == b""
    assert list(out_dir.iterdir()) == [], "a failed run left a file behind"
    assert _snapshot() == before, "the run changed an input"


def _call_api(case: Case, tmp: pathlib.Path):
    function, *args = shlex.split(_substitute(case.api, case, tmp))
    options = dict(arg.split("=", 1) for arg in args)
    source = pathlib.Path(options.pop("input", case.input))
    if function == "load_rules":
        return ss.load_rules(source)
    if function == "parse_pipeline":
        return parse_pipeline(options.pop("pipeline"))
    # The API takes text: binary bytes reach it as the str a caller would have.
    text = source.read_bytes().decode("latin-1")
    filename = str(source)
    if function == "parse":
        return ss.run_passes(text, "", filename)
    if function == "run_passes":
        return ss.run_passes(text, options.pop("pipeline"), filename)
    if function in ("annotate", "partition"):
        return getattr(ss, function)(text, options.pop("mesh", None), options.pop("rules", ()),
                                     filename=filename)
    if function == "propagate":
        return ss.propagate(text, filename, **options)
    raise AssertionError(f"{case.name}: unknown API function {function!r}")


API_CASES = [c for c in CASES if not c.api.startswith("none")]


def test_most_cases_also_go_through_the_api():
    assert len(API_CASES) >= 40


@pytest.mark.parametrize("case", API_CASES, ids=lambda c: c.name)
def test_api(case: Case, tmp_path: pathlib.Path):
    before = _snapshot()
    with pytest.raises(errors.SpmdError) as caught:
        _call_api(case, tmp_path)
    expected_type = getattr(errors, case.raises) if case.raises else errors.SpmdError
    assert isinstance(caught.value, expected_type), type(caught.value)
    error = caught.value
    # The CLI's line for the same error: the exception carries its parts.
    line = f"{error.location}: error: {error.message}" if error.location else f"error: {error.message}"
    assert line == _substitute(case.stderr[0], case, tmp_path)
    assert str(error) == (line if error.location else error.message)
    assert _snapshot() == before
