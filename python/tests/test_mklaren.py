"""Mklaren on synthetic problems."""

import pickle

import numpy as np
import pytest

import gramian


def problem(rng, n=600, d=4, noise=0.05):
    X = rng.uniform(-1, 1, (n, d))
    y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2 + noise * rng.normal(size=n)
    return X, y


def test_beats_the_mean_predictor(rng):
    X, y = problem(rng)
    model = gramian.Mklaren(rank=30, device="cpu").fit(X[:500], y[:500])
    rmse = np.sqrt(np.mean((model.predict(X[500:]) - y[500:]) ** 2))
    mean_rmse = np.sqrt(np.mean((y[:500].mean() - y[500:]) ** 2))
    assert rmse < 0.5 * mean_rmse
    assert model.rank_ == 30 and model.n_features_in_ == 4
    assert model.kernel_weights_.shape == (3,) and np.all(model.kernel_weights_ >= 0)


def test_kernel_specifications(rng):
    X, y = problem(rng, n=200)
    for kernels in ["rbf", [("rbf", {"gamma": 2.0}), {"kernel": "laplacian", "gamma": 0.5}], ["linear", ("poly", {"degree": 2})]]:
        model = gramian.Mklaren(kernels=kernels, rank=10, device="cpu").fit(X, y)
        assert model.score(X, y) > 0.5, kernels
    assert gramian.Mklaren(kernels=[("rbf", {"gamma": 2.0})], device="cpu").fit(X, y).kernels_ == [("rbf", 2.0, 1.0, 3)]


def test_rank_is_capped_by_samples_and_by_the_kernels(rng):
    X, y = problem(rng, n=15)
    assert gramian.Mklaren(rank=100, device="cpu").fit(X, y).rank_ <= 15
    # A linear kernel on 2 features has 2 independent columns.
    model = gramian.Mklaren(kernels=["linear"], rank=10, device="cpu").fit(X[:, :2], y)
    assert model.rank_ == 2


def test_constant_target_predicts_the_constant(rng):
    X = rng.normal(size=(20, 2))
    model = gramian.Mklaren(device="cpu").fit(X, np.full(20, 3.5))
    np.testing.assert_array_equal(model.predict(X[:4]), 3.5)


def test_pickle_round_trip(rng):
    X, y = problem(rng, n=200)
    model = gramian.Mklaren(rank=15, device="cpu").fit(X, y)
    loaded = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


def test_gpu_matches_cpu(gpu, rng):
    X, y = problem(rng, n=300)
    cpu = gramian.Mklaren(rank=20, device="cpu").fit(X, y).predict(X)
    dev = gramian.Mklaren(rank=20, device=gpu).fit(X, y).predict(X)
    # The GPU computes kernel columns in float32 (float64 where the adapter has it).
    assert np.max(np.abs(dev - cpu)) < 1e-2 * np.max(np.abs(cpu))


def _sparse_grid(rng, shape, density=0.05):
    """Entries non-zero with probability ``density``, the non-zeros uniform
    on ``{+-1, .., +-16} / 16``: every inner product and squared norm of such
    rows is exact in float64 in any order of summation, so sparse and dense
    inputs give the same kernel columns bit for bit (the linear kernel on
    sparse rows has exactly tied candidates, which any rounding difference
    would break either way)."""
    values = rng.integers(1, 17, size=shape) / 16.0 * rng.choice([-1.0, 1.0], size=shape)
    return np.where(rng.uniform(size=shape) < density, values, 0.0)


