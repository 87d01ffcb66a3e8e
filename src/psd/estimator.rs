//! The PSD density as [`crate::estimator`] traits: `Fit<DMatrix<f64>>`
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
    fn predict(&self, device: &Device, x: &DMatrix<f64>) -> Result<DVector<f64>> {
        self.density(device, x)
    }
}
