//! Cross-validation over any estimator ([`cross_validate`]): the
//! [`Splits`] of the samples (shuffled or interleaved folds, repeated random
//! holdout, fixed index sets), a fit per candidate and split, and the
//! candidates' mean held-out scores.

use rand::seq::SliceRandom;
use rand::{rngs::StdRng, SeedableRng};

use crate::error::{Error, Result};
use crate::Device;

use super::{Fit, Samples};

/// One split of sample indices for cross-validation (a fold, or one
/// holdout): fit on `train`, score on `held_out` (disjoint).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fold {
    /// Indices of the samples fitted on, in the order they are passed to `fit`.
    pub train: Vec<usize>,
    /// Indices of the samples scored, in the order they are passed to `score`.
    pub held_out: Vec<usize>,
}

/// How [`cross_validate`] divides the samples into training and
/// held-out sets.
///
/// Built by the constructors, which check the parameters that do not depend
/// on the data; [`Splits::indices`] checks the rest against the number of
/// samples `n` and gives the index sets. Every strategy is deterministic
/// (the random ones are replayed by their seed):
///
/// | constructor | splits | held out in split `f` |
/// |---|---|---|
/// | [`Splits::k_fold`] | `folds` | the `f`-th of `folds` contiguous parts of a seeded shuffle |
/// | [`Splits::interleaved`] | `folds` | the samples `i` with `i % folds == f`, in order |
/// | [`Splits::random_holdout`] | `splits` | a fresh seeded shuffle, all but its first `round(train_fraction n)` samples |
/// | [`Splits::fixed`] | as given | as given |
///
/// ```
/// use gramian::estimator::Splits;
///
/// let splits = Splits::interleaved(3)?;
/// let parts = splits.indices(7)?;
/// assert_eq!(parts[1].held_out, vec![1, 4]);
/// assert_eq!(parts[1].train, vec![0, 2, 3, 5, 6]);
/// assert!(Splits::random_holdout(5)?.train_fraction(1.5).is_err());
/// let holdout = Splits::random_holdout(10)?.train_fraction(0.7)?.seed(1);
/// assert_eq!(holdout.indices(10)?[0].train.len(), 7);
/// # Ok::<(), gramian::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Splits(Strategy);

#[derive(Debug, Clone, PartialEq)]
enum Strategy {
    KFold { folds: usize, seed: u64 },
    Interleaved { folds: usize },
    RandomHoldout { splits: usize, train_fraction: f64, seed: u64 },
    Fixed(Vec<Fold>),
}

fn invalid(name: &'static str, reason: String) -> Error {
    Error::InvalidParameter { name, reason }
}

fn check_folds(folds: usize) -> Result<()> {
    if folds < 2 {
        return Err(invalid("folds", format!("must be at least 2, got {folds}")));
    }
    Ok(())
}

/// `f n / folds` without overflow (`f <= folds`, so the result is at most `n`).
fn fold_bound(f: usize, n: usize, folds: usize) -> usize {
    usize::try_from(f as u128 * n as u128 / folds as u128).unwrap_or(n)
}

impl Splits {
    /// Shuffled `k`-fold: the samples are shuffled with the seed (0 unless
    /// set by [`Splits::seed`]) and cut into `folds` contiguous parts of
    /// `n / folds` samples (rounded down or up); split `f` holds out part `f`
    /// and trains on the others, in the shuffled order.
    ///
    /// Errors: `folds < 2` ([`Error::InvalidParameter`]); more folds than
    /// samples, from [`Splits::indices`].
    pub fn k_fold(folds: usize) -> Result<Self> {
        check_folds(folds)?;
        Ok(Splits(Strategy::KFold { folds, seed: 0 }))
    }

    /// Interleaved (unshuffled) folds: split `f` holds out the samples `i`
    /// with `i % folds == f` and trains on the others, both in increasing
    /// order. Suits data already in random order.
    ///
    /// Errors: `folds < 2` ([`Error::InvalidParameter`]); more folds than
    /// samples, from [`Splits::indices`].
    pub fn interleaved(folds: usize) -> Result<Self> {
        check_folds(folds)?;
        Ok(Splits(Strategy::Interleaved { folds }))
    }

