"""stablehlo_spmd/collective_bytes.py: collectives and their bytes per device, read from HLO text
and from partitioned StableHLO.

Every expected byte count is worked out by hand in the comment beside it from
DESIGN.md's resharding cost table (T: bytes of the tensor the group covers,
p: the group size): all_gather T(p−1)/p, all_to_all T(p−1)/p², all_reduce
2T(p−1)/p, reduce_scatter T(p−1)/p, collective_permute T/p.
"""

import pytest

from benchmark_modules import benchmark_module
from stablehlo_spmd import collective_bytes


@pytest.fixture(scope="module")
def hc():
    return collective_bytes


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


# ------------------------------------------------------------------ loops, branches and calls

_CARRY = "(s32[], f32[16]{0})"


def _loop_body(name, *lines, result="%x"):
    """A while body over (counter, x: f32[16]) that runs `lines` and carries `result` on."""
    body = "".join(f"  {line}\n" for line in lines)
    return f"""%{name} (carry: (s32[], f32[16])) -> (s32[], f32[16]) {{
  %carry = {_CARRY} parameter(0)
  %i = s32[] get-tuple-element({_CARRY} %carry), index=0
  %x = f32[16]{{0}} get-tuple-element({_CARRY} %carry), index=1
  %one = s32[] constant(1)
  %next = s32[] add(s32[] %i, s32[] %one)
{body}  ROOT %out = {_CARRY} tuple(s32[] %next, f32[16]{{0}} {result})
}}
"""


def _loop_condition(name, limit, *lines):
    body = "".join(f"  {line}\n" for line in lines)
    return f"""%{name} (carry: (s32[], f32[16])) -> pred[] {{
  %carry = {_CARRY} parameter(0)
  %i = s32[] get-tuple-element({_CARRY} %carry), index=0
  %limit = s32[] constant({limit})
{body}  ROOT %lt = pred[] compare(s32[] %i, s32[] %limit), direction=LT
}}
"""


def _while(name, condition, body, trips, init="%init"):
    """A while instruction; `trips` None: XLA wrote no trip count."""
    config = ('{"known_induction_variable":{"tuple_index":"0"}}' if trips is None else
              f'{{"known_induction_variable":{{"tuple_index":"0"}},'
              f'"known_trip_count":{{"n":"{trips}"}}}}')
    return (f"%{name} = {_CARRY} while({_CARRY} {init}), condition=%{condition}, "
            f"body=%{body}, backend_config={config}")


def _program(*computations, entry=()):
    """An HLO module: `computations`, then an entry over p0: f32[16] whose carry %init is
    (0, p0) and which runs `entry`."""
    lines = "".join(f"  {line}\n" for line in entry)
    return f"""HloModule m, num_partitions=8

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(f32[] %a, f32[] %b)
}}

{"".join(computations)}
ENTRY %main (p0: f32[16]) -> f32[16] {{
  %p0 = f32[16]{{0}} parameter(0)
  %zero = s32[] constant(0)
  %init = {_CARRY} tuple(s32[] %zero, f32[16]{{0}} %p0)
{lines}  ROOT %r = f32[16]{{0}} copy(f32[16]{{0}} %p0)
}}
"""


_PAIRS_ALL_REDUCE = ("%ar = f32[16]{0} all-reduce(f32[16]{0} %x), channel_id=1, "
                     "replica_groups={{0,1},{2,3},{4,5},{6,7}}, to_apply=%add")


def test_a_collective_in_a_loop_counts_once_per_iteration(hc):
    found = hc.collectives(_program(
        _loop_body("body", _PAIRS_ALL_REDUCE, result="%ar"), _loop_condition("cond", 32),
        entry=[_while("loop", "cond", "body", 32),
               "%ag = f32[32]{0} all-gather(f32[16]{0} %p0), replica_groups={{0,1}}, "
               "dimensions={0}"]), 8)
    # all-reduce: T = 64 B, p = 2: 2 * 64 / 2 = 64 B a run, 32 runs: 2048 B.
    # all-gather outside the loop: T = result 128 B, p = 2: 64 B, once.
    assert [(c.kind, c.times, c.bytes, c.per_run) for c in found] == [
        ("all-reduce", 32, 2048, 64), ("all-gather", 1, 64, 64)]
    assert hc.total_bytes(found) == 2048 + 64
    assert hc.executions(found) == 33
    assert found.unknown_loops == ()


