//! One panel of the blocked reduction to tridiagonal form (LAPACK's
//! `dlatrd` followed by `dsyr2k`; see the parent module for the scheme) and
//! the symmetric product `A22 v` over the trailing lower triangle that each
//! column of a panel needs, split between the threads of a [`Team`].

use super::simd::symv_columns;
use super::team::Team;
use super::{scaled_norm, PARALLEL_SYMV_ORDER};
use faer::linalg::matmul::matmul;
use faer::linalg::matmul::triangular::{self, BlockStructure};
use faer::reborrow::ReborrowMut;
use faer::{Accum, Mat, MatMut, MatRef, Par};

/// Reduces columns `k .. k + b` of the working matrix `w` (column-major,
/// order `n`, lower triangle) and applies the panel's update to the
/// trailing lower triangle (LAPACK's `dlatrd` followed by `dsyr2k`).
#[allow(clippy::too_many_arguments)]
pub(super) fn reduce_panel(w: &mut [f64], n: usize, k: usize, b: usize, diag: &mut [f64], offdiag: &mut [f64], tau: &mut [f64], team: &Team<'_>) {
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
        col_slice_mut(&mut vp, i)[r0 + 1..].copy_from_slice(x);
        if t == 0.0 {
            continue;
        }
        // w_c = tau (A22 v - V (W^T v) - W (V^T v)), then the rank-one fix;
        // v is the panel's copy of the reflector (column i of vp).
        let v = &vp.as_ref().col(i).try_as_col_major().expect("columns of a Mat are contiguous").as_slice()[r0 + 1..];
        let yc = &mut y[..m];
        symv_lower(w, n, c + 1, m, v, yc, team);
        let vcol = MatRef::from_column_major_slice(v, m, 1);
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
        for ((dst, &yr), &vr) in col_slice_mut(&mut wp, i)[r0 + 1..].iter_mut().zip(yc.iter()).zip(v) {
            *dst = yr + alpha * vr;
        }
    }
    // Trailing update A[k + b .., k + b ..] -= V W^T + W V^T (lower), as
    // one rank-2b product [V W] [W V]^T; each thread updates its own
    // columns (those it reads in the products).
    let start = k + b;
    if start < n {
        let t = n - start;
        let mut vw = Mat::<f64>::zeros(t, 2 * b);
        let mut wv = Mat::<f64>::zeros(t, 2 * b);
        for j in 0..b {
            let (vj, wj) = (&col_slice(&vp, j)[b..], &col_slice(&wp, j)[b..]);
            col_slice_mut(&mut vw, j).copy_from_slice(vj);
            col_slice_mut(&mut vw, b + j).copy_from_slice(wj);
            col_slice_mut(&mut wv, j).copy_from_slice(wj);
            col_slice_mut(&mut wv, b + j).copy_from_slice(vj);
        }
        let bounds = team.bounds(t);
        let mut parts: Vec<std::sync::Mutex<(usize, usize, &mut [f64])>> = Vec::with_capacity(team.size);
        let mut rest = &mut w[start * n..];
        for p in 0..team.size {
            let (c0, c1) = (bounds[p], bounds[p + 1]);
            let (mine, tail) = rest.split_at_mut((c1 - c0) * n);
            parts.push(std::sync::Mutex::new((c0, c1, mine)));
            rest = tail;
        }
        let (vw, wv) = (vw.as_ref(), wv.as_ref());
        team.run(&|p| {
            let mut guard = parts[p].lock().unwrap_or_else(|e| e.into_inner());
            let (c0, c1, ref mut cols) = *guard;
            if c1 > c0 {
                // Columns c0 .. c1 (of the trailing block), rows c0 .. t.
                let mut dst = MatMut::from_column_major_slice_with_stride_mut(&mut cols[start + c0..], t - c0, c1 - c0, n);
                let (top, bottom) = dst.rb_mut().split_at_row_mut(c1 - c0);
                triangular::matmul(top, BlockStructure::TriangularLower, Accum::Add, vw.subrows(c0, c1 - c0), BlockStructure::Rectangular, wv.subrows(c0, c1 - c0).transpose(), BlockStructure::Rectangular, -1.0, Par::Seq);
                matmul(bottom, Accum::Add, vw.subrows(c1, t - c1), wv.subrows(c0, c1 - c0).transpose(), -1.0, Par::Seq);
                crate::linalg::clear_upper_simd_state(false);
            }
        });
    }
}

/// Column `j` of `m` as a slice (the columns of a `Mat` are contiguous).
fn col_slice(m: &Mat<f64>, j: usize) -> &[f64] {
    m.col(j).try_as_col_major().expect("columns of a Mat are contiguous").as_slice()
}

/// Column `j` of `m` as a mutable slice.
fn col_slice_mut(m: &mut Mat<f64>, j: usize) -> &mut [f64] {
    m.col_mut(j).try_as_col_major_mut().expect("columns of a Mat are contiguous").as_slice_mut()
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


/// `y = A22 v` for the trailing block `A22 = w[off.., off..]` (order `m`),
/// reading its lower triangle once: column `s` adds `A22[s, s] v_s` plus its
/// dot with `v` below the diagonal to `y_s`, and `v_s` times itself to
/// `y` below. On a team, thread `j` takes the columns of its part
/// ([`Team::bounds`]) into its own accumulator, summed at the end.
pub(super) fn symv_lower(w: &[f64], n: usize, off: usize, m: usize, v: &[f64], y: &mut [f64], team: &Team<'_>) {
    if m < PARALLEL_SYMV_ORDER || team.size == 1 {
        y.iter_mut().for_each(|e| *e = 0.0);
        symv_columns(w, n, off, m, 0, m, v, y);
        return;
    }
    let bounds = team.bounds(m);
    team.run(&|p| {
        let mut part = team.scratch[p].lock().unwrap_or_else(|e| e.into_inner());
        let part = &mut part[..m];
        part.iter_mut().for_each(|e| *e = 0.0);
        symv_columns(w, n, off, m, bounds[p], bounds[p + 1], v, part);
    });
    y.copy_from_slice(&team.scratch[0].lock().unwrap_or_else(|e| e.into_inner())[..m]);
    for part in &team.scratch[1..] {
        let part = part.lock().unwrap_or_else(|e| e.into_inner());
        for (a, b) in y.iter_mut().zip(&part[..m]) {
            *a += b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::team::with_team;
    use super::super::tests::random_symmetric;
    use rand::{Rng, SeedableRng};
    use super::*;


    #[test]
    fn parallel_product_matches_the_sequential_one() {
        // The team's product (three threads, spinning helpers) against a
        // plain matrix-vector product.
        let n = 900;
        let a = random_symmetric(n, 11);
        let w: Vec<f64> = (0..n * n).map(|idx| a[(idx % n, idx / n)]).collect();
        let mut rng = rand::rngs::StdRng::seed_from_u64(12);
        let v: Vec<f64> = (0..n - 3).map(|_| rng.random_range(-1.0..1.0)).collect();
        let mut y_par = vec![0.0; n - 3];
        // Three threads: the team's parts run on helpers even on a 1-core
        // pool, and the equal-area bounds have an uneven split to get right.
        with_team(3, n, |team| symv_lower(&w, n, 3, n - 3, &v, &mut y_par, team));
        let sub = a.as_ref().submatrix(3, 3, n - 3, n - 3);
        let y_ref = sub * MatRef::from_column_major_slice(&v, n - 3, 1);
        for i in 0..n - 3 {
            assert!((y_par[i] - y_ref[(i, 0)]).abs() < 1e-12 * (n as f64), "row {i}");
        }
    }
}
