//! GPU operations: tiled kernel matrices and matrix products, batched
//! products, and the matrix-free kernel matvec. Inputs arrive as nalgebra
//! matrices of `f32`/`f64`, are packed row-major in `f32`, and results come
//! back in the caller's scalar type.

use std::borrow::Cow;
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use bytemuck::{Pod, Zeroable};
use nalgebra::DMatrix;

use super::{GpuContext, Scratch};
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::linalg::{check_f32_range, Real};

pub(crate) const SLOT_COUNT: usize = 7;
const SLOT_PROBLEMS: usize = 0;
const SLOT_A: usize = 1;
const SLOT_B: usize = 2;
const SLOT_C: usize = 3;
const SLOT_STAGING: usize = 4;
const SLOT_Y: usize = 5;
const SLOT_V: usize = 6;

/// Output tile edge of the default f32 product variant (rows and columns per
/// workgroup), which the host-matrix path uses.
pub(crate) const TILE: usize = 128;
/// Largest row and column block of the kernel matvec's on-GPU kernel tile.
const MATVEC_BLOCK: usize = 4096;

pub(crate) const FLAG_ACCUMULATE: u32 = 1;
pub(crate) const FLAG_APPLY: u32 = 2;

/// Which product of two matrices to form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatrixProduct {
    /// `A B`
    AB,
    /// `A B^T`
    ABt,
    /// `A^T B`
    AtB,
}

/// One problem of a batch, as the product shaders (`problem.wgsl`)
/// read it (std430): element offsets and strides of A, B and C (see the
/// shader's header), flags, the kernel, and the weights' offset.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
pub(crate) struct Problem {
    pub(crate) rows: u32,
    pub(crate) cols: u32,
    pub(crate) depth: u32,
    pub(crate) a_off: u32,
    pub(crate) b_off: u32,
    pub(crate) c_off: u32,
    pub(crate) flags: u32,
    pub(crate) kind: u32,
    pub(crate) a_rs: u32,
    pub(crate) a_cs: u32,
    pub(crate) b_rs: u32,
    pub(crate) b_cs: u32,
    pub(crate) c_rs: u32,
    pub(crate) c_cs: u32,
    pub(crate) w_off: u32,
    pub(crate) degree: u32,
    pub(crate) gamma: f32,
    pub(crate) coef0: f32,
}

/// The kernel as the shaders encode it (parameters kept in `f64`; the f32
/// shaders round them).
#[derive(Debug, Clone, Copy)]
pub(crate) struct KernelCode {
    pub(crate) kind: u32,
    pub(crate) gamma: f64,
    pub(crate) coef0: f64,
    pub(crate) degree: u32,
}

impl KernelCode {
    /// True for the distance kernels (RBF, Laplacian): the statistic is a squared distance.
    pub(crate) fn is_distance(&self) -> bool {
        self.kind == 1 || self.kind == 2
    }

    /// True for the polynomial kernel (its power is a loop in the shaders).
    pub(crate) fn is_polynomial(&self) -> bool {
        self.kind == 3
    }

    pub(crate) fn of(kernel: &Kernel) -> Self {
        match *kernel {
            Kernel::Linear => KernelCode { kind: 0, gamma: 0.0, coef0: 0.0, degree: 0 },
            Kernel::Rbf { gamma } => KernelCode { kind: 1, gamma, coef0: 0.0, degree: 0 },
            Kernel::Laplacian { gamma } => KernelCode { kind: 2, gamma, coef0: 0.0, degree: 0 },
            Kernel::Polynomial { gamma, coef0, degree } => KernelCode { kind: 3, gamma, coef0, degree },
            Kernel::Sigmoid { gamma, coef0 } => KernelCode { kind: 4, gamma, coef0, degree: 0 },
        }
    }


    fn problem(&self, rows: usize, cols: usize, depth: usize, offsets: [usize; 3], flags: u32) -> Problem {
        Problem {
            rows: rows as u32,
            cols: cols as u32,
            depth: depth as u32,
            a_off: offsets[0] as u32,
            b_off: offsets[1] as u32,
            c_off: offsets[2] as u32,
            flags,
            kind: self.kind,
            a_rs: depth as u32,
            a_cs: 1,
            b_rs: depth as u32,
            b_cs: 1,
            c_rs: cols as u32,
            c_cs: 1,
            w_off: 0,
            degree: self.degree,
            gamma: self.gamma as f32,
            coef0: self.coef0 as f32,
        }
    }
}

/// A row-major `f32` matrix on the host, the layout the shaders read.
struct RowMajor {
    data: Vec<f32>,
    rows: usize,
    cols: usize,
}

