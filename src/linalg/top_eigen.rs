//! The `k` largest eigenpairs of a dense symmetric matrix by thick-restart
//! block Lanczos (a block Krylov-Schur method for symmetric matrices; Zhou &
//! Saad, "Block Krylov-Schur method for large symmetric eigenvalue
//! problems", Numer. Algorithms 47, 2008), all heavy work in faer matrix
//! products.
//!
//! The restarts are not a layer over a Lanczos core but the same loop
//! ([`block_lanczos_in`] extends the basis and restarts it in one pass), and
//! the loop is written once over where the `n`-vectors live
//! ([`KrylovBasis`]: the basis, the current block and its product, and the
//! few operations on them): [`HostKrylov`] holds them in host memory (the
//! block orthogonalisation is a few small functions on that layout), and
//! `DeviceKrylov` of the eKSVD solver (`eksvd::krylov`) resident on a GPU for
//! operators whose products run there, where a block product moves only
//! projected coefficients between host and device. The projected problems
//! (`T`, its eigendecomposition, the Ritz coefficients) are host matrices
//! either way; the rest is the public entry points and tests.
//!
//! A full decomposition costs `O(n^3)` in a tridiagonalisation that is
//! memory-bound for half of its flops; the top `k` need only products
//! `A V` with `n x b` blocks and Gram-Schmidt against a basis of a few `k`
//! columns. Blocks are narrow (8 columns by default) and the basis about
//! `3.5 k` columns: for a given basis size a narrow block reaches a higher
//! Krylov degree, so fewer product columns are needed (see BENCHMARKS.md),
//! and the thin products of [`super::thin`] read `A` once per block.
//! A Krylov space of blocks of `b` columns holds at most `b` vectors of an
//! eigenspace: when `b` or more of the converged wanted values coincide,
//! the eigenvalue may have more copies than were found, and the solve is
//! repeated with twice the block (up to `k`, where every multiplicity among
//! the wanted ones is covered). When the method does not converge within
//! its work budget, or the basis would not be small next to `n`, the
//! tridiagonal path answers instead (the blocked tridiagonalisation and the
//! `k` wanted pairs of `T`, [`super::symmetric_eigen_top_by_tridiagonal`]).
//!
//! The same solver runs on operators known only through block products
//! ([`symmetric_operator_largest`], [`SymmetricOperator`]): eKSVD's
//! matrix-free Dual and its Lanczos solvers, with narrow blocks.
//!
//! **Vectors split by rows** ([`RowSplit`]). The basis, the blocks and the
//! products may be held by rows over several processes, each holding some
//! rows of every vector ([`symmetric_operator_largest_on`]). Every inner
//! product of the iteration (the block Gram-Schmidt coefficients `V^T W`,
//! the Gram matrices and column norms of the block orthonormalisation, the
//! true residuals' norms, the breakdown scale) is this process's partial
//! sum over its rows followed by one [`RowSplit::sum`], which gives every
//! process the same bits; the projected problems (`T`, its
//! eigendecomposition, the restart's Ritz coefficients) are then solved
//! identically on every process, and everything of length `n` stays on its
//! rows (`V Y`, `W - V H`). A digest of each projected eigendecomposition is
//! compared across processes ([`Error::ShardMismatch`] if they differ, as
//! with different builds), so that the processes never take different
//! branches. On one process ([`AllRows`]) every sum is the identity and the
//! arithmetic is the single-process solver's, bit for bit. The random blocks
//! (the start, and replacements at a breakdown) are drawn from the seed in
//! row order on one process; over several, entry `(i, j)` is a function of
//! the seed, the global row `i` and `j` (uniform on `[-1, 1)`), so that each
//! process draws only its rows and the Krylov space does not depend on how
//! the rows are split. Small problems formed as `A I` are added up from the
//! processes' rows (one sum of `n^2` numbers) and decomposed on every
//! process.

use std::ops::Range;

use faer::{Accum, MatMut, MatRef, Par};
use nalgebra::{DMatrix, DVector};
use rand::{rngs::StdRng, RngCore, SeedableRng};



use super::{check_dim, check_matrix, clear_upper_simd_state, faer_mut, faer_ref, symmetric_eigen, SymmetricEigen};
use crate::error::{Error, Result};

/// Default [`TopEigenSettings::keep_blocks`]: Ritz vectors kept at a
/// restart beyond the wanted `k`, in blocks. Keeping more blocks saves
/// product columns to convergence, but from five blocks on a flat random
/// spectrum the work budget gives up early and the full decomposition
/// answers, at about twice the time; hence 4 (see BENCHMARKS.md).
const KEEP_BLOCKS: usize = 4;

/// Settings of the block Lanczos solver behind [`symmetric_eigen_largest`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TopEigenSettings {
    /// Columns per block (at least 1; widened, up to `k`, when a cluster of
    /// `block` equal wanted values suggests a larger multiplicity).
    pub block: usize,
    /// Smallest basis beyond `k + block` columns, in blocks; the basis
    /// holds `k + (1 + e) * block` columns (plus the residual block) with
    /// `e = max(extra_blocks, ceil(max(5 k / 2, 32) / block))`.
    pub extra_blocks: usize,
    /// Ritz vectors kept at a thick restart beyond the `k` wanted, in blocks
    /// (at least 1; at most what leaves one new block per restart).
    pub keep_blocks: usize,
    /// Converged when every wanted Ritz pair has an estimated residual
    /// `||A x - theta x|| <= tolerance * ||A||` (`||A||` estimated by the
    /// largest Ritz magnitude).
    pub tolerance: f64,
    /// Restarts before the full decomposition is used instead.
    pub max_restarts: usize,
    /// Work budget in block-product columns, as a multiple of `n`: the solver
    /// gives up for the full decomposition once it has multiplied more than
    /// `work_ratio * n` columns by `A`, or earlier when the residual decrease
    /// of the last two restarts, extrapolated, would need more. About
    /// `4 n` columns (`8 n^3` flops with the Gram-Schmidt) cost what
    /// faer's full decomposition does; the budget stops a slowly converging (flat-spectrum) problem well
    /// before that.
    pub work_ratio: f64,
    /// The block solver runs only when its whole basis is at most `n /
    /// min_ratio` columns (otherwise the full decomposition is cheaper).
    pub min_ratio: usize,
    /// Seed of the random start block.
    pub seed: u64,
}

impl Default for TopEigenSettings {
    /// Blocks of 8, the basis derived from `k`, `k` plus 4 blocks kept at a
    /// restart, tolerance `1e-11`, 300 restarts, work ratio 2, basis at most
    /// `n / 8`, seed 0. With `k = 64`
    /// the basis is 232 columns (240 with the residual block), so the block
    /// solver runs from order 1920. Well above that order the block solver
    /// is ahead of the tridiagonal path on both decaying and flat spectra;
    /// with the basis allowed at `n / 4` it fell behind on a flat spectrum
    /// of smaller order, hence `n / 8` (see BENCHMARKS.md).
    fn default() -> Self {
        TopEigenSettings { block: 8, extra_blocks: 2, keep_blocks: KEEP_BLOCKS, tolerance: 1e-11, max_restarts: 300, work_ratio: 2.0, min_ratio: 8, seed: 0 }
    }
}

/// The `k` largest eigenpairs of a symmetric matrix, ascending.
#[derive(Debug, Clone)]
pub struct LargestSymmetricEigen {
    /// The `k` largest eigenvalues and their orthonormal eigenvectors
    /// (`n x k`), ascending like [`symmetric_eigen`].
    pub eigen: SymmetricEigen,
    /// `max |lambda|` over the spectrum: from the tridiagonal path, the
    /// extreme eigenvalues of `T` to rounding;
    /// from the block solver the largest Ritz magnitude, a lower bound that
    /// the Krylov space makes close (both ends of the spectrum converge first).
    pub norm_estimate: f64,
    /// Whether the block solver answered (false: the tridiagonal path).
    pub partial: bool,
    /// Restarts the block solver took (0 from the tridiagonal path).
    pub restarts: usize,
    /// Block products `A V` of the block solver (0 from the tridiagonal
    /// path), the start block's included.
    pub block_products: usize,
}

/// How the rows of the block solver's `n`-vectors are held (module docs):
/// all on this process ([`AllRows`]), or some of them, the others on
/// processes that run the same solve on the same operator at the same time
/// (a sharded fit's ranks).
pub trait RowSplit {
    /// The order `n`: rows of a whole vector.
    fn order(&self) -> usize;
    /// The rows held here, as increasing, disjoint ranges of `0..n`; a
    /// vector's rows here are these rows in this order.
    fn local_ranges(&self) -> &[Range<usize>];
    /// Number of processes the rows are split over (1: all rows are here).
    fn processes(&self) -> usize;
    /// `values` summed element-wise over the processes, every process
    /// passing the same length and getting the same bits (the identity on
    /// one process).
    fn sum(&self, values: &mut [f64]) -> Result<()>;
    /// Every process's `values` (the same length on each), concatenated in
    /// process order, on every process.
    fn gather(&self, values: &[f64]) -> Result<Vec<f64>>;

    /// Number of rows held here.
    fn local_len(&self) -> usize {
        self.local_ranges().iter().map(|r| r.len()).sum()
    }
}

/// All `n` rows on this process: every sum and gather is the identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllRows {
    rows: [Range<usize>; 1],
}

