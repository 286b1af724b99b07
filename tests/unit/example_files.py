"""Where the example programs' rules files are, for the tests that run every example."""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def rules_file(example: str) -> pathlib.Path:
    """The rules of ``examples/<example>.py``; the transformer is the demo's
    model, whose rules ship inside the package."""
    if example == "transformer":
        return ROOT / "stablehlo_spmd" / "demo_rules.toml"
    return ROOT / "examples" / f"{example}_rules.toml"
