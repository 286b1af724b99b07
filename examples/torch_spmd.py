"""A PyTorch/XLA SPMD training script, ported to stablehlo-spmd.

Run it from the repository root: ``python3 examples/torch_spmd.py``.  It
trains a two-layer MLP on 8 CPU host devices (data 4 x model 2), Megatron
style: the first layer split by its output features, the second by its input
features, the batch split over ``data``.

The PyTorch/XLA original of this script differs in these lines only:

    import torch_xla.core.xla_model as xm          # (gone)
    import torch_xla.runtime as xr                  # (gone)
    import torch_xla.distributed.spmd as xs         import stablehlo_spmd.torch as xs
    xr.use_spmd()                                   # (gone: a compiled step is SPMD)
    device = xm.xla_device()                        # (gone: tensors stay torch CPU tensors)
    model = MLP().to(device)                        model = MLP()
    x, y = x.to(device), y.to(device)               # (gone)
    loss = train_fn(x, y); xm.mark_step()           loss = step(x, y)

plus ``step = xs.compile(train_fn, x, y)`` once, before the loop.
"""

import numpy as np
import torch

import stablehlo_spmd.torch as xs

NUM_DEVICES = 8


class MLP(torch.nn.Module):
    def __init__(self, features=64, hidden=256, classes=10):
        super().__init__()
        self.fc1 = torch.nn.Linear(features, hidden)
        self.fc2 = torch.nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def setup():
    """The mesh, the model with its marks, and its training step."""
    torch.manual_seed(0)
    mesh = xs.Mesh(np.arange(NUM_DEVICES), (NUM_DEVICES // 2, 2), ("data", "model"))
    model = MLP()
    xs.mark_sharding(model.fc1.weight, mesh, ("model", None))   # (hidden, features)
    xs.mark_sharding(model.fc1.bias, mesh, ("model",))
    xs.mark_sharding(model.fc2.weight, mesh, (None, "model"))   # (classes, hidden)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    def train_fn(x, y):
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss

    return mesh, train_fn


def batches(count: int) -> list:
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(32, 64, generator=generator),
             torch.randint(0, 10, (32,), generator=generator)) for _ in range(count)]


def training_step_example():
    """For ``stablehlo-spmd export examples/torch_spmd.py:training_step_example``:
    (the training step, one marked batch)."""
    mesh, train_fn = setup()
    x, y = batches(1)[0]
    xs.mark_sharding(x, mesh, ("data", None))
    return train_fn, (x, y)


def main(steps: int = 5) -> list[float]:
    mesh, train_fn = setup()
    step = None
    losses = []
    for x, y in batches(steps):
        xs.mark_sharding(x, mesh, ("data", None))
        if step is None:
            step = xs.compile(train_fn, x, y)
        loss = step(x, y)
        losses.append(float(loss))
        print(f"loss {losses[-1]:.4f}")
    return losses


if __name__ == "__main__":
    main()
