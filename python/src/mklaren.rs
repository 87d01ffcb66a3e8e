//! mklaren and its baselines (stacked low-rank ridge, full-kernel ridge):
//! fit, predict, pickling.
//!
//! Every fit takes `xs`, one input shared by all kernels or one input per
//! kernel (the same rows in each), and so does every predict.

use gramian::io::SavedModel;
use gramian::mklaren::{FullKernelRidge, FullKernelRidgeParams, KernelCombination, LowRankMethod, LowRankRidge, LowRankRidgeParams, Mklaren, MklarenParams};
use gramian::{AsMatrix, Error, Kernel, RowMajor};
use nalgebra::{DMatrix, DVector};
use numpy::{PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::convert::SourceArg;
use crate::kernels::{self, KernelSpec};
use crate::{convert, device, errors};

/// `(loader, (bytes,))` for `__reduce__`.
fn reduce<'py>(py: Python<'py>, loader: &str, bytes: gramian::error::Result<Vec<u8>>) -> PyResult<Bound<'py, PyTuple>> {
    let bytes = bytes.map_err(|e| errors::to_py(py, e))?;
    let load = py.import("gramian._core")?.getattr(loader)?;
    PyTuple::new(py, [load, PyTuple::new(py, [PyBytes::new(py, &bytes)])?.into_any()])
}

/// The arrays of `xs` as row-major views (no copy).
fn views<'a>(py: Python<'_>, xs: &'a [PyReadonlyArray2<'_, f64>]) -> PyResult<Vec<RowMajor<'a, f64>>> {
    if xs.is_empty() {
        return Err(errors::invalid(py, "Xs must hold at least one input"));
    }
    xs.iter().enumerate().map(|(q, x)| convert::matrix(py, &format!("Xs[{q}]"), x)).collect()
}

/// A matrix input that crosses to the fit's thread.
type Input<'a> = Box<dyn AsMatrix<Elem = f64> + Send + Sync + 'a>;

/// The inputs of `xs`: dense rows as row-major views (no copy), CSR parts
/// as sparse matrices (kept sparse by mklaren and the low-rank baselines).
fn inputs<'a>(py: Python<'_>, xs: &'a [SourceArg<'_>]) -> PyResult<Vec<Input<'a>>> {
    if xs.is_empty() {
        return Err(errors::invalid(py, "Xs must hold at least one input"));
    }
    xs.iter().enumerate().map(|(q, x)| convert::source(py, &format!("Xs[{q}]"), x)).collect()
}

