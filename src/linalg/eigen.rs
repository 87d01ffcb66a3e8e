//! Eigendecompositions of symmetric matrices on the CPU: the full
//! decomposition, eigenvalues only, the largest pairs and the pairs above a
//! threshold, through the blocked tridiagonalisation of `tridiag.rs` (or
//! faer's for small orders).

use faer::{Par, Side};
use nalgebra::{DMatrix, DVector};

use super::{check_dim, check_matrix, clear_upper_simd_state, faer_ref, finite_vector, tridiag};
use crate::error::{Error, Result};

/// Eigendecomposition of a symmetric matrix, eigenvalues in ascending order.
#[derive(Debug, Clone)]
pub struct SymmetricEigen {
    /// Eigenvalues, ascending.
    pub eigenvalues: DVector<f64>,
    /// Orthonormal eigenvectors, one per column, in the order of `eigenvalues`.
    pub eigenvectors: DMatrix<f64>,
}

/// Order from which [`symmetric_eigen`] and [`symmetric_eigenvalues`] take
/// the blocked tridiagonalisation (`linalg/tridiag.rs`) instead of faer's.
/// Measured on a 2-core AVX-512 machine (BENCHMARKS.md): faer's
/// whole decomposition took 0.89x the blocked path's time at n = 1000 and
/// 0.96x at 1536, the same at 2000-2600, 1.10x at 3600. With the reduction
/// on a thread team the two are within the noise of each
/// other from 800 to 2048 (blocked / faer: 0.162 / 0.168 s at 1000, 0.434 /
/// 0.435 s at 1536, 0.899 / 0.880 s at 2048): the faster reduction was
/// offset by a slower back-transformation of all `n` vectors, so the order
/// stayed at 2048. With the symmetric product in AVX-512 intrinsics (the
/// reduction 1.5-1.9x faster on an AVX-512 machine)
/// the blocked path is faster from 800 there (medians of 7, blocked / faer:
/// 0.080-0.083 / 0.104-0.110 s at 800, 0.142-0.153 / 0.173-0.185 s at 1000,
/// 0.40-0.49 / 0.50-0.54 s at 1536, 0.92 / 1.07-1.12 s at 2048; the same at
/// 300 and 600), and within the noise from 800 on the AVX2 machine above.
pub(crate) const BLOCKED_TRIDIAGONALISATION_FROM: usize = 800;

/// Symmetric eigendecomposition `A = U diag(s) U^T` (only the lower triangle
/// of `a` is read).
///
/// Below order 800 (`BLOCKED_TRIDIAGONALISATION_FROM`) faer's self-adjoint solver
/// (unblocked tridiagonalisation, divide and conquer). From there the
/// Householder tridiagonalisation `A = Q T Q^T` blocked as LAPACK's
/// `dsytrd` (`linalg/tridiag.rs`: one read of the trailing triangle per
/// column on a team of threads, rank-64 updates as one matrix product),
/// faer's divide and conquer on `T`, and the blocked back-transformation
/// `U = Q U_T`. The two agree to rounding (tests).
///
/// Errors: [`Error::Empty`], [`Error::DimensionMismatch`] for a
/// non-square input, [`Error::NonFinite`], and
/// [`Error::InvalidParameter`] if the iteration does not converge.
pub fn symmetric_eigen(a: &DMatrix<f64>) -> Result<SymmetricEigen> {
    if a.nrows() >= BLOCKED_TRIDIAGONALISATION_FROM {
        symmetric_eigen_blocked(a)
    } else {
        symmetric_eigen_faer(a)
    }
}

/// [`symmetric_eigen`] through the blocked tridiagonalisation at any order.
pub(super) fn symmetric_eigen_blocked(a: &DMatrix<f64>) -> Result<SymmetricEigen> {
    check_matrix("symmetric matrix", a)?;
    check_dim("symmetric matrix must be square", a.nrows(), a.ncols())?;
    let t = tridiag::Tridiagonalisation::new(faer_ref(a));
    let (values, vectors) = solve_tridiagonal(&t, true)?;
    let mut u = vectors.expect("vectors were asked for");
    t.apply_q(u.as_mut(), Par::rayon(0));
    clear_upper_simd_state(true);
    let n = a.nrows();
    let eigenvalues = DVector::from_fn(n, |i, _| values[i]);
    let eigenvectors = DMatrix::from_fn(n, n, |i, j| u[(i, j)]);
    finite_vector("eigenvalues", eigenvalues.clone())?;
    Ok(SymmetricEigen { eigenvalues, eigenvectors })
}

/// The `k` largest eigenpairs (ascending) through the blocked
/// tridiagonalisation: the `k` wanted pairs of `T` by bisection and inverse
/// iteration ([`tridiag::tridiagonal_top_k`], `O(n k)`, verified), or where
/// that cannot verify its answer by divide and conquer on all of `T`; only
/// the `k` vectors back-transformed (`2 n^2 k` flops instead of `2 n^3`).
/// Also returns `max |lambda|` over the whole spectrum. `k` in `1..=n`
/// (checked by the caller).
pub(crate) fn symmetric_eigen_top_by_tridiagonal(a: &DMatrix<f64>, k: usize) -> Result<(SymmetricEigen, f64)> {
    check_matrix("symmetric matrix", a)?;
    check_dim("symmetric matrix must be square", a.nrows(), a.ncols())?;
    let t = tridiag::Tridiagonalisation::new(faer_ref(a));
    top_of_tridiagonalisation(&t, k)
}

