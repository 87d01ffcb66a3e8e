//! Multiple quantile regression with the baselines of Appendix D (see the
//! parent module's docs for the models and the solvers).
//!
//! The file runs past 600 lines because the three baselines' training
//! problems (the PNM dual, the smoothed NCM and GLM objectives) share one
//! params type, one problem type and one fitted model.

use std::time::Instant;

use nalgebra::{DMatrix, DVector};
use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::input::{AsMatrix, AsVector};
use crate::device::Device;
use crate::linalg::{self, check_dim, check_matrix};

use super::super::baselines::BaselineKind;
use super::super::options::SolverOptions;
use super::super::options::{PsdSettings, Regularisation, Terms, shared_builders, solver_builders};
use super::super::error::check_positive;
use crate::error::Error;
use super::super::features::EmpiricalFeatures;
use super::super::fista::{self, FistaSettings};
use super::super::heteroscedastic::target_moments;
use super::super::newton::{self, NewtonSettings};
use super::super::regression::check_levels;
use super::{check_restarts, random_start, weighted_product, BaselineReport, PartMap};

/// Moreau envelope of the pinball loss `rho_tau(u) = max(tau u, (tau - 1) u)`
/// with parameter `eps`: value, derivative and second derivative in `u`.
fn smoothed_pinball(u: f64, tau: f64, eps: f64) -> (f64, f64, f64) {
    if u >= eps * tau {
        (tau * u - 0.5 * eps * tau * tau, tau, 0.0)
    } else if u <= eps * (tau - 1.0) {
        ((tau - 1.0) * u - 0.5 * eps * (tau - 1.0).powi(2), tau - 1.0, 0.0)
    } else {
        (u * u / (2.0 * eps), u / eps, 1.0 / eps)
    }
}

/// Parameters of multiple quantile regression (Section 6, "multiple quantile
/// regression", `q_{tau_{+-j}} = q_{tau_0} +- sum v`) whose gaps `v` between
/// levels are baselines of Appendix D: PNM (Eq. 36), NCM (Eq. 34) or GLM
/// (Eq. 32) (module docs); linfa-like builder validated by `fit`.
#[derive(Debug, Clone, PartialEq)]
pub struct BaselineQuantileParams {
    kind: BaselineKind,
    settings: PsdSettings,
    levels: Vec<f64>,
    smoothing: f64,
    restarts: usize,
    seed: u64,
}

impl BaselineQuantileParams {
    /// Baseline `kind` for the gaps, Gaussian `kernel` of width `sigma`, levels strictly
    /// increasing in (0, 1); defaults `lambda_0 = lambda = 1e-3`, smoothing
    /// `1e-3` (NCM, GLM), 5 starts (GLM), seed 0, tolerance `1e-7`, budget
    /// 500 Newton iterations per start (NCM, GLM) or 100,000 FISTA iterations (PNM).
    ///
    /// The kernel is given as the other methods take it, e.g.
    /// `Kernel::gaussian_with_width(sigma)?`; only the Gaussian kernel has the
    /// closed forms these models need.
    ///
    /// Errors ([`Error::InvalidParameter`]): any kernel but the Gaussian
    /// (`kernel`), an invalid kernel ([`crate::Kernel::validate`]).
    pub fn new(kind: BaselineKind, kernel: crate::Kernel, levels: &[f64]) -> Result<Self, Error> {
        let max_iterations = if kind == BaselineKind::Pnm { 100_000 } else { 500 };
        let settings = PsdSettings::new(&kernel, Regularisation::new().linear(1e-3).quadratic(1e-3), SolverOptions::default().tolerance(1e-7).max_iterations(max_iterations).check_every(1))?;
        Ok(BaselineQuantileParams { kind, settings, levels: levels.to_vec(), smoothing: 1e-3, restarts: 5, seed: 0 })
    }

    // `.regularisation(Regularisation)`, its getter and `kernel_width()`, shared by every PSD params type.
    shared_builders!("Regularisation weights: `linear` (`lambda_0 > 0`, `lambda_0/2 ||v||^2` of the middle quantile) and `quadratic` (`lambda > 0`, `lambda/2 ||w||^2` of each gap); these baselines have no trace term (`trace` must be 0). Checked at fit.");

