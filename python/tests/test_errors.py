"""Errors: the documented exception classes, never a panic."""

import os
import subprocess
import sys

import numpy as np
import pytest

import gramian
from gramian import exceptions


def test_hierarchy():
    assert issubclass(exceptions.InvalidInputError, ValueError)
    assert issubclass(exceptions.OutOfMemoryError, MemoryError)
    assert issubclass(exceptions.DeviceError, RuntimeError)
    assert issubclass(exceptions.ConvergenceError, RuntimeError)
    assert issubclass(exceptions.NumericalError, ArithmeticError)
    for cls in (exceptions.InvalidInputError, exceptions.OutOfMemoryError, exceptions.DeviceError, exceptions.ConvergenceError, exceptions.NumericalError):
        assert issubclass(cls, gramian.GramianError)


def test_dimension_mismatch_is_invalid_input(rng):
    with pytest.raises(gramian.InvalidInputError, match="dimension mismatch") as info:
        gramian.kernel_matrix(rng.normal(size=(4, 3)), rng.normal(size=(4, 2)), device="cpu")
    assert info.value.variant == "DimensionMismatch"


def test_bad_kernel_parameters_raise_value_error(rng):
    X = rng.normal(size=(4, 2))
    with pytest.raises(gramian.InvalidInputError, match="gamma") as info:
        gramian.kernel_matrix(X, gamma=-1.0, device="cpu")
    assert info.value.variant == "InvalidParameter"
    with pytest.raises(ValueError, match="unknown kernel"):
        gramian.kernel_matrix(X, kernel="cosine", device="cpu")
    with pytest.raises(ValueError, match="degree"):
        gramian.kernel_matrix(X, kernel="poly", degree=0, device="cpu")
    with pytest.raises(ValueError, match="device"):
        gramian.kernel_matrix(X, device="cuda")


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_input_raises_value_error(bad, rng):
    X = rng.normal(size=(5, 2))
    X[1, 1] = bad
    with pytest.raises(ValueError):
        gramian.kernel_matrix(X, device="cpu")
    with pytest.raises(ValueError):
        gramian.Mklaren(device="cpu").fit(X, np.arange(5.0))


def test_empty_input_raises_value_error():
    with pytest.raises(ValueError):
        gramian.kernel_matrix(np.zeros((0, 3)), device="cpu")


def test_overflow_is_numerical_error():
    X = np.full((3, 2), 1e200)
    with pytest.raises(gramian.NumericalError, match="overflow") as info:
        gramian.kernel_matrix(X, kernel="linear", device="cpu")
    assert info.value.variant == "Overflow"


def test_result_larger_than_memory_is_memory_error():
    # A 300000 x 300000 float64 result (720 GB) is refused before any work.
    X = np.zeros((300_000, 1))
    with pytest.raises(MemoryError) as info:
        gramian.kernel_matrix(X, device="cpu")
    assert isinstance(info.value, gramian.OutOfMemoryError) and info.value.variant == "OutOfMemory"


def test_iteration_budget_is_convergence_error(rng):
    with pytest.raises(gramian.ConvergenceError, match="did not converge"):
        gramian.PSDDensity(max_iter=1, device="cpu").fit(rng.normal(size=(50, 1)))


def test_invalid_estimator_parameters_raise_value_error(rng):
    X, y = rng.normal(size=(30, 2)), rng.normal(size=30)
    for est in [
        gramian.Mklaren(rank=0),
        gramian.Mklaren(alpha=-1.0),
        gramian.Mklaren(kernels=[]),
        gramian.Mklaren(kernels=["rbf", ("laplacian", {"gamma": "huge"})]),
        gramian.Mklaren(device="tpu"),
        gramian.PSDQuantileRegressor(quantiles=(0.5, 0.1)),
        gramian.PSDQuantileRegressor(quantiles=1.5),
        gramian.PSDHeteroscedasticRegressor(bandwidth=-1.0),
        gramian.PSDHeteroscedasticRegressor(quadratic_penalty=0.0),
        gramian.PSDHeteroscedasticRegressor(n_centres=31),
    ]:
        with pytest.raises(ValueError):
            est.fit(X, y)
    with pytest.raises(ValueError):
        gramian.PSDDensity(bandwidth="wide").fit(X)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Vulkan loader's ICD override is Linux-specific")
def test_missing_gpu_is_device_error_and_auto_falls_back():
    # A fresh interpreter whose Vulkan loader finds no driver.
    code = (
        "import gramian\n"
        "assert 'cpu' in gramian.device_info('auto').lower()\n"
        "try:\n"
        "    gramian.kernel_matrix([[0.0]], device='gpu')\n"
        "except gramian.DeviceError as e:\n"
        "    print('DeviceError', e.variant)\n"
    )
    env = dict(os.environ, VK_ICD_FILENAMES="/nonexistent/icd.json", WGPU_BACKEND="vulkan")
    env.pop("GRAMIAN_DEVICE", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "DeviceError NoGpuAdapter" in out.stdout


SUPERVISED = [
    lambda: gramian.Mklaren(rank=5, device="cpu"),
    lambda: gramian.LowRankRidge(rank=5, device="cpu"),
    lambda: gramian.MultipleKernelRidge(device="cpu"),
    lambda: gramian.PSDQuantileRegressor(bandwidth=0.5, device="cpu"),
    lambda: gramian.PSDHeteroscedasticRegressor(bandwidth=0.5, device="cpu"),
    lambda: gramian.BaselineQuantileRegressor(bandwidth=0.5, device="cpu"),
    lambda: gramian.BaselineHeteroscedasticRegressor(bandwidth=0.5, device="cpu"),
]
UNSUPERVISED = [
    lambda: gramian.PSDDensity(bandwidth=0.5, device="cpu"),
    lambda: gramian.BaselineDensity(bandwidth=0.5, device="cpu"),
]


@pytest.mark.parametrize("make", SUPERVISED + UNSUPERVISED)
def test_bad_data_raises_value_error_in_every_estimator(make, rng):
    X, y = rng.normal(size=(30, 2)), rng.normal(size=30)
    supervised = make in SUPERVISED

    def fit(X, y):
        return make().fit(X, y) if supervised else make().fit(X)

    for bad in (np.nan, np.inf):
        Xb = X.copy()
        Xb[3, 1] = bad
        with pytest.raises(ValueError):
            fit(Xb, y)
        if supervised:
            yb = y.copy()
            yb[2] = bad
            with pytest.raises(ValueError):
                fit(X, yb)
    with pytest.raises(ValueError):
        fit(np.zeros((0, 2)), np.zeros(0))
    with pytest.raises(ValueError):
        fit(X[:, :, None], y)
    if supervised:
        with pytest.raises(ValueError):
            fit(X, y[:20])
    model = fit(X, y)
    predict = model.predict if supervised else model.score_samples
    with pytest.raises(ValueError, match="features"):
        predict(rng.normal(size=(4, 3)))
    Xb = X[:4].copy()
    Xb[0, 0] = np.nan
    with pytest.raises(ValueError):
        predict(Xb)


@pytest.mark.parametrize("loader", ["load_mklaren", "load_low_rank", "load_full_kernel", "load_density", "load_quantiles", "load_heteroscedastic", "load_baseline_density", "load_baseline_quantiles", "load_baseline_heteroscedastic", "load_eksvd"])
def test_corrupt_saved_models_raise_gramian_errors(loader):
    from gramian import _core

    for data in (b"", b"\x00garbage", b"\xa1\x64kind\x63foo"):
        with pytest.raises(gramian.GramianError):
            getattr(_core, loader)(data)

