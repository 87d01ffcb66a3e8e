//! CPU linear algebra: the scalar trait, input validation, dense matrix
//! products and the symmetric eigendecomposition (full, and the largest `k`
//! pairs by block Lanczos in [`symmetric_eigen_largest`]).
//!
//! Public data types are `nalgebra` matrices (column-major). Heavy kernels
//! (matrix products, eigendecompositions) run through `faer`, which is
//! multi-threaded and several times faster than nalgebra's own routines at the
//! sizes the methods use; `faer` sees our matrices through zero-copy views of
//! their column-major storage.
//!
//! Submodules: `products` (dense products and Gram matrices), `eigen`
//! (symmetric eigendecompositions), `top_eigen` (the largest pairs),
//! `tridiag` (the blocked tridiagonalisation), `thin` (products with a thin
//! factor), `exp_table` (vectorised exponentials). This file keeps the
//! scalar trait, the elementary functions and the checks the whole crate
//! builds on; it runs past 600 lines only through its unit tests, which test
//! the submodules' results against each other and stay beside the re-exports.

use faer::{Accum, MatMut, MatRef, Par, Side};
use nalgebra::{DMatrix, DVector};

use crate::error::{Error, Result};

mod eigen;
pub(crate) use eigen::symmetric_eigen_top_by_tridiagonal;
pub use eigen::{symmetric_eigen, symmetric_eigen_above, symmetric_eigen_faer, symmetric_eigenvalues, symmetric_tridiagonal, SymmetricEigen};
mod exp_table;
mod products;
pub use products::{gram_tall, matmul, matmul_acc, matmul_nt, matmul_tn, product, weighted_gram, MatrixProduct, WEIGHTED_GRAM_BLOCK, WEIGHTED_GRAM_TRIANGULAR_BLOCK};
pub use exp_table::{exp_nonpositive_f32_table, exp_nonpositive_f64_table, table_exp_available};
mod top_eigen;
mod thin;
pub use thin::{matmul_thin, matmul_thin_aware, matmul_tn_thin};
mod tridiag;
pub use top_eigen::{symmetric_eigen_largest, symmetric_eigen_largest_with, symmetric_operator_largest, symmetric_operator_largest_from, symmetric_operator_largest_on, symmetric_operator_largest_within_budget, symmetric_operator_largest_within_budget_on, AllRows, DenseSymmetric, LargestSymmetricEigen, RowSplit, SymmetricOperator, TopEigenSettings};
pub(crate) use top_eigen::{block_lanczos_in, check_arguments, check_replicated, dense_from_operator, digest, gram_factor, gram_schmidt_block, local_rows_of, random_rows, widening, BlockOutcome, BlockShape, KrylovBasis};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// A floating-point scalar the CPU path computes in: `f32` or `f64`.
///
/// The GPU path always computes in `f32` and converts at the boundary.
pub trait Real:
    nalgebra::RealField + Copy + Send + Sync + bytemuck::Pod + std::fmt::Debug + sealed::Sealed
{
    /// Converts from `f64` (rounding for `f32`).
    fn from_f64_lossy(x: f64) -> Self;
    /// Converts to `f64`.
    fn to_f64_exact(self) -> f64;
    /// Converts to `f32` (rounding for `f64`).
    fn to_f32_lossy(self) -> f32;
    /// Converts from `f32`.
    fn from_f32_exact(x: f32) -> Self;
    /// `dst = beta_keep * dst + lhs * rhs` through faer, with
    /// `lhs`, `rhs` possibly transposed views.
    /// `v <- exp(v)` for entries `v <= 0` (kernel values), in a form the
    /// compiler vectorises: see [`exp_nonpositive_f64`].
    fn exp_nonpositive_in_place(values: &mut [Self]);
    /// `exp(x)` for `x <= 0` on one scalar ([`exp_nonpositive_f64`] or
    /// [`exp_nonpositive_f32`]), inlined into vectorised loops.
    fn exp_nonpositive(x: Self) -> Self;
    /// Entries per block of [`Real::exp_nonpositive_block`]: four vectors of
    /// 512 bits (32 `f64`, 64 `f32`).
    const EXP_BLOCK: usize;
    /// `v <- exp(v)` for the `EXP_BLOCK` entries `v <= 0` of `block`, bit for
    /// bit [`Real::exp_nonpositive`] of each, with the steps interleaved
    /// across the block ([`exp_nonpositive_f64_block`]); inlined into
    /// vectorised loops. Panics if `block.len() != EXP_BLOCK`.
    fn exp_nonpositive_block(block: &mut [Self]);
    /// `v <- exp(v)` for every entry `v <= 0` of `values`: on x86-64 with
    /// AVX-512F (detected at run time) by the table method, bit for bit
    /// [`exp_nonpositive_f64_table`] / [`exp_nonpositive_f32_table`] of each
    /// entry; elsewhere by [`Real::exp_nonpositive_block`] and, for the last
    /// entries, [`Real::exp_nonpositive`], bit for bit the latter for each.
    /// Either way an entry's value does not depend on its position in the
    /// slice. Every exponential pass of the crate goes through here; inlined
    /// into vectorised loops (the portable path vectorises there).
    fn exp_nonpositive_slice(values: &mut [Self]);
    #[doc(hidden)]
    fn faer_matmul_seq(dst: MatMut<'_, Self>, lhs: MatRef<'_, Self>, rhs: MatRef<'_, Self>);
    #[doc(hidden)]
    fn faer_matmul_seq_add(dst: MatMut<'_, Self>, lhs: MatRef<'_, Self>, rhs: MatRef<'_, Self>);
    #[doc(hidden)]
    fn faer_matmul(dst: MatMut<'_, Self>, accumulate: bool, lhs: MatRef<'_, Self>, rhs: MatRef<'_, Self>);
}

/// Defines `fn name<T: Real>(args)` whose body is compiled three times:
/// for AVX-512F, for AVX2 + FMA and for the build's baseline, the widest the
/// CPU has being chosen at run time. The crate is built for baseline x86-64
/// (SSE2), where a loop over [`exp_nonpositive_f64`] vectorises only two
/// lanes wide. The body must not rely on closures for its hot loops (a
/// closure is a separate function compiled without the wider features).
/// The arithmetic is the same in every variant (Rust does not contract
/// `a * b + c` into an FMA), so the results are bit-identical across them.
macro_rules! simd_fn {
    ($(#[$m:meta])* $vis:vis fn $name:ident<$T:ident: Real>($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$m])* $vis fn $name<$T: Real>($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            fn body<$T: Real>($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn wide<$T: Real>($($arg: $ty),*) $(-> $ret)? {
                    body::<$T>($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn mid<$T: Real>($($arg: $ty),*) $(-> $ret)? {
                    body::<$T>($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the feature was detected at run time.
                    return unsafe { wide::<$T>($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                    // SAFETY: as above.
                    return unsafe { mid::<$T>($($arg),*) };
                }
            }
            body::<$T>($($arg),*)
        }
    };
}
pub(crate) use simd_fn;

simd_fn! {
    /// `v <- exp(v)` for entries `v <= 0`, at the CPU's widest vectors.
    fn exp_in_place<T: Real>(values: &mut [T]) {
        T::exp_nonpositive_slice(values);
    }
}

macro_rules! impl_real {
    ($t:ty, $exp:ident, $exp_block:ident, $table_slice:path, $block:expr) => {
        impl Real for $t {
            #[inline]
            fn from_f64_lossy(x: f64) -> Self {
                x as $t
            }
            #[inline]
            fn to_f64_exact(self) -> f64 {
                self as f64
            }
            #[inline]
            fn to_f32_lossy(self) -> f32 {
                self as f32
            }
            #[inline]
            fn from_f32_exact(x: f32) -> Self {
                x as $t
            }
            fn exp_nonpositive_in_place(values: &mut [Self]) {
                exp_in_place::<$t>(values);
            }
            #[inline(always)]
            fn exp_nonpositive(x: Self) -> Self {
                $exp(x)
            }
            const EXP_BLOCK: usize = $block;
            #[inline(always)]
            fn exp_nonpositive_block(block: &mut [Self]) {
                $exp_block(block.try_into().expect("one block of EXP_BLOCK entries"));
            }
            #[inline(always)]
            fn exp_nonpositive_slice(values: &mut [Self]) {
                if $table_slice(values) {
                    return;
                }
                let mut blocks = values.chunks_exact_mut($block);
                for block in &mut blocks {
                    $exp_block(block.try_into().expect("chunks of EXP_BLOCK entries"));
                }
                for v in blocks.into_remainder() {
                    *v = $exp(*v);
                }
            }
            fn faer_matmul_seq(dst: MatMut<'_, Self>, lhs: MatRef<'_, Self>, rhs: MatRef<'_, Self>) {
                faer::linalg::matmul::matmul(dst, Accum::Replace, lhs, rhs, 1.0 as $t, Par::Seq);
            }
            fn faer_matmul_seq_add(dst: MatMut<'_, Self>, lhs: MatRef<'_, Self>, rhs: MatRef<'_, Self>) {
                faer::linalg::matmul::matmul(dst, Accum::Add, lhs, rhs, 1.0 as $t, Par::Seq);
            }
            fn faer_matmul(dst: MatMut<'_, Self>, accumulate: bool, lhs: MatRef<'_, Self>, rhs: MatRef<'_, Self>) {
                let beta = if accumulate { Accum::Add } else { Accum::Replace };
                let work = dst.nrows() * dst.ncols() * lhs.ncols().max(1);
                let par = if work < 64 * 64 * 64 { Par::Seq } else { Par::rayon(0) };
                faer::linalg::matmul::matmul(dst, beta, lhs, rhs, 1.0 as $t, par);
                clear_upper_simd_state(par != Par::Seq);
            }
        }
    };
}
impl_real!(f32, exp_nonpositive_f32, exp_nonpositive_f32_block, exp_table::exp_nonpositive_slice_f32_avx512, 64);
impl_real!(f64, exp_nonpositive_f64, exp_nonpositive_f64_block, exp_table::exp_nonpositive_slice_f64_avx512, 32);

/// `exp(x)` for `x <= 0`, written without branches or library calls so that
/// loops over it vectorise (libm's `exp` is a scalar call per entry, and was
/// most of the time of a CPU kernel matrix).
///
/// Range reduction `x = k ln2 + r`, `|r| <= ln2 / 2`, with `k` rounded by the
/// 1.5 * 2^52 shifter whose low bits then hold `k` as an integer; `exp(r)` by
/// its Taylor polynomial of degree 12 (truncation below 2e-16 relative);
/// `2^k` assembled in the exponent bits. Relative error within a few ulp for
/// `-708 <= x <= 0`; results below `exp(-708)` (where `2^k` would be
/// subnormal) are returned as 0.
#[inline(always)]
pub fn exp_nonpositive_f64(x: f64) -> f64 {
    const SHIFTER: f64 = 6755399441055744.0; // 1.5 * 2^52
    const LN2_HI: f64 = 6.931_471_803_691_238e-1;
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    let xc = x.clamp(-708.0, 0.0);
    let kf = xc * std::f64::consts::LOG2_E + SHIFTER;
    let k_bits = kf.to_bits();
    let k = kf - SHIFTER;
    let r = (xc - k * LN2_HI) - k * LN2_LO;
    let mut p = 1.0 / 479001600.0;
    for c in [1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = p * r + c;
    }
    let scale = f64::from_bits(k_bits.wrapping_add(1023) << 52);
    if x < -708.0 { 0.0 } else { p * scale }
}

/// [`exp_nonpositive_f64`] of each of 32 entries, bit for bit, written one
/// step at a time across the block so that four vectors go through the
/// degree-12 polynomial side by side (each is one chain of 28 dependent
/// additions and multiplications). The portable exponential of
/// [`Real::exp_nonpositive_slice`]; 2-4 % faster than the element-wise loop
/// when measured at 512 bits (Zen 5), where the table method is used instead.
#[inline(always)]
pub fn exp_nonpositive_f64_block(v: &mut [f64; 32]) {
    const SHIFTER: f64 = 6755399441055744.0; // 1.5 * 2^52
    const LN2_HI: f64 = 6.931_471_803_691_238e-1;
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    const N: usize = 32;
    let mut r = [0.0f64; N];
    let mut k_bits = [0u64; N];
    for i in 0..N {
        let xc = v[i].clamp(-708.0, 0.0);
        let kf = xc * std::f64::consts::LOG2_E + SHIFTER;
        k_bits[i] = kf.to_bits();
        let k = kf - SHIFTER;
        r[i] = (xc - k * LN2_HI) - k * LN2_LO;
    }
    let mut p = [1.0 / 479001600.0; N];
    for c in [1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        for i in 0..N {
            p[i] = p[i] * r[i] + c;
        }
    }
    for i in 0..N {
        let scale = f64::from_bits(k_bits[i].wrapping_add(1023) << 52);
        v[i] = if v[i] < -708.0 { 0.0 } else { p[i] * scale };
    }
}

/// [`exp_nonpositive_f32`] of each of 64 entries, bit for bit, one step at a
/// time across the block (as [`exp_nonpositive_f64_block`]).
#[inline(always)]
pub fn exp_nonpositive_f32_block(v: &mut [f32; 64]) {
    const SHIFTER: f32 = 12582912.0; // 1.5 * 2^23
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    const N: usize = 64;
    let mut r = [0.0f32; N];
    let mut k_bits = [0u32; N];
    for i in 0..N {
        let xc = v[i].clamp(-87.0, 0.0);
        let kf = xc * std::f32::consts::LOG2_E + SHIFTER;
        k_bits[i] = kf.to_bits();
        let k = kf - SHIFTER;
        r[i] = (xc - k * LN2_HI) - k * LN2_LO;
    }
    let mut p = [1.0 / 5040.0; N];
    for c in [1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        for i in 0..N {
            p[i] = p[i] * r[i] + c;
        }
    }
    for i in 0..N {
        let scale = f32::from_bits(k_bits[i].wrapping_add(127) << 23);
        v[i] = if v[i] < -87.0 { 0.0 } else { p[i] * scale };
    }
}

/// `exp(x)` for `x <= 0` in `f32`, as [`exp_nonpositive_f64`] (degree-7
/// polynomial, shifter 1.5 * 2^23); results below `exp(-87)` are 0.
#[inline(always)]
pub fn exp_nonpositive_f32(x: f32) -> f32 {
    const SHIFTER: f32 = 12582912.0; // 1.5 * 2^23
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    let xc = x.clamp(-87.0, 0.0);
    let kf = xc * std::f32::consts::LOG2_E + SHIFTER;
    let k_bits = kf.to_bits();
    let k = kf - SHIFTER;
    let r = (xc - k * LN2_HI) - k * LN2_LO;
    let mut p = 1.0 / 5040.0;
    for c in [1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = p * r + c;
    }
    let scale = f32::from_bits(k_bits.wrapping_add(127) << 23);
    if x < -87.0 { 0.0 } else { p * scale }
}

/// Arguments of [`cos_f64`] up to this magnitude are reduced exactly enough
/// (the quadrant count times each 33-bit piece of `pi/2` is exact below 2^20).
pub const COS_REDUCTION_LIMIT: f64 = 1.0e6;

/// `cos(x)` for `|x| <= `[`COS_REDUCTION_LIMIT`], without branches or
/// library calls so that loops over it vectorise (random Fourier features
/// take one cosine per feature and sample).
///
/// Cody-Waite reduction `x = q pi/2 + r`, `|r| <= pi/4`, with `pi/2` in
/// three pieces (fdlibm's `pio2_1`, `pio2_2`, `pio2_2t`), then `cos r` or
/// `sin r` by Taylor polynomials of degree 18 and 17 (truncation below
/// 1e-19), chosen and signed by the quadrant. Within `2e-16` absolute of
/// libm on the stated range; [`cos_in_place`] falls back to libm beyond it.
#[inline(always)]
pub fn cos_f64(x: f64) -> f64 {
    const SHIFTER: f64 = 6755399441055744.0; // 1.5 * 2^52
    const PIO2_1: f64 = 1.570_796_326_734_125_6;
    const PIO2_2: f64 = 6.077_100_506_303_966e-11;
    const PIO2_2T: f64 = 2.022_266_248_795_950_6e-21;
    let qf = x * std::f64::consts::FRAC_2_PI + SHIFTER;
    let q = qf.to_bits();
    let k = qf - SHIFTER;
    let r = ((x - k * PIO2_1) - k * PIO2_2) - k * PIO2_2T;
    let r2 = r * r;
    // cos r = sum (-1)^i r^(2i) / (2i)!, sin r = r sum (-1)^i r^(2i) / (2i+1)!
    let mut c = 1.0 / 6402373705728000.0; // 1/18!
    for coef in [-1.0 / 20922789888000.0, 1.0 / 87178291200.0, -1.0 / 479001600.0, 1.0 / 3628800.0, -1.0 / 40320.0, 1.0 / 720.0, -1.0 / 24.0, 0.5] {
        c = c * r2 + coef;
    }
    let c = 1.0 - c * r2;
    let mut s = 1.0 / 355687428096000.0; // 1/17!
    for coef in [-1.0 / 1307674368000.0, 1.0 / 6227020800.0, -1.0 / 39916800.0, 1.0 / 362880.0, -1.0 / 5040.0, 1.0 / 120.0, -1.0 / 6.0] {
        s = s * r2 + coef;
    }
    let s = r + r * r2 * s;
    let value = if q & 1 == 0 { c } else { s };
    if (q.wrapping_add(1)) & 2 == 0 { value } else { -value }
}

simd_fn! {
    /// `v <- cos(v)` at the CPU's widest vectors (every `|v|` within the limit).
    fn cos_in_place_wide<T: Real>(values: &mut [T]) {
        for v in values.iter_mut() {
            *v = T::from_f64_lossy(cos_f64(v.to_f64_exact()));
        }
    }
}

/// `v <- cos(v)` for every entry: [`cos_f64`] vectorised at the CPU's widest
/// vectors, libm's `cos` for the whole slice if an entry is beyond
/// [`COS_REDUCTION_LIMIT`] (or not finite).
pub fn cos_in_place(values: &mut [f64]) {
    if values.iter().all(|v| v.abs() <= COS_REDUCTION_LIMIT) {
        cos_in_place_wide::<f64>(values);
    } else {
        values.iter_mut().for_each(|v| *v = v.cos());
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn vzeroupper() {
    core::arch::x86_64::_mm256_zeroupper();
}

/// Clears the upper halves of the AVX registers on this thread and, if
/// `all_threads`, on every rayon worker.
///
/// faer's matrix-multiply kernels return with dirty upper AVX state. On many
/// x86 CPUs every later legacy-SSE instruction on that thread then pays a
/// transition penalty: measured here, an element-wise `exp` pass over 3M
/// entries went from 12 ms to 330 ms after one faer product. Every faer call
/// in this crate is followed by this function; call it after your own direct
/// faer calls too.
pub fn clear_upper_simd_state(all_threads: bool) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx") {
            // SAFETY: AVX support was just checked at run time.
            unsafe { vzeroupper() };
            if all_threads {
                rayon::broadcast(|_| unsafe { vzeroupper() });
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = all_threads;
}

/// An n x m matrix of zeros for an output that is written once, in full:
/// large buffers are advised for transparent huge pages (Linux), so that
/// first writes fault in 2 MiB pages instead of 4 KiB ones.
///
/// A fresh 134 MB output (4096^2 f64) is 32768 small pages; their faults
/// were about a third of the CPU time of the fused kernel matrix. The
/// memory comes zeroed from the allocator (`calloc`, whose large blocks are
/// fresh mappings not yet touched), so the advice precedes every fault.
pub(crate) fn zeroed_output<T: Real>(n: usize, m: usize, what: &str) -> Result<DMatrix<T>> {
    let mut data = crate::memory::zeroed_vec::<T>(crate::memory::entries(n, m, what)?, what)?;
    advise_huge_pages(&mut data);
    Ok(DMatrix::from_vec(n, m, data))
}

/// Below this many bytes [`zeroed_output`] gives no advice (a few huge pages).
#[cfg(target_os = "linux")]
const HUGE_PAGE_ADVICE_BYTES: usize = 8 << 20;

#[cfg(target_os = "linux")]
fn advise_huge_pages<T>(data: &mut [T]) {
    const HUGE: usize = 2 << 20;
    let bytes = std::mem::size_of_val(data);
    if bytes < HUGE_PAGE_ADVICE_BYTES {
        return;
    }
    let start = data.as_mut_ptr() as usize;
    let (lo, hi) = (start.next_multiple_of(HUGE), (start + bytes) / HUGE * HUGE);
    if hi > lo {
        // SAFETY: [lo, hi) lies inside `data`'s allocation, which this call
        // borrows mutably; MADV_HUGEPAGE changes only how the kernel backs
        // the pages (contents are preserved), and a failure is harmless.
        unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE) };
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages<T>(_data: &mut [T]) {}

/// Read-only faer view of a nalgebra matrix (no copy).
pub fn faer_ref<T: Real>(m: &DMatrix<T>) -> MatRef<'_, T> {
    MatRef::from_column_major_slice(m.as_slice(), m.nrows(), m.ncols())
}

/// Mutable faer view of a nalgebra matrix (no copy).
pub fn faer_mut<T: Real>(m: &mut DMatrix<T>) -> MatMut<'_, T> {
    let (r, c) = m.shape();
    MatMut::from_column_major_slice_mut(m.as_mut_slice(), r, c)
}

/// Fails with [`Error::Empty`] if `m` has no rows or no columns.
pub fn check_nonempty<T: Real>(what: &'static str, m: &DMatrix<T>) -> Result<()> {
    if m.nrows() == 0 || m.ncols() == 0 {
        return Err(Error::Empty { what, rows: m.nrows(), cols: m.ncols() });
    }
    Ok(())
}

/// The position of the first NaN or infinity in `values`: blocks of
/// values tested without a branch per value (in parallel from a million
/// values on), then the first failing block searched.
fn first_non_finite<T: Real>(values: &[T]) -> Option<usize> {
    use rayon::prelude::*;
    const BLOCK: usize = 1 << 14;
    let clean = |block: &[T]| block.iter().fold(true, |ok, v| ok & v.is_finite());
    let block = if values.len() >= 1 << 20 { values.par_chunks(BLOCK).position_first(|b| !clean(b)) } else { values.chunks(BLOCK).position(|b| !clean(b)) }?;
    let start = block * BLOCK;
    values[start..].iter().position(|v| !v.is_finite()).map(|i| start + i)
}

/// Fails with [`Error::NonFinite`] at the first NaN or infinite entry.
pub fn check_finite<T: Real>(what: &'static str, m: &DMatrix<T>) -> Result<()> {
    let rows = m.nrows().max(1);
    if let Some(pos) = first_non_finite(m.as_slice()) {
        return Err(Error::NonFinite { what, row: pos % rows, col: pos / rows });
    }
    Ok(())
}

/// Checks a result computed from finite inputs: NaN or an infinity in it
/// can only come from overflow, reported as [`Error::Overflow`]
/// (not as a non-finite input).
pub fn check_overflow<T: Real>(what: &'static str, m: &DMatrix<T>) -> Result<()> {
    let rows = m.nrows().max(1);
    if let Some(pos) = first_non_finite(m.as_slice()) {
        return Err(Error::Overflow { what, row: pos % rows, col: pos / rows });
    }
    Ok(())
}

/// `m` if [`check_overflow`] passes.
pub fn finite_result<T: Real>(what: &'static str, m: DMatrix<T>) -> Result<DMatrix<T>> {
    check_overflow(what, &m)?;
    Ok(m)
}

/// [`finite_result`] for a vector.
pub fn finite_vector<T: Real>(what: &'static str, v: DVector<T>) -> Result<DVector<T>> {
    let rows = v.len();
    if let Some(pos) = v.iter().position(|x| !x.is_finite()) {
        return Err(Error::Overflow { what, row: pos % rows.max(1), col: 0 });
    }
    Ok(v)
}

/// [`check_nonempty`] and [`check_finite`] together: what every input matrix needs.
pub fn check_matrix<T: Real>(what: &'static str, m: &DMatrix<T>) -> Result<()> {
    check_nonempty(what, m)?;
    check_finite(what, m)
}

/// Every entry of `m` within the `f32` range (for paths that compute in `f32`).
///
/// Errors: [`Error::NotRepresentable`] at the first entry beyond it.
pub fn check_f32_range<T: Real>(what: &'static str, m: &DMatrix<T>) -> Result<()> {
    let limit = f32::MAX as f64;
    for (j, col) in m.column_iter().enumerate() {
        if let Some(i) = col.iter().position(|v| v.to_f64_exact().abs() > limit) {
            return Err(Error::NotRepresentable { what, row: i, col: j, value: m[(i, j)].to_f64_exact() });
        }
    }
    Ok(())
}

/// Fails with [`Error::DimensionMismatch`] unless `expected == found`.
pub fn check_dim(what: &'static str, expected: usize, found: usize) -> Result<()> {
    if expected != found {
        return Err(Error::DimensionMismatch { what, expected, found });
    }
    Ok(())
}

/// A lower-triangular `L` with `L L^T = G + delta I` for the symmetric
/// positive semidefinite `g` (only its lower triangle is read): faer's
/// Cholesky with the smallest ridge `delta` in `0, 1e-13 d, 1e-12 d, ..,
/// 1e-4 d` (`d` the largest diagonal entry) that lets it through, so a
/// singular `G` or one with rounding-level negative eigenvalues still has
/// a factor; also returns `delta`. `r^3 / 3` flops, against about ten times
/// that for the eigendecomposition a square root `U S^{1/2}` would take.
/// `None` for an empty, non-square or non-finite `g`, a non-positive
/// diagonal, or when no ridge in that range helps.
pub fn ridged_cholesky_factor(g: &DMatrix<f64>) -> Option<(DMatrix<f64>, f64)> {
    let r = g.nrows();
    if r == 0 || g.ncols() != r || g.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let d = (0..r).map(|i| g[(i, i)]).fold(0.0f64, f64::max);
    if !(d > 0.0) {
        return None;
    }
    let ridges = std::iter::once(0.0).chain((4..=13).rev().map(|e| d * 10f64.powi(-e)));
    for delta in ridges {
        let mut shifted = g.clone();
        for i in 0..r {
            shifted[(i, i)] += delta;
        }
        if let Ok(llt) = faer_ref(&shifted).llt(Side::Lower) {
            let l = llt.L();
            let factor = DMatrix::from_fn(r, r, |i, j| if i >= j { l[(i, j)] } else { 0.0 });
            clear_upper_simd_state(true);
            return Some((factor, delta));
        }
    }
    clear_upper_simd_state(true);
    None
}

/// Relative Frobenius error `||A - B||_F / max(||B||_F, tiny)`.
pub fn relative_frobenius_error<T: Real>(a: &DMatrix<T>, b: &DMatrix<T>) -> f64 {
    assert_eq!(a.shape(), b.shape(), "relative_frobenius_error: shapes");
    let mut num = 0.0f64;
    let mut den = 0.0f64;
    for (x, y) in a.iter().zip(b.iter()) {
        let (x, y) = (x.to_f64_exact(), y.to_f64_exact());
        num += (x - y) * (x - y);
        den += y * y;
    }
    num.sqrt() / den.sqrt().max(f64::MIN_POSITIVE)
}

/// Converts a matrix between the two scalar types.
pub fn convert<S: Real, T: Real>(m: &DMatrix<S>) -> DMatrix<T> {
    m.map(|v| T::from_f64_lossy(v.to_f64_exact()))
}

/// `+1` or `-1`: the sign of the entry of largest magnitude (ties: the
/// first), the convention that fixes the sign of computed eigenvectors.
pub(crate) fn sign_of_largest(v: &[f64]) -> f64 {
    let mut best = 0.0f64;
    for &x in v {
        if x.abs() > best.abs() {
            best = x;
        }
    }
    if best < 0.0 { -1.0 } else { 1.0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use super::eigen::{symmetric_eigen_blocked, symmetric_eigenvalues_blocked, symmetric_eigenvalues_faer};

    /// The first NaN or infinity is found at its exact position on both
    /// sides of the parallel switch, in the first, a middle and the last
    /// block, with a later one present; clean values give none.
    #[test]
    fn the_first_non_finite_value_is_found_where_it_is() {
        for len in [5usize, 40_000, (1 << 20) + 12_345] {
            let clean: Vec<f64> = (0..len).map(|i| (i as f64 * 0.37).sin()).collect();
            assert_eq!(first_non_finite(&clean), None);
            for at in [0, len / 2, len - 1] {
                for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
                    let mut v = clean.clone();
                    v[at] = bad;
                    if at + 1 < len {
                        v[len - 1] = f64::NAN;
                    }
                    assert_eq!(first_non_finite(&v), Some(at), "len {len}, at {at}, {bad}");
                }
            }
        }
        let m = DMatrix::<f32>::from_fn(3, 4, |i, j| if (i, j) == (2, 1) { f32::NAN } else { 1.0 });
        assert!(matches!(check_finite("m", &m), Err(Error::NonFinite { row: 2, col: 1, .. })));
    }

    #[test]
    fn weighted_gram_matches_the_full_product() {
        // Sizes on both sides of the sequential/parallel switch and of the column block.
        for (r, n) in [(6, 9), (90, 70), (20, 2 * WEIGHTED_GRAM_BLOCK + 37)] {
            let p = DMatrix::<f64>::from_fn(r, n, |i, j| ((i * 7 + j * 3) as f64 * 0.37).sin());
            let alpha = DVector::<f64>::from_fn(n, |j, _| (j as f64 * 1.3).cos());
            let scaled = DMatrix::from_fn(r, n, |i, j| p[(i, j)] * alpha[j]);
            let sym = weighted_gram(&p, &alpha);
            assert!(relative_frobenius_error(&sym, &(&scaled * p.transpose())) < 1e-13);
            assert_eq!(sym, sym.transpose());
        }
    }

    /// Columns that end above the last row (an upper trapezoidal `P`, one
    /// with zero rows at the bottom, columns of zeros) take the narrow
    /// blocks of [`weighted_gram`], a dense `P` with one short column the
    /// wide ones; every shape against the plain product on fresh random
    /// entries and signed weights, relative error 1e-13.
    #[test]
    fn weighted_gram_skips_zero_rows_and_matches_the_full_product() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(41);
        let b = WEIGHTED_GRAM_TRIANGULAR_BLOCK;
        for (r, n, shape) in [(300, 300, "triangular"), (2 * b + 5, b + 3, "wide"), (b - 7, 3 * b + 1, "tall"), (150, 400, "zero bottom rows"), (90, 260, "zero columns"), (200, 300, "one short column")] {
            let p = DMatrix::<f64>::from_fn(r, n, |i, j| {
                let kept = match shape {
                    "zero bottom rows" => i < 100,
                    "zero columns" => j % 3 != 1,
                    "one short column" => j != 7 || i < 50,
                    _ => i <= j,
                };
                if kept { rng.random_range(-1.0..1.0) } else { 0.0 }
            });
            let alpha = DVector::<f64>::from_fn(n, |_, _| rng.random_range(-1.0..1.0));
            let scaled = DMatrix::from_fn(r, n, |i, j| p[(i, j)] * alpha[j]);
            let sym = weighted_gram(&p, &alpha);
            let err = relative_frobenius_error(&sym, &(&scaled * p.transpose()));
            assert!(err < 1e-13, "{shape} {r} x {n}: relative error {err:.2e}");
            assert_eq!(sym, sym.transpose());
        }
        assert_eq!(weighted_gram(&DMatrix::zeros(4, 6), &DVector::from_element(6, 1.0)), DMatrix::zeros(4, 4));
    }

    /// `L L^T = G + delta I` with `delta = 0` for a well-conditioned `G`, a
    /// small positive ridge for a singular one (rank r/2), so the quadratic
    /// form through `L` bounds `p^T G p` from above; typed `None` for bad input.
    #[test]
    fn ridged_cholesky_factor_reproduces_the_shifted_matrix() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(23);
        for (r, rank) in [(1, 1), (7, 7), (60, 60), (60, 30), (300, 300), (300, 120)] {
            let b = DMatrix::<f64>::from_fn(r, rank, |_, _| rng.random_range(-1.0..1.0));
            let g = &b * b.transpose();
            let (l, delta) = ridged_cholesky_factor(&g).expect("a PSD matrix has a ridged factor");
            assert!((0..r).all(|j| (0..j).all(|i| l[(i, j)] == 0.0)), "L is lower triangular");
            let dmax = (0..r).map(|i| g[(i, i)]).fold(0.0f64, f64::max);
            if rank == r && r <= 60 {
                assert_eq!(delta, 0.0, "r {r}: a full-rank G needs no ridge");
            }
            assert!(delta <= 1e-4 * dmax, "r {r} rank {rank}: ridge {delta:e}");
            let shifted = &g + DMatrix::identity(r, r) * delta;
            assert!(relative_frobenius_error(&(&l * l.transpose()), &shifted) < 1e-12, "r {r} rank {rank}");
            for _ in 0..5 {
                let p = DVector::<f64>::from_fn(r, |_, _| rng.random_range(-1.0..1.0));
                let exact = p.dot(&(&g * &p));
                let through_l = l.tr_mul(&p).norm_squared();
                assert!(through_l >= exact - 1e-12 * dmax * p.norm_squared() && through_l <= exact + (delta + 1e-12 * dmax) * p.norm_squared());
            }
        }
        assert!(ridged_cholesky_factor(&DMatrix::<f64>::zeros(0, 0)).is_none());
        assert!(ridged_cholesky_factor(&DMatrix::<f64>::zeros(3, 3)).is_none());
        assert!(ridged_cholesky_factor(&DMatrix::<f64>::zeros(3, 2)).is_none());
        assert!(ridged_cholesky_factor(&DMatrix::<f64>::from_element(2, 2, f64::NAN)).is_none());
        assert!(ridged_cholesky_factor(&DMatrix::from_row_slice(2, 2, &[1.0, 0.0, 0.0, -1.0])).is_none(), "indefinite beyond any small ridge");
    }

    #[test]
    fn matmul_variants_agree_with_nalgebra() {
        let a = DMatrix::<f64>::from_fn(7, 5, |i, j| (i as f64 * 0.3 - j as f64 * 0.7).sin());
        let b = DMatrix::<f64>::from_fn(5, 3, |i, j| (i as f64 + 2.0 * j as f64).cos());
        let reference = &a * &b;
        assert!(relative_frobenius_error(&matmul(&a, &b), &reference) < 1e-14);
        assert!(relative_frobenius_error(&matmul_nt(&a, &b.transpose()), &reference) < 1e-14);
        assert!(relative_frobenius_error(&matmul_tn(&a.transpose(), &b), &reference) < 1e-14);
        let tall = DMatrix::<f64>::from_fn(9000, 3, |i, j| ((i * 3 + j) as f64 * 0.01).sin());
        assert!(relative_frobenius_error(&gram_tall(&tall), &(tall.transpose() * &tall)) < 1e-13);
        let mut c = reference.clone();
        matmul_acc(&mut c, &a, &b);
        assert!(relative_frobenius_error(&c, &(&reference * 2.0)) < 1e-14);
    }

    #[test]
    fn vectorisable_exp_is_accurate() {
        let mut worst64 = 0.0f64;
        let mut worst32 = 0.0f64;
        for i in 0..200_001 {
            let x = -(i as f64) * 708.0 / 200_000.0;
            let exact = x.exp();
            worst64 = worst64.max(((exp_nonpositive_f64(x) - exact) / exact).abs());
            if x >= -87.0 {
                let x32 = x as f32;
                let e32 = (x32 as f64).exp();
                worst32 = worst32.max(((exp_nonpositive_f32(x32) as f64 - e32) / e32).abs());
            }
        }
        assert!(worst64 < 1e-15, "f64 relative error {worst64:e}");
        assert!(worst32 < 5e-7, "f32 relative error {worst32:e}");
        assert_eq!(exp_nonpositive_f64(0.0), 1.0);
        assert_eq!(exp_nonpositive_f64(-1000.0), 0.0);
        assert_eq!(exp_nonpositive_f32(-100.0), 0.0);
        let mut v = vec![-0.5f64, -3.0];
        f64::exp_nonpositive_in_place(&mut v);
        assert!((v[0] - (-0.5f64).exp()).abs() < 1e-16 && (v[1] - (-3.0f64).exp()).abs() < 1e-16);
    }

    #[test]
    fn vectorisable_cos_is_accurate() {
        let mut worst = 0.0f64;
        let mut xs: Vec<f64> = (0..400_001).map(|i| (i as f64 - 200_000.0) * 1e-3).collect();
        xs.extend((0..20_000).map(|i| (i as f64 - 10_000.0) * 99.991));
        xs.extend([0.0, -0.0, std::f64::consts::FRAC_PI_2, std::f64::consts::PI, 3.0 * std::f64::consts::FRAC_PI_4, COS_REDUCTION_LIMIT, -COS_REDUCTION_LIMIT]);
        for &x in &xs {
            worst = worst.max((cos_f64(x) - x.cos()).abs());
        }
        assert!(worst < 2e-16 * 2.0, "cos absolute error {worst:e}");
        let mut v = xs.clone();
        cos_in_place(&mut v);
        for (x, y) in xs.iter().zip(&v) {
            assert_eq!(y.to_bits(), cos_f64(*x).to_bits(), "cos({x})");
        }
        let mut far = vec![1.0, 3.0e7];
        cos_in_place(&mut far);
        assert_eq!(far, vec![1.0f64.cos(), 3.0e7f64.cos()]);
    }

    #[test]
    fn symmetric_eigen_reconstructs() {
        let b = DMatrix::<f64>::from_fn(9, 9, |i, j| ((i * 9 + j) as f64 * 0.37).sin());
        let a = &b + b.transpose();
        let e = symmetric_eigen(&a).unwrap();
        for w in e.eigenvalues.as_slice().windows(2) {
            assert!(w[0] <= w[1]);
        }
        let rec = &e.eigenvectors * DMatrix::from_diagonal(&e.eigenvalues) * e.eigenvectors.transpose();
        assert!(relative_frobenius_error(&rec, &a) < 1e-12);
    }

    /// The blocked tridiagonalisation path against faer's own solver on
    /// random, clustered and low-rank matrices (orders across the panel
    /// width and the parallel product threshold): eigenvalues within
    /// 1e-12 ||A||_F, residuals ||A U - U S||_F <= 1e-11 ||A||_F,
    /// orthonormal vectors, eigenvalues alone equal to the pairs' values.
    /// The pairs above a threshold plus a buffer (the positive part's
    /// route) against faer's full decomposition: the count above, the
    /// values, residuals and orthonormality, on low-rank positive parts of
    /// orders 1-700 (the team path from 384), with the wanted pairs both
    /// below n / 2 (bisection) and above (divide and conquer).
    #[test]
    fn eigenpairs_above_a_threshold_match_faer() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(43);
        let buffer = |k: usize| (k / 4).max(12);
        for (n, positive, threshold) in [(1usize, 1usize, 0.0), (5, 2, 0.0), (40, 30, 0.0), (97, 10, 0.0), (450, 64, 0.0), (700, 40, 0.5), (300, 0, 0.0)] {
            // M = Q diag(d) Q^T: `positive` eigenvalues in [1, 3], the rest in [-2, -0.1].
            let q = DMatrix::<f64>::from_fn(n, n, |_, _| rng.random_range(-1.0..1.0)).qr().q();
            let d = DVector::from_fn(n, |i, _| if i < positive { 1.0 + 2.0 * i as f64 / positive.max(1) as f64 } else { -0.1 - 1.9 * rng.random_range(0.0..1.0) });
            let a = &q * DMatrix::from_diagonal(&d) * q.transpose();
            let norm = a.norm();
            let reference = symmetric_eigen_faer(&a).unwrap();
            let above = reference.eigenvalues.iter().filter(|&&v| v > threshold).count();
            assert_eq!(above, positive, "n {n}: construction");
            let got = symmetric_eigen_above(&a, threshold, buffer).unwrap();
            let k = (above + buffer(above)).min(n);
            assert_eq!(got.eigenvalues.len(), k, "n {n}: pairs returned");
            for j in 0..k {
                assert!((got.eigenvalues[j] - reference.eigenvalues[n - k + j]).abs() <= 1e-12 * norm, "n {n}: value {j}");
                let u = got.eigenvectors.column(j);
                assert!((&a * u - u * got.eigenvalues[j]).norm() <= 1e-11 * norm, "n {n}: residual {j}");
            }
            for j in 1..k {
                assert!(got.eigenvalues[j - 1] <= got.eigenvalues[j], "n {n}: ascending");
            }
            let orth = got.eigenvectors.transpose() * &got.eigenvectors - DMatrix::<f64>::identity(k, k);
            assert!(orth.norm() <= 1e-11 * (k as f64).sqrt(), "n {n}: orthogonality {:e}", orth.norm());
        }
        // Nothing above and no buffer: no pairs; a non-finite threshold is an error.
        let a = DMatrix::<f64>::from_diagonal(&DVector::from_vec(vec![-1.0, -2.0, -3.0]));
        assert_eq!(symmetric_eigen_above(&a, 0.0, |_| 0).unwrap().eigenvalues.len(), 0);
        assert!(matches!(symmetric_eigen_above(&a, f64::NAN, |_| 0), Err(Error::InvalidParameter { .. })));
    }

    #[test]
    fn blocked_symmetric_eigen_matches_faer() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(41);
        for (n, kind) in [(1usize, 0), (2, 0), (5, 1), (64, 0), (97, 1), (200, 2), (520, 0), (700, 1)] {
            let b = DMatrix::<f64>::from_fn(n, n, |_, _| rng.random_range(-1.0..1.0));
            let a = match kind {
                0 => &b + b.transpose(),
                // eigenvalues 1, 1 + 1e-10, ... in clusters of four, and 3
                1 => {
                    let q = b.clone().qr().q();
                    let d = DVector::from_fn(n, |i, _| if i % 7 == 0 { 3.0 } else { 1.0 + 1e-10 * (i % 4) as f64 });
                    &q * DMatrix::from_diagonal(&d) * q.transpose()
                }
                // rank 3
                _ => {
                    let f = b.columns(0, 3).into_owned();
                    &f * f.transpose()
                }
            };
            let norm = a.norm().max(1e-300);
            let ours = symmetric_eigen_blocked(&a).unwrap();
            let reference = symmetric_eigen_faer(&a).unwrap();
            for i in 0..n {
                assert!((ours.eigenvalues[i] - reference.eigenvalues[i]).abs() <= 1e-12 * norm, "n {n} kind {kind} eigenvalue {i}");
            }
            let residual = &a * &ours.eigenvectors - &ours.eigenvectors * DMatrix::from_diagonal(&ours.eigenvalues);
            assert!(residual.norm() <= 1e-11 * norm, "n {n} kind {kind}: residual {:e}", residual.norm() / norm);
            let orth = ours.eigenvectors.transpose() * &ours.eigenvectors - DMatrix::<f64>::identity(n, n);
            assert!(orth.norm() <= 1e-12 * (n as f64).sqrt().max(1.0), "n {n} kind {kind}: orthogonality {:e}", orth.norm());
            let values = symmetric_eigenvalues_blocked(&a).unwrap();
            let values_faer = symmetric_eigenvalues_faer(&a).unwrap();
            for i in 0..n {
                assert!((values[i] - ours.eigenvalues[i]).abs() <= 1e-12 * norm, "n {n} kind {kind}: values alone {i}");
                assert!((values_faer[i] - ours.eigenvalues[i]).abs() <= 1e-12 * norm, "n {n} kind {kind}: faer's values alone {i}");
            }
            let top = symmetric_eigen_top_by_tridiagonal(&a, n.min(40)).unwrap().0;
            for j in 0..top.eigenvalues.len() {
                assert!((top.eigenvalues[j] - ours.eigenvalues[n - top.eigenvalues.len() + j]).abs() <= 1e-12 * norm, "n {n} kind {kind}: top {j}");
                let u = top.eigenvectors.column(j);
                assert!((&a * u - u * top.eigenvalues[j]).norm() <= 1e-11 * norm, "n {n} kind {kind}: top residual {j}");
            }
            let kt = top.eigenvalues.len();
            let orth = top.eigenvectors.transpose() * &top.eigenvectors - DMatrix::<f64>::identity(kt, kt);
            assert!(orth.norm() <= 1e-11, "n {n} kind {kind}: top orthogonality {:e}", orth.norm());
        }
    }

    #[test]
    fn validation_errors() {
        let empty = DMatrix::<f64>::zeros(0, 3);
        assert!(matches!(check_matrix("x", &empty), Err(Error::Empty { .. })));
        let mut m = DMatrix::<f64>::zeros(2, 2);
        m[(1, 0)] = f64::NAN;
        assert_eq!(check_matrix("x", &m), Err(Error::NonFinite { what: "x", row: 1, col: 0 }));
    }
}
