//! PSD models: the dual engine, the positive part (eigendecomposition and polar routes), density, heteroscedastic and quantile regression, the baselines.

mod baselines;
mod baselines_regression;
mod density;
mod engine;
mod heteroscedastic;
mod polar;
mod positive_part;
mod quantile;
