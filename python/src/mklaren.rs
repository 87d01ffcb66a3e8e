//! mklaren: fit, predict, pickling.

use gramian::io::{SavedModel};
use gramian::mklaren::{Mklaren, MklarenParams};
use gramian::estimator::Supervised;
use gramian::Error;
use numpy::{PyArray1, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::kernels::{self, KernelSpec};
use crate::{convert, device, errors};

/// A fitted mklaren model (wrapped by `gramian.Mklaren`).
#[pyclass(module = "gramian._core", frozen)]
pub struct MklarenModel {
    inner: Mklaren,
}

/// Fits mklaren with `kernels` on the shared input `x` and target `y`.
///
/// `rank` is the most pivot columns: when the kernels run out of
/// numerically independent columns first ([`Error::RankDeficient`]), the
/// model is fitted again at the rank reached.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn fit_mklaren(py: Python<'_>, x: PyReadonlyArray2<'_, f64>, y: PyReadonlyArray1<'_, f64>, kernels: Vec<KernelSpec>, rank: usize, lookahead: usize, lambda: f64, device: &str) -> PyResult<MklarenModel> {
    let kernels = kernels.iter().map(|spec| kernels::kernel(py, spec)).collect::<PyResult<Vec<_>>>()?;
    let dev = device::resolve(py, device)?;
    let (xm, ys) = (convert::matrix(py, "X", &x)?, convert::vector(py, "y", &y)?);
    let inner = errors::run(py, || {
        let data = Supervised::new(xm, ys)?;
        let params = MklarenParams::new(rank).lookahead(lookahead).lambda(lambda).kernels(&kernels);
        match params.fit(&dev, &data) {
            Err(Error::RankDeficient { reached, .. }) if reached >= 1 => MklarenParams::new(reached).lookahead(lookahead).lambda(lambda).kernels(&kernels).fit(&dev, &data),
            other => other,
        }
    })?;
    Ok(MklarenModel { inner })
}

/// A model from the bytes of `MklarenModel.__reduce__` (on the CPU).
#[pyfunction]
pub fn load_mklaren(py: Python<'_>, data: &[u8]) -> PyResult<MklarenModel> {
    let inner = Mklaren::from_cbor(data).map_err(|e| errors::to_py(py, e))?;
    Ok(MklarenModel { inner })
}

#[pymethods]
impl MklarenModel {
    /// Predictions for the rows of `x`.
    fn predict<'py>(&self, py: Python<'py>, x: PyReadonlyArray2<'py, f64>) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let xm = convert::matrix(py, "X", &x)?;
        let out = errors::run(py, || self.inner.predict(&xm))?;
        Ok(convert::to_numpy1(py, out))
    }

    /// The rank reached (columns of `H`).
    #[getter]
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    /// `||H_q beta_q||` per kernel.
    #[getter]
    fn kernel_weights<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        convert::to_numpy1(py, self.inner.kernel_weights().clone())
    }

    /// `(kernel, pivot)` of every selected column, in the order they entered.
    #[getter]
    fn order(&self) -> Vec<(usize, usize)> {
        self.inner.order().iter().map(|c| (c.kernel, c.pivot)).collect()
    }

    /// Pickling: the saved-model CBOR bytes.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let bytes = self.inner.to_cbor().map_err(|e| errors::to_py(py, e))?;
        let load = py.import("gramian._core")?.getattr("load_mklaren")?;
        PyTuple::new(py, [load, PyTuple::new(py, [PyBytes::new(py, &bytes)])?.into_any()])
    }
}
