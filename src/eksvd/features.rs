//! Explicit feature maps `phi_q : R^{d_q} -> R^{d_phi}`, fitted per source on
//! training data and applied to new data.
//!
//! With explicit features the cross-source kernels of eKSVD are
//! `K_pq = Phi_p Phi_q^T` (`N_p x N_q`, generally neither square nor
//! symmetric; `K_qp = K_pq^T`) and the covariances of Eq. 8 are
//! `C_qq = Phi_q^T Phi_q`. The paper builds the maps "by factorizing the
//! corresponding kernel matrices" (Section 4): that is [`FeatureMap::Nystrom`],
//! the map of [`crate::nystrom`] on the `dim` leading eigenpairs.

use nalgebra::{DMatrix, DVector};
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::{Distribution, Normal};

use crate::input::AsMatrix;
use crate::data::{check_shape, check_source_csr, check_source_matrix};
use crate::sparse::CsrMatrix;
use crate::error::Result;
use crate::error::Error;
use crate::gpu::MatrixProduct;
use crate::nystrom::NystromMap;
use crate::precision::WorkingPrecision;
use crate::resident::DeviceMatrix;
use crate::{Device, Kernel};

/// Relative eigenvalue threshold under which a Nystrom kernel matrix is
/// rank-deficient (CPU path, `f64` kernels).
const NYSTROM_RANK_TOLERANCE_F64: f64 = 1e-10;
/// The same threshold for kernel matrices built on the GPU in `f32`.
const NYSTROM_RANK_TOLERANCE_F32: f64 = 1e-5;

/// Rows per task of [`FittedFeatureMap::transform_projected_cpu`]: `Phi_b`
/// of 128 rows x 512 features is 512 KiB, inside a core's L2.
pub(crate) const PROJECTED_ROW_BLOCK: usize = 128;

/// How to build a source's features (unfitted).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum FeatureMap {
    /// The identity `phi(x) = x` (`d_phi = d_q`).
    Linear,
    /// Random Fourier features of the RBF kernel `exp(-gamma ||x - z||^2)`
    /// (Rahimi and Recht): `phi(x) = sqrt(2 / D) cos(Omega^T x + b)` with the
    /// columns of `Omega` drawn from `N(0, 2 gamma I)` and `b ~ U[0, 2 pi)`,
    /// so that `E[phi(x)^T phi(z)] = k(x, z)`.
    RandomFourier {
        /// RBF parameter `gamma > 0`.
        gamma: f64,
        /// Number of features `D`.
        dim: usize,
    },
    /// Nystrom features from factorising the kernel matrix of `landmarks`
    /// training rows (all rows when there are fewer):
    /// `K_mm = U diag(s) U^T`, `phi(x) = diag(s_k)^{-1/2} U_k^T k(L, x)` with
    /// the `dim` largest eigenpairs, so `Phi Phi^T` is the rank-`dim`
    /// Nystrom approximation of the kernel matrix.
    Nystrom {
        /// The source's kernel.
        kernel: Kernel,
        /// Number of features (at most `landmarks`).
        dim: usize,
        /// Number of landmark rows sampled from the training data.
        landmarks: usize,
    },
    /// A user-supplied linear map `phi(x) = W^T x`, `W` of size `d_q x d_phi`.
    Projection(#[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))] DMatrix<f64>),
}

impl FeatureMap {
    /// Random Fourier features of `exp(-gamma ||x - z||^2)`.
    pub fn random_fourier(gamma: f64, dim: usize) -> Result<Self> {
        let map = FeatureMap::RandomFourier { gamma, dim };
        map.validate()?;
        Ok(map)
    }

    /// Nystrom features of `kernel` with `dim` features from `landmarks` rows.
    pub fn nystrom(kernel: Kernel, dim: usize, landmarks: usize) -> Result<Self> {
        let map = FeatureMap::Nystrom { kernel, dim, landmarks };
        map.validate()?;
        Ok(map)
    }

    /// A user-supplied matrix `W` (`d_q x d_phi`): `phi(x) = W^T x`.
    pub fn projection(w: DMatrix<f64>) -> Result<Self> {
        let map = FeatureMap::Projection(w);
        map.validate()?;
        Ok(map)
    }

