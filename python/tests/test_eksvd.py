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
