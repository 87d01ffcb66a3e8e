//! The positive part `[M]_+` of a symmetric matrix, which is all the dual of
//! Eq. 10-11 needs from `M = -P diag(alpha) P^T - mu W - lambda_1 I`: the
//! gradient is `-(p_i^T [M]_+ p_i)_i / lambda_2` and the smooth part
//! `||[M]_+||_F^2 / (2 lambda_2)`. Only the eigenpairs of `M` above 0 are needed,
//! and `M` changes little between FISTA iterations, so a **warm-started
//! partial eigensolver** replaces the full eigendecomposition where it can
//! prove its answer:
//!
//! 1. **Rayleigh-Ritz** on the previous call's Ritz basis `Q` (the positive
//!    eigenvectors plus a buffer of the next ones): `Theta, X` from
//!    `Q^T M Q`, residual `R = M X - X Theta`.
//! 2. While the residual of the positive Ritz pairs is above the tolerance,
//!    the basis is **expanded** by the orthonormalised residuals of the
//!    leading `b` Ritz vectors (a block Krylov step; the basis grows up to `4b`
//!    vectors, then restarts thickly to the leading Ritz vectors), at most
//!    [`MAX_EXPANSIONS`] times; it gives up early when the observed rate of
//!    decrease of the residual cannot reach the tolerance in the steps left.
//! 3. **Certificate.** With `X_+` the Ritz vectors of positive Ritz values and
//!    `C` the compression of `M` to the orthogonal complement of `X_+`, the
//!    Cholesky factorisation of
//!    `G = -(I - X_+ X_+^T) M (I - X_+ X_+^T) + s X_+ X_+^T + tau I` (`s > 0`)
//!    exists iff `lambda_max(C) < tau`: no other eigenvalue of `M` is above `tau`.
//!    Then, in the basis `[X_+, X_perp]`, `M` differs from the block-diagonal
//!    `M_0 = X_+ Theta_+ X_+^T + X_perp C X_perp^T` only by the off-diagonal
//!    blocks `X_perp^T R_+` (Rayleigh-Ritz makes `R_+` orthogonal to `X_+`), and
//!    `[M_0]_+ = X_+ Theta_+ X_+^T + X_perp [C]_+ X_perp^T`. The projection onto
//!    the PSD cone is non-expansive in the Frobenius norm, hence the
//!    **rigorous bound**
//!    `||[M]_+ - X_+ Theta_+ X_+^T||_F <= sqrt(2) ||R_+||_F + tau sqrt(r)`,
//!    which is required to be at most `tolerance * ||M||_F`.
//! 4. Whenever the bound or the certificate fails (first call, a new positive
//!    direction appearing outside the basis, buffer exhausted, slow
//!    convergence), the **full eigendecomposition** is used and the basis reset.
//!
//! Cost of the partial path for `b` basis vectors: `O(r^2 b)` products and a
//! Cholesky factorisation (`r^3/3` flops) instead of the `O(r^3)` full
//! symmetric eigendecomposition with vectors (about 10x the flops of Cholesky,
//! and much less parallel).
//!
//! Measured, the fresh route is cheaper:
//! the tridiagonalisation (`4/3 r^3` flops, on a thread team at memory
//! speed) then only the `k + 1` wanted pairs by bisection and inverse
//! iteration (`O(r k)`) and their back-transformation (`O(r^2 k)`), about
//! 0.06 s at order 1000 against 0.16 s per partial call. The estimators
//! therefore use [`PositivePartSolver::full_only`]; the partial path stays
//! available ([`PositivePartSolver::new`], `DensityParams::partial_eigensolver`).
//!
//! A third route needs no eigendecomposition: [`PositivePartSolver::polar`]
//! computes `[M]_+` as a dense matrix by a polynomial sign iteration, matrix
//! products only ([`super::polar`]), to the same relative tolerance by an
//! a-priori bound; [`PositivePartSolver::compute_part`] answers with either
//! form ([`PartMatrix`]).

use faer::Side;
use nalgebra::DMatrix;

use crate::linalg;

use crate::error::Error;

use super::polar::{self, PolarPart};

/// Expansion steps of the partial solver before it falls back to the full one.
pub const MAX_EXPANSIONS: usize = 10;

/// Relative accuracy of `[M]_+` (Frobenius, relative to `||M||_F`) that the
/// partial solver must certify, and the relative margin `tau / ||M||_F` of the certificate.
pub const DEFAULT_TOLERANCE: f64 = 1e-9;

