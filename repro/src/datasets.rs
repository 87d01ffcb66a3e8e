//! Loading tabular data and the evaluation plumbing shared by the examples
//! and reproductions: CSV files, splits, standardisation, metrics.
//!
//! The data sets of the papers live outside the repository (see
//! `../shared/data/README.md` in the development tree); every loader takes a
//! path and fails with [`DatasetError::Missing`] when the file is not there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nalgebra::{DMatrix, DVector};
use rand::seq::SliceRandom;
use rand::{rngs::StdRng, SeedableRng};
use thiserror::Error;

mod term_counts;
pub use term_counts::{load_term_count_views, load_three_sources, load_triplet_views, log_cosine_normalize, read_triplets, TermCountError, TermCountViews, TripletFault, MAX_DENSE_ENTRIES, THREE_SOURCES_VIEWS};

/// Errors while loading or splitting data.
#[derive(Debug, Error)]
pub enum DatasetError {
    /// The file does not exist.
    #[error("data file {0} not found (point the example at your copy of the data)")]
    Missing(PathBuf),
    /// The file could not be parsed.
    #[error("cannot parse {path}: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// Split fractions or sizes make no sense.
    #[error("invalid split: {0}")]
    InvalidSplit(String),
    /// A value is NaN or infinite (in a file, or given to a metric).
    #[error("{what} holds a NaN or infinite value at index {index}")]
    NonFinite {
        /// Which values.
        what: &'static str,
        /// Index of the first such value (row-major in a file).
        index: usize,
    },
    /// The label column asked of [`read_csv_table`] is not in the file.
    #[error("{path} has no column {column}")]
    NoSuchColumn {
        /// The file.
        path: PathBuf,
        /// The index or name asked for.
        column: String,
    },
    /// A label was asked of a table read without one ([`LabelColumn::None`]).
    #[error("the table was read without a label column")]
    NoLabelColumn,
    /// Two sequences that must be paired entry by entry have different lengths.
    #[error("length mismatch: {what} (expected {expected}, found {found})")]
    LengthMismatch {
        /// Which sequences.
        what: &'static str,
        /// The length of the first.
        expected: usize,
        /// The length found.
        found: usize,
    },
}

/// Which column of a CSV file [`read_csv_table`] takes as the label (or
/// regression target). There is no default: a file without labels read
/// with [`LabelColumn::Last`] would lose its last feature to the label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelColumn {
    /// No label: every column is a feature.
    None,
    /// The last column.
    Last,
    /// The column at this index (from 0).
    Index(usize),
    /// The column with this header name (the first such column).
    Name(String),
}

/// A table of numbers: features and, where asked for, a label column.
#[derive(Debug, Clone)]
pub struct Table {
    /// Column names of the features (header row).
    pub feature_names: Vec<String>,
    /// Features, one sample per row (every column but the label's).
    pub features: DMatrix<f64>,
    /// The label (or regression target) column, `None` when read with
    /// [`LabelColumn::None`].
    pub target: Option<DVector<f64>>,
}

impl Table {
    /// The label column.
    ///
    /// Errors: [`DatasetError::NoLabelColumn`] for a table read with
    /// [`LabelColumn::None`].
    pub fn target(&self) -> Result<&DVector<f64>, DatasetError> {
        self.target.as_ref().ok_or(DatasetError::NoLabelColumn)
    }
}

