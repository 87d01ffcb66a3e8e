"""PSD density, quantile and heteroscedastic regressors."""

import pickle

import numpy as np
import pytest

import gramian


def bimodal(rng, n=200):
    centres = np.where(rng.random(n) < 0.4, -1.0, 1.2)
    return (centres + 0.3 * rng.normal(size=n)).reshape(-1, 1)


def test_density_is_positive_and_integrates_to_one(rng):
    X = bimodal(rng)
    density = gramian.PSDDensity(bandwidth=0.4, device="cpu").fit(X)
    grid = np.linspace(-5, 5, 4001).reshape(-1, 1)
    p = density.density(grid)
    assert np.all(p >= 0)
    assert abs(np.trapezoid(p, grid[:, 0]) - 1) < 1e-3
    assert abs(density.model_.integral() - 1) < 1e-6
    # Higher where the data are: the modes against the gap between them.
    assert density.score_samples([[1.2]])[0] > density.score_samples([[0.1]])[0]
    np.testing.assert_allclose(density.score(X), np.sum(np.log(density.density(X))))
    assert density.n_iter_ > 0 and density.bandwidth_ == 0.4


def test_density_samples_follow_the_data(rng):
    # Exact sampling costs O(centres^2) per bisection step: 60 Nystrom centres.
    X = bimodal(rng, n=400)
    density = gramian.PSDDensity(bandwidth=0.3, n_centres=60, random_state=0, device="cpu").fit(X)
    draws = density.sample(500, random_state=1)
    assert draws.shape == (500, 1)
    assert abs(draws.mean() - X.mean()) < 0.15
    assert abs(draws.std() - X.std()) < 0.15
    np.testing.assert_array_equal(draws, density.sample(500, random_state=1))


def test_density_bandwidth_rules_and_nystrom(rng):
    X = rng.normal(size=(150, 1))
    scott = gramian.PSDDensity(device="cpu").fit(X)
    np.testing.assert_allclose(scott.bandwidth_, 150 ** (-1 / 5) * X.std())
    silverman = gramian.PSDDensity(bandwidth="silverman", device="cpu").fit(X)
    np.testing.assert_allclose(silverman.bandwidth_, (150 * 3 / 4) ** (-1 / 5) * X.std())
    compressed = gramian.PSDDensity(n_centres=40, random_state=0, device="cpu").fit(X)
    assert np.all(np.isfinite(compressed.score_samples(X)))


def heteroscedastic(rng, n=300):
    X = rng.uniform(-2, 2, (n, 1))
    sd = 0.1 + 0.4 * (X[:, 0] > 0)
    return X, np.sin(X[:, 0]) + sd * rng.normal(size=n), sd


def test_quantiles_do_not_cross_and_cover(rng):
    X, y, _ = heteroscedastic(rng)
    model = gramian.PSDQuantileRegressor(quantiles=(0.1, 0.5, 0.9), bandwidth=0.5, device="cpu").fit(X, y)
    grid = np.linspace(-2, 2, 200).reshape(-1, 1)
    q = model.predict(grid)
    assert q.shape == (200, 3)
    assert np.all(np.diff(q, axis=1) >= -1e-9)
    coverage = np.mean((y >= model.predict(X)[:, 0]) & (y <= model.predict(X)[:, 2]))
    assert 0.7 < coverage < 0.9
    # The band is wider where the noise is.
    width = q[:, 2] - q[:, 0]
    assert width[grid[:, 0] > 0.5].mean() > 2 * width[grid[:, 0] < -0.5].mean()
    assert model.score(X, y) < 0
    single = gramian.PSDQuantileRegressor(quantiles=0.5, bandwidth=0.5, device="cpu").fit(X, y)
    assert single.predict(X).shape == (300,)


def test_heteroscedastic_std_tracks_the_noise(rng):
    X, y, _ = heteroscedastic(rng, n=400)
    # True noise sd: 0.1 for x < 0, 0.5 for x > 0 (the penalties shrink the
    # precision, so the small sd is overestimated).
    model = gramian.PSDHeteroscedasticRegressor(bandwidth=0.5, linear_penalty=1e-4, trace_penalty=1e-4, quadratic_penalty=1e-4, device="cpu").fit(X, y)
    mean, std = model.predict(np.array([[-1.0], [1.0]]), return_std=True)
    np.testing.assert_allclose(mean, np.sin([-1.0, 1.0]), atol=0.15)
    assert 0.05 < std[0] < 0.25 and 0.35 < std[1] < 0.7 and std[1] > 2 * std[0]
    np.testing.assert_array_equal(model.predict(X), model.predict(X, return_std=True)[0])


@pytest.mark.parametrize("make", [
    lambda: gramian.PSDDensity(bandwidth=0.5, device="cpu"),
    lambda: gramian.PSDQuantileRegressor(bandwidth=0.5, device="cpu"),
    lambda: gramian.PSDHeteroscedasticRegressor(bandwidth=0.5, device="cpu"),
])
def test_pickle_round_trip(make, rng):
    X, y, _ = heteroscedastic(rng, n=100)
    model = make().fit(X, y)
    method = "score_samples" if isinstance(model, gramian.PSDDensity) else "predict"
    loaded = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(getattr(loaded, method)(X), getattr(model, method)(X))


def test_gpu_density_matches_cpu(gpu, rng):
    X = bimodal(rng, n=60)
    grid = np.linspace(-3, 3, 50).reshape(-1, 1)
    cpu = gramian.PSDDensity(bandwidth=0.4, device="cpu").fit(X).density(grid)
    dev = gramian.PSDDensity(bandwidth=0.4, device=gpu).fit(X).density(grid)
    np.testing.assert_allclose(dev, cpu, atol=1e-2 * cpu.max())


def test_density_box_probabilities_and_marginals(rng):
    # Two independent coordinates: a bimodal one and a normal one.
    X = np.c_[bimodal(rng, n=150), 0.5 * rng.normal(size=150)]
    density = gramian.PSDDensity(bandwidth=0.4, device="cpu").fit(X)
    np.testing.assert_allclose(density.integral(), 1.0, atol=1e-6)
    np.testing.assert_allclose(density.box_probability([-np.inf, -np.inf], [np.inf, np.inf]), 1.0, atol=1e-6)
    # A box probability against the density integrated on a grid.
    g0, g1 = np.linspace(0.0, 1.5, 301), np.linspace(-0.5, 0.5, 201)
    grid = np.array(np.meshgrid(g0, g1, indexing="ij")).reshape(2, -1).T
    p = density.density(grid).reshape(301, 201)
    numeric = np.trapezoid(np.trapezoid(p, g1, axis=1), g0)
    np.testing.assert_allclose(density.box_probability([0.0, -0.5], [1.5, 0.5]), numeric, rtol=1e-4)
    # The marginal of the first coordinate integrates the second out.
    marginal = density.marginal([0])
    assert marginal.n_features_in_ == 1
    t = np.linspace(-6, 6, 4001)
    np.testing.assert_allclose(np.trapezoid(marginal.density(t.reshape(-1, 1)), t), 1.0, atol=1e-4)
    x0 = np.array([[1.2]])
    inner = np.linspace(-6, 6, 4001)
    joint = density.density(np.c_[np.full(4001, 1.2), inner])
    np.testing.assert_allclose(marginal.density(x0)[0], np.trapezoid(joint, inner), rtol=1e-4)
    with pytest.raises(ValueError):
        density.marginal([1, 0])
