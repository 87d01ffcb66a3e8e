//! Kernel specifications from Python, and the compute-core functions.

use gramian::{Device, Kernel, MatrixProduct, Precision};
use gramian::sparse::CsrMatrix;
use numpy::{PyArray2, PyReadonlyArray1, PyReadonlyArray2};
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

/// The `precision` argument: `"auto"` (`None`: the device's own choice, `f32`
/// on a GPU and `f64` on the CPU), `"float32"` or `"float64"`.
fn precision(py: Python<'_>, name: &str) -> PyResult<Option<Precision>> {
    match name {
        "auto" => Ok(None),
        "float32" => Ok(Some(Precision::F32)),
        "float64" => Ok(Some(Precision::F64)),
        other => Err(errors::invalid(py, format!("precision must be 'auto', 'float32' or 'float64', got {other:?}"))),
    }
}

/// The kernel matrix `K(X, Z)` (n x m) on `device`, in `precision`
/// (`"float32"`/`"float64"`: the inputs are stored on the device in that
/// type and the kernel computed there; `"auto"`: the device's default).
#[pyfunction]
pub fn kernel_matrix<'py>(py: Python<'py>, x: PyReadonlyArray2<'py, f64>, z: PyReadonlyArray2<'py, f64>, kernel: KernelSpec, device: &str, precision: &str) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let k = self::kernel(py, &kernel)?;
    let dev = device::resolve(py, device)?;
    let p = self::precision(py, precision)?;
    let (xm, zm) = (convert::matrix(py, "X", &x)?, convert::matrix(py, "Z", &z)?);
    let out = errors::run(py, || match p {
        None => dev.kernel_matrix(&k, &xm, &zm),
        Some(p) => {
            let (xd, zd) = (dev.upload(&xm, p)?, dev.upload(&zm, p)?);
            dev.to_host(&dev.resident_kernel_matrix(&k, &xd, &zd)?)
        }
    })?;
    Ok(convert::to_numpy2(py, out))
}

/// `K(X, Z) V` (n x c) for `V` (m x c) on `device`, without forming
/// `K(X, Z)`, in `precision` (as [`kernel_matrix`]).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn kernel_matvec<'py>(py: Python<'py>, x: PyReadonlyArray2<'py, f64>, z: PyReadonlyArray2<'py, f64>, v: PyReadonlyArray2<'py, f64>, kernel: KernelSpec, device: &str, precision: &str) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let k = self::kernel(py, &kernel)?;
    let dev = device::resolve(py, device)?;
    let p = self::precision(py, precision)?;
    let (xm, zm, vm) = (convert::matrix(py, "X", &x)?, convert::matrix(py, "Z", &z)?, convert::matrix(py, "V", &v)?);
    let out = errors::run(py, || match p {
        None => dev.kernel_matvec(&k, &xm, &zm, &vm),
        Some(p) => {
            let (xd, zd, vd) = (dev.upload(&xm, p)?, dev.upload(&zm, p)?, dev.upload(&vm, p)?);
            dev.to_host(&dev.resident_kernel_matvec(&k, &xd, &zd, &vd)?)
        }
    })?;
    Ok(convert::to_numpy2(py, out))
}

/// The product form `A B`, `A B^T` or `A^T B` of a pair of transpose flags
/// (`A^T B^T` is `(B A)^T`, which the caller computes as `B A`).
fn product_form(transpose_a: bool, transpose_b: bool) -> MatrixProduct {
    match (transpose_a, transpose_b) {
        (true, _) => MatrixProduct::AtB,
        (false, true) => MatrixProduct::ABt,
        (false, false) => MatrixProduct::AB,
    }
}

/// `A B`, `A B^T` or `A^T B` (`transpose_a` and `transpose_b` not both set)
/// on `device`, in `precision` (as [`kernel_matrix`]).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn matmul<'py>(py: Python<'py>, a: PyReadonlyArray2<'py, f64>, b: PyReadonlyArray2<'py, f64>, transpose_a: bool, transpose_b: bool, device: &str, precision: &str) -> PyResult<Bound<'py, PyArray2<f64>>> {
    if transpose_a && transpose_b {
        return Err(errors::invalid(py, "A^T B^T is (B A)^T: pass the operands swapped without transposes"));
    }
    let form = product_form(transpose_a, transpose_b);
    let dev = device::resolve(py, device)?;
    let p = self::precision(py, precision)?;
    let (am, bm) = (convert::matrix(py, "A", &a)?, convert::matrix(py, "B", &b)?);
    let out = errors::run(py, || match p {
        None => dev.matmul(&am, &bm, form),
        Some(p) => {
            let (ad, bd) = (dev.upload(&am, p)?, dev.upload(&bm, p)?);
            dev.to_host(&dev.resident_matmul(&ad, &bd, form)?)
        }
    })?;
    Ok(convert::to_numpy2(py, out))
}

/// The Gram matrix `Phi^T Phi` (d x d), or with `outer` `Phi Phi^T`
/// (n x n), on `device`, in `precision` (as [`kernel_matrix`]); symmetric.
#[pyfunction]
pub fn gram<'py>(py: Python<'py>, phi: PyReadonlyArray2<'py, f64>, outer: bool, device: &str, precision: &str) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let dev = device::resolve(py, device)?;
    let p = self::precision(py, precision)?;
    let pm = convert::matrix(py, "Phi", &phi)?;
    let out = errors::run(py, || match (p, outer) {
        (None, false) => dev.gram(&pm),
        (None, true) => dev.outer_gram(&pm),
        (Some(p), _) => {
            let pd = dev.upload(&pm, p)?;
            let form = if outer { MatrixProduct::ABt } else { MatrixProduct::AtB };
            let g = dev.to_host(&dev.resident_matmul(&pd, &pd, form)?)?;
            // The two triangles of a device product may differ in rounding.
            Ok((&g + g.transpose()) * 0.5)
        }
    })?;
    Ok(convert::to_numpy2(py, out))
}