/// Reads a CSV file with a header row; every column must be numeric;
/// `label` says which column, if any, is returned as `target` (the others
/// are `features`, in file order).
///
/// Errors: [`DatasetError::Missing`] for a path that does not exist;
/// [`DatasetError::Parse`] for unreadable or invalid UTF-8 input, no
/// column, no feature column besides the label, ragged rows, a field that
/// is not a finite `f64` (NaN, `inf`, `1e400` included) and a file without
/// data rows; [`DatasetError::NoSuchColumn`] for a label index or name the
/// header does not have. A leading UTF-8 byte-order mark is ignored.
pub fn read_csv_table(path: impl AsRef<Path>, label: LabelColumn) -> Result<Table, DatasetError> {
    let path = path.as_ref();
    if !path.exists() {
        return Err(DatasetError::Missing(path.to_path_buf()));
    }
    let parse_err = |reason: String| DatasetError::Parse { path: path.to_path_buf(), reason };
    let mut reader = csv::Reader::from_path(path).map_err(|e| parse_err(e.to_string()))?;
    let header: Vec<String> = reader.headers().map_err(|e| parse_err(e.to_string()))?.iter().map(str::to_string).collect();
    let cols = header.len();
    let label_at = match &label {
        LabelColumn::None => None,
        LabelColumn::Last => Some(cols.checked_sub(1).ok_or_else(|| parse_err("no columns".into()))?),
        LabelColumn::Index(i) => Some(*i).filter(|&i| i < cols).map(Some).ok_or_else(|| DatasetError::NoSuchColumn { path: path.to_path_buf(), column: format!("index {i} of {cols} columns") })?,
        LabelColumn::Name(name) => Some(header.iter().position(|h| h == name).ok_or_else(|| DatasetError::NoSuchColumn { path: path.to_path_buf(), column: format!("{name:?}") })?),
    };
    let n_features = cols - usize::from(label_at.is_some());
    if n_features == 0 {
        return Err(parse_err(if label_at.is_some() { "need at least one feature column besides the label".into() } else { "no columns".into() }));
    }
    let mut values = Vec::new();
    let mut targets = Vec::new();
    let mut rows = 0usize;
    for (r, record) in reader.records().enumerate() {
        let record = record.map_err(|e| parse_err(e.to_string()))?;
        if record.len() != cols {
            return Err(parse_err(format!("row {} has {} fields, header has {cols}", r + 1, record.len())));
        }
        for (c, field) in record.iter().enumerate() {
            let v: f64 = field.trim().parse().map_err(|_| parse_err(format!("row {} column {c}: not a number: {field:?}", r + 1)))?;
            if !v.is_finite() {
                return Err(parse_err(format!("row {} column {c}: {field:?} is not a finite number (NaN, infinity, or beyond the f64 range)", r + 1)));
            }
            if Some(c) == label_at {
                targets.push(v);
            } else {
                values.push(v);
            }
        }
        rows += 1;
    }
    if rows == 0 {
        return Err(parse_err("no data rows".into()));
    }
    Ok(Table {
        feature_names: header.into_iter().enumerate().filter(|&(c, _)| Some(c) != label_at).map(|(_, h)| h).collect(),
        features: DMatrix::from_row_slice(rows, n_features, &values),
        target: label_at.map(|_| DVector::from_vec(targets)),
    })
}

/// Rows `idx` of `m`, in that order.
///
/// Errors: an index `>= m.nrows()` ([`gramian::Error::IndexOutOfRange`]).
pub fn select_rows(m: &DMatrix<f64>, idx: &[usize]) -> Result<DMatrix<f64>, gramian::Error> {
    check_selection("rows", idx, m.nrows())?;
    Ok(DMatrix::from_fn(idx.len(), m.ncols(), |i, j| m[(idx[i], j)]))
}

/// Entries `idx` of `v`, in that order.
///
/// Errors: an index `>= v.len()` ([`gramian::Error::IndexOutOfRange`]).
pub fn select_entries(v: &DVector<f64>, idx: &[usize]) -> Result<DVector<f64>, gramian::Error> {
    check_selection("entries", idx, v.len())?;
    Ok(DVector::from_fn(idx.len(), |i, _| v[idx[i]]))
}

fn check_selection(what: &'static str, idx: &[usize], len: usize) -> Result<(), gramian::Error> {
    match idx.iter().find(|&&i| i >= len) {
        Some(&index) => Err(gramian::Error::IndexOutOfRange { what, index, len }),
        None => Ok(()),
    }
}

/// Index sets of a train/validation/test split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// Training rows.
    pub train: Vec<usize>,
    /// Validation rows.
    pub validation: Vec<usize>,
    /// Test rows.
    pub test: Vec<usize>,
}

fn check_fractions(train: f64, validation: f64) -> Result<(), DatasetError> {
    if !(train > 0.0 && validation >= 0.0 && train + validation < 1.0) {
        return Err(DatasetError::InvalidSplit(format!("fractions train {train}, validation {validation} must be > 0, >= 0 and sum below 1")));
    }
    Ok(())
}

/// A random split of `n` rows: `train` and `validation` fractions, the rest test.
pub fn random_split(n: usize, train: f64, validation: f64, seed: u64) -> Result<Split, DatasetError> {
    check_fractions(train, validation)?;
    let mut idx: Vec<usize> = (0..n).collect();
    idx.shuffle(&mut StdRng::seed_from_u64(seed));
    let n_train = (train * n as f64).round() as usize;
    let n_val = (validation * n as f64).round() as usize;
    if n_train == 0 || n_train + n_val >= n {
        return Err(DatasetError::InvalidSplit(format!("{n} rows are too few for this split")));
    }
    Ok(Split { train: idx[..n_train].to_vec(), validation: idx[n_train..n_train + n_val].to_vec(), test: idx[n_train + n_val..].to_vec() })
}

