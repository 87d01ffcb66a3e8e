//! Training data the estimators share: [`MultiSource`], `Q >= 2` sources
//! (source `q` an `N_q x d_q` matrix with one sample per row), the input of
//! eKSVD, and [`Labelled`], paired sources with one class label per sample,
//! the input of Neural eKSVD.

use nalgebra::DMatrix;

use crate::error::{Error, Result};
use crate::input::AsMatrix;

/// `Q >= 2` data sources `X_q` (`N_q x d_q`, rows are samples), validated on
/// construction: every source non-empty and finite. Feature dimensions `d_q`
/// may differ. Sample counts `N_q` may differ too (the dual problem of Eq. 4
/// only needs the rectangular blocks `K_pq`), unless the sources are
/// *paired* (row `i` of every source describes the same object), which
/// [`MultiSource::paired`] checks and per-sample outputs (concatenated
/// scores for a downstream classifier) need.
#[derive(Debug, Clone)]
pub struct MultiSource {
    sources: Vec<DMatrix<f64>>,
    paired: bool,
}

impl MultiSource {
    /// Unpaired sources: `N_q` may differ.
    ///
    /// The sources are any one [`AsMatrix`] type (`DMatrix<f64>`, moved
    /// without a copy; views, [`RowMajor`](crate::input::RowMajor) slices,
    /// `ndarray` arrays, `&` of any of these, each converted once;
    /// `Box<dyn AsMatrix<Elem = f64>>` to mix types).
    ///
    /// Errors: [`Error::TooFewSources`], [`Error::EmptySource`],
    /// [`Error::NonFiniteSource`].
    pub fn new<X: AsMatrix<Elem = f64>>(sources: Vec<X>) -> Result<Self> {
        if sources.len() < 2 {
            return Err(Error::TooFewSources(sources.len()));
        }
        let sources = sources.into_iter().map(AsMatrix::into_matrix).collect::<Result<Vec<_>>>()?;
        for (q, x) in sources.iter().enumerate() {
            check_source_matrix("data", q, x)?;
        }
        Ok(MultiSource { sources, paired: false })
    }

    /// Paired sources: additionally every source has the same number of rows.
    ///
    /// Errors: those of [`MultiSource::new`] and [`Error::ShapeMismatch`].
    pub fn paired<X: AsMatrix<Elem = f64>>(sources: Vec<X>) -> Result<Self> {
        let mut data = MultiSource::new(sources)?;
        let n = data.sources[0].nrows();
        for (q, x) in data.sources.iter().enumerate() {
            check_shape(format!("rows of paired source {q} vs source 0"), n, x.nrows())?;
        }
        data.paired = true;
        Ok(data)
    }

    /// True when built with [`MultiSource::paired`].
    pub fn is_paired(&self) -> bool {
        self.paired
    }

    /// Number of sources `Q`.
    pub fn n_sources(&self) -> usize {
        self.sources.len()
    }

    /// Source `q` (`N_q x d_q`).
    ///
    /// # Panics
    ///
    /// If `q >= Q`; [`MultiSource::try_source`] returns an error instead.
    pub fn source(&self, q: usize) -> &DMatrix<f64> {
        &self.sources[q]
    }

    /// Source `q`, or [`Error::InvalidParameter`] (`q`) if `q >= Q`.
    pub fn try_source(&self, q: usize) -> Result<&DMatrix<f64>> {
        self.sources.get(q).ok_or_else(|| Error::InvalidParameter { name: "q", reason: format!("source {q} of {}", self.sources.len()) })
    }

    /// All sources.
    pub fn sources(&self) -> &[DMatrix<f64>] {
        &self.sources
    }

    /// The sources side by side, row `i` of every source in row `i` (the
    /// concatenation baseline's input). Errors: sources with different
    /// numbers of rows ([`Error::ShapeMismatch`]).
    pub fn concatenated(&self) -> Result<DMatrix<f64>> {
        let n = self.source(0).nrows();
        for (q, x) in self.sources().iter().enumerate() {
            check_shape(format!("rows of source {q} vs source 0 (concatenation)"), n, x.nrows())?;
        }
        let cols: usize = self.sources().iter().map(|x| x.ncols()).sum();
        let mut out = DMatrix::zeros(n, cols);
        let mut c0 = 0;
        for x in self.sources() {
            out.columns_mut(c0, x.ncols()).copy_from(x);
            c0 += x.ncols();
        }
        Ok(out)
    }

    /// Sample counts `N_q`.
    pub fn sample_counts(&self) -> Vec<usize> {
        self.sources.iter().map(|x| x.nrows()).collect()
    }

    /// Total samples `sum_q N_q` (the order of the dual matrix `G_Q`).
    pub fn total_samples(&self) -> usize {
        self.sources.iter().map(|x| x.nrows()).sum()
    }

    /// The same rows `idx` of every source of a paired set (e.g. a split).
    ///
    /// Errors: [`Error::NotAvailable`] for unpaired sources,
    /// [`Error::InvalidParameter`] for an empty or out-of-range index list.
    pub fn select_rows(&self, idx: &[usize]) -> Result<MultiSource> {
        if !self.paired {
            return Err(Error::NotAvailable("row selection across sources needs paired sources"));
        }
        let n = self.sources[0].nrows();
        if idx.is_empty() || idx.iter().any(|&i| i >= n) {
            return Err(Error::InvalidParameter { name: "idx", reason: format!("must be non-empty with every index < {n}") });
        }
        let sources = self.sources.iter().map(|x| DMatrix::from_fn(idx.len(), x.ncols(), |i, j| x[(idx[i], j)])).collect();
        Ok(MultiSource { sources, paired: true })
    }

