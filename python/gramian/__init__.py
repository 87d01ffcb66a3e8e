"""gramian: GPU kernel methods with scikit-learn estimators.

Estimators (scikit-learn conventions: parameters in ``__init__``, ``fit``
returns ``self``, fitted attributes end in ``_``):

- :class:`Mklaren`: multiple-kernel low-rank regression.
- :class:`PSDDensity`: density estimation with a PSD model.
- :class:`PSDQuantileRegressor`: non-crossing quantile regression.
- :class:`PSDHeteroscedasticRegressor`: conditional mean and variance.
- :class:`EKSVD`, :class:`KSVD`: kernel SVD of several paired sources
  (multi-view: ``fit(Xs)`` with a list of arrays).

Compute core: :func:`kernel_matrix`, :func:`kernel_matvec`,
:func:`device_info`. Every estimator and function takes
``device="auto" | "cpu" | "gpu"``; "auto" uses a hardware GPU when one is
present and otherwise the CPU. Errors: :mod:`gramian.exceptions`.
"""

from . import exceptions
from ._compute import device_info, kernel_matrix, kernel_matvec
from .exceptions import (
    ConvergenceError,
    DeviceError,
    GramianError,
    InvalidInputError,
    NumericalError,
    OutOfMemoryError,
)
from .eksvd import EKSVD, KSVD
from .mklaren import Mklaren
from .psd import PSDDensity, PSDHeteroscedasticRegressor, PSDQuantileRegressor

__version__ = "0.1.0"

__all__ = [
    "Mklaren",
    "PSDDensity",
    "PSDQuantileRegressor",
    "PSDHeteroscedasticRegressor",
    "EKSVD",
    "KSVD",
    "kernel_matrix",
    "kernel_matvec",
    "device_info",
    "exceptions",
    "GramianError",
    "InvalidInputError",
    "OutOfMemoryError",
    "DeviceError",
    "ConvergenceError",
    "NumericalError",
]
