//! Kernel columns computed on demand, never the full kernel matrix, on
//! dense rows or on sparse (CSR) rows ([`Rows`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use nalgebra::DMatrix;

use crate::kernel::row_squared_norms;
use crate::linalg::{self, check_matrix};
use crate::resident::DeviceMatrix;
use crate::sparse::{self, CsrMatrix};
use crate::{Error, Device, Kernel};

/// The samples the kernel columns are computed on: a dense matrix or sparse
/// rows (CSR), one sample per row. Sparse rows are never densified: their
/// statistic columns here come from [`crate::sparse`] on the CPU, on every
/// device (mklaren's device fit, `super::device`, computes its own on the
/// GPU).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Rows<'a> {
    /// Dense rows.
    Dense(&'a DMatrix<f64>),
    /// Sparse rows.
    Sparse(&'a CsrMatrix<f64>),
}

impl<'a> Rows<'a> {
    /// Number of samples.
    pub(crate) fn nrows(&self) -> usize {
        match self {
            Rows::Dense(x) => x.nrows(),
            Rows::Sparse(x) => x.nrows(),
        }
    }

    /// Number of features.
    pub(crate) fn ncols(&self) -> usize {
        match self {
            Rows::Dense(x) => x.ncols(),
            Rows::Sparse(x) => x.ncols(),
        }
    }

    /// The dense matrix (`None` for sparse rows).
    pub(crate) fn dense(&self) -> Option<&'a DMatrix<f64>> {
        match self {
            Rows::Dense(x) => Some(x),
            Rows::Sparse(_) => None,
        }
    }

    /// Whether both are the same object (the same input of several kernels).
    pub(crate) fn same(&self, other: &Rows<'_>) -> bool {
        match (self, other) {
            (Rows::Dense(a), Rows::Dense(b)) => std::ptr::eq(*a, *b),
            (Rows::Sparse(a), Rows::Sparse(b)) => std::ptr::eq(*a, *b),
            _ => false,
        }
    }

    /// Fails with `Empty` or `NonFinite` (at the first NaN or infinity).
    pub(crate) fn check(&self, what: &'static str) -> Result<(), Error> {
        match self {
            Rows::Dense(x) => check_matrix(what, x),
            Rows::Sparse(x) => sparse::check_csr(what, x),
        }
    }

    /// The rows `idx` (below n, checked by the caller) as a dense matrix
    /// (`idx.len() x d`): the pivots' rows a fitted transform keeps.
    pub(crate) fn select_dense(&self, idx: &[usize]) -> Result<DMatrix<f64>, Error> {
        match self {
            Rows::Dense(x) => Ok(x.select_rows(idx)),
            Rows::Sparse(x) => sparse::densify(&sparse::select_csr_rows(x, idx)),
        }
    }

    /// `||x_k||^2` for every row.
    pub(super) fn squared_norms(&self) -> Vec<f64> {
        match self {
            Rows::Dense(x) => row_squared_norms(x),
            Rows::Sparse(x) => sparse::sparse_row_squared_norms(x),
        }
    }
}

/// Rows handled per parallel task in the element-wise loops.
pub(crate) const ROW_CHUNK: usize = 8192;

/// A small least-recently-used cache of columns by key (memory: capacity
/// columns of n numbers). Looked up and filled under a lock; the column is
/// computed outside it (the computation runs on the thread pool), so two
/// threads that miss at once may both compute it, with the same result.
struct ColumnCache<K> {
    capacity: usize,
    entries: Mutex<VecDeque<(K, Arc<Vec<f64>>)>>,
}

impl<K: PartialEq + Copy> ColumnCache<K> {
    fn new(capacity: usize) -> Self {
        ColumnCache { capacity, entries: Mutex::new(VecDeque::new()) }
    }

