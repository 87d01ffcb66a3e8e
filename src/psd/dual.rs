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
//! it ([`fista::minimise_with_bound`]); a gap check reuses the `[M]_+` of the
//! candidate when it was computed, so checking every one or two iterations
//! costs little and lets an inner solve stop as soon as it is done.

use std::time::Instant;

use nalgebra::{DMatrix, DVector};

use crate::device::Device;
use crate::gpu::{MatrixProduct, Precision};
use crate::linalg::{self, check_dim};
use crate::resident::DeviceMatrix;

use super::error::{check_nonnegative, check_positive, PsdError};
use super::fista::{self, FistaSettings};
use super::loss::DualLoss;
use super::positive_part::{PositivePart, PositivePartSolver, PositivePartStats};

/// Budget and tolerance of the dual solver.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SolverOptions {
    /// Stop when the duality gap is at most this (absolute, objective units).
    pub tolerance: f64,
    /// Iteration budget; exceeding it is [`PsdError::NotConverged`].
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
    pub fn validate(&self) -> Result<(), PsdError> {
        check_positive("tolerance", self.tolerance)?;
        if self.max_iterations == 0 || self.check_every == 0 {
            return Err(PsdError::InvalidParameter { name: "max_iterations/check_every", reason: "must be >= 1".into() });
        }
        Ok(())
    }
}

/// Where the time of a fit went and how it converged.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SolverReport {
    /// FISTA iterations.
    pub iterations: usize,
    /// Final duality gap.
    pub gap: f64,
    /// Primal objective at the returned model.
    pub primal: f64,
    /// `(iteration, gap)` at every check.
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
    fn dim(&self) -> usize {
        match self {
            Features::Host(p) => p.nrows(),
            Features::Resident { phi, .. } => phi.ncols(),
        }
    }
    /// Number of samples n.
    fn samples(&self) -> usize {
        match self {
            Features::Host(p) => p.ncols(),
            Features::Resident { phi, .. } => phi.nrows(),
        }
    }
    fn validate(&self) -> Result<(), PsdError> {
        match self {
            Features::Host(p) => Ok(linalg::check_matrix("features", *p)?),
            Features::Resident { device, phi } => {
                if phi.precision() != Precision::F64 || !device.supports(Precision::F64) {
                    return Err(PsdError::InvalidParameter { name: "features", reason: "device-resident features must be f64 (the duality-gap certificate needs the digits)".into() });
                }
                Ok(())
            }
        }
    }
    /// `P diag(w) P^T` (r x r).
    fn weighted_gram(&self, w: &DVector<f64>) -> Result<DMatrix<f64>, PsdError> {
        match self {
            Features::Host(p) => Ok(linalg::weighted_gram(p, w)),
            Features::Resident { device, phi } => {
                let wd = device.upload_vector(w, Precision::F64)?;
                let m = device.to_host(&device.resident_weighted_gram(phi, &wd)?)?;
                Ok((&m + m.transpose()) * 0.5)
            }
        }
    }
    /// `||V^T p_i||^2` for every sample i, V r x k.
    fn projected_norms(&self, v: &DMatrix<f64>) -> Result<DVector<f64>, PsdError> {
        match self {
            Features::Host(p) => {
                let g = linalg::matmul_tn(v, p);
                Ok(DVector::from_fn(p.ncols(), |j, _| g.column(j).norm_squared()))
            }
            Features::Resident { device, phi } => {
                let vd = device.upload(v, Precision::F64)?;
                let g = device.resident_matmul(phi, &vd, MatrixProduct::AB)?;
                Ok(device.to_host_vector(&device.resident_row_squared_norms(&g)?)?)
            }
        }
    }
    /// `||p_i||^2` for every sample and `P P^T` (r x r), for the step size.
    fn norms_and_gram(&self) -> Result<(DVector<f64>, DMatrix<f64>), PsdError> {
        match self {
            Features::Host(p) => Ok((DVector::from_fn(p.ncols(), |j, _| p.column(j).norm_squared()), linalg::matmul_nt(p, p))),
            Features::Resident { device, phi } => {
                let norms = device.to_host_vector(&device.resident_row_squared_norms(phi)?)?;
                let g = device.to_host(&device.resident_matmul(phi, phi, MatrixProduct::AtB)?)?;
                Ok((norms, (&g + g.transpose()) * 0.5))
            }
        }
    }
}

/// The dual problem of Eq. 10 (optionally with the integral constraint of Eq. 12).
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

