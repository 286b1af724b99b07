"""How fast spmd-propagate is, against Shardy's propagation on the same program.

    python3 benchmarks/propagation_speed.py                      # depths 1 4 16 48
    python3 benchmarks/propagation_speed.py --depths 1 4 --repeat 5

For each depth N, the demo's GPT-style decoder training step
(`stablehlo_spmd.demo_model`, also examples/transformer.py) with
``Config(n_layers=N)`` is lowered and annotated from
stablehlo_spmd/demo_rules.toml (``ss.annotate``).  Outside the timed region
the annotated module is also rewritten into Shardy's form (``sdy.mesh``,
``#sdy.sharding``, ``sdy.sharding_constraint``) by
`stablehlo_spmd.passes.shardy_engine.to_shardy`, so both sides start from the
same program and the same shardings.  Then, in one process, alternating runs
time:

* ours: ``ss.propagate(annotated_text)``: a fresh context, parse (with
  locations), spmd-propagate, print (with locations);
* shardy (the anchor): a fresh context, parse the sdy-form text, jaxlib's
  in-process ``sdy-propagation-pipeline`` through a ``PassManager``, print
  (with locations) -- what XLA's own propagation costs on this program.

* pipeline: ``ss.partition(exported_text, rules=...)``: annotate +
  spmd-propagate + spmd-partition + canonicalize + cse, from the exported
  text to the per-device program (the partitioner issue's figure).

Each figure is the median of ``--repeat`` runs.  The table gives the op count
(every op inside the functions), both propagation times, ours / shardy, our
time per op, and the whole pipeline's time and its ratio to Shardy's
propagation.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _prepare(depth: int, rules: str):
    """(annotated text, sdy-form text, op count) for a decoder of `depth` layers."""
    import stablehlo_spmd as ss
    from jaxlib.mlir import ir
    from stablehlo_spmd import demo_model
    from stablehlo_spmd.ir import make_context, parse_module, print_module
    from stablehlo_spmd.module_shardings import module_mesh
    from stablehlo_spmd.passes.shardy_engine import to_shardy

    params, batch = demo_model.example_args(demo_model.Config(n_layers=depth))
    text = ss.export(demo_model.train_step, params, batch)
    annotated = ss.annotate(text, rules=rules)
    with make_context() as context:
        module = parse_module(annotated, "<annotated>", context)
        op_count = 0

        def count(op):
            nonlocal op_count
            op_count += op.name not in ("builtin.module", "func.func")
            return ir.WalkResult.ADVANCE

        module.walk(count)
        if not to_shardy(module, module_mesh(module)):
            raise SystemExit("could not write the annotated module in Shardy's form")
        sdy_text = print_module(module, debug_info=True)
    return text, annotated, sdy_text, op_count


def _pipeline(exported_and_rules) -> None:
    """The whole chain a user runs: annotate + propagate + partition (+ cleanup)."""
    import stablehlo_spmd as ss
    exported, rules = exported_and_rules
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ss.partition(exported, rules=rules)


def _ours(annotated: str) -> None:
    import stablehlo_spmd as ss
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ss.propagate(annotated)


def _shardy(sdy_text: str) -> None:
    from jaxlib.mlir import ir, passmanager
    from stablehlo_spmd.ir import make_context
    with make_context() as context:
        module = ir.Module.parse(sdy_text, context)
        # Shardy reports ops it has no rule for as warnings; keep them off stderr.
        handler = context.attach_diagnostic_handler(lambda diagnostic: True)
        try:
            passmanager.PassManager.parse("builtin.module(sdy-propagation-pipeline)").run(
                module.operation)
        finally:
            handler.detach()
        module.operation.get_asm(enable_debug_info=True)


def _time(fn, argument) -> float:
    start = time.perf_counter()
    fn(argument)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[1, 4, 16, 48],
                        help="decoder layers per measured program (default: 1 4 16 48)")
    parser.add_argument("--repeat", type=int, default=5,
                        help="timed runs of each side per depth; the median is reported")
    parser.add_argument("--rules", default=str(ROOT / "stablehlo_spmd" / "demo_rules.toml"))
    options = parser.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    rows = []
    for depth in options.depths:
        exported, annotated, sdy_text, op_count = _prepare(depth, options.rules)
        _ours(annotated)      # warm-up: imports, rule tables, first context
        _shardy(sdy_text)
        ours, shardy, pipeline = [], [], []
        for _ in range(options.repeat):  # alternate, so drift hits both alike
            ours.append(_time(_ours, annotated))
            shardy.append(_time(_shardy, sdy_text))
            pipeline.append(_time(_pipeline, (exported, options.rules)))
        rows.append((depth, op_count, statistics.median(ours), statistics.median(shardy),
                     statistics.median(pipeline)))
        print(f"  depth {depth}: done", file=sys.stderr, flush=True)

    print(f"train_step of stablehlo_spmd/demo_model.py, rules {pathlib.Path(options.rules).name}, "
          f"median of {options.repeat}")
    print(f"{'depth':>5} {'ops':>7} {'ours ms':>9} {'shardy ms':>10} {'ratio':>6} "
          f"{'ours us/op':>11} {'pipeline ms':>12} {'pipeline/shardy':>16}")
    for depth, op_count, ours_s, shardy_s, pipeline_s in rows:
        print(f"{depth:>5} {op_count:>7} {ours_s * 1e3:>9.1f} {shardy_s * 1e3:>10.1f} "
              f"{ours_s / shardy_s:>6.2f} {ours_s * 1e6 / op_count:>11.1f} "
              f"{pipeline_s * 1e3:>12.1f} {pipeline_s / shardy_s:>16.2f}")


if __name__ == "__main__":
    main()
