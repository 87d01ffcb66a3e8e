//! Baselines: each kernel approximated on its own at a fixed rank (ICD,
//! Nystrom or CSI), factors stacked, ridge regression on the stacked features.

use nalgebra::{DMatrix, DVector};

use super::columns::{KernelColumns, Rows};
use super::csi::csi_decomposition;
use crate::input::AsMatrix;
use crate::error::Error;
use super::icd::{nystrom_in, FactorTransform, IcdParams};
use super::{centred_target, check_lambda, rows_per_kernel};
use crate::distributed::{agree, Communicator, SingleProcess};
use crate::precision::WorkingPrecision;
use crate::{Device, Kernel};

/// How each kernel is approximated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LowRankMethod {
    /// Incomplete Cholesky with greedy pivots (largest residual diagonal).
    Icd,
    /// Nystrom on pivots drawn by [`crate::nystrom::landmark_indices`] (kernel q uses `seed + q`).
    Nystrom {
        /// Random seed.
        seed: u64,
    },
    /// Cholesky with side information (Bach & Jordan 2005) with look-ahead.
    Csi {
        /// Look-ahead columns delta `>= 1` (values above n act as n).
        lookahead: usize,
        /// Weight in [0, 1] of the approximation-error gain against the prediction gain.
        kappa: f64,
    },
}

/// Parameters of the stacked low-rank ridge baselines (`icd`, `Nystrom`, `csi` in the paper).
#[derive(Debug, Clone, PartialEq)]
pub struct LowRankRidgeParams {
    kernels: Vec<Kernel>,
    method: LowRankMethod,
    rank_per_kernel: usize,
    lambda: f64,
    precision: WorkingPrecision,
}

impl LowRankRidgeParams {
    /// `method` at rank `rank_per_kernel` for every kernel; `lambda = 0`.
    pub fn new(method: LowRankMethod, rank_per_kernel: usize) -> Self {
        LowRankRidgeParams { kernels: Vec::new(), method, rank_per_kernel, lambda: 0.0, precision: WorkingPrecision::Auto }
    }

    /// The working precision of the kernel columns on a GPU
    /// ([`Device::working_precision`]): ICD as [`IcdParams::precision`],
    /// CSI's columns held in it, Nystrom's `K(:, A)` computed in it (`Auto`:
    /// the host-matrix [`Device::kernel_matrix`], `f32` inside). `F64` on
    /// an adapter without `SHADER_F64` is [`Error::Unsupported`] at fit; on
    /// the CPU the fit is `f64` whatever the setting.
    pub fn precision(mut self, precision: WorkingPrecision) -> Self {
        self.precision = precision;
        self
    }

    /// The working precision set ([`LowRankRidgeParams::precision`]).
    pub fn precision_setting(&self) -> WorkingPrecision {
        self.precision
    }

    /// The kernels `k_1 .. k_p` (at least one; checked at fit), each on
    /// the shared input or on its own input ([`LowRankRidgeParams::fit_inputs`]).
    pub fn kernels(mut self, kernels: &[Kernel]) -> Self {
        self.kernels = kernels.to_vec();
        self
    }

    /// The kernels.
    pub fn kernel_list(&self) -> &[Kernel] {
        &self.kernels
    }

    /// Ridge parameter `lambda`, finite and `>= 0`. With `lambda = 0` a
    /// system without any varying factor column (identical rows) is
    /// [`Error::Singular`].
    pub fn lambda(mut self, lambda: f64) -> Self {
        self.lambda = lambda;
        self
    }

    /// Checks the parameters (the data, and the rank against the number of
    /// samples, are checked by `fit`); `fit` calls it first.
    ///
    /// Errors, [`Error::InvalidParameter`] unless noted: no kernel, an
    /// invalid kernel (the error of [`Kernel::validate`]), a `lambda` not
    /// finite and `>= 0`, `rank_per_kernel == 0`, and for CSI a look-ahead
    /// of 0 or a `kappa` outside `[0, 1]`.
    pub fn validate(&self) -> Result<(), Error> {
        super::check_kernels(&self.kernels)?;
        check_lambda(self.lambda)?;
        if self.rank_per_kernel == 0 {
            return Err(Error::InvalidParameter { name: "rank_per_kernel", reason: "must be >= 1".into() });
        }
        if let LowRankMethod::Csi { lookahead, kappa } = self.method {
            if lookahead == 0 {
                return Err(Error::InvalidParameter { name: "lookahead", reason: "must be >= 1".into() });
            }
            if !(0.0..=1.0).contains(&kappa) {
                return Err(Error::InvalidParameter { name: "kappa", reason: format!("must be in [0, 1], got {kappa}") });
            }
        }
        Ok(())
    }