struct Timers {
    eigen: f64,
    products: f64,
    /// Warm-started certified `[M]_+` (see [`super::positive_part`]).
    eigen_solver: PositivePartSolver,
    /// Recent `M(alpha)` for the affine-combination shortcut.
    m_cache: MatrixCache,
    /// `[M(alpha, mu)]_+` of the last evaluation: FISTA's accepted iterate is
    /// the last backtracking candidate, so the gap check reuses it.
    last_positive_part: Option<(DVector<f64>, f64, PositivePart)>,
}

/// The last few `(alpha, mu, M(alpha, mu))`. `M` is affine in `alpha`, and
/// FISTA's extrapolated point `y = x_k + beta (x_k - x_{k-1})` is an affine
/// combination of two earlier candidates, so
/// `M(y) = (1 + beta) M(x_k) - beta M(x_{k-1})` costs `O(r^2)` instead of the
/// `O(n r^2)` product. The combination is used only when it reproduces
/// `alpha` to `1e-13` relative (checked entry by entry).
#[derive(Default)]
struct MatrixCache {
    entries: Vec<(DVector<f64>, f64, DMatrix<f64>)>,
}

impl MatrixCache {
    const SIZE: usize = 3;

    fn insert(&mut self, alpha: &DVector<f64>, mu: f64, m: &DMatrix<f64>) {
        if self.entries.len() == Self::SIZE {
            self.entries.remove(0);
        }
        self.entries.push((alpha.clone(), mu, m.clone()));
    }

    fn combination(&self, alpha: &DVector<f64>, mu: f64) -> Option<DMatrix<f64>> {
        let scale = alpha.amax();
        let close = |c: &DVector<f64>| (alpha - c).amax() <= 1e-13 * scale;
        for (a, m_a, m) in self.entries.iter().rev() {
            if *m_a == mu && close(a) {
                return Some(m.clone());
            }
        }
        for (i, (a1, mu1, m1)) in self.entries.iter().enumerate().rev() {
            for (a2, mu2, m2) in self.entries[..i].iter().rev() {
                if *mu1 != mu || *mu2 != mu {
                    continue;
                }
                let d = a1 - a2;
                let dd = d.norm_squared();
                if !(dd > 0.0) {
                    continue;
                }
                let t = (alpha - a2).dot(&d) / dd;
                if close(&(a2 + &d * t)) {
                    // alpha = t a1 + (1 - t) a2 and M is affine in alpha.
                    return Some(m1 * t + m2 * (1.0 - t));
                }
            }
        }
        None
    }
}

impl<'a, L: DualLoss> DualProblem<'a, L> {
    fn validate(&self) -> Result<(), PsdError> {
        check_nonnegative("lambda_1", self.lambda1)?;
        check_positive("lambda_2", self.lambda2)?;
        self.features.validate()?;
        check_dim("number of loss terms vs number of feature columns", self.features.samples(), self.loss.len())?;
        if let Some(w) = self.integral {
            check_dim("rows of W vs feature dimension", self.features.dim(), w.nrows())?;
            check_dim("columns of W vs feature dimension", self.features.dim(), w.ncols())?;
        }
        Ok(())
    }

    fn n(&self) -> usize {
        self.features.samples()
    }

    /// `M(alpha, mu) = -P diag(alpha) P^T - mu W - lambda_1 I`.
    fn m_matrix(&self, alpha: &DVector<f64>, mu: f64, timers: &mut Timers) -> Result<DMatrix<f64>, PsdError> {
        let start = Instant::now();
        if let Some(m) = timers.m_cache.combination(alpha, mu) {
            timers.products += start.elapsed().as_secs_f64();
            return Ok(m);
        }
        let mut m = self.features.weighted_gram(&(-alpha))?;
        if let Some(w) = self.integral {
            m -= w * mu;
        }
        for i in 0..m.nrows() {
            m[(i, i)] -= self.lambda1;
        }
        timers.m_cache.insert(alpha, mu, &m);
        timers.products += start.elapsed().as_secs_f64();
        Ok(m)
    }

    /// `[M(alpha, mu)]_+`, reused when `(alpha, mu)` is the last point evaluated.
    fn positive_part(&self, alpha: &DVector<f64>, mu: f64, timers: &mut Timers) -> Result<PositivePart, PsdError> {
        if let Some((a, m_a, pp)) = &timers.last_positive_part {
            if *m_a == mu && a == alpha {
                return Ok(pp.clone());
            }
        }
        let m = self.m_matrix(alpha, mu, timers)?;
        let start = Instant::now();
        let (pp, _) = timers.eigen_solver.compute(&m)?;
        timers.eigen += start.elapsed().as_secs_f64();
        timers.last_positive_part = Some((alpha.clone(), mu, pp.clone()));
        Ok(pp)
    }

