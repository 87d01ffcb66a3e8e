//! Householder tridiagonalisation of a symmetric matrix, blocked as in
//! LAPACK's `dsytrd` (lower triangle), the back-transformation of
//! eigenvectors of the tridiagonal matrix, and the eigenproblem of the
//! symmetric tridiagonal matrix itself.
//!
//! `A = Q T Q^T` with `Q = H_0 H_1 ... H_{n-2}`, `H_c = I - tau_c v_c v_c^T`,
//! `v_c` zero above row `c + 1` and one there. Columns are reduced in panels
//! of [`PANEL`]: within a panel, column `c` is brought up to date from the
//! panel's earlier reflectors, its reflector is generated, and
//! `w_c = y - (tau_c / 2) (y^T v_c) v_c`, `y = tau_c (A22 - V W^T - W V^T) v_c`,
//! is formed with one symmetric matrix-vector product `A22 v_c` over the
//! trailing lower triangle (read once, never written). After the panel the
//! trailing matrix takes the rank-`2 PANEL` update `A22 -= V W^T + W V^T`
//! as one product `[V W] [W V]^T` on the lower triangle.
//!
//! On `p` threads the trailing triangle is split into `p` column ranges of
//! equal area, and thread `j` owns range `j` in every product and update
//! (a team: the caller and `p - 1` helpers that spin between jobs, as
//! OpenBLAS's threads do). A level-2 product lasts less than waking a
//! sleeping pool thread, and a fixed owner keeps its columns in its own
//! cache from one product to the next (see BENCHMARKS.md). faer's
//! tridiagonalisation instead reads and writes the whole trailing triangle
//! for every column (a fused rank-2 update and product), twice the memory
//! traffic of this scheme (see BENCHMARKS.md).
//!
//! The input is scaled by its largest entry first, so a reflector's entries
//! `x_i / (alpha - beta)` are at most one in magnitude and nothing overflows.
//!
//! Here: [`Tridiagonalisation`] (the reduction's entry point and the
//! back-transformation `Q Z`) and the helpers the submodules share.
//! Submodules: `reduction` (one panel of the blocked reduction and the
//! symmetric product over the trailing triangle), `team` (the thread team
//! the products run on), `simd` (the four-column product kernels, plain,
//! AVX2 and AVX-512, and their run-time dispatch), `qr` (all eigenvalues of
//! `T`), `bisection` (Sturm counts, and the top eigenpairs by bisection and
//! inverse iteration).

mod bisection;
mod qr;
mod reduction;
mod simd;
mod team;

pub(crate) use bisection::{count_above, tridiagonal_top_k};
pub(crate) use qr::tridiagonal_eigenvalues;
use reduction::reduce_panel;
use team::{with_team, MAX_TEAM};

use faer::linalg::matmul::matmul;
use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::reborrow::{Reborrow, ReborrowMut};
use faer::{Accum, Mat, MatMut, MatRef, Par};

/// Columns per panel of the blocked reduction.
const PANEL: usize = 32;

/// Reflectors per block of the back-transformation: each block reads and
/// writes the rows of `Z` below it once per product, so wider blocks move
/// less memory (the triangle of zeros in `V` costs `BACK / n` extra flops).
const BACK: usize = 128;

/// Reflectors per block when at most [`NARROW_Z`] columns are
/// back-transformed (the top-k paths): `Z` then stays in cache, and each
/// block's factor `S` (from `V^T V`, `n^2 b` flops in all) costs as much
/// as the products with `Z` (`4 n^2 k`), so narrower blocks are cheaper
/// (see BENCHMARKS.md).
const BACK_NARROW: usize = 64;

/// The most columns of `Z` that take [`BACK_NARROW`] blocks.
const NARROW_Z: usize = 256;

/// Order from which the reduction runs on a [`Team`](team::Team) of all of rayon's
/// threads (and the products on their parts).
const PARALLEL_SYMV_ORDER: usize = 384;