/// `[M]_+` as its eigenpairs above 0 (`values > 0`, orthonormal `vectors` as columns).
#[derive(Debug, Clone)]
pub struct PositivePart {
    /// Eigenvalues above 0, descending.
    pub values: Vec<f64>,
    /// Orthonormal eigenvectors (r x k), in the order of `values`.
    pub vectors: DMatrix<f64>,
}

impl PositivePart {
    /// `[M]_+ = U diag(values) U^T` as a dense matrix.
    pub fn to_matrix(&self) -> DMatrix<f64> {
        let r = self.vectors.nrows();
        if self.values.is_empty() {
            return DMatrix::zeros(r, r);
        }
        let mut scaled = self.vectors.clone();
        for (a, mut col) in scaled.column_iter_mut().enumerate() {
            col *= self.values[a];
        }
        linalg::matmul_nt(&scaled, &self.vectors)
    }
}

/// `[M]_+` as the dual engine uses it: eigenpairs, or a dense matrix from
/// the polar route.
#[derive(Debug, Clone)]
pub enum PartMatrix {
    /// The eigenpairs above 0 (the eigendecomposition routes).
    Eigen(PositivePart),
    /// A dense matrix within `bound` of `[M]_+` in the Frobenius norm
    /// ([`super::polar`]).
    Dense(PolarPart<DMatrix<f64>>),
}

impl PartMatrix {
    /// `[M]_+` as a dense matrix.
    pub fn to_matrix(&self) -> DMatrix<f64> {
        match self {
            PartMatrix::Eigen(pp) => pp.to_matrix(),
            PartMatrix::Dense(d) => d.matrix.clone(),
        }
    }

    /// `tr [M]_+`.
    pub fn trace(&self) -> f64 {
        match self {
            PartMatrix::Eigen(pp) => pp.values.iter().sum(),
            PartMatrix::Dense(d) => d.trace,
        }
    }

    /// `||[M]_+||_F^2`.
    pub fn frobenius_squared(&self) -> f64 {
        match self {
            PartMatrix::Eigen(pp) => pp.values.iter().map(|v| v * v).sum(),
            PartMatrix::Dense(d) => d.frobenius_squared,
        }
    }

    /// True when `[M]_+` is known to be 0 (no positive eigenvalue, or a zero matrix).
    pub fn is_zero(&self) -> bool {
        match self {
            PartMatrix::Eigen(pp) => pp.values.is_empty(),
            PartMatrix::Dense(d) => d.frobenius_squared == 0.0,
        }
    }
}

/// How a call of [`PositivePartSolver::compute`] was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Full symmetric eigendecomposition.
    Full,
    /// Certified partial solve after this many basis expansions.
    Partial {
        /// Expansion steps used (0: Rayleigh-Ritz on the warm basis sufficed).
        expansions: usize,
    },
    /// The polynomial sign iteration ([`super::polar`]).
    Polar {
        /// Matrix products of order `r` computed.
        products: usize,
    },
}

/// Counters of a [`PositivePartSolver`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PositivePartStats {
    /// Calls answered by the full eigendecomposition.
    pub full: usize,
    /// Calls answered by the certified partial solver.
    pub partial: usize,
    /// Partial attempts that ended in the fallback (included in `full`).
    pub fallbacks: usize,
    /// Calls answered by the polar route (matrix products only).
    #[cfg_attr(feature = "serde", serde(default))]
    pub polar: usize,
}

/// Warm-started, certified computation of `[M]_+` (module docs).
#[derive(Debug, Clone)]
pub struct PositivePartSolver {
    basis: Option<DMatrix<f64>>,
    tolerance: f64,
    enabled: bool,
    polar: bool,
    stats: PositivePartStats,
}

impl Default for PositivePartSolver {
    fn default() -> Self {
        Self::new()
    }
}

/// Buffer vectors kept beyond the `k` positive ones.
fn buffer_size(k: usize) -> usize {
    (k / 4).max(12)
}

impl PositivePartSolver {
    /// A solver with the default tolerance, warm-started partial path
    /// enabled (not the estimators' default, see [`PositivePartSolver::full_only`]).
    pub fn new() -> Self {
        PositivePartSolver { basis: None, tolerance: DEFAULT_TOLERANCE, enabled: true, polar: false, stats: PositivePartStats::default() }
    }

