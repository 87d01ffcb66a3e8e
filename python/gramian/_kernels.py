"""Kernel specifications: what the estimators' ``kernel``/``kernels``
parameters accept, resolved to the ``(name, gamma, coef0, degree)`` tuples
of the Rust core."""

import numbers

import numpy as np
import scipy.sparse as sp

#: Kernel names and their aliases.
KERNELS = {
    "rbf": "rbf",
    "gaussian": "rbf",
    "laplacian": "laplacian",
    "linear": "linear",
    "poly": "poly",
    "polynomial": "poly",
    "sigmoid": "sigmoid",
}


def scale_gamma(X):
    """scikit-learn's ``gamma="scale"``: ``1 / (n_features * X.var())``
    (1 where ``X`` is constant)."""
    if sp.issparse(X):
        entries = X.shape[0] * X.shape[1]
        mean = X.sum() / entries if entries else 0.0
        var = float(X.multiply(X).sum() / entries - mean * mean) if entries else 0.0
    else:
        var = float(np.var(X)) if X.size else 0.0
    return 1.0 / (X.shape[1] * var) if var > 0 else 1.0


def resolve(spec, X=None, *, default_gamma="scale"):
    """One kernel specification as ``(name, gamma, coef0, degree)``.

    ``spec`` is a kernel name (``"rbf"``, ``"laplacian"``, ``"linear"``,
    ``"poly"``, ``"sigmoid"``), a dict ``{"kernel": name, **params}`` or a
    pair ``(name, params)``; ``params`` may hold ``gamma`` (a number,
    ``"scale"`` for ``1 / (n_features * X.var())`` or ``"auto"`` for
    ``1 / n_features``), ``coef0`` (default 1) and ``degree`` (default 3).
    """
    if isinstance(spec, str):
        name, params = spec, {}
    elif isinstance(spec, dict):
        params = dict(spec)
        name = params.pop("kernel", None)
    elif isinstance(spec, (tuple, list)) and len(spec) == 2 and isinstance(spec[0], str) and isinstance(spec[1], dict):
        name, params = spec[0], dict(spec[1])
    else:
        raise ValueError(f"a kernel is a name, a dict with a 'kernel' key or a (name, params) pair; got {spec!r}")
    if name not in KERNELS:
        raise ValueError(f"unknown kernel {name!r}; expected one of {sorted(KERNELS)}")
    unknown = set(params) - {"gamma", "coef0", "degree"}
    if unknown:
        raise ValueError(f"unknown kernel parameters {sorted(unknown)} for kernel {name!r}")
    gamma = params.get("gamma", default_gamma)
    if gamma is None:
        gamma = "auto"
    if isinstance(gamma, str):
        if X is None or gamma not in ("scale", "auto"):
            raise ValueError(f"gamma must be a number, 'scale' or 'auto', got {gamma!r}")
        gamma = scale_gamma(X) if gamma == "scale" else 1.0 / X.shape[1]
    degree = params.get("degree", 3)
    if isinstance(degree, bool) or not isinstance(degree, numbers.Integral) or not 1 <= degree < 2**31:
        raise ValueError(f"degree must be an integer >= 1, got {degree!r}")
    coef0 = params.get("coef0", 1.0)
    for what, value in (("gamma", gamma), ("coef0", coef0)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"{what} must be a number, got {value!r}")
    return (KERNELS[name], float(gamma), float(coef0), int(degree))
