//! Counters of what a context did on the device, kept per context with
//! atomics: the data moved between host and device ([`TransferStats`]), the
//! blocking waits, the device allocations, and per shape class
//! ([`ShapeKind`] x [`Precision`]) the dispatches and their work
//! ([`DispatchCounters`]), all gathered in one snapshot ([`DeviceCounters`]).
//!
//! Every counter except the blocked time is a function of the problem and
//! of the recorded plan alone (the dispatches, the product variants the
//! tuner or [`super::VARIANT_ENV`] chose, and the adapter's binding limits
//! that cut operands into row blocks): the same on every run, and on every
//! adapter that plans the same dispatches. Work of the autotuner's timing
//! runs is not counted.
//!
//! # Work of a dispatch
//!
//! With `e` the element size in bytes (4 for f32, 8 for f64), a dispatch
//! counts:
//!
//! | shape class | flops | minimum bytes | kernel evaluations |
//! |---|---|---|---|
//! | product `C (+)= A' B'^T` (`r x k` by `k x c`; the linear kernel) | `2 r c k` | `e (r k + c k + r c [+ r c when accumulating])` | 0 |
//! | weighted Gram `C (+)= A' diag(w) B'^T` | `3 r c k` | the product's `+ e k` | 0 |
//! | a triangle of either (`C` symmetric, `A' = B'`, `r = c`; tiles of `t_r x t_c`) | `3 E k` (weighted) or `2 E k`, `E` the elements of the tiles on and below the diagonal (`sum_b rows_b min(ceil((b + 1) t_r / t_c) t_c, c)` over the bands `b` of tile rows; `~ r^2 / 2`) | as the full one | 0 |
//! | kernel matrix `C = f(s(A', B'))`, `s` a squared distance (RBF, Laplacian) or an inner product (polynomial, sigmoid) | `3 r c k` (distance) or `2 r c k` (inner) | as the product | `r c` on the piece that applies `f` (the last depth chunk), else 0 |
//! | fused kernel matvec `P = K(X, Z) V` (`r x k` by `c x k`, V `c x v`, `s` partial slots) | the kernel matrix's `+ 2 r c v` | `e (r k + c k + c v + s r v)` | `r c` |
//! | sparse product `Y = X B` or linear kernel `<x_i, z_j>` (CSR `X`, `r` rows, `k` columns, `nnz` non-zeros; `c` output columns): a product | `2 nnz c` | `e nnz + 4 nnz + 4 (r + 1)` (the CSR arrays) `+ e (c k + r c)` | 0 |
//! | sparse kernel matrix `f(s(X, Z))`: a kernel matrix | `5 nnz c` (distance: a difference and two fused multiply-adds) or `2 nnz c` (inner) | the sparse product's, `+ e c` for the norms of `Z` (distance) | `r c` |
//! | row reduction `out_i (+)= sum_j x_ij` (or `x_ij^2`), `r x c` | `r c` (sums) or `2 r c` (squares) | `e (r c + r [+ r when accumulating])` | 0 |
//! | a mklaren step (`gpu::mklaren`): a kernel column `k(X, x_p)` (`r x k`) is a kernel matrix of one column; any other step element-wise | the job's own count (a kernel column: `3 r k` or `2 r k`; a row product over `m` columns: `2 r m`) | `e` times the job's numbers moved (a kernel column: `r k + k + r`; a row product: `r m + m + r`) | `r` (a kernel column), else 0 |
//! | element-wise map over `r x c` | `r c` (Hadamard), `3 r c` (cosine features: add, cosine, scale; a combination `alpha x + beta y`) or `2 r c` (a shift `alpha x + gamma I`) | `e 3 r c` (Hadamard, combination), `e (2 r c + c)` (cosine features) or `e 2 r c` (shift) | 0 |
//!
//! The minimum bytes read every operand once and write the output once
//! (what a perfect cache would move); `workgroups` is the product of the
//! dispatch's grid. The tiled classes (products, weighted Grams, kernel
//! matrices, matvecs) also count the work of whole tiles
//! (`launched_flops`, `launched_evaluations`: the table's figures times
//! `ceil(r / t_r) t_r ceil(c / t_c) t_c / (r c)` for the variant's `t_r x
//! t_c` tile, and the flops times `ceil(k / k_c) k_c / k` for its depth
//! chunk `k_c`): what the device computes, against what the result needs. A kernel function's own arithmetic (an `exp`, a power)
//! is not in the flops; the kernel evaluations count it.
//!
//! # Waits and allocations
//!
//! A wait is one place the host blocks until the device has finished: the
//! poll after mapping a read-back buffer (every download), and
//! [`GpuContext::synchronize`]. Error scopes are resolved on the host and
//! are not waits. An allocation is one device matrix created (uploads,
//! outputs, the scratch partial sums of split products); the reused
//! scratch buffers (dispatch descriptors, read-back staging) count a buffer
//! created when they grow and a reuse when they serve a request as they
//! are, and the fused matvec's reused partial sums an allocation when they
//! grow and a reuse otherwise.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::plan::{lower_tile_elements, Dispatch, PipelineKind, FLAG_LOWER};
use super::problem::{Reduce, FLAG_ACCUMULATE, FLAG_APPLY, FLAG_WEIGHTED};
use super::variants::{CATALOGUE, PAIR_KEY};
use super::GpuContext;
use crate::precision::Precision;

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

