"""mklaren: multiple-kernel low-rank regression, and its baselines (stacked
low-rank ridge with ICD, Nystrom or CSI factors, and kernel ridge on a
combination of full kernels)."""

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils import check_array, check_consistent_length
from sklearn.utils.validation import check_is_fitted

from . import _core
from ._kernels import resolve, scale_gamma
from ._compute import _check_precision, _csr
from ._validation import check_device, check_positive, seed_from, validate_data

#: The default kernels: three Gaussian kernels, ``gamma`` 0.1, 1 and 10
#: times scikit-learn's ``"scale"`` value ``1 / (n_features * X.var())``.
DEFAULT_GAMMA_FACTORS = (0.1, 1.0, 10.0)


def _ndim(x):
    try:
        return np.ndim(x)
    except ValueError:  # a ragged nested list
        return -1


def _is_multi_input(X):
    """Whether ``X`` is a list of 2-D inputs (one per kernel) rather than one
    array-like (a list of rows has 1-D elements)."""
    return isinstance(X, (list, tuple)) and len(X) > 0 and all(sp.issparse(x) or _ndim(x) == 2 for x in X)


def _core_inputs(Xs):
    """The inputs as the extension takes them: dense arrays as they are,
    sparse matrices as the parts of a canonical CSR matrix (kept sparse)."""
    return [_csr(X, f"X[{q}]") if sp.issparse(X) else X for q, X in enumerate(Xs)]


