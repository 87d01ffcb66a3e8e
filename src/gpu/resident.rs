//! Device-resident matrices and the operations between them.
//!
//! A [`GpuMatrix`] is a row-major matrix in GPU memory, in `f32` or `f64`,
//! stored as row blocks of at most one buffer binding each (so a matrix may
//! be larger than any single binding). Views of row ranges share the
//! storage. Operations read their operands in place (strided, so transposed
//! operands cost no copy) and write a resident output: a pipeline of
//! operations moves no data between host and device. Data crosses only in
//! [`GpuContext::upload`] / [`GpuContext::download`] and where a caller asks
//! for a small result, and every crossing is counted ([`TransferStats`]).
//!
//! The one product engine, [`GpuContext::product_into`], computes
//! `C = f(s(A', B'))` with `A'` and `B'` each a matrix or its transpose, `s`
//! an inner product (optionally weighted, `A' diag(w) B'^T`) or a squared
//! distance, and `f` a kernel function: kernel matrices, kernel columns,
//! every matrix product form and the weighted Gram `P diag(w) P^T` are this
//! one operation with different operands. It cuts the problem at every row
//! block boundary of its operands and of the output (and at the workgroup
//! grid limit) and records one dispatch per piece, all in one submission.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use super::ops::{KernelCode, Problem};
use super::tuner::ShapeClass;
use super::variants::{self, CATALOGUE};
use super::{GpuContext, LOOP_BUDGET};
use crate::error::{Error, Result};

/// Scalar type of a device-resident matrix and of the arithmetic on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    /// 32-bit floats: every adapter.
    F32,
    /// 64-bit floats: adapters with `SHADER_F64` (NVIDIA's and Mesa's Vulkan
    /// drivers have it); the CPU path always.
    F64,
}

impl Precision {
    /// Bytes per element.
    pub fn bytes(self) -> usize {
        match self {
            Precision::F32 => 4,
            Precision::F64 => 8,
        }
    }
}

/// Counters of the data moved between host and device and of the GPU work
/// submitted, since the device was opened or last reset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransferStats {
    /// Bytes of data written from the host into GPU buffers (matrices,
    /// vectors; dispatch descriptors are counted apart).
    pub host_to_device_bytes: u64,
    /// Bytes of dispatch descriptors (problem shapes, offsets, kernel
    /// parameters) written to the GPU: control, not data.
    pub descriptor_bytes: u64,
    /// Host matrices uploaded (calls of `upload`).
    pub uploads: u64,
    /// Bytes read back from GPU buffers to the host.
    pub device_to_host_bytes: u64,
    /// Compute dispatches recorded.
    pub dispatches: u64,
    /// Command buffers submitted to the queue.
    pub submissions: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    h2d: AtomicU64,
    descriptors: AtomicU64,
    uploads: AtomicU64,
    d2h: AtomicU64,
    dispatches: AtomicU64,
    submissions: AtomicU64,
}

impl Counters {
    pub(crate) fn count_upload(&self, bytes: u64) {
        self.h2d.fetch_add(bytes, Ordering::Relaxed);
    }
    pub(crate) fn count_descriptors(&self, bytes: u64) {
        self.descriptors.fetch_add(bytes, Ordering::Relaxed);
    }
    pub(crate) fn count_matrix_upload(&self) {
        self.uploads.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn count_download(&self, bytes: u64) {
        self.d2h.fetch_add(bytes, Ordering::Relaxed);
    }
    pub(crate) fn count_dispatch(&self) {
        self.dispatches.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn count_submission(&self) {
        self.submissions.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn snapshot(&self) -> TransferStats {
        TransferStats {
            host_to_device_bytes: self.h2d.load(Ordering::Relaxed),
            descriptor_bytes: self.descriptors.load(Ordering::Relaxed),
            uploads: self.uploads.load(Ordering::Relaxed),
            device_to_host_bytes: self.d2h.load(Ordering::Relaxed),
            dispatches: self.dispatches.load(Ordering::Relaxed),
            submissions: self.submissions.load(Ordering::Relaxed),
        }
    }
    /// Puts the counters back to `s` (the tuner's own work is not the caller's traffic).
    pub(crate) fn restore(&self, s: &TransferStats) {
        self.h2d.store(s.host_to_device_bytes, Ordering::Relaxed);
        self.descriptors.store(s.descriptor_bytes, Ordering::Relaxed);
        self.uploads.store(s.uploads, Ordering::Relaxed);
        self.d2h.store(s.device_to_host_bytes, Ordering::Relaxed);
        self.dispatches.store(s.dispatches, Ordering::Relaxed);
        self.submissions.store(s.submissions, Ordering::Relaxed);
    }
    pub(crate) fn reset(&self) {
        for c in [&self.h2d, &self.descriptors, &self.uploads, &self.d2h, &self.dispatches, &self.submissions] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

struct Storage {
    /// Row blocks: block `b` holds rows `b * block_rows ..`.
    blocks: Vec<wgpu::Buffer>,
    block_rows: usize,
    rows: usize,
    cols: usize,
    precision: Precision,
    context: u64,
    /// Bytes charged to the context's device-memory ledger, returned on drop.
    bytes: u64,
    ledger: Arc<AtomicU64>,
}

impl Drop for Storage {
    fn drop(&mut self) {
        self.ledger.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// A row-major matrix in GPU memory (or a view of a row range of one).
/// Cheap to clone: clones and views share the storage.
#[derive(Clone)]
pub struct GpuMatrix {
    storage: Arc<Storage>,
    row0: usize,
    rows: usize,
}

impl std::fmt::Debug for GpuMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuMatrix({} x {}, {:?}, rows {}.. of {})", self.rows, self.storage.cols, self.storage.precision, self.row0, self.storage.rows)
    }
}

/// A contiguous piece of a view inside one row block.
#[derive(Debug, Clone, Copy)]
struct Segment {
    block: usize,
    /// First row of the piece within its block.
    local_row: usize,
}

impl GpuMatrix {
    /// Rows of the view.
    pub fn nrows(&self) -> usize {
        self.rows
    }
    /// Columns.
    pub fn ncols(&self) -> usize {
        self.storage.cols
    }
    /// Element type.
    pub fn precision(&self) -> Precision {
        self.storage.precision
    }
    /// Bytes of the view's elements.
    pub fn bytes(&self) -> u64 {
        (self.rows * self.storage.cols * self.storage.precision.bytes()) as u64
    }
    /// The view of rows `start .. start + count` (no copy).
    pub fn rows_view(&self, start: usize, count: usize) -> Result<GpuMatrix> {
        let end = start.checked_add(count).ok_or(Error::IndexOutOfRange { what: "rows of a device matrix", index: usize::MAX, len: self.rows })?;
        if end > self.rows || count == 0 {
            return Err(Error::IndexOutOfRange { what: "rows of a device matrix", index: end.max(start), len: self.rows });
        }
        Ok(GpuMatrix { storage: self.storage.clone(), row0: self.row0 + start, rows: count })
    }
    pub(crate) fn same_storage(&self, other: &GpuMatrix) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
    }
    pub(crate) fn context_id(&self) -> u64 {
        self.storage.context
    }
    /// Block and local row of view row `r`.
    fn locate(&self, r: usize) -> Segment {
        let g = self.row0 + r;
        Segment { block: g / self.storage.block_rows, local_row: g % self.storage.block_rows }
    }
    /// View-row positions where a new row block starts (excluding 0).
    fn block_breaks(&self) -> Vec<usize> {
        let br = self.storage.block_rows;
        let first = (self.row0 / br + 1) * br;
        (0..).map(|b| first + b * br).take_while(|&g| g < self.row0 + self.rows).map(|g| g - self.row0).collect()
    }
    fn buffer(&self, block: usize) -> &wgpu::Buffer {
        &self.storage.blocks[block]
    }
}

/// One operand of the product engine: a matrix read as is (its rows are the
/// product's rows, its columns the depth) or transposed.
#[derive(Clone, Copy)]
pub(crate) struct Operand<'a> {
    pub(crate) m: &'a GpuMatrix,
    pub(crate) transposed: bool,
}

impl<'a> Operand<'a> {
    pub(crate) fn plain(m: &'a GpuMatrix) -> Self {
        Operand { m, transposed: false }
    }
    pub(crate) fn transposed(m: &'a GpuMatrix) -> Self {
        Operand { m, transposed: true }
    }
    fn rows(&self) -> usize {
        if self.transposed { self.m.ncols() } else { self.m.nrows() }
    }
    fn depth(&self) -> usize {
        if self.transposed { self.m.nrows() } else { self.m.ncols() }
    }
    /// (buffer block, element offset, row stride, depth stride) of the piece
    /// at product rows `i0..`, depth `k0..`.
    fn locate(&self, i0: usize, k0: usize) -> (usize, u32, u32, u32) {
        let cols = self.m.ncols();
        if self.transposed {
            let s = self.m.locate(k0);
            (s.block, (s.local_row * cols + i0) as u32, 1, cols as u32)
        } else {
            let s = self.m.locate(i0);
            (s.block, (s.local_row * cols + k0) as u32, cols as u32, 1)
        }
    }
}

/// A dispatch recorded by the product engine, run later in one submission.
#[derive(Clone)]
pub(crate) struct Dispatch {
    problem: Problem,
    precision: Precision,
    /// The storage buffers bound after the descriptor, in binding order
    /// (a product binds the weights, or `buffers[0]` unused, as binding 4).
    buffers: Vec<wgpu::Buffer>,
    weights: Option<wgpu::Buffer>,
    grid: [u32; 3],
    pipeline: PipelineKind,
    /// The product variant (index in the catalogue; products only).
    variant: usize,
    /// Kernel parameters in `f64` (the f64 shader reads these; `problem`
    /// holds them rounded to `f32`).
    params: (f64, f64),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PipelineKind {
    Product,
    /// The fused kernel matvec of a product variant.
    Matvec,
    RowReduce,
    Elementwise,
}

/// The element-wise maps of `elementwise.wgsl`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ElementwiseMap {
    /// `out_ij = scale cos(x_ij + y_j)`, y a 1 x cols row.
    CosineFeatures { scale: f64 },
    /// `out_ij = x_ij y_ij`.
    Hadamard,
}

/// `Problem` with `f64` kernel parameters, as the f64 generic shader reads it.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct ProblemF64 {
    words: [u32; 16],
    gamma: f64,
    coef0: f64,
}

/// The row-reduction job of `row_reduce.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Reduce {
    rows: u32,
    cols: u32,
    x_off: u32,
    x_rs: u32,
    x_cs: u32,
    out_off: u32,
    mode: u32,
    accumulate: u32,
}

/// Sorted, deduplicated cut points `0 = c_0 < ... < c_k = len`.
fn cuts(len: usize, mut inner: Vec<usize>, max_span: usize) -> Vec<usize> {
    inner.push(0);
    inner.push(len);
    let mut step = max_span.max(1);
    while step < len {
        inner.push(step);
        step += max_span.max(1);
    }
    inner.retain(|&c| c <= len);
    inner.sort_unstable();
    inner.dedup();
    inner
}

/// What a product computes besides `f(s(A', B'))`.
#[derive(Clone, Copy, Default)]
pub(crate) struct ProductFlags<'a> {
    /// Add to what `out` holds (only for the linear kind).
    pub(crate) accumulate: bool,
    /// Weights over the depth: `A' diag(w) B'^T` (a depth x 1 matrix).
    pub(crate) weights: Option<&'a GpuMatrix>,
}

