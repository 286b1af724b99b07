"""8 CPU host devices for the differential tests (as tests/unit/conftest.py).

XLA reads ``XLA_FLAGS`` once, when jax first starts its backends, so the
flag is set here, before the test modules import jax.
"""

import os

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
