//! Heteroscedastic Gaussian regression in natural parameters (Section 6,
//! "Heteroscedastic Gaussian process estimation"; Le, Smola & Canu 2005).
//!
//! `y | x ~ N(mu(x), v(x))` is written with the natural parameters
//! `eta = mu / v` and `theta = 1 / v`, in which the per-sample negative
//! log-likelihood (up to `log(2 pi)/2`)
//!
//! `l(eta, theta; y) = theta y^2/2 - eta y + eta^2/(2 theta) - log(theta)/2`
//!
//! is jointly convex for `theta > 0` (`eta^2/theta` is a perspective).
//! As in the paper, `eta` is a **linear** model and `theta` a **PSD model**
//! (Eq. 7), both in the features of the kernel `k_sigma(x, x') + 1`
//! (Gaussian plus a constant), i.e. `Phi'(x) = (Phi(x), 1)` with the
//! empirical Gaussian features `Phi` of [`super::features`] (Eq. 8):
//!
//! `eta(x) = w^T Phi'(x)`, `theta(x) = Phi'(x)^T A Phi'(x)`, `A >= 0`.
//!
//! The constant feature is an intercept for `eta` and lets `theta` tend to
//! the constant `A_{r r} >= 0` far from the data instead of decaying to 0
//! like a pure Gaussian PSD model (which would make the variance infinite).
//! `theta(x) = ||G Phi'(x)||^2 >= 0` everywhere by construction.
//! The training problem (the paper's functional, scaled by `1/n`) is
//!
//! `min_{w, A >= 0} (1/n) sum_i l(eta(x_i), theta(x_i); y_i) + lambda_0/2 ||w||^2 + lambda_1 tr A + lambda_2/2 ||A||_F^2`.
//!
//! Targets are standardised first (`y' = (y - mean)/sd`; the predictions are
//! mapped back: `mu = mean + sd eta'/theta'`, `v = sd^2 / theta'`).
//!
//! # Dual (Theorem 2 with an extra linear block) and solver
//!
//! With `P = (Phi'(x_i))_i` ((r+1) x n), dual variables `alpha_i` (for
//! `theta_i`) and `beta_i` (for `eta_i`), Fenchel duality as in Theorem 2 gives
//!
//! `min_{alpha, beta} sum_i l_i*(beta_i, alpha_i) + 1/(2 lambda_0) ||P beta||^2 + 1/(2 lambda_2) ||[M(alpha)]_+||_F^2`,
//! `M(alpha) = -P diag(alpha) P^T - lambda_1 I`,
//!
//! with primal recovery `w = -P beta / lambda_0` and `A = [M(alpha)]_+ / lambda_2`
//! (Eq. 11), and gradient `(-theta(x_i), -eta(x_i))` of the smooth part. It is
//! the configuration of the engine of [`super::engine`] with blocks
//! `(theta, eta)`, one PSD part on `theta` and the linear part on `eta`
//! (certified warm-started `[M]_+`, remainder-bound backtracking, Nystrom
//! centres with [`HeteroscedasticParams::nystrom`]); the duality gap (primal at
//! `(w, A)` plus the dual objective) is the stopping rule.
//!
//! **Conjugate.** For `l_i = c l(., .; y_i)`, `c = 1/n`: the supremum over `eta`
//! of `a eta + b theta - l_i` is attained at `eta = theta (a + c y)/c`, then
//! over `theta` with `g = (a + c y)^2/(2c) + b - c y^2/2`:
//! `l_i*(a, b) = (c/2)(log(c / (-2 g)) - 1)` for `g < 0`, `+inf` otherwise.
//!
//! **Proximal operator of the conjugate.** By Moreau,
//! `prox_{s l*}(v) = v - s prox_{l/s}(v/s)`. The prox of `q l` (`q = 1/s`) at `(u, v)`,
//! `argmin_{eta, theta} q l(eta, theta) + (eta - u)^2/2 + (theta - v)^2/2`,
//! is solved exactly: for fixed `theta`, `eta` is a quadratic minimiser,
//! `eta(theta) = theta (u + q c y)/(theta + q c)`; substituting leaves the 1-D function
//!
//! `h(t) = q c (t y^2/2 - log(t)/2) + (t - v)^2/2 + kappa q c / (2 (t + q c))`, `kappa = (u + q c y)^2`,
//!
//! with `h'(t) = q c y^2/2 - q c/(2t) + t - v - kappa q c/(2 (t + q c)^2)` and
//! `h''(t) = q c/(2 t^2) + 1 + kappa q c/(t + q c)^3 > 0`: strictly convex on
//! `t > 0`, `h' -> -inf` at `0+` and `+inf` at `+inf`, so the unique root of `h'`
//! is bracketed (doubling/halving) and found by Newton steps safeguarded by
//! bisection (in `log t`) to machine precision.