impl TransferStats {
    /// The counts of `self` less those of `earlier` (an earlier snapshot of
    /// the same counters; a counter reset in between gives 0).
    pub fn since(&self, earlier: &TransferStats) -> TransferStats {
        TransferStats {
            host_to_device_bytes: self.host_to_device_bytes.saturating_sub(earlier.host_to_device_bytes),
            descriptor_bytes: self.descriptor_bytes.saturating_sub(earlier.descriptor_bytes),
            uploads: self.uploads.saturating_sub(earlier.uploads),
            device_to_host_bytes: self.device_to_host_bytes.saturating_sub(earlier.device_to_host_bytes),
            dispatches: self.dispatches.saturating_sub(earlier.dispatches),
            submissions: self.submissions.saturating_sub(earlier.submissions),
        }
    }
}

/// The shape class of a dispatch: which computation it runs (the module
/// docs give each one's flops, bytes and kernel evaluations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShapeKind {
    /// A linear product `C (+)= A' B'^T` of the product engine (matrix
    /// products, linear-kernel matrices).
    Product,
    /// A kernel matrix (or kernel columns) of a non-linear kernel, or one
    /// depth chunk of one.
    KernelMatrix,
    /// A weighted Gram `A' diag(w) B'^T`.
    WeightedGram,
    /// The fused kernel matvec `K(X, Z) V` (partial sums; K not stored).
    Matvec,
    /// A row reduction (sums or sums of squares of rows, and the sums of
    /// split products' and matvecs' partials).
    RowReduce,
    /// An element-wise map.
    Elementwise,
}

impl ShapeKind {
    /// Every shape class, in the order of [`DeviceCounters::classes`].
    pub const ALL: [ShapeKind; 6] = [ShapeKind::Product, ShapeKind::KernelMatrix, ShapeKind::WeightedGram, ShapeKind::Matvec, ShapeKind::RowReduce, ShapeKind::Elementwise];

    /// A short lower-case name (`product`, `kernel-matrix`, `weighted-gram`,
    /// `matvec`, `row-reduce`, `elementwise`).
    pub fn name(self) -> &'static str {
        match self {
            ShapeKind::Product => "product",
            ShapeKind::KernelMatrix => "kernel-matrix",
            ShapeKind::WeightedGram => "weighted-gram",
            ShapeKind::Matvec => "matvec",
            ShapeKind::RowReduce => "row-reduce",
            ShapeKind::Elementwise => "elementwise",
        }
    }

    fn index(self) -> usize {
        ShapeKind::ALL.iter().position(|&k| k == self).unwrap_or(0)
    }
}

