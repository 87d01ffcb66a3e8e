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
//! as one product `[V W] [W V]^T` on the lower triangle.
//!
//! On `p` threads the trailing triangle is split into `p` column ranges of
//! equal area, and thread `j` owns range `j` in every product and update
//! (a [`Team`]: the caller and `p - 1` helpers that spin between jobs, as
//! OpenBLAS's threads do). A level-2 product of order 1536 lasts about
//! 0.1 ms, less than waking a sleeping pool thread, and a fixed owner keeps
//! its columns in its own cache from one product to the next: 1.9-2.3x the
//! product's speed through rayon's `join` on two cores (BENCHMARKS.md).
//! faer's tridiagonalisation instead
//! reads and writes the whole trailing triangle for every column (a fused
//! rank-2 update and product), twice the memory traffic of this scheme
//! (1.4-1.6x its time at n = 1536 and 3600, BENCHMARKS.md).
//!
//! The input is scaled by its largest entry first, so a reflector's entries
//! `x_i / (alpha - beta)` are at most one in magnitude and nothing overflows.

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
/// as the products with `Z` (`4 n^2 k`), so narrower blocks are cheaper.
/// Top 64 of order 1536: 4.8-7.7 ms with blocks of 32-64 against 9-14 ms
/// with 128 (BENCHMARKS.md).
const BACK_NARROW: usize = 64;

/// The most columns of `Z` that take [`BACK_NARROW`] blocks.
const NARROW_Z: usize = 256;

/// Order from which the reduction runs on a [`Team`] of all of rayon's
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

    /// [`Tridiagonalisation::new`] on a [`Team`] of `threads` threads (one
    /// for a sequential reduction; below [`PARALLEL_SYMV_ORDER`] the
    /// products are sequential in any case).
    fn with_threads(a: MatRef<'_, f64>, threads: usize) -> Self {
        let n = a.nrows();
        assert_eq!(a.ncols(), n, "tridiagonalisation of a square matrix");
        // Not advised for huge pages (unlike `linalg::zeroed_output`): the
        // copy is read n times after its one write, so its faults are a
        // small part, and the advice made the first reduction in a process
        // wait on the kernel's page compaction (order 1536: 0.17-0.36 s
        // against 0.17-0.19 s without it; 3600: 2.5-3.5 s against 2.1-2.2;
        // later calls the same either way).
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

/// Reduces columns `k .. k + b` of the working matrix `w` (column-major,
/// order `n`, lower triangle) and applies the panel's update to the
/// trailing lower triangle (LAPACK's `dlatrd` followed by `dsyr2k`).
#[allow(clippy::too_many_arguments)]
fn reduce_panel(w: &mut [f64], n: usize, k: usize, b: usize, diag: &mut [f64], offdiag: &mut [f64], tau: &mut [f64], team: &Team<'_>) {
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
                super::clear_upper_simd_state(false);
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
/// `y` below. On a team, thread `j` takes the columns of its part
/// ([`Team::bounds`]) into its own accumulator, summed at the end.
fn symv_lower(w: &[f64], n: usize, off: usize, m: usize, v: &[f64], y: &mut [f64], team: &Team<'_>) {
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

/// Threads that run jobs `f(p)`, `p` in `0 .. size`, in lockstep with
/// their caller (`p = 0`): OpenBLAS's scheme for level-2 products. The
/// helpers spin between jobs (then yield), so a job starts within
/// nanoseconds, and part `p` always runs on the same thread, whose cache
/// keeps the columns it owns from one product to the next.
struct Team<'a> {
    size: usize,
    shared: Option<&'a TeamShared>,
    /// One buffer of `n` per thread for partial products (none for a team
    /// of one, whose products run sequentially).
    scratch: Vec<std::sync::Mutex<Vec<f64>>>,
}

struct TeamShared {
    generation: std::sync::atomic::AtomicUsize,
    finished: std::sync::atomic::AtomicUsize,
    stop: std::sync::atomic::AtomicBool,
    job: std::sync::atomic::AtomicPtr<()>,
    panicked: std::sync::atomic::AtomicBool,
}

/// Most threads in a [`Team`].
const MAX_TEAM: usize = 64;

/// Spins before a waiting thread of a [`Team`] starts to yield its core.
const SPINS_BEFORE_YIELD: u32 = 1 << 16;

/// One step of a [`Team`]'s waits: spin, then (after
/// [`SPINS_BEFORE_YIELD`] steps, e.g. on an oversubscribed machine) yield.
fn wait_step(spins: &mut u32) {
    if *spins < SPINS_BEFORE_YIELD {
        *spins += 1;
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// Runs `body` with a [`Team`] of `size` threads (the caller and `size - 1`
/// scoped helpers, which end with it); `n` is the length of the scratch
/// buffers.
fn with_team<R>(size: usize, n: usize, body: impl FnOnce(&Team<'_>) -> R) -> R {
    use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
    if size <= 1 {
        return body(&Team { size: 1, shared: None, scratch: Vec::new() });
    }
    let scratch: Vec<_> = (0..size).map(|_| std::sync::Mutex::new(vec![0.0f64; n])).collect();
    let shared = TeamShared {
        generation: AtomicUsize::new(0),
        finished: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
        job: AtomicPtr::new(std::ptr::null_mut()),
        panicked: AtomicBool::new(false),
    };
    /// Tells the helpers to return when the team's scope ends (also when
    /// `body` panics), so that the scope can join them.
    struct StopOnDrop<'s>(&'s TeamShared);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.stop.store(true, std::sync::atomic::Ordering::Release);
        }
    }
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&shared);
        let mut helpers = 0;
        for p in 1..size {
            let shared = &shared;
            let helper = move || {
                let mut seen = 0usize;
                loop {
                    let mut spins = 0u32;
                    loop {
                        let g = shared.generation.load(Ordering::Acquire);
                        if g != seen {
                            seen = g;
                            break;
                        }
                        if shared.stop.load(Ordering::Acquire) {
                            return;
                        }
                        wait_step(&mut spins);
                    }
                    // SAFETY: `Team::run` stored a pointer to a live
                    // `&dyn Fn` before bumping the generation, and keeps it
                    // alive until every helper has counted itself finished.
                    let job = unsafe { *(shared.job.load(Ordering::Acquire) as *const &(dyn Fn(usize) + Sync)) };
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(p))).is_err() {
                        shared.panicked.store(true, Ordering::Release);
                    }
                    shared.finished.fetch_add(1, Ordering::AcqRel);
                }
            };
            // A thread that cannot be started shrinks the team (down to the
            // caller alone) instead of failing the reduction.
            if std::thread::Builder::new().spawn_scoped(s, helper).is_err() {
                break;
            }
            helpers += 1;
        }
        let size = 1 + helpers;
        let mut scratch = scratch;
        scratch.truncate(size);
        body(&Team { size, shared: (size > 1).then_some(&shared), scratch })
    })
}