/// `A = Q T Q^T` for a symmetric `A` scaled by `1 / scale`: the tridiagonal
/// `T` of the scaled matrix (`diag`, `offdiag`) and `Q` as Householder
/// reflectors.
pub(crate) struct Tridiagonalisation {
    n: usize,
    /// Diagonal of `T` (of the scaled matrix, see
    /// [`Tridiagonalisation::scale`]).
    pub diag: Vec<f64>,
    /// Subdiagonal of the scaled `T` (`n - 1` entries, `T[c + 1, c]`).
    pub offdiag: Vec<f64>,
    /// `A = scale * Q T Q^T`; the eigenvalues of `A` are `scale` times those
    /// of `T`.
    pub scale: f64,
    /// Column-major `n x n`: column `c` holds `v_c` at rows `c + 1 ..`
    /// (`v_c[c + 1] = 1` stored).
    reflectors: Vec<f64>,
    tau: Vec<f64>,
}

impl Tridiagonalisation {
    /// Reduces the lower triangle of the column-major `n x n` matrix `a`
    /// (finite entries; the upper triangle is not read).
    ///
    /// From order [`PARALLEL_SYMV_ORDER`], and when not called from a rayon
    /// worker (whose pool is busy with other work), on as many threads as
    /// rayon's pool has.
    pub(crate) fn new(a: MatRef<'_, f64>) -> Self {
        let threads = if a.nrows() >= PARALLEL_SYMV_ORDER && rayon::current_thread_index().is_none() { rayon::current_num_threads().clamp(1, MAX_TEAM) } else { 1 };
        Self::with_threads(a, threads)
    }

    /// [`Tridiagonalisation::new`] on a [`Team`](team::Team) of `threads` threads (one
    /// for a sequential reduction; below [`PARALLEL_SYMV_ORDER`] the
    /// products are sequential in any case).
    fn with_threads(a: MatRef<'_, f64>, threads: usize) -> Self {
        let n = a.nrows();
        assert_eq!(a.ncols(), n, "tridiagonalisation of a square matrix");
        // Not advised for huge pages (unlike `linalg::zeroed_output`): the
        // copy is read n times after its one write, so its faults are a
        // small part, and the advice made the first reduction in a process
        // wait on the kernel's page compaction.
        let mut w = vec![0.0f64; n * n];
        let mut largest = 0.0f64;
        for j in 0..n {
            let src = a.col(j).try_as_col_major().map(|c| c.as_slice()).unwrap_or(&[]);
            if src.len() == n {
                let dst = &mut w[j * n + j..(j + 1) * n];
                dst.copy_from_slice(&src[j..]);
                largest = dst.iter().fold(largest, |l, v| l.max(v.abs()));
            } else {
                for i in j..n {
                    w[j * n + i] = a[(i, j)];
                    largest = largest.max(a[(i, j)].abs());
                }
            }
        }
        let scale = if largest > 0.0 { largest } else { 1.0 };
        let inv = 1.0 / scale;
        for j in 0..n {
            w[j * n + j..(j + 1) * n].iter_mut().for_each(|v| *v *= inv);
        }
        let mut diag = vec![0.0; n];
        let mut offdiag = vec![0.0; n.saturating_sub(1)];
        let mut tau = vec![0.0; n.saturating_sub(1)];
        with_team(threads.clamp(1, MAX_TEAM), n, |team| {
            let mut k = 0;
            while k + 1 < n {
                let b = PANEL.min(n - 1 - k);
                reduce_panel(&mut w, n, k, b, &mut diag, &mut offdiag, &mut tau, team);
                k += b;
            }
        });
        if n > 0 {
            diag[n - 1] = w[(n - 1) * n + n - 1];
        }
        Tridiagonalisation { n, diag, offdiag, scale, reflectors: w, tau }
    }

