//! Host-matrix operations on the GPU: each uploads its operands in `f32`,
//! runs the resident operation of the product engine and reads the result
//! back in the caller's scalar type.
//!
//! Operands are uploaded as the rows the engine reads (a transposed operand
//! is transposed on the host), so every kernel matrix and product is the
//! statistic matrix `f(s(a_i, b_j))` of two row sets. The output is computed
//! in bands of rows and columns (no output row wider than a binding, no band
//! beyond [`OUTPUT_BAND_BYTES`]), and rows longer than a binding are cut into
//! depth parts uploaded apart whose statistics accumulate in the output
//! before the kernel function is applied; the engine cuts every band further
//! at the binding, grid and loop-budget limits.

use std::time::{Duration, Instant};

use nalgebra::DMatrix;

use super::buffers::GpuMatrix;
use super::plan::{Dispatch, Operand, ProductFlags};
use super::problem::KernelCode;
use super::GpuContext;
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::linalg::{check_f32_range, MatrixProduct, Real};
use crate::precision::Precision;

/// Largest output band, in bytes, held on the device at once.
const OUTPUT_BAND_BYTES: usize = 1 << 28;

/// A row-major host matrix in `f64`: the rows one operand of the engine reads.
struct HostRows {
    data: Vec<f64>,
    rows: usize,
    cols: usize,
}

impl HostRows {
    /// The rows of `m`, each column shifted by `shift[j]` where given.
    fn rows_of<T: Real>(m: &DMatrix<T>, shift: Option<&[f64]>) -> Self {
        let (rows, cols) = m.shape();
        let mut data = vec![0.0; rows * cols];
        for (j, col) in m.column_iter().enumerate() {
            let s = shift.map_or(0.0, |s| s[j]);
            for (i, v) in col.iter().enumerate() {
                data[i * cols + j] = v.to_f64_exact() - s;
            }
        }
        HostRows { data, rows, cols }
    }

    /// The columns of `m` as rows, i.e. `m^T` (nalgebra's storage order).
    fn columns_of<T: Real>(m: &DMatrix<T>) -> Self {
        HostRows { data: m.as_slice().iter().map(|v| v.to_f64_exact()).collect(), rows: m.ncols(), cols: m.nrows() }
    }

    /// The rows of `x` and of `z` for a kernel matrix. For the distance
    /// kernels (RBF, Laplacian) both are shifted by the mean of all their
    /// rows, in the caller's precision before rounding to `f32`: distances
    /// do not change, and data far from the origin keep their digits.
    fn kernel_operands<T: Real>(kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>) -> (Self, Self) {
        if !kernel.is_distance_based() {
            return (Self::rows_of(x, None), Self::rows_of(z, None));
        }
        let count = (x.nrows() + z.nrows()) as f64;
        let mean: Vec<f64> = (0..x.ncols()).map(|j| x.column(j).iter().chain(z.column(j).iter()).map(|v| v.to_f64_exact()).sum::<f64>() / count).collect();
        (Self::rows_of(x, Some(&mean)), Self::rows_of(z, Some(&mean)))
    }

    /// The rows `A'` and `B'` of the product `form` (`C = A' B'^T`).
    fn product_operands<T: Real>(a: &DMatrix<T>, b: &DMatrix<T>, form: MatrixProduct) -> (Self, Self) {
        match form {
            MatrixProduct::AB => (Self::rows_of(a, None), Self::columns_of(b)),
            MatrixProduct::ABt => (Self::rows_of(a, None), Self::rows_of(b, None)),
            MatrixProduct::AtB => (Self::columns_of(a), Self::columns_of(b)),
        }
    }
}

/// The operands of one statistic matrix on the device: per depth part, the
/// rows of A' and of B' over that part's columns.
struct Uploaded {
    parts: Vec<(GpuMatrix, GpuMatrix)>,
    rows: usize,
    cols: usize,
}

impl GpuContext {
    /// Columns of one depth part: as many as fit one binding row in `f32`.
    fn depth_part(&self) -> usize {
        ((self.max_binding_bytes / 4) as usize).max(1)
    }

