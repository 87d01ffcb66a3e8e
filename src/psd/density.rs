//! Density estimation with a PSD model (Section 6 and Eq. 12):
//!
//! `min_{A >= 0} -(1/n) sum_i log f_A(x_i) + lambda_1 ||A||_* + lambda_2/2 ||A||_F^2`
//! s.t. `int f_A dnu = tr(A W) = 1`,
//!
//! and the estimated density is `p(x) = f_A(x) nu(x)` for the base measure
//! `nu` (Lebesgue: `p = f`; Gaussian: App. E). The constraint is dualised
//! (App. E) and solved by [`super::dual`]; the returned model is rescaled so
//! that its closed-form integral is exactly 1 (up to round-off).
//!
//! **Nystrom compression.** With [`DensityParams::nystrom`] the model lives on
//! `m << n` centres drawn uniformly from the data: the features are `r <= m`
//! dimensional, so each FISTA iteration costs `O(m^3 + n m^2)` instead of `O(n^3)`.
//!
//! Beyond the paper (Gaussian PSD models as mixtures, cf. Rudi & Ciliberto
//! 2021): `p` is a Gaussian mixture with possibly negative weights
//! `sum_ij B_ij w_ij N(x; c_ij, S)`, which gives moments, box probabilities,
//! marginals (Hadamard products with 1-D integral matrices) and sampling by
//! inverting closed-form conditional CDFs.

use nalgebra::{DMatrix, DVector};
use rand::Rng;

use crate::input::AsMatrix;
use crate::device::Device;
use crate::linalg::{self, check_matrix};

use super::dual::DualProblem;
use crate::distributed::{agreed, same_route};
use super::features::TrainingFeatures;
use super::options::{SolverOptions, SolverReport};
use crate::error::Error;
use super::features::EmpiricalFeatures;
use super::integrals::{gaussian_product, product_integrals, squared_gaussian_integral, BaseMeasure};
use super::loss::{NegativeLogLikelihood, SampleBlock};
use super::model::PsdModel;
use super::options::{PsdSettings, Regularisation, Terms, shared_builders, solver_builders};
use super::positive_part::{PositivePartRoute, PositivePartStats};

/// Parameters of [`PsdDensity`] (builder; validated in [`DensityParams::fit`]).
#[derive(Debug, Clone, PartialEq)]
pub struct DensityParams {
    settings: PsdSettings,
    base: BaseMeasure,
    positive_part: PositivePartRoute,
}

/// The seeded uniform draw of `m` distinct centre rows out of `n`, ascending ([`crate::nystrom::landmark_indices`]).
pub use crate::nystrom::landmark_indices as nystrom_indices;


impl DensityParams {
    /// Gaussian kernel of width `sigma`, Lebesgue base measure, `lambda_1 = 1e-3`,
    /// `lambda_2 = 1e-4` (the ratio 0.1 of App. E), every sample a centre, default solver options
    /// except the gap checked every 2 iterations (cheap for this solver, see [`super::dual`]).
    ///
    /// The kernel is given as the other methods take it, e.g.
    /// `Kernel::gaussian_with_width(sigma)?`; only the Gaussian kernel has the
    /// closed forms these models need.
    ///
    /// Errors ([`Error::InvalidParameter`]): any kernel but the Gaussian
    /// (`kernel`), an invalid kernel ([`crate::Kernel::validate`]).
    pub fn new(kernel: crate::Kernel) -> Result<Self, Error> {
        let settings = PsdSettings::new(&kernel, Regularisation::new().trace(1e-3).quadratic(1e-4), SolverOptions::default().check_every(2))?;
        Ok(DensityParams { settings, base: BaseMeasure::Lebesgue, positive_part: PositivePartRoute::Auto })
    }

    // `.regularisation(Regularisation)`, its getter and `kernel_width()`, shared by every PSD params type.
    shared_builders!("Regulariser `lambda_1 ||A||_* + lambda_2/2 ||A||_F^2` (Eq. 6): weights `trace` (`lambda_1 >= 0`) and `quadratic` (`lambda_2 > 0`); the density has no linear part (`linear` must be 0). Checked at fit.");

    // `.solver(SolverOptions)` and `.nystrom(m, seed)`, shared by the PSD params types with Nystrom centres.
    solver_builders!("Solver tolerance (duality gap) and budget.", "Nystrom compression on `m` centres drawn from the data with `seed`.");

