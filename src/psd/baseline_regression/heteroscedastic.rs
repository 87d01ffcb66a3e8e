//! Heteroscedastic regression with the baselines of Appendix D (see the
//! parent module's docs for the models and the solver).

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
use crate::error::Error;
use super::super::features::EmpiricalFeatures;
use super::super::heteroscedastic::{target_moments, GaussianNaturalLoss, NaturalParameters};
use super::super::newton::{self, NewtonSettings};
use super::{check_restarts, random_start, weighted_product, BaselineReport, PartMap};

/// Parameters of a heteroscedastic regression (Section 6, "regression with
/// Gaussian heteroscedastic errors") whose precision `theta = 1/v` is a
/// baseline of Appendix D: PNM (Eq. 36), NCM (Eq. 34) or GLM (Eq. 32) (module
/// docs); linfa-like builder validated by `fit`.
#[derive(Debug, Clone, PartialEq)]
pub struct BaselineHeteroscedasticParams {
    kind: BaselineKind,
    settings: PsdSettings,
    restarts: usize,
    seed: u64,
}

impl BaselineHeteroscedasticParams {
    /// Baseline `kind` for `theta`, Gaussian `kernel` of width `sigma`; defaults
    /// `lambda_0 = lambda = 1e-3`, 5 starting points (GLM only), seed 0,
    /// residual tolerance `1e-8`, 500 Newton iterations per start.
    ///
    /// The kernel is given as the other methods take it, e.g.
    /// `Kernel::gaussian_with_width(sigma)?`; only the Gaussian kernel has the
    /// closed forms these models need.
    ///
    /// Errors ([`Error::InvalidParameter`]): any kernel but the Gaussian
    /// (`kernel`), an invalid kernel ([`crate::Kernel::validate`]).
    pub fn new(kind: BaselineKind, kernel: crate::Kernel) -> Result<Self, Error> {
        let settings = PsdSettings::new(&kernel, Regularisation::new().linear(1e-3).quadratic(1e-3), SolverOptions::default().tolerance(1e-8).max_iterations(500).check_every(1))?;
        Ok(BaselineHeteroscedasticParams { kind, settings, restarts: 5, seed: 0 })
    }

    // `.regularisation(Regularisation)`, its getter and `kernel_width()`, shared by every PSD params type.
    shared_builders!("Regularisation weights: `linear` (`lambda_0 > 0`, `lambda_0/2 ||v||^2` of `eta`) and `quadratic` (`lambda > 0`, `lambda/2 ||w||^2` of `theta`); these baselines have no trace term (`trace` must be 0). Checked at fit.");

    // `.solver(SolverOptions)` and `.nystrom(m, seed)`, shared by the PSD params types with Nystrom centres.
    solver_builders!("Stopping rule: `tolerance` on the projected-gradient residual (Newton) or the dual residual (PNM's FISTA), and `max_iterations` per start (`check_every` is not used: the residual is tested every iteration).", "Nystrom compression: features on `m` centres drawn from the data with `seed`, and for NCM `m` kernel coefficients per non-negative part (Newton systems of order `O(m)` instead of `O(n)`); default: every sample.");

    /// Number of starting points for GLM (the convex PNM and NCM use one) and their seed;
    /// at most [`MAX_RESTARTS`](super::MAX_RESTARTS) (checked at fit).
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
    /// weights this estimator does not accept (see [`Regularisation`](crate::psd::Regularisation)), and invalid
    /// solver options ([`SolverOptions::validate`](crate::psd::SolverOptions::validate)), or `restarts` outside `1..=`[`MAX_RESTARTS`](crate::psd::baseline_regression::MAX_RESTARTS).
    pub fn validate(&self) -> Result<(), Error> {
        self.settings.validate(Terms::BASELINE_REGRESSION)?;
        check_restarts(self.restarts)
    }

