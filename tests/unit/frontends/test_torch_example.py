"""examples/torch_spmd.py, the ported PyTorch/XLA script, trains as eager torch does."""

import importlib.util
import pathlib
import warnings

import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "torch_spmd.py"


def _load():
    spec = importlib.util.spec_from_file_location("torch_spmd_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_ported_script_matches_its_eager_run(monkeypatch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = _load().main(steps=3)
        eager = _load()
        # The same script with the one line the port added undone: the step runs eagerly.
        monkeypatch.setattr(eager.xs, "compile", lambda fn, *args, **kwargs: fn)
        expected = eager.main(steps=3)
    assert compiled == pytest.approx(expected, rel=1e-5)
