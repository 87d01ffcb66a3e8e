//! Multi-view bag-of-words data: the 3Sources news stories of the eKSVD
//! paper's Table 1 (BBC, The Guardian and Reuters reporting the same 169
//! stories; Greene & Cunningham's 3Sources, the stories covered by all three
//! outlets), and the text scaling used downstream.
//!
//! Files: `3sources-{bbc,guardian,reuters}.csv`, a header, one row per story
//! (same stories in the same order in every file), the outlet's term counts
//! and the class label (`0..=5`) as the last column.
//!
//! Stories missing from a view: the paper uses `n = 169`, the stories that
//! all three outlets reported (the original collection has 416 stories, most
//! covered by only one or two outlets), so a story absent from one view is
//! dropped from all of them rather than given an empty document. The files
//! hold exactly that intersection; the loader enforces it, and rejects a
//! file whose stories do not line up with the first one (other row count,
//! other label in a row) or that holds a story with no terms at all (an
//! empty document: a story missing from that outlet), instead of padding.
//!
//! Triplet files ([`read_triplets`], [`load_triplet_views`]): one
//! `document,term,value` line per non-zero entry of a view, read into a
//! dense `N x d_q` matrix.

use std::collections::HashMap;
use std::path::Path;

use nalgebra::DMatrix;
use thiserror::Error;

use super::{read_csv_table, DatasetError, LabelColumn};

/// The views of 3Sources, in the order of the paper's data set.
pub const THREE_SOURCES_VIEWS: [&str; 3] = ["bbc", "guardian", "reuters"];

/// The most entries (`N d_q`) of a dense view read from triplets: `2^28`
/// f64 values, 2 GiB. A term id that would need more is an error
/// ([`TermCountError::TooLarge`]), not an allocation failure.
pub const MAX_DENSE_ENTRIES: usize = 1 << 28;

/// What is wrong with one line of a triplet file.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum TripletFault {
    /// The line does not have three fields.
    #[error("{0} fields, need 3 (document, term, value)")]
    Fields(usize),
    /// A document or term field is not an integer in `0..=usize::MAX`.
    #[error("{field} {text:?} is not a non-negative integer")]
    NotAnId {
        /// `document` or `term`.
        field: &'static str,
        /// The field.
        text: String,
    },
    /// The value is not a finite number.
    #[error("value {0:?} is not a finite number")]
    NotAValue(String),
    /// The document id is not below the number of documents.
    #[error("document {document} is out of range (there are {documents} documents, ids from 0)")]
    DocumentOutOfRange {
        /// The id read.
        document: usize,
        /// The number of documents.
        documents: usize,
    },
    /// The same (document, term) pair is on an earlier line: duplicates
    /// are refused, not summed.
    #[error("document {document}, term {term} already given on line {first_line}")]
    Duplicate {
        /// The document.
        document: usize,
        /// The term.
        term: usize,
        /// The line of its first occurrence.
        first_line: u64,
    },
}