@pytest.mark.parametrize("config", [
    'backend_config={"known_trip_count":{"n":"7"}}',
    'backend_config="{\\"known_trip_count\\":{\\"n\\":\\"7\\"}}"',     # older XLA: a string
])
def test_trip_count_read_in_either_spelling_of_backend_config(hc, config):
    found = hc.collectives(_program(
        _loop_body("body", _PAIRS_ALL_REDUCE, result="%ar"), _loop_condition("cond", 7),
        entry=[f"%loop = {_CARRY} while({_CARRY} %init), condition=%cond, body=%body, "
               f"{config}"]), 8)
    assert [(c.times, c.bytes) for c in found] == [(7, 7 * 64)]


def test_nested_loops_multiply(hc):
    text = _program(
        _loop_body("inner_body", "%cp = f32[16]{0} collective-permute(f32[16]{0} %x), "
                   "source_target_pairs={{0,1},{1,0}}", result="%cp"),
        _loop_condition("inner_cond", 4),
        _loop_body("outer_body",
                   "%zero = s32[] constant(0)",
                   f"%init = {_CARRY} tuple(s32[] %zero, f32[16]{{0}} %x)",
                   _while("inner", "inner_cond", "inner_body", 4),
                   "%ar = f32[16]{0} all-reduce(f32[16]{0} %x), replica_groups={}, "
                   "to_apply=%add", result="%ar"),
        _loop_condition("outer_cond", 3),
        entry=[_while("outer", "outer_cond", "outer_body", 3)])
    found = hc.collectives(text, 8)
    # collective-permute: 64 B a run, 4 runs per outer iteration, 3 of those: 12 runs, 768 B.
    # all-reduce over all 8: 2 * 64 * 7/8 = 112 B a run, 3 runs: 336 B.
    assert [(c.kind, c.times, c.bytes) for c in found] == [
        ("collective-permute", 12, 768), ("all-reduce", 3, 336)]
    assert hc.total_bytes(found) == 768 + 336


def test_a_loop_without_a_trip_count_counts_once_and_says_so(hc):
    found = hc.collectives(_program(
        _loop_body("body", _PAIRS_ALL_REDUCE, result="%ar"), _loop_condition("cond", 10),
        _loop_body("known_body", _PAIRS_ALL_REDUCE, result="%ar"),
        _loop_condition("known_cond", 2),
        entry=[_while("unknown", "cond", "body", None),
               _while("known", "known_cond", "known_body", 2)]), 8)
    # 64 B a run: the unknown loop's once; the known loop's twice, 128 B
    assert [(c.times, c.bytes) for c in found] == [(1, 64), (2, 128)]
    assert found.unknown_loops == ("unknown",)


def test_the_condition_runs_once_more_than_the_body(hc):
    found = hc.collectives(_program(
        _loop_body("body"),
        _loop_condition("cond", 5, "%flag = s32[] all-reduce(s32[] %i), replica_groups={}, "
                        "to_apply=%add"),
        entry=[_while("loop", "cond", "body", 5)]), 8)
    # 5 iterations, 6 tests of the condition; s32[]: T = 4 B over 8: 2 * 4 * 7/8 = 7 B a run
    assert [(c.kind, c.times, c.bytes) for c in found] == [("all-reduce", 6, 42)]


def test_a_conditional_counts_its_largest_branch_once(hc):
    text = _program("""%small (s: f32[16]) -> f32[16] {
  %s = f32[16]{0} parameter(0)
  ROOT %ar.s = f32[16]{0} all-reduce(f32[16]{0} %s), replica_groups={}, to_apply=%add
}

%large (l: f32[16]) -> f32[16] {
  %l = f32[16]{0} parameter(0)
  %ar.l = (f32[16]{0}, f32[16]{0}) all-reduce(f32[16]{0} %l, f32[16]{0} %l), replica_groups={}, to_apply=%add
  ROOT %g = f32[16]{0} get-tuple-element((f32[16]{0}, f32[16]{0}) %ar.l), index=0
}
""", entry=["%which = s32[] constant(1)",
            "%branch = f32[16]{0} conditional(s32[] %which, f32[16]{0} %p0, f32[16]{0} %p0), "
            "branch_computations={%small, %large}"])
    found = hc.collectives(text, 8)
    # small: T = 64 B over 8: 112 B; large: T = 128 B over 8: 224 B. Only the large, once.
    assert [(c.shape, c.times, c.bytes) for c in found] == [("f32[16], f32[16]", 1, 224)]


