//! The column kernels of the symmetric product over the trailing lower
//! triangle ([`symv_columns`]): four columns per pass, in plain Rust (the
//! fallback and the tests' reference), in AVX2 + FMA and in AVX-512F
//! intrinsics, chosen at run time. The SIMD kernels perform the plain
//! kernel's operations in its order with fused multiply-adds, so they agree
//! with it bit for bit when it fuses too.

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
/// 256-bit registers the compiler spilled the partial sums to the stack;
/// see BENCHMARKS.md).
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
/// lane inserts, masked broadcasts and stack spills on an AVX-512 machine,
/// well behind OpenBLAS's `dsytrd` (see BENCHMARKS.md).
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

/// Columns `s0 .. s1` of [`symv_lower`](super::reduction::symv_lower) accumulated into `y` (length `m`),
/// four columns per pass so that `v` and `y` are streamed once for the
/// four. On x86-64 with AVX-512F or AVX2 + FMA (detected at run time) in
/// fused multiply-adds, which halve the arithmetic instructions (the pass
/// was bound by them, not by memory, without FMA); elsewhere unfused, so the
/// results differ between machines by rounding only.
#[allow(clippy::too_many_arguments)]
pub(super) fn symv_columns(w: &[f64], n: usize, off: usize, m: usize, s0: usize, s1: usize, v: &[f64], y: &mut [f64]) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

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
}