    /// Uploads `a` and `b` (rows of one length) in `f32`, in depth parts of
    /// at most one binding row each.
    fn upload_pair(&self, a: &HostRows, b: &HostRows) -> Result<Uploaded> {
        debug_assert_eq!(a.cols, b.cols);
        let depth = a.cols;
        let part = self.depth_part();
        let mut parts = Vec::with_capacity(depth.div_ceil(part));
        for k0 in (0..depth).step_by(part) {
            let k1 = (k0 + part).min(depth);
            let slice = |m: &HostRows| -> Result<GpuMatrix> {
                if k0 == 0 && k1 == depth {
                    return self.upload(&m.data, m.rows, depth, Precision::F32);
                }
                let cols: Vec<f64> = m.data.chunks_exact(depth).flat_map(|row| row[k0..k1].iter().copied()).collect();
                self.upload(&cols, m.rows, k1 - k0, Precision::F32)
            };
            parts.push((slice(a)?, slice(b)?));
        }
        Ok(Uploaded { parts, rows: a.rows, cols: b.rows })
    }

    /// Records `out = f(s(a_i, b_j))` for rows `r0..r0 + out.nrows()` of A'
    /// and `c0..c0 + out.ncols()` of B', the depth parts accumulating the
    /// statistic and the last applying the kernel function.
    fn plan_band(&self, code: KernelCode, ops: &Uploaded, (r0, c0): (usize, usize), out: &GpuMatrix, plan: &mut Vec<Dispatch>) -> Result<()> {
        let parts = ops.parts.len();
        for (t, (a, b)) in ops.parts.iter().enumerate() {
            let a = a.rows_view(r0, out.nrows())?;
            let b = b.rows_view(c0, out.ncols())?;
            let flags = ProductFlags { continued: t > 0, open: t + 1 < parts, ..ProductFlags::default() };
            self.plan_product(code, Operand::plain(&a), Operand::plain(&b), out, flags, plan)?;
        }
        Ok(())
    }

    /// The output bands `(r0, c0, rows, cols)` of a `rows x cols` statistic
    /// matrix: no band row wider than a binding, no band beyond
    /// [`OUTPUT_BAND_BYTES`].
    fn output_bands(&self, rows: usize, cols: usize) -> Vec<(usize, usize, usize, usize)> {
        let bc = cols.min(((self.max_binding_bytes / 4) as usize).max(1));
        let br = rows.min((OUTPUT_BAND_BYTES / (4 * bc)).max(1));
        let mut bands = Vec::new();
        for r0 in (0..rows).step_by(br) {
            for c0 in (0..cols).step_by(bc) {
                bands.push((r0, c0, br.min(rows - r0), bc.min(cols - c0)));
            }
        }
        bands
    }

    /// The statistic matrix `f(s(a_i, b_j))` (a.rows x b.rows) in the
    /// caller's type, band by band; with `read == false` the bands are
    /// computed and not read back (device-side timing).
    fn statistic_matrix<T: Real>(&self, code: KernelCode, a: &HostRows, b: &HostRows, read: bool) -> Result<DMatrix<T>> {
        let ops = self.upload_pair(a, b)?;
        let mut out = if read { DMatrix::<T>::zeros(ops.rows, ops.cols) } else { DMatrix::<T>::zeros(0, 0) };
        for (r0, c0, tr, tc) in self.output_bands(ops.rows, ops.cols) {
            let band = self.zeros(tr, tc, Precision::F32)?;
            let mut plan = Vec::new();
            self.plan_band(code, &ops, (r0, c0), &band, &mut plan)?;
            self.run_plan(plan)?;
            if read {
                let data = self.download(&band)?;
                for (i, row) in data.chunks_exact(tc).enumerate() {
                    for (j, &v) in row.iter().enumerate() {
                        out[(r0 + i, c0 + j)] = T::from_f64_lossy(v);
                    }
                }
            }
        }
        if !read {
            self.synchronize()?;
        }
        Ok(out)
    }

    /// A `rows x cols` host matrix of the caller's type from a row-major
    /// download.
    fn to_host_matrix<T: Real>(&self, m: &GpuMatrix) -> Result<DMatrix<T>> {
        let data = self.download(m)?;
        let cols = m.ncols();
        Ok(DMatrix::from_fn(m.nrows(), cols, |i, j| T::from_f64_lossy(data[i * cols + j])))
    }

