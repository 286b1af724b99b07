"""xs.compile of a whole PyTorch training step, against the same steps in eager torch.

Each test builds two identical copies of a model and its optimizer, runs the
compiled step on one and eager torch on the other, and compares the loss of
every step and, at the end, every parameter, buffer and optimizer-state
tensor: within 1e-5 of the tensor's largest value.
"""

import copy
import warnings

import jax
import pytest
import torch

import stablehlo_spmd.torch as xs
from stablehlo_spmd.frontends.torch.world import Slot

MESH = xs.Mesh(list(range(8)), (4, 2), ("data", "model"))
TOLERANCE = 1e-5

# The labels are int64: each compiled step says once that they enter as int32
# (test_int64_arguments_are_narrowed_once_with_a_warning checks that warning).
pytestmark = pytest.mark.filterwarnings("ignore:int64 and float64 arguments:UserWarning")


class Classifier(torch.nn.Module):
    """Linear, batch norm (running statistics: buffers the step updates), linear."""

    def __init__(self, batch_norm: bool = True):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32, bias=not batch_norm)
        self.norm = torch.nn.BatchNorm1d(32) if batch_norm else torch.nn.Identity()
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.tanh(self.norm(self.fc1(x))))


def _pair(make_optimizer, batch_norm=True, seed=0):
    torch.manual_seed(seed)
    model = Classifier(batch_norm)
    twin = copy.deepcopy(model)
    return model, make_optimizer(model.parameters()), twin, make_optimizer(twin.parameters())


def _batches(count, rows=16, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(rows, 16, generator=generator),
             torch.randint(0, 4, (rows,), generator=generator)) for _ in range(count)]


def _eager_step(model, optimizer, x, y):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.detach()


def _assert_same_state(model, optimizer, twin, twin_optimizer):
    for name, want in twin.state_dict().items():
        got = model.state_dict()[name]
        scale = max(float(want.abs().max()), 1e-30) if want.is_floating_point() else 1
        assert float((got.double() - want.double()).abs().max()) <= TOLERANCE * scale, name
    got_state, want_state = optimizer.state_dict()["state"], twin_optimizer.state_dict()["state"]
    assert got_state.keys() == want_state.keys()
    for index, entries in want_state.items():
        assert got_state[index].keys() == entries.keys()
        for key, want in entries.items():
            got = got_state[index][key]
            scale = max(float(torch.as_tensor(want).abs().max()), 1e-30)
            difference = float((torch.as_tensor(got).double() - torch.as_tensor(want).double())
                               .abs().max())
            assert difference <= TOLERANCE * scale, (index, key)


@pytest.mark.parametrize("make_optimizer", [
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
    lambda p: torch.optim.AdamW(p, lr=1e-2),
    lambda p: torch.optim.Adam(p, lr=1e-2, foreach=True),
    lambda p: torch.optim.RMSprop(p, lr=1e-2),
    lambda p: torch.optim.Adagrad(p, lr=1e-2),
], ids=["sgd-momentum", "sgd-nesterov", "adamw", "adam-foreach", "rmsprop", "adagrad"])
def test_three_steps_match_eager_torch(make_optimizer):
    # Adam turns a gradient that is rounding noise into a full step (a bias before a batch
    # norm has such gradients): this model keeps every gradient informative.
    model, optimizer, twin, twin_optimizer = _pair(make_optimizer, batch_norm=False)
    xs.mark_sharding(model.fc1.weight, MESH, ("model", None))
    xs.mark_sharding(model.fc2.weight, MESH, (None, "model"))

    def train_fn(x, y):
        return _eager_step(model, optimizer, x, y)

    batches = _batches(3)
    step = xs.compile(train_fn, *batches[0])
    for x, y in batches:
        xs.mark_sharding(x, MESH, ("data", None))
        loss = step(x, y)
        want = _eager_step(twin, twin_optimizer, x, y)
        assert abs(float(loss) - float(want)) <= TOLERANCE * abs(float(want))
    _assert_same_state(model, optimizer, twin, twin_optimizer)


