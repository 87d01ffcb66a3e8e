"""PSD models: non-negative functions ``f(x) = phi(x)^T A phi(x)`` with ``A``
positive semidefinite, for densities, quantiles and variances."""

import numbers

import numpy as np
from sklearn.base import BaseEstimator, DensityMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from . import _core
from ._validation import check_device, check_positive, seed_from, validate_data


class _PSDParams:
    """The solver settings every PSD estimator shares, checked at fit."""

    def _solver(self):
        tol = check_positive("tol", self.tol)
        max_iter = check_positive("max_iter", self.max_iter, integer=True)
        if self.n_centres is None:
            nystrom = None
        else:
            nystrom = (check_positive("n_centres", self.n_centres, integer=True), seed_from(self.random_state))
        return tol, max_iter, nystrom

    def _check_common(self, X):
        """Checks the device and ``n_centres``; sets and returns ``bandwidth_``."""
        check_device(self.device)
        if self.n_centres is not None and isinstance(self.n_centres, numbers.Integral) and self.n_centres > X.shape[0]:
            raise ValueError(f"n_centres={self.n_centres} is larger than the number of samples {X.shape[0]}")
        self.bandwidth_ = _bandwidth(self.bandwidth, X)
        return self.bandwidth_


def _bandwidth(bandwidth, X):
    """The kernel width for ``bandwidth``: a number > 0, or ``"scott"`` /
    ``"silverman"`` for the rules of thumb ``n^(-1/(d+4))`` and
    ``(n (d+2) / 4)^(-1/(d+4))`` times the mean standard deviation of the
    features (scikit-learn's ``KernelDensity`` uses the factors alone, which
    assumes standardised data)."""
    if isinstance(bandwidth, str):
        n, d = X.shape
        if bandwidth == "scott":
            factor = n ** (-1.0 / (d + 4))
        elif bandwidth == "silverman":
            factor = (n * (d + 2) / 4.0) ** (-1.0 / (d + 4))
        else:
            raise ValueError(f"bandwidth must be a number > 0, 'scott' or 'silverman', got {bandwidth!r}")
        scale = float(np.mean(np.std(X, axis=0)))
        return factor * (scale if scale > 0 else 1.0)
    return check_positive("bandwidth", bandwidth)


