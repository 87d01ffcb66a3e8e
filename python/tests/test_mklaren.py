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
