//! The dual problem of Theorem 2 solved with FISTA (App. B.5).
//!
//! With training features `p_i = Phi(x_i)` (columns of `P`, r x n) the primal
//! (Eq. 9, with the integral constraint of Eq. 12 when `W` is given) is
//!
//! `min_{A >= 0} L(p_i^T A p_i) + lambda_1 tr(A) + lambda_2/2 ||A||_F^2`  s.t. `tr(A W) = 1`.
//!
//! Its dual (Eq. 10, the constraint dualised with a multiplier `mu`) is
//!
//! `min_{alpha, mu} L*(alpha) + mu + 1/(2 lambda_2) ||[M(alpha, mu)]_+||_F^2`,
//! `M = -P diag(alpha) P^T - mu W - lambda_1 I`,
//!
//! (without the constraint, drop `mu`), and the primal solution is
//! `A = [M]_+ / lambda_2` (Eq. 11 in feature coordinates). The smooth part has
//! gradient `-(p_i^T A p_i)_i = -f_A(x_i)` in `alpha` and `1 - tr(A W)` in `mu`,
//! and is `L_h`-smooth in `alpha` with `L_h <= max_i ||p_i||^2 ||P||_2^2 / lambda_2`
//! (Schur: `lambda_max((P^T P) o (P^T P)) <= max_i ||p_i||^2 lambda_max(P^T P)`).
//!
//! **The multiplier `mu`.** Running FISTA jointly on `(alpha, mu)` is very
//! slow (the coupling through `W` is badly conditioned: thousands of
//! iterations where the unconstrained problem needs a hundred). So `mu` is
//! updated in an outer loop instead: for fixed `mu` FISTA solves the dual in
//! `alpha` of the penalised problem `min_A L + Omega + mu (tr(A W) - 1)`;
//! its solution has `c(mu) = tr(A_mu W) = (1 - lambda_1 tr A - lambda_2 ||A||_F^2)/mu`
//! (stationarity in the scale of `A`, since `L(c f) = L(f) - log c` for the
//! log-likelihood), and `c(mu) = 1` is exactly the KKT system of Eq. 12.
//! The outer loop solves `c(mu) = 1` (`c` decreases with `mu`) by secant
//! steps on `ln c(mu)`, which is close to linear in `mu` (measured on the 10-D
//! density: slopes -0.50 to -0.38 over `mu` in [-3, 1]), kept inside the
//! bracket of the root once there is one (regula falsi otherwise); the first
//! step assumes the slope `-1/max(|mu|, 1)` of the unregularised problem, where
//! `c = 1/mu`. `alpha` is warm-started. (The multiplier of the rescaled feasible
//! point `A / c`, used before, overshot the root by up to 6x.)
//! A solve at fixed `mu` need not finish when `mu` is far from the root: the
//! penalised primal is `lambda_2`-strongly convex, so at a dual iterate with
//! penalised gap `g` the primal point `A` of Eq. 11 has
//! `||A - A_mu||_F <= sqrt(2 g / lambda_2)` and
//! `|c - c(mu)| <= ||W||_F sqrt(2 g / lambda_2) =: delta`. The solve stops as
//! soon as `delta <= |c - 1| / 2`: the side of the root is then certain (the
//! bracket stays valid) and `c` is good enough for the secant. (10-D density,
//! sigma 1, lambda_1 1e-4, lambda_2 1e-6, m 200: the first solve at `mu = 1`,
//! where `c = 0.02`, took 1444 iterations to finish; the whole fit now takes 20.)
//! The dual starts from
//! `alpha = grad L(f_0)` for the model values of `A_0 = I / tr(W)`, which puts
//! it at the right scale (model values range over many decades with a
//! Gaussian base measure in 10-D).
//!
//! **Duality gap.** At a dual iterate, `A` from Eq. 11 is primal feasible up to
//! the integral, so it is rescaled to `A / tr(A W)`; the gap is
//! `primal(A / tr(A W)) + F(alpha, mu) >= 0` and is the stopping rule.
//!
//! **Cost per iteration.** One `[M]_+` (r x r, see [`super::positive_part`])
//! at the extrapolated point for the gradient, and `O(n r^2)` for
//! `P diag(alpha) P^T`. The backtracking test needs no `[M]_+` at the candidate
//! when the remainder bound `||M(x) - M(y)||_F^2 / (2 lambda_2)` already passes
//! it ([`super::fista::minimise_with_bound`]); a gap check reuses the `[M]_+` of the
//! candidate when it was computed, so checking every one or two iterations
//! costs little and lets an inner solve stop as soon as it is done.

use nalgebra::{DMatrix, DVector};

use crate::device::Device;
use crate::gpu::MatrixProduct;
use crate::precision::Precision;
use crate::linalg;
use crate::resident::DeviceMatrix;

use super::engine::EngineProblem;
use super::error::check_positive;
use crate::error::Error;
use super::loss::DualLoss;
use super::positive_part::{PositivePartSolver, PositivePartStats};

