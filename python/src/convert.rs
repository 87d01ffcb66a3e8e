//! numpy arrays in and out.
//!
//! Inputs are C-contiguous `float64` arrays (the Python layer converts with
//! `numpy.ascontiguousarray`); a 2-D one is read in place as a
//! [`RowMajor`] slice. Outputs are new arrays that own the library's
//! column-major data (Fortran order, no copy).

use gramian::{AsMatrix, RowMajor};
use nalgebra::{DMatrix, DVector};
use numpy::ndarray::{Array1, Array2, ShapeBuilder};
use numpy::{IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::prelude::*;

use crate::errors;

/// A 2-D C-contiguous array as a row-major matrix view.
pub fn matrix<'a>(py: Python<'_>, what: &str, a: &'a PyReadonlyArray2<'_, f64>) -> PyResult<RowMajor<'a, f64>> {
    let (rows, cols) = a.as_array().dim();
    let data = a.as_slice().map_err(|_| errors::invalid(py, format!("{what} must be a C-contiguous float64 array")))?;
    RowMajor::new(data, rows, cols).map_err(|e| errors::to_py(py, e))
}

/// One matrix input as the Python layer passes it (a source of eKSVD, an
/// input of mklaren and its baselines): a C-contiguous `float64` array, or
/// the parts of a canonical CSR matrix (kept sparse).
#[derive(FromPyObject)]
pub enum SourceArg<'py> {
    /// Dense rows.
    Dense(PyReadonlyArray2<'py, f64>),
    /// `(indptr, indices, data, (rows, cols))`.
    Sparse(crate::kernels::CsrParts<'py>),
}

/// The input `x` as a matrix input (dense rows borrowed, CSR checked and built).
pub fn source<'a>(py: Python<'_>, what: &str, x: &'a SourceArg<'_>) -> PyResult<Box<dyn AsMatrix<Elem = f64> + Send + Sync + 'a>> {
    Ok(match x {
        SourceArg::Dense(a) => Box::new(matrix(py, what, a)?),
        SourceArg::Sparse(parts) => Box::new(crate::kernels::csr(py, what, parts)?),
    })
}

/// A 1-D contiguous array as a slice.
pub fn vector<'a>(py: Python<'_>, what: &str, a: &'a PyReadonlyArray1<'_, f64>) -> PyResult<&'a [f64]> {
    a.as_slice().map_err(|_| errors::invalid(py, format!("{what} must be a contiguous float64 array")))
}

/// A matrix as a new (Fortran-ordered) 2-D array.
pub fn to_numpy2(py: Python<'_>, m: DMatrix<f64>) -> Bound<'_, PyArray2<f64>> {
    let (rows, cols) = m.shape();
    let data: Vec<f64> = m.data.into();
    // Shape and length agree by construction (a DMatrix's storage).
    Array2::from_shape_vec((rows, cols).f(), data).expect("a DMatrix's storage has rows * cols entries").into_pyarray(py)
}

/// A vector as a new 1-D array.
pub fn to_numpy1(py: Python<'_>, v: DVector<f64>) -> Bound<'_, PyArray1<f64>> {
    let data: Vec<f64> = v.data.into();
    Array1::from_vec(data).into_pyarray(py)
}
