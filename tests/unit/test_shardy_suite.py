"""benchmarks/shardy_suite.py without Shardy's suite: splitting a test file, reading both
spellings of a sharding as the blocks each device holds, and one chunk of our own
compared, priced and run."""

import pathlib

import pytest
from jaxlib.mlir import ir

from benchmark_modules import benchmark_module
from stablehlo_spmd.ir import make_context

_FILE = """// RUN: not a real test file
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @first(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>}) -> tensor<8x8xf32> {
  %0 = stablehlo.negate %arg0 : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @second(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a", ?}, {?}]>},
                  %arg1: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{?}, {"b", ?}]>}) -> tensor<8x8xf32> {
  %0 = stablehlo.add %arg0, %arg1 : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
"""


@pytest.fixture
def suite(tmp_path):
    (tmp_path / "made_up.mlir").write_text(_FILE)
    with benchmark_module("shardy_suite") as module:
        yield module, tmp_path


def test_chunks_keep_the_file_line_numbers(suite):
    module, folder = suite
    chunks = module.split_chunks(folder / "made_up.mlir")
    assert [c.name for c in chunks] == ["made_up.mlir#0", "made_up.mlir#1"]
    second = chunks[1]
    assert second.line == 8
    # The file's line 10 is the chunk text's line 10 too.
    assert second.text.splitlines()[9].startswith("func.func @second")


@pytest.mark.parametrize("sdy_text, hlo_text, rank", [
    ('#sdy.sharding<@mesh, [{"b"}, {"a"}]>', "{devices=[2,2]<=[2,2]T(1,0)}", 2),
    ('#sdy.sharding<@mesh, [{"a", "b"}]>', "{devices=[4]<=[4]}", 1),
    ('#sdy.sharding<@mesh, [{}, {"b"}]>', "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}",
     2),
    ('#sdy.sharding<@mesh, [{}, {}]>', "{replicated}", 2),
])
def test_both_spellings_read_as_the_same_blocks(suite, sdy_text, hlo_text, rank):
    module, _ = suite
    with make_context() as context:
        mesh = ir.Attribute.parse('#sdy.mesh<["a"=2, "b"=2]>', context)
        meshes = {"mesh": module._mesh_devices(mesh)}
        from_sdy = module.sdy_blocks(ir.Attribute.parse(sdy_text, context), meshes)
    assert from_sdy == module.hlo_blocks(hlo_text, rank)


def test_a_sub_axis_reads_as_its_slice_of_the_axis(suite):
    module, _ = suite
    with make_context() as context:
        meshes = {"mesh": module._mesh_devices(ir.Attribute.parse('#sdy.mesh<["x"=4]>', context))}
        minor = module.sdy_blocks(ir.Attribute.parse(
            '#sdy.sharding<@mesh, [{"x":(2)2}]>', context), meshes)
    # "x":(2)2 is the minor half of "x": devices 0,2 hold block 0 and 1,3 block 1.
    assert minor == module.hlo_blocks("{devices=[2,2]0,2,1,3 last_tile_dim_replicate}", 1)
    with make_context() as context:
        major = module.sdy_blocks(ir.Attribute.parse(
            '#sdy.sharding<@mesh, [{"x":(1)2}]>', context), meshes)
    assert major == module.hlo_blocks("{devices=[2,2]<=[4] last_tile_dim_replicate}", 1)


def test_a_chunk_is_compared_priced_and_run(suite, eight_devices):
    module, folder = suite
    chunk = module.split_chunks(folder / "made_up.mlir")[1]
    result = module.run_chunk(chunk, execute=True)
    assert result["status"] == "accepted"
    # Two arguments, one result, one add: both open arguments end up [{"a"}, {"b"}].
    assert result["values"] == 4
    assert result["differ"] == []
    assert result["run"] == "ok"


