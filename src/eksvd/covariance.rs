//! Covariance eKSVD (Theorem 3.2): `C_Q w = lambda w` (Eq. 8) with
//! `C_qq = Phi_q^T Phi_q`, solved through an equivalent symmetric problem.
//!
//! `C_Q = A D` with `A = (1 1^T - I) (x) I_{d_phi}` symmetric and
//! `D = blockdiag(C_11, ..., C_QQ)` positive semi-definite, so `C_Q` is not
//! symmetric but is similar on its range to `H = D^{1/2} A D^{1/2}`, whose
//! blocks are `H_qp = C_qq^{1/2} C_pp^{1/2}` (`p != q`) and `H_qq = 0`:
//! if `H u = lambda u` then `C_Q (A D^{1/2} u) = lambda (A D^{1/2} u)`. The
//! spectrum is real and no general (complex) eigensolver is needed; `H` has
//! order `Q d_phi` and the same nonzero eigenvalues as `G_Q` of Eq. 4.

use nalgebra::{DMatrix, DVector};

use super::eigensolver::{largest_dense, largest_lanczos, Eigensolver};
use super::error::{check_shape, check_source_matrix, EksvdError, Result};
use crate::linalg::{matmul, symmetric_eigen};
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
    check_features(features)?;
    if !device.is_gpu() {
        return features.iter().map(|phi| Ok(device.gram(phi)?)).collect();
    }
    let precision = device.best_precision();
    features
        .iter()
        .map(|phi| {
            let resident = device.upload(phi, precision)?;
            let c = device.to_host(&device.resident_matmul(&resident, &resident, MatrixProduct::AtB)?)?;
            Ok((&c + c.transpose()) * 0.5)
        })
        .collect()
}

/// The nonsymmetric matrix `C_Q` of Eq. 8 (block `(q, p)` is `C_pp` for
/// `p != q`, zero on the diagonal), for checks and small problems.
pub fn covariance_matrix(covariances: &[DMatrix<f64>]) -> Result<DMatrix<f64>> {
    let n = covariances.len();
    if n < 2 {
        return Err(EksvdError::TooFewSources(n));
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
        return Err(EksvdError::TooFewSources(features.len()));
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

/// Solves Eq. 8 for the `n_components` largest positive eigenvalues, from the
/// features `Phi_q` (`N_q x d_phi`): Gram matrices on `device`, then the
/// symmetric problem `H u = lambda u` of order `Q d_phi` with `solver`, then
/// `w_q = (1/(Q-1)) sum_{p != q} C_pp^{1/2} u_p` (that is `A D^{1/2} u`,
/// scaled as documented on [`CovarianceSolution`]).
pub fn solve_covariance(device: &Device, features: &[DMatrix<f64>], n_components: usize, solver: &Eigensolver, seed: u64) -> Result<CovarianceSolution> {
    solver.validate()?;
    let cov = covariances(device, features)?;
    let roots: Vec<DMatrix<f64>> = cov.iter().map(psd_sqrt).collect::<Result<_>>()?;
    let n = roots.len();
    let d = roots[0].nrows();
    let mut h = DMatrix::zeros(n * d, n * d);
    for q in 0..n {
        for p in (q + 1)..n {
            let block = matmul(&roots[q], &roots[p]);
            h.view_mut((q * d, p * d), (d, d)).copy_from(&block);
            h.view_mut((p * d, q * d), (d, d)).copy_from(&block.transpose());
        }
    }
    let pairs = match *solver {
        Eigensolver::Dense => largest_dense(&h, n_components)?,
        Eigensolver::Lanczos { tolerance, max_restarts } => largest_lanczos(n * d, n_components, |v| Ok(matmul(&h, v)), tolerance, max_restarts, seed)?,
    };
    let k = pairs.values.len();
    // D^{1/2} u per source, then w_q = (1/(Q-1)) sum_{p != q} (D^{1/2} u)_p.
    let root_u: Vec<DMatrix<f64>> = (0..n).map(|q| matmul(&roots[q], &pairs.vectors.rows(q * d, d).into_owned())).collect();
    let mut total = DMatrix::zeros(d, k);
    for r in &root_u {
        total += r;
    }
    let scale = 1.0 / (n as f64 - 1.0);
    let weights = root_u.iter().map(|r| (&total - r) * scale).collect();
    Ok(CovarianceSolution { eigenvalues: pairs.values, weights })
}
