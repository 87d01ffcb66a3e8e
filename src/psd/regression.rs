//! Multiple quantile regression with non-crossing quantiles (Section 6,
//! Eq. 14 and Theorem 6): for levels `tau_1 < .. < tau_K` with middle index
//! `c = K/2` (0-based),
//!
//! `q_c(x) = w^T Phi(x)` (linear), `q_j = q_c + sum_{c < i <= j} f_{A_i}` above,
//! `q_j = q_c - sum_{j <= i < c} f_{A_i}` below, all `A_i >= 0`,
//!
//! so `q_1 <= .. <= q_K` everywhere. Loss: pinball `(1/n) sum_j sum_i rho_{tau_j}(y_i - q_j(x_i))`,
//! regulariser `lambda_0/2 ||w||^2 + sum_i (lambda_1 tr A_i + lambda_2/2 ||A_i||_F^2)`.
//! The targets are centred by their median first (no intercept in the linear part).
//!
//! **Dual** (Fenchel-Rockafellar, as Theorem 2), variables `alpha_j` per level:
//! `min sum_j L_j*(alpha_j) + 1/(2 lambda_0) ||P sum_j alpha_j||^2 + sum_{i != c} 1/(2 lambda_2) ||[M_i]_+||_F^2`,
//! `M_i = -P diag(sum_{j >= i} alpha_j) P^T - lambda_1 I` (i > c),
//! `M_i = P diag(sum_{j <= i} alpha_j) P^T - lambda_1 I` (i < c),
//! with `l_{tau,i}*(s) = s y_i` on `[-tau/n, (1 - tau)/n]` (prox: clip of `v - t y`),
//! primal recovery `w = -P sum_j alpha_j / lambda_0`, `A_i = [M_i]_+ / lambda_2`,
//! and gradient `-q_j(x_i)` in `alpha_j`. This is the configuration of the
//! engine of [`super::engine`] with one block per level, a PSD part per gap
//! (couplings `+-1` on the levels it moves) and the linear part on all levels
//! ([`PinballLoss`], whose prox, conjugate and value also run on a device:
//! the clip per level, sums of element-wise terms); Nystrom centres with
//! [`QuantileParams::nystrom`]. The duality gap stops it.

use nalgebra::{DMatrix, DVector};

use crate::input::{AsMatrix, AsVector};
use crate::device::Device;
use crate::linalg::{self, check_dim, check_matrix};

use super::features::TrainingFeatures;
use super::positive_part::PositivePartRoute;
use super::options::{SolverOptions, SolverReport};
use super::engine::{BlockLoss, EngineProblem, LinearPart, SampleTerms, MeanTerms};
use super::loss::ResidentLoss;
use crate::precision::Precision;
use crate::resident::{DeviceMatrix, Workspace};
use crate::error::Error;
use super::features::EmpiricalFeatures;
use super::model::PsdModel;
use super::options::{PsdSettings, Regularisation, Terms, shared_builders, solver_builders};

/// Parameters of [`QuantileRegression`].
#[derive(Debug, Clone, PartialEq)]
pub struct QuantileParams {
    settings: PsdSettings,
    levels: Vec<f64>,
    positive_part: PositivePartRoute,
}

impl QuantileParams {
    /// Gaussian `kernel` of width `sigma` and quantile levels (strictly increasing, in (0, 1));
    /// `lambda_0 = 1e-3`, `lambda_1 = 1e-3`, `lambda_2 = 1e-4`.
    ///
    /// The kernel is given as the other methods take it, e.g.
    /// `Kernel::gaussian_with_width(sigma)?`; only the Gaussian kernel has the
    /// closed forms these models need.
    ///
    /// Errors ([`Error::InvalidParameter`]): any kernel but the Gaussian
    /// (`kernel`), an invalid kernel ([`crate::Kernel::validate`]).
    pub fn new(kernel: crate::Kernel, levels: &[f64]) -> Result<Self, Error> {
        let settings = PsdSettings::new(&kernel, Regularisation::new().linear(1e-3).trace(1e-3).quadratic(1e-4), SolverOptions::default())?;
        Ok(QuantileParams { settings, levels: levels.to_vec(), positive_part: PositivePartRoute::Auto })
    }

