//! Largest eigenpairs of symmetric matrices: a dense path (faer's
//! divide-and-conquer solver) and a thick-restart Lanczos (Krylov-Schur)
//! solver that only needs products `A V`, so `A` need not be stored.
//!
//! eKSVD retains the eigenpairs with the largest **positive** eigenvalues
//! (`lambda = 1/gamma > 0`); both paths return them in descending order and
//! fail with a typed error when fewer than asked for are positive.
//!
//! The operator paths also run on vectors split by rows over ranks
//! ([`largest_lanczos_on`], [`largest_stored_on`], with a
//! [`RowSplit`]): the same solver, each inner product summed over the
//! ranks; the eigenvectors come back as this rank's rows, their signs
//! fixed over the whole vectors.

use faer::{MatMut, MatRef};
use nalgebra::{DMatrix, DVector};

use crate::data::check_shape;
use crate::error::Result;
use crate::error::Error;
use crate::Device;
use super::krylov::{symmetric_operator_largest_resident, ResidentSymmetricOperator};
use crate::linalg::{faer_mut, local_rows_of, symmetric_eigen_largest_with, symmetric_operator_largest_on, symmetric_operator_largest_within_budget_on, AllRows, RowSplit, TopEigenSettings};

/// Eigenvalues at or below this fraction of the largest magnitude count as
/// zero, not positive (rounding in a rank-deficient coupling matrix).
pub const POSITIVE_EIGENVALUE_TOLERANCE: f64 = 1e-10;

/// Which symmetric eigensolver finds the retained eigenpairs.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Eigensolver {
    /// The matrix stored (the Dual's `G_Q` as its upper blocks, or the
    /// covariance form of order `Q d_phi` when features make that smaller:
    /// [`super::dual::solve_dual`]), the largest
    /// `k` pairs by the narrow-block Lanczos of
    /// [`crate::linalg::symmetric_eigen_largest`] when the order is large
    /// next to `k` (to `1e-11 ||A||`), otherwise, or when that does not
    /// converge within its work budget, by the full tridiagonal path: exact
    /// to rounding, O(n^3).
    Dense,
    /// Thick-restart block Lanczos (block Krylov-Schur for symmetric
    /// matrices) for the `k` largest algebraic eigenvalues, with full
    /// reorthogonalisation: only products with the matrix are needed.
    /// Blocks of 8 columns, or of 40 where a product costs about the same
    /// at any width up to that ([`ProductCost::PerBlock`]: a kernel
    /// function's coupling, each kernel entry evaluated once per product).
    Lanczos {
        /// Converged when `||A x - theta x|| <= tolerance * max |theta|`.
        tolerance: f64,
        /// Restarts before giving up with [`Error::EigenNotConverged`].
        max_restarts: usize,
    },
}

impl Eigensolver {
    /// Lanczos with tolerance `1e-10` and up to 1000 restarts.
    pub fn lanczos() -> Self {
        Eigensolver::Lanczos { tolerance: 1e-10, max_restarts: 1000 }
    }

    /// Checks the Lanczos settings.
    pub fn validate(&self) -> Result<()> {
        if let Eigensolver::Lanczos { tolerance, .. } = *self {
            if !(tolerance.is_finite() && tolerance > 0.0 && tolerance < 1.0) {
                return Err(Error::InvalidParameter { name: "tolerance", reason: format!("must be in (0, 1), got {tolerance}") });
            }
        }
        Ok(())
    }
}

/// How the cost of a product `A V` grows with the columns of `V`: it sets
/// the Lanczos solver's block shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProductCost {
    /// In proportion to the columns (a stored matrix, products through
    /// features): blocks of 8 columns, the smallest basis that converges.
    PerColumn,
    /// Dominated by work done once per product whatever its width, such as
    /// evaluating each entry of a kernel matrix once: blocks of 40 columns
    /// and a basis of `k` plus 6 blocks, so that fewer products reach the
    /// same tolerance (eKSVD's Dual on an RBF coupling to `1e-8`: at
    /// `3 x 10^4` rows and `k = 4`, 7 products where blocks of 8 take 17;
    /// at `9000` rows and `k = 16`, 11 where they take 63).
    PerBlock,
}

