//! A cost model of a GPU: a card's profile ([`CardProfile`]: peaks,
//! bandwidths, latencies and per-shape-class efficiencies) turns the
//! counters of a run ([`DeviceCounters`], which are the same on every
//! adapter for the same plan) into a predicted time on that card
//! ([`predict`]), so that a run on any adapter, software ones included,
//! says what it would cost on a named card.
//!
//! # The model
//!
//! For every shape class `c` (with its precision's peak `P`) with `N_c`
//! dispatches, `F_c` flops, `B_c` minimum bytes and `E_c` kernel
//! evaluations, the device time is
//!
//! ```text
//! T_c = max(F_c / (eta_c P), B_c / BW, E_c / R) + N_c o
//! ```
//!
//! with `F_c` and `E_c` the work of the launched workgroups (whole tiles,
//! [`DispatchCounters::launched_flops`]; the minimum work where a counter
//! set built by hand has none), `eta_c` the class's efficiency, `BW` the memory bandwidth, `R` the
//! rate of kernel-function evaluations in the class's precision (the
//! transcendental part of an entry, e.g. the `exp` of an RBF kernel: in
//! `f64` a polynomial in the shaders, so that at a small feature depth the
//! evaluations, not the inner products, bound a kernel matvec), and `o`
//! the per-dispatch overhead (dispatches of one class are taken together:
//! their arithmetic intensities are alike). The predicted time is
//!
//! ```text
//! T = sum_c T_c + W lambda + (U + D + S) / L + H + X rho + Y sigma
//! ```
//!
//! with `W` the blocking waits and `lambda` the latency of one, `U`, `D`
//! and `S` the bytes uploaded, downloaded and of dispatch descriptors, `L`
//! the host link's bandwidth, and `H` the host time: the measured wall time
//! of the run less the time blocked in waits, the first-use time and the
//! time spent releasing device matrices, divided by a host-speed factor
//! (how many times faster the card's host is than the one that measured).
//! Releases are priced apart, `X rho + Y sigma` for `X` matrices of `Y`
//! bytes, with the card's latency `rho` per release and its time `sigma`
//! per released byte (a software adapter's device memory is host memory,
//! unmapped page by page as a matrix is released; a card's is not, and
//! its presets have no per-byte cost). The model overlaps nothing: host,
//! transfers and device work add up.
//!
//! # Presets
//!
//! [`CardProfile::h200`] and [`CardProfile::h100`] carry the published
//! SIMT peaks and HBM bandwidths, 50 GB/s for the PCIe Gen5 host link, and
//! efficiencies fitted to the H200 run's timings of single products,
//! kernel matrices and kernel matvecs (`repro/results/h200-2026-12-04-variants.txt`,
//! the tuned variant of each shape; see the constants). The H100 shares
//! the H200's efficiencies (the same Hopper SMs). [`CardProfile::measure`]
//! fills a profile from calibration dispatches on the current adapter.

use std::time::Instant;

use super::counters::{DeviceCounters, DispatchCounters, ShapeKind};
use super::plan::{Operand, ProductFlags};
use super::problem::KernelCode;
use super::GpuContext;
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::precision::Precision;

