//! Matrices that live on a device, and the operations between them.
//!
//! [`Device::upload`] moves a host matrix to the device once;
//! [`Device::to_host`] brings a result back only when asked. In between,
//! every `resident_*` operation reads [`DeviceMatrix`] operands where they
//! are and returns a [`DeviceMatrix`]: a pipeline of operations moves no data
//! between host and device. On the GPU the data are `f32` or `f64` buffers
//! ([`crate::gpu::GpuMatrix`]); on the CPU a [`DeviceMatrix`] is a shared host
//! matrix and the same calls run the CPU code in `f64`, so every method is
//! written once against this API. [`Device::transfer_stats`] counts what
//! crosses.
//!
//! Layout: a device matrix is row-major on the GPU. Sample matrices keep
//! samples as rows (X is n x d, features Phi are n x r), so a row view
//! ([`DeviceMatrix::rows`]) is a block of samples.
//!
//! The file runs past 600 lines because it is the whole resident API of
//! [`Device`]: each operation is a short wrapper that checks its operands
//! once and hands them to the GPU engine or to the CPU code.

use std::sync::{Arc, RwLock, RwLockReadGuard};

use nalgebra::{DMatrix, DVector};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::gpu::{DeviceCounters, ElementwiseMap, GpuContext, GpuMatrix, KernelCode, Operand, ProductFlags, TransferStats};
use crate::input::{AsMatrix, AsVector};
use crate::kernel::{self, Kernel};
use crate::linalg::{self, MatrixProduct, Real};
use crate::precision::{Precision, WorkingPrecision};

mod workspace;
pub use workspace::Workspace;

/// A matrix held by a [`Device`]: GPU buffers on a GPU, a shared host matrix
/// on the CPU. Cheap to clone; [`DeviceMatrix::rows`] views share storage.
#[derive(Clone, Debug)]
pub struct DeviceMatrix {
    repr: Repr,
}

#[derive(Clone, Debug)]
enum Repr {
    Host { m: Arc<RwLock<DMatrix<f64>>>, row0: usize, rows: usize, precision: Precision },
    Gpu(GpuMatrix),
}

impl DeviceMatrix {
    /// Rows.
    pub fn nrows(&self) -> usize {
        match &self.repr {
            Repr::Host { rows, .. } => *rows,
            Repr::Gpu(g) => g.nrows(),
        }
    }
    /// Columns.
    pub fn ncols(&self) -> usize {
        match &self.repr {
            Repr::Host { m, .. } => m.read().unwrap_or_else(|e| e.into_inner()).ncols(),
            Repr::Gpu(g) => g.ncols(),
        }
    }
    /// `(rows, columns)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.nrows(), self.ncols())
    }
    /// Element type on the device.
    pub fn precision(&self) -> Precision {
        match &self.repr {
            Repr::Host { precision, .. } => *precision,
            Repr::Gpu(g) => g.precision(),
        }
    }
    /// True when the data are in GPU memory.
    pub fn is_gpu(&self) -> bool {
        matches!(self.repr, Repr::Gpu(_))
    }
    /// The view of rows `start .. start + count` (no copy).
    ///
    /// Errors: [`Error::IndexOutOfRange`] outside the matrix or for `count == 0`.
    pub fn rows(&self, start: usize, count: usize) -> Result<DeviceMatrix> {
        match &self.repr {
            Repr::Host { m, row0, rows, precision } => {
                let end = start.checked_add(count).filter(|&e| e <= *rows && count > 0);
                if end.is_none() {
                    return Err(Error::IndexOutOfRange { what: "rows of a device matrix", index: start.saturating_add(count), len: *rows });
                }
                Ok(DeviceMatrix { repr: Repr::Host { m: m.clone(), row0: row0 + start, rows: count, precision: *precision } })
            }
            Repr::Gpu(g) => Ok(DeviceMatrix { repr: Repr::Gpu(g.rows_view(start, count)?) }),
        }
    }

    /// A GPU matrix (or view) as a device matrix.
    pub(crate) fn from_gpu(g: GpuMatrix) -> DeviceMatrix {
        DeviceMatrix { repr: Repr::Gpu(g) }
    }

    /// A CPU-held matrix of `precision`: `F32` values are rounded to `f32`,
    /// as a GPU would store them.
    fn host(mut m: DMatrix<f64>, precision: Precision) -> DeviceMatrix {
        round_to(precision, m.as_mut_slice());
        let rows = m.nrows();
        DeviceMatrix { repr: Repr::Host { m: Arc::new(RwLock::new(m)), row0: 0, rows, precision } }
    }

    /// The host matrix of a CPU-held view (a copy only for a proper row view).
    fn host_view(&self) -> Result<HostRef<'_>> {
        match &self.repr {
            Repr::Host { m, row0, rows, .. } => {
                let guard = m.read().unwrap_or_else(|e| e.into_inner());
                if *row0 == 0 && *rows == guard.nrows() {
                    Ok(HostRef::Shared(guard))
                } else {
                    Ok(HostRef::Owned(guard.rows(*row0, *rows).into_owned()))
                }
            }
            Repr::Gpu(_) => Err(Error::DeviceMismatch),
        }
    }

    /// Whether the two share storage and some of their rows.
    fn overlaps(&self, other: &DeviceMatrix) -> bool {
        match (&self.repr, &other.repr) {
            (Repr::Host { m: a, row0: ra, rows: na, .. }, Repr::Host { m: b, row0: rb, rows: nb, .. }) => Arc::ptr_eq(a, b) && ra < &(rb + nb) && rb < &(ra + na),
            (Repr::Gpu(a), Repr::Gpu(b)) => a.overlaps(b),
            _ => false,
        }
    }

    fn same_storage(&self, other: &DeviceMatrix) -> bool {
        match (&self.repr, &other.repr) {
            (Repr::Host { m: a, .. }, Repr::Host { m: b, .. }) => Arc::ptr_eq(a, b),
            (Repr::Gpu(a), Repr::Gpu(b)) => a.same_storage(b),
            _ => false,
        }
    }

    /// The GPU matrix of a GPU-held view.
    pub(crate) fn gpu(&self) -> Result<&GpuMatrix> {
        match &self.repr {
            Repr::Gpu(g) => Ok(g),
            Repr::Host { .. } => Err(Error::DeviceMismatch),
        }
    }
}

/// A read of a CPU-held device matrix: the shared storage, or a copy of a row view.
enum HostRef<'a> {
    Shared(RwLockReadGuard<'a, DMatrix<f64>>),
    Owned(DMatrix<f64>),
}

impl std::ops::Deref for HostRef<'_> {
    type Target = DMatrix<f64>;
    fn deref(&self) -> &DMatrix<f64> {
        match self {
            HostRef::Shared(g) => g,
            HostRef::Owned(m) => m,
        }
    }
}

/// Rows per parallel task of [`row_major`] (each task reads a strip of
/// every column and writes one contiguous block of rows).
const TRANSPOSE_ROWS: usize = 1024;