def test_batch_norm_running_statistics_are_updated():
    model, optimizer, twin, twin_optimizer = _pair(
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9))
    step = xs.compile(lambda x, y: _eager_step(model, optimizer, x, y), mesh=MESH,
                      modules=[model], optimizers=[optimizer])
    for x, y in _batches(3):
        step(x, y)
        _eager_step(twin, twin_optimizer, x, y)
    # Steps leave the host alone (the one sync was for tracing the second program,
    # which reads the momentum the first step made)...
    assert int(model.norm.num_batches_tracked) < 3
    _assert_same_state(model, optimizer, twin, twin_optimizer)
    assert int(model.norm.num_batches_tracked) == 3   # ...and state_dict() brings it back


def test_state_stays_sharded_on_the_devices_and_is_donated():
    model, optimizer, _, _ = _pair(lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9))
    xs.mark_sharding(model.fc1.weight, MESH, ("model", None))
    before = model.fc1.weight.detach().clone()
    step = xs.compile(lambda x, y: _eager_step(model, optimizer, x, y),
                      modules=[model], optimizers=[optimizer])
    batches = _batches(3)
    step(*batches[0])
    held = step._state.arrays
    weight = held[Slot("params", "fc1.weight")]
    momentum = held[Slot("optimizer", ("fc1.weight", "momentum_buffer"))]
    assert isinstance(weight, jax.Array)
    assert weight.sharding.spec == jax.sharding.PartitionSpec("model", None)
    # The momentum of a marked parameter is laid out as the parameter is.
    assert momentum.sharding.spec == jax.sharding.PartitionSpec("model", None)
    assert torch.equal(model.fc1.weight.detach(), before)   # no copy back per step
    step(*batches[1])
    assert weight.is_deleted() and momentum.is_deleted()    # donated to the second step
    assert len(step.programs) == 2   # the first step creates the momentum: a second program
    step(*batches[2])
    assert len(step.programs) == 2


def test_a_schedulers_learning_rate_takes_effect_without_a_new_trace():
    model, optimizer, twin, twin_optimizer = _pair(
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), batch_norm=False)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)
    twin_schedule = torch.optim.lr_scheduler.StepLR(twin_optimizer, 1, gamma=0.5)
    step = xs.compile(lambda x, y: _eager_step(model, optimizer, x, y),
                      modules=[model], optimizers=[optimizer])
    for x, y in _batches(4):
        step(x, y)
        schedule.step()
        _eager_step(twin, twin_optimizer, x, y)
        twin_schedule.step()
    assert len(step.programs) == 2
    _assert_same_state(model, optimizer, twin, twin_optimizer)


def test_eager_use_between_steps_sees_and_keeps_the_current_values():
    model, optimizer, twin, twin_optimizer = _pair(
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), batch_norm=False)
    step = xs.compile(lambda x, y: _eager_step(model, optimizer, x, y),
                      modules=[model], optimizers=[optimizer])
    (x, y), (x2, y2), (x3, y3) = _batches(3)
    step(x, y)
    _eager_step(twin, twin_optimizer, x, y)
    with torch.no_grad():
        assert torch.allclose(model(x2), twin(x2), atol=1e-6)   # an eager forward syncs first
    _eager_step(model, optimizer, x2, y2)                       # an eager step on the host...
    _eager_step(twin, twin_optimizer, x2, y2)
    step(x3, y3)                                                # ...is what the next call takes
    _eager_step(twin, twin_optimizer, x3, y3)
    _assert_same_state(model, optimizer, twin, twin_optimizer)


def test_load_state_dict_replaces_what_the_devices_hold():
    model, optimizer, twin, twin_optimizer = _pair(
        lambda p: torch.optim.SGD(p, lr=0.1), batch_norm=False)
    step = xs.compile(lambda x, y: _eager_step(model, optimizer, x, y),
                      modules=[model], optimizers=[optimizer])
    (x, y), (x2, y2) = _batches(2)
    step(x, y)
    model.load_state_dict(twin.state_dict())
    loss = step(x2, y2)
    want = _eager_step(twin, twin_optimizer, x2, y2)
    assert abs(float(loss) - float(want)) <= TOLERANCE * float(want)


