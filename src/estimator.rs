//! The shape every estimator shares: parameters -> [`Fit`] -> fitted model
//! -> [`Predict`] / [`Transform`], and a cross-validation helper generic over
//! them.
//!
//! Parameters are builders validated when `fit` runs (each has a
//! `validate`/`check` method to validate earlier); fitting and applying take
//! the [`Device`] the work runs on, so data can stay on one GPU between
//! calls. Every method implements the traits for its natural data:
//!
//! | estimator | `Fit<D>` with `D` = | fitted | `Predict` / `Transform` of |
//! |---|---|---|---|
//! | `eksvd::EksvdParams` | [`MultiSource`] | `eksvd::Eksvd` | `Transform<MultiSource>`: paired scores |
//! | `eksvd::KsvdParams` | [`MultiSource`] (Q = 2) | `eksvd::Ksvd` | `Transform<MultiSource>` |
//! | `mklaren::MklarenParams` | [`Supervised`] | `mklaren::Mklaren` | `Predict<DMatrix<f64>>`: `y` |
//! | `mklaren::FullKernelRidgeParams`, `LowRankRidgeParams` (baselines) | [`Supervised`] | `FullKernelRidge`, `LowRankRidge` | `Predict<DMatrix<f64>>`: `y` |
//! | `psd::DensityParams` | `DMatrix<f64>` | `psd::PsdDensity` | `Predict<DMatrix<f64>>`: density |
//! | `psd::HeteroscedasticParams`, `BaselineHeteroscedasticParams` | [`Supervised`] | `HeteroscedasticRegression`, `BaselineHeteroscedastic` | `Predict<DMatrix<f64>>`: mean and variance |
//! | `psd::QuantileParams`, `BaselineQuantileParams` | [`Supervised`] | `QuantileRegression`, `BaselineQuantile` | `Predict<DMatrix<f64>>`: a column per level |
//!
//! ```
//! use gramian::prelude::*;
//! use nalgebra::DMatrix;
//!
//! let x = DMatrix::<f64>::from_fn(80, 1, |i, _| ((i * 37) % 80) as f64 / 40.0 - 1.0);
//! let candidates: Vec<DensityParams> = [0.2, 0.5].iter().map(|&s| DensityParams::new(s)).collect();
//! let cv = cross_validate(&Device::cpu(), &candidates, &x, 3, 0, |model: &PsdDensity, held: &DMatrix<f64>| {
//!     model.mean_log_likelihood(&Device::cpu(), held)
//! })?;
//! let model = candidates[cv.best].fit(&Device::cpu(), &x)?;
//! let density = model.predict(&Device::cpu(), &x)?; // p(x) at the samples
//! assert!(density.iter().all(|&p| p >= 0.0));
//! # Ok::<(), gramian::Error>(())
//! ```

use nalgebra::{DMatrix, DVector};
use rand::seq::SliceRandom;
use rand::{rngs::StdRng, SeedableRng};

use crate::eksvd::MultiSource;
use crate::error::{Error, Result};
use crate::linalg::check_matrix;
use crate::Device;

/// Fitting an estimator on data of type `D`.
pub trait Fit<D: ?Sized> {
    /// The fitted model.
    type Fitted;
    /// Validates the parameters and the data, and fits on `device`.
    fn fit(&self, device: &Device, data: &D) -> Result<Self::Fitted>;
}

/// Predictions of a fitted model for new inputs `X`.
pub trait Predict<X: ?Sized> {
    /// What is predicted (a vector of targets, a matrix of quantiles, ...).
    type Output;
    /// Predicts for `x` on `device`.
    fn predict(&self, device: &Device, x: &X) -> Result<Self::Output>;
}

