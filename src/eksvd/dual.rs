//! Dual eKSVD (Theorem 3.1): the eigenvalue problem `G_Q alpha = lambda alpha`
//! of Eq. 4, `lambda = 1/gamma`, keeping the largest positive eigenvalues.

use nalgebra::{DMatrix, DVector};

use super::coupling::CouplingMatrix;
use faer::{MatMut, MatRef};

use super::eigensolver::{largest_lanczos_for, largest_lanczos_resident, largest_stored, on_views, Eigensolver};
use crate::data::{check_shape, check_source_matrix};
use crate::error::Result;
use crate::error::Error;
use crate::linalg::{matmul, matmul_acc, matmul_tn};
use crate::precision::Precision;
use crate::Device;

/// The retained solutions of Eq. 4: eigenvalues `lambda_k` (descending,
/// positive) and dual variables `alpha^(q)` per source, the stacked vector
/// `[alpha^(1); ...; alpha^(Q)]` of each component having unit norm.
#[derive(Debug, Clone)]
pub struct DualSolution {
    /// `lambda_k = 1 / gamma_k`, descending.
    pub eigenvalues: DVector<f64>,
    /// `alpha^(q)`, `N_q x k` for each source `q`.
    pub alphas: Vec<DMatrix<f64>>,
}

/// Solves Eq. 4 for the `n_components` largest positive eigenvalues of
/// `G_Q`. [`Eigensolver::Dense`] on features with `Q d_phi < N` solves the
/// symmetric problem of order `Q d_phi` that has the nonzero spectrum of
/// `G_Q` (Theorem 3.2, [`super::covariance::solve_covariance`]) and maps its
/// solutions back through Eq. 5 ([`dual_from_covariance`]); otherwise it
/// multiplies `G_Q` through the features when that is cheaper, or stores
/// `G_Q` as its upper blocks, built on `device` (the dense matrix only if
/// the block solver gives up);
/// [`Eigensolver::Lanczos`] only applies it (`G_Q` is never stored when it
/// comes from features or a kernel function). `seed` fixes the Lanczos start.
pub fn solve_dual(device: &Device, coupling: &CouplingMatrix, n_components: usize, solver: &Eigensolver, seed: u64) -> Result<DualSolution> {
    solve_dual_in(device, device.best_precision(), coupling, n_components, solver, seed)
}

/// [`solve_dual`] with the resident features, inputs and products (the
/// covariance form's Gram matrices, the Lanczos products) in `precision` on
/// a GPU (a fit's [`Device::working_precision`]).
pub(crate) fn solve_dual_in(device: &Device, precision: Precision, coupling: &CouplingMatrix, n_components: usize, solver: &Eigensolver, seed: u64) -> Result<DualSolution> {
    solver.validate()?;
    let pairs = match *solver {
        Eigensolver::Dense if coupling.covariance_form_order().is_some_and(|order| n_components <= order) => {
            // Q d_phi < N: G_Q = B M B^T with B = blockdiag(Phi_q) has rank at
            // most Q d_phi, and its nonzero eigenpairs are exactly those of
            // the covariance form, a dense problem of order Q d_phi. (More
            // components than Q d_phi: the paths below, which say how many
            // are positive.)
            let features = coupling.features().ok_or(Error::NotAvailable("features of the coupling matrix"))?;
            let covariance = super::covariance::solve_covariance_in(device, precision, features, n_components, &Eigensolver::Dense, seed)?;
            return Ok(with_eigenvector_signs(dual_from_covariance(features, &covariance)?));
        }
        Eigensolver::Dense if coupling.factored_product_is_cheaper() => {
            // Features of rank d_phi below the cross-source sizes: the same
            // block solver at the same tolerance, but each product through
            // the features ((G V)_q = Phi_q (s - Phi_q^T V_q)), fewer
            // operations than the stored blocks and nothing of order N^2
            // in memory; the dense matrix only if the block solver gives up.
            let frobenius = coupling.frobenius_norm_from_features().ok_or(Error::NotAvailable("features of the coupling matrix"))?;
            if !frobenius.is_finite() {
                return Err(Error::Overflow { what: "Frobenius norm of the coupling matrix", row: 0, col: 0 });
            }
            let apply = on_views(|v| coupling.apply(&Device::Cpu, v));
            largest_stored(coupling.order(), n_components, apply, frobenius, || coupling.assemble(device))?
        }
        Eigensolver::Dense => {
            // G_Q stored as its upper blocks (a third of the dense matrix for
            // three sources: the diagonal blocks are zero, the lower ones
            // transposes), multiplied block by block; the dense matrix only
            // if the block solver gives up.
            let upper = coupling.upper_blocks(device)?;
            for (p, _, k) in &upper {
                check_source_matrix("coupling block", *p, k)?;
            }
            let frobenius = (2.0 * upper.iter().map(|(_, _, k)| k.norm_squared()).sum::<f64>()).sqrt();
            let apply = |v: MatRef<'_, f64>, out: MatMut<'_, f64>| -> Result<()> {
                coupling.apply_upper_blocks(&upper, v, out);
                Ok(())
            };
            largest_stored(coupling.order(), n_components, apply, frobenius, || coupling.assemble_from_upper(&upper))?
        }
        Eigensolver::Lanczos { tolerance, max_restarts } => {
            // Sources (or features) go to the device once for the whole solve.
            let resident = coupling.on_device_in(device, precision)?;
            if resident.products_resident() && resident.precision() == Precision::F64 {
                // A kernel function's products on a GPU in f64: the Krylov
                // basis stays there too.
                largest_lanczos_resident(device, coupling.order(), n_components, &resident, tolerance, max_restarts, seed, coupling.product_cost())?
            } else {
                largest_lanczos_for(coupling.order(), n_components, |v| resident.apply(v), tolerance, max_restarts, seed, coupling.product_cost())?
            }
        }
    };
    let alphas = (0..coupling.n_sources())
        .map(|q| pairs.vectors.rows(coupling.offset(q), coupling.sizes()[q]).into_owned())
        .collect();
    Ok(DualSolution { eigenvalues: pairs.values, alphas })
}