use std::time::Instant;

use nalgebra::{DMatrix, DVector};

use crate::input::{AsMatrix, AsVector};
use crate::device::Device;
use crate::kernel::Kernel;
use crate::linalg::{self, check_dim, check_matrix};

use super::features::Features;
use super::options::{SolverOptions, SolverReport};
use super::engine::{BlockLoss, EngineProblem, LinearPart, SampleTerms, MeanTerms};
use super::model::psd_factor;
use super::options::{PsdSettings, Regularisation, Terms, shared_builders, solver_builders};
use crate::error::Error;
use super::features::EmpiricalFeatures;

/// The per-sample Gaussian negative log-likelihood in natural parameters,
/// `L(eta, theta) = (1/n) sum_i theta_i y_i^2/2 - eta_i y_i + eta_i^2/(2 theta_i) - log(theta_i)/2`,
/// with its conjugate and the proximal operator of the conjugate (module docs).
#[derive(Debug, Clone)]
pub struct GaussianNaturalLoss {
    /// Targets `y_i`.
    pub targets: DVector<f64>,
}

impl GaussianNaturalLoss {
    fn weight(&self) -> f64 {
        1.0 / self.targets.len() as f64
    }

    /// `L(eta, theta)`, `+inf` if some `theta_i <= 0`.
    pub fn value(&self, eta: &DVector<f64>, theta: &DVector<f64>) -> f64 {
        self.value_weighted(eta, theta, self.weight())
    }

    /// [`Self::value`] with the weight `c` of every term.
    fn value_weighted(&self, eta: &DVector<f64>, theta: &DVector<f64>, c: f64) -> f64 {
        let mut total = 0.0;
        for i in 0..self.targets.len() {
            let (e, t, y) = (eta[i], theta[i], self.targets[i]);
            if !(t > 0.0) {
                return f64::INFINITY;
            }
            total += t * y * y / 2.0 - e * y + e * e / (2.0 * t) - t.ln() / 2.0;
        }
        c * total
    }

    /// `L*(beta, alpha) = sum_i l_i*(beta_i, alpha_i)` (`beta` pairs with `eta`,
    /// `alpha` with `theta`), `+inf` outside the domain.
    pub fn conjugate(&self, beta: &DVector<f64>, alpha: &DVector<f64>) -> f64 {
        self.conjugate_weighted(beta, alpha, self.weight())
    }

    /// [`Self::conjugate`] with the weight `c` of every term.
    fn conjugate_weighted(&self, beta: &DVector<f64>, alpha: &DVector<f64>, c: f64) -> f64 {
        let mut total = 0.0;
        for i in 0..self.targets.len() {
            let y = self.targets[i];
            let s = beta[i] + c * y;
            let g = s * s / (2.0 * c) + alpha[i] - c * y * y / 2.0;
            if !(g < 0.0) {
                return f64::INFINITY;
            }
            total += 0.5 * c * ((c / (-2.0 * g)).ln() - 1.0);
        }
        total
    }

    /// `prox_{q l_i}(u, v) = argmin_{eta, theta} q l_i(eta, theta) + (eta - u)^2/2 + (theta - v)^2/2`.
    pub fn prox_loss(&self, i: usize, u: f64, v: f64, q: f64) -> (f64, f64) {
        self.prox_loss_weighted(i, u, v, q, self.weight())
    }

    /// [`Self::prox_loss`] with the weight `c` of every term.
    fn prox_loss_weighted(&self, i: usize, u: f64, v: f64, q: f64, c: f64) -> (f64, f64) {
        let y = self.targets[i];
        let qc = q * c;
        let kappa = (u + qc * y).powi(2);
        let dh = |t: f64| qc * y * y / 2.0 - qc / (2.0 * t) + t - v - kappa * qc / (2.0 * (t + qc).powi(2));
        let d2h = |t: f64| qc / (2.0 * t * t) + 1.0 + kappa * qc / (t + qc).powi(3);
        let t = solve_increasing(dh, d2h, v.max(0.0) + 1.0);
        (t * (u + qc * y) / (t + qc), t)
    }