/// A split stratified by class label: each class is split with the same
/// fractions, so class proportions are kept in every part.
///
/// Labels may be any `usize` values (not necessarily `0..n_classes`): the
/// work is proportional to the number of rows, not to the largest label.
pub fn stratified_split(labels: &[usize], train: f64, validation: f64, seed: u64) -> Result<Split, DatasetError> {
    check_fractions(train, validation)?;
    let mut rng = StdRng::seed_from_u64(seed);
    // Rows of each distinct label, in ascending label order and ascending row
    // order within a class (the order in which the random draws are made).
    let mut classes: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, &c) in labels.iter().enumerate() {
        classes.entry(c).or_default().push(i);
    }
    let mut split = Split { train: Vec::new(), validation: Vec::new(), test: Vec::new() };
    for mut idx in classes.into_values() {
        idx.shuffle(&mut rng);
        let n = idx.len();
        let n_train = (train * n as f64).round() as usize;
        let n_val = (validation * n as f64).round() as usize;
        split.train.extend_from_slice(&idx[..n_train.min(n)]);
        split.validation.extend_from_slice(&idx[n_train.min(n)..(n_train + n_val).min(n)]);
        split.test.extend_from_slice(&idx[(n_train + n_val).min(n)..]);
    }
    for part in [&mut split.train, &mut split.validation, &mut split.test] {
        part.shuffle(&mut rng);
    }
    Ok(split)
}

/// Per-column standardisation fitted on training data.
#[derive(Debug, Clone)]
pub struct Standardizer {
    /// Column means of the training data.
    pub mean: DVector<f64>,
    /// Column standard deviations (1 for constant columns).
    pub scale: DVector<f64>,
}

impl Standardizer {
    /// Fits means and standard deviations on `train` (rows are samples).
    pub fn fit(train: &DMatrix<f64>) -> Self {
        let n = train.nrows().max(1) as f64;
        let mean = DVector::from_fn(train.ncols(), |j, _| train.column(j).sum() / n);
        let scale = DVector::from_fn(train.ncols(), |j, _| {
            let var = train.column(j).iter().map(|v| (v - mean[j]).powi(2)).sum::<f64>() / n;
            if var > 1e-24 { var.sqrt() } else { 1.0 }
        });
        Standardizer { mean, scale }
    }

    /// `(x - mean) / scale`, column by column.
    pub fn transform(&self, x: &DMatrix<f64>) -> DMatrix<f64> {
        DMatrix::from_fn(x.nrows(), x.ncols(), |i, j| (x[(i, j)] - self.mean[j]) / self.scale[j])
    }
}

/// Macro-averaged F1 score over the classes present in `truth` or `predicted`
/// (0 when both are empty).
///
/// # Panics
///
/// When `truth` and `predicted` have different lengths; [`try_macro_f1`]
/// returns [`DatasetError::LengthMismatch`] instead.
pub fn macro_f1(truth: &[usize], predicted: &[usize]) -> f64 {
    match try_macro_f1(truth, predicted) {
        Ok(f1) => f1,
        Err(e) => panic!("macro_f1: {e}"),
    }
}

/// Macro-averaged F1 score over the distinct classes present in `truth` or
/// `predicted` (any `usize` labels; the work is proportional to the number of
/// entries times the number of distinct classes, not to the largest label),
/// or [`DatasetError::LengthMismatch`] when the lengths differ.
pub fn try_macro_f1(truth: &[usize], predicted: &[usize]) -> Result<f64, DatasetError> {
    if truth.len() != predicted.len() {
        return Err(DatasetError::LengthMismatch { what: "predictions vs true labels", expected: truth.len(), found: predicted.len() });
    }
    gramian::data::macro_f1(truth, predicted).map_err(|_| DatasetError::LengthMismatch { what: "predictions vs true labels", expected: truth.len(), found: predicted.len() })
}

/// Root mean squared error (0 for empty vectors).
///
/// # Panics
///
/// When the lengths differ; [`try_rmse`] returns [`DatasetError::LengthMismatch`] instead.
pub fn rmse(truth: &DVector<f64>, predicted: &DVector<f64>) -> f64 {
    match try_rmse(truth, predicted) {
        Ok(e) => e,
        Err(e) => panic!("rmse: {e}"),
    }
}

/// Root mean squared error (0 for empty vectors), computed with the
/// differences scaled by their largest magnitude so that squares of large
/// finite errors do not overflow.
///
/// Errors: [`DatasetError::LengthMismatch`] when the lengths differ,
/// [`DatasetError::NonFinite`] for NaN/Inf in either vector or a difference
/// beyond the `f64` range (e.g. `1e308 - (-1e308)`).
pub fn try_rmse(truth: &DVector<f64>, predicted: &DVector<f64>) -> Result<f64, DatasetError> {
    if truth.len() != predicted.len() {
        return Err(DatasetError::LengthMismatch { what: "predictions vs true values", expected: truth.len(), found: predicted.len() });
    }
    for (what, v) in [("true values", truth), ("predictions", predicted)] {
        if let Some(index) = v.iter().position(|x| !x.is_finite()) {
            return Err(DatasetError::NonFinite { what, index });
        }
    }
    let diff = truth - predicted;
    if let Some(index) = diff.iter().position(|x| !x.is_finite()) {
        return Err(DatasetError::NonFinite { what: "difference of true value and prediction (overflow)", index });
    }
    let scale = diff.amax();
    if scale == 0.0 {
        return Ok(0.0);
    }
    Ok(scale * ((diff / scale).norm_squared() / truth.len() as f64).sqrt())
}