    /// Model values `f_A(x_i) = p_i^T A p_i` and `tr(A W)`, `A = [M]_+ / lambda_2`.
    fn model_values(&self, pp: &PositivePart, timers: &mut Timers) -> Result<(DVector<f64>, f64), PsdError> {
        let start = Instant::now();
        let scale = DVector::from_iterator(pp.values.len(), pp.values.iter().map(|v| (v / self.lambda2).sqrt()));
        let f = if pp.values.is_empty() {
            DVector::zeros(self.n())
        } else {
            let mut v = pp.vectors.clone();
            for (a, mut col) in v.column_iter_mut().enumerate() {
                col *= scale[a];
            }
            self.features.projected_norms(&v)?
        };
        let trace_aw = match self.integral {
            Some(w) => {
                let uw = linalg::matmul_tn(&pp.vectors, w);
                (0..pp.values.len()).map(|a| scale[a] * scale[a] * uw.row(a).dot(&pp.vectors.column(a).transpose())).sum()
            }
            None => 0.0,
        };
        timers.products += start.elapsed().as_secs_f64();
        Ok((f, trace_aw))
    }

    fn a_matrix(&self, pp: &PositivePart) -> DMatrix<f64> {
        let r = self.features.dim();
        let mut scaled = pp.vectors.clone();
        for (a, mut col) in scaled.column_iter_mut().enumerate() {
            col *= pp.values[a] / self.lambda2;
        }
        if pp.values.is_empty() { DMatrix::zeros(r, r) } else { linalg::matmul_nt(&scaled, &pp.vectors) }
    }

    /// `lambda_1 tr(A s) + lambda_2/2 ||A s||_F^2` from the eigenvalues of `[M]_+`.
    fn regulariser(&self, pp: &PositivePart, scale: f64) -> f64 {
        pp.values.iter().map(|v| {
            let a = v / self.lambda2 * scale;
            self.lambda1 * a + 0.5 * self.lambda2 * a * a
        }).sum()
    }

    /// `F(alpha, mu) = L*(alpha) + mu + ||[M]_+||^2 / (2 lambda_2)` (minus the dual objective).
    fn dual_value(&self, alpha: &DVector<f64>, mu: f64, positive_eigenvalues: &[f64]) -> f64 {
        let reg: f64 = positive_eigenvalues.iter().map(|v| v * v).sum::<f64>() / (2.0 * self.lambda2);
        self.loss.conjugate(alpha) + reg + if self.integral.is_some() { mu } else { 0.0 }
    }

    /// Primal objective at the feasible `A / tr(A W)` (or `A` without constraint).
    fn primal(&self, pp: &PositivePart, f: &DVector<f64>, trace_aw: f64) -> f64 {
        let s = if self.integral.is_some() { trace_aw } else { 1.0 };
        if !(s > 0.0) {
            return f64::INFINITY;
        }
        self.loss.value(&(f / s)) + self.regulariser(pp, 1.0 / s)
    }

    /// Duality gaps at `(alpha, mu)`: of the problem itself and of the
    /// penalised problem with `mu` fixed; plus `tr(A W)`.
    fn gaps(&self, alpha: &DVector<f64>, mu: f64, timers: &mut Timers) -> Result<(f64, f64, f64), PsdError> {
        let pp = self.positive_part(alpha, mu, timers)?;
        let (f, trace_aw) = self.model_values(&pp, timers)?;
        let dual = self.dual_value(alpha, mu, &pp.values);
        let gap = self.primal(&pp, &f, trace_aw) + dual;
        let penalised_primal = self.loss.value(&f) + self.regulariser(&pp, 1.0) + if self.integral.is_some() { mu * (trace_aw - 1.0) } else { 0.0 };
        Ok((gap, penalised_primal + dual, trace_aw))
    }

