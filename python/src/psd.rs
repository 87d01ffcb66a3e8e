//! PSD models: density, quantile regression, heteroscedastic regression.

use gramian::io::SavedModel;
use gramian::psd::{DensityParams, HeteroscedasticParams, HeteroscedasticRegression, PsdDensity, QuantileParams, QuantileRegression, Regularisation, SolverOptions};
use gramian::Kernel;
use numpy::{PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use rand::SeedableRng;

use crate::{convert, device, errors};

/// Solver settings as the Python estimators pass them: the duality-gap
/// tolerance, the iteration budget and, with `Some((m, seed))`, Nystrom
/// compression on `m` centres drawn with `seed`.
type Solver = (f64, usize, Option<(usize, u64)>);

fn options(tolerance: f64, max_iterations: usize, check_every: usize) -> SolverOptions {
    SolverOptions { tolerance, max_iterations, check_every }
}

/// `(loader, (bytes,))` for `__reduce__`.
fn reduce<'py>(py: Python<'py>, loader: &str, bytes: gramian::error::Result<Vec<u8>>) -> PyResult<Bound<'py, PyTuple>> {
    let bytes = bytes.map_err(|e| errors::to_py(py, e))?;
    let load = py.import("gramian._core")?.getattr(loader)?;
    PyTuple::new(py, [load, PyTuple::new(py, [PyBytes::new(py, &bytes)])?.into_any()])
}

/// A fitted PSD density (wrapped by `gramian.PSDDensity`).
#[pyclass(module = "gramian._core", frozen)]
pub struct DensityModel {
    inner: PsdDensity,
}

/// Fits a PSD density with a Gaussian kernel of width `sigma`, Lebesgue
/// base measure and the regulariser `trace tr(A) + quadratic/2 ||A||_F^2`.
#[pyfunction]
pub fn fit_density(py: Python<'_>, x: PyReadonlyArray2<'_, f64>, sigma: f64, trace: f64, quadratic: f64, solver: Solver, device: &str) -> PyResult<DensityModel> {
    let dev = device::resolve(py, device)?;
    let xm = convert::matrix(py, "X", &x)?;
    let (tolerance, max_iterations, nystrom) = solver;
    let inner = errors::run(py, || {
        let mut params = DensityParams::new(Kernel::gaussian_with_width(sigma)?)?.regularisation(Regularisation::new().trace(trace).quadratic(quadratic)).solver(options(tolerance, max_iterations, 2));
        if let Some((m, seed)) = nystrom {
            params = params.nystrom(m, seed);
        }
        params.fit(&dev, &xm)
    })?;
    Ok(DensityModel { inner })
}

/// A density from the bytes of `DensityModel.__reduce__` (on the CPU).
#[pyfunction]
pub fn load_density(py: Python<'_>, data: &[u8]) -> PyResult<DensityModel> {
    Ok(DensityModel { inner: PsdDensity::from_cbor(data).map_err(|e| errors::to_py(py, e))? })
}

#[pymethods]
impl DensityModel {
    /// The density at the rows of `x`.
    fn density<'py>(&self, py: Python<'py>, x: PyReadonlyArray2<'py, f64>) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let xm = convert::matrix(py, "X", &x)?;
        let out = errors::run(py, || self.inner.density(&xm))?;
        Ok(convert::to_numpy1(py, out))
    }

    /// `count` samples drawn with a generator seeded by `seed`.
    fn sample<'py>(&self, py: Python<'py>, count: usize, seed: u64) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let out = errors::run(py, || self.inner.sample(count, &mut rand::rngs::StdRng::seed_from_u64(seed)))?;
        Ok(convert::to_numpy2(py, out))
    }

    /// The integral of the density (1 up to rounding).
    fn integral(&self, py: Python<'_>) -> PyResult<f64> {
        errors::run(py, || self.inner.integral())
    }

    /// Solver iterations of the fit.
    #[getter]
    fn iterations(&self) -> usize {
        self.inner.report().iterations
    }

    /// Pickling: the saved-model CBOR bytes.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        reduce(py, "load_density", self.inner.to_cbor())
    }
}

/// A fitted PSD quantile regression (wrapped by `gramian.PSDQuantileRegressor`).
#[pyclass(module = "gramian._core", frozen)]
pub struct QuantileModel {
    inner: QuantileRegression,
}

