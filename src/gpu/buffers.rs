//! GPU storage: device matrices ([`GpuMatrix`]: row blocks of at most one
//! buffer binding each, views of row ranges sharing the storage), their
//! allocation against the context's device-memory budget, upload, download
//! and row gathers, and the reused scratch buffers (dispatch descriptors,
//! read-back staging).
//!
//! Data cross between host and device only in [`GpuContext::upload`] (and
//! the writes into existing matrices of `write.rs`) and
//! [`GpuContext::download`] (and the descriptors of each submission), and
//! every crossing is counted ([`super::TransferStats`]), as are allocations
//! and the waits for read-backs ([`super::DeviceCounters`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;


use super::GpuContext;
use crate::error::{Error, Result};
use crate::precision::Precision;

/// Scratch slot of the dispatch descriptors.
const SLOT_DESCRIPTORS: usize = 0;
/// Scratch slot of the read-back staging buffer.
const SLOT_STAGING: usize = 1;
/// Number of scratch slots.
pub(crate) const SLOT_COUNT: usize = 2;

/// Bytes of a host write from which its copy into staging memory is split
/// over the thread pool, and the size of each part ([`GpuContext::write_counted`]).
pub(crate) const PARALLEL_WRITE_BYTES: usize = 1 << 20;

/// Buffers reused across calls; each grows (to the next power of two, within
/// the adapter's limits) and is never shrunk.
#[derive(Default)]
pub(crate) struct Scratch {
    slots: [Option<wgpu::Buffer>; SLOT_COUNT],
}

fn slot_usage(slot: usize) -> wgpu::BufferUsages {
    use wgpu::BufferUsages as U;
    match slot {
        SLOT_STAGING => U::MAP_READ | U::COPY_DST,
        _ => U::STORAGE | U::COPY_DST,
    }
}

/// Device matrices released, their bytes and the host time it took,
/// counted by the storage as it drops.
#[derive(Default)]
pub(crate) struct Releases {
    pub(super) count: AtomicU64,
    pub(super) bytes: AtomicU64,
    pub(super) nanos: AtomicU64,
}

