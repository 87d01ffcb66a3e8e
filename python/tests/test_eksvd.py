"""EKSVD and KSVD on paired sources sharing a latent signal."""

import pickle

import numpy as np
import pytest

import gramian


def sources(rng, n=200, dims=(5, 8, 3), noise=0.1):
    latent = rng.uniform(-1, 1, (n, 2))
    return [latent @ rng.uniform(-1, 1, (2, d)) + noise * rng.uniform(-1, 1, (n, d)) for d in dims], latent


@pytest.mark.parametrize("solver", ["dual", "covariance"])
def test_scores_recover_the_shared_signal(solver, rng):
    Xs, latent = sources(rng)
    model = gramian.EKSVD(n_components=2, feature_map="rff", n_features=64, random_state=0, solver=solver, device="cpu").fit(Xs)
    scores = model.transform(Xs)
    assert len(scores) == 3 and all(s.shape == (200, 2) for s in scores)
    assert model.eigenvalues_.shape == (2,) and model.eigenvalues_[0] >= model.eigenvalues_[1] > 0
    assert model.n_views_ == 3 and model.n_features_in_ == [5, 8, 3]
    # Each source's first score is explained by the latent signal (R^2 of a linear fit).
    for s in scores:
        coef, *_ = np.linalg.lstsq(np.c_[latent, latent**2, np.ones(200)], s[:, 0], rcond=None)
        fit = np.c_[latent, latent**2, np.ones(200)] @ coef
        assert 1 - np.var(s[:, 0] - fit) / np.var(s[:, 0]) > 0.5


def test_linear_maps_and_new_samples(rng):
    Xs, _ = sources(rng, dims=(4, 4))
    model = gramian.KSVD(n_components=2, device="cpu").fit([X[:150] for X in Xs])
    held = model.transform([X[150:] for X in Xs])
    assert [h.shape for h in held] == [(50, 2), (50, 2)]
    loaded = pickle.loads(pickle.dumps(model))
    np.testing.assert_allclose(loaded.transform([X[150:] for X in Xs])[1], held[1])


def test_bad_sources_raise_value_error(rng):
    Xs, _ = sources(rng, dims=(3, 3, 3))
    with pytest.raises(ValueError, match="2 sources"):
        gramian.KSVD(device="cpu").fit(Xs)
    with pytest.raises(ValueError, match="at least 2"):
        gramian.EKSVD(device="cpu").fit(Xs[:1])
    with pytest.raises(ValueError, match="same samples"):
        gramian.EKSVD(device="cpu").fit([Xs[0], Xs[1][:10]])
    with pytest.raises(ValueError, match="list"):
        gramian.EKSVD(device="cpu").fit(Xs[0])
    model = gramian.EKSVD(device="cpu").fit(Xs)
    with pytest.raises(ValueError, match="features"):
        model.transform([Xs[0], Xs[1], Xs[2][:, :2]])
    with pytest.raises(ValueError):
        gramian.EKSVD(feature_map="poly", device="cpu").fit(Xs)
    # Linear maps need the same number of features in every source (Rust check).
    with pytest.raises(gramian.InvalidInputError):
        gramian.EKSVD(device="cpu").fit([Xs[0], Xs[1][:, :2]])


def test_gpu_matches_cpu(gpu, rng):
    Xs, _ = sources(rng, n=100)
    cpu = gramian.EKSVD(feature_map="rff", n_features=32, random_state=1, device="cpu").fit(Xs)
    dev = gramian.EKSVD(feature_map="rff", n_features=32, random_state=1, device=gpu).fit(Xs)
    np.testing.assert_allclose(dev.eigenvalues_, cpu.eigenvalues_, rtol=1e-3)


def test_ksvd_of_a_symmetric_kernel_is_kernel_pca(rng):
    # Both sources the same centred data with linear maps: the kernel
    # X X^T is symmetric positive semidefinite and its singular values are
    # the eigenvalues of linear kernel PCA (scikit-learn centres the kernel,
    # which changes nothing for centred data).
    from sklearn.decomposition import KernelPCA

    X = rng.normal(size=(60, 4)) @ np.diag([3.0, 2.0, 1.0, 0.5])
    X -= X.mean(axis=0)
    model = gramian.KSVD(n_components=3, device="cpu").fit([X, X])
    pca = KernelPCA(n_components=3, kernel="linear").fit(X)
    np.testing.assert_allclose(model.eigenvalues_, pca.eigenvalues_, rtol=1e-10)
    # The scores span the same directions: each column is a multiple of
    # kernel PCA's.
    scores, theirs = model.transform([X, X])[0], pca.transform(X)
    for k in range(3):
        corr = np.corrcoef(scores[:, k], theirs[:, k])[0, 1]
        assert abs(abs(corr) - 1) < 1e-10


def _sparse_copy(X, rng, density=0.05):
    """``X`` with about ``1 - density`` of its entries set to zero."""
    return np.where(rng.uniform(size=X.shape) < density, X, 0.0)


@pytest.mark.parametrize("solver", ["dual", "covariance"])
@pytest.mark.parametrize("feature_map", ["linear", "rff", "nystrom"])
def test_sparse_sources_fit_as_their_dense_copies(solver, feature_map, rng):
    import scipy.sparse as sp

    # Sparse views (density ~5 %, several scipy formats, one view dense):
    # the sparse path differs from the dense one only in the summation
    # order, so eigenvalues agree to 1e-9 relative and the scores of
    # well-separated components (relative gap >= 1e-4) to 1e-6 up to sign.
    dims = (40, 40, 40)
    Xs = [_sparse_copy(rng.uniform(-1, 1, (80, d)), rng) for d in dims]
    new = [_sparse_copy(rng.uniform(-1, 1, (30, d)), rng) for d in dims]
    formats = [sp.csr_matrix, sp.csc_array, lambda X: X]
    params = dict(n_components=3, feature_map=feature_map, gamma=0.1, n_features=12, n_landmarks=40, solver=solver, random_state=3, device="cpu")
    dense = gramian.EKSVD(**params).fit(Xs)
    sparse = gramian.EKSVD(**params).fit([f(X) for f, X in zip(formats, Xs)])
    np.testing.assert_allclose(sparse.eigenvalues_, dense.eigenvalues_, rtol=1e-9)
    lam = dense.eigenvalues_
    gaps = np.minimum(np.r_[np.inf, -np.diff(lam)], np.r_[-np.diff(lam), np.inf]) / lam[0]
    for s, d in zip(sparse.transform([sp.coo_array(X) for X in new]), dense.transform(new)):
        for j in np.flatnonzero(gaps >= 1e-4):
            sign = np.sign(s[:, j] @ d[:, j]) or 1.0
            np.testing.assert_allclose(sign * s[:, j], d[:, j], atol=1e-6 * np.abs(d[:, j]).max())


def test_bad_sparse_sources_raise_value_error(rng):
    import scipy.sparse as sp

    Xs = [sp.random(20, 10, density=0.3, format="csr", random_state=q) for q in range(2)]
    bad = Xs[1].copy()
    bad.data[0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        gramian.EKSVD(device="cpu").fit([Xs[0], bad])
    with pytest.raises(ValueError, match="same samples"):
        gramian.EKSVD(device="cpu").fit([Xs[0], Xs[1][:10]])
    model = gramian.EKSVD(feature_map="rff", n_features=8, device="cpu").fit(Xs)
    with pytest.raises(ValueError, match="features"):
        model.transform([Xs[0], Xs[1][:, :4]])
