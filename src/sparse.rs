//! Kernel matrices and kernel matvecs of sparse inputs (CSR, one sample per
//! row), on the CPU; with the sparse-times-dense product `X B`
//! ([`csr_times_dense`], O(nnz(X) c): random Fourier features and
//! projections of sparse rows), the dense copy ([`densify`]) and row
//! selection ([`select_csr_rows`]) the estimators' sparse paths use
//! (see [`crate::input`]).
//!
//! Every kernel of [`Kernel`] is a function of one pairwise statistic
//! (see [`crate::kernel`]); for sparse rows it is formed from sparse inner
//! products only:
//!
//! - `<x, z> = sum_{c in nz(x) ∩ nz(z)} x_c z_c` (linear, polynomial,
//!   sigmoid), computed as a gather of `x`'s non-zeros against `z` scattered
//!   into a dense buffer of length d: O(nnz(x)) per pair;
//! - `||x - z||^2 = ||x||^2 + ||z||^2 - 2 <x, z>` (RBF and Laplacian, whose
//!   `||x - z||` is the square root of the same statistic), clamped at 0;
//!   near-duplicate pairs (`s <= 1e-4 (||x||^2 + ||z||^2)`, where the
//!   expanded form has lost most of its digits) are recomputed as
//!   `sum_{c in nz(x) ∪ nz(z)} (x_c - z_c)^2` by merging the two rows'
//!   sorted column indices.
//!
//! The kernel function is then applied to the statistic by the same code as
//! the dense CPU path ([`crate::kernel::kernel_matrix_cpu`]), so a sparse input
//! and its dense copy give the same kernel matrix up to the summation order
//! of the inner products (about `1e-15` relative in `f64`).
//!
//! Inputs are [`CsrMatrix`] values of the `nalgebra-sparse` crate (re-exported
//! here), whose column indices are sorted and unique within a row. Both
//! arguments are sparse; a dense matrix converts with `CsrMatrix::from(&m)`.
//! The computation runs on the CPU on every [`Device`](crate::Device): the
//! device methods [`Device::kernel_matrix_sparse`](crate::Device::kernel_matrix_sparse)
//! and [`Device::kernel_matvec_sparse`](crate::Device::kernel_matvec_sparse) call the
//! functions here. The GPU engine holds its own CSR operand
//! ([`crate::gpu::GpuCsr`]: `X B` and `K(X, Z)` for dense `B`, `Z` on the
//! device), which eKSVD's feature maps of sparse rows use on a GPU.

pub use nalgebra_sparse::CsrMatrix;

use std::borrow::Cow;

use faer::MatRef;
use nalgebra::DMatrix;
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::kernel::{self, Kernel, NEAR_DUPLICATE};
use crate::linalg::{self, check_dim, check_matrix, Real};

/// Fails with `Empty` when `m` has no rows or no columns and with
/// `NonFinite` (row and column of the entry) at the first stored NaN or
/// infinity.
pub fn check_csr<T: Real>(what: &'static str, m: &CsrMatrix<T>) -> Result<()> {
    if m.nrows() == 0 || m.ncols() == 0 {
        return Err(Error::Empty { what, rows: m.nrows(), cols: m.ncols() });
    }
    for (row, r) in m.row_iter().enumerate() {
        if let Some(p) = r.values().iter().position(|v| !v.is_finite()) {
            return Err(Error::NonFinite { what, row, col: r.col_indices()[p] });
        }
    }
    Ok(())
}

/// The dense copy of a CSR matrix (`OutOfMemory` when its `rows x cols`
/// entries cannot be allocated).
pub fn densify<T: Real>(m: &CsrMatrix<T>) -> Result<DMatrix<T>> {
    let mut out = linalg::zeroed_output::<T>(m.nrows(), m.ncols(), "dense copy of a sparse matrix")?;
    for (i, r) in m.row_iter().enumerate() {
        for (&c, &v) in r.col_indices().iter().zip(r.values()) {
            out[(i, c)] = v;
        }
    }
    Ok(out)
}

/// The rows `idx` of a CSR matrix, in that order (indices the caller has
/// checked to be below `m.nrows()`).
pub fn select_csr_rows<T: Real>(m: &CsrMatrix<T>, idx: &[usize]) -> CsrMatrix<T> {
    let mut offsets = Vec::with_capacity(idx.len() + 1);
    offsets.push(0);
    let nnz: usize = idx.iter().map(|&i| m.row(i).nnz()).sum();
    let (mut indices, mut values) = (Vec::with_capacity(nnz), Vec::with_capacity(nnz));
    for &i in idx {
        let r = m.row(i);
        indices.extend_from_slice(r.col_indices());
        values.extend_from_slice(r.values());
        offsets.push(indices.len());
    }
    CsrMatrix::try_from_csr_data(idx.len(), m.ncols(), offsets, indices, values).expect("rows of a valid CSR matrix")
}

