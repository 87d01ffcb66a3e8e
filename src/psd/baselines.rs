//! Baselines of Appendix D for density estimation, with the same
//! params -> fit -> model flow as [`super::density`]. All three use a linear
//! kernel expansion `g(x) = sum_j alpha_j k(x, z_j)` with the Gaussian kernel
//! and the regulariser `lambda/2 alpha^T K alpha` (App. E), and the
//! negative log-likelihood.
//!
//! - **PNM** (Eq. 37): `p = g nu` with `g(x_i) >= 0` on the data only and
//!   `int g dnu = u^T alpha = 1`, `u_j = int k(x, z_j) dnu(x)`. In feature
//!   coordinates `g(x) = w^T Phi(x)`, `alpha = T^T w`, the problem
//!   `min_w -(1/n) sum_i log(p_i^T w) + lambda/2 ||w||^2`, `(T u)^T w = 1` is
//!   smooth and strongly convex on its domain and is solved by Newton's method
//!   with the equality constraint (KKT system) and a backtracking line search
//!   that keeps `p_i^T w > 0`. Nothing keeps `g >= 0` away from the data.
//! - **NCM** (Eq. 35): `alpha >= 0`, `u^T alpha = 1`: projected gradient with
//!   backtracking onto `{alpha >= 0, u^T alpha = 1}` (a bisection on the
//!   multiplier gives the projection).
//! - **GLM** (Eq. 33): `p = exp(g) nu / Z` with `Z = int exp(g) dnu` estimated
//!   by importance-sampled Monte Carlo (proposal: half `nu` or a wide Gaussian,
//!   half a kernel density estimate of the data, see `monte_carlo_points`);
//!   convex and smooth, solved by Newton's method with backtracking (FISTA
//!   needed thousands of iterations here, which kept the 10-D table from finishing).
//!   The fit minimises over the fixed Monte Carlo sample, so it can put mass
//!   where that sample is thin and underestimate `Z` (in 10-D a second
//!   estimate was 1.86 times larger). The returned model therefore
//!   re-estimates `Z` at the fitted `alpha` on a fresh sample 4 times larger
//!   (another seed), an unbiased estimate given `alpha`. Its integral is
//!   still only approximately 1, which [`BaselineDensity::integral`] shows
//!   with a third, independent estimate.
//!
//! The file runs past 600 lines because the three baselines share one
//! params type, one fitted model and its saved form; apart, each would
//! repeat them.

use nalgebra::{DMatrix, DVector};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};

use crate::input::AsMatrix;
use crate::device::Device;
use crate::error::Error;
use crate::kernel::Kernel;
use crate::linalg::{self, check_matrix};

use super::options::SolverOptions;
use super::options::{PsdSettings, Regularisation, Terms, shared_builders};
use super::features::EmpiricalFeatures;
use super::integrals::BaseMeasure;

/// Which baseline model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum BaselineKind {
    /// Partially non-negative linear model (non-negative on the data only).
    Pnm,
    /// Non-negative coefficients model.
    Ncm,
    /// Generalised linear model with exponential link.
    Glm,
}

impl BaselineKind {
    /// Short name for tables.
    pub fn name(&self) -> &'static str {
        match self {
            BaselineKind::Pnm => "PNM",
            BaselineKind::Ncm => "NCM",
            BaselineKind::Glm => "GLM",
        }
    }
}

/// Parameters of a baseline density estimator.
#[derive(Debug, Clone, PartialEq)]
pub struct BaselineParams {
    kind: BaselineKind,
    settings: PsdSettings,
    base: BaseMeasure,
    monte_carlo: usize,
    seed: u64,
}

impl BaselineParams {
    /// Baseline `kind` with Gaussian `kernel` of width `sigma`, `lambda = 1e-3`, Lebesgue
    /// base measure, 10,000 Monte Carlo samples (GLM), seed 0.
    ///
    /// The kernel is given as the other methods take it, e.g.
    /// `Kernel::gaussian_with_width(sigma)?`; only the Gaussian kernel has the
    /// closed forms these models need.
    ///
    /// Errors ([`Error::InvalidParameter`]): any kernel but the Gaussian
    /// (`kernel`), an invalid kernel ([`crate::Kernel::validate`]).
    pub fn new(kind: BaselineKind, kernel: Kernel) -> Result<Self, Error> {
        let settings = PsdSettings::new(&kernel, Regularisation::new().quadratic(1e-3), SolverOptions::default().tolerance(1e-8).max_iterations(5000).check_every(1))?;
        Ok(BaselineParams { kind, settings, base: BaseMeasure::Lebesgue, monte_carlo: 10_000, seed: 0 })
    }