    /// Re-checks the parameters (for values built as enum literals).
    pub fn validate(&self) -> Result<()> {
        match self {
            FeatureMap::Linear => Ok(()),
            FeatureMap::RandomFourier { gamma, dim } => {
                Kernel::rbf(*gamma)?;
                positive_dim("dim", *dim)
            }
            FeatureMap::Nystrom { kernel, dim, landmarks } => {
                kernel.validate()?;
                positive_dim("dim", *dim)?;
                positive_dim("landmarks", *landmarks)?;
                if dim > landmarks {
                    return Err(Error::InvalidParameter { name: "dim", reason: format!("{dim} Nystrom features need at least as many landmarks, got {landmarks}") });
                }
                Ok(())
            }
            FeatureMap::Projection(w) => check_source_matrix("projection matrix", 0, w),
        }
    }

    /// Fits the map on the training rows `x` of source `source_index`
    /// (`seed` drives the random draws). Kernel matrices are built on `device`.
    ///
    /// Errors: invalid parameters, bad input, a projection matrix whose rows
    /// do not match `d_q`, [`Error::RankDeficientKernel`].
    ///
    /// Sparse rows ([`AsMatrix::as_csr`]) stay sparse: the Nystrom kernel
    /// matrix of the landmarks comes from [`crate::sparse`] on the CPU (the
    /// landmarks are then kept dense in the fitted map, `L x d_q`); the other
    /// maps read only the input dimension.
    pub fn fit(&self, device: &Device, x: &(impl AsMatrix<Elem = f64> + ?Sized), source_index: usize, seed: u64) -> Result<FittedFeatureMap> {
        if let Some(csr) = x.as_csr() {
            return self.fit_sparse(device, csr, source_index, seed);
        }
        let x = x.as_matrix()?;
        let x = &*x;
        self.validate()?;
        check_source_matrix("data", source_index, x)?;
        let points = self.landmark_rows(x.nrows(), seed)?.map(|rows| x.select_rows(&rows));
        self.fit_on_landmarks(device, x.ncols(), points, source_index, seed)
    }

    /// [`FeatureMap::fit`] on sparse rows: the same landmarks (or draws) as
    /// the dense fit of the same rows, the Nystrom kernel matrix of the
    /// landmarks from sparse inner products (CPU, `f64`).
    fn fit_sparse(&self, device: &Device, x: &CsrMatrix<f64>, source_index: usize, seed: u64) -> Result<FittedFeatureMap> {
        self.validate()?;
        check_source_csr("data", source_index, x)?;
        let (FeatureMap::Nystrom { kernel, dim, .. }, Some(rows)) = (self, self.landmark_rows(x.nrows(), seed)?) else {
            return self.fit_on_landmarks(device, x.ncols(), None, source_index, seed);
        };
        let points = crate::sparse::select_csr_rows(x, &rows);
        if *dim > points.nrows() {
            return Err(Error::RankDeficientKernel { source_index, rank: points.nrows(), requested: *dim });
        }
        let k_mm = crate::sparse::kernel_matrix_sparse_cpu(kernel, &points, &points)?;
        let scaled_eigenvectors = nystrom_scaled_eigenvectors(&k_mm, NYSTROM_RANK_TOLERANCE_F64, *dim, source_index)?;
        let landmarks = crate::sparse::densify(&points)?;
        Ok(FittedFeatureMap { device: device.clone(), input_dim: x.ncols(), kind: Fitted::Nystrom { kernel: *kernel, landmarks, scaled_eigenvectors }, precision: WorkingPrecision::Auto })
    }

    /// The training rows (of `n`) the fit reads: the Nystrom landmarks,
    /// drawn from `seed`; `None` for the maps that need only the input
    /// dimension.
    pub(crate) fn landmark_rows(&self, n: usize, seed: u64) -> Result<Option<Vec<usize>>> {
        match self {
            FeatureMap::Nystrom { landmarks, .. } => Ok(Some(crate::nystrom::landmark_indices(n, (*landmarks).min(n), seed)?)),
            _ => Ok(None),
        }
    }