def test_the_entry_function_is_renamed_main_when_it_is_the_only_one(suite):
    module, _ = suite
    text = "func.func @case_name(%arg0: tensor<2xf32>) -> tensor<2xf32> {\n" \
           "  return %arg0 : tensor<2xf32>\n}\n"
    assert "func.func @main(" in module._with_main(text)
    two = text + text.replace("case_name", "other")
    assert module._with_main(two) is None


def test_summary_counts_what_is_left_out_apart(suite):
    module, _ = suite
    results = [
        {"name": "f#0", "line": 1, "status": "accepted", "values": 4, "differ": [], "run": "ok"},
        {"name": "f#1", "line": 9, "status": "accepted", "values": 2,
         "differ": [("k", "replicated", "tiles [2]")], "bytes": (0.0, 8.0), "run": "ok"},
        {"name": "f#2", "line": 20, "status": "refused", "why": "no"},
        {"name": "f#3", "line": 30, "status": "too-big"},
        {"name": "f#4", "line": 40, "status": "accepted", "values": 2,
         "differ": [("k", "replicated", "tiles [2]")], "bytes": (8.0, 4.0), "run": "ok"},
    ]
    lines = module.summarize(results)
    assert "4 on at most 8 devices" in lines[0] and "1 too-big" in lines[0]
    assert lines[1].startswith("accepted: 3 of 4; refused 1, crashed 0")
    # f#1's difference is shown cheaper, f#4's is not.
    assert "6 of 8 (75.0%)" in lines[2]
    assert "in a chunk where ours moves fewer bytes: 7 of 8 (87.5%)" in lines[2]
    assert "fewer bytes in 1, as many in 0, more in 1" in lines[3]
    assert lines[4].startswith("run against one device: 3 ok, 0 mismatch")


