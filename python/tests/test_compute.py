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


@pytest.mark.parametrize("kernel, sk_name, params", [
    ("rbf", "rbf", {"gamma": 0.3}),
    ("linear", "linear", {}),
    ("poly", "polynomial", {"gamma": 0.3, "coef0": 0.5, "degree": 2}),
    ("sigmoid", "sigmoid", {"gamma": 0.1, "coef0": 0.5}),
])
def test_kernel_matrix_matches_scikit_learn_pairwise(kernel, sk_name, params, rng):
    from sklearn.metrics.pairwise import pairwise_kernels

    X, Z = rng.normal(size=(31, 4)), rng.normal(size=(17, 4))
    np.testing.assert_allclose(gramian.kernel_matrix(X, Z, kernel, device="cpu", **params), pairwise_kernels(X, Z, metric=sk_name, **params), rtol=1e-10, atol=1e-12)


def test_laplacian_is_the_euclidean_one(rng):
    # scikit-learn's laplacian_kernel uses the L1 distance; ours the L2 norm.
    from sklearn.metrics.pairwise import euclidean_distances

    X = rng.normal(size=(12, 3))
    np.testing.assert_allclose(gramian.kernel_matrix(X, kernel="laplacian", gamma=0.4, device="cpu"), np.exp(-0.4 * euclidean_distances(X)), rtol=1e-10, atol=1e-12)


def test_c_ordered_float64_input_is_read_in_place(rng):
    from gramian import _core
    from gramian._compute import _matrix

    X = np.ascontiguousarray(rng.normal(size=(40, 3)))
    address = X.__array_interface__["data"][0]
    # The validation every function applies returns the caller's array, and
    # the extension reads that buffer (no copy on either side).
    checked = _matrix(X, "X")
    assert checked is X
    assert _core._input_address(checked) == address
    # A row slice of a C array is still C-contiguous: read in place too.
    assert _core._input_address(_matrix(X[5:], "X")) == X[5:].__array_interface__["data"][0]
    # Other layouts and types are converted once (a new buffer).
    for other in (np.asfortranarray(X), X.astype(np.float32), X[:, :2]):
        converted = _matrix(other, "X")
        assert converted.flags.c_contiguous and converted.dtype == np.float64
        assert _core._input_address(converted) != other.__array_interface__["data"][0]
    # The extension refuses a non-contiguous array instead of copying it.
    with pytest.raises(ValueError, match="C-contiguous"):
        _core._input_address(X[:, :2])


def test_estimator_inputs_are_not_copied(rng, monkeypatch):
    # What reaches the extension in a fit is the caller's own buffer.
    from gramian import _core, mklaren

    X = np.ascontiguousarray(rng.uniform(-1, 1, (60, 2)))
    y = np.sin(X[:, 0])
    seen = {}
    original = _core.fit_mklaren

    def spy(xs, *args):
        seen["address"] = xs[0].__array_interface__["data"][0]
        return original(xs, *args)

    monkeypatch.setattr(mklaren._core, "fit_mklaren", spy)
    gramian.Mklaren(rank=5, device="cpu").fit(X, y)
    assert seen["address"] == X.__array_interface__["data"][0]


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_precision_on_the_cpu(precision, rng):
    X = rng.normal(size=(20, 3))
    K = gramian.kernel_matrix(X, gamma=0.5, device="cpu", precision=precision)
    ref = reference(X, X, "rbf", 0.5)
    if precision == "float64":
        np.testing.assert_allclose(K, ref, rtol=1e-12)
    else:
        # Inputs and result stored in float32, as a GPU stores them.
        np.testing.assert_array_equal(K.astype(np.float32).astype(np.float64), K)
        np.testing.assert_allclose(K, ref, rtol=1e-6)
        assert np.abs(K - ref).max() > 0
    V = rng.normal(size=(20, 2))
    np.testing.assert_allclose(gramian.kernel_matvec(X, X, V, gamma=0.5, device="cpu", precision=precision), K @ V, rtol=1e-6, atol=1e-6)
    assert gramian.supports_precision(precision, "cpu")
    with pytest.raises(ValueError, match="precision"):
        gramian.kernel_matrix(X, device="cpu", precision="float16")


