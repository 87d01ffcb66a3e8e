//! Nystrom features: the landmark choice and the feature map shared by
//! eKSVD's [`FeatureMap::Nystrom`](crate::eksvd::FeatureMap::Nystrom), the
//! centres of the PSD models ([`EmpiricalFeatures`](crate::psd::EmpiricalFeatures))
//! and mklaren's Nystrom approximation ([`crate::mklaren::nystrom`]).
//!
//! **Landmarks.** [`landmark_indices`] draws `m` distinct rows out of `n`
//! uniformly without replacement from a `StdRng` seeded with `seed`, in
//! ascending order.
//!
//! **Feature map.** For landmarks `Z = (z_1..z_m)` with kernel matrix
//! `K_mm = K(Z, Z)`, the features of a point `x` are
//!
//! `phi(x) = W^T k(Z, x)`, `k(Z, x) = (k(z_i, x))_i`, `W` of size m x r,
//!
//! so the rows `Phi(X) = K(X, Z) W` ([`features`]) give
//! `Phi(X) Phi(X')^T = K(X, Z) W W^T K(Z, X')`, the Nystrom approximation
//! `K(X, Z) K_mm^+ K(Z, X')` when `W W^T = K_mm^+`. [`NystromMap`] builds `W`
//! in one of two ways:
//!
//! - eigendecomposition ([`NystromMap::eigen`]): `K_mm = U diag(s) U^T`
//!   with `s_1 >= s_2 >= ...`, `W = U_r diag(s_r)^{-1/2}` on the `r` largest
//!   eigenvalues above `tolerance * s_1` (at most a requested count), each
//!   column's sign chosen so that its entry of largest magnitude is positive.
//!   With `r` the numerical rank this is the pseudo-inverse: the
//!   construction of `V = S_r^{1/2} U_r^T` in Remark 5 (App. B.4) of the PSD
//!   models paper, with `Phi(x) = (V V^T)^{-1} V v(x)` its Eq. 8 features;
//!   with fewer it is the rank-`r` Nystrom approximation of eKSVD
//!   (Section 4), and on mklaren's pivots it equals incomplete Cholesky
//!   (`G G^T = K(:, A) K(A, A)^{-1} K(A, :)`, the paper's Proposition).
//! - Cholesky ([`NystromMap::cholesky_or_eigen`]): `K_mm = L L^T`,
//!   `W = L^{-T}`, `W W^T = K_mm^{-1}`, taken when every pivot `L_ii^2`
//!   exceeds `tolerance * max_i (K_mm)_ii`; otherwise (duplicate or
//!   near-duplicate landmarks) the eigendecomposition above on the full
//!   numerical rank, which gives duplicate landmarks identical features.
//!   The triangular `W` halves the products of the PSD models.
//!
//! `K_mm` is the caller's (built on a device, in `f32` on most GPUs, with a
//! tolerance to match); the factorisation runs on the CPU in `f64`.

use faer::{Par, Side};
use nalgebra::DMatrix;
use rand::{rngs::StdRng, SeedableRng};

use crate::error::{Error, Result};
use crate::linalg::{self, MatrixProduct};
use crate::resident::DeviceMatrix;
use crate::{Device, Kernel};

/// Draws `m` distinct indices out of `0..n` uniformly without replacement
/// (seeded `StdRng`), in ascending order.
///
/// Errors: [`Error::InvalidParameter`] unless `1 <= m <= n`.
pub fn landmark_indices(n: usize, m: usize, seed: u64) -> Result<Vec<usize>> {
    if m == 0 || m > n {
        return Err(Error::InvalidParameter { name: "nystrom centres", reason: format!("need 1 <= m <= n = {n}, got {m}") });
    }
    let mut idx = rand::seq::index::sample(&mut StdRng::seed_from_u64(seed), n, m).into_vec();
    idx.sort_unstable();
    Ok(idx)
}

/// How `K_mm` was factorised into `W` (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Factorisation {
    /// Full-rank Cholesky, `W = L^{-T}` upper triangular m x m.
    Cholesky,
    /// Truncated eigendecomposition, `W = U_r diag(s_r)^{-1/2}` (m x r).
    TruncatedEigen {
        /// Number of eigenpairs kept.
        rank: usize,
    },
}