impl ProductCost {
    /// The solver's settings for this cost and the given tolerance,
    /// restarts and seed.
    fn settings(self, tolerance: f64, max_restarts: usize, seed: u64) -> TopEigenSettings {
        let base = TopEigenSettings { tolerance, max_restarts, seed, ..TopEigenSettings::default() };
        match self {
            ProductCost::PerColumn => base,
            ProductCost::PerBlock => TopEigenSettings { block: 40, extra_blocks: 5, ..base },
        }
    }

    /// Columns per block of the Lanczos solver for this cost.
    pub(crate) fn block(self) -> usize {
        self.settings(0.5, 0, 0).block
    }
}

/// `apply` (on an owned matrix) as the operator the stored-matrix solvers
/// take, on faer views: `out = apply(v)`.
pub(crate) fn on_views<F>(mut apply: F) -> impl FnMut(MatRef<'_, f64>, MatMut<'_, f64>) -> Result<()>
where
    F: FnMut(&DMatrix<f64>) -> Result<DMatrix<f64>>,
{
    move |v: MatRef<'_, f64>, mut out: MatMut<'_, f64>| {
        let mut owned = DMatrix::<f64>::zeros(v.nrows(), v.ncols());
        faer_mut(&mut owned).copy_from(v);
        out.copy_from(crate::linalg::faer_ref(&apply(&owned)?));
        Ok(())
    }
}

/// The `k` largest positive eigenvalues (descending) and their orthonormal
/// eigenvectors (one per column, sign fixed so that the entry of largest
/// magnitude is positive).
#[derive(Debug, Clone)]
pub struct LargestEigenpairs {
    /// Eigenvalues, descending, all positive.
    pub values: DVector<f64>,
    /// Eigenvectors, `n x k`.
    pub vectors: DMatrix<f64>,
}

/// Keeps the `k` largest of `values` (ascending input with vectors as
/// columns: this rank's rows of `rows`), checks positivity against `scale`
/// and fixes signs (the entry of largest magnitude of each whole vector
/// positive, the first such entry on ties: [`crate::linalg::sign_of_largest`]).
fn retain_largest_positive<R: RowSplit + ?Sized>(rows: &R, values: &[f64], vectors: &DMatrix<f64>, order: &[usize], k: usize, scale: f64) -> Result<LargestEigenpairs> {
    let threshold = POSITIVE_EIGENVALUE_TOLERANCE * scale;
    let available = order.iter().take_while(|&&i| values[i] > threshold).count();
    if available == 0 {
        return Err(Error::NoPositiveEigenvalues);
    }
    if available < k {
        return Err(Error::TooFewPositiveEigenvalues { requested: k, available });
    }
    // Each column's first entry of largest magnitude here, with its global
    // row, then over the ranks (one gather of 3 k numbers).
    let mut best = Vec::with_capacity(3 * k);
    for &i in order.iter().take(k) {
        let (mut value, mut row) = (0.0f64, f64::INFINITY);
        let mut l = 0;
        for range in rows.local_ranges() {
            for g in range.clone() {
                let x = vectors[(l, i)];
                if x.abs() > value.abs() {
                    (value, row) = (x, g as f64);
                }
                l += 1;
            }
        }
        best.extend([value.abs(), value, row]);
    }
    let all = rows.gather(&best)?;
    let n = vectors.nrows();
    let mut out = DMatrix::zeros(n, k);
    for (j, &i) in order.iter().take(k).enumerate() {
        let (mut abs, mut value, mut row) = (0.0f64, 0.0f64, f64::INFINITY);
        for p in all.chunks(3 * k) {
            let c = &p[3 * j..3 * j + 3];
            if c[0] > abs || (c[0] == abs && c[0] > 0.0 && c[2] < row) {
                (abs, value, row) = (c[0], c[1], c[2]);
            }
        }
        let sign = if value < 0.0 { -1.0 } else { 1.0 };
        out.column_mut(j).copy_from(&(vectors.column(i) * sign));
    }
    Ok(LargestEigenpairs { values: DVector::from_iterator(k, order.iter().take(k).map(|&i| values[i])), vectors: out })
}