    /// Repeated random holdout (Monte Carlo cross-validation): `splits`
    /// independent splits drawn from one generator seeded with the seed (0
    /// unless set by [`Splits::seed`]); each shuffles `0..n` and trains on the
    /// first `round(train_fraction n)` samples of the shuffle, holding out the
    /// rest (both in the shuffled order). The training fraction is
    /// [`Splits::DEFAULT_TRAIN_FRACTION`] unless set by
    /// [`Splits::train_fraction`]. Held-out sets of different splits may
    /// overlap.
    ///
    /// Errors ([`Error::InvalidParameter`]): `splits == 0`; from
    /// [`Splits::indices`], a fraction that leaves no training or no
    /// held-out sample.
    pub fn random_holdout(splits: usize) -> Result<Self> {
        if splits == 0 {
            return Err(invalid("splits", "must be at least 1, got 0".into()));
        }
        Ok(Splits(Strategy::RandomHoldout { splits, train_fraction: Self::DEFAULT_TRAIN_FRACTION, seed: 0 }))
    }

    /// The training fraction of [`Splits::random_holdout`] unless set.
    pub const DEFAULT_TRAIN_FRACTION: f64 = 0.8;

    /// The seed of the shuffles of [`Splits::k_fold`] and
    /// [`Splits::random_holdout`] (0 by default). Interleaved and fixed
    /// splits draw nothing: the seed leaves them as they are.
    pub fn seed(mut self, seed: u64) -> Self {
        match &mut self.0 {
            Strategy::KFold { seed: s, .. } | Strategy::RandomHoldout { seed: s, .. } => *s = seed,
            Strategy::Interleaved { .. } | Strategy::Fixed(_) => {}
        }
        self
    }

    /// The fraction of the samples each [`Splits::random_holdout`] split
    /// trains on ([`Splits::DEFAULT_TRAIN_FRACTION`] by default).
    ///
    /// Errors ([`Error::InvalidParameter`] for `train_fraction`): a fraction
    /// not in the open interval `(0, 1)`, or splits other than a random
    /// holdout (their training sets are not drawn by a fraction).
    pub fn train_fraction(mut self, train_fraction: f64) -> Result<Self> {
        let Strategy::RandomHoldout { train_fraction: f, .. } = &mut self.0 else {
            return Err(invalid("train_fraction", "applies to random holdout splits only".into()));
        };
        if !(train_fraction > 0.0 && train_fraction < 1.0) {
            return Err(invalid("train_fraction", format!("must be in (0, 1), got {train_fraction}")));
        }
        *f = train_fraction;
        Ok(self)
    }

    /// Given `(train, held_out)` index sets, used as they are (order kept):
    /// a fixed validation set, or splits drawn by the caller's own generator.
    ///
    /// Errors ([`Error::InvalidParameter`]): no split, an empty training or
    /// held-out set, an index twice in one split (in either set, or in both);
    /// from [`Splits::indices`], an index out of range
    /// ([`Error::IndexOutOfRange`]).
    pub fn fixed(splits: impl IntoIterator<Item = (Vec<usize>, Vec<usize>)>) -> Result<Self> {
        let splits: Vec<Fold> = splits.into_iter().map(|(train, held_out)| Fold { train, held_out }).collect();
        if splits.is_empty() {
            return Err(invalid("splits", "no split given".into()));
        }
        for (f, s) in splits.iter().enumerate() {
            if s.train.is_empty() || s.held_out.is_empty() {
                return Err(invalid("splits", format!("split {f} has an empty training or held-out set")));
            }
            let mut all: Vec<usize> = s.train.iter().chain(&s.held_out).copied().collect();
            all.sort_unstable();
            if let Some(w) = all.windows(2).find(|w| w[0] == w[1]) {
                return Err(invalid("splits", format!("split {f} uses sample {} twice", w[0])));
            }
        }
        Ok(Splits(Strategy::Fixed(splits)))
    }

