"""benchmarks/hlo_collectives.py: collectives and their bytes per device, read from HLO text
and from partitioned StableHLO.

Every expected byte count is worked out by hand in the comment beside it from
DESIGN.md's resharding cost table (T: bytes of the tensor the group covers,
p: the group size): all_gather T(p−1)/p, all_to_all T(p−1)/p², all_reduce
2T(p−1)/p, reduce_scatter T(p−1)/p, collective_permute T/p.
"""

import pytest

from benchmark_modules import benchmark_module


@pytest.fixture(scope="module")
def hc():
    with benchmark_module("hlo_collectives") as module:
        yield module


def _module(*lines):
    """An HLO module whose entry computation holds `lines` (after two f32[16] parameters)."""
    body = "\n".join(f"  {line}" for line in lines)
    return f"""HloModule m, num_partitions=8

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(f32[] %a, f32[] %b)
}}

ENTRY %main (p0: f32[16], p1: f32[16]) -> f32[16] {{
  %p0 = f32[16]{{0}} parameter(0)
  %p1 = f32[16]{{0}} parameter(1)
{body}
}}
"""


def _one(hc, *lines, devices=8):
    [found] = hc.collectives(_module(*lines), devices)
    return found


def test_all_reduce_by_its_operand(hc):
    found = _one(hc, "%ar = f32[2,16]{1,0} all-reduce(f32[2,16]{1,0} %x), channel_id=1, "
                     "replica_groups={{0,1},{2,3},{4,5},{6,7}}, use_global_device_ids=true, "
                     "to_apply=%add")
    # T = 2*16*4 = 128 B, p = 2: 2 * 128 * 1/2 = 128
    assert (found.kind, found.shape, found.group, found.bytes) == (
        "all-reduce", "f32[2,16]", 2, 128)


def test_operand_shape_found_by_name_when_not_printed_inline(hc):
    found = _one(hc, "ROOT %ar = f32[16]{0} all-reduce(%p0), replica_groups={}, to_apply=%add")
    # T = 16*4 = 64 B over all 8 devices: 2 * 64 * 7/8 = 112
    assert (found.shape, found.group, found.bytes) == ("f32[16]", 8, 112)


def test_combined_all_reduce_with_a_tuple_result_sums_its_operands(hc):
    found = _one(hc, "%ar = (f32[8]{0}, f32[4,4]{1,0}) all-reduce(f32[8]{0} %a, "
                     "f32[4,4]{1,0} %b), channel_id=3, replica_groups=[2,4]<=[8], "
                     "use_global_device_ids=true, to_apply=%add")
    # T = 32 + 64 = 96 B, p = 4: 2 * 96 * 3/4 = 144
    assert (found.shape, found.group, found.bytes) == ("f32[8], f32[4,4]", 4, 144)


def test_many_operands_with_index_comments(hc):
    operands = ", ".join(f"f32[2]{{0}} %x{i}" if i != 5 else f"/*index=5*/f32[2]{{0}} %x{i}"
                         for i in range(6))
    found = _one(hc, f"%ar = (f32[2]{{0}}, f32[2]{{0}}, f32[2]{{0}}, f32[2]{{0}}, f32[2]{{0}}, "
                     f"/*index=5*/f32[2]{{0}}) all-reduce({operands}), replica_groups={{{{0,1}}}}, "
                     "to_apply=%add")
    # T = 6 * 8 = 48 B, p = 2: 2 * 48 * 1/2 = 48
    assert (found.shape, found.bytes) == ("6 operands: f32[2], f32[2], ...", 48)


def test_async_all_reduce_pair_counted_once(hc):
    found = hc.collectives(_module(
        "%ars = f32[1024]{0} all-reduce-start(f32[1024]{0} %x), channel_id=1, "
        "replica_groups={{0,1,2,3}}, to_apply=%add",
        "%ard = f32[1024]{0} all-reduce-done(f32[1024]{0} %ars)"), 8)
    # T = 4096 B, p = 4: 2 * 4096 * 3/4 = 6144
    assert [(c.kind, c.bytes) for c in found] == [("all-reduce", 6144)]