    // `.solver(SolverOptions)` and `.nystrom(m, seed)`, shared by the PSD params types with Nystrom centres.
    solver_builders!("Stopping rule: `tolerance` on the projected-gradient residual (Newton) or the dual residual (PNM's FISTA), and `max_iterations` per start (`check_every` is not used: the residual is tested every iteration).", "Nystrom compression: features on `m` centres drawn from the data with `seed`, and for NCM `m` kernel coefficients per non-negative part (Newton systems of order `O(m)` instead of `O(n)`); default: every sample.");

    /// Moreau-envelope parameter `epsilon > 0` of the pinball loss (NCM, GLM; standardised units).
    pub fn smoothing(mut self, epsilon: f64) -> Self {
        self.smoothing = epsilon;
        self
    }

    /// Number of starting points for GLM and their seed; at most
    /// [`MAX_RESTARTS`](super::MAX_RESTARTS) (checked at fit).
    pub fn restarts(mut self, count: usize, seed: u64) -> Self {
        self.restarts = count;
        self.seed = seed;
        self
    }

    /// Checks the parameters (the data are checked by `fit`); `fit` calls it
    /// first.
    ///
    /// Errors, all [`Error::InvalidParameter`]: a Gaussian `kernel` of width `sigma` not
    /// finite and `> 0`, regularisation
    /// weights this estimator does not accept (see [`Regularisation`](crate::psd::Regularisation)), a `smoothing` not finite and `> 0`, quantile `levels` that are empty, outside `(0, 1)` or not increasing, and invalid
    /// solver options ([`SolverOptions::validate`](crate::psd::SolverOptions::validate)), or `restarts` outside `1..=`[`MAX_RESTARTS`](crate::psd::baseline_regression::MAX_RESTARTS).
    pub fn validate(&self) -> Result<(), Error> {
        self.settings.validate(Terms::BASELINE_REGRESSION)?;
        check_positive("smoothing", self.smoothing)?;
        check_levels(&self.levels)?;
        check_restarts(self.restarts)
    }

    /// The training problem on `(x, y)` (validated), for inspection and tests.
    pub fn problem(&self, device: &Device, x: &DMatrix<f64>, y: &DVector<f64>) -> Result<QuantileBaselineProblem, Error> {
        self.validate()?;
        self.settings.check_device(device)?;
        let (_, y_sd) = target_moments(x, y)?;
        let n = x.nrows();
        let mut sorted: Vec<f64> = y.iter().copied().collect();
        sorted.sort_by(|a, b| a.total_cmp(b));
        let y_median = sorted[n / 2];
        let centres = self.settings.centres(x)?;
        let features = EmpiricalFeatures::new(&centres, self.settings.sigma)?;
        let p = features.features_with_constant(device, x)?;
        let pz = if self.settings.nystrom.is_some() { features.features_with_constant(device, &centres)? } else { p.clone() };
        let part = PartMap::new(self.kind, &p, &pz);
        let k = self.levels.len();
        let r = p.nrows();
        let bounded = (0..r + (k - 1) * part.dim()).map(|j| j >= r && self.kind == BaselineKind::Ncm).collect();
        Ok(QuantileBaselineProblem {
            features,
            p,
            part,
            targets: y.map(|v| (v - y_median) / y_sd),
            levels: self.levels.clone(),
            lambda0: self.settings.regularisation.linear,
            lambda: self.settings.regularisation.quadratic,
            smoothing: self.smoothing,
            bounded,
            y_median,
            y_sd,
        })
    }

    /// Fits on `data` (inputs `data.x`, one sample per row; targets
    /// `data.y`): [`Self::fit_xy`].
    pub fn fit(&self, device: &Device, data: &crate::estimator::Supervised) -> Result<BaselineQuantile, Error> {
        self.fit_xy(device, &data.x, &data.y)
    }