    /// `prox_{s L*}` at `(beta, alpha)` by Moreau's identity
    /// `prox_{s L*}(z) = z - s prox_{L/s}(z/s)`; returns `(beta, alpha)`.
    pub fn prox_conjugate(&self, beta: &DVector<f64>, alpha: &DVector<f64>, s: f64) -> (DVector<f64>, DVector<f64>) {
        self.prox_conjugate_weighted(beta, alpha, s, self.weight())
    }

    /// [`Self::prox_conjugate`] with the weight `c` of every term.
    fn prox_conjugate_weighted(&self, beta: &DVector<f64>, alpha: &DVector<f64>, s: f64, c: f64) -> (DVector<f64>, DVector<f64>) {
        let n = self.targets.len();
        let mut b = DVector::zeros(n);
        let mut a = DVector::zeros(n);
        for i in 0..n {
            let (e, t) = self.prox_loss_weighted(i, beta[i] / s, alpha[i] / s, 1.0 / s, c);
            b[i] = beta[i] - s * e;
            a[i] = alpha[i] - s * t;
        }
        (b, a)
    }

    /// Second derivatives per sample, `(d2L/deta2, d2L/deta dtheta, d2L/dtheta2)`
    /// `= (c/theta, -c eta/theta^2, c (eta^2/theta^3 + 1/(2 theta^2)))`, `c = 1/n`
    /// (the Hessian of `L` is block diagonal over samples), for `theta > 0`.
    pub fn hessian(&self, eta: &DVector<f64>, theta: &DVector<f64>) -> (DVector<f64>, DVector<f64>, DVector<f64>) {
        let c = self.weight();
        let n = self.targets.len();
        let ee = DVector::from_fn(n, |i, _| c / theta[i]);
        let et = DVector::from_fn(n, |i, _| -c * eta[i] / (theta[i] * theta[i]));
        let tt = DVector::from_fn(n, |i, _| c * (eta[i] * eta[i] / theta[i].powi(3) + 0.5 / (theta[i] * theta[i])));
        (ee, et, tt)
    }

    /// The dual point `(beta, alpha) = grad L(eta, theta)` of a primal point with `theta > 0`.
    pub fn gradient(&self, eta: &DVector<f64>, theta: &DVector<f64>) -> (DVector<f64>, DVector<f64>) {
        self.gradient_weighted(eta, theta, self.weight())
    }

    /// [`Self::gradient`] with the weight `c` of every term.
    fn gradient_weighted(&self, eta: &DVector<f64>, theta: &DVector<f64>, c: f64) -> (DVector<f64>, DVector<f64>) {
        let n = self.targets.len();
        let beta = DVector::from_fn(n, |i, _| c * (eta[i] / theta[i] - self.targets[i]));
        let alpha = DVector::from_fn(n, |i, _| {
            let (e, t, y) = (eta[i], theta[i], self.targets[i]);
            c * (y * y / 2.0 - e * e / (2.0 * t * t) - 1.0 / (2.0 * t))
        });
        (beta, alpha)
    }
}

/// The loss as the engine's [`BlockLoss`]: blocks `(theta, eta)`, dual
/// variables `(alpha, beta)`, every term weighted `1/n` for the `n` samples held.
impl BlockLoss for GaussianNaturalLoss {
    fn samples(&self) -> usize {
        self.targets.len()
    }
    fn blocks(&self) -> usize {
        2
    }
    fn value(&self, u: &DVector<f64>) -> f64 {
        self.value_of(u, self.targets.len())
    }
    fn conjugate(&self, z: &DVector<f64>) -> f64 {
        self.conjugate_of(z, self.targets.len())
    }
    fn prox_conjugate(&self, v: &DVector<f64>, t: f64) -> DVector<f64> {
        self.prox_conjugate_of(v, t, self.targets.len())
    }
    /// The dual point of the primal guess `eta = 0`, `theta = 1` (unit
    /// variance in standardised units; the guess of the engine is ignored).
    fn dual_start(&self, _u0: &DVector<f64>) -> DVector<f64> {
        self.dual_start_of(self.targets.len())
    }
}