    /// Fits on `data`: every kernel on the shared input `data.x`, target
    /// `data.y` ([`LowRankRidgeParams::fit_inputs`] for one input per kernel).
    pub fn fit(&self, device: &Device, data: &crate::estimator::Supervised) -> Result<LowRankRidge, Error> {
        self.fit_inputs(device, &[&data.x], &data.y)
    }

    /// Approximates each kernel `K_q ~ G_q G_q^T`, stacks `F = [G_1 .. G_p]`,
    /// standardises its columns (centred, unit norm, like `h` in mklaren) and
    /// solves ridge regression `(F^T F + lambda I) beta = F^T (y - mean(y))`
    /// (`F^T F` on `device`).
    ///
    /// Sparse inputs (CSR, [`AsMatrix::as_csr`]) are never densified: ICD
    /// and CSI compute their kernel columns, and Nystrom its `K(:, A)`, from
    /// sparse inner products on the CPU on every device (the factors and the
    /// ridge system are dense, on `device`); the transforms keep the pivots'
    /// rows dense.
    ///
    /// Errors: invalid parameters (rank 0 or above n, kappa outside [0, 1],
    /// delta 0, lambda < 0), inputs that disagree on n, NaN/Inf, constant
    /// target, [`Error::Singular`] for `lambda = 0` on collinear factors.
    pub fn fit_inputs<X: AsMatrix<Elem = f64> + ?Sized>(&self, device: &Device, inputs: &[&X], y: &DVector<f64>) -> Result<LowRankRidge, Error> {
        self.validate()?;
        let kernels: &[Kernel] = &self.kernels;
        let converted = super::convert_inputs(inputs)?;
        let inputs: Vec<Rows<'_>> = converted.iter().map(|x| x.rows()).collect();
        let xs = rows_per_kernel(kernels, &inputs, None)?;
        let n = xs[0].nrows();
        if self.rank_per_kernel > n {
            return Err(Error::RankTooLarge { rank: self.rank_per_kernel, n });
        }
        let (yc, target_mean) = centred_target(y, n)?;
        let precision = device.working_precision(self.precision)?;
        let mut transforms = Vec::with_capacity(kernels.len());
        let mut factors = Vec::with_capacity(kernels.len());
        for (q, kernel) in kernels.iter().enumerate() {
            let (g, t) = match self.method {
                LowRankMethod::Icd => {
                    let f = IcdParams::new(self.rank_per_kernel).precision(self.precision).fit_rows(device, kernel, xs[q])?;
                    (f.factor().clone(), f.transform().clone())
                }
                LowRankMethod::Nystrom { seed } => {
                    let f = nystrom_in(device, kernel, xs[q], &crate::nystrom::landmark_indices(n, self.rank_per_kernel, seed.wrapping_add(q as u64))?, self.precision)?;
                    (f.factor().clone(), f.transform().clone())
                }
                LowRankMethod::Csi { lookahead, kappa } => {
                    // At most n look-ahead columns exist: clamp before the `+ 1`.
                    let lookahead = lookahead.min(n);
                    let cols = KernelColumns::on_rows(device, *kernel, xs[q], precision)?.with_cache(lookahead + 1);
                    let state = csi_decomposition(&cols, &yc, self.rank_per_kernel, lookahead, kappa)?;
                    (state.factor(), state.transform(*kernel, cols.rows())?)
                }
            };
            factors.push(g);
            transforms.push(t);
        }
        let mut stacked = stack(&factors, n);
        let (means, scales, coefficients) = standardised_ridge(device, &SingleProcess::new(), &mut stacked, &yc, n, self.lambda)?;
        let training_fit = &stacked * &coefficients;
        Ok(LowRankRidge { device: device.clone(), kernels: kernels.to_vec(), transforms, means, scales, coefficients, target_mean, training_fit: training_fit.add_scalar(target_mean) })
    }

