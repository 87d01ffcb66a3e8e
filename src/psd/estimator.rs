//! The PSD estimators and their baselines as [`crate::estimator`] traits.
//! The densities (PSD and baselines): `Fit<X>` (samples, one per row) and
//! `Predict<X>` (the estimated density `p(x) = f_A(x) nu(x)` of Eq. 12 at
//! new points), for every [`AsMatrix`] input `X` (`DMatrix<f64>`, views,
//! row-major slices, `ndarray` arrays). The regressions: `Fit<Supervised>`
//! and `Predict<X>` for every such `X`.

use nalgebra::{DMatrix, DVector};

use super::density::{DensityParams, PsdDensity};
use crate::error::Result;
use crate::input::AsMatrix;
use crate::estimator::{Fit, Predict};
use crate::Device;

impl<X: AsMatrix<Elem = f64> + ?Sized> Fit<X> for DensityParams {
    type Fitted = PsdDensity;
    fn fit(&self, device: &Device, data: &X) -> Result<PsdDensity> {
        DensityParams::fit(self, device, data)
    }
}

impl<X: AsMatrix<Elem = f64> + ?Sized> Predict<X> for PsdDensity {
    type Output = DVector<f64>;
    /// [`PsdDensity::density`].
    fn predict(&self, x: &X) -> Result<DVector<f64>> {
        self.density(x)
    }
}

use super::baselines::{BaselineDensity, BaselineParams};

impl<X: AsMatrix<Elem = f64> + ?Sized> Fit<X> for BaselineParams {
    type Fitted = BaselineDensity;
    fn fit(&self, device: &Device, data: &X) -> Result<BaselineDensity> {
        BaselineParams::fit(self, device, data)
    }
}

impl<X: AsMatrix<Elem = f64> + ?Sized> Predict<X> for BaselineDensity {
    type Output = DVector<f64>;
    /// [`BaselineDensity::density`].
    fn predict(&self, x: &X) -> Result<DVector<f64>> {
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
impl<X: AsMatrix<Elem = f64> + ?Sized> Predict<X> for QuantileRegression {
    type Output = DMatrix<f64>;
    fn predict(&self, x: &X) -> Result<DMatrix<f64>> {
        QuantileRegression::predict(self, x)
    }
}

/// The quantile curves at new inputs (one column per level).
impl<X: AsMatrix<Elem = f64> + ?Sized> Predict<X> for BaselineQuantile {
    type Output = DMatrix<f64>;
    fn predict(&self, x: &X) -> Result<DMatrix<f64>> {
        BaselineQuantile::predict(self, x)
    }
}

/// The conditional mean and variance `(m(x), v(x))` at new inputs.
impl<X: AsMatrix<Elem = f64> + ?Sized> Predict<X> for HeteroscedasticRegression {
    type Output = (DVector<f64>, DVector<f64>);
    fn predict(&self, x: &X) -> Result<(DVector<f64>, DVector<f64>)> {
        Ok((self.predict_mean(x)?, self.predict_variance(x)?))
    }
}

/// The conditional mean and variance `(m(x), v(x))` at new inputs.
impl<X: AsMatrix<Elem = f64> + ?Sized> Predict<X> for BaselineHeteroscedastic {
    type Output = (DVector<f64>, DVector<f64>);
    fn predict(&self, x: &X) -> Result<(DVector<f64>, DVector<f64>)> {
        Ok((self.predict_mean(x)?, self.predict_variance(x)?))
    }
}
