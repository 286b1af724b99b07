"""lit configuration for stablehlo-spmd's FileCheck tests.

RUN lines call `stablehlo-spmd-opt` and `FileCheck`.  LLVM's FileCheck is
used when one is on PATH; otherwise the PyPI `filecheck` port stands in for
it.  The tools are looked up next to the running Python first, so the suite
tests the installation that runs it.
"""

import os
import shutil
import sys

import lit.formats

config.name = "stablehlo-spmd"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.excludes = ["Inputs", "lit.cfg.py"]  # Inputs: files RUN lines read, not tests
config.test_source_root = os.path.dirname(__file__)
# Temporary files go under Output/ unless the caller (tests/test_lit.py) picks a place.
config.test_exec_root = os.environ.get(
    "STABLEHLO_SPMD_LIT_OUT", os.path.join(config.test_source_root, "Output"))

python_bin = os.path.dirname(sys.executable)
search_path = os.pathsep.join([python_bin, os.environ.get("PATH", "")])
config.environment["PATH"] = search_path
for name in ("HOME", "TMPDIR", "XLA_FLAGS", "STABLEHLO_SPMD_TRACEBACK"):
    if name in os.environ:
        config.environment[name] = os.environ[name]

file_check = shutil.which("FileCheck", path=search_path) or shutil.which("filecheck", path=search_path)
if file_check is None:
    lit_config.fatal("neither LLVM's FileCheck nor the PyPI 'filecheck' is installed")

config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
config.substitutions.append((r"\bFileCheck\b", file_check))
