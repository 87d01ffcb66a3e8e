//! The positive part `[M]_+` of a symmetric matrix, which is all the dual of
//! Eq. 10-11 needs from `M = -P diag(alpha) P^T - mu W - lambda_1 I`: the
//! gradient is `-(p_i^T [M]_+ p_i)_i / lambda_2` and the smooth part
//! `||[M]_+||_F^2 / (2 lambda_2)`. Only the eigenpairs of `M` above 0 are needed,
//! and `M` changes little between FISTA iterations, so a **warm-started
//! partial eigensolver** replaces the full eigendecomposition where it can
//! prove its answer:
//!
//! 1. **Block Lanczos from the warm basis**: the previous call's Ritz basis
//!    `Q` (the positive eigenvectors plus a buffer of the next ones, `b`
//!    columns) starts the thick-restart block Lanczos of
//!    [`linalg::symmetric_operator_largest_from`], the crate's one Krylov
//!    eigensolver: Rayleigh-Ritz on `span(Q)` first, then blocks of `b`
//!    Krylov vectors up to `4 b`, restarting to the leading Ritz vectors, at
//!    most [`MAX_RESTARTS`] restarts within its work budget. Only the Ritz
//!    pairs above 0 must converge. The true residual `R = M X - X Theta` of
//!    the positive pairs is then formed here.
//! 2. **Bound.** The residual must satisfy the bound of step 3.
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
//! The fresh route is cheaper on the problems of BENCHMARKS.md: the
//! tridiagonalisation (`4/3 r^3` flops, on a thread team at memory speed)
//! then only the `k + 1` wanted pairs by bisection and inverse iteration
//! (`O(r k)`) and their back-transformation (`O(r^2 k)`). The estimators
//! therefore use [`PositivePartSolver::full_only`]; the partial path stays
//! available ([`PositivePartSolver::new`], `DensityParams::positive_part`).
//!
//! A third route needs no eigendecomposition: [`PositivePartSolver::polar`]
//! computes `[M]_+` as a dense matrix by a polynomial sign iteration, matrix
//! products only ([`super::polar`]), to the same relative tolerance by an
//! a-priori bound; [`PositivePartSolver::compute_part`] answers with either
//! form ([`PartMatrix`]).

use faer::Side;
use nalgebra::DMatrix;

use crate::device::Device;
use crate::gpu::cost::CardProfile;
use crate::gpu::ShapeKind;
use crate::precision::Precision;
use crate::linalg;
use crate::resident::{DeviceMatrix, Workspace};

use crate::error::Error;

use super::polar::{self, PolarPart};

/// Restarts of the partial path's block Lanczos before it falls back to the
/// full eigendecomposition.
pub const MAX_RESTARTS: usize = 10;

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
/// the polar route, on the host or resident on a device.
#[derive(Debug, Clone)]
pub enum PartMatrix {
    /// The eigenpairs above 0 (the eigendecomposition routes).
    Eigen(PositivePart),
    /// A dense matrix within `bound` of `[M]_+` in the Frobenius norm
    /// ([`super::polar`]).
    Dense(PolarPart<DMatrix<f64>>),
    /// The same as [`PartMatrix::Dense`], resident on a device (the polar
    /// route on a resident `M`).
    Resident(PolarPart<DeviceMatrix>),
}

impl PartMatrix {
    /// `[M]_+` as a dense host matrix (`device` holds a resident part).
    ///
    /// Errors: those of [`Device::to_host`] for a resident part.
    pub fn to_host(&self, device: &Device) -> Result<DMatrix<f64>, Error> {
        match self {
            PartMatrix::Eigen(pp) => Ok(pp.to_matrix()),
            PartMatrix::Dense(d) => Ok(d.matrix.clone()),
            PartMatrix::Resident(d) => device.to_host(&d.matrix),
        }
    }