    /// The method and the rank per kernel.
    pub(super) fn method_and_rank(&self) -> (LowRankMethod, usize) {
        (self.method, self.rank_per_kernel)
    }

    /// The ridge parameter.
    pub(super) fn lambda_value(&self) -> f64 {
        self.lambda
    }
}

/// The factors side by side, `F = [G_1 .. G_p]` (`rows` rows).
pub(super) fn stack(factors: &[DMatrix<f64>], rows: usize) -> DMatrix<f64> {
    let total: usize = factors.iter().map(|g| g.ncols()).sum();
    let mut stacked = DMatrix::<f64>::zeros(rows, total);
    let mut c0 = 0;
    for g in factors {
        stacked.columns_mut(c0, g.ncols()).copy_from(g);
        c0 += g.ncols();
    }
    stacked
}

/// Standardises the columns of `F` (centred, unit norm; columns that do not
/// vary get scale 0) in place and solves the ridge system
/// `(F^T F + lambda I) beta = F^T y_c`, returning the means, the scales and
/// `beta`. `stacked` and `yc` are this rank's rows of `n`; the column sums,
/// the norms and `F^T F`, `F^T y_c` are summed over `comm`'s ranks (the
/// identity on one process), so every rank solves the same system.
pub(super) fn standardised_ridge(device: &Device, comm: &dyn Communicator, stacked: &mut DMatrix<f64>, yc: &DVector<f64>, n: usize, lambda: f64) -> Result<(DVector<f64>, DVector<f64>, DVector<f64>), Error> {
    let total = stacked.ncols();
    let mut sums: Vec<f64> = (0..total).map(|j| stacked.column(j).sum()).collect();
    comm.sum(&mut sums)?;
    let means = DVector::from_fn(total, |j, _| sums[j] / n as f64);
    let mut squares: Vec<f64> = (0..total)
        .map(|j| {
            let mut col = stacked.column_mut(j);
            col.add_scalar_mut(-means[j]);
            col.norm_squared()
        })
        .collect();
    comm.sum(&mut squares)?;
    let mut scales = DVector::<f64>::zeros(total);
    for j in 0..total {
        let norm = squares[j].sqrt();
        scales[j] = if norm > 1e-10 { 1.0 / norm } else { 0.0 };
        stacked.column_mut(j).scale_mut(scales[j]);
    }
    if lambda == 0.0 && scales.iter().all(|&s| s == 0.0) {
        // Identical rows: every centred factor column vanishes, so F^T F = 0.
        return Err(Error::Singular("F^T F + lambda I with lambda = 0: no factor column varies over the samples (identical rows)"));
    }
    let local = if stacked.nrows() == 0 { Ok(DMatrix::zeros(total, total)) } else { device.gram(stacked) };
    let gram = agree(comm, local)?;
    let mut reduced: Vec<f64> = gram.iter().copied().chain(stacked.tr_mul(yc).iter().copied()).collect();
    comm.sum(&mut reduced)?;
    let mut system = DMatrix::from_column_slice(total, total, &reduced[..total * total]);
    let rhs = DVector::from_column_slice(&reduced[total * total..]);
    for j in 0..total {
        system[(j, j)] += lambda;
        if scales[j] == 0.0 {
            system[(j, j)] += 1.0;
        }
    }
    let coefficients = system.cholesky().ok_or(Error::Singular("F^T F + lambda I (collinear factors with lambda = 0)"))?.solve(&rhs);
    if coefficients.iter().any(|v| !v.is_finite()) {
        return Err(Error::Singular("F^T F + lambda I"));
    }
    Ok((means, scales, coefficients))
}

/// A fitted stacked low-rank ridge regression.
///
/// Its methods compute on the device it was fitted on ([`OnDevice`](crate::estimator::OnDevice): a loaded model is on the CPU).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LowRankRidge {
    kernels: Vec<Kernel>,
    transforms: Vec<FactorTransform>,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    means: DVector<f64>,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    scales: DVector<f64>,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    coefficients: DVector<f64>,
    target_mean: f64,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    training_fit: DVector<f64>,
    /// Not saved: a loaded model is on the CPU.
    #[cfg_attr(feature = "serde", serde(skip, default = "crate::Device::cpu"))]
    device: Device,
}

