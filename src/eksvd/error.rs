//! The error type of eKSVD.


use crate::error::Error;
/// Result type of eKSVD.
pub type Result<T, E = Error> = std::result::Result<T, E>;

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