    /// `tr [M]_+`.
    pub fn trace(&self) -> f64 {
        match self {
            PartMatrix::Eigen(pp) => pp.values.iter().sum(),
            PartMatrix::Dense(d) => d.trace,
            PartMatrix::Resident(d) => d.trace,
        }
    }

    /// `||[M]_+||_F^2`.
    pub fn frobenius_squared(&self) -> f64 {
        match self {
            PartMatrix::Eigen(pp) => pp.values.iter().map(|v| v * v).sum(),
            PartMatrix::Dense(d) => d.frobenius_squared,
            PartMatrix::Resident(d) => d.frobenius_squared,
        }
    }

    /// The bound on `||[M]_+ - P||_F` of a dense part `P` (0 for eigenpairs,
    /// which the engine takes as exact).
    pub fn bound(&self) -> f64 {
        match self {
            PartMatrix::Eigen(_) => 0.0,
            PartMatrix::Dense(d) => d.bound,
            PartMatrix::Resident(d) => d.bound,
        }
    }

    /// True when `[M]_+` is known to be 0 (no positive eigenvalue, or a zero matrix).
    pub fn is_zero(&self) -> bool {
        match self {
            PartMatrix::Eigen(pp) => pp.values.is_empty(),
            PartMatrix::Dense(d) => d.frobenius_squared == 0.0,
            PartMatrix::Resident(d) => d.frobenius_squared == 0.0,
        }
    }
}

/// Which computation of `[M]_+` a PSD estimator's dual uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum PositivePartRoute {
    /// [`PositivePartRoute::Polar`] where the features are resident on a
    /// device (a GPU with `f64`) and the cost model of that device's card
    /// predicts the polar route cheaper than the host's eigendecomposition
    /// ([`polar_is_cheaper`]); [`PositivePartRoute::Eigen`] otherwise (on
    /// the host always).
    #[default]
    Auto,
    /// The eigenpairs above 0 of a fresh tridiagonalisation
    /// ([`PositivePartSolver::full_only`]).
    Eigen,
    /// The certified, warm-started partial eigensolver
    /// ([`PositivePartSolver::new`]).
    Partial,
    /// The polynomial sign iteration, matrix products only
    /// ([`PositivePartSolver::polar`]).
    Polar,
}

/// Seconds per `r^3` of one host eigendecomposition of order `r` (the
/// tridiagonalisation and the wanted pairs of
/// [`PositivePartSolver::full_only`]) on the 16-core host of the H200 run:
/// `repro/results/h200-2026-12-04-methods.txt` logs 5.14 s of eigen over
/// the 26 iterations of the GPU density fit at `m = 1000`, `n = 10^5`
/// (5.09 s in the CPU fit), at 1.5 to 2 decompositions per iteration
/// (39 to 52): 0.10 to 0.13 s each at `r = 1000`, so `1e-10 r^3` s.
pub const HOST_EIGEN_SECONDS_PER_CUBE: f64 = 1e-10;

/// Flops of the polar route's sign iteration per `r^3` at the default
/// tolerance ([`super::polar`]).
pub const POLAR_FLOPS_PER_CUBE: f64 = 134.0;

/// Dispatches of one polar `[M]_+` on a device (its matrix products,
/// combinations and norms, [`super::polar`]).
pub const POLAR_DISPATCHES: f64 = 130.0;

/// Blocking waits of one polar `[M]_+` on a device (its norms and traces).
pub const POLAR_WAITS: f64 = 4.0;

/// The cost model's profile of the card behind `device` for the route of
/// [`PositivePartRoute::Auto`]: the preset whose name the adapter's name
/// carries (`H100`, `H200`; [`CardProfile::preset`]), else the H200's,
/// the card the cost model's efficiencies are fitted to (a software
/// adapter then takes the route an H200 would). `None` on the host.
pub fn card_profile(device: &Device) -> Option<CardProfile> {
    match device {
        Device::Cpu => None,
        Device::Gpu(ctx) => {
            let name = ctx.adapter().name.to_ascii_uppercase();
            Some(if name.contains("H100") { CardProfile::h100() } else { CardProfile::h200() })
        }
    }
}