    /// The cached column for `key` (now the most recently used), or the one
    /// `compute` returns, kept when the cache has room (capacity > 0).
    fn get_or_compute<E>(&self, key: K, compute: impl FnOnce() -> Result<Vec<f64>, E>) -> Result<Arc<Vec<f64>>, E> {
        if self.capacity > 0 {
            let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(pos) = entries.iter().position(|(k, _)| *k == key) {
                let entry = entries.remove(pos).expect("position is valid");
                let out = entry.1.clone();
                entries.push_back(entry);
                return Ok(out);
            }
        }
        let col = Arc::new(compute()?);
        if self.capacity > 0 {
            let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            if !entries.iter().any(|(k, _)| *k == key) {
                if entries.len() == self.capacity {
                    entries.pop_front();
                }
                entries.push_back((key, col.clone()));
            }
        }
        Ok(col)
    }
}

/// What the kernels on one input share (Eq. 2 needs the column `K_q(:, i)`
/// of kernel q at pivot i): the input `X`, its squared row norms `||x_k||^2`
/// (one pass, for every kernel's diagonal and distances), and on the CPU the
/// statistic columns by pivot: every distance-based kernel on `X` is a
/// function of the same squared distances `s_k = ||x_k - x_i||^2` (RBF:
/// `exp(-gamma_q s_k)`), every other kernel of the inner products
/// `<x_k, x_i>`, so one pass over `X` per pivot serves all of them. The
/// statistic columns are cached by (pivot, kind), least recently used
/// first out.
pub(crate) struct SharedInput<'a> {
    x: Rows<'a>,
    row_sq_norms: Vec<f64>,
    cache: ColumnCache<(usize, bool)>,
    /// Statistic columns computed (passes over X; cache hits not counted).
    passes: AtomicUsize,
}

impl<'a> SharedInput<'a> {
    /// `x` with its squared row norms, keeping `capacity` statistic columns.
    ///
    /// Errors: empty or non-finite `x`.
    pub(crate) fn new(x: Rows<'a>, capacity: usize) -> Result<Self, Error> {
        x.check("x")?;
        Ok(SharedInput { x, row_sq_norms: x.squared_norms(), cache: ColumnCache::new(capacity), passes: AtomicUsize::new(0) })
    }

