//! Covariance eKSVD (Theorem 3.2): `C_Q w = lambda w` (Eq. 8) with
//! `C_qq = Phi_q^T Phi_q`, solved through an equivalent symmetric problem.
//!
//! `C_Q = A D` with `A = (1 1^T - I) (x) I_{d_phi}` symmetric and
//! `D = blockdiag(C_11, ..., C_QQ)` positive semi-definite, so `C_Q` is not
//! symmetric but is similar on its range to `H = F A F^T` for any factor
//! `D = F^T F` (`F = blockdiag(F_q)`, `C_qq = F_q^T F_q`: the transposed
//! Cholesky factor, or `C_qq^{1/2}` when `C_qq` is singular), whose blocks
//! are `H_qp = F_q F_p^T` (`p != q`) and `H_qq = 0`: if `H u = lambda u`
//! then `C_Q (A F^T u) = lambda (A F^T u)`. The
//! spectrum is real and no general (complex) eigensolver is needed; `H` has
//! order `Q d_phi` and the same nonzero eigenvalues as `G_Q` of Eq. 4.

use nalgebra::{DMatrix, DVector};

use super::eigensolver::{largest_dense, largest_lanczos, Eigensolver};
use crate::data::{check_shape, check_source_matrix};
use crate::error::Result;
use crate::error::Error;
use crate::linalg::{matmul_thin, matmul_tn, symmetric_eigen};
use crate::precision::Precision;
use crate::Device;
use crate::MatrixProduct;

/// The retained solutions of Eq. 8: eigenvalues `lambda_k` (descending,
/// positive) and primal weights `w_q` per source, scaled so that the dual
/// variables they imply through Eq. 5, `alpha^(q) = (Q-1) gamma Phi_q w_q`,
/// stack to a unit vector (the normalisation of [`super::dual::DualSolution`]).
#[derive(Debug, Clone)]
pub struct CovarianceSolution {
    /// `lambda_k = 1 / gamma_k`, descending.
    pub eigenvalues: DVector<f64>,
    /// `w_q`, `d_phi x k` for each source `q`.
    pub weights: Vec<DMatrix<f64>>,
}

/// `C_qq = Phi_q^T Phi_q` for every source (Gram matrices on `device`: on a
/// GPU each `Phi_q` goes up once, in `f64` where the adapter has it, and only
/// the `d_phi x d_phi` Gram comes back).
pub fn covariances(device: &Device, features: &[DMatrix<f64>]) -> Result<Vec<DMatrix<f64>>> {
    covariances_in(device, device.best_precision(), features)
}

/// [`covariances`] with each `Phi_q` held and multiplied in `precision` on a
/// GPU (a fit's [`Device::working_precision`]).
fn covariances_in(device: &Device, precision: Precision, features: &[DMatrix<f64>]) -> Result<Vec<DMatrix<f64>>> {
    check_features(features)?;
    features.iter().map(|phi| covariance_of(device, precision, phi)).collect()
}

/// `Phi^T Phi` of one feature matrix on `device`, in `precision` on a GPU
/// (see [`covariances`]).
pub(crate) fn covariance_of(device: &Device, precision: Precision, phi: &DMatrix<f64>) -> Result<DMatrix<f64>> {
    if !device.is_gpu() {
        return device.gram(phi);
    }
    let resident = device.upload(phi, precision)?;
    let c = device.to_host(&device.resident_matmul(&resident, &resident, MatrixProduct::AtB)?)?;
    Ok((&c + c.transpose()) * 0.5)
}

/// The nonsymmetric matrix `C_Q` of Eq. 8 (block `(q, p)` is `C_pp` for
/// `p != q`, zero on the diagonal), for checks and small problems.
pub fn covariance_matrix(covariances: &[DMatrix<f64>]) -> Result<DMatrix<f64>> {
    let n = covariances.len();
    if n < 2 {
        return Err(Error::TooFewSources(n));
    }
    let d = covariances[0].nrows();
    for (q, c) in covariances.iter().enumerate() {
        check_shape(format!("rows of C_{q}{q}"), d, c.nrows())?;
        check_shape(format!("columns of C_{q}{q}"), d, c.ncols())?;
    }
    let mut out = DMatrix::zeros(n * d, n * d);
    for q in 0..n {
        for (p, c) in covariances.iter().enumerate() {
            if p != q {
                out.view_mut((q * d, p * d), (d, d)).copy_from(c);
            }
        }
    }
    Ok(out)
}