impl Team<'_> {
    /// Runs `f(p)` for every `p` in `0 .. size`, `p = 0` on the caller, and
    /// returns when all have finished.
    fn run(&self, f: &(dyn Fn(usize) + Sync)) {
        use std::sync::atomic::Ordering;
        let Some(shared) = self.shared else {
            f(0);
            return;
        };
        let job: &(dyn Fn(usize) + Sync) = f;
        shared.finished.store(0, Ordering::Relaxed);
        shared.job.store(&job as *const &(dyn Fn(usize) + Sync) as *mut (), Ordering::Release);
        shared.generation.fetch_add(1, Ordering::AcqRel);
        f(0);
        let mut spins = 0u32;
        while shared.finished.load(Ordering::Acquire) + 1 < self.size {
            wait_step(&mut spins);
        }
        assert!(!shared.panicked.load(Ordering::Acquire), "a tridiagonalisation helper thread panicked");
    }

    /// Column boundaries `0 = b_0 <= .. <= b_size = m` splitting the lower
    /// triangle of order `m` into parts of equal area.
    fn bounds(&self, m: usize) -> Vec<usize> {
        let total = (m * (m + 1) / 2) as f64;
        let mut bounds = vec![0usize; self.size + 1];
        let mut s = 0usize;
        let mut done = 0.0f64;
        for (p, bound) in bounds[1..self.size].iter_mut().enumerate() {
            let target = total * (p + 1) as f64 / self.size as f64;
            while s < m && done < target {
                done += (m - s) as f64;
                s += 1;
            }
            *bound = s;
        }
        bounds[self.size] = m;
        bounds
    }
}

/// The body of [`symv_columns`]: the heads (the small lower triangles of
/// four columns) entry by entry, and below them `$quad` (a four-column
/// kernel, see [`quad_columns`]).
macro_rules! symv_columns_body {
    ($quad:expr, $w:ident, $n:ident, $off:ident, $m:ident, $s0:ident, $s1:ident, $v:ident, $y:ident) => {{
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
                let (yhead, yt) = y.split_at_mut(shared);
                let dots = $quad([col(0), col(1), col(2), col(3)], [v[s], v[s + 1], v[s + 2], v[s + 3]], &v[shared..m], yt);
                for j in 0..C {
                    yhead[s + j] += dots[j];
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

/// The four-column kernel of [`symv_columns`]: for columns `c[j]` (rows
/// below the heads, all of the length of `x` and `y`) returns the dots
/// `c[j]^T x` and adds `sum_j v[j] c[j]` to `y`. Rows run in groups of
/// eight with eight partial sums per dot, reduced as
/// `((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7))`, then the rows past
/// the last group; `y` takes `v0 c0` first and `v3 c3` last.
/// [`quad_columns_avx2`] keeps this order, so the kernels differ by the
/// fusing of multiply-adds only.
///
/// In plain Rust with `madd(a, b, c) = a b + c`, vectorised by the
/// compiler: on x86-64 it is only the fallback and the tests' reference;
/// [`quad_columns_avx2`] and [`quad_columns_avx512`] are the kernels (with
/// 256-bit registers the compiler spilled the partial sums to the stack:
/// top 64 pairs at order 1536 on an AVX2 machine 0.30 s before, 0.21 s with
/// the intrinsics; BENCHMARKS.md).
#[inline(always)]
fn quad_columns(c: [&[f64]; 4], vs: [f64; 4], x: &[f64], y: &mut [f64], madd: impl Fn(f64, f64, f64) -> f64) -> [f64; 4] {
    let [c0, c1, c2, c3] = c;
    let [v0, v1, v2, v3] = vs;
    let mut acc = [[0.0f64; 8]; 4];
    let mut i0 = c0.chunks_exact(8);
    let mut i1 = c1.chunks_exact(8);
    let mut i2 = c2.chunks_exact(8);
    let mut i3 = c3.chunks_exact(8);
    let mut iv = x.chunks_exact(8);
    let mut iy = y.chunks_exact_mut(8);
    for (((((a0, a1), a2), a3), x8), y8) in (&mut i0).zip(&mut i1).zip(&mut i2).zip(&mut i3).zip(&mut iv).zip(&mut iy) {
        for l in 0..8 {
            acc[0][l] = madd(a0[l], x8[l], acc[0][l]);
            acc[1][l] = madd(a1[l], x8[l], acc[1][l]);
            acc[2][l] = madd(a2[l], x8[l], acc[2][l]);
            acc[3][l] = madd(a3[l], x8[l], acc[3][l]);
            y8[l] = madd(v3, a3[l], madd(v2, a2[l], madd(v1, a1[l], madd(v0, a0[l], y8[l]))));
        }
    }
    let sums = acc.map(|a| ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])));
    let done = x.len() - iv.remainder().len();
    quad_columns_tail(c, vs, x, y, done, sums)
}

/// Rows `done ..` of a four-column kernel ([`quad_columns`]), added to the dots `sums`.
#[inline(always)]
fn quad_columns_tail(c: [&[f64]; 4], vs: [f64; 4], x: &[f64], y: &mut [f64], done: usize, sums: [f64; 4]) -> [f64; 4] {
    let [v0, v1, v2, v3] = vs;
    let mut tails = [0.0f64; 4];
    for q in done..x.len() {
        for j in 0..4 {
            tails[j] += c[j][q] * x[q];
        }
        y[q] += (v0 * c[0][q] + v1 * c[1][q]) + (v2 * c[2][q] + v3 * c[3][q]);
    }
    std::array::from_fn(|j| sums[j] + tails[j])
}

/// [`quad_columns`] in AVX2 + FMA intrinsics: the group of eight rows as two
/// registers of four (partial sums `a0..a3` and `a4..a7`), 15 of the 16
/// registers live, nothing spilled. The same operations in the same order
/// as [`quad_columns`] with fused multiply-adds, so the same results.
///
/// # Safety
/// The CPU must have AVX2 and FMA; every column must be at least as long as
/// `x`, and `y` as long as `x`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn quad_columns_avx2(c: [&[f64]; 4], vs: [f64; 4], x: &[f64], y: &mut [f64]) -> [f64; 4] {
    use std::arch::x86_64::*;
    let len = x.len();
    assert!(y.len() >= len && c.iter().all(|col| col.len() >= len), "quad_columns_avx2: short slice");
    let groups = len / 8;
    let p = c.map(|col| col.as_ptr());
    let (px, py) = (x.as_ptr(), y.as_mut_ptr());
    let b = vs.map(|v| _mm256_set1_pd(v));
    // Rows r .. r + 4: the four dots' partial sums in `acc`, and y.
    let four_rows = |r: usize, acc: &mut [__m256d; 4]| {
        // SAFETY: the callers pass r + 4 <= len, within every slice
        // (checked above).
        unsafe {
            let xv = _mm256_loadu_pd(px.add(r));
            let mut yv = _mm256_loadu_pd(py.add(r));
            for j in 0..4 {
                let a = _mm256_loadu_pd(p[j].add(r));
                acc[j] = _mm256_fmadd_pd(a, xv, acc[j]);
                yv = _mm256_fmadd_pd(b[j], a, yv);
            }
            _mm256_storeu_pd(py.add(r), yv);
        }
    };
    let mut lo = [_mm256_setzero_pd(); 4];
    let mut hi = lo;
    for g in 0..groups {
        four_rows(8 * g, &mut lo);
        four_rows(8 * g + 4, &mut hi);
    }
    // ((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7)), as in quad_columns.
    let reduce = |lo: __m256d, hi: __m256d| -> f64 {
        let mut s = [0.0f64; 4];
        // SAFETY: `s` holds four f64.
        unsafe { _mm256_storeu_pd(s.as_mut_ptr(), _mm256_add_pd(lo, hi)) };
        (s[0] + s[1]) + (s[2] + s[3])
    };
    let sums: [f64; 4] = std::array::from_fn(|j| reduce(lo[j], hi[j]));
    quad_columns_tail(c, vs, x, y, 8 * groups, sums)
}