    // `.regularisation(Regularisation)`, its getter and `kernel_width()`, shared by every PSD params type.
    shared_builders!("Regularisation `lambda/2 alpha^T K alpha`: weight `quadratic` (`lambda > 0`); no linear or trace term (both must be 0). Checked at fit.");

    /// Stopping rule: `tolerance` on the Newton decrement (PNM, GLM) or the
    /// relative step (NCM), `max_iterations` (PNM uses at most 200, GLM 100;
    /// `check_every` is not used).
    pub fn solver(mut self, options: SolverOptions) -> Self {
        self.settings.solver = options;
        self
    }

    /// Base measure `nu`.
    pub fn base_measure(mut self, base: BaseMeasure) -> Self {
        self.base = base;
        self
    }

    /// Monte Carlo sample size (`1..=`[`MAX_MONTE_CARLO`], checked at fit) and
    /// seed for the GLM normaliser.
    pub fn monte_carlo(mut self, samples: usize, seed: u64) -> Self {
        self.monte_carlo = samples;
        self.seed = seed;
        self
    }

    /// Checks the parameters (the data are checked by `fit`); `fit` calls it
    /// first.
    ///
    /// Errors, all [`Error::InvalidParameter`]: a Gaussian `kernel` of width `sigma` not
    /// finite and `> 0`, regularisation
    /// weights other than a `quadratic > 0` alone (see [`Regularisation`]),
    /// invalid solver options ([`SolverOptions::validate`]), or a Monte Carlo
    /// sample size outside `1..=`[`MAX_MONTE_CARLO`].
    pub fn validate(&self) -> Result<(), Error> {
        self.settings.validate(Terms::BASELINE_DENSITY)?;
        if !(1..=MAX_MONTE_CARLO).contains(&self.monte_carlo) {
            return Err(Error::InvalidParameter { name: "monte_carlo", reason: format!("must be in 1..={MAX_MONTE_CARLO}, got {}", self.monte_carlo) });
        }
        Ok(())
    }