impl GpuContext {
    /// The counters of data moved and work submitted.
    pub fn transfer_stats(&self) -> TransferStats {
        self.counters.snapshot()
    }

    /// Sets every counter to zero.
    pub fn reset_transfer_stats(&self) {
        self.counters.reset()
    }

    /// True when matrices of `precision` can live and be computed on here.
    pub fn supports(&self, precision: Precision) -> bool {
        match precision {
            Precision::F32 => true,
            Precision::F64 => self.pipelines.product_f64.is_some(),
        }
    }

    pub(crate) fn write_counted(&self, buffer: &wgpu::Buffer, offset: u64, data: &[u8]) {
        self.counters.count_upload(data.len() as u64);
        self.queue.write_buffer(buffer, offset, data);
    }

    pub(crate) fn submit_counted(&self, encoder: wgpu::CommandEncoder) {
        self.counters.count_submission();
        self.queue.submit([encoder.finish()]);
    }

    /// Submits `encoder` and returns the errors its recording or submission
    /// raised (validation, out of memory) before anything reads what it was
    /// to write: wgpu runs none of the commands of a command buffer it
    /// rejects, so the outputs would keep what they held before.
    pub(crate) fn submit_checked(&self, encoder: wgpu::CommandEncoder) -> Result<()> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        self.submit_counted(encoder);
        let v = pollster::block_on(validation.pop());
        let o = pollster::block_on(oom.pop());
        if let Some(e) = o {
            return Err(Error::device_memory(e.to_string()));
        }
        if let Some(e) = v {
            return Err(Error::Gpu(format!("submission rejected: {e}")));
        }
        Ok(())
    }

    /// Checks a dispatch's workgroup grid before it is recorded: a grid with
    /// no workgroups would skip the dispatch and leave its output as it was,
    /// one beyond the adapter's limit per dimension would be rejected; the
    /// planners never make either, and neither is ever submitted.
    pub(crate) fn check_grid(&self, grid: [u32; 3]) -> Result<()> {
        if grid.iter().any(|&g| g == 0 || g > self.max_workgroups) {
            return Err(Error::Gpu(format!("a dispatch of {grid:?} workgroups (at most {} per dimension, none empty) was not run", self.max_workgroups)));
        }
        Ok(())
    }

    fn check_supported(&self, precision: Precision) -> Result<()> {
        if self.supports(precision) {
            Ok(())
        } else {
            Err(Error::Unsupported(format!("{precision:?} on {} (no SHADER_F64)", self.adapter().name)))
        }
    }

    pub(crate) fn check_owned(&self, m: &GpuMatrix) -> Result<()> {
        if m.context_id() != self.id {
            return Err(Error::DeviceMismatch);
        }
        Ok(())
    }

    /// A zero matrix of `rows x cols` on the GPU.
    pub fn zeros(&self, rows: usize, cols: usize, precision: Precision) -> Result<GpuMatrix> {
        self.check_supported(precision)?;
        if rows == 0 || cols == 0 {
            return Err(Error::Empty { what: "device matrix", rows, cols });
        }
        let eb = precision.bytes() as u64;
        let row_bytes = (cols as u64).checked_mul(eb).ok_or(Error::TooLargeForGpu { what: "one row of a device matrix", bytes: u64::MAX, limit: self.max_binding_bytes })?;
        if row_bytes > self.max_binding_bytes {
            return Err(Error::TooLargeForGpu { what: "one row of a device matrix", bytes: row_bytes, limit: self.max_binding_bytes });
        }
        // Element offsets inside a block are u32 in the shaders.
        let block_rows = ((self.max_binding_bytes / row_bytes) as usize).min((u32::MAX as usize) / cols).min(rows).max(1);
        let count = rows.div_ceil(block_rows);
        let total = (rows as u64).checked_mul(row_bytes).ok_or_else(|| Error::device_memory(format!("a {rows} x {cols} device matrix overflows u64 bytes")))?;
        // Charge the ledger first: a budget turns an allocation that cannot
        // fit into an error before any buffer exists.
        let held = self.allocated.fetch_add(total, Ordering::Relaxed);
        let release = || {
            self.allocated.fetch_sub(total, Ordering::Relaxed);
        };
        if let Some(budget) = self.device_budget {
            if held.saturating_add(total) > budget {
                release();
                return Err(Error::device_memory(format!("a {rows} x {cols} {precision:?} device matrix ({total} bytes) with {held} bytes held exceeds the device budget of {budget} bytes")));
            }
        }
        let blocks = self.checked(|| {
            Ok((0..count)
                .map(|b| {
                    let r = block_rows.min(rows - b * block_rows);
                    self.device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("gramian matrix block"),
                        size: ((r * cols) as u64 * eb).next_multiple_of(4).max(16),
                        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                        mapped_at_creation: false,
                    })
                })
                .collect::<Vec<_>>())
        });
        let blocks = match blocks {
            Ok(b) => b,
            Err(e) => {
                release();
                return Err(e);
            }
        };
        Ok(GpuMatrix { storage: Arc::new(Storage { blocks, block_rows, rows, cols, precision, context: self.id, bytes: total, ledger: self.allocated.clone() }), row0: 0, rows })
    }

    /// Uploads a row-major matrix given as `f64` values, stored in `precision`.
    pub fn upload(&self, row_major: &[f64], rows: usize, cols: usize, precision: Precision) -> Result<GpuMatrix> {
        let len = rows.checked_mul(cols).ok_or(Error::InvalidParameter { name: "shape", reason: "rows x cols overflows".into() })?;
        if row_major.len() != len {
            return Err(Error::DimensionMismatch { what: "elements of a row-major matrix", expected: len, found: row_major.len() });
        }
        let m = self.zeros(rows, cols, precision)?;
        self.counters.count_matrix_upload();
        self.checked(|| {
            for (b, buf) in m.storage.blocks.iter().enumerate() {
                let r0 = b * m.storage.block_rows;
                let r1 = (r0 + m.storage.block_rows).min(rows);
                let part = &row_major[r0 * cols..r1 * cols];
                match precision {
                    Precision::F64 => self.write_counted(buf, 0, bytemuck::cast_slice(part)),
                    Precision::F32 => {
                        let v: Vec<f32> = part.iter().map(|&x| x as f32).collect();
                        self.write_counted(buf, 0, bytemuck::cast_slice(&v));
                    }
                }
            }
            Ok(())
        })?;
        Ok(m)
    }

    /// Reads a matrix (view) back, row-major, as `f64`.
    pub fn download(&self, m: &GpuMatrix) -> Result<Vec<f64>> {
        self.check_owned(m)?;
        let cols = m.ncols();
        let eb = m.precision().bytes();
        let mut out = Vec::with_capacity(m.rows * cols);
        let mut breaks = m.block_breaks();
        breaks.push(m.rows);
        let mut start = 0;
        self.checked(|| {
            for end in breaks {
                let s = m.locate(start);
                let bytes = ((end - start) * cols * eb) as u64;
                let offset = (s.local_row * cols * eb) as u64;
                // Copies need 4-byte multiples; f32 and f64 rows always are.
                self.with_staging(bytes, |staging| {
                    let mut encoder = self.device.create_command_encoder(&Default::default());
                    encoder.copy_buffer_to_buffer(m.buffer(s.block), offset, staging, 0, bytes);
                    self.submit_checked(encoder)?;
                    self.map_and_read(staging, bytes, &mut |view| match m.precision() {
                        Precision::F64 => out.extend_from_slice(bytemuck::cast_slice::<u8, f64>(view)),
                        Precision::F32 => out.extend(bytemuck::cast_slice::<u8, f32>(view).iter().map(|&v| v as f64)),
                    })
                })?;
                start = end;
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Rows `indices` of `x`, gathered into a new matrix by buffer copies on
    /// the GPU (nothing crosses to the host).
    pub fn gather_rows(&self, x: &GpuMatrix, indices: &[usize]) -> Result<GpuMatrix> {
        self.check_owned(x)?;
        for &i in indices {
            if i >= x.nrows() {
                return Err(Error::IndexOutOfRange { what: "rows of x", index: i, len: x.nrows() });
            }
        }
        let out = self.zeros(indices.len(), x.ncols(), x.precision())?;
        let row_bytes = (x.ncols() * x.precision().bytes()) as u64;
        self.checked(|| {
            let mut encoder = self.device.create_command_encoder(&Default::default());
            for (t, &i) in indices.iter().enumerate() {
                let s = x.locate(i);
                let d = out.locate(t);
                encoder.copy_buffer_to_buffer(x.buffer(s.block), s.local_row as u64 * row_bytes, out.buffer(d.block), d.local_row as u64 * row_bytes, row_bytes);
            }
            self.submit_checked(encoder)
        })?;
        Ok(out)
    }

    fn check_same(&self, what: &[&GpuMatrix]) -> Result<Precision> {
        let precision = what[0].precision();
        for m in what {
            self.check_owned(m)?;
            if m.precision() != precision {
                return Err(Error::PrecisionMismatch { expected: precision, found: m.precision() });
            }
        }
        self.check_supported(precision)?;
        Ok(precision)
    }

    /// Records `out = f(s(A', B'))` (see the module docs) as dispatches.
    pub(crate) fn plan_product(&self, code: KernelCode, a: Operand<'_>, b: Operand<'_>, out: &GpuMatrix, flags: ProductFlags<'_>, plan: &mut Vec<Dispatch>) -> Result<()> {
        let mut operands = vec![a.m, b.m, out];
        if let Some(w) = flags.weights {
            operands.push(w);
        }
        let precision = self.check_same(&operands)?;
        if a.depth() != b.depth() {
            return Err(Error::DimensionMismatch { what: "inner dimension of a device product", expected: a.depth(), found: b.depth() });
        }
        if out.nrows() != a.rows() || out.ncols() != b.rows() {
            return Err(Error::DimensionMismatch { what: "shape of a device product's output", expected: a.rows() * b.rows(), found: out.nrows() * out.ncols() });
        }
        if out.same_storage(a.m) || out.same_storage(b.m) || flags.weights.is_some_and(|w| out.same_storage(w)) {
            return Err(Error::InvalidParameter { name: "out", reason: "the output of a device product may not share storage with an operand".into() });
        }
        if let Some(w) = flags.weights {
            if w.ncols() != 1 || w.nrows() != a.depth() {
                return Err(Error::DimensionMismatch { what: "weights of a weighted product (depth x 1)", expected: a.depth(), found: w.nrows() * w.ncols() });
            }
            if code.kind != 0 {
                return Err(Error::InvalidParameter { name: "weights", reason: "only a linear (inner product) statistic can be weighted".into() });
            }
        }
        if flags.accumulate && code.kind != 0 {
            return Err(Error::InvalidParameter { name: "accumulate", reason: "only a linear product can accumulate into its output".into() });
        }
        let (rows, cols, depth) = (a.rows(), b.rows(), a.depth());
        let distance = code.kind == 1 || code.kind == 2;
        let class = ShapeClass::of(precision, distance, a.transposed, b.transposed, rows, cols, depth);
        let variant = self.variant_for(class, (rows, cols, depth))?;
        self.plan_product_with(variant, code, a, b, out, flags, plan)
    }

    /// The product variant for `class`: forced, cached, or timed now (see
    /// `tuner.rs`). A tuning that fails (e.g. out of memory for its
    /// synthetic operands) falls back to the default variant.
    fn variant_for(&self, class: ShapeClass, dims: (usize, usize, usize)) -> Result<usize> {
        let lock_err = |_| Error::Gpu("tuner lock poisoned".into());
        if let Some(i) = self.tuner.lock().map_err(lock_err)?.known(&class) {
            if self.product_variants().contains(&&CATALOGUE[i]) {
                return Ok(i);
            }
        }
        let before = self.counters.snapshot();
        let timed = self.tune(class, dims);
        self.counters.restore(&before);
        match timed {
            Ok((best, timings)) => {
                log::info!("gramian tuner: {} -> {} ({} variants timed)", class.key(), CATALOGUE[best].name, timings.len());
                self.tuner.lock().map_err(lock_err)?.record(class, best, timings);
                Ok(best)
            }
            Err(e) => {
                log::warn!("gramian tuner: {} not tuned ({e}); using the default variant", class.key());
                Ok(variants::default_index(class.precision))
            }
        }
    }

    /// Times every applicable variant on a synthetic problem of `class`
    /// (operands uniform in [-1, 1], the caller's shape capped), within
    /// [`super::TUNE_BUDGET`] of measured time; returns the fastest and
    /// every time (microseconds, the best of a few runs).
    fn tune(&self, class: ShapeClass, (rows, cols, depth): (usize, usize, usize)) -> Result<(usize, Vec<(&'static str, f64)>)> {
        let work_cap = if self.is_software { 1 << 21 } else { 1 << 33 };
        let (r, c, d) = ShapeClass::synthetic_shape(rows, cols, depth, work_cap);
        let p = class.precision;
        let fill = |len: usize, seed: u64| -> Vec<f64> {
            // A fixed xorshift stream: replayable, no allocation of an RNG.
            let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
                })
                .collect()
        };
        let operand = |n: usize, transposed: bool, seed: u64| -> Result<GpuMatrix> {
            let (mr, mc) = if transposed { (d, n) } else { (n, d) };
            self.upload(&fill(mr * mc, seed), mr, mc, p)
        };
        let a = operand(r, class.a_transposed, 1)?;
        let b = operand(c, class.b_transposed, 2)?;
        let (vc, out_cols) = match class.op {
            super::tuner::Op::Product => (0, c),
            super::tuner::Op::Matvec { wide } => {
                let vc = if wide { MATVEC_MAX_COLUMNS } else { 1 };
                (vc, vc)
            }
        };
        let vmat = if vc > 0 { Some(self.upload(&fill(c * vc, 3), c, vc, p)?) } else { None };
        let out = self.zeros(r, out_cols, p)?;
        let code = if class.distance { KernelCode { kind: 1, gamma: 1.0 / d as f64, coef0: 0.0, degree: 0 } } else { KernelCode { kind: 0, gamma: 0.0, coef0: 0.0, degree: 0 } };
        let reps = if self.is_software { 1 } else { 3 };
        let mut spent = std::time::Duration::ZERO;
        let mut timings = Vec::new();
        let mut best: Option<(usize, f64)> = None;
        let candidates: Vec<usize> = (0..CATALOGUE.len()).filter(|&i| CATALOGUE[i].precision == p && self.product_variants().contains(&&CATALOGUE[i])).collect();
        for i in candidates {
            if spent > super::TUNE_BUDGET {
                break;
            }
            let key = if vc > 0 { i | (if vc == 1 { 1 } else { MATVEC_MAX_COLUMNS } << 16) } else { i };
            if self.variant_pipeline(key).is_err() {
                continue;
            }
            let mut plan = Vec::new();
            match &vmat {
                None => self.plan_product_with(i, code, Operand { m: &a, transposed: class.a_transposed }, Operand { m: &b, transposed: class.b_transposed }, &out, ProductFlags::default(), &mut plan)?,
                Some(vm) => {
                    if !self.plan_kernel_matvec_with(i, code, &a, &b, vm, &out, false, &mut plan)? {
                        continue;
                    }
                }
            }
            // Warm-up (first use of a pipeline), then the best of `reps`.
            self.run_plan(plan.clone())?;
            self.synchronize()?;
            let mut fastest = f64::INFINITY;
            for _ in 0..reps {
                let t0 = std::time::Instant::now();
                self.run_plan(plan.clone())?;
                self.synchronize()?;
                let dt = t0.elapsed();
                spent += dt;
                fastest = fastest.min(dt.as_secs_f64() * 1e6);
            }
            timings.push((CATALOGUE[i].name, fastest));
            if best.is_none_or(|(_, t)| fastest < t) {
                best = Some((i, fastest));
            }
        }
        best.map(|(i, _)| (i, timings)).ok_or_else(|| Error::Unsupported(format!("no product variant runs on {}", self.adapter().name)))
    }

    /// [`Self::plan_product`] with the product variant `variant` (checked
    /// operands).
    #[allow(clippy::too_many_arguments)]
    fn plan_product_with(&self, variant: usize, code: KernelCode, a: Operand<'_>, b: Operand<'_>, out: &GpuMatrix, flags: ProductFlags<'_>, plan: &mut Vec<Dispatch>) -> Result<()> {
        let precision = out.precision();
        let v = &CATALOGUE[variant];
        let (rows, cols, depth) = (a.rows(), b.rows(), a.depth());
        let row_span = self.max_workgroups as usize * v.tile_rows();
        let col_span = self.max_workgroups as usize * v.tile_cols();
        let mut row_cuts = out.block_breaks();
        if !a.transposed {
            row_cuts.extend(a.m.block_breaks());
        }
        let row_cuts = cuts(rows, row_cuts, row_span);
        let col_cuts = cuts(cols, if b.transposed { Vec::new() } else { b.m.block_breaks() }, col_span);
        let mut depth_cuts = Vec::new();
        if a.transposed {
            depth_cuts.extend(a.m.block_breaks());
        }
        if b.transposed {
            depth_cuts.extend(b.m.block_breaks());
        }
        if let Some(w) = flags.weights {
            depth_cuts.extend(w.block_breaks());
        }
        // Depth chunks within the loop budget; each after the first adds to
        // the statistic in out, the last applies the kernel function.
        let depth_cuts = cuts(depth, depth_cuts, v.max_product_depth(&code));
        let out_cols = out.ncols();
        for ri in row_cuts.windows(2) {
            let (i0, i1) = (ri[0], ri[1]);
            let o = out.locate(i0);
            for cj in col_cuts.windows(2) {
                let (j0, j1) = (cj[0], cj[1]);
                let chunks = depth_cuts.len() - 1;
                for (t, ck) in depth_cuts.windows(2).enumerate() {
                    let (k0, k1) = (ck[0], ck[1]);
                    let accumulate = t > 0 || flags.accumulate;
                    if self.plan_split_depth(variant, code, a, b, out, flags, (i0, i1), (j0, j1), (k0, k1), accumulate, plan)? {
                        continue;
                    }
                    let mut bits = if accumulate { super::ops::FLAG_ACCUMULATE } else { 0 };
                    if t + 1 == chunks {
                        bits |= super::ops::FLAG_APPLY;
                    }
                    let target = (out.buffer(o.block), o.local_row * out_cols + j0, out_cols);
                    plan.push(Self::product_piece(variant, code, precision, a, b, flags.weights, (i0, i1), (j0, j1), (k0, k1), target, bits));
                }
            }
        }
        Ok(())
    }

    /// The dispatch of one piece of a product: rows `i0..i1` of A', rows
    /// `j0..j1` of B', depth `k0..k1`, written at `target = (buffer, element
    /// offset, row stride)` with `bits` (ACCUMULATE / APPLY; WEIGHTED is
    /// added when there are weights).
    #[allow(clippy::too_many_arguments)]
    fn product_piece(variant: usize, code: KernelCode, precision: Precision, a: Operand<'_>, b: Operand<'_>, weights: Option<&GpuMatrix>, (i0, i1): (usize, usize), (j0, j1): (usize, usize), (k0, k1): (usize, usize), target: (&wgpu::Buffer, usize, usize), mut bits: u32) -> Dispatch {
        let (ab, a_off, a_rs, a_cs) = a.locate(i0, k0);
        let (bb, b_off, b_rs, b_cs) = b.locate(j0, k0);
        let (weights, w_off) = match weights {
            Some(w) => {
                bits |= FLAG_WEIGHTED;
                let l = w.locate(k0);
                (Some(w.buffer(l.block).clone()), l.local_row as u32)
            }
            None => (None, 0),
        };
        let (c_buffer, c_off, c_rs) = target;
        let problem = Problem {
            rows: (i1 - i0) as u32,
            cols: (j1 - j0) as u32,
            depth: (k1 - k0) as u32,
            a_off,
            b_off,
            c_off: c_off as u32,
            flags: bits,
            kind: code.kind,
            a_rs,
            a_cs,
            b_rs,
            b_cs,
            c_rs: c_rs as u32,
            c_cs: 1,
            w_off,
            degree: code.degree,
            gamma: code.gamma as f32,
            coef0: code.coef0 as f32,
        };
        let v = &CATALOGUE[variant];
        Dispatch {
            problem,
            precision,
            buffers: vec![a.m.buffer(ab).clone(), b.m.buffer(bb).clone(), c_buffer.clone()],
            weights,
            grid: [(j1 - j0).div_ceil(v.tile_cols()) as u32, (i1 - i0).div_ceil(v.tile_rows()) as u32, 1],
            pipeline: PipelineKind::Product,
            variant,
            params: (code.gamma, code.coef0),
        }
    }

    /// Split-K for a linear product piece with few output tiles and a long
    /// depth (`P diag(w) P^T` over many samples, `Phi^T V`): a single tile
    /// grid of a few workgroups would leave most of a GPU idle. The depth is
    /// cut into chunks that write stacked partial products into a scratch
    /// matrix in one dispatch each, then one row-reduction dispatch sums the
    /// partials into the output (adding to it with `accumulate`). Returns
    /// false (nothing recorded) when the piece does not call for it.
    #[allow(clippy::too_many_arguments)]
    fn plan_split_depth(&self, variant: usize, code: KernelCode, a: Operand<'_>, b: Operand<'_>, out: &GpuMatrix, flags: ProductFlags<'_>, (i0, i1): (usize, usize), (j0, j1): (usize, usize), (k0, k1): (usize, usize), accumulate: bool, plan: &mut Vec<Dispatch>) -> Result<bool> {
        let precision = out.precision();
        let v = &CATALOGUE[variant];
        let (rows, cols, len) = (i1 - i0, j1 - j0, k1 - k0);
        let tiles = rows.div_ceil(v.tile_rows()) * cols.div_ceil(v.tile_cols());
        let elements = rows * cols;
        let fits = (self.max_binding_bytes as usize) / (elements * precision.bytes()).max(1);
        if code.kind != 0 || j0 != 0 || j1 != out.ncols() || tiles >= SPLIT_BELOW_TILES || len < 2 * SPLIT_MIN_DEPTH || elements > self.max_workgroups as usize * 64 {
            return Ok(false);
        }
        let wanted = (SPLIT_TARGET_WORKGROUPS / tiles).min(len / SPLIT_MIN_DEPTH).min(fits).min(SPLIT_MAX_CHUNKS);
        if wanted < 2 {
            return Ok(false);
        }
        let chunk = len.div_ceil(wanted);
        let chunks = len.div_ceil(chunk);
        let partial = self.zeros(chunks * rows, cols, precision)?;
        debug_assert_eq!(partial.storage.blocks.len(), 1);
        let o = out.locate(i0);
        for s in 0..chunks {
            let (ks, ke) = (k0 + s * chunk, (k0 + (s + 1) * chunk).min(k1));
            let target = (partial.buffer(0), s * elements, cols);
            plan.push(Self::product_piece(variant, code, precision, a, b, flags.weights, (i0, i1), (j0, j1), (ks, ke), target, super::ops::FLAG_APPLY));
        }
        // out[e] (+)= sum_s partial[s, e] over the elements e of the piece
        // (full rows of out, so contiguous from the piece's first row).
        let job = Reduce {
            rows: elements as u32,
            cols: chunks as u32,
            x_off: 0,
            x_rs: 1,
            x_cs: elements as u32,
            out_off: (o.local_row * out.ncols()) as u32,
            mode: 1,
            accumulate: accumulate as u32,
        };
        self.push_row_reduce(job, precision, [partial.buffer(0), out.buffer(o.block)], plan);
        Ok(true)
    }

    /// Records the fused kernel matvec `out (+)= K(X, Z) V` (V with at most
    /// [`MATVEC_MAX_COLUMNS`] columns) without writing K: per piece (cut at
    /// the row blocks of X, Z, V and out, and where an invocation would
    /// visit more column tiles than the loop budget allows) one dispatch of
    /// the chosen variant's `kernel_matvec.wgsl` writes partial sums, and
    /// row-reduction dispatches add them into out.
    ///
    /// Returns false, with nothing recorded, where rows are too long for the
    /// fused shader: a kernel tile over the whole depth would exceed
    /// [`LOOP_BUDGET`] in one invocation (the kernel function needs the whole
    /// statistic, so the depth cannot be cut there). The caller then forms
    /// tiles of K with the product engine, which cuts the depth.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn plan_kernel_matvec(&self, code: KernelCode, x: &GpuMatrix, z: &GpuMatrix, v: &GpuMatrix, out: &GpuMatrix, accumulate: bool, plan: &mut Vec<Dispatch>) -> Result<bool> {
        let precision = self.check_same(&[x, z, v, out])?;
        let (n, m, d, c) = (x.nrows(), z.nrows(), x.ncols(), v.ncols());
        if z.ncols() != d || v.nrows() != m || out.nrows() != n || out.ncols() != c {
            return Err(Error::DimensionMismatch { what: "shapes of a fused kernel matvec", expected: n * c, found: out.nrows() * out.ncols() });
        }
        if c > MATVEC_MAX_COLUMNS {
            return Err(Error::InvalidParameter { name: "v", reason: format!("the fused kernel matvec takes at most {MATVEC_MAX_COLUMNS} columns, got {c}") });
        }
        let distance = code.is_distance();
        let mv: usize = if c == 1 { 1 } else { MATVEC_MAX_COLUMNS };
        if !self.product_variants().iter().any(|var| var.precision == precision && Self::matvec_tiles_per_split(var, d, &code, mv) > 0) {
            return Ok(false);
        }
        let class = ShapeClass { op: super::tuner::Op::Matvec { wide: c > 1 }, ..ShapeClass::of(precision, distance, false, false, n, m, d) };
        let variant = self.variant_for(class, (n, m, d))?;
        self.plan_kernel_matvec_with(variant, code, x, z, v, out, accumulate, plan)
    }

    /// Column tiles one invocation of `var`'s fused kernel matvec may visit
    /// within [`LOOP_BUDGET`] at depth `d` (0: not even one).
    fn matvec_tiles_per_split(var: &variants::ProductVariant, d: usize, code: &KernelCode, mv: usize) -> usize {
        let (per_tile, once) = var.matvec_passes(d, code, mv);
        LOOP_BUDGET.saturating_sub(once) / per_tile
    }

    /// [`Self::plan_kernel_matvec`] with the product variant `variant`.
    #[allow(clippy::too_many_arguments)]
    fn plan_kernel_matvec_with(&self, variant: usize, code: KernelCode, x: &GpuMatrix, z: &GpuMatrix, v: &GpuMatrix, out: &GpuMatrix, accumulate: bool, plan: &mut Vec<Dispatch>) -> Result<bool> {
        let precision = out.precision();
        let var = &CATALOGUE[variant];
        let (n, m, d, c) = (x.nrows(), z.nrows(), x.ncols(), v.ncols());
        let mv: usize = if c == 1 { 1 } else { MATVEC_MAX_COLUMNS };
        let tiles_per_split = Self::matvec_tiles_per_split(var, d, &code, mv);
        if tiles_per_split == 0 {
            return Ok(false);
        }
        let eb = precision.bytes();
        let (tr, tc, wx) = (var.tile_rows(), var.tile_cols(), var.wx as usize);
        let binding = self.max_binding_bytes as usize;
        // Rows per piece: the grid limit, and one slot of partials per lane
        // column within a binding.
        let max_rows = (self.max_workgroups as usize * tr).min((binding / (wx * c * eb)).max(1));
        let mut rb = x.block_breaks();
        rb.extend(out.block_breaks());
        let row_cuts = cuts(n, rb, max_rows);
        let longest = row_cuts.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(1);
        // Splits of the column tiles: enough workgroups to fill a GPU, and
        // enough that no invocation visits more than `tiles_per_split`
        // tiles; column pieces are cut so that this many splits fit the
        // grid and the partial sums fit a binding.
        let max_splits = |rows: usize| (binding / (wx * rows * c * eb)).max(1).min(self.max_workgroups as usize);
        let mut cb = z.block_breaks();
        cb.extend(v.block_breaks());
        let col_cuts = cuts(m, cb, max_splits(longest) * tiles_per_split * tc);
        let splits_for = |rows: usize, cols: usize| -> usize {
            let tiles = cols.div_ceil(tc);
            let wanted = MATVEC_TARGET_WORKGROUPS.div_ceil(rows.div_ceil(tr)).max(1);
            wanted.min(tiles).min(max_splits(rows)).max(tiles.div_ceil(tiles_per_split)).max(1)
        };
        // Partial slots for the most demanding piece.
        let slot_rows = row_cuts.windows(2).flat_map(|r| col_cuts.windows(2).map(move |cj| (r[1] - r[0], cj[1] - cj[0]))).map(|(rows, cols)| splits_for(rows, cols) * wx * rows).max().unwrap_or(1);
        let partial = self.zeros(slot_rows, c, precision)?;
        debug_assert_eq!(partial.storage.blocks.len(), 1);
        let key = variant | (mv << 16);
        for ri in row_cuts.windows(2) {
            let (i0, i1) = (ri[0], ri[1]);
            let rows = i1 - i0;
            let (xs, os) = (x.locate(i0), out.locate(i0));
            for (t, cj) in col_cuts.windows(2).enumerate() {
                let (j0, j1) = (cj[0], cj[1]);
                let cols = j1 - j0;
                let (zs, vs) = (z.locate(j0), v.locate(j0));
                let splits = splits_for(rows, cols);
                let problem = Problem {
                    rows: rows as u32,
                    cols: cols as u32,
                    depth: d as u32,
                    a_off: (xs.local_row * d) as u32,
                    b_off: (zs.local_row * d) as u32,
                    c_off: 0,
                    flags: 0,
                    kind: code.kind,
                    a_rs: d as u32,
                    a_cs: 1,
                    b_rs: d as u32,
                    b_cs: 1,
                    c_rs: c as u32,
                    c_cs: c as u32,
                    w_off: (vs.local_row * c) as u32,
                    degree: code.degree,
                    gamma: code.gamma as f32,
                    coef0: code.coef0 as f32,
                };
                plan.push(Dispatch {
                    problem,
                    precision,
                    buffers: vec![x.buffer(xs.block).clone(), z.buffer(zs.block).clone(), partial.buffer(0).clone()],
                    weights: Some(v.buffer(vs.block).clone()),
                    grid: [splits as u32, rows.div_ceil(tr) as u32, 1],
                    pipeline: PipelineKind::Matvec,
                    variant: key,
                    params: (code.gamma, code.coef0),
                });
                // out[rows of the piece] (+)= sum over the splits x lanes slots.
                let elements = rows * c;
                let job = Reduce {
                    rows: elements as u32,
                    cols: (splits * wx) as u32,
                    x_off: 0,
                    x_rs: 1,
                    x_cs: elements as u32,
                    out_off: (os.local_row * c) as u32,
                    mode: 1,
                    accumulate: (accumulate || t > 0) as u32,
                };
                self.push_row_reduce(job, precision, [partial.buffer(0), out.buffer(os.block)], plan);
            }
        }
        Ok(true)
    }

    /// Records `out[i] (+)= sum_k x_ik^2` (`squares`) or `sum_k x_ik`.
    pub(crate) fn plan_row_reduce(&self, x: &GpuMatrix, out: &GpuMatrix, squares: bool, accumulate: bool, plan: &mut Vec<Dispatch>) -> Result<()> {
        let precision = self.check_same(&[x, out])?;
        if out.nrows() != x.nrows() || out.ncols() != 1 {
            return Err(Error::DimensionMismatch { what: "rows of a row reduction's output (n x 1)", expected: x.nrows(), found: out.nrows() * out.ncols() });
        }
        if out.same_storage(x) {
            return Err(Error::InvalidParameter { name: "out", reason: "a row reduction may not write into its input".into() });
        }
        let mut breaks = x.block_breaks();
        breaks.extend(out.block_breaks());
        let row_cuts = cuts(x.nrows(), breaks, self.max_workgroups as usize * 64);
        let cols = x.ncols();
        for r in row_cuts.windows(2) {
            let (i0, i1) = (r[0], r[1]);
            let s = x.locate(i0);
            let o = out.locate(i0);
            let job = Reduce {
                rows: (i1 - i0) as u32,
                cols: cols as u32,
                x_off: (s.local_row * cols) as u32,
                x_rs: cols as u32,
                x_cs: 1,
                out_off: o.local_row as u32,
                mode: if squares { 0 } else { 1 },
                accumulate: accumulate as u32,
            };
            self.push_row_reduce(job, precision, [x.buffer(s.block), out.buffer(o.block)], plan);
        }
        Ok(())
    }

    /// Records the row reduction `job` over `[x, out]`: one dispatch per
    /// chunk of columns within [`LOOP_BUDGET`] (one loop pass per column,
    /// one to leave), every chunk after the first adding to out. Rows beyond
    /// one grid row of workgroups wrap into a second grid dimension.
    fn push_row_reduce(&self, job: Reduce, precision: Precision, [x, out]: [&wgpu::Buffer; 2], plan: &mut Vec<Dispatch>) {
        const CHUNK: usize = LOOP_BUDGET - 1;
        let groups = (job.rows as usize).div_ceil(64);
        let gx = groups.min(self.max_workgroups as usize).max(1);
        let gy = groups.div_ceil(gx).max(1);
        let cols = job.cols as usize;
        for chunk in 0..cols.div_ceil(CHUNK).max(1) {
            let k0 = chunk * CHUNK;
            let piece = Reduce {
                cols: (cols - k0).min(CHUNK) as u32,
                x_off: job.x_off + (k0 * job.x_cs as usize) as u32,
                accumulate: (job.accumulate != 0 || chunk > 0) as u32,
                ..job
            };
            let mut problem = Problem::zeroed();
            bytemuck::bytes_of_mut(&mut problem)[..std::mem::size_of::<Reduce>()].copy_from_slice(bytemuck::bytes_of(&piece));
            plan.push(Dispatch {
                problem,
                precision,
                buffers: vec![x.clone(), out.clone()],
                weights: None,
                grid: [gx as u32, gy as u32, 1],
                pipeline: PipelineKind::RowReduce,
                variant: 0,
                params: (0.0, 0.0),
            });
        }
    }

    /// Records `out = map(x, y)` (see [`ElementwiseMap`]).
    pub(crate) fn plan_elementwise(&self, map: ElementwiseMap, x: &GpuMatrix, y: &GpuMatrix, out: &GpuMatrix, plan: &mut Vec<Dispatch>) -> Result<()> {
        let precision = self.check_same(&[x, y, out])?;
        let (rows, cols) = (x.nrows(), x.ncols());
        if out.nrows() != rows || out.ncols() != cols {
            return Err(Error::DimensionMismatch { what: "shape of an element-wise map's output", expected: rows * cols, found: out.nrows() * out.ncols() });
        }
        let y_is_row = matches!(map, ElementwiseMap::CosineFeatures { .. });
        let (want_rows, want_cols) = if y_is_row { (1, cols) } else { (rows, cols) };
        if y.nrows() != want_rows || y.ncols() != want_cols {
            return Err(Error::DimensionMismatch { what: "shape of an element-wise map's second operand", expected: want_rows * want_cols, found: y.nrows() * y.ncols() });
        }
        if out.same_storage(x) || out.same_storage(y) {
            return Err(Error::InvalidParameter { name: "out", reason: "an element-wise map may not write into an operand".into() });
        }
        let mut breaks = x.block_breaks();
        breaks.extend(out.block_breaks());
        if !y_is_row {
            breaks.extend(y.block_breaks());
        }
        // At most 65535 x 65535 workgroups of 256, and u32 element counts.
        let max_rows = ((u32::MAX as usize) / cols).max(1);
        let row_cuts = cuts(rows, breaks, max_rows);
        let (mode, scale) = match map {
            ElementwiseMap::CosineFeatures { scale } => (0u32, scale),
            ElementwiseMap::Hadamard => (1u32, 0.0),
        };
        for r in row_cuts.windows(2) {
            let (i0, i1) = (r[0], r[1]);
            let (sx, so) = (x.locate(i0), out.locate(i0));
            let (yb, y_off) = if y_is_row { (y.locate(0).block, (y.locate(0).local_row * cols) as u32) } else { let s = y.locate(i0); (s.block, (s.local_row * cols) as u32) };
            let mut problem = Problem::zeroed();
            let words: [u32; 6] = [(i1 - i0) as u32, cols as u32, (sx.local_row * cols) as u32, y_off, (so.local_row * cols) as u32, mode];
            bytemuck::cast_slice_mut::<Problem, u32>(std::slice::from_mut(&mut problem))[..6].copy_from_slice(&words);
            let groups = ((i1 - i0) * cols).div_ceil(256);
            let gx = groups.min(self.max_workgroups as usize).max(1);
            let gy = groups.div_ceil(gx).max(1);
            if gy > self.max_workgroups as usize {
                return Err(Error::TooLargeForGpu { what: "an element-wise map's workgroup grid", bytes: ((i1 - i0) * cols * precision.bytes()) as u64, limit: self.max_binding_bytes });
            }
            plan.push(Dispatch {
                problem,
                precision,
                buffers: vec![x.buffer(sx.block).clone(), y.buffer(yb).clone(), out.buffer(so.block).clone()],
                weights: None,
                grid: [gx as u32, gy as u32, 1],
                pipeline: PipelineKind::Elementwise,
                variant: 0,
                params: (scale, 0.0),
            });
        }
        Ok(())
    }

    /// Runs recorded dispatches in order, in one compute pass and one
    /// submission (wgpu orders the dispatches' accesses to shared buffers).
    pub(crate) fn run_plan(&self, plan: Vec<Dispatch>) -> Result<()> {
        if plan.is_empty() {
            return Ok(());
        }
        for d in &plan {
            self.check_grid(d.grid)?;
        }
        self.checked(|| {
            let align = (self.storage_offset_alignment as usize).max(std::mem::size_of::<ProblemF64>()).next_multiple_of(self.storage_offset_alignment as usize);
            // One descriptor buffer per run, within a binding.
            let per_run = ((self.max_binding_bytes as usize) / align).max(1);
            for part in plan.chunks(per_run) {
                let mut bytes = vec![0u8; part.len() * align];
                for (i, d) in part.iter().enumerate() {
                    let dst = &mut bytes[i * align..];
                    match (d.pipeline, d.precision) {
                        (PipelineKind::Product | PipelineKind::Matvec, Precision::F64) => {
                            let words: [u32; 16] = bytemuck::cast_slice::<Problem, u32>(std::slice::from_ref(&d.problem))[..16].try_into().expect("16 words");
                            let p = ProblemF64 { words, gamma: d.params.0, coef0: d.params.1 };
                            dst[..std::mem::size_of::<ProblemF64>()].copy_from_slice(bytemuck::bytes_of(&p));
                        }
                        (PipelineKind::Elementwise, precision) => {
                            dst[..24].copy_from_slice(&bytemuck::bytes_of(&d.problem)[..24]);
                            match precision {
                                Precision::F64 => dst[24..32].copy_from_slice(&d.params.0.to_le_bytes()),
                                Precision::F32 => dst[24..28].copy_from_slice(&(d.params.0 as f32).to_le_bytes()),
                            }
                        }
                        _ => dst[..std::mem::size_of::<Problem>()].copy_from_slice(bytemuck::bytes_of(&d.problem)),
                    }
                }
                // One reused descriptor buffer, held from the write to the submission.
                self.with_descriptor_buffer(bytes.len() as u64, |descriptors| {
                    self.counters.count_descriptors(bytes.len() as u64);
                    self.queue.write_buffer(descriptors, 0, &bytes);
                    let mut layouts: HashMap<(u8, Precision, usize), (wgpu::ComputePipeline, wgpu::BindGroupLayout)> = HashMap::new();
                    let mut groups = Vec::with_capacity(part.len());
                    for (i, d) in part.iter().enumerate() {
                        let key = (d.pipeline as u8, d.precision, d.variant);
                        if let std::collections::hash_map::Entry::Vacant(e) = layouts.entry(key) {
                            let pipeline = self.pipeline_for(d.pipeline, d.precision, d.variant)?;
                            let layout = pipeline.get_bind_group_layout(0);
                            e.insert((pipeline, layout));
                        }
                        let layout = &layouts[&key].1;
                        let desc_size = match (d.pipeline, d.precision) {
                            (PipelineKind::Product | PipelineKind::Matvec, Precision::F64) => std::mem::size_of::<ProblemF64>(),
                            (PipelineKind::Product | PipelineKind::Matvec, Precision::F32) => std::mem::size_of::<Problem>(),
                            (PipelineKind::RowReduce, _) => std::mem::size_of::<Reduce>(),
                            (PipelineKind::Elementwise, Precision::F64) => 32,
                            (PipelineKind::Elementwise, Precision::F32) => 28,
                        } as u64;
                        let desc = wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer: descriptors, offset: (i * align) as u64, size: NonZeroU64::new(desc_size) });
                        fn whole(b: &wgpu::Buffer) -> wgpu::BindingResource<'_> {
                            wgpu::BindingResource::Buffer(b.as_entire_buffer_binding())
                        }
                        let mut entries = vec![wgpu::BindGroupEntry { binding: 0, resource: desc }];
                        entries.extend(d.buffers.iter().enumerate().map(|(i, buf)| wgpu::BindGroupEntry { binding: i as u32 + 1, resource: whole(buf) }));
                        if matches!(d.pipeline, PipelineKind::Product | PipelineKind::Matvec) {
                            // No weights: any read-only buffer of the dispatch stands in.
                            entries.push(wgpu::BindGroupEntry { binding: 4, resource: whole(d.weights.as_ref().unwrap_or(&d.buffers[0])) });
                        }
                        groups.push(self.device.create_bind_group(&wgpu::BindGroupDescriptor { label: Some("gramian dispatch"), layout, entries: &entries }));
                    }
                    let mut encoder = self.device.create_command_encoder(&Default::default());
                    {
                        let mut pass = encoder.begin_compute_pass(&Default::default());
                        for (d, g) in part.iter().zip(&groups) {
                            pass.set_pipeline(&layouts[&(d.pipeline as u8, d.precision, d.variant)].0);
                            pass.set_bind_group(0, g, &[]);
                            pass.dispatch_workgroups(d.grid[0], d.grid[1], d.grid[2]);
                            self.counters.count_dispatch();
                        }
                    }
                    self.submit_checked(encoder)
                })?;
            }
            Ok(())
        })
    }

    fn pipeline_for(&self, kind: PipelineKind, precision: Precision, variant: usize) -> Result<wgpu::ComputePipeline> {
        let missing = || Error::Unsupported(format!("{precision:?} shaders on {}", self.adapter().name));
        match (kind, precision) {
            (PipelineKind::Product | PipelineKind::Matvec, _) => self.variant_pipeline(variant),
            (PipelineKind::RowReduce, Precision::F32) => Ok(self.pipelines.row_reduce_f32.clone()),
            (PipelineKind::RowReduce, Precision::F64) => self.pipelines.row_reduce_f64.clone().ok_or_else(missing),
            (PipelineKind::Elementwise, Precision::F32) => Ok(self.pipelines.elementwise_f32.clone()),
            (PipelineKind::Elementwise, Precision::F64) => self.pipelines.elementwise_f64.clone().ok_or_else(missing),
        }
    }

    /// The compiled pipeline of product variant `index` (compiled on first
    /// use, inside an error scope: a variant the driver rejects is an error,
    /// not a panic).
    fn variant_pipeline(&self, key: usize) -> Result<wgpu::ComputePipeline> {
        // key = catalogue index, plus MV << 16 for the fused matvec of MV columns.
        let (index, mv) = (key & 0xffff, (key >> 16) as u32);
        let v = CATALOGUE.get(index).ok_or_else(|| Error::Gpu(format!("no product variant {index}")))?;
        if !self.supports(v.precision) {
            return Err(Error::Unsupported(format!("{:?} shaders on {}", v.precision, self.adapter().name)));
        }
        let lock_err = |_| Error::Gpu("variant pipeline lock poisoned".into());
        if let Some(p) = self.variant_pipelines.lock().map_err(lock_err)?.get(&key) {
            return Ok(p.clone());
        }
        if !v.fits(&self.workgroup_limits) {
            return Err(Error::Unsupported(format!("variant {} on {} (workgroup limits)", v.name, self.adapter().name)));
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let source = if mv == 0 { super::ops::product_source(v) } else { format!("{}\n{}\n{}", super::ops::prelude(v.precision), include_str!("../../shaders/problem.wgsl"), v.matvec_source(mv)) };
        let pipeline = super::ops::compile(&self.device, v.name, &source);
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(Error::Gpu(format!("variant {} does not compile on {}: {e}", v.name, self.adapter().name)));
        }
        self.variant_pipelines.lock().map_err(lock_err)?.insert(key, pipeline.clone());
        Ok(pipeline)
    }

    /// Waits until the queue is idle (for timing).
    pub fn synchronize(&self) -> Result<()> {
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| Error::Gpu(format!("poll: {e}")))?;
        Ok(())
    }
}

