//! Matrix products with a thin right-hand side (`c <= 8` columns, as in a
//! Krylov block): `C = alpha A B (+ C)` and `C = alpha A^T B (+ C)` for a
//! column-major `A`.
//!
//! One file: both products' kernels in both instruction sets, their run-time
//! dispatch ([`Isa`]) and the split between threads share one operand layout
//! (the padded, row-major `B`, the `(storage, lda)` view of `A`, the
//! per-range outputs), which no part is of use without.
//!
//! A general matrix multiply packs `A` into panels before its micro-kernel;
//! with eight columns on the right that copy costs as much as the product
//! (see BENCHMARKS.md). These kernels read `A` once, in place, column by
//! column:
//!
//! - `A B` (`A`: `m x k`): for 8 rows at a time, the `8 x c` block of `C`
//!   stays in registers over sixteen columns of `A` (one vector load of `A`,
//!   `c` fused multiply-adds with broadcast entries of `B`);
//! - `A^T B` (`A`: `k x m`): for three columns of `A` at a time, `3 c` dot
//!   products with the columns of `B` run side by side over `k`, then each
//!   is summed across its lanes.
//!
//! Both split their output between the rayon threads (rows of `A B`, columns
//! of `A^T B`), each thread computing its part in full, so the result does
//! not depend on the thread count. The kernels are x86-64 intrinsics in two
//! instruction sets, chosen at run time: AVX-512F (8-lane vectors, 32
//! registers) and AVX2 with FMA (4-lane vectors, 16 registers: the same
//! loops on half-width register blocks, see [`ab_rows_avx2`] and
//! [`atb_block_avx2`]). Without either (and for wider, empty or row-major
//! operands) [`matmul_thin_aware`] hands the product to faer.

use faer::{MatMut, MatRef};

/// Most columns of `B` the thin kernels take (wider products go to faer).
pub(crate) const THIN_MAX_COLUMNS: usize = 8;

/// Work (`m k`, entries of `A`) below which one thread does the whole
/// product.
const PARALLEL_MIN_WORK: usize = 1 << 16;

/// Whether `a` (with `b` of `c` columns) suits the thin kernels: one of
/// their instruction sets available ([`Isa::detect`]), `1 <= c <= 8`, `A`
/// not empty and column-major (unit row stride, columns at least `rows`
/// apart). `B` and the output are read and
/// written by index, any strides.
pub(crate) fn thin_applies(a: MatRef<'_, f64>, b: MatRef<'_, f64>) -> bool {
    let columns_apart = a.ncols() <= 1 || a.col_stride() >= a.nrows() as isize;
    Isa::detect().is_some() && (1..=THIN_MAX_COLUMNS).contains(&b.ncols()) && a.row_stride() == 1 && columns_apart && a.nrows() > 0 && a.ncols() > 0
}

/// Rows of `A B` per thread range: a multiple of the 8-lane vector.
const ROWS: usize = 8;
/// Columns of `A` per register block of `A^T B`.
const TR_COLS: usize = 3;
/// Rows ahead of the AVX2 `A B` kernel's loads that it asks the cache for
/// (in its first pass over a slice of `A`): faster than no prefetch on
/// large shapes, the same on small ones (see BENCHMARKS.md).
const PREFETCH_ROWS: usize = 128;
/// Entries of `A` from which the AVX2 `A B` kernel runs instead of faer.
/// Below it (a Krylov basis times its coefficients, `3600 x 232`; features
/// times weights, `1200 x 512`) `A` is mostly in cache, where faer's packed
/// product is faster (see BENCHMARKS.md); above it (eKSVD's stored `1200 x 1200` blocks,
/// streamed from memory in the Dual's products) the AVX2 kernel is ahead.
const AVX2_AB_MIN_ENTRIES: usize = 1 << 20;
/// Width of the padded right-hand side.
const W: usize = THIN_MAX_COLUMNS;

