"""``stablehlo-spmd-opt``: rewrite ``.mlir`` files the way ``mlir-opt`` does.

    stablehlo-spmd-opt in.mlir --pass-pipeline='builtin.module(spmd-annotate{rules=r.toml},cse)' -o out.mlir
    stablehlo-spmd-opt - --spmd-annotate='rules=r.toml' --canonicalize < in.mlir
    stablehlo-spmd-opt tests.mlir --split-input-file --verify-diagnostics

Conventions kept from ``mlir-opt``: the input is positional or ``-``; the
output goes to ``-o`` (stdout by default); per-pass flags (``--spmd-annotate``,
``--canonicalize``, ...) build the pipeline in command-line order;
``--split-input-file`` processes each ``// -----`` chunk on its own (line
numbers stay those of the whole file) and joins the outputs with the same
marker; ``--verify-diagnostics`` checks ``// expected-error@+N {{...}}``
comments instead of printing diagnostics.

Every user error ends as ``file:line:col: error: message`` on stderr and exit
status 1, never a traceback.  The output is written only when everything
succeeded, through a temporary file renamed into place, so ``-o`` naming the
input never clobbers it.
"""

from __future__ import annotations

import sys

import click

from stablehlo_spmd import diagnostics
from stablehlo_spmd.cli.common import fail as _fail, read_text, run_cli, write_output
from stablehlo_spmd.diagnostics import Diagnostic, DiagnosticEngine
from stablehlo_spmd.errors import SpmdError
from stablehlo_spmd.ir import ParseError, make_context, parse_module, print_module
from stablehlo_spmd.passes import registered_passes
from stablehlo_spmd.pipeline import RunOptions, internal_error_message, parse_pipeline, run_pipeline
from stablehlo_spmd.verify_diagnostics import expected_diagnostics, verify

SPLIT_MARKER = "// -----"

# Upstream passes that get a shorthand flag, like mlir-opt's --canonicalize.
UPSTREAM_SHORTHANDS = ("canonicalize", "cse", "symbol-dce", "inline")


def _record_pass(ctx: click.Context, param: click.Parameter, value) -> None:
    """Click runs callbacks in command-line order: that order is the pipeline's."""
    if value is None:
        return
    flag = param.opts[0].lstrip("-")
    element = flag if not value else f"{flag}{{{value}}}"
    ctx.ensure_object(list).append(element)


def _pass_flag(name: str, help_text: str):
    return click.option(f"--{name}", name.replace("-", "_"), is_flag=False, flag_value="",
                        default=None, expose_value=False, callback=_record_pass,
                        metavar="OPTIONS", help=help_text)


def _with_pass_flags(command):
    for name, pass_class in sorted(registered_passes().items(), reverse=True):
        command = _pass_flag(name, f"Run {name}: {pass_class.description}.")(command)
    for name in reversed(UPSTREAM_SHORTHANDS):
        command = _pass_flag(name, f"Run MLIR's {name} pass.")(command)
    return command


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("input_file", default="-", metavar="INPUT")
@click.option("-o", "output_file", default="-", metavar="OUTPUT", help="Output file ('-' is stdout).")
@click.option("--pass-pipeline", default=None,
              help="Textual pipeline, e.g. 'builtin.module(spmd-annotate{rules=r.toml},cse)'.")
@click.option("--split-input-file", is_flag=True, help="Process each '// -----' chunk separately.")
@click.option("--verify-diagnostics", is_flag=True,
              help="Check diagnostics against expected-* comments in the input.")
@click.option("--mlir-print-ir-after-all", is_flag=True, help="Print the IR after every pass.")
@click.option("--mlir-timing", is_flag=True, help="Report the time each pass took.")
@click.option("--mlir-print-debuginfo", is_flag=True, help="Print locations in the output.")
@_with_pass_flags
@click.pass_context
def opt_command(ctx: click.Context, input_file: str, output_file: str, pass_pipeline: str | None,
                split_input_file: bool, verify_diagnostics: bool, mlir_print_ir_after_all: bool,
                mlir_timing: bool, mlir_print_debuginfo: bool) -> None:
    """Parse INPUT, run the pass pipeline, print the result."""
    shorthand = ctx.obj or []
    if pass_pipeline and shorthand:
        _fail([Diagnostic("error", "use either --pass-pipeline or per-pass flags, not both")])
    pipeline_text = pass_pipeline if pass_pipeline is not None else ",".join(shorthand)
    try:
        pipeline = parse_pipeline(pipeline_text)
    except SpmdError as error:
        _fail([Diagnostic("error", error.message, error.location)])

    filename, text = read_text(input_file)
    chunks = _split(text) if split_input_file else [text]
    options = RunOptions(mlir_print_ir_after_all, mlir_timing, mlir_print_debuginfo)
    outputs, all_diagnostics, ok = [], [], True
    for chunk in chunks:
        engine = DiagnosticEngine()
        output = _process_chunk(chunk, filename, pipeline, options, engine)
        if verify_diagnostics:
            # Notes and warnings located in other files (a rules file) cannot be
            # expected in this one: show them, but do not verify them.
            # Like mlir-opt under -verify-diagnostics, the verifier's "see current
            # operation" dump is not part of what is verified.
            produced = [d for d in engine.diagnostics if not _is_op_dump(d)]
            verified = [d for d in produced if d.file == filename or d.severity == "error"]
            passed_through = [d for d in produced if d not in verified]
            problems = verify(expected_diagnostics(chunk, filename), verified)
            all_diagnostics.extend(passed_through + problems)
            ok &= not problems
        else:
            all_diagnostics.extend(engine.diagnostics)
            ok &= output is not None
        if output is not None:
            outputs.append(output)

    for diagnostic in all_diagnostics:
        click.echo(str(diagnostic), err=True)
    if not ok:
        sys.exit(1)
    joined = f"\n{SPLIT_MARKER}\n".join(o.rstrip("\n") for o in outputs) + ("\n" if outputs else "")
    write_output(output_file, joined)


def _process_chunk(chunk: str, filename: str, pipeline, options: RunOptions,
                   engine: DiagnosticEngine) -> str | None:
    """Parse, run and print one chunk; None when it failed (diagnostics say why)."""
    with make_context() as context, diagnostics.collecting(engine):
        try:
            module = parse_module(chunk, filename, context)
        except ParseError as error:
            engine.diagnostics.extend(Diagnostic(*d) for d in error.diagnostics)
            return None
        try:
            if pipeline.elements and not run_pipeline(module, pipeline, options):
                return None
        except SpmdError as error:
            engine.error(error.location, error.message, type(error))
            return None
        except Exception as error:  # a bug in a pass: say so plainly
            engine.error(None, internal_error_message(error))
            return None
        return print_module(module, options.debug_info)


def _is_op_dump(diagnostic: Diagnostic) -> bool:
    return diagnostic.severity == "note" and diagnostic.message.startswith("see current operation")


def _split(text: str) -> list[str]:
    """Chunks of the input, each padded with newlines so line numbers stay global."""
    chunks, lines_before, current = [], 0, []
    for line in text.split("\n"):
        if line.strip() == SPLIT_MARKER:
            chunks.append("\n" * lines_before + "\n".join(current))
            lines_before += len(current) + 1
            current = []
        else:
            current.append(line)
    chunks.append("\n" * lines_before + "\n".join(current))
    return chunks


def main(argv: list[str] | None = None) -> None:
    run_cli(opt_command, "stablehlo-spmd-opt", argv)


if __name__ == "__main__":
    main()
