//! Training data the estimators share: [`MultiSource`], `Q >= 2` sources
//! (source `q` an `N_q x d_q` matrix with one sample per row), the input of
//! eKSVD, and [`Labelled`], paired sources with one class label per sample,
//! the input of Neural eKSVD.

use std::borrow::Cow;
use std::sync::OnceLock;

use nalgebra::DMatrix;

use crate::error::{Error, Result};
use crate::input::AsMatrix;
use crate::sparse::CsrMatrix;

/// One source as stored: dense, or CSR sparse rows.
#[derive(Debug, Clone)]
enum Source {
    Dense(DMatrix<f64>),
    Sparse(CsrMatrix<f64>),
}

/// A source reads as any matrix input: dense as itself, sparse as its CSR
/// rows (densified only by `as_matrix`).
impl AsMatrix for Source {
    type Elem = f64;
    fn shape(&self) -> (usize, usize) {
        match self {
            Source::Dense(m) => m.shape(),
            Source::Sparse(m) => (m.nrows(), m.ncols()),
        }
    }
    fn as_matrix(&self) -> Result<Cow<'_, DMatrix<f64>>> {
        match self {
            Source::Dense(m) => Ok(Cow::Borrowed(m)),
            Source::Sparse(m) => m.as_matrix(),
        }
    }
    fn as_csr(&self) -> Option<&CsrMatrix<f64>> {
        match self {
            Source::Dense(_) => None,
            Source::Sparse(m) => Some(m),
        }
    }
}

#[derive(Debug, Clone)]
enum Storage {
    /// Every source dense (the sources as given, no copy).
    Dense(Vec<DMatrix<f64>>),
    /// At least one CSR source; the dense copies are made only when a
    /// dense-only accessor ([`MultiSource::sources`]) asks for them.
    Mixed { sources: Vec<Source>, dense: OnceLock<Vec<DMatrix<f64>>> },
}

/// `Q >= 2` data sources `X_q` (`N_q x d_q`, rows are samples), validated on
/// construction: every source non-empty and finite. Feature dimensions `d_q`
/// may differ. Sample counts `N_q` may differ too (the dual problem of Eq. 4
/// only needs the rectangular blocks `K_pq`), unless the sources are
/// *paired* (row `i` of every source describes the same object), which
/// [`MultiSource::paired`] checks and per-sample outputs (concatenated
/// scores for a downstream classifier) need.
///
/// A source given as a [`CsrMatrix`] stays sparse: [`MultiSource::input`]
/// hands it to the sparse-aware code (eKSVD's `fit` and feature maps, the
/// kernel-function coupling; see [`crate::input`]). The dense-only
/// accessors ([`MultiSource::source`], [`MultiSource::sources`],
/// [`MultiSource::concatenated`], [`MultiSource::into_sources`]) densify
/// every source once, on first use.
#[derive(Debug, Clone)]
pub struct MultiSource {
    storage: Storage,
    paired: bool,
}

impl MultiSource {
    /// Unpaired sources: `N_q` may differ.
    ///
    /// The sources are any one [`AsMatrix`] type (`DMatrix<f64>`, moved
    /// without a copy; views, [`RowMajor`](crate::input::RowMajor) slices,
    /// `ndarray` arrays, `&` of any of these, each converted once;
    /// [`CsrMatrix<f64>`], kept sparse; `Box<dyn AsMatrix<Elem = f64>>` to
    /// mix types, e.g. dense and sparse sources).
    ///
    /// Errors: [`Error::TooFewSources`], [`Error::EmptySource`],
    /// [`Error::NonFiniteSource`].
    pub fn new<X: AsMatrix<Elem = f64>>(sources: Vec<X>) -> Result<Self> {
        if sources.len() < 2 {
            return Err(Error::TooFewSources(sources.len()));
        }
        let sources: Vec<Source> = sources
            .into_iter()
            .map(|x| match x.as_csr() {
                Some(m) => Ok(Source::Sparse(m.clone())),
                None => x.into_matrix().map(Source::Dense),
            })
            .collect::<Result<_>>()?;
        for (q, x) in sources.iter().enumerate() {
            match x {
                Source::Dense(m) => check_source_matrix("data", q, m)?,
                Source::Sparse(m) => check_source_csr("data", q, m)?,
            }
        }
        Ok(MultiSource { storage: Storage::from_sources(sources), paired: false })
    }