    /// A solver that computes `[M]_+` without an eigendecomposition, as a
    /// dense matrix, by the polynomial sign iteration of [`super::polar`]
    /// (matrix products only) to the relative Frobenius tolerance (default
    /// [`DEFAULT_TOLERANCE`]) by its a-priori bound. Answers through
    /// [`PositivePartSolver::compute_part`]; [`PositivePartSolver::compute`],
    /// which returns eigenpairs, takes the full route.
    pub fn polar() -> Self {
        PositivePartSolver { enabled: false, polar: true, ..Self::new() }
    }

    /// A solver that computes every `[M]_+` afresh: the eigenpairs above 0
    /// (and the next one) from a tridiagonalisation of `M`
    /// ([`linalg::symmetric_eigen_above`]), with no warm start. The default
    /// of every PSD estimator: on the `psd_speed` problems it spends less
    /// time in eigensolvers than the partial path (BENCHMARKS.md).
    pub fn full_only() -> Self {
        PositivePartSolver { enabled: false, ..Self::new() }
    }

    /// Relative accuracy certified by the partial path, or bounded a priori
    /// by the polar route (see [`DEFAULT_TOLERANCE`]).
    pub fn with_tolerance(mut self, tolerance: f64) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// Counters so far.
    pub fn stats(&self) -> PositivePartStats {
        self.stats
    }

    /// Replaces the warm basis (orthonormal columns are not required: it is
    /// orthonormalised on use). A basis that does not fit the next matrix
    /// (rows other than its order `r`, no columns, more than `r / 2` columns,
    /// or non-finite entries) is not used; [`PositivePartSolver::try_set_basis`]
    /// reports such a basis as an error instead.
    pub fn set_basis(&mut self, basis: DMatrix<f64>) {
        self.basis = Some(basis);
    }

    /// [`PositivePartSolver::set_basis`] for matrices of order `order`, checked:
    /// the basis must be `order x k` with `1 <= k <= order / 2` and finite.
    ///
    /// Errors: [`Error::InvalidParameter`] naming the size or entry at fault.
    pub fn try_set_basis(&mut self, basis: DMatrix<f64>, order: usize) -> Result<(), Error> {
        if basis.nrows() != order {
            return Err(Error::InvalidParameter { name: "basis", reason: format!("has {} rows, the matrix has order {order}", basis.nrows()) });
        }
        if basis.ncols() == 0 || 2 * basis.ncols() > order {
            return Err(Error::InvalidParameter { name: "basis", reason: format!("needs 1..={} columns for order {order}, has {}", order / 2, basis.ncols()) });
        }
        crate::linalg::check_finite("basis", &basis)?;
        self.basis = Some(basis);
        Ok(())
    }

    /// `[M]_+` of the symmetric `m` in the form of the solver's route:
    /// eigenpairs ([`PositivePartSolver::compute`]) or, for
    /// [`PositivePartSolver::polar`], a dense matrix.
    ///
    /// Errors: those of [`PositivePartSolver::compute`] and of
    /// [`polar::positive_part_polar_host`].
    pub fn compute_part(&mut self, m: &DMatrix<f64>) -> Result<(PartMatrix, Route), Error> {
        if self.polar {
            let part = polar::positive_part_polar_host(m, self.tolerance)?;
            self.stats.polar += 1;
            let products = part.products;
            return Ok((PartMatrix::Dense(part), Route::Polar { products }));
        }
        let (pp, route) = self.compute(m)?;
        Ok((PartMatrix::Eigen(pp), route))
    }

    /// `[M]_+` of the symmetric `m` (lower triangle and upper triangle must agree)
    /// and how it was computed.
    pub fn compute(&mut self, m: &DMatrix<f64>) -> Result<(PositivePart, Route), Error> {
        let r = m.nrows();
        if self.enabled {
            if let Some(q) = self.basis.take() {
                if q.nrows() == r && q.ncols() > 0 && 2 * q.ncols() <= r && q.iter().all(|v| v.is_finite()) {
                    if let Some((pp, basis, expansions)) = self.partial(m, &q)? {
                        self.basis = Some(basis);
                        self.stats.partial += 1;
                        return Ok((pp, Route::Partial { expansions }));
                    }
                    self.stats.fallbacks += 1;
                }
            }
        }
        let pp = self.full(m)?;
        self.stats.full += 1;
        Ok((pp, Route::Full))
    }

