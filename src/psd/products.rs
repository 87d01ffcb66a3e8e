//! The host `O(n r^2)` products of the PSD dual engine ([`super::engine`]),
//! most of a large fit's time:
//!
//! - the model values `f_A(x_i) = ||V^T p_i||^2` for `A = V V^T` (Eq. 11),
//!   or `p_i^T A p_i` for a dense `A` (the polar route of [`super::polar`]);
//! - the Nystrom features `T K(Z, X)` with a lower-triangular `T = L^{-1}`.
//!
//! (`M`'s data term `P diag(w) P^T`, Eq. 10, is [`crate::linalg::weighted_gram`]:
//! lower triangle, blocked, faer's parallel product; `repro/examples/psd_products.rs`
//! times it against a per-job variant.)
//!
//! Both are blocked over the `n` columns (samples) and run the blocks on
//! the rayon pool, one sequential faer product per block with its own
//! buffer: the columns are independent, so both cores stay busy without the
//! fork-join of a parallel product per block, and no `k x n` intermediate is
//! formed (at k = r = 1000 that was 8 bytes x k x n written and read per
//! model evaluation: 1.6 GB at n = 2 x 10^5, 8 GB at n = 10^6, as much as
//! the features themselves).

use faer::linalg::matmul::triangular::{self as tri, BlockStructure};
use faer::{Accum, Par};
use nalgebra::{DMatrix, DVector};
use rayon::prelude::*;

use crate::linalg::{self, faer_mut, faer_ref};

/// Columns (samples) per block: a block of `P` at r = 1000 is 8 MB.
pub const BLOCK_COLUMNS: usize = 1024;

/// Below this many multiply-adds a product runs on the calling thread.
const PARALLEL_WORK: usize = 64 * 64 * 64;

/// `||V^T p_i||^2` for every column `p_i` of `P` (P: r x n, V: r x k): the
/// model values `p_i^T V V^T p_i`, block by block, without the `k x n`
/// product.
///
/// Panics only on `v.nrows() != p.nrows()` (callers check the shapes).
pub fn projected_norms(p: &DMatrix<f64>, v: &DMatrix<f64>) -> DVector<f64> {
    assert_eq!(p.nrows(), v.nrows(), "projected_norms: V has one row per feature");
    column_values(p, faer_ref(v).transpose(), |g, _| g.norm_squared())
}

/// `p_i^T A p_i` for every column `p_i` of `P` (P: r x n, A: r x r), block
/// by block as [`projected_norms`] (`A P` of one block, then the column
/// dots), without the `r x n` product.
///
/// Panics only on a non-square `a` or `a.nrows() != p.nrows()` (callers check the shapes).
pub fn quadratic_forms(p: &DMatrix<f64>, a: &DMatrix<f64>) -> DVector<f64> {
    assert!(a.nrows() == p.nrows() && a.ncols() == p.nrows(), "quadratic_forms: A is r x r for P of r rows");
    column_values(p, faer_ref(a), |g, p_i| g.dot(&p_i))
}

/// `value(M p_i, p_i)` for every column `p_i` of `P`: `M P` formed
/// [`BLOCK_COLUMNS`] columns at a time (in parallel above
/// [`PARALLEL_WORK`]), never whole.
fn column_values(p: &DMatrix<f64>, m: faer::MatRef<'_, f64>, value: impl Fn(nalgebra::DVectorView<'_, f64>, nalgebra::DVectorView<'_, f64>) -> f64 + Sync) -> DVector<f64> {
    let (r, n) = p.shape();
    let k = m.nrows();
    let mut out = vec![0.0; n];
    if k == 0 || r == 0 {
        return DVector::from_vec(out);
    }
    let width = BLOCK_COLUMNS.min(n);
    let block = |g: &mut DMatrix<f64>, (b, chunk): (usize, &mut [f64])| {
        let start = b * BLOCK_COLUMNS;
        let cols = chunk.len();
        f64_matmul_seq(faer_mut(g).subcols_mut(0, cols), m, faer_ref(p).subcols(start, cols));
        for (j, o) in chunk.iter_mut().enumerate() {
            *o = value(g.column(j), p.column(start + j));
        }
    };
    if r * k * n < PARALLEL_WORK {
        let mut g = DMatrix::zeros(k, width);
        out.chunks_mut(BLOCK_COLUMNS).enumerate().for_each(|item| block(&mut g, item));
    } else {
        out.par_chunks_mut(BLOCK_COLUMNS).enumerate().for_each_init(|| DMatrix::zeros(k, width), |g, item| block(g, item));
        linalg::clear_upper_simd_state(true);
    }
    DVector::from_vec(out)
}