class PSDDensity(_PSDParams, DensityMixin, BaseEstimator):
    """Density estimation with a PSD model.

    ``p(x) = phi(x)^T A phi(x)`` with Gaussian-kernel features ``phi`` on the
    training samples (or ``n_centres`` of them) and ``A`` positive
    semidefinite, fitted by maximum likelihood with the integral constrained
    to 1 (dual FISTA). The density is non-negative everywhere and integrates
    to 1 in closed form; unlike a kernel density estimate its weights come
    from an optimisation, so it can be sharper with the same bandwidth.

    Parameters
    ----------
    bandwidth : float, "scott" or "silverman", default="scott"
        Width ``sigma`` of the Gaussian kernel ``exp(-||x - z||^2 / (2 sigma^2))``,
        or a rule of thumb: ``n^(-1/(d+4))`` (Scott) or
        ``(n (d+2) / 4)^(-1/(d+4))`` (Silverman) times the mean standard
        deviation of the features.
    trace_penalty : float, default=1e-3
        ``lambda_1`` of the regulariser ``lambda_1 tr(A) + lambda_2 / 2 ||A||_F^2``, >= 0.
    quadratic_penalty : float, default=1e-4
        ``lambda_2`` of the regulariser, > 0.
    n_centres : int, default=None
        Nystrom compression on this many centres drawn from the data
        (``random_state``); ``None``: every sample is a centre.
    tol : float, default=1e-6
        Duality-gap tolerance of the solver.
    max_iter : int, default=20000
        Iteration budget; reaching it raises :class:`~gramian.exceptions.ConvergenceError`.
    random_state : int, RandomState instance or None, default=None
        Draw of the Nystrom centres.
    device : {"auto", "cpu", "gpu"}, default="auto"
        Where the features and model values are computed.

    Attributes
    ----------
    model_ : object
        The fitted Rust model.
    bandwidth_ : float
        The kernel width used.
    n_iter_ : int
        Solver iterations.
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from gramian import PSDDensity
    >>> X = np.random.default_rng(0).normal(size=(200, 1))
    >>> density = PSDDensity(bandwidth=0.5, device="cpu").fit(X)
    >>> log_p = density.score_samples([[0.0], [5.0]])
    >>> bool(log_p[0] > log_p[1])
    True
    """

    def __init__(self, bandwidth="scott", *, trace_penalty=1e-3, quadratic_penalty=1e-4, n_centres=None, tol=1e-6, max_iter=20000, random_state=None, device="auto"):
        self.bandwidth = bandwidth
        self.trace_penalty = trace_penalty
        self.quadratic_penalty = quadratic_penalty
        self.n_centres = n_centres
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.device = device

    def fit(self, X, y=None):
        """Fits the density to the rows of ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : None
            Ignored.

        Returns
        -------
        self : PSDDensity
        """
        X = validate_data(self, X)
        sigma = self._check_common(X)
        trace = check_positive("trace_penalty", self.trace_penalty, allow_zero=True)
        quadratic = check_positive("quadratic_penalty", self.quadratic_penalty)
        self.model_ = _core.fit_density(X, sigma, trace, quadratic, self._solver(), self.device)
        self.n_iter_ = self.model_.iterations
        return self

    def density(self, X):
        """The density ``p(x)`` at the rows of ``X`` (non-negative)."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        return self.model_.density(X)

    def score_samples(self, X):
        """Log-density at the rows of ``X`` (``-inf`` where the density is 0).

        Returns
        -------
        log_density : ndarray of shape (n_samples,)
        """
        with np.errstate(divide="ignore"):
            return np.log(self.density(X))

    def score(self, X, y=None):
        """Total log-likelihood of the rows of ``X``."""
        return float(np.sum(self.score_samples(X)))

    def sample(self, n_samples=1, random_state=None):
        """Draws samples from the density (exact inversion of its
        per-coordinate conditional distributions).

        Parameters
        ----------
        n_samples : int, default=1
        random_state : int, RandomState instance or None, default=None

        Returns
        -------
        X : ndarray of shape (n_samples, n_features)
        """
        check_is_fitted(self)
        n_samples = check_positive("n_samples", n_samples, integer=True)
        return np.ascontiguousarray(self.model_.sample(n_samples, seed_from(random_state)))


def _levels(quantiles):
    scalar = isinstance(quantiles, numbers.Real)
    levels = np.atleast_1d(np.asarray(quantiles, dtype=np.float64))
    if levels.ndim != 1 or levels.size == 0 or not np.all((levels > 0) & (levels < 1)) or np.any(np.diff(levels) <= 0):
        raise ValueError(f"quantiles must be a level in (0, 1) or strictly increasing levels in (0, 1), got {quantiles!r}")
    return scalar, [float(q) for q in levels]


class PSDQuantileRegressor(_PSDParams, RegressorMixin, BaseEstimator):
    """Non-crossing quantile regression with PSD models.

    The quantile curves at several levels are fitted jointly: the lowest is
    a kernel model and each next one adds a non-negative PSD model, so the
    curves cannot cross. The loss is the pinball (quantile) loss.

    Parameters
    ----------
    quantiles : float or sequence of float, default=(0.1, 0.5, 0.9)
        Levels in (0, 1), strictly increasing. A single float gives 1-D predictions.
    bandwidth : float, "scott" or "silverman", default="scott"
        Width ``sigma`` of the Gaussian kernel, as in :class:`PSDDensity`.
    linear_penalty, trace_penalty, quadratic_penalty : float, default=1e-3, 1e-3, 1e-4
        ``lambda_0 > 0`` (linear part), ``lambda_1 >= 0`` and ``lambda_2 > 0``
        (PSD parts) of the regulariser.
    n_centres, tol, max_iter, random_state, device
        As in :class:`PSDDensity`.

    Attributes
    ----------
    model_ : object
    bandwidth_ : float
    quantiles_ : list of float
    n_iter_ : int
    n_features_in_ : int
    """

    def __init__(self, quantiles=(0.1, 0.5, 0.9), *, bandwidth="scott", linear_penalty=1e-3, trace_penalty=1e-3, quadratic_penalty=1e-4, n_centres=None, tol=1e-6, max_iter=20000, random_state=None, device="auto"):
        self.quantiles = quantiles
        self.bandwidth = bandwidth
        self.linear_penalty = linear_penalty
        self.trace_penalty = trace_penalty
        self.quadratic_penalty = quadratic_penalty
        self.n_centres = n_centres
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.device = device

    def _penalties(self):
        return (
            check_positive("linear_penalty", self.linear_penalty),
            check_positive("trace_penalty", self.trace_penalty, allow_zero=True),
            check_positive("quadratic_penalty", self.quadratic_penalty),
        )

    def fit(self, X, y):
        """Fits the quantile curves.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)

        Returns
        -------
        self : PSDQuantileRegressor
        """
        X, y = validate_data(self, X, y, y_numeric=True)
        y = np.ascontiguousarray(y, dtype=np.float64)
        sigma = self._check_common(X)
        self._scalar, self.quantiles_ = _levels(self.quantiles)
        self.model_ = _core.fit_quantiles(X, y, self.quantiles_, sigma, self._penalties(), self._solver(), self.device)
        self.n_iter_ = self.model_.iterations
        return self

    def predict(self, X):
        """The quantiles at the rows of ``X``.

        Returns
        -------
        quantiles : ndarray of shape (n_samples, n_quantiles), or (n_samples,) when ``quantiles`` is a float
            One column per level, non-decreasing along each row.
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        q = np.ascontiguousarray(self.model_.predict(X))
        return q[:, 0] if self._scalar else q

    def score(self, X, y, sample_weight=None):
        """Negative mean pinball loss, averaged over the levels (higher is
        better; 0 is a perfect fit). Model selection with
        ``GridSearchCV`` and ``cross_val_score`` uses it."""
        from sklearn.metrics import mean_pinball_loss

        q = self.predict(X)
        q = q.reshape(-1, 1) if q.ndim == 1 else q
        y = np.asarray(y, dtype=np.float64).ravel()
        return -float(np.mean([mean_pinball_loss(y, q[:, j], alpha=level, sample_weight=sample_weight) for j, level in enumerate(self.quantiles_)]))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # The score is a pinball loss, not R^2: scikit-learn's "score > 0.5"
        # check does not apply.
        tags.regressor_tags.poor_score = True
        return tags

    def _more_tags(self):  # scikit-learn < 1.6
        return {"poor_score": True}


