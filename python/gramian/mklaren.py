"""Mklaren: multiple-kernel low-rank regression."""

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from . import _core
from ._kernels import resolve, scale_gamma
from ._validation import check_device, check_positive, validate_data

#: The default kernels: three Gaussian kernels, ``gamma`` 0.1, 1 and 10
#: times scikit-learn's ``"scale"`` value ``1 / (n_features * X.var())``.
DEFAULT_GAMMA_FACTORS = (0.1, 1.0, 10.0)


class Mklaren(RegressorMixin, BaseEstimator):
    """Multiple-kernel low-rank regression (mklaren).

    A rank-``rank`` approximation of several kernels, built column by column
    by incomplete Cholesky decomposition guided by least-angle regression
    with look-ahead, then a (ridge) least-squares fit on the selected
    columns. Memory and time are linear in the number of samples: no kernel
    matrix is formed.

    Parameters
    ----------
    kernels : list of kernel specifications, default=None
        Each a name (``"rbf"``, ``"laplacian"``, ``"linear"``, ``"poly"``,
        ``"sigmoid"``), a dict ``{"kernel": name, "gamma": ..., "coef0": ...,
        "degree": ...}`` or a pair ``(name, params)``. ``gamma`` defaults to
        ``"scale"`` (``1 / (n_features * X.var())``); ``"auto"`` is
        ``1 / n_features``. ``None``: three Gaussian kernels with ``gamma``
        0.1, 1 and 10 times the ``"scale"`` value.
    rank : int, default=40
        The most columns selected over all kernels. Capped at the number of
        samples; if the kernels run out of numerically independent columns
        first, the model has the rank reached (``rank_``).
    lookahead : int, default=10
        Look-ahead columns per kernel used to score candidate pivots.
    alpha : float, default=0.0
        Ridge penalty (``lambda`` of the method) on the coefficients, >= 0.
    device : {"auto", "cpu", "gpu"}, default="auto"
        Where kernel columns are computed: "auto" uses a hardware GPU if one
        is present and otherwise the CPU; "gpu" any GPU adapter.

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
    constant_ : float or None
        The prediction of a model fitted to a constant target, else ``None``.
    n_features_in_ : int
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
    """

    def __init__(self, kernels=None, rank=40, lookahead=10, alpha=0.0, device="auto"):
        self.kernels = kernels
        self.rank = rank
        self.lookahead = lookahead
        self.alpha = alpha
        self.device = device

    def _resolve_kernels(self, X):
        if self.kernels is None:
            gamma = scale_gamma(X)
            return [("rbf", factor * gamma, 1.0, 3) for factor in DEFAULT_GAMMA_FACTORS]
        specs = [self.kernels] if isinstance(self.kernels, (str, dict)) else list(self.kernels)
        if not specs:
            raise ValueError("kernels must name at least one kernel")
        return [resolve(spec, X) for spec in specs]

    def fit(self, X, y):
        """Fits the model.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)

        Returns
        -------
        self : Mklaren
        """
        X, y = validate_data(self, X, y, y_numeric=True, ensure_min_samples=2)
        y = np.ascontiguousarray(y, dtype=np.float64)
        rank = check_positive("rank", self.rank, integer=True)
        lookahead = check_positive("lookahead", self.lookahead, integer=True)
        alpha = check_positive("alpha", self.alpha, allow_zero=True)
        device = check_device(self.device)
        self.kernels_ = self._resolve_kernels(X)
        if np.ptp(y) == 0:
            self.model_, self.constant_ = None, float(y[0])
            self.rank_, self.kernel_weights_ = 0, np.zeros(len(self.kernels_))
            return self
        self.model_ = _core.fit_mklaren(X, y, self.kernels_, min(rank, X.shape[0]), lookahead, alpha, device)
        self.constant_ = None
        self.rank_ = self.model_.rank
        self.kernel_weights_ = self.model_.kernel_weights
        return self

    def predict(self, X):
        """Predicts targets.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        y : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        if self.model_ is None:
            return np.full(X.shape[0], self.constant_)
        return self.model_.predict(X)
