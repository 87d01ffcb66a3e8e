"""gramian: GPU kernel methods with scikit-learn estimators.

Estimators (scikit-learn conventions: parameters in ``__init__``, ``fit``
returns ``self``, fitted attributes end in ``_``):

- :class:`Mklaren`: multiple-kernel low-rank regression (one input, or one
  input per kernel), and its baselines :class:`LowRankRidge` (ICD, Nystrom
  or CSI factors) and :class:`MultipleKernelRidge` (full kernels).
- :class:`PSDDensity`: density estimation with a PSD model.
- :class:`PSDQuantileRegressor`: non-crossing quantile regression.
- :class:`PSDHeteroscedasticRegressor`: conditional mean and variance.
- :class:`BaselineDensity`, :class:`BaselineQuantileRegressor`,
  :class:`BaselineHeteroscedasticRegressor`: the PNM / NCM / GLM baselines
  of PSD models.
- :class:`EKSVD`, :class:`KSVD`: kernel SVD of several paired sources
  (multi-view: ``fit(Xs)`` with a list of arrays), and
  :class:`NeuralEKSVD` where the package is built with the cargo feature
  ``neural`` (absent otherwise).

Saving: :func:`save` and :func:`load` (a zip archive of the parameters,
arrays and the library's versioned model bytes; no pickle), besides
pickling.

Compute core: :func:`kernel_matrix`, :func:`kernel_matvec`, :func:`gram`,
:func:`matmul`, :func:`devices`, :func:`device_info`, :func:`supports_precision`. Every estimator and function takes
``device="auto" | "cpu" | "gpu"``; "auto" uses a hardware GPU when one is
present and otherwise the CPU. Errors: :mod:`gramian.exceptions`.
"""

from . import _core, eksvd, exceptions
from ._persist import load, save
from ._compute import device_info, devices, gram, kernel_matrix, kernel_matvec, matmul, supports_precision
from .exceptions import (
    ConvergenceError,
    DeviceError,
    GramianError,
    InvalidInputError,
    NumericalError,
    OutOfMemoryError,
)
from .eksvd import EKSVD, KSVD
from .mklaren import LowRankRidge, Mklaren, MultipleKernelRidge
from .psd import (
    BaselineDensity,
    BaselineHeteroscedasticRegressor,
    BaselineQuantileRegressor,
    PSDDensity,
    PSDHeteroscedasticRegressor,
    PSDQuantileRegressor,
)

if hasattr(_core, "fit_neural_eksvd"):
    from .eksvd import NeuralEKSVD
else:  # built without the cargo feature `neural`
    del eksvd.NeuralEKSVD

__version__ = "0.1.0"

__all__ = [
    "Mklaren",
    "LowRankRidge",
    "MultipleKernelRidge",
    "PSDDensity",
    "PSDQuantileRegressor",
    "PSDHeteroscedasticRegressor",
    "BaselineDensity",
    "BaselineQuantileRegressor",
    "BaselineHeteroscedasticRegressor",
    "EKSVD",
    "KSVD",
    "gram",
    "kernel_matrix",
    "kernel_matvec",
    "matmul",
    "devices",
    "device_info",
    "supports_precision",
    "save",
    "load",
    "exceptions",
    *(["NeuralEKSVD"] if hasattr(_core, "fit_neural_eksvd") else []),
    "GramianError",
    "InvalidInputError",
    "OutOfMemoryError",
    "DeviceError",
    "ConvergenceError",
    "NumericalError",
]
