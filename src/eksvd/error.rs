//! The error type of eKSVD.

use thiserror::Error;

use crate::error::ComputeError;

/// Everything that can go wrong while building, fitting or applying eKSVD.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum EksvdError {
    /// A kernel, Gram matrix or product of the compute core failed (this
    /// includes empty, non-finite or mismatched matrices found by the core).
    #[error(transparent)]
    Compute(#[from] ComputeError),
    /// eKSVD couples at least two sources.
    #[error("eKSVD needs at least 2 sources, got {0}")]
    TooFewSources(usize),
    /// A source (or its features, or a kernel block) is empty.
    #[error("{what} of source {source_index} is empty ({rows} x {cols})")]
    EmptySource {
        /// What was empty (data, features, kernel block).
        what: &'static str,
        /// Index of the source.
        source_index: usize,
        /// Its rows.
        rows: usize,
        /// Its columns.
        cols: usize,
    },
    /// A source holds NaN or an infinity.
    #[error("{what} of source {source_index} contains NaN or infinite values (first at row {row}, column {col})")]
    NonFinite {
        /// What was checked (data, features, kernel block).
        what: &'static str,
        /// Index of the source.
        source_index: usize,
        /// Row of the first offending entry.
        row: usize,
        /// Column of the first offending entry.
        col: usize,
    },
    /// Shapes disagree (sample counts of paired sources, feature dimensions,
    /// kernel block sizes, number of per-source settings).
    #[error("shape mismatch: {what} (expected {expected}, found {found})")]
    ShapeMismatch {
        /// Which dimension.
        what: String,
        /// The size implied by the other inputs.
        expected: usize,
        /// The size found.
        found: usize,
    },
    /// A parameter is outside its valid range.
    #[error("invalid parameter {name}: {reason}")]
    InvalidParameter {
        /// The parameter.
        name: &'static str,
        /// Why it is invalid.
        reason: String,
    },
    /// The coupling matrix has no positive eigenvalue, so no component
    /// `lambda = 1/gamma > 0` exists.
    #[error("the coupling matrix has no positive eigenvalue")]
    NoPositiveEigenvalues,
    /// Fewer positive eigenvalues than components were asked for.
    #[error("{requested} components requested but the coupling matrix has only {available} positive eigenvalues")]
    TooFewPositiveEigenvalues {
        /// Components asked for.
        requested: usize,
        /// Positive eigenvalues found.
        available: usize,
    },
    /// The iterative eigensolver stopped before all wanted pairs converged.
    #[error("eigensolver did not converge: {converged} of {requested} eigenpairs after {restarts} restarts")]
    NotConverged {
        /// Pairs that met the tolerance.
        converged: usize,
        /// Pairs asked for.
        requested: usize,
        /// Restarts done.
        restarts: usize,
    },
    /// A kernel matrix has lower numerical rank than the number of features
    /// asked of a Nystrom map.
    #[error("kernel matrix of source {source_index} has numerical rank {rank}, below the {requested} Nystrom features asked for")]
    RankDeficientKernel {
        /// Index of the source.
        source_index: usize,
        /// Eigenvalues above the tolerance.
        rank: usize,
        /// Features asked for.
        requested: usize,
    },
    /// The operation needs something the model was not fitted with (e.g.
    /// primal weights of a model fitted on precomputed kernel blocks).
    #[error("not available: {0}")]
    NotAvailable(&'static str),
}

/// Result type of eKSVD.
pub type Result<T, E = EksvdError> = std::result::Result<T, E>;

/// Checks one per-source matrix: non-empty and finite.
pub(crate) fn check_source_matrix(what: &'static str, source_index: usize, m: &nalgebra::DMatrix<f64>) -> Result<()> {
    if m.nrows() == 0 || m.ncols() == 0 {
        return Err(EksvdError::EmptySource { what, source_index, rows: m.nrows(), cols: m.ncols() });
    }
    let rows = m.nrows();
    if let Some(pos) = m.as_slice().iter().position(|v| !v.is_finite()) {
        return Err(EksvdError::NonFinite { what, source_index, row: pos % rows, col: pos / rows });
    }
    Ok(())
}

/// Fails with [`EksvdError::ShapeMismatch`] unless `expected == found`.
pub(crate) fn check_shape(what: impl Into<String>, expected: usize, found: usize) -> Result<()> {
    if expected != found {
        return Err(EksvdError::ShapeMismatch { what: what.into(), expected, found });
    }
    Ok(())
}