    /// The fit from the input dimension `d` and the rows named by
    /// [`FeatureMap::landmark_rows`] (`points`, in that order).
    pub(crate) fn fit_on_landmarks(&self, device: &Device, d: usize, points: Option<DMatrix<f64>>, source_index: usize, seed: u64) -> Result<FittedFeatureMap> {
        let mut rng = StdRng::seed_from_u64(seed);
        let kind = match self {
            FeatureMap::Linear => Fitted::Linear,
            FeatureMap::RandomFourier { gamma, dim } => {
                let normal = Normal::new(0.0, (2.0 * gamma).sqrt())
                    .map_err(|e| Error::InvalidParameter { name: "gamma", reason: e.to_string() })?;
                let frequencies = DMatrix::from_fn(d, *dim, |_, _| normal.sample(&mut rng));
                let phases = DVector::from_fn(*dim, |_, _| rng.random_range(0.0..std::f64::consts::TAU));
                Fitted::RandomFourier { frequencies, phases }
            }
            FeatureMap::Nystrom { kernel, dim, .. } => {
                let points = points.ok_or(Error::NotAvailable("the Nystrom landmark rows"))?;
                check_shape("columns of the Nystrom landmarks vs the input dimension", d, points.ncols())?;
                if *dim > points.nrows() {
                    return Err(Error::RankDeficientKernel { source_index, rank: points.nrows(), requested: *dim });
                }
                let k_mm = device.kernel_matrix_symmetric(kernel, &points)?;
                let tolerance = if device.is_gpu() { NYSTROM_RANK_TOLERANCE_F32 } else { NYSTROM_RANK_TOLERANCE_F64 };
                let scaled = nystrom_scaled_eigenvectors(&k_mm, tolerance, *dim, source_index)?;
                Fitted::Nystrom { kernel: *kernel, landmarks: points, scaled_eigenvectors: scaled }
            }
            FeatureMap::Projection(w) => {
                check_shape(format!("rows of the projection matrix of source {source_index} vs columns of its data"), d, w.nrows())?;
                Fitted::Projection(w.clone())
            }
        };
        Ok(FittedFeatureMap { device: device.clone(), input_dim: d, kind, precision: WorkingPrecision::Auto })
    }
}

/// `diag(s_k)^{-1/2} U_k` (`L x dim`) of the landmarks' kernel matrix
/// `K_mm = U diag(s) U^T`, or [`Error::RankDeficientKernel`] when fewer than
/// `dim` eigenvalues are above `tolerance` (relative).
fn nystrom_scaled_eigenvectors(k_mm: &DMatrix<f64>, tolerance: f64, dim: usize, source_index: usize) -> Result<DMatrix<f64>> {
    let map = NystromMap::eigen(k_mm, tolerance, Some(dim))?;
    if map.rank() < dim {
        return Err(Error::RankDeficientKernel { source_index, rank: map.numerical_rank(), requested: dim });
    }
    Ok(map.into_matrix())
}

/// Random Fourier features from `Z = X Omega` in place:
/// `sqrt(2 / D) cos(Z + b)`, columns split between the threads (the same
/// operations on each entry as one thread would do).
fn cosine_features(z: &mut DMatrix<f64>, phases: &DVector<f64>) {
    use rayon::prelude::*;
    let scale = (2.0 / phases.len() as f64).sqrt();
    let rows = z.nrows().max(1);
    z.as_mut_slice().par_chunks_mut(rows).enumerate().for_each(|(j, col)| {
        col.iter_mut().for_each(|v| *v += phases[j]);
        crate::linalg::cos_in_place(col);
        col.iter_mut().for_each(|v| *v *= scale);
    });
}

fn positive_dim(name: &'static str, v: usize) -> Result<()> {
    if v == 0 {
        return Err(Error::InvalidParameter { name, reason: "must be >= 1".into() });
    }
    Ok(())
}

#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
enum Fitted {
    Linear,
    RandomFourier {
        #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
        frequencies: DMatrix<f64>,
        #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
        phases: DVector<f64>,
    },
    Nystrom {
        kernel: Kernel,
        #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
        landmarks: DMatrix<f64>,
        #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
        scaled_eigenvectors: DMatrix<f64>,
    },
    Projection(#[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))] DMatrix<f64>),
}

/// A feature map fitted on one source's training data.
///
/// Its methods compute on the device it was fitted on ([`OnDevice`](crate::estimator::OnDevice): a loaded model is on the CPU).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct FittedFeatureMap {
    input_dim: usize,
    kind: Fitted,
    /// Not saved: a loaded model is on the CPU.
    #[cfg_attr(feature = "serde", serde(skip, default = "crate::Device::cpu"))]
    device: Device,
    /// The working precision of the fit that made the map (not saved: a
    /// loaded map is on the CPU, which computes in `f64`).
    #[cfg_attr(feature = "serde", serde(skip))]
    precision: WorkingPrecision,
}

impl FittedFeatureMap {
    /// The map computing its device work in `precision` (the setting of
    /// the fit, [`crate::eksvd::EksvdParams::precision`]).
    pub(crate) fn in_precision(mut self, precision: WorkingPrecision) -> Self {
        self.precision = precision;
        self
    }