/// Errors of the term-count loaders.
#[derive(Debug, Error)]
pub enum TermCountError {
    /// A file is missing or not a numeric CSV.
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    /// No view names were given.
    #[error("no views named")]
    NoViews,
    /// A view has a different number of stories than the first.
    #[error("view {view} has {found} stories, view {first} has {expected}")]
    StoryCount {
        /// The view.
        view: String,
        /// The first view.
        first: String,
        /// Stories in the first view.
        expected: usize,
        /// Stories in this view.
        found: usize,
    },
    /// A story's label differs between views (the rows do not line up).
    #[error("story {row}: label {found} in view {view}, {expected} in view {first}")]
    LabelMismatch {
        /// The view.
        view: String,
        /// The first view.
        first: String,
        /// Row (story) index.
        row: usize,
        /// Label in the first view.
        expected: usize,
        /// Label in this view.
        found: usize,
    },
    /// A label is not an integer in `0..=u32::MAX`.
    #[error("story {row} of view {view}: label {value} is not a non-negative integer")]
    BadLabel {
        /// The view.
        view: String,
        /// Row (story) index.
        row: usize,
        /// The value read.
        value: f64,
    },
    /// An entry is not a count (negative, fractional or not finite).
    #[error("story {row} of view {view}, term {column}: {value} is not a count")]
    NotACount {
        /// The view.
        view: String,
        /// Row (story) index.
        row: usize,
        /// Term (column) index.
        column: usize,
        /// The value read.
        value: f64,
    },
    /// A line of a triplet file is not a `document,term,value` triplet of
    /// this view.
    #[error("view {view}, line {line}: {fault}")]
    Triplet {
        /// The view.
        view: String,
        /// Line in the file (from 1, the header is line 1).
        line: u64,
        /// What is wrong.
        fault: TripletFault,
    },
    /// A view read from triplets would have more than
    /// [`MAX_DENSE_ENTRIES`] entries.
    #[error("view {view}: {documents} documents x {terms} terms is beyond {MAX_DENSE_ENTRIES} dense entries")]
    TooLarge {
        /// The view.
        view: String,
        /// Documents.
        documents: usize,
        /// Terms (largest term id + 1).
        terms: usize,
    },
    /// No documents (an empty label list for triplet views).
    #[error("no documents")]
    NoDocuments,
    /// An entry given to [`log_cosine_normalize`] is negative or not
    /// finite: `log(1 + c)` is defined for counts, and a negative entry is
    /// not one.
    #[error("{}row {row}, column {column}: {value} is not a non-negative finite value", view.as_ref().map(|v| format!("view {v}, ")).unwrap_or_default())]
    NotNonNegative {
        /// The view, when known.
        view: Option<String>,
        /// Row.
        row: usize,
        /// Column.
        column: usize,
        /// The value.
        value: f64,
    },
    /// A story has no terms in a view: it is missing from that outlet.
    #[error("story {row} has no terms in view {view} (missing from that view)")]
    EmptyStory {
        /// The view.
        view: String,
        /// Row (story) index.
        row: usize,
    },
}

/// Paired term-count views of the same documents with class labels.
#[derive(Debug, Clone)]
pub struct TermCountViews {
    /// Names of the views.
    pub view_names: Vec<String>,
    /// Term counts (or their scaled values), `N x d_q` per view, rows in the same document order.
    pub views: Vec<DMatrix<f64>>,
    /// Class of each document.
    pub labels: Vec<usize>,
    /// Vocabulary (header) of each view.
    pub terms: Vec<Vec<String>>,
}

