//! The shape every estimator shares: parameters -> [`Fit`] on a [`Device`]
//! -> a fitted model that remembers that device ([`OnDevice`]) ->
//! [`Predict`] / [`Transform`], and [`cross_validate`], generic over them,
//! over the [`Splits`] of the data (shuffled or interleaved folds, repeated
//! random holdout, fixed index sets).
//!
//! Parameters are builders; each parameters type has a public `validate`
//! that checks the settings that do not depend on the data (the errors it
//! gives are listed on it), and `fit` calls it before anything else.
//! `fit` takes the [`Device`] the work runs on; the fitted model keeps a
//! handle to it, and its `predict`, `transform` and other computing methods
//! run there without naming it again, so data can stay on one GPU between
//! calls. [`OnDevice::to_device`] moves a model explicitly; a model loaded
//! from a file (feature `serde`) is on the CPU. Every method implements the
//! traits for its natural data:
//!
//! | estimator | `Fit<D>` with `D` = | fitted | `Predict` / `Transform` of |
//! |---|---|---|---|
//! | `eksvd::EksvdParams` | [`MultiSource`] | `eksvd::Eksvd` | `Transform<MultiSource>`: paired scores |
//! | `eksvd::KsvdParams` | [`MultiSource`] (Q = 2) | `eksvd::Ksvd` | `Transform<MultiSource>` |
//! | `mklaren::MklarenParams` | [`Supervised`] | `mklaren::Mklaren` | `Predict<X>`: `y` |
//! | `mklaren::FullKernelRidgeParams`, `LowRankRidgeParams` (baselines) | [`Supervised`] | `FullKernelRidge`, `LowRankRidge` | `Predict<X>`: `y` |
//! | `eksvd::neural::NeuralEksvdParams` (feature `neural`) | [`Labelled`] | `eksvd::neural::NeuralEksvd` | `Predict<MultiSource>`: classes; `Transform<MultiSource>`: scores |
//! | `psd::DensityParams` | `X` | `psd::PsdDensity` | `Predict<X>`: density |
//! | `psd::HeteroscedasticParams`, `BaselineHeteroscedasticParams` | [`Supervised`] | `HeteroscedasticRegression`, `BaselineHeteroscedastic` | `Predict<X>`: mean and variance |
//! | `psd::QuantileParams`, `BaselineQuantileParams` | [`Supervised`] | `QuantileRegression`, `BaselineQuantile` | `Predict<X>`: a column per level |
//!
//! `X` is any matrix input of [`crate::input`] with `f64` entries
//! (`X: AsMatrix<Elem = f64>`: `DMatrix<f64>`, borrowed; views,
//! [`RowMajor`](crate::input::RowMajor) slices, `ndarray` arrays, converted
//! once), and [`Supervised::new`] and the [`MultiSource`] constructors take
//! the same inputs; the inherent `fit`, `predict`, `transform_*`, ...
//! methods of the models take them too.
//!
//! Every fitted model in the table implements [`OnDevice`], and so do the
//! parts fitted on a device on their own: `eksvd::FittedFeatureMap`
//! (`Transform`-like `transform`), `mklaren::IcdFactor` and
//! `mklaren::NystromFactor` (`apply`).
//!
//! Kernels are given the same way to every method: a [`Kernel`](crate::Kernel)
//! (the PSD parameters, e.g. `DensityParams::new(Kernel::gaussian_with_width(0.5)?)?`,
//! need the Gaussian kernel and turn any other down with
//! [`Error::InvalidParameter`] when they are built).
//!
//! ```
//! use gramian::prelude::*;
//! use nalgebra::DMatrix;
//!
//! let x = DMatrix::<f64>::from_fn(80, 1, |i, _| ((i * 37) % 80) as f64 / 40.0 - 1.0);
//! let candidates: Vec<DensityParams> = [0.2, 0.5].iter().map(|&s| DensityParams::new(Kernel::gaussian_with_width(s)?)).collect::<Result<_, Error>>()?;
//! let splits = Splits::k_fold(3)?.seed(7);
//! let cv = cross_validate(&Device::cpu(), &candidates, &x, &splits, |model: &PsdDensity, held: &DMatrix<f64>| model.mean_log_likelihood(held))?;
//! let model = candidates[cv.best].fit(&Device::cpu(), &x)?;
//! let density = model.predict(&x)?; // p(x) at the samples, on the model's device
//! assert!(!model.device().is_gpu());
//! assert!(density.iter().all(|&p| p >= 0.0));
//! # Ok::<(), gramian::Error>(())
//! ```