    /// The training problem on `(x, y)` (validated), for inspection and tests.
    pub fn problem(&self, device: &Device, x: &DMatrix<f64>, y: &DVector<f64>) -> Result<HeteroscedasticBaselineProblem, Error> {
        self.validate()?;
        self.settings.check_device(device)?;
        let (y_mean, y_sd) = target_moments(x, y)?;
        let loss = GaussianNaturalLoss { targets: y.map(|v| (v - y_mean) / y_sd) };
        let centres = self.settings.centres(x)?;
        let features = EmpiricalFeatures::new(&centres, self.settings.sigma)?;
        let p = features.features_with_constant(device, x)?;
        let pz = if self.settings.nystrom.is_some() { features.features_with_constant(device, &centres)? } else { p.clone() };
        let part = PartMap::new(self.kind, &p, &pz);
        let r = p.nrows();
        let bounded = (0..r + part.dim()).map(|j| j >= r && self.kind == BaselineKind::Ncm).collect();
        Ok(HeteroscedasticBaselineProblem { features, p, part, loss, lambda0: self.settings.regularisation.linear, lambda: self.settings.regularisation.quadratic, bounded, y_mean, y_sd })
    }

    /// Fits on `data` (inputs `data.x`, one sample per row; targets
    /// `data.y`): [`Self::fit_xy`].
    pub fn fit(&self, device: &Device, data: &crate::estimator::Supervised) -> Result<BaselineHeteroscedastic, Error> {
        self.fit_xy(device, &data.x, &data.y)
    }

    /// Fits `eta` and `theta` to inputs `x` (n x d) and targets `y` (n) (module docs).
    ///
    /// Errors: invalid parameters, empty/NaN/mismatched input, fewer than 2
    /// samples or constant targets, [`Error::NotConverged`] (with the
    /// residual as `gap`) when no start reaches the tolerance.
    pub fn fit_xy(&self, device: &Device, x: &(impl AsMatrix<Elem = f64> + ?Sized), y: &(impl AsVector<Elem = f64> + ?Sized)) -> Result<BaselineHeteroscedastic, Error> {
        let x = x.as_matrix()?;
        let x = &*x;
        let y = y.as_vector()?;
        let y = &*y;
        let start = Instant::now();
        let problem = self.problem(device, x, y)?;
        let r = problem.p.nrows();
        let mut rng = StdRng::seed_from_u64(self.seed);
        let starts = if self.kind == BaselineKind::Glm { self.restarts } else { 1 };
        let settings = NewtonSettings { tolerance: self.settings.solver.tolerance, max_iterations: self.settings.solver.max_iterations };
        let mut best: Option<newton::NewtonOutcome> = None;
        let mut last: Option<newton::NewtonOutcome> = None;
        let mut objectives = Vec::new();
        for s in 0..starts {
            let mut z0 = DVector::zeros(r + problem.part.dim());
            let c0 = if s == 0 { problem.part.unit_start() } else { random_start(problem.part.dim(), &mut rng) };
            z0.rows_mut(r, problem.part.dim()).copy_from(&c0);
            let out = newton::minimise(|z| problem.objective(z), |z| problem.derivatives(z), &problem.bounded, z0, settings);
            objectives.push(out.objective);
            if out.residual <= self.settings.solver.tolerance && best.as_ref().is_none_or(|b| out.objective < b.objective) {
                best = Some(out);
            } else {
                last = Some(out);
            }
        }
        let Some(best) = best else {
            let out = last.expect("at least one start");
            return Err(Error::NotConverged { iterations: out.iterations, gap: out.residual, tolerance: self.settings.solver.tolerance });
        };
        let c = best.z.rows(r, problem.part.dim()).into_owned();
        let report = BaselineReport { iterations: best.iterations, residual: best.residual, objective: best.objective, objectives_per_start: objectives, seconds: start.elapsed().as_secs_f64() };
        Ok(BaselineHeteroscedastic { device: device.clone(),
            kind: self.kind,
            eta_weights: best.z.rows(0, r).into_owned(),
            theta_weights: problem.part.feature_weights(&c),
            solution: best.z,
            features: problem.features,
            y_mean: problem.y_mean,
            y_sd: problem.y_sd,
            report,
        })
    }
}

/// The training problem of a baseline heteroscedastic regression in the
/// variables `z = (v, c)` (`eta = P^T v`, `theta = g_c` at the data, module docs).
#[derive(Debug, Clone)]
pub struct HeteroscedasticBaselineProblem {
    features: EmpiricalFeatures,
    p: DMatrix<f64>,
    part: PartMap,
    loss: GaussianNaturalLoss,
    lambda0: f64,
    lambda: f64,
    bounded: Vec<bool>,
    y_mean: f64,
    y_sd: f64,
}