    /// FISTA on `alpha` with `mu` fixed, from `alpha0`, until the penalised
    /// gap is below `inner_tol` or the gap of the problem below `tol`, or, with
    /// `leave_when_far`, as soon as the side of the root of `c(mu) = 1` is
    /// certain and `c` is known to half its distance from 1 (module docs).
    fn solve_alpha(
        &self,
        alpha0: DVector<f64>,
        mu: f64,
        step: f64,
        inner_tol: f64,
        leave_when_far: bool,
        options: &SolverOptions,
        budget: usize,
        timers: &mut Timers,
        history: &mut Vec<(usize, f64)>,
        done_before: usize,
    ) -> Result<fista::FistaOutcome, PsdError> {
        let cell = std::cell::RefCell::new(timers);
        let error: std::cell::RefCell<Option<PsdError>> = std::cell::RefCell::new(None);
        let gaps_seen = std::cell::RefCell::new(Vec::new());
        let smooth = |alpha: &DVector<f64>, want_gradient: bool| -> (f64, Option<DVector<f64>>) {
            let mut t = cell.borrow_mut();
            let fail = |e: PsdError| {
                *error.borrow_mut() = Some(e);
                (f64::NAN, if want_gradient { Some(DVector::zeros(alpha.len())) } else { None })
            };
            if !want_gradient {
                return match self.positive_part(alpha, mu, &mut t) {
                    Ok(pp) => (pp.values.iter().map(|v| v * v).sum::<f64>() / (2.0 * self.lambda2), None),
                    Err(e) => fail(e),
                };
            }
            match self.positive_part(alpha, mu, &mut t).and_then(|pp| Ok((self.model_values(&pp, &mut t)?.0, pp))) {
                Ok((f, pp)) => (pp.values.iter().map(|v| v * v).sum::<f64>() / (2.0 * self.lambda2), Some(-f)),
                Err(e) => fail(e),
            }
        };
        // `phi(M) = ||[M]_+||_F^2 / 2` has the 1-Lipschitz gradient `[M]_+`, so
        // `h(x) - h(y) - <grad h(y), x - y> <= ||M(x) - M(y)||_F^2 / (2 lambda_2)`:
        // O(r^2) once `M(x)` is formed (which the next extrapolation needs anyway).
        let remainder_bound = |y: &DVector<f64>, x: &DVector<f64>| -> Option<f64> {
            let mut t = cell.borrow_mut();
            // A failed product makes the bound unavailable (exact evaluation
            // follows, which reports the error).
            let m_y = self.m_matrix(y, mu, &mut t).ok()?;
            let m_x = self.m_matrix(x, mu, &mut t).ok()?;
            Some((m_x - m_y).norm_squared() / (2.0 * self.lambda2))
        };
        let prox = |v: &DVector<f64>, t: f64| self.loss.prox_conjugate(v, t);
        let nonsmooth = |alpha: &DVector<f64>| self.loss.conjugate(alpha);
        let w_norm = self.integral.map_or(0.0, |w| w.norm());
        let gap = |alpha: &DVector<f64>| -> f64 {
            let mut t = cell.borrow_mut();
            match self.gaps(alpha, mu, &mut t) {
                Ok((g, inner, c)) => {
                    gaps_seen.borrow_mut().push(g);
                    if g <= options.tolerance {
                        0.0
                    } else if leave_when_far && w_norm * (2.0 * inner.max(0.0) / self.lambda2).sqrt() <= 0.5 * (c - 1.0).abs() {
                        0.0
                    } else {
                        inner
                    }
                }
                Err(e) => {
                    *error.borrow_mut() = Some(e);
                    0.0
                }
            }
        };
        let settings = FistaSettings { initial_step: step, max_iterations: budget, tolerance: inner_tol, check_every: options.check_every };
        let outcome = fista::minimise_with_bound(smooth, remainder_bound, prox, nonsmooth, gap, alpha0, settings);
        if let Some(e) = error.borrow_mut().take() {
            return Err(e);
        }
        for (&(k, _), &g) in outcome.gap_history.iter().zip(gaps_seen.borrow().iter()) {
            history.push((done_before + k, g));
        }
        Ok(outcome)
    }

    /// Solves the dual with FISTA; returns the primal `A` of Eq. 11 (rescaled
    /// to satisfy the integral constraint exactly) and the report.
    ///
    /// Errors: invalid parameters or shapes, [`PsdError::NotConverged`] when
    /// the gap is above `options.tolerance` after `options.max_iterations`.
    pub fn solve(&self, options: &SolverOptions) -> Result<DualSolution, PsdError> {
        self.solve_with(options, PositivePartSolver::new())
    }