/// `x` (column-major) as a row-major `f64` vector, the device layout: row
/// strips of [`TRANSPOSE_ROWS`] transposed in parallel.
pub(crate) fn row_major<T: Real>(x: &DMatrix<T>) -> Vec<f64> {
    use rayon::prelude::*;
    let (rows, cols) = x.shape();
    let mut out = vec![0.0; rows * cols];
    if cols == 0 {
        return out;
    }
    let data = x.as_slice();
    out.par_chunks_mut(TRANSPOSE_ROWS * cols).enumerate().for_each(|(s, strip)| {
        let r0 = s * TRANSPOSE_ROWS;
        let len = strip.len() / cols;
        for j in 0..cols {
            for (i, v) in data[j * rows + r0..j * rows + r0 + len].iter().enumerate() {
                strip[i * cols + j] = v.to_f64_exact();
            }
        }
    });
    out
}

fn check_form(a: (usize, usize), b: (usize, usize), form: MatrixProduct) -> Result<(usize, usize)> {
    let (inner_a, inner_b, shape) = match form {
        MatrixProduct::AB => (a.1, b.0, (a.0, b.1)),
        MatrixProduct::ABt => (a.1, b.1, (a.0, b.0)),
        MatrixProduct::AtB => (a.0, b.0, (a.1, b.1)),
    };
    linalg::check_dim("inner dimension of a device product", inner_a, inner_b)?;
    Ok(shape)
}

impl Device {
    /// The GPU context (`None` on the CPU).
    pub(crate) fn context(&self) -> Option<&GpuContext> {
        match self {
            Device::Cpu => None,
            Device::Gpu(ctx) => Some(ctx),
        }
    }

    /// True when matrices of `precision` can be held and computed on here
    /// (the CPU: both; a GPU: `f32`, and `f64` with `SHADER_F64`).
    pub fn supports(&self, precision: Precision) -> bool {
        self.context().is_none_or(|c| c.supports(precision))
    }

    /// `f64` where the device supports it, else `f32`: for methods that
    /// need the digits (duality-gap certificates, Cholesky factors).
    pub fn best_precision(&self) -> Precision {
        if self.supports(Precision::F64) { Precision::F64 } else { Precision::F32 }
    }

    /// The precision of the device matrices of a fit that asked for
    /// `setting` ([`WorkingPrecision`]): `Auto` is [`Self::best_precision`];
    /// `F64` is `f64`; `F32` is `f32` on a GPU and `f64` on the CPU, whose
    /// arithmetic is `f64` whatever the setting.
    ///
    /// Errors: [`Error::Unsupported`] for `F64` on a GPU without
    /// `SHADER_F64`.
    pub fn working_precision(&self, setting: WorkingPrecision) -> Result<Precision> {
        match setting {
            WorkingPrecision::Auto => Ok(self.best_precision()),
            WorkingPrecision::F64 if self.supports(Precision::F64) => Ok(Precision::F64),
            WorkingPrecision::F64 => Err(Error::Unsupported(format!("precision float64 needs f64 arithmetic on the device, and {} has no SHADER_F64 (use auto or float32, or the CPU)", self.describe()))),
            WorkingPrecision::F32 if self.is_gpu() => Ok(Precision::F32),
            WorkingPrecision::F32 => Ok(Precision::F64),
        }
    }

    /// `K(X, Z)` (n x m) on the host for a fit that asked for `setting`:
    /// `Auto` is [`Device::kernel_matrix`] (`f32` inside on a GPU); an
    /// explicit precision computes it from X and Z resident in
    /// [`Self::working_precision`] on a GPU, and on the CPU in `f64`.
    ///
    /// Errors: those of [`Device::kernel_matrix`] and
    /// [`Self::working_precision`].
    pub(crate) fn kernel_matrix_in(&self, kernel: &Kernel, x: &DMatrix<f64>, z: &DMatrix<f64>, setting: WorkingPrecision) -> Result<DMatrix<f64>> {
        let precision = self.working_precision(setting)?;
        if setting == WorkingPrecision::Auto || !self.is_gpu() {
            return self.kernel_matrix(kernel, x, z);
        }
        let (xd, zd) = (self.upload(x, precision)?, self.upload(z, precision)?);
        self.to_host(&self.resident_kernel_matrix(kernel, &xd, &zd)?)
    }

    /// Bytes and work moved since the device was opened or last reset
    /// (all zero on the CPU, where nothing crosses).
    pub fn transfer_stats(&self) -> TransferStats {
        self.context().map(|c| c.transfer_stats()).unwrap_or_default()
    }

    /// Sets every counter (transfers and [`Self::device_counters`]) to zero.
    pub fn reset_transfer_stats(&self) {
        if let Some(c) = self.context() {
            c.reset_transfer_stats()
        }
    }

    /// Every counter of the device (transfers, blocking waits, allocations,
    /// dispatches and their work by shape class; see
    /// [`crate::gpu::counters`]) since it was opened or last reset. All zero
    /// on the CPU. [`DeviceCounters::since`] gives the work between two
    /// snapshots.
    pub fn device_counters(&self) -> DeviceCounters {
        self.context().map(|c| c.device_counters()).unwrap_or_default()
    }

    /// Sets every counter to zero (as [`Self::reset_transfer_stats`]).
    pub fn reset_device_counters(&self) {
        self.reset_transfer_stats()
    }

    /// Moves `x` to the device, stored in `precision` (on the CPU, `f32`
    /// rounds the values, so both paths see the same numbers).
    ///
    /// Errors: empty or non-finite input; `NotRepresentable` for `f64`
    /// values beyond the `f32` range stored as `F32`; `Unsupported` precision;
    /// `OutOfMemory` when the device cannot hold it; `TooLargeForGpu` when one
    /// row exceeds a buffer binding. `x` is any [`AsMatrix`] input.
    pub fn upload<X: AsMatrix + ?Sized>(&self, x: &X, precision: Precision) -> Result<DeviceMatrix> {
        self.upload_dense(&*x.as_matrix()?, precision)
    }

    fn upload_dense<T: Real>(&self, x: &DMatrix<T>, precision: Precision) -> Result<DeviceMatrix> {
        linalg::check_matrix("uploaded matrix", x)?;
        if precision == Precision::F32 {
            linalg::check_f32_range("uploaded matrix", x)?;
        }
        match self.context() {
            None => {
                let m = match precision {
                    Precision::F64 => linalg::convert::<T, f64>(x),
                    Precision::F32 => x.map(|v| v.to_f32_lossy() as f64),
                };
                Ok(DeviceMatrix::host(m, precision))
            }
            Some(ctx) => Ok(DeviceMatrix { repr: Repr::Gpu(ctx.upload(&row_major(x), x.nrows(), x.ncols(), precision)?) }),
        }
    }

    /// Moves a vector to the device as an n x 1 matrix.
    /// `v` is any [`AsVector`] input.
    pub fn upload_vector<V: AsVector + ?Sized>(&self, v: &V, precision: Precision) -> Result<DeviceMatrix> {
        let v = v.as_vector()?;
        let m = DMatrix::from_column_slice(v.len(), 1, v.as_slice());
        self.upload_dense(&m, precision)
    }