/// The instruction set a thin kernel is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Isa {
    /// AVX-512F: 8-lane `f64` vectors.
    Avx512,
    /// AVX2 with FMA: 4-lane `f64` vectors.
    Avx2,
}

impl Isa {
    /// The widest instruction set of the thin kernels this CPU has
    /// (detected at run time, cached by the standard library; a hypervisor
    /// may hide AVX-512 from a CPU that has it); `None` off x86-64 or
    /// without AVX2 and FMA, where the thin products go to faer.
    pub(crate) fn detect() -> Option<Isa> {
        if cpu_has(Isa::Avx512) {
            Some(Isa::Avx512)
        } else if cpu_has(Isa::Avx2) {
            Some(Isa::Avx2)
        } else {
            None
        }
    }

    /// Every instruction set of the thin kernels this CPU has, widest first
    /// (the tests check each against plain sums).
    #[cfg(test)]
    pub(crate) fn available() -> Vec<Isa> {
        [Isa::Avx512, Isa::Avx2].into_iter().filter(|&isa| cpu_has(isa)).collect()
    }
}

/// Whether this CPU runs the kernels of `isa` (AVX-512F; AVX2 and FMA).
fn cpu_has(isa: Isa) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        match isa {
            Isa::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            Isa::Avx2 => std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = isa;
        false
    }
}

/// Repeats `$body` with `$j` bound to 0, 1, ..., 7 (a register block's
/// columns, unrolled so that each accumulator stays in its register).
#[cfg(target_arch = "x86_64")]
macro_rules! for8 {
    ($j:ident, $body:block) => {{
        { const $j: usize = 0; $body }
        { const $j: usize = 1; $body }
        { const $j: usize = 2; $body }
        { const $j: usize = 3; $body }
        { const $j: usize = 4; $body }
        { const $j: usize = 5; $body }
        { const $j: usize = 6; $body }
        { const $j: usize = 7; $body }
    }};
}

/// Rows `r0..r1` of `A B` (`A` column-major, leading dimension `lda`, `k`
/// columns; `bt` = `B` row-major `k x 8`, zero-padded), written
/// column-major into `out` (`(r1 - r0) x 8`). Sixteen columns of `A` at a
/// time are streamed down together (sixteen sequential streams, which the
/// hardware prefetches), each 8-row slice of them updating the `8 x 8`
/// block of the product held in registers; between groups of columns the
/// product rows wait in `out` (in cache: `8 (r1 - r0)` numbers). Groups of
/// 16 are faster than groups of 8 on large shapes and the same on small
/// ones (see BENCHMARKS.md).
///
/// # Safety
/// AVX-512F must be available; `a` holds `(k - 1) lda + r1` entries or more
/// (`k > 0`), `bt` `8 k`, `out` `8 (r1 - r0)`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn ab_rows(a: &[f64], lda: usize, k: usize, bt: &[f64], r0: usize, r1: usize, out: &mut [f64]) {
    use std::arch::x86_64::*;
    debug_assert!(k > 0 && a.len() >= (k - 1) * lda + r1 && bt.len() >= W * k && out.len() >= W * (r1 - r0));
    let len = r1 - r0;
    let po = out.as_mut_ptr();
    let mut p0 = 0;
    while p0 < k {
        let group = (k - p0).min(16);
        let mut r = r0;
        while r < r1 {
            let rows = (r1 - r).min(8);
            let mask: __mmask8 = if rows >= 8 { 0xff } else { (1u16 << rows) as u8 - 1 };
            let mut acc = [_mm512_setzero_pd(); W];
            if p0 > 0 {
                for8!(J, {
                    acc[J] = _mm512_maskz_loadu_pd(mask, po.add(J * len + (r - r0)));
                });
            }
            for q in 0..group {
                let p = p0 + q;
                let col = _mm512_maskz_loadu_pd(mask, a.as_ptr().add(p * lda + r));
                let b = bt.as_ptr().add(p * W);
                for8!(J, {
                    acc[J] = _mm512_fmadd_pd(col, _mm512_set1_pd(*b.add(J)), acc[J]);
                });
            }
            for8!(J, {
                _mm512_mask_storeu_pd(po.add(J * len + (r - r0)), mask, acc[J]);
            });
            r += rows;
        }
        p0 += group;
    }
}