/// Number of (shape class, precision) pairs.
const CLASSES: usize = 12;

fn class_index(kind: ShapeKind, precision: Precision) -> usize {
    kind.index() * 2 + matches!(precision, Precision::F64) as usize
}

/// The dispatches of one shape class and precision, and their work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DispatchCounters {
    /// Dispatches recorded.
    pub dispatches: u64,
    /// Workgroups they launched (the product of each grid, summed).
    pub workgroups: u64,
    /// Floating-point operations (the module docs give the formula per class).
    pub flops: u64,
    /// Minimum bytes moved: every operand read once and the output written
    /// once.
    pub bytes: u64,
    /// Entries of a kernel matrix evaluated (the kernel function applied),
    /// stored or fused into a matvec.
    pub kernel_evaluations: u64,
    /// The flops the launched workgroups perform: [`Self::flops`] with
    /// the padding of whole tiles (the output's rows and columns rounded up
    /// to the variant's tile, the depth to its depth chunk), which a
    /// workgroup computes whether or not the entries are stored. Equal to
    /// `flops` for the classes without tiles.
    pub launched_flops: u64,
    /// The kernel evaluations the launched workgroups perform, tile padding
    /// included (a kernel column of n entries by a 64 x 64 tile evaluates
    /// 64 times as many).
    pub launched_evaluations: u64,
}

impl DispatchCounters {
    /// The sum of `self` and `other`, counter by counter.
    pub fn plus(&self, other: &DispatchCounters) -> DispatchCounters {
        DispatchCounters {
            dispatches: self.dispatches + other.dispatches,
            workgroups: self.workgroups + other.workgroups,
            flops: self.flops + other.flops,
            bytes: self.bytes + other.bytes,
            kernel_evaluations: self.kernel_evaluations + other.kernel_evaluations,
            launched_flops: self.launched_flops + other.launched_flops,
            launched_evaluations: self.launched_evaluations + other.launched_evaluations,
        }
    }

    fn since(&self, earlier: &DispatchCounters) -> DispatchCounters {
        DispatchCounters {
            dispatches: self.dispatches.saturating_sub(earlier.dispatches),
            workgroups: self.workgroups.saturating_sub(earlier.workgroups),
            flops: self.flops.saturating_sub(earlier.flops),
            bytes: self.bytes.saturating_sub(earlier.bytes),
            kernel_evaluations: self.kernel_evaluations.saturating_sub(earlier.kernel_evaluations),
            launched_flops: self.launched_flops.saturating_sub(earlier.launched_flops),
            launched_evaluations: self.launched_evaluations.saturating_sub(earlier.launched_evaluations),
        }
    }
}

/// Everything a context counts (the [module docs](self) say what is
/// counted where): a snapshot since the device was opened or last reset.
/// All zero on the CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// Data moved between host and device, dispatches and submissions.
    pub transfers: TransferStats,
    /// Blocking waits of the host for the device (a download's map, a
    /// [`GpuContext::synchronize`]).
    pub waits: u64,
    /// Nanoseconds during which the host was blocked in those waits or
    /// inside queue submissions (where a software adapter runs the work),
    /// threads blocked at once counted once: a measurement of this run, at
    /// most its wall time (the one counter that differs between runs and
    /// adapters).
    pub blocked_nanos: u64,
    /// Device matrices allocated.
    pub allocations: u64,
    /// Bytes of the device matrices allocated (their elements).
    pub allocated_bytes: u64,
    /// wgpu buffers created (row blocks of device matrices, and reused
    /// scratch buffers when they grow).
    pub buffers_created: u64,
    /// Requests for a scratch buffer served by the existing one.
    pub scratch_reuses: u64,
    /// Shape classes tuned (the variants timed on a synthetic problem the
    /// first time a class is met, unless the tuning cache knew it). The
    /// tuner's own dispatches, transfers and waits are not counted in the
    /// other counters: they are not the caller's work.
    pub tunings: u64,
    /// Nanoseconds spent tuning (shader compilation during tuning included).
    pub tuning_nanos: u64,
    /// Shader pipelines compiled outside tuning (first use of a variant).
    pub compilations: u64,
    /// Nanoseconds spent compiling them: with [`Self::tuning_nanos`], the
    /// once-per-process time inside the first calls that later calls do not pay.
    pub compile_nanos: u64,
    /// Device matrices released (their storage dropped).
    pub releases: u64,
    /// Bytes of the device matrices released.
    pub released_bytes: u64,
    /// Nanoseconds the host spent releasing them. On a software adapter,
    /// whose device memory is host memory, this grows with the bytes (the
    /// pages are unmapped on the releasing thread); [`super::cost`] prices
    /// releases with the card's own costs instead.
    pub release_nanos: u64,
    classes: [DispatchCounters; CLASSES],
}

