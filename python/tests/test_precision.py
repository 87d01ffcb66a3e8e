"""The ``precision`` parameter of the estimators: float32 and float64 fits on
a GPU, the methods that need float64, and bad values."""

import numpy as np
import pytest

import gramian

ESTIMATORS = [
    gramian.EKSVD, gramian.KSVD, gramian.NeuralEKSVD, gramian.Mklaren, gramian.LowRankRidge, gramian.MultipleKernelRidge,
    gramian.PSDDensity, gramian.PSDQuantileRegressor, gramian.PSDHeteroscedasticRegressor,
    gramian.BaselineDensity, gramian.BaselineQuantileRegressor, gramian.BaselineHeteroscedasticRegressor,
]


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_every_estimator_has_precision(cls):
    est = cls()
    assert est.get_params()["precision"] == "auto"
    assert est.set_params(precision="float64").precision == "float64"


def _views(rng, n=150):
    latent = rng.normal(size=(n, 2))
    return [latent @ rng.normal(size=(2, d)) + 0.1 * rng.normal(size=(n, d)) for d in (5, 4, 6)]


def test_eksvd_float32_on_a_gpu_agrees_with_float64(gpu, rng):
    Xs = _views(rng)
    common = dict(n_components=3, feature_map="rff", n_features=64, solver="covariance", random_state=0, device=gpu)
    if not gramian.supports_precision("float64", gpu):
        with pytest.raises(gramian.DeviceError):
            gramian.EKSVD(precision="float64", **common).fit(Xs)
        pytest.skip("the adapter has no float64")
    m32 = gramian.EKSVD(precision="float32", **common).fit(Xs)
    m64 = gramian.EKSVD(precision="float64", **common).fit(Xs)
    # float32 features and Grams of 150 rows: relative errors of about
    # 150 * 6e-8 = 1e-5 in the covariances; the separated top eigenvalues
    # move by as much. 1e-4 leaves a margin, and is far above float64's.
    np.testing.assert_allclose(m32.eigenvalues_, m64.eigenvalues_, rtol=1e-4)
    assert not np.array_equal(m32.eigenvalues_, m64.eigenvalues_), "the float32 fit computed in float64"
    for s32, s64 in zip(m32.transform(Xs), m64.transform(Xs)):
        for k in range(3):
            a, b = s32[:, k], s64[:, k]
            err = min(np.linalg.norm(a - b), np.linalg.norm(a + b)) / np.linalg.norm(b)
            assert err < 1e-2, (k, err)


def test_float32_is_the_cpu_float64(rng):
    Xs = _views(rng, 80)
    common = dict(n_components=2, feature_map="rff", n_features=32, random_state=0, device="cpu")
    a = gramian.EKSVD(precision="float32", **common).fit(Xs).eigenvalues_
    b = gramian.EKSVD(**common).fit(Xs).eigenvalues_
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("make", [
    lambda: gramian.PSDDensity(bandwidth=0.5, precision="float32", device="cpu"),
    lambda: gramian.BaselineDensity("ncm", bandwidth=0.5, precision="float32", device="cpu"),
])
def test_psd_models_reject_float32(make, rng):
    with pytest.raises(ValueError, match="f64"):
        make().fit(rng.normal(size=(30, 2)))


def test_psd_quantiles_reject_float32(rng):
    X = rng.normal(size=(40, 1))
    with pytest.raises(ValueError, match="precision"):
        gramian.PSDQuantileRegressor(bandwidth=0.5, precision="float32", device="cpu").fit(X, X[:, 0])


def test_psd_float64_fits_on_the_cpu(rng):
    X = rng.normal(size=(40, 2))
    assert np.isfinite(gramian.PSDDensity(bandwidth=0.7, precision="float64", device="cpu").fit(X).score(X))


@pytest.mark.parametrize("cls", [gramian.EKSVD, gramian.Mklaren, gramian.PSDDensity])
def test_bad_precision_is_a_value_error(cls, rng):
    X = rng.normal(size=(30, 3))
    est = cls(precision="float16", device="cpu")
    with pytest.raises(ValueError, match="precision"):
        if cls is gramian.EKSVD:
            est.fit([X, X])
        elif cls is gramian.Mklaren:
            est.fit(X, X[:, 0])
        else:
            est.fit(X)


def test_mklaren_float32_on_a_gpu_agrees_with_the_cpu(gpu, rng):
    X = rng.normal(size=(80, 3))
    y = np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2]
    ref = gramian.Mklaren(kernels=[("rbf", {"gamma": 0.5})], rank=6, alpha=1e-3, device="cpu").fit(X, y).predict(X)
    got = gramian.Mklaren(kernels=[("rbf", {"gamma": 0.5})], rank=6, alpha=1e-3, device=gpu, precision="float32").fit(X, y).predict(X)
    # float32 kernel columns through 6 Cholesky steps: 1e-4 relative.
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-4
