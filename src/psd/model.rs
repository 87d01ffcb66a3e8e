//! A fitted PSD model `f(x) = sum_ij B_ij k(x, z_i) k(x, z_j)`, `B >= 0` (Eq. 7).
//!
//! `B` is stored factored, `B = C^T C` with `C` q x m (q = rank of `B`), so
//! `f(x) = ||C v(x)||^2 >= 0` by construction, with `v(x) = (k(x, z_i))_i`.
//! Evaluation at many points builds `K(X, Z)` and `K(X, Z) C^T` on the
//! caller's [`Device`]. The gradient (P4) is
//! `grad f(x) = 2 sum_ij B_ij k(x, z_i) grad k(x, z_j) = -(2/sigma^2) sum_j w_j k(x, z_j) (x - z_j)`,
//! `w = B v(x)`. Integrals against a [`BaseMeasure`] are `tr(B M)` with the
//! closed-form `M` of [`super::integrals`] (Proposition 4).

use nalgebra::{DMatrix, DVector};

use crate::device::Device;
use crate::precision::Precision;
use crate::resident::DeviceMatrix;
use crate::kernel::Kernel;
use crate::linalg::{self, check_dim, check_matrix};
use crate::MatrixProduct;

use super::error::check_positive;
use crate::error::Error;
use super::features::EmpiricalFeatures;
use super::integrals::{product_integrals, product_integrals_over, BaseMeasure};

/// Eigenvalues of `A` below this fraction of the largest are dropped when factoring `B`.
const FACTOR_TOLERANCE: f64 = 1e-14;

/// The PSD model `f(x) = v(x)^T B v(x)` with `B = C^T C`.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PsdModel {
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    centres: DMatrix<f64>,
    sigma: f64,
    kernel: Kernel,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    factor: DMatrix<f64>,
}

impl PsdModel {
    /// The check of a loaded model (`what` names it in the error): `sigma` a
    /// stored scale ([`crate::io::MIN_STORED_SCALE`]) and the kernel the
    /// Gaussian kernel of that width (evaluation uses the kernel, integrals
    /// `sigma`); `m >= 1` centres of `d >= 1` coordinates; a factor of
    /// `q >= 1` rows and a column per centre; every number finite and within
    /// [`crate::io::MAX_STORED_MAGNITUDE`]; and the bound
    /// [`PsdModel::value_bound`] of `f` as well.
    #[cfg(feature = "serde")]
    pub(crate) fn check_loaded(&self, what: &str) -> Result<(), Error> {
        use crate::io::{ensure, ensure_bounded, ensure_gaussian_of_width};
        ensure_gaussian_of_width(what, &self.kernel, self.sigma)?;
        let (m, d) = self.centres.shape();
        ensure(m >= 1 && d >= 1, || format!("{what}: centres of {m} x {d} (need at least one centre and one coordinate)"))?;
        ensure(self.factor.nrows() >= 1 && self.factor.ncols() == m, || format!("{what}: a factor of {:?} for {m} centres (need a column per centre)", self.factor.shape()))?;
        ensure_bounded(&format!("{what}: centres"), self.centres.iter())?;
        ensure_bounded(&format!("{what}: factor"), self.factor.iter())?;
        let bound = self.value_bound();
        ensure(bound <= crate::io::MAX_STORED_MAGNITUDE, || format!("{what}: the model's values reach {bound:e} (m ||C||_F^2 of the factor C), beyond the magnitude a model may store"))
    }

    /// `m ||C||_F^2`, a bound of `f` everywhere: `f(x) = ||C v(x)||^2` with
    /// the Gaussian kernel values `0 <= v_i(x) <= 1`, so
    /// `||C v||^2 <= ||C||_F^2 ||v||^2 <= m ||C||_F^2` (`+inf` if it overflows).
    #[cfg(feature = "serde")]
    pub(crate) fn value_bound(&self) -> f64 {
        self.centres.nrows() as f64 * self.factor.iter().map(|v| v * v).sum::<f64>()
    }

    /// The model with coefficient matrix `B = C^T C` given by its factor `C` (q x m).
    pub fn from_factor(centres: DMatrix<f64>, sigma: f64, factor: DMatrix<f64>) -> Result<Self, Error> {
        check_matrix("centres", &centres)?;
        check_positive("sigma", sigma)?;
        linalg::check_finite("factor", &factor)?;
        check_dim("columns of the factor vs number of centres", centres.nrows(), factor.ncols())?;
        Ok(PsdModel { centres, sigma, kernel: Kernel::gaussian_with_width(sigma)?, factor })
    }

