# Type stubs of the public package (PEP 561; see py.typed).
import os
from typing import Any, Literal, Mapping, Optional, Sequence, Tuple, Union, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.base import BaseEstimator, DensityMixin, RegressorMixin, TransformerMixin

from . import exceptions as exceptions
from .exceptions import (
    ConvergenceError as ConvergenceError,
    DeviceError as DeviceError,
    GramianError as GramianError,
    InvalidInputError as InvalidInputError,
    NumericalError as NumericalError,
    OutOfMemoryError as OutOfMemoryError,
)

__version__: str

Device = Literal["auto", "cpu", "gpu"]
Precision = Literal["auto", "float32", "float64"]
KernelName = Literal["rbf", "gaussian", "laplacian", "linear", "poly", "polynomial", "sigmoid"]
KernelSpec = Union[KernelName, Mapping[str, Any], Tuple[KernelName, Mapping[str, Any]]]
Gamma = Union[float, Literal["scale", "auto"], None]
Bandwidth = Union[float, Literal["scott", "silverman"]]
BaseMeasure = Union[None, float, Tuple[ArrayLike, ArrayLike]]
RandomState = Union[int, np.random.RandomState, None]
Inputs = Union[ArrayLike, Sequence[ArrayLike]]
F64 = NDArray[np.float64]

# --- compute core -----------------------------------------------------------

# A dense array-like, or a scipy sparse matrix or array (the compute core's
# kernel functions take either).
MatrixLike = Union[ArrayLike, Any]
# One input or one per kernel, each dense or scipy sparse (mklaren and the
# low-rank baselines keep sparse inputs sparse).
MatrixInputs = Union[MatrixLike, Sequence[MatrixLike]]

def kernel_matrix(X: MatrixLike, Z: Optional[MatrixLike] = ..., kernel: KernelName = ..., *, gamma: Gamma = ..., coef0: float = ..., degree: int = ..., device: Device = ..., precision: Precision = ...) -> F64: ...
def kernel_matvec(X: MatrixLike, Z: MatrixLike, V: ArrayLike, kernel: KernelName = ..., *, gamma: Gamma = ..., coef0: float = ..., degree: int = ..., device: Device = ..., precision: Precision = ...) -> F64: ...
def gram(Phi: ArrayLike, *, outer: bool = ..., device: Device = ..., precision: Precision = ...) -> F64: ...
def matmul(A: ArrayLike, B: ArrayLike, *, transpose_a: bool = ..., transpose_b: bool = ..., device: Device = ..., precision: Precision = ...) -> F64: ...
def device_info(device: Device = ...) -> str: ...
def devices() -> list[dict[str, Any]]: ...
def supports_precision(precision: Precision, device: Device = ...) -> bool: ...

# --- saving -------------------------------------------------------------------

PathLike = Union[str, "os.PathLike[str]"]

def save(estimator: BaseEstimator, path: PathLike) -> None: ...
def load(path: PathLike) -> BaseEstimator: ...

# --- mklaren ----------------------------------------------------------------

class Mklaren(RegressorMixin, BaseEstimator):
    kernels: Optional[Union[KernelSpec, Sequence[KernelSpec]]]
    rank: int
    lookahead: int
    alpha: float
    device: Device
    precision: Precision
    model_: Any
    kernels_: list[tuple[str, float, float, int]]
    rank_: int
    kernel_weights_: F64
    order_: list[tuple[int, int]]
    constant_: Optional[float]
    n_inputs_: int
    n_features_in_: Union[int, list[int]]
    def __init__(self, kernels: Optional[Union[KernelSpec, Sequence[KernelSpec]]] = ..., rank: int = ..., lookahead: int = ..., alpha: float = ..., device: Device = ..., precision: Precision = ...) -> None: ...
    def fit(self, X: MatrixInputs, y: ArrayLike) -> "Mklaren": ...
    def predict(self, X: MatrixInputs) -> F64: ...