/// Efficiency of kernel-matrix dispatches on an H200: the tuned RBF kernel
/// matrices of the H200 run, 32768 x 32768 x 256 f32 in 43.51 ms (18.95
/// TFLOP/s of 66.9: 0.283) and 16384 x 16384 x 256 f64 in 20.38 ms (10.12 of
/// 33.5: 0.302), flops `3 n m d`.
pub const H200_KERNEL_MATRIX_EFFICIENCY: f64 = 0.29;
/// Efficiency of product dispatches on an H200: the 8192^3 f32 product of
/// the H200 run in 54.64 ms (20.12 TFLOP/s of 66.9: 0.301).
pub const H200_PRODUCT_EFFICIENCY: f64 = 0.30;
/// Efficiency of fused kernel matvecs on an H200: 32768 x 32768 x 256 f32
/// with one column in 42.33 ms (19.53 TFLOP/s: 0.292), with eight in 52.39
/// ms (16.07: 0.240), 16384 x 16384 x 256 f64 with one in 19.55 ms (10.57 of
/// 33.5: 0.316).
pub const H200_MATVEC_EFFICIENCY: f64 = 0.28;
/// Efficiency of weighted Grams on an H200: not timed alone in the H200
/// run; the product's (the same engine with one more multiply).
pub const H200_WEIGHTED_GRAM_EFFICIENCY: f64 = 0.30;
/// Efficiency of row reductions and element-wise maps: memory-bound (a
/// flop or three per element moved), so the bandwidth term decides; not
/// timed alone in the H200 run.
pub const H200_STREAMING_EFFICIENCY: f64 = 0.10;
/// Kernel-function evaluations per second in `f64` on an H200: the eKSVD
/// Dual of the H200 run at 3 x 100,000 samples (`repro/results/h200-2026-12-04-methods-eksvd.txt`:
/// 15 Lanczos products of `6 N^2` RBF evaluations each at feature depth 4,
/// 9.0e11 evaluations in 42.996 s, of which waits, transfers and the host's
/// Lanczos work take under 0.1 s): 2.1e10 per second. At that depth the
/// inner products are 28 flops an entry (2.7 s at the matvec efficiency),
/// so the evaluations decide; at depth 256 (the tuned matvec and kernel
/// matrix rows, 1.3-1.4e10 entries per second) the flops do.
pub const H200_F64_EVALUATION_RATE: f64 = 2.1e10;
/// Kernel-function evaluations per second in `f32` on an H200: not timed
/// at a small depth; the throughput of the special-function units that an
/// `f32` `exp` runs on (132 SMs x 16 `ex2` per clock x 1.98 GHz), about
/// 300 times the `f64` rate. The f32 rows of the H200 run (depth 256) are
/// flop-bound below it.
pub const H200_F32_EVALUATION_RATE: f64 = 132.0 * 16.0 * 1.98e9;
/// Latency of one blocking wait (submit, fence, map) on an H200 under
/// Vulkan: not in the logs; a typical figure for a discrete GPU.
pub const H200_WAIT_LATENCY: f64 = 50e-6;
/// Overhead of one dispatch (bind, launch) on an H200 under Vulkan: not in
/// the logs; a typical figure for a discrete GPU.
pub const H200_DISPATCH_OVERHEAD: f64 = 5e-6;
/// Host seconds to release one device matrix on an H200 under Vulkan
/// (`vkFreeMemory` of device-local memory, which touches no host pages):
/// not in the logs; a conservative figure for a discrete GPU.
pub const H200_RELEASE_LATENCY: f64 = 100e-6;
/// Effective host-link bandwidth of PCIe Gen5 x16 (bytes per second).
pub const PCIE5_LINK_BANDWIDTH: f64 = 50e9;

/// What one card can do (see the module docs for how it is used).
#[derive(Debug, Clone, PartialEq)]
pub struct CardProfile {
    /// The card's name.
    pub name: String,
    /// Peak f32 FLOP/s of its SIMT units (no tensor cores).
    pub f32_flops: f64,
    /// Peak f64 FLOP/s of its SIMT units (0 where it computes no f64).
    pub f64_flops: f64,
    /// Device-memory bandwidth, bytes per second.
    pub memory_bandwidth: f64,
    /// Host-link bandwidth, bytes per second (each direction).
    pub link_bandwidth: f64,
    /// Seconds of one blocking wait beyond the work waited for.
    pub wait_latency: f64,
    /// Seconds of overhead per dispatch.
    pub dispatch_overhead: f64,
    /// Kernel-function evaluations per second in `f32`.
    pub f32_evaluations: f64,
    /// Kernel-function evaluations per second in `f64` (0 where it computes
    /// no f64).
    pub f64_evaluations: f64,
    /// Fraction of the peak each shape class reaches, in the order of
    /// [`ShapeKind::ALL`].
    pub efficiency: [f64; 6],
    /// Host seconds to release one device matrix.
    pub release_latency: f64,
    /// Host seconds per byte of a released device matrix (0 where releasing
    /// touches no host pages, as on a card).
    pub release_per_byte: f64,
}

impl CardProfile {
    /// NVIDIA H200 (SXM): 66.9 TFLOP/s f32, 33.5 f64, 4.8 TB/s HBM3e, PCIe
    /// Gen5 host link, efficiencies fitted to the H200 run.
    pub fn h200() -> Self {
        CardProfile {
            name: "NVIDIA H200".into(),
            f32_flops: 66.9e12,
            f64_flops: 33.5e12,
            memory_bandwidth: 4.8e12,
            link_bandwidth: PCIE5_LINK_BANDWIDTH,
            wait_latency: H200_WAIT_LATENCY,
            dispatch_overhead: H200_DISPATCH_OVERHEAD,
            f32_evaluations: H200_F32_EVALUATION_RATE,
            f64_evaluations: H200_F64_EVALUATION_RATE,
            efficiency: hopper_efficiency(),
            release_latency: H200_RELEASE_LATENCY,
            release_per_byte: 0.0,
        }
    }

