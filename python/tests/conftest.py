"""Shared fixtures: the GPU device, where one is present.

GPU tests run on any adapter ``device="gpu"`` opens (a software Vulkan one
included). They are skipped when there is none, unless
``GRAMIAN_REQUIRE_GPU=1``, which makes a missing adapter a failure (CI).
"""

import os

import numpy as np
import pytest

import gramian


def _gpu_available():
    try:
        gramian.device_info("gpu")
        return True
    except gramian.DeviceError:
        return False


@pytest.fixture(scope="session")
def gpu():
    """The device string "gpu", or a skip (a failure with GRAMIAN_REQUIRE_GPU=1)."""
    if _gpu_available():
        return "gpu"
    if os.environ.get("GRAMIAN_REQUIRE_GPU") == "1":
        pytest.fail("GRAMIAN_REQUIRE_GPU=1 but no GPU adapter was found")
    pytest.skip("no GPU adapter")


@pytest.fixture
def rng():
    return np.random.default_rng(0)