    // `.regularisation(Regularisation)`, its getter and `kernel_width()`, shared by every PSD params type.
    shared_builders!("Regularisation weights: `linear` (`lambda_0 > 0`) of the linear part, `trace` (`lambda_1 >= 0`) and `quadratic` (`lambda_2 > 0`) of the PSD parts. Checked at fit.");

    // `.solver(SolverOptions)` and `.nystrom(m, seed)`, shared by the PSD params types with Nystrom centres.
    solver_builders!("Solver tolerance and budget.", "Nystrom compression: the curves live on `m` centres drawn uniformly from the data with `seed` (cost per iteration `O(K (n m^2 + m^3))`); default: every sample is a centre.");

    /// How the dual computes each `[M_q]_+` (default
    /// [`PositivePartRoute::Auto`], see there).
    pub fn positive_part(mut self, route: PositivePartRoute) -> Self {
        self.positive_part = route;
        self
    }

    /// Checks the parameters (the data are checked by `fit`); `fit` calls it
    /// first.
    ///
    /// Errors, all [`Error::InvalidParameter`]: a Gaussian `kernel` of width `sigma` not
    /// finite and `> 0`, regularisation
    /// weights this estimator does not accept (see [`Regularisation`]), and invalid
    /// solver options ([`SolverOptions::validate`](crate::psd::SolverOptions::validate)), or quantile `levels` that are empty, outside `(0, 1)` or not increasing.
    pub fn validate(&self) -> Result<(), Error> {
        self.settings.validate(Terms::REGRESSION)?;
        check_levels(&self.levels)
    }

    /// Fits on `data` (inputs `data.x`, one sample per row; targets
    /// `data.y`): [`Self::fit_xy`].
    pub fn fit(&self, device: &Device, data: &crate::estimator::Supervised) -> Result<QuantileRegression, Error> {
        self.fit_xy(device, &data.x, &data.y)
    }

    /// Fits the quantile curves to inputs `x` (n x d) and targets `y` (n).
    ///
    /// On a GPU with `f64` X is uploaded once, the features are built and
    /// stay on the device, and each iteration's `P diag(d_q) P^T` and model
    /// values run there, with `[M_q]_+` too where the polar route is the
    /// cheaper one ([`super::positive_part::PositivePartRoute::Auto`]), and
    /// then FISTA's state as well (the dual blocks, the gradient, the prox:
    /// nothing of length `n` crosses per iteration); elsewhere everything
    /// runs on the CPU.
    ///
    /// Errors: invalid parameters or levels, empty/NaN/mismatched input,
    /// [`Error::NotConverged`] with the gap reached.
    pub fn fit_xy(&self, device: &Device, x: &(impl AsMatrix<Elem = f64> + ?Sized), y: &(impl AsVector<Elem = f64> + ?Sized)) -> Result<QuantileRegression, Error> {
        let x = x.as_matrix()?;
        let x = &*x;
        let y = y.as_vector()?;
        let y = &*y;
        self.validate()?;
        self.settings.check_device(device)?;
        check_matrix("x", x)?;
        check_dim("length of y vs rows of x", x.nrows(), y.len())?;
        linalg::check_finite("y", &DMatrix::from_column_slice(y.len(), 1, y.as_slice()))?;
        let start = std::time::Instant::now();
        let n = x.nrows();
        let mut sorted: Vec<f64> = y.iter().copied().collect();
        sorted.sort_by(|a, b| a.total_cmp(b));
        let offset = sorted[n / 2];
        let centres = self.settings.centres(x)?;
        self.fit_rows(device, x, y, offset, centres, None, start)
    }