    /// One shared input per distinct matrix of `xs` (the same object is the
    /// same input), each keeping `capacity_per_kernel` statistic columns per
    /// kernel on it; entry q is kernel q's.
    pub(crate) fn for_inputs(xs: &[Rows<'a>], capacity_per_kernel: usize) -> Result<Vec<Arc<SharedInput<'a>>>, Error> {
        let mut out: Vec<Arc<SharedInput<'a>>> = Vec::with_capacity(xs.len());
        for (q, x) in xs.iter().enumerate() {
            match (0..q).find(|&p| xs[p].same(x)) {
                Some(p) => out.push(out[p].clone()),
                None => {
                    let users = xs.iter().filter(|y| y.same(x)).count();
                    out.push(Arc::new(SharedInput::new(*x, users * capacity_per_kernel)?));
                }
            }
        }
        Ok(out)
    }

    /// Statistic columns computed so far (each a pass over X).
    pub(crate) fn passes(&self) -> usize {
        self.passes.load(Ordering::Relaxed)
    }

    /// The statistic of `kernel` against sample `i` (`i < n`, checked by the
    /// caller): `||x_k - x_i||^2` or `<x_k, x_i>` for every k, the first two
    /// steps of the core's fused kernel tile
    /// ([`crate::kernel::statistic_matrix_with_norms`]) or, on sparse rows,
    /// of the sparse one ([`crate::sparse::statistic_column_sparse`]), cached.
    fn statistic_column(&self, kernel: &Kernel, i: usize) -> Result<Arc<Vec<f64>>, Error> {
        self.cache.get_or_compute((i, kernel.is_distance_based()), || {
            self.passes.fetch_add(1, Ordering::Relaxed);
            match self.x {
                Rows::Dense(x) => {
                    let z = x.select_rows(&[i]);
                    Ok(crate::kernel::statistic_matrix_with_norms(kernel, x, &z, &self.row_sq_norms, &[self.row_sq_norms[i]])?.as_slice().to_vec())
                }
                Rows::Sparse(x) => {
                    let mut out = vec![0.0; x.nrows()];
                    sparse::statistic_column_sparse(kernel, x, &self.row_sq_norms, i, &mut out)?;
                    Ok(out)
                }
            }
        })
    }
}

/// The columns `K(:, i)` of one kernel matrix `K_{ki} = k(x_k, x_i)`, computed
/// one at a time in O(n d) each, with the diagonal `k(x_i, x_i)` up front.
///
/// On [`Device::Cpu`] a column is `k` applied to the statistic column of
/// its shared input (the core's fused kernel tile: the inner products,
/// the squared distances through `||x_k - x_i||^2 = ||x_k||^2 + ||x_i||^2 -
/// 2 <x_k, x_i>` with near-duplicates recomputed directly, on every core),
/// which the kernels on the same input share and cache. On a GPU, X is
/// uploaded once (in `f64` where the adapter has it) when the columns are
/// prepared, and a column is [`Device::resident_kernel_matrix_into`] of the
/// resident X against its pivot row (a view of X, no copy) into one n x 1
/// device buffer allocated with the columns and reused: one dispatch, n
/// numbers come back per column, nothing goes up but the dispatch
/// descriptors, nothing is allocated.
///
/// An optional cache keeps the most recently computed kernel columns of
/// this kernel (a cached column costs a copy instead of a pass over `X`, on
/// the CPU instead of `k` on the cached statistic).
pub struct KernelColumns<'a> {
    device: &'a Device,
    kernel: Kernel,
    input: Arc<SharedInput<'a>>,
    /// X on the device (GPU only), uploaded once.
    resident: Option<DeviceMatrix>,
    /// The reused device buffer of a column (GPU only, n x 1), allocated
    /// once with the columns.
    scratch: Option<Mutex<DeviceMatrix>>,
    diagonal: Vec<f64>,
    cache: ColumnCache<usize>,
    /// Columns computed so far (cache hits not counted).
    computed: AtomicUsize,
}

impl<'a> KernelColumns<'a> {
    /// Prepares the columns of `kernel` on the rows of `x` (on a GPU, X
    /// uploaded in [`Device::best_precision`]).
    pub fn new(device: &'a Device, kernel: Kernel, x: &'a DMatrix<f64>) -> Result<Self, Error> {
        Self::new_in(device, kernel, x, device.best_precision())
    }

    /// [`KernelColumns::new`] with X held in `precision` on a GPU (a fit's
    /// [`Device::working_precision`]): `f64` keeps the resident Cholesky
    /// steps of ICD, `f32` computes the columns in `f32` and reads them back.
    pub(crate) fn new_in(device: &'a Device, kernel: Kernel, x: &'a DMatrix<f64>, precision: crate::precision::Precision) -> Result<Self, Error> {
        let resident = if device.is_gpu() {
            check_matrix("x", x)?;
            Some(device.upload(x, precision)?)
        } else {
            None
        };
        Self::on_input(device, kernel, Arc::new(SharedInput::new(Rows::Dense(x), 0)?), resident)
    }

    /// The columns of `kernel` on `rows`: dense rows as
    /// [`KernelColumns::new_in`], sparse rows on the CPU whatever the device
    /// (nothing goes up; the device is kept for the callers' dense steps).
    pub(crate) fn on_rows(device: &'a Device, kernel: Kernel, rows: Rows<'a>, precision: crate::precision::Precision) -> Result<Self, Error> {
        match rows {
            Rows::Dense(x) => Self::new_in(device, kernel, x, precision),
            Rows::Sparse(_) => Self::on_input(device, kernel, Arc::new(SharedInput::new(rows, 0)?), None),
        }
    }