impl AllRows {
    /// The rows `0..n`.
    pub fn new(n: usize) -> Self {
        AllRows { rows: [0..n] }
    }
}

impl RowSplit for AllRows {
    fn order(&self) -> usize {
        self.rows[0].end
    }
    fn local_ranges(&self) -> &[Range<usize>] {
        &self.rows
    }
    fn processes(&self) -> usize {
        1
    }
    #[inline]
    fn sum(&self, _values: &mut [f64]) -> Result<()> {
        Ok(())
    }
    fn gather(&self, values: &[f64]) -> Result<Vec<f64>> {
        Ok(values.to_vec())
    }
}

/// `sqrt` of this process's `partial` sum of squares summed over the processes.
fn summed_sqrt<R: RowSplit + ?Sized>(rows: &R, partial: f64) -> Result<f64> {
    let mut v = [partial];
    rows.sum(&mut v)?;
    Ok(v[0].sqrt())
}

/// This process's rows of an `n x cols` random block: one word of `rng`
/// keys a hash of each entry's global row and column, uniform on
/// `[-1, 1)`. So each process draws only its rows, `rng` advances by one
/// word everywhere, and the block has the same bits whatever the split of
/// the rows (one process or several); the columns are drawn in parallel.
pub(crate) fn random_rows<R: RowSplit + ?Sized>(rows: &R, cols: usize, rng: &mut StdRng) -> DMatrix<f64> {
    use rayon::prelude::*;
    let local = rows.local_len();
    let key = rng.next_u64();
    let ranges = rows.local_ranges();
    let mut out = DMatrix::<f64>::zeros(local, cols);
    out.as_mut_slice().par_chunks_mut(local.max(1)).enumerate().for_each(|(j, column)| {
        let column_key = split_mix(key ^ split_mix(j as u64));
        for (value, g) in column.iter_mut().zip(ranges.iter().flat_map(|r| r.clone())) {
            let bits = split_mix(column_key ^ g as u64);
            *value = (bits >> 11) as f64 * (2.0 / (1u64 << 53) as f64) - 1.0;
        }
    });
    out
}

/// SplitMix64's output function (Steele, Lea & Flood 2014).
fn split_mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A 128-bit FNV-1a digest of `words` (each xored in whole), as four exact
/// `f64` words: what processes compare to find out whether they hold the
/// same bits (a description, a replicated result).
pub(crate) fn digest(words: impl IntoIterator<Item = u64>) -> [f64; 4] {
    let mut h: u128 = 0x6c62272e07bb014262b821756295c58d;
    for w in words {
        h ^= u128::from(w);
        h = h.wrapping_mul(0x0000000001000000000000000000013B);
    }
    std::array::from_fn(|i| ((h >> (32 * i)) & 0xffff_ffff) as f64)
}

/// Checks that every process computed the same bits in a step it repeats
/// on the same numbers (a projected eigenproblem): `words` is the step's
/// result (`None`: it failed); [`Error::ShardMismatch`] on every process,
/// naming the lowest process that differs from process 0, if they differ.
/// One gather of four words ([`digest`]); nothing on one process.
pub(crate) fn check_replicated<R: RowSplit + ?Sized>(rows: &R, what: &'static str, words: Option<&mut dyn Iterator<Item = f64>>) -> Result<()> {
    if rows.processes() == 1 {
        return Ok(());
    }
    let mine = match words {
        Some(values) => digest(values.map(f64::to_bits)),
        None => [-1.0; 4],
    };
    let all = rows.gather(&mine)?;
    match all.chunks(4).position(|w| w != &all[..4]) {
        Some(rank) => Err(Error::ShardMismatch { what, rank }),
        None => Ok(()),
    }
}

/// [`check_replicated`] on an eigendecomposition.
fn check_replicated_eigen<R: RowSplit + ?Sized>(rows: &R, evd: &Result<SymmetricEigen>) -> Result<()> {
    let mut words = evd.as_ref().ok().map(|e| e.eigenvalues.iter().chain(e.eigenvectors.iter()).copied());
    check_replicated(rows, "the projected eigenproblem on every rank (the same build is needed)", words.as_mut().map(|w| w as &mut dyn Iterator<Item = f64>))
}

/// The `k` largest eigenpairs `A u = lambda u` of the symmetric matrix `a`
/// (only the lower triangle is read), eigenvalues ascending, with
/// [`TopEigenSettings::default`]. The block solver's pairs have residuals
/// `||A u - lambda u|| <= 1e-11 ||A||` (estimated; checked explicitly, to
/// `1e-9 ||A||`, before returning), so the eigenvalues agree with the full
/// decomposition's to about `1e-11 ||A||` or better. The block solver is
/// fast when the wanted eigenvalues stand apart from the rest (decaying
/// spectra: kernel and coupling matrices); on a flat spectrum it stops
/// within its work budget and the full decomposition answers.
///
/// Errors: as [`symmetric_eigen`], and [`Error::InvalidParameter`] for
/// `k` outside `1..=n`.
pub fn symmetric_eigen_largest(a: &DMatrix<f64>, k: usize) -> Result<LargestSymmetricEigen> {
    symmetric_eigen_largest_with(a, k, &TopEigenSettings::default())
}

/// [`symmetric_eigen_largest`] with explicit settings.
pub fn symmetric_eigen_largest_with(a: &DMatrix<f64>, k: usize, settings: &TopEigenSettings) -> Result<LargestSymmetricEigen> {
    check_matrix("symmetric matrix", a)?;
    check_dim("symmetric matrix must be square", a.nrows(), a.ncols())?;
    let n = a.nrows();
    check_arguments(n, k, settings)?;
    let shape = BlockShape::new(n, k, settings);
    if let Some(shape) = shape {
        let full = mirrored(a);
        let frobenius = full.iter().map(|x| x * x).sum::<f64>().sqrt();
        let mut product = DenseSymmetric(&full);
        if let BlockOutcome::Converged(found) = block_lanczos_widening(&AllRows::new(n), &mut product, Some(frobenius), k, shape, settings, true, None)? {
            return Ok(found);
        }
    }
    full_top(a, k)
}

/// The block solver of [`symmetric_eigen_largest`] on an operator that has
/// a cheaper answer when the solver is slow (a stored matrix given in a
/// compact form, say): the `min_ratio` and `work_ratio` of `settings` apply,
/// and `None` says the caller should decompose densely instead (basis too
/// large next to `n`, or the work budget spent). `frobenius` is `||A||_F`
/// (it sets the breakdown threshold).
///
/// Errors: as [`symmetric_operator_largest`], except non-convergence, which
/// is `Ok(None)`.
pub fn symmetric_operator_largest_within_budget<A: SymmetricOperator>(n: usize, k: usize, a: A, frobenius: f64, settings: &TopEigenSettings) -> Result<Option<LargestSymmetricEigen>> {
    symmetric_operator_largest_within_budget_on(&AllRows::new(n), k, a, frobenius, settings)
}

/// [`symmetric_operator_largest_within_budget`] on vectors split by rows
/// (module docs): `a` maps this process's rows of `V` to its rows of
/// `A V`, and the eigenvectors returned are this process's rows. Every
/// process of `rows` must call it with the same arguments (collective).
pub fn symmetric_operator_largest_within_budget_on<R: RowSplit + ?Sized, A: SymmetricOperator>(rows: &R, k: usize, mut a: A, frobenius: f64, settings: &TopEigenSettings) -> Result<Option<LargestSymmetricEigen>> {
    let n = rows.order();
    check_arguments(n, k, settings)?;
    let Some(shape) = BlockShape::new(n, k, settings) else { return Ok(None) };
    match block_lanczos_widening(rows, &mut a, Some(frobenius), k, shape, settings, true, None)? {
        BlockOutcome::Converged(found) => Ok(Some(found)),
        BlockOutcome::Stopped { .. } | BlockOutcome::TooWide => Ok(None),
    }
}

/// The `k` largest eigenpairs of the symmetric operator `a` of order `n`
/// by the block Lanczos of [`symmetric_operator_largest`] started from the
/// block `start` (`n x b`, `k <= b`; its columns need not be orthonormal)
/// instead of a random one: a warm start from vectors close to the wanted
/// invariant subspace (the Ritz vectors of a nearby matrix). The Ritz pairs
/// of `span(start)` are checked first (Rayleigh-Ritz, one product), then
/// the basis grows to at most `min(4 b, n - b)` columns by blocks of `b`,
/// restarting to the `k` leading Ritz vectors. Only the wanted pairs of
/// Ritz value above `floor` must converge (`f64::NEG_INFINITY`: all `k`;
/// `0`: the positive ones, as for `[M]_+`); the others are returned as
/// they stand. `frobenius` is `||A||_F`;
/// the tolerance, `max_restarts` and `work_ratio` of `settings` apply
/// (`block` and the basis sizes do not).
///
/// `Ok(None)` when the basis does not fit (`min(4 b, n - b) < k + b`) or the run stops
/// unconverged; the caller decomposes densely instead.
///
/// Errors: [`Error::InvalidParameter`] for `k` outside `1..=b`, a start
/// block of other than `n` rows or a tolerance outside `(0, 1)`; what the
/// operator returns.
pub fn symmetric_operator_largest_from<A: SymmetricOperator>(n: usize, k: usize, mut a: A, start: &DMatrix<f64>, floor: f64, frobenius: f64, settings: &TopEigenSettings) -> Result<Option<LargestSymmetricEigen>> {
    let b = start.ncols();
    check_dim("rows of the start block vs the order", n, start.nrows())?;
    check_arguments(b, k, settings)?;
    check_matrix("start block", start)?;
    let m = (4 * b).min(n.saturating_sub(b));
    if m < k + b {
        return Ok(None);
    }
    let shape = BlockShape { b, keep: k, m };
    match block_lanczos(&AllRows::new(n), &mut a, Some(frobenius), k, shape, settings, true, Some((start, floor)))? {
        BlockOutcome::Converged(found) => Ok(Some(found)),
        BlockOutcome::Stopped { .. } | BlockOutcome::TooWide => Ok(None),
    }
}

