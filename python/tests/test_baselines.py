"""mklaren's baselines (LowRankRidge, MultipleKernelRidge), Mklaren with one
input per kernel, and the PNM / NCM / GLM baselines of PSD models."""

import pickle

import numpy as np
import pytest

import gramian


def problem(rng, n=300, d=3, noise=0.05):
    X = rng.uniform(-1, 1, (n, d))
    y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2 + noise * rng.normal(size=n)
    return X, y


def rmse(a, b):
    return float(np.sqrt(np.mean((a - b) ** 2)))


@pytest.mark.parametrize("method", ["icd", "nystrom", "csi"])
def test_low_rank_ridge_fits_held_out_data(method, rng):
    X, y = problem(rng)
    model = gramian.LowRankRidge(method, rank=15, alpha=1e-3, random_state=0, device="cpu").fit(X[:200], y[:200])
    assert rmse(model.predict(X[200:]), y[200:]) < 0.4 * np.std(y[200:])
    assert model.coef_.shape == (45,) and len(model.landmarks_) == 3 and model.landmarks_[0].shape == (15, 3)
    G = model.kernel_features(X[:10])
    assert G.shape == (10, 45)
    loaded = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


def test_nystrom_factors_match_scikit_learn_nystroem(rng):
    from sklearn.kernel_approximation import Nystroem

    X, y = problem(rng, n=200)
    model = gramian.LowRankRidge("nystrom", kernels=[("rbf", {"gamma": 0.8})], rank=25, random_state=3, device="cpu").fit(X, y)
    landmarks = model.landmarks_[0]
    # scikit-learn's Nystroem on exactly these landmarks (all of them are
    # its components): its features differ from ours by a rotation, so the
    # approximate kernels G G^T agree.
    sk = Nystroem(kernel="rbf", gamma=0.8, n_components=landmarks.shape[0], random_state=0).fit(landmarks)
    ours, theirs = model.kernel_features(X), sk.transform(X)
    np.testing.assert_allclose(ours @ ours.T, theirs @ theirs.T, atol=1e-8)
    # ... and reproduce the kernel on the landmarks exactly.
    from sklearn.metrics.pairwise import rbf_kernel

    G = model.kernel_features(landmarks)
    np.testing.assert_allclose(G @ G.T, rbf_kernel(landmarks, gamma=0.8), atol=1e-8)


@pytest.mark.parametrize("combination", ["uniform", "align", "alignf", "alignfc"])
def test_multiple_kernel_ridge(combination, rng):
    X, y = problem(rng)
    model = gramian.MultipleKernelRidge(combination, alpha=1.0, device="cpu").fit(X[:200], y[:200])
    assert rmse(model.predict(X[200:]), y[200:]) < 0.5 * np.std(y[200:])
    assert model.weights_.shape == (3,) and model.dual_coef_.shape == (200,)
    np.testing.assert_allclose(np.abs(model.weights_).sum(), 3.0)
    if combination in ("uniform",):
        np.testing.assert_array_equal(model.weights_, 1.0)
    if combination == "alignfc":
        assert np.all(model.weights_ >= 0)