    /// Input dimension `d_q`.
    pub fn input_dim(&self) -> usize {
        self.input_dim
    }

    /// The check of a loaded map (of source `source`): an input dimension
    /// and at least one output feature; shapes that agree with `input_dim`
    /// (`Omega` `d_q x D` with `D` phases; `L >= 1` landmarks of `d_q`
    /// columns and `L x D` eigenvectors; `W` `d_q x D`); a valid kernel;
    /// every number finite and within [`crate::io::MAX_STORED_MAGNITUDE`].
    #[cfg(feature = "serde")]
    pub(crate) fn check_loaded(&self, source: usize) -> Result<()> {
        use crate::io::{ensure, ensure_bounded, ensure_kernel};
        let d = self.input_dim;
        ensure(d >= 1 && self.output_dim() >= 1, || format!("source {source}: a feature map from {d} inputs to {} features", self.output_dim()))?;
        match &self.kind {
            Fitted::Linear => Ok(()),
            Fitted::RandomFourier { frequencies, phases } => {
                ensure(frequencies.shape() == (d, phases.len()), || format!("source {source}: random Fourier frequencies of {:?}, need {d} x {}", frequencies.shape(), phases.len()))?;
                ensure_bounded(&format!("source {source}: random Fourier frequencies"), frequencies.iter())?;
                ensure_bounded(&format!("source {source}: random Fourier phases"), phases.iter())
            }
            Fitted::Nystrom { kernel, landmarks, scaled_eigenvectors } => {
                ensure_kernel(&format!("source {source}: Nystrom map"), kernel)?;
                ensure(landmarks.nrows() >= 1 && landmarks.ncols() == d, || format!("source {source}: Nystrom landmarks of {:?}, need at least one row of {d} columns", landmarks.shape()))?;
                ensure(scaled_eigenvectors.nrows() == landmarks.nrows(), || format!("source {source}: Nystrom eigenvectors of {} rows for {} landmarks", scaled_eigenvectors.nrows(), landmarks.nrows()))?;
                ensure_bounded(&format!("source {source}: Nystrom landmarks"), landmarks.iter())?;
                ensure_bounded(&format!("source {source}: Nystrom eigenvectors"), scaled_eigenvectors.iter())
            }
            Fitted::Projection(w) => {
                ensure(w.nrows() == d, || format!("source {source}: a projection of {} rows for {d} inputs", w.nrows()))?;
                ensure_bounded(&format!("source {source}: projection"), w.iter())
            }
        }
    }

    /// Output dimension `d_phi`.
    pub fn output_dim(&self) -> usize {
        match &self.kind {
            Fitted::Linear => self.input_dim,
            Fitted::RandomFourier { phases, .. } => phases.len(),
            Fitted::Nystrom { scaled_eigenvectors, .. } => scaled_eigenvectors.ncols(),
            Fitted::Projection(w) => w.ncols(),
        }
    }

    /// `Phi = phi(X)` (`n x d_phi`) for rows `x` (`n x d_q`); products and
    /// kernel matrices run on the map's device (on a GPU through
    /// [`FittedFeatureMap::transform_resident`], in the working precision of
    /// the fit that made the map, [`Device::working_precision`]: by default
    /// `f64` where the adapter has it; X goes up once, `Phi` comes back).
    ///
    /// Sparse rows ([`AsMatrix::as_csr`]) are mapped without densifying
    /// them, on the map's device (see [`FittedFeatureMap::transform_sparse`]).
    pub fn transform(&self, x: &(impl AsMatrix<Elem = f64> + ?Sized)) -> Result<DMatrix<f64>> {
        if let Some(csr) = x.as_csr() {
            return self.transform_sparse(csr);
        }
        let x = x.as_matrix()?;
        let x = &*x;
        self.transform_on(&self.device, x)
    }

