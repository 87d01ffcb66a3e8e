//! The empirical feature map of Eq. 8 and App. B.4.
//!
//! For centres `z_1..z_m` with kernel matrix `K = V^T V` (V is r x m, r the
//! numerical rank), the feature of a point `x` is
//!
//! `Phi(x) = (V V^T)^{-1} V v(x)`, `v(x) = (k(x, z_i))_i` (App. B.4, Remark 5),
//!
//! which is `V^{-T} v(x)` when `V` is the (invertible) Cholesky factor. Then
//! `Phi(z_i)^T Phi(z_j) = K_ij`, and a model `f(x) = Phi(x)^T A Phi(x)` with
//! `A` r x r PSD is the model of Eq. 7 with `B = T^T A T`, where `T` is the
//! r x m matrix with `Phi(x) = T v(x)`.
//!
//! **Rank safeguard.** `T = W^T` for the map `W` of
//! [`NystromMap::cholesky_or_eigen`] ([`crate::nystrom`]) at
//! [`RANK_TOLERANCE`]: `T = L^{-1}` from the Cholesky factor `K = L L^T`
//! (`V = L^T`) when every pivot `L_ii^2` exceeds `1e-10 max_i K_ii`,
//! otherwise (duplicate or near-duplicate centres) `V = S_r^{1/2} U_r^T`
//! from the eigendecomposition `K = U S U^T` keeping the eigenvalues above
//! `1e-10 max(S)` (Remark 5), so duplicate points are handled exactly: they
//! give identical features. The small matrix `K` (m x m) is always built on
//! the CPU in `f64` because the factorisation needs full precision; the large
//! `K(X, Z)` blocks go through the caller's [`Device`].

use nalgebra::{DMatrix, DVector};

use crate::device::Device;
use crate::kernel::Kernel;
use crate::linalg::{self, check_dim, check_matrix};
use crate::nystrom::NystromMap;
use crate::resident::DeviceMatrix;
use crate::MatrixProduct;
use crate::precision::Precision;

use super::error::check_positive;
use crate::error::Error;

/// Relative threshold of the rank safeguard (see the module docs).
pub const RANK_TOLERANCE: f64 = 1e-10;

/// Rows of `x` per block in [`EmpiricalFeatures::features`].
pub const FEATURE_BLOCK_ROWS: usize = 65_536;

pub use crate::nystrom::Factorisation;

/// The empirical feature map `Phi(x) = T v(x)` on a set of centres.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct EmpiricalFeatures {
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    centres: DMatrix<f64>,
    sigma: f64,
    kernel: Kernel,
    #[cfg_attr(feature = "serde", serde(with = "crate::io::matrix"))]
    map: DMatrix<f64>,
    factorisation: Factorisation,
}

impl EmpiricalFeatures {
    /// Builds the feature map on `centres` (m x d, one centre per row) for
    /// the Gaussian kernel of width `sigma`.
    ///
    /// Errors: invalid `sigma`, empty or non-finite centres,
    /// [`Error::NoUsableFeature`] if `K` is numerically zero.
    pub fn new(centres: &DMatrix<f64>, sigma: f64) -> Result<Self, Error> {
        check_positive("sigma", sigma)?;
        check_matrix("centres", centres)?;
        let kernel = Kernel::gaussian_with_width(sigma)?;
        // The kernel matrix and its factorisation: two m x m matrices.
        let m = centres.nrows();
        crate::memory::check_host::<f64>(crate::memory::entries(m, m, "empirical features")?.saturating_mul(2), "empirical features (m x m kernel and its factor)")?;
        let k = Device::Cpu.kernel_matrix_symmetric(&kernel, centres)?;
        let (map, factorisation) = factorise(&k)?;
        Ok(EmpiricalFeatures { centres: centres.clone(), sigma, kernel, map, factorisation })
    }

    /// The centres (m x d).
    pub fn centres(&self) -> &DMatrix<f64> {
        &self.centres
    }