def test_uniform_full_kernel_ridge_is_scikit_learn_kernel_ridge(rng):
    from sklearn.kernel_ridge import KernelRidge

    X, y = problem(rng, n=150)
    ours = gramian.MultipleKernelRidge("uniform", kernels=[("rbf", {"gamma": 1.5})], alpha=0.3, device="cpu").fit(X, y)
    # (K + alpha I) a = y - mean(y), prediction mean(y) + K* a: scikit-learn's
    # KernelRidge on the centred target.
    theirs = KernelRidge(alpha=0.3, kernel="rbf", gamma=1.5).fit(X, y - y.mean())
    np.testing.assert_allclose(ours.predict(X[:20]), theirs.predict(X[:20]) + y.mean(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(ours.dual_coef_, theirs.dual_coef_, rtol=1e-8, atol=1e-10)


def test_mklaren_with_one_input_per_kernel(rng):
    X, y = problem(rng, n=300, d=4)
    Xs = [X[:, :2], X[:, 2:]]
    model = gramian.Mklaren(kernels=["rbf", "rbf"], rank=20, device="cpu").fit([x[:200] for x in Xs], y[:200])
    assert model.n_inputs_ == 2 and model.n_features_in_ == [2, 2]
    assert rmse(model.predict([x[200:] for x in Xs]), y[200:]) < 0.4 * np.std(y[200:])
    # y depends on the first input only through columns 0 and 1: the first kernel carries the fit.
    assert model.kernel_weights_[0] > model.kernel_weights_[1]
    assert all(k in (0, 1) for k, _ in model.order_)
    loaded = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(loaded.predict(Xs), model.predict(Xs))
    # Default kernels: one per input.
    assert len(gramian.Mklaren(rank=5, device="cpu").fit(Xs, y).kernels_) == 2


def test_one_input_per_kernel_equals_feature_subsets(rng):
    # The same fit as the full-kernel baseline on each kernel's own columns.
    X, y = problem(rng, n=120, d=4)
    a = gramian.MultipleKernelRidge(kernels=[("rbf", {"gamma": 1.0}), ("linear", {})], device="cpu").fit([X[:, :2], X[:, 2:]], y)
    from sklearn.metrics.pairwise import linear_kernel, rbf_kernel

    K = rbf_kernel(X[:, :2], gamma=1.0) + linear_kernel(X[:, 2:])
    alpha = np.linalg.solve(K + np.eye(120), y - y.mean())
    np.testing.assert_allclose(a.dual_coef_, alpha, rtol=1e-8, atol=1e-10)


def test_multi_input_errors(rng):
    X, y = problem(rng, n=50, d=4)
    Xs = [X[:, :2], X[:, 2:]]
    with pytest.raises(ValueError, match="one kernel each"):
        gramian.Mklaren(kernels=["rbf"] * 3, device="cpu").fit(Xs, y)
    with pytest.raises(ValueError):
        gramian.Mklaren(kernels=["rbf"] * 2, device="cpu").fit([Xs[0], Xs[1][:40]], y)
    model = gramian.Mklaren(kernels=["rbf"] * 2, rank=5, device="cpu").fit(Xs, y)
    with pytest.raises(ValueError, match="fitted on 2 inputs"):
        model.predict(X)
    with pytest.raises(ValueError, match="features"):
        model.predict([Xs[0], X])
    with pytest.raises(ValueError, match="input"):
        model.predict([Xs[0]])


def test_baseline_parameters_raise_value_error(rng):
    X, y = problem(rng, n=40)
    for est in [
        gramian.LowRankRidge("svd"),
        gramian.LowRankRidge(rank=0),
        gramian.LowRankRidge("csi", kappa=1.5),
        gramian.LowRankRidge(alpha=-1.0),
        gramian.MultipleKernelRidge("best"),
        gramian.MultipleKernelRidge(alpha=np.nan),
        gramian.BaselineQuantileRegressor("kde"),
        gramian.BaselineQuantileRegressor(quantiles=(0.9, 0.1)),
        gramian.BaselineQuantileRegressor(tol=1e-6),
        gramian.BaselineHeteroscedasticRegressor(n_restarts=0),
        gramian.BaselineHeteroscedasticRegressor(quadratic_penalty=0.0),
    ]:
        with pytest.raises(ValueError):
            est.set_params(device="cpu").fit(X, y)
    for est in [gramian.BaselineDensity("kde"), gramian.BaselineDensity(alpha=0.0), gramian.BaselineDensity(base_measure=-1.0), gramian.PSDDensity(base_measure=([0.0, 0.0], [1.0, 1.0]))]:
        with pytest.raises(ValueError):
            est.set_params(device="cpu").fit(X)


def bimodal(rng, n=200):
    centres = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return (centres + 0.3 * rng.normal(size=n)).reshape(-1, 1)


@pytest.mark.parametrize("kind", ["pnm", "ncm", "glm"])
def test_baseline_density(kind, rng):
    X, test = bimodal(rng), bimodal(rng)
    model = gramian.BaselineDensity(kind, bandwidth=0.3, random_state=0, device="cpu").fit(X)
    assert model.coef_.shape == (200,)
    if kind == "ncm":
        assert np.all(model.coef_ >= 0)
    if kind != "glm":
        assert abs(model.model_.integral() - 1) < 1e-6
    grid = np.linspace(-4, 4, 2001).reshape(-1, 1)
    p = model.density(grid)
    if kind != "pnm":
        assert np.all(p >= 0)
    # Mass where the data are, and a held-out log-likelihood near the true
    # mixture's (about -0.98 for this bimodal density).
    assert model.density([[1.0]])[0] > 3 * model.density([[0.0]])[0]
    # PNM is non-negative on the training samples only: held-out points
    # may get a density <= 0 (log-likelihood -inf), so its held-out score
    # is measured on the training samples instead.
    mean_ll = model.score(X if kind == "pnm" else test) / len(test)
    # (PNM puts spikes on the training samples: its in-sample score is high.)
    assert -1.6 < mean_ll < (3.0 if kind == "pnm" else -0.7), mean_ll
    loaded = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(loaded.score_samples(test), model.score_samples(test))


def test_gaussian_base_measure(rng):
    X = bimodal(rng)
    lebesgue = gramian.PSDDensity(bandwidth=0.3, device="cpu").fit(X)
    gaussian = gramian.PSDDensity(bandwidth=0.3, base_measure=5.0, device="cpu").fit(X)
    grid = np.linspace(-6, 6, 6001).reshape(-1, 1)
    for model in (lebesgue, gaussian):
        assert abs(np.trapezoid(model.density(grid), grid[:, 0]) - 1) < 1e-3
    assert abs(gaussian.model_.integral() - 1) < 1e-6
    assert not np.allclose(lebesgue.density(grid[::100]), gaussian.density(grid[::100]))


def heteroscedastic(rng, n=200):
    X = rng.uniform(-2, 2, (n, 1))
    sd = 0.1 + 0.4 * (X[:, 0] > 0)
    return X, np.sin(X[:, 0]) + sd * rng.normal(size=n)


@pytest.mark.parametrize("kind", ["pnm", "ncm", "glm"])
def test_baseline_regressors(kind, rng):
    X, y = heteroscedastic(rng)
    q = gramian.BaselineQuantileRegressor(kind, bandwidth=0.5, random_state=0, device="cpu").fit(X, y)
    grid = np.linspace(-2, 2, 100).reshape(-1, 1)
    Q = q.predict(grid)
    assert Q.shape == (100, 3) and np.all(np.diff(Q, axis=1) >= -1e-9)
    width = Q[:, 2] - Q[:, 0]
    assert width[grid[:, 0] > 0.5].mean() > 1.5 * width[grid[:, 0] < -0.5].mean()
    h = gramian.BaselineHeteroscedasticRegressor(kind, bandwidth=0.5, random_state=0, device="cpu").fit(X, y)
    mean, std = h.predict(np.array([[-1.0], [1.0]]), return_std=True)
    np.testing.assert_allclose(mean, np.sin([-1.0, 1.0]), atol=0.25)
    assert std[1] > 1.3 * std[0]
    for model in (q, h):
        loaded = pickle.loads(pickle.dumps(model))
        np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


def test_gpu_baselines_match_cpu(gpu, rng):
    X, y = problem(rng, n=150)
    for make in (lambda d: gramian.LowRankRidge("icd", rank=10, device=d), lambda d: gramian.MultipleKernelRidge(device=d)):
        cpu = make("cpu").fit(X, y).predict(X)
        dev = make(gpu).fit(X, y).predict(X)
        assert np.max(np.abs(dev - cpu)) < 1e-2 * np.max(np.abs(cpu))
    Xd = bimodal(rng, n=80)
    cpu = gramian.BaselineDensity("ncm", bandwidth=0.3, device="cpu").fit(Xd).density(Xd)
    dev = gramian.BaselineDensity("ncm", bandwidth=0.3, device=gpu).fit(Xd).density(Xd)
    np.testing.assert_allclose(dev, cpu, atol=1e-2 * cpu.max())