/// `solution` with the sign convention of the eigensolvers: in each
/// stacked `alpha` the entry of largest magnitude is positive.
pub(crate) fn with_eigenvector_signs(mut solution: DualSolution) -> DualSolution {
    for j in 0..solution.n_components() {
        let stacked: Vec<f64> = solution.alphas.iter().flat_map(|a| &a.as_slice()[j * a.nrows()..(j + 1) * a.nrows()]).copied().collect();
        if crate::linalg::sign_of_largest(&stacked) < 0.0 {
            for a in &mut solution.alphas {
                a.column_mut(j).neg_mut();
            }
        }
    }
    solution
}

/// The dual variables of Eq. 5 from a covariance solution on the same
/// features: `alpha^(q) = (Q-1) gamma_k Phi_q w_q` with `gamma_k = 1 /
/// lambda_k`. [`super::covariance::CovarianceSolution`] scales `w` so that
/// the stacked `alpha` of each component has unit norm, and
/// `G_Q alpha = lambda alpha` holds for each pair (Theorem 3.2: the two
/// problems share their nonzero spectrum).
pub fn dual_from_covariance(features: &[DMatrix<f64>], covariance: &super::covariance::CovarianceSolution) -> Result<DualSolution> {
    check_shape("sources of the covariance solution vs the features", features.len(), covariance.weights.len())?;
    let scale = features.len() as f64 - 1.0;
    let alphas = features
        .iter()
        .zip(&covariance.weights)
        .enumerate()
        .map(|(q, (phi, w))| {
            check_shape(format!("rows of w_{q} vs the feature dimension"), phi.ncols(), w.nrows())?;
            check_shape(format!("components of w_{q}"), covariance.eigenvalues.len(), w.ncols())?;
            let mut alpha = matmul(phi, w);
            for (j, mut col) in alpha.column_iter_mut().enumerate() {
                col *= scale / covariance.eigenvalues[j];
            }
            crate::linalg::finite_result("dual variables from the covariance solution", alpha)
        })
        .collect::<Result<_>>()?;
    Ok(DualSolution { eigenvalues: covariance.eigenvalues.clone(), alphas })
}

impl DualSolution {
    /// Number of retained components `k`.
    pub fn n_components(&self) -> usize {
        self.eigenvalues.len()
    }

    /// Regularisation constants `gamma_k = 1 / lambda_k`.
    pub fn gammas(&self) -> DVector<f64> {
        self.eigenvalues.map(|l| 1.0 / l)
    }