/// Budget and tolerance of the dual solver.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SolverOptions {
    /// Stop when the duality gap is at most this (absolute, objective units).
    pub tolerance: f64,
    /// Iteration budget; exceeding it is [`Error::NotConverged`].
    pub max_iterations: usize,
    /// Evaluate the gap every this many iterations (default 10; the density
    /// estimator, whose gap checks are cheap, uses 2).
    pub check_every: usize,
}

impl Default for SolverOptions {
    fn default() -> Self {
        SolverOptions { tolerance: 1e-6, max_iterations: 20_000, check_every: 10 }
    }
}

impl SolverOptions {
    /// Validates the options.
    pub fn validate(&self) -> Result<(), Error> {
        check_positive("tolerance", self.tolerance)?;
        if self.max_iterations == 0 || self.check_every == 0 {
            return Err(Error::InvalidParameter { name: "max_iterations/check_every", reason: "must be >= 1".into() });
        }
        Ok(())
    }
}

/// Where the time of a fit went and how it converged.
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SolverReport {
    /// FISTA iterations.
    pub iterations: usize,
    /// Final duality gap.
    pub gap: f64,
    /// Primal objective at the returned model.
    pub primal: f64,
    /// `(iteration, gap)` at every check (`+inf` before the first feasible
    /// primal point; saved as `null`).
    #[cfg_attr(feature = "serde", serde(with = "crate::io::nonfinite::history"))]
    pub gap_history: Vec<(usize, f64)>,
    /// Seconds in kernel matrices, features and integrals (setup).
    pub seconds_setup: f64,
    /// Seconds in eigendecompositions.
    pub seconds_eigen: f64,
    /// Seconds forming `P diag(alpha) P^T` and the model values.
    pub seconds_products: f64,
    /// Total seconds of the fit.
    pub seconds_total: f64,
}

/// A solution of the dual.
#[derive(Debug, Clone)]
pub struct DualSolution {
    /// `A` (r x r, PSD) in feature coordinates (Eq. 11), normalised to
    /// `tr(A W) = 1` when there is an integral constraint.
    pub a: DMatrix<f64>,
    /// Dual variables `alpha`.
    pub alpha: DVector<f64>,
    /// Multiplier of the integral constraint (0 without one).
    pub mu: f64,
    /// Dual objective `-F(alpha, mu)`.
    pub dual_objective: f64,
    /// Convergence and timing.
    pub report: SolverReport,
    /// How the positive parts `[M]_+` were computed (full vs certified partial).
    pub eigen_stats: PositivePartStats,
}

/// The training features `P` (r x n) of a [`DualProblem`], where they live.
///
/// On a device they are held as `Phi = P^T` (n x r, samples as rows) in
/// `f64`, and the two `O(n r^2)` products of an iteration run there:
/// `P diag(alpha) P^T` (Eq. 10's `M`; `alpha` goes up, the r x r matrix comes
/// down) and the model values `p_i^T A p_i = ||V^T p_i||^2` (the r x k
/// factor `V` goes up, n values come down). An iteration moves
/// `O(n + r^2)` numbers. The r x r eigendecompositions of `[M]_+` stay on the
/// CPU in `f64` (dense symmetric eigensolvers are LAPACK-class code we do not
/// have in WGSL; at r <= a few thousand they cost less than the products).
#[derive(Clone, Copy)]
pub enum Features<'a> {
    /// `P` (r x n) on the host.
    Host(&'a DMatrix<f64>),
    /// `Phi = P^T` (n x r) on `device`, `f64`.
    Resident {
        /// The device holding `phi`.
        device: &'a Device,
        /// `P^T`, n x r, `Precision::F64`.
        phi: &'a DeviceMatrix,
    },
}

impl<'a> From<&'a DMatrix<f64>> for Features<'a> {
    fn from(p: &'a DMatrix<f64>) -> Self {
        Features::Host(p)
    }
}