impl RowMajor {
    /// The rows of `m` (transposes nalgebra's column-major storage).
    fn rows_of<T: Real>(m: &DMatrix<T>) -> Self {
        let (rows, cols) = m.shape();
        let mut data = vec![0f32; rows * cols];
        for (j, col) in m.column_iter().enumerate() {
            for (i, v) in col.iter().enumerate() {
                data[i * cols + j] = v.to_f32_lossy();
            }
        }
        RowMajor { data, rows, cols }
    }

    /// The rows of `x` and of `z` for a kernel matrix. For the distance
    /// kernels (RBF, Laplacian) both are first shifted by the mean of all
    /// their rows: distances do not change, and data far from the origin
    /// keeps its digits when rounded to f32.
    fn kernel_operands<T: Real>(kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>) -> (Self, Self) {
        if !kernel.is_distance_based() {
            return (Self::rows_of(x), Self::rows_of(z));
        }
        // The mean is taken and subtracted in the caller's precision, before
        // rounding to f32, so data far from the origin keeps its digits.
        let count = (x.nrows() + z.nrows()) as f64;
        let mean: Vec<f64> = (0..x.ncols())
            .map(|j| (x.column(j).iter().chain(z.column(j).iter()).map(|v| v.to_f64_exact()).sum::<f64>()) / count)
            .collect();
        let centred_rows = |m: &DMatrix<T>| {
            let (rows, cols) = m.shape();
            let mut data = vec![0f32; rows * cols];
            for (j, col) in m.column_iter().enumerate() {
                for (i, v) in col.iter().enumerate() {
                    data[i * cols + j] = (v.to_f64_exact() - mean[j]) as f32;
                }
            }
            RowMajor { data, rows, cols }
        };
        (centred_rows(x), centred_rows(z))
    }

    /// The columns of `m` as rows, i.e. `m^T` (no transposition needed).
    fn columns_of<T: Real>(m: &DMatrix<T>) -> Self {
        let data = m.as_slice().iter().map(|v| v.to_f32_lossy()).collect();
        RowMajor { data, rows: m.ncols(), cols: m.nrows() }
    }

    /// Rows `r0..r1`, columns `k0..k1`, contiguous.
    fn block(&self, r0: usize, r1: usize, k0: usize, k1: usize) -> Cow<'_, [f32]> {
        if k0 == 0 && k1 == self.cols {
            return Cow::Borrowed(&self.data[r0 * self.cols..r1 * self.cols]);
        }
        let mut out = Vec::with_capacity((r1 - r0) * (k1 - k0));
        for r in r0..r1 {
            out.extend_from_slice(&self.data[r * self.cols + k0..r * self.cols + k1]);
        }
        Cow::Owned(out)
    }
}

/// `shaders/prelude_f32.wgsl` / `prelude_f64.wgsl`: the scalar type T and
/// its exp, tanh, sqrt, cos.
pub(crate) fn prelude(precision: super::Precision) -> &'static str {
    match precision {
        super::Precision::F32 => include_str!("../../shaders/prelude_f32.wgsl"),
        super::Precision::F64 => include_str!("../../shaders/prelude_f64.wgsl"),
    }
}

/// The WGSL of product variant `v`: precision prelude, the shared
/// descriptor `problem.wgsl`, and the variant's expansion of `product.wgsl`.
pub(crate) fn product_source(v: &super::ProductVariant) -> String {
    const PROBLEM: &str = include_str!("../../shaders/problem.wgsl");
    format!("{}\n{PROBLEM}\n{}", prelude(v.precision), v.source())
}

/// Compiles one compute pipeline (entry point `main`).
pub(crate) fn compile(device: &wgpu::Device, label: &str, source: &str) -> wgpu::ComputePipeline {
    let desc = wgpu::ShaderModuleDescriptor { label: Some(label), source: wgpu::ShaderSource::Wgsl(Cow::Owned(source.to_owned())) };
    // naga's forced loop bounding (a hidden counter in every loop) is
    // miscompiled by Mesa's lavapipe (22.3, LLVM 15): a Phi^T Phi over
    // 8000 samples stopped after 6349 of them, the same for any feature
    // dimension. It is switched off; everything else stays checked.
    // SAFETY: wgpu requires that shaders built without loop bounding have
    // no infinite loops. Every loop in our shaders counts a u32 up by a
    // constant step to a bound below 2^30 (the bounds are element counts
    // of buffers under the binding limit), so none can wrap or run forever.
    let mut checks = wgpu::ShaderRuntimeChecks::checked();
    checks.force_loop_bounding = false;
    let module = unsafe { device.create_shader_module_trusted(desc, checks) };
    device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(label),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    })
}