/// Mean and (population) standard deviation of a list of figures.
pub fn mean_std(values: &[f64]) -> (f64, f64) {
    let n = values.len().max(1) as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CSV file in the temporary folder.
    fn temp_csv(name: &str, text: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!("gramian-repro-{}-{name}.csv", std::process::id()));
        std::fs::write(&path, text).unwrap();
        path
    }

    /// The label column is the one asked for (none, last, by index, by
    /// name); every other column stays a feature, in file order; a column
    /// that is not there and a table with no feature besides the label are
    /// typed errors.
    #[test]
    fn the_label_column_is_explicit() {
        let path = temp_csv("labels", "a,b,c\n1,2,3\n4,5,6\n");
        let none = read_csv_table(&path, LabelColumn::None).unwrap();
        assert_eq!((none.features.ncols(), none.feature_names.clone()), (3, vec!["a".to_string(), "b".into(), "c".into()]));
        assert!(none.target.is_none());
        assert!(matches!(none.target(), Err(DatasetError::NoLabelColumn)));
        let last = read_csv_table(&path, LabelColumn::Last).unwrap();
        assert_eq!(last.features, DMatrix::from_row_slice(2, 2, &[1.0, 2.0, 4.0, 5.0]));
        assert_eq!(last.target().unwrap().as_slice(), &[3.0, 6.0]);
        let middle = read_csv_table(&path, LabelColumn::Index(1)).unwrap();
        assert_eq!((middle.features.clone(), middle.feature_names.clone()), (DMatrix::from_row_slice(2, 2, &[1.0, 3.0, 4.0, 6.0]), vec!["a".to_string(), "c".into()]));
        assert_eq!(middle.target().unwrap().as_slice(), &[2.0, 5.0]);
        let named = read_csv_table(&path, LabelColumn::Name("a".into())).unwrap();
        assert_eq!(named.target().unwrap().as_slice(), &[1.0, 4.0]);
        assert!(matches!(read_csv_table(&path, LabelColumn::Index(3)), Err(DatasetError::NoSuchColumn { .. })));
        assert!(matches!(read_csv_table(&path, LabelColumn::Name("d".into())), Err(DatasetError::NoSuchColumn { .. })));
        let single = temp_csv("single", "y\n1\n2\n");
        assert!(matches!(read_csv_table(&single, LabelColumn::Last), Err(DatasetError::Parse { .. })));
        assert_eq!(read_csv_table(&single, LabelColumn::None).unwrap().features.ncols(), 1);
    }

    #[test]
    fn stratified_split_keeps_proportions_and_partitions() {
        let labels: Vec<usize> = (0..100).map(|i| i % 4).collect();
        let s = stratified_split(&labels, 0.6, 0.2, 7).unwrap();
        assert_eq!(s.train.len() + s.validation.len() + s.test.len(), 100);
        let mut all: Vec<usize> = s.train.iter().chain(&s.validation).chain(&s.test).copied().collect();
        all.sort();
        assert_eq!(all, (0..100).collect::<Vec<_>>());
        for c in 0..4 {
            assert_eq!(s.train.iter().filter(|&&i| labels[i] == c).count(), 15);
        }
    }

    #[test]
    fn macro_f1_exact_small_case() {
        // class 0: tp 1, fp 1, fn 0 -> 2/3; class 1: tp 1, fp 0, fn 1 -> 2/3.
        assert!((macro_f1(&[0, 1, 1], &[0, 0, 1]) - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(macro_f1(&[2, 1, 0], &[2, 1, 0]), 1.0);
    }

    #[test]
    fn standardizer_centres_and_scales() {
        let x = DMatrix::from_row_slice(3, 2, &[1.0, 5.0, 2.0, 5.0, 3.0, 5.0]);
        let s = Standardizer::fit(&x);
        let t = s.transform(&x);
        assert!((t.column(0).sum()).abs() < 1e-12);
        assert!((t.column(0).norm_squared() / 3.0 - 1.0).abs() < 1e-12);
        assert!(t.column(1).iter().all(|&v| v == 0.0));
    }

        #[test]
    fn missing_file_is_a_clear_error() {
        assert!(matches!(read_csv_table("/nonexistent/x.csv", LabelColumn::Last), Err(DatasetError::Missing(_))));
    }
}