    /// `Phi = phi(X)` (`n x d_phi`) for sparse rows `x` (`n x d_q`, CSR):
    /// random Fourier features and projections from the sparse-times-dense
    /// product `X Omega` / `X W` (O(nnz(X) d_phi)); Nystrom features
    /// `k(X, L) diag(s_k)^{-1/2} U_k` with `k(X, L)` from sparse inner
    /// products against the landmarks (O(nnz(X) L)); the linear map's
    /// features are the rows, densified.
    ///
    /// On a GPU these run on the device in the working precision of the fit
    /// ([`Device::working_precision`]): X goes up as its CSR arrays
    /// ([`crate::gpu::GpuContext::upload_csr`]), the map's parameters go up,
    /// `X Omega` / `X W` or `k(X, L)` and the rest of the map are computed
    /// there, and `Phi` comes back. A matrix the device cannot hold as CSR
    /// ([`Error::TooLargeForGpu`]: a row of more than
    /// [`crate::gpu::SPARSE_MAX_ROW_NNZ`] non-zeros, arrays beyond a buffer
    /// binding) takes the CPU path, which computes in `f64`
    /// ([`crate::sparse::csr_times_dense`],
    /// [`crate::sparse::kernel_matrix_sparse_cpu`] against the landmarks
    /// converted to CSR): equal to the dense transform of the dense copy up
    /// to the summation order (about `1e-15` relative).
    ///
    /// Errors: empty or non-finite `x`, a column count other than
    /// [`FittedFeatureMap::input_dim`], `OutOfMemory` for the output.
    pub fn transform_sparse(&self, x: &CsrMatrix<f64>) -> Result<DMatrix<f64>> {
        crate::sparse::check_csr("x", x)?;
        check_shape("columns of new data vs the fitted feature map's input dimension", self.input_dim, x.ncols())?;
        if let (Some(ctx), false) = (self.device.context(), matches!(self.kind, Fitted::Linear)) {
            match self.transform_sparse_on_gpu(ctx, x) {
                Err(Error::TooLargeForGpu { .. }) => {}
                done => return done,
            }
        }
        match &self.kind {
            Fitted::Linear => crate::sparse::densify(x),
            Fitted::RandomFourier { frequencies, phases } => {
                let mut z = crate::sparse::csr_times_dense(x, frequencies)?;
                cosine_features(&mut z, phases);
                Ok(z)
            }
            Fitted::Nystrom { kernel, landmarks, scaled_eigenvectors } => crate::nystrom::features_sparse(kernel, landmarks, scaled_eigenvectors, x),
            Fitted::Projection(w) => crate::sparse::csr_times_dense(x, w),
        }
    }

    /// [`FittedFeatureMap::transform_sparse`] on the GPU of `ctx` (the map's
    /// device; not the linear map).
    fn transform_sparse_on_gpu(&self, ctx: &crate::gpu::GpuContext, x: &CsrMatrix<f64>) -> Result<DMatrix<f64>> {
        let device = &self.device;
        let precision = device.working_precision(self.precision)?;
        let xs = ctx.upload_csr(x, precision)?;
        let up = |m: &DMatrix<f64>| device.upload(m, precision).and_then(|d| d.gpu().cloned());
        let phi = match &self.kind {
            Fitted::Linear => return crate::sparse::densify(x),
            Fitted::RandomFourier { frequencies, phases } => {
                let z = DeviceMatrix::from_gpu(ctx.sparse_times_dense(&xs, &up(frequencies)?)?);
                let row = DMatrix::from_row_slice(1, phases.len(), phases.as_slice());
                device.resident_cosine_features(&z, &device.upload(&row, precision)?, (2.0 / phases.len() as f64).sqrt())?
            }
            Fitted::Nystrom { kernel, landmarks, scaled_eigenvectors } => {
                let k = DeviceMatrix::from_gpu(ctx.sparse_kernel_matrix(kernel, &xs, &up(landmarks)?)?);
                device.resident_matmul(&k, &device.upload(scaled_eigenvectors, precision)?, MatrixProduct::AB)?
            }
            Fitted::Projection(w) => DeviceMatrix::from_gpu(ctx.sparse_times_dense(&xs, &up(w)?)?),
        };
        crate::linalg::finite_result("features of sparse rows", device.to_host(&phi)?)
    }

    /// [`FittedFeatureMap::transform`] on `device`.
    fn transform_on(&self, device: &Device, x: &DMatrix<f64>) -> Result<DMatrix<f64>> {
        crate::linalg::check_matrix("x", x)?;
        check_shape("columns of new data vs the fitted feature map's input dimension", self.input_dim, x.ncols())?;
        if device.is_gpu() && !matches!(self.kind, Fitted::Linear) {
            let xd = device.upload(x, device.working_precision(self.precision)?)?;
            return device.to_host(&self.transform_resident_on(device, &xd)?);
        }
        Ok(match &self.kind {
            Fitted::Linear => x.clone(),
            Fitted::RandomFourier { frequencies, phases } => {
                let mut z = device.matmul(x, frequencies, MatrixProduct::AB)?;
                cosine_features(&mut z, phases);
                z
            }
            Fitted::Nystrom { kernel, landmarks, scaled_eigenvectors } => crate::nystrom::features(device, kernel, landmarks, scaled_eigenvectors, x)?,
            Fitted::Projection(w) => device.matmul(x, w, MatrixProduct::AB)?,
        })
    }