impl HeteroscedasticBaselineProblem {
    /// Number of variables `(r + 1) + dim(c)`.
    pub fn dimension(&self) -> usize {
        self.bounded.len()
    }

    /// Which variables are constrained to be `>= 0` (NCM's coefficients).
    pub fn bounded(&self) -> &[bool] {
        &self.bounded
    }

    /// Sizes `(r + 1, dim)` of the blocks `v` (for `eta`) and `c` (for `theta`) of `z`.
    pub fn block_sizes(&self) -> (usize, usize) {
        (self.p.nrows(), self.part.dim())
    }

    fn split(&self, z: &DVector<f64>) -> (DVector<f64>, DVector<f64>) {
        let r = self.p.nrows();
        (z.rows(0, r).into_owned(), z.rows(r, z.len() - r).into_owned())
    }

    /// `L(eta, theta) + lambda_0/2 ||v||^2 + lambda/2 c^T R c`; `+inf` where some `theta(x_i) <= 0`.
    pub fn objective(&self, z: &DVector<f64>) -> f64 {
        let (v, c) = self.split(z);
        let (theta, _, _) = self.part.values(&c);
        let eta = self.p.transpose() * &v;
        self.loss.value(&eta, &theta) + 0.5 * self.lambda0 * v.norm_squared() + self.lambda * self.part.regulariser(&c)
    }

    /// Gradient and Hessian at a point of finite objective.
    fn derivatives(&self, z: &DVector<f64>) -> (DVector<f64>, DMatrix<f64>) {
        let (v, c) = self.split(z);
        let (theta, g1, g2) = self.part.values(&c);
        let eta = self.p.transpose() * &v;
        let (be, al) = self.loss.gradient(&eta, &theta);
        let (hee, het, htt) = self.loss.hessian(&eta, &theta);
        let r = self.p.nrows();
        let dim = self.part.dim();
        let mut grad = DVector::zeros(r + dim);
        grad.rows_mut(0, r).copy_from(&(&self.p * &be + &v * self.lambda0));
        grad.rows_mut(r, dim).copy_from(&(&self.part.jt * al.component_mul(&g1) + &self.part.reg * &c * self.lambda));
        let mut h = DMatrix::zeros(r + dim, r + dim);
        let mut hww = weighted_product(&self.p, &hee, &self.p);
        for a in 0..r {
            hww[(a, a)] += self.lambda0;
        }
        let hwc = weighted_product(&self.p, &het.component_mul(&g1), &self.part.jt);
        let dcc = DVector::from_fn(theta.len(), |i, _| htt[i] * g1[i] * g1[i] + al[i] * g2[i]);
        let hcc = weighted_product(&self.part.jt, &dcc, &self.part.jt) + &self.part.reg * self.lambda;
        h.view_mut((0, 0), (r, r)).copy_from(&hww);
        h.view_mut((0, r), (r, dim)).copy_from(&hwc);
        h.view_mut((r, 0), (dim, r)).copy_from(&hwc.transpose());
        h.view_mut((r, r), (dim, dim)).copy_from(&hcc);
        (grad, h)
    }

    /// Gradient of [`Self::objective`] at a point of finite objective.
    pub fn gradient(&self, z: &DVector<f64>) -> DVector<f64> {
        self.derivatives(z).0
    }
}

/// A fitted heteroscedastic regression with a baseline model (Eq. 32, 34 or 36) for `theta`.
///
/// Its methods compute on the device it was fitted on ([`OnDevice`](crate::estimator::OnDevice): a loaded model is on the CPU).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct BaselineHeteroscedastic {
    kind: BaselineKind,
    features: EmpiricalFeatures,
    /// `eta'(x) = Phi'(x)^T eta_weights` (standardised units).
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    eta_weights: DVector<f64>,
    /// `theta'(x) = Phi'(x)^T theta_weights`, or its `exp` for GLM.
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    theta_weights: DVector<f64>,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    solution: DVector<f64>,
    y_mean: f64,
    y_sd: f64,
    report: BaselineReport,
    /// Not saved: a loaded model is on the CPU.
    #[cfg_attr(feature = "serde", serde(skip, default = "crate::Device::cpu"))]
    device: Device,
}