/// Most columns of V the fused kernel matvec takes per call.
pub(crate) const MATVEC_MAX_COLUMNS: usize = 8;
/// Workgroups the fused kernel matvec aims at (column tiles are split).
const MATVEC_TARGET_WORKGROUPS: usize = 1024;

/// Split-K (see `plan_split_depth`): pieces with fewer output tiles than this,
const SPLIT_BELOW_TILES: usize = 64;
/// aiming at about this many workgroups,
const SPLIT_TARGET_WORKGROUPS: usize = 256;
/// with chunks of at least this depth,
const SPLIT_MIN_DEPTH: usize = 2048;
/// and at most this many chunks.
const SPLIT_MAX_CHUNKS: usize = 64;

const FLAG_WEIGHTED: u32 = 4;

#[cfg(test)]
mod tests {
    use super::*;

    /// A dispatch that would run no workgroup (its output left as it was)
    /// or more than the adapter allows is an error, and nothing runs.
    #[test]
    fn a_dispatch_that_would_be_skipped_or_rejected_is_an_error() {
        let ctx = match GpuContext::new(&super::super::GpuOptions { allow_software: true, ..Default::default() }) {
            Ok(ctx) => ctx,
            Err(e) if std::env::var("GRAMIAN_REQUIRE_GPU").as_deref() == Ok("1") => panic!("GRAMIAN_REQUIRE_GPU=1 but no GPU adapter: {e}"),
            Err(e) => {
                eprintln!("SKIPPED: no GPU adapter ({e})");
                return;
            }
        };
        let x = ctx.upload(&[1.0, 2.0, 3.0], 1, 3, Precision::F32).unwrap();
        let out = ctx.upload(&[7.0], 1, 1, Precision::F32).unwrap();
        let mut plan = Vec::new();
        ctx.plan_row_reduce(&x, &out, false, false, &mut plan).unwrap();
        for grid in [[0, 1, 1], [1, 0, 1], [1, 1, 0], [ctx.max_workgroups + 1, 1, 1]] {
            let mut bad = plan.clone();
            bad[0].grid = grid;
            assert!(matches!(ctx.run_plan(bad), Err(Error::Gpu(_))), "grid {grid:?}");
            assert_eq!(ctx.download(&out).unwrap(), vec![7.0], "grid {grid:?}");
        }
        ctx.run_plan(plan).unwrap();
        assert_eq!(ctx.download(&out).unwrap(), vec![6.0]);
    }
}