/// The `k` largest eigenpairs of a symmetric operator of order `n` given
/// only through block products `A V` ([`SymmetricOperator`]), eigenvalues
/// ascending, by the block Lanczos of [`symmetric_eigen_largest`] with
/// `settings` (`min_ratio` and `work_ratio` do not apply: there is no
/// cheaper answer to fall back on; the block widens on clusters as in
/// [`symmetric_eigen_largest`]). Converged when every wanted
/// pair has an estimated residual `||A u - lambda u|| <= tolerance ||A||`,
/// checked on the true residuals (to `100 tolerance ||A||`) before returning.
/// When the basis (or one widened for a cluster) would not fit in `n`, `A`
/// is formed as `A I` (`n` products) and decomposed densely.
///
/// Errors: [`Error::InvalidParameter`] for `k` outside `1..=n` or a
/// tolerance outside `(0, 1)`, or a basis too large for memory;
/// [`Error::EigenNotConverged`] after `max_restarts` restarts; what
/// the operator returns.
pub fn symmetric_operator_largest<A: SymmetricOperator>(n: usize, k: usize, a: A, settings: &TopEigenSettings) -> Result<LargestSymmetricEigen> {
    symmetric_operator_largest_on(&AllRows::new(n), k, a, settings)
}

/// [`symmetric_operator_largest`] on vectors split by rows over processes
/// (module docs): `a` maps this process's rows of `V` (`rows.local_len()`
/// rows, in the order of `rows.local_ranges()`) to its rows of `A V`, and
/// the eigenvectors returned are this process's rows. Every inner product
/// is one [`RowSplit::sum`]; every process of `rows` must call it with the
/// same arguments (collective), and they all return the same eigenvalues,
/// or the same error when it comes from the iteration. The memory checked
/// is this process's rows of the basis.
///
/// Errors: those of [`symmetric_operator_largest`]; [`Error::Overflow`]
/// when a product has a non-finite entry on some process (seen in the
/// summed projections); [`Error::ShardMismatch`] when the processes'
/// projected problems differ; what `rows` returns.
pub fn symmetric_operator_largest_on<R: RowSplit + ?Sized, A: SymmetricOperator>(rows: &R, k: usize, mut a: A, settings: &TopEigenSettings) -> Result<LargestSymmetricEigen> {
    let n = rows.order();
    let local = rows.local_len();
    check_arguments(n, k, settings)?;
    let too_large = |what: &str| Error::InvalidParameter { name: "n", reason: format!("{what} for n = {n}, k = {k} does not fit in memory") };
    let fits = |len: usize, cols: usize| len.checked_mul(cols).is_some_and(|len| len <= isize::MAX as usize / std::mem::size_of::<f64>());
    let shape = BlockShape::new(n, k, &TopEigenSettings { min_ratio: 1, ..*settings });
    if let Some(shape) = shape {
        if !fits(local, shape.m + shape.b) {
            return Err(too_large("a Lanczos basis"));
        }
        match block_lanczos_widening(rows, &mut a, None, k, shape, settings, false, None)? {
            BlockOutcome::Converged(found) => return Ok(found),
            BlockOutcome::Stopped { converged, restarts } => return Err(Error::EigenNotConverged { converged, requested: k, restarts }),
            BlockOutcome::TooWide => {}
        }
    }
    // The basis (or a widened one) does not fit next to n: A I, densely.
    dense_from_operator(rows, k, &mut a)
}

/// The `k` largest pairs of the operator `a` from `A I` (this process's
/// rows of it, summed into the whole matrix), decomposed densely on every
/// process ([`full_top`]); the eigenvectors are this process's rows.
pub(crate) fn dense_from_operator<R: RowSplit + ?Sized, A: SymmetricOperator>(rows: &R, k: usize, a: &mut A) -> Result<LargestSymmetricEigen> {
    let n = rows.order();
    let local = rows.local_len();
    let too_large = |what: &str| Error::InvalidParameter { name: "n", reason: format!("{what} for n = {n}, k = {k} does not fit in memory") };
    let fits = |len: usize, cols: usize| len.checked_mul(cols).is_some_and(|len| len <= isize::MAX as usize / std::mem::size_of::<f64>());
    if !fits(n, n) {
        return Err(too_large("the matrix A I"));
    }
    // This process's rows of I, then of A I, summed into the whole A I.
    let mut identity = DMatrix::<f64>::zeros(local, n);
    let mut l = 0;
    for range in rows.local_ranges() {
        for g in range.clone() {
            identity[(l, g)] = 1.0;
            l += 1;
        }
    }
    let mut mine = DMatrix::<f64>::zeros(local, n);
    a.apply(faer_ref(&identity), faer_mut(&mut mine))?;
    let full = if rows.processes() == 1 {
        mine
    } else {
        let mut full = DMatrix::<f64>::zeros(n, n);
        let mut l = 0;
        for range in rows.local_ranges() {
            for g in range.clone() {
                full.row_mut(g).copy_from(&mine.row(l));
                l += 1;
            }
        }
        rows.sum(full.as_mut_slice())?;
        full
    };
    check_matrix("the operator's A I", &full)?;
    let symmetric = (&full + full.transpose()) * 0.5;
    let top = full_top(&symmetric, k);
    check_replicated_eigen(rows, &top.as_ref().map(|t| t.eigen.clone()).map_err(Clone::clone))?;
    let mut top = top?;
    if rows.processes() > 1 {
        top.eigen.eigenvectors = local_rows_of(rows, &top.eigen.eigenvectors);
    }
    Ok(top)
}

/// This process's rows (`rows.local_ranges()`) of the whole `n`-row `m`.
pub(crate) fn local_rows_of<R: RowSplit + ?Sized>(rows: &R, m: &DMatrix<f64>) -> DMatrix<f64> {
    let mut out = DMatrix::<f64>::zeros(rows.local_len(), m.ncols());
    let mut l = 0;
    for range in rows.local_ranges() {
        out.rows_mut(l, range.len()).copy_from(&m.rows(range.start, range.len()));
        l += range.len();
    }
    out
}

/// `k` in `1..=n` and the tolerance in `(0, 1)`.
pub(crate) fn check_arguments(n: usize, k: usize, settings: &TopEigenSettings) -> Result<()> {
    if k == 0 || k > n {
        return Err(Error::InvalidParameter { name: "k", reason: format!("must be in 1..={n}, got {k}") });
    }
    if !(settings.tolerance.is_finite() && settings.tolerance > 0.0 && settings.tolerance < 1.0) {
        return Err(Error::InvalidParameter { name: "tolerance", reason: format!("must be in (0, 1), got {}", settings.tolerance) });
    }
    Ok(())
}

/// The top `k` by the tridiagonal path
/// ([`super::symmetric_eigen_top_by_tridiagonal`]): the `k` wanted pairs of
/// `T`, only those `k` vectors back-transformed.
fn full_top(a: &DMatrix<f64>, k: usize) -> Result<LargestSymmetricEigen> {
    let (top, norm_estimate) = super::symmetric_eigen_top_by_tridiagonal(a, k)?;
    Ok(LargestSymmetricEigen { eigen: top, norm_estimate, partial: false, restarts: 0, block_products: 0 })
}

/// Sizes of the block solver: block `b`, columns kept at a restart `keep`,
/// largest basis `m` (`keep + b <= m`, `m + b <= n`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockShape {
    pub(crate) b: usize,
    keep: usize,
    pub(crate) m: usize,
}

impl BlockShape {
    pub(crate) fn new(n: usize, k: usize, s: &TopEigenSettings) -> Option<Self> {
        let b = s.block.max(1);
        let first = k.checked_add(b)?;
        let derived = k.checked_mul(5)?.div_ceil(2).max(32).div_ceil(b);
        let m = first.checked_add(s.extra_blocks.max(derived).checked_mul(b)?)?;
        // At least one new block per restart (a larger setting is clamped,
        // not refused).
        let keep = k.saturating_add(s.keep_blocks.max(1).saturating_mul(b)).min(m - b);
        let total = m.checked_add(b)?;
        (total.checked_mul(s.min_ratio.max(1))? <= n).then_some(BlockShape { b, keep, m })
    }
}

/// Size of the largest group of `values` (ascending) within `gap` of their
/// neighbours.
fn largest_cluster(values: &[f64], gap: f64) -> usize {
    let mut best = values.len().min(1);
    let mut run = 1;
    for w in values.windows(2) {
        run = if w[1] - w[0] <= gap { run + 1 } else { 1 };
        best = best.max(run);
    }
    best
}