    /// Fits the quantile curves to inputs `x` (n x d) and targets `y` (n) (module docs).
    ///
    /// Errors: invalid parameters or levels, empty/NaN/mismatched input, fewer
    /// than 2 samples or constant targets, [`Error::NotConverged`] (with the
    /// residual as `gap`).
    pub fn fit_xy(&self, device: &Device, x: &(impl AsMatrix<Elem = f64> + ?Sized), y: &(impl AsVector<Elem = f64> + ?Sized)) -> Result<BaselineQuantile, Error> {
        let x = x.as_matrix()?;
        let x = &*x;
        let y = y.as_vector()?;
        let y = &*y;
        let start = Instant::now();
        let problem = self.problem(device, x, y)?;
        let (z, iterations, residual, objectives) = if self.kind == BaselineKind::Pnm {
            let (z, iterations, residual) = problem.solve_pnm_dual(self.settings.solver.tolerance, self.settings.solver.max_iterations);
            if !(residual <= self.settings.solver.tolerance) {
                return Err(Error::NotConverged { iterations, gap: residual, tolerance: self.settings.solver.tolerance });
            }
            let objective = problem.primal_objective(&z);
            (z, iterations, residual, vec![objective])
        } else {
            let mut rng = StdRng::seed_from_u64(self.seed);
            let starts = if self.kind == BaselineKind::Glm { self.restarts } else { 1 };
            let settings = NewtonSettings { tolerance: self.settings.solver.tolerance, max_iterations: self.settings.solver.max_iterations };
            let (r, dim, k) = (problem.p.nrows(), problem.part.dim(), self.levels.len());
            let mut best: Option<newton::NewtonOutcome> = None;
            let mut last = None;
            let mut objectives = Vec::new();
            for s in 0..starts {
                let mut z0 = DVector::zeros(r + (k - 1) * dim);
                for i in 0..k - 1 {
                    // First start: gaps of about 1/2 sd (NCM) or exp(0) = 1 sd (GLM).
                    let c0 = if s == 0 { problem.part.unit_start() * 0.5 } else { random_start(dim, &mut rng) };
                    z0.rows_mut(r + i * dim, dim).copy_from(&c0);
                }
                let out = problem.solve_smoothed(z0, settings);
                objectives.push(out.objective);
                if out.residual <= self.settings.solver.tolerance && best.as_ref().is_none_or(|b| out.objective < b.objective) {
                    best = Some(out);
                } else {
                    last = Some(out);
                }
            }
            let Some(best) = best else {
                let out: newton::NewtonOutcome = last.expect("at least one start");
                return Err(Error::NotConverged { iterations: out.iterations, gap: out.residual, tolerance: self.settings.solver.tolerance });
            };
            (best.z, best.iterations, best.residual, objectives)
        };
        let objective = if self.kind == BaselineKind::Pnm { objectives[0] } else { problem.objective(&z) };
        let (r, dim) = (problem.p.nrows(), problem.part.dim());
        let centre_weights = z.rows(0, r).into_owned();
        let part_weights = (0..self.levels.len() - 1).map(|i| problem.part.feature_weights(&z.rows(r + i * dim, dim).into_owned())).collect();
        let report = BaselineReport { iterations, residual, objective, objectives_per_start: objectives, seconds: start.elapsed().as_secs_f64() };
        Ok(BaselineQuantile { device: device.clone(), kind: self.kind, levels: self.levels.clone(), centre_weights, part_weights, solution: z, features: problem.features, y_median: problem.y_median, y_sd: problem.y_sd, report })
    }
}

/// The training problem of baseline quantile regression in the variables
/// `z = (v, c_1, .., c_{K-1})`: `v` for the middle level, `c_i` for the gap
/// parts in order of the levels skipping the middle (module docs).
#[derive(Debug, Clone)]
pub struct QuantileBaselineProblem {
    features: EmpiricalFeatures,
    p: DMatrix<f64>,
    part: PartMap,
    targets: DVector<f64>,
    levels: Vec<f64>,
    lambda0: f64,
    lambda: f64,
    smoothing: f64,
    bounded: Vec<bool>,
    y_median: f64,
    y_sd: f64,
}

impl QuantileBaselineProblem {
    /// Number of primal variables.
    pub fn dimension(&self) -> usize {
        self.bounded.len()
    }

    /// Which variables are constrained to be `>= 0` (NCM's coefficients).
    pub fn bounded(&self) -> &[bool] {
        &self.bounded
    }

    /// Sizes `(r + 1, dim)` of the middle block `v` and of each gap block `c_i` of `z`.
    pub fn block_sizes(&self) -> (usize, usize) {
        (self.p.nrows(), self.part.dim())
    }

    /// Quantile curves at the training points for variables `z` (standardised units, n x K).
    pub fn quantiles(&self, z: &DVector<f64>) -> DMatrix<f64> {
        self.values(z).0
    }