    /// A zero matrix on the device.
    ///
    /// Errors: `Empty` for a zero dimension; [`Error::OutOfMemory`]
    /// when `rows x cols` entries overflow the address space or cannot be
    /// allocated (on the CPU path the allocation is tried, not assumed).
    pub fn zeros(&self, rows: usize, cols: usize, precision: Precision) -> Result<DeviceMatrix> {
        if rows == 0 || cols == 0 {
            return Err(Error::Empty { what: "device matrix", rows, cols });
        }
        match self.context() {
            None => Ok(DeviceMatrix::host(crate::memory::zeroed_matrix(rows, cols, "zero matrix")?, precision)),
            Some(ctx) => Ok(DeviceMatrix { repr: Repr::Gpu(ctx.zeros(rows, cols, precision)?) }),
        }
    }

    /// Brings a device matrix back to the host (in `f64`).
    ///
    /// Errors: `DeviceMismatch` for a matrix of another device;
    /// [`Error::Overflow`] when it holds NaN or an infinity (uploads
    /// are checked finite, so such values come from overflow in a resident
    /// operation, e.g. a product of entries near `1e200`); `OutOfMemory`
    /// (host) when the host cannot hold it.
    pub fn to_host(&self, m: &DeviceMatrix) -> Result<DMatrix<f64>> {
        crate::memory::check_host_matrix::<f64>(m.nrows(), m.ncols(), "matrix read back to the host")?;
        let host = match self.context() {
            None => m.host_view()?.clone(),
            Some(ctx) => {
                let g = m.gpu()?;
                let data = ctx.download(g)?;
                DMatrix::from_row_slice(g.nrows(), g.ncols(), &data)
            }
        };
        linalg::finite_result("device matrix read back to the host", host)
    }

    /// Brings an n x 1 device matrix back as a vector.
    pub fn to_host_vector(&self, m: &DeviceMatrix) -> Result<DVector<f64>> {
        linalg::check_dim("columns of a device vector", 1, m.ncols())?;
        let h = self.to_host(m)?;
        Ok(DVector::from_column_slice(h.as_slice()))
    }

    fn check_kernel_pair(kernel: &Kernel, x: &DeviceMatrix, z: &DeviceMatrix) -> Result<()> {
        kernel.validate()?;
        linalg::check_dim("columns of z vs columns of x", x.ncols(), z.ncols())
    }

    /// `K(X, Z)` (n x m) from resident X (n x d) and Z (m x d), left on the device.
    pub fn resident_kernel_matrix(&self, kernel: &Kernel, x: &DeviceMatrix, z: &DeviceMatrix) -> Result<DeviceMatrix> {
        let out = self.zeros(x.nrows(), z.nrows(), x.precision())?;
        self.resident_kernel_matrix_into(kernel, x, z, &out)?;
        Ok(out)
    }

    /// `out = K(X, Z)` into an existing resident n x m output (which may be
    /// a row view of a larger matrix; it may not share storage with X or Z).
    pub fn resident_kernel_matrix_into(&self, kernel: &Kernel, x: &DeviceMatrix, z: &DeviceMatrix, out: &DeviceMatrix) -> Result<()> {
        Self::check_kernel_pair(kernel, x, z)?;
        check_precisions(&[x, z, out])?;
        linalg::check_dim("rows of the output vs rows of x", x.nrows(), out.nrows())?;
        linalg::check_dim("columns of the output vs rows of z", z.nrows(), out.ncols())?;
        if out.same_storage(x) || out.same_storage(z) {
            return Err(Error::InvalidParameter { name: "out", reason: "the output of a kernel matrix may not share storage with an operand".into() });
        }
        match self.context() {
            None => host_write(out, kernel::kernel_matrix_unchecked(kernel, &*x.host_view()?, &*z.host_view()?)?, false),
            Some(ctx) => {
                self.check_resident_distance_range(kernel, x, z)?;
                let mut plan = Vec::new();
                ctx.plan_product(KernelCode::of(kernel), Operand::plain(x.gpu()?), Operand::plain(z.gpu()?), out.gpu()?, ProductFlags::default(), &mut plan)?;
                ctx.run_plan(plan)
            }
        }
    }

    /// Rows `indices` of a resident matrix, gathered on the device.
    pub fn resident_gather_rows(&self, x: &DeviceMatrix, indices: &[usize]) -> Result<DeviceMatrix> {
        if indices.is_empty() {
            return Err(Error::Empty { what: "row indices", rows: 0, cols: 0 });
        }
        for &i in indices {
            if i >= x.nrows() {
                return Err(Error::IndexOutOfRange { what: "rows of x", index: i, len: x.nrows() });
            }
        }
        match self.context() {
            None => {
                let xh = x.host_view()?;
                Ok(DeviceMatrix::host(DMatrix::from_fn(indices.len(), xh.ncols(), |t, j| xh[(indices[t], j)]), x.precision()))
            }
            Some(ctx) => Ok(DeviceMatrix { repr: Repr::Gpu(ctx.gather_rows(x.gpu()?, indices)?) }),
        }
    }

    /// Kernel columns `K(X, X[indices])` (n x indices.len()) in one dispatch
    /// (the pivots are gathered on the device): incomplete Cholesky's
    /// look-ahead needs several at once.
    pub fn resident_kernel_columns(&self, kernel: &Kernel, x: &DeviceMatrix, indices: &[usize]) -> Result<DeviceMatrix> {
        if indices.is_empty() {
            return Err(Error::Empty { what: "kernel column indices", rows: 0, cols: 0 });
        }
        let z = self.resident_gather_rows(x, indices)?;
        self.resident_kernel_matrix(kernel, x, &z)
    }

    /// `A B`, `A B^T` or `A^T B` of resident matrices, left on the device.
    pub fn resident_matmul(&self, a: &DeviceMatrix, b: &DeviceMatrix, form: MatrixProduct) -> Result<DeviceMatrix> {
        let (r, c) = check_form(a.shape(), b.shape(), form)?;
        let out = self.zeros(r, c, a.precision())?;
        self.resident_matmul_into(a, b, form, &out, false)?;
        Ok(out)
    }

    /// `out (+)= op(A, B)` into an existing resident output (`accumulate`
    /// adds to what it holds). `out` may not share storage with `a` or `b`.
    pub fn resident_matmul_into(&self, a: &DeviceMatrix, b: &DeviceMatrix, form: MatrixProduct, out: &DeviceMatrix, accumulate: bool) -> Result<()> {
        let shape = check_form(a.shape(), b.shape(), form)?;
        check_precisions(&[a, b, out])?;
        linalg::check_dim("rows of a product's output", shape.0, out.nrows())?;
        linalg::check_dim("columns of a product's output", shape.1, out.ncols())?;
        if out.same_storage(a) || out.same_storage(b) {
            return Err(Error::InvalidParameter { name: "out", reason: "the output of a device product may not share storage with an operand".into() });
        }
        match self.context() {
            None => {
                let (ah, bh) = (a.host_view()?, b.host_view()?);
                host_write(out, linalg::product(&ah, &bh, form), accumulate)
            }
            Some(ctx) => {
                let (ag, bg) = (a.gpu()?, b.gpu()?);
                let (oa, ob) = Operand::of_product(ag, bg, form);
                let mut plan = Vec::new();
                ctx.plan_product(KernelCode::of(&Kernel::Linear), oa, ob, out.gpu()?, ProductFlags { accumulate, ..ProductFlags::default() }, &mut plan)?;
                ctx.run_plan(plan)
            }
        }
    }

