//! eKSVD: kernel singular value decomposition extended to `Q >= 2` data
//! sources (Tao et al., "Kernel Singular Value Decomposition with Extension
//! to Multiple Data Sources"; equation numbers are the paper's).
//!
//! Source `q` has samples `x_i^(q)` (rows of an `N_q x d_q` matrix) and a
//! feature map `phi_q : R^{d_q} -> R^{d_phi}`. The primal problem (Eq. 3)
//! learns one projection `w_q` per source, scores `e_i^(q) = w_q^T phi_q(x_i^(q))`,
//! coupled across sources. Its KKT conditions (Eq. 5) lead to
//!
//! * the **dual** eigenvalue problem `G_Q alpha = lambda alpha` (Eq. 4,
//!   [`dual`]) on the symmetric block matrix of cross-source kernels
//!   `K_pq = Phi_p Phi_q^T` with zero diagonal blocks ([`coupling`]);
//! * the **covariance** problem `C_Q w = lambda w` (Eq. 8, [`covariance`])
//!   with `C_qq = Phi_q^T Phi_q`;
//!
//! both with `lambda = 1/gamma`, keeping the largest positive eigenvalues.
//! With two sources this is KSVD (Eq. 2), whose solutions are the singular
//! triplets of `K_12` (Theorem 2.1).
//!
//! ```
//! use gramian::eksvd::{EksvdParams, FeatureMap, Solver, Eigensolver};
//! use gramian::MultiSource;
//! use gramian::Device;
//! use nalgebra::DMatrix;
//!
//! let view = |s: f64| DMatrix::from_fn(40, 3, |i, j| ((i * 3 + j) as f64 * s).sin());
//! let data = MultiSource::paired(vec![view(0.1), view(0.2), view(0.3)])?;
//! let model = EksvdParams::new(2)
//!     .feature_map(FeatureMap::random_fourier(0.5, 16)?)
//!     .solver(Solver::Covariance(Eigensolver::Dense))
//!     .fit(&Device::cpu(), &data)?;
//! let scores = model.transform_paired(&data)?; // 40 x (3 * 2), on the device of the fit
//! assert_eq!(scores.shape(), (40, 6));
//! assert!(model.objective(0)?.relative_value() < 1e-8); // Lemma 3.3
//! # Ok::<(), gramian::Error>(())
//! ```

pub mod coupling;
pub mod covariance;
pub mod dual;
pub mod eigensolver;
pub mod features;
mod krylov;
pub mod model;
#[cfg(feature = "neural")]
pub mod neural;
pub mod objective;
pub mod sharded;

pub use coupling::CouplingMatrix;
pub use covariance::{solve_covariance, CovarianceSolution};
pub use dual::{solve_dual, DualSolution};
pub use eigensolver::{Eigensolver, LargestEigenpairs, ProductCost};
pub use features::{FeatureMap, FittedFeatureMap};
pub use model::{ksvd_from_kernel, Eksvd, EksvdParams, Ksvd, KsvdParams, Solver};
pub use sharded::{solve_dual_sharded, ShardedSources};

/// Former name of [`Eksvd`], the fitted eKSVD model.
pub type FittedEksvd = Eksvd;
/// Former name of [`Ksvd`], the fitted KSVD model.
pub type FittedKsvd = Ksvd;

mod estimator;
pub use objective::{kkt_residuals, objective_terms, KktResiduals, ObjectiveTerms};