def test_a_new_batch_shape_compiles_again_and_the_same_shape_does_not():
    model, optimizer, twin, twin_optimizer = _pair(
        lambda p: torch.optim.SGD(p, lr=0.1), batch_norm=False)
    step = xs.compile(lambda x, y: _eager_step(model, optimizer, x, y),
                      modules=[model], optimizers=[optimizer])
    for rows in (16, 8, 16, 8):
        x, y = _batches(1, rows=rows, seed=rows)[0]
        step(x, y)
        _eager_step(twin, twin_optimizer, x, y)
    assert len(step.programs) == 2    # plain SGD keeps no state: one program per shape
    _assert_same_state(model, optimizer, twin, twin_optimizer)


def test_gradients_left_by_the_step_accumulate_as_in_torch():
    model, optimizer, twin, twin_optimizer = _pair(
        lambda p: torch.optim.SGD(p, lr=0.1), batch_norm=False)

    def accumulate(x, y):   # no zero_grad: .grad sums over calls, as eager torch does
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    step = xs.compile(accumulate, modules=[model])
    for x, y in _batches(2):
        step(x, y)
        torch.nn.functional.cross_entropy(twin(x), y).backward()
    step.sync()
    for mine, theirs in zip(model.parameters(), twin.parameters()):
        assert torch.allclose(mine.grad, theirs.grad, atol=1e-6)


def test_int64_arguments_are_narrowed_once_with_a_warning():
    embedding = torch.nn.Embedding(10, 4)
    forward = xs.compile(embedding)
    ids = torch.randint(0, 10, (2, 3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = forward(ids)
        forward(ids)
    narrowing = [w for w in caught if "int64" in str(w.message)]
    assert len(narrowing) == 1
    assert torch.allclose(got, embedding(ids))


def test_an_integer_output_keeps_torchs_dtype():
    model = torch.nn.Linear(4, 3)
    predict = xs.compile(lambda x: model(x).argmax(dim=-1), modules=[model])
    x = torch.randn(5, 4)
    got = predict(x)
    assert got.dtype == torch.int64
    assert torch.equal(got, model(x).argmax(dim=-1))


def test_a_rule_for_a_parameters_name_lays_out_its_adam_state_and_leaves_the_step_count():
    model, optimizer, twin, twin_optimizer = _pair(
        lambda p: torch.optim.AdamW(p, lr=1e-2), batch_norm=False)
    # The rule matches optimizer['fc1.weight']['step'] too: a scalar, replicated.
    step = xs.compile(lambda x, y: _eager_step(model, optimizer, x, y), mesh=MESH,
                      rules=[(r"fc1\.weight", ("model", None))],
                      modules=[model], optimizers=[optimizer])
    for x, y in _batches(2):
        step(x, y)
        _eager_step(twin, twin_optimizer, x, y)
    moment = step._state.arrays[Slot("optimizer", ("fc1.weight", "exp_avg"))]
    assert moment.sharding.spec == jax.sharding.PartitionSpec("model", None)
    _assert_same_state(model, optimizer, twin, twin_optimizer)


def test_a_bfloat16_model_stays_bfloat16_and_trains_as_in_torch():
    # A bf16 parameter times the f32 learning rate is bf16 in torch and f32 in JAX: the
    # program must keep torch's dtypes, or the update would not fit the parameter.
    model, optimizer, twin, twin_optimizer = _pair(
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), batch_norm=False)
    model.to(torch.bfloat16)
    twin.to(torch.bfloat16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    twin_optimizer = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
    step = xs.compile(lambda x, y: _eager_step(model, optimizer, x, y),
                      modules=[model], optimizers=[optimizer])
    for x, y in _batches(2):
        step(x.bfloat16(), y)
        _eager_step(twin, twin_optimizer, x.bfloat16(), y)
    for name, want in twin.state_dict().items():
        got = model.state_dict()[name]
        assert got.dtype == torch.bfloat16, name
        # bf16 keeps 8 bits of mantissa: its rounding, not 1e-5, is the tolerance.
        assert float((got.float() - want.float()).abs().max()) <= 2e-2 * float(want.abs().max())