use nalgebra::{DMatrix, DVector};

use crate::data::{Labelled, MultiSource};
use crate::error::{Error, Result};
use crate::input::{AsMatrix, AsVector};
use crate::linalg::check_matrix;
use crate::Device;

/// Fitting an estimator on data of type `D`.
pub trait Fit<D: ?Sized> {
    /// The fitted model.
    type Fitted;
    /// Validates the parameters and the data, and fits on `device`.
    fn fit(&self, device: &Device, data: &D) -> Result<Self::Fitted>;
}

/// Predictions of a fitted model for new inputs `X`, computed on the
/// model's device ([`OnDevice::device`]).
pub trait Predict<X: ?Sized> {
    /// What is predicted (a vector of targets, a matrix of quantiles, ...).
    type Output;
    /// Predicts for `x` on the model's device.
    fn predict(&self, x: &X) -> Result<Self::Output>;
}

/// A representation of new inputs `X` computed by a fitted model (scores,
/// components) on the model's device ([`OnDevice::device`]).
pub trait Transform<X: ?Sized> {
    /// The representation.
    type Output;
    /// Transforms `x` on the model's device.
    fn transform(&self, x: &X) -> Result<Self::Output>;
}

/// A fitted model and the [`Device`] its methods compute on: the device it
/// was fitted on, or the CPU for a model loaded from a file. A [`Device`] is
/// cheap to clone (an enum holding an `Arc` of the GPU context), so every
/// fitted model keeps its own handle; moving a model to another device is
/// explicit, through [`OnDevice::to_device`].
///
/// ```
/// use gramian::prelude::*;
/// use nalgebra::DMatrix;
///
/// let x = DMatrix::<f64>::from_fn(40, 1, |i, _| ((i * 7) % 40) as f64 / 20.0 - 1.0);
/// let model = DensityParams::new(Kernel::gaussian_with_width(0.5)?)?.fit(&Device::cpu(), &x)?;
/// assert!(!model.device().is_gpu());
/// let moved = model.to_device(&Device::cpu()); // e.g. Device::gpu()? to move it to a GPU
/// assert_eq!(moved.predict(&x)?, model.predict(&x)?);
/// # Ok::<(), gramian::Error>(())
/// ```
pub trait OnDevice: Sized {
    /// The device the model's methods compute on.
    fn device(&self) -> &Device;
    /// The same model (the same numbers) computing on `device`.
    fn to_device(&self, device: &Device) -> Self;
}

/// `OnDevice` for models whose only device handle is their `device` field.
macro_rules! on_device {
    ($($model:ty),* $(,)?) => {
        $(impl $crate::estimator::OnDevice for $model {
            fn device(&self) -> &$crate::Device {
                &self.device
            }
            fn to_device(&self, device: &$crate::Device) -> Self {
                let mut moved = self.clone();
                moved.device = device.clone();
                moved
            }
        })*
    };
}
pub(crate) use on_device;

/// Data that can be split by sample: what [`cross_validate`] needs.
pub trait Samples: Sized {
    /// Number of samples.
    fn n_samples(&self) -> usize;
    /// The samples `idx`, in that order.
    ///
    /// Errors: an index out of range.
    fn select(&self, idx: &[usize]) -> Result<Self>;
}

