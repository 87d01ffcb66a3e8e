"""kernel_matrix and kernel_matvec against numpy float64 references."""

import numpy as np
import pytest
from scipy.spatial.distance import cdist

import gramian


def reference(X, Z, kernel, gamma, coef0=1.0, degree=3):
    inner = X @ Z.T
    sq = cdist(X, Z, "sqeuclidean")
    return {
        "rbf": lambda: np.exp(-gamma * sq),
        "laplacian": lambda: np.exp(-gamma * np.sqrt(sq)),
        "linear": lambda: inner,
        "poly": lambda: (gamma * inner + coef0) ** degree,
        "sigmoid": lambda: np.tanh(gamma * inner + coef0),
    }[kernel]()


KERNELS = ["rbf", "laplacian", "linear", "poly", "sigmoid"]


@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_matrix_matches_numpy(kernel, rng):
    X, Z = rng.normal(size=(37, 5)), rng.normal(size=(23, 5))
    K = gramian.kernel_matrix(X, Z, kernel, gamma=0.3, coef0=0.5, degree=2, device="cpu")
    assert K.shape == (37, 23) and K.dtype == np.float64
    np.testing.assert_allclose(K, reference(X, Z, kernel, 0.3, 0.5, 2), rtol=1e-10, atol=1e-12)


def test_kernel_matrix_defaults_follow_scikit_learn(rng):
    from sklearn.metrics.pairwise import polynomial_kernel, rbf_kernel

    X = rng.normal(size=(20, 4))
    # Z=None is K(X, X); gamma=None is 1 / n_features, coef0=1, degree=3.
    np.testing.assert_allclose(gramian.kernel_matrix(X, device="cpu"), rbf_kernel(X), rtol=1e-10)
    np.testing.assert_allclose(gramian.kernel_matrix(X, kernel="poly", device="cpu"), polynomial_kernel(X), rtol=1e-10)
    scale = 1.0 / (X.shape[1] * X.var())
    np.testing.assert_allclose(gramian.kernel_matrix(X, gamma="scale", device="cpu"), rbf_kernel(X, gamma=scale), rtol=1e-10)


def test_kernel_matrix_accepts_lists_ints_and_fortran_arrays(rng):
    X = np.asfortranarray(rng.integers(0, 3, size=(6, 2)))
    K = gramian.kernel_matrix(X.tolist(), X, "linear", device="cpu")
    np.testing.assert_allclose(K, X @ X.T)


def test_kernel_matvec_matches_matrix_product(rng):
    X, Z = rng.normal(size=(50, 3)), rng.normal(size=(40, 3))
    V = rng.normal(size=(40, 2))
    K = reference(X, Z, "rbf", 0.7)
    np.testing.assert_allclose(gramian.kernel_matvec(X, Z, V, gamma=0.7, device="cpu"), K @ V, rtol=1e-10, atol=1e-12)
    v = V[:, 0]
    out = gramian.kernel_matvec(X, Z, v, gamma=0.7, device="cpu")
    assert out.shape == (50,)
    np.testing.assert_allclose(out, K @ v, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kernel", KERNELS)
def test_gpu_kernel_matrix_within_float32_tolerance(kernel, gpu, rng):
    X, Z = rng.normal(size=(70, 6)), rng.normal(size=(45, 6))
    K = gramian.kernel_matrix(X, Z, kernel, gamma=0.2, coef0=0.5, degree=2, device=gpu)
    ref = reference(X, Z, kernel, 0.2, 0.5, 2)
    np.testing.assert_allclose(K, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_gpu_kernel_matvec(gpu, rng):
    X, Z, V = rng.normal(size=(64, 3)), rng.normal(size=(33, 3)), rng.normal(size=(33, 3))
    out = gramian.kernel_matvec(X, Z, V, gamma=0.5, device=gpu)
    ref = reference(X, Z, "rbf", 0.5) @ V
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_device_info():
    assert "cpu" in gramian.device_info("cpu").lower()
    assert isinstance(gramian.device_info("auto"), str)
    with pytest.raises(ValueError, match="device"):
        gramian.device_info("tpu")