/// [`quad_columns`] in AVX-512F intrinsics: a group of eight rows is one
/// register, so each dot keeps its eight partial sums in one register and
/// nothing is spilled. The same operations in the same order as
/// [`quad_columns`] with fused multiply-adds, so the same results as
/// [`quad_columns_avx2`]. Left to the compiler, the plain kernel came out as
/// lane inserts, masked broadcasts and stack spills (rustc 1.95, AVX-512
/// machine): the reduction of order 1000 took 100 ms on one core against
/// 66 ms for OpenBLAS's `dsytrd` (BENCHMARKS.md).
///
/// # Safety
/// The CPU must have AVX-512F and FMA; every column must be at least as
/// long as `x`, and `y` as long as `x`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn quad_columns_avx512(c: [&[f64]; 4], vs: [f64; 4], x: &[f64], y: &mut [f64]) -> [f64; 4] {
    use std::arch::x86_64::*;
    let len = x.len();
    assert!(y.len() >= len && c.iter().all(|col| col.len() >= len), "quad_columns_avx512: short slice");
    let groups = len / 8;
    let [p0, p1, p2, p3] = c.map(|col| col.as_ptr());
    let (px, py) = (x.as_ptr(), y.as_mut_ptr());
    let [b0, b1, b2, b3] = vs.map(|v| _mm512_set1_pd(v));
    let (mut s0, mut s1, mut s2, mut s3) = (_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd());
    for g in 0..groups {
        let r = 8 * g;
        // SAFETY: r + 8 <= len, within every slice (checked above).
        unsafe {
            let xv = _mm512_loadu_pd(px.add(r));
            let a0 = _mm512_loadu_pd(p0.add(r));
            let a1 = _mm512_loadu_pd(p1.add(r));
            let a2 = _mm512_loadu_pd(p2.add(r));
            let a3 = _mm512_loadu_pd(p3.add(r));
            s0 = _mm512_fmadd_pd(a0, xv, s0);
            s1 = _mm512_fmadd_pd(a1, xv, s1);
            s2 = _mm512_fmadd_pd(a2, xv, s2);
            s3 = _mm512_fmadd_pd(a3, xv, s3);
            let yv = _mm512_fmadd_pd(b3, a3, _mm512_fmadd_pd(b2, a2, _mm512_fmadd_pd(b1, a1, _mm512_fmadd_pd(b0, a0, _mm512_loadu_pd(py.add(r))))));
            _mm512_storeu_pd(py.add(r), yv);
        }
    }
    // ((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7)), as in quad_columns.
    let mut sums = [0.0f64; 4];
    for (out, v) in sums.iter_mut().zip([s0, s1, s2, s3]) {
        let halves = _mm256_add_pd(_mm512_castpd512_pd256(v), _mm512_extractf64x4_pd::<1>(v));
        let mut h = [0.0f64; 4];
        // SAFETY: `h` holds four f64.
        unsafe { _mm256_storeu_pd(h.as_mut_ptr(), halves) };
        *out = (h[0] + h[1]) + (h[2] + h[3]);
    }
    quad_columns_tail(c, vs, x, y, 8 * groups, sums)
}

/// The plain kernel's fused multiply-add, the reference the SIMD kernels are tested against.
#[cfg(test)]
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
            // SAFETY: this function runs only where AVX-512F and FMA were
            // detected; the body passes columns as long as `x` and `y`.
            symv_columns_body!(|c, vs, x, y| unsafe { quad_columns_avx512(c, vs, x, y) }, w, n, off, m, s0, s1, v, y)
        }
        #[target_feature(enable = "avx2,fma")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn mid(w: &[f64], n: usize, off: usize, m: usize, s0: usize, s1: usize, v: &[f64], y: &mut [f64]) {
            // SAFETY: this function runs only where AVX2 and FMA were
            // detected; the body passes columns as long as `x` and `y`.
            symv_columns_body!(|c, vs, x, y| unsafe { quad_columns_avx2(c, vs, x, y) }, w, n, off, m, s0, s1, v, y)
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
    symv_columns_body!(|c, vs, x, y| quad_columns(c, vs, x, y, unfused), w, n, off, m, s0, s1, v, y)
}

/// The number of eigenvalues of the symmetric tridiagonal `T` (diagonal
/// `d`, subdiagonal `e`) above `x`: `n` minus the Sturm count at `x`.
pub(crate) fn count_above(d: &[f64], e: &[f64], x: f64) -> usize {
    d.len() - sturm_counts(d, e, pivot_floor(e), &[x])[0]
}

