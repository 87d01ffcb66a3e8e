"""PSD models: non-negative functions ``f(x) = phi(x)^T A phi(x)`` with ``A``
positive semidefinite, for densities, quantiles and variances."""

import numbers

import numpy as np
from sklearn.base import BaseEstimator, DensityMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from . import _core
from ._compute import _check_precision
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


def _base_measure(base_measure, d):
    """``None`` (Lebesgue) or ``(mean, std)`` lists of length ``d`` for the
    Gaussian base measure ``N(mean, diag(std^2))``."""
    if base_measure is None:
        return None
    if isinstance(base_measure, (int, float, np.integer, np.floating)) and not isinstance(base_measure, bool):
        mean, std = 0.0, base_measure
    elif isinstance(base_measure, (tuple, list)) and len(base_measure) == 2:
        mean, std = base_measure
    else:
        raise ValueError(f"base_measure must be None, a standard deviation or a (mean, std) pair, got {base_measure!r}")
    try:
        mean = np.broadcast_to(np.asarray(mean, dtype=np.float64), (d,))
        std = np.broadcast_to(np.asarray(std, dtype=np.float64), (d,))
    except ValueError as e:
        raise ValueError(f"base_measure's mean and std must be scalars or of length {d} (the number of features): {e}") from None
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(std)) and np.all(std > 0)):
        raise ValueError(f"base_measure needs a finite mean and a finite std > 0, got {base_measure!r}")
    return [float(v) for v in mean], [float(v) for v in std]


