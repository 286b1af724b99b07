"""``stablehlo-spmd``: the user-facing command line.

    stablehlo-spmd export examples/mlp.py:train_step_example -o mlp.mlir
    stablehlo-spmd export mypkg.model:loss --example-args mypkg.model:example_args

``export`` writes StableHLO text whose arguments are named by pytree path,
ready for ``stablehlo-spmd-opt --spmd-annotate=rules=...``.  (``run`` and
``demo`` arrive with the partitioner.)
"""

from __future__ import annotations

import click

from stablehlo_spmd.cli.common import run_cli
from stablehlo_spmd.cli.common import write_output
from stablehlo_spmd.export import export_reference


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Make single-device StableHLO programs run SPMD over a device mesh."""


@cli.command("export")
@click.argument("function_ref", metavar="MODULE:FUNCTION")
@click.option("--example-args", "args_ref", metavar="MODULE:ARGS", default=None,
              help="Example arguments: a tuple, or a callable returning one. Without it, "
                   "FUNCTION is a zero-argument factory returning (function, example_args).")
@click.option("-o", "output_file", default="-", metavar="OUTPUT", help="Output file ('-' is stdout).")
def export_command(function_ref: str, args_ref: str | None, output_file: str) -> None:
    """Export a JAX function to StableHLO text, arguments named by pytree path."""
    write_output(output_file, export_reference(function_ref, args_ref))


def main(argv: list[str] | None = None) -> None:
    run_cli(cli, "stablehlo-spmd", argv)


if __name__ == "__main__":
    main()