    /// [`KernelColumns::new`], or for a block of no rows (a rank of a
    /// sharded fit that holds none) columns of no entries.
    pub(crate) fn for_rows(device: &'a Device, kernel: Kernel, x: &'a DMatrix<f64>) -> Result<Self, Error> {
        if x.nrows() > 0 {
            return Self::new(device, kernel, x);
        }
        kernel.validate()?;
        let input = Arc::new(SharedInput { x: Rows::Dense(x), row_sq_norms: Vec::new(), cache: ColumnCache::new(0), passes: AtomicUsize::new(0) });
        Ok(KernelColumns { device, kernel, input, resident: None, scratch: None, diagonal: Vec::new(), cache: ColumnCache::new(0), computed: AtomicUsize::new(0) })
    }

    /// Like [`KernelColumns::new`] with X already on the device (several
    /// kernels on one input share one upload).
    ///
    /// Errors: a resident X whose shape differs from `x`'s.
    pub fn with_resident(device: &'a Device, kernel: Kernel, x: &'a DMatrix<f64>, resident: DeviceMatrix) -> Result<Self, Error> {
        Self::on_input(device, kernel, Arc::new(SharedInput::new(Rows::Dense(x), 0)?), Some(resident))
    }

    /// The columns of `kernel` on a shared input (its norms and, on the CPU,
    /// its statistic columns shared with the other kernels on it), with X
    /// already on the device where `resident` is given.
    ///
    /// Errors: an invalid kernel, a resident X whose shape differs.
    pub(crate) fn on_input(device: &'a Device, kernel: Kernel, input: Arc<SharedInput<'a>>, resident: Option<DeviceMatrix>) -> Result<Self, Error> {
        if let Some(r) = &resident {
            linalg::check_dim("rows of the resident x", input.x.nrows(), r.nrows())?;
            linalg::check_dim("columns of the resident x", input.x.ncols(), r.ncols())?;
        }
        kernel.validate()?;
        let diagonal = kernel.diagonal_from_sq_norms(&input.row_sq_norms)?.as_slice().to_vec();
        let scratch = match &resident {
            Some(r) => Some(Mutex::new(device.zeros(r.nrows(), 1, r.precision())?)),
            None => None,
        };
        Ok(KernelColumns { device, kernel, input, resident, scratch, diagonal, cache: ColumnCache::new(0), computed: AtomicUsize::new(0) })
    }

    /// Inputs `xs` on `device`, each distinct matrix uploaded once (matrices
    /// are the same input when they are the same object), in
    /// [`Device::best_precision`]: `None` on the CPU.
    pub fn upload_inputs(device: &Device, xs: &[&DMatrix<f64>]) -> Result<Vec<Option<DeviceMatrix>>, Error> {
        Self::upload_inputs_in(device, xs, device.best_precision())
    }

    /// [`KernelColumns::upload_inputs`] in `precision` (a fit's
    /// [`Device::working_precision`]).
    pub(crate) fn upload_inputs_in(device: &Device, xs: &[&DMatrix<f64>], precision: crate::precision::Precision) -> Result<Vec<Option<DeviceMatrix>>, Error> {
        if !device.is_gpu() {
            return Ok(vec![None; xs.len()]);
        }
        let mut out: Vec<Option<DeviceMatrix>> = Vec::with_capacity(xs.len());
        for (q, x) in xs.iter().enumerate() {
            let earlier = (0..q).find(|&p| std::ptr::eq(xs[p], *x));
            out.push(Some(match earlier {
                Some(p) => out[p].clone().expect("uploaded above"),
                None => device.upload(*x, precision)?,
            }));
        }
        Ok(out)
    }

    /// Keeps the `capacity` most recently used columns (memory `capacity n`).
    pub fn with_cache(mut self, capacity: usize) -> Self {
        self.cache = ColumnCache::new(capacity);
        self
    }

    /// Number of samples n.
    pub fn n(&self) -> usize {
        self.input.x.nrows()
    }

    /// The kernel.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// The data matrix (rows are samples); `None` where the columns are
    /// computed on sparse rows.
    pub fn data(&self) -> Option<&DMatrix<f64>> {
        self.input.x.dense()
    }

    /// The samples the columns are computed on.
    pub(crate) fn rows(&self) -> Rows<'a> {
        self.input.x
    }

