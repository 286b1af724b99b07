"""The aten ops the project lowers itself, and random ops, against eager torch."""

import copy

import pytest
import torch

import stablehlo_spmd.torch as xs


def _one_sgd_step_matches_eager(model, x, tolerance=1e-5):
    """One SGD step (lr 1: the update is the gradient) of a well-conditioned loss: the
    compiled update within `tolerance` of the eager one, relative to its largest value."""
    twin = copy.deepcopy(model)
    before = copy.deepcopy(model.state_dict())
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    twin_optimizer = torch.optim.SGD(twin.parameters(), lr=1.0)

    def loss_of(module, batch):
        out = module(batch)
        weights = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
        return (out * weights).sum()

    def train_fn(batch):
        loss = loss_of(model, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss

    xs.compile(train_fn, x)(x)
    loss_of(twin, x).backward()
    twin_optimizer.step()
    got, want = model.state_dict(), twin.state_dict()
    for name in want:
        if not want[name].is_floating_point():
            continue
        update = (want[name] - before[name]).abs().max()
        assert float((got[name] - want[name]).abs().max()) <= tolerance * max(float(update), 1e-6), name


@pytest.mark.parametrize("layers", [
    lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, stride=2, padding=1), torch.nn.ReLU()),
    lambda: torch.nn.Sequential(torch.nn.Conv2d(4, 4, 3, padding=1, groups=4), torch.nn.Tanh()),
    lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.MaxPool2d(3, 2, 1)),
    lambda: torch.nn.Sequential(torch.nn.Conv3d(2, 3, 1), torch.nn.MaxPool3d(2)),
], ids=["convolution", "depthwise", "max-pool-2d", "max-pool-3d"])
def test_convolution_and_max_pool_gradients_match_torch(layers):
    torch.manual_seed(0)
    model = layers()
    channels = model[0].in_channels
    shape = (4, channels, 6, 6, 6) if isinstance(model[0], torch.nn.Conv3d) else (8, channels, 6, 6)
    _one_sgd_step_matches_eager(model, torch.randn(*shape))


def test_a_recurrent_layer_trains_as_in_torch():
    torch.manual_seed(0)

    class Recurrent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(4, 8, num_layers=2, batch_first=True)

        def forward(self, x):
            return self.lstm(x)[0]

    _one_sgd_step_matches_eager(Recurrent(), torch.randn(3, 5, 4))


def test_dropout_draws_a_new_mask_each_call_from_torchs_generator():
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Dropout(0.5))
    forward = xs.compile(model)
    x = torch.ones(4, 16)
    torch.manual_seed(1)
    first, second = forward(x), forward(x)
    assert not torch.equal(first, second)
    dropped = (first == 0).float().mean()
    assert 0.3 < float(dropped) < 0.7
    torch.manual_seed(1)
    assert torch.equal(forward(x), first)   # torch.manual_seed makes the masks repeat
    model.eval()
    assert torch.allclose(forward(x), model(x), atol=1e-6)
