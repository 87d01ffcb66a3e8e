"""Input validation shared by the estimators (scikit-learn's, across its versions)."""

import numpy as np

try:  # scikit-learn >= 1.6
    from sklearn.utils.validation import validate_data as _sk_validate_data
except ImportError:  # pragma: no cover - older scikit-learn
    _sk_validate_data = None

DEVICES = ("auto", "cpu", "gpu")


def validate_data(estimator, X="no_validation", y="no_validation", **kwargs):
    """scikit-learn's ``validate_data`` (``BaseEstimator._validate_data``
    before 1.6), returning C-contiguous float64 arrays."""
    kwargs.setdefault("dtype", np.float64)
    kwargs.setdefault("order", "C")
    if _sk_validate_data is not None:
        return _sk_validate_data(estimator, X, y, **kwargs)
    return estimator._validate_data(X, y, **kwargs)  # pragma: no cover


def check_device(device):
    """``device`` if it is one of "auto", "cpu", "gpu"; ValueError otherwise."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    return device


def check_positive(name, value, *, integer=False, allow_zero=False):
    """``value`` as a float (or int) if it is a finite number > 0 (>= 0 with
    ``allow_zero``); ValueError naming ``name`` otherwise."""
    kinds = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    if isinstance(value, bool) or not isinstance(value, kinds) or not np.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        kind = "an integer" if integer else "a finite number"
        raise ValueError(f"{name} must be {kind} {bound}, got {value!r}")
    return int(value) if integer else float(value)


def seed_from(random_state):
    """A 64-bit seed for the Rust core from a scikit-learn ``random_state``."""
    from sklearn.utils import check_random_state

    return int(check_random_state(random_state).randint(0, 2**63 - 1, dtype=np.int64))
