"""NeuralEKSVD, where the package is built with the cargo feature `neural`
(CI builds it so)."""

import os
import pickle

import numpy as np
import pytest

import gramian


@pytest.fixture
def neural():
    if not hasattr(gramian, "NeuralEKSVD"):
        if os.environ.get("GRAMIAN_REQUIRE_NEURAL") == "1":
            pytest.fail("GRAMIAN_REQUIRE_NEURAL=1 but the package was built without the feature `neural`")
        pytest.skip("built without the cargo feature `neural`")
    return gramian.NeuralEKSVD


def views(rng, n=240):
    labels = rng.integers(0, 3, n)
    centres = rng.normal(size=(3, 2)) * 3
    latent = centres[labels] + 0.3 * rng.normal(size=(n, 2))
    return [latent @ rng.normal(size=(2, d)) + 0.1 * rng.normal(size=(n, d)) for d in (5, 4)], labels


def test_neural_eksvd_classifies_and_pickles(neural, rng):
    Xs, y = views(rng)
    names = np.array(["a", "b", "c"])[y]
    model = neural(n_components=4, hidden=(32,), d_phi=16, max_epochs=40, random_state=0, device="cpu").fit([X[:180] for X in Xs], names[:180])
    predicted = model.predict([X[180:] for X in Xs])
    assert set(predicted) <= {"a", "b", "c"}
    assert np.mean(predicted == names[180:]) > 0.8
    scores = model.transform([X[180:] for X in Xs])
    assert [s.shape for s in scores] == [(60, 4), (60, 4)]
    assert model.gamma_ > 0 and model.n_features_in_ == [5, 4]
    loaded = pickle.loads(pickle.dumps(model))
    np.testing.assert_allclose(loaded.transform([X[180:] for X in Xs])[0], scores[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(loaded.predict([X[180:] for X in Xs]), predicted)


def test_neural_eksvd_bad_input(neural, rng):
    Xs, y = views(rng, n=40)
    with pytest.raises(ValueError):
        neural(device="cpu").fit(Xs, y[:30])
    with pytest.raises(ValueError):
        neural(device="cpu").fit(Xs, np.zeros(40))
    with pytest.raises(ValueError):
        neural(validation_fraction=1.5, device="cpu").fit(Xs, y)
    with pytest.raises(ValueError):
        neural(hidden=(0,), device="cpu").fit(Xs, y)
