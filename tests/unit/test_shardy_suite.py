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