    /// Kernel width `sigma`.
    pub fn sigma(&self) -> f64 {
        self.sigma
    }

    /// The Gaussian kernel.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// `T` (r x m) with `Phi(x) = T v(x)`.
    pub fn map(&self) -> &DMatrix<f64> {
        &self.map
    }

    /// Dimension r of the features (numerical rank of `K`).
    pub fn rank(&self) -> usize {
        self.map.nrows()
    }

    /// How `K` was factorised.
    pub fn factorisation(&self) -> Factorisation {
        self.factorisation
    }

    /// `K(X, Z)` (n x m) on `device`.
    pub fn kernel_to_centres(&self, device: &Device, x: &DMatrix<f64>) -> Result<DMatrix<f64>, Error> {
        check_matrix("x", x)?;
        check_dim("columns of x vs columns of the centres", self.centres.ncols(), x.ncols())?;
        device.kernel_matrix(&self.kernel, x, &self.centres)
    }

    /// Features of the rows of `x` as columns: `Phi(X) = T K(Z, X)` (r x n).
    ///
    /// Computed in blocks of [`FEATURE_BLOCK_ROWS`] rows of `x`, so the
    /// kernel matrix to the centres is never held whole (at n = 10^6 and
    /// m = 1000 it alone would be 8 GB next to the 8 GB of the features).
    pub fn features(&self, device: &Device, x: &DMatrix<f64>) -> Result<DMatrix<f64>, Error> {
        check_matrix("x", x)?;
        let n = x.nrows();
        if n <= FEATURE_BLOCK_ROWS {
            let kxz = self.kernel_to_centres(device, x)?;
            return self.apply_map(device, &kxz);
        }
        let mut out = DMatrix::zeros(self.rank(), n);
        let mut start = 0;
        while start < n {
            let rows = FEATURE_BLOCK_ROWS.min(n - start);
            let kxz = self.kernel_to_centres(device, &x.rows(start, rows).into_owned())?;
            out.columns_mut(start, rows).copy_from(&self.apply_map(device, &kxz)?);
            start += rows;
        }
        Ok(out)
    }

    /// Features of the centres themselves, `Phi(Z) = T K(Z, Z)` (r x m).
    ///
    /// With the Cholesky map this is `L^{-1} L L^T = L^T`, upper triangular;
    /// the strictly lower part of the computed product is rounding noise and
    /// is set to zero, so the dual's `P diag(alpha) P^T`
    /// ([`crate::linalg::weighted_gram`]) skips it: a third of the flops.
    pub fn centre_features(&self, device: &Device) -> Result<DMatrix<f64>, Error> {
        let mut phi = self.features(device, &self.centres)?;
        if self.factorisation == Factorisation::Cholesky {
            for j in 0..phi.ncols() {
                phi.column_mut(j).rows_range_mut(j + 1..).fill(0.0);
            }
        }
        Ok(phi)
    }

    /// `T K^T` for a block `K = K(X, Z)`: on the CPU with the Cholesky map
    /// (lower triangular) by [`super::products::lower_triangular_times_transpose`]
    /// (half the flops), otherwise one product on `device`.
    fn apply_map(&self, device: &Device, kxz: &DMatrix<f64>) -> Result<DMatrix<f64>, Error> {
        if matches!(device, Device::Cpu) && self.factorisation == Factorisation::Cholesky {
            check_dim("columns of K(X, Z) vs centres", self.map.ncols(), kxz.ncols())?;
            return Ok(super::products::lower_triangular_times_transpose(&self.map, kxz));
        }
        device.matmul(&self.map, kxz, MatrixProduct::ABt)
    }