    /// NVIDIA H100 SXM: 67 TFLOP/s f32, 34 f64, 3.35 TB/s HBM3, PCIe Gen5
    /// host link, the H200's efficiencies and evaluation rates (the same
    /// SMs at the same clock).
    pub fn h100() -> Self {
        CardProfile { name: "NVIDIA H100 SXM".into(), f32_flops: 67e12, f64_flops: 34e12, memory_bandwidth: 3.35e12, ..Self::h200() }
    }

    /// The preset called `name` (`h200` or `h100`, any case). Errors:
    /// [`Error::InvalidParameter`] for another name.
    pub fn preset(name: &str) -> Result<Self> {
        match name.to_ascii_lowercase().as_str() {
            "h200" => Ok(Self::h200()),
            "h100" => Ok(Self::h100()),
            other => Err(Error::InvalidParameter { name: "card", reason: format!("no card profile called {other:?} (h200, h100)") }),
        }
    }

    /// The efficiency of shape class `kind`.
    pub fn efficiency_of(&self, kind: ShapeKind) -> f64 {
        self.efficiency[ShapeKind::ALL.iter().position(|&k| k == kind).unwrap_or(0)]
    }

    /// Kernel-function evaluations per second in `precision`.
    pub fn evaluation_rate(&self, precision: Precision) -> f64 {
        match precision {
            Precision::F32 => self.f32_evaluations,
            Precision::F64 => self.f64_evaluations,
        }
    }

    /// The peak FLOP/s of `precision`.
    pub fn peak(&self, precision: Precision) -> f64 {
        match precision {
            Precision::F32 => self.f32_flops,
            Precision::F64 => self.f64_flops,
        }
    }

    /// Measures the current adapter: times a 512^3 f32 product (the f32
    /// peak, product efficiency 1), an RBF kernel matrix of the same shape
    /// (the kernel-matrix and matvec efficiencies relative to it), the same
    /// in f64 where the adapter has it, an RBF kernel matrix of 512 x 512
    /// at depth 4 in each precision (the evaluation rates), a row reduction over 16 MiB (the
    /// memory bandwidth), an upload and a download of 16 MiB (the host
    /// link, their waits subtracted), repeated one-element downloads (the
    /// wait latency) and 64 one-workgroup dispatches (the dispatch
    /// overhead). Each takes the best of three. The counters are left as
    /// they were. Errors: those of the device.
    pub fn measure(ctx: &GpuContext) -> Result<Self> {
        let before = ctx.counters.snapshot();
        let out = Self::measure_uncounted(ctx);
        ctx.counters.restore(&before);
        out
    }