class LowRankRidge(RegressorMixin, BaseEstimator):
    method: Literal["icd", "nystrom", "csi"]
    kernels: Optional[Union[KernelSpec, Sequence[KernelSpec]]]
    rank: int
    alpha: float
    lookahead: int
    kappa: float
    random_state: RandomState
    device: Device
    precision: Precision
    model_: Any
    kernels_: list[tuple[str, float, float, int]]
    coef_: F64
    landmarks_: list[F64]
    constant_: Optional[float]
    n_inputs_: int
    n_features_in_: Union[int, list[int]]
    def __init__(self, method: Literal["icd", "nystrom", "csi"] = ..., *, kernels: Optional[Union[KernelSpec, Sequence[KernelSpec]]] = ..., rank: int = ..., alpha: float = ..., lookahead: int = ..., kappa: float = ..., random_state: RandomState = ..., device: Device = ..., precision: Precision = ...) -> None: ...
    def fit(self, X: MatrixInputs, y: ArrayLike) -> "LowRankRidge": ...
    def predict(self, X: MatrixInputs) -> F64: ...
    def kernel_features(self, X: MatrixInputs) -> F64: ...

class MultipleKernelRidge(RegressorMixin, BaseEstimator):
    combination: Literal["uniform", "align", "alignf", "alignfc"]
    kernels: Optional[Union[KernelSpec, Sequence[KernelSpec]]]
    alpha: float
    device: Device
    precision: Precision
    model_: Any
    kernels_: list[tuple[str, float, float, int]]
    weights_: F64
    dual_coef_: F64
    constant_: Optional[float]
    n_inputs_: int
    n_features_in_: Union[int, list[int]]
    def __init__(self, combination: Literal["uniform", "align", "alignf", "alignfc"] = ..., *, kernels: Optional[Union[KernelSpec, Sequence[KernelSpec]]] = ..., alpha: float = ..., device: Device = ..., precision: Precision = ...) -> None: ...
    def fit(self, X: Inputs, y: ArrayLike) -> "MultipleKernelRidge": ...
    def predict(self, X: Inputs) -> F64: ...

# --- PSD models -------------------------------------------------------------

class PSDDensity(DensityMixin, BaseEstimator):
    bandwidth: Bandwidth
    trace_penalty: float
    quadratic_penalty: float
    n_centres: Optional[int]
    tol: float
    max_iter: int
    random_state: RandomState
    base_measure: BaseMeasure
    device: Device
    precision: Precision
    model_: Any
    bandwidth_: float
    n_iter_: int
    n_features_in_: int
    def __init__(self, bandwidth: Bandwidth = ..., *, trace_penalty: float = ..., quadratic_penalty: float = ..., n_centres: Optional[int] = ..., tol: float = ..., max_iter: int = ..., random_state: RandomState = ..., base_measure: BaseMeasure = ..., device: Device = ..., precision: Precision = ...) -> None: ...
    def fit(self, X: ArrayLike, y: None = ...) -> "PSDDensity": ...
    def density(self, X: ArrayLike) -> F64: ...
    def score_samples(self, X: ArrayLike) -> F64: ...
    def score(self, X: ArrayLike, y: None = ...) -> float: ...
    def integral(self) -> float: ...
    def box_probability(self, lower: ArrayLike, upper: ArrayLike) -> float: ...
    def marginal(self, features: Sequence[int]) -> "PSDDensity": ...
    def sample(self, n_samples: int = ..., random_state: RandomState = ...) -> F64: ...

