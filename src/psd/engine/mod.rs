//! One dual engine for the three PSD-model problems of Section 6 (density,
//! heteroscedastic and multiple quantile regression): Theorem 2 with several
//! PSD parts, an optional linear part and an optional integral constraint.
//!
//! **Problem.** Training features `P = (p_i)_i` (r x n, on the host or a
//! device), `B` blocks of `n` model values `u_b(x_i)`, each a signed sum
//!
//! `u_b(x_i) = sum_q c_{qb} p_i^T A_q p_i + l_b w^T p_i`
//!
//! of PSD parts `A_q >= 0` (couplings `c_{qb}`) and a linear part `w`
//! (couplings `l_b`). The primal is
//!
//! `min L(u) + sum_q (lambda_1 tr A_q + lambda_2/2 ||A_q||_F^2) + lambda_0/2 ||w||^2`
//! (s.t. `tr(A W) = 1` with an integral constraint, Eq. 12; one PSD part, no linear part),
//!
//! for a loss `L` separable over samples ([`BlockLoss`]). Fenchel duality as
//! in Theorem 2 (Eq. 10), with dual variables `z = (z_1, .., z_B)`,
//! `d_q = sum_b c_{qb} z_b` and `s = sum_b l_b z_b`, gives
//!
//! `min_{z, mu} L*(z) + mu + sum_q ||[M_q]_+||_F^2 / (2 lambda_2) + ||P s||^2 / (2 lambda_0)`,
//! `M_q = -P diag(d_q) P^T - mu W - lambda_1 I`,
//!
//! with primal recovery `A_q = [M_q]_+ / lambda_2` (Eq. 11), `w = -P s / lambda_0`,
//! and gradient `-u_b` in `z_b`. The density is one block, one part with
//! coupling 1 and `W`; heteroscedastic regression two blocks (`theta`,
//! `eta`), one part on `theta`, the linear part on `eta`; quantile regression
//! `K` blocks, a part per gap with couplings `+-1` on the levels it moves,
//! the linear part on all levels.
//!
//! **Solver** (for every configuration): FISTA with backtracking
//! ([`super::fista::minimise_with_bound`]), in the diagonal metric of
//! `EngineProblem::diagonal_metric` where the loss has a per-coordinate prox
//! and there is no linear part (the density; the regressions keep one scalar
//! step), the positive part per PSD part ([`super::positive_part`]: eigenpairs
//! above 0, or with [`PositivePartSolver::polar`] a dense `[M_q]_+` from matrix
//! products alone ([`super::polar`]), whose model values are then the
//! quadratic forms `p_i^T A_q p_i`, `O(n r^2)` instead of `O(n r k)` for `k`
//! positive eigenvalues), the remainder bound
//! `sum_q ||M_q(x) - M_q(y)||_F^2/(2 lambda_2) + ||P (s_x - s_y)||^2/(2 lambda_0)`
//! (exact for the linear part) that accepts most steps without an
//! eigendecomposition at the candidate, `M_q` at FISTA's extrapolated point as
//! an affine combination of cached matrices, gap checks that reuse the
//! candidate's `[M_q]_+`, and for the integral constraint the multiplier
//! secant of [`super::dual`] (solves at fixed `mu` left once the side of the
//! root is certain). The duality gap is the stopping rule. With resident
//! features, the polar route and a loss that runs on the device (the
//! density and quantile regression), FISTA's state stays on the device as
//! well (`resident.rs`: nothing of length `n` crosses per iteration). Nystrom compression is
//! the caller's choice of centres for `P`: the cost per iteration is
//! `O(Q (n r^2 + r^3))` for `Q` parts.

use std::time::Instant;

use nalgebra::{DMatrix, DVector};

use crate::linalg::{self, check_dim};
use crate::resident::Workspace;

use super::features::Features;
use super::options::{SolverOptions, SolverReport};
use super::error::{check_nonnegative, check_positive};
use crate::error::Error;
use super::fista::{self, FistaSettings};
use super::loss::{DualLoss, ResidentLoss};
use super::positive_part::{PartMatrix, PositivePartSolver, PositivePartStats};

mod evaluation;
mod resident;
/// The resident solve's test helpers, for the regressions' tests.
#[cfg(test)]
pub(in crate::psd) use resident::tests as resident_tests;