    fn measure_uncounted(ctx: &GpuContext) -> Result<Self> {
        let linear = KernelCode::of(&Kernel::Linear);
        let rbf = KernelCode { kind: 1, gamma: 1e-3, coef0: 0.0, degree: 0 };
        let best = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
            f()?;
            let mut t = f64::INFINITY;
            for _ in 0..3 {
                let start = Instant::now();
                f()?;
                t = t.min(start.elapsed().as_secs_f64());
            }
            Ok(t.max(1e-9))
        };
        let n = 512;
        let product_time = |precision: Precision, code: KernelCode, depth: usize| -> Result<f64> {
            let a = ctx.upload(&vec![0.5; n * depth], n, depth, precision)?;
            let c = ctx.zeros(n, n, precision)?;
            best(&mut || {
                let mut plan = Vec::new();
                ctx.plan_product(code, Operand::plain(&a), Operand::plain(&a), &c, ProductFlags::default(), &mut plan)?;
                ctx.run_plan(plan)?;
                ctx.synchronize()
            })
        };
        let product_rate = |precision: Precision, code: KernelCode| -> Result<f64> {
            let per = if code.is_distance() { 3.0 } else { 2.0 };
            Ok(per * (n * n * n) as f64 / product_time(precision, code, n)?)
        };
        let evaluation_rate = |precision: Precision| -> Result<f64> { Ok((n * n) as f64 / product_time(precision, rbf, 4)?) };
        let f32_flops = product_rate(Precision::F32, linear)?;
        let kernel = product_rate(Precision::F32, rbf)? / f32_flops;
        let f64_flops = if ctx.supports(Precision::F64) { product_rate(Precision::F64, linear)? } else { 0.0 };
        let f32_evaluations = evaluation_rate(Precision::F32)?;
        let f64_evaluations = if ctx.supports(Precision::F64) { evaluation_rate(Precision::F64)? } else { 0.0 };
        // Bandwidth: sums of the rows of a 16 MiB f32 matrix.
        let (rows, cols) = (4096, 1024);
        let x = ctx.upload(&vec![1.0; rows * cols], rows, cols, Precision::F32)?;
        let sums = ctx.zeros(rows, 1, Precision::F32)?;
        let t = best(&mut || {
            let mut plan = Vec::new();
            ctx.plan_row_reduce(&x, &sums, false, false, &mut plan)?;
            ctx.run_plan(plan)?;
            ctx.synchronize()
        })?;
        let memory_bandwidth = (4 * (rows * cols + rows)) as f64 / t;
        // Wait latency: one-element read-backs.
        let one = ctx.zeros(1, 1, Precision::F32)?;
        let wait_latency = best(&mut || ctx.download(&one).map(|_| ()))?;
        // Host link: an upload and a download of 16 MiB.
        let host = vec![1.0; rows * cols];
        let up = best(&mut || {
            ctx.upload(&host, rows, cols, Precision::F32)?;
            ctx.synchronize()
        })?;
        let down = best(&mut || ctx.download(&x).map(|_| ()))?;
        let link_bandwidth = (2 * 4 * rows * cols) as f64 / (up + down - 2.0 * wait_latency).max(1e-9);
        // Dispatch overhead: 64 row reductions of one row.
        let tiny = ctx.zeros(1, 1, Precision::F32)?;
        let tiny_out = ctx.zeros(1, 1, Precision::F32)?;
        let dispatches = 64;
        let t = best(&mut || {
            let mut plan = Vec::new();
            for _ in 0..dispatches {
                ctx.plan_row_reduce(&tiny, &tiny_out, false, false, &mut plan)?;
            }
            ctx.run_plan(plan)?;
            ctx.synchronize()
        })?;
        let dispatch_overhead = (t - wait_latency).max(0.0) / dispatches as f64;
        // Releases: a one-element matrix and a 16 MiB one, each written
        // first (its memory in use), timed as they are dropped.
        let release_time = |rows: usize, cols: usize| -> Result<f64> {
            let mut t = f64::INFINITY;
            for _ in 0..3 {
                let m = ctx.upload(&host[..rows * cols], rows, cols, Precision::F32)?;
                ctx.synchronize()?;
                let before = ctx.counters.snapshot();
                drop(m);
                t = t.min(ctx.counters.snapshot().since(&before).release_seconds());
            }
            Ok(t)
        };
        let release_latency = release_time(1, 1)?;
        let release_per_byte = (release_time(rows, cols)? - release_latency).max(0.0) / (4 * rows * cols) as f64;
        Ok(CardProfile {
            name: ctx.adapter().name.clone(),
            f32_flops,
            f64_flops,
            memory_bandwidth,
            link_bandwidth,
            wait_latency,
            dispatch_overhead,
            f32_evaluations,
            f64_evaluations,
            efficiency: [1.0, kernel, 1.0, kernel, 1.0, 1.0],
            release_latency,
            release_per_byte,
        })
    }
}

fn hopper_efficiency() -> [f64; 6] {
    // In the order of ShapeKind::ALL.
    [H200_PRODUCT_EFFICIENCY, H200_KERNEL_MATRIX_EFFICIENCY, H200_WEIGHTED_GRAM_EFFICIENCY, H200_MATVEC_EFFICIENCY, H200_STREAMING_EFFICIENCY, H200_STREAMING_EFFICIENCY]
}

/// A predicted time and its parts, in seconds (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Prediction {
    /// Device work: `sum_c max(F_c / (eta_c P), B_c / BW, E_c / R)`.
    pub device: f64,
    /// Dispatch overheads: dispatches x overhead.
    pub dispatch: f64,
    /// Waits x latency.
    pub waits: f64,
    /// Host-device traffic over the link.
    pub link: f64,
    /// Host time: wall less blocked, first use and releases, over the
    /// host-speed factor.
    pub host: f64,
    /// Releases of device matrices on the card.
    pub release: f64,
}

impl Prediction {
    /// The predicted time: the sum of the parts.
    pub fn total(&self) -> f64 {
        self.device + self.dispatch + self.waits + self.link + self.host + self.release
    }
}