/// The matrix `W` (m x r) of the Nystrom features `phi(x) = W^T k(Z, x)`.
#[derive(Debug, Clone)]
pub struct NystromMap {
    w: DMatrix<f64>,
    factorisation: Factorisation,
    numerical_rank: usize,
}

impl NystromMap {
    /// `W = U_r diag(s_r)^{-1/2}` on the largest eigenvalues `s_j > tolerance * max(s_1, MIN_POSITIVE)`,
    /// at most `max_rank` of them (all when `None`); see the module docs.
    /// `k_mm` must be symmetric and finite. The result has rank 0 when no
    /// eigenvalue passes (a zero or negative semidefinite `k_mm`).
    pub fn eigen(k_mm: &DMatrix<f64>, tolerance: f64, max_rank: Option<usize>) -> Result<Self> {
        let m = k_mm.nrows();
        let evd = linalg::symmetric_eigen(k_mm)?;
        let top = if m == 0 { 0.0 } else { evd.eigenvalues[m - 1] };
        let threshold = tolerance * top.abs().max(f64::MIN_POSITIVE);
        let numerical_rank = evd.eigenvalues.iter().filter(|&&s| s > threshold).count();
        let r = max_rank.map_or(numerical_rank, |k| k.min(numerical_rank));
        let mut w = DMatrix::zeros(m, r);
        for j in 0..r {
            let col = m - 1 - j;
            let u = evd.eigenvectors.column(col);
            let sign = linalg::sign_of_largest(u.as_slice());
            let s = evd.eigenvalues[col].sqrt();
            for i in 0..m {
                w[(i, j)] = sign * u[i] / s;
            }
        }
        Ok(NystromMap { w, factorisation: Factorisation::TruncatedEigen { rank: r }, numerical_rank })
    }

    /// `W = L^{-T}` from the Cholesky factor `K_mm = L L^T` when every pivot
    /// `L_ii^2 > tolerance * max_i (K_mm)_ii`, otherwise
    /// [`NystromMap::eigen`] with the same tolerance on the full numerical
    /// rank. Rank 0 when `max_i (K_mm)_ii <= 0` or no eigenvalue passes.
    pub fn cholesky_or_eigen(k_mm: &DMatrix<f64>, tolerance: f64) -> Result<Self> {
        let m = k_mm.nrows();
        let max_diag = (0..m).map(|i| k_mm[(i, i)]).fold(0.0f64, f64::max);
        if max_diag <= 0.0 {
            return Ok(NystromMap { w: DMatrix::zeros(m, 0), factorisation: Factorisation::TruncatedEigen { rank: 0 }, numerical_rank: 0 });
        }
        if let Ok(llt) = linalg::faer_ref(k_mm).llt(Side::Lower) {
            let l = llt.L();
            let min_pivot = (0..m).map(|i| l[(i, i)] * l[(i, i)]).fold(f64::INFINITY, f64::min);
            if min_pivot > tolerance * max_diag {
                let mut l_inv = DMatrix::<f64>::identity(m, m);
                faer::linalg::triangular_solve::solve_lower_triangular_in_place(l, linalg::faer_mut(&mut l_inv), Par::rayon(0));
                linalg::clear_upper_simd_state(true);
                return Ok(NystromMap { w: l_inv.transpose(), factorisation: Factorisation::Cholesky, numerical_rank: m });
            }
        }
        Self::eigen(k_mm, tolerance, None)
    }

    /// `W` (m x r).
    pub fn matrix(&self) -> &DMatrix<f64> {
        &self.w
    }

    /// `W` (m x r), by value.
    pub fn into_matrix(self) -> DMatrix<f64> {
        self.w
    }

    /// The number of features r.
    pub fn rank(&self) -> usize {
        self.w.ncols()
    }

    /// The numerical rank of `K_mm` under the tolerance (at least [`NystromMap::rank`]).
    pub fn numerical_rank(&self) -> usize {
        self.numerical_rank
    }

