"""How long parse + spmd-annotate + print take on a large JAX training step.

    python3 benchmarks/pass_speed.py --layers 48

Exports the demo transformer's train_step (`stablehlo_spmd.demo_model`, also
examples/transformer.py) with `--layers` layers (48
layers is about 16k ops), then times, in one run and on the same text:

* the anchor: jaxlib parsing and printing the module with no pass at all
  (`ir.Module.parse` + `str`), the floor any Python pass pipeline stands on;
* stablehlo-spmd's `annotate` (parse with located arguments, Shardy import,
  spmd-annotate from stablehlo_spmd/demo_rules.toml, print with locations).

Each figure is the median of `--repeat` runs; the ratio is ours / anchor.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import time
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _median_seconds(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()

    import stablehlo_spmd as ss
    from jaxlib.mlir import ir
    from stablehlo_spmd import demo_model
    from stablehlo_spmd.ir import make_context

    params, batch = demo_model.example_args(demo_model.Config(n_layers=options.layers))
    text = ss.export(demo_model.train_step, params, batch)
    rules = str(ROOT / "stablehlo_spmd" / "demo_rules.toml")
    op_count = sum(text.count(marker) for marker in (" = stablehlo.", " = chlo.", "stablehlo.return"))

    def anchor():
        with make_context():
            str(ir.Module.parse(text))

    def ours():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ss.annotate(text, rules=rules)

    anchor_s = _median_seconds(anchor, options.repeat)
    ours_s = _median_seconds(ours, options.repeat)
    print(f"train_step, {options.layers} layers, ~{op_count} ops, {len(text) / 1e6:.1f} MB of text")
    print(f"jaxlib parse+print (anchor): {anchor_s * 1e3:8.1f} ms")
    print(f"ss.annotate:                 {ours_s * 1e3:8.1f} ms   ratio {ours_s / anchor_s:.2f}x")


if __name__ == "__main__":
    main()
