"""Importing the scripts of benchmarks/ (not a package) in tests.

The scripts import each other by plain name (``from report import ...``),
as Python lets a script import its neighbours, so a test puts benchmarks/ on
the path for as long as it uses them and forgets them afterwards.
"""

import contextlib
import importlib
import pathlib
import sys

BENCHMARKS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"


@contextlib.contextmanager
def benchmark_module(name: str):
    """benchmarks/<name>.py imported, with benchmarks/ on sys.path while the block runs."""
    before = set(sys.modules)
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))
        for loaded in set(sys.modules) - before:
            if getattr(sys.modules[loaded], "__file__", "") and \
                    pathlib.Path(sys.modules[loaded].__file__).parent == BENCHMARKS:
                del sys.modules[loaded]