/// The terms held with the weight `c = 1/n` of all `n` samples (a rank's
/// block in a sharded fit), blocks `(theta, eta)` as the [`BlockLoss`].
impl MeanTerms for GaussianNaturalLoss {
    fn samples(&self) -> usize {
        self.targets.len()
    }
    fn blocks(&self) -> usize {
        2
    }
    fn value_of(&self, u: &DVector<f64>, all: usize) -> f64 {
        let n = self.targets.len();
        self.value_weighted(&u.rows(n, n).into_owned(), &u.rows(0, n).into_owned(), 1.0 / all as f64)
    }
    fn conjugate_of(&self, z: &DVector<f64>, all: usize) -> f64 {
        let n = self.targets.len();
        self.conjugate_weighted(&z.rows(n, n).into_owned(), &z.rows(0, n).into_owned(), 1.0 / all as f64)
    }
    fn prox_conjugate_of(&self, v: &DVector<f64>, t: f64, all: usize) -> DVector<f64> {
        let n = self.targets.len();
        let (b, a) = self.prox_conjugate_weighted(&v.rows(n, n).into_owned(), &v.rows(0, n).into_owned(), t, 1.0 / all as f64);
        let mut out = DVector::zeros(2 * n);
        out.rows_mut(0, n).copy_from(&a);
        out.rows_mut(n, n).copy_from(&b);
        out
    }
    /// The dual point of the primal guess `eta = 0`, `theta = 1`.
    fn dual_start_of(&self, all: usize) -> DVector<f64> {
        let n = self.targets.len();
        let (beta, alpha) = self.gradient_weighted(&DVector::zeros(n), &DVector::from_element(n, 1.0), 1.0 / all as f64);
        let mut z = DVector::zeros(2 * n);
        z.rows_mut(0, n).copy_from(&alpha);
        z.rows_mut(n, n).copy_from(&beta);
        z
    }
}

/// The root on `(0, inf)` of an increasing `f` with `f(0+) < 0 < f(inf)`:
/// bracket by doubling/halving from `start`, then Newton safeguarded by
/// bisection in `log t`, to machine precision.
fn solve_increasing(f: impl Fn(f64) -> f64, df: impl Fn(f64) -> f64, start: f64) -> f64 {
    let mut hi = start;
    let mut guard = 0;
    while f(hi) <= 0.0 && guard < 2100 {
        hi *= 2.0;
        guard += 1;
    }
    let mut lo = hi / 2.0;
    guard = 0;
    while f(lo) >= 0.0 && guard < 2100 {
        if f(lo) == 0.0 {
            return lo;
        }
        hi = lo;
        lo /= 2.0;
        guard += 1;
    }
    let mut t = 0.5 * (lo + hi);
    for _ in 0..300 {
        let ft = f(t);
        if ft == 0.0 {
            return t;
        }
        if ft < 0.0 { lo = t } else { hi = t }
        if hi - lo <= 2.0 * f64::EPSILON * hi {
            break;
        }
        let newton = t - ft / df(t);
        if (newton - t).abs() <= 2.0 * f64::EPSILON * t && newton > 0.0 {
            return newton;
        }
        t = if newton > lo && newton < hi {
            newton
        } else if hi > 4.0 * lo {
            (lo * hi).sqrt()
        } else {
            0.5 * (lo + hi)
        };
    }
    t
}

/// Checks regression data (`x` non-empty and finite, `y` finite with one
/// target per row, at least 2 samples, not constant) and returns the mean
/// and standard deviation of `y`, by which the targets are standardised.
/// Valid range of the standard deviation of the targets of the
/// heteroscedastic models (`1e-150 ..= 1e150`): their natural parameters are
/// returned in the units of `y`, `theta = 1 / variance`, which must fit `f64`.
pub const TARGET_SD_RANGE: (f64, f64) = (1e-150, 1e150);

pub(crate) fn target_moments(x: &DMatrix<f64>, y: &DVector<f64>) -> Result<(f64, f64), Error> {
    check_matrix("x", x)?;
    check_dim("length of y vs rows of x", x.nrows(), y.len())?;
    linalg::check_finite("y", &DMatrix::from_column_slice(y.len(), 1, y.as_slice()))?;
    target_moments_over(&crate::distributed::SingleProcess::new(), y, x.nrows())
}

