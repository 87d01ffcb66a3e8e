//! Kernel columns computed on demand, never the full kernel matrix.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use nalgebra::DMatrix;

use crate::kernel::row_squared_norms;
use crate::linalg::{self, check_matrix};
use crate::resident::DeviceMatrix;
use crate::{ComputeError, Device, Kernel};

/// Rows handled per parallel task in the element-wise loops.
pub(crate) const ROW_CHUNK: usize = 8192;

/// The columns `K(:, i)` of one kernel matrix `K_{ki} = k(x_k, x_i)`, computed
/// one at a time in O(n d) each, with the diagonal `k(x_i, x_i)` up front.
///
/// On [`Device::Cpu`] a column (or a block of columns) is the core's fused
/// kernel matrix `K(X, x_i)` (the inner products, the squared distances
/// through `||x_k - x_i||^2 = ||x_k||^2 + ||x_i||^2 - 2 <x_k, x_i>` with
/// near-duplicates recomputed directly, and `k`, tile by tile on every core). On a GPU, X is
/// uploaded once (in `f64` where the adapter has it) when the columns are
/// prepared, and a column is [`Device::resident_kernel_columns`] on the
/// resident X: n numbers come back per column, nothing goes up but the
/// dispatch descriptors.
///
/// An optional cache keeps the most recently computed columns: mklaren
/// recomputes its look-ahead block after every step, mostly on the same
/// pivots, and a cached column costs a copy instead of a pass over `X`.
pub struct KernelColumns<'a> {
    device: &'a Device,
    kernel: Kernel,
    x: &'a DMatrix<f64>,
    /// X on the device (GPU only), uploaded once.
    resident: Option<DeviceMatrix>,
    row_sq_norms: Vec<f64>,
    diagonal: Vec<f64>,
    cache_capacity: usize,
    cache: Mutex<VecDeque<(usize, Vec<f64>)>>,
    /// Columns computed so far (cache hits not counted).
    computed: AtomicUsize,
}

impl<'a> KernelColumns<'a> {
    /// Prepares the columns of `kernel` on the rows of `x`.
    pub fn new(device: &'a Device, kernel: Kernel, x: &'a DMatrix<f64>) -> Result<Self, ComputeError> {
        kernel.validate()?;
        check_matrix("x", x)?;
        let row_sq_norms = if kernel.is_distance_based() { row_squared_norms(x) } else { Vec::new() };
        let diagonal = kernel.diagonal(x)?.as_slice().to_vec();
        let resident = if device.is_gpu() { Some(device.upload(x, device.best_precision())?) } else { None };
        Ok(KernelColumns { device, kernel, x, resident, row_sq_norms, diagonal, cache_capacity: 0, cache: Mutex::new(VecDeque::new()), computed: AtomicUsize::new(0) })
    }

    /// Like [`KernelColumns::new`] with X already on the device (several
    /// kernels on one input share one upload).
    ///
    /// Errors: a resident X whose shape differs from `x`'s.
    pub fn with_resident(device: &'a Device, kernel: Kernel, x: &'a DMatrix<f64>, resident: DeviceMatrix) -> Result<Self, ComputeError> {
        linalg::check_dim("rows of the resident x", x.nrows(), resident.nrows())?;
        linalg::check_dim("columns of the resident x", x.ncols(), resident.ncols())?;
        kernel.validate()?;
        check_matrix("x", x)?;
        let row_sq_norms = if kernel.is_distance_based() { row_squared_norms(x) } else { Vec::new() };
        let diagonal = kernel.diagonal(x)?.as_slice().to_vec();
        Ok(KernelColumns { device, kernel, x, resident: Some(resident), row_sq_norms, diagonal, cache_capacity: 0, cache: Mutex::new(VecDeque::new()), computed: AtomicUsize::new(0) })
    }

    /// Inputs `xs` on `device`, each distinct matrix uploaded once (matrices
    /// are the same input when they are the same object): `None` on the CPU.
    pub fn upload_inputs(device: &Device, xs: &[&DMatrix<f64>]) -> Result<Vec<Option<DeviceMatrix>>, ComputeError> {
        if !device.is_gpu() {
            return Ok(vec![None; xs.len()]);
        }
        let mut out: Vec<Option<DeviceMatrix>> = Vec::with_capacity(xs.len());
        for (q, x) in xs.iter().enumerate() {
            let earlier = (0..q).find(|&p| std::ptr::eq(xs[p], *x));
            out.push(Some(match earlier {
                Some(p) => out[p].clone().expect("uploaded above"),
                None => device.upload(*x, device.best_precision())?,
            }));
        }
        Ok(out)
    }

    /// Keeps the `capacity` most recently used columns (memory `capacity n`).
    pub fn with_cache(mut self, capacity: usize) -> Self {
        self.cache_capacity = capacity;
        self
    }

    /// Number of samples n.
    pub fn n(&self) -> usize {
        self.x.nrows()
    }

    /// The kernel.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// The data matrix (rows are samples).
    pub fn data(&self) -> &DMatrix<f64> {
        self.x
    }

    /// The diagonal `k(x_i, x_i)`.
    pub fn diagonal(&self) -> &[f64] {
        &self.diagonal
    }

