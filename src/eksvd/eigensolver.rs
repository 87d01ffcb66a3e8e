//! Largest eigenpairs of symmetric matrices: a dense path (faer's
//! divide-and-conquer solver) and a thick-restart Lanczos (Krylov-Schur)
//! solver that only needs products `A V`, so `A` need not be stored.
//!
//! eKSVD retains the eigenpairs with the largest **positive** eigenvalues
//! (`lambda = 1/gamma > 0`); both paths return them in descending order and
//! fail with a typed error when fewer than asked for are positive.

use faer::{Accum, MatMut, MatRef, Par};
use nalgebra::{DMatrix, DVector};
use rand::{rngs::StdRng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

use super::error::{check_shape, EksvdError, Result};
use super::features::sign_of_largest;
use crate::linalg::{clear_upper_simd_state, matmul, symmetric_eigen, symmetric_eigen_largest};

/// Eigenvalues at or below this fraction of the largest magnitude count as
/// zero, not positive (rounding in a rank-deficient coupling matrix).
pub const POSITIVE_EIGENVALUE_TOLERANCE: f64 = 1e-10;

/// Which symmetric eigensolver finds the retained eigenpairs.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Eigensolver {
    /// Full dense decomposition (faer, divide and conquer), then the largest
    /// `k`: exact, O(n^3), needs the matrix stored.
    Dense,
    /// Thick-restart Lanczos (Krylov-Schur for symmetric matrices) for the
    /// `k` largest algebraic eigenvalues, with full reorthogonalisation:
    /// only products with the matrix are needed.
    Lanczos {
        /// Converged when `||A x - theta x|| <= tolerance * max |theta|`.
        tolerance: f64,
        /// Restarts before giving up with [`EksvdError::EigenNotConverged`].
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
                return Err(EksvdError::InvalidParameter { name: "tolerance", reason: format!("must be in (0, 1), got {tolerance}") });
            }
        }
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
/// columns), checks positivity against `scale` and fixes signs.
fn retain_largest_positive(values: &[f64], vectors: &DMatrix<f64>, order: &[usize], k: usize, scale: f64) -> Result<LargestEigenpairs> {
    let threshold = POSITIVE_EIGENVALUE_TOLERANCE * scale;
    let available = order.iter().take_while(|&&i| values[i] > threshold).count();
    if available == 0 {
        return Err(EksvdError::NoPositiveEigenvalues);
    }
    if available < k {
        return Err(EksvdError::TooFewPositiveEigenvalues { requested: k, available });
    }
    let n = vectors.nrows();
    let mut out = DMatrix::zeros(n, k);
    for (j, &i) in order.iter().take(k).enumerate() {
        let col = vectors.column(i);
        let sign = sign_of_largest(col.as_slice());
        out.column_mut(j).copy_from(&(col * sign));
    }
    Ok(LargestEigenpairs { values: DVector::from_iterator(k, order.iter().take(k).map(|&i| values[i])), vectors: out })
}

fn check_k(k: usize, n: usize) -> Result<()> {
    if n == 0 {
        return Err(EksvdError::InvalidParameter { name: "n", reason: "the operator dimension must be >= 1, got 0".into() });
    }
    if k == 0 || k > n {
        return Err(EksvdError::InvalidParameter { name: "n_components", reason: format!("must be in 1..={n}, got {k}") });
    }
    Ok(())
}

/// The `k` largest positive eigenpairs of the symmetric matrix `a` (only the
/// lower triangle is read) from the dense matrix: block Lanczos on matrix
/// products when `k` is small next to `n`, otherwise (or if that does not
/// converge) the full decomposition ([`crate::linalg::symmetric_eigen_largest`]).
/// Positivity is judged against `max |lambda|` (estimated by the block solver).
pub fn largest_dense(a: &DMatrix<f64>, k: usize) -> Result<LargestEigenpairs> {
    crate::linalg::check_matrix("symmetric matrix", a)?;
    crate::linalg::check_dim("symmetric matrix must be square", a.nrows(), a.ncols())?;
    check_k(k, a.nrows())?;
    let top = symmetric_eigen_largest(a, k)?;
    log::debug!("largest_dense: n = {}, k = {k}, block Lanczos {} ({} restarts)", a.nrows(), top.partial, top.restarts);
    let order: Vec<usize> = (0..k).rev().collect();
    retain_largest_positive(top.eigen.eigenvalues.as_slice(), &top.eigen.eigenvectors, &order, k, top.norm_estimate)
}

/// `h = V^T w` for the first `cols` columns of the column-major `n x *` basis.
fn project(basis: &[f64], n: usize, cols: usize, w: &[f64], h: &mut [f64], par: Par) {
    let v = MatRef::from_column_major_slice(&basis[..n * cols], n, cols);
    let w = MatRef::from_column_major_slice(w, n, 1);
    let h = MatMut::from_column_major_slice_mut(&mut h[..cols], cols, 1);
    faer::linalg::matmul::matmul(h, Accum::Replace, v.transpose(), w, 1.0, par);
    clear_upper_simd_state(par != Par::Seq);
}