/// Columns `i0..i1` of `A^T B` (`A` column-major, `k` rows, leading
/// dimension `lda`; `b` = `B` column-major `k x 8`, zero-padded), written
/// row-major into `out` (`(i1 - i0) x 8`): for three columns of `A` at a
/// time, 24 dot products side by side in 8-lane partial sums over `k`
/// (masked at the end), then each summed across its lanes.
///
/// # Safety
/// AVX-512F must be available; `a` holds `(i1 - 1) lda + k` entries or more
/// (`i1 > i0`), `b` `8 k`, `out` `8 (i1 - i0)`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn atb_cols(a: &[f64], lda: usize, k: usize, b: &[f64], i0: usize, i1: usize, out: &mut [f64]) {
    debug_assert!(i1 > i0 && a.len() >= (i1 - 1) * lda + k && b.len() >= W * k && out.len() >= W * (i1 - i0));
    for (i, width) in column_blocks(i0, i1) {
        let o = &mut out[(i - i0) * W..];
        match width {
            1 => atb_block::<1>(a, lda, k, b, i, o),
            2 => atb_block::<2>(a, lda, k, b, i, o),
            _ => atb_block::<TR_COLS>(a, lda, k, b, i, o),
        }
    }
}

/// The register blocks of columns `i0..i1` of `A^T B`: `(first column,
/// width)`, [`TR_COLS`] wide except the last one or two.
#[cfg(target_arch = "x86_64")]
fn column_blocks(i0: usize, i1: usize) -> impl Iterator<Item = (usize, usize)> {
    (i0..i1).step_by(TR_COLS).map(move |i| (i, (i1 - i).min(TR_COLS)))
}

/// `T` columns of [`atb_cols`] from column `i`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::needless_range_loop)] // `t` also offsets the column in `a`
unsafe fn atb_block<const T: usize>(a: &[f64], lda: usize, k: usize, b: &[f64], i: usize, out: &mut [f64]) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_pd(); W]; T];
    let mut p = 0;
    while p < k {
        let left = k - p;
        let mask: __mmask8 = if left >= 8 { 0xff } else { (1u16 << left) as u8 - 1 };
        let mut cols = [_mm512_setzero_pd(); T];
        for t in 0..T {
            cols[t] = _mm512_maskz_loadu_pd(mask, a.as_ptr().add((i + t) * lda + p));
        }
        for8!(J, {
            let bj = _mm512_maskz_loadu_pd(mask, b.as_ptr().add(J * k + p));
            for t in 0..T {
                acc[t][J] = _mm512_fmadd_pd(cols[t], bj, acc[t][J]);
            }
        });
        p += 8;
    }
    for t in 0..T {
        for8!(J, {
            out[t * W + J] = _mm512_reduce_add_pd(acc[t][J]);
        });
    }
}

/// The lane mask of an AVX2 masked load or store: the first `n` of 4
/// lanes (sign bits set), `n <= 4`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn lanes4(n: usize) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    let n = n.min(4) as i64;
    _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_set_epi64x(3, 2, 1, 0))
}