    /// How `K_mm` was factorised.
    pub fn factorisation(&self) -> Factorisation {
        self.factorisation
    }
}

/// The feature rows `Phi(X) = K(X, Z) W` (n x r) of the rows of `x` for
/// `landmarks` `Z` (m x d) and a map `w` (m x r) on `device`. On a GPU `X`,
/// `Z` and `W` go up once in the device's best precision, the kernel matrix
/// and the product run there ([`features_resident`]) and only `Phi` comes back.
///
/// Errors: non-finite or empty `x`, columns of `x` unlike those of `Z`, rows
/// of `w` unlike the landmarks, device errors.
pub fn features(device: &Device, kernel: &Kernel, landmarks: &DMatrix<f64>, w: &DMatrix<f64>, x: &DMatrix<f64>) -> Result<DMatrix<f64>> {
    linalg::check_matrix("x", x)?;
    linalg::check_dim("columns of x vs the landmarks", landmarks.ncols(), x.ncols())?;
    if device.is_gpu() {
        let xd = device.upload(x, device.best_precision())?;
        return device.to_host(&features_resident(device, kernel, landmarks, w, &xd)?);
    }
    let k = device.kernel_matrix(kernel, x, landmarks)?;
    device.matmul(&k, w, MatrixProduct::AB)
}

/// [`features`] of sparse rows `x` (CSR, n x d), on the CPU in `f64` on
/// every device: `K(X, Z)` from sparse inner products
/// ([`crate::sparse::kernel_matrix_sparse_cpu`], the landmarks as CSR) times
/// `W`; `X` is never densified.
///
/// Errors: non-finite or empty `x`, columns of `x` unlike those of `Z`, rows
/// of `w` unlike the landmarks, a non-finite result.
pub fn features_sparse(kernel: &Kernel, landmarks: &DMatrix<f64>, w: &DMatrix<f64>, x: &crate::sparse::CsrMatrix<f64>) -> Result<DMatrix<f64>> {
    crate::sparse::check_csr("x", x)?;
    linalg::check_dim("columns of x vs the landmarks", landmarks.ncols(), x.ncols())?;
    linalg::check_dim("rows of w vs the landmarks", landmarks.nrows(), w.nrows())?;
    let k = crate::sparse::kernel_matrix_sparse_cpu(kernel, x, &crate::sparse::CsrMatrix::from(landmarks))?;
    linalg::finite_result("Nystrom features", linalg::matmul(&k, w))
}

