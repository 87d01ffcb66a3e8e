//! mklaren and its baselines as [`crate::estimator`] traits:
//! `Fit<Supervised>` (every kernel on the shared input) and
//! `Predict<X>` (predictions for new rows) for every [`AsMatrix`] input `X`
//! (`DMatrix<f64>`, views, row-major slices, `ndarray` arrays).

use nalgebra::DVector;

use super::full_kernel::{FullKernelRidge, FullKernelRidgeParams};
use super::low_rank::{LowRankRidge, LowRankRidgeParams};
use super::fitted::Mklaren;
use super::model::MklarenParams;
use crate::error::Result;
use crate::input::AsMatrix;
use crate::estimator::{Fit, Predict, Supervised};
use crate::Device;

macro_rules! supervised_estimator {
    ($params:ty, $fitted:ty) => {
        impl Fit<Supervised> for $params {
            type Fitted = $fitted;
            fn fit(&self, device: &Device, data: &Supervised) -> Result<$fitted> {
                <$params>::fit(self, device, data)
            }
        }

        impl<X: AsMatrix<Elem = f64> + ?Sized> Predict<X> for $fitted {
            type Output = DVector<f64>;
            fn predict(&self, x: &X) -> Result<DVector<f64>> {
                <$fitted>::predict(self, x)
            }
        }
    };
}

supervised_estimator!(MklarenParams, Mklaren);
supervised_estimator!(FullKernelRidgeParams, FullKernelRidge);
supervised_estimator!(LowRankRidgeParams, LowRankRidge);