/// [`ab_rows`] in AVX2 with FMA. Sixteen registers hold an `8 x 4` block of
/// the product (two 4-lane vectors of rows, four columns), so each group of
/// sixteen columns of `A` is applied to an 8-row slice twice, for columns
/// 0-3 and 4-7 of `B`: the second pass reads the slice (1 KB) from L1, so
/// `A` still comes from memory once. Per column of `A` and half: two vector
/// loads and four broadcasts for eight fused multiply-adds.
///
/// # Safety
/// AVX2 and FMA must be available; as [`ab_rows`] otherwise.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn ab_rows_avx2(a: &[f64], lda: usize, k: usize, bt: &[f64], r0: usize, r1: usize, out: &mut [f64]) {
    use std::arch::x86_64::*;
    debug_assert!(k > 0 && a.len() >= (k - 1) * lda + r1 && bt.len() >= W * k && out.len() >= W * (r1 - r0));
    let len = r1 - r0;
    let po = out.as_mut_ptr();
    let pa = a.as_ptr();
    let mut p0 = 0;
    while p0 < k {
        let group = (k - p0).min(16);
        let mut r = r0;
        while r < r1 {
            let rows = (r1 - r).min(8);
            // Lanes of the two row vectors; a vector with no rows is never
            // loaded or stored (its address may lie past the matrix).
            let (n0, n1) = (rows.min(4), rows.saturating_sub(4));
            let (m0, m1) = (lanes4(n0), lanes4(n1));
            for half in 0..2 {
                let c0 = 4 * half;
                // Per column j of B: rows r .. r + 4 and r + 4 .. r + 8.
                let mut acc = [[_mm256_setzero_pd(); 2]; 4];
                if p0 > 0 {
                    for (j, aj) in acc.iter_mut().enumerate() {
                        let o = po.add((c0 + j) * len + (r - r0));
                        aj[0] = _mm256_maskload_pd(o, m0);
                        if n1 > 0 {
                            aj[1] = _mm256_maskload_pd(o.add(4), m1);
                        }
                    }
                }
                // A full slice of 8 rows loads plainly (and prefetches in
                // the first pass); the last, shorter one by lane masks.
                let full = rows == 8;
                for q in 0..group {
                    let p = p0 + q;
                    let col = pa.add(p * lda + r);
                    let (x0, x1) = if full {
                        if half == 0 {
                            _mm_prefetch::<_MM_HINT_T0>(col.wrapping_add(PREFETCH_ROWS) as *const i8);
                        }
                        (_mm256_loadu_pd(col), _mm256_loadu_pd(col.add(4)))
                    } else {
                        (_mm256_maskload_pd(col, m0), if n1 > 0 { _mm256_maskload_pd(col.add(4), m1) } else { _mm256_setzero_pd() })
                    };
                    let b = bt.as_ptr().add(p * W + c0);
                    for (j, aj) in acc.iter_mut().enumerate() {
                        let bj = _mm256_broadcast_sd(&*b.add(j));
                        aj[0] = _mm256_fmadd_pd(x0, bj, aj[0]);
                        aj[1] = _mm256_fmadd_pd(x1, bj, aj[1]);
                    }
                }
                for (j, aj) in acc.iter().enumerate() {
                    let o = po.add((c0 + j) * len + (r - r0));
                    _mm256_maskstore_pd(o, m0, aj[0]);
                    if n1 > 0 {
                        _mm256_maskstore_pd(o.add(4), m1, aj[1]);
                    }
                }
            }
            r += rows;
        }
        p0 += group;
    }
}

/// [`atb_cols`] in AVX2 with FMA: blocks of three columns of `A` against
/// four columns of `B` at a time (twelve 4-lane partial sums, three loads
/// of `A` and four of `B` per step), the two halves of `B` one after the
/// other over `k` (the three columns of `A`, `24 k` bytes, are read again
/// from L1 or L2).
///
/// # Safety
/// AVX2 and FMA must be available; as [`atb_cols`] otherwise.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn atb_cols_avx2(a: &[f64], lda: usize, k: usize, b: &[f64], i0: usize, i1: usize, out: &mut [f64]) {
    debug_assert!(i1 > i0 && a.len() >= (i1 - 1) * lda + k && b.len() >= W * k && out.len() >= W * (i1 - i0));
    for (i, width) in column_blocks(i0, i1) {
        let o = &mut out[(i - i0) * W..];
        for c0 in [0, 4] {
            match width {
                1 => atb_block_avx2::<1>(a, lda, k, b, i, c0, o),
                2 => atb_block_avx2::<2>(a, lda, k, b, i, c0, o),
                _ => atb_block_avx2::<TR_COLS>(a, lda, k, b, i, c0, o),
            }
        }
    }
}