/// [`features`] for resident `X` (n x d), left on `device` in X's precision:
/// the landmarks and `W` go up, nothing comes back.
pub fn features_resident(device: &Device, kernel: &Kernel, landmarks: &DMatrix<f64>, w: &DMatrix<f64>, x: &DeviceMatrix) -> Result<DeviceMatrix> {
    linalg::check_dim("columns of x vs the landmarks", landmarks.ncols(), x.ncols())?;
    let precision = x.precision();
    let k = device.resident_kernel_matrix(kernel, x, &device.upload(landmarks, precision)?)?;
    device.resident_matmul(&k, &device.upload(w, precision)?, MatrixProduct::AB)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    /// `k(x, z) = exp(-gamma ||x - z||^2)` evaluated directly in `f64`.
    fn rbf(gamma: f64, a: &DMatrix<f64>, b: &DMatrix<f64>) -> DMatrix<f64> {
        DMatrix::from_fn(a.nrows(), b.nrows(), |i, j| (-gamma * (a.row(i) - b.row(j)).norm_squared()).exp())
    }

    fn random(rows: usize, cols: usize, seed: u64) -> DMatrix<f64> {
        let mut rng = StdRng::seed_from_u64(seed);
        DMatrix::from_fn(rows, cols, |_, _| rng.random_range(-1.0..1.0))
    }

    #[test]
    fn landmarks_are_sorted_distinct_and_replayable() {
        let a = landmark_indices(50, 12, 7).unwrap();
        assert_eq!(a, landmark_indices(50, 12, 7).unwrap());
        assert!(a.windows(2).all(|p| p[0] < p[1]) && a.len() == 12 && a[11] < 50);
        assert_eq!(landmark_indices(5, 5, 1).unwrap(), vec![0, 1, 2, 3, 4]);
        assert!(matches!(landmark_indices(5, 6, 1), Err(Error::InvalidParameter { .. })));
        assert!(matches!(landmark_indices(5, 0, 1), Err(Error::InvalidParameter { .. })));
    }

    /// Both factorisations against the direct `f64` Nystrom approximation
    /// `K(X, Z) K_mm^{-1} K(Z, X)` (`K_mm^{-1}` by an LU solve): relative
    /// Frobenius error below `1e-9` (`K_mm` of condition about 1e4 here).
    #[test]
    fn features_match_the_direct_nystrom_approximation() {
        let gamma = 0.7;
        let x = random(40, 3, 11);
        let z = x.select_rows(&landmark_indices(40, 10, 3).unwrap());
        let kernel = Kernel::rbf(gamma).unwrap();
        let k_mm = rbf(gamma, &z, &z);
        let k_nm = rbf(gamma, &x, &z);
        let direct = &k_nm * k_mm.clone().lu().solve(&k_nm.transpose()).unwrap();
        for map in [NystromMap::cholesky_or_eigen(&k_mm, 1e-10).unwrap(), NystromMap::eigen(&k_mm, 1e-12, None).unwrap()] {
            assert_eq!(map.rank(), 10);
            let phi = features(&Device::Cpu, &kernel, &z, map.matrix(), &x).unwrap();
            let err = linalg::relative_frobenius_error(&(&phi * phi.transpose()), &direct);
            assert!(err < 1e-9, "{:?}: {err}", map.factorisation());
        }
        assert_eq!(NystromMap::cholesky_or_eigen(&k_mm, 1e-10).unwrap().factorisation(), Factorisation::Cholesky);
    }

    /// The rank-r map against the direct truncated eigendecomposition of
    /// `K_mm` (nalgebra's, `f64`): `W W^T = U_r S_r^{-1} U_r^T` to `1e-9`
    /// relative, columns sign-normalised, and a duplicated landmark set gets
    /// the numerical rank of the distinct landmarks.
    #[test]
    fn truncated_map_matches_a_direct_eigendecomposition() {
        let z = random(12, 2, 5);
        let k_mm = rbf(0.5, &z, &z);
        let map = NystromMap::eigen(&k_mm, 1e-10, Some(4)).unwrap();
        assert_eq!((map.rank(), map.numerical_rank()), (4, 12));
        let evd = nalgebra::SymmetricEigen::new(k_mm.clone());
        let mut order: Vec<usize> = (0..12).collect();
        order.sort_by(|&a, &b| evd.eigenvalues[b].total_cmp(&evd.eigenvalues[a]));
        let mut direct = DMatrix::zeros(12, 12);
        for &j in &order[..4] {
            let u = evd.eigenvectors.column(j);
            direct += (&u * u.transpose()) / evd.eigenvalues[j];
        }
        let w = map.matrix();
        assert!(linalg::relative_frobenius_error(&(w * w.transpose()), &direct) < 1e-9);
        assert!((0..4).all(|j| linalg::sign_of_largest(w.column(j).as_slice()) == 1.0));
        let doubled = DMatrix::from_fn(24, 2, |i, j| z[(i % 12, j)]);
        let map = NystromMap::cholesky_or_eigen(&rbf(0.5, &doubled, &doubled), 1e-10).unwrap();
        assert_eq!(map.factorisation(), Factorisation::TruncatedEigen { rank: 12 });
        let k = rbf(0.5, &doubled, &doubled);
        let phi = &k * map.matrix();
        assert!(linalg::relative_frobenius_error(&(&phi * phi.transpose()), &k) < 1e-8);
        assert!((0..12).all(|i| phi.row(i) == phi.row(i + 12)));
        assert_eq!(NystromMap::cholesky_or_eigen(&DMatrix::zeros(3, 3), 1e-10).unwrap().rank(), 0);
    }
}
