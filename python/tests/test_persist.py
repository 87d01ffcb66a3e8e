"""gramian.save / gramian.load: every estimator round-trips its parameters,
fitted attributes and predictions; damaged files raise InvalidInputError."""

import json
import zipfile

import numpy as np
import pytest

import gramian
from gramian.exceptions import InvalidInputError


def _regression(rng, n=80):
    X = rng.uniform(-1, 1, size=(n, 2))
    y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2 + 0.05 * rng.standard_normal(n)
    return X, y


def _fitted(rng):
    X, y = _regression(rng)
    views = [X, np.c_[X[:, 1] ** 2, X[:, 0] * X[:, 1]]]
    return [
        (gramian.Mklaren(rank=6, device="cpu").fit(X, y), lambda m: m.predict(X)),
        (gramian.LowRankRidge(rank=6, method="icd", device="cpu").fit(X, y), lambda m: m.predict(X)),
        (gramian.MultipleKernelRidge(device="cpu").fit(X, y), lambda m: m.predict(X)),
        (gramian.PSDDensity(bandwidth=0.5, n_centres=30, random_state=1, device="cpu").fit(X), lambda m: m.score_samples(X)),
        (gramian.PSDQuantileRegressor(quantiles=[0.25, 0.75], bandwidth=0.5, n_centres=30, random_state=1, device="cpu").fit(X, y), lambda m: m.predict(X)),
        (gramian.PSDHeteroscedasticRegressor(bandwidth=0.5, n_centres=30, random_state=1, device="cpu").fit(X, y), lambda m: m.predict(X, return_std=True)[1]),
        (gramian.EKSVD(n_components=2, device="cpu").fit(views), lambda m: m.transform(views)[0]),
    ]


def test_every_estimator_round_trips(rng, tmp_path):
    for model, output in _fitted(rng):
        path = tmp_path / f"{type(model).__name__}.gramian"
        gramian.save(model, path)
        loaded = gramian.load(path)
        assert type(loaded) is type(model)
        assert loaded.get_params() == model.get_params()
        np.testing.assert_allclose(output(loaded), output(model), rtol=1e-12, atol=1e-12)


def test_an_unfitted_estimator_round_trips(tmp_path):
    model = gramian.Mklaren(rank=4, lookahead=3, device="cpu")
    gramian.save(model, tmp_path / "m.gramian")
    assert gramian.load(tmp_path / "m.gramian").get_params() == model.get_params()


def test_objects_that_cannot_be_saved_raise(tmp_path):
    with pytest.raises(InvalidInputError):
        gramian.save(object(), tmp_path / "x")
    with pytest.raises(InvalidInputError):
        gramian.save(gramian.PSDDensity(random_state=np.random.RandomState(0)), tmp_path / "x")


def test_damaged_files_raise_invalid_input(rng, tmp_path):
    X, y = _regression(rng)
    path = tmp_path / "m.gramian"
    gramian.save(gramian.Mklaren(rank=5, device="cpu").fit(X, y), path)
    bad = tmp_path / "bad"
    bad.write_bytes(b"not a zip")
    with pytest.raises(InvalidInputError):
        gramian.load(bad)
    with zipfile.ZipFile(path) as archive:
        manifest = json.loads(archive.read("manifest.json"))
        members = {n: archive.read(n) for n in archive.namelist() if n != "manifest.json"}

    def rewrite(manifest, members):
        with zipfile.ZipFile(bad, "w") as archive:
            archive.writestr("manifest.json", json.dumps(manifest))
            for n, b in members.items():
                archive.writestr(n, b)

    for change in [
        lambda m: m.update(version=99),
        lambda m: m.update(format="other"),
        lambda m: m.update({"class": "os.system"}),
        lambda m: m["attributes"]["model_"].update(loader="system"),
        lambda m: m["attributes"]["model_"].update(parts=10**9),
        lambda m: m.update(params={"no_such_parameter": 1}),
    ]:
        damaged = json.loads(json.dumps(manifest))
        change(damaged)
        rewrite(damaged, members)
        with pytest.raises(InvalidInputError):
            gramian.load(bad)
    model_member = next(n for n in members if n.startswith("attributes/model_"))
    truncated = dict(members)
    truncated[model_member] = members[model_member][: len(members[model_member]) // 2]
    rewrite(manifest, truncated)
    with pytest.raises(InvalidInputError):
        gramian.load(bad)