/// The eigenvalues of the symmetric tridiagonal `T` (diagonal `d`,
/// subdiagonal `e`, `e.len() + 1 = d.len()`), ascending, by the
/// Pal-Walker-Kahan root-free QL/QR iteration (LAPACK's `dsterf`): the
/// implicit shifted QR iteration carried on the squares `e_i^2`, so a
/// sweep needs one division pair per row and no square root; `O(n^2)`
/// work with about two sweeps per eigenvalue. Each unreduced block is
/// scaled into `[sqrt(safe min) / eps^2, sqrt(safe max) / 3]` first and
/// iterated from its end with the larger diagonal entry (QL from the top,
/// QR from the bottom), as LAPACK does for graded matrices.
///
/// `None` when the entries are not finite or the iteration has not split
/// `T` after `30 n` sweeps (LAPACK's limit), for the caller's fallback.
pub(crate) fn tridiagonal_eigenvalues(d: &[f64], e: &[f64]) -> Option<Vec<f64>> {
    let n = d.len();
    if n == 0 {
        return Some(Vec::new());
    }
    if e.len() + 1 != n || d.iter().chain(e).any(|v| !v.is_finite()) {
        return None;
    }
    let mut d = d.to_vec();
    // The squares of the subdiagonal, one spare entry for simpler indexing.
    let mut e2: Vec<f64> = e.to_vec();
    e2.push(0.0);
    let eps = f64::EPSILON * 0.5;
    let eps2 = eps * eps;
    let safe_min = f64::MIN_POSITIVE;
    let scale_max = (1.0 / safe_min).sqrt() / 3.0;
    let scale_min = safe_min.sqrt() / eps2;
    let max_sweeps = n.saturating_mul(30);
    let mut sweeps = 0usize;
    let mut l1 = 0usize;
    while l1 < n {
        if l1 > 0 {
            e2[l1 - 1] = 0.0;
        }
        // The unreduced block l1 ..= m (e here still holds the entries).
        let mut m = l1;
        while m + 1 < n {
            if e2[m].abs() <= d[m].abs().sqrt() * d[m + 1].abs().sqrt() * eps {
                e2[m] = 0.0;
                break;
            }
            m += 1;
        }
        let (start, end) = (l1, m);
        l1 = m + 1;
        if end == start {
            continue;
        }
        // Scale the block.
        let norm = d[start..=end].iter().chain(&e2[start..end]).fold(0.0f64, |a, v| a.max(v.abs()));
        if norm == 0.0 {
            continue;
        }
        let factor = if norm > scale_max {
            scale_max / norm
        } else if norm < scale_min {
            scale_min / norm
        } else {
            1.0
        };
        if factor != 1.0 {
            d[start..=end].iter_mut().for_each(|v| *v *= factor);
            e2[start..end].iter_mut().for_each(|v| *v *= factor);
        }
        e2[start..end].iter_mut().for_each(|v| *v *= *v);
        if d[end].abs() >= d[start].abs() {
            // QL iteration: eigenvalues found at the top, l moving down.
            let mut l = start;
            'ql: while l <= end {
                let mut m = l;
                while m < end {
                    if e2[m].abs() <= eps2 * (d[m] * d[m + 1]).abs() {
                        break;
                    }
                    m += 1;
                }
                if m < end {
                    e2[m] = 0.0;
                }
                let p = d[l];
                if m == l {
                    l += 1;
                    continue;
                }
                if m == l + 1 {
                    let (rt1, rt2) = symmetric_2x2_eigenvalues(d[l], e2[l].sqrt(), d[l + 1]);
                    d[l] = rt1;
                    d[l + 1] = rt2;
                    e2[l] = 0.0;
                    l += 2;
                    continue;
                }
                if sweeps == max_sweeps {
                    break 'ql;
                }
                sweeps += 1;
                let rte = e2[l].sqrt();
                let mut sigma = (d[l + 1] - p) / (2.0 * rte);
                let r = sigma.hypot(1.0);
                sigma = p - rte / (sigma + if sigma >= 0.0 { r } else { -r });
                let (mut c, mut s) = (1.0f64, 0.0f64);
                let mut gamma = d[m] - sigma;
                let mut p = gamma * gamma;
                for i in (l..m).rev() {
                    let bb = e2[i];
                    let r = p + bb;
                    if i + 1 != m {
                        e2[i + 1] = s * r;
                    }
                    let old_c = c;
                    c = p / r;
                    s = bb / r;
                    let old_gamma = gamma;
                    let alpha = d[i];
                    gamma = c * (alpha - sigma) - s * old_gamma;
                    d[i + 1] = old_gamma + (alpha - gamma);
                    p = if c != 0.0 { gamma * gamma / c } else { old_c * bb };
                }
                e2[l] = s * p;
                d[l] = sigma + gamma;
            }
        } else {
            // QR iteration: eigenvalues found at the bottom, l moving up.
            let mut l = end;
            'qr: while l >= start {
                let mut m = l;
                while m > start {
                    if e2[m - 1].abs() <= eps2 * (d[m] * d[m - 1]).abs() {
                        break;
                    }
                    m -= 1;
                }
                if m > start {
                    e2[m - 1] = 0.0;
                }
                let p = d[l];
                if m == l {
                    if l == start {
                        break 'qr;
                    }
                    l -= 1;
                    continue;
                }
                if m + 1 == l {
                    let (rt1, rt2) = symmetric_2x2_eigenvalues(d[l], e2[l - 1].sqrt(), d[l - 1]);
                    d[l] = rt1;
                    d[l - 1] = rt2;
                    e2[l - 1] = 0.0;
                    if l < start + 2 {
                        break 'qr;
                    }
                    l -= 2;
                    continue;
                }
                if sweeps == max_sweeps {
                    break 'qr;
                }
                sweeps += 1;
                let rte = e2[l - 1].sqrt();
                let mut sigma = (d[l - 1] - p) / (2.0 * rte);
                let r = sigma.hypot(1.0);
                sigma = p - rte / (sigma + if sigma >= 0.0 { r } else { -r });
                let (mut c, mut s) = (1.0f64, 0.0f64);
                let mut gamma = d[m] - sigma;
                let mut p = gamma * gamma;
                for i in m..l {
                    let bb = e2[i];
                    let r = p + bb;
                    if i != m {
                        e2[i - 1] = s * r;
                    }
                    let old_c = c;
                    c = p / r;
                    s = bb / r;
                    let old_gamma = gamma;
                    let alpha = d[i + 1];
                    gamma = c * (alpha - sigma) - s * old_gamma;
                    d[i] = old_gamma + (alpha - gamma);
                    p = if c != 0.0 { gamma * gamma / c } else { old_c * bb };
                }
                e2[l - 1] = s * p;
                d[l] = sigma + gamma;
            }
        }
        if factor != 1.0 {
            d[start..=end].iter_mut().for_each(|v| *v /= factor);
        }
        if sweeps >= max_sweeps {
            // Not split after the limit: the block's entries are not all
            // eigenvalues.
            if e2[start..end].iter().any(|&v| v != 0.0) {
                return None;
            }
        }
    }
    if d.iter().any(|v| !v.is_finite()) {
        return None;
    }
    d.sort_by(f64::total_cmp);
    Some(d)
}