    /// The diagonal `k(x_i, x_i)`.
    pub fn diagonal(&self) -> &[f64] {
        &self.diagonal
    }

    /// Column `i`: `k(x_k, x_i)` for every sample k.
    pub fn column(&self, i: usize) -> Result<Vec<f64>, Error> {
        let mut out = vec![0.0; self.n()];
        self.column_into(i, &mut out)?;
        Ok(out)
    }

    /// Column `i` written into `out` (n entries): from the cache, or
    /// computed.
    pub(crate) fn column_into(&self, i: usize, out: &mut [f64]) -> Result<(), Error> {
        linalg::check_dim("length of the column buffer", self.n(), out.len())?;
        if i >= self.n() {
            return Err(Error::IndexOutOfRange { what: "rows of x", index: i, len: self.n() });
        }
        if self.cache.capacity == 0 {
            return self.compute_column(i, out);
        }
        let col = self.cache.get_or_compute(i, || {
            let mut col = vec![0.0; out.len()];
            self.compute_column(i, &mut col).map(|_| col)
        })?;
        out.copy_from_slice(&col);
        Ok(())
    }

    /// The kernel column of every row of X against a sample `z` (1 x d) that
    /// need not be a row of X (the pivot of a sharded fit, held by another
    /// rank), written into `out` (n entries): the bits of
    /// [`KernelColumns::column`] where `z` is a row of X. On a GPU `z` goes
    /// up (d numbers) and the column is one dispatch on the resident X into
    /// the columns' reused buffer; on the CPU `k` on the statistic column
    /// (not cached: `z` has no index).
    pub(crate) fn column_against(&self, z: &DMatrix<f64>, out: &mut [f64]) -> Result<(), Error> {
        linalg::check_dim("length of the column buffer", self.n(), out.len())?;
        linalg::check_dim("columns of the sample", self.input.x.ncols(), z.ncols())?;
        let Rows::Dense(x) = self.input.x else {
            return Err(Error::Unsupported("kernel columns of sparse rows against a sample that is not one of them".into()));
        };
        linalg::check_dim("rows of the sample", 1, z.nrows())?;
        if self.n() == 0 {
            return Ok(());
        }
        self.computed.fetch_add(1, Ordering::Relaxed);
        if let (Some(x), Some(scratch)) = (&self.resident, &self.scratch) {
            let zr = self.device.upload(z, x.precision())?;
            let col = scratch.lock().unwrap_or_else(|e| e.into_inner());
            self.device.resident_kernel_matrix_into(&self.kernel, x, &zr, &col)?;
            out.copy_from_slice(self.device.to_host(&col)?.as_slice());
            return Ok(());
        }
        let statistic = crate::kernel::statistic_matrix_with_norms(&self.kernel, x, z, &self.input.row_sq_norms, &row_squared_norms(z))?;
        out.copy_from_slice(statistic.as_slice());
        crate::kernel::apply_to_statistics(&self.kernel, out);
        Ok(())
    }

    /// Whether X is on the device in `f64` (a GPU with `f64` shaders), where
    /// the columns can stay resident ([`super::icd::ResidentCholesky`]).
    pub(crate) fn resident_f64(&self) -> bool {
        self.resident.as_ref().is_some_and(|x| x.precision() == crate::precision::Precision::F64)
    }