/// `T` columns of [`atb_cols_avx2`] from column `i`, against columns
/// `c0..c0 + 4` of `B`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::needless_range_loop)] // `t` also offsets the column in `a`
unsafe fn atb_block_avx2<const T: usize>(a: &[f64], lda: usize, k: usize, b: &[f64], i: usize, c0: usize, out: &mut [f64]) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_pd(); 4]; T];
    let pa = a.as_ptr();
    let pb = b.as_ptr();
    let full = k - k % 4;
    let mut p = 0;
    while p < full {
        let mut cols = [_mm256_setzero_pd(); T];
        for t in 0..T {
            cols[t] = _mm256_loadu_pd(pa.add((i + t) * lda + p));
        }
        for j in 0..4 {
            let bj = _mm256_loadu_pd(pb.add((c0 + j) * k + p));
            for t in 0..T {
                acc[t][j] = _mm256_fmadd_pd(cols[t], bj, acc[t][j]);
            }
        }
        p += 4;
    }
    if p < k {
        let m = lanes4(k - p);
        let mut cols = [_mm256_setzero_pd(); T];
        for t in 0..T {
            cols[t] = _mm256_maskload_pd(pa.add((i + t) * lda + p), m);
        }
        for j in 0..4 {
            let bj = _mm256_maskload_pd(pb.add((c0 + j) * k + p), m);
            for t in 0..T {
                acc[t][j] = _mm256_fmadd_pd(cols[t], bj, acc[t][j]);
            }
        }
    }
    for t in 0..T {
        for j in 0..4 {
            let v = acc[t][j];
            let pair = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
            out[t * W + c0 + j] = _mm_cvtsd_f64(_mm_add_sd(pair, _mm_unpackhi_pd(pair, pair)));
        }
    }
}

/// The column-major storage of `m` (unit row stride) as one slice from its
/// first entry to its last, with its column stride.
fn storage(m: MatRef<'_, f64>) -> (&[f64], usize) {
    let (rows, cols) = (m.nrows(), m.ncols());
    let ld = if cols > 1 { m.col_stride() as usize } else { rows };
    let len = if rows == 0 || cols == 0 { 0 } else { (cols - 1) * ld + rows };
    // SAFETY: a MatRef with unit row stride and column stride `ld >= rows`
    // (checked by the callers through `thin_applies`) views the entries
    // `j * ld + i` for i < rows, j < cols, all inside this range; the
    // entries between columns are not read through it.
    (unsafe { std::slice::from_raw_parts(m.as_ptr(), len) }, ld)
}

/// Runs `kernel(lo, hi, buf)` on one contiguous range of `0..n` per rayon
/// thread (range ends multiples of `align`; one range when `work` is small),
/// `buf` holding `8 (hi - lo)` zeros, and returns the ranges with their
/// buffers in order. Each range is computed in full by one thread, so the
/// numbers do not depend on the thread count.
fn per_range<K>(n: usize, work: usize, align: usize, kernel: K) -> Vec<(usize, usize, Vec<f64>)>
where
    K: Fn(usize, usize, &mut [f64]) + Sync,
{
    use rayon::prelude::*;
    let threads = if work < PARALLEL_MIN_WORK { 1 } else { rayon::current_num_threads().max(1) };
    let per = n.div_ceil(threads).div_ceil(align) * align;
    let ranges: Vec<(usize, usize)> = (0..threads).map(|t| ((t * per).min(n), ((t + 1) * per).min(n))).filter(|(a, b)| a < b).collect();
    ranges
        .into_par_iter()
        .map(|(lo, hi)| {
            let mut buf = vec![0.0f64; (hi - lo) * W];
            kernel(lo, hi, &mut buf);
            (lo, hi, buf)
        })
        .collect()
}

/// `out[(i, j)] = v`, or `+= v` when accumulating.
fn store(out: &mut MatMut<'_, f64>, i: usize, j: usize, v: f64, accumulate: bool) {
    if accumulate {
        out[(i, j)] += v;
    } else {
        out[(i, j)] = v;
    }
}