def test_combined_and_async_collectives_in_a_loop(hc):
    found = hc.collectives(_program(
        _loop_body(
            "body", "%m = f32[4,4]{1,0} reshape(f32[16]{0} %x)",
            "%ar = (f32[16]{0}, f32[4,4]{1,0}) all-reduce(f32[16]{0} %x, f32[4,4]{1,0} %m), "
            "replica_groups=[2,4]<=[8], to_apply=%add",
            "%ags = (f32[16]{0}, f32[64]{0}) all-gather-start(f32[16]{0} %x), "
            "replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}",
            "%agd = f32[64]{0} all-gather-done((f32[16]{0}, f32[64]{0}) %ags)"),
        _loop_condition("cond", 5),
        entry=[_while("loop", "cond", "body", 5)]), 8)
    # combined all-reduce: T = 64 + 64 = 128 B, p = 4: 2 * 128 * 3/4 = 192 B a run, 5 runs;
    # async all-gather, counted at its start: T = result 256 B, p = 4: 192 B a run, 5 runs.
    assert [(c.kind, c.shape, c.times, c.bytes) for c in found] == [
        ("all-reduce", "f32[16], f32[4,4]", 5, 960), ("all-gather", "f32[16]", 5, 960)]


def test_calls_count_at_each_site_and_unreached_computations_not_at_all(hc):
    text = _program("""%wrapped (w: f32[16]) -> f32[16] {
  %w = f32[16]{0} parameter(0)
  ROOT %a2a = f32[16]{0} all-to-all(f32[16]{0} %w), replica_groups={{0,1}}, dimensions={0}
}

%called (c: f32[16]) -> f32[16] {
  %c = f32[16]{0} parameter(0)
  ROOT %cp = f32[16]{0} collective-permute(f32[16]{0} %c), source_target_pairs={{0,1}}
}

%dead (d: f32[16]) -> f32[16] {
  %d = f32[16]{0} parameter(0)
  ROOT %dead.ar = f32[16]{0} all-reduce(f32[16]{0} %d), replica_groups={}, to_apply=%add
}
""", _loop_body(
        "body", "%start = ((f32[16]{0}), f32[16]{0}, s32[]) async-start(f32[16]{0} %x), "
        "calls=%wrapped",
        # (as some XLA versions print it, the done names the wrapped computation again)
        "%done = f32[16]{0} async-done(((f32[16]{0}), f32[16]{0}, s32[]) %start), "
        "calls=%wrapped", result="%done"),
        _loop_condition("cond", 3),
        entry=["%call.1 = f32[16]{0} call(f32[16]{0} %p0), to_apply=%called",
               "%call.2 = f32[16]{0} call(f32[16]{0} %call.1), to_apply=%called",
               _while("loop", "cond", "body", 3)])
    found = hc.collectives(text, 8)
    # the permute: 64 B at each of 2 call sites; the all-to-all: block 64 B, T = 128 B,
    # p = 2: 128 * 1/4 = 32 B a run, 3 runs; the dead computation's all-reduce: never.
    assert [(c.kind, c.times, c.bytes) for c in found] == [
        ("collective-permute", 1, 64), ("collective-permute", 1, 64), ("all-to-all", 3, 96)]


def test_report_counts_executions(hc):
    with benchmark_module("report") as report:
        found = hc.collectives(_program(
            _loop_body("body", _PAIRS_ALL_REDUCE, result="%ar"), _loop_condition("cond", 61),
            entry=[_while("loop", "cond", "body", 61),
                   "%ag = f32[32]{0} all-gather(f32[16]{0} %p0), replica_groups={{0,1}}, "
                   "dimensions={0}",
                   "%ag.2 = f32[32]{0} all-gather(f32[16]{0} %p0), replica_groups={{0,1}}, "
                   "dimensions={0}"]), 8)
        assert report.counts(found) == "61AR 2AG"


# ------------------------------------------------------------------ StableHLO loops

