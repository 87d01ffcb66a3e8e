"""Exceptions raised by gramian.

Every error of the Rust core is a :class:`GramianError`; each subclass also
derives from the built-in exception a caller would catch for that kind of
failure, so ``except ValueError`` still catches bad input::

    GramianError                       any failure of the Rust core
    +-- InvalidInputError (ValueError)     bad arguments: shapes, NaN/inf, parameters
    +-- OutOfMemoryError (MemoryError)     a result or buffer larger than host or GPU memory
    +-- DeviceError (RuntimeError)         no GPU adapter for device="gpu", a GPU failure
    +-- ConvergenceError (RuntimeError)    a solver stopped at its iteration budget
    +-- NumericalError (ArithmeticError)   overflow, rank deficiency, a singular system

Each instance has a ``variant`` attribute: the name of the Rust error
(e.g. ``"NonFinite"``, ``"RankTooLarge"``). The estimators validate their
input with scikit-learn first, so bad data usually raises scikit-learn's
``ValueError`` before the Rust core sees it.
"""


class GramianError(Exception):
    """Base class of the errors raised by gramian's Rust core."""

    variant = "GramianError"


class InvalidInputError(GramianError, ValueError):
    """Invalid arguments: empty or mismatched shapes, NaN or infinite values,
    parameters out of range."""


class OutOfMemoryError(GramianError, MemoryError):
    """A result or working buffer does not fit in host or GPU memory (raised
    before any work where the size is known up front)."""


class DeviceError(GramianError, RuntimeError):
    """No GPU adapter for ``device="gpu"``, or the GPU failed (device lost,
    unsupported operation, a row too large for one GPU binding)."""


class ConvergenceError(GramianError, RuntimeError):
    """An iterative solver stopped at its iteration budget before reaching
    its tolerance (raise ``max_iter`` or ``tol``)."""


class NumericalError(GramianError, ArithmeticError):
    """Finite inputs gave an overflow, a singular or rank-deficient system,
    or a quantity that must be positive is not (rescale the data or change
    the kernel parameters)."""


__all__ = [
    "GramianError",
    "InvalidInputError",
    "OutOfMemoryError",
    "DeviceError",
    "ConvergenceError",
    "NumericalError",
]