impl BaselineHeteroscedastic {
    /// Which baseline models `theta`.
    pub fn kind(&self) -> BaselineKind {
        self.kind
    }

    /// Convergence of the fit.
    pub fn report(&self) -> &BaselineReport {
        &self.report
    }

    /// The minimiser `z = (v, c)` of [`HeteroscedasticBaselineProblem::objective`]
    /// (NCM: `c = a >= 0`, the kernel coefficients of `theta`).
    pub fn solution(&self) -> &DVector<f64> {
        &self.solution
    }

    /// `eta(x)` and `theta(x)` at the rows of `x` (original units of `y`); PNM's
    /// `theta` may be negative away from the data.
    pub fn natural_parameters(&self, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<NaturalParameters, Error> {
        let x = x.as_matrix()?;
        let x = &*x;
        let device = &self.device;
        check_matrix("x", x)?;
        check_dim("columns of x vs model dimension", self.features.centres().ncols(), x.ncols())?;
        let phi = self.features.features_with_constant(device, x)?;
        let eta_s = phi.transpose() * &self.eta_weights;
        let s = phi.transpose() * &self.theta_weights;
        let theta_s = if self.kind == BaselineKind::Glm { s.map(f64::exp) } else { s };
        Ok(NaturalParameters::from_standardised(&eta_s, &theta_s, self.y_mean, self.y_sd))
    }

    /// Predictive mean `mu = eta/theta`.
    ///
    /// Errors: as [`BaselineHeteroscedastic::natural_parameters`], and
    /// `Compute(Overflow)` where `theta` is 0 or the mean overflows.
    pub fn predict_mean(&self, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<DVector<f64>, Error> {
        let x = x.as_matrix()?;
        let x = &*x;
        Ok(linalg::finite_vector("predictive mean", self.natural_parameters(x)?.mean())?)
    }

    /// Predictive variance `v = 1/theta` (negative where PNM's `theta` is).
    ///
    /// Errors: as [`BaselineHeteroscedastic::predict_mean`].
    pub fn predict_variance(&self, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<DVector<f64>, Error> {
        let x = x.as_matrix()?;
        let x = &*x;
        Ok(linalg::finite_vector("predictive variance", self.natural_parameters(x)?.variance())?)
    }

    /// Mean predictive log-likelihood (`-inf` if `theta <= 0` at some point).
    pub fn mean_log_likelihood(&self, x: &(impl AsMatrix<Elem = f64> + ?Sized), y: &(impl AsVector<Elem = f64> + ?Sized)) -> Result<f64, Error> {
        let x = x.as_matrix()?;
        let x = &*x;
        let y = y.as_vector()?;
        let y = &*y;
        check_dim("length of y vs rows of x", x.nrows(), y.len())?;
        linalg::check_finite("y", &DMatrix::from_column_slice(y.len(), 1, y.as_slice()))?;
        Ok(self.natural_parameters(x)?.log_likelihood(y).mean())
    }
}

#[cfg(feature = "serde")]
impl crate::io::SavedModel for BaselineHeteroscedastic {
    const KIND: &'static str = "psd-baseline-heteroscedastic";

    /// A consistent feature map ([`EmpiricalFeatures`]' check); `eta` and
    /// `theta` weights of its dimension plus the constant; every number
    /// finite and within [`crate::io::MAX_STORED_MAGNITUDE`]; a target scale
    /// that is a stored scale ([`crate::io::MIN_STORED_SCALE`]).
    fn check_loaded(&self) -> Result<(), Error> {
        use crate::io::{ensure, ensure_bounded, ensure_scale};
        self.features.check_loaded()?;
        let dim = self.features.map().nrows() + 1;
        ensure(self.eta_weights.len() == dim && self.theta_weights.len() == dim, || format!("weights must have the feature dimension {dim}"))?;
        ensure_bounded("eta weights", self.eta_weights.iter())?;
        ensure_bounded("theta weights", self.theta_weights.iter())?;
        ensure_bounded("solution", self.solution.iter())?;
        ensure_bounded("target mean", [self.y_mean].iter())?;
        ensure_scale("target scale", self.y_sd)
    }
}

crate::estimator::on_device!(BaselineHeteroscedastic);
