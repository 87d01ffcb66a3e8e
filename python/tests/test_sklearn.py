"""scikit-learn compatibility: the estimator checks, and use in
Pipeline, GridSearchCV and cross_val_score."""

import numpy as np
import pytest
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

import gramian


@parametrize_with_checks([
    gramian.Mklaren(device="cpu"),
    gramian.PSDDensity(device="cpu"),
    gramian.PSDQuantileRegressor(quantiles=0.5, device="cpu"),
    gramian.PSDHeteroscedasticRegressor(device="cpu"),
    gramian.LowRankRidge(device="cpu"),
    gramian.LowRankRidge("csi", rank=10, device="cpu"),
    gramian.MultipleKernelRidge(device="cpu"),
    gramian.BaselineDensity(device="cpu"),
    gramian.BaselineQuantileRegressor(quantiles=0.5, device="cpu"),
    gramian.BaselineHeteroscedasticRegressor(device="cpu"),
])
def test_scikit_learn_estimator_checks(estimator, check):
    check(estimator)


def test_pipeline_and_grid_search(rng):
    X = rng.uniform(-1, 1, (200, 3)) * [1, 10, 100]
    y = np.sin(3 * X[:, 0]) + 0.1 * rng.normal(size=200)
    pipe = make_pipeline(StandardScaler(), gramian.Mklaren(device="cpu"))
    search = GridSearchCV(pipe, {"mklaren__rank": [2, 20], "mklaren__alpha": [0.0, 1e-2]}, cv=3).fit(X, y)
    assert search.best_params_["mklaren__rank"] == 20
    assert search.score(X, y) > 0.8
    scores = cross_val_score(gramian.Mklaren(rank=20, device="cpu"), X[:, :1], y, cv=3)
    assert scores.shape == (3,) and np.all(scores > 0.5)


def test_density_bandwidth_by_grid_search(rng):
    X = rng.normal(size=(150, 1))
    search = GridSearchCV(gramian.PSDDensity(device="cpu"), {"bandwidth": [0.02, 0.5]}, cv=3).fit(X)
    assert search.best_params_["bandwidth"] == 0.5


def test_get_and_set_params():
    model = gramian.Mklaren(rank=5)
    assert model.get_params()["rank"] == 5
    assert model.set_params(rank=7, kernels=["linear"]).rank == 7
    # Parameters are stored as given; checks happen at fit.
    assert gramian.Mklaren(rank=-3).rank == -3


def test_grid_search_in_two_processes(rng):
    # n_jobs=2: the estimator is pickled to the workers (loky processes) and
    # each fitted model comes back pickled.
    X = rng.uniform(-1, 1, (150, 2))
    y = np.sin(3 * X[:, 0]) + 0.05 * rng.normal(size=150)
    grid = {"rank": [2, 15], "alpha": [0.0, 1e-2]}
    parallel = GridSearchCV(gramian.Mklaren(device="cpu"), grid, cv=3, n_jobs=2).fit(X, y)
    serial = GridSearchCV(gramian.Mklaren(device="cpu"), grid, cv=3, n_jobs=1).fit(X, y)
    assert parallel.best_params_["rank"] == 15
    np.testing.assert_allclose(parallel.cv_results_["mean_test_score"], serial.cv_results_["mean_test_score"], rtol=1e-12)
    np.testing.assert_array_equal(parallel.predict(X), serial.predict(X))
    density = GridSearchCV(gramian.PSDDensity(device="cpu"), {"bandwidth": [0.02, 0.5]}, cv=3, n_jobs=2).fit(X[:, :1])
    assert density.best_params_["bandwidth"] == 0.5
