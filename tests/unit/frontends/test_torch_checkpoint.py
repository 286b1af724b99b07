"""torch.utils.checkpoint through xs.compile and xs.export: the recomputation stays one.

A checkpointed block is run again in the backward; each such run must come
after one ``stablehlo.optimization_barrier`` (of the block's inputs, weights
and incoming gradient, as ``jax.checkpoint`` lowers), or CSE merges it with
the forward and the activations are held after all.  The expected counts
are by hand: two blocks, each with one ``tanh``, so two barriers and four
``tanh`` (two in the forward, two recomputed); eager torch gives the values.
"""

import copy
import re

import pytest
import torch
import torch.utils.checkpoint as torch_checkpoint

import stablehlo_spmd.torch as xs

MESH = xs.Mesh(list(range(8)), (4, 2), ("data", "model"))
TOLERANCE = 1e-5

# The labels are int64: each compiled step says once that they enter as int32.
pytestmark = pytest.mark.filterwarnings("ignore:int64 and float64 arguments:UserWarning")
WIDTH, HIDDEN = 24, 40          # the blocks' weights are 40x24 and 24x40, no activation's shape
MODES = ["non-reentrant", "reentrant"]


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(WIDTH, HIDDEN)
        self.fc2 = torch.nn.Linear(HIDDEN, WIDTH)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


class Model(torch.nn.Module):
    """Two blocks, each under `checkpoint` unless `mode` is None.  The first layer is not
    checkpointed: the reentrant mode needs an input that requires grad, in eager torch too."""

    def __init__(self, mode):
        super().__init__()
        self.mode = mode
        self.embed = torch.nn.Linear(16, WIDTH)
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.head = torch.nn.Linear(WIDTH, 4)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            if self.mode is None:
                x = block(x)
            else:
                x = torch_checkpoint.checkpoint(block, x, use_reentrant=self.mode == "reentrant")
        return self.head(x)


def _megatron(model):
    for block in model.blocks:
        xs.mark_sharding(block.fc1.weight, MESH, ("model", None))
        xs.mark_sharding(block.fc2.weight, MESH, (None, "model"))


def _step(model, optimizer, x, y):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.detach()


def _batches(count, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(16, 16, generator=generator),
             torch.randint(0, 4, (16,), generator=generator)) for _ in range(count)]


def _ops(text):
    """{SSA name: (op name, operand names)} of the ops in `text`, and their names in order."""
    ops = {}
    for line in text.splitlines():
        match = re.match(r'\s*(%[\w.]+)(?::\d+)? = "?([\w.]+)"?(.*)$', line)
        if match:
            body = re.sub(r" loc\(.*$", "", match.group(3)).split(" : ")[0]
            ops[match.group(1)] = (match.group(2), re.findall(r"%[\w.]+", body))
    return ops


def _nearest_barriers(ops, name, seen=None):
    """The barriers `name` reads from, directly or through ops that are not barriers."""
    seen = set() if seen is None else seen
    found = set()
    for operand in ops[name][1]:
        if operand in seen or operand not in ops:
            continue
        seen.add(operand)
        if ops[operand][0] == "stablehlo.optimization_barrier":
            found.add(operand)
        else:
            found |= _nearest_barriers(ops, operand, seen)
    return found


def _argument_names(text):
    signature = re.search(r"func\.func public @main\((.*?)\) ->", text).group(1)
    return dict(re.findall(r'(%arg\d+): [^ ]+ (?:\{[^}]*\} )?loc\("([^"]+)"\)', signature))


@pytest.mark.parametrize("mode", MODES)
def test_each_checkpointed_call_recomputes_behind_its_own_barrier(mode):
    torch.manual_seed(0)
    model = Model(mode)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    text = xs.export(lambda x, y: _step(model, optimizer, x, y), *_batches(1)[0])
    ops = _ops(text)
    barriers = [name for name, (op, _) in ops.items() if op == "stablehlo.optimization_barrier"]
    tanhs = [name for name, (op, _) in ops.items() if op == "stablehlo.tanh"]
    assert len(barriers) == 2 and len(tanhs) == 4
    behind = {name: _nearest_barriers(ops, name) for name in tanhs}
    assert sorted(len(b) for b in behind.values()) == [0, 0, 1, 1]   # forward, then recomputed
    assert {b for found in behind.values() for b in found} == set(barriers)
    arguments = _argument_names(text)
    blocks = []
    for barrier in barriers:
        operands = ops[barrier][1]
        named = {arguments[o] for o in operands if o in arguments}
        # One block's weights...
        blocks += [i for i in range(2) if {f"params['blocks.{i}.fc1.weight']",
                                           f"params['blocks.{i}.fc2.weight']"} <= named]
        # ...its input, and the gradient arriving at its output: the two values that are
        # not arguments of the program.
        assert len([o for o in operands if o not in arguments]) == 2
    assert sorted(blocks) == [0, 1]


