//! eKSVD and KSVD as [`crate::estimator`] traits: `Fit<MultiSource>` and
//! `Transform<MultiSource>` (the paired scores of Eq. 6, one block of
//! `n_components` columns per source).

use nalgebra::DMatrix;

use super::model::{Eksvd, EksvdParams, Ksvd, KsvdParams};
use crate::data::MultiSource;
use crate::error::Result;
use crate::estimator::{Fit, Transform};
use crate::Device;

impl Fit<MultiSource> for EksvdParams {
    type Fitted = Eksvd;
    fn fit(&self, device: &Device, data: &MultiSource) -> Result<Eksvd> {
        EksvdParams::fit(self, device, data)
    }
}

impl Transform<MultiSource> for Eksvd {
    type Output = DMatrix<f64>;
    /// [`Eksvd::transform_paired`].
    fn transform(&self, x: &MultiSource) -> Result<DMatrix<f64>> {
        self.transform_paired(x)
    }
}

impl Fit<MultiSource> for KsvdParams {
    type Fitted = Ksvd;
    fn fit(&self, device: &Device, data: &MultiSource) -> Result<Ksvd> {
        KsvdParams::fit(self, device, data)
    }
}

impl Transform<MultiSource> for Ksvd {
    type Output = DMatrix<f64>;
    /// The scores of `X` and `Z` side by side (paired sources).
    fn transform(&self, x: &MultiSource) -> Result<DMatrix<f64>> {
        self.as_eksvd().transform_paired(x)
    }
}