    /// Column `i`: `k(x_k, x_i)` for every sample k.
    pub fn column(&self, i: usize) -> Result<Vec<f64>, ComputeError> {
        if i >= self.n() {
            return Err(ComputeError::IndexOutOfRange { what: "rows of x", index: i, len: self.n() });
        }
        if self.cache_capacity == 0 {
            return self.compute_column(i);
        }
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pos) = cache.iter().position(|(p, _)| *p == i) {
            let entry = cache.remove(pos).expect("position is valid");
            let out = entry.1.clone();
            cache.push_back(entry);
            return Ok(out);
        }
        let col = self.compute_column(i)?;
        if cache.len() == self.cache_capacity {
            cache.pop_front();
        }
        cache.push_back((i, col.clone()));
        Ok(col)
    }

    /// Column `i` written into `out` (n entries): from the cache without a
    /// copy into a new vector, or computed.
    pub(crate) fn column_into(&self, i: usize, out: &mut [f64]) -> Result<(), ComputeError> {
        linalg::check_dim("length of the column buffer", self.n(), out.len())?;
        if i >= self.n() {
            return Err(ComputeError::IndexOutOfRange { what: "rows of x", index: i, len: self.n() });
        }
        if self.cache_capacity > 0 {
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(pos) = cache.iter().position(|(p, _)| *p == i) {
                let entry = cache.remove(pos).expect("position is valid");
                out.copy_from_slice(&entry.1);
                cache.push_back(entry);
                return Ok(());
            }
        }
        let col = self.column(i)?;
        out.copy_from_slice(&col);
        Ok(())
    }

    /// Number of kernel columns computed so far (each a pass over X; cache
    /// hits are not counted).
    pub(crate) fn computed(&self) -> usize {
        self.computed.load(Ordering::Relaxed)
    }

    /// Columns `indices` as an n x len matrix; on a GPU in one dispatch
    /// (cached columns are not recomputed).
    pub fn columns(&self, indices: &[usize]) -> Result<DMatrix<f64>, ComputeError> {
        let n = self.n();
        let mut out = DMatrix::zeros(n, indices.len());
        match &self.resident {
            Some(x) if self.cache_capacity == 0 && !indices.is_empty() => {
                for &i in indices {
                    if i >= n {
                        return Err(ComputeError::IndexOutOfRange { what: "rows of x", index: i, len: n });
                    }
                }
                let block = self.device.to_host(&self.device.resident_kernel_columns(&self.kernel, x, indices)?)?;
                out.copy_from(&block);
            }
            None if self.cache_capacity == 0 && !indices.is_empty() => {
                if let Some(&i) = indices.iter().find(|&&i| i >= n) {
                    return Err(ComputeError::IndexOutOfRange { what: "rows of x", index: i, len: n });
                }
                out.copy_from(&self.cpu_block(indices));
            }
            _ => {
                for (t, &i) in indices.iter().enumerate() {
                    out.column_mut(t).copy_from_slice(&self.column(i)?);
                }
            }
        }
        Ok(out)
    }

    fn compute_column(&self, i: usize) -> Result<Vec<f64>, ComputeError> {
        self.computed.fetch_add(1, Ordering::Relaxed);
        if let Some(x) = &self.resident {
            let col = self.device.resident_kernel_columns(&self.kernel, x, &[i])?;
            return Ok(self.device.to_host(&col)?.as_slice().to_vec());
        }
        Ok(self.cpu_block(&[i]).as_slice().to_vec())
    }

    /// Columns `indices` on the CPU: one call of the core's fused, blocked
    /// kernel matrix `K(X, X[indices])` (the product, the statistic with its
    /// cancellation guard, and `k` in cache, on every core), with the squared
    /// row norms computed once in [`KernelColumns::new`].
    fn cpu_block(&self, indices: &[usize]) -> DMatrix<f64> {
        let z = self.x.select_rows(indices);
        let z_norms: Vec<f64> = if self.kernel.is_distance_based() { indices.iter().map(|&i| self.row_sq_norms[i]).collect() } else { Vec::new() };
        crate::kernel::kernel_matrix_with_norms(&self.kernel, self.x, &z, &self.row_sq_norms, &z_norms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_match_the_kernel_matrix_with_and_without_cache() {
        let x = DMatrix::<f64>::from_fn(30, 3, |i, j| ((i * 3 + j) as f64 * 0.37).sin());
        let device = Device::Cpu;
        for kernel in [Kernel::rbf(0.7).unwrap(), Kernel::laplacian(0.4).unwrap(), Kernel::polynomial(0.5, 1.0, 2).unwrap()] {
            let k = crate::kernel::kernel_matrix_cpu(&kernel, &x, &x).unwrap();
            let plain = KernelColumns::new(&device, kernel, &x).unwrap();
            let cached = KernelColumns::new(&device, kernel, &x).unwrap().with_cache(2);
            for &i in &[3usize, 7, 3, 11, 7, 3, 29] {
                let expected = k.column(i);
                for col in [plain.column(i).unwrap(), cached.column(i).unwrap()] {
                    assert!(col.iter().zip(expected.iter()).all(|(a, b)| (a - b).abs() < 1e-12));
                }
            }
            assert!(plain.diagonal().iter().zip(k.diagonal().iter()).all(|(a, b)| (a - b).abs() < 1e-12));
        }
    }
}
