//! The baselines of Appendix D (PNM, NCM, GLM) for the two regression
//! problems of Section 6 (Figure 1, centre and bottom rows): the
//! non-negative function (`theta = 1/variance`, or the gaps between quantiles)
//! is modelled by a linear kernel expansion instead of a PSD model.
//!
//! All models use the kernel `k'(x, x') = k_sigma(x, x') + 1` of
//! [`super::heteroscedastic`] with the empirical features
//! `Phi'(x) = (Phi(x), 1)` (Eq. 8 plus a constant), `P = (Phi'(x_i))_i`,
//! `K' = P^T P`, and the regulariser `lambda/2 ||w||^2` of App. E, i.e.
//! `lambda/2 alpha^T K' alpha` in kernel coordinates. A non-negative part `g` is
//!
//! | kind | `g(x)` | coefficients | constraint | problem |
//! |---|---|---|---|---|
//! | PNM (Eq. 36) | `w^T Phi'(x)` | `w` (feature coords.) | `g(x_i) >= 0` on the data only | convex |
//! | NCM (Eq. 34) | `sum_j a_j k'(x, x_j)` | `a` (kernel coords.) | `a >= 0` | convex |
//! | GLM (Eq. 32) | `exp(w^T Phi'(x))` | `w` (feature coords.) | none | non-convex |
//!
//! with regulariser `lambda/2 ||w||^2` (PNM, GLM) or `lambda/2 a^T K' a` (NCM).
//! Only NCM and GLM are non-negative everywhere; PNM only on the data.
//!
//! **Heteroscedastic regression** ([`BaselineHeteroscedasticParams`]): as in
//! [`super::heteroscedastic`], targets standardised, `eta = v^T Phi'(x)` linear,
//! `theta = g(x)`, objective
//! `L(eta, theta) + lambda_0/2 ||v||^2 + Omega(g)` with the Gaussian loss
//! [`super::heteroscedastic::GaussianNaturalLoss`] (its value, gradient and Hessian are reused).
//! Solved by the projected damped Newton method of `super::newton` (Bertsekas 1982, regularised); the
//! loss keeps `theta(x_i) > 0`, which is PNM's constraint. GLM is non-convex
//! (`eta^2 exp(-s)` is not jointly convex): it is solved from `restarts`
//! starting points (the first `theta = 1`, the others random with the
//! params' seed) and the stationary point with the lowest objective is kept,
//! as the paper restarts randomly.
//!
//! **Multiple quantile regression** ([`BaselineQuantileParams`]): as in
//! [`super::regression`], `q_c = v^T Phi'(x)` is the middle level and the
//! others are `q_c +- sum` of non-negative parts `g_i` (one per gap), on
//! targets centred by their median and scaled by their standard deviation.
//! - PNM: the exact pinball problem is a QP; it is solved on its dual
//!   (Fenchel-Rockafellar as in [`super::regression`], with multipliers
//!   `mu_i >= 0` for `P^T w_i >= 0`): minimise
//!   `sum_j alpha_j^T y + ||P s||^2/(2 lambda_0) + sum_i ||P d_i||^2/(2 lambda)`,
//!   `s = sum_j alpha_j`, `d_i = sign_i sum_{j in S_i} alpha_j - mu_i`, over the
//!   boxes `alpha_j in [-tau_j/n, (1 - tau_j)/n]` and `mu_i >= 0` by FISTA
//!   ([`super::fista`]); primal recovery `v = -P s / lambda_0`,
//!   `w_i = -P d_i / lambda`. Stopping rule: the KKT residual
//!   `sum_j (L_j(q_j) + L_j*(alpha_j) - alpha_j^T q_j) + sum_i |mu_i^T g_i(X)| + sum_i max_l [g_i(x_l)]_-`
//!   (zero exactly at a primal-dual solution). PNM's curves are ordered on
//!   the data only, so they may cross elsewhere (the paper's point).
//! - NCM, GLM: the pinball loss `rho_tau` is replaced by its Moreau envelope
//!   with parameter `epsilon` (`smoothing`, default `1e-3` in standardised
//!   units), which differs from it by at most `epsilon max(tau, 1 - tau)^2 / 2`
//!   per term, and the smooth problem is solved by the projected damped Newton
//!   method with continuation in `epsilon` (1, 0.1, .., `epsilon`; GLM: with
//!   restarts as above, since it is non-convex).

use nalgebra::{DMatrix, DVector};
use rand::rngs::StdRng;
use rand_distr::{Distribution, Normal};

use crate::linalg;

use super::baselines::BaselineKind;
use crate::error::Error;

mod heteroscedastic;
mod quantile;

pub use heteroscedastic::{BaselineHeteroscedastic, BaselineHeteroscedasticParams, HeteroscedasticBaselineProblem};
pub use quantile::{BaselineQuantile, BaselineQuantileParams, QuantileBaselineProblem};

