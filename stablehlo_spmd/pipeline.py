"""Textual pass pipelines that mix this project's passes with upstream MLIR's.

``builtin.module(spmd-annotate{rules=r.toml},canonicalize,func.func(cse))``
is split into its top-level elements.  An element naming a registered
project pass becomes that pass's dataclass (its ``{key=value ...}`` options
filling the fields) and runs as a Python pass inside jaxlib's `PassManager`;
anything else is handed to the `PassManager` as text, so every upstream pass
and nested pipeline jaxlib knows works unchanged.  One `PassManager` runs the
whole pipeline, so ``--mlir-print-ir-after-all``, ``--mlir-timing`` and the
verifier after each pass cover both kinds alike.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import sys
import tempfile
import traceback
from typing import Iterator, Union

from jaxlib.mlir import ir, passmanager

from stablehlo_spmd import diagnostics
from stablehlo_spmd.errors import PipelineError, SpmdError
from stablehlo_spmd.ir import make_context
from stablehlo_spmd.module_shardings import checking_once, forget_checks
from stablehlo_spmd.passes import ModulePass, registered_passes

PipelineElement = Union[ModulePass, str]


@dataclasses.dataclass(frozen=True)
class Pipeline:
    elements: tuple[PipelineElement, ...]

    def __str__(self) -> str:
        parts = [e.pipeline_text() if isinstance(e, ModulePass) else e for e in self.elements]
        return f"builtin.module({','.join(parts)})"


def parse_pipeline(text: str) -> Pipeline:
    """Parse ``builtin.module(a,b{k=v},c)`` (the anchor is optional)."""
    body = text.strip()
    if body.startswith("builtin.module"):
        rest = body[len("builtin.module"):].strip()
        if not (rest.startswith("(") and rest.endswith(")")):
            raise PipelineError(f"expected 'builtin.module(...)' in pass pipeline {text!r}")
        body = rest[1:-1]
    elements = []
    passes = registered_passes()
    for element in _split_top_level(body, text):
        name, options = _split_options(element, text)
        pass_class = passes.get(name)
        if pass_class is None:
            _check_upstream(element)
            elements.append(element)
        else:
            elements.append(pass_class.from_options(_parse_options(options, name)))
    return Pipeline(tuple(elements))


def _check_upstream(element: str) -> None:
    """Fail at parse time, before any input is read, on a pass jaxlib does not know."""
    with make_context():
        _add_upstream(passmanager.PassManager("builtin.module"), element)


def _add_upstream(manager: passmanager.PassManager, element: str) -> None:
    with _llvm_stderr() as printed:
        try:
            manager.add(element)
        except ValueError as error:
            failure = str(error)
        else:
            return
    raise PipelineError(_upstream_pipeline_message(element, failure + "\n" + "".join(printed)))


@contextlib.contextmanager
def _llvm_stderr() -> Iterator[list[str]]:
    """What LLVM's option parser prints straight to file descriptor 2 meanwhile.

    A bad option value ('max-iterations=x') is explained only there, not in
    the exception: caught, it becomes part of one diagnostic instead of a
    stray line on the user's terminal.
    """
    printed: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield printed
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            printed.append(capture.read().decode("utf-8", "replace"))


def _split_top_level(body: str, whole: str) -> list[str]:
    parts, depth, start, quote = [], 0, 0, None
    for index, char in enumerate(body):
        if quote:
            quote = None if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "({":
            depth += 1
        elif char in ")}":
            depth -= 1
            if depth < 0:
                raise PipelineError(f"unbalanced '{char}' in pass pipeline {whole!r}")
        elif char == "," and depth == 0:
            parts.append(body[start:index].strip())
            start = index + 1
    if quote:
        raise PipelineError(f"unterminated quote in pass pipeline {whole!r}")
    if depth:
        raise PipelineError(f"unbalanced brackets or quotes in pass pipeline {whole!r}")
    parts.append(body[start:].strip())
    if any(not part for part in parts) and body.strip():
        raise PipelineError(f"empty element in pass pipeline {whole!r}")
    return [part for part in parts if part]


def _split_options(element: str, whole: str) -> tuple[str, str]:
    if "{" not in element:
        return element, ""
    name, _, rest = element.partition("{")
    if not rest.endswith("}"):
        raise PipelineError(f"expected '}}' at the end of pass options in {element!r}")
    return name.strip(), rest[:-1]


def _parse_options(text: str, pass_name: str) -> dict[str, str]:
    """``key=value key2="quoted value"`` → dict; values may hold nested braces."""
    options: dict[str, str] = {}
    index, length = 0, len(text)
    while index < length:
        while index < length and text[index].isspace():
            index += 1
        if index >= length:
            break
        key_end = index
        while key_end < length and text[key_end] not in "= \t":
            key_end += 1
        key = text[index:key_end]
        if key_end >= length or text[key_end] != "=":
            options[key] = ""  # a bare flag
            index = key_end
            continue
        value_start = key_end + 1
        value, index = _read_value(text, value_start, pass_name)
        options[key] = value
    return options


def _read_value(text: str, start: int, pass_name: str) -> tuple[str, int]:
    if start < len(text) and text[start] in "\"'":
        end = text.find(text[start], start + 1)
        if end < 0:
            raise PipelineError(f"unterminated quote in options of pass '{pass_name}'")
        return text[start + 1:end], end + 1
    depth, index = 0, start
    while index < len(text) and (depth or not text[index].isspace()):
        depth += {"{": 1, "(": 1, "[": 1, "}": -1, ")": -1, "]": -1}.get(text[index], 0)
        index += 1
    return text[start:index], index


@dataclasses.dataclass
class RunOptions:
    print_ir_after_all: bool = False
    timing: bool = False
    debug_info: bool = False


def run_pipeline(module: ir.Operation, pipeline: Pipeline | str,
                 options: RunOptions = RunOptions()) -> bool:
    """Run `pipeline` on `module`; diagnostics go to the current engine.

    Returns False when any pass reported an error or the verifier failed.
    Internal errors (bugs in a pass) are re-raised with their traceback.
    """
    if isinstance(pipeline, str):
        pipeline = parse_pipeline(pipeline)
    engine = diagnostics.current()
    internal_errors: list[BaseException] = []
    with module.context:
        manager = passmanager.PassManager("builtin.module")
        for element in pipeline.elements:
            if isinstance(element, ModulePass):
                manager.add(_python_pass(element, engine, internal_errors),
                            name=type(element).__name__, argument=element.name,
                            description=element.description)
            else:
                _add_upstream(manager, element)
        manager.enable_verifier(True)
        if options.print_ir_after_all:
            manager.enable_ir_printing(print_after_all=True, enable_debug_info=options.debug_info)
        if options.timing:
            manager.enable_timing()
        errors_before = len(engine.errors)
        try:
            with checking_once():
                manager.run(module)
        except ir.MLIRError as error:
            if internal_errors:
                raise internal_errors[0]
            for diagnostic in error.error_diagnostics:
                engine.diagnostics.extend(diagnostics.from_mlir(diagnostic))
            if len(engine.errors) == errors_before:
                engine.error(None, str(error))
            return False
    if internal_errors:
        raise internal_errors[0]
    return len(engine.errors) == errors_before


def _python_pass(element: ModulePass, engine: diagnostics.DiagnosticEngine,
                 internal_errors: list[BaseException]):
    def run(op, pass_handle) -> None:
        errors_before = len(engine.errors)
        try:
            with diagnostics.collecting(engine):
                element.run(op.operation)
            forget_checks()  # every project pass writes shardings
        except SpmdError as error:
            engine.error(error.location, error.message, type(error))
        except Exception as error:  # a bug: keep it for the caller, stop the pipeline
            internal_errors.append(error)
            pass_handle.signal_pass_failure()
            return
        if len(engine.errors) > errors_before:
            pass_handle.signal_pass_failure()

    run.__name__ = element.name
    return run


_LLVM_KINDS = {"long": "an integer", "int": "an integer", "uint": "an integer",
               "ulong": "an integer", "double": "a number", "float": "a number"}


def _upstream_pipeline_message(element: str, failure: str) -> str:
    """One line from what MLIR (exception) and LLVM (stderr) said about `element`.

    Worded like the messages for this project's own passes, naming the pass
    and option the user wrote rather than repeating MLIR's multi-line echo.
    """
    unknown = re.search(r"'([^']+)' does not refer to a registered pass", failure)
    if unknown:
        known = ", ".join(sorted(registered_passes()))
        return (f"unknown pass '{unknown.group(1)}': it is neither a stablehlo-spmd pass "
                f"({known}) nor an MLIR pass registered in jaxlib")
    added = re.search(r"failed to add `([^`]+)` with options", failure)
    name = added.group(1) if added else element.split("{", 1)[0].strip()
    no_option = re.search(r"no such option (\S+)", failure)
    if no_option:
        return f"pass '{name}' has no option '{no_option.group(1)}'"
    bad_value = re.search(r"for the -+([\w.-]+) option: '(.*)' (?:value invalid for (\w+)|is "
                          r"invalid value for (boolean)) argument", failure)
    if bad_value:
        option, value, kind = bad_value.group(1), bad_value.group(2), bad_value.group(3)
        expected = "a bool" if bad_value.group(4) else _LLVM_KINDS.get(kind, f"a {kind}")
        return f"option '{option}' of pass '{name}' expects {expected}, got '{value}'"
    option_said = re.search(r"for the -+([\w.-]+) option: (.*?)!?\s*$", failure, re.MULTILINE)
    if option_said:
        return f"option '{option_said.group(1)}' of pass '{name}': {option_said.group(2)}"
    parser_said = re.search(r"Parser:\d+:\d+: error: (.*)", failure)
    lines = [line.strip() for line in failure.splitlines()
             if line.strip() and not line.startswith("failed to add")]
    detail = parser_said.group(1) if parser_said else (lines[0] if lines else "rejected by MLIR")
    return f"invalid pass pipeline element {element!r}: {detail.strip()}"


def internal_error_message(error: BaseException) -> str:
    if os.environ.get("STABLEHLO_SPMD_TRACEBACK"):
        return "".join(traceback.format_exception(error))
    return (f"internal error: {type(error).__name__}: {error} (this is a bug in stablehlo-spmd; "
            "set STABLEHLO_SPMD_TRACEBACK=1 for the traceback)")
