//! Householder tridiagonalisation of a symmetric matrix, blocked as in
//! LAPACK's `dsytrd` (lower triangle), and the back-transformation of
//! eigenvectors of the tridiagonal matrix.
//!
//! `A = Q T Q^T` with `Q = H_0 H_1 ... H_{n-2}`, `H_c = I - tau_c v_c v_c^T`,
//! `v_c` zero above row `c + 1` and one there. Columns are reduced in panels
//! of [`PANEL`]: within a panel, column `c` is brought up to date from the
//! panel's earlier reflectors, its reflector is generated, and
//! `w_c = y - (tau_c / 2) (y^T v_c) v_c`, `y = tau_c (A22 - V W^T - W V^T) v_c`,
//! is formed with one symmetric matrix-vector product `A22 v_c` over the
//! trailing lower triangle (read once, never written). After the panel the
//! trailing matrix takes the rank-`2 PANEL` update `A22 -= V W^T + W V^T`
//! as two triangular matrix products. faer's tridiagonalisation instead
//! reads and writes the whole trailing triangle for every column (a fused
//! rank-2 update and product), twice the memory traffic of this scheme
//! (1.4-1.6x its time at n = 1536 and 3600, BENCHMARKS.md, issue 17).
//!
//! The input is scaled by its largest entry first, so a reflector's entries
//! `x_i / (alpha - beta)` are at most one in magnitude and nothing overflows.

use faer::linalg::matmul::matmul;
use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::reborrow::{Reborrow, ReborrowMut};
use faer::{Accum, Mat, MatMut, MatRef, Par};

/// Columns per panel of the blocked reduction.
pub(crate) const PANEL: usize = 32;

/// Reflectors per block of the back-transformation: each block reads and
/// writes the rows of `Z` below it once per product, so wider blocks move
/// less memory (the triangle of zeros in `V` costs `BACK / n` extra flops).
const BACK: usize = 128;

/// Order from which the symmetric matrix-vector product runs on all threads.
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
    pub(crate) fn new(a: MatRef<'_, f64>) -> Self {
        let n = a.nrows();
        assert_eq!(a.ncols(), n, "tridiagonalisation of a square matrix");
        let mut largest = 0.0f64;
        for j in 0..n {
            for i in j..n {
                largest = largest.max(a[(i, j)].abs());
            }
        }
        let scale = if largest > 0.0 { largest } else { 1.0 };
        let mut w = vec![0.0f64; n * n];
        for j in 0..n {
            for i in j..n {
                w[j * n + i] = a[(i, j)] / scale;
            }
        }
        let mut diag = vec![0.0; n];
        let mut offdiag = vec![0.0; n.saturating_sub(1)];
        let mut tau = vec![0.0; n.saturating_sub(1)];
        let mut k = 0;
        while k + 1 < n {
            let b = PANEL.min(n - 1 - k);
            reduce_panel(&mut w, n, k, b, &mut diag, &mut offdiag, &mut tau);
            k += b;
        }
        if n > 0 {
            diag[n - 1] = w[(n - 1) * n + n - 1];
        }
        Tridiagonalisation { n, diag, offdiag, scale, reflectors: w, tau }
    }

    /// `Z <- Q Z` for `Z` with `n` rows (eigenvectors of `T` to those of
    /// `A`), blocked: each block of [`BACK`] reflectors applied as
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
        let mut blocks = Vec::new();
        let mut k = 0;
        while k < reflector_count {
            let b = BACK.min(reflector_count - k);
            let rows = n - k - 1;
            // V: rows k + 1 .. n of reflectors k .. k + b, zeros above the unit.
            let v = Mat::<f64>::from_fn(rows, b, |r, i| if r >= i { self.reflectors[(k + i) * n + k + 1 + r] } else { 0.0 });
            let s = block_reflector_factor(v.as_ref(), &self.tau[k..k + b]);
            blocks.push((k, v, s));
            k += BACK;
        }
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
    let mut vtz = Mat::<f64>::zeros(BACK, cols);
    let mut svtz = Mat::<f64>::zeros(BACK, cols);
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

