"""``stablehlo-spmd``: the user-facing command line.

    stablehlo-spmd export examples/mlp.py:train_step_example -o mlp.mlir
    stablehlo-spmd export mypkg.model:loss --example-args mypkg.model:example_args

    stablehlo-spmd explain annotated.mlir
    stablehlo-spmd explain model.mlir --rules stablehlo_spmd/demo_rules.toml

``export`` writes StableHLO text whose arguments are named by pytree path,
ready for ``stablehlo-spmd-opt --spmd-annotate=rules=...``.  ``explain``
propagates shardings and prints, for every op, the sharding it got and the
chain of ops and values it came through back to a user annotation: the
answer to "why is this tensor sharded like that?".  ``run`` executes a
partitioned module on its devices with inputs and outputs in ``.npz`` files,
in one process or in several (``launch`` starts them on one host).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

import click

from stablehlo_spmd import diagnostics
from stablehlo_spmd.cli.common import fail, read_text, run_cli
from stablehlo_spmd.cli.common import write_output
from stablehlo_spmd.frontends.jax import export, load_reference
from stablehlo_spmd.ir import ParseError, make_context, parse_module, print_module
from stablehlo_spmd.pipeline import Pipeline, parse_pipeline, run_pipeline


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
    """Export a JAX function, or a PyTorch module or training step, to StableHLO text
    with named arguments (pytree paths; torch's parameter names)."""
    function, args = load_reference(function_ref, args_ref)
    if _is_torch(function, args):
        from stablehlo_spmd.frontends.torch import export as export_torch

        write_output(output_file, export_torch(function, *args))
    else:
        write_output(output_file, export(function, *args))


def _is_torch(function, args: tuple) -> bool:
    """A torch module, or torch tensors to run on: the PyTorch front end's program.
    (Only a program that loaded torch can be one.)"""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    from torch.utils import _pytree

    return isinstance(function, torch.nn.Module) or any(
        isinstance(leaf, torch.Tensor) for leaf in _pytree.tree_leaves(args))


@contextlib.contextmanager
def _parsed(input_file: str):
    """(file name, parsed module, the engine collecting its diagnostics), in
    the module's context; a parse error fails the command there."""
    filename, text = read_text(input_file)
    engine = diagnostics.DiagnosticEngine()
    with diagnostics.collecting(engine), make_context() as context:
        try:
            module = parse_module(text, filename, context)
        except ParseError as error:
            fail([diagnostics.Diagnostic(*d) for d in error.diagnostics])
        yield filename, module, engine


@cli.command("explain")
@click.argument("input_file", metavar="INPUT")
@click.option("--rules", default=None, metavar="RULES.toml",
              help="Annotate from these partition rules first.")
def explain_command(input_file: str, rules: str | None) -> None:
    """Propagate shardings and say why every op has its sharding."""
    annotate = f"spmd-annotate{{rules={rules}}}," if rules else ""
    pipeline = parse_pipeline(f"builtin.module({annotate}spmd-propagate{{explain=true}})")
    with _parsed(input_file) as (filename, module, engine):
        ok = run_pipeline(module, pipeline)
    for diagnostic in engine.diagnostics:
        if diagnostic.severity == "remark":
            click.echo(f"{diagnostic.position or filename}: {diagnostic.message}")
    problems = [d for d in engine.diagnostics if d.severity in ("error", "warning")]
    for diagnostic in problems:
        click.echo(str(diagnostic), err=True)
    if not ok:
        sys.exit(1)


def _mesh_or_none(text: str | None):
    """`text` as a Mesh; None where it is absent or wrong (the pass says why)."""
    from stablehlo_spmd.errors import ShardingError
    from stablehlo_spmd.mesh import Mesh

    try:
        return Mesh.from_string(text) if text else None
    except (ValueError, ShardingError):
        return None


@cli.command("auto-shard")
@click.argument("input_file", metavar="INPUT")
@click.option("--mesh", default=None, metavar="AXES",
              help="Axis sizes, e.g. data=4,model=2 (default: the module's mesh).")
@click.option("--memory-budget", default="", metavar="BYTES",
              help="Per-device memory, e.g. 2GiB, 512MB or a byte count (default: no limit).")
@click.option("--bandwidth", default="", metavar="AXIS=B/S,...",
              help="Bytes per second per axis: minimize seconds instead of bytes.")
@click.option("--latency", type=float, default=0.0, help="Seconds per collective, with --bandwidth.")
@click.option("--hardware", default="", metavar="h100|tpu-v5p",
              help="Price plans in seconds on a named profile: each axis's link by where its "
                   "devices sit, and contractions at the chip's peak (--bandwidth, --latency "
                   "and --flops override it).")
@click.option("--flops", type=float, default=0.0, metavar="FLOP/S",
              help="Peak FLOP/s per device, with --hardware or --bandwidth.")
@click.option("--rules", default=None, metavar="RULES.toml",
              help="Partition rules to respect as hard constraints.")
@click.option("--explain", is_flag=True, help="Say for every op why it got its sharding.")
@click.option("--time-limit", type=float, default=60.0, metavar="SECONDS",
              help="Seconds the search may take, from reading the program (default: 60).")
@click.option("--measure-memory/--estimate-memory", default=None,
              help="Check each plan against the budget by XLA's memory analysis of it, "
                   "compiled here, whatever it costs within --time-limit; or keep to the "
                   "search's estimate.  Default: measure where this process has the mesh's "
                   "devices and a compile takes at most a quarter of the time limit; else "
                   "the estimate decides, 3% under the budget.")
@click.option("--target", default=None, metavar="cpu|gpu|tpu",
              help="The backend the memory estimate counts for (default: the one this "
                   "process compiles the mesh's programs on); XLA's CPU backend computes "
                   "bf16 in f32.")
@click.option("-o", "output_file", default="-", metavar="OUTPUT", help="Output file ('-' is stdout).")
def auto_shard_command(input_file: str, mesh: str | None, memory_budget: str, bandwidth: str,
                       latency: float, hardware: str, flops: float, rules: str | None,
                       explain: bool, time_limit: float,
                       measure_memory: bool | None, target: str | None,
                       output_file: str) -> None:
    """Choose every value's sharding from a mesh and a memory budget.

    Writes the annotated module (ready for spmd-propagate and spmd-partition)
    and prints to stderr the chosen sharding of every argument and of the
    largest activations, the estimated collective bytes and peak memory per
    device, and the solve time.  With a budget, each plan is checked by
    XLA's memory analysis of it, compiled here, and searched again where
    the estimate was wrong."""
    from stablehlo_spmd.api import default_target, memory_check
    from stablehlo_spmd.passes.annotate import AnnotatePass
    from stablehlo_spmd.passes.auto_shard import AutoShardPass, auto_shard_module, format_table

    started = time.perf_counter()    # the time limit counts parsing too, as the API's does
    with _parsed(input_file) as (filename, module, engine):
        ok = True
        if rules or mesh:
            ok = run_pipeline(module, Pipeline((AnnotatePass(rules=rules or "", mesh=mesh or ""),)))
        check = None if measure_memory is False else memory_check(bool(measure_memory))
        result = auto_shard_module(module.operation, AutoShardPass(
            memory_budget=memory_budget, bandwidth=bandwidth, latency=latency,
            hardware=hardware, flops=flops,
            explain=explain, time_limit=time_limit,
            target=target or default_target(_mesh_or_none(mesh))), check,
            measure_always=bool(measure_memory), started=started) \
            if ok and not engine.errors else None
        output = print_module(module.operation) if result is not None else None
    for diagnostic in engine.diagnostics:
        if diagnostic.severity == "remark":
            click.echo(f"{diagnostic.position or filename}: {diagnostic.message}", err=True)
    for diagnostic in engine.diagnostics:
        if diagnostic.severity in ("error", "warning"):
            # A module-wide diagnostic (no position) still names the file.
            prefix = "" if diagnostic.position else f"{filename}: "
            click.echo(prefix + str(diagnostic), err=True)
    if result is None:
        sys.exit(1)
    click.echo(format_table(result), err=True)
    write_output(output_file, output)


@cli.command("demo")
def demo_command() -> None:
    """Partition a GPT-style training step over 8 CPU devices and check it."""
    from stablehlo_spmd.demo import run_demo

    if not run_demo(click.echo):
        fail([diagnostics.Diagnostic("error", "the partitioned run differs from the "
                                              "single-device run")])


@cli.command("run")
@click.argument("input_file", metavar="MODULE")
@click.option("--inputs", "inputs_npz", default=None, metavar="IN.npz",
              help="Inputs: argument i under its name (e.g. \"params['w1']\") or 'arg<i>'.")
@click.option("--outputs", "outputs_npz", required=True, metavar="OUT.npz",
              help="Where to write the results, as 'result0', 'result1', ... (process 0 "
                   "writes them when several processes run the module).")
@click.option("--coordinator", default=None, metavar="HOST:PORT",
              help="Run with other processes: the address of process 0's coordinator.")
@click.option("--num-processes", type=int, default=None, help="With --coordinator: how many.")
@click.option("--process-id", type=int, default=None, help="With --coordinator: this one's id.")
def run_command(input_file: str, inputs_npz: str | None, outputs_npz: str,
                coordinator: str | None, num_processes: int | None,
                process_id: int | None) -> None:
    """Run a partitioned module on its mhlo.num_partitions devices (CPU: host devices).

    With several processes (stablehlo-spmd launch, the flags above, or a
    SLURM / Open MPI job) the devices are those of all processes together."""
    from stablehlo_spmd.runtime import distributed
    from stablehlo_spmd.runtime.files import run_files

    if any(v is not None for v in (coordinator, num_processes, process_id)):
        found = distributed.settings(coordinator, num_processes, process_id)
        os.environ[distributed.COORDINATOR] = found.coordinator
        os.environ[distributed.NUM_PROCESSES] = str(found.num_processes)
        os.environ[distributed.PROCESS_ID] = str(found.process_id)
    written = run_files(input_file, inputs_npz, outputs_npz)
    if distributed.process_index() == 0:
        for key, array in written:
            click.echo(f"{key}: {array.dtype}{list(array.shape)}")


@cli.command("launch", context_settings={"ignore_unknown_options": True,
                                         "allow_interspersed_args": False})
@click.option("--processes", type=int, required=True, help="How many processes to start.")
@click.option("--devices-per-process", type=int, default=None,
              help="CPU host devices each process has (XLA's host device count).")
@click.option("--coordinator", default=None, metavar="HOST:PORT",
              help="Where process 0 serves the others (default: a free loopback port).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def launch_command(processes: int, devices_per_process: int | None, coordinator: str | None,
                   command: tuple[str, ...]) -> None:
    """Start PROCESSES local processes of COMMAND that run as one program.

    \b
    stablehlo-spmd launch --processes 2 --devices-per-process 4 -- stablehlo-spmd demo
    stablehlo-spmd launch --processes 2 -- stablehlo-spmd run m.mlir --inputs i.npz --outputs o.npz

    Output lines are prefixed with the process id.  When a process fails the
    others are ended at once, and launch exits with the failing code."""
    from stablehlo_spmd.runtime.launch import LaunchOptions, launch

    if command and command[0] == "--":
        command = command[1:]
    options = LaunchOptions(processes, devices_per_process, coordinator)
    previous = signal.signal(signal.SIGTERM, _interrupted)
    try:
        outcome = launch(command, options, click.echo)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if outcome.exit_code != 0:
        click.echo(f"error: process {outcome.failed_process} of {processes} {outcome.how}; "
                   "the others were stopped", err=True)
        sys.exit(outcome.exit_code)


def _interrupted(number, frame) -> None:
    raise KeyboardInterrupt  # launch ends its processes on the way out


def main(argv: list[str] | None = None) -> None:
    run_cli(cli, "stablehlo-spmd", argv)


if __name__ == "__main__":
    main()