class PSDDensity(_PSDParams, DensityMixin, BaseEstimator):
    """Density estimation with a PSD model.

    ``p(x) = phi(x)^T A phi(x)`` (the PSD model of the PSD-models paper,
    Theorem 1 and Eq. 7) with Gaussian-kernel features ``phi`` on the
    training samples (or ``n_centres`` of them) and ``A`` positive
    semidefinite, fitted by maximum likelihood with the integral constrained
    to 1 (Eq. 12), through the dual problem (Theorem 2, Eq. 10-11) solved by
    FISTA. The density is non-negative everywhere and integrates
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
        ``lambda_1`` of the regulariser ``lambda_1 tr(A) + lambda_2 / 2 ||A||_F^2``
        (Eq. 6, with the ``1/2`` of Eq. 10-11), >= 0.
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
    base_measure : None, float or (mean, std), default=None
        The measure ``nu`` of the density ``p(x) = f(x) nu(x)``: ``None``
        for the Lebesgue measure (``p = f``); a standard deviation ``s`` for
        ``N(0, s^2 I)``; a pair ``(mean, std)`` (scalars or one value per
        feature) for ``N(mean, diag(std^2))``. A Gaussian base measure keeps
        the density small far from the data in several dimensions (the
        10-D experiment of the PSD-models paper, App. E, uses ``s = 5``).
    device : {"auto", "cpu", "gpu"}, default="auto"
        Where the features and model values are computed.
    precision : {"auto", "float32", "float64"}, default="auto"
        These models compute in 64-bit floats (the duality-gap certificate
        of the solver needs the digits): "auto" uses them on a GPU that has
        them and the host otherwise; "float64" requires them
        (:class:`~gramian.exceptions.DeviceError` on a GPU without them);
        "float32" raises ``ValueError``. On the CPU the fit computes in
        float64.

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

    def __init__(self, bandwidth="scott", *, trace_penalty=1e-3, quadratic_penalty=1e-4, n_centres=None, tol=1e-6, max_iter=20000, random_state=None, base_measure=None, device="auto", precision="auto"):
        self.bandwidth = bandwidth
        self.trace_penalty = trace_penalty
        self.quadratic_penalty = quadratic_penalty
        self.n_centres = n_centres
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.base_measure = base_measure
        self.device = device
        self.precision = precision

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
        base = _base_measure(self.base_measure, X.shape[1])
        self.model_ = _core.fit_density(X, sigma, trace, quadratic, self._solver(), base, self.device, _check_precision(self.precision))
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

    def integral(self):
        """``int p`` in closed form (1 up to rounding after a fit)."""
        check_is_fitted(self)
        return self.model_.integral()

    def box_probability(self, lower, upper):
        """``P(X in [lower_1, upper_1] x ... x [lower_d, upper_d])`` in closed
        form (bounds may be ``-inf`` / ``inf``).

        Parameters
        ----------
        lower, upper : array-like of shape (n_features_in_,)

        Returns
        -------
        probability : float
        """
        check_is_fitted(self)
        lower = np.broadcast_to(np.asarray(lower, dtype=np.float64), (self.n_features_in_,))
        upper = np.broadcast_to(np.asarray(upper, dtype=np.float64), (self.n_features_in_,))
        return self.model_.box_probability([float(v) for v in lower], [float(v) for v in upper])

    def marginal(self, features):
        """The marginal density of the features ``features`` (indices, in
        closed form): a fitted :class:`PSDDensity` on those features.

        Parameters
        ----------
        features : sequence of int
            Increasing indices in ``range(n_features_in_)``.

        Returns
        -------
        marginal : PSDDensity
        """
        check_is_fitted(self)
        keep = [int(k) for k in features]
        if not keep or any(not 0 <= k < self.n_features_in_ for k in keep) or any(b <= a for a, b in zip(keep, keep[1:])):
            raise ValueError(f"features must be increasing indices in range({self.n_features_in_}), got {features!r}")
        from sklearn.base import clone

        marginal = clone(self)
        marginal.model_ = self.model_.marginal(keep)
        marginal.bandwidth_, marginal.n_iter_, marginal.n_features_in_ = self.bandwidth_, self.n_iter_, len(keep)
        return marginal

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

    The quantile curves at several levels are fitted jointly (Eq. 14 and
    Theorem 6 of the PSD-models paper): the middle one is a kernel model and
    the gaps between consecutive levels are non-negative PSD models, so the
    curves cannot cross. The loss is the pinball (quantile) loss; the fit
    solves the dual (as Theorem 2).

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

    def __init__(self, quantiles=(0.1, 0.5, 0.9), *, bandwidth="scott", linear_penalty=1e-3, trace_penalty=1e-3, quadratic_penalty=1e-4, n_centres=None, tol=1e-6, max_iter=20000, random_state=None, device="auto", precision="auto"):
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
        self.precision = precision

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
        self.model_ = _core.fit_quantiles(X, y, self.quantiles_, sigma, self._penalties(), self._solver(), self.device, _check_precision(self.precision))
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
    ``eta(x) = mu(x) / s(x)^2`` and a PSD model (Eq. 7, non-negative by
    construction) for the precision ``theta(x) = 1 / s(x)^2``, fitted by
    maximum likelihood through the dual (Theorem 2 with an extra linear
    block, Eq. 11).

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

    def __init__(self, bandwidth="scott", *, linear_penalty=1e-3, trace_penalty=1e-3, quadratic_penalty=1e-3, n_centres=None, tol=1e-6, max_iter=20000, random_state=None, device="auto", precision="auto"):
        self.bandwidth = bandwidth
        self.linear_penalty = linear_penalty
        self.trace_penalty = trace_penalty
        self.quadratic_penalty = quadratic_penalty
        self.n_centres = n_centres
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.device = device
        self.precision = precision

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
        self.model_ = _core.fit_heteroscedastic(X, y, sigma, self._penalties(), self._solver(), self.device, _check_precision(self.precision))
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


BASELINE_KINDS = ("pnm", "ncm", "glm")


class _BaselineParams:
    """The settings the PSD-model baselines share, checked at fit."""

    def _check_baseline(self, X):
        if self.kind not in BASELINE_KINDS:
            raise ValueError(f"kind must be one of {BASELINE_KINDS}, got {self.kind!r}")
        check_device(self.device)
        self.bandwidth_ = _bandwidth(self.bandwidth, X)
        if (self.tol is None) != (self.max_iter is None):
            raise ValueError("tol and max_iter are given together (or both None for the defaults of each kind)")
        if self.tol is None:
            solver = None
        else:
            solver = (check_positive("tol", self.tol), check_positive("max_iter", self.max_iter, integer=True))
        return self.bandwidth_, solver


class BaselineDensity(_BaselineParams, DensityMixin, BaseEstimator):
    """The density baselines of PSD models (Appendix D of the PSD-models
    paper): a linear kernel expansion ``g(x) = sum_j a_j k(x, x_j)`` with a
    Gaussian kernel, fitted by maximum likelihood with the regulariser
    ``alpha/2 a^T K a``.

    - ``"pnm"`` (Eq. 37): ``p = g``, non-negative on the data only (it can
      be negative elsewhere), integral 1 in closed form.
    - ``"ncm"`` (Eq. 35): ``a >= 0``, integral 1 in closed form.
    - ``"glm"`` (Eq. 33): ``p = exp(g) / Z``, ``Z`` estimated by Monte Carlo.

    Parameters
    ----------
    kind : {"pnm", "ncm", "glm"}, default="ncm"
    bandwidth : float, "scott" or "silverman", default="scott"
        Width of the Gaussian kernel, as in :class:`PSDDensity`.
    alpha : float, default=1e-3
        ``lambda`` of the regulariser, > 0.
    n_monte_carlo : int, default=10000
        Monte Carlo sample size of GLM's normaliser.
    base_measure : None, float or (mean, std), default=None
        As in :class:`PSDDensity`. With GLM on the Lebesgue measure the
        model is a density only on a bounded region (``model_.integral()``
        raises).
    tol, max_iter : float and int, default=None
        The solver's stopping rule (Newton decrement or relative step) and
        budget, given together; ``None``: the library's defaults.
    random_state : int, RandomState instance or None, default=None
        GLM's Monte Carlo samples.
    device : {"auto", "cpu", "gpu"}, default="auto"
    precision : {"auto", "float32", "float64"}, default="auto"
        These models compute in 64-bit floats (the duality-gap certificate
        of the solver needs the digits): "auto" uses them on a GPU that has
        them and the host otherwise; "float64" requires them
        (:class:`~gramian.exceptions.DeviceError` on a GPU without them);
        "float32" raises ``ValueError``. On the CPU the fit computes in
        float64.

    Attributes
    ----------
    model_ : object
    bandwidth_ : float
    coef_ : ndarray of shape (n_samples,)
        The coefficients ``a``.
    n_features_in_ : int
    """

    def __init__(self, kind="ncm", *, bandwidth="scott", alpha=1e-3, n_monte_carlo=10000, base_measure=None, tol=None, max_iter=None, random_state=None, device="auto", precision="auto"):
        self.kind = kind
        self.bandwidth = bandwidth
        self.alpha = alpha
        self.n_monte_carlo = n_monte_carlo
        self.base_measure = base_measure
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.device = device
        self.precision = precision

    def fit(self, X, y=None):
        """Fits the density to the rows of ``X``.

        Returns
        -------
        self : BaselineDensity
        """
        X = validate_data(self, X)
        sigma, solver = self._check_baseline(X)
        alpha = check_positive("alpha", self.alpha)
        mc = (check_positive("n_monte_carlo", self.n_monte_carlo, integer=True), seed_from(self.random_state))
        self.model_ = _core.fit_baseline_density(X, self.kind, sigma, alpha, solver, mc, _base_measure(self.base_measure, X.shape[1]), self.device, _check_precision(self.precision))
        self.coef_ = self.model_.coefficients
        return self

    def density(self, X):
        """The estimated density at the rows of ``X`` (PNM's may be negative)."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        return self.model_.density(X)

    def score_samples(self, X):
        """Log-density at the rows of ``X`` (``-inf`` where the density is not positive)."""
        p = self.density(X)
        out = np.full(p.shape, -np.inf)
        positive = p > 0
        out[positive] = np.log(p[positive])
        return out

    def score(self, X, y=None):
        """Total log-likelihood of the rows of ``X``."""
        return float(np.sum(self.score_samples(X)))


class BaselineQuantileRegressor(_BaselineParams, RegressorMixin, BaseEstimator):
    """Non-crossing quantile regression with the baselines of PSD models:
    the gaps between consecutive quantile curves are PNM (Eq. 36), NCM
    (Eq. 34) or GLM (Eq. 32) models instead of PSD models.

    Parameters
    ----------
    kind : {"pnm", "ncm", "glm"}, default="ncm"
    quantiles : float or sequence of float, default=(0.1, 0.5, 0.9)
        As in :class:`PSDQuantileRegressor`.
    bandwidth : float, "scott" or "silverman", default="scott"
    linear_penalty, quadratic_penalty : float, default=1e-3
        ``lambda_0 > 0`` (the middle quantile) and ``lambda > 0`` (each gap).
    smoothing : float, default=1e-3
        Moreau-envelope parameter of the pinball loss (NCM, GLM), > 0.
    n_restarts : int, default=5
        Starting points of GLM's non-convex fit.
    tol, max_iter : float and int, default=None
        Given together; ``None``: the library's defaults.
    random_state : int, RandomState instance or None, default=None
        GLM's starting points.
    device : {"auto", "cpu", "gpu"}, default="auto"
    precision : {"auto", "float32", "float64"}, default="auto"
        These models compute in 64-bit floats (the duality-gap certificate
        of the solver needs the digits): "auto" uses them on a GPU that has
        them and the host otherwise; "float64" requires them
        (:class:`~gramian.exceptions.DeviceError` on a GPU without them);
        "float32" raises ``ValueError``. On the CPU the fit computes in
        float64.

    Attributes
    ----------
    model_ : object
    bandwidth_ : float
    quantiles_ : list of float
    n_iter_ : int
    n_features_in_ : int
    """

    def __init__(self, kind="ncm", quantiles=(0.1, 0.5, 0.9), *, bandwidth="scott", linear_penalty=1e-3, quadratic_penalty=1e-3, smoothing=1e-3, n_restarts=5, tol=None, max_iter=None, random_state=None, device="auto", precision="auto"):
        self.kind = kind
        self.quantiles = quantiles
        self.bandwidth = bandwidth
        self.linear_penalty = linear_penalty
        self.quadratic_penalty = quadratic_penalty
        self.smoothing = smoothing
        self.n_restarts = n_restarts
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.device = device
        self.precision = precision

    def fit(self, X, y):
        """Fits the quantile curves.

        Returns
        -------
        self : BaselineQuantileRegressor
        """
        X, y = validate_data(self, X, y, y_numeric=True, ensure_min_samples=2)
        y = np.ascontiguousarray(y, dtype=np.float64)
        sigma, solver = self._check_baseline(X)
        self._scalar, self.quantiles_ = _levels(self.quantiles)
        penalties = (check_positive("linear_penalty", self.linear_penalty), check_positive("quadratic_penalty", self.quadratic_penalty))
        restarts = (check_positive("n_restarts", self.n_restarts, integer=True), seed_from(self.random_state))
        smoothing = check_positive("smoothing", self.smoothing)
        self.model_ = _core.fit_baseline_quantiles(X, y, self.kind, self.quantiles_, sigma, penalties, smoothing, restarts, solver, self.device, _check_precision(self.precision))
        self.n_iter_ = self.model_.iterations
        return self

    predict = PSDQuantileRegressor.predict
    score = PSDQuantileRegressor.score

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # The score is a pinball loss, not R^2.
        tags.regressor_tags.poor_score = True
        return tags

    def _more_tags(self):  # scikit-learn < 1.6
        return {"poor_score": True}


class BaselineHeteroscedasticRegressor(_BaselineParams, RegressorMixin, BaseEstimator):
    """Heteroscedastic Gaussian regression whose precision is a baseline
    model of PSD models (PNM, NCM or GLM) instead of a PSD model; the
    parameters are those of :class:`BaselineQuantileRegressor` without the
    quantiles and the smoothing.

    Attributes
    ----------
    model_ : object
    bandwidth_ : float
    n_iter_ : int
    n_features_in_ : int
    """

    def __init__(self, kind="ncm", *, bandwidth="scott", linear_penalty=1e-3, quadratic_penalty=1e-3, n_restarts=5, tol=None, max_iter=None, random_state=None, device="auto", precision="auto"):
        self.kind = kind
        self.bandwidth = bandwidth
        self.linear_penalty = linear_penalty
        self.quadratic_penalty = quadratic_penalty
        self.n_restarts = n_restarts
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.device = device
        self.precision = precision

    def fit(self, X, y):
        """Fits the conditional mean and variance.

        Returns
        -------
        self : BaselineHeteroscedasticRegressor
        """
        X, y = validate_data(self, X, y, y_numeric=True, ensure_min_samples=2)
        y = np.ascontiguousarray(y, dtype=np.float64)
        sigma, solver = self._check_baseline(X)
        penalties = (check_positive("linear_penalty", self.linear_penalty), check_positive("quadratic_penalty", self.quadratic_penalty))
        restarts = (check_positive("n_restarts", self.n_restarts, integer=True), seed_from(self.random_state))
        self.model_ = _core.fit_baseline_heteroscedastic(X, y, self.kind, sigma, penalties, restarts, solver, self.device, _check_precision(self.precision))
        self.n_iter_ = self.model_.iterations
        return self

    predict = PSDHeteroscedasticRegressor.predict
