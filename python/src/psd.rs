//! PSD models: density, quantile regression, heteroscedastic regression.

use gramian::io::SavedModel;
use gramian::psd::{
    BaseMeasure, BaselineDensity, BaselineHeteroscedastic, BaselineHeteroscedasticParams, BaselineKind, BaselineParams, BaselineQuantile, BaselineQuantileParams, DensityParams, HeteroscedasticParams, HeteroscedasticRegression, PsdDensity, QuantileParams, QuantileRegression, Regularisation,
    SolverOptions,
};
use gramian::{Error, Kernel};
use nalgebra::DVector;
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

/// The base measure: Lebesgue for `None`, otherwise the Gaussian
/// `N(mean, diag(std^2))`.
type Base = Option<(Vec<f64>, Vec<f64>)>;

fn base_measure(base: Base) -> Result<BaseMeasure, Error> {
    match base {
        None => Ok(BaseMeasure::Lebesgue),
        Some((mean, std)) => BaseMeasure::gaussian(DVector::from_vec(mean), DVector::from_vec(std)),
    }
}

/// Fits a PSD density with a Gaussian kernel of width `sigma`, the base
/// measure `base` and the regulariser `trace tr(A) + quadratic/2 ||A||_F^2`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn fit_density(py: Python<'_>, x: PyReadonlyArray2<'_, f64>, sigma: f64, trace: f64, quadratic: f64, solver: Solver, base: Base, device: &str, precision: &str) -> PyResult<DensityModel> {
    let dev = device::resolve(py, device)?;
    let wp = device::working_precision(py, precision)?;
    let xm = convert::matrix(py, "X", &x)?;
    let (tolerance, max_iterations, nystrom) = solver;
    let inner = errors::run(py, || {
        let mut params = DensityParams::new(Kernel::gaussian_with_width(sigma)?)?.precision(wp).regularisation(Regularisation::new().trace(trace).quadratic(quadratic)).solver(options(tolerance, max_iterations, 2)).base_measure(base_measure(base)?);
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

    /// `P(X in prod_k [lower_k, upper_k])` in closed form.
    fn box_probability(&self, py: Python<'_>, lower: Vec<f64>, upper: Vec<f64>) -> PyResult<f64> {
        errors::run(py, || self.inner.box_probability(&lower, &upper))
    }

    /// The marginal density of the coordinates `keep` (increasing), in closed form.
    fn marginal(&self, py: Python<'_>, keep: Vec<usize>) -> PyResult<DensityModel> {
        Ok(DensityModel { inner: errors::run(py, || self.inner.marginal(&keep))? })
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
pub fn fit_quantiles(py: Python<'_>, x: PyReadonlyArray2<'_, f64>, y: PyReadonlyArray1<'_, f64>, levels: Vec<f64>, sigma: f64, penalties: (f64, f64, f64), solver: Solver, device: &str, precision: &str) -> PyResult<QuantileModel> {
    let dev = device::resolve(py, device)?;
    let wp = device::working_precision(py, precision)?;
    let (xm, ys) = (convert::matrix(py, "X", &x)?, convert::vector(py, "y", &y)?);
    let (linear, trace, quadratic) = penalties;
    let (tolerance, max_iterations, nystrom) = solver;
    let inner = errors::run(py, || {
        let mut params = QuantileParams::new(Kernel::gaussian_with_width(sigma)?, &levels)?.precision(wp).regularisation(Regularisation::new().linear(linear).trace(trace).quadratic(quadratic)).solver(options(tolerance, max_iterations, 10));
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
pub fn fit_heteroscedastic(py: Python<'_>, x: PyReadonlyArray2<'_, f64>, y: PyReadonlyArray1<'_, f64>, sigma: f64, penalties: (f64, f64, f64), solver: Solver, device: &str, precision: &str) -> PyResult<HeteroscedasticModel> {
    let dev = device::resolve(py, device)?;
    let wp = device::working_precision(py, precision)?;
    let (xm, ys) = (convert::matrix(py, "X", &x)?, convert::vector(py, "y", &y)?);
    let (linear, trace, quadratic) = penalties;
    let (tolerance, max_iterations, nystrom) = solver;
    let inner = errors::run(py, || {
        let mut params = HeteroscedasticParams::new(Kernel::gaussian_with_width(sigma)?)?.precision(wp).regularisation(Regularisation::new().linear(linear).trace(trace).quadratic(quadratic)).solver(options(tolerance, max_iterations, 10));
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

/// The methods of a fitted heteroscedastic regression (PSD model or
/// baseline): mean, variance, iterations and pickling through `$loader`.
macro_rules! heteroscedastic_methods {
    ($model:ident, $loader:literal) => {
        #[pymethods]
        impl $model {
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
                reduce(py, $loader, self.inner.to_cbor())
            }
        }
    };
}

heteroscedastic_methods!(HeteroscedasticModel, "load_heteroscedastic");

fn baseline_kind(py: Python<'_>, kind: &str) -> PyResult<BaselineKind> {
    match kind {
        "pnm" => Ok(BaselineKind::Pnm),
        "ncm" => Ok(BaselineKind::Ncm),
        "glm" => Ok(BaselineKind::Glm),
        other => Err(errors::invalid(py, format!("kind must be 'pnm', 'ncm' or 'glm', got {other:?}"))),
    }
}

/// A fitted baseline density (wrapped by `gramian.BaselineDensity`).
#[pyclass(module = "gramian._core", frozen)]
pub struct BaselineDensityModel {
    inner: BaselineDensity,
}

/// Fits the baseline density `kind` (`"pnm"`, `"ncm"`, `"glm"`) with a
/// Gaussian kernel of width `sigma`, the regulariser
/// `lambda/2 alpha^T K alpha`, the solver's `(tolerance, max_iterations)`
/// (`None`: the library's defaults), GLM's Monte Carlo sample size and seed,
/// and the base measure `base`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn fit_baseline_density(py: Python<'_>, x: PyReadonlyArray2<'_, f64>, kind: &str, sigma: f64, lambda: f64, solver: Option<(f64, usize)>, monte_carlo: (usize, u64), base: Base, device: &str, precision: &str) -> PyResult<BaselineDensityModel> {
    let kind = baseline_kind(py, kind)?;
    let dev = device::resolve(py, device)?;
    let wp = device::working_precision(py, precision)?;
    let xm = convert::matrix(py, "X", &x)?;
    let inner = errors::run(py, || {
        let mut params = BaselineParams::new(kind, Kernel::gaussian_with_width(sigma)?)?.precision(wp).regularisation(Regularisation::new().quadratic(lambda)).monte_carlo(monte_carlo.0, monte_carlo.1).base_measure(base_measure(base)?);
        if let Some((tolerance, max_iterations)) = solver {
            params = params.solver(options(tolerance, max_iterations, 1));
        }
        params.fit(&dev, &xm)
    })?;
    Ok(BaselineDensityModel { inner })
}

/// A baseline density from the bytes of `BaselineDensityModel.__reduce__` (on the CPU).
#[pyfunction]
pub fn load_baseline_density(py: Python<'_>, data: &[u8]) -> PyResult<BaselineDensityModel> {
    Ok(BaselineDensityModel { inner: BaselineDensity::from_cbor(data).map_err(|e| errors::to_py(py, e))? })
}

#[pymethods]
impl BaselineDensityModel {
    /// The density at the rows of `x` (PNM's may be negative away from the data).
    fn density<'py>(&self, py: Python<'py>, x: PyReadonlyArray2<'py, f64>) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let xm = convert::matrix(py, "X", &x)?;
        let out = errors::run(py, || self.inner.density(&xm))?;
        Ok(convert::to_numpy1(py, out))
    }

    /// `int p`: 1 in closed form for PNM and NCM, a Monte Carlo estimate for GLM.
    fn integral(&self, py: Python<'_>) -> PyResult<f64> {
        errors::run(py, || self.inner.integral())
    }

    /// Coefficients `alpha` of `g = sum_j alpha_j k(., x_j)`.
    #[getter]
    fn coefficients<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        convert::to_numpy1(py, self.inner.coefficients().clone())
    }

    /// Pickling: the saved-model CBOR bytes.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        reduce(py, "load_baseline_density", self.inner.to_cbor())
    }
}

/// A fitted baseline quantile regression (wrapped by `gramian.BaselineQuantileRegressor`).
#[pyclass(module = "gramian._core", frozen)]
pub struct BaselineQuantileModel {
    inner: BaselineQuantile,
}

/// Fits the baseline quantile regression `kind` at `levels` with a Gaussian
/// kernel of width `sigma`, penalties `(linear, quadratic)`, the pinball
/// loss's `smoothing`, `(restarts, seed)` and the solver's
/// `(tolerance, max_iterations)` (`None`: the library's defaults).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn fit_baseline_quantiles(py: Python<'_>, x: PyReadonlyArray2<'_, f64>, y: PyReadonlyArray1<'_, f64>, kind: &str, levels: Vec<f64>, sigma: f64, penalties: (f64, f64), smoothing: f64, restarts: (usize, u64), solver: Option<(f64, usize)>, device: &str, precision: &str) -> PyResult<BaselineQuantileModel> {
    let kind = baseline_kind(py, kind)?;
    let dev = device::resolve(py, device)?;
    let wp = device::working_precision(py, precision)?;
    let (xm, ys) = (convert::matrix(py, "X", &x)?, convert::vector(py, "y", &y)?);
    let inner = errors::run(py, || {
        let mut params = BaselineQuantileParams::new(kind, Kernel::gaussian_with_width(sigma)?, &levels)?.precision(wp).regularisation(Regularisation::new().linear(penalties.0).quadratic(penalties.1)).smoothing(smoothing).restarts(restarts.0, restarts.1);
        if let Some((tolerance, max_iterations)) = solver {
            params = params.solver(options(tolerance, max_iterations, 1));
        }
        params.fit_xy(&dev, &xm, ys)
    })?;
    Ok(BaselineQuantileModel { inner })
}

/// A baseline quantile model from the bytes of `BaselineQuantileModel.__reduce__` (on the CPU).
#[pyfunction]
pub fn load_baseline_quantiles(py: Python<'_>, data: &[u8]) -> PyResult<BaselineQuantileModel> {
    Ok(BaselineQuantileModel { inner: BaselineQuantile::from_cbor(data).map_err(|e| errors::to_py(py, e))? })
}

#[pymethods]
impl BaselineQuantileModel {
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
        reduce(py, "load_baseline_quantiles", self.inner.to_cbor())
    }
}

/// A fitted baseline heteroscedastic regression (wrapped by
/// `gramian.BaselineHeteroscedasticRegressor`).
#[pyclass(module = "gramian._core", frozen)]
pub struct BaselineHeteroscedasticModel {
    inner: BaselineHeteroscedastic,
}

/// Fits the baseline heteroscedastic regression `kind` (the model of the
/// precision) with a Gaussian kernel of width `sigma`, penalties
/// `(linear, quadratic)`, `(restarts, seed)` and the solver's
/// `(tolerance, max_iterations)` (`None`: the library's defaults).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn fit_baseline_heteroscedastic(py: Python<'_>, x: PyReadonlyArray2<'_, f64>, y: PyReadonlyArray1<'_, f64>, kind: &str, sigma: f64, penalties: (f64, f64), restarts: (usize, u64), solver: Option<(f64, usize)>, device: &str, precision: &str) -> PyResult<BaselineHeteroscedasticModel> {
    let kind = baseline_kind(py, kind)?;
    let dev = device::resolve(py, device)?;
    let wp = device::working_precision(py, precision)?;
    let (xm, ys) = (convert::matrix(py, "X", &x)?, convert::vector(py, "y", &y)?);
    let inner = errors::run(py, || {
        let mut params = BaselineHeteroscedasticParams::new(kind, Kernel::gaussian_with_width(sigma)?)?.precision(wp).regularisation(Regularisation::new().linear(penalties.0).quadratic(penalties.1)).restarts(restarts.0, restarts.1);
        if let Some((tolerance, max_iterations)) = solver {
            params = params.solver(options(tolerance, max_iterations, 1));
        }
        params.fit_xy(&dev, &xm, ys)
    })?;
    Ok(BaselineHeteroscedasticModel { inner })
}

/// A baseline heteroscedastic model from the bytes of
/// `BaselineHeteroscedasticModel.__reduce__` (on the CPU).
#[pyfunction]
pub fn load_baseline_heteroscedastic(py: Python<'_>, data: &[u8]) -> PyResult<BaselineHeteroscedasticModel> {
    Ok(BaselineHeteroscedasticModel { inner: BaselineHeteroscedastic::from_cbor(data).map_err(|e| errors::to_py(py, e))? })
}

heteroscedastic_methods!(BaselineHeteroscedasticModel, "load_baseline_heteroscedastic");