/// The eigenvalues `(rt1, rt2)`, `|rt1| >= |rt2|`, of the symmetric
/// `[[a, b], [b, c]]` (LAPACK's `dlae2`): the larger from the stable
/// quadratic formula, the smaller from the determinant.
fn symmetric_2x2_eigenvalues(a: f64, b: f64, c: f64) -> (f64, f64) {
    let sm = a + c;
    let adf = (a - c).abs();
    let ab = (b + b).abs();
    let (acmx, acmn) = if a.abs() > c.abs() { (a, c) } else { (c, a) };
    let rt = if adf > ab {
        adf * (1.0 + (ab / adf).powi(2)).sqrt()
    } else if adf < ab {
        ab * (1.0 + (adf / ab).powi(2)).sqrt()
    } else {
        ab * std::f64::consts::SQRT_2
    };
    if sm != 0.0 {
        let rt1 = 0.5 * (sm + rt.copysign(sm));
        (rt1, (acmx / rt1) * acmn - (b / rt1) * b)
    } else {
        (0.5 * rt, -0.5 * rt)
    }
}

/// Most inverse iterations per eigenvector in [`tridiagonal_top_k`]
/// (LAPACK's `dstein` allows five); it stops earlier once an iteration
/// leaves the vector unchanged.
const INVERSE_ITERATIONS: usize = 5;

/// Sturm sequences evaluated side by side in [`tridiagonal_top_k`]'s
/// bisection.
const BISECTION_LANES: usize = 8;

/// LAPACK's `pivmin`: pivots of `T - x I = L D L^T` below this in magnitude
/// are taken as `-pivmin`.
fn pivot_floor(e: &[f64]) -> f64 {
    f64::MIN_POSITIVE * e.iter().fold(1.0f64, |m, v| m.max(v * v))
}

/// Numbers of eigenvalues of `T` below each of the shifts `x` (Sturm counts:
/// the negative pivots of `T - x I = L D L^T`), the shifts side by side so
/// that their divisions, independent of each other, pipeline where one
/// sequence waits on each.
fn sturm_counts<const L: usize>(d: &[f64], e: &[f64], pivmin: f64, x: &[f64; L]) -> [usize; L] {
    let mut count = [0usize; L];
    let Some(&d0) = d.first() else { return count };
    let mut q = [0.0f64; L];
    for l in 0..L {
        let v = d0 - x[l];
        q[l] = if v.abs() < pivmin { -pivmin } else { v };
        count[l] += usize::from(q[l] < 0.0);
    }
    for i in 1..d.len() {
        let (di, e2) = (d[i], e[i - 1] * e[i - 1]);
        for l in 0..L {
            let v = di - x[l] - e2 / q[l];
            q[l] = if v.abs() < pivmin { -pivmin } else { v };
            count[l] += usize::from(q[l] < 0.0);
        }
    }
    count
}

