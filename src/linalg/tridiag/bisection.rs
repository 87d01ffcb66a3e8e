//! Sturm counts of a symmetric tridiagonal matrix `T`, and its `k` largest
//! eigenpairs as LAPACK's `dstebz` + `dstein` do them: eigenvalues by
//! bisection on Sturm counts, eigenvectors by inverse iteration with
//! `T - lambda I` factored by Gaussian elimination with partial pivoting.

use super::scaled_norm;
use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, Par};

/// The number of eigenvalues of the symmetric tridiagonal `T` (diagonal
/// `d`, subdiagonal `e`) above `x`: `n` minus the Sturm count at `x`.
pub(crate) fn count_above(d: &[f64], e: &[f64], x: f64) -> usize {
    d.len() - sturm_counts(d, e, pivot_floor(e), &[x])[0]
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
}