    /// The weighted Gram `Phi^T diag(w) Phi` (r x r) of resident features
    /// Phi (n x r, samples as rows) and weights w (n x 1): `P diag(w) P^T`
    /// with `P = Phi^T`, the PSD dual's `M(alpha)` (psd paper Eq. 10). On a
    /// GPU, with the output in one buffer and a SIMT product variant, only
    /// the output tiles on and below the diagonal are computed, each element
    /// written at both of its places (about half the flops of the full
    /// product, the result exactly symmetric); otherwise the full product.
    pub fn resident_weighted_gram(&self, phi: &DeviceMatrix, w: &DeviceMatrix) -> Result<DeviceMatrix> {
        let out = self.zeros(phi.ncols(), phi.ncols(), phi.precision())?;
        self.resident_weighted_gram_into(phi, w, &out, false)?;
        Ok(out)
    }

    /// `out (+)= Phi^T diag(w) Phi` into an existing resident r x r output.
    pub fn resident_weighted_gram_into(&self, phi: &DeviceMatrix, w: &DeviceMatrix, out: &DeviceMatrix, accumulate: bool) -> Result<()> {
        check_weighted_gram(phi, w, out)?;
        match self.context() {
            None => {
                let (ph, wh) = (phi.host_view()?, w.host_view()?);
                let wv = DVector::from_column_slice(wh.as_slice());
                host_write(out, linalg::weighted_gram(&ph.transpose(), &wv), accumulate)
            }
            Some(ctx) => {
                let pg = phi.gpu()?;
                let mut plan = Vec::new();
                ctx.plan_product(KernelCode::of(&Kernel::Linear), Operand::transposed(pg), Operand::transposed(pg), out.gpu()?, ProductFlags { accumulate, weights: Some(w.gpu()?), lower: true, ..ProductFlags::default() }, &mut plan)?;
                ctx.run_plan(plan)
            }
        }
    }

    /// [`kernel::check_distance_range`] for resident operands on a GPU: only
    /// for the tiny `gamma` where it matters are the row norms computed (and
    /// read back).
    fn check_resident_distance_range(&self, kernel: &Kernel, x: &DeviceMatrix, z: &DeviceMatrix) -> Result<()> {
        let precision = x.precision();
        if kernel::check_distance_range(kernel, precision, f64::INFINITY).is_ok() {
            return Ok(());
        }
        let largest = |m: &DeviceMatrix| -> Result<f64> {
            match self.to_host(&self.resident_row_squared_norms(m)?) {
                Ok(norms) => Ok(norms.max().sqrt()),
                // A squared norm that overflowed: no finite bound.
                Err(Error::Overflow { .. }) => Ok(f64::INFINITY),
                Err(e) => Err(e),
            }
        };
        kernel::check_distance_range(kernel, precision, largest(x)? + largest(z)?)
    }

    /// Squared row norms `||x_i||^2` (n x 1), left on the device.
    pub fn resident_row_squared_norms(&self, x: &DeviceMatrix) -> Result<DeviceMatrix> {
        self.row_reduction(x, true)
    }

    /// The kernel diagonal `k(x_i, x_i)` of resident X; O(n) numbers come
    /// back (the squared norms for the inner-product kernels; nothing is
    /// read for the distance kernels, whose diagonal is 1).
    pub fn resident_kernel_diagonal(&self, kernel: &Kernel, x: &DeviceMatrix) -> Result<DVector<f64>> {
        kernel.validate()?;
        if kernel.is_distance_based() {
            return Ok(DVector::from_element(x.nrows(), 1.0));
        }
        let norms = self.to_host_vector(&self.resident_row_squared_norms(x)?)?;
        Ok(norms.map(|s| kernel.apply_to_statistic(s)))
    }

    /// `K(X, Z) V` (n x c) for resident X, Z and V (m x c), without storing
    /// `K(X, Z)`. On a GPU, for c <= 8 one fused shader computes tiles of K
    /// in registers and multiplies them into partial sums of the output
    /// (`shaders/kernel_matvec.wgsl`); for wider V, or rows too long for
    /// one kernel tile per dispatch, tiles of K live in one scratch matrix
    /// and are multiplied into the output, so memory is one tile however
    /// large n x m is.
    pub fn resident_kernel_matvec(&self, kernel: &Kernel, x: &DeviceMatrix, z: &DeviceMatrix, v: &DeviceMatrix) -> Result<DeviceMatrix> {
        let out = self.zeros(x.nrows(), v.ncols(), x.precision())?;
        self.resident_kernel_matvec_into(kernel, x, z, v, &out, false)?;
        Ok(out)
    }

    /// `out (+)= K(X, Z) V` into an existing resident output (n x c).
    pub fn resident_kernel_matvec_into(&self, kernel: &Kernel, x: &DeviceMatrix, z: &DeviceMatrix, v: &DeviceMatrix, out: &DeviceMatrix, accumulate: bool) -> Result<()> {
        Self::check_kernel_pair(kernel, x, z)?;
        check_precisions(&[x, z, v, out])?;
        linalg::check_dim("rows of v vs rows of z", z.nrows(), v.nrows())?;
        linalg::check_dim("rows of the output vs rows of x", x.nrows(), out.nrows())?;
        linalg::check_dim("columns of the output vs columns of v", v.ncols(), out.ncols())?;
        if out.same_storage(x) || out.same_storage(z) || out.same_storage(v) {
            return Err(Error::InvalidParameter { name: "out", reason: "the output of a kernel matvec may not share storage with an operand".into() });
        }
        if self.context().is_some() {
            self.check_resident_distance_range(kernel, x, z)?;
        }
        match self.context() {
            None => {
                let kv = kernel::kernel_matvec_cpu(kernel, &*x.host_view()?, &*z.host_view()?, &*v.host_view()?)?;
                host_write(out, kv, accumulate)
            }
            Some(ctx) => ctx.kernel_matvec_into(KernelCode::of(kernel), x.gpu()?, z.gpu()?, v.gpu()?, out.gpu()?, accumulate),
        }
    }

    /// The pair matvec: `out (+)= K(X, Z) V` (n x c) and
    /// `out_t (+)= K(X, Z)^T W` (m x c) from one evaluation of each kernel
    /// entry, for resident X (n x d), Z (m x d), V (m x c) and W (n x c):
    /// both directions of a block `K_pq` and its transpose `K_qp` (eKSVD's
    /// coupling) for the price of one. On a GPU the fused shader's pair
    /// form where V and W are rows of one matrix of at most 8 columns
    /// (`shaders/kernel_matvec.wgsl`), else each tile of K applied both ways.
    /// The two outputs may be disjoint rows of one matrix; neither may share
    /// storage with an operand.
    #[allow(clippy::too_many_arguments)]
    pub fn resident_kernel_matvec_pair_into(&self, kernel: &Kernel, x: &DeviceMatrix, z: &DeviceMatrix, v: &DeviceMatrix, w: &DeviceMatrix, out: &DeviceMatrix, out_t: &DeviceMatrix, accumulate: bool) -> Result<()> {
        self.resident_kernel_matvec_pair_reusing(kernel, x, z, v, w, out, out_t, accumulate, &mut crate::gpu::KernelTiles::new())
    }