    /// Column `i < n` computed into the reused device buffer of the columns
    /// (one dispatch of the resident X against its row `i`, nothing read
    /// back or allocated), held until the guard is dropped; `None` on the
    /// CPU.
    pub(crate) fn resident_column(&self, i: usize) -> Result<Option<MutexGuard<'_, DeviceMatrix>>, Error> {
        let (Some(x), Some(scratch)) = (&self.resident, &self.scratch) else { return Ok(None) };
        if i >= self.n() {
            return Err(Error::IndexOutOfRange { what: "rows of x", index: i, len: self.n() });
        }
        self.computed.fetch_add(1, Ordering::Relaxed);
        let col = scratch.lock().unwrap_or_else(|e| e.into_inner());
        self.device.resident_kernel_matrix_into(&self.kernel, x, &x.rows(i, 1)?, &col)?;
        Ok(Some(col))
    }

    /// The device the columns are computed on.
    pub(crate) fn device(&self) -> &Device {
        self.device
    }

    /// Number of kernel columns computed so far (cache hits are not
    /// counted; on the CPU a column whose statistic was cached in the
    /// shared input costs no pass over X, see [`SharedInput::passes`]).
    pub(crate) fn computed(&self) -> usize {
        self.computed.load(Ordering::Relaxed)
    }

    /// Columns `indices` as an n x len matrix; on a GPU in one dispatch
    /// (cached columns are not recomputed).
    pub fn columns(&self, indices: &[usize]) -> Result<DMatrix<f64>, Error> {
        let n = self.n();
        let mut out = DMatrix::zeros(n, indices.len());
        match &self.resident {
            Some(x) if self.cache.capacity == 0 && !indices.is_empty() => {
                for &i in indices {
                    if i >= n {
                        return Err(Error::IndexOutOfRange { what: "rows of x", index: i, len: n });
                    }
                }
                let block = self.device.to_host(&self.device.resident_kernel_columns(&self.kernel, x, indices)?)?;
                out.copy_from(&block);
            }
            _ => {
                for (t, &i) in indices.iter().enumerate() {
                    self.column_into(i, out.column_mut(t).as_mut_slice())?;
                }
            }
        }
        Ok(out)
    }

    /// Column `i < n` into `out`: on a GPU one dispatch on the resident X
    /// and its row `i` into the reused column buffer (nothing allocated on
    /// the device), read back; on the CPU `k` on the shared statistic column.
    fn compute_column(&self, i: usize, out: &mut [f64]) -> Result<(), Error> {
        if let Some(col) = self.resident_column(i)? {
            out.copy_from_slice(self.device.to_host(&col)?.as_slice());
            return Ok(());
        }
        self.computed.fetch_add(1, Ordering::Relaxed);
        out.copy_from_slice(&self.input.statistic_column(&self.kernel, i)?);
        crate::kernel::apply_to_statistics(&self.kernel, out);
        Ok(())
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

    #[test]
    fn kernels_on_one_input_share_its_statistic_columns() {
        let x = DMatrix::<f64>::from_fn(40, 3, |i, j| ((i * 3 + j) as f64 * 0.37).sin());
        let other = x.clone();
        let device = Device::Cpu;
        let kernels = [Kernel::rbf(0.7).unwrap(), Kernel::rbf(2.0).unwrap(), Kernel::laplacian(0.4).unwrap(), Kernel::polynomial(0.5, 1.0, 2).unwrap()];
        let xs = [&x, &x, &x, &x, &other].map(Rows::Dense);
        let shared = SharedInput::for_inputs(&xs, 2).unwrap();
        assert!(Arc::ptr_eq(&shared[0], &shared[3]) && !Arc::ptr_eq(&shared[0], &shared[4]));
        let cols: Vec<KernelColumns<'_>> = kernels.iter().enumerate().map(|(q, k)| KernelColumns::on_input(&device, *k, shared[q].clone(), None).unwrap()).collect();
        for &i in &[3usize, 7, 3, 39] {
            for c in &cols {
                // The same bits as the whole kernel matrix (one tile code).
                let k = crate::kernel::kernel_matrix_cpu(&c.kernel(), &x, &x).unwrap();
                assert!(c.column(i).unwrap().iter().zip(k.column(i).iter()).all(|(a, b)| a.to_bits() == b.to_bits()));
            }
        }
        // Three distinct pivots, two kinds of statistic (distances, inner
        // products): 6 passes over X for 16 kernel columns.
        assert_eq!(shared[0].passes(), 6);
        assert_eq!(cols.iter().map(|c| c.computed()).sum::<usize>(), 16);
        assert!(cols[0].column(40).is_err());
        let mut short = vec![0.0; 3];
        assert!(cols[0].column_into(0, &mut short).is_err());
    }
}