    /// `Z <- Q Z` for `Z` with `n` rows (eigenvectors of `T` to those of
    /// `A`), blocked: each block of [`BACK`] reflectors ([`BACK_NARROW`]
    /// for at most [`NARROW_Z`] columns) applied as
    /// `I - V S V^T` (`S` upper triangular, LAPACK's `dlarft`) by three
    /// matrix products. With `par` the columns of `Z` are split between the
    /// threads and each applies the whole sequence to its columns with
    /// sequential products (as faer does: no synchronisation between the
    /// products, each thread's block of `Z` stays in its cache).
    pub(crate) fn apply_q(&self, z: MatMut<'_, f64>, par: Par) {
        let n = self.n;
        assert_eq!(z.nrows(), n, "apply_q: rows");
        if n < 2 || z.ncols() == 0 {
            return;
        }
        let reflector_count = n - 1;
        let back = if z.ncols() <= NARROW_Z { BACK_NARROW } else { BACK };
        // Each block: V (rows k + 1 .. n of reflectors k .. k + b, zeros
        // above the unit) and its factor S, built on all threads with `par`.
        let build = |&k: &usize| -> (usize, Mat<f64>, Mat<f64>) {
            let b = back.min(reflector_count - k);
            let rows = n - k - 1;
            let mut v = Mat::<f64>::zeros(rows, b);
            for i in 0..b {
                let src = &self.reflectors[(k + i) * n + k + 1 + i..(k + i + 1) * n];
                let mut col = v.col_mut(i);
                let dst = col.rb_mut().try_as_col_major_mut().expect("columns of a Mat are contiguous").as_slice_mut();
                dst[i..].copy_from_slice(src);
            }
            let s = block_reflector_factor(v.as_ref(), &self.tau[k..k + b]);
            (k, v, s)
        };
        let starts: Vec<usize> = (0..reflector_count).step_by(back).collect();
        let blocks: Vec<(usize, Mat<f64>, Mat<f64>)> = match par {
            Par::Seq => starts.iter().map(build).collect(),
            _ => {
                use rayon::prelude::*;
                starts.par_iter().map(build).collect()
            }
        };
        let threads = match par {
            Par::Seq => 1,
            _ => rayon::current_num_threads().max(1),
        };
        let chunk = z.ncols().div_ceil(threads).max(16);
        apply_blocks_to_columns(&blocks, z, chunk);
    }
}

/// The blocks of [`Tridiagonalisation::apply_q`], last first, on the columns
/// of `z`, split recursively (rayon) into pieces of at most `chunk` columns.
fn apply_blocks_to_columns(blocks: &[(usize, Mat<f64>, Mat<f64>)], mut z: MatMut<'_, f64>, chunk: usize) {
    let cols = z.ncols();
    if cols > chunk {
        let half = cols / 2;
        let (left, right) = z.split_at_col_mut(half);
        rayon::join(|| apply_blocks_to_columns(blocks, left, chunk), || apply_blocks_to_columns(blocks, right, chunk));
        return;
    }
    let back = blocks.iter().map(|(_, v, _)| v.ncols()).max().unwrap_or(0);
    let mut vtz = Mat::<f64>::zeros(back, cols);
    let mut svtz = Mat::<f64>::zeros(back, cols);
    for (k, v, s) in blocks.iter().rev() {
        let (rows, b) = v.shape();
        let mut zk = z.rb_mut().subrows_mut(k + 1, rows);
        let mut vtz = vtz.as_mut().subrows_mut(0, b);
        let mut svtz = svtz.as_mut().subrows_mut(0, b);
        matmul(vtz.rb_mut(), Accum::Replace, v.as_ref().transpose(), zk.rb(), 1.0, Par::Seq);
        triangular::matmul(svtz.rb_mut(), BlockStructure::Rectangular, Accum::Replace, s.as_ref(), BlockStructure::TriangularUpper, vtz.rb(), BlockStructure::Rectangular, 1.0, Par::Seq);
        matmul(zk.rb_mut(), Accum::Add, v.as_ref(), svtz.rb(), -1.0, Par::Seq);
    }
}