use evaluation::{MatrixCache, PartState, State};
use resident::{ResidentPoint, ResidentSetting};

/// A convex loss of `B` blocks of `n` values, separable over the samples
/// (jointly convex across the blocks of one sample), with the conjugate and
/// the proximal operator of the conjugate. Vectors stack the blocks:
/// block `b` is rows `b n .. (b + 1) n`.
pub trait BlockLoss {
    /// Number of samples n.
    fn samples(&self) -> usize;
    /// Number of blocks B.
    fn blocks(&self) -> usize;
    /// `L(u)`, `+inf` outside the domain.
    fn value(&self, u: &DVector<f64>) -> f64;
    /// `L*(z)`, `+inf` outside the domain.
    fn conjugate(&self, z: &DVector<f64>) -> f64;
    /// `prox_{t L*}(v)`.
    fn prox_conjugate(&self, v: &DVector<f64>, t: f64) -> DVector<f64>;
    /// `prox` of `L*` with a step per coordinate (`t` of length `B n`), for
    /// the diagonal metric of the solver; `None` (the default) keeps the
    /// scalar step.
    fn prox_conjugate_per_coordinate(&self, v: &DVector<f64>, t: &DVector<f64>) -> Option<DVector<f64>> {
        let _ = (v, t);
        None
    }
    /// A dual starting point, given the model values `u0` of the primal guess
    /// `A_q = s_0 I` (`s_0 = 1/tr W` with an integral, else 1), `w = 0`.
    fn dual_start(&self, u0: &DVector<f64>) -> DVector<f64>;
    /// The loss on resident vectors (`n x B`, block `b` in column `b`),
    /// where it provides that (`None`, the default: FISTA's state stays on
    /// the host).
    fn resident(&self) -> Option<&dyn ResidentLoss> {
        None
    }
}

impl<L: DualLoss> BlockLoss for L {
    fn samples(&self) -> usize {
        self.len()
    }
    fn blocks(&self) -> usize {
        1
    }
    fn value(&self, u: &DVector<f64>) -> f64 {
        DualLoss::value(self, u)
    }
    fn conjugate(&self, z: &DVector<f64>) -> f64 {
        DualLoss::conjugate(self, z)
    }
    fn prox_conjugate(&self, v: &DVector<f64>, t: f64) -> DVector<f64> {
        DualLoss::prox_conjugate(self, v, t)
    }
    fn prox_conjugate_per_coordinate(&self, v: &DVector<f64>, t: &DVector<f64>) -> Option<DVector<f64>> {
        DualLoss::prox_conjugate_per_term(self, v, t)
    }
    fn dual_start(&self, u0: &DVector<f64>) -> DVector<f64> {
        DualLoss::dual_start(self, u0)
    }
    fn resident(&self) -> Option<&dyn ResidentLoss> {
        DualLoss::resident(self)
    }
}

/// A loss that is a mean over samples, `L(u) = (1/n) sum_i l_i(u_i)`, with
/// the number `n` of all samples given apart from the samples held, so
/// that a block of the samples (a rank's, in a sharded fit) keeps the
/// scale of all of them ([`SampleTerms`]). The regression losses compute
/// through it for all their samples too (`n` = the samples held).
pub(crate) trait MeanTerms {
    /// Number of samples held.
    fn samples(&self) -> usize;
    /// Number of blocks B.
    fn blocks(&self) -> usize;
    /// `L(u)` for `n` samples in all.
    fn value_of(&self, u: &DVector<f64>, n: usize) -> f64;
    /// `L*(z)` for `n` samples in all.
    fn conjugate_of(&self, z: &DVector<f64>, n: usize) -> f64;
    /// `prox_{t L*}(v)` for `n` samples in all.
    fn prox_conjugate_of(&self, v: &DVector<f64>, t: f64, n: usize) -> DVector<f64>;
    /// The dual start for `n` samples in all (the loss's own primal guess).
    fn dual_start_of(&self, n: usize) -> DVector<f64>;
    /// The loss of all its samples held here on resident vectors, where it
    /// provides that (`None`, the default).
    fn resident_all(&self) -> Option<&dyn ResidentLoss> {
        None
    }
}