    /// The fit on the rows `x` with targets `y` given the targets' median
    /// `offset` (the middle order statistic, `n / 2` 0-based, of all `n`
    /// targets) and the centres: all rows in one process, or with `shard =
    /// (comm, n)` this rank's block of the `n` rows (every rank the same
    /// centres; the solve as in [`EngineProblem::solve_sharded`], the local
    /// work's failures and the route of `[M_q]_+` agreed on).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fit_rows(&self, device: &Device, x: &DMatrix<f64>, y: &DVector<f64>, offset: f64, centres: DMatrix<f64>, shard: Option<(&dyn crate::distributed::Communicator, usize)>, start: std::time::Instant) -> Result<QuantileRegression, Error> {
        let comm = shard.map(|(comm, _)| comm);
        let n = shard.map_or(x.nrows(), |(_, n)| n);
        let k = self.levels.len();
        let c = k / 2;
        let targets = PinballLoss { targets: y.add_scalar(-offset), levels: self.levels.clone() };
        let loss = SampleTerms { loss: &targets, total: n };
        let features = crate::distributed::agreed(comm, EmpiricalFeatures::new(&centres, self.settings.sigma))?;
        let training = crate::distributed::agreed(comm, TrainingFeatures::new(&features, device, x, || features.features(device, x)))?;
        let resident = crate::distributed::same_route(comm, matches!(training, TrainingFeatures::Resident(_)))?;
        let setup = start.elapsed().as_secs_f64();
        // A PSD part per level i != c, moving the levels j >= i (above the
        // middle, +1) or j <= i (below, -1); the linear part moves all levels.
        let part_levels: Vec<usize> = (0..k).filter(|&i| i != c).collect();
        let parts = part_levels.iter().map(|&i| (0..k).map(|j| if i > c && j >= i { 1.0 } else if i < c && j <= i { -1.0 } else { 0.0 }).collect()).collect();
        let problem = EngineProblem {
            features: training.view(device),
            parts,
            linear: Some(LinearPart { coupling: vec![1.0; k], lambda0: self.settings.regularisation.linear }),
            integral: None,
            loss: &loss,
            lambda1: self.settings.regularisation.trace,
            lambda2: self.settings.regularisation.quadratic,
        };
        // On a GPU with f64 the features stay on the device, and M_q and
        // [M_q]_+ too where the polar route is the cheaper one.
        let solution = problem.solve_sharded(&self.settings.solver, self.positive_part.solver((if resident { super::positive_part::card_profile(device) } else { None }).as_ref(), n, features.rank()), comm)?;
        let mut models = Vec::with_capacity(part_levels.len());
        for (&i, a) in part_levels.iter().zip(solution.parts.iter()) {
            models.push((i, PsdModel::from_feature_operator(&features, a)?));
        }
        let linear = features.map().transpose() * &solution.linear;
        let mut report = solution.report;
        report.seconds_setup = setup;
        report.seconds_total = start.elapsed().as_secs_f64();
        Ok(QuantileRegression { device: device.clone(), levels: self.levels.clone(), centres, kernel: *features.kernel(), linear, offset, parts: models, report })
    }
}

/// The pinball loss of the levels `tau_1..tau_K` as the engine's
/// [`BlockLoss`] (one block per level):
/// `L(q) = (1/n) sum_j sum_i rho_{tau_j}(y_i - q_j(x_i))`,
/// `l*_{tau, i}(s) = s y_i` on `[-tau/n, (1 - tau)/n]` (`+inf` outside),
/// `prox_{t l*}(v) = clip(v - t y_i)` to that interval.
#[derive(Debug, Clone)]
pub struct PinballLoss {
    /// Targets `y_i` (centred).
    pub targets: DVector<f64>,
    /// Levels `tau_j`.
    pub levels: Vec<f64>,
}

