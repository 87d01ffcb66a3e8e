//! Kernel specifications from Python, and the compute-core functions.

use gramian::Kernel;
use numpy::{PyArray2, PyReadonlyArray2};
use pyo3::prelude::*;

use crate::{convert, device, errors};

/// A kernel as the Python layer passes it: `(name, gamma, coef0, degree)`,
/// `name` one of `rbf`, `laplacian`, `linear`, `poly`, `sigmoid`; the
/// parameters a kernel does not have are ignored.
pub type KernelSpec = (String, f64, f64, u32);

/// The library's kernel for a specification (its parameters validated).
pub fn kernel(py: Python<'_>, spec: &KernelSpec) -> PyResult<Kernel> {
    let (name, gamma, coef0, degree) = spec;
    let made = match name.as_str() {
        "rbf" => Kernel::rbf(*gamma),
        "laplacian" => Kernel::laplacian(*gamma),
        "linear" => Ok(Kernel::linear()),
        "poly" => Kernel::polynomial(*gamma, *coef0, *degree),
        "sigmoid" => Kernel::sigmoid(*gamma, *coef0),
        other => return Err(errors::invalid(py, format!("unknown kernel {other:?} (expected 'rbf', 'laplacian', 'linear', 'poly' or 'sigmoid')"))),
    };
    made.map_err(|e| errors::to_py(py, e))
}

/// The kernel matrix `K(X, Z)` (n x m) on `device`.
#[pyfunction]
pub fn kernel_matrix<'py>(py: Python<'py>, x: PyReadonlyArray2<'py, f64>, z: PyReadonlyArray2<'py, f64>, kernel: KernelSpec, device: &str) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let k = self::kernel(py, &kernel)?;
    let dev = device::resolve(py, device)?;
    let (xm, zm) = (convert::matrix(py, "X", &x)?, convert::matrix(py, "Z", &z)?);
    let out = errors::run(py, || dev.kernel_matrix(&k, &xm, &zm))?;
    Ok(convert::to_numpy2(py, out))
}

/// `K(X, Z) V` (n x c) for `V` (m x c) on `device`, without forming `K(X, Z)`.
#[pyfunction]
pub fn kernel_matvec<'py>(py: Python<'py>, x: PyReadonlyArray2<'py, f64>, z: PyReadonlyArray2<'py, f64>, v: PyReadonlyArray2<'py, f64>, kernel: KernelSpec, device: &str) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let k = self::kernel(py, &kernel)?;
    let dev = device::resolve(py, device)?;
    let (xm, zm, vm) = (convert::matrix(py, "X", &x)?, convert::matrix(py, "Z", &z)?, convert::matrix(py, "V", &v)?);
    let out = errors::run(py, || dev.kernel_matvec(&k, &xm, &zm, &vm))?;
    Ok(convert::to_numpy2(py, out))
}