/// The `k` largest eigenpairs of the symmetric tridiagonal `T` (diagonal
/// `d`, subdiagonal `e`), ascending, and `max |lambda(T)|`, as LAPACK's
/// `dstebz` + `dstein`: each eigenvalue by bisection on Sturm counts, each
/// eigenvector by inverse iteration with `T - lambda I` factored by
/// Gaussian elimination with partial pivoting, Gram-Schmidt against the
/// vectors of the same cluster (eigenvalues within `1e-3 ||T||`).
/// `O(n k)` work where divide and conquer computes all `n` vectors.
///
/// The answer is verified before it is returned: every residual
/// `||T x - lambda x|| <= 1e-12 ||T||` and `||X^T X - I||_max <= 1e-11`;
/// otherwise (large clusters, where inverse iteration can lose
/// orthogonality) `None`, and the caller takes divide and conquer.
pub(crate) fn tridiagonal_top_k(d: &[f64], e: &[f64], k: usize) -> Option<(Vec<f64>, Mat<f64>, f64)> {
    let n = d.len();
    if k == 0 || k > n || e.len() + 1 < n {
        return None;
    }
    // Gershgorin interval and the scale of T.
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for i in 0..n {
        let r = if i > 0 { e[i - 1].abs() } else { 0.0 } + if i + 1 < n { e[i].abs() } else { 0.0 };
        lo = lo.min(d[i] - r);
        hi = hi.max(d[i] + r);
    }
    let tnorm = lo.abs().max(hi.abs());
    if !tnorm.is_finite() {
        return None;
    }
    if tnorm == 0.0 {
        let mut x = Mat::<f64>::zeros(n, k);
        for j in 0..k {
            x[(n - k + j, j)] = 1.0;
        }
        return Some((vec![0.0; k], x, 0.0));
    }
    let eps = f64::EPSILON;
    let pivmin = pivot_floor(e);
    let width = 2.0 * eps * tnorm + 4.0 * pivmin;
    let (lo, hi) = (lo - width, hi + width);
    // The eigenvalues of ascending indices `idx` (at most BISECTION_LANES)
    // by bisection in lockstep, each interval frozen once it is narrow
    // enough (bounded: the interval halves each step, from at most
    // 2^11 ||T|| to 4 eps ||T||).
    let bisect = |idx: &[usize]| -> Vec<f64> {
        let tol = 4.0 * eps * tnorm + 2.0 * pivmin;
        let (mut a, mut b) = ([lo; BISECTION_LANES], [hi; BISECTION_LANES]);
        for _ in 0..200 {
            let active: [bool; BISECTION_LANES] = std::array::from_fn(|l| l < idx.len() && b[l] - a[l] > tol);
            if !active.contains(&true) {
                break;
            }
            let mid: [f64; BISECTION_LANES] = std::array::from_fn(|l| 0.5 * (a[l] + b[l]));
            let counts = sturm_counts(d, e, pivmin, &mid);
            for l in 0..idx.len() {
                if active[l] {
                    if counts[l] > idx[l] {
                        b[l] = mid[l];
                    } else {
                        a[l] = mid[l];
                    }
                }
            }
        }
        (0..idx.len()).map(|l| 0.5 * (a[l] + b[l])).collect()
    };
    // The k largest (descending) and the smallest, in groups of lanes split
    // between the threads.
    let wanted: Vec<usize> = (0..k).map(|j| n - 1 - j).chain(std::iter::once(0)).collect();
    let found: Vec<f64> = {
        use rayon::prelude::*;
        wanted.par_chunks(BISECTION_LANES).flat_map_iter(bisect).collect()
    };
    let spectral_norm = found[k].abs().max(found[0].abs());
    let mut values = found[..k].to_vec();
    // Largest first, then separated slightly where they coincide (dstein).
    let separation = 10.0 * eps * tnorm;
    let mut shifts = values.clone();
    for j in 1..k {
        if shifts[j - 1] - shifts[j] < separation {
            shifts[j] = shifts[j - 1] - separation;
        }
    }
    let cluster_gap = 1e-3 * tnorm;
    // Clusters (eigenvalues within `cluster_gap` of their neighbour) are
    // independent: each vector is orthogonalised only against the earlier
    // ones of its cluster, so the clusters run in parallel. Each vector
    // starts from its own stretch of one xorshift sequence (`n` draws per
    // vector, in the order of the wanted values), so the vectors are the
    // same whatever the threads did.
    let mut clusters: Vec<std::ops::Range<usize>> = Vec::new();
    for j in 0..k {
        match clusters.last_mut() {
            Some(last) if values[j - 1] - values[j] <= cluster_gap => last.end = j + 1,
            _ => clusters.push(j..j + 1),
        }
    }
    let mut seeds = Vec::with_capacity(k);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..k {
        seeds.push(seed);
        for _ in 0..n {
            seed = xorshift(seed);
        }
    }
    let settled = 16.0 * eps * (n as f64).sqrt();
    let inverse_iteration = |cluster: &std::ops::Range<usize>| -> Option<Vec<Vec<f64>>> {
        let mut found: Vec<Vec<f64>> = Vec::with_capacity(cluster.len());
        for j in cluster.clone() {
            let lu = ShiftedTridiagonalLu::new(d, e, shifts[j], eps * tnorm);
            let mut seed = seeds[j];
            let mut b: Vec<f64> = (0..n)
                .map(|_| {
                    // xorshift: a fixed, replayable start vector
                    seed = xorshift(seed);
                    (seed >> 11) as f64 / (1u64 << 53) as f64 - 0.5
                })
                .collect();
            let mut previous: Vec<f64> = Vec::new();
            for iteration in 0..INVERSE_ITERATIONS {
                lu.solve(&mut b);
                for xq in &found {
                    let mut dot = 0.0;
                    for r in 0..n {
                        dot += xq[r] * b[r];
                    }
                    for r in 0..n {
                        b[r] -= dot * xq[r];
                    }
                }
                let norm = scaled_norm(&b);
                if !(norm.is_finite() && norm > 0.0) {
                    return None;
                }
                b.iter_mut().for_each(|v| *v /= norm);
                // Converged when an iteration no longer changes the vector
                // (up to its sign, which flips when the shift is above the
                // eigenvalue); the verification below checks the answer.
                if iteration > 0 {
                    let dot: f64 = b.iter().zip(&previous).map(|(x, y)| x * y).sum();
                    let sign = if dot < 0.0 { -1.0 } else { 1.0 };
                    if b.iter().zip(&previous).all(|(x, y)| (x - sign * y).abs() <= settled) {
                        break;
                    }
                }
                previous.clone_from(&b);
            }
            found.push(b);
        }
        Some(found)
    };
    let vectors: Vec<Vec<f64>> = {
        use rayon::prelude::*;
        let per_cluster: Option<Vec<Vec<Vec<f64>>>> = clusters.par_iter().map(inverse_iteration).collect();
        per_cluster?.into_iter().flatten().collect()
    };
    let mut x = Mat::<f64>::zeros(n, k);
    for (j, b) in vectors.iter().enumerate() {
        for r in 0..n {
            x[(r, j)] = b[r];
        }
    }
    // Each eigenvalue refined to the Rayleigh quotient of its vector: error
    // O(residual^2 / gap) against bisection's 4 eps ||T|| (and exact where
    // T is diagonal), then the pairs reordered if a cluster's changed order.
    for (j, value) in values.iter_mut().enumerate() {
        let xj = x.col(j);
        let mut rq = 0.0;
        for r in 0..n {
            let mut t = d[r] * xj[r];
            if r > 0 {
                t += e[r - 1] * xj[r - 1];
            }
            if r + 1 < n {
                t += e[r] * xj[r + 1];
            }
            rq += xj[r] * t;
        }
        if rq.is_finite() {
            *value = rq;
        }
    }
    let mut order: Vec<usize> = (0..k).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    // Verification: residuals and orthonormality.
    for (j, &lambda) in values.iter().enumerate() {
        let xj = x.col(j);
        let mut worst = 0.0f64;
        let mut sum = 0.0;
        for r in 0..n {
            let mut t = (d[r] - lambda) * xj[r];
            if r > 0 {
                t += e[r - 1] * xj[r - 1];
            }
            if r + 1 < n {
                t += e[r] * xj[r + 1];
            }
            worst = worst.max(t.abs());
            sum += t * t;
        }
        if !(sum.sqrt() <= 1e-12 * tnorm) || !worst.is_finite() {
            return None;
        }
    }
    let mut gram = Mat::<f64>::zeros(k, k);
    matmul(gram.as_mut(), Accum::Replace, x.as_ref().transpose(), x.as_ref(), 1.0, Par::Seq);
    for a in 0..k {
        for c in 0..k {
            let target = if a == c { 1.0 } else { 0.0 };
            if !((gram[(a, c)] - target).abs() <= 1e-11) {
                return None;
            }
        }
    }
    // Ascending, as every eigensolver of the crate returns them.
    let ascending: Vec<f64> = order.iter().map(|&j| values[j]).collect();
    let x = Mat::<f64>::from_fn(n, k, |r, j| x[(r, order[j])]);
    Some((ascending, x, spectral_norm))
}

/// One step of Marsaglia's xorshift generator (shifts 13, 7, 17).
fn xorshift(mut seed: u64) -> u64 {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    seed
}

/// `T - lambda I = P L U` for a symmetric tridiagonal `T` (LAPACK's
/// `dgttrf`), with pivots below `tiny` in magnitude replaced by `tiny` (the
/// shifts are eigenvalues, so `T - lambda I` is singular to working
/// precision; inverse iteration wants the nearly singular solve).
struct ShiftedTridiagonalLu {
    /// Multipliers of `L`.
    lower: Vec<f64>,
    diag: Vec<f64>,
    upper: Vec<f64>,
    upper2: Vec<f64>,
    swapped: Vec<bool>,
}