def test_all_gather_by_its_result(hc):
    found = _one(hc, "%ag = f32[8,8]{1,0} all-gather(f32[2,8]{1,0} %x), channel_id=1, "
                     "replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}, "
                     "use_global_device_ids=true, metadata={op_type=\"x\" op_name=\"dot.89\"}")
    # T = the result, 8*8*4 = 256 B, p = 4: 256 * 3/4 = 192
    assert (found.kind, found.shape, found.group, found.bytes) == (
        "all-gather", "f32[2,8]", 4, 192)
    assert found.source == "dot.89"      # the instruction it serves, from its metadata


def test_async_all_gather_reads_the_result_half_of_its_tuple(hc):
    found = hc.collectives(_module(
        "%ags = (f32[2,8]{1,0}, f32[8,8]{1,0}) all-gather-start(f32[2,8]{1,0} %x), "
        "channel_id=1, replica_groups=[2,4]<=[4,2]T(1,0), dimensions={0}, "
        "use_global_device_ids=true",
        "%agd = f32[8,8]{1,0} all-gather-done((f32[2,8]{1,0}, f32[8,8]{1,0}) %ags)"), 8)
    # T = 256 B, p = 4: 192, once
    assert [(c.kind, c.group, c.bytes) for c in found] == [("all-gather", 4, 192)]


def test_combined_async_all_gather(hc):
    found = _one(hc, "%ags = ((f32[2]{0}, f32[1,4]{1,0}), (f32[4]{0}, f32[2,4]{1,0})) "
                     "all-gather-start(f32[2]{0} %a, f32[1,4]{1,0} %b), replica_groups={{0,1}}, "
                     "dimensions={0}")
    # T = 16 + 32 = 48 B, p = 2: 48 * 1/2 = 24
    assert (found.shape, found.bytes) == ("f32[2], f32[1,4]", 24)


def test_reduce_scatter_by_its_operand(hc):
    found = _one(hc, "%rs = f32[4,8]{1,0} reduce-scatter(f32[16,8]{1,0} %x), channel_id=1, "
                     "replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}, to_apply=%add")
    # T = the operand, 16*8*4 = 512 B, p = 4: 512 * 3/4 = 384 (the result's 128 B would give 96)
    assert (found.kind, found.shape, found.group, found.bytes) == (
        "reduce-scatter", "f32[16,8]", 4, 384)


def test_all_to_all(hc):
    found = _one(hc, "%a2a = f32[4,2,1]{2,1,0} all-to-all(f32[4,2,1]{2,1,0} %x), channel_id=1, "
                     "replica_groups={{0,1},{2,3},{4,5},{6,7}}, dimensions={1}")
    # one device's block is 32 B, so T = 2 * 32 = 64 B, p = 2: 64 * 1/4 = 16
    assert (found.kind, found.group, found.bytes) == ("all-to-all", 2, 16)


def test_tuple_all_to_all_sends_one_operand_to_each_peer(hc):
    found = _one(hc, "%a2a = (f32[4]{0}, f32[4]{0}, f32[4]{0}, f32[4]{0}) all-to-all("
                     "f32[4]{0} %a, f32[4]{0} %b, f32[4]{0} %c, f32[4]{0} %d), "
                     "replica_groups={{0,1,2,3},{4,5,6,7}}")
    # one device holds 4 * 16 = 64 B, T = 4 * 64 = 256 B, p = 4: 256 * 3/16 = 48
    assert (found.group, found.bytes) == (4, 48)


def test_collective_permute_sync_and_async(hc):
    found = hc.collectives(_module(
        "%cp = f32[3,5]{1,0} collective-permute(f32[3,5]{1,0} %x), channel_id=1, "
        "source_target_pairs={{0,1},{1,0}}",
        "%cps = (f32[3,5]{1,0}, f32[3,5]{1,0}, u32[], u32[]) collective-permute-start("
        "f32[3,5]{1,0} %x), channel_id=2, source_target_pairs={{0,1},{1,2},{2,3}}",
        "%cpd = f32[3,5]{1,0} collective-permute-done((f32[3,5]{1,0}, f32[3,5]{1,0}, u32[], "
        "u32[]) %cps)"), 8)
    # each sends its whole 3*5*4 = 60 B block (T/p with T = p blocks)
    assert [(c.kind, c.shape, c.bytes) for c in found] == [
        ("collective-permute", "f32[3,5]", 60), ("collective-permute", "f32[3,5]", 60)]