/// The sparse-times-dense product `X B` (n x c) of a CSR `X` (n x d) and a
/// dense `B` (d x c), O(nnz(X) c), rows split between the threads.
///
/// Errors: `DimensionMismatch` (rows of `B` vs columns of `X`),
/// `OutOfMemory` when the output cannot be allocated, `Overflow` for a
/// non-finite result.
pub fn csr_times_dense(x: &CsrMatrix<f64>, b: &DMatrix<f64>) -> Result<DMatrix<f64>> {
    check_dim("rows of the dense factor vs columns of the sparse one", x.ncols(), b.nrows())?;
    let (n, c) = (x.nrows(), b.ncols());
    // Row-major output (one row of X per task), transposed at the end.
    let mut out_t = linalg::zeroed_output::<f64>(c, n, "sparse-dense product")?;
    // Row k of B contiguous: column k of B^T.
    let bt = b.transpose();
    let row = |(i, dst): (usize, &mut [f64])| {
        let r = x.row(i);
        for (&k, &v) in r.col_indices().iter().zip(r.values()) {
            for (o, &bkj) in dst.iter_mut().zip(&bt.as_slice()[k * c..(k + 1) * c]) {
                *o += v * bkj;
            }
        }
    };
    if c > 0 {
        if x.nnz().saturating_mul(c) < PARALLEL_WORK {
            out_t.as_mut_slice().chunks_mut(c).enumerate().for_each(row);
        } else {
            out_t.as_mut_slice().par_chunks_mut(c).enumerate().for_each(row);
        }
    }
    linalg::finite_result("sparse-dense product", out_t.transpose())
}

/// `||x_i||^2` for each row `x_i` of a CSR matrix.
pub fn sparse_row_squared_norms<T: Real>(m: &CsrMatrix<T>) -> Vec<T> {
    m.row_iter().map(|r| r.values().iter().fold(T::zero(), |acc, &v| acc + v * v)).collect()
}

/// Checks a kernel and a pair of sparse inputs: valid parameters, both
/// inputs non-empty and finite, the same number of columns.
fn check_sparse_pair<T: Real>(kernel: &Kernel, x: &CsrMatrix<T>, z: &CsrMatrix<T>) -> Result<()> {
    kernel.validate()?;
    check_csr("x", x)?;
    check_csr("z", z)?;
    check_dim("feature dimension of z vs x", x.ncols(), z.ncols())
}

/// `||a - b||^2` for two sparse rows given by their sorted column indices
/// and values: one merge over the union of their non-zeros.
fn merged_squared_distance<T: Real>(ai: &[usize], av: &[T], bi: &[usize], bv: &[T]) -> T {
    let (mut p, mut q) = (0, 0);
    let mut s = T::zero();
    while p < ai.len() || q < bi.len() {
        let diff = if q == bi.len() || (p < ai.len() && ai[p] < bi[q]) {
            p += 1;
            av[p - 1]
        } else if p == ai.len() || bi[q] < ai[p] {
            q += 1;
            -bv[q - 1]
        } else {
            p += 1;
            q += 1;
            av[p - 1] - bv[q - 1]
        };
        s += diff * diff;
    }
    s
}

/// Squared row norms of `X` and `Z` for the distance-based kernels (empty
/// otherwise), computed here or borrowed from the caller.
struct SparseNorms<'a, T: Clone> {
    x: Cow<'a, [T]>,
    z: Cow<'a, [T]>,
}

impl<T: Real> SparseNorms<'_, T> {
    fn new(kernel: &Kernel, x: &CsrMatrix<T>, z: &CsrMatrix<T>) -> Self {
        if kernel.is_distance_based() {
            SparseNorms { x: Cow::Owned(sparse_row_squared_norms(x)), z: Cow::Owned(sparse_row_squared_norms(z)) }
        } else {
            SparseNorms { x: Cow::Owned(Vec::new()), z: Cow::Owned(Vec::new()) }
        }
    }
}