/// Inputs `x` (`n x d`, one sample per row) with one target per sample: the
/// training data of the supervised estimators.
#[derive(Debug, Clone, PartialEq)]
pub struct Supervised<Y = DVector<f64>> {
    /// Inputs, one sample per row.
    pub x: DMatrix<f64>,
    /// Targets, one per sample.
    pub y: Y,
}

impl Supervised<DVector<f64>> {
    /// Pairs inputs with targets: `x` any [`AsMatrix`] input, `y` any
    /// [`AsVector`] input (an owned `DMatrix<f64>` and `DVector<f64>` move
    /// without a copy; slices, views and `ndarray` arrays are converted once).
    ///
    /// ```
    /// use gramian::prelude::*;
    ///
    /// // Four samples of two features, row after row, and their targets.
    /// let x = [0.0, 1.0, 1.0, 0.0, 0.5, 0.5, 0.25, 0.75];
    /// let data = Supervised::new(RowMajor::new(&x, 4, 2)?, &[1.0, 2.0, 3.0, 4.0][..])?;
    /// assert_eq!(data.x[(3, 1)], 0.75);
    /// assert!(matches!(Supervised::new(RowMajor::new(&x, 4, 2)?, &[1.0][..]), Err(Error::TargetLength { expected: 4, found: 1 })));
    /// # Ok::<(), gramian::Error>(())
    /// ```
    ///
    /// Errors: empty or non-finite inputs or targets, or a target length
    /// other than `x.nrows()` ([`Error::TargetLength`]).
    pub fn new(x: impl AsMatrix<Elem = f64>, y: impl AsVector<Elem = f64>) -> Result<Self> {
        let (x, y) = (x.into_matrix()?, y.into_vector()?);
        check_matrix("x", &x)?;
        if y.len() != x.nrows() {
            return Err(Error::TargetLength { expected: x.nrows(), found: y.len() });
        }
        if let Some(row) = y.iter().position(|v| !v.is_finite()) {
            return Err(Error::NonFinite { what: "y", row, col: 0 });
        }
        Ok(Supervised { x, y })
    }
}

fn check_indices(idx: &[usize], n: usize) -> Result<()> {
    match idx.iter().find(|&&i| i >= n) {
        Some(&index) => Err(Error::IndexOutOfRange { what: "samples", index, len: n }),
        None => Ok(()),
    }
}

impl Samples for DMatrix<f64> {
    fn n_samples(&self) -> usize {
        self.nrows()
    }
    fn select(&self, idx: &[usize]) -> Result<Self> {
        check_indices(idx, self.nrows())?;
        Ok(self.select_rows(idx))
    }
}

impl Samples for Supervised<DVector<f64>> {
    fn n_samples(&self) -> usize {
        self.x.nrows()
    }
    fn select(&self, idx: &[usize]) -> Result<Self> {
        // The fields are public: a literal may pair x with a y of another length.
        if self.y.len() != self.x.nrows() {
            return Err(Error::TargetLength { expected: self.x.nrows(), found: self.y.len() });
        }
        check_indices(idx, self.x.nrows())?;
        Ok(Supervised { x: self.x.select_rows(idx), y: DVector::from_fn(idx.len(), |i, _| self.y[idx[i]]) })
    }
}

impl Samples for MultiSource {
    /// The samples of the first source (all sources have as many when paired;
    /// [`Samples::select`] needs paired sources).
    fn n_samples(&self) -> usize {
        self.sample_counts().first().copied().unwrap_or(0)
    }
    fn select(&self, idx: &[usize]) -> Result<Self> {
        self.select_rows(idx)
    }
}

impl Samples for Labelled {
    fn n_samples(&self) -> usize {
        Labelled::n_samples(self)
    }
    fn select(&self, idx: &[usize]) -> Result<Self> {
        Labelled::select(self, idx)
    }
}

mod cross_validation;

pub use cross_validation::{cross_validate, CrossValidation, Failure, Fold, Splits};