    /// Index of the middle level.
    fn centre(&self) -> usize {
        self.levels.len() / 2
    }

    /// Level index of the gap part `i` (0-based over the parts).
    fn part_level(&self, i: usize) -> usize {
        if i < self.centre() { i } else { i + 1 }
    }

    /// Sign of part at level `l` (+1 above the middle) and whether it moves level `j`.
    fn affects(&self, l: usize, j: usize) -> Option<f64> {
        let c = self.centre();
        if l > c && j >= l {
            Some(1.0)
        } else if l < c && j <= l {
            Some(-1.0)
        } else {
            None
        }
    }

    /// Quantile values at the data (standardised units, n x K) and the parts `(g, g', g'')`.
    #[allow(clippy::type_complexity)]
    fn values(&self, z: &DVector<f64>) -> (DMatrix<f64>, Vec<(DVector<f64>, DVector<f64>, DVector<f64>)>) {
        let (r, dim, k) = (self.p.nrows(), self.part.dim(), self.levels.len());
        let centre = self.p.transpose() * z.rows(0, r);
        let parts: Vec<_> = (0..k - 1).map(|i| self.part.values(&z.rows(r + i * dim, dim).into_owned())).collect();
        let mut q = DMatrix::zeros(centre.len(), k);
        for j in 0..k {
            let mut col = centre.clone();
            for (i, part) in parts.iter().enumerate() {
                if let Some(s) = self.affects(self.part_level(i), j) {
                    col += &part.0 * s;
                }
            }
            q.column_mut(j).copy_from(&col);
        }
        (q, parts)
    }

    fn regulariser(&self, z: &DVector<f64>) -> f64 {
        let (r, dim) = (self.p.nrows(), self.part.dim());
        0.5 * self.lambda0 * z.rows(0, r).norm_squared() + (0..self.levels.len() - 1).map(|i| self.lambda * self.part.regulariser(&z.rows(r + i * dim, dim).into_owned())).sum::<f64>()
    }

    /// Exact objective `(1/n) sum_j sum_i rho_{tau_j}(y_i - q_j(x_i)) + regularisers`
    /// (standardised units); PNM's constraint `g_i(x_l) >= 0` is not checked here.
    pub fn primal_objective(&self, z: &DVector<f64>) -> f64 {
        let (q, _) = self.values(z);
        self.pinball(&q) + self.regulariser(z)
    }

    fn pinball(&self, q: &DMatrix<f64>) -> f64 {
        let n = self.targets.len();
        let mut total = 0.0;
        for (j, &tau) in self.levels.iter().enumerate() {
            for i in 0..n {
                let u = self.targets[i] - q[(i, j)];
                total += (tau * u).max((tau - 1.0) * u);
            }
        }
        total / n as f64
    }

    /// Smoothed objective (pinball replaced by its Moreau envelope) minimised for NCM and GLM.
    pub fn objective(&self, z: &DVector<f64>) -> f64 {
        let (q, _) = self.values(z);
        let n = self.targets.len();
        let mut total = 0.0;
        for (j, &tau) in self.levels.iter().enumerate() {
            for i in 0..n {
                total += smoothed_pinball(self.targets[i] - q[(i, j)], tau, self.smoothing).0;
            }
        }
        total / n as f64 + self.regulariser(z)
    }

