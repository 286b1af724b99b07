"""The README's main job: the demo partitions, runs and checks a GPT training step."""

from stablehlo_spmd.demo import list_collectives, run_demo


def test_demo_matches_single_device_and_reports_collectives():
    lines = []
    assert run_demo(lines.append) is True
    text = "\n".join(lines)
    assert "all results match the single-device run: True" in text
    assert "collectives," in text and "bytes per device" in text
    for stage in ("export", "annotate", "propagate", "partition"):
        assert any(line.startswith(stage) for line in lines), stage


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
