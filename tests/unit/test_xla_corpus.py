"""benchmarks/xla_corpus.py without the corpus: reading HLO modules out of a made-up C++ test
file, the cause it guesses for a module, the summary, and how it compares results."""

import subprocess
import sys

import numpy as np
import pytest

from benchmark_modules import BENCHMARKS, benchmark_module

_FAKE_TEST_FILE = r'''
// Not a real test file: the shapes of what spmd_partitioner_test.cc holds.
class SpmdPartitioningTest : public HloTestBase {
  absl::StatusOr<std::unique_ptr<HloModule>> PartitionComputation(
      absl::string_view hlo_module, int64_t num_devices);
};

TEST_P(SpmdPartitioningTest, First) {
  absl::string_view hlo_string = R"(
HloModule module

ENTRY entry {
  %p = f32[8,2] parameter(0), sharding={devices=[2,1]0,1}
  ROOT %n = f32[8,2] negate(%p), sharding={replicated}
})";
  TF_ASSERT_OK_AND_ASSIGN(auto module,
                          PartitionComputation(hlo_string, /*num_devices=*/4));
  EXPECT_THAT(module->ToString(), R"(not a module: no entry computation)");
}

TEST_P(SpmdPartitioningTest,
       WrappedNameTwoModules) {
  constexpr absl::string_view first = R"hlo(
HloModule first

ENTRY entry {
  ROOT %p = f32[4] parameter(0), metadata={op_name="f(x)"}
})hlo";
  TF_ASSERT_OK(PartitionComputation(first, 2).status());
  absl::string_view second = R"(
HloModule second

ENTRY entry {
  ROOT %p = f32[4] parameter(0), sharding={devices=[8]<=[8]}
})";
  TF_ASSERT_OK(PartitionComputation(second, /*num_devices=*/16).status());
}

TEST_F(OtherTest, CountsFromTheModule) {
  absl::string_view header = R"(HloModule m, num_partitions=8
ENTRY e {
  ROOT %p = f32[4] parameter(0)
})";
  absl::string_view tiles = R"(HloModule m
ENTRY e {
  ROOT %p = f32[4,4] parameter(0), sharding={devices=[2,2]<=[4]}
})";
  absl::string_view maximal = R"(HloModule m
ENTRY e {
  ROOT %p = f32[4] parameter(0), sharding={maximal device=5}
})";
  absl::string_view nothing = R"(HloModule m
ENTRY e {
  ROOT %p = f32[4] parameter(0)
})";
}
'''


@pytest.fixture(scope="module")
def corpus():
    with benchmark_module("xla_corpus") as module:
        yield module


def test_modules_named_by_test_with_their_device_counts(corpus):
    modules = corpus.extract_modules(_FAKE_TEST_FILE)
    assert [(m.name, m.devices) for m in modules] == [
        ("First", 4),
        ("WrappedNameTwoModules", 2),         # the count given right after each module
        ("WrappedNameTwoModules#2", 16),
        ("CountsFromTheModule", 8),           # num_partitions in the header
        ("CountsFromTheModule#2", 4),         # the tile assignment's devices
        ("CountsFromTheModule#3", 6),         # maximal device 5
        ("CountsFromTheModule#4", None),      # nothing says
    ]


def test_module_text_is_the_whole_literal(corpus):
    first, wrapped = corpus.extract_modules(_FAKE_TEST_FILE)[:2]
    assert first.hlo.startswith("HloModule module\n\nENTRY entry {")
    assert first.hlo.endswith("sharding={replicated}\n}")
    # a delimited literal R"hlo(...)hlo" ends at its own delimiter, not at the first )"
    assert 'op_name="f(x)"}\n}' in wrapped.hlo and wrapped.hlo.startswith("HloModule first")


def test_wrapped_instructions_joined_before_reading_opcodes(corpus):
    hlo = """HloModule m

ENTRY e {
  %lhs = f32[8,8] parameter(0)
  %tuple = (f32[8,8],
    f32[8,8]) tuple(%lhs, %lhs)
  %conv = f32[8,8] convolution(%lhs, %lhs),
    window={size=1 lhs_dilate=2}, dim_labels=bf_io->bf
  %grouped = f32[8,8] convolution(%lhs, %lhs), dim_labels=bf_io->bf,
    feature_group_count=2
  ROOT %cc = f32[8,8] custom-call(%lhs),
    custom_call_target="TopK"
}"""
    assert corpus._instruction_opcodes(hlo) == {
        "lhs": "parameter", "tuple": "tuple", "conv": "convolution(dilated)",
        "grouped": "convolution(groups)", "cc": "custom-call(TopK)"}


