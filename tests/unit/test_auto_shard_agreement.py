"""The search's price of a plan against what the partitioner then emits for it.

The search chooses among plans by its own estimate, so a plan priced below
what the partitioner emits for it can win over one that is really cheaper.
Here the estimate of each plan (`Plan.cost`) is compared with the
collectives of the partitioned program, counted by the benchmarks' counter
(`collective_bytes.emitted_collectives`, each by the array it delivers), on
small training steps that use the partitioner's own shortcuts: a widening
convert whose value is moved in the narrow type or made again from it, and a
value several ops read, moved once for all of them.  And the estimate of
peak memory against XLA's memory analysis of the compiled plan, within the
bounds it holds today (see the module docstring of `auto_sharding`).
"""

import warnings

import jax
import jax.numpy as jnp
import pytest

import stablehlo_spmd as ss
from stablehlo_spmd import collective_bytes as counter
from stablehlo_spmd import diagnostics, runtime
from stablehlo_spmd.ir import make_context, parse_module, print_module
from stablehlo_spmd.passes.auto_shard import AutoShardPass, auto_shard_module

BYTES_AGREEMENT = 0.02
MEMORY_AGREEMENT = 0.10


def _mixed_precision_mlp(params, x, y):
    """bf16 weights, f32 activations: each matmul reads a bf16 convert of its input."""
    def loss(params):
        h = x
        for w1, w2 in params:
            a = jax.nn.gelu(jnp.dot(h.astype(jnp.bfloat16), w1, preferred_element_type=jnp.float32))
            h = h + jnp.dot(a.astype(jnp.bfloat16), w2, preferred_element_type=jnp.float32)
        return jnp.mean((h - y) ** 2)
    grads = jax.grad(loss)(params)
    return jax.tree_util.tree_map(lambda p, g: (p - 0.1 * g).astype(p.dtype), params, grads)


def _attention_block(params, x, y):
    """Two pre-norm transformer blocks, f32: values read by several ops everywhere."""
    def norm(h):
        return h * jax.lax.rsqrt(jnp.mean(h * h, -1, keepdims=True) + 1e-5)

    def loss(params):
        h = x
        for p in params:
            n = norm(h) * p["scale"]
            q, k, v = (jnp.einsum("bsd,dhk->bshk", n, p[name]) for name in "qkv")
            s = jax.nn.softmax(jnp.einsum("bshk,bthk->bhst", q, k) / 8.0, -1)
            h = h + jnp.einsum("bshk,hkd->bsd", jnp.einsum("bhst,bthk->bshk", s, v), p["o"])
            h = h + jnp.dot(jax.nn.relu(jnp.dot(norm(h), p["w1"])), p["w2"])
        return jnp.mean((h - y) ** 2)
    grads = jax.grad(loss)(params)
    return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)


def _scanned_blocks(params, x, y):
    """A layer stack written as MaxText writes it: stacked weights, a jax.lax.scan over
    them, each step under jax.checkpoint.  The body's moves are made once per layer."""
    def loss(params):
        def layer(h, p):
            a = jax.nn.gelu(jnp.dot(h, p["w1"]))
            return h + jnp.dot(a, p["w2"]), None
        h, _ = jax.lax.scan(jax.checkpoint(layer, prevent_cse=False), x, params)
        return jnp.mean((h - y) ** 2)
    grads = jax.grad(loss)(params)
    return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)


def _programs():
    spec = jax.ShapeDtypeStruct
    width, ffn, batch = 512, 2048, 64
    mlp = [(spec((width, ffn), jnp.bfloat16), spec((ffn, width), jnp.bfloat16))] * 2
    data = spec((batch, width), jnp.float32)
    yield "mixed-precision MLP", ss.export(_mixed_precision_mlp, mlp, data, data)
    width, heads, head, ffn, batch, sequence = 256, 8, 32, 1024, 8, 128
    f32 = jnp.float32
    block = [{"scale": spec((width,), f32), "q": spec((width, heads, head), f32),
              "k": spec((width, heads, head), f32), "v": spec((width, heads, head), f32),
              "o": spec((heads, head, width), f32), "w1": spec((width, ffn), f32),
              "w2": spec((ffn, width), f32)}] * 2
    data = spec((batch, sequence, width), f32)
    yield "attention blocks", ss.export(_attention_block, block, data, data)
    layers, width, ffn, batch = 6, 256, 1024, 64
    stack = {"w1": spec((layers, width, ffn), f32), "w2": spec((layers, ffn, width), f32)}
    data = spec((batch, width), f32)
    yield "scanned blocks", ss.export(_scanned_blocks, stack, data, data)