/// Reduces columns `k .. k + b` of the working matrix `w` (column-major,
/// order `n`, lower triangle) and applies the panel's update to the
/// trailing lower triangle (LAPACK's `dlatrd` followed by `dsyr2k`).
fn reduce_panel(w: &mut [f64], n: usize, k: usize, b: usize, diag: &mut [f64], offdiag: &mut [f64], tau: &mut [f64]) {
    let rows = n - k;
    // Row r of the panel matrices is global row k + r.
    let mut vp = Mat::<f64>::zeros(rows, b);
    let mut wp = Mat::<f64>::zeros(rows, b);
    let mut t1 = Mat::<f64>::zeros(b, 1);
    let mut t2 = Mat::<f64>::zeros(b, 1);
    let mut y = vec![0.0f64; n];
    for i in 0..b {
        let c = k + i;
        let r0 = c - k;
        // Column c, rows c .. n, brought up to date with the panel so far.
        if i > 0 {
            let mut col = MatMut::from_column_major_slice_mut(&mut w[c * n + c..(c + 1) * n], n - c, 1);
            matmul(col.rb_mut(), Accum::Add, vp.as_ref().submatrix(r0, 0, n - c, i), wp.as_ref().submatrix(r0, 0, 1, i).transpose(), -1.0, Par::Seq);
            matmul(col.rb_mut(), Accum::Add, wp.as_ref().submatrix(r0, 0, n - c, i), vp.as_ref().submatrix(r0, 0, 1, i).transpose(), -1.0, Par::Seq);
        }
        diag[c] = w[c * n + c];
        // Reflector annihilating rows c + 2 .. n of column c.
        let m = n - c - 1;
        let x = &mut w[c * n + c + 1..(c + 1) * n];
        let (beta, t) = householder_in_place(x);
        offdiag[c] = beta;
        tau[c] = t;
        for r in 0..m {
            vp[(r0 + 1 + r, i)] = x[r];
        }
        if t == 0.0 {
            continue;
        }
        // w_c = tau (A22 v - V (W^T v) - W (V^T v)), then the rank-one fix.
        let v: Vec<f64> = x.to_vec();
        let yc = &mut y[..m];
        symv_lower(w, n, c + 1, m, &v, yc);
        let vcol = MatRef::from_column_major_slice(&v, m, 1);
        if i > 0 {
            let vpi = vp.as_ref().submatrix(r0 + 1, 0, m, i);
            let wpi = wp.as_ref().submatrix(r0 + 1, 0, m, i);
            matmul(t1.as_mut().submatrix_mut(0, 0, i, 1), Accum::Replace, wpi.transpose(), vcol, 1.0, Par::Seq);
            matmul(t2.as_mut().submatrix_mut(0, 0, i, 1), Accum::Replace, vpi.transpose(), vcol, 1.0, Par::Seq);
            let mut ycol = MatMut::from_column_major_slice_mut(yc, m, 1);
            matmul(ycol.rb_mut(), Accum::Add, vpi, t1.as_ref().submatrix(0, 0, i, 1), -1.0, Par::Seq);
            matmul(ycol.rb_mut(), Accum::Add, wpi, t2.as_ref().submatrix(0, 0, i, 1), -1.0, Par::Seq);
        }
        let mut dot = 0.0;
        for r in 0..m {
            yc[r] *= t;
            dot += yc[r] * v[r];
        }
        let alpha = -0.5 * t * dot;
        for r in 0..m {
            wp[(r0 + 1 + r, i)] = yc[r] + alpha * v[r];
        }
    }
    // Trailing update A[k + b .., k + b ..] -= V W^T + W V^T (lower).
    let start = k + b;
    if start < n {
        let t = n - start;
        let mut trailing = MatMut::from_column_major_slice_with_stride_mut(&mut w[start * n + start..], t, t, n);
        let v2 = vp.as_ref().submatrix(b, 0, t, b);
        let w2 = wp.as_ref().submatrix(b, 0, t, b);
        let par = if t >= 256 { Par::rayon(0) } else { Par::Seq };
        triangular::matmul(trailing.rb_mut(), BlockStructure::TriangularLower, Accum::Add, v2, BlockStructure::Rectangular, w2.transpose(), BlockStructure::Rectangular, -1.0, par);
        triangular::matmul(trailing.rb_mut(), BlockStructure::TriangularLower, Accum::Add, w2, BlockStructure::Rectangular, v2.transpose(), BlockStructure::Rectangular, -1.0, par);
        super::clear_upper_simd_state(par != Par::Seq);
    }
}


