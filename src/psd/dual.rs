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
//! steps on `ln c(mu)`, which is close to linear in `mu`, kept inside the
//! bracket of the root once there is one (regula falsi otherwise); the first
//! step assumes the slope `-1/max(|mu|, 1)` of the unregularised problem, where
//! `c = 1/mu`. `alpha` is warm-started.
//! A solve at fixed `mu` need not finish when `mu` is far from the root: the
//! penalised primal is `lambda_2`-strongly convex, so at a dual iterate with
//! penalised gap `g` the primal point `A` of Eq. 11 has
//! `||A - A_mu||_F <= sqrt(2 g / lambda_2)` and
//! `|c - c(mu)| <= ||W||_F sqrt(2 g / lambda_2) =: delta`. The solve stops as
//! soon as `delta <= |c - 1| / 2`: the side of the root is then certain (the
//! bracket stays valid) and `c` is good enough for the secant.
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


use super::engine::EngineProblem;
use super::features::Features;
use super::options::{SolverOptions, SolverReport};
use crate::error::Error;
use super::loss::DualLoss;
use super::positive_part::{PositivePartSolver, PositivePartStats};

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
        self.solve_sharded(options, eigen_solver, None)
    }

    /// [`DualProblem::solve_with`] on samples sharded over the ranks of
    /// `comm` ([`EngineProblem::solve_sharded`]): `features` and `loss` are
    /// this rank's block of samples; `alpha` of the solution is this rank's
    /// block, everything else the same on every rank.
    pub(crate) fn solve_sharded(&self, options: &SolverOptions, eigen_solver: PositivePartSolver, comm: Option<&dyn crate::distributed::Communicator>) -> Result<DualSolution, Error> {
        let engine = EngineProblem { features: self.features, parts: vec![vec![1.0]], linear: None, integral: self.integral, loss: self.loss, lambda1: self.lambda1, lambda2: self.lambda2 };
        let mut s = engine.solve_sharded(options, eigen_solver, comm)?;
        let a = s.parts.pop().unwrap_or_else(|| DMatrix::zeros(self.features.dim(), self.features.dim()));
        Ok(DualSolution { a, alpha: s.z, mu: s.mu, dual_objective: s.dual_objective, report: s.report, eigen_stats: s.eigen_stats })
    }
}
