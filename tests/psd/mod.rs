//! PSD models: the dual engine, the positive part, density, heteroscedastic and quantile regression, the baselines.

mod baselines;
mod baselines_regression;
mod density;
mod engine;
mod heteroscedastic;
mod positive_part;
mod quantile;