def test_script_refuses_a_folder_without_tests(tmp_path):
    import subprocess
    import sys
    from benchmark_modules import BENCHMARKS
    done = subprocess.run([sys.executable, str(BENCHMARKS / "shardy_suite.py"), str(tmp_path),
                           "--report", str(tmp_path / "r.md")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 1 and "no .mlir files" in done.stderr
    assert not pathlib.Path(tmp_path / "r.md").exists()


# --------------------------------------------------- derived one-op cases

_REGISTRY = """// RUN: sdy_opt %s -sdy-populate-op-sharding-rules 2>&1 | FileCheck %s

// CHECK-LABEL: func @pointwise
func.func @pointwise(%arg0: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  // CHECK: sdy.sharding_rule = #sdy.op_sharding_rule<([i, j, k], [i, j, k])->([i, j, k]) {i=2, j=3, k=4}>
  %0 = stablehlo.add %arg0, %arg0 : tensor<2x3x4xf32>
  return %0 : tensor<2x3x4xf32>
}

// CHECK-LABEL: func @slice_then_concat
func.func private @slice_then_concat(%arg0: tensor<3x8xf32>) -> tensor<3x11xf32> {
  %0 = stablehlo.slice %arg0 [0:3, 0:3] : (tensor<3x8xf32>) -> tensor<3x3xf32>
  // CHECK: sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [i, j])->([i, j]) {i=3, j=11}>
  %1 = stablehlo.concatenate %arg0, %0, dim = 1 : (tensor<3x8xf32>, tensor<3x3xf32>) -> tensor<3x11xf32>
  return %1 : tensor<3x11xf32>
}

// CHECK-LABEL: func @scalar
func.func @scalar(%arg0: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.negate %arg0 : tensor<f32>
  return %0 : tensor<f32>
}

// CHECK-LABEL: func @custom_with_rule
func.func @custom_with_rule(%arg0: tensor<4x2xf32>) -> tensor<2x5xf32> {
  // CHECK: sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([j, k]) {i=4, j=2, k=5}, custom>
  %0 = stablehlo.custom_call @foo(%arg0) {sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([j, k]) {i=4, j=2, k=5}, custom>} : (tensor<4x2xf32>) -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}
"""


@pytest.fixture
def registry(suite):
    module, folder = suite
    (folder / "op_sharding_rule_registry.mlir").write_text(_REGISTRY)
    return module, module.registry_file(folder)


@pytest.mark.parametrize("shape, sharding", [
    ((2, 3, 4), '#sdy.sharding<@mesh, [{"x"}, {}, {"y"}]>'),
    ((3, 8), '#sdy.sharding<@mesh, [{}, {"x"}]>'),
    # A size-0 dim holds nothing to split; only the first two even dims are taken.
    ((0, 6, 2, 4), '#sdy.sharding<@mesh, [{}, {"x"}, {"y"}, {}]>'),
    ((3, 5), None),
    ((), None),
])
def test_a_derived_sharding_takes_the_first_two_even_dims(suite, shape, sharding):
    module, _ = suite
    assert module.derived_sharding(shape) == sharding


def test_registry_functions_become_a_forward_and_a_backward_case(registry):
    module, path = registry
    derivation = module.derive_cases(path)
    assert derivation.functions == 4
    assert [c.name for c in derivation.cases] == [
        "op_sharding_rule_registry.mlir@pointwise/forward",
        "op_sharding_rule_registry.mlir@pointwise/backward",
        "op_sharding_rule_registry.mlir@slice_then_concat/forward",
        "op_sharding_rule_registry.mlir@custom_with_rule/forward",
        "op_sharding_rule_registry.mlir@custom_with_rule/backward",
    ]
    assert derivation.skipped == [
        ("slice_then_concat", "backward", "first result has no dim of even size"),
        ("scalar", "forward", "first argument has no dim of even size"),
        ("scalar", "backward", "first result has no dim of even size"),
    ]
    by_case = {c.case: c for c in derivation.cases}
    # The op under test is the one after the CHECK of its rule, not the slice before it.
    assert by_case["slice_then_concat/forward"].op == "stablehlo.concatenate"
    assert by_case["custom_with_rule/forward"].op == "stablehlo.custom_call @foo"
    assert by_case["slice_then_concat/forward"].line == 11
    assert all(c.derived for c in derivation.cases)


def test_a_derived_case_is_the_function_public_as_main_on_the_mesh(registry):
    module, path = registry
    by_case = {c.case: c for c in module.derive_cases(path).cases}
    forward = by_case["slice_then_concat/forward"].text
    assert 'sdy.mesh @mesh = <["x"=2, "y"=2]>' in forward
    assert "func.func @main(%arg0: tensor<3x8xf32> " \
           '{sdy.sharding = #sdy.sharding<@mesh, [{}, {"x"}]>})' in forward
    assert "private" not in forward and "CHECK" not in forward
    backward = by_case["custom_with_rule/backward"].text
    assert '-> (tensor<2x5xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>})' in backward
    assert "sharding_rule" not in backward


def test_no_registry_file_means_no_derived_cases(suite):
    module, folder = suite
    assert module.registry_file(folder) is None


@pytest.mark.parametrize("shardy, ours, how", [
    ("{devices=[2,2]<=[4]}", "{devices=[2,1,2]<=[4] last_tile_dim_replicate}", "less"),
    ("{replicated}", "{devices=[1,2,2]<=[4] last_tile_dim_replicate}", "more"),
    ("{devices=[2,1,2]<=[4] last_tile_dim_replicate}",
     "{devices=[1,2,2]<=[4] last_tile_dim_replicate}", "other"),
])
def test_a_difference_says_whether_ours_shards_less_or_more(suite, shardy, ours, how):
    module, _ = suite
    assert module.how_sharded(module.hlo_blocks(shardy, 2), module.hlo_blocks(ours, 2)) == how
    assert module.how_sharded(module.hlo_blocks("{replicated}", 2), "missing") == "other"


def test_derived_summary_counts_kinds_and_all_cases_agree_over_both(registry):
    module, path = registry
    derivation = module.derive_cases(path)
    derived = [
        {"name": "r@a/forward", "line": 4, "derived": True, "op": "stablehlo.add",
         "status": "accepted", "ours": "accepted", "values": 3, "differ": [], "run": "ok"},
        {"name": "r@b/forward", "line": 9, "derived": True, "op": "stablehlo.concatenate",
         "status": "accepted", "ours": "accepted", "values": 4, "run": "mismatch: result 0",
         "bytes": (16, 48),  # ours moves fewer bytes than after Shardy's propagation
         "differ": [("k1", "tiles [2x2]", "tiles [2x1]", "less"),
                    ("k2", "tiles [2x2]", "tiles [2x1]", "less"),
                    ("k3", "replicated", "tiles [2]", "more")]},
        {"name": "r@c/backward", "line": 20, "derived": True, "op": "stablehlo.sort",
         "status": "refused", "ours": "refused", "why": "no", "run": "not run: custom_call"},
        {"name": "r@d/backward", "line": 30, "derived": True, "op": "stablehlo.fft",
         "status": "shardy-fails", "ours": "accepted", "why": "worker died"},
    ]
    lines = module.summarize_derived(derived, derivation)
    assert lines[0].startswith("derived cases: 4 from 4 functions")
    assert "3 not made" in lines[0] and "Shardy propagates 3 (fails on 1)" in lines[0]
    assert lines[1] == "accepted: 3 of 4; refused 1, crashed 0"
    assert "4 of 7 (57.1%)" in lines[2]
    assert "ours shards 2 less, 1 more, 0 as much but otherwise;" in lines[2]
    # The three differing values are in a case where ours moves fewer bytes.
    assert lines[2].endswith("agreeing or in a case where ours moves fewer bytes: 7 of 7 (100.0%)")
    assert "ours moves fewer bytes in 1, as many in 0, more in 0" in lines[3]
    assert lines[4] == "run against one device: 1 ok, 1 mismatch, 1 not run"
    plain = [{"name": "f#0", "line": 1, "status": "accepted", "values": 3, "differ": []}]
    everything = module.summarize_all(plain, derived)
    assert "7 of 10 (70.0%)" in everything
    assert everything.endswith("where ours moves fewer bytes: 10 of 10 (100.0%)")
    text = module.report(plain + derived, 1.0, derivation)
    assert "- `stablehlo.concatenate`: 2 values in 1 cases" in text
    assert "  - b/forward (line 9) `k1`: tiles [2x2] / tiles [2x1]" in text
    assert "- r@b/forward (line 9): accepted mismatch: result 0" in text
    assert "- slice_then_concat/backward: first result has no dim of even size" in text
    # The plain chunks keep their own per-file table, the derived cases stay out of it.
    assert "| f | 1 | 0 | 3 | 3 |" in text and "| r@a/forward" not in text


def test_a_lost_worker_is_blamed_on_the_phase_it_was_in(suite):
    module, folder = suite
    chunk = module.split_chunks(folder / "made_up.mlir")[0]
    slot = module._Slot(None, None, chunk=chunk, phase="shardy",
                        partial={**chunk.result(), "status": "shardy-fails", "ours": "accepted"})
    assert module._lost(slot, "worker died") == {**slot.partial, "died": True}
    slot.phase = "ours"
    assert module._lost(slot, "over 9 s")["status"] == "crash"


def test_a_derived_case_is_compared_and_run(registry, eight_devices):
    module, path = registry
    forward = module.derive_cases(path).cases[0]
    result = module.run_chunk(forward, execute=True)
    assert result["derived"] and result["op"] == "stablehlo.add"
    assert result["status"] == "accepted"
    # The argument, the add and the result, all [{"x"}, {}, {"y"}].
    assert result["values"] == 3 and result["differ"] == []
    assert result["run"] == "ok"


def test_script_refuses_derived_only_without_the_registry_file(suite):
    import subprocess
    import sys
    from benchmark_modules import BENCHMARKS
    _, folder = suite
    done = subprocess.run([sys.executable, str(BENCHMARKS / "shardy_suite.py"), str(folder),
                           "--derived-only", "--report", str(folder / "r.md")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 1 and "no op_sharding_rule_registry.mlir" in done.stderr
    assert not (folder / "r.md").exists()
