//! eKSVD: multi-source kernel SVD (fit on paired sources, scores per source).

use gramian::eksvd::{Eigensolver, Eksvd, EksvdParams, FeatureMap, Solver};
use gramian::io::SavedModel;
use gramian::{Error, Kernel, MultiSource};
use numpy::{PyArray1, PyArray2};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::convert::{source, SourceArg};
use crate::{convert, device, errors};

/// A feature map as the Python layer passes it, one per source:
/// `(kind, gamma, n_features, landmarks)`, `kind` one of `linear`
/// (the other fields ignored), `rff` (random Fourier features of the
/// Gaussian kernel) or `nystrom` (Nystrom features of the Gaussian kernel).
pub type MapSpec = (String, f64, usize, usize);

fn feature_map(spec: &MapSpec) -> Result<FeatureMap, Error> {
    let (kind, gamma, dim, landmarks) = spec;
    match kind.as_str() {
        "linear" => Ok(FeatureMap::Linear),
        "rff" => FeatureMap::random_fourier(*gamma, *dim),
        "nystrom" => FeatureMap::nystrom(Kernel::rbf(*gamma)?, *dim, *landmarks),
        _ => Err(Error::InvalidParameter { name: "feature_map", reason: format!("must be 'linear', 'rff' or 'nystrom', got {kind:?}") }),
    }
}

/// A fitted eKSVD model (wrapped by `gramian.EKSVD`).
#[pyclass(module = "gramian._core", frozen)]
pub struct EksvdModel {
    inner: Eksvd,
}

/// Fits eKSVD with `n_components` components on paired sources `xs`
/// (at least 2, the same number of rows), one feature map per source, the
/// dual (`covariance = false`) or covariance formulation, dense eigensolver.
#[pyfunction]
pub fn fit_eksvd(py: Python<'_>, xs: Vec<SourceArg<'_>>, n_components: usize, maps: Vec<MapSpec>, covariance: bool, seed: u64, device: &str, precision: &str) -> PyResult<EksvdModel> {
    let dev = device::resolve(py, device)?;
    let wp = device::working_precision(py, precision)?;
    let sources = xs.iter().enumerate().map(|(q, x)| source(py, &format!("Xs[{q}]"), x)).collect::<PyResult<Vec<_>>>()?;
    let inner = errors::run(py, || {
        let maps = maps.iter().map(feature_map).collect::<Result<Vec<_>, _>>()?;
        let solver = if covariance { Solver::Covariance(Eigensolver::Dense) } else { Solver::Dual(Eigensolver::Dense) };
        let data = MultiSource::paired(sources)?;
        EksvdParams::new(n_components).precision(wp).feature_maps(maps).solver(solver).seed(seed).fit(&dev, &data)
    })?;
    Ok(EksvdModel { inner })
}

/// A model from the bytes of `EksvdModel.__reduce__` (on the CPU).
#[pyfunction]
pub fn load_eksvd(py: Python<'_>, data: &[u8]) -> PyResult<EksvdModel> {
    Ok(EksvdModel { inner: Eksvd::from_cbor(data).map_err(|e| errors::to_py(py, e))? })
}

#[pymethods]
impl EksvdModel {
    /// Scores (n x n_components) of the rows `x` of source `q`.
    fn transform_source<'py>(&self, py: Python<'py>, q: usize, x: SourceArg<'py>) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let xm = source(py, "X", &x)?;
        let out = errors::run(py, || self.inner.transform_source(q, &xm))?;
        Ok(convert::to_numpy2(py, out))
    }

    /// The eigenvalues `lambda_k = 1 / gamma_k`, largest first.
    #[getter]
    fn eigenvalues<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        convert::to_numpy1(py, self.inner.eigenvalues().clone())
    }

    /// Number of sources.
    #[getter]
    fn n_sources(&self) -> usize {
        self.inner.n_sources()
    }

    /// Pickling: the saved-model CBOR bytes.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let bytes = self.inner.to_cbor().map_err(|e| errors::to_py(py, e))?;
        let load = py.import("gramian._core")?.getattr("load_eksvd")?;
        PyTuple::new(py, [load, PyTuple::new(py, [PyBytes::new(py, &bytes)])?.into_any()])
    }
}
