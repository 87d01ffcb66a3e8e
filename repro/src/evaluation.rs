//! The evaluation harness of the reproductions: multi-view data sets, splits
//! with each view standardised on its training part, hyperparameter selection
//! on validation, and test macro-F1 of a downstream classifier.
//!
//! The classifier is passed in as a closure, so the harness does not depend
//! on a particular machine-learning crate; the reproductions use the paper's
//! downstream classifier, a one-vs-rest linear SVM ([`linear_svm`]).

use std::path::Path;

use nalgebra::DMatrix;
use thiserror::Error;

use gramian::Error;
use gramian::MultiSource;
use crate::datasets::{read_csv_table, stratified_split, LabelColumn, try_macro_f1, DatasetError, Split, Standardizer};

pub mod choice;
pub use choice::{choose_representation, score_choice, Choice, FitCache, RepresentationFamily, SelectionGrid};
pub mod grid;
pub use grid::{Axis, GridOutcome, GridSearch};
pub mod linear_svm;
pub use linear_svm::{linear_svm_classifier, LinearSvm, LinearSvmParams};

/// Errors of the evaluation harness.
#[derive(Debug, Error)]
pub enum EvaluationError {
    /// Loading or splitting the data failed.
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    /// Fitting or applying a model failed.
    #[error(transparent)]
    Eksvd(#[from] Error),
    /// The views disagree (sample counts or labels), a label is not an
    /// integer in `0..=MAX_LABEL`, or a split indexes rows that do not exist.
    #[error("inconsistent views: {0}")]
    InconsistentViews(String),
    /// The classifier failed.
    #[error("classifier failed: {0}")]
    Classifier(String),
    /// No candidate to select from.
    #[error("nothing to select: {0}")]
    NoCandidates(&'static str),
    /// A parameter of the harness is out of range (e.g. the number of
    /// cross-validation folds).
    #[error("invalid parameter {name}: {reason}")]
    InvalidParameter {
        /// The parameter.
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// Result type of the harness.
pub type Result<T, E = EvaluationError> = std::result::Result<T, E>;

/// The largest class label [`MultiViewData::load_csv_views`] accepts
/// (`u32::MAX`); larger values (e.g. `1e12`, `1e300`) are reported as
/// [`EvaluationError::InconsistentViews`] instead of being cast (saturated)
/// to `usize`.
pub const MAX_LABEL: f64 = u32::MAX as f64;

/// Paired views of the same samples with integer class labels.
#[derive(Debug, Clone)]
pub struct MultiViewData {
    /// Names of the views.
    pub view_names: Vec<String>,
    /// The views, `N x d_q` each, rows in the same sample order.
    pub views: Vec<DMatrix<f64>>,
    /// Class of each sample, `0..n_classes`.
    pub labels: Vec<usize>,
}

impl MultiViewData {
    /// Loads `dir/{prefix}{name}.csv` for each name (CSV with a header, the
    /// last column the label, an integer in `0..=`[`MAX_LABEL`]; e.g. UCI
    /// Multiple Features, prefix `mfeat-`), checking that all views have the
    /// same samples and labels.
    pub fn load_csv_views(dir: impl AsRef<Path>, prefix: &str, names: &[&str]) -> Result<Self> {
        let mut views = Vec::new();
        let mut labels: Option<Vec<usize>> = None;
        for name in names {
            let table = read_csv_table(dir.as_ref().join(format!("{prefix}{name}.csv")), LabelColumn::Last)?;
            let these: Vec<usize> = table
                .target()?
                .iter()
                .map(|&v| {
                    if (0.0..=MAX_LABEL).contains(&v) && v.fract() == 0.0 {
                        Ok(v as usize)
                    } else {
                        Err(EvaluationError::InconsistentViews(format!("label {v} of view {name} is not an integer in 0..={MAX_LABEL}")))
                    }
                })
                .collect::<Result<_>>()?;
            match &labels {
                None => labels = Some(these),
                Some(l) if *l != these => return Err(EvaluationError::InconsistentViews(format!("labels of view {name} differ from view {}", names[0]))),
                Some(_) => {}
            }
            views.push(table.features);
        }
        let labels = labels.ok_or(EvaluationError::NoCandidates("no views named"))?;
        Ok(MultiViewData { view_names: names.iter().map(|s| s.to_string()).collect(), views, labels })
    }

    /// A stratified train/validation/test split (fractions of the samples),
    /// each view standardised with means and deviations of its training rows.
    ///
    /// Errors: [`EvaluationError::InconsistentViews`] when there are no views
    /// or the views and labels disagree on the number of samples.
    pub fn split(&self, train: f64, validation: f64, seed: u64) -> Result<SplitData> {
        self.check_consistent()?;
        let split = stratified_split(&self.labels, train, validation, seed)?;
        self.apply_split(&split)
    }

    /// Fails unless there is at least one view and every view has one row
    /// per label (the fields are public, so this is checked at use).
    fn check_consistent(&self) -> Result<()> {
        if self.views.is_empty() {
            return Err(EvaluationError::InconsistentViews("no views".into()));
        }
        for (q, view) in self.views.iter().enumerate() {
            if view.nrows() != self.labels.len() {
                return Err(EvaluationError::InconsistentViews(format!("view {q} has {} rows for {} labels", view.nrows(), self.labels.len())));
            }
        }
        Ok(())
    }

    /// The parts of a given split, each view standardised on its training rows.
    ///
    /// Errors: as [`MultiViewData::split`], and
    /// [`EvaluationError::InconsistentViews`] when the split names a row
    /// index beyond the samples.
    pub fn apply_split(&self, split: &Split) -> Result<SplitData> {
        self.apply_split_scaled(split, true)
    }

    /// A stratified split as [`MultiViewData::split`] but with the views as
    /// they are (no standardisation): for views already scaled per sample,
    /// e.g. cosine-normalised term counts, where centring would destroy the
    /// sparsity and the per-document normalisation.
    pub fn split_unscaled(&self, train: f64, validation: f64, seed: u64) -> Result<SplitData> {
        self.check_consistent()?;
        let split = stratified_split(&self.labels, train, validation, seed)?;
        self.apply_split_scaled(&split, false)
    }

    fn apply_split_scaled(&self, split: &Split, standardize: bool) -> Result<SplitData> {
        self.check_consistent()?;
        let n = self.labels.len();
        if let Some(&i) = split.train.iter().chain(&split.validation).chain(&split.test).find(|&&i| i >= n) {
            return Err(EvaluationError::InconsistentViews(format!("split names row {i} of {n} samples")));
        }
        let mut parts: [Vec<DMatrix<f64>>; 3] = Default::default();
        for view in &self.views {
            // In range: checked above.
            let (train, validation, test) = (view.select_rows(&split.train), view.select_rows(&split.validation), view.select_rows(&split.test));
            if standardize {
                let scaler = Standardizer::fit(&train);
                parts[0].push(scaler.transform(&train));
                parts[1].push(scaler.transform(&validation));
                parts[2].push(scaler.transform(&test));
            } else {
                parts[0].push(train);
                parts[1].push(validation);
                parts[2].push(test);
            }
        }
        let [train, validation, test] = parts;
        let pick = |idx: &[usize]| idx.iter().map(|&i| self.labels[i]).collect::<Vec<_>>();
        Ok(SplitData {
            train: MultiSource::paired(train)?,
            validation: MultiSource::paired(validation)?,
            test: MultiSource::paired(test)?,
            train_labels: pick(&split.train),
            validation_labels: pick(&split.validation),
            test_labels: pick(&split.test),
        })
    }
}

/// One split: standardised paired views and labels of each part.
#[derive(Debug, Clone)]
pub struct SplitData {
    /// Training views.
    pub train: MultiSource,
    /// Validation views.
    pub validation: MultiSource,
    /// Test views.
    pub test: MultiSource,
    /// Training labels.
    pub train_labels: Vec<usize>,
    /// Validation labels.
    pub validation_labels: Vec<usize>,
    /// Test labels.
    pub test_labels: Vec<usize>,
}

/// `[a; b]`: the rows of every source of `b` under those of `a`.
fn stack_rows(a: &MultiSource, b: &MultiSource) -> Result<MultiSource> {
    if a.n_sources() != b.n_sources() {
        return Err(EvaluationError::InconsistentViews(format!("{} sources against {}", a.n_sources(), b.n_sources())));
    }
    let mut stacked = Vec::with_capacity(a.n_sources());
    for (q, (top, bottom)) in a.sources().iter().zip(b.sources()).enumerate() {
        if top.ncols() != bottom.ncols() {
            return Err(EvaluationError::InconsistentViews(format!("source {q} has {} columns against {}", top.ncols(), bottom.ncols())));
        }
        let mut m = DMatrix::zeros(top.nrows() + bottom.nrows(), top.ncols());
        m.rows_mut(0, top.nrows()).copy_from(top);
        m.rows_mut(top.nrows(), bottom.nrows()).copy_from(bottom);
        stacked.push(m);
    }
    Ok(MultiSource::paired(stacked)?)
}

impl SplitData {
    /// The training rows followed by the validation rows, with their labels:
    /// the data of a refit once every choice has been made on validation.
    ///
    /// Errors: [`EvaluationError::InconsistentViews`] when the two parts
    /// disagree on the sources or their columns, or a part is not paired.
    pub fn train_and_validation(&self) -> Result<(MultiSource, Vec<usize>)> {
        Ok((stack_rows(&self.train, &self.validation)?, self.train_and_validation_labels()))
    }

    /// The training labels followed by the validation labels, the order of
    /// [`SplitData::train_and_validation`].
    pub fn train_and_validation_labels(&self) -> Vec<usize> {
        self.train_labels.iter().chain(&self.validation_labels).copied().collect()
    }

    /// `folds`-fold cross-validation over the training and validation rows.
    /// With the `n` rows of [`SplitData::train_and_validation`] cut into
    /// `folds` contiguous parts (part `p` is rows `p n / folds` up to
    /// `(p + 1) n / folds`), fold `f` holds out part `folds - 1 - f` as its
    /// validation set and trains on the other rows in their order. The
    /// training rows of a stratified split are in random order, so each part
    /// is a random subset; when the validation set is exactly the last part
    /// (60/20 splits with 4 folds), fold 0 is the split itself. Every fold
    /// keeps the split's test rows, which no choice should look at, and the
    /// views keep the standardisation of the split's training rows.
    ///
    /// Errors: [`EvaluationError::InvalidParameter`] unless
    /// `2 <= folds <= n`; as [`SplitData::train_and_validation`].
    pub fn cross_validation_folds(&self, folds: usize) -> Result<Vec<SplitData>> {
        let (data, labels) = self.train_and_validation()?;
        let n = labels.len();
        if folds < 2 || folds > n {
            return Err(EvaluationError::InvalidParameter { name: "folds", reason: format!("must be in 2..={n} (training and validation rows), got {folds}") });
        }
        // p n / folds <= n, so the product fits whenever n^2 does; u128 keeps it exact.
        let bound = |p: usize| (p as u128 * n as u128 / folds as u128) as usize;
        (0..folds)
            .map(|f| {
                let part = folds - 1 - f;
                let held_out: Vec<usize> = (bound(part)..bound(part + 1)).collect();
                let fitted: Vec<usize> = (0..bound(part)).chain(bound(part + 1)..n).collect();
                Ok(SplitData {
                    train: data.select_rows(&fitted)?,
                    validation: data.select_rows(&held_out)?,
                    test: self.test.clone(),
                    train_labels: fitted.iter().map(|&i| labels[i]).collect(),
                    validation_labels: held_out.iter().map(|&i| labels[i]).collect(),
                    test_labels: self.test_labels.clone(),
                })
            })
            .collect()
    }
}

/// Learned features of the three parts of a split (rows are samples).
#[derive(Debug, Clone)]
pub struct Representation {
    /// Training rows.
    pub train: DMatrix<f64>,
    /// Validation rows.
    pub validation: DMatrix<f64>,
    /// Test rows.
    pub test: DMatrix<f64>,
}

impl Representation {
    /// The first `columns` columns of every part (e.g. fewer components).
    pub fn leading_columns(&self, columns: usize) -> Representation {
        let c = columns.min(self.train.ncols());
        Representation { train: self.train.columns(0, c).into_owned(), validation: self.validation.columns(0, c).into_owned(), test: self.test.columns(0, c).into_owned() }
    }

    /// Each column standardised with the training rows' mean and deviation.
    pub fn standardized(&self) -> Representation {
        let s = Standardizer::fit(&self.train);
        Representation { train: s.transform(&self.train), validation: s.transform(&self.validation), test: s.transform(&self.test) }
    }
}

/// Kernel PCA of the concatenated views of a split, centred in feature space
/// (the paper's KPCA baseline): with `K` the training kernel matrix and
/// `Kc = K - 1K/n - K1/n + 1K1/n^2`, the leading `components` eigenpairs
/// `(s_j, u_j)` of `Kc` map a row `x` to `(k(x, X) - centring) u_j / sqrt(s_j)`.
pub fn kernel_pca(device: &gramian::Device, kernel: &gramian::Kernel, split: &SplitData, components: usize) -> Result<Representation, Error> {
    let xt = split.train.concatenated()?;
    let n = xt.nrows();
    let k = device.kernel_matrix_symmetric(kernel, &xt)?;
    let col_mean = k.row_mean();
    let total = col_mean.mean();
    let centred = DMatrix::from_fn(n, n, |i, j| k[(i, j)] - col_mean[i] - col_mean[j] + total);
    let evd = gramian::linalg::symmetric_eigen(&centred)?;
    let m = evd.eigenvalues.len();
    let kk = components.min(m);
    let proj = DMatrix::from_fn(n, kk, |i, j| evd.eigenvectors[(i, m - 1 - j)] / evd.eigenvalues[m - 1 - j].max(1e-12).sqrt());
    let project = |x: &DMatrix<f64>| -> Result<DMatrix<f64>, Error> {
        let kx = device.kernel_matrix(kernel, x, &xt)?;
        let row_means: Vec<f64> = (0..kx.nrows()).map(|i| kx.row(i).sum() / n as f64).collect();
        Ok(DMatrix::from_fn(kx.nrows(), kx.ncols(), |i, j| kx[(i, j)] - row_means[i] - col_mean[j] + total) * &proj)
    };
    Ok(Representation { train: project(&xt)?, validation: project(&split.validation.concatenated()?)?, test: project(&split.test.concatenated()?)? })
}

/// The selected candidate of one split.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection<P> {
    /// The chosen representation parameters.
    pub params: P,
    /// The chosen classifier regularisation.
    pub classifier_c: f64,
    /// Validation macro-F1 of the choice.
    pub validation_f1: f64,
    /// Test macro-F1 of the choice.
    pub test_f1: f64,
}

/// A classifier: `classify(c, train_x, train_y, [validation_x, test_x])`
/// returns predicted labels for each evaluation matrix, `c` its
/// regularisation constant.
pub type Classify<'a> = dyn Fn(f64, &DMatrix<f64>, &[usize], &[&DMatrix<f64>]) -> Result<Vec<Vec<usize>>> + 'a;

/// `representation` standardised column-wise on its training rows, or as
/// it is.
fn scaled_for_classifier(representation: &Representation, standardize: bool) -> std::borrow::Cow<'_, Representation> {
    if standardize {
        std::borrow::Cow::Owned(representation.standardized())
    } else {
        std::borrow::Cow::Borrowed(representation)
    }
}

/// Picks the candidate (representation parameters and classifier constant)
/// with the best validation macro-F1 and reports its test macro-F1. Each
/// representation is standardised column-wise on its training rows before
/// classification. Ties keep the earlier candidate.
pub fn select_on_validation<P: Clone>(
    split: &SplitData,
    candidates: &[(P, Representation)],
    classifier_cs: &[f64],
    classify: &Classify<'_>,
) -> Result<Selection<P>> {
    select_on_validation_scaled(split, candidates, classifier_cs, classify, true)
}

/// [`select_on_validation`], with the column-wise standardisation of each
/// representation switched by `standardize` (off for e.g. cosine-normalised
/// term counts, whose rare terms standardisation would inflate).
pub fn select_on_validation_scaled<P: Clone>(
    split: &SplitData,
    candidates: &[(P, Representation)],
    classifier_cs: &[f64],
    classify: &Classify<'_>,
    standardize: bool,
) -> Result<Selection<P>> {
    let mut best: Option<Selection<P>> = None;
    for (params, representation) in candidates {
        let r = scaled_for_classifier(representation, standardize);
        for &c in classifier_cs {
            let predictions = classify(c, &r.train, &split.train_labels, &[&r.validation, &r.test])?;
            if predictions.len() != 2 {
                return Err(EvaluationError::Classifier(format!("returned {} prediction sets, expected 2", predictions.len())));
            }
            let validation_f1 = try_macro_f1(&split.validation_labels, &predictions[0])?;
            if best.as_ref().is_none_or(|b| validation_f1 > b.validation_f1) {
                let test_f1 = try_macro_f1(&split.test_labels, &predictions[1])?;
                best = Some(Selection { params: params.clone(), classifier_c: c, validation_f1, test_f1 });
            }
        }
    }
    best.ok_or(EvaluationError::NoCandidates("no representation candidates or classifier constants"))
}

/// The validation macro-F1 of every candidate with every classifier
/// constant: `scores[i][j]` for candidate `i` and `classifier_cs[j]`, each
/// representation standardised column-wise on its training rows when
/// `standardize` is set. Averaged over the folds of
/// [`SplitData::cross_validation_folds`] it is the cross-validated score of
/// each choice (which [`select_on_validation_scaled`] makes on one split).
pub fn validation_scores<P>(split: &SplitData, candidates: &[(P, Representation)], classifier_cs: &[f64], classify: &Classify<'_>, standardize: bool) -> Result<Vec<Vec<f64>>> {
    candidates
        .iter()
        .map(|(_, representation)| {
            let r = scaled_for_classifier(representation, standardize);
            classifier_cs
                .iter()
                .map(|&c| {
                    let predictions = classify(c, &r.train, &split.train_labels, &[&r.validation])?;
                    let validation = predictions.first().ok_or(EvaluationError::Classifier("returned no prediction set".into()))?;
                    Ok(try_macro_f1(&split.validation_labels, validation)?)
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A split whose single-column sources hold each row's own index (and
    /// the index plus 0.5 in the second source), labels `index % 3`.
    fn indexed_split(train: usize, validation: usize) -> SplitData {
        let part = |rows: std::ops::Range<usize>| {
            let a = DMatrix::from_fn(rows.len(), 1, |i, _| (rows.start + i) as f64);
            MultiSource::paired(vec![a.clone(), a.add_scalar(0.5)]).unwrap()
        };
        let labels = |rows: std::ops::Range<usize>| rows.map(|i| i % 3).collect::<Vec<_>>();
        let (t, v) = (0..train, train..train + validation);
        SplitData { train: part(t.clone()), validation: part(v.clone()), test: part(1000..1004), train_labels: labels(t), validation_labels: labels(v), test_labels: vec![0; 4] }
    }

    #[test]
    fn cross_validation_folds_partition_the_training_and_validation_rows() {
        let rows = |m: &MultiSource| m.source(0).iter().map(|&v| v as usize).collect::<Vec<_>>();
        // 60/20 shape: fold 0 is the split itself.
        let split = indexed_split(12, 4);
        let folds = split.cross_validation_folds(4).unwrap();
        assert_eq!(rows(&folds[0].train), (0..12).collect::<Vec<_>>());
        assert_eq!(rows(&folds[0].validation), (12..16).collect::<Vec<_>>());
        assert_eq!(folds[0].validation_labels, split.validation_labels);
        // Uneven parts: every row held out exactly once, part sizes 2 or 3,
        // labels and the second source follow their rows, test rows kept.
        let split = indexed_split(8, 3);
        let folds = split.cross_validation_folds(4).unwrap();
        let mut held: Vec<usize> = folds.iter().flat_map(|f| rows(&f.validation)).collect();
        held.sort_unstable();
        assert_eq!(held, (0..11).collect::<Vec<_>>());
        for fold in &folds {
            let (t, v) = (rows(&fold.train), rows(&fold.validation));
            assert!((2..=3).contains(&v.len()) && t.len() + v.len() == 11 && t.iter().all(|i| !v.contains(i)));
            assert_eq!(fold.train_labels, t.iter().map(|i| i % 3).collect::<Vec<_>>());
            assert_eq!(fold.validation.source(1), &fold.validation.source(0).add_scalar(0.5));
            assert_eq!(rows(&fold.test), vec![1000, 1001, 1002, 1003]);
        }
        for bad in [0, 1, 12] {
            assert!(matches!(split.cross_validation_folds(bad), Err(EvaluationError::InvalidParameter { name: "folds", .. })), "{bad} folds");
        }
        let (stacked, labels) = split.train_and_validation().unwrap();
        assert_eq!((rows(&stacked), labels.len()), ((0..11).collect::<Vec<_>>(), 11));
    }

    #[test]
    fn kernel_pca_scores_are_orthogonal_with_the_eigenvalues_as_norms() {
        // Training scores are U S^(1/2): Z^T Z = diag(s), decreasing.
        let view = |seed: usize, n: usize| DMatrix::from_fn(n, 3, |i, j| (((i * 7 + j * 13 + seed) % 17) as f64) / 17.0 - 0.5);
        let part = |n: usize| MultiSource::paired(vec![view(1, n), view(5, n)]).unwrap();
        let split = SplitData { train: part(40), validation: part(9), test: part(11), train_labels: vec![0; 40], validation_labels: vec![0; 9], test_labels: vec![0; 11] };
        assert_eq!(split.train.concatenated().unwrap().shape(), (40, 6));
        assert_eq!(split.train.concatenated().unwrap().column(4), split.train.source(1).column(1));
        let rep = kernel_pca(&gramian::Device::cpu(), &gramian::Kernel::rbf(0.5).unwrap(), &split, 5).unwrap();
        assert_eq!((rep.train.shape(), rep.validation.shape(), rep.test.shape()), ((40, 5), (9, 5), (11, 5)));
        let g = rep.train.transpose() * &rep.train;
        for i in 0..5 {
            for j in 0..5 {
                if i != j {
                    assert!(g[(i, j)].abs() < 1e-9 * g[(0, 0)], "({i}, {j}): {}", g[(i, j)]);
                }
            }
            if i > 0 {
                assert!(g[(i, i)] <= g[(i - 1, i - 1)] * (1.0 + 1e-12));
            }
        }
        let unpaired = MultiSource::new(vec![view(1, 4), view(2, 5)]).unwrap();
        assert!(unpaired.concatenated().is_err());
    }

    #[test]
    fn selection_picks_the_best_validation_candidate() {
        let views = vec![DMatrix::from_fn(40, 2, |i, j| (i * (j + 1)) as f64), DMatrix::from_fn(40, 3, |i, j| (i + j) as f64 * 0.5)];
        let data = MultiViewData { view_names: vec!["a".into(), "b".into()], views, labels: (0..40).map(|i| i % 2).collect() };
        let split = data.split(0.5, 0.25, 1).unwrap();
        // Training views are standardised.
        let x = split.train.source(0);
        assert!(x.column(1).sum().abs() < 1e-9);
        let rep = |v: f64| Representation {
            train: DMatrix::from_element(split.train_labels.len(), 1, v),
            validation: DMatrix::from_element(split.validation_labels.len(), 1, v),
            test: DMatrix::from_element(split.test_labels.len(), 1, v),
        };
        // A classifier that is perfect only for the candidate marked 2.0 (the
        // constant column standardises to 0, so the mark travels in `c`).
        let truth_val = split.validation_labels.clone();
        let truth_test = split.test_labels.clone();
        let classify = move |c: f64, _: &DMatrix<f64>, _: &[usize], eval: &[&DMatrix<f64>]| -> Result<Vec<Vec<usize>>> {
            Ok(if c == 2.0 { vec![truth_val.clone(), truth_test.clone()] } else { eval.iter().map(|m| vec![0; m.nrows()]).collect() })
        };
        let sel = select_on_validation(&split, &[("only", rep(1.0))], &[1.0, 2.0, 3.0], &classify).unwrap();
        assert_eq!((sel.params, sel.classifier_c, sel.validation_f1, sel.test_f1), ("only", 2.0, 1.0, 1.0));
        // The score table: one row per candidate, one column per constant.
        let scores = validation_scores(&split, &[("only", rep(1.0)), ("again", rep(3.0))], &[1.0, 2.0, 3.0], &classify, false).unwrap();
        let constant = crate::datasets::macro_f1(&split.validation_labels, &vec![0; split.validation_labels.len()]);
        assert!(constant < 1.0);
        assert_eq!(scores, vec![vec![constant, 1.0, constant]; 2]);
    }
}