/// The inputs as the references a fit or a prediction takes.
fn refs<'r>(inputs: &'r [Input<'_>]) -> Vec<&'r (dyn AsMatrix<Elem = f64> + Send + Sync + 'r)> {
    inputs.iter().map(|x| &**x as &(dyn AsMatrix<Elem = f64> + Send + Sync)).collect()
}

/// The views as dense matrices (the baselines' fits and predictions take
/// `DMatrix` inputs).
fn dense(views: &[RowMajor<'_, f64>]) -> Result<Vec<DMatrix<f64>>, Error> {
    views.iter().map(|v| v.as_matrix().map(|m| m.into_owned())).collect()
}

fn kernel_list(py: Python<'_>, specs: &[KernelSpec]) -> PyResult<Vec<Kernel>> {
    specs.iter().map(|spec| kernels::kernel(py, spec)).collect()
}

/// A fitted mklaren model (wrapped by `gramian.Mklaren`).
#[pyclass(module = "gramian._core", frozen)]
pub struct MklarenModel {
    inner: Mklaren,
}

/// Fits mklaren with `kernels` on the inputs `xs` and target `y`.
///
/// `rank` is the most pivot columns: when the kernels run out of
/// numerically independent columns first ([`Error::RankDeficient`]), the
/// model is fitted again at the rank reached.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn fit_mklaren(py: Python<'_>, xs: Vec<SourceArg<'_>>, y: PyReadonlyArray1<'_, f64>, kernels: Vec<KernelSpec>, rank: usize, lookahead: usize, lambda: f64, device: &str, precision: &str) -> PyResult<MklarenModel> {
    let kernels = kernel_list(py, &kernels)?;
    let dev = device::resolve(py, device)?;
    let wp = device::working_precision(py, precision)?;
    let inputs = inputs(py, &xs)?;
    let ys = convert::vector(py, "y", &y)?;
    let inner = errors::run(py, || {
        let refs = refs(&inputs);
        let fit = |rank: usize| MklarenParams::new(rank).precision(wp).lookahead(lookahead).lambda(lambda).kernels(&kernels).fit_inputs(&dev, &refs, ys);
        match fit(rank) {
            Err(Error::RankDeficient { reached, .. }) if reached >= 1 => fit(reached),
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
    /// Predictions for the rows of `xs` (the inputs' layout of the fit).
    fn predict<'py>(&self, py: Python<'py>, xs: Vec<SourceArg<'py>>) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let inputs = inputs(py, &xs)?;
        let out = errors::run(py, || self.inner.predict_inputs(&refs(&inputs)))?;
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
        reduce(py, "load_mklaren", self.inner.to_cbor())
    }
}

/// A fitted stacked low-rank ridge regression (wrapped by `gramian.LowRankRidge`).
#[pyclass(module = "gramian._core", frozen)]
pub struct LowRankModel {
    inner: LowRankRidge,
}

/// Fits the stacked low-rank ridge baseline: each kernel approximated at
/// rank `rank_per_kernel` by `method` (`"icd"`, `"nystrom"` with `seed`,
/// or `"csi"` with `lookahead` and `kappa`), ridge `lambda` on the stacked
/// standardised factors.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn fit_low_rank(py: Python<'_>, xs: Vec<SourceArg<'_>>, y: PyReadonlyArray1<'_, f64>, kernels: Vec<KernelSpec>, method: &str, rank_per_kernel: usize, lambda: f64, seed: u64, lookahead: usize, kappa: f64, device: &str, precision: &str) -> PyResult<LowRankModel> {
    let kernels = kernel_list(py, &kernels)?;
    let method = match method {
        "icd" => LowRankMethod::Icd,
        "nystrom" => LowRankMethod::Nystrom { seed },
        "csi" => LowRankMethod::Csi { lookahead, kappa },
        other => return Err(errors::invalid(py, format!("method must be 'icd', 'nystrom' or 'csi', got {other:?}"))),
    };
    let dev = device::resolve(py, device)?;
    let wp = device::working_precision(py, precision)?;
    let inputs = inputs(py, &xs)?;
    let ys = convert::vector(py, "y", &y)?;
    let inner = errors::run(py, || LowRankRidgeParams::new(method, rank_per_kernel).precision(wp).kernels(&kernels).lambda(lambda).fit_inputs(&dev, &refs(&inputs), &DVector::from_column_slice(ys)))?;
    Ok(LowRankModel { inner })
}

/// A model from the bytes of `LowRankModel.__reduce__` (on the CPU).
#[pyfunction]
pub fn load_low_rank(py: Python<'_>, data: &[u8]) -> PyResult<LowRankModel> {
    Ok(LowRankModel { inner: LowRankRidge::from_cbor(data).map_err(|e| errors::to_py(py, e))? })
}

#[pymethods]
impl LowRankModel {
    /// Predictions for the rows of `xs`.
    fn predict<'py>(&self, py: Python<'py>, xs: Vec<SourceArg<'py>>) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let inputs = inputs(py, &xs)?;
        let out = errors::run(py, || self.inner.predict_inputs(&refs(&inputs)))?;
        Ok(convert::to_numpy1(py, out))
    }

    /// Ridge coefficients on the standardised stacked factors.
    #[getter]
    fn coefficients<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        convert::to_numpy1(py, self.inner.coefficients().clone())
    }

    /// Each kernel's factor `G_q* = K_q(X*, A_q) T_q` of the rows of `xs`
    /// (Eq. 21; `G_q G_q^T` approximates `K_q`), one array per kernel.
    fn factors<'py>(&self, py: Python<'py>, xs: Vec<SourceArg<'py>>) -> PyResult<Vec<Bound<'py, PyArray2<f64>>>> {
        let inputs = inputs(py, &xs)?;
        let device = gramian::estimator::OnDevice::device(&self.inner).clone();
        let out = errors::run(py, || {
            let p = self.inner.transforms().len();
            (0..p).map(|q| self.inner.transforms()[q].apply(&device, &*inputs[if inputs.len() == 1 { 0 } else { q }])).collect::<Result<Vec<_>, _>>()
        })?;
        Ok(out.into_iter().map(|g| convert::to_numpy2(py, g)).collect())
    }

    /// Each kernel's pivot (landmark) rows `A_q`.
    #[getter]
    fn pivot_rows<'py>(&self, py: Python<'py>) -> Vec<Bound<'py, PyArray2<f64>>> {
        self.inner.transforms().iter().map(|t| convert::to_numpy2(py, t.pivot_rows().clone())).collect()
    }

    /// Columns of each kernel's factor.
    #[getter]
    fn ranks(&self) -> Vec<usize> {
        self.inner.transforms().iter().map(|t| t.matrix().ncols()).collect()
    }

    /// Pickling: the saved-model CBOR bytes.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        reduce(py, "load_low_rank", self.inner.to_cbor())
    }
}