/// The eigenpairs of the symmetric `a` (only the lower triangle is read)
/// with eigenvalues above `threshold`, and below them the next
/// `extra(above)` (fewer where `a` has fewer), ascending: what a positive
/// part `[A]_+` needs (`threshold = 0`), plus a buffer of the next
/// directions. The number above is the Sturm count of the tridiagonal `T`
/// at `threshold` (exact up to rounding: an eigenvalue within rounding of
/// the threshold may fall on either side, and the caller filters by value);
/// the pairs come from the top-`k` tridiagonal solver of
/// [`symmetric_eigen_largest`](super::symmetric_eigen_largest), so
/// a low-rank positive part of a large matrix costs the tridiagonalisation
/// and `O(n^2 k)`, not the `2 n^3` of all eigenvectors (BENCHMARKS.md).
/// From `n / 2` wanted pairs, divide and conquer on all of `T`.
///
/// Errors: as [`symmetric_eigen`], and [`Error::InvalidParameter`]
/// for a non-finite `threshold`.
pub fn symmetric_eigen_above(a: &DMatrix<f64>, threshold: f64, extra: impl Fn(usize) -> usize) -> Result<SymmetricEigen> {
    check_matrix("symmetric matrix", a)?;
    check_dim("symmetric matrix must be square", a.nrows(), a.ncols())?;
    if !threshold.is_finite() {
        return Err(Error::InvalidParameter { name: "threshold", reason: format!("must be finite, got {threshold}") });
    }
    let n = a.nrows();
    let t = tridiag::Tridiagonalisation::new(faer_ref(a));
    let above = tridiag::count_above(&t.diag, &t.offdiag, threshold / t.scale);
    let k = above.saturating_add(extra(above)).min(n);
    if k == 0 {
        return Ok(SymmetricEigen { eigenvalues: DVector::zeros(0), eigenvectors: DMatrix::zeros(n, 0) });
    }
    Ok(top_of_tridiagonalisation(&t, k)?.0)
}

/// The `k` largest pairs of `A = scale Q T Q^T` from its tridiagonalisation
/// `t` (see [`symmetric_eigen_top_by_tridiagonal`]), and `max |lambda|`.
fn top_of_tridiagonalisation(t: &tridiag::Tridiagonalisation, k: usize) -> Result<(SymmetricEigen, f64)> {
    let n = t.diag.len();
    // Bisection and inverse iteration cost O(n k) and O(n k^2) within
    // clusters: for half of the spectrum or more, divide and conquer.
    let found = if 2 * k <= n { tridiag::tridiagonal_top_k(&t.diag, &t.offdiag, k) } else { None };
    let (values, mut u, spectral_norm) = match found {
        Some((values, u, norm)) => (values.iter().map(|v| v * t.scale).collect::<Vec<f64>>(), u, norm * t.scale),
        None => {
            let (values, u_t) = solve_tridiagonal(t, true)?;
            let u_t = u_t.expect("vectors were asked for");
            let norm = values.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            (values[n - k..].to_vec(), u_t.as_ref().subcols(n - k, k).to_owned(), norm)
        }
    };
    t.apply_q(u.as_mut(), Par::rayon(0));
    clear_upper_simd_state(true);
    let eigenvalues = DVector::from_vec(values);
    let eigenvectors = DMatrix::from_fn(n, k, |i, j| u[(i, j)]);
    finite_vector("eigenvalues", eigenvalues.clone())?;
    Ok((SymmetricEigen { eigenvalues, eigenvectors }, spectral_norm))
}

/// faer's divide and conquer (or, without vectors, QR iteration) on the
/// tridiagonal of `t`: eigenvalues of `a` ascending and, if asked, the
/// eigenvectors of `T`.
fn solve_tridiagonal(t: &tridiag::Tridiagonalisation, vectors: bool) -> Result<(Vec<f64>, Option<faer::Mat<f64>>)> {
    use faer::dyn_stack::{MemBuffer, MemStack};
    use faer::linalg::evd::{self, ComputeEigenvectors, SelfAdjointEvdParams};
    use faer::{Auto, Spec};
    let n = t.diag.len();
    let d = faer::Col::<f64>::from_fn(n, |i| t.diag[i]);
    let e = faer::Col::<f64>::from_fn(n, |i| if i + 1 < n { t.offdiag[i] } else { 0.0 });
    let mut s = faer::Col::<f64>::zeros(n);
    let mut u = if vectors { Some(faer::Mat::<f64>::zeros(n, n)) } else { None };
    let par = Par::rayon(0);
    let params = <SelfAdjointEvdParams as Auto<f64>>::auto();
    let want = if vectors { ComputeEigenvectors::Yes } else { ComputeEigenvectors::No };
    let mut mem = MemBuffer::new(evd::self_adjoint_evd_scratch::<f64>(n, want, par, Spec::new(params)));
    evd::tridiagonal_self_adjoint_evd(
        d.as_diagonal(),
        e.as_diagonal(),
        s.as_diagonal_mut(),
        u.as_mut().map(|u| u.as_mut()),
        par,
        MemStack::new(&mut mem),
        Spec::new(params),
    )
    .map_err(|e| Error::InvalidParameter { name: "matrix", reason: format!("eigendecomposition failed: {e:?}") })?;
    clear_upper_simd_state(true);
    let mut values: Vec<f64> = (0..n).map(|i| s[i] * t.scale).collect();
    if !vectors {
        // With vectors faer sorts pairs; the QR iteration alone is sorted here.
        values.sort_by(f64::total_cmp);
    }
    Ok((values, u))
}