class PSDQuantileRegressor(RegressorMixin, BaseEstimator):
    quantiles: Union[float, Sequence[float]]
    bandwidth: Bandwidth
    linear_penalty: float
    trace_penalty: float
    quadratic_penalty: float
    n_centres: Optional[int]
    tol: float
    max_iter: int
    random_state: RandomState
    device: Device
    precision: Precision
    model_: Any
    bandwidth_: float
    quantiles_: list[float]
    n_iter_: int
    n_features_in_: int
    def __init__(self, quantiles: Union[float, Sequence[float]] = ..., *, bandwidth: Bandwidth = ..., linear_penalty: float = ..., trace_penalty: float = ..., quadratic_penalty: float = ..., n_centres: Optional[int] = ..., tol: float = ..., max_iter: int = ..., random_state: RandomState = ..., device: Device = ..., precision: Precision = ...) -> None: ...
    def fit(self, X: ArrayLike, y: ArrayLike) -> "PSDQuantileRegressor": ...
    def predict(self, X: ArrayLike) -> F64: ...
    def score(self, X: ArrayLike, y: ArrayLike, sample_weight: Optional[ArrayLike] = ...) -> float: ...

class PSDHeteroscedasticRegressor(RegressorMixin, BaseEstimator):
    bandwidth: Bandwidth
    linear_penalty: float
    trace_penalty: float
    quadratic_penalty: float
    n_centres: Optional[int]
    tol: float
    max_iter: int
    random_state: RandomState
    device: Device
    precision: Precision
    model_: Any
    bandwidth_: float
    n_iter_: int
    n_features_in_: int
    def __init__(self, bandwidth: Bandwidth = ..., *, linear_penalty: float = ..., trace_penalty: float = ..., quadratic_penalty: float = ..., n_centres: Optional[int] = ..., tol: float = ..., max_iter: int = ..., random_state: RandomState = ..., device: Device = ..., precision: Precision = ...) -> None: ...
    def fit(self, X: ArrayLike, y: ArrayLike) -> "PSDHeteroscedasticRegressor": ...
    @overload
    def predict(self, X: ArrayLike, return_std: Literal[False] = ...) -> F64: ...
    @overload
    def predict(self, X: ArrayLike, return_std: Literal[True]) -> tuple[F64, F64]: ...

BaselineKind = Literal["pnm", "ncm", "glm"]

class BaselineDensity(DensityMixin, BaseEstimator):
    kind: BaselineKind
    bandwidth: Bandwidth
    alpha: float
    n_monte_carlo: int
    base_measure: BaseMeasure
    tol: Optional[float]
    max_iter: Optional[int]
    random_state: RandomState
    device: Device
    precision: Precision
    model_: Any
    bandwidth_: float
    coef_: F64
    n_features_in_: int
    def __init__(self, kind: BaselineKind = ..., *, bandwidth: Bandwidth = ..., alpha: float = ..., n_monte_carlo: int = ..., base_measure: BaseMeasure = ..., tol: Optional[float] = ..., max_iter: Optional[int] = ..., random_state: RandomState = ..., device: Device = ..., precision: Precision = ...) -> None: ...
    def fit(self, X: ArrayLike, y: None = ...) -> "BaselineDensity": ...
    def density(self, X: ArrayLike) -> F64: ...
    def score_samples(self, X: ArrayLike) -> F64: ...
    def score(self, X: ArrayLike, y: None = ...) -> float: ...

class BaselineQuantileRegressor(RegressorMixin, BaseEstimator):
    kind: BaselineKind
    quantiles: Union[float, Sequence[float]]
    bandwidth: Bandwidth
    linear_penalty: float
    quadratic_penalty: float
    smoothing: float
    n_restarts: int
    tol: Optional[float]
    max_iter: Optional[int]
    random_state: RandomState
    device: Device
    precision: Precision
    model_: Any
    bandwidth_: float
    quantiles_: list[float]
    n_iter_: int
    n_features_in_: int
    def __init__(self, kind: BaselineKind = ..., quantiles: Union[float, Sequence[float]] = ..., *, bandwidth: Bandwidth = ..., linear_penalty: float = ..., quadratic_penalty: float = ..., smoothing: float = ..., n_restarts: int = ..., tol: Optional[float] = ..., max_iter: Optional[int] = ..., random_state: RandomState = ..., device: Device = ..., precision: Precision = ...) -> None: ...
    def fit(self, X: ArrayLike, y: ArrayLike) -> "BaselineQuantileRegressor": ...
    def predict(self, X: ArrayLike) -> F64: ...
    def score(self, X: ArrayLike, y: ArrayLike, sample_weight: Optional[ArrayLike] = ...) -> float: ...

