//! Kernel functions and their CPU evaluation.
//!
//! Every kernel here is a function of one pairwise statistic `s(x, z)`:
//! the squared distance `||x - z||^2` for the translation-invariant kernels
//! and the inner product `<x, z>` for the others:
//!
//! | kernel | statistic `s` | `k(x, z)` |
//! |---|---|---|
//! | Gaussian/RBF | `\|\|x - z\|\|^2` | `exp(-gamma s)` |
//! | Laplacian/Abel | `\|\|x - z\|\|^2` | `exp(-gamma sqrt(s))` |
//! | linear | `<x, z>` | `s` |
//! | polynomial | `<x, z>` | `(gamma s + coef0)^degree` |
//! | sigmoid | `<x, z>` | `tanh(gamma s + coef0)` |
//!
//! The GPU shaders (`shaders/product_tile.wgsl`) uses the same split: it
//! accumulates `s` over the feature dimension and applies the function once.
//!
//! Data matrices hold one sample per **row** (n x d).

use nalgebra::{DMatrix, DVector};
use rayon::prelude::*;

use crate::error::{ComputeError, Result};
use crate::linalg::{self, check_dim, check_matrix, Real};

/// A kernel function with validated parameters. Build it with the
/// constructors ([`Kernel::rbf`], ...), which reject invalid parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kernel {
    /// Gaussian/RBF `exp(-gamma ||x - z||^2)`, `gamma > 0`.
    Rbf {
        /// Inverse squared length scale.
        gamma: f64,
    },
    /// Laplacian/Abel `exp(-gamma ||x - z||)`, `gamma > 0`.
    Laplacian {
        /// Inverse length scale.
        gamma: f64,
    },
    /// Linear `<x, z>`.
    Linear,
    /// Polynomial `(gamma <x, z> + coef0)^degree`, `gamma > 0`, `degree >= 1`.
    Polynomial {
        /// Scale of the inner product.
        gamma: f64,
        /// Offset.
        coef0: f64,
        /// Integer degree.
        degree: u32,
    },
    /// Sigmoid `tanh(gamma <x, z> + coef0)`, `gamma > 0` (not PSD in general).
    Sigmoid {
        /// Scale of the inner product.
        gamma: f64,
        /// Offset.
        coef0: f64,
    },
}

fn check_positive(name: &'static str, v: f64) -> Result<()> {
    if !(v.is_finite() && v > 0.0) {
        return Err(ComputeError::InvalidParameter { name, reason: format!("must be finite and > 0, got {v}") });
    }
    Ok(())
}

impl Kernel {
    /// Gaussian kernel `exp(-gamma ||x - z||^2)`.
    pub fn rbf(gamma: f64) -> Result<Self> {
        check_positive("gamma", gamma)?;
        Ok(Kernel::Rbf { gamma })
    }

    /// Gaussian kernel of width `sigma`: `exp(-||x - z||^2 / (2 sigma^2))`,
    /// i.e. `gamma = 1 / (2 sigma^2)`.
    ///
    /// Valid range: `sigma` finite with `gamma` a finite positive `f64`,
    /// about `5.3e-155 <= sigma <= 9.4e153` (smaller widths overflow `gamma`
    /// to infinity, larger ones underflow it to 0); outside it the error
    /// names `sigma` and the range.
    pub fn gaussian_with_width(sigma: f64) -> Result<Self> {
        check_positive("sigma", sigma)?;
        let gamma = 1.0 / (2.0 * sigma * sigma);
        if !(gamma.is_finite() && gamma > 0.0) {
            return Err(ComputeError::InvalidParameter {
                name: "sigma",
                reason: format!("{sigma:e} is outside the range where gamma = 1/(2 sigma^2) is a finite positive f64 (about 5.3e-155 ..= 9.4e153)"),
            });
        }
        Kernel::rbf(gamma)
    }

    /// Laplacian kernel `exp(-gamma ||x - z||)`.
    pub fn laplacian(gamma: f64) -> Result<Self> {
        check_positive("gamma", gamma)?;
        Ok(Kernel::Laplacian { gamma })
    }

    /// Linear kernel `<x, z>`.
    pub fn linear() -> Self {
        Kernel::Linear
    }

    /// The largest polynomial degree accepted (`i32::MAX`): the power is
    /// taken with `powi`, whose exponent is an `i32`, so larger degrees would
    /// wrap to negative exponents.
    pub const MAX_POLYNOMIAL_DEGREE: u32 = i32::MAX as u32;