/// A CSR matrix in scipy's arrays: `(indptr, indices, data, (rows, cols))`.
pub(crate) type CsrParts<'py> = (PyReadonlyArray1<'py, i64>, PyReadonlyArray1<'py, i64>, PyReadonlyArray1<'py, f64>, (usize, usize));

/// The CSR matrix of `parts` (scipy's canonical form: column indices sorted
/// and unique within a row), checked by `nalgebra-sparse`: offsets, index
/// ranges and order; a `ValueError` naming `what` otherwise.
pub(crate) fn csr(py: Python<'_>, what: &str, parts: &CsrParts<'_>) -> PyResult<CsrMatrix<f64>> {
    let (indptr, indices, data, (rows, cols)) = parts;
    let index = |a: &PyReadonlyArray1<'_, i64>, name: &str| -> PyResult<Vec<usize>> {
        let s = a.as_slice().map_err(|_| errors::invalid(py, format!("{what}.{name} must be a contiguous int64 array")))?;
        s.iter().map(|&v| usize::try_from(v).map_err(|_| errors::invalid(py, format!("{what}.{name} holds the negative index {v}")))).collect()
    };
    let values = data.as_slice().map_err(|_| errors::invalid(py, format!("{what}.data must be a contiguous float64 array")))?.to_vec();
    CsrMatrix::try_from_csr_data(*rows, *cols, index(indptr, "indptr")?, index(indices, "indices")?, values).map_err(|e| errors::invalid(py, format!("{what} is not a valid CSR matrix: {e}")))
}

/// `m` with its stored values rounded to `f32`.
fn csr_f32(m: &CsrMatrix<f64>) -> CsrMatrix<f32> {
    let (offsets, indices, values) = (m.row_offsets().to_vec(), m.col_indices().to_vec(), m.values().iter().map(|&v| v as f32).collect());
    CsrMatrix::try_from_csr_data(m.nrows(), m.ncols(), offsets, indices, values).expect("the structure of a valid CSR matrix")
}

/// `K(X, Z)` (n x m) for sparse CSR `X` (n x d) and `Z` (m x d), on the CPU
/// whatever `device` (as [`Device::kernel_matrix_sparse`]), in `precision`
/// (`"float32"` rounds the stored values and computes in `f32`).
#[pyfunction]
pub fn kernel_matrix_sparse<'py>(py: Python<'py>, x: CsrParts<'py>, z: CsrParts<'py>, kernel: KernelSpec, device: &str, precision: &str) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let k = self::kernel(py, &kernel)?;
    let dev = device::resolve(py, device)?;
    let p = self::precision(py, precision)?;
    let (xs, zs) = (csr(py, "X", &x)?, csr(py, "Z", &z)?);
    let out = errors::run(py, || match p {
        Some(Precision::F32) => dev.kernel_matrix_sparse(&k, &csr_f32(&xs), &csr_f32(&zs)).map(|m| m.map(|v| v as f64)),
        _ => dev.kernel_matrix_sparse(&k, &xs, &zs),
    })?;
    Ok(convert::to_numpy2(py, out))
}

/// `K(X, Z) V` (n x c) for sparse CSR `X`, `Z` and dense `V` (m x c),
/// without storing `K(X, Z)`, on the CPU (as [`kernel_matrix_sparse`]).
#[pyfunction]
pub fn kernel_matvec_sparse<'py>(py: Python<'py>, x: CsrParts<'py>, z: CsrParts<'py>, v: PyReadonlyArray2<'py, f64>, kernel: KernelSpec, device: &str, precision: &str) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let k = self::kernel(py, &kernel)?;
    let dev = device::resolve(py, device)?;
    let p = self::precision(py, precision)?;
    let (xs, zs) = (csr(py, "X", &x)?, csr(py, "Z", &z)?);
    let vm = convert::matrix(py, "V", &v)?;
    let out = errors::run(py, || match p {
        Some(Precision::F32) => {
            use gramian::AsMatrix;
            let v32 = vm.as_matrix()?.map(|v| v as f32);
            dev.kernel_matvec_sparse(&k, &csr_f32(&xs), &csr_f32(&zs), &v32).map(|m| m.map(|v| v as f64))
        }
        _ => dev.kernel_matvec_sparse(&k, &xs, &zs, &vm),
    })?;
    Ok(convert::to_numpy2(py, out))
}

/// Whether `device` holds and computes on `precision` (`"float32"`,
/// `"float64"`): the CPU both, a GPU `float32` and, where the adapter has
/// 64-bit floats in shaders, `float64`.
#[pyfunction]
pub fn supports_precision(py: Python<'_>, device: &str, precision: &str) -> PyResult<bool> {
    let dev: Device = device::resolve(py, device)?;
    Ok(match self::precision(py, precision)? {
        None => true,
        Some(p) => dev.supports(p),
    })
}

/// The address of the first entry the bindings read for the 2-D `float64`
/// array `x` (the view [`convert::matrix`] makes, as every function of the
/// module does): equal to the array's own data pointer when the input is
/// read without a copy. For the tests.
#[pyfunction]
pub fn _input_address(py: Python<'_>, x: PyReadonlyArray2<'_, f64>) -> PyResult<usize> {
    let view = convert::matrix(py, "X", &x)?;
    Ok(view.data().as_ptr() as usize)
}