impl BlockLoss for PinballLoss {
    fn samples(&self) -> usize {
        self.targets.len()
    }
    fn blocks(&self) -> usize {
        self.levels.len()
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
    /// Zero (inside every box; the engine's guess is ignored).
    fn dual_start(&self, _u0: &DVector<f64>) -> DVector<f64> {
        self.dual_start_of(self.targets.len())
    }
    fn resident(&self) -> Option<&dyn ResidentLoss> {
        Some(self)
    }
}

/// The terms held, scaled by the number `n` of all samples (a rank's
/// block in a sharded fit): `(1/n) sum_j sum_i rho_{tau_j}(y_i - q_j(x_i))`,
/// boxes `[-tau/n, (1 - tau)/n]`.
impl MeanTerms for PinballLoss {
    fn samples(&self) -> usize {
        self.targets.len()
    }
    fn blocks(&self) -> usize {
        self.levels.len()
    }
    fn value_of(&self, u: &DVector<f64>, all: usize) -> f64 {
        let n = self.targets.len();
        let mut total = 0.0;
        for (j, &tau) in self.levels.iter().enumerate() {
            for i in 0..n {
                let r = self.targets[i] - u[j * n + i];
                total += (tau * r).max((tau - 1.0) * r);
            }
        }
        total / all as f64
    }
    fn conjugate_of(&self, z: &DVector<f64>, all: usize) -> f64 {
        let n = self.targets.len();
        let nf = all as f64;
        let mut total = 0.0;
        for (j, &tau) in self.levels.iter().enumerate() {
            for i in 0..n {
                let s = z[j * n + i];
                if s < -tau / nf - 1e-15 || s > (1.0 - tau) / nf + 1e-15 {
                    return f64::INFINITY;
                }
                total += s * self.targets[i];
            }
        }
        total
    }
    fn prox_conjugate_of(&self, v: &DVector<f64>, t: f64, all: usize) -> DVector<f64> {
        let n = self.targets.len();
        let nf = all as f64;
        DVector::from_fn(v.len(), |idx, _| {
            let (j, i) = (idx / n, idx % n);
            (v[idx] - t * self.targets[i]).clamp(-self.levels[j] / nf, (1.0 - self.levels[j]) / nf)
        })
    }
    fn dual_start_of(&self, _all: usize) -> DVector<f64> {
        DVector::zeros(self.targets.len() * self.levels.len())
    }
    fn resident_all(&self) -> Option<&dyn ResidentLoss> {
        Some(self)
    }
}

/// Slack of the boxes `[-tau/n, (1 - tau)/n]` in the conjugate's domain check.
const BOX_SLACK: f64 = 1e-15;

/// On a device, for all `n` samples (`n x K`, level `j` in column `j`),
/// with the data `[Y, bounds, levels]`: the targets repeated in every
/// column (`n x K`), the boxes' ends (`2 x K`: `-tau_j/n` and `(1 -
/// tau_j)/n`) and the levels (`1 x K`). The prox is the clip of `v - t c o
/// Y` to the boxes; `L*(z) = sum z o Y` (with the count of entries outside
/// the boxes, `+inf` when there is one) and `L(u) = (1/n) sum_ij
/// rho_{tau_j}(y_i - u_ij)`, each a row sum over the levels and a sum
/// over the samples.
impl ResidentLoss for PinballLoss {
    fn upload(&self, device: &Device) -> Result<Vec<DeviceMatrix>, Error> {
        let (n, k) = (self.targets.len(), self.levels.len());
        let nf = n as f64;
        let y = DMatrix::from_fn(n, k, |i, _| self.targets[i]);
        let bounds = DMatrix::from_fn(2, k, |e, j| if e == 0 { -self.levels[j] / nf } else { (1.0 - self.levels[j]) / nf });
        let levels = DMatrix::from_row_slice(1, k, &self.levels);
        [y, bounds, levels].iter().map(|m| device.upload(m, Precision::F64)).collect()
    }
    fn prox_conjugate_resident(&self, workspace: &Workspace<'_>, data: &[DeviceMatrix], v: &DeviceMatrix, c: &DeviceMatrix, t: f64, out: &DeviceMatrix) -> Result<(), Error> {
        let [y, bounds, _] = pinball_data(data)?;
        let (rows, cols, precision) = (v.nrows(), v.ncols(), v.precision());
        let scaled = workspace.take(rows, cols, precision)?;
        workspace.hadamard_into(c, y, &scaled)?;
        let shifted = workspace.take(rows, cols, precision)?;
        workspace.combine_into(1.0, v, -t, &scaled, 0.0, &shifted)?;
        workspace.clip_into(&shifted, bounds, out)
    }
    fn conjugate_terms(&self, workspace: &Workspace<'_>, data: &[DeviceMatrix], alpha: &DeviceMatrix) -> Result<Vec<DeviceMatrix>, Error> {
        let [y, bounds, _] = pinball_data(data)?;
        let (rows, cols, precision) = (alpha.nrows(), alpha.ncols(), alpha.precision());
        let products = workspace.take(rows, cols, precision)?;
        workspace.hadamard_into(alpha, y, &products)?;
        let outside = workspace.take(rows, cols, precision)?;
        workspace.outside_box_into(alpha, bounds, BOX_SLACK, &outside)?;
        [products, outside].iter().map(|m| sample_sums(workspace, m)).collect()
    }
    fn conjugate_from_sums(&self, sums: &[f64]) -> f64 {
        if sums[1] > 0.0 { f64::INFINITY } else { sums[0] }
    }
    fn value_terms(&self, workspace: &Workspace<'_>, data: &[DeviceMatrix], v: &DeviceMatrix, scale: f64) -> Result<Vec<DeviceMatrix>, Error> {
        let [y, _, levels] = pinball_data(data)?;
        let (rows, cols, precision) = (v.nrows(), v.ncols(), v.precision());
        let residuals = workspace.take(rows, cols, precision)?;
        workspace.combine_into(1.0, y, -scale, v, 0.0, &residuals)?;
        let losses = workspace.take(rows, cols, precision)?;
        workspace.pinball_into(&residuals, levels, &losses)?;
        Ok(vec![sample_sums(workspace, &losses)?])
    }
    fn value_from_sums(&self, sums: &[f64]) -> f64 {
        sums[0] / self.targets.len() as f64
    }
    /// `+inf`: the pinball loss of `u / s` does not follow from that of
    /// `u` (the engine takes an integral constraint only without a linear
    /// part, which quantile regression has, so this is never asked).
    fn value_at_scale(&self, _value: f64, _s: f64) -> f64 {
        f64::INFINITY
    }
}

/// The data of the resident pinball loss (its [`ResidentLoss::upload`]).
fn pinball_data(data: &[DeviceMatrix]) -> Result<[&DeviceMatrix; 3], Error> {
    match data {
        [y, bounds, levels] => Ok([y, bounds, levels]),
        _ => Err(Error::InvalidParameter { name: "data", reason: format!("the resident pinball loss takes its three uploaded matrices, got {}", data.len()) }),
    }
}

/// The row sums (over the levels) of an `n x K` matrix, recorded in `workspace`.
fn sample_sums(workspace: &Workspace<'_>, m: &DeviceMatrix) -> Result<DeviceMatrix, Error> {
    let out = workspace.take(m.nrows(), 1, m.precision())?;
    workspace.row_reduction_into(m, false, &out)?;
    Ok(out)
}

/// Quantile levels must be non-empty, in `(0, 1)` and strictly increasing.
pub(crate) fn check_levels(levels: &[f64]) -> Result<(), Error> {
    if levels.is_empty() {
        return Err(Error::InvalidParameter { name: "levels", reason: "need at least one quantile level".into() });
    }
    for (i, &t) in levels.iter().enumerate() {
        if !(t > 0.0 && t < 1.0) {
            return Err(Error::InvalidParameter { name: "levels", reason: format!("level {t} is outside (0, 1)") });
        }
        if i > 0 && t <= levels[i - 1] {
            return Err(Error::InvalidParameter { name: "levels", reason: format!("levels must increase strictly, got {:?}", levels) });
        }
    }
    Ok(())
}

/// Fitted non-crossing quantile curves.
///
/// Its methods compute on the device it was fitted on ([`OnDevice`](crate::estimator::OnDevice): a loaded model is on the CPU).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct QuantileRegression {
    levels: Vec<f64>,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    centres: DMatrix<f64>,
    kernel: crate::kernel::Kernel,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    linear: DVector<f64>,
    offset: f64,
    parts: Vec<(usize, PsdModel)>,
    report: SolverReport,
    /// Not saved: a loaded model is on the CPU.
    #[cfg_attr(feature = "serde", serde(skip, default = "crate::Device::cpu"))]
    device: Device,
}