pub(crate) fn check_k(k: usize, n: usize) -> Result<()> {
    if n == 0 {
        return Err(Error::InvalidParameter { name: "n", reason: "the operator dimension must be >= 1, got 0".into() });
    }
    if k == 0 || k > n {
        return Err(Error::InvalidParameter { name: "n_components", reason: format!("must be in 1..={n}, got {k}") });
    }
    Ok(())
}

/// The block solver of [`largest_dense`] runs when its basis is at most
/// `n / DENSE_MIN_RATIO` columns (the library default is `n / 8`). eKSVD's
/// matrices (coupling matrices and their covariance forms) have decaying
/// spectra, on which the block solver converges in a few restarts. Top 64
/// of order 1536 (a basis of 240 columns: allowed from `n / 6.4`), release,
/// 2-core AVX-512 machine, medians of 5:
/// the covariance form of eKSVD's Table 2 0.16-0.17 s against 0.25-0.27 s
/// for the tridiagonal path, a rank-200 matrix plus noise 0.10 against
/// 0.25; a Wigner matrix (flat spectrum: the work budget stops the block
/// solver and the full path answers) 0.37-0.47 against 0.25-0.32.
const DENSE_MIN_RATIO: usize = 6;

/// The `k` largest positive eigenpairs of the symmetric matrix `a` (only the
/// lower triangle is read) from the dense matrix: block Lanczos on matrix
/// products when `k` is small next to `n` (basis at most `n / 6`,
/// `DENSE_MIN_RATIO`), otherwise (or if that does not converge within its
/// work budget) the full decomposition
/// ([`crate::linalg::symmetric_eigen_largest_with`]). Positivity is judged
/// against `max |lambda|` (estimated by the block solver).
pub fn largest_dense(a: &DMatrix<f64>, k: usize) -> Result<LargestEigenpairs> {
    crate::linalg::check_matrix("symmetric matrix", a)?;
    crate::linalg::check_dim("symmetric matrix must be square", a.nrows(), a.ncols())?;
    check_k(k, a.nrows())?;
    let top = symmetric_eigen_largest_with(a, k, &TopEigenSettings { min_ratio: DENSE_MIN_RATIO, ..TopEigenSettings::default() })?;
    log::debug!("largest_dense: n = {}, k = {k}, block Lanczos {} ({} restarts)", a.nrows(), top.partial, top.restarts);
    let order: Vec<usize> = (0..k).rev().collect();
    retain_largest_positive(&AllRows::new(a.nrows()), top.eigen.eigenvalues.as_slice(), &top.eigen.eigenvectors, &order, k, top.norm_estimate)
}

/// The `k` largest positive eigenpairs of a stored symmetric matrix of order
/// `n` held in a compact form: the block solver on `apply` (`A V` for blocks
/// of columns) within the work budget of the dense path
/// ([`crate::linalg::symmetric_operator_largest_within_budget`], default
/// settings), otherwise the dense matrix from `dense()` through
/// [`largest_dense`]. `frobenius` is `||A||_F`.
pub fn largest_stored<F, D>(n: usize, k: usize, apply: F, frobenius: f64, dense: D) -> Result<LargestEigenpairs>
where
    F: FnMut(MatRef<'_, f64>, MatMut<'_, f64>) -> Result<()>,
    D: FnOnce() -> Result<DMatrix<f64>>,
{
    largest_stored_on(&AllRows::new(n), k, apply, frobenius, dense)
}