/// `out = alpha A B + beta out` (`beta` 0 or 1) for `A` `m x k`, `B` `k x c`
/// ([`thin_applies`]), with the kernel of `isa` (one this CPU has).
pub(crate) fn thin_mul(isa: Isa, mut out: MatMut<'_, f64>, accumulate: bool, a: MatRef<'_, f64>, b: MatRef<'_, f64>, alpha: f64) {
    let (m, k, c) = (a.nrows(), a.ncols(), b.ncols());
    assert!(b.nrows() == k && out.nrows() == m && out.ncols() == c && c <= W);
    let mut bt = vec![0.0f64; k * W];
    for p in 0..k {
        for j in 0..c {
            bt[p * W + j] = alpha * b[(p, j)];
        }
    }
    let (a_data, lda) = storage(a);
    assert!(cpu_has(isa), "thin_mul: {isa:?} not available");
    let parts = per_range(m, m * k, ROWS, |r0, r1, buf| {
        // SAFETY: `isa` was checked available above; `a_data` spans the k
        // columns of `lda` entries up to row m >= r1.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            match isa {
                Isa::Avx512 => ab_rows(a_data, lda, k, &bt, r0, r1, buf),
                Isa::Avx2 => ab_rows_avx2(a_data, lda, k, &bt, r0, r1, buf),
            }
        };
    });
    for (r0, r1, buf) in parts {
        // Column-major `(r1 - r0) x 8`.
        for j in 0..c {
            for r in r0..r1 {
                store(&mut out, r, j, buf[j * (r1 - r0) + (r - r0)], accumulate);
            }
        }
    }
}

/// `out = alpha A^T B + beta out` (`beta` 0 or 1) for `A` `k x m`, `B`
/// `k x c` ([`thin_applies`] on `A`), with the kernel of `isa`.
pub(crate) fn thin_tr_mul(isa: Isa, mut out: MatMut<'_, f64>, accumulate: bool, a: MatRef<'_, f64>, b: MatRef<'_, f64>, alpha: f64) {
    let (k, m, c) = (a.nrows(), a.ncols(), b.ncols());
    assert!(b.nrows() == k && out.nrows() == m && out.ncols() == c && c <= W);
    let mut bp = vec![0.0f64; k * W];
    for j in 0..c {
        for p in 0..k {
            bp[j * k + p] = b[(p, j)];
        }
    }
    let (a_data, lda) = storage(a);
    assert!(cpu_has(isa), "thin_tr_mul: {isa:?} not available");
    let parts = per_range(m, m * k, TR_COLS, |i0, i1, buf| {
        // SAFETY: `isa` was checked available above; `a_data` spans the
        // m >= i1 columns of `lda` entries, k rows each.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            match isa {
                Isa::Avx512 => atb_cols(a_data, lda, k, &bp, i0, i1, buf),
                Isa::Avx2 => atb_cols_avx2(a_data, lda, k, &bp, i0, i1, buf),
            }
        };
    });
    for (i0, i1, buf) in parts {
        // Row-major `(i1 - i0) x 8`.
        for i in i0..i1 {
            for j in 0..c {
                store(&mut out, i, j, alpha * buf[(i - i0) * W + j], accumulate);
            }
        }
    }
}

/// `dst = alpha lhs rhs` (`Accum::Replace`) or `dst += alpha lhs rhs`
/// (`Accum::Add`) in `f64`: the thin kernels when `rhs` has at most 8
/// columns and `lhs` is a column-major matrix or the transpose of one,
/// faer's matrix multiply otherwise (with `par`).
pub fn matmul_thin_aware(dst: MatMut<'_, f64>, accum: faer::Accum, lhs: MatRef<'_, f64>, rhs: MatRef<'_, f64>, alpha: f64, par: faer::Par) {
    let accumulate = accum == faer::Accum::Add;
    if let (Some(isa), true) = (Isa::detect(), lhs.nrows() > 0 && lhs.ncols() > 0) {
        if thin_applies(lhs, rhs) && (isa == Isa::Avx512 || lhs.nrows() * lhs.ncols() >= AVX2_AB_MIN_ENTRIES) {
            return thin_mul(isa, dst, accumulate, lhs, rhs, alpha);
        }
        let lhs_t = lhs.transpose();
        if thin_applies(lhs_t, rhs) {
            return thin_tr_mul(isa, dst, accumulate, lhs_t, rhs, alpha);
        }
    }
    faer::linalg::matmul::matmul(dst, accum, lhs, rhs, alpha, par);
}