/// [`target_moments`] of the targets of all ranks of `comm` (this rank's
/// block `y`, checked; `n` targets over all ranks): the sums over targets
/// summed over the ranks, the same result and errors on every rank.
/// Collective.
pub(crate) fn target_moments_over(comm: &dyn crate::distributed::Communicator, y: &DVector<f64>, n: usize) -> Result<(f64, f64), Error> {
    if n < 2 {
        return Err(Error::InvalidParameter { name: "y", reason: "need at least 2 samples".into() });
    }
    let nf = n as f64;
    // Mean and deviation without overflow for targets near the f64 limits.
    let mean = comm.sum_scalar(y.sum())? / nf;
    let mean = if mean.is_finite() { mean } else { comm.sum_scalar(y.iter().map(|v| v / nf).sum::<f64>())? };
    let mut spread = [y.iter().fold(0.0f64, |m, v| m.max((v - mean).abs()))];
    comm.max(&mut spread)?;
    let spread = spread[0];
    let sd = if spread > 0.0 && spread.is_finite() { spread * (comm.sum_scalar(y.map(|v| ((v - mean) / spread).powi(2)).sum())? / nf).sqrt() } else { spread };
    if !(sd > 0.0) {
        return Err(Error::InvalidParameter { name: "y", reason: "targets are constant (zero variance)".into() });
    }
    // The model returns natural parameters in the units of y (theta = 1/variance),
    // so sd^2 and 1/sd^2 must both be finite, normal f64 values.
    if !(TARGET_SD_RANGE.0..=TARGET_SD_RANGE.1).contains(&sd) {
        return Err(Error::InvalidParameter {
            name: "y",
            reason: format!("standard deviation {sd:e} outside {:e}..={:e}: 1/variance in the units of y would not fit f64 (rescale y)", TARGET_SD_RANGE.0, TARGET_SD_RANGE.1),
        });
    }
    Ok((mean, sd))
}

/// Parameters of [`HeteroscedasticRegression`] (linfa-like builder, validated by [`HeteroscedasticParams::fit`]).
#[derive(Debug, Clone, PartialEq)]
pub struct HeteroscedasticParams {
    settings: PsdSettings,
}

impl HeteroscedasticParams {
    /// Gaussian `kernel` of width `sigma` (valid range as [`crate::Kernel::gaussian_with_width`]);
    /// defaults `lambda_0 = 1e-3` (linear part), `lambda_1 = 1e-3`,
    /// `lambda_2 = 1e-3` (PSD part), gap tolerance `1e-6`. The targets' standard
    /// deviation must lie in [`TARGET_SD_RANGE`] (checked at fit).
    ///
    /// The kernel is given as the other methods take it, e.g.
    /// `Kernel::gaussian_with_width(sigma)?`; only the Gaussian kernel has the
    /// closed forms these models need.
    ///
    /// Errors ([`Error::InvalidParameter`]): any kernel but the Gaussian
    /// (`kernel`), an invalid kernel ([`crate::Kernel::validate`]).
    pub fn new(kernel: crate::Kernel) -> Result<Self, Error> {
        Ok(HeteroscedasticParams { settings: PsdSettings::new(&kernel, Regularisation::new().linear(1e-3).trace(1e-3).quadratic(1e-3), SolverOptions::default())? })
    }

    // `.regularisation(Regularisation)`, its getter and `kernel_width()`, shared by every PSD params type.
    shared_builders!("Regularisation weights: `linear` (`lambda_0 > 0`) of the linear part `eta`, `trace` (`lambda_1 >= 0`) and `quadratic` (`lambda_2 > 0`) of the PSD parts. Checked at fit.");

    // `.solver(SolverOptions)` and `.nystrom(m, seed)`, shared by the PSD params types with Nystrom centres.
    solver_builders!("Solver tolerance (duality gap, in units of the `1/n`-scaled objective) and budget.", "Nystrom compression: the model lives on `m` centres drawn uniformly from the data with `seed` (features of dimension `<= m + 1`, cost per iteration `O(n m^2 + m^3)`); default: every sample is a centre.");