/// One tile `dst = k(X[r0..r0+rows], Z[c0..c0+cols])`, column-major with
/// leading dimension `rows` (`dst.len() = rows cols`): the inner products by
/// gather against the scattered row of `Z` (`scratch`: length d, all zero on
/// entry and on return), the squared distance for RBF/Laplacian (near
/// duplicates merged), then, where `apply`, `k` by
/// [`kernel::apply_to_statistics`] (otherwise the tile holds the statistic).
/// Returns whether every entry is finite.
#[allow(clippy::too_many_arguments)]
fn fill_sparse_tile<T: Real>(kernel: &Kernel, x: &CsrMatrix<T>, z: &CsrMatrix<T>, norms: &SparseNorms<'_, T>, r0: usize, rows: usize, c0: usize, dst: &mut [T], scratch: &mut [T], apply: bool) -> bool {
    let two = T::one() + T::one();
    let near = T::from_f64_lossy(NEAR_DUPLICATE);
    let mut finite = true;
    for (jj, col) in dst.chunks_exact_mut(rows.max(1)).enumerate() {
        let zj = z.row(c0 + jj);
        let (zi, zv) = (zj.col_indices(), zj.values());
        for (&c, &v) in zi.iter().zip(zv) {
            scratch[c] = v;
        }
        for (ii, out) in col.iter_mut().enumerate() {
            let xi = x.row(r0 + ii);
            *out = xi.col_indices().iter().zip(xi.values()).fold(T::zero(), |acc, (&c, &v)| acc + v * scratch[c]);
        }
        for &c in zi {
            scratch[c] = T::zero();
        }
        if kernel.is_distance_based() {
            let znj = norms.z[c0 + jj];
            for (ii, out) in col.iter_mut().enumerate() {
                let xni = norms.x[r0 + ii];
                let s = (xni + znj - two * *out).max(T::zero());
                *out = if s <= near * (xni + znj) {
                    let xi = x.row(r0 + ii);
                    merged_squared_distance(xi.col_indices(), xi.values(), zi, zv)
                } else {
                    s
                };
            }
        }
        if apply {
            kernel::apply_to_statistics(kernel, col);
        }
        finite &= col.iter().all(|v| v.is_finite());
    }
    finite
}

/// Columns of `K` per task of [`kernel_matrix_sparse_cpu`].
const MATRIX_BLOCK_COLS: usize = 64;
/// Tile of [`kernel_matvec_sparse_cpu`] (rows of `X` x rows of `Z`), built in
/// a per-task buffer and multiplied into the output at once.
const MATVEC_TILE: usize = 256;
/// Below this many multiply-adds (`nnz(X) m`) the work runs on the calling thread.
const PARALLEL_WORK: usize = 1 << 18;

/// CPU cross kernel matrix `K(X, Z)_{ij} = k(x_i, z_j)` (n x m) for sparse
/// `X` (n x d) and `Z` (m x d), multi-threaded over blocks of columns.
/// Cost O(nnz(X) m + nnz(Z) + (n + m)) plus the merges of near-duplicate
/// pairs for RBF/Laplacian.
///
/// Errors: invalid kernel parameters, `Empty` (no rows or no columns),
/// `NonFinite` (a stored NaN or infinity, at its row and column),
/// `DimensionMismatch` (different numbers of columns), `OutOfMemory` when the
/// n x m output cannot be allocated, `Overflow` when finite inputs give a
/// non-finite kernel value.
pub fn kernel_matrix_sparse_cpu<T: Real>(kernel: &Kernel, x: &CsrMatrix<T>, z: &CsrMatrix<T>) -> Result<DMatrix<T>> {
    check_sparse_pair(kernel, x, z)?;
    let (n, m, d) = (x.nrows(), z.nrows(), x.ncols());
    let norms = SparseNorms::new(kernel, x, z);
    let mut k = linalg::zeroed_output::<T>(n, m, "kernel matrix")?;
    // Whole blocks of columns (the last one possibly narrower); n >= 1.
    let chunk = crate::memory::entries(n, MATRIX_BLOCK_COLS, "kernel matrix")?;
    let block = |(b, dst): (usize, &mut [T])| {
        let mut scratch = vec![T::zero(); d];
        fill_sparse_tile(kernel, x, z, &norms, 0, n, b * MATRIX_BLOCK_COLS, dst, &mut scratch, true)
    };
    let finite = if x.nnz().saturating_mul(m) < PARALLEL_WORK {
        k.as_mut_slice().chunks_mut(chunk).enumerate().map(block).fold(true, |a, b| a & b)
    } else {
        k.as_mut_slice().par_chunks_mut(chunk).enumerate().map(block).reduce(|| true, |a, b| a & b)
    };
    if finite {
        Ok(k)
    } else {
        linalg::finite_result("kernel matrix", k)
    }
}