    /// `phi(X) W` (`n x k`) for rows `x` (`n x d_q`) and `W` (`d_phi x k`) on
    /// the CPU. For random Fourier features the rows go in blocks of at most
    /// [`PROJECTED_ROW_BLOCK`], one block per task: each block's `X_b Omega`,
    /// cosines and `Phi_b W` run on one thread with `Phi_b` in its cache, so
    /// the whole call is one fork and join (a few hundred rows spent most of
    /// their time waking threads for six small parallel products). Other maps
    /// take [`FittedFeatureMap::transform`] and one product. Shapes are the
    /// caller's to check.
    pub(crate) fn transform_projected_cpu(&self, x: &DMatrix<f64>, w: &DMatrix<f64>) -> Result<DMatrix<f64>> {
        use crate::linalg::{faer_mut, faer_ref, Real};
        use rayon::prelude::*;
        let Fitted::RandomFourier { frequencies, phases } = &self.kind else {
            let phi = self.transform_on(&Device::Cpu, x)?;
            return crate::linalg::finite_result("projection scores", crate::linalg::matmul(&phi, w));
        };
        let (n, d_phi, k) = (x.nrows(), phases.len(), w.ncols());
        let scale = (2.0 / d_phi as f64).sqrt();
        let blocks = n.div_ceil(PROJECTED_ROW_BLOCK).max(1);
        let rows_per_block = n.div_ceil(blocks).max(1);
        let parts: Vec<DMatrix<f64>> = (0..blocks)
            .into_par_iter()
            .map(|b| {
                let r0 = (b * rows_per_block).min(n);
                let rows = rows_per_block.min(n - r0);
                let mut z = DMatrix::<f64>::zeros(rows, d_phi);
                f64::faer_matmul_seq(faer_mut(&mut z), faer_ref(x).subrows(r0, rows), faer_ref(frequencies));
                for (j, col) in z.as_mut_slice().chunks_mut(rows.max(1)).enumerate() {
                    col.iter_mut().for_each(|v| *v += phases[j]);
                    crate::linalg::cos_in_place(col);
                    col.iter_mut().for_each(|v| *v *= scale);
                }
                let mut out = DMatrix::<f64>::zeros(rows, k);
                f64::faer_matmul_seq(faer_mut(&mut out), faer_ref(&z), faer_ref(w));
                out
            })
            .collect();
        crate::linalg::clear_upper_simd_state(true);
        let mut out = DMatrix::zeros(n, k);
        for (b, part) in parts.iter().enumerate() {
            out.rows_mut((b * rows_per_block).min(n), part.nrows()).copy_from(part);
        }
        crate::linalg::finite_result("projection scores", out)
    }

    /// `Phi = phi(X)` for resident X (`n x d_q`), left on the device in X's
    /// precision: the map's parameters (frequencies and phases, landmarks
    /// and eigenvectors, or the projection) go up, nothing comes back. X is
    /// held by the map's device.
    pub fn transform_resident(&self, x: &DeviceMatrix) -> Result<DeviceMatrix> {
        self.transform_resident_on(&self.device, x)
    }

    /// [`FittedFeatureMap::transform_resident`] on `device`.
    fn transform_resident_on(&self, device: &Device, x: &DeviceMatrix) -> Result<DeviceMatrix> {
        check_shape("columns of new data vs the fitted feature map's input dimension", self.input_dim, x.ncols())?;
        let precision = x.precision();
        Ok(match &self.kind {
            Fitted::Linear => x.clone(),
            Fitted::RandomFourier { frequencies, phases } => {
                let z = device.resident_matmul(x, &device.upload(frequencies, precision)?, MatrixProduct::AB)?;
                let row = DMatrix::from_row_slice(1, phases.len(), phases.as_slice());
                device.resident_cosine_features(&z, &device.upload(&row, precision)?, (2.0 / phases.len() as f64).sqrt())?
            }
            Fitted::Nystrom { kernel, landmarks, scaled_eigenvectors } => crate::nystrom::features_resident(device, kernel, landmarks, scaled_eigenvectors, x)?,
            Fitted::Projection(w) => device.resident_matmul(x, &device.upload(w, precision)?, MatrixProduct::AB)?,
        })
    }
}

crate::estimator::on_device!(FittedFeatureMap);