def test_gpu_precisions(gpu, rng):
    X = rng.normal(size=(30, 3))
    ref = reference(X, X, "rbf", 0.5)
    K32 = gramian.kernel_matrix(X, gamma=0.5, device=gpu, precision="float32")
    np.testing.assert_allclose(K32, ref, atol=1e-5)
    if gramian.supports_precision("float64", gpu):
        K64 = gramian.kernel_matrix(X, gamma=0.5, device=gpu, precision="float64")
        np.testing.assert_allclose(K64, ref, atol=1e-12)
    else:
        with pytest.raises(gramian.DeviceError):
            gramian.kernel_matrix(X, gamma=0.5, device=gpu, precision="float64")


def test_devices_lists_the_adapters(gpu):
    adapters = gramian.devices()
    assert adapters and set(adapters[0]) == {"name", "backend", "device_type", "driver", "software", "float64"}
    # device="gpu" opens the first one.
    assert adapters[0]["name"] in gramian.device_info(gpu)
    assert adapters[0]["float64"] == gramian.supports_precision("float64", gpu)
    # Hardware adapters before software ones.
    flags = [a["software"] for a in adapters]
    assert flags == sorted(flags)


def _sparse_data(rng, rows, cols, density=0.3):
    """A dense array with about ``density`` of its entries non-zero."""
    A = rng.normal(size=(rows, cols))
    A[rng.random(size=(rows, cols)) > density] = 0.0
    return A