/// `T K^T` for a lower-triangular `T` (r x r; the entries above the
/// diagonal are not read) and `K` (n x r): the Nystrom features
/// `L^{-1} K(Z, X)` of the Cholesky case ([`super::features`]), block by
/// block over the rows of `K`, with half the flops of a full product.
///
/// Panics only on `k.ncols() != t.ncols()` or a non-square `t` (callers check the shapes).
pub fn lower_triangular_times_transpose(t: &DMatrix<f64>, k: &DMatrix<f64>) -> DMatrix<f64> {
    assert_eq!(t.nrows(), t.ncols(), "lower_triangular_times_transpose: square T");
    assert_eq!(t.ncols(), k.ncols(), "lower_triangular_times_transpose: inner dimensions");
    let r = t.nrows();
    let n = k.nrows();
    let mut out = DMatrix::<f64>::zeros(r, n);
    let block = |(b, chunk): (usize, &mut [f64])| {
        let start = b * BLOCK_COLUMNS;
        let cols = chunk.len() / r.max(1);
        let dst = faer::MatMut::from_column_major_slice_mut(chunk, r, cols);
        tri::matmul(
            dst,
            BlockStructure::Rectangular,
            Accum::Replace,
            faer_ref(t),
            BlockStructure::TriangularLower,
            faer_ref(k).subrows(start, cols).transpose(),
            BlockStructure::Rectangular,
            1.0,
            Par::Seq,
        );
    };
    if r == 0 || n == 0 {
        return out;
    }
    let chunk = BLOCK_COLUMNS * r;
    if r * r * n < PARALLEL_WORK {
        out.as_mut_slice().chunks_mut(chunk).enumerate().for_each(block);
    } else {
        out.as_mut_slice().par_chunks_mut(chunk).enumerate().for_each(block);
        linalg::clear_upper_simd_state(true);
    }
    out
}

fn f64_matmul_seq(dst: faer::MatMut<'_, f64>, lhs: faer::MatRef<'_, f64>, rhs: faer::MatRef<'_, f64>) {
    faer::linalg::matmul::matmul(dst, Accum::Replace, lhs, rhs, 1.0, Par::Seq);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    fn random(rows: usize, cols: usize, rng: &mut StdRng) -> DMatrix<f64> {
        DMatrix::from_fn(rows, cols, |_, _| rng.random::<f64>() - 0.5)
    }

    fn rel(a: &DMatrix<f64>, b: &DMatrix<f64>) -> f64 {
        (a - b).norm() / b.norm().max(f64::MIN_POSITIVE)
    }

    // Sizes on both sides of the parallel threshold and of a block boundary.
    const SIZES: [(usize, usize); 4] = [(3, 5), (17, 1024), (40, 2500), (70, 3 * BLOCK_COLUMNS + 1)];

    #[test]
    fn projected_norms_match_the_plain_product() {
        let mut rng = StdRng::seed_from_u64(12);
        for (r, n) in SIZES {
            for k in [0, 1, r / 2 + 1] {
                let p = random(r, n, &mut rng);
                let v = random(r, k, &mut rng);
                let g = v.transpose() * &p;
                let plain = DMatrix::from_fn(n, 1, |j, _| g.column(j).norm_squared());
                let fast = DMatrix::from_column_slice(n, 1, projected_norms(&p, &v).as_slice());
                if k == 0 {
                    assert_eq!(fast, DMatrix::zeros(n, 1));
                } else {
                    assert!(rel(&fast, &plain) < 1e-13, "r {r} n {n} k {k}: {}", rel(&fast, &plain));
                }
            }
        }
    }

    #[test]
    fn quadratic_forms_match_the_plain_product() {
        let mut rng = StdRng::seed_from_u64(14);
        for (r, n) in SIZES {
            let p = random(r, n, &mut rng);
            let a = random(r, r, &mut rng);
            let ap = &a * &p;
            let plain = DMatrix::from_fn(n, 1, |j, _| ap.column(j).dot(&p.column(j)));
            let fast = DMatrix::from_column_slice(n, 1, quadratic_forms(&p, &a).as_slice());
            assert!(rel(&fast, &plain) < 1e-13, "r {r} n {n}: {}", rel(&fast, &plain));
        }
    }

    #[test]
    fn triangular_product_matches_the_plain_product_and_ignores_the_upper_triangle() {
        let mut rng = StdRng::seed_from_u64(13);
        for (r, n) in SIZES {
            let full = random(r, r, &mut rng);
            let lower = DMatrix::from_fn(r, r, |i, j| if j <= i { full[(i, j)] } else { 0.0 });
            let k = random(n, r, &mut rng);
            let plain = &lower * k.transpose();
            // The upper triangle of `full` is garbage the product must not read.
            let fast = lower_triangular_times_transpose(&full, &k);
            assert!(rel(&fast, &plain) < 1e-13, "r {r} n {n}: {}", rel(&fast, &plain));
        }
    }
}