class PSDHeteroscedasticRegressor(_PSDParams, RegressorMixin, BaseEstimator):
    """Heteroscedastic Gaussian regression with a PSD model of the precision.

    ``y | x ~ N(mu(x), s(x)^2)`` in natural parameters: a kernel model for
    ``eta(x) = mu(x) / s(x)^2`` and a PSD model (non-negative by
    construction) for the precision ``theta(x) = 1 / s(x)^2``, fitted by
    maximum likelihood.

    Parameters
    ----------
    bandwidth : float, "scott" or "silverman", default="scott"
        Width ``sigma`` of the Gaussian kernel, as in :class:`PSDDensity`.
    linear_penalty, trace_penalty, quadratic_penalty : float, default=1e-3
        ``lambda_0 > 0`` (linear part ``eta``), ``lambda_1 >= 0`` and
        ``lambda_2 > 0`` (PSD part) of the regulariser.
    n_centres, tol, max_iter, random_state, device
        As in :class:`PSDDensity`.

    Attributes
    ----------
    model_ : object
    bandwidth_ : float
    n_iter_ : int
    n_features_in_ : int
    """

    def __init__(self, bandwidth="scott", *, linear_penalty=1e-3, trace_penalty=1e-3, quadratic_penalty=1e-3, n_centres=None, tol=1e-6, max_iter=20000, random_state=None, device="auto"):
        self.bandwidth = bandwidth
        self.linear_penalty = linear_penalty
        self.trace_penalty = trace_penalty
        self.quadratic_penalty = quadratic_penalty
        self.n_centres = n_centres
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.device = device

    _penalties = PSDQuantileRegressor._penalties

    def fit(self, X, y):
        """Fits the conditional mean and variance.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Not constant.

        Returns
        -------
        self : PSDHeteroscedasticRegressor
        """
        X, y = validate_data(self, X, y, y_numeric=True, ensure_min_samples=2)
        y = np.ascontiguousarray(y, dtype=np.float64)
        sigma = self._check_common(X)
        self.model_ = _core.fit_heteroscedastic(X, y, sigma, self._penalties(), self._solver(), self.device)
        self.n_iter_ = self.model_.iterations
        return self

    def predict(self, X, return_std=False):
        """The conditional mean at the rows of ``X``, and with
        ``return_std=True`` the conditional standard deviation.

        Returns
        -------
        y_mean : ndarray of shape (n_samples,)
        y_std : ndarray of shape (n_samples,), only with ``return_std=True``
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        mean = self.model_.predict_mean(X)
        if not return_std:
            return mean
        return mean, np.sqrt(self.model_.predict_variance(X))