impl DeviceCounters {
    /// The dispatches of shape class `kind` in `precision`.
    pub fn class(&self, kind: ShapeKind, precision: Precision) -> DispatchCounters {
        self.classes[class_index(kind, precision)]
    }

    /// The counters of class `kind` in `precision`, to change (for building
    /// a counter set by hand, e.g. for [`super::cost`]).
    pub fn class_mut(&mut self, kind: ShapeKind, precision: Precision) -> &mut DispatchCounters {
        &mut self.classes[class_index(kind, precision)]
    }

    /// Every (class, precision) with at least one dispatch, with its counters.
    pub fn classes(&self) -> Vec<(ShapeKind, Precision, DispatchCounters)> {
        ShapeKind::ALL
            .iter()
            .flat_map(|&k| [Precision::F32, Precision::F64].map(|p| (k, p, self.class(k, p))))
            .filter(|(_, _, c)| c.dispatches > 0)
            .collect()
    }

    /// The dispatch counters of every class and precision added up.
    pub fn total(&self) -> DispatchCounters {
        self.classes.iter().fold(DispatchCounters::default(), |a, c| a.plus(c))
    }

    /// Seconds the host spent blocked in waits.
    pub fn blocked_seconds(&self) -> f64 {
        self.blocked_nanos as f64 * 1e-9
    }

    /// [`Self::tuning_nanos`] and [`Self::compile_nanos`] in seconds: the
    /// first-use time of a process (or of a shape class) inside its calls.
    pub fn first_use_seconds(&self) -> f64 {
        self.tuning_nanos.saturating_add(self.compile_nanos) as f64 * 1e-9
    }

    /// [`Self::release_nanos`] in seconds.
    pub fn release_seconds(&self) -> f64 {
        self.release_nanos as f64 * 1e-9
    }

    /// The counts of `self` less those of `earlier` (an earlier snapshot of
    /// the same context: the work done in between).
    pub fn since(&self, earlier: &DeviceCounters) -> DeviceCounters {
        let mut classes = self.classes;
        for (c, e) in classes.iter_mut().zip(&earlier.classes) {
            *c = c.since(e);
        }
        DeviceCounters {
            transfers: self.transfers.since(&earlier.transfers),
            waits: self.waits.saturating_sub(earlier.waits),
            blocked_nanos: self.blocked_nanos.saturating_sub(earlier.blocked_nanos),
            allocations: self.allocations.saturating_sub(earlier.allocations),
            allocated_bytes: self.allocated_bytes.saturating_sub(earlier.allocated_bytes),
            buffers_created: self.buffers_created.saturating_sub(earlier.buffers_created),
            scratch_reuses: self.scratch_reuses.saturating_sub(earlier.scratch_reuses),
            tunings: self.tunings.saturating_sub(earlier.tunings),
            tuning_nanos: self.tuning_nanos.saturating_sub(earlier.tuning_nanos),
            compilations: self.compilations.saturating_sub(earlier.compilations),
            compile_nanos: self.compile_nanos.saturating_sub(earlier.compile_nanos),
            releases: self.releases.saturating_sub(earlier.releases),
            released_bytes: self.released_bytes.saturating_sub(earlier.released_bytes),
            release_nanos: self.release_nanos.saturating_sub(earlier.release_nanos),
            classes,
        }
    }
}