    /// Polynomial kernel `(gamma <x, z> + coef0)^degree`, `gamma > 0` finite,
    /// `coef0` finite, `degree` in `1..=`[`Kernel::MAX_POLYNOMIAL_DEGREE`].
    pub fn polynomial(gamma: f64, coef0: f64, degree: u32) -> Result<Self> {
        check_positive("gamma", gamma)?;
        if !coef0.is_finite() {
            return Err(ComputeError::InvalidParameter { name: "coef0", reason: format!("must be finite, got {coef0}") });
        }
        if degree == 0 || degree > Self::MAX_POLYNOMIAL_DEGREE {
            return Err(ComputeError::InvalidParameter { name: "degree", reason: format!("must be in 1..={}, got {degree}", Self::MAX_POLYNOMIAL_DEGREE) });
        }
        Ok(Kernel::Polynomial { gamma, coef0, degree })
    }

    /// Sigmoid kernel `tanh(gamma <x, z> + coef0)`.
    pub fn sigmoid(gamma: f64, coef0: f64) -> Result<Self> {
        check_positive("gamma", gamma)?;
        if !coef0.is_finite() {
            return Err(ComputeError::InvalidParameter { name: "coef0", reason: format!("must be finite, got {coef0}") });
        }
        Ok(Kernel::Sigmoid { gamma, coef0 })
    }

    /// Re-checks the parameters (for values built as enum literals).
    pub fn validate(&self) -> Result<()> {
        match *self {
            Kernel::Rbf { gamma } => Kernel::rbf(gamma).map(|_| ()),
            Kernel::Laplacian { gamma } => Kernel::laplacian(gamma).map(|_| ()),
            Kernel::Linear => Ok(()),
            Kernel::Polynomial { gamma, coef0, degree } => Kernel::polynomial(gamma, coef0, degree).map(|_| ()),
            Kernel::Sigmoid { gamma, coef0 } => Kernel::sigmoid(gamma, coef0).map(|_| ()),
        }
    }

    /// True when `k` depends on `||x - z||^2` (RBF, Laplacian), false when on `<x, z>`.
    pub fn is_distance_based(&self) -> bool {
        matches!(self, Kernel::Rbf { .. } | Kernel::Laplacian { .. })
    }

    /// `k` as a function of its statistic `s` (squared distance or inner product).
    #[inline]
    pub fn apply_to_statistic<T: Real>(&self, s: T) -> T {
        match *self {
            Kernel::Rbf { gamma } => (-T::from_f64_lossy(gamma) * s).exp(),
            Kernel::Laplacian { gamma } => (-T::from_f64_lossy(gamma) * s.max(T::zero()).sqrt()).exp(),
            Kernel::Linear => s,
            Kernel::Polynomial { gamma, coef0, degree } => {
                (T::from_f64_lossy(gamma) * s + T::from_f64_lossy(coef0)).powi(degree as i32)
            }
            Kernel::Sigmoid { gamma, coef0 } => (T::from_f64_lossy(gamma) * s + T::from_f64_lossy(coef0)).tanh(),
        }
    }

    /// `k(x, z)` for two points given as slices of equal length.
    pub fn eval<T: Real>(&self, x: &[T], z: &[T]) -> T {
        debug_assert_eq!(x.len(), z.len());
        let s = if self.is_distance_based() {
            x.iter().zip(z).fold(T::zero(), |acc, (&a, &b)| acc + (a - b) * (a - b))
        } else {
            x.iter().zip(z).fold(T::zero(), |acc, (&a, &b)| acc + a * b)
        };
        self.apply_to_statistic(s)
    }

    /// `k(x, x)` for each row of `x`, i.e. the diagonal of `K(X, X)`.
    /// Cost O(n d); computed on the CPU on every device.
    pub fn diagonal<T: Real>(&self, x: &DMatrix<T>) -> Result<DVector<T>> {
        self.validate()?;
        check_matrix("x", x)?;
        let diagonal = match self {
            Kernel::Rbf { .. } | Kernel::Laplacian { .. } => DVector::from_element(x.nrows(), T::one()),
            _ => {
                let sq = row_squared_norms(x);
                DVector::from_iterator(x.nrows(), sq.iter().map(|&s| self.apply_to_statistic(s)))
            }
        };
        linalg::finite_vector("kernel diagonal", diagonal)
    }
}

/// `||x_i||^2` for each row `x_i` of `x`.
pub fn row_squared_norms<T: Real>(x: &DMatrix<T>) -> Vec<T> {
    let mut out = vec![T::zero(); x.nrows()];
    for j in 0..x.ncols() {
        let col = x.column(j);
        for (o, &v) in out.iter_mut().zip(col.iter()) {
            *o += v * v;
        }
    }
    out
}