/// `w -= V h` for the first `cols` columns of the basis.
fn subtract(basis: &[f64], n: usize, cols: usize, h: &[f64], w: &mut [f64], par: Par) {
    let v = MatRef::from_column_major_slice(&basis[..n * cols], n, cols);
    let h = MatRef::from_column_major_slice(&h[..cols], cols, 1);
    let w = MatMut::from_column_major_slice_mut(w, n, 1);
    faer::linalg::matmul::matmul(w, Accum::Add, v, h, -1.0, par);
    clear_upper_simd_state(par != Par::Seq);
}

fn norm(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

/// The `k` largest positive eigenpairs of a symmetric `n x n` operator given
/// only through `apply(V) = A V` (called with one column at a time), by
/// thick-restart Lanczos:
///
/// 1. extend an orthonormal Krylov basis `V_m` (two passes of classical
///    Gram-Schmidt against all previous vectors) and the projected matrix
///    `T_m = V_m^T A V_m`, so that `A V_m = V_m T_m + f e_m^T`;
/// 2. Ritz pairs `(theta_i, V_m y_i)` from `T_m`; the residual of pair `i` is
///    `||f|| |e_m^T y_i|`;
/// 3. stop when the `k` largest have residuals `<= tolerance * max |theta|`,
///    otherwise restart from the `k + (m - k) / 2` largest Ritz vectors plus
///    `f / ||f||` (then `T` is diagonal plus an arrow row, computed again by
///    projection) and extend.
///
/// `seed` fixes the random start vector. Small problems (`n` not above the
/// basis size) are solved densely from `A I`.
pub fn largest_lanczos<F>(n: usize, k: usize, mut apply: F, tolerance: f64, max_restarts: usize, seed: u64) -> Result<LargestEigenpairs>
where
    F: FnMut(&DMatrix<f64>) -> Result<DMatrix<f64>>,
{
    check_k(k, n)?;
    Eigensolver::Lanczos { tolerance, max_restarts }.validate()?;
    // k <= n, and n x (m + 1) is the basis: check the sizes before allocating.
    let m = k.checked_mul(2).and_then(|d| Some(d.max(k.checked_add(32)?)));
    let basis_len = m.and_then(|m| n.checked_mul(m.checked_add(1)?)).filter(|&len| len <= isize::MAX as usize / std::mem::size_of::<f64>());
    let (Some(m), Some(basis_len)) = (m, basis_len) else {
        return Err(EksvdError::InvalidParameter { name: "n", reason: format!("a Lanczos basis for n = {n}, k = {k} does not fit in memory") });
    };
    if m >= n {
        let a = apply(&DMatrix::identity(n, n))?;
        check_shape("rows of the operator's A I", n, a.nrows())?;
        check_shape("columns of the operator's A I", n, a.ncols())?;
        let sym = (&a + a.transpose()) * 0.5;
        return largest_dense(&sym, k);
    }
    let par = if n * m >= 1 << 16 { Par::rayon(0) } else { Par::Seq };
    let mut rng = StdRng::seed_from_u64(seed);
    // Basis with m + 1 columns, column-major.
    let mut basis = vec![0.0f64; basis_len];
    for v in basis[..n].iter_mut() {
        *v = StandardNormal.sample(&mut rng);
    }
    let start_norm = norm(&basis[..n]);
    basis[..n].iter_mut().for_each(|v| *v /= start_norm);
    let mut t = DMatrix::<f64>::zeros(m, m);
    let mut kept = 0usize;
    let mut h = vec![0.0f64; m + 1];
    let mut h2 = vec![0.0f64; m + 1];
    let mut anorm = 0.0f64;
    let mut restarts = 0usize;
    let mut products = 0usize;
    loop {
        let mut residual_norm = 0.0;
        for j in kept..m {
            let vj = DMatrix::from_column_slice(n, 1, &basis[j * n..(j + 1) * n]);
            let w_mat = apply(&vj)?;
            check_shape("rows of the operator's A v", n, w_mat.nrows())?;
            check_shape("columns of the operator's A v", 1, w_mat.ncols())?;
            let mut w: Vec<f64> = w_mat.as_slice().to_vec();
            if w.iter().any(|x| !x.is_finite()) {
                return Err(EksvdError::InvalidParameter { name: "operator", reason: "produced NaN or infinite values".into() });
            }
            let cols = j + 1;
            products += 1;
            project(&basis, n, cols, &w, &mut h, par);
            subtract(&basis, n, cols, &h, &mut w, par);
            project(&basis, n, cols, &w, &mut h2, par);
            subtract(&basis, n, cols, &h2, &mut w, par);
            for i in 0..cols {
                let v = h[i] + h2[i];
                // Entries of the kept (diagonal) block are set at restart.
                if !(i < kept && j < kept) {
                    t[(i, j)] = v;
                    t[(j, i)] = v;
                }
            }
            anorm = anorm.max(t[(j, j)].abs());
            let beta = norm(&w);
            residual_norm = beta;
            if beta > 1e-300 && beta > 1e-14 * anorm.max(f64::MIN_POSITIVE) {
                for (d, s) in basis[(j + 1) * n..(j + 2) * n].iter_mut().zip(&w) {
                    *d = s / beta;
                }
            } else {
                // Invariant subspace found: continue with a fresh random
                // direction orthogonal to the basis (its coupling is zero).
                residual_norm = 0.0;
                let mut r: Vec<f64> = (0..n).map(|_| StandardNormal.sample(&mut rng)).collect();
                for _ in 0..2 {
                    project(&basis, n, cols, &r, &mut h, par);
                    subtract(&basis, n, cols, &h, &mut r, par);
                }
                let rn = norm(&r);
                for (d, s) in basis[(j + 1) * n..(j + 2) * n].iter_mut().zip(&r) {
                    *d = s / rn;
                }
            }
        }
        let evd = symmetric_eigen(&t)?;
        let theta = evd.eigenvalues.as_slice();
        anorm = anorm.max(theta.iter().fold(0.0f64, |a, v| a.max(v.abs())));
        // Descending order of Ritz values.
        let order: Vec<usize> = (0..m).rev().collect();
        let converged = order
            .iter()
            .take(k)
            .take_while(|&&i| (residual_norm * evd.eigenvectors[(m - 1, i)]).abs() <= tolerance * anorm)
            .count();
        if converged >= k {
            log::debug!("largest_lanczos: n = {n}, k = {k}, basis {m}: {products} products, {restarts} restarts");
            let vm = DMatrix::from_column_slice(n, m, &basis[..n * m]);
            let ritz = matmul(&vm, &evd.eigenvectors);
            return retain_largest_positive(theta, &ritz, &order, k, anorm);
        }
        if restarts >= max_restarts {
            return Err(EksvdError::EigenNotConverged { converged, requested: k, restarts });
        }
        restarts += 1;
        // Thick restart: keep the largest Ritz vectors, then the residual direction.
        let keep = (k + (m - k) / 2).min(m - 1);
        let selected = DMatrix::from_fn(m, keep, |i, j| evd.eigenvectors[(i, order[j])]);
        let vm = DMatrix::from_column_slice(n, m, &basis[..n * m]);
        let new_basis = matmul(&vm, &selected);
        basis[..n * keep].copy_from_slice(new_basis.as_slice());
        basis.copy_within(m * n..(m + 1) * n, keep * n);
        t.fill(0.0);
        for (j, &i) in order.iter().take(keep).enumerate() {
            t[(j, j)] = theta[i];
        }
        kept = keep;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            EksvdError::TooFewPositiveEigenvalues { requested: 4, available: 3 }
        );
    }

    /// A slowly separating spectrum (the wanted 20 in a 1e-3 cluster just
    /// above a geometric tail) takes many restarts: the vectors must stay
    /// orthonormal and match the dense solver (with a single Gram-Schmidt
    /// pass per step this fails).
    #[test]
    fn lanczos_vectors_stay_orthonormal_over_many_restarts() {
        let n = 400;
        let mut rng = StdRng::seed_from_u64(8);
        let g = DMatrix::<f64>::from_fn(n, n, |_, _| StandardNormal.sample(&mut rng));
        let u = g.qr().q();
        let spectrum = DVector::from_fn(n, |i, _| if i < 20 { 1.0 - 1e-3 * i as f64 } else { 0.97 * 0.995f64.powi(i as i32 - 20) });
        let a = &u * DMatrix::from_diagonal(&spectrum) * u.transpose();
        let a = (&a + a.transpose()) * 0.5;
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
    fn negative_definite_matrix_has_no_positive_eigenvalues() {
        let a = -DMatrix::<f64>::identity(4, 4) - DMatrix::from_element(4, 4, 0.1);
        assert_eq!(largest_dense(&a, 1).unwrap_err(), EksvdError::NoPositiveEigenvalues);
    }

    #[test]
    fn too_few_positive_eigenvalues_is_an_error() {
        let a = DMatrix::from_diagonal(&DVector::from_vec(vec![3.0, 1.0, -1.0, 0.0]));
        assert_eq!(largest_dense(&a, 3).unwrap_err(), EksvdError::TooFewPositiveEigenvalues { requested: 3, available: 2 });
        let p = largest_dense(&a, 2).unwrap();
        assert_eq!(p.values.as_slice(), &[3.0, 1.0]);
    }
}