    /// Features of resident samples X (n x d, on `device`) as resident rows,
    /// `Phi = P^T = K(X, Z) T^T` (n x r), in X's precision: the kernel matrix
    /// to the centres and the product with the map run on the device and
    /// stay there (the centres and the map, O(m d + r m) numbers, go up).
    pub fn resident_features(&self, device: &Device, x: &DeviceMatrix) -> Result<DeviceMatrix, Error> {
        check_dim("columns of x vs columns of the centres", self.centres.ncols(), x.ncols())?;
        let z = device.upload(&self.centres, x.precision())?;
        let t = device.upload(&self.map, x.precision())?;
        let kxz = device.resident_kernel_matrix(&self.kernel, x, &z)?;
        device.resident_matmul(&kxz, &t, MatrixProduct::ABt)
    }

    /// The check of a decoded map (a saved model's): the Gaussian kernel of
    /// width `sigma`, a stored scale ([`crate::io::MIN_STORED_SCALE`]); `m >= 1`
    /// centres of `d >= 1` coordinates; `T` of `1 <= r <= m` rows on the
    /// centres, `r` the recorded rank (`r = m` for Cholesky); every number
    /// finite and within [`crate::io::MAX_STORED_MAGNITUDE`].
    #[cfg(feature = "serde")]
    pub(crate) fn check_loaded(&self) -> Result<(), Error> {
        use crate::io::{ensure, ensure_bounded, ensure_gaussian_of_width};
        ensure_gaussian_of_width("feature map", &self.kernel, self.sigma)?;
        let (r, m) = self.map.shape();
        let d = self.centres.ncols();
        ensure(m >= 1 && d >= 1 && m == self.centres.nrows(), || format!("a feature map of {r} x {m} on centres of {:?}", self.centres.shape()))?;
        let rank_ok = match self.factorisation {
            Factorisation::Cholesky => r == m,
            Factorisation::TruncatedEigen { rank } => rank == r,
        };
        ensure((1..=m).contains(&r) && rank_ok, || format!("a feature map of rank {r} on {m} centres, recorded as {:?}", self.factorisation))?;
        ensure_bounded("centres", self.centres.iter())?;
        ensure_bounded("feature map", self.map.iter())
    }

    /// The features with a constant row appended, `Phi'(X) = (Phi(X); 1)`
    /// ((r + 1) x n): the feature map of the regression models, whose
    /// constant gives an intercept (linear parts) and a constant level far
    /// from the data (non-negative parts).
    pub fn features_with_constant(&self, device: &Device, x: &DMatrix<f64>) -> Result<DMatrix<f64>, Error> {
        let phi = self.features(device, x)?;
        let (r, n) = phi.shape();
        Ok(DMatrix::from_fn(r + 1, n, |a, j| if a < r { phi[(a, j)] } else { 1.0 }))
    }
}