pub(crate) fn check_pair<T: Real>(kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>) -> Result<()> {
    kernel.validate()?;
    check_matrix("x", x)?;
    check_matrix("z", z)?;
    check_dim("feature dimension of z vs x", x.ncols(), z.ncols())
}

/// CPU cross kernel matrix `K(X, Z)_{ij} = k(x_i, z_j)` (n x m), multi-threaded.
///
/// The statistic comes from one matrix product: `<x_i, z_j> = (X Z^T)_{ij}`
/// and `||x_i - z_j||^2 = ||x_i||^2 + ||z_j||^2 - 2 <x_i, z_j>` (clamped at 0
/// against rounding; near-duplicate pairs, where that form cancels, are
/// recomputed directly), then `k` is applied element-wise in parallel.
pub fn kernel_matrix_cpu<T: Real>(kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>) -> Result<DMatrix<T>> {
    check_pair(kernel, x, z)?;
    linalg::finite_result("kernel matrix", kernel_matrix_unchecked(kernel, x, z))
}

pub(crate) fn kernel_matrix_unchecked<T: Real>(kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>) -> DMatrix<T> {
    let n = x.nrows();
    let mut k = linalg::matmul_nt(x, z);
    if kernel.is_distance_based() {
        let xn = row_squared_norms(x);
        let zn = row_squared_norms(z);
        let two = T::one() + T::one();
        // Below this fraction of ||x||^2 + ||z||^2 the expanded form has lost
        // most of its digits to cancellation; such (near-duplicate) pairs are
        // recomputed as a direct sum of squared differences.
        let cancellation = T::from_f64_lossy(1e-4);
        k.as_mut_slice().par_chunks_mut(n).enumerate().for_each(|(j, col)| {
            let znj = zn[j];
            for (i, (v, &xni)) in col.iter_mut().zip(xn.iter()).enumerate() {
                let mut s = (xni + znj - two * *v).max(T::zero());
                if s <= cancellation * (xni + znj) {
                    s = (0..x.ncols()).fold(T::zero(), |acc, c| {
                        let diff = x[(i, c)] - z[(j, c)];
                        acc + diff * diff
                    });
                }
                *v = s;
            }
            // k = exp(-gamma s) or exp(-gamma sqrt(s)): the exponent, then one
            // vectorised exp pass over the column.
            match *kernel {
                Kernel::Rbf { gamma } => {
                    let g = T::from_f64_lossy(gamma);
                    col.iter_mut().for_each(|v| *v = -g * *v);
                }
                Kernel::Laplacian { gamma } => {
                    let g = T::from_f64_lossy(gamma);
                    col.iter_mut().for_each(|v| *v = -g * v.sqrt());
                }
                _ => unreachable!("distance-based kernels are RBF and Laplacian"),
            }
            T::exp_nonpositive_in_place(col);
        });
    } else if !matches!(kernel, Kernel::Linear) {
        k.as_mut_slice().par_chunks_mut(4096).for_each(|chunk| {
            for v in chunk {
                *v = kernel.apply_to_statistic(*v);
            }
        });
    }
    k
}

/// CPU kernel column `K(X, z)_i = k(x_i, z)` for one point `z` (length d).
pub fn kernel_column_cpu<T: Real>(kernel: &Kernel, x: &DMatrix<T>, z: &[T]) -> Result<DVector<T>> {
    kernel.validate()?;
    check_matrix("x", x)?;
    check_dim("length of the point vs columns of x", x.ncols(), z.len())?;
    if let Some(pos) = z.iter().position(|v| !v.is_finite()) {
        return Err(ComputeError::NonFinite { what: "point", row: pos, col: 0 });
    }
    let n = x.nrows();
    let d = x.ncols();
    let mut s = vec![T::zero(); n];
    let distance = kernel.is_distance_based();
    for (j, &zj) in z.iter().enumerate().take(d) {
        let col = x.column(j);
        if distance {
            for (acc, &v) in s.iter_mut().zip(col.iter()) {
                *acc += (v - zj) * (v - zj);
            }
        } else {
            for (acc, &v) in s.iter_mut().zip(col.iter()) {
                *acc += v * zj;
            }
        }
    }
    linalg::finite_vector("kernel column", DVector::from_iterator(n, s.into_iter().map(|v| kernel.apply_to_statistic(v))))
}

