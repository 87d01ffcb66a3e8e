//! Dense products on the CPU, multi-threaded through faer: the three
//! product forms ([`MatrixProduct`]), the Gram matrices of tall and of
//! weighted factors, and the in-place accumulating product.

use nalgebra::{DMatrix, DVector};

use super::{clear_upper_simd_state, faer_mut, faer_ref, Real};

/// Which product of two matrices to form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatrixProduct {
    /// `A B`
    AB,
    /// `A B^T`
    ABt,
    /// `A^T B`
    AtB,
}

/// `A B`, `A B^T` or `A^T B` as `form` says (shapes checked by the caller).
pub fn product<T: Real>(a: &DMatrix<T>, b: &DMatrix<T>, form: MatrixProduct) -> DMatrix<T> {
    match form {
        MatrixProduct::AB => matmul(a, b),
        MatrixProduct::ABt => matmul_nt(a, b),
        MatrixProduct::AtB => matmul_tn(a, b),
    }
}

/// `A B` (A: n x k, B: k x m), multi-threaded.
pub fn matmul<T: Real>(a: &DMatrix<T>, b: &DMatrix<T>) -> DMatrix<T> {
    assert_eq!(a.ncols(), b.nrows(), "matmul: inner dimensions");
    let mut c = DMatrix::<T>::zeros(a.nrows(), b.ncols());
    T::faer_matmul(faer_mut(&mut c), false, faer_ref(a), faer_ref(b));
    c
}

/// `A B^T` (A: n x k, B: m x k), multi-threaded.
pub fn matmul_nt<T: Real>(a: &DMatrix<T>, b: &DMatrix<T>) -> DMatrix<T> {
    assert_eq!(a.ncols(), b.ncols(), "matmul_nt: inner dimensions");
    let mut c = DMatrix::<T>::zeros(a.nrows(), b.nrows());
    T::faer_matmul(faer_mut(&mut c), false, faer_ref(a), faer_ref(b).transpose());
    c
}

/// `A^T B` (A: k x n, B: k x m), multi-threaded.
pub fn matmul_tn<T: Real>(a: &DMatrix<T>, b: &DMatrix<T>) -> DMatrix<T> {
    assert_eq!(a.nrows(), b.nrows(), "matmul_tn: inner dimensions");
    let mut c = DMatrix::<T>::zeros(a.ncols(), b.ncols());
    T::faer_matmul(faer_mut(&mut c), false, faer_ref(a).transpose(), faer_ref(b));
    c
}