    /// The model with `B = T^T A T` for the feature map `T` of `features` and a
    /// symmetric PSD `A` (r x r) in feature coordinates (Eq. 8: `f(x) = Phi(x)^T A Phi(x)`).
    /// Negative eigenvalues of `A` (round-off) are clipped to zero.
    pub fn from_feature_operator(features: &EmpiricalFeatures, a: &DMatrix<f64>) -> Result<Self, Error> {
        check_dim("size of A vs feature dimension", features.rank(), a.nrows())?;
        let eig = linalg::symmetric_eigen(a)?;
        let top = eig.eigenvalues.iter().fold(0.0f64, |m, &v| m.max(v));
        let kept: Vec<usize> = (0..a.nrows()).filter(|&i| eig.eigenvalues[i] > FACTOR_TOLERANCE * top && top > 0.0).collect();
        // C = diag(sqrt(lambda)) U^T T.
        let ut = DMatrix::from_fn(kept.len(), a.nrows(), |p, j| eig.eigenvalues[kept[p]].sqrt() * eig.eigenvectors[(j, kept[p])]);
        let factor = if kept.is_empty() { DMatrix::zeros(1, features.centres().nrows()) } else { linalg::matmul(&ut, features.map()) };
        PsdModel::from_factor(features.centres().clone(), features.sigma(), factor)
    }

    /// Centres `z_1..z_m` (rows).
    pub fn centres(&self) -> &DMatrix<f64> {
        &self.centres
    }

    /// Kernel width.
    pub fn sigma(&self) -> f64 {
        self.sigma
    }

    /// Input dimension d.
    pub fn dimension(&self) -> usize {
        self.centres.ncols()
    }

    /// The factor `C` (q x m), `B = C^T C`.
    pub fn factor(&self) -> &DMatrix<f64> {
        &self.factor
    }

    /// The coefficient matrix `B = C^T C` (m x m, PSD).
    pub fn coefficients(&self) -> DMatrix<f64> {
        linalg::matmul_tn(&self.factor, &self.factor)
    }

    /// The same model multiplied by `s >= 0`.
    pub fn scaled(&self, s: f64) -> Result<Self, Error> {
        super::error::check_nonnegative("scale", s)?;
        PsdModel::from_factor(self.centres.clone(), self.sigma, &self.factor * s.sqrt())
    }

    fn check_points(&self, x: &DMatrix<f64>) -> Result<(), Error> {
        check_matrix("x", x)?;
        check_dim("columns of x vs model dimension", self.dimension(), x.ncols())?;
        Ok(())
    }

    /// `f(x)` at the rows of `x` (n x d): `||C v(x)||^2`, kernel matrix and
    /// product on `device`. On a GPU with `f64` the points go up once and the
    /// kernel matrix, the product and the row norms stay on the device (n
    /// values come back; [`PsdModel::evaluate_resident`]).
    pub fn evaluate(&self, device: &Device, x: &DMatrix<f64>) -> Result<DVector<f64>, Error> {
        self.check_points(x)?;
        if device.is_gpu() && device.supports(Precision::F64) {
            let xd = device.upload(x, Precision::F64)?;
            return device.to_host_vector(&self.evaluate_resident(device, &xd)?);
        }
        let kxz = device.kernel_matrix(&self.kernel, x, &self.centres)?;
        let g = device.matmul(&kxz, &self.factor, MatrixProduct::ABt)?;
        Ok(DVector::from_fn(x.nrows(), |i, _| g.row(i).norm_squared()))
    }

    /// `f(x)` at resident points (n x d) as a resident n x 1 matrix, in the
    /// points' precision: `K(X, Z)`, `K C^T` and the squared row norms on the device.
    pub fn evaluate_resident(&self, device: &Device, x: &DeviceMatrix) -> Result<DeviceMatrix, Error> {
        check_dim("columns of x vs model dimension", self.dimension(), x.ncols())?;
        let z = device.upload(&self.centres, x.precision())?;
        let c = device.upload(&self.factor, x.precision())?;
        let kxz = device.resident_kernel_matrix(&self.kernel, x, &z)?;
        let g = device.resident_matmul(&kxz, &c, MatrixProduct::ABt)?;
        device.resident_row_squared_norms(&g)
    }

    /// `grad f(x)` at the rows of `x`, one gradient per row (n x d).
    ///
    /// On a GPU with `f64` the products and the Hadamard product run on the
    /// device: X goes up once, `sum_j g_ij` (n) and `G Z` (n x d) come back.
    pub fn gradient(&self, device: &Device, x: &DMatrix<f64>) -> Result<DMatrix<f64>, Error> {
        self.check_points(x)?;
        if device.is_gpu() && device.supports(Precision::F64) {
            let p = Precision::F64;
            let xd = device.upload(x, p)?;
            let kxz = device.resident_kernel_matrix(&self.kernel, &xd, &device.upload(&self.centres, p)?)?;
            let w = device.resident_matmul(&kxz, &device.upload(&self.coefficients(), p)?, MatrixProduct::AB)?;
            let g = device.resident_hadamard(&w, &kxz)?;
            let sums = device.to_host_vector(&device.resident_row_sums(&g)?)?;
            let gz = device.to_host(&device.resident_matmul(&g, &device.upload(&self.centres, p)?, MatrixProduct::AB)?)?;
            let scale = -2.0 / (self.sigma * self.sigma);
            return Ok(DMatrix::from_fn(x.nrows(), x.ncols(), |i, k| scale * (sums[i] * x[(i, k)] - gz[(i, k)])));
        }
        let kxz = device.kernel_matrix(&self.kernel, x, &self.centres)?;
        let b = self.coefficients();
        let w = device.matmul(&kxz, &b, MatrixProduct::AB)?;
        let g = w.component_mul(&kxz);
        let gz = device.matmul(&g, &self.centres, MatrixProduct::AB)?;
        let scale = -2.0 / (self.sigma * self.sigma);
        Ok(linalg::finite_result("gradient", DMatrix::from_fn(x.nrows(), x.ncols(), |i, k| scale * (g.row(i).sum() * x[(i, k)] - gz[(i, k)])))?)
    }

