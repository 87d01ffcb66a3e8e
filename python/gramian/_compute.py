"""The compute core: kernel matrices, kernel matrix-vector products, Gram
matrices and matrix products on a device."""

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_array

from . import _core
from ._kernels import resolve
from ._validation import check_device

PRECISIONS = ("auto", "float32", "float64")


def _check_precision(precision):
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return precision


def _matrix(A, name):
    """``A`` as a C-contiguous float64 matrix: a non-empty one is passed on
    as it is (the extension checks its values: NaN and infinities raise
    :class:`~gramian.exceptions.InvalidInputError`, a ValueError), anything
    else goes through scikit-learn's ``check_array``."""
    if type(A) is np.ndarray and A.dtype == np.float64 and A.ndim == 2 and A.size and A.flags.c_contiguous:
        return A
    return check_array(A, dtype=np.float64, order="C", input_name=name)


def _csr(A, name):
    """``A`` (a scipy sparse matrix or array, or a dense array-like) as the
    parts of a canonical float64 CSR matrix: ``(indptr, indices, data,
    shape)`` with sorted, unique column indices per row."""
    if not sp.issparse(A):
        A = _matrix(A, name)
    A = sp.csr_array(A, dtype=np.float64, copy=False)
    if A.shape[0] == 0 or A.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {A.shape})")
    if not A.has_canonical_format:
        A = A.copy()
        A.sum_duplicates()
    as_index = lambda a: np.ascontiguousarray(a, dtype=np.int64)
    return as_index(A.indptr), as_index(A.indices), np.ascontiguousarray(A.data, dtype=np.float64), A.shape


def _kernel(kernel, X, gamma, coef0, degree):
    params = {"coef0": coef0, "degree": degree}
    if gamma is not None:
        params["gamma"] = gamma
    return resolve((kernel, params), X, default_gamma="auto")


def kernel_matrix(X, Z=None, kernel="rbf", *, gamma=None, coef0=1.0, degree=3, device="auto", precision="auto"):
    """The kernel matrix ``K[i, j] = k(X[i], Z[j])``.

    Parameters
    ----------
    X : array-like or sparse matrix of shape (n_samples_X, n_features)
    Z : array-like or sparse matrix of shape (n_samples_Z, n_features), default=None
        ``None`` for ``Z = X``. Where ``X`` or ``Z`` is a scipy sparse
        matrix (any format; converted to CSR), both are taken as sparse and
        the kernel is computed from sparse inner products and row norms on
        the CPU, whatever ``device``; the result equals the dense inputs'
        up to the summation order.
    kernel : {"rbf", "laplacian", "linear", "poly", "sigmoid"}, default="rbf"
        ``rbf``: ``exp(-gamma ||x - z||^2)``; ``laplacian``:
        ``exp(-gamma ||x - z||)`` (Euclidean norm, unlike scikit-learn's
        L1 ``laplacian_kernel``); ``linear``: ``<x, z>``; ``poly``:
        ``(gamma <x, z> + coef0)^degree``; ``sigmoid``:
        ``tanh(gamma <x, z> + coef0)``.
    gamma : float, "scale" or "auto", default=None
        ``None`` or ``"auto"``: ``1 / n_features`` (scikit-learn's
        ``pairwise_kernels`` default); ``"scale"``: ``1 / (n_features * X.var())``.
    coef0 : float, default=1.0
    degree : int, default=3
    device : {"auto", "cpu", "gpu"}, default="auto"
        "auto": a hardware GPU if one is present, otherwise the CPU; "gpu":
        any GPU adapter (software ones included), :class:`~gramian.exceptions.DeviceError`
        if there is none.
    precision : {"auto", "float32", "float64"}, default="auto"
        The type the inputs are stored in on the device and the kernel is
        computed in: "auto" is float32 on a GPU and float64 on the CPU;
        "float64" on a GPU needs an adapter with 64-bit floats in shaders
        (:func:`supports_precision`), else :class:`~gramian.exceptions.DeviceError`.
        "float32" on the CPU stores the inputs and the result in float32,
        as a GPU does. The array returned is float64 in every case.

    Returns
    -------
    K : ndarray of shape (n_samples_X, n_samples_Z), float64
    """
    check_device(device)
    _check_precision(precision)
    if sp.issparse(X) or sp.issparse(Z):
        X = X if sp.issparse(X) else _matrix(X, "X")
        Xs = _csr(X, "X")
        Zs = Xs if Z is None else _csr(Z, "Z")
        return _core.kernel_matrix_sparse(Xs, Zs, _kernel(kernel, X, gamma, coef0, degree), device, precision)
    X = _matrix(X, "X")
    Z = X if Z is None else _matrix(Z, "Z")
    return _core.kernel_matrix(X, Z, _kernel(kernel, X, gamma, coef0, degree), device, precision)


