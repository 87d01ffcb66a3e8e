//! Neural eKSVD (built with the cargo feature `neural`): fit, transform,
//! predict, pickling.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use gramian::eksvd::neural::{NeuralEksvd, NeuralEksvdParams};
use gramian::estimator::{Fit, Predict};
use gramian::{Error, Labelled, MultiSource};
use numpy::{PyArray2, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::{convert, device, errors};

/// A fitted Neural eKSVD model (wrapped by `gramian.NeuralEKSVD`).
#[pyclass(module = "gramian._core", frozen)]
pub struct NeuralEksvdModel {
    inner: NeuralEksvd,
}

/// The paired sources `xs` as the library's multi-source data.
fn paired(py: Python<'_>, what: &str, xs: &[PyReadonlyArray2<'_, f64>]) -> PyResult<MultiSource> {
    let views = xs.iter().enumerate().map(|(q, x)| convert::matrix(py, &format!("{what}[{q}]"), x)).collect::<PyResult<Vec<_>>>()?;
    MultiSource::paired(views).map_err(|e| errors::to_py(py, e))
}

/// Fits Neural eKSVD on the paired sources `xs` with class `labels`; with
/// `validation = (xs, labels)` early stopping watches the validation
/// macro-F1 ([`NeuralEksvdParams::fit_with_validation`]).
///
/// `network` is `(components, hidden widths, d_phi, eta, learning rate,
/// batch size, max epochs, patience, seed)`.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn fit_neural_eksvd(py: Python<'_>, xs: Vec<PyReadonlyArray2<'_, f64>>, labels: Vec<usize>, validation: Option<(Vec<PyReadonlyArray2<'_, f64>>, Vec<usize>)>, network: (usize, Vec<usize>, usize, f64, f64, usize, usize, usize, u64), device: &str, precision: &str) -> PyResult<NeuralEksvdModel> {
    let dev = device::resolve(py, device)?;
    let wp = device::working_precision(py, precision)?;
    let train = Labelled::new(paired(py, "Xs", &xs)?, labels).map_err(|e| errors::to_py(py, e))?;
    let validation = match validation {
        Some((vx, vy)) => Some(Labelled::new(paired(py, "validation Xs", &vx)?, vy).map_err(|e| errors::to_py(py, e))?),
        None => None,
    };
    let (components, hidden, d_phi, eta, learning_rate, batch_size, max_epochs, patience, seed) = network;
    let inner = errors::run(py, || {
        let params = NeuralEksvdParams::new(components).precision(wp).hidden(hidden).d_phi(d_phi).eta(eta).learning_rate(learning_rate).batch_size(batch_size).max_epochs(max_epochs).patience(patience).seed(seed);
        match &validation {
            Some(v) => params.fit_with_validation(&dev, &train, v),
            None => params.fit(&dev, &train),
        }
    })?;
    Ok(NeuralEksvdModel { inner })
}

/// A fresh directory under the system's temporary folder.
fn scratch() -> PathBuf {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    std::env::temp_dir().join(format!("gramian-neural-{}-{}-{nanos}", std::process::id(), COUNT.fetch_add(1, Ordering::Relaxed)))
}

const FILES: [&str; 2] = ["architecture.txt", "model.bpk"];

/// A model from the bytes of `NeuralEksvdModel.__reduce__` (the files of
/// [`NeuralEksvd::save`]), on the CPU.
#[pyfunction]
pub fn load_neural_eksvd(py: Python<'_>, architecture: &[u8], weights: &[u8]) -> PyResult<NeuralEksvdModel> {
    let (architecture, weights) = (architecture.to_vec(), weights.to_vec());
    let inner = errors::run(py, move || {
        let dir = scratch();
        let io = |e: std::io::Error| Error::Record(format!("{}: {e}", dir.display()));
        std::fs::create_dir_all(&dir).map_err(io)?;
        let loaded = std::fs::write(dir.join(FILES[0]), &architecture).and_then(|_| std::fs::write(dir.join(FILES[1]), &weights)).map_err(io).and_then(|_| NeuralEksvd::load(&dir));
        let _ = std::fs::remove_dir_all(&dir);
        loaded
    })?;
    Ok(NeuralEksvdModel { inner })
}

#[pymethods]
impl NeuralEksvdModel {
    /// Scores (n x components) of the rows `x` of source `q`.
    fn transform_source<'py>(&self, py: Python<'py>, q: usize, x: PyReadonlyArray2<'py, f64>) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let xm = convert::matrix(py, "X", &x)?;
        let out = errors::run(py, || self.inner.transform_source(q, &xm))?;
        Ok(convert::to_numpy2(py, out))
    }

    /// The class of every sample of the paired sources `xs`.
    fn predict(&self, py: Python<'_>, xs: Vec<PyReadonlyArray2<'_, f64>>) -> PyResult<Vec<usize>> {
        let data = paired(py, "Xs", &xs)?;
        errors::run(py, || self.inner.predict(&data))
    }

    /// The learned regularisation constant `gamma`.
    #[getter]
    fn gamma(&self) -> f64 {
        self.inner.gamma()
    }

    /// The epoch whose weights were kept.
    #[getter]
    fn best_epoch(&self) -> usize {
        self.inner.best_epoch()
    }

    /// Pickling: the files of [`NeuralEksvd::save`] as bytes.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let files = errors::run(py, || {
            let dir = scratch();
            let read = self.inner.save(&dir).and_then(|_| FILES.iter().map(|f| std::fs::read(dir.join(f)).map_err(|e| Error::Record(format!("{}: {e}", dir.display())))).collect::<Result<Vec<_>, _>>());
            let _ = std::fs::remove_dir_all(&dir);
            read
        })?;
        let load = py.import("gramian._core")?.getattr("load_neural_eksvd")?;
        PyTuple::new(py, [load, PyTuple::new(py, [PyBytes::new(py, &files[0]), PyBytes::new(py, &files[1])])?.into_any()])
    }
}
