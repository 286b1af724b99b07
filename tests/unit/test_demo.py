"""The README's first command: the demo partitions, runs and checks a GPT training step.

The demo runs once, as a user runs it: a fresh process started in an empty
directory outside the checkout, with no PYTHONPATH and no C++ log level of
its own.  An audit hook in that process records every file it opens, so the
tests can tell that the installed package carries everything the demo reads.
"""

import os
import pathlib
import re
import subprocess
import sys
import tomllib

import pytest

from stablehlo_spmd.demo import NO_LOCATION, list_collectives

CHECKOUT = pathlib.Path(os.path.abspath(__file__)).parents[2]

DEMO_RECORDING_OPENED_FILES = """
import os, sys
opened = set()
def record(event, args):
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        opened.add(os.path.abspath(os.fsdecode(args[0])))  # a link is caught where it is
sys.addaudithook(record)
import stablehlo_spmd
from stablehlo_spmd.cli.main import main
try:
    main(["demo"])
finally:
    with open(sys.argv[1], "w") as out:
        # First the package this process imported (the installed one, which
        # is not the checkout's under a plain `pip install .`), then the files.
        out.write("\\n".join([os.path.dirname(os.path.abspath(stablehlo_spmd.__file__))]
                             + sorted(opened)))
"""


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("outside_the_checkout")
    opened_list = cwd.parent / "opened.txt"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "TF_CPP_MIN_LOG_LEVEL", "XLA_FLAGS")}
    done = subprocess.run([sys.executable, "-c", DEMO_RECORDING_OPENED_FILES, str(opened_list)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    package, *opened = [pathlib.Path(p) for p in opened_list.read_text().splitlines()]
    return done, package, opened


def test_demo_matches_single_device_from_outside_the_checkout(demo_run):
    done, _, _ = demo_run
    assert done.returncode == 0, done.stderr
    assert "all results match the single-device run: True" in done.stdout
    assert re.search(r"^\d+ collectives, [\d,]+ bytes per device$", done.stdout, re.MULTILINE)
    for stage in ("export", "annotate", "propagate", "partition"):
        assert re.search(rf"^{stage} +[\d.]+ ms$", done.stdout, re.MULTILINE), stage


def test_demo_prints_no_cpp_log_lines(demo_run):
    done, _, _ = demo_run
    assert "pjrt_client.cc" not in done.stderr
    assert not re.search(r"^[IWEF]\d{4} ", done.stderr, re.MULTILINE), done.stderr  # absl's prefix
    assert done.stderr == ""


def test_a_log_level_the_user_set_is_kept():
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"}
    done = subprocess.run(
        [sys.executable, "-c", "import os, stablehlo_spmd; print(os.environ['TF_CPP_MIN_LOG_LEVEL'])"],
        env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "0", done.stderr


def test_demo_reads_only_files_the_installed_package_carries(demo_run):
    _, package, opened = demo_run
    assert not [p for p in opened if (CHECKOUT / "examples") in p.parents]
    package_data = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())[
        "tool"]["setuptools"]["package-data"]["stablehlo_spmd"]
    read_from_package = {p.relative_to(package).as_posix() for p in opened
                         if package in p.parents and p.suffix not in (".py", ".pyc")}
    assert "demo_rules.toml" in read_from_package
    assert read_from_package <= set(package_data)


def test_every_collective_is_located_in_the_model_or_nowhere(demo_run):
    done, package, _ = demo_run
    lines = done.stdout.splitlines()
    first = lines.index(next(line for line in lines if line.startswith("collective "))) + 1
    last = lines.index(next(line for line in lines if re.match(r"\d+ collectives,", line)))
    model_file = (package / "demo_model.py").resolve()
    located = 0
    for line in lines[first:last]:
        where = line.split(maxsplit=2)[2]
        if where == NO_LOCATION:
            continue
        path, line_number, _column = where.rsplit(":", 2)
        assert pathlib.Path(path).resolve() == model_file, line
        assert 0 < int(line_number) <= len(model_file.read_text().splitlines())
        located += 1
    assert located * 2 > last - first  # most come from a line of the model, not "no location"


def test_collective_costs_follow_the_cost_table():
    # One all-reduce of a 64x8 f32 partial over 4 devices moves 2 * 2048 * 3/4 bytes.
    text = '''
    func.func @main(%x: tensor<64x8xf32>) -> tensor<64x8xf32> {
      %0 = "stablehlo.all_reduce"(%x) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %s : tensor<f32>
      }) : (tensor<64x8xf32>) -> tensor<64x8xf32>
      return %0 : tensor<64x8xf32>
    }'''
    [collective] = list_collectives(text)
    assert collective.kind == "all_reduce"
    assert collective.bytes_per_device == 2 * 64 * 8 * 4 * 3 / 4