/// `A B` in `f64` through [`matmul_thin_aware`] (the thin kernels when `B`
/// has at most 8 columns).
pub fn matmul_thin(a: &nalgebra::DMatrix<f64>, b: &nalgebra::DMatrix<f64>) -> nalgebra::DMatrix<f64> {
    assert_eq!(a.ncols(), b.nrows(), "matmul_thin: inner dimensions");
    let mut c = nalgebra::DMatrix::<f64>::zeros(a.nrows(), b.ncols());
    matmul_thin_aware(super::faer_mut(&mut c), faer::Accum::Replace, super::faer_ref(a), super::faer_ref(b), 1.0, faer::Par::rayon(0));
    c
}

/// `A^T B` in `f64` through [`matmul_thin_aware`].
pub fn matmul_tn_thin(a: &nalgebra::DMatrix<f64>, b: &nalgebra::DMatrix<f64>) -> nalgebra::DMatrix<f64> {
    assert_eq!(a.nrows(), b.nrows(), "matmul_tn_thin: inner dimensions");
    let mut c = nalgebra::DMatrix::<f64>::zeros(a.ncols(), b.ncols());
    matmul_thin_aware(super::faer_mut(&mut c), faer::Accum::Replace, super::faer_ref(a).transpose(), super::faer_ref(b), 1.0, faer::Par::rayon(0));
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use faer::Accum;
    use nalgebra::DMatrix;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    fn random(rng: &mut StdRng, r: usize, c: usize) -> DMatrix<f64> {
        DMatrix::from_fn(r, c, |_, _| rng.random_range(-1.0..1.0))
    }

    /// `alpha A B (+ C)` by plain sums in the natural order.
    fn reference(a: MatRef<'_, f64>, b: MatRef<'_, f64>, c0: &DMatrix<f64>, accumulate: bool, alpha: f64) -> DMatrix<f64> {
        DMatrix::from_fn(a.nrows(), b.ncols(), |i, j| {
            let s: f64 = (0..a.ncols()).map(|p| a[(i, p)] * b[(p, j)]).sum();
            alpha * s + if accumulate { c0[(i, j)] } else { 0.0 }
        })
    }

    #[test]
    fn thin_products_match_plain_sums_on_every_tail() {
        // Rows and inner sizes around the 8-lane vector and the 3-column
        // block, every width 1..=8, sub-matrices with a leading dimension
        // above their rows, replacing and accumulating: within 1e-13
        // relative of plain sums (all entries O(1), so of the inner size).
        let mut rng = StdRng::seed_from_u64(21);
        for &(m, k) in &[(1usize, 1usize), (3, 2), (4, 4), (5, 6), (7, 5), (8, 8), (9, 17), (12, 7), (16, 3), (23, 40), (130, 71), (601, 257)] {
            for c in 1..=THIN_MAX_COLUMNS {
                let big = random(&mut rng, m + 5, k + 2);
                let a = crate::linalg::faer_ref(&big).submatrix(2, 1, m, k);
                let b_store = random(&mut rng, k + 3, c);
                let b = crate::linalg::faer_ref(&b_store).subrows(3, k);
                let c0 = random(&mut rng, m, c);
                for (accumulate, alpha) in [(false, 1.0), (true, -0.75)] {
                    let want = reference(a, b, &c0, accumulate, alpha);
                    let mut got = c0.clone();
                    let accum = if accumulate { Accum::Add } else { Accum::Replace };
                    matmul_thin_aware(crate::linalg::faer_mut(&mut got), accum, a, b, alpha, faer::Par::rayon(0));
                    let err = (&got - &want).amax();
                    assert!(err <= 1e-13 * k as f64, "A B, m {m} k {k} c {c} accumulate {accumulate}: {err:e}");
                    // A^T B with A^T stored: the transpose of a k x m matrix.
                    let at_store = big.transpose();
                    let at = crate::linalg::faer_ref(&at_store).submatrix(1, 2, k, m);
                    let mut got_t = c0.clone();
                    matmul_thin_aware(crate::linalg::faer_mut(&mut got_t), accum, at.transpose(), b, alpha, faer::Par::rayon(0));
                    let err = (&got_t - &want).amax();
                    assert!(err <= 1e-13 * k as f64, "A^T B, m {m} k {k} c {c} accumulate {accumulate}: {err:e}");
                    // Every instruction set this CPU has, not only the one
                    // chosen at run time (an AVX-512 machine also runs the
                    // AVX2 kernels here).
                    for isa in Isa::available() {
                        let mut got = c0.clone();
                        thin_mul(isa, crate::linalg::faer_mut(&mut got), accumulate, a, b, alpha);
                        let err = (&got - &want).amax();
                        assert!(err <= 1e-13 * k as f64, "{isa:?} A B, m {m} k {k} c {c} accumulate {accumulate}: {err:e}");
                        let mut got_t = c0.clone();
                        thin_tr_mul(isa, crate::linalg::faer_mut(&mut got_t), accumulate, at, b, alpha);
                        let err = (&got_t - &want).amax();
                        assert!(err <= 1e-13 * k as f64, "{isa:?} A^T B, m {m} k {k} c {c} accumulate {accumulate}: {err:e}");
                    }
                }
            }
        }
    }

    #[test]
    fn thin_products_do_not_depend_on_the_thread_count() {
        let mut rng = StdRng::seed_from_u64(5);
        let a = random(&mut rng, 2000, 300);
        let b = random(&mut rng, 300, 8);
        let bt = random(&mut rng, 2000, 8);
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| (crate::linalg::matmul_thin(&a, &b), crate::linalg::matmul_tn_thin(&a, &bt)))
        };
        let (one, one_t) = run(1);
        for threads in [2, 3, 7] {
            let (many, many_t) = run(threads);
            assert_eq!(one, many, "A B on {threads} threads");
            assert_eq!(one_t, many_t, "A^T B on {threads} threads");
        }
    }

    #[test]
    fn wide_or_row_major_products_go_to_faer() {
        let mut rng = StdRng::seed_from_u64(9);
        let a = random(&mut rng, 50, 20);
        let b = random(&mut rng, 20, 9);
        let got = crate::linalg::matmul_thin(&a, &b);
        assert!((&got - &a * &b).amax() <= 1e-13);
        // A row-major left-hand side (neither A nor A^T column-major with
        // unit row stride... A^T is: that is the transposed kernel) and a
        // row-major right-hand side (read by index).
        let at = a.transpose();
        let b8 = random(&mut rng, 20, 8);
        let b8t = b8.transpose();
        let mut out = DMatrix::<f64>::zeros(50, 8);
        matmul_thin_aware(crate::linalg::faer_mut(&mut out), Accum::Replace, crate::linalg::faer_ref(&at).transpose(), crate::linalg::faer_ref(&b8t).transpose(), 1.0, faer::Par::Seq);
        assert!((&out - &a * &b8).amax() <= 1e-13);
        // Wider than 8 columns or empty: not thin.
        assert!(!thin_applies(crate::linalg::faer_ref(&a), crate::linalg::faer_ref(&b)));
        let empty = DMatrix::<f64>::zeros(0, 20);
        assert!(!thin_applies(crate::linalg::faer_ref(&empty), crate::linalg::faer_ref(&b8)));
        assert_eq!(crate::linalg::matmul_thin(&empty, &b8).nrows(), 0);
    }
}