/// LAPACK's `dlarfg` on `x = [alpha, x_1 ..]`: `H x = [beta, 0 ..]` with
/// `H = I - tau v v^T`, `v = [1, x_1 / (alpha - beta), ..]` written into `x`.
/// Returns `(beta, tau)`; `tau = 0` (and `beta = alpha`) when `x_1 .. = 0`.
/// Entries are at most one in magnitude (the matrix is scaled), so
/// `|x_i / (alpha - beta)| <= 1`.
fn householder_in_place(x: &mut [f64]) -> (f64, f64) {
    let alpha = x[0];
    let tail_norm = scaled_norm(&x[1..]);
    if tail_norm == 0.0 {
        x[0] = 1.0;
        return (alpha, 0.0);
    }
    // `signum(+0) = 1`, so a zero `alpha` gives `beta = -||x_1..||`.
    let beta = -alpha.signum() * alpha.hypot(tail_norm);
    let tau = (beta - alpha) / beta;
    let denom = alpha - beta;
    for v in &mut x[1..] {
        *v /= denom;
    }
    x[0] = 1.0;
    (beta, tau)
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

/// `y = A22 v` for the trailing block `A22 = w[off.., off..]` (order `m`),
/// reading its lower triangle once: column `s` adds `A22[s, s] v_s` plus its
/// dot with `v` below the diagonal to `y_s`, and `v_s` times itself to
/// `y` below. Columns are split between threads in chunks of equal area,
/// each with its own accumulator.
fn symv_lower(w: &[f64], n: usize, off: usize, m: usize, v: &[f64], y: &mut [f64]) {
    let threads = rayon::current_num_threads().max(1);
    if m < PARALLEL_SYMV_ORDER || threads == 1 {
        y.iter_mut().for_each(|e| *e = 0.0);
        symv_columns(w, n, off, m, 0, m, v, y);
        return;
    }
    // Column boundaries with equal shares of the triangle's m (m + 1) / 2 entries.
    let total = (m * (m + 1) / 2) as f64;
    let mut bounds = vec![0usize];
    let mut s = 0usize;
    let mut done = 0.0f64;
    for p in 1..threads {
        let target = total * p as f64 / threads as f64;
        while s < m && done < target {
            done += (m - s) as f64;
            s += 1;
        }
        bounds.push(s);
    }
    bounds.push(m);
    let parts: Vec<Vec<f64>> = {
        use rayon::prelude::*;
        (0..threads)
            .into_par_iter()
            .map(|p| {
                let mut part = vec![0.0f64; m];
                symv_columns(w, n, off, m, bounds[p], bounds[p + 1], v, &mut part);
                part
            })
            .collect()
    };
    y.copy_from_slice(&parts[0]);
    for part in &parts[1..] {
        for (a, b) in y.iter_mut().zip(part) {
            *a += b;
        }
    }
}

/// The body of [`symv_columns`] with `$madd(a, b, c) = a b + c`, fused or
/// not.
macro_rules! symv_columns_body {
    ($madd:ident, $w:ident, $n:ident, $off:ident, $m:ident, $s0:ident, $s1:ident, $v:ident, $y:ident) => {{
        let (w, n, off, m, s0, s1, v, y) = ($w, $n, $off, $m, $s0, $s1, $v, $y);
        const C: usize = 4;
        let mut s = s0;
        while s < s1 {
            let cols = C.min(s1 - s);
            // The head: rows s .. s + cols of the `cols` columns (their small
            // lower triangle), entry by entry.
            for j in 0..cols {
                let base = (off + s + j) * n + off;
                let vj = v[s + j];
                let mut acc = w[base + s + j] * vj;
                for r in s + j + 1..(s + cols).min(m) {
                    let a = w[base + r];
                    acc += a * v[r];
                    y[r] += vj * a;
                }
                y[s + j] += acc;
            }
            let shared = s + cols;
            if shared < m && cols == C {
                let col = |j: usize| {
                    let base = (off + s + j) * n + off;
                    &w[base + shared..base + m]
                };
                let (c0, c1, c2, c3) = (col(0), col(1), col(2), col(3));
                let (v0, v1, v2, v3) = (v[s], v[s + 1], v[s + 2], v[s + 3]);
                let vt = &v[shared..m];
                let (yhead, yt) = y.split_at_mut(shared);
                let mut acc = [[0.0f64; 8]; C];
                let mut i0 = c0.chunks_exact(8);
                let mut i1 = c1.chunks_exact(8);
                let mut i2 = c2.chunks_exact(8);
                let mut i3 = c3.chunks_exact(8);
                let mut iv = vt.chunks_exact(8);
                let mut iy = yt.chunks_exact_mut(8);
                for (((((a0, a1), a2), a3), x8), y8) in (&mut i0).zip(&mut i1).zip(&mut i2).zip(&mut i3).zip(&mut iv).zip(&mut iy) {
                    for l in 0..8 {
                        acc[0][l] = $madd(a0[l], x8[l], acc[0][l]);
                        acc[1][l] = $madd(a1[l], x8[l], acc[1][l]);
                        acc[2][l] = $madd(a2[l], x8[l], acc[2][l]);
                        acc[3][l] = $madd(a3[l], x8[l], acc[3][l]);
                        y8[l] = $madd(v3, a3[l], $madd(v2, a2[l], $madd(v1, a1[l], $madd(v0, a0[l], y8[l]))));
                    }
                }
                let mut tails = [0.0f64; C];
                let rem = i0.remainder().len();
                let (r0, r1, r2, r3) = (i0.remainder(), i1.remainder(), i2.remainder(), i3.remainder());
                let (rv, ry) = (iv.remainder(), iy.into_remainder());
                for q in 0..rem {
                    tails[0] += r0[q] * rv[q];
                    tails[1] += r1[q] * rv[q];
                    tails[2] += r2[q] * rv[q];
                    tails[3] += r3[q] * rv[q];
                    ry[q] += (v0 * r0[q] + v1 * r1[q]) + (v2 * r2[q] + v3 * r3[q]);
                }
                for j in 0..C {
                    let a = &acc[j];
                    yhead[s + j] += ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])) + tails[j];
                }
            } else if shared < m {
                // Fewer than four columns left in this range: one at a time.
                for j in 0..cols {
                    let base = (off + s + j) * n + off;
                    let vj = v[s + j];
                    let mut dot = 0.0;
                    for r in shared..m {
                        let a = w[base + r];
                        dot += a * v[r];
                        y[r] += vj * a;
                    }
                    y[s + j] += dot;
                }
            }
            s += cols;
        }
    }};
}