class BaselineHeteroscedasticRegressor(RegressorMixin, BaseEstimator):
    kind: BaselineKind
    bandwidth: Bandwidth
    linear_penalty: float
    quadratic_penalty: float
    n_restarts: int
    tol: Optional[float]
    max_iter: Optional[int]
    random_state: RandomState
    device: Device
    precision: Precision
    model_: Any
    bandwidth_: float
    n_iter_: int
    n_features_in_: int
    def __init__(self, kind: BaselineKind = ..., *, bandwidth: Bandwidth = ..., linear_penalty: float = ..., quadratic_penalty: float = ..., n_restarts: int = ..., tol: Optional[float] = ..., max_iter: Optional[int] = ..., random_state: RandomState = ..., device: Device = ..., precision: Precision = ...) -> None: ...
    def fit(self, X: ArrayLike, y: ArrayLike) -> "BaselineHeteroscedasticRegressor": ...
    @overload
    def predict(self, X: ArrayLike, return_std: Literal[False] = ...) -> F64: ...
    @overload
    def predict(self, X: ArrayLike, return_std: Literal[True]) -> tuple[F64, F64]: ...

# --- eKSVD ------------------------------------------------------------------

class EKSVD(TransformerMixin, BaseEstimator):
    n_components: int
    feature_map: Literal["linear", "rff", "nystrom"]
    gamma: Union[float, Literal["scale"]]
    n_features: int
    n_landmarks: Optional[int]
    solver: Literal["dual", "covariance"]
    random_state: RandomState
    device: Device
    precision: Precision
    model_: Any
    eigenvalues_: F64
    n_views_: int
    n_features_in_: list[int]
    def __init__(self, n_components: int = ..., *, feature_map: Literal["linear", "rff", "nystrom"] = ..., gamma: Union[float, Literal["scale"]] = ..., n_features: int = ..., n_landmarks: Optional[int] = ..., solver: Literal["dual", "covariance"] = ..., random_state: RandomState = ..., device: Device = ..., precision: Precision = ...) -> None: ...
    def fit(self, Xs: Sequence[ArrayLike], y: None = ...) -> "EKSVD": ...
    def transform(self, Xs: Sequence[ArrayLike]) -> list[F64]: ...
    def fit_transform(self, Xs: Sequence[ArrayLike], y: None = ...) -> list[F64]: ...

class KSVD(EKSVD):
    def fit(self, Xs: Sequence[ArrayLike], y: None = ...) -> "KSVD": ...

# Only where the package is built with the cargo feature `neural`.
class NeuralEKSVD(TransformerMixin, BaseEstimator):
    n_components: int
    hidden: Sequence[int]
    d_phi: int
    eta: float
    learning_rate: float
    batch_size: int
    max_epochs: int
    patience: int
    validation_fraction: Optional[float]
    random_state: RandomState
    device: Device
    precision: Precision
    model_: Any
    classes_: NDArray[Any]
    gamma_: float
    n_views_: int
    n_features_in_: list[int]
    def __init__(self, n_components: int = ..., *, hidden: Sequence[int] = ..., d_phi: int = ..., eta: float = ..., learning_rate: float = ..., batch_size: int = ..., max_epochs: int = ..., patience: int = ..., validation_fraction: Optional[float] = ..., random_state: RandomState = ..., device: Device = ..., precision: Precision = ...) -> None: ...
    def fit(self, Xs: Sequence[ArrayLike], y: ArrayLike) -> "NeuralEKSVD": ...
    def transform(self, Xs: Sequence[ArrayLike]) -> list[F64]: ...
    def predict(self, Xs: Sequence[ArrayLike]) -> NDArray[Any]: ...
    def fit_transform(self, Xs: Sequence[ArrayLike], y: ArrayLike = ...) -> list[F64]: ...

__all__: list[str]