    /// `K(X, Z)` on the GPU (inputs validated by the caller).
    pub(crate) fn kernel_matrix<T: Real>(&self, kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>) -> Result<DMatrix<T>> {
        check_f32_range("x", x)?;
        check_f32_range("z", z)?;
        let (a, b) = HostRows::kernel_operands(kernel, x, z);
        self.statistic_matrix(KernelCode::of(kernel), &a, &b, true)
    }

    /// Device-side time of `K(X, Z)`: the uploads and the kernels of every
    /// band, the output left on the GPU (no read-back). For benchmarks.
    pub fn time_kernel_matrix_on_device<T: Real>(&self, kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>) -> Result<Duration> {
        crate::kernel::check_pair(kernel, x, z)?;
        check_f32_range("x", x)?;
        check_f32_range("z", z)?;
        let (a, b) = HostRows::kernel_operands(kernel, x, z);
        let start = Instant::now();
        self.statistic_matrix::<T>(KernelCode::of(kernel), &a, &b, false)?;
        Ok(start.elapsed())
    }

    /// One matrix product on the GPU (shapes validated by the caller).
    pub(crate) fn product<T: Real>(&self, a: &DMatrix<T>, b: &DMatrix<T>, form: MatrixProduct) -> Result<DMatrix<T>> {
        check_f32_range("a", a)?;
        check_f32_range("b", b)?;
        let (ra, rb) = HostRows::product_operands(a, b, form);
        self.statistic_matrix(KernelCode::of(&Kernel::Linear), &ra, &rb, true)
    }

    /// Many products: those whose operands and output fit one band and one
    /// depth part are recorded together and run in one submission, the
    /// others go through [`Self::product`].
    pub(crate) fn batched_product<T: Real>(&self, pairs: &[(&DMatrix<T>, &DMatrix<T>)], form: MatrixProduct) -> Result<Vec<DMatrix<T>>> {
        for (a, b) in pairs {
            check_f32_range("a", a)?;
            check_f32_range("b", b)?;
        }
        let linear = KernelCode::of(&Kernel::Linear);
        let mut results: Vec<Option<DMatrix<T>>> = vec![None; pairs.len()];
        let mut pending: Vec<(usize, GpuMatrix)> = Vec::new();
        let mut plan = Vec::new();
        for (idx, (a, b)) in pairs.iter().enumerate() {
            let (ra, rb) = HostRows::product_operands(a, b, form);
            if ra.cols > self.depth_part() || self.output_bands(ra.rows, rb.rows).len() > 1 {
                results[idx] = Some(self.statistic_matrix(linear, &ra, &rb, true)?);
                continue;
            }
            let ops = self.upload_pair(&ra, &rb)?;
            let out = self.zeros(ra.rows, rb.rows, Precision::F32)?;
            self.plan_band(linear, &ops, (0, 0), &out, &mut plan)?;
            pending.push((idx, out));
        }
        self.run_plan(plan)?;
        for (idx, out) in pending {
            results[idx] = Some(self.to_host_matrix(&out)?);
        }
        results.into_iter().map(|r| r.ok_or_else(|| Error::Gpu("a batched product was not computed".into()))).collect()
    }

    /// `K(X, Z) V` without storing `K(X, Z)` (inputs validated by the
    /// caller): the operands uploaded in `f32`, the resident kernel matvec,
    /// the n x c result read back.
    pub(crate) fn kernel_matvec<T: Real>(&self, kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>, v: &DMatrix<T>) -> Result<DMatrix<T>> {
        check_f32_range("x", x)?;
        check_f32_range("z", z)?;
        check_f32_range("v", v)?;
        let (xr, zr) = HostRows::kernel_operands(kernel, x, z);
        let vr = HostRows::rows_of(v, None);
        let xg = self.upload(&xr.data, xr.rows, xr.cols, Precision::F32)?;
        let zg = self.upload(&zr.data, zr.rows, zr.cols, Precision::F32)?;
        let vg = self.upload(&vr.data, vr.rows, vr.cols, Precision::F32)?;
        let out = self.zeros(x.nrows(), v.ncols(), Precision::F32)?;
        self.kernel_matvec_into(KernelCode::of(kernel), &xg, &zg, &vg, &out, false)?;
        self.to_host_matrix(&out)
    }
}