/// The terms of a [`MeanTerms`] loss held here, scaled by the number
/// `total` of all samples: the loss of a rank's block of samples in a
/// sharded fit, or of all samples in one process.
pub(crate) struct SampleTerms<'a, L> {
    /// This block's terms.
    pub(crate) loss: &'a L,
    /// Samples over all ranks.
    pub(crate) total: usize,
}

impl<L: MeanTerms> BlockLoss for SampleTerms<'_, L> {
    fn samples(&self) -> usize {
        self.loss.samples()
    }
    fn blocks(&self) -> usize {
        self.loss.blocks()
    }
    fn value(&self, u: &DVector<f64>) -> f64 {
        self.loss.value_of(u, self.total)
    }
    fn conjugate(&self, z: &DVector<f64>) -> f64 {
        self.loss.conjugate_of(z, self.total)
    }
    fn prox_conjugate(&self, v: &DVector<f64>, t: f64) -> DVector<f64> {
        self.loss.prox_conjugate_of(v, t, self.total)
    }
    fn dual_start(&self, _u0: &DVector<f64>) -> DVector<f64> {
        self.loss.dual_start_of(self.total)
    }
    /// The loss's own when the samples held are all of them.
    fn resident(&self) -> Option<&dyn ResidentLoss> {
        if self.total == self.loss.samples() { self.loss.resident_all() } else { None }
    }
}

/// The linear part `w` of an [`EngineProblem`]: couplings `l_b` and weight `lambda_0 > 0`.
#[derive(Debug, Clone, PartialEq)]
pub struct LinearPart {
    /// `l_b`, one per block.
    pub coupling: Vec<f64>,
    /// `lambda_0 > 0`.
    pub lambda0: f64,
}

/// A problem of the engine (module docs).
pub struct EngineProblem<'a, L: BlockLoss + ?Sized> {
    /// Training features `P` (r x n).
    pub features: Features<'a>,
    /// Couplings `c_{qb}` of each PSD part (one vector of length B per part).
    pub parts: Vec<Vec<f64>>,
    /// The linear part, if any.
    pub linear: Option<LinearPart>,
    /// `W` of the constraint `tr(A W) = 1` (one PSD part, no linear part).
    pub integral: Option<&'a DMatrix<f64>>,
    /// The loss.
    pub loss: &'a L,
    /// `lambda_1 >= 0`.
    pub lambda1: f64,
    /// `lambda_2 > 0`.
    pub lambda2: f64,
}

/// A solution of the engine.
#[derive(Debug, Clone)]
pub struct EngineSolution {
    /// `A_q` (r x r, PSD) per part, in feature coordinates; normalised to
    /// `tr(A W) = 1` with an integral constraint.
    pub parts: Vec<DMatrix<f64>>,
    /// `w` (r) of the linear part (empty without one).
    pub linear: DVector<f64>,
    /// Dual variables `z` (B n).
    pub z: DVector<f64>,
    /// Multiplier of the integral constraint (0 without one).
    pub mu: f64,
    /// Dual objective `-F(z, mu)`.
    pub dual_objective: f64,
    /// Convergence and timing.
    pub report: SolverReport,
    /// How the positive parts were computed, summed over the parts.
    pub eigen_stats: PositivePartStats,
}

impl<'a, L: BlockLoss + ?Sized> EngineProblem<'a, L> {
    fn n(&self) -> usize {
        self.features.samples()
    }

    fn validate(&self) -> Result<(), Error> {
        check_nonnegative("lambda_1", self.lambda1)?;
        check_positive("lambda_2", self.lambda2)?;
        self.features.validate()?;
        check_dim("number of loss samples vs number of feature columns", self.features.samples(), self.loss.samples())?;
        let b = self.loss.blocks();
        if b == 0 {
            return Err(Error::InvalidParameter { name: "loss", reason: "needs at least one block".into() });
        }
        for c in &self.parts {
            check_dim("couplings of a PSD part vs blocks of the loss", b, c.len())?;
        }
        if let Some(lin) = &self.linear {
            check_positive("lambda_0", lin.lambda0)?;
            check_dim("couplings of the linear part vs blocks of the loss", b, lin.coupling.len())?;
        }
        if self.parts.is_empty() && self.linear.is_none() {
            return Err(Error::InvalidParameter { name: "parts", reason: "need a PSD part or a linear part".into() });
        }
        if let Some(w) = self.integral {
            if self.parts.len() != 1 || self.linear.is_some() {
                return Err(Error::InvalidParameter { name: "integral", reason: "the integral constraint needs exactly one PSD part and no linear part".into() });
            }
            check_dim("rows of W vs feature dimension", self.features.dim(), w.nrows())?;
            check_dim("columns of W vs feature dimension", self.features.dim(), w.ncols())?;
        }
        Ok(())
    }

