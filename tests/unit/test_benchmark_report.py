"""benchmarks/report.py: the markdown report and chart of compare_xla.py --all, on made-up records."""

import sys

import pytest

from benchmark_modules import benchmark_module


@pytest.fixture(scope="module")
def report():
    with benchmark_module("report") as module:
        yield module


def _rows(report):
    C, M, P = report.Collective, report.Memory, report.PassTimes
    return [
        report.Row(
            "fsdp-step",
            ours=[C("all-reduce", "f32[8]", 8, 56.0), C("all-gather", "f32[2,32]", 8, 1792.0),
                  C("reduce-scatter", "f32[16,32]", 8, 1792.0)],
            xla=[C("all-reduce", "f32[8]", 8, 56.0), C("all-gather", "f32[2,32]", 8, 1792.0),
                 C("all-gather", "f32[2,32]", 8, 1792.0), C("all-to-all", "f32[8,8]", 8, 28.0)],
            ours_emitted=[C("all-reduce", "f32[8]", 8, 56.0),
                          C("all-gather", "f32[2,32]", 8, 1792.0)],
            ours_ms=1.5, xla_ms=2.0, ours_host_ms=3.0, xla_host_ms=2.4, ours_exec_ms=1.4,
            xla_exec_ms=2.0,
            passes=P(annotate=1.31, propagate=7.5, partition=12.0, pipeline=23.1),
            ours_compile_ms=120.0, xla_lower_ms=15.5, xla_compile_ms=99.0,
            ours_memory=M(2048, 512, 1024, 0), xla_memory=M(2048, 512, 3072, 512),
            max_error=1e-7),
        report.Row(
            "no-collectives", ours=[], xla=[], ours_emitted=[], ours_ms=0.3, xla_ms=0.3, ours_host_ms=0.25,
            xla_host_ms=0.5, ours_exec_ms=None, xla_exec_ms=None, passes=P(0.5, 0.5, 1.0, 3.0),
            ours_compile_ms=10.0, xla_lower_ms=2.0, xla_compile_ms=9.0, ours_memory=None,
            xla_memory=M(64, 64, 0), max_error=0.0),
    ]


def _info(report):
    return report.RunInfo(date="2030-01-02 03:04 UTC", jax_version="0.10.2",
                          jaxlib_version="0.10.1", devices=8, platform="cpu",
                          command="python3 benchmarks/compare_xla.py --all", repeat=50,
                          unmatched="ours")


def _table_line(text, name):
    [line] = [line for line in text.splitlines() if line.startswith(f"| {name} |")]
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_markdown_header_table_and_collective_lists(report):
    text = report.markdown(_rows(report), _info(report))
    for expected in ("2030-01-02 03:04 UTC", "jax 0.10.2, jaxlib 0.10.1", "devices: 8 (cpu)",
                     "`python3 benchmarks/compare_xla.py --all`", "median of 50",
                     "![bytes and step time, ours / XLA](latest.png)"):
        assert expected in text, expected
    header = _table_line(text, "workload")
    cells = dict(zip(header, _table_line(text, "fsdp-step")))
    assert cells["collectives ours"] == "1AR 1AG 1RS"
    assert cells["collectives XLA"] == "1AR 2AG 1A2A"
    assert cells["bytes ours"] == "3.6 KiB" and cells["bytes XLA"] == "3.6 KiB"
    assert cells["bytes ours as emitted"] == "1.8 KiB"          # 56 + 1792 = 1848 B
    assert cells["bytes o/x"] == f"{3640 / 3668:.2f}"
    assert cells["step o/x"] == "0.75" and cells["exec o/x"] == "0.70"
    assert cells["host ms ours"] == "3.000" and cells["host ms XLA"] == "2.400"
    assert cells["host o/x"] == "1.25"
    assert cells["memory ours"] == "3.5 KiB" and cells["memory XLA"] == "5.0 KiB"
    assert cells["ours ms: annotate / propagate / partition"] == "1.3 / 7.5 / 12.0"
    assert cells["ours compile ms"] == "120.0"
    assert cells["XLA ms: lower / compile"] == "15.5 / 99.0"

    empty = dict(zip(header, _table_line(text, "no-collectives")))
    assert empty["collectives ours"] == "none" and empty["bytes o/x"] == "="
    assert empty["bytes ours as emitted"] == "0 B"
    assert empty["exec o/x"] == "n/a" and empty["memory ours"] == "n/a"
    assert empty["host o/x"] == "0.50"

    # the per-workload section lists each collective of each side
    section = text.split("### fsdp-step", 1)[1].split("###", 1)[0]
    assert "| ours | reduce-scatter | `f32[16,32]` | 8 | 1.8 KiB |" in section
    assert "| XLA | all-to-all | `f32[8,8]` | 8 | 28 B |" in section
    assert section.count("| XLA | all-gather |") == 2
    assert "No collectives on either side." in text.split("### no-collectives", 1)[1]


def test_printed_table_has_step_host_and_exec_columns(report):
    printed = []
    report.print_text(_rows(report), _info(report), out=printed.append)

    def cells(name):
        [header] = [line for line in printed if line.startswith("workload ")]
        [line] = [line for line in printed if line.startswith(f"{name} ")]
        return dict(zip((c.strip() for c in header.split("|")),
                        (c.strip() for c in line.split("|"))))

    row = cells("fsdp-step")
    assert (row["bytes ours"], row["bytes ours emitted"], row["bytes XLA"]) == (
        "3.6 KiB", "1.8 KiB", "3.6 KiB")
    assert (row["step ms ours"], row["step ms XLA"], row["step o/x"]) == ("1.500", "2.000", "0.75")
    assert (row["host ms ours"], row["host ms XLA"], row["host o/x"]) == ("3.000", "2.400", "1.25")
    assert (row["exec ms ours"], row["exec ms XLA"], row["exec o/x"]) == ("1.400", "2.000", "0.70")
    empty = cells("no-collectives")
    assert empty["host o/x"] == "0.50" and empty["exec o/x"] == "n/a"


def test_write_report_draws_the_chart(report, tmp_path):
    written = report.write_report(tmp_path, _rows(report), _info(report))
    assert [p.name for p in written] == ["latest.md", "latest.png"]
    assert (tmp_path / "latest.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "](latest.png)" in (tmp_path / "latest.md").read_text()


def test_markdown_is_written_without_matplotlib(report, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)     # `import matplotlib` fails
    written = report.write_report(tmp_path, _rows(report), _info(report))
    assert [p.name for p in written] == ["latest.md"]
    assert not (tmp_path / "latest.png").exists()
    text = (tmp_path / "latest.md").read_text()
    assert "| fsdp-step |" in text and "latest.png" not in text
    assert "pip install '.[report]'" in capsys.readouterr().err
