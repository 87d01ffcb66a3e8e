"""The Python package computes what the Rust API computes: the same fits on
the same data and seeds, by the Rust program python/examples/rust_reference.rs
(built by ``cargo build --workspace --all-features --examples``).

Tolerance: 1e-12 relative (plus 1e-12 times the largest magnitude). Both
sides run the same library code on the CPU in float64; only the order of
parallel floating-point sums may differ between two runs.

The program is found at ``$GRAMIAN_RUST_REFERENCE`` (CI sets it, so a
missing program fails there) or in the workspace's target directory;
without either the tests are skipped.
"""

import os
import pathlib
import subprocess

import numpy as np
import pytest

import gramian
from gramian._validation import seed_from

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _program():
    named = os.environ.get("GRAMIAN_RUST_REFERENCE")
    if named:
        path = pathlib.Path(named)
        if not path.is_absolute():
            path = ROOT / path
        if not path.exists():
            pytest.fail(f"GRAMIAN_RUST_REFERENCE={named} does not exist")
        return path
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    path = target / "debug" / "examples" / "rust_reference"
    if not path.exists():
        pytest.skip("the Rust reference program is not built (cargo build --workspace --all-features --examples)")
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Data, the Python package's own results, and the Rust program's."""
    rng = np.random.default_rng(7)
    n, d, m = 160, 3, 40
    X = rng.uniform(-1, 1, (n, d))
    y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2 + 0.05 * rng.normal(size=n)
    Xt = rng.uniform(-1, 1, (m, d))
    random_state = 12345
    seed = seed_from(random_state)
    folder = tmp_path_factory.mktemp("rust_reference")
    for name, a in (("x", X), ("y", y), ("xt", Xt)):
        np.ascontiguousarray(a, dtype="<f8").tofile(folder / f"{name}.bin")
    out = subprocess.run([str(_program()), str(folder), str(n), str(d), str(m), str(seed)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr

    def rust(name, cols=1):
        return np.fromfile(folder / f"{name}.bin", dtype="<f8").reshape(-1, cols)

    kernels = [("rbf", {"gamma": 0.5}), ("rbf", {"gamma": 2.0})]
    python = {
        "mklaren": gramian.Mklaren(kernels=kernels, rank=15, lookahead=10, alpha=0.01, device="cpu").fit(X, y).predict(Xt),
        "nystrom": gramian.LowRankRidge("nystrom", kernels=kernels[:1], rank=12, alpha=0.1, random_state=random_state, device="cpu").fit(X, y).predict(Xt),
        "full": gramian.MultipleKernelRidge("alignfc", kernels=kernels, alpha=0.1, device="cpu").fit(X, y).predict(Xt),
        "density": gramian.PSDDensity(bandwidth=0.4, trace_penalty=1e-3, quadratic_penalty=1e-4, tol=1e-8, max_iter=20000, device="cpu").fit(X[:, :1]).density(Xt[:, :1]),
        "eksvd": np.hstack(gramian.EKSVD(n_components=2, feature_map="rff", gamma=0.5, n_features=64, random_state=random_state, device="cpu").fit([X, X**2]).transform([Xt, Xt**2])),
        "kernel": gramian.kernel_matrix(X, Xt, "laplacian", gamma=0.7, device="cpu"),
    }
    return python, {name: rust(name, cols=value.shape[1] if value.ndim == 2 else 1) for name, value in python.items()}


@pytest.mark.parametrize("name", ["mklaren", "nystrom", "full", "density", "eksvd", "kernel"])
def test_equal_to_the_rust_api(reference, name):
    python, rust = reference
    ours = python[name].reshape(rust[name].shape)
    np.testing.assert_allclose(ours, rust[name], rtol=1e-12, atol=1e-12 * np.abs(rust[name]).max())