    /// Checks the parameters (the data are checked by `fit`); `fit` calls it
    /// first.
    ///
    /// Errors, all [`Error::InvalidParameter`]: a Gaussian `kernel` of width `sigma` not
    /// finite and `> 0`, regularisation
    /// weights this estimator does not accept (see [`Regularisation`]), and invalid
    /// solver options ([`SolverOptions::validate`](crate::psd::SolverOptions::validate)).
    pub fn validate(&self) -> Result<(), Error> {
        self.settings.validate(Terms::REGRESSION)
    }

    /// Fits on `data` (inputs `data.x`, one sample per row; targets
    /// `data.y`): [`Self::fit_xy`].
    pub fn fit(&self, device: &Device, data: &crate::estimator::Supervised) -> Result<HeteroscedasticRegression, Error> {
        self.fit_xy(device, &data.x, &data.y)
    }

    /// Fits `eta` and `theta` to inputs `x` (n x d) and targets `y` (n) by
    /// FISTA on the dual (module docs).
    ///
    /// Errors: invalid parameters, empty/NaN/mismatched input, fewer than 2
    /// samples or constant targets ([`Error::InvalidParameter`]),
    /// [`Error::NotConverged`] with the gap reached.
    pub fn fit_xy(&self, device: &Device, x: &(impl AsMatrix<Elem = f64> + ?Sized), y: &(impl AsVector<Elem = f64> + ?Sized)) -> Result<HeteroscedasticRegression, Error> {
        let x = x.as_matrix()?;
        let x = &*x;
        let y = y.as_vector()?;
        let y = &*y;
        self.validate()?;
        self.settings.check_device(device)?;
        let (y_mean, y_sd) = target_moments(x, y)?;
        let start = Instant::now();
        let centres = self.settings.centres(x)?;
        self.fit_rows(device, x, y, (y_mean, y_sd), centres, None, start)
    }

    /// The fit on the rows `x` with targets `y` given the targets' moments
    /// and the centres: all rows in one process, or with `shard = (comm,
    /// n)` this rank's block of the `n` rows (every rank the same centres;
    /// the solve as in [`EngineProblem::solve_sharded`], the local work's
    /// failures agreed on).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fit_rows(&self, device: &Device, x: &DMatrix<f64>, y: &DVector<f64>, (y_mean, y_sd): (f64, f64), centres: DMatrix<f64>, shard: Option<(&dyn crate::distributed::Communicator, usize)>, start: Instant) -> Result<HeteroscedasticRegression, Error> {
        let comm = shard.map(|(comm, _)| comm);
        let total = shard.map_or(x.nrows(), |(_, n)| n);
        let targets = GaussianNaturalLoss { targets: y.map(|v| (v - y_mean) / y_sd) };
        let loss = SampleTerms { loss: &targets, total };
        let features = crate::distributed::agreed(comm, EmpiricalFeatures::new(&centres, self.settings.sigma))?;
        let p = crate::distributed::agreed(comm, features.features_with_constant(device, x))?;
        let setup = start.elapsed().as_secs_f64();
        // Blocks (theta, eta): the PSD part is theta, the linear part eta.
        let problem = EngineProblem {
            features: Features::Host(&p),
            parts: vec![vec![1.0, 0.0]],
            linear: Some(LinearPart { coupling: vec![0.0, 1.0], lambda0: self.settings.regularisation.linear }),
            integral: None,
            loss: &loss,
            lambda1: self.settings.regularisation.trace,
            lambda2: self.settings.regularisation.quadratic,
        };
        let solution = problem.solve_sharded(&self.settings.solver, super::positive_part::PositivePartSolver::full_only(), comm)?;
        // theta'(x) = ||G Phi'(x)||^2 with G^T G = A; back to kernel coordinates: Phi'(x) = (T v(x), 1).
        let g = psd_factor(&solution.parts[0])?;
        let t_map = features.map();
        let rg = p.nrows() - 1;
        let eta_coefficients = t_map.transpose() * solution.linear.rows(0, rg);
        let eta_intercept = solution.linear[rg];
        let theta_factor = linalg::matmul(&g.columns(0, rg).into_owned(), t_map);
        let theta_offset = g.column(rg).into_owned();
        let mut report = solution.report;
        report.seconds_setup = setup;
        report.seconds_total = start.elapsed().as_secs_f64();
        Ok(HeteroscedasticRegression { device: device.clone(), centres, kernel: *features.kernel(), eta_coefficients, eta_intercept, theta_factor, theta_offset, y_mean, y_sd, report })
    }
}