impl Releases {
    /// Drops `blocks` (the buffers of a matrix of `bytes`), timed.
    pub(crate) fn release(&self, blocks: Vec<wgpu::Buffer>, bytes: u64) {
        let start = std::time::Instant::now();
        drop(blocks);
        self.nanos.fetch_add(start.elapsed().as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

pub(super) struct Storage {
    /// Row blocks: block `b` holds rows `b * block_rows ..`.
    pub(super) blocks: Vec<wgpu::Buffer>,
    pub(super) block_rows: usize,
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) precision: Precision,
    pub(super) context: u64,
    /// Bytes charged to the context's device-memory ledger, returned on drop.
    pub(super) bytes: u64,
    pub(super) ledger: Arc<AtomicU64>,
    /// Where the release of the buffers is counted.
    pub(super) released: Arc<Releases>,
}

impl Drop for Storage {
    fn drop(&mut self) {
        self.ledger.fetch_sub(self.bytes, Ordering::Relaxed);
        self.released.release(std::mem::take(&mut self.blocks), self.bytes);
    }
}

/// A row-major matrix in GPU memory (or a view of a row range of one).
/// Cheap to clone: clones and views share the storage.
#[derive(Clone)]
pub struct GpuMatrix {
    pub(super) storage: Arc<Storage>,
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
pub(super) struct Segment {
    pub(super) block: usize,
    /// First row of the piece within its block.
    pub(super) local_row: usize,
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
    /// Whether this handle is the only one to its storage (no clone or
    /// row view of it exists): a pool may then hand the storage out again.
    pub(crate) fn is_sole_handle(&self) -> bool {
        Arc::strong_count(&self.storage) == 1
    }
    /// Whether the two share storage and some of their rows.
    pub(crate) fn overlaps(&self, other: &GpuMatrix) -> bool {
        self.same_storage(other) && self.row0 < other.row0 + other.rows && other.row0 < self.row0 + self.rows
    }
    pub(crate) fn context_id(&self) -> u64 {
        self.storage.context
    }
    /// Block and local row of view row `r`.
    pub(super) fn locate(&self, r: usize) -> Segment {
        let g = self.row0 + r;
        Segment { block: g / self.storage.block_rows, local_row: g % self.storage.block_rows }
    }
    /// View-row positions where a new row block starts (excluding 0).
    pub(super) fn block_breaks(&self) -> Vec<usize> {
        let br = self.storage.block_rows;
        let first = (self.row0 / br + 1) * br;
        (0..).map(|b| first + b * br).take_while(|&g| g < self.row0 + self.rows).map(|g| g - self.row0).collect()
    }
    pub(super) fn buffer(&self, block: usize) -> &wgpu::Buffer {
        &self.storage.blocks[block]
    }
}

impl GpuContext {
    /// Runs `body` with the scratch buffer of `slot` (at least `bytes`
    /// long), holding the scratch lock so that no other operation writes or
    /// maps it meanwhile.
    fn with_scratch<R>(&self, slot: usize, bytes: u64, body: impl FnOnce(&wgpu::Buffer) -> Result<R>) -> Result<R> {
        let mut scratch = self.scratch.lock().map_err(|_| Error::Gpu("scratch lock poisoned".into()))?;
        let buffer = self.scratch_buffer(&mut scratch, slot, bytes);
        body(&buffer)
    }

    /// [`Self::with_scratch`] on the reused read-back staging buffer.
    pub(crate) fn with_staging<R>(&self, bytes: u64, body: impl FnOnce(&wgpu::Buffer) -> Result<R>) -> Result<R> {
        self.with_scratch(SLOT_STAGING, bytes, body)
    }

    /// [`Self::with_scratch`] on the reused dispatch-descriptor buffer.
    pub(crate) fn with_descriptor_buffer<R>(&self, bytes: u64, body: impl FnOnce(&wgpu::Buffer) -> Result<R>) -> Result<R> {
        self.with_scratch(SLOT_DESCRIPTORS, bytes, body)
    }

    /// The scratch buffer of `slot`, at least `bytes` long.
    fn scratch_buffer(&self, scratch: &mut Scratch, slot: usize, bytes: u64) -> wgpu::Buffer {
        let bytes = bytes.max(16);
        if let Some(buf) = &scratch.slots[slot] {
            if buf.size() >= bytes {
                self.counters.count_scratch(true);
                return buf.clone();
            }
        }
        let size = bytes.next_power_of_two().min(self.max_buffer_bytes).max(bytes);
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("gramian scratch"),
            size,
            usage: slot_usage(slot),
            mapped_at_creation: false,
        });
        self.counters.count_scratch(false);
        scratch.slots[slot] = Some(buf.clone());
        buf
    }

    /// Maps the first `bytes` of a staging buffer once the queue has written
    /// it (a blocking wait), hands them to `read`, unmaps, and counts them as
    /// device-to-host traffic. The one read-back path of the crate.
    pub(crate) fn map_and_read(&self, staging: &wgpu::Buffer, bytes: u64, read: &mut dyn FnMut(&[u8])) -> Result<()> {
        self.counters.count_download(bytes);
        let slice = staging.slice(0..bytes);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        let held = self.counters.hold();
        let polled = self.device.poll(wgpu::PollType::wait_indefinitely());
        drop(held);
        self.counters.count_wait();
        polled.map_err(|e| Error::Gpu(format!("poll: {e}")))?;
        rx.recv()
            .map_err(|e| Error::Gpu(format!("map callback: {e}")))?
            .map_err(|e| Error::Gpu(format!("map: {e}")))?;
        {
            let view = slice.get_mapped_range().map_err(|e| Error::Gpu(format!("mapped range: {e}")))?;
            read(&view);
        }
        staging.unmap();
        Ok(())
    }

    /// True when matrices of `precision` can live and be computed on here.
    pub fn supports(&self, precision: Precision) -> bool {
        match precision {
            Precision::F32 => true,
            Precision::F64 => self.pipelines.product_f64.is_some(),
        }
    }

    /// Writes `data` into `buffer` at `offset` (counted as one upload). A
    /// write of at least [`PARALLEL_WRITE_BYTES`] is copied into its staging
    /// memory by the thread pool in chunks of that size (the copy, and the
    /// first touch of fresh staging pages, is host work that grows with the
    /// data); a smaller one by the calling thread.
    pub(crate) fn write_counted(&self, buffer: &wgpu::Buffer, offset: u64, data: &[u8]) {
        use rayon::prelude::*;
        self.counters.count_upload(data.len() as u64);
        let size = wgpu::BufferSize::new(data.len() as u64);
        let view = match size {
            Some(size) if data.len() >= PARALLEL_WRITE_BYTES => self.queue.write_buffer_with(buffer, offset, size),
            _ => None,
        };
        let Some(mut view) = view else {
            self.queue.write_buffer(buffer, offset, data);
            return;
        };
        let (whole, mut rest) = view.slice(..).into_chunks::<PARALLEL_WRITE_BYTES>();
        let whole: Vec<wgpu::WriteOnly<'_, [u8; PARALLEL_WRITE_BYTES]>> = whole.into_iter().collect();
        let split = whole.len() * PARALLEL_WRITE_BYTES;
        whole.into_par_iter().zip(data[..split].par_chunks_exact(PARALLEL_WRITE_BYTES)).for_each(|(chunk, part)| wgpu::WriteOnly::<'_, [u8]>::from(chunk).copy_from_slice(part));
        rest.copy_from_slice(&data[split..]);
    }

    pub(super) fn check_supported(&self, precision: Precision) -> Result<()> {
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
                        // Whole vec4s: the variants with vec4 loads bind A and B as arrays of them.
                        size: ((r * cols) as u64 * eb).next_multiple_of(4 * eb),
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
        self.counters.count_allocation(total, blocks.len() as u64);
        Ok(GpuMatrix { storage: Arc::new(Storage { blocks, block_rows, rows, cols, precision, context: self.id, bytes: total, ledger: self.allocated.clone(), released: self.counters.released.clone() }), row0: 0, rows })
    }

    /// Uploads a row-major matrix given as `f64` values, stored in `precision`.
    pub fn upload(&self, row_major: &[f64], rows: usize, cols: usize, precision: Precision) -> Result<GpuMatrix> {
        let len = rows.checked_mul(cols).ok_or(Error::InvalidParameter { name: "shape", reason: "rows x cols overflows".into() })?;
        if row_major.len() != len {
            return Err(Error::DimensionMismatch { what: "elements of a row-major matrix", expected: len, found: row_major.len() });
        }
        let m = self.zeros(rows, cols, precision)?;
        self.write_rows(&m, row_major)?;
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

    pub(super) fn check_same(&self, what: &[&GpuMatrix]) -> Result<Precision> {
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

}