    /// [`Device::resident_kernel_matvec_pair_into`] with the scratch tiles
    /// of K (where V has more columns than the fused shader takes) from
    /// `tiles`, kept there for the caller's next product.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn resident_kernel_matvec_pair_reusing(&self, kernel: &Kernel, x: &DeviceMatrix, z: &DeviceMatrix, v: &DeviceMatrix, w: &DeviceMatrix, out: &DeviceMatrix, out_t: &DeviceMatrix, accumulate: bool, tiles: &mut crate::gpu::KernelTiles) -> Result<()> {
        Self::check_kernel_pair(kernel, x, z)?;
        check_precisions(&[x, z, v, w, out, out_t])?;
        linalg::check_dim("rows of v vs rows of z", z.nrows(), v.nrows())?;
        linalg::check_dim("rows of w vs rows of x", x.nrows(), w.nrows())?;
        linalg::check_dim("columns of w vs columns of v", v.ncols(), w.ncols())?;
        linalg::check_dim("rows of the output vs rows of x", x.nrows(), out.nrows())?;
        linalg::check_dim("columns of the output vs columns of v", v.ncols(), out.ncols())?;
        linalg::check_dim("rows of the transposed output vs rows of z", z.nrows(), out_t.nrows())?;
        linalg::check_dim("columns of the transposed output vs columns of v", v.ncols(), out_t.ncols())?;
        for o in [out, out_t] {
            if [x, z, v, w].iter().any(|operand| o.same_storage(operand)) {
                return Err(Error::InvalidParameter { name: "out", reason: "the outputs of a kernel matvec may not share storage with an operand".into() });
            }
        }
        if out.overlaps(out_t) {
            return Err(Error::InvalidParameter { name: "out_t", reason: "the two outputs of a pair kernel matvec overlap".into() });
        }
        if self.context().is_some() {
            self.check_resident_distance_range(kernel, x, z)?;
        }
        match self.context() {
            None => {
                let (kv, ktw) = kernel::kernel_matvec_pair_cpu(kernel, &*x.host_view()?, &*z.host_view()?, &*v.host_view()?, &*w.host_view()?)?;
                host_write(out, kv, accumulate)?;
                host_write(out_t, ktw, accumulate)
            }
            Some(ctx) => ctx.kernel_matvec_pair_into(KernelCode::of(kernel), x.gpu()?, z.gpu()?, v.gpu()?, w.gpu()?, out.gpu()?, out_t.gpu()?, accumulate, accumulate, tiles),
        }
    }

    /// Cosine features `scale cos(x_ij + phase_j)` (random Fourier features;
    /// `phases` is a 1 x cols row), element-wise on the device.
    pub fn resident_cosine_features(&self, x: &DeviceMatrix, phases: &DeviceMatrix, scale: f64) -> Result<DeviceMatrix> {
        linalg::check_dim("phases (a 1 x cols row): rows", 1, phases.nrows())?;
        linalg::check_dim("phases: columns vs columns of x", x.ncols(), phases.ncols())?;
        if !scale.is_finite() {
            return Err(Error::InvalidParameter { name: "scale", reason: format!("must be finite, got {scale}") });
        }
        self.elementwise(ElementwiseMap::CosineFeatures { scale }, x, phases)
    }

    /// The Hadamard product `a o b` of two resident matrices of one shape.
    pub fn resident_hadamard(&self, a: &DeviceMatrix, b: &DeviceMatrix) -> Result<DeviceMatrix> {
        linalg::check_dim("rows of a Hadamard product's operands", a.nrows(), b.nrows())?;
        linalg::check_dim("columns of a Hadamard product's operands", a.ncols(), b.ncols())?;
        self.elementwise(ElementwiseMap::Hadamard, a, b)
    }

    /// `alpha X + beta Y + gamma I` of two resident matrices of one shape
    /// (`I` the matrix with ones where the row index equals the column
    /// index), element-wise on the device: one pass, or two when `beta` and
    /// `gamma` are both non-zero. `Y` is not read when `beta = 0`.
    ///
    /// Errors: shapes that differ, non-finite coefficients, mixed precisions.
    pub fn resident_combine(&self, alpha: f64, x: &DeviceMatrix, beta: f64, y: &DeviceMatrix, gamma: f64) -> Result<DeviceMatrix> {
        linalg::check_dim("rows of a combination's operands", x.nrows(), y.nrows())?;
        linalg::check_dim("columns of a combination's operands", x.ncols(), y.ncols())?;
        for (name, v) in [("alpha", alpha), ("beta", beta), ("gamma", gamma)] {
            if !v.is_finite() {
                return Err(Error::InvalidParameter { name, reason: format!("must be finite, got {v}") });
            }
        }
        if beta == 0.0 {
            return self.elementwise(ElementwiseMap::Shift { alpha, gamma }, x, x);
        }
        let combined = self.elementwise(ElementwiseMap::Combination { alpha, beta }, x, y)?;
        if gamma == 0.0 {
            return Ok(combined);
        }
        self.elementwise(ElementwiseMap::Shift { alpha: 1.0, gamma }, &combined, &combined)
    }

    /// `(v - sqrt(v^2 + c y)) / 2` entry by entry of a resident `v` and
    /// `y >= 0` of one shape (the negative root of `s^2 - v s - c y / 4 = 0`,
    /// without cancellation), left on the device: the prox of the negative
    /// log-likelihood's conjugate with a step per entry
    /// (the PSD density's loss).
    #[cfg(test)]
    pub(crate) fn resident_negative_root(&self, v: &DeviceMatrix, y: &DeviceMatrix, c: f64) -> Result<DeviceMatrix> {
        linalg::check_dim("rows of a negative root's operands", v.nrows(), y.nrows())?;
        linalg::check_dim("columns of a negative root's operands", v.ncols(), y.ncols())?;
        if !c.is_finite() {
            return Err(Error::InvalidParameter { name: "c", reason: format!("must be finite, got {c}") });
        }
        self.elementwise(ElementwiseMap::NegativeRoot { scale: c }, v, y)
    }

    /// `ln(scale x)` entry by entry where `scale x > 0`, 0 elsewhere, with
    /// the indicator of those other entries (1 there, else 0), left on
    /// the device: with [`Self::resident_sums`], the sum of logs and how
    /// many entries lie outside the domain.
    #[cfg(test)]
    pub(crate) fn resident_log(&self, x: &DeviceMatrix, scale: f64) -> Result<(DeviceMatrix, DeviceMatrix)> {
        if !scale.is_finite() {
            return Err(Error::InvalidParameter { name: "scale", reason: format!("must be finite, got {scale}") });
        }
        Ok((self.elementwise(ElementwiseMap::Log { scale }, x, x)?, self.elementwise(ElementwiseMap::Outside { scale }, x, x)?))
    }

    /// The sums of the entries of n x 1 resident vectors, brought back
    /// together: on a GPU one submission and one blocking read of
    /// `8 vectors.len()` bytes (`f64`), whatever the length of the vectors.
    ///
    /// Errors: a vector of more than one column, mixed precisions or
    /// devices; [`Error::Overflow`] for a sum that is not finite.
    pub fn resident_sums(&self, vectors: &[&DeviceMatrix]) -> Result<Vec<f64>> {
        if vectors.is_empty() {
            return Ok(Vec::new());
        }
        check_precisions(vectors)?;
        for v in vectors {
            linalg::check_dim("columns of a summed vector", 1, v.ncols())?;
        }
        let sums = match self.context() {
            None => {
                let mut out = Vec::with_capacity(vectors.len());
                for v in vectors {
                    out.push(v.host_view()?.sum());
                }
                DeviceMatrix::host(DMatrix::from_column_slice(out.len(), 1, &out), vectors[0].precision())
            }
            Some(ctx) => {
                let gpus = vectors.iter().map(|v| v.gpu()).collect::<Result<Vec<_>>>()?;
                let out = ctx.zeros(vectors.len(), 1, gpus[0].precision())?;
                let mut plan = Vec::new();
                ctx.plan_vector_sums(&gpus, &out, &mut plan)?;
                ctx.run_plan(plan)?;
                DeviceMatrix { repr: Repr::Gpu(out) }
            }
        };
        Ok(self.to_host(&sums)?.as_slice().to_vec())
    }

    /// Row sums `sum_k x_ik` (n x 1), left on the device.
    pub fn resident_row_sums(&self, x: &DeviceMatrix) -> Result<DeviceMatrix> {
        self.row_reduction(x, false)
    }

    /// Index and value of the largest entry of a resident n x 1 vector, the
    /// lowest index among equal largest values (the first maximum of a
    /// sequential scan): the greedy pivot `i = argmax_k d_k` of an
    /// incomplete Cholesky decomposition over its residual diagonal (Eq. 1
    /// of the mklaren paper). On a GPU one submission reduces blocks of the
    /// vector on the device and only 3 numbers per block come back (at most
    /// 42 blocks, 1008 bytes in `f64`, for n up to 42 x 32767; one blocking
    /// read; the partials are allocated once and reused for the same n).
    ///
    /// Errors: a matrix of more than one column
    /// ([`Error::DimensionMismatch`]); NaN or an infinity in the vector
    /// ([`Error::NonFinite`]; on a GPU `row` is the first entry of the
    /// block that holds it).
    pub fn resident_argmax(&self, x: &DeviceMatrix) -> Result<(usize, f64)> {
        linalg::check_dim("columns of an arg-max's vector", 1, x.ncols())?;
        match self.context() {
            None => {
                let xh = x.host_view()?;
                let mut best = (0, f64::NEG_INFINITY);
                for (i, &v) in xh.iter().enumerate() {
                    if !v.is_finite() {
                        return Err(Error::NonFinite { what: "vector of an arg-max", row: i, col: 0 });
                    }
                    if v > best.1 {
                        best = (i, v);
                    }
                }
                Ok(best)
            }
            Some(ctx) => ctx.argmax(x.gpu()?),
        }
    }

    /// One step of an incomplete Cholesky decomposition on pivot `i` (Eq.
    /// 2-3 of the mklaren paper) with the factor `G` (n x c) and the
    /// residual diagonal `d` (n x 1) resident, fused in one pass: from the
    /// kernel column `k = K(:, i)` and the combination of the earlier
    /// columns `p = G G(i,:)^T` (n x 1 each; e.g.
    /// [`Self::resident_kernel_matrix_into`] against a row view of X and
    /// [`Self::resident_matmul_into`] of G against its row view `G(i,:)`,
    /// `ABt`), writes column `col` of `G`:
    /// `g_r = (k_r - p_r) / sqrt(d_i)`, `g_i = sqrt(d_i)`, 0 on earlier
    /// pivots, and updates `d_r = max(d_r - g_r^2, 0)` in place.
    /// `d_i` is the value at the pivot (from [`Self::resident_argmax`]).
    ///
    /// Pivots are marked by `-1` in `d` (the pivot of this step included),
    /// so that [`Self::resident_argmax`] never picks them and later steps
    /// zero their rows without a list; read back, a negative entry of `d`
    /// is a pivot and its residual is 0. On a GPU: one submission, nothing
    /// read back or allocated.
    ///
    /// Errors: shapes that differ; `col` or `pivot` out of range; `d_i`
    /// not finite and `> 0` ([`Error::InvalidParameter`]); `d` or `G`
    /// sharing storage with each other or with `k` or `p`; mixed precisions.
    #[allow(clippy::too_many_arguments)]
    pub fn resident_cholesky_column(&self, k: &DeviceMatrix, p: &DeviceMatrix, d: &DeviceMatrix, g: &DeviceMatrix, col: usize, pivot: usize, d_pivot: f64) -> Result<()> {
        check_precisions(&[k, p, d, g])?;
        let n = d.nrows();
        linalg::check_dim("columns of a residual diagonal", 1, d.ncols())?;
        for m in [k, p] {
            linalg::check_dim("rows of a Cholesky column's operand vs the residual diagonal", n, m.nrows())?;
            linalg::check_dim("columns of a Cholesky column's operand", 1, m.ncols())?;
        }
        linalg::check_dim("rows of a Cholesky factor vs the residual diagonal", n, g.nrows())?;
        if col >= g.ncols() {
            return Err(Error::IndexOutOfRange { what: "columns of a Cholesky factor", index: col, len: g.ncols() });
        }
        if pivot >= n {
            return Err(Error::IndexOutOfRange { what: "rows of a residual diagonal", index: pivot, len: n });
        }
        if !(d_pivot.is_finite() && d_pivot > 0.0) {
            return Err(Error::InvalidParameter { name: "d_pivot", reason: format!("the residual diagonal at the pivot must be finite and > 0, got {d_pivot}") });
        }
        if d.same_storage(k) || d.same_storage(p) || d.same_storage(g) || g.same_storage(k) || g.same_storage(p) {
            return Err(Error::InvalidParameter { name: "out", reason: "the residual diagonal and the factor of a Cholesky column may not share storage with each other or an operand".into() });
        }
        let pivot_value = d_pivot.sqrt();
        let inv = 1.0 / pivot_value;
        match self.context() {
            None => {
                let (kh, ph) = (k.host_view()?.column(0).into_owned(), p.host_view()?.column(0).into_owned());
                let (Repr::Host { m: dm, row0: d0, precision, .. }, Repr::Host { m: gm, row0: g0, .. }) = (&d.repr, &g.repr) else {
                    return Err(Error::DeviceMismatch);
                };
                let round = |v: f64| if *precision == Precision::F32 { v as f32 as f64 } else { v };
                let (inv, pivot_value) = (round(inv), round(pivot_value));
                let mut dw = dm.write().unwrap_or_else(|e| e.into_inner());
                let mut gw = gm.write().unwrap_or_else(|e| e.into_inner());
                for r in 0..n {
                    let dr = dw[(d0 + r, 0)];
                    let gv = if r == pivot {
                        dw[(d0 + r, 0)] = -1.0;
                        pivot_value
                    } else if dr >= 0.0 {
                        let gv = round(round(kh[r] - ph[r]) * inv);
                        dw[(d0 + r, 0)] = round(dr - round(gv * gv)).max(0.0);
                        gv
                    } else {
                        0.0
                    };
                    gw[(g0 + r, col)] = gv;
                }
                Ok(())
            }
            Some(ctx) => {
                let mut plan = Vec::new();
                ctx.plan_icd_column(k.gpu()?, p.gpu()?, d.gpu()?, g.gpu()?, col, pivot, inv, pivot_value, &mut plan)?;
                ctx.run_plan(plan)
            }
        }
    }

    /// `sum_k x_ik^2` (`squares`) or `sum_k x_ik` for every row (n x 1).
    fn row_reduction(&self, x: &DeviceMatrix, squares: bool) -> Result<DeviceMatrix> {
        match self.context() {
            None => {
                let xh = x.host_view()?;
                let value = |i: usize| if squares { xh.row(i).norm_squared() } else { xh.row(i).sum() };
                Ok(DeviceMatrix::host(DMatrix::from_fn(xh.nrows(), 1, |i, _| value(i)), x.precision()))
            }
            Some(ctx) => {
                let xg = x.gpu()?;
                let out = ctx.zeros(xg.nrows(), 1, xg.precision())?;
                let mut plan = Vec::new();
                ctx.plan_row_reduce(xg, &out, squares, false, &mut plan)?;
                ctx.run_plan(plan)?;
                Ok(DeviceMatrix { repr: Repr::Gpu(out) })
            }
        }
    }

    fn elementwise(&self, map: ElementwiseMap, x: &DeviceMatrix, y: &DeviceMatrix) -> Result<DeviceMatrix> {
        check_precisions(&[x, y])?;
        match self.context() {
            None => {
                let (xh, yh) = (x.host_view()?, y.host_view()?);
                let out = match map {
                    ElementwiseMap::CosineFeatures { scale } => DMatrix::from_fn(xh.nrows(), xh.ncols(), |i, j| scale * (xh[(i, j)] + yh[(0, j)]).cos()),
                    ElementwiseMap::Hadamard => xh.component_mul(&*yh),
                    ElementwiseMap::Combination { alpha, beta } => DMatrix::from_fn(xh.nrows(), xh.ncols(), |i, j| alpha * xh[(i, j)] + beta * yh[(i, j)]),
                    ElementwiseMap::Shift { alpha, gamma } => DMatrix::from_fn(xh.nrows(), xh.ncols(), |i, j| alpha * xh[(i, j)] + if i == j { gamma } else { 0.0 }),
                    ElementwiseMap::NegativeRoot { scale } => xh.zip_map(&*yh, |v, y| negative_root(v, scale * y)),
                    ElementwiseMap::Log { scale } => xh.map(|v| if scale * v > 0.0 { (scale * v).ln() } else { 0.0 }),
                    ElementwiseMap::Outside { scale } => xh.map(|v| if scale * v > 0.0 { 0.0 } else { 1.0 }),
                    ElementwiseMap::Box => DMatrix::from_fn(xh.nrows(), xh.ncols(), |i, j| clip(xh[(i, j)], yh[(0, j)], yh[(1, j)])),
                    ElementwiseMap::OutsideBox { slack } => DMatrix::from_fn(xh.nrows(), xh.ncols(), |i, j| {
                        let v = xh[(i, j)];
                        if v >= yh[(0, j)] - slack && v <= yh[(1, j)] + slack { 0.0 } else { 1.0 }
                    }),
                    ElementwiseMap::Pinball => DMatrix::from_fn(xh.nrows(), xh.ncols(), |i, j| pinball(yh[(0, j)], xh[(i, j)])),
                };
                Ok(DeviceMatrix::host(out, x.precision()))
            }
            Some(ctx) => {
                let (xg, yg) = (x.gpu()?, y.gpu()?);
                let out = ctx.zeros(xg.nrows(), xg.ncols(), xg.precision())?;
                let mut plan = Vec::new();
                ctx.plan_elementwise(map, xg, yg, &out, &mut plan)?;
                ctx.run_plan(plan)?;
                Ok(DeviceMatrix { repr: Repr::Gpu(out) })
            }
        }
    }

    /// Waits for queued GPU work (for timing); nothing on the CPU.
    pub fn synchronize(&self) -> Result<()> {
        match self.context() {
            None => Ok(()),
            Some(ctx) => ctx.synchronize(),
        }
    }
}