/// A fitted heteroscedastic Gaussian regression: `y | x ~ N(mu(x), v(x))`.
///
/// Its methods compute on the device it was fitted on ([`OnDevice`](crate::estimator::OnDevice): a loaded model is on the CPU).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct HeteroscedasticRegression {
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    centres: DMatrix<f64>,
    kernel: Kernel,
    /// `eta'(x) = a^T v(x) + b` (standardised units).
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    eta_coefficients: DVector<f64>,
    eta_intercept: f64,
    /// `theta'(x) = ||C v(x) + c0||^2` (standardised units).
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    theta_factor: DMatrix<f64>,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    theta_offset: DVector<f64>,
    y_mean: f64,
    y_sd: f64,
    report: SolverReport,
    /// Not saved: a loaded model is on the CPU.
    #[cfg_attr(feature = "serde", serde(skip, default = "crate::Device::cpu"))]
    device: Device,
}

/// Natural parameters at some points, in the original units of `y`.
#[derive(Debug, Clone)]
pub struct NaturalParameters {
    /// `eta(x) = mu(x) / v(x)`.
    pub eta: DVector<f64>,
    /// `theta(x) = 1 / v(x) >= 0`.
    pub theta: DVector<f64>,
}

impl NaturalParameters {
    /// Maps natural parameters fitted on standardised targets `y' = (y - mean)/sd`
    /// back to the units of `y`: `theta = theta'/sd^2`, `eta = (theta' mean/sd + eta')/sd`.
    pub(crate) fn from_standardised(eta_s: &DVector<f64>, theta_s: &DVector<f64>, y_mean: f64, y_sd: f64) -> Self {
        let theta = theta_s.map(|t| t / (y_sd * y_sd));
        let eta = DVector::from_fn(eta_s.len(), |i, _| (theta_s[i] * y_mean / y_sd + eta_s[i]) / y_sd);
        NaturalParameters { eta, theta }
    }

    /// Mean `mu = eta/theta` (`+-inf`/NaN where `theta` is 0; negative variance where `theta < 0`).
    pub fn mean(&self) -> DVector<f64> {
        self.eta.zip_map(&self.theta, |e, t| e / t)
    }

    /// Variance `v = 1/theta`.
    pub fn variance(&self) -> DVector<f64> {
        self.theta.map(|t| 1.0 / t)
    }

    /// Log-likelihood `log N(y_i; mu_i, v_i) = log(theta)/2 - log(2 pi)/2 - theta y^2/2 + eta y - eta^2/(2 theta)`
    /// per point; `-inf` where `theta <= 0` (no Gaussian there).
    pub fn log_likelihood(&self, y: &DVector<f64>) -> DVector<f64> {
        let half_log_2pi = 0.5 * (2.0 * std::f64::consts::PI).ln();
        DVector::from_fn(y.len(), |i, _| {
            let (e, t, v) = (self.eta[i], self.theta[i], y[i]);
            if t > 0.0 { 0.5 * t.ln() - half_log_2pi - t * v * v / 2.0 + e * v - e * e / (2.0 * t) } else { f64::NEG_INFINITY }
        })
    }
}

impl HeteroscedasticRegression {
    /// Convergence and timing of the fit.
    pub fn report(&self) -> &SolverReport {
        &self.report
    }

    /// The value of `theta` (in standardised units of `y`) far from all
    /// centres: `||c0||^2`, the constant part of the PSD model.
    pub fn precision_at_infinity(&self) -> f64 {
        self.theta_offset.norm_squared() / (self.y_sd * self.y_sd)
    }