    /// [`DualProblem::solve`] with a given computation of `[M]_+` (e.g.
    /// [`PositivePartSolver::full_only`] for the full eigendecomposition every time).
    pub fn solve_with(&self, options: &SolverOptions, eigen_solver: PositivePartSolver) -> Result<DualSolution, PsdError> {
        self.validate()?;
        options.validate()?;
        let start = Instant::now();
        let mut timers = Timers { eigen: 0.0, products: 0.0, eigen_solver, m_cache: MatrixCache::default(), last_positive_part: None };
        // Step from the Lipschitz bound (module docs), optimistic by 4x; backtracking corrects it.
        let (column_norms, ppt) = self.features.norms_and_gram()?;
        let max_col = column_norms.max();
        let ppt_top = linalg::symmetric_eigenvalues(&ppt)?.max();
        let mut step = 4.0 * self.lambda2 / (max_col * ppt_top).max(f64::MIN_POSITIVE);

        // Start from the dual point of the primal guess A0 = s I, s = 1/tr(W) (integral 1).
        let s0 = self.integral.map_or(1.0, |w| 1.0 / w.trace().max(f64::MIN_POSITIVE));
        let guess = &column_norms * s0;
        let mut alpha = self.loss.dual_start(&guess);
        let mut mu = if self.integral.is_some() { 1.0 } else { 0.0 };
        let mut iterations = 0;
        let mut history = Vec::new();
        // ln c(mu) is decreasing in mu and close to linear in it (10-D density:
        // slopes -0.50 to -0.38 over mu in [-3, 1]): secant steps on ln c, kept
        // inside the bracket [below, above] of the root once there is one. The
        // first step assumes the slope -1/max(|mu|, 1) of the unregularised
        // problem (where c = 1/mu).
        let mut below: Option<(f64, f64)> = None; // (mu, ln c) with c(mu) > 1
        let mut above: Option<(f64, f64)> = None; // (mu, ln c) with c(mu) < 1
        let mut last: Option<(f64, f64)> = None;
        let inner_tol = if self.integral.is_some() { 0.25 * options.tolerance } else { options.tolerance };
        loop {
            let budget = options.max_iterations - iterations;
            let leave_when_far = self.integral.is_some();
            let outcome = self.solve_alpha(alpha, mu, step, inner_tol, leave_when_far, options, budget, &mut timers, &mut history, iterations)?;
            iterations += outcome.iterations;
            alpha = outcome.x;
            step = outcome.step;
            let (gap, _, c) = self.gaps(&alpha, mu, &mut timers)?;
            if gap <= options.tolerance || iterations >= options.max_iterations || self.integral.is_none() {
                break;
            }
            let log_c = c.max(f64::MIN_POSITIVE).ln().clamp(-5.0, 5.0);
            if log_c > 0.0 { below = Some((mu, log_c)) } else { above = Some((mu, log_c)) }
            let secant = match last {
                Some((mu0, g0)) if g0 != log_c && mu0 != mu => mu - log_c * (mu - mu0) / (log_c - g0),
                _ => mu + log_c * mu.abs().max(1.0),
            };
            last = Some((mu, log_c));
            mu = match (below, above) {
                (Some((m0, g0)), Some((m1, g1))) => {
                    if secant > m0.min(m1) && secant < m0.max(m1) {
                        secant
                    } else {
                        // Regula falsi between the bracket ends, strictly inside.
                        m0 + (g0 / (g0 - g1)).clamp(0.05, 0.95) * (m1 - m0)
                    }
                }
                _ => secant,
            };
        }
        let pp = self.positive_part(&alpha, mu, &mut timers)?;
        let (f, trace_aw) = self.model_values(&pp, &mut timers)?;
        let primal = self.primal(&pp, &f, trace_aw);
        let dual_value = self.dual_value(&alpha, mu, &pp.values);
        let gap_now = primal + dual_value;
        let report = SolverReport {
            iterations,
            gap: gap_now,
            primal,
            gap_history: history,
            seconds_setup: 0.0,
            seconds_eigen: timers.eigen,
            seconds_products: timers.products,
            seconds_total: start.elapsed().as_secs_f64(),
        };
        if !(gap_now <= options.tolerance) {
            return Err(PsdError::NotConverged { iterations, gap: gap_now, tolerance: options.tolerance });
        }
        let mut a = self.a_matrix(&pp);
        if self.integral.is_some() {
            if !(trace_aw > 0.0) {
                return Err(PsdError::NotPositive { what: "integral of the fitted model", value: trace_aw });
            }
            a /= trace_aw;
        }
        Ok(DualSolution { a, alpha, mu, dual_objective: -dual_value, report, eigen_stats: timers.eigen_solver.stats() })
    }
}