/// Writes (or adds) `value` into the rows of a CPU-held output view.
/// The result is rounded to the output's precision, as on a GPU.
fn host_write(out: &DeviceMatrix, value: DMatrix<f64>, accumulate: bool) -> Result<()> {
    let Repr::Host { m, row0, rows, precision } = &out.repr else {
        return Err(Error::DeviceMismatch);
    };
    let mut guard = m.write().unwrap_or_else(|e| e.into_inner());
    let mut view = guard.rows_mut(*row0, *rows);
    if accumulate {
        view += &value;
    } else {
        view.copy_from(&value);
    }
    if *precision == Precision::F32 {
        view.apply(|v| *v = *v as f32 as f64);
    }
    Ok(())
}

/// Rounds `values` to `f32` when `precision` is `F32`.
fn round_to(precision: Precision, values: &mut [f64]) {
    if precision == Precision::F32 {
        for v in values {
            *v = *v as f32 as f64;
        }
    }
}

/// `v` clipped to `[lo, hi]`, NaN kept: the map `elementwise.wgsl` computes
/// (the prox of the pinball loss's conjugate).
pub(crate) fn clip(v: f64, lo: f64, hi: f64) -> f64 {
    if v < lo {
        lo
    } else if v > hi {
        hi
    } else {
        v
    }
}