    /// FISTA in `z` at fixed `mu` (see [`super::dual`] for `leave_when_far`).
    #[allow(clippy::too_many_arguments)]
    fn solve_at(
        &self,
        z0: DVector<f64>,
        mu: f64,
        step: f64,
        metric: Option<&DVector<f64>>,
        inner_tol: f64,
        options: &SolverOptions,
        budget: usize,
        state: &mut State<'_>,
        history: &mut Vec<(usize, f64)>,
        done_before: usize,
    ) -> Result<fista::FistaOutcome, Error> {
        let cell = std::cell::RefCell::new(state);
        let error: std::cell::RefCell<Option<Error>> = std::cell::RefCell::new(None);
        let gaps_seen = std::cell::RefCell::new(Vec::new());
        let record = |e: Error| {
            let mut slot = error.borrow_mut();
            if slot.is_none() {
                *slot = Some(e);
            }
        };
        let smooth = |z: &DVector<f64>, want_gradient: bool| -> (f64, Option<DVector<f64>>) {
            let mut st = cell.borrow_mut();
            let out = if want_gradient {
                self.evaluate(z, mu, &mut st).map(|ev| (self.psd_energy(&ev.pps) + ev.linear_energy, Some(-ev.u)))
            } else {
                self.positive_parts(z, mu, &mut st).and_then(|pps| Ok((self.psd_energy(&pps) + self.linear_values(z, &mut st)?.2, None)))
            };
            out.unwrap_or_else(|e| {
                record(e);
                (f64::NAN, want_gradient.then(|| DVector::zeros(z.len())))
            })
        };
        // `||[M]_+||_F^2 / 2` has a 1-Lipschitz gradient, so the remainder of
        // each part is at most `||M_q(x) - M_q(y)||_F^2 / (2 lambda_2)`; the
        // linear part's remainder is exactly `||P (s_x - s_y)||^2 / (2 lambda_0)`.
        let remainder_bound = |y: &DVector<f64>, x: &DVector<f64>| -> Option<f64> {
            let mut st = cell.borrow_mut();
            let mut total = 0.0;
            for q in 0..self.parts.len() {
                let m_y = self.m_matrix(q, &self.combine(&self.parts[q], y), mu, &mut st).ok()?;
                let m_x = self.m_matrix(q, &self.combine(&self.parts[q], x), mu, &mut st).ok()?;
                total += self.distance_squared(&m_x, &m_y).ok()? / (2.0 * self.lambda2);
            }
            if let Some(lin) = &self.linear {
                let ds = self.combine(&lin.coupling, &(x - y));
                total += self.apply_summed(&ds, &mut st).ok()?.norm_squared() / (2.0 * lin.lambda0);
            }
            Some(total)
        };
        let prox = |v: &DVector<f64>, t: f64| self.loss.prox_conjugate(v, t);
        let nonsmooth = |z: &DVector<f64>| {
            let mut value = [self.loss.conjugate(z)];
            if let Err(e) = cell.borrow_mut().reduce(Ok(()), &mut value) {
                record(e);
                return f64::NAN;
            }
            value[0]
        };
        // Inner products of FISTA over the ranks' blocks of z.
        let sum = |values: &mut [f64]| {
            if let Err(e) = cell.borrow_mut().reduce(Ok(()), values) {
                record(e);
                values.fill(f64::NAN);
            }
        };
        let stop = self.stopping_rule(options);
        let gap = |z: &DVector<f64>| -> f64 {
            let mut st = cell.borrow_mut();
            match self.gaps(z, mu, &mut st) {
                Ok(gaps) => {
                    gaps_seen.borrow_mut().push(gaps.0);
                    stop(gaps)
                }
                Err(e) => {
                    record(e);
                    0.0
                }
            }
        };
        let settings = FistaSettings { initial_step: step, max_iterations: budget, tolerance: inner_tol, check_every: options.check_every };
        let outcome = match metric {
            None => fista::minimise_with_bound_sharded(smooth, remainder_bound, prox, nonsmooth, gap, sum, z0, settings),
            Some(d) => {
                // FISTA in w = D^{1/2} z: the smooth part's gradient is
                // D^{-1/2} grad, and prox_{t g}(v) for g(w) = L*(D^{-1/2} w)
                // is D^{1/2} prox_{(t/D) L*}(D^{-1/2} v), coordinate-wise.
                let root = d.map(f64::sqrt);
                let to_z = |w: &DVector<f64>| w.component_div(&root);
                let smooth_w = |w: &DVector<f64>, want: bool| {
                    let (value, grad) = smooth(&to_z(w), want);
                    (value, grad.map(|g| g.component_div(&root)))
                };
                let remainder_w = |y: &DVector<f64>, x: &DVector<f64>| remainder_bound(&to_z(y), &to_z(x));
                let prox_w = |v: &DVector<f64>, t: f64| match self.loss.prox_conjugate_per_coordinate(&to_z(v), &d.map(|di| t / di)) {
                    Some(s) => s.component_mul(&root),
                    None => unreachable!("the metric is only built for losses with a per-coordinate prox"),
                };
                let nonsmooth_w = |w: &DVector<f64>| nonsmooth(&to_z(w));
                let gap_w = |w: &DVector<f64>| gap(&to_z(w));
                let mut out = fista::minimise_with_bound_sharded(smooth_w, remainder_w, prox_w, nonsmooth_w, gap_w, sum, z0.component_mul(&root), settings);
                out.x = to_z(&out.x);
                out
            }
        };
        if let Some(e) = error.borrow_mut().take() {
            return Err(e);
        }
        for (&(k, _), &g) in outcome.gap_history.iter().zip(gaps_seen.borrow().iter()) {
            history.push((done_before + k, g));
        }
        Ok(outcome)
    }