    /// `int f(x) dnu(x) = tr(B M)` in closed form (Proposition 4).
    pub fn integral(&self, base: &BaseMeasure) -> Result<f64, Error> {
        let m = product_integrals(&self.centres, self.sigma, base)?;
        Ok(trace_bm(&self.factor, &m))
    }

    /// `int_box f(x) dnu(x)` over the box `prod_k [lower_k, upper_k]` (infinite ends allowed).
    pub fn box_integral(&self, base: &BaseMeasure, lower: &[f64], upper: &[f64]) -> Result<f64, Error> {
        let d = self.dimension();
        base.check_dimension(d)?;
        check_dim("length of lower", d, lower.len())?;
        check_dim("length of upper", d, upper.len())?;
        for k in 0..d {
            if lower[k].is_nan() || upper[k].is_nan() || lower[k] > upper[k] {
                return Err(Error::InvalidParameter { name: "box", reason: format!("coordinate {k}: need lower <= upper, got [{}, {}]", lower[k], upper[k]) });
            }
        }
        let coords: Vec<usize> = (0..d).collect();
        let m = product_integrals_over(&self.centres, self.sigma, base, &coords, lower, upper)?;
        Ok(trace_bm(&self.factor, &m))
    }

    /// The model on the coordinates `keep` obtained by integrating the others
    /// out against `base`: `B' = B o M_rest` (Hadamard product, PSD by the Schur
    /// product theorem), centres restricted to `keep`. Costs `O(q r m^2)` for
    /// `B = C^T C` with q rows and `M_rest` of rank r.
    pub fn marginal(&self, base: &BaseMeasure, keep: &[usize]) -> Result<PsdModel, Error> {
        let d = self.dimension();
        base.check_dimension(d)?;
        if keep.is_empty() || keep.iter().any(|&k| k >= d) || (1..keep.len()).any(|i| keep[i] <= keep[i - 1]) {
            return Err(Error::InvalidParameter { name: "keep", reason: format!("need increasing coordinates in 0..{d}, got {keep:?}") });
        }
        let rest: Vec<usize> = (0..d).filter(|k| !keep.contains(k)).collect();
        let m_rest = product_integrals_over(&self.centres, self.sigma, base, &rest, &vec![f64::NEG_INFINITY; d], &vec![f64::INFINITY; d])?;
        // B o M = sum_{q,l} (c_q o r_l)(c_q o r_l)^T for B = C^T C, M = R^T R:
        // an exact factor, compressed by a thin QR (no eigendecomposition of
        // B o M, whose entries cancel when K is ill-conditioned).
        let r = psd_factor(&m_rest)?;
        let (q, l, m) = (self.factor.nrows(), r.nrows(), self.centres.nrows());
        let stacked = DMatrix::from_fn(q * l, m, |row, j| self.factor[(row / l, j)] * r[(row % l, j)]);
        let factor = if stacked.nrows() > m { stacked.qr().r() } else { stacked };
        let centres = DMatrix::from_fn(self.centres.nrows(), keep.len(), |i, a| self.centres[(i, keep[a])]);
        PsdModel::from_factor(centres, self.sigma, factor)
    }
}

/// `tr(B M) = sum((C M) o C)` for `B = C^T C`.
fn trace_bm(c: &DMatrix<f64>, m: &DMatrix<f64>) -> f64 {
    linalg::matmul(c, m).component_mul(c).sum()
}

/// A factor `C` with `C^T C = B` for a symmetric PSD `B` (negative round-off clipped).
pub fn psd_factor(b: &DMatrix<f64>) -> Result<DMatrix<f64>, Error> {
    let eig = linalg::symmetric_eigen(b)?;
    let n = b.nrows();
    let top = eig.eigenvalues.iter().fold(0.0f64, |m, &v| m.max(v));
    let kept: Vec<usize> = (0..n).filter(|&i| top > 0.0 && eig.eigenvalues[i] > FACTOR_TOLERANCE * top).collect();
    if kept.is_empty() {
        return Ok(DMatrix::zeros(1, n));
    }
    Ok(DMatrix::from_fn(kept.len(), n, |p, j| eig.eigenvalues[kept[p]].sqrt() * eig.eigenvectors[(j, kept[p])]))
}