    /// `eta(x)` and `theta(x)` at the rows of `x` (original units of `y`):
    /// `theta = theta'/sd^2`, `eta = (theta' mean/sd + eta')/sd`.
    pub fn natural_parameters(&self, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<NaturalParameters, Error> {
        let x = x.as_matrix()?;
        let x = &*x;
        let device = &self.device;
        check_matrix("x", x)?;
        check_dim("columns of x vs model dimension", self.centres.ncols(), x.ncols())?;
        let kxz = device.kernel_matrix(&self.kernel, x, &self.centres)?;
        let eta_s = (&kxz * &self.eta_coefficients).add_scalar(self.eta_intercept);
        let g = linalg::matmul_nt(&kxz, &self.theta_factor);
        let theta_s = DVector::from_fn(x.nrows(), |i, _| (g.row(i).transpose() + &self.theta_offset).norm_squared());
        Ok(NaturalParameters::from_standardised(&eta_s, &theta_s, self.y_mean, self.y_sd))
    }

    /// Predictive mean `mu(x) = eta(x)/theta(x)`.
    ///
    /// Errors: as [`HeteroscedasticRegression::natural_parameters`], and
    /// `Compute(Overflow)` where `theta` underflows to 0 (far from the data).
    pub fn predict_mean(&self, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<DVector<f64>, Error> {
        let x = x.as_matrix()?;
        let x = &*x;
        linalg::finite_vector("predictive mean", self.natural_parameters(x)?.mean())
    }

    /// Predictive variance `v(x) = 1/theta(x)`.
    ///
    /// Errors: as [`HeteroscedasticRegression::predict_mean`].
    pub fn predict_variance(&self, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<DVector<f64>, Error> {
        let x = x.as_matrix()?;
        let x = &*x;
        linalg::finite_vector("predictive variance", self.natural_parameters(x)?.variance())
    }

    /// Predictive log-likelihood `log N(y_i; mu(x_i), v(x_i))` per point,
    /// `= log(theta)/2 - log(2 pi)/2 - theta y^2/2 + eta y - eta^2/(2 theta)`.
    pub fn log_likelihood(&self, x: &(impl AsMatrix<Elem = f64> + ?Sized), y: &(impl AsVector<Elem = f64> + ?Sized)) -> Result<DVector<f64>, Error> {
        let x = x.as_matrix()?;
        let x = &*x;
        let y = y.as_vector()?;
        let y = &*y;
        check_dim("length of y vs rows of x", x.nrows(), y.len())?;
        linalg::check_finite("y", &DMatrix::from_column_slice(y.len(), 1, y.as_slice()))?;
        Ok(self.natural_parameters(x)?.log_likelihood(y))
    }

    /// Mean predictive log-likelihood over the points.
    pub fn mean_log_likelihood(&self, x: &(impl AsMatrix<Elem = f64> + ?Sized), y: &(impl AsVector<Elem = f64> + ?Sized)) -> Result<f64, Error> {
        let x = x.as_matrix()?;
        let x = &*x;
        let y = y.as_vector()?;
        let y = &*y;
        Ok(self.log_likelihood(x, y)?.mean())
    }
}

#[cfg(feature = "serde")]
impl crate::io::SavedModel for HeteroscedasticRegression {
    const KIND: &'static str = "psd-heteroscedastic";

    /// `eta` coefficients on `m >= 1` centres of `d >= 1` coordinates, a
    /// `theta` factor on the centres with an offset of its rank, a valid
    /// kernel; every number finite and within
    /// [`crate::io::MAX_STORED_MAGNITUDE`]; a target scale that is a stored
    /// scale ([`crate::io::MIN_STORED_SCALE`]).
    fn check_loaded(&self) -> Result<(), Error> {
        use crate::io::{ensure, ensure_bounded, ensure_kernel, ensure_scale};
        let (m, d) = self.centres.shape();
        ensure(m >= 1 && d >= 1, || format!("centres of {m} x {d} (need at least one centre and one coordinate)"))?;
        ensure_kernel("kernel", &self.kernel)?;
        ensure(self.eta_coefficients.len() == m, || format!("{} eta coefficients for {m} centres", self.eta_coefficients.len()))?;
        ensure(self.theta_factor.ncols() == m && self.theta_offset.len() == self.theta_factor.nrows(), || format!("a theta factor of {:?} and an offset of {} for {m} centres", self.theta_factor.shape(), self.theta_offset.len()))?;
        ensure_bounded("centres", self.centres.iter())?;
        ensure_bounded("eta coefficients", self.eta_coefficients.iter())?;
        ensure_bounded("theta factor", self.theta_factor.iter())?;
        ensure_bounded("theta offset", self.theta_offset.iter())?;
        ensure_bounded("eta intercept and target mean", [self.eta_intercept, self.y_mean].iter())?;
        ensure_scale("target scale", self.y_sd)
    }
}

crate::estimator::on_device!(HeteroscedasticRegression);