/// `P diag(w) P^T` (P: r x n, w: n) for the dual of the PSD models
/// (`M(alpha)` of Eq. 10). Only the lower triangle is computed (half the flops
/// of a full product) and mirrored. The columns are processed in blocks of
/// [`WEIGHTED_GRAM_BLOCK`]: each block is scaled into a small buffer and
/// accumulated by one multi-threaded product, so no r x n scaled copy of `P`
/// is formed (at r = 500, n = 10^5 that copy alone took 0.4 s of the 0.9 s).
///
/// **Zero rows at the bottom of columns are skipped.** Column `j`
/// contributes `w_j p_j p_j^T`, which touches only the leading `h_j x h_j`
/// block when `p_j` is zero below row `h_j`. Where the columns are short on
/// the whole (`sum_j h_j^2 <= 3/4 n r^2`: an upper triangular `P`, such as
/// the features of the centres themselves, `L^{-1} K = L^T`), the columns
/// go in blocks of [`WEIGHTED_GRAM_TRIANGULAR_BLOCK`], each product
/// restricted to the rows up to its tallest column: `r^3 / 3` flops for a triangular `P` of order
/// `r` instead of `r^3` (3.2-3.5x faster at r = 1000 and 2000).
/// Finding the heights reads each column from the bottom up to its last
/// nonzero: one entry per column of a dense `P`.
pub fn weighted_gram(p: &DMatrix<f64>, w: &DVector<f64>) -> DMatrix<f64> {
    assert_eq!(p.ncols(), w.len(), "weighted_gram: one weight per column");
    use faer::linalg::matmul::triangular::{matmul, BlockStructure};
    let (r, n) = p.shape();
    let mut c = DMatrix::<f64>::zeros(r, r);
    let par = if r * r * n < 64 * 64 * 64 { faer::Par::Seq } else { faer::Par::rayon(0) };
    // h_j: one past the last nonzero row of column j.
    let heights: Vec<usize> = (0..n).map(|j| p.column(j).iter().rposition(|&v| v != 0.0).map_or(0, |i| i + 1)).collect();
    // The narrow blocks pay off only when the columns are short on the
    // whole (a triangular P: sum h_j^2 about n r^2 / 3), not for an
    // occasional zero at the bottom of a dense column.
    let ragged = heights.iter().map(|&h| (h as f64).powi(2)).sum::<f64>() <= 0.75 * n as f64 * (r as f64).powi(2);
    let width = if ragged { WEIGHTED_GRAM_TRIANGULAR_BLOCK } else { WEIGHTED_GRAM_BLOCK }.min(n);
    let mut block = DMatrix::<f64>::zeros(r, width);
    for start in (0..n).step_by(width.max(1)) {
        let cols = width.min(n - start);
        let h = heights[start..start + cols].iter().copied().max().unwrap_or(0);
        if h == 0 {
            continue;
        }
        for j in 0..cols {
            let weight = w[start + j];
            for (out, v) in block.column_mut(j).rows_mut(0, h).iter_mut().zip(p.column(start + j).rows(0, h).iter()) {
                *out = v * weight;
            }
        }
        matmul(
            faer_mut(&mut c).submatrix_mut(0, 0, h, h),
            BlockStructure::TriangularLower,
            faer::Accum::Add,
            faer_ref(&block).submatrix(0, 0, h, cols),
            BlockStructure::Rectangular,
            faer_ref(p).submatrix(0, start, h, cols).transpose(),
            BlockStructure::Rectangular,
            1.0,
            par,
        );
    }
    clear_upper_simd_state(par != faer::Par::Seq);
    for j in 0..r {
        for i in 0..j {
            c[(i, j)] = c[(j, i)];
        }
    }
    c
}

/// Columns per block of [`weighted_gram`].
pub const WEIGHTED_GRAM_BLOCK: usize = 8192;

/// Columns per block of [`weighted_gram`] where some columns end above the
/// last row (128: 5.0 ms at r = n = 1000 for a triangular `P`, against 5.5 ms
/// for 64 and 5.6 ms for 256; 36 ms at 2000 for 128 and 256, 41 ms for 64).
pub const WEIGHTED_GRAM_TRIANGULAR_BLOCK: usize = 128;

/// `Phi^T Phi` for a tall Phi (n x d, n >> d): partial Grams of row blocks
/// are computed in parallel and summed, which keeps both cores busy where a
/// single product with a d x d output has too little parallelism.
pub fn gram_tall<T: Real>(phi: &DMatrix<T>) -> DMatrix<T> {
    use rayon::prelude::*;
    const BLOCK: usize = 4096;
    let (n, d) = phi.shape();
    if n <= BLOCK {
        return matmul_tn(phi, phi);
    }
    let starts: Vec<usize> = (0..n).step_by(BLOCK).collect();
    let zero = || DMatrix::<T>::zeros(d, d);
    let g = starts
        .par_iter()
        .map(|&r0| {
            let rows = BLOCK.min(n - r0);
            let view = faer_ref(phi).subrows(r0, rows);
            let mut part = zero();
            T::faer_matmul_seq(faer_mut(&mut part), view.transpose(), view);
            part
        })
        .reduce(zero, |a, b| a + b);
    clear_upper_simd_state(true);
    g
}

/// `C += A B` in place (A: n x k, B: k x m, C: n x m).
pub fn matmul_acc<T: Real>(c: &mut DMatrix<T>, a: &DMatrix<T>, b: &DMatrix<T>) {
    assert_eq!(a.ncols(), b.nrows(), "matmul_acc: inner dimensions");
    assert_eq!((c.nrows(), c.ncols()), (a.nrows(), b.ncols()), "matmul_acc: output shape");
    T::faer_matmul(faer_mut(c), true, faer_ref(a), faer_ref(b));
}