/// `T = W^T` with `Phi(x) = T v(x)` and the kind of factorisation: the
/// [`NystromMap::cholesky_or_eigen`] map at [`RANK_TOLERANCE`] (module docs).
fn factorise(k: &DMatrix<f64>) -> Result<(DMatrix<f64>, Factorisation), Error> {
    let map = NystromMap::cholesky_or_eigen(k, RANK_TOLERANCE)?;
    if map.rank() == 0 {
        return Err(Error::NoUsableFeature);
    }
    Ok((map.matrix().transpose(), map.factorisation()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_reproduce_the_kernel_matrix() {
        let z = DMatrix::<f64>::from_fn(12, 2, |i, j| ((i * 2 + j) as f64 * 0.7).sin());
        let f = EmpiricalFeatures::new(&z, 0.8).unwrap();
        assert_eq!(f.factorisation(), Factorisation::Cholesky);
        let phi = f.features(&Device::Cpu, &z).unwrap();
        let k = Device::Cpu.kernel_matrix(f.kernel(), &z, &z).unwrap();
        assert!(linalg::relative_frobenius_error(&(&phi.transpose() * &phi), &k) < 1e-10);
        // The centres' own features: L^T, upper triangular, the same up to rounding.
        let own = f.centre_features(&Device::Cpu).unwrap();
        assert!((0..12).all(|j| (j + 1..12).all(|i| own[(i, j)] == 0.0)));
        assert!(linalg::relative_frobenius_error(&own, &phi) < 1e-12);
        assert!(linalg::relative_frobenius_error(&(&own.transpose() * &own), &k) < 1e-12);
    }

    #[test]
    fn duplicate_centres_use_the_truncated_factorisation() {
        let base = DMatrix::<f64>::from_fn(6, 1, |i, _| i as f64 * 0.5);
        let z = DMatrix::from_fn(12, 1, |i, _| base[(i % 6, 0)]);
        let f = EmpiricalFeatures::new(&z, 1.0).unwrap();
        assert_eq!(f.factorisation(), Factorisation::TruncatedEigen { rank: 6 });
        let phi = f.features(&Device::Cpu, &z).unwrap();
        let k = Device::Cpu.kernel_matrix(f.kernel(), &z, &z).unwrap();
        assert!(linalg::relative_frobenius_error(&(&phi.transpose() * &phi), &k) < 1e-8);
        assert!((phi.column(0) - phi.column(6)).norm() < 1e-10);
    }

    #[test]
    fn invalid_inputs_are_typed_errors() {
        let z = DMatrix::<f64>::zeros(3, 2);
        assert!(matches!(EmpiricalFeatures::new(&z, 0.0), Err(Error::InvalidParameter { .. })));
        assert!(matches!(EmpiricalFeatures::new(&DMatrix::zeros(0, 2), 1.0), Err(ref e) if e.is_invalid_input()));
        let mut bad = z.clone();
        bad[(1, 1)] = f64::NAN;
        assert!(matches!(EmpiricalFeatures::new(&bad, 1.0), Err(ref e) if e.is_invalid_input()));
    }
}

/// Training features where a fit runs them: resident on a GPU with `f64`
/// (X uploaded once, the features built and kept there), on the host
/// otherwise.
pub(super) enum TrainingFeatures {
    Host(DMatrix<f64>),
    Resident(DeviceMatrix),
}

impl TrainingFeatures {
    /// On a GPU with `f64`, `Phi(X)` built on the device from X uploaded
    /// once; otherwise `host()` (r x n, on the host).
    pub(super) fn new(features: &EmpiricalFeatures, device: &Device, x: &DMatrix<f64>, host: impl FnOnce() -> Result<DMatrix<f64>, Error>) -> Result<Self, Error> {
        if device.is_gpu() && device.supports(Precision::F64) {
            let xd = device.upload(x, Precision::F64)?;
            return Ok(TrainingFeatures::Resident(features.resident_features(device, &xd)?));
        }
        Ok(TrainingFeatures::Host(host()?))
    }

    /// The engine's view of them (`device` holds resident ones).
    pub(super) fn view<'a>(&'a self, device: &'a Device) -> Features<'a> {
        match self {
            TrainingFeatures::Host(p) => Features::Host(p),
            TrainingFeatures::Resident(phi) => Features::Resident { device, phi },
        }
    }
}

/// The training features `P` (r x n) of a [`DualProblem`](super::dual::DualProblem), where they live.
///
/// On a device they are held as `Phi = P^T` (n x r, samples as rows) in
/// `f64`, and the `O(n r^2)` products of an iteration run there:
/// `P diag(alpha) P^T` (Eq. 10's `M`; `alpha` goes up) and the model values
/// `p_i^T A p_i` (n values come down). With the polar route of
/// [`super::positive_part::PositivePartSolver::polar`] the engine keeps `M`
/// and `[M]_+` on the device as well ([`super::polar`]: matrix products
/// only), so an evaluation moves `O(n + r)` numbers, and where FISTA's
/// state is resident too (the density) the weights and model values stay
/// there and an iteration moves `O(r)` numbers; the eigendecomposition
/// routes bring `M` to the host (`O(n + r^2)`), where dense symmetric
/// eigensolvers run in `f64`.
#[derive(Clone, Copy)]
pub enum Features<'a> {
    /// `P` (r x n) on the host.
    Host(&'a DMatrix<f64>),
    /// `Phi = P^T` (n x r) on `device`, `f64`.
    Resident {
        /// The device holding `phi`.
        device: &'a Device,
        /// `P^T`, n x r, `Precision::F64`.
        phi: &'a DeviceMatrix,
    },
}

impl<'a> From<&'a DMatrix<f64>> for Features<'a> {
    fn from(p: &'a DMatrix<f64>) -> Self {
        Features::Host(p)
    }
}

impl Features<'_> {
    /// Feature dimension r.
    pub(super) fn dim(&self) -> usize {
        match self {
            Features::Host(p) => p.nrows(),
            Features::Resident { phi, .. } => phi.ncols(),
        }
    }
    /// Number of samples n.
    pub(super) fn samples(&self) -> usize {
        match self {
            Features::Host(p) => p.ncols(),
            Features::Resident { phi, .. } => phi.nrows(),
        }
    }
    pub(super) fn validate(&self) -> Result<(), Error> {
        match self {
            Features::Host(p) => Ok(linalg::check_matrix("features", *p)?),
            Features::Resident { device, phi } => {
                if phi.precision() != Precision::F64 || !device.supports(Precision::F64) {
                    return Err(Error::InvalidParameter { name: "features", reason: "device-resident features must be f64 (the duality-gap certificate needs the digits)".into() });
                }
                Ok(())
            }
        }
    }
    /// The device holding resident features (`None` on the host).
    pub(super) fn device(&self) -> Option<&Device> {
        match self {
            Features::Host(_) => None,
            Features::Resident { device, .. } => Some(device),
        }
    }
    /// The resident features Phi (n x r); [`Error::InvalidParameter`] for
    /// host features.
    pub(super) fn resident_phi(&self) -> Result<&DeviceMatrix, Error> {
        match self {
            Features::Host(_) => Err(host_features()),
            Features::Resident { phi, .. } => Ok(phi),
        }
    }
    /// `P diag(w) P^T` (r x r).
    pub(super) fn weighted_gram(&self, w: &DVector<f64>) -> Result<DMatrix<f64>, Error> {
        match self {
            Features::Host(p) => {
                linalg::check_dim("weights vs samples", p.ncols(), w.len())?;
                Ok(linalg::weighted_gram(p, w))
            }
            Features::Resident { device, .. } => {
                let m = device.to_host(&self.weighted_gram_resident(w)?)?;
                Ok((&m + m.transpose()) * 0.5)
            }
        }
    }
    /// `P diag(w) P^T` (r x r) left on the device of resident features (`w`
    /// goes up); [`Error::InvalidParameter`] for host features.
    pub(super) fn weighted_gram_resident(&self, w: &DVector<f64>) -> Result<DeviceMatrix, Error> {
        let Features::Resident { device, phi } = self else { return Err(host_features()) };
        linalg::check_dim("weights vs samples", phi.nrows(), w.len())?;
        let wd = device.upload_vector(w, Precision::F64)?;
        device.resident_weighted_gram(phi, &wd)
    }
    /// `p_i^T A p_i` (n x 1) for every sample i and a resident A (r x r),
    /// left on the device of resident features.
    pub(super) fn quadratic_forms_on_device(&self, a: &DeviceMatrix) -> Result<DeviceMatrix, Error> {
        let Features::Resident { device, phi } = self else { return Err(host_features()) };
        linalg::check_dim("rows of A vs feature dimension", phi.ncols(), a.nrows())?;
        linalg::check_dim("columns of A vs feature dimension", phi.ncols(), a.ncols())?;
        let g = device.resident_matmul(phi, a, MatrixProduct::AB)?;
        device.resident_row_sums(&device.resident_hadamard(&g, phi)?)
    }
    /// `p_i^T A p_i` for every sample i and a resident A (r x r) on the
    /// device of resident features: `Phi A` and its row dots with `Phi` stay
    /// there, n values come down; [`Error::InvalidParameter`] for host features.
    pub(super) fn quadratic_forms_resident(&self, a: &DeviceMatrix) -> Result<DVector<f64>, Error> {
        let Features::Resident { device, .. } = self else { return Err(host_features()) };
        device.to_host_vector(&self.quadratic_forms_on_device(a)?)
    }
    /// `||V^T p_i||^2` for every sample i, V r x k.
    pub(super) fn projected_norms(&self, v: &DMatrix<f64>) -> Result<DVector<f64>, Error> {
        match self {
            Features::Host(p) => {
                linalg::check_dim("rows of V vs feature dimension", p.nrows(), v.nrows())?;
                Ok(super::products::projected_norms(p, v))
            }
            Features::Resident { device, phi } => {
                let vd = device.upload(v, Precision::F64)?;
                let g = device.resident_matmul(phi, &vd, MatrixProduct::AB)?;
                Ok(device.to_host_vector(&device.resident_row_squared_norms(&g)?)?)
            }
        }
    }
    /// `p_i^T A p_i` for every sample i, A r x r (on a device: A goes up,
    /// `Phi A` and its row dots with `Phi` stay there, n values come down).
    pub(super) fn quadratic_forms(&self, a: &DMatrix<f64>) -> Result<DVector<f64>, Error> {
        linalg::check_dim("rows of A vs feature dimension", self.dim(), a.nrows())?;
        linalg::check_dim("columns of A vs feature dimension", self.dim(), a.ncols())?;
        match self {
            Features::Host(p) => Ok(super::products::quadratic_forms(p, a)),
            Features::Resident { device, .. } => self.quadratic_forms_resident(&device.upload(a, Precision::F64)?),
        }
    }
    /// `P s` (r) for `s` in `R^n`.
    pub(super) fn apply(&self, s: &DVector<f64>) -> Result<DVector<f64>, Error> {
        match self {
            Features::Host(p) => Ok(*p * s),
            Features::Resident { device, phi } => {
                let sd = device.upload_vector(s, Precision::F64)?;
                let out = device.to_host(&device.resident_matmul(phi, &sd, MatrixProduct::AtB)?)?;
                Ok(DVector::from_column_slice(out.as_slice()))
            }
        }
    }
    /// `P^T w` (n) for `w` in `R^r`.
    pub(super) fn apply_transpose(&self, w: &DVector<f64>) -> Result<DVector<f64>, Error> {
        match self {
            Features::Host(p) => Ok(p.tr_mul(w)),
            Features::Resident { device, phi } => {
                let wd = device.upload_vector(w, Precision::F64)?;
                let out = device.to_host(&device.resident_matmul(phi, &wd, MatrixProduct::AB)?)?;
                Ok(DVector::from_column_slice(out.as_slice()))
            }
        }
    }
    /// `||p_i||^2` for every sample and `P P^T` (r x r), for the step size.
    pub(super) fn norms_and_gram(&self) -> Result<(DVector<f64>, DMatrix<f64>), Error> {
        match self {
            Features::Host(p) => Ok((DVector::from_fn(p.ncols(), |j, _| p.column(j).norm_squared()), linalg::weighted_gram(p, &DVector::from_element(p.ncols(), 1.0)))),
            Features::Resident { device, phi } => {
                let norms = device.to_host_vector(&device.resident_row_squared_norms(phi)?)?;
                let g = device.to_host(&device.resident_matmul(phi, phi, MatrixProduct::AtB)?)?;
                Ok((norms, (&g + g.transpose()) * 0.5))
            }
        }
    }
}

fn host_features() -> Error {
    Error::InvalidParameter { name: "features", reason: "a resident operation needs features resident on a device".into() }
}
