//! PSD models for non-negative functions (Marteau-Ferey, Bach & Rudi,
//! "Non-parametric Models for Non-negative Functions", NeurIPS 2020).
//!
//! The model (Theorem 1, Eq. 7) is
//!
//! `f(x) = sum_ij B_ij k(x, z_i) k(x, z_j)`, with `B` positive semi-definite,
//!
//! for a Gaussian kernel `k(x, z) = exp(-||x - z||^2 / (2 sigma^2))` and
//! centres `z_1..z_m` (the training points, or a Nystrom subset of them).
//! `f >= 0` everywhere because `B` is PSD (Proposition 1), the training
//! problem stays convex (Proposition 2), and integrals against the Lebesgue
//! measure or a Gaussian base measure are closed-form (Proposition 4).
//!
//! Training solves the **dual** (Theorem 2, Eq. 10) of
//! `min_{A >= 0} L(f_A(x_1), .., f_A(x_n)) + lambda_1 ||A||_* + lambda_2/2 ||A||_F^2`
//! with FISTA and backtracking ([`dual`]); the duality gap is the stopping rule.
//!
//! | piece | module |
//! |---|---|
//! | empirical feature map, `K = V^T V` with a rank safeguard | [`features`] |
//! | the fitted model: evaluation, gradient, integrals | [`model`] |
//! | Gaussian product integrals, base measures, boxes | [`integrals`] |
//! | losses and the proximal operators of their conjugates | [`loss`] |
//! | FISTA with backtracking | [`fista`] |
//! | certified warm-started positive part `[M]_+` (partial eigensolver) | [`positive_part`] |
//! | `[M]_+` by matrix products alone (polynomial sign iteration), host or device | [`polar`] |
//! | the host `O(n r^2)` products of the engine (blocked, both cores) | [`products`] |
//! | the dual problem (Eq. 10-11) with an optional integral constraint (Eq. 12) | [`dual`] |
//! | one dual engine for all three problems: signed PSD parts, linear part, integral | [`engine`] |
//! | density estimation (Eq. 12) | [`density`] |
//! | baselines of Appendix D (PNM, NCM, GLM) for density estimation | [`baselines`] |
//! | the same baselines for heteroscedastic and multiple quantile regression | [`baseline_regression`] |
//! | projected damped Newton method (baselines) | `newton` |
//! | regularisation weights and solver options shared by every estimator | [`options`] |
//! | multiple quantile regression with non-crossing curves | [`regression`] |
//! | heteroscedastic Gaussian regression (natural parameters) | [`heteroscedastic`] |
//! | fits on samples sharded over ranks ([`crate::distributed::FitSharded`]) | `sharded` |
//!
//! Regulariser convention: the paper writes `lambda_2 ||A||_F^2` in Eq. 6 but
//! `lambda_2/2 ||A||_F^2` in Lemma 5 and Eq. 10-11; this module uses
//! `lambda_1 ||A||_* + lambda_2/2 ||A||_F^2` throughout, so Eq. 10-11 hold as printed.

pub mod baseline_regression;
pub mod baselines;
pub mod density;
pub mod dual;
pub mod engine;
pub mod features;
pub mod fista;
pub mod heteroscedastic;
pub mod integrals;
pub mod loss;
pub mod model;
mod newton;
pub mod options;
pub mod polar;
pub mod positive_part;
pub mod products;
pub mod regression;
mod sharded;

mod error;

pub use density::{DensityParams, PsdDensity};
pub use dual::DualSolution;
pub use features::{EmpiricalFeatures, Factorisation, Features};
pub use baseline_regression::{BaselineHeteroscedastic, BaselineHeteroscedasticParams, BaselineQuantile, BaselineQuantileParams};
pub use baselines::{BaselineDensity, BaselineKind, BaselineParams};
pub use heteroscedastic::{HeteroscedasticParams, HeteroscedasticRegression};
pub use integrals::BaseMeasure;
pub use model::PsdModel;
pub use positive_part::PositivePartRoute;
pub use options::{PsdSettings, Regularisation, SolverOptions, SolverReport};
pub use regression::{QuantileParams, QuantileRegression};

mod estimator;