_PERMUTE = ('"stablehlo.collective_permute"({value}) <{{source_target_pairs = '
            'dense<[[0, 1], [1, 0]]> : tensor<2x2xi64>, channel_handle = '
            '#stablehlo.channel_handle<handle = 1, type = 1>}}> : (tensor<16xf32>) -> '
            'tensor<16xf32>')


def _scan(start, limit, step, counter_init="%c0"):
    """A module whose main loops as ``lax.scan`` lowers: a counter from `start` while it is
    below `limit` (a cond-region constant), by `step`, permuting x (64 B) each time."""
    return f"""
module @m attributes {{mhlo.num_partitions = 8 : i32}} {{
  func.func public @main(%x: tensor<16xf32>, %arg: tensor<i32>) -> tensor<16xf32> {{
    %c0 = stablehlo.constant dense<{start}> : tensor<i32>
    %r:2 = stablehlo.while(%i = {counter_init}, %v = %x) : tensor<i32>, tensor<16xf32>
    cond {{
      %n = stablehlo.constant dense<{limit}> : tensor<i32>
      %lt = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    }} do {{
      %s = stablehlo.constant dense<{step}> : tensor<i32>
      %next = stablehlo.add %i, %s : tensor<i32>
      %p = {_PERMUTE.format(value="%v")} loc("permute.1")
      stablehlo.return %next, %p : tensor<i32>, tensor<16xf32>
    }} loc("scan.1")
    return %r#1 : tensor<16xf32>
  }}
}}
"""


@pytest.mark.parametrize("start, limit, runs", [(0, 4, 4), (2, 9, 7)])
def test_emitted_scan_counts_its_trips(hc, start, limit, runs):
    found = hc.emitted_collectives(_scan(start, limit, 1), 8)
    assert [(c.kind, c.times, c.bytes) for c in found] == [
        ("collective-permute", runs, 64 * runs)]       # one 64 B block a run
    assert found.unknown_loops == ()


def test_emitted_loop_that_never_iterates_runs_no_collective(hc):
    found = hc.emitted_collectives(_scan(5, 5, 1), 8)
    assert (list(found), found.unknown_loops) == ([], ())


@pytest.mark.parametrize("step, counter_init", [
    (2, "%c0"),           # not a step of 1
    (1, "%arg"),          # a counter starting where the caller says
])
def test_emitted_loop_of_another_shape_counts_once_and_says_so(hc, step, counter_init):
    found = hc.emitted_collectives(_scan(0, 4, step, counter_init), 8)
    assert [(c.times, c.bytes) for c in found] == [(1, 64)]
    assert found.unknown_loops == ("@main: scan.1",)


def _fori(limit_init, limit_out="%upper"):
    """``fori_loop`` with its upper bound carried: (i, upper, x), upper passed on as
    `limit_out` (unchanged, as JAX lowers it, by default)."""
    return f"""
module @m attributes {{mhlo.num_partitions = 8 : i32}} {{
  func.func public @main(%x: tensor<16xf32>, %arg: tensor<i32>) -> tensor<16xf32> {{
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %c6 = stablehlo.constant dense<6> : tensor<i32>
    %r:3 = stablehlo.while(%i = %c1, %upper = {limit_init}, %v = %x) : tensor<i32>, tensor<i32>, tensor<16xf32>
    cond {{
      %lt = stablehlo.compare LT, %i, %upper, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    }} do {{
      %next = stablehlo.add %c1, %i : tensor<i32>
      %p = {_PERMUTE.format(value="%v")}
      stablehlo.return %next, {limit_out}, %p : tensor<i32>, tensor<i32>, tensor<16xf32>
    }}
    return %r#2 : tensor<16xf32>
  }}
}}
"""


def test_emitted_fori_loop_with_a_carried_constant_bound(hc):
    found = hc.emitted_collectives(_fori("%c6"), 8)
    assert [(c.times, c.bytes) for c in found] == [(5, 320)]     # i = 1..5: 5 runs of 64 B
    for unknown in (_fori("%arg"),                    # a bound the caller gives
                    _fori("%c6", limit_out="%next")):   # a bound the body moves
        found = hc.emitted_collectives(unknown, 8)
        assert [(c.times, c.bytes) for c in found] == [(1, 64)]
        assert len(found.unknown_loops) == 1