impl ShiftedTridiagonalLu {
    fn new(d: &[f64], e: &[f64], lambda: f64, tiny: f64) -> Self {
        let n = d.len();
        let mut lower: Vec<f64> = e[..n.saturating_sub(1)].to_vec();
        let mut diag: Vec<f64> = d.iter().map(|v| v - lambda).collect();
        let mut upper = lower.clone();
        let mut upper2 = vec![0.0; n.saturating_sub(2)];
        let mut swapped = vec![false; n.saturating_sub(1)];
        for i in 0..n.saturating_sub(1) {
            if diag[i].abs() >= lower[i].abs() {
                if diag[i] != 0.0 {
                    let fact = lower[i] / diag[i];
                    lower[i] = fact;
                    diag[i + 1] -= fact * upper[i];
                }
            } else {
                let fact = diag[i] / lower[i];
                diag[i] = lower[i];
                lower[i] = fact;
                let temp = upper[i];
                upper[i] = diag[i + 1];
                diag[i + 1] = temp - fact * diag[i + 1];
                if i + 2 < n {
                    upper2[i] = upper[i + 1];
                    upper[i + 1] *= -fact;
                }
                swapped[i] = true;
            }
        }
        for v in diag.iter_mut() {
            if v.abs() < tiny {
                *v = if *v < 0.0 { -tiny } else { tiny };
            }
        }
        ShiftedTridiagonalLu { lower, diag, upper, upper2, swapped }
    }

    /// `b <- (T - lambda I)^{-1} b`, rescaled to unit largest entry when the
    /// solve grows it past `1e150` (the solution's direction is what counts).
    fn solve(&self, b: &mut [f64]) {
        let n = self.diag.len();
        for i in 0..n.saturating_sub(1) {
            if self.swapped[i] {
                b.swap(i, i + 1);
            }
            b[i + 1] -= self.lower[i] * b[i];
        }
        let rescale = |b: &mut [f64], from: usize| {
            let largest = b[from..].iter().fold(0.0f64, |m, v| m.max(v.abs()));
            if largest > 1e150 {
                b.iter_mut().for_each(|v| *v /= largest);
            }
        };
        b[n - 1] /= self.diag[n - 1];
        if n >= 2 {
            b[n - 2] = (b[n - 2] - self.upper[n - 2] * b[n - 1]) / self.diag[n - 2];
        }
        for i in (0..n.saturating_sub(2)).rev() {
            b[i] = (b[i] - self.upper[i] * b[i + 1] - self.upper2[i] * b[i + 2]) / self.diag[i];
            if b[i].abs() > 1e150 {
                rescale(b, i);
            }
        }
    }
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

    /// The `k` largest pairs of a tridiagonal matrix by bisection and
    /// inverse iteration against faer's divide and conquer: eigenvalues
    /// within 1e-13 ||T||, residuals and orthonormality as verified inside.
    /// A random `T` must be answered; Wilkinson's W+ (pairs of eigenvalues
    /// 1e-14 apart and more) and a `T` of ten identical blocks (every
    /// eigenvalue ten times) either answered correctly or declined.
    fn check_top_k(d: &[f64], e: &[f64], k: usize, must_answer: bool) {
        use faer::linalg::evd::{self, ComputeEigenvectors, SelfAdjointEvdParams};
        use faer::dyn_stack::{MemBuffer, MemStack};
        use faer::{Auto, Spec};
        let n = d.len();
        let dc = faer::Col::<f64>::from_fn(n, |i| d[i]);
        let ec = faer::Col::<f64>::from_fn(n, |i| if i + 1 < n { e[i] } else { 0.0 });
        let mut s = faer::Col::<f64>::zeros(n);
        let params = <SelfAdjointEvdParams as Auto<f64>>::auto();
        let mut mem = MemBuffer::new(evd::self_adjoint_evd_scratch::<f64>(n, ComputeEigenvectors::No, Par::Seq, Spec::new(params)));
        evd::tridiagonal_self_adjoint_evd(dc.as_diagonal(), ec.as_diagonal(), s.as_diagonal_mut(), None, Par::Seq, MemStack::new(&mut mem), Spec::new(params)).unwrap();
        let mut all: Vec<f64> = (0..n).map(|i| s[i]).collect();
        all.sort_by(f64::total_cmp);
        let tnorm = all[0].abs().max(all[n - 1].abs());
        match tridiagonal_top_k(d, e, k) {
            None => {
                eprintln!("tridiagonal_top_k declined: n {n} k {k}");
                assert!(!must_answer, "n {n} k {k}: declined")
            }
            Some((values, x, norm)) => {
                assert!((norm - tnorm).abs() <= 1e-13 * tnorm, "spectral norm");
                for j in 0..k {
                    assert!((values[j] - all[n - k + j]).abs() <= 1e-13 * tnorm, "n {n} k {k}: eigenvalue {j}: {} vs {}", values[j], all[n - k + j]);
                    let mut res = 0.0;
                    for r in 0..n {
                        let mut t = (d[r] - values[j]) * x[(r, j)];
                        if r > 0 {
                            t += e[r - 1] * x[(r - 1, j)];
                        }
                        if r + 1 < n {
                            t += e[r] * x[(r + 1, j)];
                        }
                        res += t * t;
                    }
                    assert!(res.sqrt() <= 1e-12 * tnorm, "residual {j}");
                }
                let gram = x.transpose() * &x - Mat::<f64>::identity(k, k);
                assert!(gram.norm_max() <= 1e-11, "orthogonality {:e}", gram.norm_max());
            }
        }
    }