def test_collective_inside_a_generic_async_wrapper_counted_once(hc):
    text = """HloModule m

%wrapped (param: f32[8]) -> f32[8] {
  %param = f32[8]{0} parameter(0)
  ROOT %a2a = f32[8]{0} all-to-all(f32[8]{0} %param), channel_id=1, dimensions={0}
}

ENTRY %main (x: f32[8]) -> f32[8] {
  %x = f32[8]{0} parameter(0)
  %start = ((f32[8]{0}), f32[8]{0}, s32[]) async-start(f32[8]{0} %x), calls=%wrapped
  ROOT %done = f32[8]{0} async-done(((f32[8]{0}), f32[8]{0}, s32[]) %start)
}
"""
    found = hc.collectives(text, 8)
    # no replica_groups: all 8; block 32 B, T = 256 B: 256 * 7/64 = 28
    assert [(c.kind, c.group, c.bytes) for c in found] == [("all-to-all", 8, 28)]


@pytest.mark.parametrize("groups, size", [
    ("replica_groups={}", 8),                           # one group of every partition
    ("", 8),                                            # none printed: the same
    ("replica_groups={{0,2,4,6},{1,3,5,7}}", 4),        # explicit
    ("replica_groups={{0},{1},{2},{3},{4},{5},{6},{7}}", 1),
    ("replica_groups=[4,2]<=[8]", 2),                   # iota
    ("replica_groups=[2,4]<=[2,4]T(1,0)", 4),           # iota, transposed
    ("replica_groups=[1,8]<=[8]", 8),
    ("replica_groups=mesh['x'=2,'y'=4] {'y'}", 4),      # mesh axes
    ("replica_groups=mesh['x'=2,'y'=4], device_ids=(7,6,5,4,3,2,1,0) {'x','y'}", 8),
])
def test_every_replica_groups_form(hc, groups, size):
    attrs = ", ".join(part for part in (groups, "to_apply=%add") if part)
    found = _one(hc, f"%ar = f32[16]{{0}} all-reduce(f32[16]{{0}} %p0), {attrs}")
    assert found.group == size
    assert found.bytes == 2 * 64 * (size - 1) / size      # T = 64 B


def test_unreadable_replica_groups_are_an_error_not_a_guess(hc):
    with pytest.raises(ValueError, match="replica groups"):
        hc.collectives(_module("%ar = f32[16]{0} all-reduce(f32[16]{0} %p0), "
                               "replica_groups=?, to_apply=%add"), 8)


def test_other_instructions_and_done_ops_are_not_collectives(hc):
    found = hc.collectives(_module(
        "%n = f32[16]{0} negate(f32[16]{0} %p0)",
        "%t = (f32[16]{0}, f32[16]{0}) tuple(f32[16]{0} %n, f32[16]{0} %p1)",
        "ROOT %g = f32[16]{0} get-tuple-element((f32[16]{0}, f32[16]{0}) %t), index=0"), 8)
    assert found == []


def test_dtype_sizes(hc):
    found = hc.collectives(_module(
        "%a = bf16[8]{0} collective-permute(bf16[8]{0} %x), source_target_pairs={{0,1}}",
        "%b = pred[8]{0} collective-permute(pred[8]{0} %y), source_target_pairs={{0,1}}",
        "%c = s64[8]{0} collective-permute(s64[8]{0} %z), source_target_pairs={{0,1}}",
        "%d = c64[8]{0} collective-permute(c64[8]{0} %w), source_target_pairs={{0,1}}"), 8)
    assert [c.bytes for c in found] == [16, 8, 64, 64]