/// Predicted seconds of one evaluation's `[M]_+` and model values on
/// `card` by the polar route and by the eigendecomposition route, for
/// `samples` training points `n` and features of order `r`: the polar
/// route computes the sign iteration (`134 r^3` flops,
/// [`POLAR_FLOPS_PER_CUBE`]) and the model values from a dense `[M]_+`
/// (`2 n r^2` flops) at the card's f64 product rate (`f64_flops` times the
/// product efficiency), with [`POLAR_DISPATCHES`] dispatches and
/// [`POLAR_WAITS`] waits; the eigendecomposition route reads `M` back
/// (`8 r^2` bytes over the host link, one wait) and decomposes it on the
/// host ([`HOST_EIGEN_SECONDS_PER_CUBE`] `r^3`); its model values
/// (`2 n r k` flops for `k` positive eigenvalues) are taken as free (`k`
/// small next to `r`), which only favours it. The weighted Gram that forms
/// `M` is the same on both routes and left out.
pub fn route_seconds(card: &CardProfile, samples: usize, order: usize) -> (f64, f64) {
    let (n, r) = (samples as f64, order as f64);
    let rate = card.peak(Precision::F64) * card.efficiency_of(ShapeKind::Product);
    let polar = if rate > 0.0 && rate.is_finite() {
        (2.0 * n * r * r + POLAR_FLOPS_PER_CUBE * r * r * r) / rate + POLAR_DISPATCHES * card.dispatch_overhead + POLAR_WAITS * card.wait_latency
    } else {
        f64::INFINITY
    };
    let eigen = HOST_EIGEN_SECONDS_PER_CUBE * r * r * r + 8.0 * r * r / card.link_bandwidth + card.wait_latency;
    (polar, eigen)
}

/// Whether [`PositivePartRoute::Auto`] takes the polar route for features
/// resident on `card`: [`route_seconds`] predicts it cheaper.
///
/// With the H200 profile (f64 products at 30 % of 33.5 TFLOP/s, `1.0e13`
/// flop/s; 5 us per dispatch, 50 us per wait, 50 GB/s) at `r = 1000`: the
/// polar route costs `(2 n 10^6 + 1.34e11) / 1.0e13 s + 0.85 ms`, the
/// eigendecomposition route `0.1 s + 0.2 ms`; the polar route is the
/// cheaper one below `n ~ 4.3e5` (`n < ~435 r` for large `r`): 34 ms against
/// 100 ms at `n = 10^5`, 213 ms against 100 ms at `n = 10^6` (there the
/// eigendecomposition route). Its fixed cost (`134 r^3` flops, 0.85 ms of
/// dispatches and waits) stays above the host's `1e-10 r^3` s below
/// `r ~ 220`, where the eigendecomposition route is taken at any `n`.
pub fn polar_is_cheaper(card: &CardProfile, samples: usize, order: usize) -> bool {
    let (polar, eigen) = route_seconds(card, samples, order);
    polar < eigen
}

impl PositivePartRoute {
    /// The solver of this route for `samples` training points with features
    /// of order `order`, resident on the device whose card profile is
    /// `card` ([`card_profile`]), or on the host (`None`).
    pub fn solver(self, card: Option<&CardProfile>, samples: usize, order: usize) -> PositivePartSolver {
        match self {
            PositivePartRoute::Auto if card.is_some_and(|card| polar_is_cheaper(card, samples, order)) => PositivePartSolver::polar(),
            PositivePartRoute::Auto | PositivePartRoute::Eigen => PositivePartSolver::full_only(),
            PositivePartRoute::Partial => PositivePartSolver::new(),
            PositivePartRoute::Polar => PositivePartSolver::polar(),
        }
    }
}