/// The tridiagonal form `T = Q^T A Q` of the symmetric `a` (only its lower
/// triangle is read) by the blocked reduction of [`symmetric_eigen`]:
/// `(diagonal, subdiagonal)` of `T`. For benchmarks of the reduction alone
/// (`eigen_params phases`); input checks as [`symmetric_eigen`].
#[doc(hidden)]
pub fn symmetric_tridiagonal(a: &DMatrix<f64>) -> Result<(Vec<f64>, Vec<f64>)> {
    check_matrix("symmetric matrix", a)?;
    check_dim("symmetric matrix must be square", a.nrows(), a.ncols())?;
    let t = tridiag::Tridiagonalisation::new(faer_ref(a));
    clear_upper_simd_state(true);
    Ok((t.diag.iter().map(|v| v * t.scale).collect(), t.offdiag.iter().map(|v| v * t.scale).collect()))
}

/// faer's own self-adjoint eigendecomposition (unblocked
/// tridiagonalisation): [`symmetric_eigen`] below
/// [`BLOCKED_TRIDIAGONALISATION_FROM`], and the reference the blocked path
/// is tested and benchmarked against.
#[doc(hidden)]
pub fn symmetric_eigen_faer(a: &DMatrix<f64>) -> Result<SymmetricEigen> {
    check_matrix("symmetric matrix", a)?;
    check_dim("symmetric matrix must be square", a.nrows(), a.ncols())?;
    let n = a.nrows();
    let evd = faer_ref(a)
        .self_adjoint_eigen(Side::Lower)
        .map_err(|e| Error::InvalidParameter { name: "matrix", reason: format!("eigendecomposition failed: {e:?}") })?;
    clear_upper_simd_state(true);
    let s = evd.S();
    let u = evd.U();
    let eigenvalues = DVector::from_fn(n, |i, _| s[i]);
    let eigenvectors = DMatrix::from_fn(n, n, |i, j| u[(i, j)]);
    Ok(SymmetricEigen { eigenvalues, eigenvectors })
}

/// Eigenvalues only of a symmetric matrix (lower triangle read), ascending:
/// below order 800 (`BLOCKED_TRIDIAGONALISATION_FROM`) faer's solver
/// (its tridiagonalisation and QR iteration); from there the blocked
/// tridiagonalisation of [`symmetric_eigen`] and the root-free QR
/// iteration on `T` (LAPACK's `dsterf`, `linalg/tridiag.rs`), with faer's
/// QR iteration where that does not converge.
pub fn symmetric_eigenvalues(a: &DMatrix<f64>) -> Result<DVector<f64>> {
    if a.nrows() >= BLOCKED_TRIDIAGONALISATION_FROM {
        symmetric_eigenvalues_blocked(a)
    } else {
        symmetric_eigenvalues_faer(a)
    }
}

pub(super) fn symmetric_eigenvalues_blocked(a: &DMatrix<f64>) -> Result<DVector<f64>> {
    check_matrix("symmetric matrix", a)?;
    check_dim("symmetric matrix must be square", a.nrows(), a.ncols())?;
    let t = tridiag::Tridiagonalisation::new(faer_ref(a));
    clear_upper_simd_state(true);
    let values = match tridiag::tridiagonal_eigenvalues(&t.diag, &t.offdiag) {
        Some(values) => values.iter().map(|v| v * t.scale).collect(),
        // Not converged (LAPACK's sweep limit): faer's QR iteration.
        None => solve_tridiagonal(&t, false)?.0,
    };
    finite_vector("eigenvalues", DVector::from_vec(values))
}

pub(super) fn symmetric_eigenvalues_faer(a: &DMatrix<f64>) -> Result<DVector<f64>> {
    check_matrix("symmetric matrix", a)?;
    check_dim("symmetric matrix must be square", a.nrows(), a.ncols())?;
    let vals = faer_ref(a)
        .self_adjoint_eigenvalues(Side::Lower)
        .map_err(|e| Error::InvalidParameter { name: "matrix", reason: format!("eigendecomposition failed: {e:?}") })?;
    clear_upper_simd_state(true);
    Ok(DVector::from_vec(vals))
}