_EMITTED = """
module @m attributes {mhlo.num_partitions = 8 : i32} {
  func.func public @main(%a: tensor<2x16xf32>, %b: tensor<2x4xi32>, %c: tensor<8x4xf32>,
                         %d: tensor<4x6xf32>, %e: tensor<3xbf16>, %f: tensor<4xi1>)
      -> (tensor<2x16xf32>, tensor<8x4xi32>, tensor<2x4xf32>, tensor<8x3xf32>, tensor<3xbf16>,
          tensor<4xi1>) {
    %0 = "stablehlo.all_reduce"(%a) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1], [2, 3], [4, 5], [6, 7]]> : tensor<4x2xi64>, use_global_device_ids}> ({
    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
      %s = stablehlo.add %x, %y : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<2x16xf32>) -> tensor<2x16xf32> loc("ar.1")
    %1 = "stablehlo.all_gather"(%b) <{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7]]> : tensor<2x4xi64>, use_global_device_ids}> : (tensor<2x4xi32>) -> tensor<8x4xi32>
    %2 = "stablehlo.reduce_scatter"(%c) <{scatter_dimension = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 3, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7]]> : tensor<2x4xi64>, use_global_device_ids}> ({
    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
      %s = stablehlo.add %x, %y : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<8x4xf32>) -> tensor<2x4xf32>
    %3 = "stablehlo.all_to_all"(%d) <{split_dimension = 1 : i64, concat_dimension = 0 : i64, split_count = 2 : i64, channel_handle = #stablehlo.channel_handle<handle = 4, type = 1>, replica_groups = dense<[[0, 4], [1, 5], [2, 6], [3, 7]]> : tensor<4x2xi64>}> : (tensor<4x6xf32>) -> tensor<8x3xf32>
    %4 = "stablehlo.collective_permute"(%e) <{channel_handle = #stablehlo.channel_handle<handle = 5, type = 1>, source_target_pairs = dense<[[0, 1], [1, 0]]> : tensor<2x2xi64>}> : (tensor<3xbf16>) -> tensor<3xbf16>
    %5 = "stablehlo.all_reduce"(%f) <{channel_handle = #stablehlo.channel_handle<handle = 6, type = 1>, replica_groups = dense<> : tensor<0x0xi64>}> ({
    ^bb0(%x: tensor<i1>, %y: tensor<i1>):
      %s = stablehlo.or %x, %y : tensor<i1>
      stablehlo.return %s : tensor<i1>
    }) : (tensor<4xi1>) -> tensor<4xi1>
    return %0, %1, %2, %3, %4, %5 : tensor<2x16xf32>, tensor<8x4xi32>, tensor<2x4xf32>,
        tensor<8x3xf32>, tensor<3xbf16>, tensor<4xi1>
  }
}
"""


def test_emitted_collectives_in_partitioned_stablehlo(hc):
    found = hc.emitted_collectives(_EMITTED, 8)
    assert [(c.kind, c.shape, c.group, c.bytes) for c in found] == [
        ("all-reduce", "f32[2,16]", 2, 128),        # T = 128 B, p = 2: 2 * 128 / 2
        ("all-gather", "s32[2,4]", 4, 96),          # T = result 8*4*4 = 128 B: 128 * 3/4
        ("reduce-scatter", "f32[8,4]", 4, 96),      # T = operand 128 B: 128 * 3/4
        ("all-to-all", "f32[4,6]", 2, 48),          # block 96 B, T = 192 B: 192 * 1/4
        ("collective-permute", "bf16[3]", 1, 6),    # one 6 B block
        ("all-reduce", "pred[4]", 8, 7),            # no groups: all 8; T = 4 B: 2 * 4 * 7/8
    ]
    assert [c.source for c in found] == ["ar.1"] + [""] * 5   # the instruction it serves


def test_one_cost_for_one_collective_either_way(hc):
    """The same all-reduce, read from HLO text and from StableHLO, costs the same."""
    [from_hlo] = hc.collectives(_module(
        "%ar = f32[2,16]{1,0} all-reduce(f32[2,16]{1,0} %x), channel_id=1, "
        "replica_groups={{0,1},{2,3},{4,5},{6,7}}, use_global_device_ids=true, to_apply=%add"), 8)
    assert from_hlo == hc.emitted_collectives(_EMITTED, 8)[0]