    /// Gradient and Hessian of [`Self::objective`].
    fn derivatives(&self, z: &DVector<f64>) -> (DVector<f64>, DMatrix<f64>) {
        let (q, parts) = self.values(z);
        let (r, dim, k) = (self.p.nrows(), self.part.dim(), self.levels.len());
        let n = self.targets.len();
        // dL/dq_j and d2L/dq_j^2 (diagonal).
        let mut gq = DMatrix::zeros(n, k);
        let mut hq = DMatrix::zeros(n, k);
        for (j, &tau) in self.levels.iter().enumerate() {
            for i in 0..n {
                let (_, d1, d2) = smoothed_pinball(self.targets[i] - q[(i, j)], tau, self.smoothing);
                gq[(i, j)] = -d1 / n as f64;
                hq[(i, j)] = d2 / n as f64;
            }
        }
        // Blocks: 0 = middle (matrix P, g' = 1), 1.. = parts (matrix J, chain g').
        let blocks = k; // 1 + (k - 1)
        let sign = |b: usize, j: usize| -> Option<f64> { if b == 0 { Some(1.0) } else { self.affects(self.part_level(b - 1), j) } };
        let offset = |b: usize| if b == 0 { 0 } else { r + (b - 1) * dim };
        let size = |b: usize| if b == 0 { r } else { dim };
        let ones = DVector::from_element(n, 1.0);
        let slope = |b: usize| if b == 0 { &ones } else { &parts[b - 1].1 };
        let matrix = |b: usize| if b == 0 { &self.p } else { &self.part.jt };
        let mut grad = DVector::zeros(r + (k - 1) * dim);
        let mut h = DMatrix::zeros(grad.len(), grad.len());
        for b in 0..blocks {
            let mut dg = DVector::zeros(n);
            for j in 0..k {
                if let Some(s) = sign(b, j) {
                    dg += gq.column(j) * s;
                }
            }
            let mut gb = matrix(b) * dg.component_mul(slope(b));
            if b == 0 {
                gb += z.rows(0, r) * self.lambda0;
            } else {
                gb += &self.part.reg * z.rows(offset(b), dim) * self.lambda;
            }
            grad.rows_mut(offset(b), size(b)).copy_from(&gb);
            for b2 in b..blocks {
                let mut d = DVector::zeros(n);
                for j in 0..k {
                    if let (Some(s1), Some(s2)) = (sign(b, j), sign(b2, j)) {
                        d += hq.column(j) * (s1 * s2);
                    }
                }
                let d = d.component_mul(slope(b)).component_mul(slope(b2));
                let mut block = weighted_product(matrix(b), &d, matrix(b2));
                if b == b2 {
                    if b == 0 {
                        for a in 0..r {
                            block[(a, a)] += self.lambda0;
                        }
                    } else {
                        block += weighted_product(matrix(b), &dg.component_mul(&parts[b - 1].2), matrix(b)) + &self.part.reg * self.lambda;
                    }
                }
                h.view_mut((offset(b), offset(b2)), (size(b), size(b2))).copy_from(&block);
                if b2 != b {
                    h.view_mut((offset(b2), offset(b)), (size(b2), size(b))).copy_from(&block.transpose());
                }
            }
        }
        (grad, h)
    }

    /// Gradient of [`Self::objective`].
    pub fn gradient(&self, z: &DVector<f64>) -> DVector<f64> {
        self.derivatives(z).0
    }

    /// Minimises [`Self::objective`] from `z0` by continuation: the smoothing
    /// parameter goes 1, 0.1, 0.01, .. down to `epsilon` (standardised units),
    /// each stage warm-started from the last (loose tolerance `1e-5` before the
    /// last stage). Newton steps on a narrow quadratic zone of the pinball
    /// envelope overshoot, which the wide early stages avoid.
    fn solve_smoothed(&self, z0: DVector<f64>, settings: NewtonSettings) -> newton::NewtonOutcome {
        let mut stages = Vec::new();
        let mut eps = 1.0;
        while eps > self.smoothing * 1.000_001 {
            stages.push(eps);
            eps *= 0.1;
        }
        let mut z = z0;
        let mut stage_problem = self.clone();
        for eps in stages {
            stage_problem.smoothing = eps;
            let loose = NewtonSettings { tolerance: settings.tolerance.max(1e-5), ..settings };
            z = newton::minimise(|z| stage_problem.objective(z), |z| stage_problem.derivatives(z), &self.bounded, z, loose).z;
        }
        newton::minimise(|z| self.objective(z), |z| self.derivatives(z), &self.bounded, z, settings)
    }

    /// PNM dual variables `(alpha_1..alpha_K, mu_1..mu_{K-1})` -> primal `z` (module docs).
    fn pnm_primal(&self, dual: &DVector<f64>) -> DVector<f64> {
        let (n, k, r) = (self.targets.len(), self.levels.len(), self.p.nrows());
        let mut z = DVector::zeros(r * k);
        let mut s = DVector::zeros(n);
        for j in 0..k {
            s += dual.rows(j * n, n);
        }
        z.rows_mut(0, r).copy_from(&(-(&self.p * s) / self.lambda0));
        for i in 0..k - 1 {
            let l = self.part_level(i);
            let mut d = -dual.rows(k * n + i * n, n);
            for j in 0..k {
                if let Some(sg) = self.affects(l, j) {
                    d += dual.rows(j * n, n) * sg;
                }
            }
            z.rows_mut(r + i * r, r).copy_from(&(-(&self.p * d) / self.lambda));
        }
        z
    }