impl Features<'_> {
    /// Feature dimension r.
    pub(super) fn dim(&self) -> usize {
        match self {
            Features::Host(p) => p.nrows(),
            Features::Resident { phi, .. } => phi.ncols(),
        }
    }
    /// Number of samples n.
    pub(super) fn samples(&self) -> usize {
        match self {
            Features::Host(p) => p.ncols(),
            Features::Resident { phi, .. } => phi.nrows(),
        }
    }
    pub(super) fn validate(&self) -> Result<(), Error> {
        match self {
            Features::Host(p) => Ok(linalg::check_matrix("features", *p)?),
            Features::Resident { device, phi } => {
                if phi.precision() != Precision::F64 || !device.supports(Precision::F64) {
                    return Err(Error::InvalidParameter { name: "features", reason: "device-resident features must be f64 (the duality-gap certificate needs the digits)".into() });
                }
                Ok(())
            }
        }
    }
    /// `P diag(w) P^T` (r x r).
    pub(super) fn weighted_gram(&self, w: &DVector<f64>) -> Result<DMatrix<f64>, Error> {
        match self {
            Features::Host(p) => {
                linalg::check_dim("weights vs samples", p.ncols(), w.len())?;
                Ok(linalg::weighted_gram(p, w))
            }
            Features::Resident { device, phi } => {
                let wd = device.upload_vector(w, Precision::F64)?;
                let m = device.to_host(&device.resident_weighted_gram(phi, &wd)?)?;
                Ok((&m + m.transpose()) * 0.5)
            }
        }
    }
    /// `||V^T p_i||^2` for every sample i, V r x k.
    pub(super) fn projected_norms(&self, v: &DMatrix<f64>) -> Result<DVector<f64>, Error> {
        match self {
            Features::Host(p) => {
                linalg::check_dim("rows of V vs feature dimension", p.nrows(), v.nrows())?;
                Ok(super::products::projected_norms(p, v))
            }
            Features::Resident { device, phi } => {
                let vd = device.upload(v, Precision::F64)?;
                let g = device.resident_matmul(phi, &vd, MatrixProduct::AB)?;
                Ok(device.to_host_vector(&device.resident_row_squared_norms(&g)?)?)
            }
        }
    }
    /// `P s` (r) for `s` in `R^n`.
    pub(super) fn apply(&self, s: &DVector<f64>) -> Result<DVector<f64>, Error> {
        match self {
            Features::Host(p) => Ok(*p * s),
            Features::Resident { device, phi } => {
                let sd = device.upload_vector(s, Precision::F64)?;
                let out = device.to_host(&device.resident_matmul(phi, &sd, MatrixProduct::AtB)?)?;
                Ok(DVector::from_column_slice(out.as_slice()))
            }
        }
    }
    /// `P^T w` (n) for `w` in `R^r`.
    pub(super) fn apply_transpose(&self, w: &DVector<f64>) -> Result<DVector<f64>, Error> {
        match self {
            Features::Host(p) => Ok(p.tr_mul(w)),
            Features::Resident { device, phi } => {
                let wd = device.upload_vector(w, Precision::F64)?;
                let out = device.to_host(&device.resident_matmul(phi, &wd, MatrixProduct::AB)?)?;
                Ok(DVector::from_column_slice(out.as_slice()))
            }
        }
    }
    /// `||p_i||^2` for every sample and `P P^T` (r x r), for the step size.
    pub(super) fn norms_and_gram(&self) -> Result<(DVector<f64>, DMatrix<f64>), Error> {
        match self {
            Features::Host(p) => Ok((DVector::from_fn(p.ncols(), |j, _| p.column(j).norm_squared()), linalg::weighted_gram(p, &DVector::from_element(p.ncols(), 1.0)))),
            Features::Resident { device, phi } => {
                let norms = device.to_host_vector(&device.resident_row_squared_norms(phi)?)?;
                let g = device.to_host(&device.resident_matmul(phi, phi, MatrixProduct::AtB)?)?;
                Ok((norms, (&g + g.transpose()) * 0.5))
            }
        }
    }
}

/// The dual problem of Eq. 10 (optionally with the integral constraint of
/// Eq. 12): one PSD part and a loss of one block, solved by the engine of
/// [`super::engine`] (which holds the solver described in the module docs).
pub struct DualProblem<'a, L: DualLoss> {
    /// Training features `P` (r x n), on the host or a device.
    pub features: Features<'a>,
    /// `W` (r x r) of the constraint `tr(A W) = 1`, if any.
    pub integral: Option<&'a DMatrix<f64>>,
    /// The loss.
    pub loss: &'a L,
    /// Nuclear-norm weight `lambda_1 >= 0`.
    pub lambda1: f64,
    /// Frobenius weight `lambda_2 > 0`.
    pub lambda2: f64,
}

impl<'a, L: DualLoss> DualProblem<'a, L> {
    /// Solves the dual with FISTA; returns the primal `A` of Eq. 11 (rescaled
    /// to satisfy the integral constraint exactly) and the report.
    ///
    /// Errors: invalid parameters or shapes, [`Error::NotConverged`] when
    /// the gap is above `options.tolerance` after `options.max_iterations`.
    pub fn solve(&self, options: &SolverOptions) -> Result<DualSolution, Error> {
        self.solve_with(options, PositivePartSolver::full_only())
    }

    /// [`DualProblem::solve`] with a given computation of `[M]_+` (e.g.
    /// [`PositivePartSolver::new`] for the warm-started partial path; the
    /// default is [`PositivePartSolver::full_only`]).
    pub fn solve_with(&self, options: &SolverOptions, eigen_solver: PositivePartSolver) -> Result<DualSolution, Error> {
        let engine = EngineProblem { features: self.features, parts: vec![vec![1.0]], linear: None, integral: self.integral, loss: self.loss, lambda1: self.lambda1, lambda2: self.lambda2 };
        let mut s = engine.solve_with(options, eigen_solver)?;
        let a = s.parts.pop().unwrap_or_else(|| DMatrix::zeros(self.features.dim(), self.features.dim()));
        Ok(DualSolution { a, alpha: s.z, mu: s.mu, dual_objective: s.dual_objective, report: s.report, eigen_stats: s.eigen_stats })
    }
}