def test_without_checkpoint_there_is_no_barrier():
    torch.manual_seed(0)
    model = Model(None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    text = xs.export(lambda x, y: _step(model, optimizer, x, y), *_batches(1)[0])
    assert "optimization_barrier" not in text
    assert text.count("stablehlo.tanh ") == 2


@pytest.mark.parametrize("mode", MODES)
def test_checkpointed_blocks_train_as_in_eager_torch_and_stay_recomputed(mode):
    torch.manual_seed(0)
    model = Model(mode)
    twin = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    twin_optimizer = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
    _megatron(model)
    batches = _batches(3)
    step = xs.compile(lambda x, y: _step(model, optimizer, x, y), *batches[0])
    for x, y in batches:
        xs.mark_sharding(x, MESH, ("data", None))
        loss = step(x, y)
        want = _step(twin, twin_optimizer, x, y)
        assert abs(float(loss) - float(want)) <= TOLERANCE * abs(float(want))
    for name, want in twin.state_dict().items():
        got = model.state_dict()[name]
        assert float((got - want).abs().max()) <= TOLERANCE * float(want.abs().max()), name

    for program in step.programs.values():
        text = program.text
        # Partitioned and CSE'd, the forward and the recomputation are still apart...
        assert text.count("stablehlo.tanh ") == 4
        # ...and each barrier carries the weights as the marks split them (rows or
        # columns of 40 over "model": 20), none of them gathered whole.
        barriers = re.findall(r"stablehlo\.optimization_barrier [^:]*: ([^\n]*?) loc", text)
        assert len(barriers) == 2
        for types in barriers:
            assert f"tensor<{HIDDEN // 2}x{WIDTH}xf32>" in types
            assert f"tensor<{WIDTH}x{HIDDEN // 2}xf32>" in types
        gathered = re.findall(r'"stablehlo\.all_gather".*-> (tensor<[^>]*>)', text)
        assert len(gathered) == text.count('"stablehlo.all_gather"')   # each one read
        whole = {f"tensor<{HIDDEN}x{WIDTH}xf32>", f"tensor<{WIDTH}x{HIDDEN}xf32>"}
        assert not whole & set(gathered)


def test_checkpoint_sequential_recomputes_its_checkpointed_segments():
    torch.manual_seed(0)
    layers = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh())
                                   for _ in range(4)])

    def loss_of(x):
        return torch_checkpoint.checkpoint_sequential(layers, 2, x, use_reentrant=False).sum()

    def train_fn(x):
        loss = loss_of(x)
        loss.backward()
        return loss

    text = xs.export(train_fn, torch.randn(4, 8), modules=[layers])
    # Two segments: the first is checkpointed (two tanh again), the last is not.
    assert text.count("stablehlo.optimization_barrier ") == 1
    assert text.count("stablehlo.tanh ") == 6


def test_a_checkpointed_block_that_writes_buffers_updates_them_as_eager_torch_does():
    # Eager torch writes the block's buffers again when it recomputes the block (batch
    # norm's statistics; a counter, written through a view of it): the barrier must
    # leave those writes on the buffers themselves.
    torch.manual_seed(0)

    class Normed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 16)
            self.norm = torch.nn.BatchNorm1d(16)
            self.head = torch.nn.Linear(16, 4)
            self.register_buffer("calls", torch.zeros(2))

        def block(self, h):
            self.calls[:1].add_(1)
            return torch.tanh(self.norm(self.fc(h)))

        def forward(self, x):
            return self.head(torch_checkpoint.checkpoint(self.block, x, use_reentrant=False))

    model = Normed()
    twin = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    twin_optimizer = torch.optim.SGD(twin.parameters(), lr=0.1)
    step = xs.compile(lambda x, y: _step(model, optimizer, x, y), modules=[model],
                      optimizers=[optimizer])
    for x, y in _batches(2):
        step(x, y)
        _step(twin, twin_optimizer, x, y)
    assert int(twin.norm.num_batches_tracked) == 4 and twin.calls.tolist() == [4, 0]
    for name, want in twin.state_dict().items():
        got = model.state_dict()[name]
        scale = max(float(want.abs().max()), 1e-30) if want.is_floating_point() else 1
        assert float((got.double() - want.double()).abs().max()) <= TOLERANCE * scale, name
    assert "optimization_barrier" in step.programs[next(iter(step.programs))].traced.text


def test_the_patched_checkpoint_internals_are_restored_after_a_trace_also_a_failed_one():
    originals = (torch_checkpoint.CheckpointFunction, torch_checkpoint._CheckpointFrame)
    torch.manual_seed(0)
    model = Model("reentrant")

    def train_fn(x):
        loss = model(x).sum()
        loss.backward()
        return loss

    assert "optimization_barrier" in xs.export(train_fn, torch.randn(4, 16), modules=[model])
    assert (torch_checkpoint.CheckpointFunction, torch_checkpoint._CheckpointFrame) == originals

    def failing(x):
        torch_checkpoint.checkpoint(lambda h: h.nonexistent(), x, use_reentrant=False)

    with pytest.raises(AttributeError):
        xs.export(failing, torch.randn(4, 16))
    assert (torch_checkpoint.CheckpointFunction, torch_checkpoint._CheckpointFrame) == originals