/// The work of one dispatch (see the module docs).
pub(super) fn dispatch_work(d: &Dispatch) -> (ShapeKind, DispatchCounters) {
    let p = &d.problem;
    let e = d.precision.bytes() as u64;
    let workgroups = d.grid.iter().map(|&g| g as u64).product();
    let (r, c, k) = (p.rows as u64, p.cols as u64, p.depth as u64);
    let distance = p.kind == 1 || p.kind == 2;
    let statistic = if distance { 3 } else { 2 };
    let (kind, flops, bytes, evaluations) = match d.pipeline {
        PipelineKind::Product => {
            let accumulate = if p.flags & FLAG_ACCUMULATE != 0 { r * c } else { 0 };
            let base = r * k + c * k + r * c + accumulate;
            // A triangle computes the elements of its tiles on and below the diagonal.
            let computed = if p.flags & FLAG_LOWER != 0 {
                let v = &CATALOGUE[d.variant & 0xffff];
                lower_tile_elements(r as usize, c as usize, v.tile_rows(), v.tile_cols())
            } else {
                r * c
            };
            if p.flags & FLAG_WEIGHTED != 0 {
                (ShapeKind::WeightedGram, 3 * computed * k, e * (base + k), 0)
            } else if p.kind == 0 {
                (ShapeKind::Product, 2 * computed * k, e * base, 0)
            } else {
                let evaluations = if p.flags & FLAG_APPLY != 0 { r * c } else { 0 };
                (ShapeKind::KernelMatrix, statistic * r * c * k, e * base, evaluations)
            }
        }
        PipelineKind::Matvec => {
            // V has c_cs columns; the grid's x splits times the variant's
            // slots per split are the partial slots.
            let v = p.c_cs as u64;
            let slots = d.grid[0] as u64 * CATALOGUE[d.variant & 0xffff].matvec_slots() as u64;
            let (flops, bytes) = (statistic * r * c * k + 2 * r * c * v, e * (r * k + c * k + c * v + slots * r * v));
            if d.variant & PAIR_KEY != 0 {
                // K^T W from the same entries: W read, a column slot per row tile (grid y).
                (ShapeKind::Matvec, flops + 2 * r * c * v, bytes + e * (r * v + d.grid[1] as u64 * c * v), r * c)
            } else {
                (ShapeKind::Matvec, flops, bytes, r * c)
            }
        }
        PipelineKind::RowReduce => {
            let job: Reduce = bytemuck::pod_read_unaligned(&bytemuck::bytes_of(&d.problem)[..std::mem::size_of::<Reduce>()]);
            let (r, c) = (job.rows as u64, job.cols as u64);
            // Mode 2 (an arg-max block) compares and adds, and writes 3 numbers a row.
            let flops = if job.mode == 1 { r * c } else { 2 * r * c };
            let written = if job.mode == 2 { 3 * r } else { r + if job.accumulate != 0 { r } else { 0 } };
            (ShapeKind::RowReduce, flops, e * (r * c + written), 0)
        }
        PipelineKind::IcdColumn => {
            // k, p and d read, d and a column of G written; 5 flops a row.
            let r = bytemuck::cast_slice::<_, u32>(bytemuck::bytes_of(&d.problem))[0] as u64;
            (ShapeKind::Elementwise, 5 * r, e * 5 * r, 0)
        }
        PipelineKind::Sparse => {
            // A CSR X against D: `a_rs` holds the non-zeros of the rows.
            let nnz = p.a_rs as u64;
            let csr = e * nnz + 4 * nnz + 4 * (r + 1);
            let dense = e * (c * k + r * c);
            if p.kind == 0 {
                (ShapeKind::Product, 2 * nnz * c, csr + dense, 0)
            } else if distance {
                (ShapeKind::KernelMatrix, 5 * nnz * c, csr + dense + e * c, r * c)
            } else {
                (ShapeKind::KernelMatrix, 2 * nnz * c, csr + dense, r * c)
            }
        }
        PipelineKind::Mklaren => {
            // The job's estimate (`gpu::mklaren`): flops in `gamma`, numbers
            // moved in `u_off`, kernel evaluations in `coef0` (a kernel column).
            let evaluations = p.coef0.max(0.0) as u64;
            let kind = if evaluations > 0 { ShapeKind::KernelMatrix } else { ShapeKind::Elementwise };
            (kind, p.gamma.max(0.0) as u64, e * p.u_off as u64, evaluations)
        }
        PipelineKind::Elementwise => {
            let words: &[u32] = bytemuck::cast_slice(bytemuck::bytes_of(&d.problem));
            let (r, c, mode) = (words[0] as u64, words[1] as u64, words[5]);
            match mode {
                0 => (ShapeKind::Elementwise, 3 * r * c, e * (2 * r * c + c), 0),
                1 => (ShapeKind::Elementwise, r * c, e * 3 * r * c, 0),
                2 => (ShapeKind::Elementwise, 3 * r * c, e * 3 * r * c, 0),
                _ => (ShapeKind::Elementwise, 2 * r * c, e * 2 * r * c, 0),
            }
        }
    };
    // Tiled pipelines compute whole tiles: rows and columns rounded up to
    // the tile, the depth to the depth chunk.
    let (launched_flops, launched_evaluations) = match d.pipeline {
        PipelineKind::Product | PipelineKind::Matvec if r > 0 && c > 0 => {
            let v = &CATALOGUE[d.variant & 0xffff];
            let (tr, tc, kc) = (v.tile_rows() as u64, v.tile_cols() as u64, (v.kc as u64).max(1));
            let area = (r.div_ceil(tr) * tr) as f64 * (c.div_ceil(tc) * tc) as f64 / (r * c) as f64;
            let depth = if k > 0 { (k.div_ceil(kc) * kc) as f64 / k as f64 } else { 1.0 };
            ((flops as f64 * area * depth).round() as u64, (evaluations as f64 * area).round() as u64)
        }
        _ => (flops, evaluations),
    };
    (kind, DispatchCounters { dispatches: 1, workgroups, flops, bytes, kernel_evaluations: evaluations, launched_flops, launched_evaluations })
}