    /// One split: fit on `train`, score on `held_out` ([`Splits::fixed`]).
    ///
    /// Errors: as [`Splits::fixed`].
    pub fn holdout(train: Vec<usize>, held_out: Vec<usize>) -> Result<Self> {
        Splits::fixed([(train, held_out)])
    }

    /// The number of splits (each candidate is fitted this many times).
    pub fn n_splits(&self) -> usize {
        match &self.0 {
            Strategy::KFold { folds, .. } | Strategy::Interleaved { folds } => *folds,
            Strategy::RandomHoldout { splits, .. } => *splits,
            Strategy::Fixed(s) => s.len(),
        }
    }

    /// The index sets for `n` samples, one [`Fold`] per split; training and
    /// held-out sets are disjoint and non-empty.
    ///
    /// Errors: more folds than samples, a holdout fraction that leaves no
    /// training or no held-out sample of `n` ([`Error::InvalidParameter`]),
    /// an index `>= n` in fixed splits ([`Error::IndexOutOfRange`]).
    pub fn indices(&self, n: usize) -> Result<Vec<Fold>> {
        // A generated split lists all n samples once: splits x n indices in all.
        if !matches!(self.0, Strategy::Fixed(_)) {
            let total = self.n_splits().checked_mul(n).ok_or_else(|| Error::host_memory(format!("{} splits of {n} samples overflow the address space", self.n_splits())))?;
            crate::memory::check_host::<usize>(total, "split indices")?;
        }
        match &self.0 {
            &Strategy::KFold { folds, seed } => {
                check_fold_count(folds, n)?;
                let mut order: Vec<usize> = (0..n).collect();
                order.shuffle(&mut StdRng::seed_from_u64(seed));
                Ok((0..folds)
                    .map(|f| {
                        let (lo, hi) = (fold_bound(f, n, folds), fold_bound(f + 1, n, folds));
                        Fold { train: order[..lo].iter().chain(&order[hi..]).copied().collect(), held_out: order[lo..hi].to_vec() }
                    })
                    .collect())
            }
            &Strategy::Interleaved { folds } => {
                check_fold_count(folds, n)?;
                Ok((0..folds).map(|f| Fold { train: (0..n).filter(|i| i % folds != f).collect(), held_out: (0..n).filter(|i| i % folds == f).collect() }).collect())
            }
            &Strategy::RandomHoldout { splits, train_fraction, seed } => {
                // In [0, n] since 0 < train_fraction < 1.
                let cut = (train_fraction * n as f64).round() as usize;
                if cut == 0 || cut >= n {
                    return Err(invalid("train_fraction", format!("{train_fraction} of {n} samples leaves an empty training or held-out set")));
                }
                let mut rng = StdRng::seed_from_u64(seed);
                Ok((0..splits)
                    .map(|_| {
                        let mut order: Vec<usize> = (0..n).collect();
                        order.shuffle(&mut rng);
                        Fold { train: order[..cut].to_vec(), held_out: order[cut..].to_vec() }
                    })
                    .collect())
            }
            Strategy::Fixed(splits) => {
                for s in splits {
                    if let Some(&index) = s.train.iter().chain(&s.held_out).find(|&&i| i >= n) {
                        return Err(Error::IndexOutOfRange { what: "split indices", index, len: n });
                    }
                }
                Ok(splits.clone())
            }
        }
    }
}

fn check_fold_count(folds: usize, n: usize) -> Result<()> {
    if folds > n {
        return Err(invalid("folds", format!("must be in 2..={n} (the number of samples), got {folds}")));
    }
    Ok(())
}

/// A fit or score that failed in [`cross_validate`] (that candidate
/// scores `-inf` on that split).
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// Index of the candidate.
    pub candidate: usize,
    /// Index of the split.
    pub split: usize,
    /// What went wrong.
    pub error: Error,
}

