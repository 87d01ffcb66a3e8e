//! mklaren and its baselines as [`crate::estimator`] traits:
//! `Fit<Supervised>` (every kernel on the shared input) and
//! `Predict<DMatrix<f64>>` (predictions for new rows).

use nalgebra::{DMatrix, DVector};

use super::full_kernel::{FullKernelRidge, FullKernelRidgeParams};
use super::low_rank::{LowRankRidge, LowRankRidgeParams};
use super::model::{Mklaren, MklarenParams};
use crate::error::Result;
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

        impl Predict<DMatrix<f64>> for $fitted {
            type Output = DVector<f64>;
            fn predict(&self, x: &DMatrix<f64>) -> Result<DVector<f64>> {
                <$fitted>::predict(self, x)
            }
        }
    };
}

supervised_estimator!(MklarenParams, Mklaren);
supervised_estimator!(FullKernelRidgeParams, FullKernelRidge);
supervised_estimator!(LowRankRidgeParams, LowRankRidge);