/// [`largest_stored`] on vectors split by rows over ranks (collective on
/// the ranks of `rows`): `apply` maps this rank's rows of `V` to its rows
/// of `A V`, the eigenvectors are this rank's rows; `dense()` (the whole
/// matrix, on every rank) is decomposed on every rank, and its
/// decomposition compared across the ranks ([`Error::ShardMismatch`]).
pub fn largest_stored_on<R, F, D>(rows: &R, k: usize, apply: F, frobenius: f64, dense: D) -> Result<LargestEigenpairs>
where
    R: RowSplit + ?Sized,
    F: FnMut(MatRef<'_, f64>, MatMut<'_, f64>) -> Result<()>,
    D: FnOnce() -> Result<DMatrix<f64>>,
{
    let n = rows.order();
    check_k(k, n)?;
    match symmetric_operator_largest_within_budget_on(rows, k, apply, frobenius, &TopEigenSettings::default())? {
        Some(top) => {
            log::debug!("largest_stored: n = {n}, k = {k}, block Lanczos ({} restarts)", top.restarts);
            let order: Vec<usize> = (0..k).rev().collect();
            retain_largest_positive(rows, top.eigen.eigenvalues.as_slice(), &top.eigen.eigenvectors, &order, k, top.norm_estimate)
        }
        None => {
            let pairs = dense().and_then(|a| largest_dense(&a, k));
            let mut words = pairs.as_ref().ok().map(|p| p.values.iter().chain(p.vectors.iter()).copied());
            crate::linalg::check_replicated(rows, "the dense eigenproblem on every rank (the same build is needed)", words.as_mut().map(|w| w as &mut dyn Iterator<Item = f64>))?;
            let mut pairs = pairs?;
            if rows.processes() > 1 {
                pairs.vectors = local_rows_of(rows, &pairs.vectors);
            }
            Ok(pairs)
        }
    }
}

/// The `k` largest positive eigenpairs of a symmetric `n x n` operator given
/// only through `apply(V) = A V` (called with blocks of 8 columns, more
/// when a cluster asks for it, and once with `k` columns for the final
/// residual check), by
/// the library's thick-restart block Lanczos
/// ([`crate::linalg::symmetric_operator_largest`]: a block Krylov-Schur
/// method, two passes of block Gram-Schmidt, all in matrix products):
/// converged when the `k` largest Ritz pairs have residuals
/// `||A x - theta x|| <= tolerance * max |theta|`. The block widens (up to
/// `k`) when `b` converged values coincide, so that every copy of a
/// repeated eigenvalue among the wanted ones is found. `seed` fixes the
/// random start block. Small
/// problems (the basis not below `n`) are solved densely from `A I`.
pub fn largest_lanczos<F>(n: usize, k: usize, apply: F, tolerance: f64, max_restarts: usize, seed: u64) -> Result<LargestEigenpairs>
where
    F: FnMut(&DMatrix<f64>) -> Result<DMatrix<f64>>,
{
    largest_lanczos_on(&AllRows::new(n), k, apply, tolerance, max_restarts, seed)
}

/// [`largest_lanczos`] with the block shape of `cost` (blocks of 8 for
/// [`ProductCost::PerColumn`], as [`largest_lanczos`]).
pub fn largest_lanczos_for<F>(n: usize, k: usize, apply: F, tolerance: f64, max_restarts: usize, seed: u64, cost: ProductCost) -> Result<LargestEigenpairs>
where
    F: FnMut(&DMatrix<f64>) -> Result<DMatrix<f64>>,
{
    largest_lanczos_on_for(&AllRows::new(n), k, apply, tolerance, max_restarts, seed, cost)
}