/// A representation of new inputs `X` computed by a fitted model (scores,
/// components).
pub trait Transform<X: ?Sized> {
    /// The representation.
    type Output;
    /// Transforms `x` on `device`.
    fn transform(&self, device: &Device, x: &X) -> Result<Self::Output>;
}

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
    /// Pairs inputs with targets.
    ///
    /// Errors: empty or non-finite inputs or targets, or a target length
    /// other than `x.nrows()` ([`Error::TargetLength`]).
    pub fn new(x: DMatrix<f64>, y: DVector<f64>) -> Result<Self> {
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

/// The outcome of [`cross_validate`]: the mean validation score of every
/// candidate (higher is better) and the best one.
#[derive(Debug, Clone, PartialEq)]
pub struct CrossValidation {
    /// `scores[c][f]`: candidate `c` on fold `f`.
    pub scores: Vec<Vec<f64>>,
    /// Mean over the folds, per candidate.
    pub mean_scores: Vec<f64>,
    /// Index of the candidate with the highest mean score (the first on ties).
    pub best: usize,
}

/// `k`-fold cross-validation of candidate parameters: the samples are
/// shuffled with `seed` and cut into `folds` parts; every candidate is fitted
/// on all parts but one and scored by `score(fitted, held_out)` (higher is
/// better, e.g. a log-likelihood or minus an error), for each part in turn.
///
/// A candidate whose fit or score fails on a fold (e.g. a solver that does
/// not converge at that setting) scores `-inf` there, so it is never chosen;
/// invalid input fails the whole call.
///
/// Errors: `folds < 2` or more folds than samples, no candidates,
/// invalid input (from `fit`), or every candidate failing on some fold.
pub fn cross_validate<P, D>(
    device: &Device,
    candidates: &[P],
    data: &D,
    folds: usize,
    seed: u64,
    score: impl Fn(&P::Fitted, &D) -> Result<f64>,
) -> Result<CrossValidation>
where
    P: Fit<D>,
    D: Samples,
{
    let n = data.n_samples();
    if folds < 2 || folds > n {
        return Err(Error::InvalidParameter { name: "folds", reason: format!("must be in 2..={n} (the number of samples), got {folds}") });
    }
    if candidates.is_empty() {
        return Err(Error::InvalidParameter { name: "candidates", reason: "no candidate parameters".into() });
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut StdRng::seed_from_u64(seed));
    let parts: Vec<(D, D)> = (0..folds)
        .map(|f| {
            let (lo, hi) = (f * n / folds, (f + 1) * n / folds);
            let held: Vec<usize> = order[lo..hi].to_vec();
            let kept: Vec<usize> = order[..lo].iter().chain(&order[hi..]).copied().collect();
            Ok((data.select(&kept)?, data.select(&held)?))
        })
        .collect::<Result<_>>()?;
    let mut scores = Vec::with_capacity(candidates.len());
    for params in candidates {
        let mut row = Vec::with_capacity(folds);
        for (train, held) in &parts {
            let s = match params.fit(device, train) {
                Ok(model) => match score(&model, held) {
                    Ok(s) if s.is_finite() => s,
                    Ok(_) => f64::NEG_INFINITY,
                    Err(e) if e.is_invalid_input() => return Err(e),
                    Err(_) => f64::NEG_INFINITY,
                },
                Err(e) if e.is_invalid_input() => return Err(e),
                Err(_) => f64::NEG_INFINITY,
            };
            row.push(s);
        }
        scores.push(row);
    }
    let mean_scores: Vec<f64> = scores.iter().map(|r| r.iter().sum::<f64>() / folds as f64).collect();
    let best = (0..mean_scores.len()).fold(0, |b, c| if mean_scores[c] > mean_scores[b] { c } else { b });
    if !mean_scores[best].is_finite() {
        return Err(Error::InvalidParameter { name: "candidates", reason: "every candidate failed on at least one fold".into() });
    }
    Ok(CrossValidation { scores, mean_scores, best })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy estimator: predicts the training mean shifted by `offset`.
    struct MeanParams {
        offset: f64,
    }
    struct MeanModel(f64);
    impl Fit<Supervised> for MeanParams {
        type Fitted = MeanModel;
        fn fit(&self, _device: &Device, data: &Supervised) -> Result<MeanModel> {
            if self.offset.is_nan() {
                return Err(Error::NotConverged { iterations: 1, gap: 1.0, tolerance: 0.0 });
            }
            Ok(MeanModel(data.y.mean() + self.offset))
        }
    }

    #[test]
    fn cross_validation_picks_the_best_candidate_and_survives_failures() {
        let x = DMatrix::from_fn(20, 1, |i, _| i as f64);
        let y = DVector::from_fn(20, |i, _| 5.0 + (i % 3) as f64);
        let data = Supervised::new(x, y).unwrap();
        let candidates = [MeanParams { offset: 2.0 }, MeanParams { offset: 0.0 }, MeanParams { offset: f64::NAN }, MeanParams { offset: -1.0 }];
        let cv = cross_validate(&Device::cpu(), &candidates, &data, 4, 7, |m: &MeanModel, held: &Supervised| {
            Ok(-held.y.iter().map(|v| (v - m.0).powi(2)).sum::<f64>())
        })
        .unwrap();
        assert_eq!(cv.best, 1);
        assert_eq!(cv.scores.len(), 4);
        assert!(cv.scores.iter().all(|r| r.len() == 4));
        assert_eq!(cv.mean_scores[2], f64::NEG_INFINITY);
        // Every fold holds out a disjoint quarter: the folds' held-out sums add up to the whole.
        let total: f64 = cv.scores[1].iter().sum();
        assert!(total < 0.0);
        assert!(cross_validate(&Device::cpu(), &candidates, &data, 1, 7, |_, _| Ok(0.0)).is_err());
        assert!(cross_validate(&Device::cpu(), &candidates, &data, 21, 7, |_, _| Ok(0.0)).is_err());
        assert!(cross_validate(&Device::cpu(), &candidates[2..3], &data, 2, 7, |_, _| Ok(0.0)).is_err());
    }

    #[test]
    fn supervised_data_is_checked_and_selected() {
        let x = DMatrix::from_fn(4, 2, |i, j| (i + j) as f64);
        assert!(matches!(Supervised::new(x.clone(), DVector::zeros(3)), Err(Error::TargetLength { expected: 4, found: 3 })));
        assert!(Supervised::new(x.clone(), DVector::from_element(4, f64::NAN)).is_err());
        let d = Supervised::new(x, DVector::from_fn(4, |i, _| i as f64)).unwrap();
        let s = d.select(&[3, 0]).unwrap();
        assert_eq!(s.y.as_slice(), &[3.0, 0.0]);
        assert_eq!(s.x[(0, 1)], 4.0);
        assert!(matches!(d.select(&[4]), Err(Error::IndexOutOfRange { index: 4, .. })));
    }
}