    /// `[M]_+` from the eigenpairs above 0 and the next one, or with the
    /// partial path a buffer of the next ones for its next basis
    /// ([`linalg::symmetric_eigen_above`]: the tridiagonalisation, then only
    /// the wanted pairs), not all `r` eigenvectors.
    fn full(&mut self, m: &DMatrix<f64>) -> Result<PositivePart, Error> {
        let r = m.nrows();
        // The buffer serves only as the partial path's next basis; without
        // that path one more pair suffices (an eigenvalue within rounding of
        // 0 may fall on either side of the Sturm count, and is filtered by
        // value below).
        let extra: fn(usize) -> usize = if self.enabled { buffer_size } else { |_| 1 };
        let eig = linalg::symmetric_eigen_above(m, 0.0, extra)?;
        // Ascending: the positive ones are at the end.
        let found = eig.eigenvalues.len();
        let order: Vec<usize> = (0..found).rev().collect();
        let k = order.iter().take_while(|&&i| eig.eigenvalues[i] > 0.0).count();
        let b = (k + buffer_size(k)).min(found);
        if self.enabled {
            self.basis = Some(DMatrix::from_fn(r, b, |i, a| eig.eigenvectors[(i, order[a])]));
        }
        Ok(PositivePart {
            values: order[..k].iter().map(|&i| eig.eigenvalues[i]).collect(),
            vectors: DMatrix::from_fn(r, k, |i, a| eig.eigenvectors[(i, order[a])]),
        })
    }

    /// The partial path; `None` when it cannot certify (caller falls back).
    #[allow(clippy::type_complexity)]
    fn partial(&self, m: &DMatrix<f64>, q0: &DMatrix<f64>) -> Result<Option<(PositivePart, DMatrix<f64>, usize)>, Error> {
        let r = m.nrows();
        let norm_m = m.norm();
        if !(norm_m > 0.0) || !norm_m.is_finite() {
            return Ok(None);
        }
        let b = q0.ncols();
        let Some(q) = orthonormalise(q0, None) else { return Ok(None) };
        let mq = linalg::matmul(m, &q);
        let (mut x, mut mx, mut theta) = rayleigh_ritz(&q, &mq, b)?;
        let allowed = self.tolerance * norm_m;
        let tau = self.tolerance * norm_m / (4.0 * (r as f64).sqrt());
        // The Krylov basis grows by one block per expansion up to `cap` vectors
        // (thick restart to the leading Ritz vectors beyond).
        let cap = (4 * b).min(r / 2).max(b);
        let mut expansions = 0;
        let mut last_residual: Option<f64> = None;
        loop {
            let k = theta.iter().take_while(|&&t| t > 0.0).count();
            if k + buffer_size(k) / 2 > b {
                // Buffer exhausted: more positive directions may lie outside.
                return Ok(None);
            }
            let lead = b.min(x.ncols());
            let residual = mx.columns(0, lead) - scale_columns(&x.columns(0, lead).into_owned(), &theta[..lead]);
            let res_pos = residual.columns(0, k).norm();
            if std::f64::consts::SQRT_2 * res_pos + tau * (r as f64).sqrt() <= allowed {
                if !certify(m, &x.columns(0, k).into_owned(), &mx.columns(0, k).into_owned(), &residual.columns(0, k).into_owned(), norm_m, tau) {
                    return Ok(None);
                }
                let pp = PositivePart { values: theta[..k].to_vec(), vectors: x.columns(0, k).into_owned() };
                // Next basis: the positive Ritz vectors and a buffer of the next ones.
                let keep = (k + buffer_size(k)).min(x.ncols());
                return Ok(Some((pp, x.columns(0, keep).into_owned(), expansions)));
            }
            if expansions == MAX_EXPANSIONS {
                return Ok(None);
            }
            // Give up early when the observed rate of decrease of the residual
            // cannot reach the tolerance within the remaining expansions.
            if let Some(previous) = last_residual {
                let rate: f64 = res_pos / previous;
                let needed = std::f64::consts::SQRT_2 * res_pos / (allowed - tau * (r as f64).sqrt()).max(f64::MIN_POSITIVE);
                if !(rate < 1.0) || needed.ln() / -rate.ln() > (MAX_EXPANSIONS - expansions) as f64 {
                    return Ok(None);
                }
            }
            last_residual = Some(res_pos);
            expansions += 1;
            // Expand by the residual directions of the leading block (block Krylov step).
            let Some(z) = orthonormalise(&residual, Some(&x)) else { return Ok(None) };
            let mz = linalg::matmul(m, &z);
            let mut s = DMatrix::zeros(r, x.ncols() + z.ncols());
            s.columns_mut(0, x.ncols()).copy_from(&x);
            s.columns_mut(x.ncols(), z.ncols()).copy_from(&z);
            let mut ms = DMatrix::zeros(r, s.ncols());
            ms.columns_mut(0, x.ncols()).copy_from(&mx);
            ms.columns_mut(x.ncols(), z.ncols()).copy_from(&mz);
            (x, mx, theta) = rayleigh_ritz(&s, &ms, cap)?;
        }
    }
}

