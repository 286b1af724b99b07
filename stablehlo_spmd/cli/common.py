"""What every command-line tool of this project shares: how it fails.

Output is written only on success, through a temporary file renamed into
place, so a failed run never leaves half a file and ``-o`` naming the input
never clobbers it.  A tool prints diagnostics as ``file:line:col: error: message`` and exits 1.
Usage errors (an unknown flag) exit 1 too, as ``mlir-opt`` does, and an
internal error prints one line, not a traceback, unless
``STABLEHLO_SPMD_TRACEBACK=1`` asks for it.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import NoReturn, Sequence

import click

from stablehlo_spmd.diagnostics import Diagnostic
from stablehlo_spmd.errors import SpmdError, not_utf8
from stablehlo_spmd.pipeline import internal_error_message


def fail(diags: Sequence[Diagnostic]) -> NoReturn:
    for diagnostic in diags:
        click.echo(str(diagnostic), err=True)
    sys.exit(1)


def fail_with(error: SpmdError) -> NoReturn:
    fail([Diagnostic("error", error.message, error.location)])


def run_cli(command: click.Command, prog_name: str, argv: list[str] | None) -> NoReturn:
    try:
        command.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except click.exceptions.Abort:
        fail([Diagnostic("error", "aborted")])
    except click.ClickException as error:
        # Click ends its sentences with '.'; ours go on with the help pointer.
        message = error.format_message().rstrip(".")
        fail([Diagnostic("error", f"{message} (see '{prog_name} --help')")])
    except SpmdError as error:
        fail_with(error)
    except SystemExit:
        raise
    except Exception as error:  # a bug: still one line for the user
        fail([Diagnostic("error", internal_error_message(error))])
    sys.exit(0)


def write_output(path: str, text: str) -> None:
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        fail([Diagnostic("error", f"cannot write output file '{path}': "
                                   f"directory '{directory}' does not exist")])
    handle = tempfile.NamedTemporaryFile("w", dir=directory, delete=False,
                                         prefix=".stablehlo-spmd-", suffix=".tmp")
    try:
        with handle:
            handle.write(text)
        os.replace(handle.name, path)
    except OSError as error:
        os.unlink(handle.name)
        fail([Diagnostic("error", f"cannot write output file '{path}': {error.strerror}")])


def read_text(path: str) -> tuple[str, str]:
    """(file name for diagnostics, UTF-8 text) of a path or '-' (stdin); fails cleanly."""
    if path == "-":
        data = sys.stdin.buffer.read()
        filename = "<stdin>"
    else:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as error:
            fail([Diagnostic("error", f"cannot open input file '{path}': {error.strerror}")])
        filename = path
    if b"\0" in data:
        fail([Diagnostic("error", "the input is binary, not MLIR text", filename)])
    try:
        return filename, data.decode("utf-8")
    except UnicodeDecodeError as error:
        fail([Diagnostic("error", *not_utf8(data, error, filename, "the input"))])