    /// What FISTA's stopping rule sees at fixed `mu` for the gaps
    /// `(gap, penalised gap, tr(A W))` of [`Self::gaps`]: 0 once the gap is
    /// within the tolerance, or with an integral once the penalised gap
    /// shows that `tr(A W)` stays far from 1 (the solve at this `mu` is
    /// left, see [`super::dual`]); otherwise the penalised gap.
    fn stopping_rule(&self, options: &SolverOptions) -> impl Fn((f64, f64, f64)) -> f64 {
        let w_norm = self.integral.map_or(0.0, |w| w.norm());
        let leave_when_far = self.integral.is_some();
        let (tolerance, lambda2) = (options.tolerance, self.lambda2);
        move |(g, inner, c)| {
            if g <= tolerance || (leave_when_far && w_norm * (2.0 * inner.max(0.0) / lambda2).sqrt() <= 0.5 * (c - 1.0).abs()) {
                0.0
            } else {
                inner
            }
        }
    }

    /// Solves the dual with the default `[M]_+` computation
    /// ([`PositivePartSolver::full_only`]: each `[M]_+` from the eigenpairs
    /// above 0).
    pub fn solve(&self, options: &SolverOptions) -> Result<EngineSolution, Error> {
        self.solve_with(options, PositivePartSolver::full_only())
    }

    /// Solves the dual; `eigen_solver` is cloned for every PSD part (e.g.
    /// [`PositivePartSolver::new`] for the warm-started partial path).
    ///
    /// Errors: invalid parameters or shapes, [`Error::NotConverged`] when
    /// the gap is above `options.tolerance` after `options.max_iterations`,
    /// [`Error::NotPositive`] when the fitted integral is not positive.
    pub fn solve_with(&self, options: &SolverOptions, eigen_solver: PositivePartSolver) -> Result<EngineSolution, Error> {
        self.solve_sharded(options, eigen_solver, None)
    }