/// [`block_lanczos`], widening the block while a cluster of `b` or more
/// equal converged values may hide further copies of an eigenvalue (see the
/// module documentation). Two values count as equal within `1e-9 ||A||`.
#[allow(clippy::too_many_arguments)]
fn block_lanczos_widening<R: RowSplit + ?Sized, A: SymmetricOperator>(rows: &R, a: &mut A, frobenius: Option<f64>, k: usize, shape: BlockShape, s: &TopEigenSettings, budgeted: bool, start: Option<(&DMatrix<f64>, f64)>) -> Result<BlockOutcome> {
    widening(rows.order(), k, shape, s, |shape, settings| block_lanczos(rows, a, frobenius, k, shape, settings, budgeted, start))
}

/// Runs `solve` with `shape`, then again with twice the block (up to `k`)
/// while a cluster of `b` or more equal converged values may hide further
/// copies of an eigenvalue ([`block_lanczos_widening`]).
pub(crate) fn widening(n: usize, k: usize, shape: BlockShape, s: &TopEigenSettings, mut solve: impl FnMut(BlockShape, &TopEigenSettings) -> Result<BlockOutcome>) -> Result<BlockOutcome> {
    let mut settings = *s;
    let mut shape = shape;
    loop {
        let outcome = solve(shape, &settings)?;
        let BlockOutcome::Converged(found) = &outcome else { return Ok(outcome) };
        let cluster = largest_cluster(found.eigen.eigenvalues.as_slice(), 1e-9 * found.norm_estimate);
        if cluster < shape.b || shape.b >= k {
            return Ok(outcome);
        }
        settings.block = (2 * shape.b).min(k);
        log::debug!("block Lanczos: {cluster} equal values with blocks of {}, again with {}", shape.b, settings.block);
        match BlockShape::new(n, k, &settings) {
            Some(wider) => shape = wider,
            None => return Ok(BlockOutcome::TooWide),
        }
    }
}

/// `a` with its strictly upper triangle replaced by the lower one's transpose
/// (64 x 64 tiles, so that both reads and writes stay in cache).
fn mirrored(a: &DMatrix<f64>) -> DMatrix<f64> {
    let n = a.nrows();
    let mut full = a.clone();
    const T: usize = 64;
    for jb in (0..n).step_by(T) {
        for ib in (0..=jb).step_by(T) {
            // Upper tile (ib, jb) from the lower tile (jb, ib).
            for j in jb..(jb + T).min(n) {
                for i in ib..(ib + T).min(j) {
                    full[(i, j)] = a[(j, i)];
                }
            }
        }
    }
    full
}

/// Products of the solver: thin ones (Krylov blocks of up to 8 columns) by
/// the thin kernels, the rest by faer, on all threads.
fn gemm(dst: MatMut<'_, f64>, accum: Accum, lhs: MatRef<'_, f64>, rhs: MatRef<'_, f64>, alpha: f64) {
    super::matmul_thin_aware(dst, accum, lhs, rhs, alpha, Par::rayon(0));
}

fn dot(x: &[f64], y: &[f64]) -> f64 {
    x.iter().zip(y).map(|(a, b)| a * b).sum()
}

/// Two passes of classical Gram-Schmidt of the columns of `w` against the
/// first `cols` columns of `basis` (matrix products, each `V^T w` summed
/// over the processes); returns the coefficients `V^T w` of both passes
/// summed (`cols x w.ncols()`).
fn block_orthogonalise<R: RowSplit + ?Sized>(rows: &R, basis: &DMatrix<f64>, cols: usize, w: &mut DMatrix<f64>) -> Result<DMatrix<f64>> {
    let n = basis.nrows();
    let bw = w.ncols();
    let mut total = DMatrix::<f64>::zeros(cols, bw);
    if cols == 0 {
        return Ok(total);
    }
    let v = faer_ref(basis).subcols(0, cols);
    let mut h = DMatrix::<f64>::zeros(cols, bw);
    for _ in 0..2 {
        gemm(faer_mut(&mut h), Accum::Replace, v.transpose(), faer_ref(w), 1.0);
        rows.sum(h.as_mut_slice())?;
        gemm(faer_mut(w), Accum::Add, v, faer_ref(&h), -1.0);
        total += &h;
    }
    debug_assert_eq!(w.nrows(), n);
    Ok(total)
}

/// Orthonormalises the columns of `w` (already orthogonal to the first
/// `cols` basis columns) among themselves by modified Gram-Schmidt with
/// reorthogonalisation, `w = Q R`, `Q` written in place. A column that
/// cancels to below `breakdown` (an invariant subspace) is replaced by a
/// random unit vector orthogonal to the basis and to the earlier columns,
/// with `R[c, c] = 0`: its coupling to the Krylov space is zero.
fn orthonormalise_block<R: RowSplit + ?Sized>(rows: &R, basis: &DMatrix<f64>, cols: usize, w: &mut DMatrix<f64>, breakdown: f64, rng: &mut StdRng) -> Result<DMatrix<f64>> {
    if let Some(r) = cholesky_qr2(rows, w, breakdown)? {
        return Ok(r);
    }
    gram_schmidt_block(rows, basis, cols, w, breakdown, rng)
}

/// Cholesky QR applied twice (CholQR2: `G = W^T W = R^T R`, `W <- W R^{-1}`,
/// twice; Yamamoto et al., ETNA 44, 2015) on the column-equilibrated `W`,
/// all in matrix products: orthogonal to rounding when `W` is well
/// conditioned. `None` (and `w` untouched) when a column is at or below
/// `breakdown`, when a Cholesky factor has a diagonal ratio below `1e-3`
/// (the equilibrated block's condition number above about `1e3`: its
/// rounding-level components along the basis would be amplified by that
/// much), or when a factorisation fails; the Gram-Schmidt path then decides.
fn cholesky_qr2<R: RowSplit + ?Sized>(rows: &R, w: &mut DMatrix<f64>, breakdown: f64) -> Result<Option<DMatrix<f64>>> {
    let b = w.ncols();
    let mut scales: Vec<f64> = w.column_iter().map(|c| c.norm_squared()).collect();
    rows.sum(&mut scales)?;
    scales.iter_mut().for_each(|d| *d = d.sqrt());
    if scales.iter().any(|&d| !(d > breakdown)) {
        return Ok(None);
    }
    let mut r_total = DMatrix::<f64>::from_diagonal(&DVector::from_column_slice(&scales));
    let mut q = w.clone();
    for (j, d) in scales.iter().enumerate() {
        q.column_mut(j).scale_mut(1.0 / d);
    }
    for _ in 0..2 {
        let mut g = DMatrix::<f64>::zeros(b, b);
        gemm(faer_mut(&mut g), Accum::Replace, faer_ref(&q).transpose(), faer_ref(&q), 1.0);
        rows.sum(g.as_mut_slice())?;
        let Some((l, l_inv)) = gram_factor(&g) else { return Ok(None) };
        let mut next = DMatrix::<f64>::zeros(q.nrows(), b);
        gemm(faer_mut(&mut next), Accum::Replace, faer_ref(&q), faer_ref(&l_inv).transpose(), 1.0);
        q = next;
        r_total = l.transpose() * r_total;
    }
    *w = q;
    Ok(Some(r_total))
}

/// One pass of CholQR2 on the host ([`cholesky_qr2`]) or a device: from
/// the Gram matrix `g = Q^T Q` of the column-equilibrated block `Q`
/// (symmetrised here), its Cholesky factor `L` and `L^{-1}`, so that
/// `Q <- Q L^{-T}` (the explicit, well-conditioned inverse applied in one
/// product) orthonormalises `Q`. `None` when the factorisation fails or
/// the diagonal of `L` has a ratio below `1e-3` (see [`cholesky_qr2`]).
pub(crate) fn gram_factor(g: &DMatrix<f64>) -> Option<(DMatrix<f64>, DMatrix<f64>)> {
    let b = g.nrows();
    let g = (g + g.transpose()) * 0.5;
    let l = g.cholesky()?.unpack();
    let diag = l.diagonal();
    let (lo, hi) = diag.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &d| (lo.min(d), hi.max(d)));
    if !(lo > 1e-3 * hi) {
        return None;
    }
    let mut l_inv = DMatrix::<f64>::identity(b, b);
    if !l.solve_lower_triangular_mut(&mut l_inv) {
        return None;
    }
    Some((l, l_inv))
}