impl QuantileRegression {
    /// The quantile levels.
    pub fn levels(&self) -> &[f64] {
        &self.levels
    }

    /// Convergence and timing.
    pub fn report(&self) -> &SolverReport {
        &self.report
    }

    /// Quantile curves at the rows of `x`: column `j` is level `tau_j` (n x K).
    pub fn predict(&self, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<DMatrix<f64>, Error> {
        let x = x.as_matrix()?;
        let x = &*x;
        let device = &self.device;
        check_matrix("x", x)?;
        check_dim("columns of x vs model dimension", self.centres.ncols(), x.ncols())?;
        let k = self.levels.len();
        let c = k / 2;
        let centre = device.kernel_matrix(&self.kernel, x, &self.centres)? * &self.linear;
        let mut out = DMatrix::zeros(x.nrows(), k);
        out.column_mut(c).copy_from(&centre.add_scalar(self.offset));
        let mut f = vec![None; k];
        for (i, model) in &self.parts {
            f[*i] = Some(model.evaluate(device, x)?);
        }
        for (j, part) in f.iter().enumerate().skip(c + 1) {
            let next = out.column(j - 1) + part.as_ref().expect("upper part");
            out.column_mut(j).copy_from(&next);
        }
        for (j, part) in f.iter().enumerate().take(c).rev() {
            let next = out.column(j + 1) - part.as_ref().expect("lower part");
            out.column_mut(j).copy_from(&next);
        }
        Ok(linalg::finite_result("quantile curves", out)?)
    }
}

#[cfg(feature = "serde")]
impl crate::io::SavedModel for QuantileRegression {
    const KIND: &'static str = "psd-quantile";