/// Fits non-crossing quantile curves at `levels` (strictly increasing, in
/// (0, 1)) with a Gaussian kernel of width `sigma`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn fit_quantiles(py: Python<'_>, x: PyReadonlyArray2<'_, f64>, y: PyReadonlyArray1<'_, f64>, levels: Vec<f64>, sigma: f64, penalties: (f64, f64, f64), solver: Solver, device: &str) -> PyResult<QuantileModel> {
    let dev = device::resolve(py, device)?;
    let (xm, ys) = (convert::matrix(py, "X", &x)?, convert::vector(py, "y", &y)?);
    let (linear, trace, quadratic) = penalties;
    let (tolerance, max_iterations, nystrom) = solver;
    let inner = errors::run(py, || {
        let mut params = QuantileParams::new(Kernel::gaussian_with_width(sigma)?, &levels)?.regularisation(Regularisation::new().linear(linear).trace(trace).quadratic(quadratic)).solver(options(tolerance, max_iterations, 10));
        if let Some((m, seed)) = nystrom {
            params = params.nystrom(m, seed);
        }
        params.fit_xy(&dev, &xm, ys)
    })?;
    Ok(QuantileModel { inner })
}

/// A quantile model from the bytes of `QuantileModel.__reduce__` (on the CPU).
#[pyfunction]
pub fn load_quantiles(py: Python<'_>, data: &[u8]) -> PyResult<QuantileModel> {
    Ok(QuantileModel { inner: QuantileRegression::from_cbor(data).map_err(|e| errors::to_py(py, e))? })
}

#[pymethods]
impl QuantileModel {
    /// The quantiles at the rows of `x`, one column per level.
    fn predict<'py>(&self, py: Python<'py>, x: PyReadonlyArray2<'py, f64>) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let xm = convert::matrix(py, "X", &x)?;
        let out = errors::run(py, || self.inner.predict(&xm))?;
        Ok(convert::to_numpy2(py, out))
    }

    /// Solver iterations of the fit.
    #[getter]
    fn iterations(&self) -> usize {
        self.inner.report().iterations
    }

    /// Pickling: the saved-model CBOR bytes.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        reduce(py, "load_quantiles", self.inner.to_cbor())
    }
}

/// A fitted heteroscedastic Gaussian regression (wrapped by
/// `gramian.PSDHeteroscedasticRegressor`).
#[pyclass(module = "gramian._core", frozen)]
pub struct HeteroscedasticModel {
    inner: HeteroscedasticRegression,
}

/// Fits the conditional mean and variance with a Gaussian kernel of width `sigma`.
#[pyfunction]
pub fn fit_heteroscedastic(py: Python<'_>, x: PyReadonlyArray2<'_, f64>, y: PyReadonlyArray1<'_, f64>, sigma: f64, penalties: (f64, f64, f64), solver: Solver, device: &str) -> PyResult<HeteroscedasticModel> {
    let dev = device::resolve(py, device)?;
    let (xm, ys) = (convert::matrix(py, "X", &x)?, convert::vector(py, "y", &y)?);
    let (linear, trace, quadratic) = penalties;
    let (tolerance, max_iterations, nystrom) = solver;
    let inner = errors::run(py, || {
        let mut params = HeteroscedasticParams::new(Kernel::gaussian_with_width(sigma)?)?.regularisation(Regularisation::new().linear(linear).trace(trace).quadratic(quadratic)).solver(options(tolerance, max_iterations, 10));
        if let Some((m, seed)) = nystrom {
            params = params.nystrom(m, seed);
        }
        params.fit_xy(&dev, &xm, ys)
    })?;
    Ok(HeteroscedasticModel { inner })
}

/// A heteroscedastic model from the bytes of `HeteroscedasticModel.__reduce__` (on the CPU).
#[pyfunction]
pub fn load_heteroscedastic(py: Python<'_>, data: &[u8]) -> PyResult<HeteroscedasticModel> {
    Ok(HeteroscedasticModel { inner: HeteroscedasticRegression::from_cbor(data).map_err(|e| errors::to_py(py, e))? })
}

#[pymethods]
impl HeteroscedasticModel {
    /// The conditional mean at the rows of `x`.
    fn predict_mean<'py>(&self, py: Python<'py>, x: PyReadonlyArray2<'py, f64>) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let xm = convert::matrix(py, "X", &x)?;
        let out = errors::run(py, || self.inner.predict_mean(&xm))?;
        Ok(convert::to_numpy1(py, out))
    }

    /// The conditional variance at the rows of `x`.
    fn predict_variance<'py>(&self, py: Python<'py>, x: PyReadonlyArray2<'py, f64>) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let xm = convert::matrix(py, "X", &x)?;
        let out = errors::run(py, || self.inner.predict_variance(&xm))?;
        Ok(convert::to_numpy1(py, out))
    }

    /// Solver iterations of the fit.
    #[getter]
    fn iterations(&self) -> usize {
        self.inner.report().iterations
    }

    /// Pickling: the saved-model CBOR bytes.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        reduce(py, "load_heteroscedastic", self.inner.to_cbor())
    }
}