/// The outcome of [`cross_validate`]: the
/// mean validation score of every candidate (higher is better) and the best
/// one.
#[derive(Debug, Clone, PartialEq)]
pub struct CrossValidation {
    /// `scores[c][f]`: candidate `c` on split (fold) `f`.
    pub scores: Vec<Vec<f64>>,
    /// Mean over the splits, per candidate.
    pub mean_scores: Vec<f64>,
    /// Index of the candidate with the highest mean score (the first on ties).
    pub best: usize,
    /// The fits and scores that failed (scored `-inf`), in the order run.
    pub failures: Vec<Failure>,
}

/// Cross-validation of candidate parameters over the [`Splits`] of `data`:
/// for every candidate and every split, fits on the training samples and
/// scores `score(fitted, held_out)` (higher is better, e.g. a log-likelihood
/// or minus an error); a candidate's score is the mean over the splits.
/// Candidates run in order, each over the splits in order.
///
/// A fit or score that fails (e.g. a solver that does not converge at that
/// setting), or a non-finite score, counts as `-inf` on that split, so that
/// candidate is never chosen; the errors are kept in
/// [`CrossValidation::failures`]. Invalid input (an error with
/// [`Error::is_invalid_input`]) fails the whole call.
///
/// ```
/// use gramian::prelude::*;
/// use nalgebra::DMatrix;
///
/// let x = DMatrix::<f64>::from_fn(60, 1, |i, _| ((i * 37) % 60) as f64 / 30.0 - 1.0);
/// let candidates: Vec<DensityParams> = [0.2, 0.5].iter().map(|&s| DensityParams::new(Kernel::gaussian_with_width(s)?)).collect::<Result<_, Error>>()?;
/// // Fit on the first 40 samples, choose on the last 20.
/// let splits = Splits::holdout((0..40).collect(), (40..60).collect())?;
/// let cv = cross_validate(&Device::cpu(), &candidates, &x, &splits, |m: &PsdDensity, held: &DMatrix<f64>| m.mean_log_likelihood(held))?;
/// assert_eq!(cv.scores[cv.best].len(), 1);
/// # Ok::<(), gramian::Error>(())
/// ```
///
/// Errors: invalid splits for the number of samples ([`Splits::indices`]),
/// no candidates, invalid input (from `fit` or `score`), or every candidate
/// failing on some split ([`Error::InvalidParameter`] for `candidates`,
/// naming the first failure).
pub fn cross_validate<P, D>(
    device: &Device,
    candidates: &[P],
    data: &D,
    splits: &Splits,
    score: impl Fn(&P::Fitted, &D) -> Result<f64>,
) -> Result<CrossValidation>
where
    P: Fit<D>,
    D: Samples,
{
    let indices = splits.indices(data.n_samples())?;
    if candidates.is_empty() {
        return Err(invalid("candidates", "no candidate parameters".into()));
    }
    let parts: Vec<(D, D)> = indices.iter().map(|s| Ok((data.select(&s.train)?, data.select(&s.held_out)?))).collect::<Result<_>>()?;
    let mut scores = Vec::with_capacity(candidates.len());
    let mut failures = Vec::new();
    for (candidate, params) in candidates.iter().enumerate() {
        let mut row = Vec::with_capacity(parts.len());
        for (split, (train, held)) in parts.iter().enumerate() {
            let s = match params.fit(device, train).and_then(|model| score(&model, held)) {
                Ok(s) if s.is_finite() => s,
                Ok(_) => f64::NEG_INFINITY,
                Err(e) if e.is_invalid_input() => return Err(e),
                Err(error) => {
                    failures.push(Failure { candidate, split, error });
                    f64::NEG_INFINITY
                }
            };
            row.push(s);
        }
        scores.push(row);
    }
    let mean_scores: Vec<f64> = scores.iter().map(|r| r.iter().sum::<f64>() / parts.len() as f64).collect();
    let best = (0..mean_scores.len()).fold(0, |b, c| if mean_scores[c] > mean_scores[b] { c } else { b });
    if !mean_scores[best].is_finite() {
        let first = match failures.first() {
            Some(f) => format!("first failure: candidate {}, split {}: {}", f.candidate, f.split, f.error),
            None => "no fit failed: the scores were not finite".into(),
        };
        return Err(invalid("candidates", format!("every candidate failed on at least one split ({first})")));
    }
    Ok(CrossValidation { scores, mean_scores, best, failures })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::Supervised;
    use nalgebra::{DMatrix, DVector};

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
        let cv = cross_validate(&Device::cpu(), &candidates, &data, &Splits::k_fold(4).unwrap().seed(7), |m: &MeanModel, held: &Supervised| {
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
        assert!(Splits::k_fold(1).and_then(|s| cross_validate(&Device::cpu(), &candidates, &data, &s.seed(7), |_, _| Ok(0.0))).is_err());
        assert!(cross_validate(&Device::cpu(), &candidates, &data, &Splits::k_fold(21).unwrap().seed(7), |_, _| Ok(0.0)).is_err());
        assert!(cross_validate(&Device::cpu(), &candidates[2..3], &data, &Splits::k_fold(2).unwrap().seed(7), |_, _| Ok(0.0)).is_err());
    }

    /// Each split's sets are disjoint and non-empty; returns how often each
    /// sample is held out over the splits.
    fn held_out_counts(splits: &[Fold], n: usize) -> Vec<usize> {
        let mut held = vec![0; n];
        for s in splits {
            assert!(!s.train.is_empty() && !s.held_out.is_empty());
            let mut seen = vec![false; n];
            for &i in s.train.iter().chain(&s.held_out) {
                assert!(!seen[i], "sample {i} twice in one split");
                seen[i] = true;
            }
            for &i in &s.held_out {
                held[i] += 1;
            }
        }
        held
    }

    #[test]
    fn k_fold_partitions_the_samples_as_documented() {
        let (n, folds, seed) = (23, 4, 11);
        let splits = Splits::k_fold(folds).unwrap().seed(seed).indices(n).unwrap();
        assert_eq!(splits.len(), folds);
        // Every sample held out exactly once, and trained on in every other fold.
        assert_eq!(held_out_counts(&splits, n), vec![1; n]);
        assert!(splits.iter().all(|s| s.train.len() + s.held_out.len() == n));
        // The documented fold assignment.
        let mut order: Vec<usize> = (0..n).collect();
        order.shuffle(&mut StdRng::seed_from_u64(seed));
        for (f, s) in splits.iter().enumerate() {
            let (lo, hi) = (f * n / folds, (f + 1) * n / folds);
            assert_eq!(s.held_out, order[lo..hi]);
            assert_eq!(s.train, order[..lo].iter().chain(&order[hi..]).copied().collect::<Vec<_>>());
        }
        assert_eq!(Splits::k_fold(folds).unwrap().seed(seed).indices(n).unwrap(), splits);
        assert_ne!(Splits::k_fold(folds).unwrap().seed(seed + 1).indices(n).unwrap(), splits);
    }

    #[test]
    fn interleaved_folds_hold_out_every_folds_th_sample_in_order() {
        let (n, folds) = (17, 5);
        let splits = Splits::interleaved(folds).unwrap().indices(n).unwrap();
        assert_eq!(splits.len(), folds);
        assert_eq!(held_out_counts(&splits, n), vec![1; n]);
        for (f, s) in splits.iter().enumerate() {
            assert!(s.held_out.iter().all(|i| i % folds == f));
            assert!(s.train.iter().all(|i| i % folds != f));
            assert!(s.train.windows(2).all(|w| w[0] < w[1]) && s.held_out.windows(2).all(|w| w[0] < w[1]));
            assert_eq!(s.train.len() + s.held_out.len(), n);
        }
        assert_eq!(splits[2].held_out, vec![2, 7, 12]);
    }

    #[test]
    fn random_holdout_is_replayed_by_its_seed() {
        let (n, k) = (50, 6);
        let splits = Splits::random_holdout(k).unwrap().train_fraction(0.7).unwrap().seed(3).indices(n).unwrap();
        assert_eq!(splits.len(), k);
        held_out_counts(&splits, n);
        for s in &splits {
            assert_eq!((s.train.len(), s.held_out.len()), (35, 15));
        }
        // Different splits differ; the same seed gives the same splits, another seed others.
        assert_ne!(splits[0], splits[1]);
        assert_eq!(Splits::random_holdout(k).unwrap().train_fraction(0.7).unwrap().seed(3).indices(n).unwrap(), splits);
        assert_ne!(Splits::random_holdout(k).unwrap().train_fraction(0.7).unwrap().seed(4).indices(n).unwrap(), splits);
        // The documented draw: one generator, a fresh shuffle of 0..n per split.
        let mut rng = StdRng::seed_from_u64(3);
        for s in &splits {
            let mut order: Vec<usize> = (0..n).collect();
            order.shuffle(&mut rng);
            assert_eq!((&s.train[..], &s.held_out[..]), (&order[..35], &order[35..]));
        }
        // round(0.7 * 1000) = 700 although 0.7 * 1000 is not exactly 700 in f64.
        let big = Splits::random_holdout(1).unwrap().train_fraction(0.7).unwrap().indices(1000).unwrap();
        assert_eq!(big[0].train.len(), 700);
    }

    #[test]
    fn fixed_splits_are_kept_as_given_and_checked() {
        let splits = Splits::fixed([(vec![4, 0, 2], vec![1, 3]), (vec![1], vec![0])]).unwrap();
        assert_eq!(splits.n_splits(), 2);
        let idx = splits.indices(5).unwrap();
        assert_eq!(idx[0], Fold { train: vec![4, 0, 2], held_out: vec![1, 3] });
        assert_eq!(idx[1], Fold { train: vec![1], held_out: vec![0] });
        assert!(matches!(splits.indices(4), Err(Error::IndexOutOfRange { index: 4, len: 4, .. })));
        let bad = |r: Result<Splits>| matches!(r, Err(Error::InvalidParameter { name: "splits", .. }));
        assert!(bad(Splits::fixed(Vec::<(Vec<usize>, Vec<usize>)>::new())));
        assert!(bad(Splits::holdout(vec![], vec![1])));
        assert!(bad(Splits::holdout(vec![0], vec![])));
        assert!(bad(Splits::holdout(vec![0, 1], vec![1, 2])), "overlapping sets");
        assert!(bad(Splits::holdout(vec![0, 0], vec![2])), "a repeated index");
    }

    #[test]
    fn bad_split_parameters_are_typed_errors() {
        let param = |r: Result<Splits>, which: &str| matches!(r, Err(Error::InvalidParameter { name, .. }) if name == which);
        assert!(param(Splits::k_fold(1), "folds"));
        assert!(param(Splits::k_fold(0), "folds"));
        assert!(param(Splits::interleaved(1), "folds"));
        assert!(param(Splits::random_holdout(0), "splits"));
        for f in [0.0, 1.0, -0.2, 1.5, f64::NAN, f64::INFINITY] {
            assert!(param(Splits::random_holdout(3).unwrap().train_fraction(f), "train_fraction"), "train_fraction {f}");
        }
        let too_many = |s: Splits, n: usize| matches!(s.indices(n), Err(Error::InvalidParameter { .. }));
        assert!(too_many(Splits::k_fold(5).unwrap(), 4));
        assert!(too_many(Splits::interleaved(5).unwrap(), 4));
        assert!(too_many(Splits::random_holdout(2).unwrap().train_fraction(0.1).unwrap(), 3), "no training sample");
        assert!(too_many(Splits::random_holdout(2).unwrap().train_fraction(0.9).unwrap(), 3), "no held-out sample");
        assert!(too_many(Splits::random_holdout(2).unwrap().train_fraction(0.5).unwrap(), 0));
        assert!(Splits::k_fold(4).unwrap().indices(4).is_ok());
        // Huge sample counts: the fold bounds do not overflow.
        assert_eq!(fold_bound(3, usize::MAX, 4), (usize::MAX / 4) * 3 + (usize::MAX % 4) * 3 / 4);
    }

    #[test]
    fn split_builders_set_named_settings_with_documented_defaults() {
        // k_fold and random_holdout shuffle with seed 0 unless set.
        assert_eq!(Splits::k_fold(3).unwrap(), Splits::k_fold(3).unwrap().seed(0));
        assert_ne!(Splits::k_fold(3).unwrap().indices(12).unwrap(), Splits::k_fold(3).unwrap().seed(1).indices(12).unwrap());
        let holdout = Splits::random_holdout(2).unwrap();
        assert_eq!(holdout, Splits::random_holdout(2).unwrap().train_fraction(Splits::DEFAULT_TRAIN_FRACTION).unwrap().seed(0));
        assert!(holdout.indices(10).unwrap().iter().all(|s| s.train.len() == 8 && s.held_out.len() == 2));
        // The seed leaves unseeded splits as they are; a training fraction only applies to a random holdout.
        assert_eq!(Splits::interleaved(3).unwrap().seed(9), Splits::interleaved(3).unwrap());
        let fraction = |r: Result<Splits>| matches!(r, Err(Error::InvalidParameter { name: "train_fraction", .. }));
        assert!(fraction(Splits::k_fold(3).unwrap().train_fraction(0.5)));
        assert!(fraction(Splits::interleaved(3).unwrap().train_fraction(0.5)));
        assert!(fraction(Splits::holdout(vec![0], vec![1]).unwrap().train_fraction(0.5)));
    }

    #[test]
    fn cross_validation_over_fixed_splits_scores_each_split_and_keeps_failures() {
        let x = DMatrix::from_fn(10, 1, |i, _| i as f64);
        let y = DVector::from_fn(10, |i, _| i as f64);
        let data = Supervised::new(x, y).unwrap();
        let splits = Splits::fixed([((0..5).collect(), (5..10).collect()), ((5..10).collect(), (0..5).collect())]).unwrap();
        let candidates = [MeanParams { offset: 0.0 }, MeanParams { offset: f64::NAN }, MeanParams { offset: 1.0 }];
        let sse = |m: &MeanModel, held: &Supervised| Ok(-held.y.iter().map(|v| (v - m.0).powi(2)).sum::<f64>());
        let cv = cross_validate(&Device::cpu(), &candidates, &data, &splits, sse).unwrap();
        // Fit on 0..5 (mean 2), score on 5..10: -(9 + 16 + 25 + 36 + 49); and mirrored.
        assert_eq!(cv.scores[0], vec![-135.0, -135.0]);
        // Offset 1: mean 3 on 5..10 gives -(4 + 9 + 16 + 25 + 36); mean 8 on 0..5 gives -(64 + 49 + 36 + 25 + 16).
        assert_eq!(cv.scores[2], vec![-90.0, -190.0]);
        assert_eq!(cv.mean_scores, vec![-135.0, f64::NEG_INFINITY, -140.0]);
        assert_eq!(cv.best, 0);
        assert_eq!(cv.failures.iter().map(|f| (f.candidate, f.split)).collect::<Vec<_>>(), vec![(1, 0), (1, 1)]);
        assert!(matches!(cv.failures[0].error, Error::NotConverged { .. }));
        // Splits that do not fit the data, or no candidates, are errors.
        let far = Splits::holdout(vec![0], vec![10]).unwrap();
        assert!(matches!(cross_validate(&Device::cpu(), &candidates, &data, &far, sse), Err(Error::IndexOutOfRange { .. })));
        assert!(cross_validate(&Device::cpu(), &candidates[..0], &data, &splits, sse).is_err());
        // Shuffled folds score exactly the index sets `Splits::indices` gives.
        let k_fold = Splits::k_fold(3).unwrap().seed(5);
        let as_fixed = Splits::fixed(k_fold.indices(10).unwrap().into_iter().map(|f| (f.train, f.held_out))).unwrap();
        let a = cross_validate(&Device::cpu(), &candidates, &data, &k_fold, sse).unwrap();
        let b = cross_validate(&Device::cpu(), &candidates, &data, &as_fixed, sse).unwrap();
        assert_eq!(a, b);
        assert_ne!(a.scores[0], cross_validate(&Device::cpu(), &candidates, &data, &k_fold.clone().seed(6), sse).unwrap().scores[0]);
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