    /// [`Self::solve_with`] on samples sharded over the ranks of `comm`
    /// (collective; `None`: one process): this rank's features `P` (its
    /// block of columns) and loss (its block of samples, the loss's scale
    /// that of all samples) give its block of `z` and of the model values;
    /// every sum over samples (`P diag(d_q) P^T` and `P P^T`, `P s`, the
    /// loss and conjugate values, FISTA's inner products, the comparisons of
    /// the caches) is summed over the ranks, and the `r x r` work (`[M_q]_+`,
    /// the steps, the multiplier of the integral) runs on every rank on the
    /// same sums, so every rank takes the same branches and returns the same
    /// `A_q`, `w`, `mu` and report (the solution's `z` is this rank's block).
    /// Sharded, `M_q` is on the host (the polar route's matrices too).
    ///
    /// Errors: as [`Self::solve_with`], the same on every rank; a failure of
    /// one rank's local work is [`Error::RankFailed`] on every rank.
    pub(crate) fn solve_sharded(&self, options: &SolverOptions, eigen_solver: PositivePartSolver, comm: Option<&dyn crate::distributed::Communicator>) -> Result<EngineSolution, Error> {
        self.solve_placed(options, eigen_solver, comm, true)
    }

    /// [`Self::solve_sharded`]; `device_state` lets FISTA's state live on
    /// the features' device where the problem allows it (`resident.rs`),
    /// otherwise it stays on the host.
    pub(in crate::psd) fn solve_placed(&self, options: &SolverOptions, eigen_solver: PositivePartSolver, comm: Option<&dyn crate::distributed::Communicator>, device_state: bool) -> Result<EngineSolution, Error> {
        let comm = comm.filter(|c| c.size() > 1);
        match comm {
            Some(comm) => crate::distributed::agree(comm, self.validate())?,
            None => self.validate()?,
        }
        options.validate()?;
        let start = Instant::now();
        let n = self.n();
        // With resident features and the polar route, M_q and [M_q]_+ stay on the device.
        let resident = self.features.device().is_some() && eigen_solver.is_polar() && comm.is_none();
        let integral_resident = match (resident, self.integral, self.features.device()) {
            (true, Some(w), Some(device)) => Some(device.upload(w, crate::precision::Precision::F64)?),
            _ => None,
        };
        // One workspace for the fit's resident operations (its pool outlives the state).
        let workspace = self.features.device().filter(|_| resident).map(Workspace::new);
        let mut state = State {
            parts: (0..self.parts.len()).map(|_| PartState { eigen_solver: eigen_solver.clone(), m_cache: MatrixCache::default(), recent: Vec::new() }).collect(),
            eigen: 0.0,
            products: 0.0,
            resident,
            integral_resident,
            workspace: workspace.as_ref(),
            comm,
            deferred: None,
        };
        // Step from the Lipschitz bound, optimistic by 4x (backtracking corrects it):
        // sum_q ||c_q||^2 max_i ||p_i||^2 ||P||^2 / lambda_2 + ||l||^2 ||P||^2 / lambda_0.
        let (column_norms, ppt) = if state.sharded() {
            let r = self.features.dim();
            let (norms, mut ppt, local) = match self.features.norms_and_gram() {
                Ok((norms, ppt)) => (norms, ppt, Ok(())),
                Err(e) => (DVector::zeros(n), DMatrix::zeros(r, r), Err(e)),
            };
            state.reduce(local, ppt.as_mut_slice())?;
            (norms, ppt)
        } else {
            self.features.norms_and_gram()?
        };
        let metric = self.diagonal_metric(&ppt, &mut state)?;
        let mut step = match metric {
            // The metric's step is 4 (its scale is in D); the Lipschitz bound,
            // and with it the largest eigenvalue of `P P^T`, is not needed.
            Some(_) => 4.0,
            None => {
                let max_col = state.max(if column_norms.is_empty() { f64::NEG_INFINITY } else { column_norms.max() })?;
                let ppt_top = linalg::symmetric_eigenvalues(&ppt)?.max();
                let sq = |c: &[f64]| c.iter().map(|v| v * v).sum::<f64>();
                let lipschitz = self.parts.iter().map(|c| sq(c) * max_col * ppt_top / self.lambda2).sum::<f64>() + self.linear.as_ref().map_or(0.0, |l| sq(&l.coupling) * ppt_top / l.lambda0);
                4.0 / lipschitz.max(f64::MIN_POSITIVE)
            }
        };

        // Primal guess A_q = s0 I (integral 1 with a constraint), w = 0.
        let s0 = self.integral.map_or(1.0, |w| 1.0 / w.trace().max(f64::MIN_POSITIVE));
        let mut u0 = DVector::zeros(n * self.loss.blocks());
        for c in &self.parts {
            for (b, &cb) in c.iter().enumerate() {
                u0.rows_mut(b * n, n).axpy(cb * s0, &column_norms, 1.0);
            }
        }
        let mut z = self.loss.dual_start(&u0);
        check_dim("length of the loss's dual start", u0.len(), z.len())?;
        // FISTA's state on the device where the problem allows (resident::ResidentSetting::new).
        let setting = if device_state { ResidentSetting::new(self, &state, metric.as_ref())? } else { None };
        let mut point = match &setting {
            Some(s) => Some(s.upload_point(&z)?),
            None => None,
        };
        let mut mu = if self.integral.is_some() { 1.0 } else { 0.0 };
        let mut iterations = 0;
        let mut history = Vec::new();
        // Secant steps on ln c(mu) inside the bracket of the root (see super::dual).
        let mut below: Option<(f64, f64)> = None;
        let mut above: Option<(f64, f64)> = None;
        let mut last: Option<(f64, f64)> = None;
        let inner_tol = if self.integral.is_some() { 0.25 * options.tolerance } else { options.tolerance };
        loop {
            let budget = options.max_iterations - iterations;
            match (&setting, point.take()) {
                (Some(s), Some(p)) => {
                    // A fresh point: what was computed at it belongs to the previous mu.
                    let outcome = self.solve_at_resident(s, ResidentPoint::new(p.z), mu, step, inner_tol, options, budget, &mut state, &mut history, iterations)?;
                    iterations += outcome.iterations;
                    point = Some(outcome.x);
                    step = outcome.step;
                }
                _ => {
                    let outcome = self.solve_at(z, mu, step, metric.as_ref(), inner_tol, options, budget, &mut state, &mut history, iterations)?;
                    iterations += outcome.iterations;
                    z = outcome.x;
                    step = outcome.step;
                }
            }
            if self.integral.is_none() {
                break;
            }
            let (gap, _, c) = match (&setting, &point) {
                (Some(s), Some(p)) => self.resident_gaps(s, p, mu, &mut state)?,
                _ => self.gaps(&z, mu, &mut state)?,
            };
            if gap <= options.tolerance || iterations >= options.max_iterations {
                break;
            }
            let log_c = c.max(f64::MIN_POSITIVE).ln().clamp(-5.0, 5.0);
            if log_c > 0.0 { below = Some((mu, log_c)) } else { above = Some((mu, log_c)) }
            // c(mu) decreases in mu, so ln c > 0 asks for a larger mu. Outside
            // a bracket the secant through two nearly equal values of ln c (an
            // inner solve left early barely moves c) can jump anywhere, even
            // away from the root (to mu = 7e5 from -3, where [M]_+ = 0 and the
            // gap is infinite): it is taken only when it moves the way ln c
            // says and at most 100 expansion steps far.
            let expansion = mu + log_c * mu.abs().max(1.0);
            let secant = match last {
                Some((mu0, g0)) if g0 != log_c && mu0 != mu => {
                    let s = mu - log_c * (mu - mu0) / (log_c - g0);
                    if (s - mu) * log_c > 0.0 && (s - mu).abs() <= 100.0 * (expansion - mu).abs() { s } else { expansion }
                }
                _ => expansion,
            };
            last = Some((mu, log_c));
            mu = match (below, above) {
                (Some((m0, g0)), Some((m1, g1))) => {
                    if secant > m0.min(m1) && secant < m0.max(m1) {
                        secant
                    } else {
                        m0 + (g0 / (g0 - g1)).clamp(0.05, 0.95) * (m1 - m0)
                    }
                }
                _ => secant,
            };
        }
        let (ev, terms) = match (&setting, &point) {
            (Some(s), Some(p)) => {
                let (mut ev, terms) = self.resident_terms(s, p, mu, &mut state)?;
                ev.w = self.resident_linear_weights(s, p, &mut state)?;
                z = s.download_point(p)?;
                (ev, terms)
            }
            _ => {
                let ev = self.evaluate(&z, mu, &mut state)?;
                let terms = self.loss_terms(&z, &ev, false, &mut state)?;
                (ev, terms)
            }
        };
        let primal = self.primal(&terms, &ev);
        let dual_value = self.dual_value(&terms, mu, &ev);
        let gap_now = primal + dual_value + self.dense_allowance(&ev.pps);
        let report = SolverReport {
            iterations,
            gap: gap_now,
            primal,
            gap_history: history,
            seconds_setup: 0.0,
            seconds_eigen: state.eigen,
            seconds_products: state.products,
            seconds_total: start.elapsed().as_secs_f64(),
        };
        if !(gap_now <= options.tolerance) {
            return Err(Error::NotConverged { iterations, gap: gap_now, tolerance: options.tolerance });
        }
        certifiable(primal, dual_value, options.tolerance)?;
        let r = self.features.dim();
        // A_q = [M_q]_+ / lambda_2. A dense part (the polar route) is within
        // its bound of the PSD cone, not on it: it is projected there (one
        // eigendecomposition per part and fit, a change of at most the bound
        // over lambda_2), so the fitted model is PSD and, with the integral
        // constraint, normalised exactly.
        let mut parts = ev
            .pps
            .iter()
            .map(|part| {
                let pp = match part {
                    PartMatrix::Eigen(pp) => pp,
                    PartMatrix::Dense(_) | PartMatrix::Resident(_) => {
                        let device = self.features.device().unwrap_or(&crate::device::Device::Cpu);
                        let a = part.to_host(device)?;
                        let projected = super::positive_part::positive_part_full(&((&a + a.transpose()) * 0.5))?;
                        return Ok(projected.to_matrix() / self.lambda2);
                    }
                };
                if pp.values.is_empty() {
                    return Ok(DMatrix::zeros(r, r));
                }
                let mut scaled = pp.vectors.clone();
                for (a, mut col) in scaled.column_iter_mut().enumerate() {
                    col *= pp.values[a] / self.lambda2;
                }
                Ok(linalg::matmul_nt(&scaled, &pp.vectors))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        if let Some(w) = self.integral {
            let trace_aw: f64 = parts.iter().map(|a| a.iter().zip(w.iter()).map(|(x, y)| x * y).sum::<f64>()).sum();
            if !(trace_aw > 0.0) {
                return Err(Error::NotPositive { what: "integral of the fitted model", value: trace_aw });
            }
            parts.iter_mut().for_each(|a| *a /= trace_aw);
        }
        let mut eigen_stats = PositivePartStats::default();
        for p in &state.parts {
            let s = p.eigen_solver.stats();
            eigen_stats.full += s.full;
            eigen_stats.partial += s.partial;
            eigen_stats.fallbacks += s.fallbacks;
            eigen_stats.polar += s.polar;
        }
        Ok(EngineSolution { parts, linear: ev.w, z, mu, dual_objective: -dual_value, report, eigen_stats })
    }
}

/// Rounding of the objectives allowed for in the gap, in units of
/// `eps (|primal| + |dual|)`.
const GAP_ROUNDING: f64 = 16.0;

/// Whether a duality gap computed from `primal` and `dual` can certify
/// `tolerance`: the rounding of the two objectives must stay below it, and
/// the gap must not be negative beyond that rounding (weak duality).
///
/// Errors: [`Error::IllConditioned`] otherwise, naming the magnitudes.
fn certifiable(primal: f64, dual: f64, tolerance: f64) -> Result<(), Error> {
    let rounding = GAP_ROUNDING * f64::EPSILON * (primal.abs() + dual.abs());
    let gap = primal + dual;
    if !(primal.is_finite() && dual.is_finite()) || rounding > tolerance || gap < -(tolerance + rounding) {
        return Err(Error::IllConditioned {
            what: "PSD dual",
            reason: format!(
                "primal {primal:e} and dual {:e} objectives: their rounding ({rounding:e}) or the gap ({gap:e}) cannot certify the tolerance {tolerance:e} (with an integral constraint, a kernel width small next to the base measure makes its entries tiny and the model huge: widen the kernel or narrow the base measure)",
                -dual
            ),
        });
    }
    Ok(())
}