_HLO = """HloModule m
ENTRY e {
  %p = f32[8] parameter(0)
  %g = f32[8] gather(%p, %p), offset_dims={}
  ROOT %d = f32[8] dot(%g, %g)
}"""


def _result(**fields):
    base = {"name": "m", "devices": 4, "status": "ok", "detail": "", "ours_bytes": 300.0,
            "emitted_bytes": 300.0, "xla_bytes": 100.0, "ours_at": {"g": 200.0, "d": 100.0},
            "xla_at": {"d": 100.0},
            "ours_counts": {"all-gather": 1}, "emitted_counts": {"all-gather": 1}}
    return {**base, **fields}


def test_cause_is_the_instruction_moving_the_most_more_than_xla(corpus):
    assert corpus.cause(_result(), _HLO) == ("gather/scatter", "200 B at gather %g (XLA 0 B)")
    # the dot moves more than the gather, but XLA moves as much there
    assert corpus.cause(_result(ours_at={"g": 40.0, "d": 280.0}, xla_at={"d": 250.0}),
                        _HLO)[0] == "gather/scatter"
    assert corpus.cause(_result(ours_at={"d": 300.0}), _HLO) == (
        "dot/conv strategy", "300 B at dot %d (XLA 100 B)")


def test_cause_is_the_boundary_when_xla_adds_collectives(corpus):
    group, reason = corpus.cause(_result(ours_counts={"all-gather": 3},
                                         emitted_counts={"all-gather": 1}), _HLO)
    assert group == "uneven boundary" and "adds 2 all-gather" in reason


def test_summary_counts_and_totals(corpus):
    results = [
        _result(name="a"),                                                    # loses
        _result(name="b", status="unrun", ours_bytes=50.0, xla_bytes=100.0),  # wins
        _result(name="c", ours_bytes=0.0, xla_bytes=0.0, ours_at={}),      # ties
        {"name": "d", "devices": 2, "status": "refused", "detail": "no"},
        {"name": "e", "devices": 2, "status": "xla-fail", "detail": "no"},
    ]
    summary = corpus.summarize(results, {r["name"]: _HLO for r in results}, extracted=9)
    assert (summary.extracted, summary.kept, summary.compared, summary.at_most_xla) == (9, 5, 3, 2)
    assert (summary.ours_total, summary.xla_total) == (350.0, 200.0)
    assert summary.statuses == {"ok": 2, "unrun": 1, "refused": 1, "xla-fail": 1}
    assert [loser[0]["name"] for loser in summary.losers] == ["a"]
    assert summary.causes == {"gather/scatter": (1, 200.0)}
    assert summary.geomean == pytest.approx((3.0 * 0.5) ** 0.5)   # c moves nothing: left out
    assert summary.refusals == [("refused: no", 1, "d")]
    text = corpus.markdown(results, summary, "cmd", "corpus")
    assert "ours <= XLA on 2 (67%)" in text and "ours / XLA 1.75" in text


def test_numerics_exact_for_integers_and_within_precision_for_floats(corpus):
    import ml_dtypes

    assert corpus._difference(np.arange(4), np.arange(4)) is None
    assert corpus._difference(np.array([0, 1, 2, 4]), np.arange(4)) == "1 of 4 elements differ"
    big = np.array([1000.0, 1.0], np.float32)
    assert corpus._difference(big + np.float32(0.05), big) is None     # 5e-5 of the largest
    assert corpus._difference(big + np.float32([0.0, 0.5]), big) == "1 of 2 elements differ"
    half = np.array([3.0, 1.0], ml_dtypes.bfloat16)
    assert corpus._difference(half + ml_dtypes.bfloat16(0.015625), half) is None
    assert corpus._difference(half * 2, half) == "2 of 2 elements differ"
    assert corpus._difference(np.zeros(3), np.zeros(4)) == "shape (3,) vs (4,)"


def test_unreadable_corpus_is_a_located_error(tmp_path):
    missing = tmp_path / "none.cc"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "xla_corpus.py"), str(missing)],
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert f"error: cannot read '{missing}'" in done.stderr and "Traceback" not in done.stderr
    empty = tmp_path / "empty.cc"
    empty.write_text("TEST(A, B) {}\n")
    done = subprocess.run([sys.executable, str(BENCHMARKS / "xla_corpus.py"), str(empty)],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "no HLO module" in done.stderr


def test_bytes_by_instruction_reads_through_inlined_calls(corpus):
    from stablehlo_spmd.collective_bytes import Collective

    found = [Collective("all-reduce", "f32[2]", 2, 8.0, "call.1/dot.89"),
             Collective("all-gather", "f32[2]", 2, 4.0, "dot.89"),
             Collective("all-gather", "f32[2]", 2, 1.0, "")]
    assert corpus._bytes_by_instruction(found) == {"dot.89": 12.0, "?": 1.0}