impl TermCountViews {
    /// Every view scaled by [`log_cosine_normalize`].
    ///
    /// Errors: [`TermCountError::NotNonNegative`] (with the view's name)
    /// for a negative or non-finite entry.
    pub fn log_cosine_normalized(&self) -> Result<TermCountViews, TermCountError> {
        let views = self
            .views
            .iter()
            .zip(&self.view_names)
            .map(|(x, name)| {
                log_cosine_normalize(x).map_err(|e| match e {
                    TermCountError::NotNonNegative { row, column, value, .. } => TermCountError::NotNonNegative { view: Some(name.clone()), row, column, value },
                    other => other,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(TermCountViews { views, ..self.clone() })
    }
}

/// Loads 3Sources from `dir` (the folder holding `3sources-{bbc,guardian,reuters}.csv`).
///
/// Errors: as [`load_term_count_views`].
pub fn load_three_sources(dir: impl AsRef<Path>) -> Result<TermCountViews, TermCountError> {
    load_term_count_views(dir, "3sources-", &THREE_SOURCES_VIEWS)
}

/// Loads `dir/{prefix}{name}.csv` for each name: term counts of the same
/// documents in the same order, the label last.
///
/// Errors: [`TermCountError::Dataset`] (missing file, unparsable CSV),
/// [`TermCountError::NoViews`], [`TermCountError::StoryCount`] and
/// [`TermCountError::LabelMismatch`] (the views do not hold the same
/// documents), [`TermCountError::BadLabel`], [`TermCountError::NotACount`],
/// [`TermCountError::EmptyStory`] (a document absent from a view).
pub fn load_term_count_views(dir: impl AsRef<Path>, prefix: &str, names: &[&str]) -> Result<TermCountViews, TermCountError> {
    let first = names.first().ok_or(TermCountError::NoViews)?.to_string();
    let mut out = TermCountViews { view_names: Vec::new(), views: Vec::new(), labels: Vec::new(), terms: Vec::new() };
    for (q, name) in names.iter().enumerate() {
        let view = name.to_string();
        let table = read_csv_table(dir.as_ref().join(format!("{prefix}{name}.csv")), LabelColumn::Last)?;
        let labels = table
            .target()?
            .iter()
            .enumerate()
            .map(|(row, &value)| {
                if (0.0..=u32::MAX as f64).contains(&value) && value.fract() == 0.0 {
                    Ok(value as usize)
                } else {
                    Err(TermCountError::BadLabel { view: view.clone(), row, value })
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        if q == 0 {
            out.labels = labels;
        } else {
            if labels.len() != out.labels.len() {
                return Err(TermCountError::StoryCount { view, first, expected: out.labels.len(), found: labels.len() });
            }
            if let Some(row) = (0..labels.len()).find(|&i| labels[i] != out.labels[i]) {
                return Err(TermCountError::LabelMismatch { view, first, row, expected: out.labels[row], found: labels[row] });
            }
        }
        let x = &table.features;
        for row in 0..x.nrows() {
            let mut any = false;
            for column in 0..x.ncols() {
                let value = x[(row, column)];
                if !(value.is_finite() && value >= 0.0 && value.fract() == 0.0) {
                    return Err(TermCountError::NotACount { view, row, column, value });
                }
                any |= value > 0.0;
            }
            if !any {
                return Err(TermCountError::EmptyStory { view, row });
            }
        }
        out.view_names.push(view);
        out.views.push(table.features);
        out.terms.push(table.feature_names);
    }
    Ok(out)
}

/// Log-scaled, cosine-normalised term counts: each row `c` becomes
/// `x = log(1 + c) / ||log(1 + c)||_2`, so the linear kernel of two rows is
/// the cosine similarity of their log-counts and `||x - z||^2 = 2 - 2 cos`.
/// A row of zeros stays zero. Entries need not be integers (e.g. term
/// frequencies) but must be non-negative.
///
/// Errors: [`TermCountError::NotNonNegative`] (view `None`) for the first
/// negative or non-finite entry, in row-major order.
pub fn log_cosine_normalize(counts: &DMatrix<f64>) -> Result<DMatrix<f64>, TermCountError> {
    for row in 0..counts.nrows() {
        for column in 0..counts.ncols() {
            let value = counts[(row, column)];
            if !(value.is_finite() && value >= 0.0) {
                return Err(TermCountError::NotNonNegative { view: None, row, column, value });
            }
        }
    }
    let mut x = counts.map(f64::ln_1p);
    for mut row in x.row_iter_mut() {
        let norm = row.norm();
        if norm > 0.0 {
            row /= norm;
        }
    }
    Ok(x)
}

/// Reads the triplet file of view `view` at `path` into a dense
/// `documents x d` matrix, `d` the largest term id + 1 (0 without lines).
///
/// The file is a CSV with a header row (any three names), then one
/// `document,term,value` line per entry: `document` an integer in
/// `0..documents`, `term` a non-negative integer, `value` a finite number
/// (any sign; entries not given are 0). A (document, term) pair may be
/// given once: a second line for it is an error, not added to the first.
///
/// Errors: [`TermCountError::Dataset`] for a missing or unreadable file;
/// [`TermCountError::Triplet`] for the first bad line (not three fields, a
/// non-integer or negative id, a value that is not a finite number, a
/// document out of range, a duplicate pair); [`TermCountError::TooLarge`]
/// where `documents d` exceeds [`MAX_DENSE_ENTRIES`].
pub fn read_triplets(path: impl AsRef<Path>, view: &str, documents: usize) -> Result<DMatrix<f64>, TermCountError> {
    let path = path.as_ref();
    if !path.exists() {
        return Err(DatasetError::Missing(path.to_path_buf()).into());
    }
    let parse_err = |reason: String| TermCountError::Dataset(DatasetError::Parse { path: path.to_path_buf(), reason });
    let mut reader = csv::ReaderBuilder::new().has_headers(true).flexible(true).from_path(path).map_err(|e| parse_err(e.to_string()))?;
    let fault = |line: u64, fault: TripletFault| TermCountError::Triplet { view: view.to_string(), line, fault };
    let too_large = |terms: usize| TermCountError::TooLarge { view: view.to_string(), documents, terms };
    let mut entries: HashMap<(usize, usize), (f64, u64)> = HashMap::new();
    let mut terms = 0usize;
    for record in reader.records() {
        let record = record.map_err(|e| parse_err(e.to_string()))?;
        let line = record.position().map_or(0, |p| p.line());
        if record.len() != 3 {
            return Err(fault(line, TripletFault::Fields(record.len())));
        }
        let id = |i: usize, field: &'static str| record[i].trim().parse::<usize>().map_err(|_| fault(line, TripletFault::NotAnId { field, text: record[i].to_string() }));
        let (document, term) = (id(0, "document")?, id(1, "term")?);
        let value: f64 = record[2].trim().parse().ok().filter(|v: &f64| v.is_finite()).ok_or_else(|| fault(line, TripletFault::NotAValue(record[2].to_string())))?;
        if document >= documents {
            return Err(fault(line, TripletFault::DocumentOutOfRange { document, documents }));
        }
        let needed = term.checked_add(1).ok_or_else(|| too_large(usize::MAX))?;
        if needed.checked_mul(documents).is_none_or(|n| n > MAX_DENSE_ENTRIES) {
            return Err(too_large(needed));
        }
        terms = terms.max(needed);
        if let Some(&(_, first_line)) = entries.get(&(document, term)) {
            return Err(fault(line, TripletFault::Duplicate { document, term, first_line }));
        }
        entries.insert((document, term), (value, line));
    }
    let mut x = DMatrix::zeros(documents, terms);
    for ((document, term), (value, _)) in entries {
        x[(document, term)] = value;
    }
    Ok(x)
}

/// Loads `dir/{prefix}{name}.csv` for each name, triplet files
/// ([`read_triplets`]) of the same `labels.len()` documents, document ids
/// the rows of `labels`. The terms of a view are named by their ids.
///
/// Errors: [`TermCountError::NoViews`], [`TermCountError::NoDocuments`],
/// those of [`read_triplets`], and [`TermCountError::EmptyStory`] for a
/// document with no non-zero entry in a view.
pub fn load_triplet_views(dir: impl AsRef<Path>, prefix: &str, names: &[&str], labels: &[usize]) -> Result<TermCountViews, TermCountError> {
    if names.is_empty() {
        return Err(TermCountError::NoViews);
    }
    if labels.is_empty() {
        return Err(TermCountError::NoDocuments);
    }
    let mut out = TermCountViews { view_names: Vec::new(), views: Vec::new(), labels: labels.to_vec(), terms: Vec::new() };
    for name in names {
        let view = name.to_string();
        let x = read_triplets(dir.as_ref().join(format!("{prefix}{name}.csv")), name, labels.len())?;
        if let Some(row) = (0..x.nrows()).find(|&r| x.row(r).iter().all(|&v| v == 0.0)) {
            return Err(TermCountError::EmptyStory { view, row });
        }
        out.terms.push((0..x.ncols()).map(|t| t.to_string()).collect());
        out.view_names.push(view);
        out.views.push(x);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_cosine_rows_have_unit_norm() {
        let c = DMatrix::from_row_slice(3, 3, &[0.0, 1.0, 3.0, 0.0, 0.0, 0.0, 2.0, 2.0, 0.0]);
        let x = log_cosine_normalize(&c).unwrap();
        assert!((x.row(0).norm() - 1.0).abs() < 1e-12);
        assert_eq!(x.row(1).norm(), 0.0);
        let e = 1.0 / 2f64.sqrt();
        assert!((x[(2, 0)] - e).abs() < 1e-12 && (x[(2, 1)] - e).abs() < 1e-12);
        // log(1 + 3) / log(1 + 1) = 2 between the entries of row 0.
        assert!((x[(0, 2)] / x[(0, 1)] - 2.0).abs() < 1e-12);
    }

    /// Negative and non-finite entries are refused with their position, not
    /// set to 0; the views' method names the view.
    #[test]
    fn log_cosine_refuses_negative_entries() {
        let c = DMatrix::from_row_slice(2, 2, &[1.0, 0.0, 2.0, -4.99]);
        assert!(matches!(log_cosine_normalize(&c), Err(TermCountError::NotNonNegative { view: None, row: 1, column: 1, value }) if value == -4.99));
        let nan = DMatrix::from_row_slice(1, 2, &[1.0, f64::NAN]);
        assert!(matches!(log_cosine_normalize(&nan), Err(TermCountError::NotNonNegative { row: 0, column: 1, .. })));
        let views = TermCountViews { view_names: vec!["a".into(), "b".into()], views: vec![DMatrix::from_element(2, 2, 1.0), c], labels: vec![0, 1], terms: vec![vec![], vec![]] };
        assert!(matches!(views.log_cosine_normalized(), Err(TermCountError::NotNonNegative { view: Some(v), .. }) if v == "b"));
        // Frequencies (not integers) are fine.
        assert!(log_cosine_normalize(&DMatrix::from_element(1, 2, 0.25)).is_ok());
    }

    /// A triplet file in its own temporary folder.
    fn triplet_dir(tag: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("gramian-triplets-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(format!("t-{name}.csv")), text).unwrap();
        }
        dir
    }

    /// Triplets fill a dense matrix (any sign of value, width the largest
    /// term id + 1); two views of three documents load with their labels.
    #[test]
    fn triplets_read_into_views() {
        let dir = triplet_dir("good", &[("a", "doc,term,value\n0,0,1.5\n2,3,-4.99\n1,1,2\n"), ("b", "d,t,v\n0,1,1\n1,0,1\n2,0,3\n")]);
        let x = read_triplets(dir.join("t-a.csv"), "a", 3).unwrap();
        assert_eq!(x, DMatrix::from_row_slice(3, 4, &[1.5, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, -4.99]));
        let views = load_triplet_views(&dir, "t-", &["a", "b"], &[0, 1, 1]).unwrap();
        assert_eq!((views.views[0].shape(), views.views[1].shape()), ((3, 4), (3, 2)));
        assert_eq!(views.labels, vec![0, 1, 1]);
        assert_eq!(views.terms[1], vec!["0".to_string(), "1".into()]);
        // A negative value is read, then refused by the log scaling.
        assert!(matches!(views.log_cosine_normalized(), Err(TermCountError::NotNonNegative { view: Some(v), row: 2, column: 3, .. }) if v == "a"));
    }

    /// Every bad line is a typed error naming its line and fault.
    #[test]
    fn bad_triplets_are_typed_errors() {
        let cases: [(&str, &str, TripletFault); 7] = [
            ("fields", "d,t,v\n0,0,1\n1,1\n", TripletFault::Fields(2)),
            ("fraction", "d,t,v\n0.5,0,1\n", TripletFault::NotAnId { field: "document", text: "0.5".into() }),
            ("negative", "d,t,v\n0,-1,1\n", TripletFault::NotAnId { field: "term", text: "-1".into() }),
            ("value", "d,t,v\n0,0,x\n", TripletFault::NotAValue("x".into())),
            ("nan", "d,t,v\n0,0,NaN\n", TripletFault::NotAValue("NaN".into())),
            ("range", "d,t,v\n0,0,1\n3,0,1\n", TripletFault::DocumentOutOfRange { document: 3, documents: 3 }),
            ("duplicate", "d,t,v\n0,2,1\n1,0,1\n0,2,5\n", TripletFault::Duplicate { document: 0, term: 2, first_line: 2 }),
        ];
        for (tag, text, want) in cases {
            let dir = triplet_dir(tag, &[("a", text)]);
            match read_triplets(dir.join("t-a.csv"), "a", 3) {
                Err(TermCountError::Triplet { view, fault, line }) => {
                    assert_eq!((view.as_str(), &fault), ("a", &want), "{tag}");
                    assert!(line >= 2, "{tag}: line {line}");
                }
                other => panic!("{tag}: {other:?}"),
            }
        }
        let dir = triplet_dir("huge", &[("a", "d,t,v\n0,18446744073709551615,1\n"), ("b", "d,t,v\n0,100000000000,1\n")]);
        assert!(matches!(read_triplets(dir.join("t-a.csv"), "a", 3), Err(TermCountError::TooLarge { .. })));
        assert!(matches!(read_triplets(dir.join("t-b.csv"), "b", 3), Err(TermCountError::TooLarge { .. })));
        let dir = triplet_dir("empty", &[("a", "d,t,v\n0,0,1\n2,0,1\n")]);
        assert!(matches!(load_triplet_views(&dir, "t-", &["a"], &[0, 0, 1]), Err(TermCountError::EmptyStory { row: 1, .. })));
        assert!(matches!(load_triplet_views(&dir, "t-", &[], &[0]), Err(TermCountError::NoViews)));
        assert!(matches!(load_triplet_views(&dir, "t-", &["a"], &[]), Err(TermCountError::NoDocuments)));
        assert!(matches!(load_triplet_views(&dir, "t-", &["missing"], &[0]), Err(TermCountError::Dataset(DatasetError::Missing(_)))));
    }
}