@pytest.mark.parametrize("kernel", KERNELS)
def test_sparse_inputs_equal_their_dense_copies(kernel, rng):
    sparse = pytest.importorskip("scipy.sparse")
    X, Z = _sparse_data(rng, 31, 40), _sparse_data(rng, 17, 40)
    dense = gramian.kernel_matrix(X, Z, kernel, gamma=0.05, coef0=0.5, degree=2, device="cpu")
    for fmt in (sparse.csr_array, sparse.csc_matrix, sparse.coo_array):
        K = gramian.kernel_matrix(fmt(X), fmt(Z), kernel, gamma=0.05, coef0=0.5, degree=2, device="cpu")
        assert K.shape == (31, 17) and K.dtype == np.float64
        np.testing.assert_allclose(K, dense, rtol=1e-12, atol=1e-12)
    # One sparse input: both taken as sparse; Z = X; the default gammas.
    np.testing.assert_allclose(gramian.kernel_matrix(sparse.csr_array(X), Z, kernel, gamma=0.05, coef0=0.5, degree=2, device="cpu"), dense, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gramian.kernel_matrix(X, sparse.csr_array(Z), kernel, gamma=0.05, coef0=0.5, degree=2, device="cpu"), dense, rtol=1e-12, atol=1e-12)
    for gamma in (None, "scale"):
        np.testing.assert_allclose(gramian.kernel_matrix(sparse.csr_array(X), kernel=kernel, gamma=gamma, device="cpu"), gramian.kernel_matrix(X, kernel=kernel, gamma=gamma, device="cpu"), rtol=1e-12, atol=1e-12)
    V = rng.normal(size=(17, 3))
    np.testing.assert_allclose(gramian.kernel_matvec(sparse.csr_array(X), sparse.csr_array(Z), V, kernel, gamma=0.05, coef0=0.5, degree=2, device="cpu"), dense @ V, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(gramian.kernel_matvec(sparse.csr_array(X), Z, V[:, 0], kernel, gamma=0.05, coef0=0.5, degree=2, device="cpu"), dense @ V[:, 0], rtol=1e-10, atol=1e-10)


def test_sparse_inputs_in_float32_and_with_duplicate_entries(rng):
    sparse = pytest.importorskip("scipy.sparse")
    X = _sparse_data(rng, 20, 30)
    dense = gramian.kernel_matrix(X, gamma=0.1, device="cpu")
    K32 = gramian.kernel_matrix(sparse.csr_array(X), gamma=0.1, device="cpu", precision="float32")
    np.testing.assert_array_equal(K32.astype(np.float32).astype(np.float64), K32)
    np.testing.assert_allclose(K32, dense, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gramian.kernel_matvec(sparse.csr_array(X), sparse.csr_array(X), np.ones(20), gamma=0.1, device="cpu", precision="float32"), dense.sum(axis=1), rtol=1e-5)
    # COO with repeated (row, column) pairs means their sum, as scipy reads it.
    rows, cols = np.nonzero(X)
    vals = X[rows, cols]
    doubled = sparse.coo_array((np.concatenate([vals / 2, vals / 2]), (np.concatenate([rows, rows]), np.concatenate([cols, cols]))), shape=X.shape)
    np.testing.assert_allclose(gramian.kernel_matrix(doubled, gamma=0.1, device="cpu"), dense, rtol=1e-12, atol=1e-12)


def test_bad_sparse_inputs_raise_value_errors(rng):
    sparse = pytest.importorskip("scipy.sparse")
    X = _sparse_data(rng, 10, 6)
    bad = sparse.csr_array(X)
    bad.data[0] = np.nan
    with pytest.raises(ValueError):
        gramian.kernel_matrix(bad, device="cpu")
    with pytest.raises(ValueError):
        gramian.kernel_matrix(sparse.csr_array(X), sparse.csr_array(np.ones((3, 5))), device="cpu")
    with pytest.raises(ValueError):
        gramian.kernel_matrix(sparse.csr_array((0, 6)), device="cpu")
    with pytest.raises(ValueError):
        gramian.kernel_matvec(sparse.csr_array(X), sparse.csr_array(X), np.ones(9), device="cpu")


# --- Gram matrices and matrix products ---------------------------------------------


def relative_error(A, B):
    return np.linalg.norm(A - B) / np.linalg.norm(B)


@pytest.mark.parametrize("outer", [False, True])
def test_gram_matches_numpy(outer, rng):
    Phi = rng.normal(size=(41, 7))
    G = gramian.gram(Phi, outer=outer, device="cpu")
    expected = Phi @ Phi.T if outer else Phi.T @ Phi
    assert G.shape == expected.shape and G.dtype == np.float64
    np.testing.assert_allclose(G, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(G, G.T)


@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
def test_matmul_forms_match_numpy(ta, tb, rng):
    A = rng.normal(size=(9, 13)) if ta else rng.normal(size=(13, 9))
    B = rng.normal(size=(6, 9)) if tb else rng.normal(size=(9, 6))
    C = gramian.matmul(A, B, transpose_a=ta, transpose_b=tb, device="cpu")
    expected = (A.T if ta else A) @ (B.T if tb else B)
    assert C.shape == (13, 6) and C.dtype == np.float64
    np.testing.assert_allclose(C, expected, rtol=1e-12, atol=1e-12)


def test_products_on_the_gpu_within_their_precision(gpu, rng):
    # float32: the relative Frobenius error of a sum of 300 products of
    # O(1) numbers is a few units of 2^-24 times sqrt(300); 1e-5 leaves room.
    A, B = rng.normal(size=(70, 300)), rng.normal(size=(300, 50))
    np.testing.assert_array_less(relative_error(gramian.matmul(A, B, device=gpu, precision="float32"), A @ B), 1e-5)
    np.testing.assert_array_less(relative_error(gramian.matmul(A.T, B, transpose_a=True, device=gpu, precision="float32"), A @ B), 1e-5)
    Phi = rng.normal(size=(300, 40))
    G = gramian.gram(Phi, device=gpu, precision="float32")
    np.testing.assert_array_less(relative_error(G, Phi.T @ Phi), 1e-5)
    np.testing.assert_array_equal(G, G.T)
    if gramian.supports_precision("float64", gpu):
        np.testing.assert_array_less(relative_error(gramian.matmul(A, B, device=gpu, precision="float64"), A @ B), 1e-13)
        np.testing.assert_array_less(relative_error(gramian.gram(Phi, outer=True, device=gpu, precision="float64"), Phi @ Phi.T), 1e-13)


def test_products_with_bad_operands_raise_value_errors(rng):
    A = rng.normal(size=(4, 3))
    with pytest.raises(ValueError):
        gramian.matmul(A, A, device="cpu")  # inner dimensions 3 and 4
    bad = A.copy()
    bad[1, 2] = np.nan
    with pytest.raises(ValueError):
        gramian.matmul(bad, A.T, device="cpu")
    with pytest.raises(ValueError):
        gramian.gram(bad, device="cpu")
    with pytest.raises(ValueError):
        gramian.gram(np.zeros((0, 3)), device="cpu")
    with pytest.raises(ValueError):
        gramian.matmul(A, A.T, device="cpu", precision="float16")