    /// Fits on the rows of `x` (every sample a centre).
    pub fn fit(&self, device: &Device, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<BaselineDensity, Error> {
        let x = x.as_matrix()?;
        let x = &*x;
        self.validate()?;
        self.settings.check_device(device)?;
        check_matrix("x", x)?;
        self.base.check_dimension(x.ncols())?;
        if self.kind == BaselineKind::Glm {
            // The normaliser's sample (4 x monte_carlo points) must fit before any work.
            check_monte_carlo_size(glm_normaliser_count(self.monte_carlo)?, x.ncols())?;
        }
        let kernel = Kernel::gaussian_with_width(self.settings.sigma)?;
        let u = kernel_integrals(x, self.settings.sigma, &self.base);
        if self.kind != BaselineKind::Glm && !(u.iter().all(|v| v.is_finite()) && u.amax() > 0.0) {
            return Err(Error::NotPositive { what: "largest kernel integral against the base measure (the data lie outside its mass)", value: u.amax() });
        }
        let (alpha, log_normaliser) = match self.kind {
            BaselineKind::Pnm => (self.fit_pnm(device, x, &u)?, 0.0),
            BaselineKind::Ncm => (self.fit_ncm(device, &kernel, x, &u)?, 0.0),
            BaselineKind::Glm => self.fit_glm(device, &kernel, x)?,
        };
        linalg::finite_vector("baseline density coefficients", alpha.clone())?;
        Ok(BaselineDensity { device: device.clone(), kind: self.kind, centres: x.clone(), sigma: self.settings.sigma, kernel, alpha, log_normaliser, base: self.base.clone(), seed: self.seed.wrapping_add(1), monte_carlo: self.monte_carlo })
    }

    fn fit_pnm(&self, device: &Device, x: &DMatrix<f64>, u: &DVector<f64>) -> Result<DVector<f64>, Error> {
        let features = EmpiricalFeatures::new(x, self.settings.sigma)?;
        let p = features.features(device, x)?;
        let t = features.map();
        let uh = t * u;
        let n = x.nrows() as f64;
        let r = p.nrows();
        // Feasible start: g = sum_j k(., x_j) > 0, scaled to integrate to 1.
        let mut w = &p * DVector::from_element(x.nrows(), 1.0);
        w /= uh.dot(&w);
        let objective = |w: &DVector<f64>| -> f64 {
            let f = p.transpose() * w;
            if f.iter().any(|&v| v <= 0.0) {
                return f64::INFINITY;
            }
            -f.iter().map(|v| v.ln()).sum::<f64>() / n + 0.5 * self.settings.regularisation.quadratic * w.norm_squared()
        };
        for _ in 0..self.settings.solver.max_iterations.min(200) {
            let f = p.transpose() * &w;
            let inv = f.map(|v| 1.0 / v);
            let grad = -(&p * &inv) / n + &w * self.settings.regularisation.quadratic;
            let scaled = DMatrix::from_fn(r, p.ncols(), |i, j| p[(i, j)] * inv[j]);
            let mut kkt = DMatrix::zeros(r + 1, r + 1);
            let h = linalg::matmul_nt(&scaled, &scaled) / n + DMatrix::identity(r, r) * self.settings.regularisation.quadratic;
            kkt.view_mut((0, 0), (r, r)).copy_from(&h);
            kkt.view_mut((0, r), (r, 1)).copy_from(&uh);
            kkt.view_mut((r, 0), (1, r)).copy_from(&uh.transpose());
            let mut rhs = DVector::zeros(r + 1);
            rhs.rows_mut(0, r).copy_from(&(-&grad));
            let sol = kkt.lu().solve(&rhs).ok_or(Error::NotPositive { what: "pivot of the PNM Newton system", value: 0.0 })?;
            let step = sol.rows(0, r).into_owned();
            let decrement = -grad.dot(&step);
            if decrement / 2.0 <= self.settings.solver.tolerance {
                break;
            }
            let s = damped_newton_step(&objective, &w, &step, decrement);
            w += step * s;
        }
        Ok(t.transpose() * w)
    }

    fn fit_ncm(&self, device: &Device, kernel: &Kernel, x: &DMatrix<f64>, u: &DVector<f64>) -> Result<DVector<f64>, Error> {
        let k = device.kernel_matrix_symmetric(kernel, x)?;
        let n = x.nrows() as f64;
        let objective = |a: &DVector<f64>| -> (f64, DVector<f64>) {
            let f = &k * a;
            if f.iter().any(|&v| v <= 0.0) {
                return (f64::INFINITY, DVector::zeros(a.len()));
            }
            let value = -f.iter().map(|v| v.ln()).sum::<f64>() / n + 0.5 * self.settings.regularisation.quadratic * a.dot(&f);
            let grad = -(&k * f.map(|v| 1.0 / v)) / n + &f * self.settings.regularisation.quadratic;
            (value, grad)
        };
        let mut a = u.map(|_| 1.0);
        a /= u.dot(&a);
        // The problem is scale-covariant: with a Gaussian base measure in 10-D
        // `u ~ 1e-11` and `a ~ 1e8`, the gradient scales as `1/|a|` and the
        // curvature as `1/|a|^2`. So the first step and the stopping rule are
        // taken relative to the rms size of `a` (both reduce to the absolute
        // ones when `a ~ 1`); with the absolute step 1 and test `moved <= sqrt(tol)`
        // the fit stopped at its uniform start whatever lambda.
        let rms = |a: &DVector<f64>| a.norm() / (a.len() as f64).sqrt();
        let mut step = rms(&a).powi(2);
        let (mut value, mut grad) = objective(&a);
        for _ in 0..self.settings.solver.max_iterations {
            let (cand, cv, cg) = loop {
                let cand = try_project_weighted_simplex(&(&a - &grad * step), u)?;
                let (cv, cg) = objective(&cand);
                let d = &cand - &a;
                if cv <= value + grad.dot(&d) + d.norm_squared() / (2.0 * step) || step < 1e-300 {
                    break (cand, cv, cg);
                }
                step *= 0.5;
            };
            let moved = (&cand - &a).norm() / step;
            a = cand;
            value = cv;
            grad = cg;
            step *= 1.5;
            if moved * rms(&a) <= self.settings.solver.tolerance.sqrt() {
                break;
            }
        }
        Ok(a)
    }

    fn fit_glm(&self, device: &Device, kernel: &Kernel, x: &DMatrix<f64>) -> Result<(DVector<f64>, f64), Error> {
        let (samples, log_weights) = monte_carlo_points(x, &self.base, self.monte_carlo, self.seed);
        let k = device.kernel_matrix_symmetric(kernel, x)?;
        let ks = device.kernel_matrix(kernel, &samples, x)?;
        let n = x.nrows();
        let mean_k = DVector::from_fn(n, |j, _| k.column(j).sum() / n as f64);
        // log Z(a) and the softmax weights of the Monte Carlo points.
        let log_z = |a: &DVector<f64>| -> (f64, DVector<f64>) {
            let g = &ks * a + &log_weights;
            let top = g.max();
            let e = g.map(|v| (v - top).exp());
            let s = e.sum();
            (top + (s / g.len() as f64).ln(), e / s)
        };
        let objective = |a: &DVector<f64>| -> f64 { -mean_k.dot(a) + log_z(a).0 + 0.5 * self.settings.regularisation.quadratic * a.dot(&(&k * a)) };
        // Newton's method with backtracking: the objective is smooth and convex,
        // Hessian ks^T (diag(s) - s s^T) ks + lambda K (s = softmax weights).
        let mut a = DVector::zeros(n);
        for _ in 0..self.settings.solver.max_iterations.min(100) {
            let (_, soft) = log_z(&a);
            let ks_soft = ks.transpose() * &soft;
            let grad = -&mean_k + &ks_soft + (&k * &a) * self.settings.regularisation.quadratic;
            // Only the points with non-negligible weight enter the Hessian.
            let top = soft.max();
            let used: Vec<usize> = (0..soft.len()).filter(|&i| soft[i] > 1e-14 * top).collect();
            let weighted = DMatrix::from_fn(used.len(), n, |i, j| ks[(used[i], j)] * soft[used[i]].sqrt());
            let mut h = linalg::gram_tall(&weighted) - &ks_soft * ks_soft.transpose() + &k * self.settings.regularisation.quadratic;
            if h.iter().chain(grad.iter()).any(|v| !v.is_finite()) {
                return Err(Error::Overflow { what: "GLM Newton system (data too far from the base measure)", row: 0, col: 0 });
            }
            let ridge = 1e-12 * (0..n).map(|i| h[(i, i)]).sum::<f64>() / n as f64;
            // Bounded: the ridge grows 1e3-fold per try, so 120 tries span the f64 range.
            let mut tries = 0;
            let step = loop {
                tries += 1;
                if tries > 120 {
                    return Err(Error::NotPositive { what: "GLM Newton system after ridge regularisation (smallest pivot)", value: ridge });
                }
                let mut hr = h.clone();
                for i in 0..n {
                    hr[(i, i)] += ridge.max(f64::MIN_POSITIVE);
                }
                if let Some(chol) = hr.cholesky() {
                    break chol.solve(&(-&grad));
                }
                for i in 0..n {
                    h[(i, i)] += 1e3 * ridge.max(1e-300);
                }
            };
            let decrement = -grad.dot(&step);
            if !(decrement / 2.0 > self.settings.solver.tolerance) {
                break;
            }
            let t = damped_newton_step(&objective, &a, &step, decrement);
            a += step * t;
        }
        // Z at the fitted alpha on a fresh, larger sample (see the module docs).
        let lz = log_normaliser(device, kernel, x, &a, &self.base, glm_normaliser_count(self.monte_carlo)?, self.seed ^ 0x5eed_f00d)?;
        if !lz.is_finite() || a.iter().any(|v| !v.is_finite()) {
            return Err(Error::Overflow { what: "GLM log-normaliser", row: 0, col: 0 });
        }
        Ok((a, lz))
    }
}

/// The largest Monte Carlo sample size of a GLM density (a loaded model's
/// `monte_carlo`): its integral draws `4 x monte_carlo` points.
pub const MAX_MONTE_CARLO: usize = 10_000_000;

/// `log int exp(g) dnu` for `g = sum_j a_j k(., x_j)`, by importance-sampled
/// Monte Carlo on `count` points of `monte_carlo_points` (seed `seed`),
/// evaluated in chunks so that the `count x n` kernel matrix is never stored.
fn log_normaliser(device: &Device, kernel: &Kernel, x: &DMatrix<f64>, a: &DVector<f64>, base: &BaseMeasure, count: usize, seed: u64) -> Result<f64, Error> {
    const CHUNK: usize = 4096;
    check_monte_carlo_size(count, x.ncols())?;
    let (pts, logw) = monte_carlo_points(x, base, count, seed);
    let mut terms = crate::memory::with_capacity::<f64>(count, "Monte Carlo terms")?;
    for start in (0..count).step_by(CHUNK) {
        let rows = CHUNK.min(count - start);
        let g = device.kernel_matrix(kernel, &pts.rows(start, rows).into_owned(), x)? * a;
        terms.extend(g.iter().zip(logw.rows(start, rows).iter()).map(|(gi, lw)| gi + lw));
    }
    let top = terms.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    Ok(top + (terms.iter().map(|t| (t - top).exp()).sum::<f64>() / count as f64).ln())
}

/// The size of the GLM normaliser's independent sample, `4 x monte_carlo`.
fn glm_normaliser_count(monte_carlo: usize) -> Result<usize, Error> {
    monte_carlo.checked_mul(4).ok_or_else(|| Error::InvalidParameter { name: "monte_carlo", reason: format!("{monte_carlo} samples: 4 x monte_carlo overflows") })
}

/// Checks that `count` Monte Carlo points in `d` dimensions, with their
/// weights and terms, fit the host memory.
fn check_monte_carlo_size(count: usize, d: usize) -> Result<(), Error> {
    crate::memory::check_host_matrix::<f64>(count, d.saturating_add(2), "Monte Carlo sample")
}

/// Step length of a damped Newton step (Armijo backtracking with slope 1/4 of
/// the Newton decrement `-grad^T step`): halves from 1 until the objective has
/// decreased enough, or down to 1e-12.
fn damped_newton_step(objective: &impl Fn(&DVector<f64>) -> f64, x: &DVector<f64>, step: &DVector<f64>, decrement: f64) -> f64 {
    let f0 = objective(x);
    let mut t = 1.0;
    while objective(&(x + step * t)) > f0 - 0.25 * t * decrement && t > 1e-12 {
        t *= 0.5;
    }
    t
}

/// `u_j = int k(x, z_j) dnu(x)` for the Gaussian kernel of width `sigma`:
/// per coordinate `sqrt(2 pi) sigma` (Lebesgue) or
/// `sigma / sqrt(sigma^2 + s^2) exp(-(z - mu)^2 / (2 (sigma^2 + s^2)))` (Gaussian).
pub fn kernel_integrals(centres: &DMatrix<f64>, sigma: f64, base: &BaseMeasure) -> DVector<f64> {
    DVector::from_fn(centres.nrows(), |j, _| {
        (0..centres.ncols()).map(|k| match base.coordinate(k) {
            None => (2.0 * std::f64::consts::PI).sqrt() * sigma,
            Some((mu, s)) => {
                let v = sigma * sigma + s * s;
                sigma / v.sqrt() * (-(centres[(j, k)] - mu).powi(2) / (2.0 * v)).exp()
            }
        }).product()
    })
}

/// Monte Carlo points for `int h dnu` and their log importance weights
/// `log(nu(s) / q(s))` (`nu = 1` for Lebesgue). The proposal `q` is the
/// even mixture of a broad Gaussian (`nu` itself, or `N(mean, (2 std)^2)` of
/// the data for Lebesgue) and a kernel density estimate of the data with
/// bandwidth half the data's standard deviation per coordinate, so that the
/// region of the data, where `exp(g)` is large, is sampled even in 10-D.
fn monte_carlo_points(x: &DMatrix<f64>, base: &BaseMeasure, count: usize, seed: u64) -> (DMatrix<f64>, DVector<f64>) {
    use rand::Rng;
    let mut rng = StdRng::seed_from_u64(seed);
    let (nx, d) = x.shape();
    let data_std: Vec<f64> = (0..d).map(|k| {
        let c = x.column(k);
        let m = c.mean();
        (c.map(|v| (v - m).powi(2)).mean()).sqrt().max(1e-3)
    }).collect();
    let (mean, std): (Vec<f64>, Vec<f64>) = match base {
        BaseMeasure::Gaussian { mean, std } => (mean.iter().copied().collect(), std.iter().copied().collect()),
        BaseMeasure::Lebesgue => (0..d).map(|k| (x.column(k).mean(), 2.0 * data_std[k])).unzip(),
    };
    let bandwidth: Vec<f64> = data_std.iter().map(|s| 0.5 * s).collect();
    let normal = Normal::new(0.0, 1.0).expect("unit normal");
    let mut pts = DMatrix::zeros(count, d);
    for i in 0..count {
        if rng.random::<bool>() {
            for k in 0..d {
                pts[(i, k)] = mean[k] + std[k] * normal.sample(&mut rng);
            }
        } else {
            let j = rng.random_range(0..nx);
            for k in 0..d {
                pts[(i, k)] = x[(j, k)] + bandwidth[k] * normal.sample(&mut rng);
            }
        }
    }
    let log_gauss = |i: usize, centre: &dyn Fn(usize) -> f64, sd: &[f64]| -> f64 {
        (0..d).map(|k| {
            let z = (pts[(i, k)] - centre(k)) / sd[k];
            -0.5 * z * z - sd[k].ln() - 0.5 * (2.0 * std::f64::consts::PI).ln()
        }).sum()
    };
    let logw = DVector::from_fn(count, |i, _| {
        let log_broad = log_gauss(i, &|k| mean[k], &std);
        // log of the KDE by log-sum-exp over the data points.
        let terms: Vec<f64> = (0..nx).map(|j| log_gauss(i, &|k| x[(j, k)], &bandwidth)).collect();
        let top = terms.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let log_kde = top + (terms.iter().map(|t| (t - top).exp()).sum::<f64>() / nx as f64).ln();
        let log_q = log_broad.max(log_kde) + (1.0 + (-(log_broad - log_kde).abs()).exp()).ln() - std::f64::consts::LN_2;
        let log_nu = match base {
            BaseMeasure::Gaussian { .. } => log_broad,
            BaseMeasure::Lebesgue => 0.0,
        };
        log_nu - log_q
    });
    (pts, logw)
}

/// Euclidean projection onto `{a >= 0, u^T a = 1}` (`u > 0`): `a_i = max(0, y_i - theta u_i)`
/// with `theta` found by bisection on the bracket `[lo, hi]`,
/// `hi = max_i y_i / u_i` (mass 0) and `lo = (u^T y - 1) / u^T u` (mass >= 1,
/// since `max(0, t) >= t`). (The bracket used to be grown from `hi - 1` by
/// doubling, which never grows once `|hi| > 2^53`: with a Gaussian base
/// measure in 10-D, `u ~ 1e-11` and `y / u ~ 1e19`, and the projection hung.)
///
/// # Panics
///
/// On the inputs [`try_project_weighted_simplex`] rejects (empty, lengths
/// that differ, non-finite entries, a weight `u_i` that is not positive, an
/// empty feasible set); that function returns a [`Error`] instead.
pub fn project_weighted_simplex(y: &DVector<f64>, u: &DVector<f64>) -> DVector<f64> {
    match try_project_weighted_simplex(y, u) {
        Ok(a) => a,
        Err(e) => panic!("project_weighted_simplex: {e}"),
    }
}

/// [`project_weighted_simplex`] with its preconditions checked: `y` and `u`
/// non-empty, of the same length and finite, every `u_i > 0` and `u^T u`
/// finite and positive (so that the simplex is not empty and the bracket is
/// finite). Errors: [`Error::Empty`], [`Error::DimensionMismatch`],
/// [`Error::NonFinite`], [`Error::InvalidParameter`] (`u`).
/// The bracket search and the bisection are bounded, so it always returns.
pub fn try_project_weighted_simplex(y: &DVector<f64>, u: &DVector<f64>) -> Result<DVector<f64>, Error> {
    if y.is_empty() {
        return Err(Error::Empty { what: "y", rows: 0, cols: 1 });
    }
    linalg::check_dim("length of u vs y", y.len(), u.len())?;
    for (what, v) in [("y", y), ("u", u)] {
        if let Some(row) = v.iter().position(|x| !x.is_finite()) {
            return Err(Error::NonFinite { what, row, col: 0 });
        }
    }
    if let Some(i) = u.iter().position(|&x| !(x > 0.0)) {
        return Err(Error::InvalidParameter { name: "u", reason: format!("every weight must be > 0, u[{i}] = {}", u[i]) });
    }
    let (uy, uu) = (u.dot(y), u.norm_squared());
    let mut hi = y.iter().zip(u.iter()).map(|(&yi, &ui)| yi / ui).fold(f64::NEG_INFINITY, f64::max);
    if !(uu.is_finite() && uu > 0.0 && uy.is_finite() && hi.is_finite()) {
        return Err(Error::InvalidParameter { name: "u", reason: format!("u^T u = {uu:e}, u^T y = {uy:e}, max y/u = {hi:e}: out of the range the projection can bracket") });
    }
    let mass = |theta: f64| -> f64 { y.iter().zip(u.iter()).map(|(&yi, &ui)| ui * (yi - theta * ui).max(0.0)).sum() };
    let mut lo = ((uy - 1.0) / uu).min(hi);
    // Round-off in `lo` can leave its mass a hair below 1: widen by the
    // bracket's own size. Doubling a finite positive width reaches infinity
    // (where the mass is infinite) in at most ~2100 steps.
    let mut width = (hi - lo).max(f64::EPSILON * hi.abs().max(1.0));
    let mut widenings = 0;
    while mass(lo) < 1.0 {
        if widenings >= 4096 {
            return Err(Error::InvalidParameter { name: "u", reason: "no bracket of the projection found".into() });
        }
        lo = hi - 2.0 * width;
        width *= 2.0;
        widenings += 1;
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mass(mid) > 1.0 { lo = mid } else { hi = mid }
    }
    let theta = 0.5 * (lo + hi);
    Ok(DVector::from_fn(y.len(), |i, _| (y[i] - theta * u[i]).max(0.0)))
}

/// A fitted baseline density.
///
/// Its methods compute on the device it was fitted on ([`OnDevice`](crate::estimator::OnDevice): a loaded model is on the CPU).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct BaselineDensity {
    kind: BaselineKind,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    centres: DMatrix<f64>,
    sigma: f64,
    kernel: Kernel,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    alpha: DVector<f64>,
    log_normaliser: f64,
    base: BaseMeasure,
    seed: u64,
    monte_carlo: usize,
    /// Not saved: a loaded model is on the CPU.
    #[cfg_attr(feature = "serde", serde(skip, default = "crate::Device::cpu"))]
    device: Device,
}