/// Column-by-column modified Gram-Schmidt with reorthogonalisation and
/// random replacement of cancelled columns (see [`orthonormalise_block`]);
/// each inner product summed over the processes.
pub(crate) fn gram_schmidt_block<R: RowSplit + ?Sized>(rows: &R, basis: &DMatrix<f64>, cols: usize, w: &mut DMatrix<f64>, breakdown: f64, rng: &mut StdRng) -> Result<DMatrix<f64>> {
    let n = rows.order();
    let b = w.ncols();
    let mut r = DMatrix::<f64>::zeros(b, b);
    for c in 0..b {
        let before = summed_norm(rows, w.column(c).as_slice())?;
        for _ in 0..2 {
            for l in 0..c {
                let h = summed_dot(rows, w.column(l).as_slice(), w.column(c).as_slice())?;
                r[(l, c)] += h;
                let (ql, mut wc) = w.columns_range_pair_mut(l, c);
                wc.axpy(-h, &ql, 1.0);
            }
        }
        let mut after = summed_norm(rows, w.column(c).as_slice())?;
        if after > breakdown && after < 1e-3 * before {
            // Heavy cancellation: rounding may have reintroduced directions
            // of the basis; one more pass against it and the block.
            reorthogonalise_column(rows, basis, cols, w, c)?;
            after = summed_norm(rows, w.column(c).as_slice())?;
        }
        if after > breakdown {
            r[(c, c)] = after;
            w.column_mut(c).scale_mut(1.0 / after);
        } else {
            let mut fresh = 0.0;
            // A random vector is orthogonal to n - 1 < cols + c columns
            // with probability zero of failure; the loop is bounded anyway.
            for _ in 0..8 {
                w.column_mut(c).copy_from(&random_rows(rows, 1, rng));
                reorthogonalise_column(rows, basis, cols, w, c)?;
                reorthogonalise_column(rows, basis, cols, w, c)?;
                fresh = summed_norm(rows, w.column(c).as_slice())?;
                if fresh > 1e-8 * (n as f64).sqrt() {
                    break;
                }
            }
            r[(c, c)] = 0.0;
            w.column_mut(c).scale_mut(1.0 / fresh.max(f64::MIN_POSITIVE));
        }
    }
    Ok(r)
}

/// `x . y` over all processes' rows.
fn summed_dot<R: RowSplit + ?Sized>(rows: &R, x: &[f64], y: &[f64]) -> Result<f64> {
    let mut v = [dot(x, y)];
    rows.sum(&mut v)?;
    Ok(v[0])
}

/// `||x||` over all processes' rows.
fn summed_norm<R: RowSplit + ?Sized>(rows: &R, x: &[f64]) -> Result<f64> {
    summed_sqrt(rows, dot(x, x))
}

/// One Gram-Schmidt pass of column `c` of `w` against the first `cols`
/// basis columns and the columns `0..c` of `w` (coefficients dropped: they
/// are rounding-level).
fn reorthogonalise_column<R: RowSplit + ?Sized>(rows: &R, basis: &DMatrix<f64>, cols: usize, w: &mut DMatrix<f64>, c: usize) -> Result<()> {
    if cols > 0 {
        let v = faer_ref(basis).subcols(0, cols);
        let mut h = DMatrix::<f64>::zeros(cols, 1);
        let mut wc = w.column(c).into_owned();
        let wc_ref = MatRef::from_column_major_slice(wc.as_slice(), wc.len(), 1);
        gemm(faer_mut(&mut h), Accum::Replace, v.transpose(), wc_ref, 1.0);
        rows.sum(h.as_mut_slice())?;
        let wc_mut = MatMut::from_column_major_slice_mut(wc.as_mut_slice(), w.nrows(), 1);
        gemm(wc_mut, Accum::Add, v, faer_ref(&h), -1.0);
        w.column_mut(c).copy_from(&wc);
    }
    for l in 0..c {
        let h = summed_dot(rows, w.column(l).as_slice(), w.column(c).as_slice())?;
        let (ql, mut wc) = w.columns_range_pair_mut(l, c);
        wc.axpy(-h, &ql, 1.0);
    }
    Ok(())
}

/// How a block Lanczos run ended.
pub(crate) enum BlockOutcome {
    /// Every wanted pair met the tolerance, checked on true residuals.
    Converged(LargestSymmetricEigen),
    /// Stopped by the restart limit or the work budget.
    Stopped {
        /// Wanted pairs whose estimated residual met the tolerance.
        converged: usize,
        restarts: usize,
    },
    /// A cluster asked for a wider block than fits next to `n`: the dense
    /// path must answer.
    TooWide,
}

/// `A V` for an `n x c` block `V`, written to the `n x c` output; `A`
/// symmetric. The solver calls it with `c = b` (a Krylov block) and once with
/// `c = k` (the residual check).
pub trait SymmetricOperator {
    /// Writes `A V` into `out` (fully overwritten).
    fn apply(&mut self, v: MatRef<'_, f64>, out: MatMut<'_, f64>) -> Result<()>;
}

/// A stored symmetric matrix (both triangles) as a [`SymmetricOperator`]:
/// `A V` by one product on all threads.
#[derive(Debug, Clone, Copy)]
pub struct DenseSymmetric<'a>(pub &'a DMatrix<f64>);

impl SymmetricOperator for DenseSymmetric<'_> {
    fn apply(&mut self, v: MatRef<'_, f64>, out: MatMut<'_, f64>) -> Result<()> {
        gemm(out, Accum::Replace, faer_ref(self.0), v, 1.0);
        Ok(())
    }
}

impl<F> SymmetricOperator for F
where
    F: FnMut(MatRef<'_, f64>, MatMut<'_, f64>) -> Result<()>,
{
    fn apply(&mut self, v: MatRef<'_, f64>, out: MatMut<'_, f64>) -> Result<()> {
        self(v, out)
    }
}

/// Where the block solver's `n`-vectors live and how the few operations
/// on them run: the basis `V` (`m + b` columns), the block `W` of the
/// iteration and the operator `A` that maps a basis block into `W`. The
/// iteration ([`block_lanczos_in`]) is written once over this; only the
/// projected problems (`T`, its eigendecomposition, the Ritz
/// coefficients, `b x b` factors) are host matrices. [`HostKrylov`] holds
/// this process's rows of the vectors in host memory; `DeviceKrylov`
/// (`eksvd::krylov`) holds all rows resident on a GPU.
pub(crate) trait KrylovBasis {
    /// Sets `W` to the start block: `start` (its columns, then random ones up
    /// to `b`), or a random block ([`random_rows`]).
    fn draw_start(&mut self, rng: &mut StdRng, start: Option<&DMatrix<f64>>) -> Result<()>;
    /// `W = A V_j` for the block `V_j` of `b` columns at basis column `at`
    /// (always the block stored last).
    fn apply_block(&mut self, at: usize) -> Result<()>;
    /// `||W||_F` over all rows.
    fn block_norm(&mut self) -> Result<f64>;
    /// Two passes of block Gram-Schmidt of `W` against the first `cols`
    /// basis columns ([`block_orthogonalise`]); the coefficients `V^T W` of
    /// both passes summed (`cols x b`).
    fn orthogonalise(&mut self, cols: usize) -> Result<DMatrix<f64>>;
    /// Orthonormalises `W = Q R` ([`orthonormalise_block`], `W` orthogonal
    /// to the first `cols` basis columns), stores `Q` as the basis block at
    /// column `cols` and returns `R` (`b x b`).
    fn orthonormalise_into(&mut self, cols: usize, breakdown: f64, rng: &mut StdRng) -> Result<DMatrix<f64>>;
    /// The Ritz vectors `V_c Y` (`c = cols`; this process's rows, on the
    /// host) when every pair with value above `floor` has a true residual
    /// `||A u_j - lambda_j u_j|| <= bound`, else `None`.
    fn converged_vectors(&mut self, cols: usize, y: &DMatrix<f64>, values: &DVector<f64>, floor: f64, bound: f64) -> Result<Option<DMatrix<f64>>>;
    /// The thick restart: basis columns `0..keep` become `V_c Y`
    /// (`Y` is `cols x keep`), columns `keep..keep + b` the residual block
    /// at column `cols`.
    fn restart(&mut self, cols: usize, keep: usize, y: &DMatrix<f64>) -> Result<()>;
}

/// [`KrylovBasis`] in host memory: this process's rows of the basis and of
/// `W` (faer matrices), every inner product summed over the processes of
/// `rows`, `A` a [`SymmetricOperator`] on the same rows.
struct HostKrylov<'a, R: RowSplit + ?Sized, A: SymmetricOperator> {
    rows: &'a R,
    a: &'a mut A,
    basis: DMatrix<f64>,
    w: DMatrix<f64>,
    b: usize,
}

impl<'a, R: RowSplit + ?Sized, A: SymmetricOperator> HostKrylov<'a, R, A> {
    /// A basis of `columns` columns and blocks of `b`, all zero.
    fn new(rows: &'a R, a: &'a mut A, columns: usize, b: usize) -> Self {
        let local = rows.local_len();
        HostKrylov { rows, a, basis: DMatrix::zeros(local, columns), w: DMatrix::zeros(local, b), b }
    }
}