PROGRAMS = dict(_programs())


def _planned(text: str, mesh: str, hardware: str = ""):
    with make_context() as context, diagnostics.collecting(diagnostics.DiagnosticEngine()):
        module = parse_module(text, "<test>", context)
        found = auto_shard_module(module.operation, AutoShardPass(mesh=mesh, target="cpu",
                                                                  hardware=hardware))
        assert found is not None
        return print_module(module, debug_info=True), found.plan


@pytest.mark.parametrize("hardware", ["", "h100"])
@pytest.mark.parametrize("mesh", ["data=4,model=2", "data=8"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_the_estimate_is_what_the_partitioner_emits(name, mesh, hardware):
    """In bytes, the plan's price; in seconds on a profile, the bytes it
    reports beside them (a move the seconds priced at nothing, a block
    handed between devices, once made such plans move 9 times the bytes)."""
    planned, plan = _planned(PROGRAMS[name], mesh, hardware)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        partitioned = ss.partition(planned)
        emitted = counter.total_bytes(counter.emitted_collectives(partitioned, 8))
    assert emitted > 0
    estimate = plan.moved_bytes if hardware else plan.cost
    assert estimate == pytest.approx(emitted, rel=BYTES_AGREEMENT)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_the_memory_estimate_is_near_xlas_analysis(name):
    planned, plan = _planned(PROGRAMS[name], "data=4,model=2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        measured = runtime.memory_per_device(ss.partition(planned))
    assert plan.peak_memory == pytest.approx(measured, rel=MEMORY_AGREEMENT)


def _estimate_and_emitted(text: str, mesh: str, devices: int) -> tuple[float, float]:
    """The search's price of its plan for `text`, and the bytes partitioned."""
    planned, plan = _planned(text, mesh)
    return plan.cost, counter.total_bytes(
        counter.emitted_collectives(ss.partition(planned), devices))


WIDENED_READ_TWICE = """
func.func @main(%arg0: tensor<256x512xbf16> {mhlo.sharding = "{devices=[8,1]<=[8]}"})
    -> (tensor<256x512xf32>, tensor<256x512xf32>) {
  %0 = stablehlo.convert %arg0 : (tensor<256x512xbf16>) -> tensor<256x512xf32>
  %1 = stablehlo.multiply %0, %0 : tensor<256x512xf32>
  %2 = stablehlo.add %0, %0 : tensor<256x512xf32>
  %3 = stablehlo.custom_call @Sharding(%1) {mhlo.sharding = "{devices=[1,8]<=[8]}"}
      : (tensor<256x512xf32>) -> tensor<256x512xf32>
  %4 = stablehlo.custom_call @Sharding(%2) {mhlo.sharding = "{devices=[1,8]<=[8]}"}
      : (tensor<256x512xf32>) -> tensor<256x512xf32>
  return %3, %4 : tensor<256x512xf32>, tensor<256x512xf32>
}
"""


def test_a_widened_value_read_by_several_is_moved_narrow():
    """Rows in, columns out: the convert runs where its result is wanted, so
    the bf16 argument moves (one all-to-all of 256x512x2 B / 8 per device,
    7/8 of it leaving: 28,672 B), not the f32 value twice its size."""
    estimate, emitted = _estimate_and_emitted(WIDENED_READ_TWICE, "x=8", 8)
    assert emitted == 256 * 512 * 2 // 8 * 7 // 8
    assert estimate == pytest.approx(emitted)


MERGED_SPLIT_READ_TWICE = """
func.func @main(%arg0: tensor<4x64x32xf32> {mhlo.sharding = "{devices=[1,4,1]<=[4]}"})
    -> (tensor<256x32xf32>, tensor<256x32xf32>) {
  %0 = stablehlo.multiply %arg0, %arg0 : tensor<4x64x32xf32>
  %1 = stablehlo.reshape %0 : (tensor<4x64x32xf32>) -> tensor<256x32xf32>
  %2 = stablehlo.multiply %1, %1 : tensor<256x32xf32>
  %3 = stablehlo.add %1, %1 : tensor<256x32xf32>
  %4 = stablehlo.custom_call @Sharding(%2) {mhlo.sharding = "{devices=[4,1]<=[4]}"}
      : (tensor<256x32xf32>) -> tensor<256x32xf32>
  %5 = stablehlo.custom_call @Sharding(%3) {mhlo.sharding = "{devices=[4,1]<=[4]}"}
      : (tensor<256x32xf32>) -> tensor<256x32xf32>
  return %4, %5 : tensor<256x32xf32>, tensor<256x32xf32>
}
"""


def test_a_reshape_that_cannot_run_where_its_operand_is_prices_the_move():
    """The reshape merges a split minor dim into an unsplit major one, so no
    layout of its result is its operand's: wherever it runs, its operand
    moves first (here one all-to-all, sequences to batches: 3/4 of the
    8 KiB each device holds, 6,144 B), and that move is the plan's price."""
    estimate, emitted = _estimate_and_emitted(MERGED_SPLIT_READ_TWICE, "x=4", 4)
    assert emitted == 4 * 64 * 32 * 4 // 4 * 3 // 4
    assert estimate == pytest.approx(emitted)


BF16_DOTS = """
func.func @main(%w: tensor<256x256xbf16>, %x: tensor<64x256xbf16>) -> tensor<64x256xbf16> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0]
      : (tensor<64x256xbf16>, tensor<256x256xbf16>) -> tensor<64x256xbf16>
  %1 = stablehlo.dot_general %0, %w, contracting_dims = [1] x [0]
      : (tensor<64x256xbf16>, tensor<256x256xbf16>) -> tensor<64x256xbf16>
  return %1 : tensor<64x256xbf16>
}
"""


BF16_PRODUCT_READ_TWICE = """
func.func @main(%w: tensor<256x256xbf16>, %x: tensor<64x256xbf16>)
    -> (tensor<64x256xbf16>, tensor<64x256xbf16>) {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0]
      : (tensor<64x256xbf16>, tensor<256x256xbf16>) -> tensor<64x256xbf16>
  %1 = stablehlo.tanh %0 : tensor<64x256xbf16>
  %2 = stablehlo.exponential %0 : tensor<64x256xbf16>
  return %1, %2 : tensor<64x256xbf16>, tensor<64x256xbf16>
}
"""


@pytest.mark.parametrize("program, target, peak", [
    # Arguments w (128 KiB) and x (32 KiB), the result (32 KiB) and the
    # temporary %0 (32 KiB), each at its own width.
    (BF16_DOTS, "gpu", (128 + 32 + 32 + 32) * 1024),
    # XLA's CPU backend computes bf16 in f32: %0 takes 64 KiB, and the
    # dots read f32 copies of the arguments: w's (256 KiB), made once for
    # both dots, and x's (64 KiB), live until the first dot.
    (BF16_DOTS, "cpu", (128 + 32 + 32 + 64 + 256 + 64) * 1024),
    # w, x, the product (32 KiB) and the two results.
    (BF16_PRODUCT_READ_TWICE, "gpu", (128 + 32 + 32 + 64) * 1024),
    # At the product: the f32 copies of w and x, and the product written
    # f32 (64 KiB), before it is rounded into the bf16 buffer its two
    # element-wise readers read.
    (BF16_PRODUCT_READ_TWICE, "cpu", (128 + 32 + 256 + 64 + 64 + 64) * 1024),
], ids=["dots-gpu", "dots-cpu", "product-gpu", "product-cpu"])
def test_the_memory_estimate_counts_what_the_target_computes_in(program, target, peak):
    with make_context() as context, diagnostics.collecting(diagnostics.DiagnosticEngine()):
        module = parse_module(program, "<test>", context)
        # One device: every strategy holds the whole of every value.
        found = auto_shard_module(module.operation, AutoShardPass(mesh="x=1", target=target))
    assert found is not None
    assert found.plan.peak_memory == peak
    if target == "cpu":
        assert peak == pytest.approx(runtime.memory_per_device(program), rel=0.02)


def test_the_cpu_estimate_of_a_bf16_program_is_near_xlas_analysis():
    """The mixed-precision MLP with bf16 everywhere, as keras-hub's bf16
    models are: XLA's CPU analysis counts its temporaries in f32."""
    spec = jax.ShapeDtypeStruct
    mlp = [(spec((512, 2048), jnp.bfloat16), spec((2048, 512), jnp.bfloat16))] * 2
    data = spec((64, 512), jnp.bfloat16)
    text = ss.export(_mixed_precision_mlp, mlp, data, data)
    measured = {}
    for target in ("cpu", "gpu"):
        with make_context() as context, diagnostics.collecting(diagnostics.DiagnosticEngine()):
            module = parse_module(text, "<test>", context)
            found = auto_shard_module(module.operation,
                                      AutoShardPass(mesh="data=4,model=2", target=target))
            planned = print_module(module, debug_info=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            measured[target] = (found.plan.peak_memory,
                                runtime.memory_per_device(ss.partition(planned)))
    estimate, xla = measured["cpu"]
    assert estimate == pytest.approx(xla, rel=MEMORY_AGREEMENT)
    assert abs(estimate - xla) < abs(measured["gpu"][0] - measured["gpu"][1])