    /// Training projection scores in the dual form of Eq. 7,
    /// `e^(q) = (1/(Q-1)) sum_{p != q} K_qp alpha^(p)` (`N_q x k` per source),
    /// computed with one product `G_Q alpha` (never stored).
    pub fn training_scores(&self, device: &Device, coupling: &CouplingMatrix) -> Result<Vec<DMatrix<f64>>> {
        let n = coupling.n_sources();
        check_shape("sources of the coupling matrix vs the solution", self.alphas.len(), n)?;
        let mut stacked = DMatrix::zeros(coupling.order(), self.n_components());
        for q in 0..n {
            check_shape(format!("rows of alpha^({q}) vs N_{q}"), coupling.sizes()[q], self.alphas[q].nrows())?;
            stacked.rows_mut(coupling.offset(q), coupling.sizes()[q]).copy_from(&self.alphas[q]);
        }
        let g_alpha = coupling.apply(device, &stacked)?;
        let scale = 1.0 / (n as f64 - 1.0);
        Ok((0..n).map(|q| g_alpha.rows(coupling.offset(q), coupling.sizes()[q]) * scale).collect())
    }

    /// Out-of-sample scores of new samples of source `q` in the dual form of
    /// Eq. 7: `e^(q)(x) = (1/(Q-1)) sum_{p != q} K(x, X_p) alpha^(p)`.
    /// `cross_kernels[p]` is the `n_new x N_p` kernel block between the new
    /// samples and the training samples of source `p` (`None` at `p = q`);
    /// no block is assumed square or symmetric, and every block must have
    /// the same `n_new` rows.
    pub fn project(&self, q: usize, cross_kernels: &[Option<&DMatrix<f64>>]) -> Result<DMatrix<f64>> {
        let n = self.alphas.len();
        check_shape("number of cross-kernel blocks vs sources", n, cross_kernels.len())?;
        if q >= n {
            return Err(Error::InvalidParameter { name: "q", reason: format!("source {q} of {n}") });
        }
        let mut rows = None;
        let mut out: Option<DMatrix<f64>> = None;
        for (p, block) in cross_kernels.iter().enumerate() {
            match (p == q, block) {
                (true, None) => {}
                (true, Some(_)) => return Err(Error::InvalidParameter { name: "cross_kernels", reason: format!("block {q} must be None (no K_qq in Eq. 7)") }),
                (false, None) => return Err(Error::InvalidParameter { name: "cross_kernels", reason: format!("block {p} is missing") }),
                (false, Some(k)) => {
                    check_source_matrix("cross-kernel block", p, k)?;
                    check_shape(format!("columns of K(x, X_{p}) vs N_{p}"), self.alphas[p].nrows(), k.ncols())?;
                    let r = *rows.get_or_insert(k.nrows());
                    check_shape(format!("rows of K(x, X_{p}) vs the other blocks"), r, k.nrows())?;
                    match out.as_mut() {
                        None => out = Some(matmul(k, &self.alphas[p])),
                        Some(o) => matmul_acc(o, k, &self.alphas[p]),
                    }
                }
            }
        }
        let out = out.expect("Q >= 2 leaves at least one block");
        Ok(out / (n as f64 - 1.0))
    }

    /// Primal weights from the dual variables through the KKT conditions
    /// (Eq. 5): `sum_{p != q} w_p - (Q-2) w_q = Phi_q^T alpha^(q)` inverts to
    /// `w_q = (1/(Q-1)) sum_{p != q} Phi_p^T alpha^(p)` (`d_phi x k` per source).
    pub fn primal_weights(&self, features: &[DMatrix<f64>]) -> Result<Vec<DMatrix<f64>>> {
        let n = self.alphas.len();
        check_shape("number of feature matrices vs sources", n, features.len())?;
        let mut projected = Vec::with_capacity(n);
        for (q, phi) in features.iter().enumerate() {
            check_source_matrix("features", q, phi)?;
            check_shape(format!("rows of Phi_{q} vs N_{q}"), self.alphas[q].nrows(), phi.nrows())?;
            check_shape(format!("feature dimension of source {q} vs source 0"), features[0].ncols(), phi.ncols())?;
            projected.push(matmul_tn(phi, &self.alphas[q]));
        }
        let mut total = projected[0].clone();
        for y in &projected[1..] {
            total += y;
        }
        let scale = 1.0 / (n as f64 - 1.0);
        Ok(projected.iter().map(|y| (&total - y) * scale).collect())
    }
}