/// `v` with column `a` multiplied by `s[a]`.
fn scale_columns(v: &DMatrix<f64>, s: &[f64]) -> DMatrix<f64> {
    let mut out = v.clone();
    for (a, mut col) in out.column_iter_mut().enumerate() {
        col *= s[a];
    }
    out
}

/// Rayleigh-Ritz on the orthonormal basis `s` with `ms = M s`: the `keep`
/// leading Ritz vectors `X = s V`, `M X = ms V` and the Ritz values, descending.
/// `X`, `M X` and the Ritz values of [`rayleigh_ritz`].
type RitzPairs = (DMatrix<f64>, DMatrix<f64>, Vec<f64>);

fn rayleigh_ritz(s: &DMatrix<f64>, ms: &DMatrix<f64>, keep: usize) -> Result<RitzPairs, Error> {
    let h = linalg::matmul_tn(s, ms);
    let h = (&h + h.transpose()) * 0.5;
    let eig = linalg::symmetric_eigen(&h)?;
    let c = h.nrows();
    let keep = keep.min(c);
    let v = DMatrix::from_fn(c, keep, |i, a| eig.eigenvectors[(i, c - 1 - a)]);
    let theta = (0..keep).map(|a| eig.eigenvalues[c - 1 - a]).collect();
    Ok((linalg::matmul(s, &v), linalg::matmul(ms, &v), theta))
}

/// Orthonormal basis of the span of `y` (after projecting out the orthonormal
/// columns of `against`, twice), by two passes of the eigendecomposition of
/// the Gram matrix (SVQB), dropping directions below `1e-10` of the largest.
/// `None` if nothing is left.
fn orthonormalise(y: &DMatrix<f64>, against: Option<&DMatrix<f64>>) -> Option<DMatrix<f64>> {
    let mut z = y.clone();
    for _ in 0..2 {
        if let Some(x) = against {
            let c = linalg::matmul_tn(x, &z);
            linalg::matmul_acc(&mut z, &(-x), &c);
        }
        let g = linalg::matmul_tn(&z, &z);
        let eig = linalg::symmetric_eigen(&g).ok()?;
        let top = eig.eigenvalues.max();
        if !(top > 0.0) || !top.is_finite() {
            return None;
        }
        let kept: Vec<usize> = (0..g.nrows()).filter(|&i| eig.eigenvalues[i] > 1e-20 * top).collect();
        let v = DMatrix::from_fn(g.nrows(), kept.len(), |i, a| eig.eigenvectors[(i, kept[a])] / eig.eigenvalues[kept[a]].sqrt());
        z = linalg::matmul(&z, &v);
    }
    (z.ncols() > 0).then_some(z)
}

/// Cholesky certificate that the compression of `M` to the orthogonal
/// complement of `x` (orthonormal, `mx = M x`, `residual = M x - x Theta`)
/// has no eigenvalue above `tau` (module docs, step 3).
fn certify(m: &DMatrix<f64>, x: &DMatrix<f64>, mx: &DMatrix<f64>, residual: &DMatrix<f64>, norm_m: f64, tau: f64) -> bool {
    // (I - XX^T) M (I - XX^T) = M - X (MX)^T - R X^T, so
    // G = -M + X (MX + s X)^T + R X^T + tau I.
    let mut g = -m;
    if x.ncols() > 0 {
        let shifted = mx + x * norm_m;
        let xt = x.transpose();
        linalg::matmul_acc(&mut g, x, &shifted.transpose());
        linalg::matmul_acc(&mut g, residual, &xt);
    }
    for i in 0..g.nrows() {
        g[(i, i)] += tau;
    }
    let ok = linalg::faer_ref(&g).llt(Side::Lower).is_ok();
    linalg::clear_upper_simd_state(true);
    ok
}

/// `[M]_+` computed afresh ([`PositivePartSolver::full_only`]; the
/// reference the partial path is tested against).
///
/// Errors: empty or non-finite `m`; `Compute(Overflow)` when the result
/// does not fit `f64` (entries of `m` near the top of its range).
pub fn positive_part_full(m: &DMatrix<f64>) -> Result<PositivePart, Error> {
    crate::linalg::check_matrix("m", m)?;
    let pp = PositivePartSolver::full_only().full(m)?;
    crate::linalg::check_overflow("positive part", &pp.to_matrix())?;
    Ok(pp)
}