#[derive(Default)]
struct ClassAtomics {
    dispatches: AtomicU64,
    workgroups: AtomicU64,
    flops: AtomicU64,
    bytes: AtomicU64,
    evaluations: AtomicU64,
    launched_flops: AtomicU64,
    launched_evaluations: AtomicU64,
}

impl ClassAtomics {
    fn all(&self) -> [&AtomicU64; 7] {
        [&self.dispatches, &self.workgroups, &self.flops, &self.bytes, &self.evaluations, &self.launched_flops, &self.launched_evaluations]
    }
    fn values(c: &DispatchCounters) -> [u64; 7] {
        [c.dispatches, c.workgroups, c.flops, c.bytes, c.kernel_evaluations, c.launched_flops, c.launched_evaluations]
    }
    fn load(&self) -> DispatchCounters {
        let [d, w, f, b, e, lf, le] = self.all().map(|a| a.load(Ordering::Relaxed));
        DispatchCounters { dispatches: d, workgroups: w, flops: f, bytes: b, kernel_evaluations: e, launched_flops: lf, launched_evaluations: le }
    }
    fn store(&self, c: &DispatchCounters) {
        for (a, v) in self.all().into_iter().zip(Self::values(c)) {
            a.store(v, Ordering::Relaxed);
        }
    }
    fn add(&self, c: &DispatchCounters) {
        for (a, v) in self.all().into_iter().zip(Self::values(c)) {
            a.fetch_add(v, Ordering::Relaxed);
        }
    }
}