/// The pinball loss `rho_tau(r) = max(tau r, (tau - 1) r)` as
/// `elementwise.wgsl` computes it.
pub(crate) fn pinball(tau: f64, r: f64) -> f64 {
    let (a, b) = (tau * r, (tau - 1.0) * r);
    if a > b { a } else { b }
}

/// Fails with `PrecisionMismatch` unless every operand has the first's
/// precision (a GPU computes each operation in one precision).
/// The negative root of `s^2 - x s - c/4 = 0`, `(x - sqrt(x^2 + c))/2`,
/// written without cancellation for `x > 0` (the negative-root map of
/// the element-wise maps on the CPU).
pub(crate) fn negative_root(x: f64, c: f64) -> f64 {
    if x > 0.0 { -c / (2.0 * (x + (x * x + c).sqrt())) } else { 0.5 * (x - (x * x + c).sqrt()) }
}

/// The shapes, precisions and storage of `out = Phi^T diag(w) Phi`: `w`
/// one column with `Phi`'s rows, `out` square of `Phi`'s columns and
/// sharing storage with neither operand.
pub(crate) fn check_weighted_gram(phi: &DeviceMatrix, w: &DeviceMatrix, out: &DeviceMatrix) -> Result<()> {
    linalg::check_dim("rows of the weights vs rows of phi", phi.nrows(), w.nrows())?;
    check_precisions(&[phi, w, out])?;
    linalg::check_dim("columns of the weights", 1, w.ncols())?;
    linalg::check_dim("rows of the output vs columns of phi", phi.ncols(), out.nrows())?;
    linalg::check_dim("columns of the output vs columns of phi", phi.ncols(), out.ncols())?;
    if out.same_storage(phi) || out.same_storage(w) {
        return Err(Error::InvalidParameter { name: "out", reason: "the output of a weighted Gram may not share storage with an operand".into() });
    }
    Ok(())
}