/// CPU kernel matrix times a thin matrix, `K(X, Z) V` (n x c) for sparse `X`
/// (n x d), `Z` (m x d) and dense `V` (m x c), without storing `K(X, Z)`:
/// each task owns 256 rows of `X`, builds one 256 x 256 tile of `K` at a time
/// in a buffer (as [`kernel_matrix_sparse_cpu`] does) and multiplies it into
/// its rows of the output. Memory O(nnz(X) + nnz(Z) + (n + m) c).
///
/// Errors: those of [`kernel_matrix_sparse_cpu`], and `Empty`, `NonFinite`
/// or `DimensionMismatch` (rows of `V` vs rows of `Z`) for `v`.
pub fn kernel_matvec_sparse_cpu<T: Real>(kernel: &Kernel, x: &CsrMatrix<T>, z: &CsrMatrix<T>, v: &DMatrix<T>) -> Result<DMatrix<T>> {
    check_sparse_pair(kernel, x, z)?;
    check_matrix("v", v)?;
    check_dim("rows of v vs rows of z", z.nrows(), v.nrows())?;
    let (n, m, c, d) = (x.nrows(), z.nrows(), v.ncols(), x.ncols());
    let mut out = linalg::zeroed_output::<T>(n, c, "kernel matrix-vector product")?;
    let norms = SparseNorms::new(kernel, x, z);
    let task = |rb: usize| {
        let r0 = rb * MATVEC_TILE;
        let rows = MATVEC_TILE.min(n - r0);
        let mut acc = DMatrix::<T>::zeros(rows, c);
        let mut buf = vec![T::zero(); rows * MATVEC_TILE];
        let mut scratch = vec![T::zero(); d];
        for c0 in (0..m).step_by(MATVEC_TILE) {
            let cols = MATVEC_TILE.min(m - c0);
            let tile = &mut buf[..rows * cols];
            // Non-finite entries reach the output, checked below.
            fill_sparse_tile(kernel, x, z, &norms, r0, rows, c0, tile, &mut scratch, true);
            T::faer_matmul_seq_add(linalg::faer_mut(&mut acc), MatRef::from_column_major_slice(tile, rows, cols), linalg::faer_ref(v).subrows(c0, cols));
            linalg::clear_upper_simd_state(false);
        }
        (r0, acc)
    };
    let row_blocks = n.div_ceil(MATVEC_TILE);
    let parts: Vec<(usize, DMatrix<T>)> =
        if x.nnz().saturating_mul(m) < PARALLEL_WORK { (0..row_blocks).map(task).collect() } else { (0..row_blocks).into_par_iter().map(task).collect() };
    for (r0, part) in parts {
        out.rows_mut(r0, part.nrows()).copy_from(&part);
    }
    linalg::finite_result("kernel matrix-vector product", out)
}

/// Rows of `X` per task of [`statistic_column_sparse`] (at least).
const COLUMN_ROW_CHUNK: usize = 8192;

/// The statistic of `kernel` between every row of a sparse `X` and its row
/// `i` (`i < n`, checked by the caller), written into `out` (n entries):
/// `||x_k - x_i||^2` (RBF, Laplacian) or `<x_k, x_i>` (the others), the
/// first two steps of the tile of [`kernel_matrix_sparse_cpu`] (so `k`
/// applied to it by [`kernel::apply_to_statistics`] gives the bits of
/// column `i` of `K(X, X)`), from the squared row norms `x_sq_norms` the
/// caller keeps (read for the distance-based kernels only). O(nnz(X) + d)
/// per block of rows; the rows split between the threads.
///
/// Errors: `DimensionMismatch` for an `out` or a norm list (distance-based
/// kernels) of other than n entries; `IndexOutOfRange` for `i >= n`.
pub(crate) fn statistic_column_sparse(kernel: &Kernel, x: &CsrMatrix<f64>, x_sq_norms: &[f64], i: usize, out: &mut [f64]) -> Result<()> {
    let (n, d) = (x.nrows(), x.ncols());
    check_dim("length of the statistic column", n, out.len())?;
    if kernel.is_distance_based() {
        check_dim("squared row norms of x", n, x_sq_norms.len())?;
    }
    if i >= n {
        return Err(Error::IndexOutOfRange { what: "rows of x", index: i, len: n });
    }
    let norms = SparseNorms { x: Cow::Borrowed(x_sq_norms), z: Cow::Borrowed(x_sq_norms) };
    let rows_per_task = n.div_ceil(rayon::current_num_threads().max(1)).max(COLUMN_ROW_CHUNK);
    let block = |(b, dst): (usize, &mut [f64])| {
        let mut scratch = vec![0.0; d];
        fill_sparse_tile(kernel, x, x, &norms, b * rows_per_task, dst.len(), i, dst, &mut scratch, false);
    };
    if x.nnz() < PARALLEL_WORK {
        out.chunks_mut(rows_per_task).enumerate().for_each(block);
    } else {
        out.par_chunks_mut(rows_per_task).enumerate().for_each(block);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_distance_covers_both_index_sets() {
        let d = merged_squared_distance(&[0, 2, 5], &[1.0f64, 2.0, 3.0], &[2, 3], &[1.0, 4.0]);
        assert_eq!(d, 1.0 + 1.0 + 16.0 + 9.0);
        assert_eq!(merged_squared_distance::<f64>(&[], &[], &[], &[]), 0.0);
        assert_eq!(merged_squared_distance(&[], &[], &[1], &[-2.0f64]), 4.0);
    }
}