/// Upper triangular `S` with `H_0 ... H_{b-1} = I - V S V^T` (forward,
/// column-wise, as LAPACK's `dlarft`): `S[i, i] = tau_i`,
/// `S[0..i, i] = -tau_i S[0..i, 0..i] V[:, 0..i]^T v_i`.
fn block_reflector_factor(v: MatRef<'_, f64>, tau: &[f64]) -> Mat<f64> {
    let b = tau.len();
    let mut s = Mat::<f64>::zeros(b, b);
    let mut vtv = Mat::<f64>::zeros(b, b);
    matmul(vtv.as_mut(), Accum::Replace, v.transpose(), v, 1.0, Par::Seq);
    for i in 0..b {
        s[(i, i)] = tau[i];
        for r in 0..i {
            let mut acc = 0.0;
            for q in r..i {
                acc += s[(r, q)] * vtv[(q, i)];
            }
            s[(r, i)] = -tau[i] * acc;
        }
    }
    s
}

/// `||x||_2` without overflow or premature underflow (scaled by the largest
/// magnitude).
fn scaled_norm(x: &[f64]) -> f64 {
    let largest = x.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    if largest == 0.0 {
        return 0.0;
    }
    let mut sum = 0.0;
    for v in x {
        let s = v / largest;
        sum += s * s;
    }
    largest * sum.sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// A random symmetric matrix with entries in (-2, 2), replayed by `seed`.
    pub(super) fn random_symmetric(n: usize, seed: u64) -> Mat<f64> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let b = Mat::<f64>::from_fn(n, n, |_, _| rng.random_range(-1.0..1.0));
        Mat::from_fn(n, n, |i, j| b[(i, j)] + b[(j, i)])
    }

    /// `scale * Q T Q^T` reproduces `A` and `Q` is orthogonal, to 1e-13
    /// relative, across panel boundaries and the parallel product.
    #[test]
    fn tridiagonalisation_reproduces_the_matrix() {
        for (n, seed) in [(1usize, 1u64), (2, 2), (3, 3), (31, 4), (33, 5), (65, 6), (130, 7), (450, 8)] {
            let a = random_symmetric(n, seed);
            check_reconstruction(&a, &Tridiagonalisation::new(a.as_ref()));
        }
        // The team's split products and updates on 2, 3 and 5 threads
        // (below PARALLEL_SYMV_ORDER only the updates are split).
        for (n, threads) in [(100usize, 3usize), (400, 2), (520, 3), (700, 5)] {
            let a = random_symmetric(n, 40 + threads as u64);
            check_reconstruction(&a, &Tridiagonalisation::with_threads(a.as_ref(), threads));
        }
    }

    /// `scale Q T Q^T = A` and `Q^T Q = I` to 1e-13.
    fn check_reconstruction(a: &Mat<f64>, t: &Tridiagonalisation) {
        let n = a.nrows();
        let mut q = Mat::<f64>::identity(n, n);
        t.apply_q(q.as_mut(), Par::Seq);
        let tm = Mat::<f64>::from_fn(n, n, |i, j| {
            if i == j {
                t.diag[i]
            } else if i == j + 1 {
                t.offdiag[j]
            } else if j == i + 1 {
                t.offdiag[i]
            } else {
                0.0
            }
        });
        let back = &q * &tm * q.transpose() * faer::Scale(t.scale);
        let err = (&back - a).norm_l2() / a.norm_l2().max(1e-300);
        assert!(err < 1e-13, "n {n}: reconstruction {err:e}");
        let orth = (q.transpose() * &q - Mat::<f64>::identity(n, n)).norm_l2();
        assert!(orth < 1e-13 * (n as f64).sqrt().max(1.0), "n {n}: orthogonality {orth:e}");
    }

    #[test]
    fn tridiagonalisation_of_zero_and_diagonal_matrices() {
        let z = Mat::<f64>::zeros(40, 40);
        let t = Tridiagonalisation::new(z.as_ref());
        assert!(t.diag.iter().chain(&t.offdiag).all(|&v| v == 0.0));
        let d = Mat::<f64>::from_fn(40, 40, |i, j| if i == j { i as f64 - 7.0 } else { 0.0 });
        let t = Tridiagonalisation::new(d.as_ref());
        for i in 0..40 {
            assert_eq!(t.diag[i] * t.scale, i as f64 - 7.0);
        }
        assert!(t.offdiag.iter().all(|&v| v == 0.0));
    }
}