/// `a diag(d) b^T` for `a` (m x n), `b` (k x n).
pub(super) fn weighted_product(a: &DMatrix<f64>, d: &DVector<f64>, b: &DMatrix<f64>) -> DMatrix<f64> {
    let scaled = DMatrix::from_fn(a.nrows(), a.ncols(), |i, j| a[(i, j)] * d[j]);
    linalg::matmul_nt(&scaled, b)
}

/// A non-negative part of Appendix D at the training points: `g = link(J^T c)`
/// with `J^T` = `P^T` (PNM, GLM) or `K'` (NCM), regulariser `1/2 c^T R c`.
#[derive(Debug, Clone)]
pub(super) struct PartMap {
    pub(super) kind: BaselineKind,
    /// `J` (dim x n): the values before the link are `J^T c`.
    pub(super) jt: DMatrix<f64>,
    /// `R` (dim x dim).
    pub(super) reg: DMatrix<f64>,
    /// NCM: the features `P_Z` of the centres, `g(x) = Phi'(x)^T P_Z a`.
    pub(super) centres: Option<DMatrix<f64>>,
}

impl PartMap {
    /// The part for training features `p` ((r + 1) x n) and the features
    /// `pz` of the centres ((r + 1) x m; NCM's kernel coordinates are the
    /// coefficients of `k'(., z_j)`, `J^T = K'(X, Z) = P^T P_Z`, `R = K'(Z, Z)`).
    pub(super) fn new(kind: BaselineKind, p: &DMatrix<f64>, pz: &DMatrix<f64>) -> Self {
        match kind {
            BaselineKind::Ncm => PartMap { kind, jt: linalg::matmul_tn(pz, p), reg: linalg::matmul_tn(pz, pz), centres: Some(pz.clone()) },
            _ => PartMap { kind, jt: p.clone(), reg: DMatrix::identity(p.nrows(), p.nrows()), centres: None },
        }
    }

    pub(super) fn dim(&self) -> usize {
        self.jt.nrows()
    }

    /// `(g, g', g'')` at the data for coefficients `c`.
    pub(super) fn values(&self, c: &DVector<f64>) -> (DVector<f64>, DVector<f64>, DVector<f64>) {
        let s = self.jt.transpose() * c;
        match self.kind {
            BaselineKind::Glm => {
                let e = s.map(f64::exp);
                (e.clone(), e.clone(), e)
            }
            _ => {
                let n = s.len();
                (s, DVector::from_element(n, 1.0), DVector::zeros(n))
            }
        }
    }

    pub(super) fn regulariser(&self, c: &DVector<f64>) -> f64 {
        0.5 * c.dot(&(&self.reg * c))
    }

    /// The start `g = 1` (PNM, GLM) or `a = 1/n` (NCM, `g(x_i) = mean_j k'(x_i, x_j) >= 1`).
    pub(super) fn unit_start(&self) -> DVector<f64> {
        let d = self.dim();
        match self.kind {
            BaselineKind::Pnm => DVector::from_fn(d, |j, _| if j + 1 == d { 1.0 } else { 0.0 }),
            BaselineKind::Ncm => DVector::from_element(d, 1.0 / d as f64),
            BaselineKind::Glm => DVector::zeros(d),
        }
    }

    /// Weights in feature coordinates: `g(x) = link(Phi'(x)^T u)`.
    pub(super) fn feature_weights(&self, c: &DVector<f64>) -> DVector<f64> {
        match &self.centres {
            Some(pz) => pz * c,
            None => c.clone(),
        }
    }
}

/// Random starting points for the non-convex GLM: `c ~ N(0, 1)` entrywise, seeded.
pub(super) fn random_start(dim: usize, rng: &mut StdRng) -> DVector<f64> {
    let normal = Normal::new(0.0, 1.0).expect("unit normal");
    DVector::from_fn(dim, |_, _| normal.sample(rng))
}

/// Convergence of a baseline fit.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct BaselineReport {
    /// Iterations of the kept run (Newton iterations, or FISTA iterations for the PNM quantile dual).
    pub iterations: usize,
    /// Optimality residual reached (projected-gradient residual, or the KKT residual of the PNM quantile dual).
    pub residual: f64,
    /// Objective of the kept run (standardised units, `1/n`-scaled).
    pub objective: f64,
    /// Objective reached from each starting point (one for the convex models).
    #[cfg_attr(feature = "serde", serde(with = "crate::io::nonfinite::values"))]
    pub objectives_per_start: Vec<f64>,
    /// Wall-clock seconds of the fit.
    pub seconds: f64,
}


/// The most starting points a baseline regression fit takes: each start runs
/// up to `max_iterations` Newton steps, so the count bounds the fit's work.
pub const MAX_RESTARTS: usize = 10_000;

/// `restarts` in `1..=`[`MAX_RESTARTS`].
pub(super) fn check_restarts(restarts: usize) -> Result<(), Error> {
    if restarts == 0 || restarts > MAX_RESTARTS {
        return Err(Error::InvalidParameter { name: "restarts", reason: format!("must be in 1..={MAX_RESTARTS}, got {restarts}") });
    }
    Ok(())
}