/// [`largest_lanczos`] on vectors split by rows over ranks (collective on
/// the ranks of `rows`; [`crate::linalg::symmetric_operator_largest_on`]):
/// `apply` maps this rank's rows of `V` to its rows of `A V` and the
/// eigenvectors are this rank's rows, their signs fixed over the whole
/// vectors. Every rank gets the same eigenvalues. The memory checked is
/// this rank's rows of the basis; a non-finite product entry is reported
/// on every rank once the summed projections see it.
pub fn largest_lanczos_on<R, F>(rows: &R, k: usize, apply: F, tolerance: f64, max_restarts: usize, seed: u64) -> Result<LargestEigenpairs>
where
    R: RowSplit + ?Sized,
    F: FnMut(&DMatrix<f64>) -> Result<DMatrix<f64>>,
{
    largest_lanczos_on_for(rows, k, apply, tolerance, max_restarts, seed, ProductCost::PerColumn)
}

/// [`largest_lanczos_on`] with the block shape of `cost`.
#[allow(clippy::too_many_arguments)]
pub fn largest_lanczos_on_for<R, F>(rows: &R, k: usize, mut apply: F, tolerance: f64, max_restarts: usize, seed: u64, cost: ProductCost) -> Result<LargestEigenpairs>
where
    R: RowSplit + ?Sized,
    F: FnMut(&DMatrix<f64>) -> Result<DMatrix<f64>>,
{
    let n = rows.order();
    let whole = rows.processes() == 1;
    check_k(k, n)?;
    Eigensolver::Lanczos { tolerance, max_restarts }.validate()?;
    // At least the k wanted vectors and one block are held (rows x (k + b));
    // a basis whose size overflows is rejected as a parameter below.
    let settings = cost.settings(tolerance, max_restarts, seed);
    if let Some(entries) = rows.local_len().checked_mul(k.saturating_add(settings.block)) {
        crate::memory::check_host::<f64>(entries, "Lanczos basis")?;
    }
    let (mut products, mut blocks) = (0usize, 0usize);
    let operator = |v: MatRef<'_, f64>, mut out: MatMut<'_, f64>| -> Result<()> {
        let mut v_owned = DMatrix::<f64>::zeros(v.nrows(), v.ncols());
        faer_mut(&mut v_owned).copy_from(v);
        let v = v_owned;
        let av = apply(&v)?;
        check_shape("rows of the operator's A V", v.nrows(), av.nrows())?;
        check_shape("columns of the operator's A V", v.ncols(), av.ncols())?;
        // On one process the entry is named here; over ranks every rank
        // sees it in the next summed projection (the solver's check).
        if let Some(i) = av.iter().position(|x| !x.is_finite()).filter(|_| whole) {
            return Err(Error::Overflow { what: "the operator's product A V", row: i % av.nrows(), col: i / av.nrows() });
        }
        products += v.ncols();
        blocks += 1;
        out.copy_from(MatRef::from_column_major_slice(av.as_slice(), av.nrows(), av.ncols()));
        Ok(())
    };
    let top = symmetric_operator_largest_on(rows, k, operator, &settings)?;
    log::debug!("largest_lanczos: n = {n}, k = {k}: {blocks} block products, {products} product columns, {} restarts", top.restarts);
    let order: Vec<usize> = (0..k).rev().collect();
    retain_largest_positive(rows, top.eigen.eigenvalues.as_slice(), &top.eigen.eigenvectors, &order, k, top.norm_estimate)
}