@pytest.mark.parametrize("kernel", [("rbf", {"gamma": 0.4}), ("laplacian", {"gamma": 0.5}), "linear", ("poly", {"degree": 2, "gamma": 0.5})])
def test_sparse_inputs_fit_as_their_dense_copies(kernel, rng):
    import scipy.sparse as sp

    # Sparse inputs (density ~5 %, CSR and CSC) give the kernel columns of
    # their dense copies (the same bits on this grid): the same pivots, and
    # predictions within 1e-12 relative (the dense rows' kernel matrix and
    # product may sum in another order).
    X, Xt = _sparse_grid(rng, (60, 200)), _sparse_grid(rng, (25, 200))
    y = np.sin(X @ rng.uniform(-1, 1, 200)) + 0.01 * rng.normal(size=60)
    params = dict(kernels=[kernel], rank=8, lookahead=4, alpha=0.1, device="cpu")
    dense = gramian.Mklaren(**params).fit(X, y)
    for fmt in (sp.csr_matrix, sp.csc_array):
        sparse = gramian.Mklaren(**params).fit(fmt(X), y)
        assert sparse.order_ == dense.order_
        expected = dense.predict(Xt)
        scale = np.abs(expected).max()
        np.testing.assert_allclose(sparse.predict(fmt(Xt)), expected, rtol=0, atol=1e-12 * scale)
        np.testing.assert_allclose(sparse.predict(Xt), expected, rtol=0, atol=1e-12 * scale)
    # The low-rank baselines that share the kernel columns (and Nystrom).
    for method in ("icd", "csi", "nystrom"):
        params = dict(kernels=[kernel], rank=6, alpha=1e-3, random_state=1, device="cpu")
        dense = gramian.LowRankRidge(method, **params).fit(X, y)
        sparse = gramian.LowRankRidge(method, **params).fit(sp.csr_matrix(X), y)
        expected = dense.predict(Xt)
        np.testing.assert_allclose(sparse.predict(sp.csr_matrix(Xt)), expected, rtol=0, atol=1e-12 * np.abs(expected).max())
        np.testing.assert_allclose(sparse.kernel_features(sp.csr_matrix(Xt)), dense.kernel_features(Xt), rtol=0, atol=1e-12 * np.abs(dense.kernel_features(Xt)).max())


def test_sparse_inputs_one_per_kernel_and_bad_sparse_inputs(rng):
    import scipy.sparse as sp

    X1, X2 = (_sparse_grid(rng, (50, d), 0.1) for d in (30, 40))
    y = X1.sum(axis=1) + np.cos(X2.sum(axis=1))
    dense = gramian.Mklaren(kernels=[("rbf", {"gamma": 0.5}), "linear"], rank=6, device="cpu").fit([X1, X2], y)
    sparse = gramian.Mklaren(kernels=[("rbf", {"gamma": 0.5}), "linear"], rank=6, device="cpu").fit([sp.csr_matrix(X1), sp.csr_matrix(X2)], y)
    assert sparse.order_ == dense.order_
    expected = dense.predict([X1[:7], X2[:7]])
    np.testing.assert_allclose(sparse.predict([sp.csr_matrix(X1[:7]), X2[:7]]), expected, rtol=0, atol=1e-12 * np.abs(expected).max())
    # Typed errors: NaN (stored), shape mismatches, empty.
    bad = sp.csr_matrix(X1)
    bad.data[0] = np.nan
    with pytest.raises(ValueError):
        gramian.Mklaren(device="cpu").fit(bad, y)
    with pytest.raises(ValueError):
        gramian.Mklaren(device="cpu").fit(sp.csr_matrix(X1[:40]), y)
    with pytest.raises(ValueError, match="features"):
        sparse.predict([sp.csr_matrix(X1[:, :10]), X2])
    with pytest.raises(ValueError):
        gramian.Mklaren(device="cpu").fit(sp.csr_matrix((0, 30)), y[:0])
    with pytest.raises(ValueError):
        sparse.predict([sp.csr_matrix((0, 30)), sp.csr_matrix((0, 40))])
    # The full-kernel baseline does not take sparse inputs.
    with pytest.raises(TypeError):
        gramian.MultipleKernelRidge(device="cpu").fit(sp.csr_matrix(X1), y)


def test_sparse_input_on_a_gpu_fits_as_its_dense_copy(gpu, rng):
    # The reference is the dense fit on the same device: with f64 both run
    # on the device, whose kernel columns of the sparse rows (a merge of the
    # non-zeros) and of the dense ones are exact on the grid, so the same
    # steps follow (the CPU sums the LAR steps in another order, which may
    # break the linear kernel's exact ties); without f64 both take the host path.
    import scipy.sparse as sp

    X = _sparse_grid(rng, (60, 100))
    y = np.sin(X.sum(axis=1)) + X[:, 0]
    params = dict(kernels=[("rbf", {"gamma": 0.5}), "linear"], rank=6, lookahead=3)
    dense = gramian.Mklaren(**params, device=gpu).fit(X, y)
    sparse = gramian.Mklaren(**params, device=gpu).fit(sp.csr_matrix(X), y)
    assert sparse.order_ == dense.order_
    np.testing.assert_allclose(sparse.predict(sp.csr_matrix(X)), dense.predict(X), rtol=0, atol=1e-12 * np.abs(y).max())