fn check_precisions(operands: &[&DeviceMatrix]) -> Result<()> {
    let expected = operands[0].precision();
    match operands.iter().find(|m| m.precision() != expected) {
        Some(m) => Err(Error::PrecisionMismatch { expected, found: m.precision() }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use crate::test_support::seed;

    /// A GPU with `f64` (software ones included); `None` (the test's GPU
    /// part skipped) without one, unless `GRAMIAN_REQUIRE_GPU=1`, where
    /// that fails.
    pub(super) fn gpu() -> Option<Device> {
        match Device::gpu_with(&crate::GpuOptions { allow_software: true, ..Default::default() }) {
            Ok(d) if d.supports(Precision::F64) => Some(d),
            Ok(_) | Err(_) if std::env::var("GRAMIAN_REQUIRE_GPU").as_deref() == Ok("1") => panic!("GRAMIAN_REQUIRE_GPU=1 but no GPU adapter with f64"),
            _ => {
                eprintln!("SKIPPED on a GPU: no GPU adapter with f64");
                None
            }
        }
    }

    /// The device's `ln` (the shaders' `tlog`: range reduction by 2^100, an
    /// `f32` log, one Halley step) against the host's on fresh values over
    /// the whole positive `f64` range, subnormals and values next to 1
    /// included: within 4e-16 max(1, |ln x|) (a few roundings of the step;
    /// next to 1, `ln x` is small and the error absolute). Entries outside
    /// the domain give 0 and the indicator 1.
    #[test]
    fn device_log_matches_the_host_over_the_f64_range() {
        let Some(gpu) = gpu() else { return };
        let mut rng = StdRng::seed_from_u64(seed());
        let mut values: Vec<f64> = (0..2000).map(|_| 10f64.powf(rng.random_range(-323.0..308.0))).collect();
        values.extend((0..200).map(|_| 1.0 + rng.random_range(-1e-3..1e-3)));
        values.extend([f64::MIN_POSITIVE, 5e-324, 1.0, f64::MAX, 2.0, 0.5, 0.0, -1.0, -1e-300]);
        for scale in [1.0, 0.25] {
            let x = gpu.upload_vector(&DVector::from_vec(values.clone()), Precision::F64).unwrap();
            let (log, outside) = gpu.resident_log(&x, scale).unwrap();
            let (log, outside) = (gpu.to_host_vector(&log).unwrap(), gpu.to_host_vector(&outside).unwrap());
            for (i, &v) in values.iter().enumerate() {
                let sv = scale * v;
                if sv > 0.0 {
                    let want = sv.ln();
                    assert!((log[i] - want).abs() <= 4e-16 * want.abs().max(1.0), "ln({sv:e}): device {} host {want}", log[i]);
                    assert_eq!(outside[i], 0.0, "{sv:e} is in the domain");
                } else {
                    assert_eq!((log[i], outside[i]), (0.0, 1.0), "{sv:e} is outside the domain");
                }
            }
        }
    }

    /// The device's negative root against [`negative_root`] on fresh
    /// values of both signs and magnitudes from 1e-8 to 1e8: within 1e-14
    /// relative (the same formulas, the square root rounded once more or
    /// less).
    #[test]
    fn device_negative_root_matches_the_host() {
        let Some(gpu) = gpu() else { return };
        let mut rng = StdRng::seed_from_u64(seed());
        let n = 1000;
        let v: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..1.0) * 10f64.powf(rng.random_range(-8.0..8.0))).collect();
        let y: Vec<f64> = (0..n).map(|_| 10f64.powf(rng.random_range(-8.0..8.0))).collect();
        let c = 0.7;
        let (vd, yd) = (gpu.upload_vector(&DVector::from_vec(v.clone()), Precision::F64).unwrap(), gpu.upload_vector(&DVector::from_vec(y.clone()), Precision::F64).unwrap());
        let got = gpu.to_host_vector(&gpu.resident_negative_root(&vd, &yd, c).unwrap()).unwrap();
        for i in 0..n {
            let want = negative_root(v[i], c * y[i]);
            assert!((got[i] - want).abs() <= 1e-14 * want.abs(), "v {} y {}: device {} host {want}", v[i], y[i], got[i]);
        }
    }

    /// The sums of several resident vectors in one read, at lengths around
    /// the reduction's workgroup of 256 and one of many workgroups, against
    /// the host's sums within 1e-14 of the sum of magnitudes; a sum that
    /// overflows is [`Error::Overflow`].
    #[test]
    fn device_sums_of_several_vectors_match_the_host() {
        let Some(gpu) = gpu() else { return };
        let mut rng = StdRng::seed_from_u64(seed());
        for n in [1usize, 255, 256, 257, 70_001] {
            let vs: Vec<DVector<f64>> = (0..3).map(|k| DVector::from_fn(n, |_, _| rng.random_range(-1.0..1.0) * 10f64.powi(k))).collect();
            let ds: Vec<DeviceMatrix> = vs.iter().map(|v| gpu.upload_vector(v, Precision::F64).unwrap()).collect();
            let got = gpu.resident_sums(&ds.iter().collect::<Vec<_>>()).unwrap();
            assert_eq!(got.len(), 3);
            for (g, v) in got.iter().zip(&vs) {
                let bound = 1e-14 * v.iter().map(|x| x.abs()).sum::<f64>();
                assert!((g - v.sum()).abs() <= bound, "n = {n}: device {g} host {}", v.sum());
            }
        }
        let big = gpu.upload_vector(&DVector::from_element(4, f64::MAX), Precision::F64).unwrap();
        assert!(matches!(gpu.resident_sums(&[&big]), Err(Error::Overflow { .. })));
    }

    /// The parallel transpose equals the element-by-element one, for
    /// strips that do and do not divide the rows.
    #[test]
    fn row_major_equals_the_elementwise_transpose() {
        for (rows, cols) in [(1usize, 1usize), (3, 5), (TRANSPOSE_ROWS, 2), (2 * TRANSPOSE_ROWS + 37, 3), (TRANSPOSE_ROWS + 1, 1)] {
            let x = DMatrix::<f64>::from_fn(rows, cols, |i, j| (i * 7 + j * 13) as f64 * 0.25 - 3.0);
            let out = row_major(&x);
            assert_eq!(out.len(), rows * cols);
            for i in 0..rows {
                for j in 0..cols {
                    assert_eq!(out[i * cols + j], x[(i, j)], "({i}, {j}) of {rows} x {cols}");
                }
            }
            let x32 = x.map(|v| v as f32);
            assert_eq!(row_major(&x32), out);
        }
    }
}