/// A fitted full-kernel ridge regression (wrapped by `gramian.MultipleKernelRidge`).
#[pyclass(module = "gramian._core", frozen)]
pub struct FullKernelModel {
    inner: FullKernelRidge,
}

/// Fits kernel ridge regression on the `combination` (`"uniform"`,
/// `"align"`, `"alignf"`, `"alignfc"`) of the full kernel matrices.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn fit_full_kernel(py: Python<'_>, xs: Vec<PyReadonlyArray2<'_, f64>>, y: PyReadonlyArray1<'_, f64>, kernels: Vec<KernelSpec>, combination: &str, lambda: f64, device: &str, precision: &str) -> PyResult<FullKernelModel> {
    let kernels = kernel_list(py, &kernels)?;
    let combination = match combination {
        "uniform" => KernelCombination::Uniform,
        "align" => KernelCombination::Align,
        "alignf" => KernelCombination::Alignf,
        "alignfc" => KernelCombination::Alignfc,
        other => return Err(errors::invalid(py, format!("combination must be 'uniform', 'align', 'alignf' or 'alignfc', got {other:?}"))),
    };
    let dev = device::resolve(py, device)?;
    let wp = device::working_precision(py, precision)?;
    let inputs = views(py, &xs)?;
    let ys = convert::vector(py, "y", &y)?;
    let inner = errors::run(py, || {
        let mats = dense(&inputs)?;
        let refs: Vec<&DMatrix<f64>> = mats.iter().collect();
        FullKernelRidgeParams::new(combination).precision(wp).kernels(&kernels).lambda(lambda).fit_inputs(&dev, &refs, &DVector::from_column_slice(ys))
    })?;
    Ok(FullKernelModel { inner })
}

/// A model from the bytes of `FullKernelModel.__reduce__` (on the CPU).
#[pyfunction]
pub fn load_full_kernel(py: Python<'_>, data: &[u8]) -> PyResult<FullKernelModel> {
    Ok(FullKernelModel { inner: FullKernelRidge::from_cbor(data).map_err(|e| errors::to_py(py, e))? })
}

#[pymethods]
impl FullKernelModel {
    /// Predictions for the rows of `xs`.
    fn predict<'py>(&self, py: Python<'py>, xs: Vec<PyReadonlyArray2<'py, f64>>) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let inputs = views(py, &xs)?;
        let out = errors::run(py, || {
            let mats = dense(&inputs)?;
            let refs: Vec<&DMatrix<f64>> = mats.iter().collect();
            self.inner.predict_inputs(&refs)
        })?;
        Ok(convert::to_numpy1(py, out))
    }

    /// Kernel weights `mu` (rescaled to `sum |mu_q| = p`).
    #[getter]
    fn weights<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        convert::to_numpy1(py, self.inner.weights().clone())
    }

    /// Dual coefficients `alpha`.
    #[getter]
    fn dual_coefficients<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        convert::to_numpy1(py, self.inner.dual_coefficients().clone())
    }

    /// Pickling: the saved-model CBOR bytes.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        reduce(py, "load_full_kernel", self.inner.to_cbor())
    }
}