    /// The PNM dual objective `D(alpha, mu)` (module docs).
    pub fn pnm_dual_objective(&self, dual: &DVector<f64>) -> f64 {
        let (n, k, r) = (self.targets.len(), self.levels.len(), self.p.nrows());
        let z = self.pnm_primal(dual);
        let mut total = 0.0;
        for j in 0..k {
            total += dual.rows(j * n, n).dot(&self.targets);
        }
        total += 0.5 * self.lambda0 * z.rows(0, r).norm_squared();
        for i in 0..k - 1 {
            total += 0.5 * self.lambda * z.rows(r + i * r, r).norm_squared();
        }
        total
    }

    /// Solves the PNM dual by FISTA; returns the primal point, iterations and KKT residual.
    fn solve_pnm_dual(&self, tolerance: f64, max_iterations: usize) -> (DVector<f64>, usize, f64) {
        let (n, k) = (self.targets.len(), self.levels.len());
        let size = (2 * k - 1) * n;
        let levels = self.levels.clone();
        let project = move |v: &DVector<f64>| -> DVector<f64> {
            DVector::from_fn(size, |idx, _| {
                if idx < k * n {
                    let tau = levels[idx / n];
                    v[idx].clamp(-tau / n as f64, (1.0 - tau) / n as f64)
                } else {
                    v[idx].max(0.0)
                }
            })
        };
        let smooth = |dual: &DVector<f64>, want: bool| -> (f64, Option<DVector<f64>>) {
            let value = self.pnm_dual_objective(dual);
            let grad = want.then(|| {
                let z = self.pnm_primal(dual);
                let (q, parts) = self.values(&z);
                let mut g = DVector::zeros(size);
                for j in 0..k {
                    g.rows_mut(j * n, n).copy_from(&(&self.targets - q.column(j)));
                }
                for (i, part) in parts.iter().enumerate() {
                    g.rows_mut(k * n + i * n, n).copy_from(&part.0);
                }
                g
            });
            (value, grad)
        };
        let kkt = |dual: &DVector<f64>| self.pnm_kkt_residual(dual);
        let pp_top = linalg::symmetric_eigenvalues(&linalg::matmul_nt(&self.p, &self.p)).map(|e| e.max()).unwrap_or(1.0);
        let lipschitz = (k * k) as f64 * pp_top * (1.0 / self.lambda0 + 2.0 / self.lambda);
        let settings = FistaSettings { initial_step: 4.0 / lipschitz, max_iterations, tolerance, check_every: 10 };
        let outcome = fista::minimise(smooth, |v, _| project(v), |_| 0.0, kkt, DVector::zeros(size), settings);
        let residual = self.pnm_kkt_residual(&outcome.x);
        (self.pnm_primal(&outcome.x), outcome.iterations, residual)
    }

    /// KKT residual of the PNM dual point (module docs): zero exactly at a primal-dual solution.
    pub fn pnm_kkt_residual(&self, dual: &DVector<f64>) -> f64 {
        let (n, k) = (self.targets.len(), self.levels.len());
        let z = self.pnm_primal(dual);
        let (q, parts) = self.values(&z);
        let mut total = 0.0;
        for (j, &tau) in self.levels.iter().enumerate() {
            for i in 0..n {
                let u = self.targets[i] - q[(i, j)];
                let a = dual[j * n + i];
                // rho(u)/n + a y - a q = rho(u)/n + a u >= 0 for a in the box.
                total += (tau * u).max((tau - 1.0) * u) / n as f64 + a * u;
            }
        }
        for (i, part) in parts.iter().enumerate() {
            let mu = dual.rows(k * n + i * n, n);
            total += mu.dot(&part.0).abs() + part.0.iter().map(|&v| (-v).max(0.0)).fold(0.0, f64::max);
        }
        total
    }
}