/// How a call of [`PositivePartSolver::compute`] was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Full symmetric eigendecomposition.
    Full,
    /// Certified partial solve by block Lanczos from the warm basis.
    Partial {
        /// Block products `M V` (1: Rayleigh-Ritz on the warm basis sufficed).
        block_products: usize,
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

/// Ritz pairs the partial path asks for from a basis of `b` columns: all
/// but half the smallest buffer, so that at least one of them must come out
/// non-positive for the answer to be used.
fn wanted(b: usize) -> usize {
    b.saturating_sub(buffer_size(0) / 2).max(1)
}

/// Whether a warm basis of `b` columns fits matrices of order `r`: the block
/// Lanczos keeps [`wanted`] vectors and adds blocks of `b`.
fn basis_fits(b: usize, r: usize) -> bool {
    b > 0 && b.checked_mul(2).and_then(|t| t.checked_add(wanted(b))).is_some_and(|need| need <= r)
}

/// Work budget of the partial path's block Lanczos, in block-product columns
/// as a multiple of the order (the full route costs about this much).
const WORK_RATIO: f64 = 10.0;

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
    /// (rows other than its order `r`, no columns, so many columns `b` that
    /// the block Lanczos has no room (`2 b + max(b - 6, 1) > r`), or
    /// non-finite entries) is not used; [`PositivePartSolver::try_set_basis`]
    /// reports such a basis as an error instead.
    pub fn set_basis(&mut self, basis: DMatrix<f64>) {
        self.basis = Some(basis);
    }

    /// [`PositivePartSolver::set_basis`] for matrices of order `order`, checked:
    /// the basis must be `order x b` with `b >= 1`, `2 b + max(b - 6, 1) <= order`, and finite.
    ///
    /// Errors: [`Error::InvalidParameter`] naming the size or entry at fault.
    pub fn try_set_basis(&mut self, basis: DMatrix<f64>, order: usize) -> Result<(), Error> {
        if basis.nrows() != order {
            return Err(Error::InvalidParameter { name: "basis", reason: format!("has {} rows, the matrix has order {order}", basis.nrows()) });
        }
        if !basis_fits(basis.ncols(), order) {
            return Err(Error::InvalidParameter { name: "basis", reason: format!("has {} columns; for order {order} it needs b >= 1 columns with 2 b + max(b - 6, 1) <= {order}", basis.ncols()) });
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

    /// Whether this solver takes the polar route ([`PositivePartSolver::polar`]).
    pub fn is_polar(&self) -> bool {
        self.polar
    }

    /// [`PositivePartSolver::compute_part`] for a symmetric `f64` matrix
    /// resident on the device of `workspace`. The polar route keeps `M` and
    /// `[M]_+` there (only norms and traces, `O(r)` numbers, come back),
    /// its operations recorded in `workspace` (its outputs from the
    /// workspace's pool, one submission per read-back; what is pending
    /// there is submitted first); the other routes bring `M` to the host
    /// first.
    ///
    /// Errors: those of [`PositivePartSolver::compute_part`] and of
    /// [`polar::positive_part_polar_resident`]; [`Error::IllConditioned`]
    /// when `||M||_F` is not finite (a product left the range of `f64`).
    pub(crate) fn compute_part_in(&mut self, workspace: &Workspace<'_>, m: &DeviceMatrix) -> Result<(PartMatrix, Route), Error> {
        let device = workspace.device();
        if !self.polar {
            workspace.flush()?;
            return self.compute_part(&device.to_host(m).map_err(|e| match e {
                Error::Overflow { .. } => Error::IllConditioned { what: "PSD dual", reason: "M = -P diag(d) P^T - mu W - lambda_1 I has a non-finite entry: the dual iterates left the range of f64".into() },
                e => e,
            })?);
        }
        let part = polar::positive_part_polar_in(workspace, m, self.tolerance).map_err(|e| match e {
            // The only argument error left: a non-finite ||M||_F.
            Error::InvalidParameter { name: "m", reason } => Error::IllConditioned { what: "PSD dual", reason: format!("{reason}, for M = -P diag(d) P^T - mu W - lambda_1 I: the dual iterates left the range of f64") },
            e => e,
        })?;
        self.stats.polar += 1;
        let products = part.products;
        Ok((PartMatrix::Resident(part), Route::Polar { products }))
    }

    /// `[M]_+` of the symmetric `m` (lower triangle and upper triangle must agree)
    /// and how it was computed.
    pub fn compute(&mut self, m: &DMatrix<f64>) -> Result<(PositivePart, Route), Error> {
        let r = m.nrows();
        if self.enabled {
            if let Some(q) = self.basis.take() {
                if q.nrows() == r && basis_fits(q.ncols(), r) && q.iter().all(|v| v.is_finite()) {
                    if let Some((pp, basis, block_products)) = self.partial(m, &q)? {
                        self.basis = Some(basis);
                        self.stats.partial += 1;
                        return Ok((pp, Route::Partial { block_products }));
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
    ///
    /// The block Lanczos of [`linalg::symmetric_operator_largest_from`]
    /// started from the warm basis `q0` (`b` columns) finds the
    /// [`wanted`] largest Ritz pairs, of which only those above 0 must
    /// converge, each to a residual of `tolerance / 2` relative to `||M||`.
    /// That is its stopping rule only: the bound and the certificate are
    /// evaluated here, on the true residuals.
    #[allow(clippy::type_complexity)]
    fn partial(&self, m: &DMatrix<f64>, q0: &DMatrix<f64>) -> Result<Option<(PositivePart, DMatrix<f64>, usize)>, Error> {
        let r = m.nrows();
        let norm_m = m.norm();
        if !(norm_m > 0.0) || !norm_m.is_finite() {
            return Ok(None);
        }
        let want = wanted(q0.ncols());
        let settings = linalg::TopEigenSettings { tolerance: self.tolerance / 2.0, max_restarts: MAX_RESTARTS, work_ratio: WORK_RATIO, ..linalg::TopEigenSettings::default() };
        let Some(found) = linalg::symmetric_operator_largest_from(r, want, linalg::DenseSymmetric(m), q0, 0.0, norm_m, &settings)? else { return Ok(None) };
        // Descending: the positive Ritz pairs first, then the buffer.
        let values: Vec<f64> = found.eigen.eigenvalues.iter().rev().copied().collect();
        let x = DMatrix::from_fn(r, want, |i, a| found.eigen.eigenvectors[(i, want - 1 - a)]);
        let k = values.iter().take_while(|&&t| t > 0.0).count();
        let b = q0.ncols();
        if k == want || k + buffer_size(k) / 2 > b {
            // Buffer exhausted: more positive directions may lie outside.
            return Ok(None);
        }
        let allowed = self.tolerance * norm_m;
        let tau = self.tolerance * norm_m / (4.0 * (r as f64).sqrt());
        let x_pos = x.columns(0, k).into_owned();
        let mx = linalg::matmul(m, &x_pos);
        let mut residual = mx.clone();
        for (a, mut col) in residual.column_iter_mut().enumerate() {
            col.axpy(-values[a], &x_pos.column(a), 1.0);
        }
        if std::f64::consts::SQRT_2 * residual.norm() + tau * (r as f64).sqrt() > allowed || !certify(m, &x_pos, &mx, &residual, norm_m, tau) {
            return Ok(None);
        }
        let pp = PositivePart { values: values[..k].to_vec(), vectors: x_pos };
        // Next basis: the positive Ritz vectors and a buffer of the next ones,
        // completed from the end of the warm basis (it is orthonormalised on
        // use) where fewer Ritz vectors were asked for.
        let keep = (k + buffer_size(k)).min(b);
        let ritz = keep.min(want);
        let next = DMatrix::from_fn(r, keep, |i, a| if a < ritz { x[(i, a)] } else { q0[(i, b - keep + a)] });
        Ok(Some((pp, next, found.block_products)))
    }
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