fn check_features(features: &[DMatrix<f64>]) -> Result<()> {
    if features.len() < 2 {
        return Err(Error::TooFewSources(features.len()));
    }
    for (q, phi) in features.iter().enumerate() {
        check_source_matrix("features", q, phi)?;
        check_shape(format!("feature dimension of source {q} vs source 0"), features[0].ncols(), phi.ncols())?;
    }
    Ok(())
}

/// Symmetric square root `C^{1/2} = V diag(sqrt(max(s, 0))) V^T` of a PSD
/// matrix (tiny negative eigenvalues from rounding are clamped).
fn psd_sqrt(c: &DMatrix<f64>) -> Result<DMatrix<f64>> {
    let evd = symmetric_eigen(c)?;
    let mut scaled = evd.eigenvectors.clone();
    for (j, mut col) in scaled.column_iter_mut().enumerate() {
        col *= evd.eigenvalues[j].max(0.0).sqrt();
    }
    Ok(crate::linalg::matmul_nt(&scaled, &evd.eigenvectors))
}

/// A factor `F` of the PSD covariance `C = F^T F`: the transposed Cholesky
/// factor `F = L^T` (`C = L L^T`) when the factorisation succeeds, which it
/// does for every numerically positive definite `C` (`N_q >= d_phi` and
/// features in general position), otherwise the symmetric square root
/// `C^{1/2}` ([`psd_sqrt`], for rank-deficient `C`). Any such factor serves
/// [`solve_covariance`]: with `F = blockdiag(F_q)`, `D = F^T F`, and the
/// symmetric `H = F A F^T` (blocks `F_q F_p^T`) has the nonzero spectrum of
/// `C_Q = A D`, with `C_Q (A F^T u) = lambda (A F^T u)` when
/// `H u = lambda u`. Cholesky costs `d^3 / 3` multiply-adds against a full
/// eigendecomposition for the square root.
fn covariance_factor(c: &DMatrix<f64>) -> Result<DMatrix<f64>> {
    let d = c.nrows();
    if let Ok(llt) = crate::linalg::faer_ref(c).llt(faer::Side::Lower) {
        let l = llt.L();
        let f = DMatrix::from_fn(d, d, |i, j| if i <= j { l[(j, i)] } else { 0.0 });
        crate::linalg::clear_upper_simd_state(true);
        if f.iter().all(|x| x.is_finite()) {
            return Ok(f);
        }
    }
    psd_sqrt(c)
}

/// Solves Eq. 8 for the `n_components` largest positive eigenvalues, from the
/// features `Phi_q` (`N_q x d_phi`): Gram matrices on `device`, then the
/// symmetric problem `H u = lambda u` of order `Q d_phi` with `solver`, then
/// `w_q = (1/(Q-1)) sum_{p != q} F_p^T u_p` (that is `A F^T u`,
/// scaled as documented on [`CovarianceSolution`]).
pub fn solve_covariance(device: &Device, features: &[DMatrix<f64>], n_components: usize, solver: &Eigensolver, seed: u64) -> Result<CovarianceSolution> {
    solve_covariance_in(device, device.best_precision(), features, n_components, solver, seed)
}

/// [`solve_covariance`] with the Gram matrices formed in `precision` on a
/// GPU (a fit's [`Device::working_precision`]).
pub(crate) fn solve_covariance_in(device: &Device, precision: Precision, features: &[DMatrix<f64>], n_components: usize, solver: &Eigensolver, seed: u64) -> Result<CovarianceSolution> {
    solver.validate()?;
    check_features(features)?;
    // The host problem's size before any device work.
    check_problem_size(features.len(), features[0].ncols())?;
    let cov = covariances_in(device, precision, features)?;
    solve_covariance_from_grams(&cov, n_components, solver, seed)
}

