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

use std::path::Path;

use nalgebra::DMatrix;
use thiserror::Error;

use super::{read_csv_table, DatasetError};

/// The views of 3Sources, in the order of the paper's data set.
pub const THREE_SOURCES_VIEWS: [&str; 3] = ["bbc", "guardian", "reuters"];

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
    pub fn log_cosine_normalized(&self) -> TermCountViews {
        TermCountViews { views: self.views.iter().map(log_cosine_normalize).collect(), ..self.clone() }
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
        let table = read_csv_table(dir.as_ref().join(format!("{prefix}{name}.csv")))?;
        let labels = table
            .target
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
/// A row of zeros stays zero.
pub fn log_cosine_normalize(counts: &DMatrix<f64>) -> DMatrix<f64> {
    let mut x = counts.map(|c| c.max(0.0).ln_1p());
    for mut row in x.row_iter_mut() {
        let norm = row.norm();
        if norm > 0.0 {
            row /= norm;
        }
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_cosine_rows_have_unit_norm() {
        let c = DMatrix::from_row_slice(3, 3, &[0.0, 1.0, 3.0, 0.0, 0.0, 0.0, 2.0, 2.0, 0.0]);
        let x = log_cosine_normalize(&c);
        assert!((x.row(0).norm() - 1.0).abs() < 1e-12);
        assert_eq!(x.row(1).norm(), 0.0);
        let e = 1.0 / 2f64.sqrt();
        assert!((x[(2, 0)] - e).abs() < 1e-12 && (x[(2, 1)] - e).abs() < 1e-12);
        // log(1 + 3) / log(1 + 1) = 2 between the entries of row 0.
        assert!((x[(0, 2)] / x[(0, 1)] - 2.0).abs() < 1e-12);
    }
}