def kernel_matvec(X, Z, V, kernel="rbf", *, gamma=None, coef0=1.0, degree=3, device="auto", precision="auto"):
    """``K(X, Z) @ V`` without forming ``K(X, Z)`` (memory ``O((n + m)(d + c))``).

    ``V`` is of shape (n_samples_Z,) or (n_samples_Z, c); the result has
    shape (n_samples_X,) or (n_samples_X, c) accordingly. The kernel
    parameters, ``device`` and ``precision`` are those of :func:`kernel_matrix`;
    ``X`` and ``Z`` may be scipy sparse matrices, as there (``V`` is dense).
    """
    check_device(device)
    _check_precision(precision)
    V = np.asarray(V)
    one_d = V.ndim == 1
    V = check_array(V.reshape(-1, 1) if one_d else V, dtype=np.float64, order="C", input_name="V")
    if sp.issparse(X) or sp.issparse(Z):
        X = X if sp.issparse(X) else _matrix(X, "X")
        out = _core.kernel_matvec_sparse(_csr(X, "X"), _csr(Z, "Z"), V, _kernel(kernel, X, gamma, coef0, degree), device, precision)
    else:
        X, Z = _matrix(X, "X"), _matrix(Z, "Z")
        out = _core.kernel_matvec(X, Z, V, _kernel(kernel, X, gamma, coef0, degree), device, precision)
    return out[:, 0] if one_d else out


def gram(Phi, *, outer=False, device="auto", precision="auto"):
    """The Gram matrix of explicit features: ``Phi.T @ Phi``, or with
    ``outer=True`` ``Phi @ Phi.T`` (the linear kernel matrix of the rows).

    Parameters
    ----------
    Phi : array-like of shape (n_samples, n_features)
    outer : bool, default=False
        ``False``: ``Phi.T @ Phi``, shape (n_features, n_features), the sum
        over samples of ``phi_i phi_i^T``; ``True``: ``Phi @ Phi.T``, shape
        (n_samples, n_samples).
    device : {"auto", "cpu", "gpu"}, default="auto"
        As for :func:`kernel_matrix`.
    precision : {"auto", "float32", "float64"}, default="auto"
        As for :func:`kernel_matrix`: the type the operands are stored in
        on the device and the product computed in; the array returned is
        float64 in every case.

    Returns
    -------
    G : ndarray, float64, symmetric
    """
    check_device(device)
    _check_precision(precision)
    return _core.gram(_matrix(Phi, "Phi"), bool(outer), device, precision)


def matmul(A, B, *, transpose_a=False, transpose_b=False, device="auto", precision="auto"):
    """The matrix product ``op(A) @ op(B)``, ``op`` the transpose where asked.

    Parameters
    ----------
    A : array-like of shape (n, k), or (k, n) with ``transpose_a``
    B : array-like of shape (k, m), or (m, k) with ``transpose_b``
    transpose_a, transpose_b : bool, default=False
        Multiply by the transpose of the operand (read in place, not
        copied); both set computes ``(B @ A).T``.
    device : {"auto", "cpu", "gpu"}, default="auto"
        As for :func:`kernel_matrix`.
    precision : {"auto", "float32", "float64"}, default="auto"
        As for :func:`kernel_matrix`: the type the operands are stored in
        on the device and the product computed in; the array returned is
        float64 in every case.

    Returns
    -------
    C : ndarray of shape (n, m), float64

    Raises
    ------
    ValueError
        Operands whose inner dimensions differ, empty or non-finite ones.
    """
    check_device(device)
    _check_precision(precision)
    A, B = _matrix(A, "A"), _matrix(B, "B")
    if transpose_a and transpose_b:
        return _core.matmul(B, A, False, False, device, precision).T
    return _core.matmul(A, B, bool(transpose_a), bool(transpose_b), device, precision)


def device_info(device="auto"):
    """A one-line description of the device ``device`` selects (the GPU
    adapter's name and backend, or the CPU)."""
    check_device(device)
    return _core.device_description(device)


def supports_precision(precision, device="auto"):
    """Whether ``device`` computes in ``precision`` ("float32" or "float64"):
    the CPU both, a GPU float32 and, where the adapter has 64-bit floats in
    shaders, float64."""
    check_device(device)
    return _core.supports_precision(device, _check_precision(precision))


def devices():
    """The GPU adapters present, in the order ``device="gpu"`` prefers them
    (discrete, integrated, virtual, software).

    The graphics APIs searched are Vulkan, Metal and DX12 (or those the
    environment variable ``WGPU_BACKEND`` names), as for ``device="gpu"``.
    ``device="auto"`` takes the first adapter that is not a software one,
    and the CPU when there is none.

    Returns
    -------
    adapters : list of dict
        One per adapter, with keys ``name``, ``backend`` (e.g. "vulkan"),
        ``device_type`` ("DiscreteGpu", "IntegratedGpu", "VirtualGpu",
        "Cpu" or "Other"), ``driver``, ``software`` (a software
        rasteriser such as Mesa's llvmpipe) and ``float64`` (whether the
        adapter has 64-bit floats in shaders, so ``precision="float64"``
        runs there). Empty without an adapter.
    """
    keys = ("name", "backend", "device_type", "driver", "software", "float64")
    return [dict(zip(keys, adapter)) for adapter in _core.adapters()]