    #[test]
    fn top_eigenpairs_of_a_tridiagonal_matrix() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(21);
        for (n, k) in [(1usize, 1usize), (2, 1), (2, 2), (50, 50), (500, 40), (1200, 64)] {
            let d: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
            let e: Vec<f64> = (0..n.saturating_sub(1)).map(|_| rng.random_range(-1.0..1.0)).collect();
            check_top_k(&d, &e, k, true);
        }
        // Wilkinson W+ of order 21 and 101: d_i = |i - m|, e = 1.
        for m in [10usize, 50] {
            let n = 2 * m + 1;
            let d: Vec<f64> = (0..n).map(|i| (i as f64 - m as f64).abs()).collect();
            check_top_k(&d, &vec![1.0; n - 1], 6, false);
        }
        // Ten identical blocks of order 30 (split: zero couplings between them).
        let block_d: Vec<f64> = (0..30).map(|_| rng.random_range(-1.0..1.0)).collect();
        let block_e: Vec<f64> = (0..29).map(|_| rng.random_range(-1.0..1.0)).collect();
        let d: Vec<f64> = (0..300).map(|i| block_d[i % 30]).collect();
        let e: Vec<f64> = (0..299).map(|i| if i % 30 == 29 { 0.0 } else { block_e[i % 30] }).collect();
        check_top_k(&d, &e, 25, false);
        // The zero matrix.
        check_top_k(&[0.0; 7], &[0.0; 6], 3, true);
    }

    /// The eigenvalues of `T` as the dense reference (faer's solver on the
    /// tridiagonal written out) has them, within `1e-13 n ||T||`.
    fn check_eigenvalues(d: &[f64], e: &[f64]) {
        let n = d.len();
        let t = Mat::<f64>::from_fn(n, n, |i, j| {
            if i == j {
                d[i]
            } else if i == j + 1 {
                e[j]
            } else if j == i + 1 {
                e[i]
            } else {
                0.0
            }
        });
        let mut reference = t.as_ref().self_adjoint_eigenvalues(faer::Side::Lower).expect("reference");
        reference.sort_by(f64::total_cmp);
        let values = tridiagonal_eigenvalues(d, e).expect("converges");
        assert_eq!(values.len(), n);
        let norm = d.iter().chain(e).fold(0.0f64, |m, v| m.max(v.abs())) * 3.0;
        for (i, (v, r)) in values.iter().zip(&reference).enumerate() {
            assert!((v - r).abs() <= 1e-13 * (n as f64) * norm.max(f64::MIN_POSITIVE), "n {n}, eigenvalue {i}: {v} against {r}");
        }
        assert!(values.windows(2).all(|w| w[0] <= w[1]), "ascending");
    }

    #[test]
    fn root_free_qr_matches_the_dense_eigenvalues() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(31);
        for n in [1usize, 2, 3, 10, 200, 1000] {
            let d: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
            let e: Vec<f64> = (0..n - 1).map(|_| rng.random_range(-1.0..1.0)).collect();
            check_eigenvalues(&d, &e);
            // The same at extreme scales (the blocks are scaled inside).
            for scale in [1e-300, 1e300] {
                let (ds, es): (Vec<f64>, Vec<f64>) = (d.iter().map(|v| v * scale).collect(), e.iter().map(|v| v * scale).collect());
                let values = tridiagonal_eigenvalues(&ds, &es).expect("converges");
                let unscaled = tridiagonal_eigenvalues(&d, &e).expect("converges");
                for (v, u) in values.iter().zip(&unscaled) {
                    assert!((v / scale - u).abs() <= 1e-12 * (n as f64), "scale {scale:e}, n {n}: {v} against {u}");
                }
            }
        }
        // Wilkinson W+ (pairs of close eigenvalues), graded diagonals in
        // both directions (QL and QR), a split matrix, zero and diagonal ones.
        for m in [10usize, 50] {
            let n = 2 * m + 1;
            let d: Vec<f64> = (0..n).map(|i| (i as f64 - m as f64).abs()).collect();
            check_eigenvalues(&d, &vec![1.0; n - 1]);
        }
        let graded: Vec<f64> = (0..60).map(|i| 10f64.powf(-(i as f64) / 6.0)).collect();
        let graded_e: Vec<f64> = graded.windows(2).map(|w| 0.5 * w[1]).collect();
        check_eigenvalues(&graded, &graded_e);
        let reversed: Vec<f64> = graded.iter().rev().copied().collect();
        let reversed_e: Vec<f64> = graded_e.iter().rev().copied().collect();
        check_eigenvalues(&reversed, &reversed_e);
        let d: Vec<f64> = (0..300).map(|_| rng.random_range(-1.0..1.0)).collect();
        let e: Vec<f64> = (0..299).map(|i| if i % 30 == 29 { 0.0 } else { rng.random_range(-1.0..1.0) }).collect();
        check_eigenvalues(&d, &e);
        check_eigenvalues(&[0.0; 7], &[0.0; 6]);
        check_eigenvalues(&[3.0, -1.0, 2.0, 2.0], &[0.0; 3]);
        // Bad input: None, not a panic.
        assert!(tridiagonal_eigenvalues(&[1.0, f64::NAN], &[1.0]).is_none());
        assert!(tridiagonal_eigenvalues(&[1.0, 2.0], &[]).is_none());
        assert_eq!(tridiagonal_eigenvalues(&[], &[]), Some(Vec::new()));
    }

    /// The AVX2 and AVX-512 four-column kernels are the plain one with
    /// fused multiply-adds, bit for bit, on every tail length (fresh random
    /// columns), and within `1e-14 len` of the unfused one. A kernel the CPU
    /// lacks is skipped (CI's machines have AVX2 and mostly AVX-512).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_four_column_kernels_match_the_plain_one() {
        let avx2 = std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma");
        let avx512 = std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("fma");
        let mut rng = rand::rngs::StdRng::seed_from_u64(13);
        for len in [0usize, 1, 3, 7, 8, 9, 15, 16, 17, 31, 64, 100, 257] {
            let cols: Vec<Vec<f64>> = (0..4).map(|_| (0..len + 3).map(|_| rng.random_range(-1.0..1.0)).collect()).collect();
            let c = [&cols[0][..], &cols[1][..], &cols[2][..], &cols[3][..]];
            let vs = [rng.random_range(-1.0..1.0), rng.random_range(-1.0..1.0), rng.random_range(-1.0..1.0), rng.random_range(-1.0..1.0)];
            let x: Vec<f64> = (0..len).map(|_| rng.random_range(-1.0..1.0)).collect();
            let y0: Vec<f64> = (0..len).map(|_| rng.random_range(-1.0..1.0)).collect();
            let (mut y_fused, mut y_plain) = (y0.clone(), y0.clone());
            let d_fused = quad_columns(c, vs, &x, &mut y_fused, fused);
            let d_plain = quad_columns(c, vs, &x, &mut y_plain, unfused);
            let bits = |v: &[f64]| v.iter().map(|e| e.to_bits()).collect::<Vec<_>>();
            let tol = 1e-14 * (len.max(1) as f64);
            assert!(d_fused.iter().zip(&d_plain).all(|(a, b)| (a - b).abs() <= tol), "fused dots against unfused, len {len}");
            assert!(y_fused.iter().zip(&y_plain).all(|(a, b)| (a - b).abs() <= tol), "fused y against unfused, len {len}");
            if avx2 {
                let mut y_avx = y0.clone();
                // SAFETY: AVX2 and FMA were detected; the columns are longer than `x`.
                let d_avx = unsafe { quad_columns_avx2(c, vs, &x, &mut y_avx) };
                assert_eq!(d_avx.map(f64::to_bits), d_fused.map(f64::to_bits), "AVX2 dots, len {len}");
                assert_eq!(bits(&y_avx), bits(&y_fused), "AVX2 y, len {len}");
            }
            if avx512 {
                let mut y_avx = y0.clone();
                // SAFETY: AVX-512F and FMA were detected; the columns are longer than `x`.
                let d_avx = unsafe { quad_columns_avx512(c, vs, &x, &mut y_avx) };
                assert_eq!(d_avx.map(f64::to_bits), d_fused.map(f64::to_bits), "AVX-512 dots, len {len}");
                assert_eq!(bits(&y_avx), bits(&y_fused), "AVX-512 y, len {len}");
            }
        }
    }

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