/// Compiles the fixed pipelines: the default product variant of each
/// precision (the f64 ones only with `SHADER_F64`), the row reductions and
/// the element-wise maps.
pub(crate) fn build_pipelines(device: &wgpu::Device, f64_shaders: bool) -> super::Pipelines {
    use super::variants::{default_index, CATALOGUE};
    const ROW_REDUCE: &str = include_str!("../../shaders/row_reduce.wgsl");
    const ELEMENTWISE: &str = include_str!("../../shaders/elementwise.wgsl");
    let f32v = &CATALOGUE[default_index(super::Precision::F32)];
    let f64v = &CATALOGUE[default_index(super::Precision::F64)];
    let f32p = prelude(super::Precision::F32);
    let f64p = prelude(super::Precision::F64);
    super::Pipelines {
        kernel_matrix: compile(device, f32v.name, &product_source(f32v)),
        product_f64: f64_shaders.then(|| compile(device, f64v.name, &product_source(f64v))),
        row_reduce_f32: compile(device, "row_reduce f32", &format!("{f32p}\n{ROW_REDUCE}")),
        row_reduce_f64: f64_shaders.then(|| compile(device, "row_reduce f64", &format!("{f64p}\n{ROW_REDUCE}"))),
        elementwise_f32: compile(device, "elementwise f32", &format!("{f32p}\n{ELEMENTWISE}")),
        elementwise_f64: f64_shaders.then(|| compile(device, "elementwise f64", &format!("{f64p}\n{ELEMENTWISE}"))),
    }
}

fn div_ceil(a: usize, b: usize) -> usize {
    a.div_ceil(b)
}

fn slot_usage(slot: usize) -> wgpu::BufferUsages {
    use wgpu::BufferUsages as U;
    match slot {
        SLOT_STAGING => U::MAP_READ | U::COPY_DST,
        SLOT_C | SLOT_Y => U::STORAGE | U::COPY_SRC | U::COPY_DST,
        _ => U::STORAGE | U::COPY_DST,
    }
}