    /// Increasing levels in (0, 1); a valid kernel; the central curve's
    /// coefficients on `m >= 1` centres of `d >= 1` coordinates; one
    /// consistent gap model ([`PsdModel`]'s check) per other level, on
    /// centres of dimension `d`; every number finite and within
    /// [`crate::io::MAX_STORED_MAGNITUDE`].
    fn check_loaded(&self) -> Result<(), Error> {
        use crate::io::{ensure, ensure_bounded, ensure_kernel};
        let k = self.levels.len();
        ensure(k >= 1 && self.levels.iter().all(|t| *t > 0.0 && *t < 1.0) && self.levels.windows(2).all(|w| w[0] < w[1]), || format!("levels {:?} must increase within (0, 1)", self.levels))?;
        ensure_kernel("central curve", &self.kernel)?;
        let (m, d) = self.centres.shape();
        ensure(m >= 1 && d >= 1 && self.linear.len() == m, || format!("central curve: {} coefficients on centres of {m} x {d}", self.linear.len()))?;
        ensure_bounded("centres", self.centres.iter())?;
        ensure_bounded("central curve coefficients", self.linear.iter())?;
        ensure_bounded("central curve offset", [self.offset].iter())?;
        let c = k / 2;
        let mut seen = vec![false; k];
        for (i, model) in &self.parts {
            ensure(*i < k && *i != c && !seen[*i], || format!("gap model for level index {i} (of {k} levels, the central {c} has none)"))?;
            seen[*i] = true;
            model.check_loaded(&format!("gap model {i}"))?;
            ensure(model.dimension() == d, || format!("gap model {i}: dimension {} for a model of dimension {d}", model.dimension()))?;
        }
        ensure((0..k).all(|i| i == c || seen[i]), || "a level without its gap model".into())
    }
}

crate::estimator::on_device!(QuantileRegression);

#[cfg(test)]
mod tests {
    use nalgebra::{DMatrix, DVector};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use rand_distr::{Distribution, Normal};

    use crate::device::Device;
    use crate::precision::Precision;

    use super::super::engine::{EngineProblem, LinearPart};
    use super::super::engine::resident_tests::gpu;
    use super::super::features::{EmpiricalFeatures, Features};
    use super::super::options::SolverOptions;
    use super::super::positive_part::PositivePartSolver;
    use super::PinballLoss;