impl LowRankRidge {
    /// The fitted object from its parts (a sharded fit's, on every rank).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn from_parts(device: &Device, kernels: Vec<Kernel>, transforms: Vec<FactorTransform>, means: DVector<f64>, scales: DVector<f64>, coefficients: DVector<f64>, target_mean: f64, training_fit: DVector<f64>) -> Self {
        LowRankRidge { device: device.clone(), kernels, transforms, means, scales, coefficients, target_mean, training_fit }
    }

    /// The per-kernel out-of-sample transforms (Eq. 21).
    pub fn transforms(&self) -> &[FactorTransform] {
        &self.transforms
    }

    /// Ridge coefficients on the standardised stacked factors.
    pub fn coefficients(&self) -> &DVector<f64> {
        &self.coefficients
    }

    /// In-sample fit on the training samples.
    pub fn training_fit(&self) -> &DVector<f64> {
        &self.training_fit
    }

    /// Predictions for new rows `x` of the shared input (every kernel on
    /// `x`; [`LowRankRidge::predict_inputs`] for one input per kernel).
    pub fn predict(&self, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<DVector<f64>, Error> {
        self.predict_inputs(&[x])
    }

    /// Predictions for new samples (same input layout as in `fit`); kernel
    /// values against the pivots are computed on the model's device (for
    /// sparse rows from sparse inner products on the CPU,
    /// [`FactorTransform::apply`]).
    pub fn predict_inputs<X: AsMatrix<Elem = f64> + ?Sized>(&self, inputs: &[&X]) -> Result<DVector<f64>, Error> {
        let device = &self.device;
        let converted = super::convert_inputs(inputs)?;
        let inputs: Vec<Rows<'_>> = converted.iter().map(|x| x.rows()).collect();
        let xs = rows_per_kernel(&self.kernels, &inputs, None)?;
        let mut out = DVector::from_element(xs[0].nrows(), self.target_mean);
        let mut c0 = 0;
        for (q, tr) in self.transforms.iter().enumerate() {
            let g = tr.apply_rows(device, xs[q])?;
            for t in 0..g.ncols() {
                let j = c0 + t;
                let f = self.coefficients[j] * self.scales[j];
                for (o, v) in out.iter_mut().zip(g.column(t).iter()) {
                    *o += f * (v - self.means[j]);
                }
            }
            c0 += g.ncols();
        }
        Ok(crate::linalg::finite_vector("low-rank ridge predictions", out)?)
    }
}

#[cfg(feature = "serde")]
impl crate::io::SavedModel for LowRankRidge {
    const KIND: &'static str = "low-rank-ridge";

    /// A consistent transform per kernel, with that kernel; a mean, scale
    /// and coefficient per stacked factor column (the column count summed
    /// with checked arithmetic); every number finite and within
    /// [`crate::io::MAX_STORED_MAGNITUDE`], and each column's weight
    /// `coefficient * scale` too.
    fn check_loaded(&self) -> Result<(), Error> {
        use crate::io::{ensure, ensure_bounded};
        let p = self.kernels.len();
        ensure(p >= 1 && self.transforms.len() == p, || format!("{p} kernels, {} transforms", self.transforms.len()))?;
        let mut columns = 0usize;
        for (q, (t, k)) in self.transforms.iter().zip(&self.kernels).enumerate() {
            t.check_loaded(q)?;
            ensure(t.kernel() == *k, || format!("kernel {q}: the transform's kernel {:?} is not the model's {k:?}", t.kernel()))?;
            columns = columns.checked_add(t.matrix().ncols()).ok_or_else(|| crate::Error::Record("inconsistent saved model: more factor columns than memory can address".into()))?;
        }
        ensure(self.means.len() == columns && self.scales.len() == columns && self.coefficients.len() == columns, || format!("{columns} factor columns, {} means, {} scales, {} coefficients", self.means.len(), self.scales.len(), self.coefficients.len()))?;
        ensure_bounded("column means", self.means.iter())?;
        ensure_bounded("column scales", self.scales.iter())?;
        ensure_bounded("coefficients", self.coefficients.iter())?;
        ensure_bounded("column weights (coefficient x scale)", self.coefficients.iter().zip(self.scales.iter()).map(|(c, s)| c * s).collect::<Vec<_>>().iter())?;
        ensure_bounded("training fit", self.training_fit.iter())?;
        ensure_bounded("target mean", [self.target_mean].iter())
    }
}

crate::estimator::on_device!(LowRankRidge);