/// Receives each finished row-major tile of a statistic matrix:
/// `sink(r0, c0, tile_rows, tile_cols, data)`.
type TileSink<'a> = dyn FnMut(usize, usize, usize, usize, &[f32]) + 'a;

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
        self.with_scratch(SLOT_PROBLEMS, bytes, body)
    }

    /// The scratch buffer of `slot`, at least `bytes` long.
    fn scratch_buffer(&self, scratch: &mut Scratch, slot: usize, bytes: u64) -> wgpu::Buffer {
        let bytes = bytes.max(16);
        if let Some(buf) = &scratch.slots[slot] {
            if buf.size() >= bytes {
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
        scratch.slots[slot] = Some(buf.clone());
        buf
    }

    /// A command encoder holding one compute pass of the kernel-matrix
    /// pipeline that runs `dispatches` (bind group, workgroup grid) in order;
    /// wgpu orders the dispatches' buffer accesses.
    fn encode_dispatches(&self, dispatches: &[(&wgpu::BindGroup, [u32; 3])]) -> Result<wgpu::CommandEncoder> {
        for (_, grid) in dispatches {
            self.check_grid(*grid)?;
        }
        let mut encoder = self.device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&self.pipelines.kernel_matrix);
            for (bind, [x, y, z]) in dispatches {
                pass.set_bind_group(0, *bind, &[]);
                pass.dispatch_workgroups(*x, *y, *z);
                self.counters.count_dispatch();
            }
        }
        Ok(encoder)
    }

    /// Bind group of the default f32 product variant: problems, A, B, C, each a
    /// `(buffer, byte offset, byte length)` range.
    fn kernel_matrix_bind_group(&self, label: &str, ranges: [(&wgpu::Buffer, u64, u64); 4]) -> wgpu::BindGroup {
        // No weights on this path: the problems' range stands in for them.
        let ranges = [ranges[0], ranges[1], ranges[2], ranges[3], ranges[0]];
        let entries: Vec<wgpu::BindGroupEntry<'_>> = ranges
            .iter()
            .enumerate()
            .map(|(i, &(buffer, offset, bytes))| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer, offset, size: NonZeroU64::new(bytes.max(4)) }),
            })
            .collect();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(label),
            layout: &self.pipelines.kernel_matrix.get_bind_group_layout(0),
            entries: &entries,
        })
    }

    /// Copies `bytes` of the C slot into the staging slot, waits, and hands
    /// the `f32`s to `read`.
    fn read_back(&self, scratch: &mut Scratch, mut encoder: wgpu::CommandEncoder, source: &wgpu::Buffer, bytes: u64, read: &mut dyn FnMut(&[f32])) -> Result<()> {
        let staging = self.scratch_buffer(scratch, SLOT_STAGING, bytes);
        encoder.copy_buffer_to_buffer(source, 0, &staging, 0, bytes);
        self.submit_checked(encoder)?;
        self.map_and_read(&staging, bytes, &mut |data| read(bytemuck::cast_slice(data)))
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
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::Gpu(format!("poll: {e}")))?;
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

    /// Runs `body` inside a wgpu error scope and turns captured validation or
    /// out-of-memory errors into [`Error::Gpu`].
    pub(crate) fn checked<R>(&self, body: impl FnOnce() -> Result<R>) -> Result<R> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let out = body();
        let v = pollster::block_on(validation.pop());
        let o = pollster::block_on(oom.pop());
        if let Some(e) = o {
            return Err(Error::device_memory(e.to_string()));
        }
        if let Some(e) = v {
            return Err(Error::Gpu(e.to_string()));
        }
        out
    }

    /// The longest depth one dispatch of the host path's product variant
    /// may take within the loop budget ([`super::LOOP_BUDGET`]).
    fn max_depth(code: &KernelCode) -> usize {
        use super::variants::{default_index, CATALOGUE};
        CATALOGUE[default_index(super::Precision::F32)].max_product_depth(code)
    }

    /// Tile sizes `(rows, cols, depth)` for a statistic matrix so that no
    /// operand or output tile exceeds the binding limit, no dispatch exceeds
    /// the workgroup-count limit and no depth chunk the loop budget.
    fn tile_shape(&self, code: &KernelCode, rows: usize, cols: usize, depth: usize) -> (usize, usize, usize) {
        let elems = (self.max_binding_bytes / 4) as usize;
        let max_span = self.max_workgroups as usize * TILE;
        let (mut br, mut bc, mut bk) = (rows.min(max_span), cols.min(max_span), depth.min(Self::max_depth(code)));
        while br * bc > elems || br * bk > elems || bc * bk > elems {
            if br * bc > elems {
                if br >= bc { br = div_ceil(br, 2) } else { bc = div_ceil(bc, 2) }
            } else if br * bk > elems {
                if bk >= br { bk = div_ceil(bk, 2) } else { br = div_ceil(br, 2) }
            } else if bk >= bc {
                bk = div_ceil(bk, 2)
            } else {
                bc = div_ceil(bc, 2)
            }
        }
        (br, bc, bk)
    }

    /// The statistic matrix `f(s(a_i, b_j))` for all rows of `a` and `b`,
    /// tile by tile; `sink(r0, c0, tile_rows, tile_cols, data)` receives each
    /// finished row-major tile. With `read == false` tiles are computed but
    /// not read back (device-side timing).
    fn statistic_tiles(&self, code: KernelCode, a: &RowMajor, b: &RowMajor, read: bool, sink: &mut TileSink<'_>) -> Result<()> {
        debug_assert_eq!(a.cols, b.cols);
        let (rows, cols, depth) = (a.rows, b.rows, a.cols);
        let (br, bc, bk) = self.tile_shape(&code, rows, cols, depth);
        let mut scratch = self.scratch.lock().map_err(|_| Error::Gpu("scratch lock poisoned".into()))?;
        let scratch = &mut *scratch;
        for r0 in (0..rows).step_by(br) {
            let r1 = (r0 + br).min(rows);
            for c0 in (0..cols).step_by(bc) {
                let c1 = (c0 + bc).min(cols);
                let (tr, tc) = (r1 - r0, c1 - c0);
                let c_bytes = (tr * tc * 4) as u64;
                let c_buf = self.scratch_buffer(scratch, SLOT_C, c_bytes);
                for k0 in (0..depth).step_by(bk) {
                    let k1 = (k0 + bk).min(depth);
                    let last = k1 == depth;
                    let flags = if k0 > 0 { FLAG_ACCUMULATE } else { 0 } | if last { FLAG_APPLY } else { 0 };
                    let a_blk = a.block(r0, r1, k0, k1);
                    let b_blk = b.block(c0, c1, k0, k1);
                    let problem = code.problem(tr, tc, k1 - k0, [0, 0, 0], flags);
                    let p_buf = self.scratch_buffer(scratch, SLOT_PROBLEMS, std::mem::size_of::<Problem>() as u64);
                    let a_buf = self.scratch_buffer(scratch, SLOT_A, (a_blk.len() * 4) as u64);
                    let b_buf = self.scratch_buffer(scratch, SLOT_B, (b_blk.len() * 4) as u64);
                    self.write_counted(&p_buf, 0, bytemuck::bytes_of(&problem));
                    self.write_counted(&a_buf, 0, bytemuck::cast_slice(&a_blk));
                    self.write_counted(&b_buf, 0, bytemuck::cast_slice(&b_blk));
                    let bind = self.kernel_matrix_bind_group("kernel_matrix", [(&p_buf, 0, std::mem::size_of::<Problem>() as u64), (&a_buf, 0, (a_blk.len() * 4) as u64), (&b_buf, 0, (b_blk.len() * 4) as u64), (&c_buf, 0, c_bytes)]);
                    let encoder = self.encode_dispatches(&[(&bind, [div_ceil(tc, TILE) as u32, div_ceil(tr, TILE) as u32, 1])])?;
                    if last && read {
                        self.read_back(scratch, encoder, &c_buf, c_bytes, &mut |data| sink(r0, c0, tr, tc, data))?;
                    } else {
                        self.submit_checked(encoder)?;
                    }
                }
            }
        }
        if !read {
            self.device
                .poll(wgpu::PollType::wait_indefinitely())
                .map_err(|e| Error::Gpu(format!("poll: {e}")))?;
        }
        Ok(())
    }

    /// The full matrix `f(s(a_i, b_j))` (a.rows x b.rows) in the caller's type.
    ///
    /// The GPU computes the transposed problem, `f(s(b_j, a_i))` row-major,
    /// which is the column-major layout of the result: read-back is a
    /// contiguous copy per column instead of a strided scatter.
    fn statistic_matrix<T: Real>(&self, code: KernelCode, a: &RowMajor, b: &RowMajor) -> Result<DMatrix<T>> {
        if let Some(out) = self.split_depth_product(code, a, b)? {
            return Ok(out);
        }
        let mut out = DMatrix::<T>::zeros(a.rows, b.rows);
        let n = a.rows;
        self.checked(|| {
            self.statistic_tiles(code, b, a, true, &mut |c0, r0, tc, tr, data| {
                let dst = out.as_mut_slice();
                for j in 0..tc {
                    let col = &mut dst[(c0 + j) * n + r0..(c0 + j) * n + r0 + tr];
                    for (o, &v) in col.iter_mut().zip(&data[j * tr..(j + 1) * tr]) {
                        *o = T::from_f32_exact(v);
                    }
                }
            })
        })?;
        Ok(out)
    }

    /// Split-K for products with a small output and a long inner dimension
    /// (`Phi^T Phi` over many samples): the depth is cut into chunks that
    /// run as separate problems of one batched dispatch, each writing its own
    /// partial product, and the partials are summed on the host in `f64`.
    /// A single (row, column) tile grid of a few workgroups would otherwise
    /// leave most of a GPU idle. `None` when the shape does not call for it
    /// or the operands do not fit one binding.
    fn split_depth_product<T: Real>(&self, code: KernelCode, a: &RowMajor, b: &RowMajor) -> Result<Option<DMatrix<T>>> {
        const MIN_CHUNK: usize = 2048;
        const MAX_CHUNKS: usize = 256;
        let (rows, cols, depth) = (a.rows, b.rows, a.cols);
        let output_tiles = div_ceil(rows, TILE) * div_ceil(cols, TILE);
        let elems = (self.max_binding_bytes / 4) as usize;
        if code.kind != KernelCode::of(&Kernel::Linear).kind || output_tiles >= 32 || depth < 2 * MIN_CHUNK {
            return Ok(None);
        }
        // Enough chunks to fill a GPU, and for none to exceed the loop budget.
        let chunks = (depth / MIN_CHUNK).min(MAX_CHUNKS).min(div_ceil(128, output_tiles)).max(div_ceil(depth, Self::max_depth(&code)));
        let chunk = div_ceil(depth, chunks);
        let chunks = div_ceil(depth, chunk);
        if a.data.len() > elems || b.data.len() > elems || chunks * rows * cols > elems || chunks < 2 || chunks > self.max_workgroups as usize {
            return Ok(None);
        }
        // Transposed as in `statistic_matrix`: problem rows are b's rows.
        let problems: Vec<Problem> = (0..chunks)
            .map(|i| {
                let k0 = i * chunk;
                let k1 = (k0 + chunk).min(depth);
                let mut p = code.problem(cols, rows, k1 - k0, [k0, k0, i * rows * cols], FLAG_APPLY);
                (p.a_rs, p.b_rs) = (depth as u32, depth as u32);
                p
            })
            .collect();
        let mut partials = vec![0f32; chunks * rows * cols];
        self.checked(|| self.dispatch_batch(&problems, &b.data, &a.data, rows.max(cols), &mut partials))?;
        let mut sum = vec![0f64; rows * cols];
        for part in partials.chunks_exact(rows * cols) {
            for (s, &v) in sum.iter_mut().zip(part) {
                *s += v as f64;
            }
        }
        Ok(Some(DMatrix::from_iterator(rows, cols, sum.into_iter().map(T::from_f64_lossy))))
    }

    /// One dispatch of `problems` (batch index = workgroup z) over packed
    /// operand buffers; the packed outputs are read back into `out`.
    fn dispatch_batch(&self, problems: &[Problem], a_data: &[f32], b_data: &[f32], max_edge: usize, out: &mut [f32]) -> Result<()> {
        let mut scratch = self.scratch.lock().map_err(|_| Error::Gpu("scratch lock poisoned".into()))?;
        let scratch = &mut *scratch;
        let p_bytes = std::mem::size_of_val(problems) as u64;
        let (a_bytes, b_bytes, c_bytes) = ((a_data.len() * 4) as u64, (b_data.len() * 4) as u64, (out.len() * 4) as u64);
        let p_buf = self.scratch_buffer(scratch, SLOT_PROBLEMS, p_bytes);
        let a_buf = self.scratch_buffer(scratch, SLOT_A, a_bytes);
        let b_buf = self.scratch_buffer(scratch, SLOT_B, b_bytes);
        let c_buf = self.scratch_buffer(scratch, SLOT_C, c_bytes);
        self.write_counted(&p_buf, 0, bytemuck::cast_slice(problems));
        self.write_counted(&a_buf, 0, bytemuck::cast_slice(a_data));
        self.write_counted(&b_buf, 0, bytemuck::cast_slice(b_data));
        let bind = self.kernel_matrix_bind_group("batched problems", [(&p_buf, 0, p_bytes), (&a_buf, 0, a_bytes), (&b_buf, 0, b_bytes), (&c_buf, 0, c_bytes)]);
        let max_rows = problems.iter().map(|p| p.rows as usize).max().unwrap_or(1).min(max_edge.max(1));
        let max_cols = problems.iter().map(|p| p.cols as usize).max().unwrap_or(1);
        let encoder = self.encode_dispatches(&[(&bind, [div_ceil(max_cols, TILE) as u32, div_ceil(max_rows, TILE) as u32, problems.len() as u32])])?;
        self.read_back(scratch, encoder, &c_buf, c_bytes, &mut |data| out.copy_from_slice(data))
    }

    /// `K(X, Z)` on the GPU (inputs validated by the caller).
    pub(crate) fn kernel_matrix<T: Real>(&self, kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>) -> Result<DMatrix<T>> {
        check_f32_range("x", x)?;
        check_f32_range("z", z)?;
        let (a, b) = RowMajor::kernel_operands(kernel, x, z);
        self.statistic_matrix(KernelCode::of(kernel), &a, &b)
    }

    /// Device-side time of `K(X, Z)`: uploads and kernels of every tile, the
    /// output left on the GPU (no read-back). For benchmarks.
    pub fn time_kernel_matrix_on_device<T: Real>(&self, kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>) -> Result<Duration> {
        crate::kernel::check_pair(kernel, x, z)?;
        let (a, b) = RowMajor::kernel_operands(kernel, x, z);
        let start = Instant::now();
        self.checked(|| self.statistic_tiles(KernelCode::of(kernel), &a, &b, false, &mut |_, _, _, _, _| {}))?;
        Ok(start.elapsed())
    }

    fn product_operands<T: Real>(a: &DMatrix<T>, b: &DMatrix<T>, form: MatrixProduct) -> (RowMajor, RowMajor) {
        match form {
            MatrixProduct::AB => (RowMajor::rows_of(a), RowMajor::columns_of(b)),
            MatrixProduct::ABt => (RowMajor::rows_of(a), RowMajor::rows_of(b)),
            MatrixProduct::AtB => (RowMajor::columns_of(a), RowMajor::columns_of(b)),
        }
    }

    /// One matrix product on the GPU (shapes validated by the caller).
    pub(crate) fn product<T: Real>(&self, a: &DMatrix<T>, b: &DMatrix<T>, form: MatrixProduct) -> Result<DMatrix<T>> {
        check_f32_range("a", a)?;
        check_f32_range("b", b)?;
        let (ra, rb) = Self::product_operands(a, b, form);
        self.statistic_matrix(KernelCode::of(&Kernel::Linear), &ra, &rb)
    }

    /// Many products in as few dispatches as the binding limits allow: the
    /// operands of a group are packed into one buffer each and the batch
    /// index is the workgroup's z coordinate. Products too large for one
    /// binding go through the tiled single-product path.
    pub(crate) fn batched_product<T: Real>(&self, pairs: &[(&DMatrix<T>, &DMatrix<T>)], form: MatrixProduct) -> Result<Vec<DMatrix<T>>> {
        for (a, b) in pairs {
            check_f32_range("a", a)?;
            check_f32_range("b", b)?;
        }
        let elems = (self.max_binding_bytes / 4) as usize;
        let max_group = (self.max_workgroups as usize).min(elems * 4 / std::mem::size_of::<Problem>());
        let max_span = self.max_workgroups as usize * TILE;
        let mut results: Vec<Option<DMatrix<T>>> = vec![None; pairs.len()];
        let mut group: Vec<(usize, RowMajor, RowMajor)> = Vec::new();
        let (mut ga, mut gb, mut gc) = (0usize, 0usize, 0usize);
        let linear = KernelCode::of(&Kernel::Linear);
        for (idx, (a, b)) in pairs.iter().enumerate() {
            let (ra, rb) = Self::product_operands(a, b, form);
            let (na, nb, nc) = (ra.data.len(), rb.data.len(), ra.rows * rb.rows);
            if na > elems || nb > elems || nc > elems || ra.rows > max_span || rb.rows > max_span || ra.cols > Self::max_depth(&linear) {
                results[idx] = Some(self.statistic_matrix(linear, &ra, &rb)?);
                continue;
            }
            if ga + na > elems || gb + nb > elems || gc + nc > elems || group.len() == max_group {
                self.run_group(linear, &mut group, &mut results)?;
                (ga, gb, gc) = (0, 0, 0);
            }
            ga += na;
            gb += nb;
            gc += nc;
            group.push((idx, ra, rb));
        }
        self.run_group(linear, &mut group, &mut results)?;
        Ok(results.into_iter().map(|r| r.expect("every product computed")).collect())
    }

    fn run_group<T: Real>(&self, code: KernelCode, group: &mut Vec<(usize, RowMajor, RowMajor)>, results: &mut [Option<DMatrix<T>>]) -> Result<()> {
        if group.is_empty() {
            return Ok(());
        }
        // Transposed problems (rows from B, columns from A) so that each
        // packed output is its product in column-major order.
        let mut problems = Vec::with_capacity(group.len());
        let (mut a_data, mut b_data) = (Vec::new(), Vec::new());
        let mut c_len = 0usize;
        for (_, ra, rb) in group.iter() {
            problems.push(code.problem(rb.rows, ra.rows, ra.cols, [b_data.len(), a_data.len(), c_len], FLAG_APPLY));
            a_data.extend_from_slice(&ra.data);
            b_data.extend_from_slice(&rb.data);
            c_len += ra.rows * rb.rows;
        }
        let mut packed = vec![0f32; c_len];
        self.checked(|| self.dispatch_batch(&problems, &b_data, &a_data, usize::MAX, &mut packed))?;
        let mut off = 0usize;
        for (idx, ra, rb) in group.drain(..) {
            let (r, c) = (ra.rows, rb.rows);
            results[idx] = Some(DMatrix::from_iterator(r, c, packed[off..off + r * c].iter().map(|&v| T::from_f32_exact(v))));
            off += r * c;
        }
        Ok(())
    }

    /// `K(X, Z) V` without storing `K(X, Z)` (inputs validated by the caller).
    ///
    /// For each row block of X and point block of Z, two dispatches of the
    /// kernel-matrix shader in one submission: the kernel tile
    /// `K_t = K(X_r, Z_c)` into a scratch buffer that stays on the GPU, then
    /// `Y_r += K_t V_c` (the linear kind, accumulating). Only Y is read back,
    /// once per row block; memory is one tile, however large n x m is.
    pub(crate) fn kernel_matvec<T: Real>(&self, kernel: &Kernel, x: &DMatrix<T>, z: &DMatrix<T>, v: &DMatrix<T>) -> Result<DMatrix<T>> {
        check_f32_range("x", x)?;
        check_f32_range("z", z)?;
        check_f32_range("v", v)?;
        let (n, m, d, c) = (x.nrows(), z.nrows(), x.ncols(), v.ncols());
        let elems = (self.max_binding_bytes / 4) as usize;
        if d > elems || c > elems {
            return Err(Error::TooLargeForGpu { what: "one row of the kernel matvec operands", bytes: (d.max(c) * 4) as u64, limit: self.max_binding_bytes });
        }
        let max_span = self.max_workgroups as usize * TILE;
        // Point blocks are the depth of the product with V: within the loop budget.
        let (mut br, mut bc) = (n.min(MATVEC_BLOCK).min(max_span), m.min(MATVEC_BLOCK).min(max_span).min(Self::max_depth(&KernelCode::of(&Kernel::Linear))));
        while br * bc > elems || br * d > elems || bc * d > elems || bc * c > elems || br * c > elems {
            if br >= bc { br = div_ceil(br, 2) } else { bc = div_ceil(bc, 2) }
        }
        let (xr, zr) = RowMajor::kernel_operands(kernel, x, z);
        let vt = RowMajor::columns_of(v);
        let (kernel_code, linear) = (KernelCode::of(kernel), KernelCode::of(&Kernel::Linear));
        let align = std::mem::size_of::<Problem>().next_multiple_of(self.storage_offset_alignment as usize);
        let problem_bytes = std::mem::size_of::<Problem>() as u64;
        let chunk = Self::max_depth(&kernel_code).min(d).max(1);
        let chunks = div_ceil(d, chunk);
        let mut out = DMatrix::<T>::zeros(n, c);
        self.checked(|| {
            let mut scratch = self.scratch.lock().map_err(|_| Error::Gpu("scratch lock poisoned".into()))?;
            let scratch = &mut *scratch;
            for r0 in (0..n).step_by(br) {
                let r1 = (r0 + br).min(n);
                let x_blk = xr.block(r0, r1, 0, d);
                let x_buf = self.scratch_buffer(scratch, SLOT_A, (x_blk.len() * 4) as u64);
                self.write_counted(&x_buf, 0, bytemuck::cast_slice(&x_blk));
                let y_bytes = ((r1 - r0) * c * 4) as u64;
                let y_buf = self.scratch_buffer(scratch, SLOT_Y, y_bytes);
                for c0 in (0..m).step_by(bc) {
                    let c1 = (c0 + bc).min(m);
                    let (tr, tc) = (r1 - r0, c1 - c0);
                    let z_blk = zr.block(c0, c1, 0, d);
                    let v_blk = vt.block(0, c, c0, c1);
                    let k_bytes = (tr * tc * 4) as u64;
                    let k_buf = self.scratch_buffer(scratch, SLOT_C, k_bytes);
                    let z_buf = self.scratch_buffer(scratch, SLOT_B, (z_blk.len() * 4) as u64);
                    let v_buf = self.scratch_buffer(scratch, SLOT_V, (v_blk.len() * 4) as u64);
                    // The kernel tile in depth chunks within the loop budget
                    // (each after the first adding to the statistic, the last
                    // applying the kernel), then the product.
                    let p_buf = self.scratch_buffer(scratch, SLOT_PROBLEMS, ((chunks * align) as u64) + problem_bytes);
                    for (j, k0) in (0..d).step_by(chunk).enumerate() {
                        let k1 = (k0 + chunk).min(d);
                        let flags = if k0 > 0 { FLAG_ACCUMULATE } else { 0 } | if k1 == d { FLAG_APPLY } else { 0 };
                        let mut tile = kernel_code.problem(tr, tc, k1 - k0, [k0, k0, 0], flags);
                        (tile.a_rs, tile.b_rs) = (d as u32, d as u32);
                        self.write_counted(&p_buf, (j * align) as u64, bytemuck::bytes_of(&tile));
                    }
                    let accumulate = if c0 > 0 { FLAG_ACCUMULATE } else { 0 };
                    let product = linear.problem(tr, c, tc, [0, 0, 0], FLAG_APPLY | accumulate);
                    self.write_counted(&p_buf, (chunks * align) as u64, bytemuck::bytes_of(&product));
                    self.write_counted(&z_buf, 0, bytemuck::cast_slice(&z_blk));
                    self.write_counted(&v_buf, 0, bytemuck::cast_slice(&v_blk));
                    let tile_binds: Vec<wgpu::BindGroup> = (0..chunks)
                        .map(|j| self.kernel_matrix_bind_group("kernel_matvec tile", [(&p_buf, (j * align) as u64, problem_bytes), (&x_buf, 0, (x_blk.len() * 4) as u64), (&z_buf, 0, (z_blk.len() * 4) as u64), (&k_buf, 0, k_bytes)]))
                        .collect();
                    let product_bind = self.kernel_matrix_bind_group("kernel_matvec product", [(&p_buf, (chunks * align) as u64, problem_bytes), (&k_buf, 0, k_bytes), (&v_buf, 0, (v_blk.len() * 4) as u64), (&y_buf, 0, y_bytes)]);
                    let mut dispatches: Vec<(&wgpu::BindGroup, [u32; 3])> = tile_binds.iter().map(|b| (b, [div_ceil(tc, TILE) as u32, div_ceil(tr, TILE) as u32, 1])).collect();
                    dispatches.push((&product_bind, [div_ceil(c, TILE) as u32, div_ceil(tr, TILE) as u32, 1]));
                    let encoder = self.encode_dispatches(&dispatches)?;
                    if c1 == m {
                        self.read_back(scratch, encoder, &y_buf, y_bytes, &mut |data| {
                            for i in 0..tr {
                                for w in 0..c {
                                    out[(r0 + i, w)] = T::from_f32_exact(data[i * c + w]);
                                }
                            }
                        })?;
                    } else {
                        self.submit_checked(encoder)?;
                    }
                }
            }
            Ok(())
        })?;
        Ok(out)
    }
}