    /// Base measure `nu` of the density `p = f nu`.
    pub fn base_measure(mut self, base: BaseMeasure) -> Self {
        self.base = base;
        self
    }

    /// The base measure `nu`.
    pub(super) fn base_measure_ref(&self) -> &BaseMeasure {
        &self.base
    }

    /// How the dual computes each `[M]_+` (default
    /// [`PositivePartRoute::Auto`]: on a GPU with `f64` the polar route where
    /// the cost model of the card predicts it cheaper
    /// ([`super::positive_part::polar_is_cheaper`]), so that `M` and `[M]_+`
    /// stay on the device; otherwise
    /// the eigenpairs above 0 of a fresh tridiagonalisation, the fastest on
    /// the CPU problems of BENCHMARKS.md; [`PositivePartRoute::Partial`] for the certified,
    /// warm-started partial eigensolver of [`super::positive_part`]).
    pub fn positive_part(mut self, route: PositivePartRoute) -> Self {
        self.positive_part = route;
        self
    }

    /// The route of [`Self::positive_part`].
    pub fn positive_part_route(&self) -> PositivePartRoute {
        self.positive_part
    }

    /// Checks the parameters (the data are checked by `fit`); `fit` calls it
    /// first.
    ///
    /// Errors, all [`Error::InvalidParameter`]: a Gaussian `kernel` of width `sigma` not
    /// finite and `> 0`, regularisation
    /// weights this estimator does not accept (see [`Regularisation`]), and invalid
    /// solver options ([`SolverOptions::validate`](crate::psd::SolverOptions::validate)).
    pub fn validate(&self) -> Result<(), Error> {
        self.settings.validate(Terms::DENSITY)
    }

    /// Fits the density to the rows of `x` (n x d).
    ///
    /// On a GPU with `f64` (see [`Device::supports`]) X is uploaded once,
    /// the features are built on the device and stay there, and every
    /// iteration's `P diag(alpha) P^T`, `[M]_+` (the polar route of
    /// [`Self::positive_part`], where it is the cheaper one) and model values run there in `f64`
    /// ([`super::features::Features::Resident`]). With the polar route
    /// FISTA's state (the dual point, the momentum point, the gradient) and
    /// its O(n) vector updates stay there too: per iteration only scalars
    /// and O(r) norms and traces come down, nothing of length n crosses
    /// (the dual start goes up and the dual point comes down once per fit).
    /// With the eigendecomposition route, per evaluation the dual weights go
    /// up and the model values come down, and the O(n) vector updates run
    /// on the CPU. On a GPU without `f64` the
    /// features are computed there in `f32` and the iterations on the CPU.
    /// On the CPU everything runs in `f64` on the CPU.
    pub fn fit(&self, device: &Device, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<PsdDensity, Error> {
        let x = x.as_matrix()?;
        let x = &*x;
        self.validate()?;
        self.settings.check_device(device)?;
        check_matrix("x", x)?;
        self.base.check_dimension(x.ncols())?;
        let start = std::time::Instant::now();
        let centres = self.settings.centres(x)?;
        self.fit_rows(device, x, &centres, None, start)
    }

    /// The fit on the rows `x` given the centres: all rows in one process,
    /// or with `shard = (comm, offset)` this rank's block of rows starting
    /// at global row `offset` (the centres, every rank's same global rows;
    /// the solve as in [`super::dual::DualProblem::solve_sharded`], the
    /// local work's failures agreed on).
    pub(super) fn fit_rows(&self, device: &Device, x: &DMatrix<f64>, centres: &DMatrix<f64>, shard: Option<(&dyn crate::distributed::Communicator, usize, usize)>, start: std::time::Instant) -> Result<PsdDensity, Error> {
        let comm = shard.map(|(comm, _, _)| comm);
        // At least four m x m matrices live at once (the centres' kernel, the
        // feature map, the product integrals and the integral operator W).
        let m = centres.nrows();
        let features = crate::memory::entries(m, m, "PSD density")
            .and_then(|e| crate::memory::check_host::<f64>(e.saturating_mul(4), "PSD density fit (m x m kernel, feature map, integrals)"))
            .and_then(|_| EmpiricalFeatures::new(centres, self.settings.sigma));
        // What each rank does alone must fail on every rank together.
        let features = agreed(comm, features)?;
        let training = agreed(comm, TrainingFeatures::new(&features, device, x, || match (self.settings.nystrom, shard) {
            // Every sample a centre: P = L^T, triangular (a third of the flops per iteration).
            (None, None) => features.centre_features(device),
            (None, Some((_, offset, _))) => Ok(features.centre_features(device)?.columns(offset, x.nrows()).into_owned()),
            (Some(_), _) => features.features(device, x),
        }))?;
        let m_int = product_integrals(centres, self.settings.sigma, &self.base)?;
        let t = features.map();
        let w = linalg::matmul_nt(&linalg::matmul(t, &m_int), t);
        let w = (&w + w.transpose()) * 0.5;
        let setup = start.elapsed().as_secs_f64();
        let total = shard.map_or(x.nrows(), |(_, _, total)| total);
        let loss = SampleBlock { loss: NegativeLogLikelihood { n: total }, rows: x.nrows() };
        let problem = DualProblem { features: training.view(device), integral: Some(&w), loss: &loss, lambda1: self.settings.regularisation.trace, lambda2: self.settings.regularisation.quadratic };
        // The route must be the same on every rank: resident only if every rank's features are.
        let resident = same_route(comm, matches!(training, TrainingFeatures::Resident(_)))?;
        let card = if resident { super::positive_part::card_profile(device) } else { None };
        let eigen_solver = self.positive_part.solver(card.as_ref(), total, features.rank());
        let solution = problem.solve_sharded(&self.settings.solver, eigen_solver, comm)?;
        let model = PsdModel::from_feature_operator(&features, &solution.a)?;
        let mut report = solution.report;
        report.seconds_setup = setup;
        report.seconds_total = start.elapsed().as_secs_f64();
        Ok(PsdDensity { device: device.clone(), model, base: self.base.clone(), report, eigen_stats: solution.eigen_stats })
    }
}

/// A fitted density `p(x) = f(x) nu(x)` with `int p = 1`.
///
/// Its methods compute on the device it was fitted on ([`OnDevice`](crate::estimator::OnDevice): a loaded model is on the CPU).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PsdDensity {
    model: PsdModel,
    base: BaseMeasure,
    report: SolverReport,
    eigen_stats: PositivePartStats,
    /// Not saved: a loaded model is on the CPU.
    #[cfg_attr(feature = "serde", serde(skip, default = "crate::Device::cpu"))]
    device: Device,
}