    /// The quantile regression of App. E (levels 0.25, 0.5, 0.75, n = 40,
    /// every sample a centre, the engine problem `QuantileParams` builds):
    /// FISTA with its state on the device against FISTA with its state on
    /// the host on the same resident features, and against the CPU `f64`
    /// fit. Tolerances: the iterations within the polar-route tests' slack
    /// (25 % + 5: the gradient `-sum_q f_q c_q^T / lambda_2 - eta l^T` is
    /// summed in another order than the host's, and a backtracking or restart
    /// decision within round-off changes the path); every fit certified, the
    /// primal objectives within the sum of the gaps; the fitted `(A_q, w)`
    /// within what the gaps certify (the primal is `lambda_2`-strongly convex
    /// in each `A_q` and `lambda_0`-strongly in `w`, so `sum_q lambda_2
    /// ||A_q - A_q*||_F^2 + lambda_0 ||w - w*||^2 <= 2 gap` for each fit),
    /// plus `1e-9` relative for the projection of the dense parts onto the
    /// PSD cone. With its state on the device the fit uploads nothing per
    /// iteration (its uploads are the set-up's, fewer than a tenth of the
    /// iterations); with it on the host every iteration uploads.
    #[test]
    fn quantile_device_state_matches_the_host_state_and_the_cpu_optimum() {
        let Some(gpu) = gpu() else { return };
        let mut rng = StdRng::seed_from_u64(11);
        let n = 40;
        let x = DMatrix::from_fn(n, 1, |_, _| if rng.random::<bool>() { rng.random_range(0.0..1.0 / 3.0) } else { rng.random_range(2.0 / 3.0..1.0) });
        let normal = Normal::new(0.0, 1.0).unwrap();
        let y = DVector::from_fn(n, |i, _| {
            let t = x[(i, 0)];
            (if t <= 1.0 / 3.0 { 1.0 / 3.0 - t } else { t - 2.0 / 3.0 }) * normal.sample(&mut rng)
        });
        let mut sorted: Vec<f64> = y.iter().copied().collect();
        sorted.sort_by(f64::total_cmp);
        let loss = PinballLoss { targets: y.add_scalar(-sorted[n / 2]), levels: vec![0.25, 0.5, 0.75] };
        let (lambda0, lambda2) = (1e-2, 1e-4);
        let problem = |features| EngineProblem { features, parts: vec![vec![-1.0, 0.0, 0.0], vec![0.0, 0.0, 1.0]], linear: Some(LinearPart { coupling: vec![1.0; 3], lambda0 }), integral: None, loss: &loss, lambda1: 1e-3, lambda2 };
        let options = SolverOptions { tolerance: 1e-5, max_iterations: 50_000, check_every: 5 };
        let features = EmpiricalFeatures::new(&x, 0.15).unwrap();
        let phi = features.resident_features(&gpu, &gpu.upload(&x, Precision::F64).unwrap()).unwrap();
        let resident = Features::Resident { device: &gpu, phi: &phi };
        let solve = |features, device_state| {
            let before = gpu.transfer_stats();
            let solution = problem(features).solve_placed(&options, PositivePartSolver::polar(), None, device_state).unwrap();
            (solution, gpu.transfer_stats().since(&before).uploads)
        };
        let (on_device, device_uploads) = solve(resident, true);
        let (on_host, host_uploads) = solve(resident, false);
        let host_features = features.features(&Device::Cpu, &x).unwrap();
        let cpu = problem(Features::Host(&host_features)).solve_placed(&options, PositivePartSolver::polar(), None, false).unwrap();
        let rd = &on_device.report;
        eprintln!("quantile: iterations device {} host {} cpu {}; gaps {:e} {:e} {:e}; primal {} {} {}; uploads device {device_uploads} host {host_uploads}", rd.iterations, on_host.report.iterations, cpu.report.iterations, rd.gap, on_host.report.gap, cpu.report.gap, rd.primal, on_host.report.primal, cpu.report.primal);
        assert!(10 * device_uploads < rd.iterations as u64 && host_uploads >= on_host.report.iterations as u64, "uploads: {device_uploads} with the state on the device, {host_uploads} on the host");
        for (name, other) in [("host state", &on_host), ("cpu", &cpu)] {
            let ro = &other.report;
            assert!(rd.iterations.abs_diff(ro.iterations) <= ro.iterations / 4 + 5, "vs {name}: iterations {} vs {}", rd.iterations, ro.iterations);
            assert!(rd.gap <= options.tolerance && ro.gap <= options.tolerance, "vs {name}: gaps {:e} {:e}", rd.gap, ro.gap);
            assert!((rd.primal - ro.primal).abs() <= rd.gap + ro.gap + 1e-12 * rd.primal.abs(), "vs {name}: primal {} vs {}", rd.primal, ro.primal);
            let distance = (on_device.parts.iter().zip(&other.parts).map(|(a, b)| lambda2 * (a - b).norm_squared()).sum::<f64>() + lambda0 * (&on_device.linear - &other.linear).norm_squared()).sqrt();
            let size = (other.parts.iter().map(|a| lambda2 * a.norm_squared()).sum::<f64>() + lambda0 * other.linear.norm_squared()).sqrt();
            let certified = (2.0 * rd.gap.max(0.0)).sqrt() + (2.0 * ro.gap.max(0.0)).sqrt() + 1e-9 * size;
            eprintln!("quantile vs {name}: weighted distance of (A_q, w) {distance:e} (certified {certified:e}, size {size:e})");
            assert!(distance <= certified, "vs {name}: (A_q, w) {distance:e} apart, certified {certified:e}");
            assert_eq!(on_device.z.len(), 3 * n);
        }
    }
}
