"""Shared setup for the unit tests.

JAX is the oracle for partition specs and XLA's own HloSharding for device
arrays (the test modules import it themselves).  XLA reads ``XLA_FLAGS`` once, when jax is first imported, so the
8 host "devices" the JAX meshes need are requested here, before any test
module imports jax.
"""

import os

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402  (must come after XLA_FLAGS is set)
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import AxisType  # noqa: E402


def jax_mesh(shape, names, order=None):
    """A jax.sharding.Mesh of CPU devices; `order` lists device ids in mesh order."""
    devices = {d.id: d for d in jax.devices()}
    count = int(np.prod(shape))
    ids = list(range(count)) if order is None else list(order)
    array = np.array([devices[i] for i in ids], dtype=object).reshape(shape)
    return jax.sharding.Mesh(array, tuple(names), axis_types=(AxisType.Explicit,) * len(names))


@pytest.fixture(scope="session")
def make_jax_mesh():
    return jax_mesh


@pytest.fixture(scope="session")
def eight_devices():
    devices = jax.devices()
    assert len(devices) >= 8, "XLA_FLAGS was not applied before jax was imported"
    return devices