def test_emitted_calls_count_at_each_call_site_and_in_loops(hc):
    text = f"""
module @m attributes {{mhlo.num_partitions = 8 : i32}} {{
  func.func public @main(%x: tensor<16xf32>) -> tensor<16xf32> {{
    %a = func.call @exchange(%x) : (tensor<16xf32>) -> tensor<16xf32>
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %r:2 = stablehlo.while(%i = %c0, %v = %a) : tensor<i32>, tensor<16xf32>
    cond {{
      %lt = stablehlo.compare LT, %i, %c3, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    }} do {{
      %one = stablehlo.constant dense<1> : tensor<i32>
      %next = stablehlo.add %i, %one : tensor<i32>
      %b = func.call @exchange(%v) : (tensor<16xf32>) -> tensor<16xf32>
      stablehlo.return %next, %b : tensor<i32>, tensor<16xf32>
    }}
    return %r#1 : tensor<16xf32>
  }}
  func.func private @exchange(%y: tensor<16xf32>) -> tensor<16xf32> {{
    %p = {_PERMUTE.format(value="%y")}
    return %p : tensor<16xf32>
  }}
  func.func private @unused(%y: tensor<16xf32>) -> tensor<16xf32> {{
    %p = {_PERMUTE.format(value="%y")}
    return %p : tensor<16xf32>
  }}
}}
"""
    found = hc.emitted_collectives(text, 8)
    # the call before the loop once, the one in its body 3 times; @unused never
    assert [(c.times, c.bytes) for c in found] == [(1, 64), (3, 192)]


def test_emitted_case_counts_its_largest_branch(hc):
    text = f"""
module @m attributes {{mhlo.num_partitions = 8 : i32}} {{
  func.func public @main(%x: tensor<16xf32>, %which: tensor<i32>) -> tensor<16xf32> {{
    %r = "stablehlo.case"(%which) ({{
      stablehlo.return %x : tensor<16xf32>
    }}, {{
      %p = {_PERMUTE.format(value="%x")}
      %q = {_PERMUTE.format(value="%p")}
      stablehlo.return %q : tensor<16xf32>
    }}, {{
      %p = {_PERMUTE.format(value="%x")}
      stablehlo.return %p : tensor<16xf32>
    }}) : (tensor<i32>) -> tensor<16xf32>
    return %r : tensor<16xf32>
  }}
}}
"""
    found = hc.emitted_collectives(text, 8)
    assert [(c.times, c.bytes) for c in found] == [(1, 64), (1, 64)]    # the second branch's two


# ------------------------------------------------------------------ a real scanned program

def test_scan_over_four_steps_counts_its_collective_four_times_on_both_sides(hc):
    """jax.lax.scan over 4 layers whose weight is split on the contracted dim: each step
    sums partial products across the 4 devices, in XLA's compiled program and in ours."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import stablehlo_spmd as ss

    def step(h, w):
        return jnp.tanh(h @ w), None

    def layers(h, ws):
        return jax.lax.scan(step, h, ws)[0]

    h, ws = jnp.ones((8, 16)), jnp.ones((4, 16, 16))
    mesh = Mesh(np.array(jax.devices()[:4]), ("model",))
    compiled = jax.jit(layers, in_shardings=(NamedSharding(mesh, P()),
                                             NamedSharding(mesh, P(None, "model", None))),
                       out_shardings=NamedSharding(mesh, P())).lower(h, ws).compile()
    xla = hc.collectives(compiled.as_text(), 4)
    in_loop = [(c.kind, c.times, c.bytes) for c in xla if "while/body" in c.source]
    # the (8, 16) f32 partial product, 512 B, all-reduced over 4: 2 * 512 * 3/4 = 768 B a step
    assert in_loop == [("all-reduce", 4, 4 * 768)]
    assert all(c.times == 1 for c in xla if "while/body" not in c.source)
    assert xla.unknown_loops == ()

    partitioned = ss.partition(ss.export(layers, h, ws), ss.Mesh.from_string("model=4"),
                               [(r"^ws", (None, "model", None))])
    ours = hc.emitted_collectives(partitioned, 4)
    assert "stablehlo.while" in partitioned and "sdy.manual_computation" in partitioned
    # ours scatters the (8, 16) partial product over 4 as it sums it: 512 * 3/4 = 384 B a step
    assert [(c.kind, c.times, c.bytes) for c in ours] == [("reduce-scatter", 4, 4 * 384)]
    assert ours.unknown_loops == ()