/// Largest number of kernel entries the CPU matvec holds at once (32 MiB of f64).
const CPU_MATVEC_TILE_ENTRIES: usize = 1 << 22;

/// CPU kernel matrix times a thin matrix, `K(X, Z) V` (n x c), without storing
/// `K(X, Z)`: it is built in row-by-column tiles of at most 4M entries and
/// each tile is multiplied into the output at once.
pub fn kernel_matvec_cpu<T: Real>(kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>, v: &DMatrix<T>) -> Result<DMatrix<T>> {
    check_pair(kernel, x, z)?;
    check_matrix("v", v)?;
    check_dim("rows of v vs rows of z", z.nrows(), v.nrows())?;
    let (n, m) = (x.nrows(), z.nrows());
    let block = ((CPU_MATVEC_TILE_ENTRIES as f64).sqrt() as usize).max(1);
    let (br, bc) = if n < block { (n, (CPU_MATVEC_TILE_ENTRIES / n).min(m)) } else { (block, block.min(m)) };
    let mut out = DMatrix::<T>::zeros(n, v.ncols());
    for r0 in (0..n).step_by(br) {
        let r1 = (r0 + br).min(n);
        let xb = x.rows(r0, r1 - r0).into_owned();
        let mut ob = DMatrix::<T>::zeros(r1 - r0, v.ncols());
        for c0 in (0..m).step_by(bc) {
            let c1 = (c0 + bc).min(m);
            let zb = z.rows(c0, c1 - c0).into_owned();
            let kb = kernel_matrix_unchecked(kernel, &xb, &zb);
            let vb = v.rows(c0, c1 - c0).into_owned();
            linalg::matmul_acc(&mut ob, &kb, &vb);
        }
        out.rows_mut(r0, r1 - r0).copy_from(&ob);
    }
    linalg::finite_result("kernel matrix-vector product", out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_parameters_are_rejected() {
        assert!(Kernel::rbf(0.0).is_err());
        assert!(Kernel::rbf(-1.0).is_err());
        assert!(Kernel::rbf(f64::NAN).is_err());
        assert!(Kernel::laplacian(0.0).is_err());
        assert!(Kernel::polynomial(1.0, 1.0, 0).is_err());
        assert!(Kernel::polynomial(1.0, f64::INFINITY, 2).is_err());
        assert!(Kernel::sigmoid(-0.5, 0.0).is_err());
        assert!(Kernel::Rbf { gamma: -2.0 }.validate().is_err());
    }

    #[test]
    fn matrix_entries_match_pointwise_eval() {
        let x = DMatrix::<f64>::from_fn(5, 3, |i, j| ((i * 3 + j) as f64 * 0.41).sin());
        let z = DMatrix::<f64>::from_fn(4, 3, |i, j| ((i * 5 + j) as f64 * 0.23).cos());
        for kernel in [
            Kernel::rbf(0.7).unwrap(),
            Kernel::laplacian(0.3).unwrap(),
            Kernel::linear(),
            Kernel::polynomial(0.5, 1.0, 3).unwrap(),
            Kernel::sigmoid(0.2, -0.1).unwrap(),
        ] {
            let k = kernel_matrix_cpu(&kernel, &x, &z).unwrap();
            for i in 0..5 {
                for j in 0..4 {
                    let xi: Vec<f64> = x.row(i).iter().copied().collect();
                    let zj: Vec<f64> = z.row(j).iter().copied().collect();
                    assert!((k[(i, j)] - kernel.eval(&xi, &zj)).abs() < 1e-13, "{kernel:?}");
                }
            }
            let col = kernel_column_cpu(&kernel, &x, &z.row(2).iter().copied().collect::<Vec<_>>()).unwrap();
            assert!((col - k.column(2)).norm() < 1e-13);
        }
    }

    #[test]
    fn matvec_matches_dense_product() {
        let x = DMatrix::<f64>::from_fn(37, 4, |i, j| ((i * 4 + j) as f64 * 0.17).sin());
        let z = DMatrix::<f64>::from_fn(23, 4, |i, j| ((i * 7 + j) as f64 * 0.11).cos());
        let v = DMatrix::<f64>::from_fn(23, 2, |i, j| (i as f64 - 3.0 * j as f64) * 0.1);
        let kernel = Kernel::rbf(0.5).unwrap();
        let dense = kernel_matrix_cpu(&kernel, &x, &z).unwrap() * &v;
        let mv = kernel_matvec_cpu(&kernel, &x, &z, &v).unwrap();
        assert!(linalg::relative_frobenius_error(&mv, &dense) < 1e-13);
    }
}