/// The host held by the device while this lives ([`Counters::hold`]).
pub(crate) struct Held<'a> {
    counters: &'a Counters,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Ok(mut h) = self.counters.held.lock() {
            h.0 = h.0.saturating_sub(1);
            if h.0 == 0 {
                if let Some(since) = h.1.take() {
                    self.counters.blocked_nanos.fetch_add(since.elapsed().as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
                }
            }
        }
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    h2d: AtomicU64,
    descriptors: AtomicU64,
    uploads: AtomicU64,
    d2h: AtomicU64,
    dispatches: AtomicU64,
    submissions: AtomicU64,
    waits: AtomicU64,
    blocked_nanos: AtomicU64,
    /// Threads held now, and since when at least one has been.
    held: Mutex<(u32, Option<Instant>)>,
    allocations: AtomicU64,
    allocated_bytes: AtomicU64,
    buffers_created: AtomicU64,
    scratch_reuses: AtomicU64,
    tunings: AtomicU64,
    tuning_nanos: AtomicU64,
    compilations: AtomicU64,
    compile_nanos: AtomicU64,
    /// Releases of device matrices, shared with their storage.
    pub(crate) released: Arc<super::buffers::Releases>,
    classes: [ClassAtomics; CLASSES],
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
    /// Counts `d` and its work in its shape class.
    pub(crate) fn count_dispatch(&self, d: &Dispatch) {
        self.dispatches.fetch_add(1, Ordering::Relaxed);
        let (kind, work) = dispatch_work(d);
        self.classes[class_index(kind, d.precision)].add(&work);
    }
    pub(crate) fn count_submission(&self) {
        self.submissions.fetch_add(1, Ordering::Relaxed);
    }
    /// One blocking wait (its time is counted by the [`Held`] around it).
    pub(crate) fn count_wait(&self) {
        self.waits.fetch_add(1, Ordering::Relaxed);
    }
    /// Marks the host as held by the device (a wait, or a submission, inside
    /// which a software adapter runs the work) until the returned guard
    /// drops. The blocked time is the wall time during which at least one
    /// thread is held: threads held at once count once, so it never
    /// exceeds the wall time of the run.
    pub(crate) fn hold(&self) -> Held<'_> {
        if let Ok(mut h) = self.held.lock() {
            if h.0 == 0 {
                h.1 = Some(Instant::now());
            }
            h.0 += 1;
        }
        Held { counters: self }
    }
    /// One device matrix of `bytes` in `buffers` wgpu buffers.
    pub(crate) fn count_allocation(&self, bytes: u64, buffers: u64) {
        self.allocations.fetch_add(1, Ordering::Relaxed);
        self.allocated_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.buffers_created.fetch_add(buffers, Ordering::Relaxed);
    }
    /// A scratch request: served by the existing buffer (`reused`) or by a
    /// new one.
    pub(crate) fn count_scratch(&self, reused: bool) {
        if reused {
            self.scratch_reuses.fetch_add(1, Ordering::Relaxed);
        } else {
            self.buffers_created.fetch_add(1, Ordering::Relaxed);
        }
    }
    pub(crate) fn transfers(&self) -> TransferStats {
        TransferStats {
            host_to_device_bytes: self.h2d.load(Ordering::Relaxed),
            descriptor_bytes: self.descriptors.load(Ordering::Relaxed),
            uploads: self.uploads.load(Ordering::Relaxed),
            device_to_host_bytes: self.d2h.load(Ordering::Relaxed),
            dispatches: self.dispatches.load(Ordering::Relaxed),
            submissions: self.submissions.load(Ordering::Relaxed),
        }
    }
    pub(crate) fn snapshot(&self) -> DeviceCounters {
        DeviceCounters {
            transfers: self.transfers(),
            waits: self.waits.load(Ordering::Relaxed),
            blocked_nanos: self.blocked_nanos.load(Ordering::Relaxed),
            allocations: self.allocations.load(Ordering::Relaxed),
            allocated_bytes: self.allocated_bytes.load(Ordering::Relaxed),
            buffers_created: self.buffers_created.load(Ordering::Relaxed),
            scratch_reuses: self.scratch_reuses.load(Ordering::Relaxed),
            tunings: self.tunings.load(Ordering::Relaxed),
            tuning_nanos: self.tuning_nanos.load(Ordering::Relaxed),
            compilations: self.compilations.load(Ordering::Relaxed),
            compile_nanos: self.compile_nanos.load(Ordering::Relaxed),
            releases: self.released.count.load(Ordering::Relaxed),
            released_bytes: self.released.bytes.load(Ordering::Relaxed),
            release_nanos: self.released.nanos.load(Ordering::Relaxed),
            classes: std::array::from_fn(|i| self.classes[i].load()),
        }
    }
    /// One class tuned in `nanos` (counted after the tuner's work is
    /// [`Self::restore`]d away).
    pub(crate) fn count_tuning(&self, nanos: u64) {
        self.tunings.fetch_add(1, Ordering::Relaxed);
        self.tuning_nanos.fetch_add(nanos, Ordering::Relaxed);
    }
    /// One pipeline compiled in `nanos`.
    pub(crate) fn count_compilation(&self, nanos: u64) {
        self.compilations.fetch_add(1, Ordering::Relaxed);
        self.compile_nanos.fetch_add(nanos, Ordering::Relaxed);
    }
    /// Puts the counters back to `s` (the tuner's own work is not the caller's).
    pub(crate) fn restore(&self, s: &DeviceCounters) {
        let t = &s.transfers;
        self.h2d.store(t.host_to_device_bytes, Ordering::Relaxed);
        self.descriptors.store(t.descriptor_bytes, Ordering::Relaxed);
        self.uploads.store(t.uploads, Ordering::Relaxed);
        self.d2h.store(t.device_to_host_bytes, Ordering::Relaxed);
        self.dispatches.store(t.dispatches, Ordering::Relaxed);
        self.submissions.store(t.submissions, Ordering::Relaxed);
        self.waits.store(s.waits, Ordering::Relaxed);
        self.blocked_nanos.store(s.blocked_nanos, Ordering::Relaxed);
        self.allocations.store(s.allocations, Ordering::Relaxed);
        self.allocated_bytes.store(s.allocated_bytes, Ordering::Relaxed);
        self.buffers_created.store(s.buffers_created, Ordering::Relaxed);
        self.scratch_reuses.store(s.scratch_reuses, Ordering::Relaxed);
        self.tunings.store(s.tunings, Ordering::Relaxed);
        self.tuning_nanos.store(s.tuning_nanos, Ordering::Relaxed);
        self.compilations.store(s.compilations, Ordering::Relaxed);
        self.compile_nanos.store(s.compile_nanos, Ordering::Relaxed);
        self.released.count.store(s.releases, Ordering::Relaxed);
        self.released.bytes.store(s.released_bytes, Ordering::Relaxed);
        self.released.nanos.store(s.release_nanos, Ordering::Relaxed);
        for (a, c) in self.classes.iter().zip(&s.classes) {
            a.store(c);
        }
    }
    pub(crate) fn reset(&self) {
        self.restore(&DeviceCounters::default());
    }
}

impl GpuContext {
    /// The counters of data moved and work submitted.
    pub fn transfer_stats(&self) -> TransferStats {
        self.counters.transfers()
    }

    /// Sets every counter (those of [`Self::device_counters`] too) to zero.
    pub fn reset_transfer_stats(&self) {
        self.counters.reset()
    }

    /// Every counter of this context: transfers, waits, allocations and
    /// the dispatches' work by shape class (see [`DeviceCounters`]).
    pub fn device_counters(&self) -> DeviceCounters {
        self.counters.snapshot()
    }

    /// Sets every counter to zero (as [`Self::reset_transfer_stats`]).
    pub fn reset_device_counters(&self) {
        self.counters.reset()
    }
}