/// `p` as a signed Gaussian mixture `sum_c w_c N(x; mean_c, diag(std^2))`.
struct Mixture {
    weights: Vec<f64>,
    means: DMatrix<f64>,
    std: DVector<f64>,
}

impl PsdDensity {
    /// A density from a model and base measure (not normalised here), on
    /// the CPU ([`crate::estimator::OnDevice::to_device`] moves it).
    pub fn from_model(model: PsdModel, base: BaseMeasure) -> Result<Self, Error> {
        base.check_dimension(model.dimension())?;
        Ok(PsdDensity { device: Device::cpu(), model, base, report: SolverReport::default(), eigen_stats: PositivePartStats::default() })
    }

    /// The non-negative model `f`.
    pub fn model(&self) -> &PsdModel {
        &self.model
    }

    /// The base measure.
    pub fn base_measure(&self) -> &BaseMeasure {
        &self.base
    }

    /// Convergence and timing of the fit.
    pub fn report(&self) -> &SolverReport {
        &self.report
    }

    /// How the fit computed the positive parts `[M]_+` (full eigendecompositions
    /// vs certified partial solves, see [`super::positive_part`]).
    pub fn eigen_stats(&self) -> PositivePartStats {
        self.eigen_stats
    }

    /// `p(x) = f(x) nu(x)` at the rows of `x`.
    pub fn density(&self, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<DVector<f64>, Error> {
        let x = x.as_matrix()?;
        let x = &*x;
        let device = &self.device;
        let f = self.model.evaluate(device, x)?;
        Ok(f.component_mul(&self.base.density(x)))
    }

    /// Mean log-likelihood `(1/n) sum_i log p(x_i)` (`-inf` if some `p(x_i) = 0`).
    pub fn mean_log_likelihood(&self, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<f64, Error> {
        let x = x.as_matrix()?;
        let x = &*x;
        let p = self.density(x)?;
        Ok(p.iter().map(|v| v.ln()).sum::<f64>() / x.nrows() as f64)
    }

    /// `int p` in closed form (1 after fitting).
    pub fn integral(&self) -> Result<f64, Error> {
        self.model.integral(&self.base)
    }

    /// `P(X in prod_k [lower_k, upper_k])` in closed form.
    pub fn box_probability(&self, lower: &[f64], upper: &[f64]) -> Result<f64, Error> {
        self.model.box_integral(&self.base, lower, upper)
    }

    /// Marginal density of the coordinates `keep` (increasing), in closed
    /// form, on this density's device.
    pub fn marginal(&self, keep: &[usize]) -> Result<PsdDensity, Error> {
        let model = self.model.marginal(&self.base, keep)?;
        let mut marginal = PsdDensity::from_model(model, self.base.restrict(keep))?;
        marginal.device = self.device.clone();
        Ok(marginal)
    }

    fn mixture(&self) -> Mixture {
        let z = self.model.centres();
        let (m, d) = z.shape();
        let sigma = self.model.sigma();
        let b = self.model.coefficients();
        let pairs = m * (m + 1) / 2;
        let mut weights = Vec::with_capacity(pairs);
        let mut means = DMatrix::zeros(pairs, d);
        let mut std = DVector::from_element(d, sigma / std::f64::consts::SQRT_2);
        let mut row = 0;
        for j in 0..m {
            for i in j..m {
                let mut w = if i == j { b[(i, j)] } else { 2.0 * b[(i, j)] };
                for k in 0..d {
                    let (a, bk) = (z[(i, k)], z[(j, k)]);
                    let c = 0.5 * (a + bk);
                    w *= (-(a - bk) * (a - bk) / (4.0 * sigma * sigma)).exp();
                    match self.base.coordinate(k) {
                        None => {
                            w *= std::f64::consts::PI.sqrt() * sigma;
                            means[(row, k)] = c;
                        }
                        Some((mu, s)) => {
                            let (c2, s2, wk) = gaussian_product(c, sigma, mu, s);
                            w *= wk;
                            means[(row, k)] = c2;
                            std[k] = s2;
                        }
                    }
                }
                weights.push(w);
                row += 1;
            }
        }
        Mixture { weights, means, std }
    }

    /// Mean and per-coordinate variance of `p`, in closed form.
    pub fn moments(&self) -> (DVector<f64>, DVector<f64>) {
        let mix = self.mixture();
        let d = mix.means.ncols();
        let total: f64 = mix.weights.iter().sum();
        let mut mean = DVector::zeros(d);
        let mut second = DVector::zeros(d);
        for (c, &w) in mix.weights.iter().enumerate() {
            for k in 0..d {
                let mu = mix.means[(c, k)];
                mean[k] += w * mu;
                second[k] += w * (mu * mu + mix.std[k] * mix.std[k]);
            }
        }
        mean /= total;
        second /= total;
        let var = DVector::from_fn(d, |k, _| second[k] - mean[k] * mean[k]);
        (mean, var)
    }

    /// Draws `count` samples (rows of the result) coordinate by coordinate by
    /// inverting closed-form conditional CDFs: with the pairs `(i, j)`,
    /// `p(x_k | x_<k) ∝ sum_ij B_ij prod_{l<k} k_l(x_l) prod_{l>k} M^l_ij k_k(x_k) nu_k(x_k)`
    /// and its CDF is a sum of the 1-D interval integrals of
    /// [`super::integrals`], solved for a uniform level by bisection to
    /// `1e-12` relative width. Exact up to the bisection tolerance and robust
    /// to cancellations in `B` (a rejection sampler from the mixture with
    /// weights `|w_c|` is not).
    /// Errors: [`Error::NotPositive`] if the density has no mass.
    pub fn sample<R: Rng>(&self, count: usize, rng: &mut R) -> Result<DMatrix<f64>, Error> {
        let z = self.model.centres();
        let (m, d) = z.shape();
        let sigma = self.model.sigma();
        let b = self.model.coefficients();
        // Pairs i <= j with weight B_ij (doubled off the diagonal).
        let mut pairs = Vec::with_capacity(m * (m + 1) / 2);
        for j in 0..m {
            for i in j..m {
                pairs.push((i, j, if i == j { b[(i, j)] } else { 2.0 * b[(i, j)] }));
            }
        }
        let np = pairs.len();
        let centre = |p: usize, k: usize| 0.5 * (z[(pairs[p].0, k)] + z[(pairs[p].1, k)]);
        let spread = |p: usize, k: usize| {
            let t = z[(pairs[p].0, k)] - z[(pairs[p].1, k)];
            (-t * t / (4.0 * sigma * sigma)).exp()
        };
        let full = |p: usize, k: usize| spread(p, k) * squared_gaussian_integral(centre(p, k), sigma, self.base.coordinate(k), f64::NEG_INFINITY, f64::INFINITY);
        // suffix[k][p] = prod_{l > k} M^l_p.
        let mut suffix = vec![vec![1.0; np]; d];
        for k in (0..d.saturating_sub(1)).rev() {
            suffix[k] = (0..np).map(|p| suffix[k + 1][p] * full(p, k + 1)).collect();
        }
        let total_mass: f64 = (0..np).map(|p| pairs[p].2 * suffix[0][p] * full(p, 0)).sum();
        if !(total_mass > 0.0) {
            return Err(Error::NotPositive { what: "mass of the density", value: total_mass });
        }
        let mut out = DMatrix::zeros(count, d);
        let mut prefix = vec![0.0; np];
        let mut weights = vec![0.0; np];
        for s in 0..count {
            for (p, v) in prefix.iter_mut().enumerate() {
                *v = pairs[p].2;
            }
            for k in 0..d {
                let g = self.base.coordinate(k);
                for p in 0..np {
                    weights[p] = prefix[p] * suffix[k][p] * spread(p, k);
                }
                let cdf = |t: f64| -> f64 {
                    (0..np).map(|p| weights[p] * squared_gaussian_integral(centre(p, k), sigma, g, f64::NEG_INFINITY, t)).sum()
                };
                let mass: f64 = (0..np).map(|p| weights[p] * squared_gaussian_integral(centre(p, k), sigma, g, f64::NEG_INFINITY, f64::INFINITY)).sum();
                if !(mass > 0.0) {
                    return Err(Error::NotPositive { what: "mass of a conditional density", value: mass });
                }
                let level = rng.random::<f64>() * mass;
                // Bracket: the pair centres +- 12 sigma (+ 12 base std).
                let reach = 12.0 * (sigma + g.map_or(0.0, |(_, sd)| sd));
                let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
                for p in 0..np {
                    lo = lo.min(centre(p, k));
                    hi = hi.max(centre(p, k));
                }
                if let Some((mu, _)) = g {
                    lo = lo.min(mu);
                    hi = hi.max(mu);
                }
                lo -= reach;
                hi += reach;
                while hi - lo > 1e-12 * (1.0 + lo.abs().max(hi.abs())) {
                    let mid = 0.5 * (lo + hi);
                    if cdf(mid) < level { lo = mid } else { hi = mid }
                }
                let xk = 0.5 * (lo + hi);
                out[(s, k)] = xk;
                for (p, v) in prefix.iter_mut().enumerate() {
                    let c = centre(p, k);
                    *v *= spread(p, k) * (-(xk - c) * (xk - c) / (sigma * sigma)).exp();
                }
                // Rescale against underflow (conditionals are scale-free).
                let top = prefix.iter().fold(0.0f64, |a, v| a.max(v.abs()));
                if top > 0.0 {
                    prefix.iter_mut().for_each(|v| *v /= top);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(feature = "serde")]
impl crate::io::SavedModel for PsdDensity {
    const KIND: &'static str = "psd-density";

    /// A consistent model ([`PsdModel`]'s check: kernel and width agree,
    /// shapes, magnitudes) and base measure of the model's dimension; the
    /// density bounded, `m ||C||_F^2 max nu` within
    /// [`crate::io::MAX_STORED_MAGNITUDE`]; and a finite positive mass
    /// `int p` (the closed form of [`PsdDensity::integral`]).
    fn check_loaded(&self) -> Result<(), Error> {
        use crate::io::ensure;
        self.model.check_loaded("PSD model")?;
        let d = self.model.dimension();
        self.base.check_loaded(d)?;
        let bound = self.model.value_bound() * self.base.peak_density();
        ensure(bound <= crate::io::MAX_STORED_MAGNITUDE, || format!("the density reaches {bound:e} (m ||C||_F^2 max nu), beyond the magnitude a model may store"))?;
        let mass = self.integral()?;
        ensure(mass.is_finite() && mass > 0.0, || format!("the density's mass int p is {mass:e} (must be finite and positive)"))
    }
}

crate::estimator::on_device!(PsdDensity);