#[inline(always)]
fn fused(a: f64, b: f64, c: f64) -> f64 {
    a.mul_add(b, c)
}

#[inline(always)]
fn unfused(a: f64, b: f64, c: f64) -> f64 {
    a * b + c
}

/// Columns `s0 .. s1` of [`symv_lower`] accumulated into `y` (length `m`),
/// four columns per pass so that `v` and `y` are streamed once for the
/// four. On x86-64 with AVX-512F or AVX2 + FMA (detected at run time) in
/// fused multiply-adds, which halve the arithmetic instructions (the pass
/// was bound by them, not by memory, without FMA); elsewhere unfused, so the
/// results differ between machines by rounding only.
#[allow(clippy::too_many_arguments)]
fn symv_columns(w: &[f64], n: usize, off: usize, m: usize, s0: usize, s1: usize, v: &[f64], y: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,fma")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn wide(w: &[f64], n: usize, off: usize, m: usize, s0: usize, s1: usize, v: &[f64], y: &mut [f64]) {
            symv_columns_body!(fused, w, n, off, m, s0, s1, v, y)
        }
        #[target_feature(enable = "avx2,fma")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn mid(w: &[f64], n: usize, off: usize, m: usize, s0: usize, s1: usize, v: &[f64], y: &mut [f64]) {
            symv_columns_body!(fused, w, n, off, m, s0, s1, v, y)
        }
        if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the features were detected at run time.
            return unsafe { wide(w, n, off, m, s0, s1, v, y) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: as above.
            return unsafe { mid(w, n, off, m, s0, s1, v, y) };
        }
    }
    symv_columns_body!(unfused, w, n, off, m, s0, s1, v, y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn random_symmetric(n: usize, seed: u64) -> Mat<f64> {
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
            let t = Tridiagonalisation::new(a.as_ref());
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
            let err = (&back - &a).norm_l2() / a.norm_l2().max(1e-300);
            assert!(err < 1e-13, "n {n}: reconstruction {err:e}");
            let orth = (q.transpose() * &q - Mat::<f64>::identity(n, n)).norm_l2();
            assert!(orth < 1e-13 * (n as f64).sqrt().max(1.0), "n {n}: orthogonality {orth:e}");
        }
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

    #[test]
    fn parallel_product_matches_the_sequential_one() {
        let n = 900;
        let a = random_symmetric(n, 11);
        let w: Vec<f64> = (0..n * n).map(|idx| a[(idx % n, idx / n)]).collect();
        let mut rng = rand::rngs::StdRng::seed_from_u64(12);
        let v: Vec<f64> = (0..n - 3).map(|_| rng.random_range(-1.0..1.0)).collect();
        let mut y_par = vec![0.0; n - 3];
        symv_lower(&w, n, 3, n - 3, &v, &mut y_par);
        let sub = a.as_ref().submatrix(3, 3, n - 3, n - 3);
        let y_ref = sub * MatRef::from_column_major_slice(&v, n - 3, 1);
        for i in 0..n - 3 {
            assert!((y_par[i] - y_ref[(i, 0)]).abs() < 1e-12 * (n as f64), "row {i}");
        }
    }
}
