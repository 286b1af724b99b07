"""Run the lit/FileCheck suite from pytest, one pytest test per lit file.

So that one command (`pytest`) runs everything and ends with a summary CI
can read, and a failing FileCheck test is named in it.
"""

import os
import pathlib
import subprocess
import sys

import pytest

LIT_ROOT = pathlib.Path(__file__).parent / "lit"
LIT_TESTS = sorted(p for p in LIT_ROOT.rglob("*.mlir") if "Inputs" not in p.parts
                   and "Output" not in p.parts)


@pytest.mark.parametrize("test_file", LIT_TESTS, ids=lambda p: str(p.relative_to(LIT_ROOT)))
def test_lit(test_file, tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", "from lit.main import main; main()", "-v", str(test_file)],
        capture_output=True, text=True,
        env={**os.environ, "STABLEHLO_SPMD_LIT_OUT": str(tmp_path)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Passed: 1" in result.stdout, result.stdout