impl<R: RowSplit + ?Sized, A: SymmetricOperator> KrylovBasis for HostKrylov<'_, R, A> {
    fn draw_start(&mut self, rng: &mut StdRng, start: Option<&DMatrix<f64>>) -> Result<()> {
        let b = self.b;
        self.w = match start {
            Some(v) => {
                let extra = random_rows(self.rows, b - v.ncols(), rng);
                let mut w = DMatrix::<f64>::zeros(v.nrows(), b);
                w.columns_mut(0, v.ncols()).copy_from(v);
                w.columns_mut(v.ncols(), b - v.ncols()).copy_from(&extra);
                w
            }
            None => random_rows(self.rows, b, rng),
        };
        Ok(())
    }
    fn apply_block(&mut self, at: usize) -> Result<()> {
        self.a.apply(faer_ref(&self.basis).subcols(at, self.b), faer_mut(&mut self.w))
    }
    fn block_norm(&mut self) -> Result<f64> {
        summed_sqrt(self.rows, self.w.norm_squared())
    }
    fn orthogonalise(&mut self, cols: usize) -> Result<DMatrix<f64>> {
        block_orthogonalise(self.rows, &self.basis, cols, &mut self.w)
    }
    fn orthonormalise_into(&mut self, cols: usize, breakdown: f64, rng: &mut StdRng) -> Result<DMatrix<f64>> {
        let r = orthonormalise_block(self.rows, &self.basis, cols, &mut self.w, breakdown, rng)?;
        self.basis.columns_mut(cols, self.b).copy_from(&self.w);
        Ok(r)
    }
    fn converged_vectors(&mut self, cols: usize, y: &DMatrix<f64>, values: &DVector<f64>, floor: f64, bound: f64) -> Result<Option<DMatrix<f64>>> {
        let vectors = matmul_basis(&self.basis, cols, y);
        Ok(true_residuals_within(self.rows, self.a, &vectors, values, floor, bound)?.then_some(vectors))
    }
    fn restart(&mut self, cols: usize, keep: usize, y: &DMatrix<f64>) -> Result<()> {
        let kept = matmul_basis(&self.basis, cols, y);
        let residual_block = self.basis.columns(cols, self.b).into_owned();
        self.basis.columns_mut(0, keep).copy_from(&kept);
        self.basis.columns_mut(keep, self.b).copy_from(&residual_block);
        Ok(())
    }
}

/// Thick-restart block Lanczos on the symmetric operator `a` of order `n`
/// with the vectors in host memory ([`HostKrylov`], [`block_lanczos_in`]).
#[allow(clippy::too_many_arguments)]
fn block_lanczos<R: RowSplit + ?Sized, A: SymmetricOperator>(rows: &R, a: &mut A, frobenius: Option<f64>, k: usize, shape: BlockShape, s: &TopEigenSettings, budgeted: bool, start: Option<(&DMatrix<f64>, f64)>) -> Result<BlockOutcome> {
    let mut basis = HostKrylov::new(rows, a, shape.m + shape.b, shape.b);
    block_lanczos_in(rows, &mut basis, frobenius, k, shape, s, budgeted, start)
}

/// Thick-restart block Lanczos on the symmetric operator of order `n`
/// held by `basis` (with its vectors).
/// `frobenius` is `||A||_F` when known (a stored matrix); otherwise it is
/// estimated from the first block product (`E ||A V||_F^2 = (b / n)
/// ||A||_F^2` for a random orthonormal `n x b` block `V`). It only sets the
/// breakdown threshold. `budgeted` applies the work budget of the settings
/// (the caller has a cheaper answer when the run is slow).
///
/// Invariant: `A V_c = V_c T_c + Q R E^T` where `V_c` are the first `c`
/// orthonormal basis columns, `T_c = V_c^T A V_c` (computed by projection,
/// diagonal on the kept Ritz vectors after a restart) and `Q` the
/// orthonormal residual block in the next `b` columns. The residual of the
/// Ritz pair `(theta, V_c y)` is `||R y_last||`, `y_last` the last `b`
/// entries of `y`. A restart keeps the `keep` largest Ritz vectors and `Q`.
/// The estimated residuals assume exact orthogonality: before returning, the
/// true ones are computed (one product with `k` columns); if they miss
/// `100 tolerance ||A||`, the run goes on as if not converged.
#[allow(clippy::too_many_arguments)]
pub(crate) fn block_lanczos_in<R: RowSplit + ?Sized, K: KrylovBasis>(rows: &R, basis: &mut K, frobenius: Option<f64>, k: usize, shape: BlockShape, s: &TopEigenSettings, budgeted: bool, start: Option<(&DMatrix<f64>, f64)>) -> Result<BlockOutcome> {
    let BlockShape { b, keep, m } = shape;
    let n = rows.order();
    let mut rng = StdRng::seed_from_u64(s.seed);
    let floor = start.map_or(f64::NEG_INFINITY, |(_, floor)| floor);
    basis.draw_start(&mut rng, start.map(|(v, _)| v))?;
    // A random block is far from breakdown: any positive threshold will do
    // before the scale of A is known (a start block's dependent columns are
    // replaced by random ones).
    let start_breakdown = f64::MIN_POSITIVE.max(1e-12 * basis.block_norm()?);
    basis.orthonormalise_into(0, start_breakdown, &mut rng)?;
    // Cancellation to below this is an invariant subspace (about
    // 10 eps ||A||_F, above rounding and far below any residual we accept).
    let mut breakdown = frobenius.map(|f| 1e-14 * f.max(f64::MIN_POSITIVE));
    let mut t = DMatrix::<f64>::zeros(m, m);
    let mut r_last = DMatrix::<f64>::zeros(b, b);
    let mut cols = 0usize;
    let mut anorm = 0.0f64;
    let mut restarts = 0usize;
    let mut columns = 0.0f64;
    let mut history: Vec<f64> = Vec::new();
    // From a start block its own Ritz pairs are checked first (Rayleigh-Ritz
    // on the start block, one product), then the basis is filled.
    let mut limit = if start.is_some() { b } else { m };
    let outcome = loop {
        // Extend by whole blocks up to `limit` columns; the block at `cols` is
        // orthonormal and orthogonal to the columns before it.
        while cols + b <= limit {
            basis.apply_block(cols)?;
            columns += b as f64;
            let threshold = match breakdown {
                Some(threshold) => threshold,
                None => {
                    let estimate = basis.block_norm()? * (n as f64 / b as f64).sqrt();
                    *breakdown.insert(1e-14 * estimate.max(f64::MIN_POSITIVE))
                }
            };
            let h = basis.orthogonalise(cols + b)?;
            // A non-finite entry of the product on any process reaches
            // every process's summed coefficients.
            if let Some(i) = h.iter().position(|x| !x.is_finite()) {
                return Err(Error::Overflow { what: "the operator's product A V (its projection on the basis)", row: i % h.nrows(), col: i / h.nrows() });
            }
            for j in 0..b {
                for i in 0..cols {
                    t[(i, cols + j)] = h[(i, j)];
                    t[(cols + j, i)] = h[(i, j)];
                }
                for i in 0..b {
                    t[(cols + i, cols + j)] = 0.5 * (h[(cols + i, j)] + h[(cols + j, i)]);
                }
            }
            r_last = basis.orthonormalise_into(cols + b, threshold, &mut rng)?;
            cols += b;
        }
        let tc = t.view((0, 0), (cols, cols)).into_owned();
        let evd = symmetric_eigen(&tc);
        check_replicated_eigen(rows, &evd)?;
        let evd = evd?;
        let theta = evd.eigenvalues.as_slice();
        anorm = theta.iter().fold(anorm, |mx, v| mx.max(v.abs()));
        let y_last = evd.eigenvectors.view((cols - b, cols - k), (b, k));
        let residuals = &r_last * y_last;
        let norms: Vec<f64> = residuals.column_iter().map(|c| c.norm()).collect();
        let worst = norms.iter().zip(&theta[cols - k..]).filter(|&(_, &t)| t > floor).fold(0.0f64, |w, (&r, _)| w.max(r));
        if worst <= s.tolerance * anorm {
            let eigenvalues = DVector::from_column_slice(&theta[cols - k..]);
            if let Some(vectors) = basis.converged_vectors(cols, &evd.eigenvectors.columns(cols - k, k).into_owned(), &eigenvalues, floor, 100.0 * s.tolerance * anorm)? {
                let eigen = SymmetricEigen { eigenvalues, eigenvectors: vectors };
                break BlockOutcome::Converged(LargestSymmetricEigen { eigen, norm_estimate: anorm, partial: true, restarts, block_products: (columns / b as f64) as usize });
            }
        }
        if limit < m {
            limit = m;
            continue;
        }
        let over_budget = budgeted && !within_budget(&mut history, worst / anorm.max(f64::MIN_POSITIVE), columns, cols - keep, n, s);
        if restarts >= s.max_restarts || over_budget {
            // Wanted pairs counted from the largest down, as they converge.
            let converged = norms.iter().rev().take_while(|&&r| r <= s.tolerance * anorm).count();
            break BlockOutcome::Stopped { converged, restarts };
        }
        restarts += 1;
        basis.restart(cols, keep, &evd.eigenvectors.columns(cols - keep, keep).into_owned())?;
        t.fill(0.0);
        for j in 0..keep {
            t[(j, j)] = theta[cols - keep + j];
        }
        cols = keep;
    };
    clear_upper_simd_state(true);
    Ok(outcome)
}

/// Whether every pair `(lambda_j, u_j)` with `lambda_j > floor` has `||A u_j - lambda_j u_j|| <= bound`.
fn true_residuals_within<R: RowSplit + ?Sized, A: SymmetricOperator>(rows: &R, a: &mut A, vectors: &DMatrix<f64>, values: &DVector<f64>, floor: f64, bound: f64) -> Result<bool> {
    let mut av = DMatrix::<f64>::zeros(vectors.nrows(), vectors.ncols());
    a.apply(faer_ref(vectors), faer_mut(&mut av))?;
    let mut squares: Vec<f64> = (0..vectors.ncols()).map(|j| (av.column(j) - vectors.column(j) * values[j]).norm_squared()).collect();
    rows.sum(&mut squares)?;
    Ok((0..vectors.ncols()).filter(|&j| values[j] > floor).all(|j| squares[j].sqrt() <= bound))
}