class _MultiKernelRegressor(RegressorMixin, BaseEstimator):
    """What mklaren and its baselines share: the kernels, one input shared by
    every kernel or one input per kernel, a constant target predicted as
    the constant."""

    #: Whether scipy sparse inputs (CSR, CSC) are accepted and kept sparse.
    _accept_sparse = False

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = self._accept_sparse
        return tags

    def _resolve_kernels(self, Xs):
        if self.kernels is None:
            if len(Xs) > 1:
                return [("rbf", scale_gamma(X), 1.0, 3) for X in Xs]
            gamma = scale_gamma(Xs[0])
            return [("rbf", factor * gamma, 1.0, 3) for factor in DEFAULT_GAMMA_FACTORS]
        specs = [self.kernels] if isinstance(self.kernels, (str, dict)) else list(self.kernels)
        if not specs:
            raise ValueError("kernels must name at least one kernel")
        if len(Xs) > 1 and len(specs) != len(Xs):
            raise ValueError(f"{len(Xs)} inputs need one kernel each, got {len(specs)} kernels")
        return [resolve(spec, Xs[q if len(Xs) > 1 else 0]) for q, spec in enumerate(specs)]

    def _inputs(self, X, y=None, *, fitting):
        """The inputs as a list of C-contiguous float64 arrays, or float64
        CSR/CSC matrices where the estimator accepts them (and ``y``)."""
        sparse = ["csr", "csc"] if self._accept_sparse else False
        if _is_multi_input(X):
            Xs = [check_array(x, accept_sparse=sparse, dtype=np.float64, order="C", input_name=f"X[{q}]") for q, x in enumerate(X)]
            if fitting:
                y = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y")
                if y.ndim != 1:
                    raise ValueError(f"y must be 1-D, got shape {y.shape}")
                check_consistent_length(*Xs, y)
                if Xs[0].shape[0] < 2:
                    raise ValueError(f"at least 2 samples are needed, got {Xs[0].shape[0]}")
                self.n_inputs_ = len(Xs)
                self.n_features_in_ = [x.shape[1] for x in Xs]
                return Xs, np.ascontiguousarray(y)
            if getattr(self, "n_inputs_", 1) != len(Xs):
                raise ValueError(f"{type(self).__name__} was fitted on {getattr(self, 'n_inputs_', 1)} input(s), got {len(Xs)}")
            check_consistent_length(*Xs)
            for q, (x, d) in enumerate(zip(Xs, self.n_features_in_)):
                if x.shape[1] != d:
                    raise ValueError(f"X[{q}] has {x.shape[1]} features, but {type(self).__name__} was fitted with {d}")
            return Xs
        if not fitting and getattr(self, "n_inputs_", 1) != 1:
            raise ValueError(f"{type(self).__name__} was fitted on {self.n_inputs_} inputs (a list, one per kernel); predict needs the same")
        if fitting:
            X, y = validate_data(self, X, y, y_numeric=True, ensure_min_samples=2, accept_sparse=sparse)
            self.n_inputs_ = 1
            return [X], np.ascontiguousarray(y, dtype=np.float64)
        return [validate_data(self, X, reset=False, accept_sparse=sparse)]

    def fit(self, X, y):
        """Fits the model.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), or list of array-like
            One input shared by every kernel, or a list with one input per
            kernel (each of shape (n_samples, n_features_q), the same
            samples in the same rows).
        y : array-like of shape (n_samples,)

        Returns
        -------
        self
        """
        Xs, y = self._inputs(X, y, fitting=True)
        params = self._check_params(Xs[0].shape[0])
        device = check_device(self.device)
        self.kernels_ = self._resolve_kernels(Xs)
        if np.ptp(y) == 0:
            self.model_, self.constant_ = None, float(y[0])
            self._fitted_constant()
            return self
        self.constant_ = None
        self.model_ = self._fit(Xs, y, params, device)
        self._fitted()
        return self

    def predict(self, X):
        """Predicts targets.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), or list of array-like
            The inputs' layout of ``fit``.

        Returns
        -------
        y : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        Xs = self._inputs(X, fitting=False)
        if self.model_ is None:
            return np.full(Xs[0].shape[0], self.constant_)
        return self.model_.predict(_core_inputs(Xs))

    def _fitted_constant(self):
        pass

    def _fitted(self):
        pass


class Mklaren(_MultiKernelRegressor):
    """Multiple-kernel low-rank regression (mklaren).

    A rank-``rank`` approximation of several kernels, built column by column
    by incomplete Cholesky decomposition (Eq. 1-3 of the method's equations)
    guided by least-angle regression with look-ahead (Eq. 4-16), then a
    (ridge) least-squares fit on the selected columns (Eq. 18); new samples
    are predicted through the stored transform (Eq. 21). Memory and time are
    linear in the number of samples: no kernel matrix is formed.

    Inputs may be scipy sparse matrices (CSR or CSC, converted to CSR), in
    ``fit`` and ``predict``: they are never densified. Each kernel column
    comes from sparse inner products: on the GPU in a fit on a GPU with
    ``f64`` (the CSR arrays go up once), elsewhere on the CPU (and the
    predictions of sparse rows on the CPU); the model keeps only the pivots'
    rows dense.

    Parameters
    ----------
    kernels : list of kernel specifications, default=None
        Each a name (``"rbf"``, ``"laplacian"``, ``"linear"``, ``"poly"``,
        ``"sigmoid"``), a dict ``{"kernel": name, "gamma": ..., "coef0": ...,
        "degree": ...}`` or a pair ``(name, params)``. ``gamma`` defaults to
        ``"scale"`` (``1 / (n_features * X.var())``); ``"auto"`` is
        ``1 / n_features``. ``None``: three Gaussian kernels with ``gamma``
        0.1, 1 and 10 times the ``"scale"`` value on one input, one Gaussian
        kernel per input (``gamma="scale"``) on several.
    rank : int, default=40
        The most columns selected over all kernels. Capped at the number of
        samples; if the kernels run out of numerically independent columns
        first, the model has the rank reached (``rank_``).
    lookahead : int, default=10
        Look-ahead columns per kernel used to score candidate pivots
        (``delta``, Eq. 12).
    alpha : float, default=0.0
        Ridge penalty (``lambda`` of the method) on the coefficients, >= 0.
    device : {"auto", "cpu", "gpu"}, default="auto"
        Where kernel columns are computed: "auto" uses a hardware GPU if one
        is present and otherwise the CPU; "gpu" any GPU adapter.
    precision : {"auto", "float32", "float64"}, default="auto"
        Working precision of the kernel columns on a GPU: "auto" holds the
        inputs in 64-bit floats where the GPU has them (the Cholesky steps
        then run on the device); "float32" computes the kernel columns in
        32-bit floats and reads them back for the steps on the host;
        "float64" requires 64-bit floats
        (:class:`~gramian.exceptions.DeviceError` on a GPU without them).
        On the CPU the fit computes in float64 whatever the setting.

    Attributes
    ----------
    model_ : object
        The fitted Rust model (``None`` when the training target was constant).
    kernels_ : list of tuple
        The kernels used, as ``(name, gamma, coef0, degree)``.
    rank_ : int
        Columns selected.
    kernel_weights_ : ndarray of shape (n_kernels,)
        ``||H_q beta_q||``: the size of each kernel's contribution to the fit.
    order_ : list of (int, int)
        ``(kernel, pivot sample)`` of every selected column, in the order
        they entered.
    constant_ : float or None
        The prediction of a model fitted to a constant target, else ``None``.
    n_inputs_ : int
        1 for one shared input, else the number of inputs (one per kernel).
    n_features_in_ : int, or list of int with several inputs
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Defined when ``X`` has string feature names.

    Examples
    --------
    >>> import numpy as np
    >>> from gramian import Mklaren
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-1, 1, (300, 3))
    >>> y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2
    >>> model = Mklaren(rank=20, device="cpu").fit(X, y)
    >>> model.score(X, y) > 0.9
    True

    One input per kernel:

    >>> model = Mklaren(kernels=["rbf", "rbf"], rank=20, device="cpu").fit([X[:, :1], X[:, 1:]], y)
    >>> model.predict([X[:5, :1], X[:5, 1:]]).shape
    (5,)

    Sparse inputs stay sparse:

    >>> import scipy.sparse as sp
    >>> Xs = sp.random(300, 1000, density=0.01, format="csr", random_state=0)
    >>> Mklaren(kernels=["linear", "rbf"], rank=10, device="cpu").fit(Xs, y).predict(Xs[:5]).shape
    (5,)
    """

    _accept_sparse = True

    def __init__(self, kernels=None, rank=40, lookahead=10, alpha=0.0, device="auto", precision="auto"):
        self.kernels = kernels
        self.rank = rank
        self.lookahead = lookahead
        self.alpha = alpha
        self.device = device
        self.precision = precision

    def _check_params(self, n):
        return (
            min(check_positive("rank", self.rank, integer=True), n),
            check_positive("lookahead", self.lookahead, integer=True),
            check_positive("alpha", self.alpha, allow_zero=True),
        )

    def _fit(self, Xs, y, params, device):
        rank, lookahead, alpha = params
        return _core.fit_mklaren(_core_inputs(Xs), y, self.kernels_, rank, lookahead, alpha, device, _check_precision(self.precision))

    def _fitted_constant(self):
        self.rank_, self.kernel_weights_, self.order_ = 0, np.zeros(len(self.kernels_)), []

    def _fitted(self):
        self.rank_ = self.model_.rank
        self.kernel_weights_ = self.model_.kernel_weights
        self.order_ = self.model_.order


LOW_RANK_METHODS = ("icd", "nystrom", "csi")


class LowRankRidge(_MultiKernelRegressor):
    """Ridge regression on stacked low-rank kernel factors: the baselines of
    mklaren (``icd``, ``Nystrom`` and ``csi`` in its paper).

    Each kernel ``K_q`` is approximated on its own as ``G_q G_q^T`` at rank
    ``rank`` by incomplete Cholesky decomposition with greedy pivots
    (``"icd"``, Eq. 1-3), the Nystrom approximation on random landmarks
    (``"nystrom"``) or Cholesky with side information (``"csi"``, Bach &
    Jordan 2005, with look-ahead); the factors are stacked, their columns
    standardised, and ``(F^T F + alpha I) beta = F^T (y - mean(y))`` solved.

    Inputs may be scipy sparse matrices (CSR or CSC), as for
    :class:`Mklaren`: the factors are computed from sparse inner products on
    the CPU (the landmarks' rows kept dense), never densifying the input.

    Parameters
    ----------
    method : {"icd", "nystrom", "csi"}, default="icd"
    kernels : list of kernel specifications, default=None
        As in :class:`Mklaren`.
    rank : int, default=40
        Rank of each kernel's factor, capped at the number of samples.
    alpha : float, default=1e-3
        Ridge penalty, >= 0 (with 0, factors that are collinear, as those of
        similar kernels are, make the system singular:
        :class:`~gramian.exceptions.NumericalError`).
    lookahead : int, default=10
        Look-ahead columns of ``"csi"``.
    kappa : float, default=0.5
        Weight in [0, 1] of the approximation-error gain against the
        prediction gain (``"csi"``).
    random_state : int, RandomState instance or None, default=None
        Landmarks of ``"nystrom"`` (kernel ``q`` uses seed ``+ q``).
    device : {"auto", "cpu", "gpu"}, default="auto"
    precision : {"auto", "float32", "float64"}, default="auto"
        Working precision of the kernel columns on a GPU: "auto" holds the
        inputs in 64-bit floats where the GPU has them (the Cholesky steps
        then run on the device); "float32" computes the kernel columns in
        32-bit floats and reads them back for the steps on the host;
        "float64" requires 64-bit floats
        (:class:`~gramian.exceptions.DeviceError` on a GPU without them).
        On the CPU the fit computes in float64 whatever the setting.

    Attributes
    ----------
    model_ : object
    kernels_ : list of tuple
    coef_ : ndarray of shape (n_kernels * rank,)
        Coefficients on the standardised stacked factors.
    landmarks_ : list of ndarray
        Each kernel's pivot (landmark) rows ``A_q``.
    constant_ : float or None
    n_inputs_ : int
    n_features_in_ : int, or list of int with several inputs
    """

    _accept_sparse = True

    def __init__(self, method="icd", *, kernels=None, rank=40, alpha=1e-3, lookahead=10, kappa=0.5, random_state=None, device="auto", precision="auto"):
        self.method = method
        self.kernels = kernels
        self.rank = rank
        self.alpha = alpha
        self.lookahead = lookahead
        self.kappa = kappa
        self.random_state = random_state
        self.device = device
        self.precision = precision

    def _check_params(self, n):
        if self.method not in LOW_RANK_METHODS:
            raise ValueError(f"method must be one of {LOW_RANK_METHODS}, got {self.method!r}")
        rank = min(check_positive("rank", self.rank, integer=True), n)
        kappa = check_positive("kappa", self.kappa, allow_zero=True)
        if kappa > 1:
            raise ValueError(f"kappa must be in [0, 1], got {self.kappa!r}")
        return (rank, check_positive("alpha", self.alpha, allow_zero=True), seed_from(self.random_state), check_positive("lookahead", self.lookahead, integer=True), kappa)

    def _fit(self, Xs, y, params, device):
        rank, alpha, seed, lookahead, kappa = params
        return _core.fit_low_rank(_core_inputs(Xs), y, self.kernels_, self.method, rank, alpha, seed, lookahead, kappa, device, _check_precision(self.precision))

    def _fitted_constant(self):
        self.coef_ = np.zeros(0)
        self.landmarks_ = []

    def _fitted(self):
        self.coef_ = self.model_.coefficients
        self.landmarks_ = self.model_.pivot_rows

    def kernel_features(self, X):
        """The low-rank kernel features of the rows of ``X``: each kernel's
        factor ``G_q = K_q(X, A_q) T_q`` (Eq. 21), side by side, so that
        ``G_q G_q^T`` approximates ``K_q``. Not available for a model fitted
        to a constant target (no factor was computed).

        Returns
        -------
        G : ndarray of shape (n_samples, sum of the kernels' ranks)
        """
        check_is_fitted(self)
        Xs = self._inputs(X, fitting=False)
        if self.model_ is None:
            raise ValueError("the model was fitted to a constant target: it has no kernel factors")
        return np.hstack([np.ascontiguousarray(g) for g in self.model_.factors(_core_inputs(Xs))])


COMBINATIONS = ("uniform", "align", "alignf", "alignfc")


class MultipleKernelRidge(_MultiKernelRegressor):
    """Kernel ridge regression on a weighted sum of full kernel matrices: the
    full-kernel baselines of mklaren.

    ``(sum_q mu_q K_q + alpha I) a = y - mean(y)`` with weights ``mu``
    uniform or from centred kernel alignment (Cortes, Mohri & Rostamizadeh
    2012): ``"align"`` (each kernel's alignment with ``y y^T``), ``"alignf"``
    (jointly), ``"alignfc"`` (jointly, non-negative). Every kernel matrix is
    formed: memory O(p n^2).

    Parameters
    ----------
    combination : {"uniform", "align", "alignf", "alignfc"}, default="uniform"
    kernels : list of kernel specifications, default=None
        As in :class:`Mklaren`.
    alpha : float, default=1.0
        Ridge penalty, >= 0.
    device : {"auto", "cpu", "gpu"}, default="auto"
    precision : {"auto", "float32", "float64"}, default="auto"
        Working precision of the kernel columns on a GPU: "auto" holds the
        inputs in 64-bit floats where the GPU has them (the Cholesky steps
        then run on the device); "float32" computes the kernel columns in
        32-bit floats and reads them back for the steps on the host;
        "float64" requires 64-bit floats
        (:class:`~gramian.exceptions.DeviceError` on a GPU without them).
        On the CPU the fit computes in float64 whatever the setting.

    Attributes
    ----------
    model_ : object
    kernels_ : list of tuple
    weights_ : ndarray of shape (n_kernels,)
        ``mu``, rescaled to ``sum |mu_q| = n_kernels``.
    dual_coef_ : ndarray of shape (n_samples,)
    constant_ : float or None
    n_inputs_ : int
    n_features_in_ : int, or list of int with several inputs
    """

    def __init__(self, combination="uniform", *, kernels=None, alpha=1.0, device="auto", precision="auto"):
        self.combination = combination
        self.kernels = kernels
        self.alpha = alpha
        self.device = device
        self.precision = precision

    def _check_params(self, n):
        if self.combination not in COMBINATIONS:
            raise ValueError(f"combination must be one of {COMBINATIONS}, got {self.combination!r}")
        return check_positive("alpha", self.alpha, allow_zero=True)

    def _fit(self, Xs, y, alpha, device):
        return _core.fit_full_kernel(Xs, y, self.kernels_, self.combination, alpha, device, _check_precision(self.precision))

    def _fitted_constant(self):
        self.weights_, self.dual_coef_ = np.zeros(len(self.kernels_)), np.zeros(0)

    def _fitted(self):
        self.weights_ = self.model_.weights
        self.dual_coef_ = self.model_.dual_coefficients