/// [`largest_lanczos`] for an operator whose products run on the GPU
/// `device` (`f64`): the same block Lanczos with its Krylov basis resident
/// there ([`super::krylov::symmetric_operator_largest_resident`]), so that
/// a product moves only the projected coefficients between host and device.
/// The same pairs as [`largest_lanczos`] on the same products, to the
/// tolerance (the products' rounding differs).
#[allow(clippy::too_many_arguments)]
pub(crate) fn largest_lanczos_resident<O: ResidentSymmetricOperator>(device: &Device, n: usize, k: usize, apply: O, tolerance: f64, max_restarts: usize, seed: u64, cost: ProductCost) -> Result<LargestEigenpairs> {
    check_k(k, n)?;
    Eigensolver::Lanczos { tolerance, max_restarts }.validate()?;
    let settings = cost.settings(tolerance, max_restarts, seed);
    let top = symmetric_operator_largest_resident(device, n, k, apply, &settings)?;
    log::debug!("largest_lanczos_resident: n = {n}, k = {k}: {} block products, {} restarts", top.block_products, top.restarts);
    let order: Vec<usize> = (0..k).rev().collect();
    retain_largest_positive(&AllRows::new(n), top.eigen.eigenvalues.as_slice(), &top.eigen.eigenvectors, &order, k, top.norm_estimate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};
    use rand_distr::{Distribution, StandardNormal};

    /// `U diag(spectrum) U^T` (symmetrised) with `U` the orthogonal factor
    /// of a Gaussian matrix drawn from `seed`.
    fn with_spectrum(spectrum: &DVector<f64>, seed: u64) -> DMatrix<f64> {
        let n = spectrum.len();
        let mut rng = StdRng::seed_from_u64(seed);
        let g = DMatrix::<f64>::from_fn(n, n, |_, _| StandardNormal.sample(&mut rng));
        let u = g.qr().q();
        let a = &u * DMatrix::from_diagonal(spectrum) * u.transpose();
        (&a + a.transpose()) * 0.5
    }

    fn test_matrix(n: usize) -> DMatrix<f64> {
        // Random symmetric (Wigner-like): about half its eigenvalues positive.
        let mut rng = StdRng::seed_from_u64(11);
        let b = DMatrix::<f64>::from_fn(n, n, |_, _| StandardNormal.sample(&mut rng));
        (&b + b.transpose()) * 0.5
    }

    #[test]
    fn lanczos_matches_dense_on_an_indefinite_matrix() {
        let a = test_matrix(300);
        let dense = largest_dense(&a, 5);
        let lanczos = largest_lanczos(300, 5, |v| Ok(&a * v), 1e-11, 500, 3);
        let (d, l) = (dense.unwrap(), lanczos.unwrap());
        for i in 0..5 {
            assert!((d.values[i] - l.values[i]).abs() < 1e-8 * d.values[0].abs(), "{} vs {}", d.values[i], l.values[i]);
            let overlap = d.vectors.column(i).dot(&l.vectors.column(i)).abs();
            assert!(overlap > 1.0 - 1e-6, "eigenvector {i}: |<u, v>| = {overlap}");
        }
    }

    #[test]
    fn lanczos_handles_an_invariant_subspace_of_a_low_rank_operator() {
        // Rank 5 in dimension 200: the Krylov space is exhausted after 5 steps.
        let mut rng = StdRng::seed_from_u64(4);
        let g = DMatrix::<f64>::from_fn(200, 5, |_, _| StandardNormal.sample(&mut rng));
        let u = g.qr().q();
        let a = &u * DMatrix::from_diagonal(&DVector::from_vec(vec![5.0, 3.0, 1.0, -2.0, -4.0])) * u.transpose();
        let l = largest_lanczos(200, 3, |v| Ok(&a * v), 1e-10, 50, 1).unwrap();
        for (got, want) in l.values.iter().zip([5.0, 3.0, 1.0]) {
            assert!((got - want).abs() < 1e-9, "{got} vs {want}");
        }
        let residual = &a * &l.vectors - &l.vectors * DMatrix::from_diagonal(&l.values);
        assert!(residual.norm() < 1e-8);
        // Only three positive eigenvalues exist.
        assert_eq!(
            largest_lanczos(200, 4, |v| Ok(&a * v), 1e-10, 50, 1).unwrap_err(),
            Error::TooFewPositiveEigenvalues { requested: 4, available: 3 }
        );
    }

    /// A slowly separating spectrum (the wanted 20 in a 1e-3 cluster just
    /// above a geometric tail) takes many restarts: the vectors must stay
    /// orthonormal and match the dense solver (with a single Gram-Schmidt
    /// pass per step this fails).
    #[test]
    fn lanczos_vectors_stay_orthonormal_over_many_restarts() {
        let n = 400;
        let a = with_spectrum(&DVector::from_fn(n, |i, _| if i < 20 { 1.0 - 1e-3 * i as f64 } else { 0.97 * 0.995f64.powi(i as i32 - 20) }), 8);
        let mut products = 0usize;
        let l = largest_lanczos(
            n,
            20,
            |v| {
                products += v.ncols();
                Ok(&a * v)
            },
            1e-10,
            1000,
            5,
        )
        .unwrap();
        assert!(products > 100, "only {products} products: the spectrum should need restarts");
        let d = largest_dense(&a, 20).unwrap();
        for i in 0..20 {
            assert!((l.values[i] - d.values[i]).abs() < 1e-9, "eigenvalue {i}: {} vs {}", l.values[i], d.values[i]);
        }
        let gram = l.vectors.transpose() * &l.vectors - DMatrix::<f64>::identity(20, 20);
        assert!(gram.amax() < 1e-10, "V^T V - I: {}", gram.amax());
        let residual = &a * &l.vectors - &l.vectors * DMatrix::from_diagonal(&l.values);
        assert!(residual.amax() < 1e-8, "residual {}", residual.amax());
    }

    #[test]
    fn stored_matrices_take_the_block_solver_or_the_dense_path() {
        // A decaying spectrum of order 600, k = 6: the block solver answers
        // (the dense closure is never called) and agrees with the dense path.
        let n = 600;
        let a = with_spectrum(&DVector::from_fn(n, |i, _| 0.9f64.powi(i as i32) * if i % 3 == 2 { -1.0 } else { 1.0 }), 3);
        let frobenius = a.norm();
        let mut columns = 0usize;
        let apply = |v: MatRef<'_, f64>, out: MatMut<'_, f64>| -> Result<()> {
            columns += v.ncols();
            faer::linalg::matmul::matmul(out, faer::Accum::Replace, crate::linalg::faer_ref(&a), v, 1.0, faer::Par::Seq);
            Ok(())
        };
        let got = largest_stored(n, 6, apply, frobenius, || -> Result<DMatrix<f64>> { panic!("the block solver should answer") }).unwrap();
        assert!(columns > 0 && columns < n);
        let want = largest_dense(&a, 6).unwrap();
        for i in 0..6 {
            assert!((got.values[i] - want.values[i]).abs() < 1e-10, "{} vs {}", got.values[i], want.values[i]);
            assert!(got.vectors.column(i).dot(&want.vectors.column(i)) > 1.0 - 1e-8);
        }
        // Order 40: the basis does not fit, the dense matrix answers.
        let small = a.view((0, 0), (40, 40)).into_owned();
        let mut dense_called = false;
        let never = |_: MatRef<'_, f64>, _: MatMut<'_, f64>| -> Result<()> { panic!("no products expected") };
        let got = largest_stored(40, 3, never, small.norm(), || {
            dense_called = true;
            Ok(small.clone())
        })
        .unwrap();
        assert!(dense_called);
        let want = largest_dense(&small, 3).unwrap();
        assert_eq!(got.values, want.values);
    }

    #[test]
    fn negative_definite_matrix_has_no_positive_eigenvalues() {
        let a = -DMatrix::<f64>::identity(4, 4) - DMatrix::from_element(4, 4, 0.1);
        assert_eq!(largest_dense(&a, 1).unwrap_err(), Error::NoPositiveEigenvalues);
    }

    #[test]
    fn too_few_positive_eigenvalues_is_an_error() {
        let a = DMatrix::from_diagonal(&DVector::from_vec(vec![3.0, 1.0, -1.0, 0.0]));
        assert_eq!(largest_dense(&a, 3).unwrap_err(), Error::TooFewPositiveEigenvalues { requested: 3, available: 2 });
        let p = largest_dense(&a, 2).unwrap();
        assert_eq!(p.values.as_slice(), &[3.0, 1.0]);
    }
}