/// The flops and kernel evaluations of the launched workgroups, or the
/// minimum ones where `c` has none (a counter set built by hand).
fn launched(c: &DispatchCounters) -> (u64, u64) {
    (if c.launched_flops > 0 { c.launched_flops } else { c.flops }, if c.launched_evaluations > 0 { c.launched_evaluations } else { c.kernel_evaluations })
}

/// Host seconds of a run that took `wall_seconds` with `counters`: the wall
/// time less the time blocked in waits, the first-use time (tuning and
/// shader compilation, [`DeviceCounters::first_use_seconds`]) and the time
/// spent releasing device matrices ([`DeviceCounters::release_seconds`],
/// priced apart by [`predict`]); not below 0, divided by
/// `host_speed` (how many times faster the predicted card's host is).
/// Errors: [`Error::InvalidParameter`] for a wall time or speed that is not
/// finite and positive (a wall time of 0 is allowed).
pub fn host_seconds(wall_seconds: f64, counters: &DeviceCounters, host_speed: f64) -> Result<f64> {
    if !wall_seconds.is_finite() || wall_seconds < 0.0 {
        return Err(Error::InvalidParameter { name: "wall_seconds", reason: format!("must be finite and non-negative, got {wall_seconds}") });
    }
    if !host_speed.is_finite() || host_speed <= 0.0 {
        return Err(Error::InvalidParameter { name: "host_speed", reason: format!("must be finite and positive, got {host_speed}") });
    }
    Ok((wall_seconds - counters.blocked_seconds() - counters.first_use_seconds() - counters.release_seconds()).max(0.0) / host_speed)
}

/// The predicted time on `card` of the work in `counters`, with
/// `host_seconds` of host work (see [`host_seconds`]). Errors:
/// [`Error::InvalidParameter`] for a profile with a rate that is not
/// finite and positive where the counters need it (an f64 peak or
/// evaluation rate of 0 with f64 work), or a negative host time.
pub fn predict(card: &CardProfile, counters: &DeviceCounters, host_seconds: f64) -> Result<Prediction> {
    let bad = |name: &'static str, v: f64| Error::InvalidParameter { name, reason: format!("{} has {v}; a finite positive rate is needed", card.name) };
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if !host_seconds.is_finite() || host_seconds < 0.0 {
        return Err(Error::InvalidParameter { name: "host_seconds", reason: format!("must be finite and non-negative, got {host_seconds}") });
    }
    for (name, v) in [("memory_bandwidth", card.memory_bandwidth), ("link_bandwidth", card.link_bandwidth)] {
        if !positive(v) {
            return Err(bad(name, v));
        }
    }
    for (name, v) in [("wait_latency", card.wait_latency), ("dispatch_overhead", card.dispatch_overhead), ("release_latency", card.release_latency), ("release_per_byte", card.release_per_byte)] {
        if !v.is_finite() || v < 0.0 {
            return Err(bad(name, v));
        }
    }
    let mut p = Prediction { host: host_seconds, ..Prediction::default() };
    for (kind, precision, c) in counters.classes() {
        let (flops, kernel_evaluations) = launched(&c);
        let rate = card.peak(precision) * card.efficiency_of(kind);
        let compute = if flops == 0 {
            0.0
        } else if positive(rate) {
            flops as f64 / rate
        } else {
            return Err(bad(if precision == Precision::F64 { "f64_flops x efficiency" } else { "f32_flops x efficiency" }, rate));
        };
        let evaluations = if kernel_evaluations == 0 {
            0.0
        } else if positive(card.evaluation_rate(precision)) {
            kernel_evaluations as f64 / card.evaluation_rate(precision)
        } else {
            return Err(bad(if precision == Precision::F64 { "f64_evaluations" } else { "f32_evaluations" }, card.evaluation_rate(precision)));
        };
        p.device += compute.max(c.bytes as f64 / card.memory_bandwidth).max(evaluations);
        p.dispatch += c.dispatches as f64 * card.dispatch_overhead;
    }
    p.waits = counters.waits as f64 * card.wait_latency;
    p.release = counters.releases as f64 * card.release_latency + counters.released_bytes as f64 * card.release_per_byte;
    let t = &counters.transfers;
    p.link = (t.host_to_device_bytes + t.device_to_host_bytes + t.descriptor_bytes) as f64 / card.link_bandwidth;
    Ok(p)
}