    /// Consumes the set, returning the sources.
    pub fn into_sources(self) -> Vec<DMatrix<f64>> {
        self.sources
    }
}

/// The largest number of classes [`Labelled`] data may have (labels in
/// `0..MAX_CLASSES`): a classifier's output layer and one-hot targets have
/// one column per class, so a stray label such as `1e12` must not size them.
pub const MAX_CLASSES: usize = 1 << 16;

/// Paired sources with one class label per sample (row `i` of every source
/// has label `labels[i]`), validated on construction. The number of classes
/// is `max label + 1`, at least 2 and at most [`MAX_CLASSES`].
#[derive(Debug, Clone)]
pub struct Labelled {
    sources: MultiSource,
    labels: Vec<usize>,
    n_classes: usize,
}

impl Labelled {
    /// Pairs `sources` with `labels`.
    ///
    /// Errors: unpaired sources, a label not below [`MAX_CLASSES`] or fewer
    /// than 2 classes ([`Error::Labels`]); a label count other than the
    /// number of samples ([`Error::ShapeMismatch`]).
    pub fn new(sources: MultiSource, labels: Vec<usize>) -> Result<Self> {
        if !sources.is_paired() {
            return Err(Error::Labels("labelled data needs paired sources (one label per sample)".into()));
        }
        check_shape("labels vs samples", sources.source(0).nrows(), labels.len())?;
        if let Some(&l) = labels.iter().find(|&&l| l >= MAX_CLASSES) {
            return Err(Error::Labels(format!("label {l} is not below MAX_CLASSES = {MAX_CLASSES}")));
        }
        let n_classes = labels.iter().max().map_or(0, |m| m + 1);
        if n_classes < 2 {
            return Err(Error::Labels(format!("need at least 2 classes, got {n_classes}")));
        }
        Ok(Labelled { sources, labels, n_classes })
    }

    /// The sources (paired).
    pub fn sources(&self) -> &MultiSource {
        &self.sources
    }

    /// The label of each sample.
    pub fn labels(&self) -> &[usize] {
        &self.labels
    }

    /// Number of classes, `max label + 1` of the set it was built from
    /// ([`Labelled::select`] keeps it).
    pub fn n_classes(&self) -> usize {
        self.n_classes
    }

    /// Number of samples `N`.
    pub fn n_samples(&self) -> usize {
        self.labels.len()
    }

    /// The samples `idx` (in that order) with their labels; the number of
    /// classes stays that of `self`, so that every part of a split has the
    /// same classes.
    ///
    /// Errors: those of [`MultiSource::select_rows`].
    pub fn select(&self, idx: &[usize]) -> Result<Labelled> {
        let sources = self.sources.select_rows(idx)?;
        Ok(Labelled { sources, labels: idx.iter().map(|&i| self.labels[i]).collect(), n_classes: self.n_classes })
    }

    /// Consumes the set, returning the sources and the labels.
    pub fn into_parts(self) -> (MultiSource, Vec<usize>) {
        (self.sources, self.labels)
    }
}

/// Checks one per-source matrix: non-empty and finite.
pub(crate) fn check_source_matrix(what: &'static str, source_index: usize, m: &nalgebra::DMatrix<f64>) -> Result<()> {
    if m.nrows() == 0 || m.ncols() == 0 {
        return Err(Error::EmptySource { what, source_index, rows: m.nrows(), cols: m.ncols() });
    }
    let rows = m.nrows();
    if let Some(pos) = m.as_slice().iter().position(|v| !v.is_finite()) {
        return Err(Error::NonFiniteSource { what, source_index, row: pos % rows, col: pos / rows });
    }
    Ok(())
}

/// Fails with [`Error::ShapeMismatch`] unless `expected == found`.
pub(crate) fn check_shape(what: impl Into<String>, expected: usize, found: usize) -> Result<()> {
    if expected != found {
        return Err(Error::ShapeMismatch { what: what.into(), expected, found });
    }
    Ok(())
}

/// Macro-averaged F1 score of `predicted` against `truth`: the mean over the
/// distinct classes present in either of `2 tp / (2 tp + fp + fn)` (0 for no
/// samples; any `usize` labels, work proportional to the entries times the
/// distinct classes).
///
/// Errors: [`Error::ShapeMismatch`] when the lengths differ.
pub fn macro_f1(truth: &[usize], predicted: &[usize]) -> Result<f64> {
    check_shape("predictions vs true labels", truth.len(), predicted.len())?;
    // (tp, fp, fn) per distinct class.
    let mut counts: std::collections::BTreeMap<usize, (usize, usize, usize)> = std::collections::BTreeMap::new();
    for (&t, &p) in truth.iter().zip(predicted) {
        if t == p {
            counts.entry(t).or_default().0 += 1;
        } else {
            counts.entry(p).or_default().1 += 1;
            counts.entry(t).or_default().2 += 1;
        }
    }
    let total: f64 = counts.values().map(|&(tp, fp, fneg)| 2.0 * tp as f64 / (2.0 * tp as f64 + fp as f64 + fneg as f64)).sum();
    Ok(if counts.is_empty() { 0.0 } else { total / counts.len() as f64 })
}