/// Whether to go on after a restart: `columns` block-product columns done,
/// `per_restart` more per restart, `worst` the largest relative residual
/// now. The residual decrease per restart is the geometric mean over the
/// last two restarts (it alternates between restarts).
fn within_budget(history: &mut Vec<f64>, worst: f64, columns: f64, per_restart: usize, n: usize, s: &TopEigenSettings) -> bool {
    history.push(worst);
    let budget = s.work_ratio * n as f64;
    if columns > budget {
        return false;
    }
    let h = history.len();
    if h < 3 {
        return true;
    }
    let rate = (history[h - 1] / history[h - 3]).sqrt();
    if !(rate < 1.0) {
        // No progress over two restarts: judge again once more is known,
        // within the hard budget.
        return true;
    }
    let needed = ((s.tolerance / worst).ln() / rate.ln()).max(0.0);
    columns + needed * per_restart as f64 <= budget
}

/// `V_c Y` for the first `cols` basis columns.
fn matmul_basis(basis: &DMatrix<f64>, cols: usize, y: &DMatrix<f64>) -> DMatrix<f64> {
    let mut out = DMatrix::<f64>::zeros(basis.nrows(), y.ncols());
    gemm(faer_mut(&mut out), Accum::Replace, faer_ref(basis).subcols(0, cols), faer_ref(y), 1.0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_distr::{Distribution, StandardNormal};

    fn wigner(n: usize, seed: u64) -> DMatrix<f64> {
        let mut rng = StdRng::seed_from_u64(seed);
        let b = DMatrix::<f64>::from_fn(n, n, |_, _| StandardNormal.sample(&mut rng));
        &b + b.transpose()
    }

    /// `Q diag(values) Q^T` with a random orthogonal `Q`.
    fn with_spectrum(values: &[f64], seed: u64) -> DMatrix<f64> {
        let n = values.len();
        let mut rng = StdRng::seed_from_u64(seed);
        let g = DMatrix::<f64>::from_fn(n, n, |_, _| StandardNormal.sample(&mut rng));
        let q = g.qr().q();
        let a = &q * DMatrix::from_diagonal(&DVector::from_column_slice(values)) * q.transpose();
        (&a + a.transpose()) * 0.5
    }

    /// Checks `got` against the full decomposition: eigenvalues within
    /// `1e-10 ||A||`, residuals `||A u - lambda u|| <= 1e-9 ||A||`,
    /// orthonormal vectors.
    fn check_against_full(a: &DMatrix<f64>, got: &LargestSymmetricEigen, k: usize) {
        let full = symmetric_eigen(a).unwrap();
        let n = a.nrows();
        let anorm = full.eigenvalues.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(f64::MIN_POSITIVE);
        assert_eq!(got.eigen.eigenvalues.len(), k);
        for j in 0..k {
            let want = full.eigenvalues[n - k + j];
            let have = got.eigen.eigenvalues[j];
            assert!((want - have).abs() <= 1e-10 * anorm, "eigenvalue {j}: {have} vs {want}");
            let u = got.eigen.eigenvectors.column(j);
            let res = (a * u - u * have).norm();
            assert!(res <= 1e-9 * anorm, "residual {j}: {res} (||A|| = {anorm})");
        }
        let gram = got.eigen.eigenvectors.transpose() * &got.eigen.eigenvectors;
        assert!((gram - DMatrix::<f64>::identity(k, k)).norm() < 1e-10);
        assert!(got.norm_estimate <= anorm * (1.0 + 1e-10) && got.norm_estimate >= 0.5 * anorm);
    }

    fn small_blocks(seed: u64) -> TopEigenSettings {
        TopEigenSettings { block: 4, min_ratio: 1, work_ratio: 1e3, seed, ..TopEigenSettings::default() }
    }

    #[test]
    fn block_solver_matches_the_full_decomposition_on_a_random_matrix() {
        // A flat (semicircle) spectrum converges slowly: with an unlimited
        // budget the block solver gets there; with the default budget the
        // full decomposition answers, within the same tolerances.
        let a = wigner(600, 1);
        let unlimited = TopEigenSettings { work_ratio: 1e3, min_ratio: 1, ..TopEigenSettings::default() };
        let got = symmetric_eigen_largest_with(&a, 20, &unlimited).unwrap();
        assert!(got.partial, "600 x 600, k = 20 takes the block solver");
        check_against_full(&a, &got, 20);
        let tight = TopEigenSettings { work_ratio: 0.2, ..TopEigenSettings::default() };
        let got = symmetric_eigen_largest_with(&a, 20, &tight).unwrap();
        assert!(!got.partial, "the budget stops the block solver");
        check_against_full(&a, &got, 20);
    }

    #[test]
    fn every_number_of_kept_blocks_converges_to_the_same_pairs() {
        // One new block per restart (keep_blocks beyond the basis is
        // clamped), the old default (1) and the new one (4): all converge to
        // the full decomposition's pairs on a flat spectrum with an unlimited
        // budget, the restarts differ.
        let a = wigner(400, 3);
        let mut restarts = Vec::new();
        for keep_blocks in [1, 4, usize::MAX] {
            let settings = TopEigenSettings { keep_blocks, ..small_blocks(7) };
            let got = symmetric_eigen_largest_with(&a, 12, &settings).unwrap();
            assert!(got.partial, "keep_blocks {keep_blocks}: the block solver answers");
            check_against_full(&a, &got, 12);
            restarts.push(got.restarts);
        }
        assert!(restarts[0] != restarts[2], "the kept blocks change the iteration: {restarts:?}");
    }

    #[test]
    fn block_solver_is_used_on_a_decaying_spectrum() {
        // The wanted 30 in [1, 2], well apart from the rest in [-0.5, 0.5]
        // (like the leading eigenvalues of a kernel matrix): default
        // settings, except that the basis may be n / 5 (the default n / 16
        // would take the full decomposition at this small order).
        let values: Vec<f64> = (0..800).map(|i| if i < 30 { 2.0 - i as f64 / 30.0 } else { 0.5 - (i - 30) as f64 / 770.0 }).collect();
        let a = with_spectrum(&values, 2);
        let got = symmetric_eigen_largest_with(&a, 30, &TopEigenSettings { min_ratio: 5, ..TopEigenSettings::default() }).unwrap();
        assert!(got.partial);
        check_against_full(&a, &got, 30);
    }

    #[test]
    fn repeated_and_clustered_eigenvalues_are_all_found() {
        // 7.0 five times (more than the settings' block of 4: four equal
        // values widen it to 8), a cluster 5 +- 1e-9, then the rest.
        let mut values: Vec<f64> = (0..200).map(|i| -3.0 + 6.0 * i as f64 / 200.0).collect();
        values[199] = 7.0;
        values[198] = 7.0;
        values[197] = 7.0;
        values[196] = 7.0;
        values[195] = 7.0;
        values[194] = 5.0 + 1e-9;
        values[193] = 5.0;
        values[192] = 5.0 - 1e-9;
        let a = with_spectrum(&values, 3);
        let got = symmetric_eigen_largest_with(&a, 8, &small_blocks(5)).unwrap();
        assert!(got.partial);
        check_against_full(&a, &got, 8);
    }

    #[test]
    fn rank_deficient_matrices_and_zero_eigenvalues() {
        // Rank 3 in dimension 150: the Krylov space is invariant after one
        // block; the top 6 include three zeros.
        let mut values = vec![0.0; 150];
        values[0] = -4.0;
        values[148] = 2.0;
        values[149] = 3.0;
        let a = with_spectrum(&values, 7);
        let got = symmetric_eigen_largest_with(&a, 6, &small_blocks(1)).unwrap();
        assert!(got.partial);
        check_against_full(&a, &got, 6);
        // The zero matrix: every vector is an eigenvector.
        let z = DMatrix::<f64>::zeros(100, 100);
        let got = symmetric_eigen_largest_with(&z, 3, &small_blocks(2)).unwrap();
        assert_eq!(got.eigen.eigenvalues.as_slice(), &[0.0, 0.0, 0.0]);
        let gram = got.eigen.eigenvectors.transpose() * &got.eigen.eigenvectors;
        assert!((gram - DMatrix::<f64>::identity(3, 3)).norm() < 1e-12);
    }

    #[test]
    fn small_and_odd_sizes() {
        for (n, k) in [(1usize, 1usize), (2, 1), (2, 2), (65, 1), (65, 3), (65, 65)] {
            let a = wigner(n, n as u64);
            let got = symmetric_eigen_largest(&a, k).unwrap();
            check_against_full(&a, &got, k);
        }
        // n = 65 through the block solver (block 4, basis 20 columns).
        let a = wigner(65, 9);
        let got = symmetric_eigen_largest_with(&a, 3, &small_blocks(3)).unwrap();
        assert!(got.partial);
        check_against_full(&a, &got, 3);
    }

    #[test]
    fn only_the_lower_triangle_is_read() {
        let a = wigner(300, 4);
        let mut garbled = a.clone();
        for j in 1..300 {
            for i in 0..j {
                garbled[(i, j)] = 1e3;
            }
        }
        let got = symmetric_eigen_largest_with(&garbled, 5, &small_blocks(1)).unwrap();
        assert!(got.partial);
        check_against_full(&a, &got, 5);
    }

    #[test]
    fn both_block_orthonormalisations_factor_the_block() {
        let mut rng = StdRng::seed_from_u64(8);
        let basis = DMatrix::<f64>::zeros(90, 1);
        let w0 = DMatrix::<f64>::from_fn(90, 12, |_, _| StandardNormal.sample(&mut rng));
        for chol in [true, false] {
            let mut w = w0.clone();
            let rows = AllRows::new(90);
            let r = if chol { cholesky_qr2(&rows, &mut w, 1e-14).unwrap().expect("well conditioned") } else { gram_schmidt_block(&rows, &basis, 0, &mut w, 1e-14, &mut rng).unwrap() };
            assert!((&w * &r - &w0).norm() <= 1e-12 * w0.norm(), "Q R = W ({chol})");
            assert!((w.transpose() * &w - DMatrix::<f64>::identity(12, 12)).norm() <= 1e-13, "Q^T Q = I ({chol})");
            for i in 0..12 {
                for j in 0..i {
                    assert!(r[(i, j)].abs() <= 1e-12 * w0.norm(), "R upper triangular ({chol})");
                }
            }
        }
        // Nearly dependent columns: CholQR2 declines, Gram-Schmidt answers.
        let mut w = w0.clone();
        let c0 = w.column(0).into_owned();
        w.column_mut(5).copy_from(&(c0 * 2.0 + w0.column(3) * 1e-6));
        assert!(cholesky_qr2(&AllRows::new(90), &mut w.clone(), 1e-14).unwrap().is_none());
    }

    /// The dense `a` as a [`SymmetricOperator`] that counts its product columns.
    fn counted<'a>(a: &'a DMatrix<f64>, columns: &'a mut usize) -> impl FnMut(MatRef<'_, f64>, MatMut<'_, f64>) -> Result<()> + 'a {
        move |v, out| {
            *columns += v.ncols();
            gemm(out, Accum::Replace, faer_ref(a), v, 1.0);
            Ok(())
        }
    }

    #[test]
    fn operator_solver_with_narrow_blocks_matches_the_full_decomposition() {
        // Blocks of 4 for k = 12 (not raised to k), a decaying spectrum with
        // a pair repeated 3 times among the wanted ones (3 <= the block).
        let mut values: Vec<f64> = (0..500).map(|i| 0.99f64.powi(i)).collect();
        values[3] = values[2];
        values[4] = values[2];
        let a = with_spectrum(&values, 11);
        let settings = TopEigenSettings { block: 4, extra_blocks: 8, tolerance: 1e-11, max_restarts: 500, seed: 4, ..TopEigenSettings::default() };
        let mut columns = 0;
        let got = symmetric_operator_largest(500, 12, counted(&a, &mut columns), &settings).unwrap();
        assert!(got.partial);
        assert!(columns < 500, "{columns} product columns: narrow blocks should not need n");
        check_against_full(&a, &got, 12);
        // Every vector of the repeated eigenvalue is found.
        let top = &got.eigen.eigenvalues;
        let repeated = top.iter().filter(|&&l| (l - values[2]).abs() < 1e-9).count();
        assert_eq!(repeated, 3);
    }

    #[test]
    fn warm_started_solver_matches_the_full_decomposition() {
        // Random symmetric matrices, one with a cluster of three values
        // within 1e-10 among the wanted ones: started from the exact
        // eigenvectors of a nearby matrix (a 1e-6 perturbation, as between
        // FISTA iterations of the PSD dual), from a random block, and from a
        // block with dependent columns, the solver must reach the full
        // decomposition's pairs (eigenvalues to 1e-10 ||A||, residuals to 1e-9 ||A||).
        for (case, seed) in [21u64, 22, 23].into_iter().enumerate() {
            let n = 150;
            let mut values: Vec<f64> = (0..n).map(|i| -2.0 + 4.0 * i as f64 / n as f64).collect();
            if case == 1 {
                values[n - 2] = values[n - 3] + 1e-10;
                values[n - 1] = values[n - 3] - 1e-10;
            }
            let a = with_spectrum(&values, seed);
            let nearby = {
                let e = wigner(n, seed + 100) * 1e-6;
                &a + e
            };
            let k = 10;
            let near = symmetric_eigen(&nearby).unwrap();
            let start = near.eigenvectors.columns(n - k, k).into_owned();
            let frobenius = a.norm();
            let settings = TopEigenSettings { max_restarts: 200, work_ratio: 1e3, ..TopEigenSettings::default() };
            let product = |v: MatRef<'_, f64>, out: MatMut<'_, f64>| {
                gemm(out, Accum::Replace, faer_ref(&a), v, 1.0);
                Ok(())
            };
            let got = symmetric_operator_largest_from(n, k, product, &start, f64::NEG_INFINITY, frobenius, &settings).unwrap().expect("converges from a warm start");
            check_against_full(&a, &got, k);
            let random = DMatrix::<f64>::from_fn(n, k, |i, j| ((i * 7 + j * 13) as f64).sin());
            let got = symmetric_operator_largest_from(n, k, product, &random, f64::NEG_INFINITY, frobenius, &settings).unwrap().expect("converges from a fixed block");
            check_against_full(&a, &got, k);
            let mut dependent = start.clone();
            let first = dependent.column(0).into_owned();
            dependent.column_mut(1).copy_from(&first);
            let got = symmetric_operator_largest_from(n, k, product, &dependent, f64::NEG_INFINITY, frobenius, &settings).unwrap().expect("converges with a dependent column");
            check_against_full(&a, &got, k);
        }
        // A basis that cannot fit (min(4 b, n - b) < k + b) is left to the caller; bad arguments are typed errors.
        let a = wigner(20, 1);
        let product = |v: MatRef<'_, f64>, out: MatMut<'_, f64>| {
            gemm(out, Accum::Replace, faer_ref(&a), v, 1.0);
            Ok(())
        };
        let start = DMatrix::<f64>::identity(20, 7);
        assert!(symmetric_operator_largest_from(20, 7, product, &start, f64::NEG_INFINITY, a.norm(), &TopEigenSettings::default()).unwrap().is_none());
        assert!(matches!(symmetric_operator_largest_from(20, 8, product, &start, f64::NEG_INFINITY, a.norm(), &TopEigenSettings::default()), Err(Error::InvalidParameter { .. })));
        assert!(matches!(symmetric_operator_largest_from(21, 3, product, &start, f64::NEG_INFINITY, a.norm(), &TopEigenSettings::default()), Err(ref e) if e.is_invalid_input()));
    }

    #[test]
    fn operator_solver_stops_with_a_typed_error() {
        // A flat spectrum with no restarts allowed cannot converge.
        let a = wigner(400, 2);
        let settings = TopEigenSettings { block: 4, extra_blocks: 4, max_restarts: 0, ..TopEigenSettings::default() };
        let mut columns = 0;
        let err = symmetric_operator_largest(400, 10, counted(&a, &mut columns), &settings).unwrap_err();
        match err {
            Error::EigenNotConverged { converged, requested, restarts } => {
                assert!(converged < requested && requested == 10 && restarts == 0, "{converged} {requested} {restarts}");
            }
            other => panic!("expected EigenNotConverged, got {other:?}"),
        }
        // The operator's own error comes back unchanged.
        let failing = |_: MatRef<'_, f64>, _: MatMut<'_, f64>| -> Result<()> { Err(Error::InvalidParameter { name: "operator", reason: "test".into() }) };
        assert!(matches!(symmetric_operator_largest(400, 3, failing, &TopEigenSettings::default()), Err(Error::InvalidParameter { name: "operator", .. })));
        // Invalid k and tolerance.
        let mut columns = 0;
        assert!(matches!(symmetric_operator_largest(400, 0, counted(&a, &mut columns), &TopEigenSettings::default()), Err(Error::InvalidParameter { name: "k", .. })));
        let bad = TopEigenSettings { tolerance: f64::NAN, ..TopEigenSettings::default() };
        assert!(matches!(symmetric_operator_largest(400, 3, counted(&a, &mut columns), &bad), Err(Error::InvalidParameter { name: "tolerance", .. })));
        assert_eq!(columns, 0, "nothing is applied before the arguments are checked");
    }

    #[test]
    fn operator_solver_forms_small_operators_densely() {
        // Basis and residual block (12 + 8 + 4 * 8 + 8 = 60 columns) beyond
        // n = 50: A I.
        let a = wigner(50, 6);
        let mut columns = 0;
        let got = symmetric_operator_largest(50, 12, counted(&a, &mut columns), &TopEigenSettings::default()).unwrap();
        assert!(!got.partial);
        assert_eq!(columns, 50);
        check_against_full(&a, &got, 12);
    }

    #[test]
    fn invalid_arguments() {
        let a = wigner(10, 1);
        assert!(matches!(symmetric_eigen_largest(&a, 0), Err(Error::InvalidParameter { name: "k", .. })));
        assert!(matches!(symmetric_eigen_largest(&a, 11), Err(Error::InvalidParameter { name: "k", .. })));
        let bad = TopEigenSettings { tolerance: 0.0, ..TopEigenSettings::default() };
        assert!(matches!(symmetric_eigen_largest_with(&a, 1, &bad), Err(Error::InvalidParameter { name: "tolerance", .. })));
        let rect = DMatrix::<f64>::zeros(3, 4);
        assert!(symmetric_eigen_largest(&rect, 1).is_err());
    }
}
