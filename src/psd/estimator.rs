//! The PSD estimators and their baselines as [`crate::estimator`] traits. The densities (PSD and baselines): `Fit<DMatrix<f64>>`
//! (samples, one per row) and `Predict<DMatrix<f64>>` (the estimated density
//! `p(x) = f_A(x) nu(x)` of Eq. 12 at new points).

use nalgebra::{DMatrix, DVector};

use super::density::{DensityParams, PsdDensity};
use crate::error::Result;
use crate::estimator::{Fit, Predict};
use crate::Device;

impl Fit<DMatrix<f64>> for DensityParams {
    type Fitted = PsdDensity;
    fn fit(&self, device: &Device, data: &DMatrix<f64>) -> Result<PsdDensity> {
        DensityParams::fit(self, device, data)
    }
}

impl Predict<DMatrix<f64>> for PsdDensity {
    type Output = DVector<f64>;
    /// [`PsdDensity::density`].
    fn predict(&self, x: &DMatrix<f64>) -> Result<DVector<f64>> {
        self.density(x)
    }
}

use super::baselines::{BaselineDensity, BaselineParams};

impl Fit<DMatrix<f64>> for BaselineParams {
    type Fitted = BaselineDensity;
    fn fit(&self, device: &Device, data: &DMatrix<f64>) -> Result<BaselineDensity> {
        BaselineParams::fit(self, device, data)
    }
}

impl Predict<DMatrix<f64>> for BaselineDensity {
    type Output = DVector<f64>;
    /// [`BaselineDensity::density`].
    fn predict(&self, x: &DMatrix<f64>) -> Result<DVector<f64>> {
        self.density(x)
    }
}

use super::baseline_regression::{BaselineHeteroscedastic, BaselineHeteroscedasticParams, BaselineQuantile, BaselineQuantileParams};
use super::heteroscedastic::{HeteroscedasticParams, HeteroscedasticRegression};
use super::regression::{QuantileParams, QuantileRegression};
use crate::estimator::Supervised;

macro_rules! regression_estimator {
    ($params:ty, $fitted:ty) => {
        impl Fit<Supervised> for $params {
            type Fitted = $fitted;
            fn fit(&self, device: &Device, data: &Supervised) -> Result<$fitted> {
                <$params>::fit(self, device, data)
            }
        }
    };
}

regression_estimator!(HeteroscedasticParams, HeteroscedasticRegression);
regression_estimator!(QuantileParams, QuantileRegression);
regression_estimator!(BaselineHeteroscedasticParams, BaselineHeteroscedastic);
regression_estimator!(BaselineQuantileParams, BaselineQuantile);

/// The quantile curves at new inputs: one column per level, in the order of
/// the levels.
impl Predict<DMatrix<f64>> for QuantileRegression {
    type Output = DMatrix<f64>;
    fn predict(&self, x: &DMatrix<f64>) -> Result<DMatrix<f64>> {
        QuantileRegression::predict(self, x)
    }
}

/// The quantile curves at new inputs (one column per level).
impl Predict<DMatrix<f64>> for BaselineQuantile {
    type Output = DMatrix<f64>;
    fn predict(&self, x: &DMatrix<f64>) -> Result<DMatrix<f64>> {
        BaselineQuantile::predict(self, x)
    }
}

/// The conditional mean and variance `(m(x), v(x))` at new inputs.
impl Predict<DMatrix<f64>> for HeteroscedasticRegression {
    type Output = (DVector<f64>, DVector<f64>);
    fn predict(&self, x: &DMatrix<f64>) -> Result<(DVector<f64>, DVector<f64>)> {
        Ok((self.predict_mean(x)?, self.predict_variance(x)?))
    }
}

/// The conditional mean and variance `(m(x), v(x))` at new inputs.
impl Predict<DMatrix<f64>> for BaselineHeteroscedastic {
    type Output = (DVector<f64>, DVector<f64>);
    fn predict(&self, x: &DMatrix<f64>) -> Result<(DVector<f64>, DVector<f64>)> {
        Ok((self.predict_mean(x)?, self.predict_variance(x)?))
    }
}
