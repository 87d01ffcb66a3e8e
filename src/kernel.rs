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
//! The GPU shaders (`shaders/product.wgsl`, `product_tile.wgsl`) use the same split: they
//! accumulate `s` over the feature dimension and apply the function once.
//!
//! Data matrices hold one sample per **row** (n x d).
//!
//! The file runs past 600 lines because the fused CPU tile (statistic,
//! kernel function and overflow marking in one pass) and its unit tests stay
//! beside the kernel definitions they evaluate.

use faer::reborrow::{Reborrow, ReborrowMut};
use faer::MatMut;
use nalgebra::{DMatrix, DVector};
use rayon::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};
use crate::linalg::{self, check_dim, check_matrix, Real};
use crate::precision::Precision;

/// A kernel function with validated parameters. Build it with the
/// constructors ([`Kernel::rbf`], ...), which reject invalid parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
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
        return Err(Error::InvalidParameter { name, reason: format!("must be finite and > 0, got {v}") });
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
            return Err(Error::InvalidParameter {
                name: "sigma",
                reason: format!("{sigma:e} is outside the range where gamma = 1/(2 sigma^2) is a finite positive f64 (about 5.3e-155 ..= 9.4e153)"),
            });
        }
        Kernel::rbf(gamma)
    }

    /// The width `sigma = 1/sqrt(2 gamma)` of a Gaussian kernel (the inverse
    /// of [`Kernel::gaussian_with_width`]); `None` for every other kernel.
    pub fn gaussian_width(&self) -> Option<f64> {
        match *self {
            Kernel::Rbf { gamma } => Some((0.5 / gamma).sqrt()),
            _ => None,
        }
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
            return Err(Error::InvalidParameter { name: "coef0", reason: format!("must be finite, got {coef0}") });
        }
        if degree == 0 || degree > Self::MAX_POLYNOMIAL_DEGREE {
            return Err(Error::InvalidParameter { name: "degree", reason: format!("must be in 1..={}, got {degree}", Self::MAX_POLYNOMIAL_DEGREE) });
        }
        Ok(Kernel::Polynomial { gamma, coef0, degree })
    }

    /// Sigmoid kernel `tanh(gamma <x, z> + coef0)`.
    pub fn sigmoid(gamma: f64, coef0: f64) -> Result<Self> {
        check_positive("gamma", gamma)?;
        if !coef0.is_finite() {
            return Err(Error::InvalidParameter { name: "coef0", reason: format!("must be finite, got {coef0}") });
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
    ///
    /// A squared distance that overflowed to `+inf` (finite points more than
    /// `sqrt(T::MAX)` apart) gives 0 where every distance beyond the largest
    /// finite one has a kernel value that rounds to 0 (`exp(-gamma T::MAX)`,
    /// resp. `exp(-gamma sqrt(T::MAX))`, underflows), and NaN otherwise: the
    /// value is then not determined by `s`, and the callers' finiteness
    /// checks report an overflow instead of a wrong value.
    #[inline]
    pub fn apply_to_statistic<T: Real>(&self, s: T) -> T {
        match *self {
            Kernel::Rbf { gamma } => {
                let g = T::from_f64_lossy(gamma);
                if s == T::from_f64_lossy(f64::INFINITY) { beyond_largest_distance((-g * largest::<T>()).exp()) } else { (-g * s).exp() }
            }
            Kernel::Laplacian { gamma } => {
                let g = T::from_f64_lossy(gamma);
                if s == T::from_f64_lossy(f64::INFINITY) { beyond_largest_distance((-g * largest::<T>().sqrt()).exp()) } else { (-g * s.max(T::zero()).sqrt()).exp() }
            }
            Kernel::Linear => s,
            Kernel::Polynomial { gamma, coef0, degree } => {
                (T::from_f64_lossy(gamma) * s + T::from_f64_lossy(coef0)).powi(degree as i32)
            }
            Kernel::Sigmoid { gamma, coef0 } => (T::from_f64_lossy(gamma) * s + T::from_f64_lossy(coef0)).tanh(),
        }
    }

    /// `k(x, z)` for two points given as slices of equal length.
    ///
    /// For the distance-based kernels a squared distance that overflows is
    /// recomputed scaled by the largest coordinate difference `m`
    /// (`gamma ||x - z||^2 = (gamma m) m ||(x - z)/m||^2`), so far-apart
    /// points with a tiny `gamma` get their value, not 0.
    ///
    /// Errors: invalid kernel parameters (a literal built without a
    /// constructor), slices of different lengths (`DimensionMismatch`),
    /// NaN or infinite coordinates (`NonFinite`, column = index), a
    /// non-finite value from finite points (`Overflow`).
    pub fn eval<T: Real>(&self, x: &[T], z: &[T]) -> Result<T> {
        self.validate()?;
        check_dim("length of z vs x", x.len(), z.len())?;
        for (what, v) in [("x", x), ("z", z)] {
            if let Some(col) = v.iter().position(|a| !a.is_finite()) {
                return Err(Error::NonFinite { what, row: 0, col });
            }
        }
        let value = if self.is_distance_based() {
            let s = x.iter().zip(z).fold(T::zero(), |acc, (&a, &b)| acc + (a - b) * (a - b));
            let m = x.iter().zip(z).fold(T::zero(), |acc, (&a, &b)| acc.max((a - b).abs()));
            if s.is_finite() && m.is_finite() {
                self.apply_to_statistic(s)
            } else {
                // ||x - z||^2 (or a difference) overflowed: scale by m.
                let scaled = x.iter().zip(z).fold(T::zero(), |acc, (&a, &b)| {
                    let t = a / m - b / m;
                    acc + t * t
                });
                let gamma = T::from_f64_lossy(match *self {
                    Kernel::Rbf { gamma } | Kernel::Laplacian { gamma } => gamma,
                    _ => unreachable!("distance-based kernels are RBF and Laplacian"),
                });
                let exponent = match self {
                    Kernel::Rbf { .. } => gamma * m * m * scaled,
                    _ => gamma * m * scaled.sqrt(),
                };
                (-exponent).exp()
            }
        } else {
            self.apply_to_statistic(x.iter().zip(z).fold(T::zero(), |acc, (&a, &b)| acc + a * b))
        };
        if !value.is_finite() {
            return Err(Error::Overflow { what: "kernel value", row: 0, col: 0 });
        }
        Ok(value)
    }

    /// `k(x, x)` for each row of `x`, i.e. the diagonal of `K(X, X)`.
    /// Cost O(n d); computed on the CPU on every device.
    pub fn diagonal<T: Real>(&self, x: &DMatrix<T>) -> Result<DVector<T>> {
        self.validate()?;
        check_matrix("x", x)?;
        let sq = if self.is_distance_based() { vec![T::zero(); x.nrows()] } else { row_squared_norms(x) };
        self.diagonal_from_sq_norms(&sq)
    }

    /// [`Kernel::diagonal`] from the squared row norms `||x_i||^2` (read
    /// only by the inner-product kernels; the distance-based ones are 1 on
    /// the diagonal), for callers that share one norm pass between several
    /// kernels on the same input (mklaren).
    pub(crate) fn diagonal_from_sq_norms<T: Real>(&self, sq_norms: &[T]) -> Result<DVector<T>> {
        let diagonal = if self.is_distance_based() {
            DVector::from_element(sq_norms.len(), T::one())
        } else {
            DVector::from_iterator(sq_norms.len(), sq_norms.iter().map(|&s| self.apply_to_statistic(s)))
        };
        linalg::finite_vector("kernel diagonal", diagonal)
    }
}

/// The largest finite value of `T`.
#[inline]
fn largest<T: Real>() -> T {
    T::max_value().expect("f32 and f64 are bounded")
}

/// The value of a distance-based kernel at a squared distance that
/// overflowed: `at_largest`, the value at the largest finite one, when it
/// rounds to 0 (then so does every larger distance's), else undetermined.
#[inline]
fn beyond_largest_distance<T: Real>(at_largest: T) -> T {
    if at_largest == T::zero() {
        T::zero()
    } else {
        T::from_f64_lossy(f64::NAN)
    }
}

/// Sets the overflowed squared distances (`+inf`) among `values` to NaN
/// where [`Kernel::apply_to_statistic`] leaves them undetermined (a `gamma`
/// so small that the kernel at the largest finite distance is not 0), so
/// that the vectorised exponential gives NaN, not 0, for them.
fn mark_undetermined<T: Real>(kernel: &Kernel, values: &mut [T]) {
    let inf = T::from_f64_lossy(f64::INFINITY);
    if kernel.apply_to_statistic(inf).is_finite() {
        return;
    }
    for v in values.iter_mut().filter(|v| **v == inf) {
        *v = T::from_f64_lossy(f64::NAN);
    }
}

/// Fails with `Overflow` where a kernel matrix computed in `precision` on a
/// GPU could meet a squared distance that overflows while the kernel value
/// there is not 0 (RBF or Laplacian with a `gamma` so small that
/// [`Kernel::apply_to_statistic`] leaves an infinite distance undetermined).
/// The shaders accumulate `||x - z||^2` in `precision` and cannot rescale a
/// pair; the CPU paths mark such entries themselves. `bound` is an upper
/// bound on `||x_i|| + ||z_j||`, hence on every distance: below
/// `sqrt(MAX) / 2` no squared distance, nor the expanded form's
/// `||x||^2 + ||z||^2`, reaches `MAX / 2`.
pub(crate) fn check_distance_range(kernel: &Kernel, precision: Precision, bound: f64) -> Result<()> {
    if !kernel.is_distance_based() {
        return Ok(());
    }
    let (determined, largest) = match precision {
        Precision::F32 => (kernel.apply_to_statistic(f32::INFINITY).is_finite(), f32::MAX as f64),
        Precision::F64 => (kernel.apply_to_statistic(f64::INFINITY).is_finite(), f64::MAX),
    };
    if determined || bound < largest.sqrt() / 2.0 {
        return Ok(());
    }
    Err(Error::Overflow { what: "squared distances of a kernel with so small a gamma (rescale the data or gamma)", row: 0, col: 0 })
}

/// An upper bound on every row norm of `x`: `sqrt(d) max |x_ij|`, without
/// squaring (no overflow).
pub(crate) fn row_norm_bound<T: Real>(x: &DMatrix<T>) -> f64 {
    let top = x.iter().fold(0.0f64, |a, v| a.max(v.to_f64_exact().abs()));
    top * (x.ncols() as f64).sqrt()
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
///
/// Every tile is checked for NaN and infinities while it is in cache (no
/// extra pass over the output); only when one is found is the whole matrix
/// scanned for the first, for the error's position.
pub fn kernel_matrix_cpu<T: Real>(kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>) -> Result<DMatrix<T>> {
    check_pair(kernel, x, z)?;
    let norms = TileNorms::new(kernel, x, z);
    let (k, finite) = kernel_matrix_tiled(kernel, x, z, &norms, true)?;
    if finite {
        Ok(k)
    } else {
        linalg::finite_result("kernel matrix", k)
    }
}

pub(crate) fn kernel_matrix_unchecked<T: Real>(kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>) -> Result<DMatrix<T>> {
    let norms = TileNorms::new(kernel, x, z);
    Ok(kernel_matrix_tiled(kernel, x, z, &norms, true)?.0)
}

/// The statistic of `kernel` between the rows of `x` and `z` (n x m): the
/// squared distances `||x_i - z_j||^2` for the distance-based kernels (the
/// same for every RBF and Laplacian kernel), the inner products otherwise.
/// These are steps 1-2 of the fused tile of [`kernel_matrix_cpu`], with the
/// squared row norms given (`x_sq_norms[i] = ||x_i||^2`, `z_sq_norms[j] =
/// ||z_j||^2`, read only by the distance-based kernels: pass empty slices
/// for the others), and [`apply_to_statistics`] is its step 3:
/// `kernel_matrix_cpu` equals this followed by `apply_to_statistics`, bit
/// for bit. Several kernels on one input then pay for one pass over `x`
/// (mklaren's kernel columns).
pub(crate) fn statistic_matrix_with_norms<T: Real>(kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>, x_sq_norms: &[T], z_sq_norms: &[T]) -> Result<DMatrix<T>> {
    if kernel.is_distance_based() {
        assert_eq!((x_sq_norms.len(), z_sq_norms.len()), (x.nrows(), z.nrows()), "statistic_matrix_with_norms: one norm per row");
    }
    let norms = TileNorms { x: x_sq_norms.to_vec(), z: z_sq_norms.to_vec() };
    Ok(kernel_matrix_tiled(kernel, x, z, &norms, false)?.0)
}

/// The n x m output of [`fill_tile`] over all tiles, and whether every
/// entry is finite; `OutOfMemory` when the output cannot be allocated.
fn kernel_matrix_tiled<T: Real>(kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>, norms: &TileNorms<T>, apply: bool) -> Result<(DMatrix<T>, bool)> {
    let (n, m) = (x.nrows(), z.nrows());
    let mut k = linalg::zeroed_output::<T>(n, m, "kernel matrix")?;
    let out = SendPtr(k.as_mut_slice().as_mut_ptr());
    let all_finite = AtomicBool::new(true);
    let (row_blocks, col_blocks) = (n.div_ceil(MATRIX_TILE_ROWS), m.div_ceil(MATRIX_TILE_COLS));
    let tile = |t: usize| {
        let (r0, c0) = ((t % row_blocks) * MATRIX_TILE_ROWS, (t / row_blocks) * MATRIX_TILE_COLS);
        let (rows, cols) = (MATRIX_TILE_ROWS.min(n - r0), MATRIX_TILE_COLS.min(m - c0));
        // SAFETY: the tiles partition the n x m output, so each task writes
        // its own rows r0..r0+rows of columns c0..c0+cols (column stride n)
        // and no other task touches them; `k` outlives the parallel loop.
        let dst = unsafe { MatMut::from_raw_parts_mut(out.get().add(r0 + c0 * n), rows, cols, 1, n as isize) };
        if !fill_tile(kernel, x, z, norms, r0, c0, dst, apply) {
            all_finite.store(false, Ordering::Relaxed);
        }
    };
    if n * m * x.ncols().max(1) < PARALLEL_WORK {
        (0..row_blocks * col_blocks).for_each(tile);
    } else {
        (0..row_blocks * col_blocks).into_par_iter().for_each(tile);
    }
    Ok((k, all_finite.into_inner()))
}

/// A pair with `||x||^2 + ||z||^2 - 2 <x, z> <= NEAR_DUPLICATE (||x||^2 + ||z||^2)`
/// is a near duplicate: the expanded form has lost most of its digits there,
/// and the squared distance is recomputed directly from the differences.
pub(crate) const NEAR_DUPLICATE: f64 = 1e-4;

/// Rows and columns of one tile of the fused CPU kernel matrix
/// (256 x 128 f64 = 256 KiB: product, exponential and store stay in L2).
const MATRIX_TILE_ROWS: usize = 256;
const MATRIX_TILE_COLS: usize = 128;
/// Tile of the fused kernel matvec (256 x 256): built in a per-task buffer
/// and multiplied into the output at once, never stored.
const MATVEC_TILE_ROWS: usize = 256;
const MATVEC_TILE_COLS: usize = 256;
/// Below this many multiply-adds (n m d) the tiles run on the calling thread.
const PARALLEL_WORK: usize = 1 << 18;

/// A raw output pointer shared by tasks that write disjoint tiles.
#[derive(Clone, Copy)]
struct SendPtr<T>(*mut T);
// SAFETY: used only to hand disjoint tiles of one buffer to rayon tasks.
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}
impl<T> SendPtr<T> {
    fn get(self) -> *mut T {
        self.0
    }
}

/// Squared row norms of `X` and `Z` for the distance-based kernels (empty otherwise).
struct TileNorms<T> {
    x: Vec<T>,
    z: Vec<T>,
}

impl<T: Real> TileNorms<T> {
    fn new(kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>) -> Self {
        if kernel.is_distance_based() {
            TileNorms { x: row_squared_norms(x), z: row_squared_norms(z) }
        } else {
            TileNorms { x: Vec::new(), z: Vec::new() }
        }
    }
}

/// One tile of the fused kernel matrix: `dst = k(X[r0.., :], Z[c0.., :])`
/// for the tile's rows and columns, in three steps while the tile is in cache:
///
/// 1. the inner products `X_b Z_b^T` (one sequential faer GEMM into `dst`);
/// 2. for RBF/Laplacian, `s = ||x||^2 + ||z||^2 - 2 <x, z>` clamped at 0,
///    with near-duplicate pairs (`s <= NEAR_DUPLICATE (||x||^2 + ||z||^2)`, where the
///    expanded form has lost most of its digits) recomputed as a direct sum
///    of squared differences;
/// 3. `k(s)`: `exp(-gamma s)` / `exp(-gamma sqrt(s))` by the vectorised
///    [`Real::exp_nonpositive`], the other kernels by
///    [`Kernel::apply_to_statistic`].
///
/// Steps 2 and 3 run compiled for the CPU's widest vectors (`linalg::simd_fn`).
/// This is the only CPU kernel-matrix implementation: the whole matrix and
/// the matrix-free matvec both call it; `apply = false` stops after step 2
/// (the statistic, [`statistic_matrix_with_norms`]). Returns whether every
/// entry of the tile is finite.
#[allow(clippy::too_many_arguments)]
fn fill_tile<T: Real>(kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>, norms: &TileNorms<T>, r0: usize, c0: usize, mut dst: MatMut<'_, T>, apply: bool) -> bool {
    let (rows, cols) = (dst.nrows(), dst.ncols());
    let xb = linalg::faer_ref(x).subrows(r0, rows);
    let zb = linalg::faer_ref(z).subrows(c0, cols);
    T::faer_matmul_seq(dst.rb_mut(), xb, zb.transpose());
    linalg::clear_upper_simd_state(false);
    finish_tile(kernel, x, z, norms, r0, c0, dst, apply)
}

linalg::simd_fn! {
    /// Step 3 of the fused tile ([`fill_tile`]) on values that hold the
    /// statistic `s`: `v <- k(v)` (`exp(-gamma s)` / `exp(-gamma sqrt(s))` by
    /// the vectorised [`Real::exp_nonpositive`], the other kernels by
    /// [`Kernel::apply_to_statistic`]), at the CPU's widest vectors. The
    /// exponentials go through [`Real::exp_nonpositive_slice`] (the AVX-512
    /// table method where available).
    pub(crate) fn apply_to_statistics<T: Real>(kernel: &Kernel, values: &mut [T]) {
        match *kernel {
            Kernel::Rbf { gamma } => {
                let g = -T::from_f64_lossy(gamma);
                mark_undetermined(kernel, values);
                for v in values.iter_mut() {
                    *v = g * *v;
                }
                T::exp_nonpositive_slice(values);
            }
            Kernel::Laplacian { gamma } => {
                let g = -T::from_f64_lossy(gamma);
                mark_undetermined(kernel, values);
                for v in values.iter_mut() {
                    *v = g * v.sqrt();
                }
                T::exp_nonpositive_slice(values);
            }
            Kernel::Linear => {}
            _ => {
                for v in values.iter_mut() {
                    *v = kernel.apply_to_statistic(*v);
                }
            }
        }
    }
}

linalg::simd_fn! {
    /// Steps 2 and 3 (step 3 only when `apply`) of [`fill_tile`] on a tile
    /// that holds the inner products; true when every result is finite.
    #[allow(clippy::too_many_arguments)]
    fn finish_tile<T: Real>(kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>, norms: &TileNorms<T>, r0: usize, c0: usize, dst: MatMut<'_, T>, apply: bool) -> bool {
        let mut dst = dst;
        let mut finite = true;
        let (rows, cols) = (dst.nrows(), dst.ncols());
        let two = T::one() + T::one();
        let cancellation = T::from_f64_lossy(NEAR_DUPLICATE);
        let d = x.ncols();
        for j in 0..cols {
            let col = dst.rb_mut().col_mut(j).try_as_col_major_mut().expect("tiles have unit row stride").as_slice_mut();
            match *kernel {
                Kernel::Rbf { .. } | Kernel::Laplacian { .. } => {
                    let xn = &norms.x[r0..r0 + rows];
                    let znj = norms.z[c0 + j];
                    let mut near = false;
                    for i in 0..rows {
                        let s = (xn[i] + znj - two * col[i]).max(T::zero());
                        near |= s <= cancellation * (xn[i] + znj);
                        col[i] = s;
                    }
                    if near {
                        // Scan 8 entries at a time (one vector compare), and
                        // recompute only inside chunks that hold a near pair.
                        for start in (0..rows).step_by(8) {
                            let end = (start + 8).min(rows);
                            let mut hit = false;
                            for i in start..end {
                                hit |= col[i] <= cancellation * (xn[i] + znj);
                            }
                            if !hit {
                                continue;
                            }
                            for i in start..end {
                                if col[i] <= cancellation * (xn[i] + znj) {
                                    let mut s = T::zero();
                                    for c in 0..d {
                                        let diff = x[(r0 + i, c)] - z[(c0 + j, c)];
                                        s += diff * diff;
                                    }
                                    col[i] = s;
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
            if apply {
                apply_to_statistics(kernel, col);
            }
            for v in col.iter() {
                finite &= v.is_finite();
            }
        }
        finite
    }
}

/// CPU kernel column `K(X, z)_i = k(x_i, z)` for one point `z` (length d).
pub fn kernel_column_cpu<T: Real>(kernel: &Kernel, x: &DMatrix<T>, z: &[T]) -> Result<DVector<T>> {
    kernel.validate()?;
    check_matrix("x", x)?;
    check_dim("length of the point vs columns of x", x.ncols(), z.len())?;
    if let Some(pos) = z.iter().position(|v| !v.is_finite()) {
        return Err(Error::NonFinite { what: "point", row: pos, col: 0 });
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

/// CPU kernel matrix times a thin matrix, `K(X, Z) V` (n x c), without storing
/// `K(X, Z)`: fused and blocked. Each task owns 256 rows of `X` and a range of
/// the rows of `Z`; it builds one 256 x 256 tile of `K` at a time in a small
/// buffer (the same tile code as [`kernel_matrix_cpu`]: product, statistic
/// and `k` in cache) and multiplies it into its 256 x c block of the output
/// at once. When there are fewer row blocks than twice the threads, the
/// columns are split too and the partial outputs summed.
pub fn kernel_matvec_cpu<T: Real>(kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>, v: &DMatrix<T>) -> Result<DMatrix<T>> {
    check_pair(kernel, x, z)?;
    check_matrix("v", v)?;
    check_dim("rows of v vs rows of z", z.nrows(), v.nrows())?;
    let (kv, _) = tiled_matvec(kernel, x, z, v, None);
    linalg::finite_result("kernel matrix-vector product", kv)
}

/// CPU pair matvec: `(K(X, Z) V, K(X, Z)^T W)` (n x c and m x c) from one
/// evaluation of each kernel entry, as [`kernel_matvec_cpu`] does it: each
/// tile of `K` is also multiplied, transposed, into the task's rows of the
/// second output (`K_qp = K_pq^T`: both directions of a cross-source
/// coupling for the price of one).
pub fn kernel_matvec_pair_cpu<T: Real>(kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>, v: &DMatrix<T>, w: &DMatrix<T>) -> Result<(DMatrix<T>, DMatrix<T>)> {
    check_pair(kernel, x, z)?;
    check_matrix("v", v)?;
    check_matrix("w", w)?;
    check_dim("rows of v vs rows of z", z.nrows(), v.nrows())?;
    check_dim("rows of w vs rows of x", x.nrows(), w.nrows())?;
    check_dim("columns of w vs columns of v", v.ncols(), w.ncols())?;
    let (kv, ktw) = tiled_matvec(kernel, x, z, v, Some(w));
    let ktw = ktw.expect("the pair form returns both products");
    Ok((linalg::finite_result("kernel matrix-vector product", kv)?, linalg::finite_result("transposed kernel matrix-vector product", ktw)?))
}

/// The tiles of [`kernel_matvec_cpu`] (checked inputs), with `w` also
/// `K^T W`.
fn tiled_matvec<T: Real>(kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>, v: &DMatrix<T>, w: Option<&DMatrix<T>>) -> (DMatrix<T>, Option<DMatrix<T>>) {
    let (n, m, c) = (x.nrows(), z.nrows(), v.ncols());
    let norms = TileNorms::new(kernel, x, z);
    let row_blocks = n.div_ceil(MATVEC_TILE_ROWS);
    let col_blocks = m.div_ceil(MATVEC_TILE_COLS);
    let parallel = n * m * x.ncols().max(1) >= PARALLEL_WORK;
    let threads = if parallel { rayon::current_num_threads() } else { 1 };
    let groups = (2 * threads).div_ceil(row_blocks).clamp(1, col_blocks);
    let per_group = col_blocks.div_ceil(groups);
    let task = |t: usize| {
        let (rb, g) = (t % row_blocks, t / row_blocks);
        let r0 = rb * MATVEC_TILE_ROWS;
        let rows = MATVEC_TILE_ROWS.min(n - r0);
        let (first, last) = (g * per_group, ((g + 1) * per_group).min(col_blocks));
        let span = (first * MATVEC_TILE_COLS, (last * MATVEC_TILE_COLS).min(m));
        let mut acc = DMatrix::<T>::zeros(rows, c);
        // K^T W over this task's columns (only with w).
        let mut acc_t = DMatrix::<T>::zeros(if w.is_some() { span.1.saturating_sub(span.0) } else { 0 }, c);
        let mut buf = vec![T::zero(); rows * MATVEC_TILE_COLS];
        for cb in first..last {
            let c0 = cb * MATVEC_TILE_COLS;
            let cols = MATVEC_TILE_COLS.min(m - c0);
            let mut tile = MatMut::from_column_major_slice_mut(&mut buf[..rows * cols], rows, cols);
            // Non-finite entries reach the output, checked by the callers.
            fill_tile(kernel, x, z, &norms, r0, c0, tile.rb_mut(), true);
            T::faer_matmul_seq_add(linalg::faer_mut(&mut acc), tile.rb(), linalg::faer_ref(v).subrows(c0, cols));
            if let Some(w) = w {
                let dst = linalg::faer_mut(&mut acc_t).subrows_mut(c0 - span.0, cols);
                T::faer_matmul_seq_add(dst, tile.rb().transpose(), linalg::faer_ref(w).subrows(r0, rows));
            }
            linalg::clear_upper_simd_state(false);
        }
        (r0, acc, span.0, acc_t)
    };
    let parts: Vec<(usize, DMatrix<T>, usize, DMatrix<T>)> =
        if parallel { (0..row_blocks * groups).into_par_iter().map(task).collect() } else { (0..row_blocks * groups).map(task).collect() };
    let mut out = DMatrix::<T>::zeros(n, c);
    let mut out_t = w.map(|_| DMatrix::<T>::zeros(m, c));
    for (r0, part, c0, part_t) in parts {
        let mut rows = out.rows_mut(r0, part.nrows());
        rows += &part;
        if let Some(out_t) = out_t.as_mut().filter(|_| part_t.nrows() > 0) {
            let mut cols = out_t.rows_mut(c0, part_t.nrows());
            cols += &part_t;
        }
    }
    (out, out_t)
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
                    assert!((k[(i, j)] - kernel.eval(&xi, &zj).unwrap()).abs() < 1e-13, "{kernel:?}");
                }
            }
            let col = kernel_column_cpu(&kernel, &x, &z.row(2).iter().copied().collect::<Vec<_>>()).unwrap();
            assert!((col - k.column(2)).norm() < 1e-13);
        }
    }

    #[test]
    fn statistic_then_apply_is_the_kernel_matrix_bit_for_bit() {
        let x = DMatrix::<f64>::from_fn(300, 7, |i, j| ((i * 7 + j) as f64 * 0.31).sin());
        let mut z = x.select_rows(&[0, 5, 299]);
        z[(1, 0)] += 1e-9; // a near-duplicate pair (the direct recomputation)
        let (xn, zn) = (row_squared_norms(&x), row_squared_norms(&z));
        for kernel in [Kernel::rbf(0.7).unwrap(), Kernel::laplacian(0.4).unwrap(), Kernel::polynomial(0.5, 1.0, 2).unwrap(), Kernel::linear()] {
            let expected = kernel_matrix_cpu(&kernel, &x, &z).unwrap();
            let mut k = statistic_matrix_with_norms(&kernel, &x, &z, &xn, &zn).unwrap();
            apply_to_statistics(&kernel, k.as_mut_slice());
            assert!(k.iter().zip(expected.iter()).all(|(a, b)| a.to_bits() == b.to_bits()), "{kernel:?}");
            let diag = kernel.diagonal_from_sq_norms(&xn).unwrap();
            assert_eq!(diag, kernel.diagonal(&x).unwrap());
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