/// The stacked problem `H` is `(Q d_phi) x (Q d_phi)`, on the host beside
/// `Q` covariances of `d_phi x d_phi`: [`Error::OutOfMemory`] (host) when
/// that cannot be had.
fn check_problem_size(sources: usize, d_phi: usize) -> Result<()> {
    let order = sources.checked_mul(d_phi).ok_or_else(|| Error::host_memory("the covariance problem's order overflows"))?;
    crate::memory::check_host_matrix::<f64>(order, order, "covariance eigenproblem")
}

/// [`solve_covariance`] from the Gram matrices `C_qq = Phi_q^T Phi_q`
/// (`d_phi x d_phi` each, at least two): everything after the one pass
/// over the rows.
pub(crate) fn solve_covariance_from_grams(cov: &[DMatrix<f64>], n_components: usize, solver: &Eigensolver, seed: u64) -> Result<CovarianceSolution> {
    solver.validate()?;
    if cov.len() < 2 {
        return Err(Error::TooFewSources(cov.len()));
    }
    check_problem_size(cov.len(), cov[0].ncols())?;
    let factors: Vec<DMatrix<f64>> = cov.iter().map(covariance_factor).collect::<Result<_>>()?;
    let n = factors.len();
    let d = factors[0].nrows();
    // H: block (p, q) = F_p F_q^T for p != q, zero diagonal blocks. The
    // dense solver reads only the lower triangle, so only the blocks below
    // the diagonal are formed (in place); Lanczos multiplies by all of H.
    let mut h = DMatrix::zeros(n * d, n * d);
    for q in 0..n {
        for p in (q + 1)..n {
            let lower = crate::linalg::faer_mut(&mut h).submatrix_mut(p * d, q * d, d, d);
            <f64 as crate::linalg::Real>::faer_matmul(lower, false, crate::linalg::faer_ref(&factors[p]), crate::linalg::faer_ref(&factors[q]).transpose());
            if !matches!(solver, Eigensolver::Dense) {
                let block = h.view((p * d, q * d), (d, d)).transpose();
                h.view_mut((q * d, p * d), (d, d)).copy_from(&block);
            }
        }
    }
    crate::linalg::clear_upper_simd_state(true);
    let pairs = match *solver {
        Eigensolver::Dense => largest_dense(&h, n_components)?,
        Eigensolver::Lanczos { tolerance, max_restarts } => largest_lanczos(n * d, n_components, |v| Ok(matmul_thin(&h, v)), tolerance, max_restarts, seed)?,
    };
    let k = pairs.values.len();
    // F^T u per source, then w_q = (1/(Q-1)) sum_{p != q} (F^T u)_p.
    let root_u: Vec<DMatrix<f64>> = (0..n).map(|q| matmul_tn(&factors[q], &pairs.vectors.rows(q * d, d).into_owned())).collect();
    let mut total = DMatrix::zeros(d, k);
    for r in &root_u {
        total += r;
    }
    let scale = 1.0 / (n as f64 - 1.0);
    let weights = root_u.iter().map(|r| (&total - r) * scale).collect();
    Ok(CovarianceSolution { eigenvalues: pairs.values, weights })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};
    use rand_distr::{Distribution, StandardNormal};

    fn gram(rows: usize, d: usize, seed: u64) -> DMatrix<f64> {
        let mut rng = StdRng::seed_from_u64(seed);
        let phi = DMatrix::<f64>::from_fn(rows, d, |_, _| StandardNormal.sample(&mut rng));
        phi.transpose() * phi
    }

    #[test]
    fn covariance_factor_reproduces_definite_and_singular_covariances() {
        // Positive definite (rows > d): the Cholesky factor, upper triangular.
        let c = gram(40, 17, 1);
        let f = covariance_factor(&c).unwrap();
        assert!((0..17).all(|j| (j + 1..17).all(|i| f[(i, j)] == 0.0)), "Cholesky factor not upper triangular");
        let err = (f.transpose() * &f - &c).norm() / c.norm();
        assert!(err < 1e-13, "F^T F vs C: {err}");
        // Rank 5 of order 17 (rows < d), and the zero matrix.
        for c in [gram(5, 17, 2), DMatrix::zeros(6, 6)] {
            let f = covariance_factor(&c).unwrap();
            let err = (f.transpose() * &f - &c).norm() / c.norm().max(1.0);
            assert!(err < 1e-12 && f.iter().all(|x| x.is_finite()), "F^T F vs singular C: {err}");
        }
    }
}