/// Fitted quantile curves with baseline gap models (Eq. 32, 34 or 36).
///
/// Its methods compute on the device it was fitted on ([`OnDevice`](crate::estimator::OnDevice): a loaded model is on the CPU).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct BaselineQuantile {
    kind: BaselineKind,
    levels: Vec<f64>,
    features: EmpiricalFeatures,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    centre_weights: DVector<f64>,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    part_weights: Vec<DVector<f64>>,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    solution: DVector<f64>,
    y_median: f64,
    y_sd: f64,
    report: BaselineReport,
    /// Not saved: a loaded model is on the CPU.
    #[cfg_attr(feature = "serde", serde(skip, default = "crate::Device::cpu"))]
    device: Device,
}

impl BaselineQuantile {
    /// Which baseline models the gaps.
    pub fn kind(&self) -> BaselineKind {
        self.kind
    }

    /// The quantile levels.
    pub fn levels(&self) -> &[f64] {
        &self.levels
    }

    /// Convergence of the fit.
    pub fn report(&self) -> &BaselineReport {
        &self.report
    }

    /// The primal solution `z` of [`QuantileBaselineProblem`] (NCM: the gap
    /// coefficients `a >= 0` after the middle weights).
    pub fn solution(&self) -> &DVector<f64> {
        &self.solution
    }

    /// Quantile curves at the rows of `x`: column `j` is level `tau_j` (n x K).
    pub fn predict(&self, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<DMatrix<f64>, Error> {
        let x = x.as_matrix()?;
        let x = &*x;
        let device = &self.device;
        check_matrix("x", x)?;
        check_dim("columns of x vs model dimension", self.features.centres().ncols(), x.ncols())?;
        let phi = self.features.features_with_constant(device, x)?;
        let k = self.levels.len();
        let c = k / 2;
        let parts: Vec<DVector<f64>> = self
            .part_weights
            .iter()
            .map(|w| {
                let s = phi.transpose() * w;
                if self.kind == BaselineKind::Glm { s.map(f64::exp) } else { s }
            })
            .collect();
        let mut out = DMatrix::zeros(x.nrows(), k);
        out.column_mut(c).copy_from(&(phi.transpose() * &self.centre_weights));
        for j in (c + 1)..k {
            let next = out.column(j - 1) + &parts[j - 1];
            out.column_mut(j).copy_from(&next);
        }
        for j in (0..c).rev() {
            let next = out.column(j + 1) - &parts[j];
            out.column_mut(j).copy_from(&next);
        }
        Ok(linalg::finite_result("quantile curves", out.map(|v| self.y_median + self.y_sd * v))?)
    }
}

#[cfg(feature = "serde")]
impl crate::io::SavedModel for BaselineQuantile {
    const KIND: &'static str = "psd-baseline-quantile";

    /// Increasing levels in (0, 1); a consistent feature map
    /// ([`EmpiricalFeatures`]' check); the middle curve and one gap per other
    /// level, each of the feature dimension plus the constant; every number
    /// finite and within [`crate::io::MAX_STORED_MAGNITUDE`]; a target scale
    /// that is a stored scale ([`crate::io::MIN_STORED_SCALE`]).
    fn check_loaded(&self) -> Result<(), Error> {
        use crate::io::{ensure, ensure_bounded, ensure_scale};
        let k = self.levels.len();
        ensure(k >= 1 && self.levels.iter().all(|t| *t > 0.0 && *t < 1.0) && self.levels.windows(2).all(|w| w[0] < w[1]), || format!("levels {:?} must increase within (0, 1)", self.levels))?;
        self.features.check_loaded()?;
        let dim = self.features.map().nrows() + 1;
        ensure(self.part_weights.len() + 1 == k, || format!("{k} levels need {} gap models, found {}", k - 1, self.part_weights.len()))?;
        ensure(self.centre_weights.len() == dim && self.part_weights.iter().all(|w| w.len() == dim), || format!("weights must have the feature dimension {dim}"))?;
        ensure_bounded("middle curve weights", self.centre_weights.iter())?;
        for (j, w) in self.part_weights.iter().enumerate() {
            ensure_bounded(&format!("gap {j} weights"), w.iter())?;
        }
        ensure_bounded("solution", self.solution.iter())?;
        ensure_bounded("target median", [self.y_median].iter())?;
        ensure_scale("target scale", self.y_sd)
    }
}

crate::estimator::on_device!(BaselineQuantile);