    /// Paired sources: additionally every source has the same number of rows.
    ///
    /// Errors: those of [`MultiSource::new`] and [`Error::ShapeMismatch`].
    pub fn paired<X: AsMatrix<Elem = f64>>(sources: Vec<X>) -> Result<Self> {
        let mut data = MultiSource::new(sources)?;
        let counts = data.sample_counts();
        for (q, &n) in counts.iter().enumerate() {
            check_shape(format!("rows of paired source {q} vs source 0"), counts[0], n)?;
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
        match &self.storage {
            Storage::Dense(v) => v.len(),
            Storage::Mixed { sources, .. } => sources.len(),
        }
    }

    /// Source `q` as given, dense or sparse ([`AsMatrix::as_csr`] is `Some`
    /// for a CSR source), for code that computes on sparse rows.
    ///
    /// # Panics
    ///
    /// If `q >= Q`.
    pub fn input(&self, q: usize) -> &dyn AsMatrix<Elem = f64> {
        match &self.storage {
            Storage::Dense(v) => &v[q],
            Storage::Mixed { sources, .. } => &sources[q],
        }
    }

    /// Whether source `q` is stored sparse (false when `q >= Q`).
    pub fn is_sparse(&self, q: usize) -> bool {
        match &self.storage {
            Storage::Dense(_) => false,
            Storage::Mixed { sources, .. } => matches!(sources.get(q), Some(Source::Sparse(_))),
        }
    }

    /// Source `q` (`N_q x d_q`), dense (a sparse set densifies all its
    /// sources once, see [`MultiSource`]).
    ///
    /// # Panics
    ///
    /// If `q >= Q`; [`MultiSource::try_source`] returns an error instead.
    pub fn source(&self, q: usize) -> &DMatrix<f64> {
        &self.sources()[q]
    }

    /// Source `q`, or [`Error::InvalidParameter`] (`q`) if `q >= Q` and
    /// [`Error::OutOfMemory`] where a sparse set's dense copy cannot be allocated.
    pub fn try_source(&self, q: usize) -> Result<&DMatrix<f64>> {
        let n = self.n_sources();
        if q >= n {
            return Err(Error::InvalidParameter { name: "q", reason: format!("source {q} of {n}") });
        }
        Ok(&self.try_sources()?[q])
    }

    /// All sources, dense (a sparse set densifies all its sources once, see
    /// [`MultiSource`]).
    ///
    /// # Panics
    ///
    /// If a sparse source's dense copy cannot be allocated.
    pub fn sources(&self) -> &[DMatrix<f64>] {
        self.try_sources().expect("the dense copy of a sparse source")
    }

    /// All sources, dense, as [`MultiSource::sources`]: where a sparse
    /// source's dense copy cannot be allocated, [`Error::OutOfMemory`]
    /// (the library calls this one).
    pub fn try_sources(&self) -> Result<&[DMatrix<f64>]> {
        match &self.storage {
            Storage::Dense(v) => Ok(v),
            Storage::Mixed { sources, dense } => {
                if let Some(d) = dense.get() {
                    return Ok(d);
                }
                let copies = sources.iter().map(|x| x.as_matrix().map(Cow::into_owned)).collect::<Result<Vec<_>>>()?;
                // Another thread may have set it meanwhile: the same copies.
                Ok(dense.get_or_init(|| copies))
            }
        }
    }

    /// The sources side by side, row `i` of every source in row `i` (the
    /// concatenation baseline's input). Errors: sources with different
    /// numbers of rows ([`Error::ShapeMismatch`]).
    pub fn concatenated(&self) -> Result<DMatrix<f64>> {
        let counts = self.sample_counts();
        for (q, &n) in counts.iter().enumerate() {
            check_shape(format!("rows of source {q} vs source 0 (concatenation)"), counts[0], n)?;
        }
        let cols: usize = (0..self.n_sources()).map(|q| self.input(q).shape().1).sum();
        let mut out = DMatrix::zeros(counts[0], cols);
        let mut c0 = 0;
        for x in self.try_sources()? {
            out.columns_mut(c0, x.ncols()).copy_from(x);
            c0 += x.ncols();
        }
        Ok(out)
    }

    /// Sample counts `N_q`.
    pub fn sample_counts(&self) -> Vec<usize> {
        (0..self.n_sources()).map(|q| self.input(q).shape().0).collect()
    }

    /// Total samples `sum_q N_q` (the order of the dual matrix `G_Q`).
    pub fn total_samples(&self) -> usize {
        self.sample_counts().iter().sum()
    }

    /// The same rows `idx` of every source of a paired set (e.g. a split);
    /// sparse sources stay sparse.
    ///
    /// Errors: [`Error::NotAvailable`] for unpaired sources,
    /// [`Error::InvalidParameter`] for an empty or out-of-range index list.
    pub fn select_rows(&self, idx: &[usize]) -> Result<MultiSource> {
        if !self.paired {
            return Err(Error::NotAvailable("row selection across sources needs paired sources"));
        }
        let n = self.sample_counts()[0];
        if idx.is_empty() || idx.iter().any(|&i| i >= n) {
            return Err(Error::InvalidParameter { name: "idx", reason: format!("must be non-empty with every index < {n}") });
        }
        let dense_rows = |x: &DMatrix<f64>| DMatrix::from_fn(idx.len(), x.ncols(), |i, j| x[(idx[i], j)]);
        let storage = match &self.storage {
            Storage::Dense(v) => Storage::Dense(v.iter().map(dense_rows).collect()),
            Storage::Mixed { sources, .. } => Storage::from_sources(
                sources
                    .iter()
                    .map(|x| match x {
                        Source::Dense(m) => Source::Dense(dense_rows(m)),
                        Source::Sparse(m) => Source::Sparse(crate::sparse::select_csr_rows(m, idx)),
                    })
                    .collect(),
            ),
        };
        Ok(MultiSource { storage, paired: true })
    }

    /// Consumes the set, returning the sources (dense).
    ///
    /// # Panics
    ///
    /// If a sparse source's dense copy cannot be allocated.
    pub fn into_sources(self) -> Vec<DMatrix<f64>> {
        match self.storage {
            Storage::Dense(v) => v,
            storage @ Storage::Mixed { .. } => MultiSource { storage, paired: false }.sources().to_vec(),
        }
    }
}

impl Storage {
    /// Dense storage when no source is sparse.
    fn from_sources(sources: Vec<Source>) -> Self {
        if sources.iter().any(|x| matches!(x, Source::Sparse(_))) {
            Storage::Mixed { sources, dense: OnceLock::new() }
        } else {
            Storage::Dense(sources.into_iter().filter_map(|x| if let Source::Dense(m) = x { Some(m) } else { None }).collect())
        }
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
        check_shape("labels vs samples", sources.sample_counts()[0], labels.len())?;
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

/// Checks one sparse source: non-empty and finite (the row and column of
/// the first stored NaN or infinity).
pub(crate) fn check_source_csr(what: &'static str, source_index: usize, m: &CsrMatrix<f64>) -> Result<()> {
    crate::sparse::check_csr(what, m).map_err(|e| match e {
        Error::Empty { rows, cols, .. } => Error::EmptySource { what, source_index, rows, cols },
        Error::NonFinite { row, col, .. } => Error::NonFiniteSource { what, source_index, row, col },
        other => other,
    })
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