impl BaselineDensity {
    /// Which baseline.
    pub fn kind(&self) -> BaselineKind {
        self.kind
    }

    /// Coefficients `alpha` of `g = sum_j alpha_j k(., z_j)`.
    pub fn coefficients(&self) -> &DVector<f64> {
        &self.alpha
    }

    /// The estimated density at the rows of `x` (PNM may be negative).
    pub fn density(&self, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<DVector<f64>, Error> {
        let x = x.as_matrix()?;
        let x = &*x;
        let device = &self.device;
        check_matrix("x", x)?;
        linalg::check_dim("columns of x vs model dimension", self.centres.ncols(), x.ncols())?;
        let g = device.kernel_matrix(&self.kernel, x, &self.centres)? * &self.alpha;
        let nu = self.base.density(x);
        let p = match self.kind {
            BaselineKind::Glm => DVector::from_fn(x.nrows(), |i, _| (g[i] - self.log_normaliser).exp() * nu[i]),
            _ => g.component_mul(&nu),
        };
        linalg::finite_vector("baseline density", p)
    }

    /// `int p`: closed form `u^T alpha` for PNM/NCM (exactly 1 after fitting);
    /// for GLM with a Gaussian base measure an independent Monte Carlo
    /// estimate on `4 x monte_carlo` points with a seed not used by the fit
    /// (not exactly 1: GLM lacks P4).
    ///
    /// Errors: for GLM with the Lebesgue base measure
    /// [`Error::InvalidParameter`] (`base`): `g` vanishes far from the
    /// centres, so `p = exp(g - log Z)` tends to the constant
    /// `exp(-log Z) > 0` there and `int p` is infinite (the model is a
    /// density only on a bounded region; its normaliser was estimated on the
    /// Monte Carlo points). `Compute(Overflow)` if the integral overflows.
    pub fn integral(&self) -> Result<f64, Error> {
        let value = match self.kind {
            BaselineKind::Glm => {
                if self.base == BaseMeasure::Lebesgue {
                    return Err(Error::InvalidParameter {
                        name: "base",
                        reason: format!("a GLM density on the Lebesgue base measure tends to exp(-log Z) = {:e} > 0 far from the centres, so its integral is infinite (fit with a Gaussian base measure for a normalisable GLM)", (-self.log_normaliser).exp()),
                    });
                }
                let lz = log_normaliser(&Device::Cpu, &self.kernel, &self.centres, &self.alpha, &self.base, glm_normaliser_count(self.monte_carlo)?, self.seed)?;
                (lz - self.log_normaliser).exp()
            }
            _ => kernel_integrals(&self.centres, self.sigma, &self.base).dot(&self.alpha),
        };
        if !value.is_finite() {
            return Err(Error::Overflow { what: "baseline density integral", row: 0, col: 0 });
        }
        Ok(value)
    }

    /// Mean log-likelihood; `NaN`/`-inf` where the density is not positive.
    pub fn mean_log_likelihood(&self, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<f64, Error> {
        let x = x.as_matrix()?;
        let x = &*x;
        let p = self.density(x)?;
        Ok(p.iter().map(|v| if *v > 0.0 { v.ln() } else { f64::NEG_INFINITY }).sum::<f64>() / x.nrows() as f64)
    }
}

#[cfg(feature = "serde")]
impl crate::io::SavedModel for BaselineDensity {
    const KIND: &'static str = "psd-baseline-density";

    /// The Gaussian kernel of width `sigma` (a stored scale,
    /// [`crate::io::MIN_STORED_SCALE`]); a coefficient per centre, `m >= 1`
    /// centres of `d >= 1` coordinates; a base measure of dimension `d`
    /// ([`BaseMeasure`]'s check); a Monte Carlo sample size in
    /// `1..=`[`MAX_MONTE_CARLO`]; every number finite and within
    /// [`crate::io::MAX_STORED_MAGNITUDE`], and for PNM and NCM the
    /// density's bound `sum_j |alpha_j| max nu` too (GLM's `exp(g) / Z`
    /// is checked where it is evaluated).
    fn check_loaded(&self) -> Result<(), Error> {
        use crate::io::{ensure, ensure_bounded, ensure_gaussian_of_width, MAX_STORED_MAGNITUDE};
        ensure_gaussian_of_width("baseline density", &self.kernel, self.sigma)?;
        let (m, d) = self.centres.shape();
        ensure(m >= 1 && d >= 1 && self.alpha.len() == m, || format!("{} coefficients on centres of {m} x {d}", self.alpha.len()))?;
        ensure_bounded("centres", self.centres.iter())?;
        ensure_bounded("coefficients", self.alpha.iter())?;
        ensure_bounded("log normaliser", [self.log_normaliser].iter())?;
        ensure((1..=MAX_MONTE_CARLO).contains(&self.monte_carlo), || format!("monte_carlo is {}, outside 1..={MAX_MONTE_CARLO}", self.monte_carlo))?;
        self.base.check_loaded(d)?;
        if self.kind == BaselineKind::Glm {
            // exp(g) has no useful bound from the coefficients alone: the
            // density and integral check their results.
            return Ok(());
        }
        let bound = self.alpha.iter().map(|a| a.abs()).sum::<f64>() * self.base.peak_density();
        ensure(bound <= MAX_STORED_MAGNITUDE, || format!("the density reaches {bound:e} (sum_j |alpha_j| max nu), beyond the magnitude a model may store"))
    }
}

crate::estimator::on_device!(BaselineDensity);
