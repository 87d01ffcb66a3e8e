//! The GPU engine: owns wgpu (instance, adapter, device, queue), the compute
//! pipelines built from `shaders/*.wgsl`, and the device matrices and
//! reusable buffers. Nothing else in the crate touches wgpu.
//!
//! Device-resident matrices ([`GpuMatrix`]) are `f32` or, where the adapter
//! has `SHADER_F64`, `f64`. Every operation is recorded as dispatches of the
//! one product engine, the row reductions or the element-wise maps, and the
//! recorded dispatches run in few submissions; host-matrix operations
//! upload their operands in `f32`, run the resident operation and read the
//! result back. Outputs larger than the adapter's
//! `max_storage_buffer_binding_size` (or `max_buffer_size`, or a smaller
//! limit forced with [`GpuOptions::max_tile_bytes`]) are computed tile by
//! tile; nothing is ever bound beyond the limit.
//!
//! Modules, by concern: `icd` (the device steps of an incomplete Cholesky
//! decomposition: the arg-max pivot, the fused column), `mklaren` (the
//! device steps of mklaren's fit, whose pivots stay on the device), `buffers` (storage, allocation, upload, download,
//! scratch buffers), [`counters`] ([`TransferStats`], [`DeviceCounters`]: what
//! was moved, waited for, allocated and computed), [`cost`] (a card's cost
//! model over those counters), `problem` (the
//! descriptors the shaders read), `plan` (dispatch planning of products,
//! reductions and maps), `matvec` (the kernel matvec), `submit` (running
//! plans, error scopes), `pipelines` (shader compilation and the pipeline
//! cache), `variants` and `tuner` (product variants and the choice between
//! them), `host` (host-matrix operations), `write` (host values written
//! into existing device matrices), `sparse` (CSR matrices on the device
//! and their products with dense ones).

mod buffers;
pub mod cost;
pub mod counters;
mod host;
mod icd;
mod matvec;
pub(crate) mod mklaren;
mod pipelines;
mod plan;
mod problem;
mod sparse;
mod submit;
mod tuner;
mod variants;
mod write;

pub use buffers::GpuMatrix;
pub use sparse::{GpuCsr, SPARSE_MAX_ROW_NNZ};
pub use counters::{DeviceCounters, DispatchCounters, ShapeKind, TransferStats};
pub use crate::linalg::MatrixProduct;
pub use tuner::{TunedChoice, TuningMode, TUNE_BUDGET, TUNE_CACHE_ENV, TUNE_ENV, VARIANT_ENV};
pub use variants::{Core, DistanceForm, LaneLayout, ProductVariant, CATALOGUE};
pub(crate) use matvec::{KernelTiles, MATVEC_MAX_COLUMNS};
pub(crate) use plan::{Dispatch, ElementwiseMap, Operand, ProductFlags};
pub(crate) use problem::KernelCode;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::precision::Precision;

/// Loop passes one shader invocation may make, over all its loops together,
/// as the dispatch planners count them.
///
/// Mesa's software Vulkan (lavapipe / llvmpipe: gallivm, Mesa 22.3) gives
/// each invocation one counter of 65535 loop passes, set at the shader's
/// entry and decremented at the end of every pass of every loop: not per
/// loop and not per loop entry (a loop of 70000 passes stops after 65535;
/// two loops of 40000 in a row stop the second after 25534; a 1000 x 100
/// nest after 642 outer passes). Once it is spent, every loop leaves after
/// its current pass, with no error: a reduction stops early, an output loop
/// writes its first element only and the rest of the output keeps what the
/// buffer held before. Invocations count apart (every invocation of a
/// workgroup of 64 makes its 65535), and wgpu's loop bounding
/// (`ShaderRuntimeChecks`) changes nothing. Other drivers bound shaders by
/// time instead.
///
/// So no shader loop's trip count is left to the data: the planners cut
/// every dispatch (product depth in chunks that accumulate in the output,
/// row reductions in column chunks that accumulate, the fused kernel
/// matvec's column tiles over more workgroups, and no fused matvec for rows
/// too long for one kernel tile) so that a count of an invocation's passes
/// stays within this budget, half the counter. The count assumes no loop is
/// unrolled, counts `t + 1` for a loop entered for `t` passes (SIMD code
/// makes a last pass to leave) and 1 for a loop in a branch not taken (the
/// branch runs with its lanes masked off). Loops whose trip count no plan
/// controls are bounded in the shader (the polynomial power takes at most
/// 32 passes).
pub(crate) const LOOP_BUDGET: usize = 1 << 15;

/// How to pick and set up a GPU.
#[derive(Debug, Clone)]
pub struct GpuOptions {
    /// Accept a software adapter (e.g. Mesa's lavapipe) when no hardware GPU
    /// exists. Off by default: software Vulkan is slower than the CPU path.
    pub allow_software: bool,
    /// Cap, in bytes, on any one buffer binding (and so on any tile). `None`
    /// uses the adapter's limits. Small values force tiling, for tests.
    pub max_tile_bytes: Option<u64>,
    /// Budget, in bytes, for the device matrices a context holds at once: an
    /// allocation beyond it is [`Error::OutOfMemory`] before any
    /// buffer is created. `None`: the host's physical memory for software
    /// adapters (they allocate from it; Linux `/proc/meminfo`), no budget on
    /// hardware GPUs (the driver reports out-of-memory itself).
    pub max_device_bytes: Option<u64>,
    /// Use tensor cores where the adapter offers cooperative matrices in
    /// the configuration of the cooperative variants (wgpu's
    /// experimental `EXPERIMENTAL_COOPERATIVE_MATRIX`; see
    /// [`Core::Cooperative`]). On by default; the tuner still keeps such a
    /// variant only after checking its results against the CPU. `false`
    /// opens the device without the experimental feature.
    pub tensor_cores: bool,
    /// Build the product shaders with wgpu's runtime bounds checks (every
    /// index clamped). Off by default: their indices are in range by
    /// construction and every problem's reach is checked against its
    /// buffers before it is dispatched; the tests run both builds.
    pub checked_shaders: bool,
    /// Which adapter to open: the position in the ranking (hardware first,
    /// then by kind), wrapping around when there are fewer adapters, so
    /// that the ranks of a node share its GPUs round-robin
    /// ([`crate::Device::for_local_rank`]). `0` (the default) is the best.
    pub adapter: usize,
}

impl Default for GpuOptions {
    fn default() -> Self {
        GpuOptions { allow_software: false, max_tile_bytes: None, max_device_bytes: None, tensor_cores: true, checked_shaders: false, adapter: 0 }
    }
}

/// Physical memory of this machine (Linux), for software adapters' budget.
fn host_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// What kind of adapter a [`GpuContext`] runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterSummary {
    /// The adapter's name, e.g. "NVIDIA H200" or "llvmpipe (LLVM 15.0.6, 256 bits)".
    pub name: String,
    /// Graphics API backend, e.g. "Vulkan".
    pub backend: String,
    /// True for software rasterisers (lavapipe/llvmpipe).
    pub is_software: bool,
    /// The largest binding (bytes) the tiler will use.
    pub max_binding_bytes: u64,
}

/// One GPU adapter as the graphics APIs report it ([`adapters`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterInfo {
    /// The adapter's name, e.g. "NVIDIA H200" or "llvmpipe (LLVM 15.0.6, 256 bits)".
    pub name: String,
    /// Graphics API backend, e.g. "Vulkan".
    pub backend: String,
    /// Kind of device: "DiscreteGpu", "IntegratedGpu", "VirtualGpu",
    /// "Cpu" (a software rasteriser) or "Other".
    pub device_type: String,
    /// Driver name and version information (may be empty).
    pub driver: String,
    /// True for software rasterisers (lavapipe/llvmpipe, SwiftShader), which
    /// [`crate::Device::auto`] passes over unless asked for.
    pub is_software: bool,
    /// Whether the adapter has `SHADER_F64` (device matrices and arithmetic
    /// in `f64`, [`crate::Precision::F64`]).
    pub supports_f64: bool,
}

/// The GPU adapters the graphics APIs report, in the order
/// [`GpuContext::new`] ranks them (discrete, integrated, virtual, other,
/// software; within a kind Vulkan, Metal and DX12 first), so that the
/// position of an adapter is its [`GpuOptions::adapter`]
/// index when software adapters are accepted. Searched as
/// [`GpuContext::new`] searches: Vulkan, Metal and DX12, or the backends
/// `WGPU_BACKEND` names. Opens no device; empty where there is no adapter.
pub fn adapters() -> Vec<AdapterInfo> {
    let instance = wgpu::Instance::new(instance_descriptor());
    let mut found = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
    found.sort_by_key(|a| adapter_rank(&a.get_info()));
    found
        .iter()
        .map(|a| {
            let info = a.get_info();
            AdapterInfo {
                name: info.name.clone(),
                backend: format!("{:?}", info.backend),
                device_type: format!("{:?}", info.device_type),
                driver: format!("{} {}", info.driver, info.driver_info).trim().to_string(),
                is_software: is_software(&info),
                supports_f64: a.features().contains(wgpu::Features::SHADER_F64),
            }
        })
        .collect()
}

/// The instance descriptor of every adapter search: the backends of the
/// environment (`WGPU_BACKEND`), or Vulkan, Metal and DX12 where it names
/// none (compute needs no GL, whose EGL probe logs errors on machines
/// without a GPU; `WGPU_BACKEND=gl` still opts in).
fn instance_descriptor() -> wgpu::InstanceDescriptor {
    let mut descriptor = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    if std::env::var_os("WGPU_BACKEND").is_none() {
        descriptor.backends = wgpu::Backends::PRIMARY;
    }
    descriptor
}

/// Distinguishes contexts, so that a matrix of one device is never used on another.
static NEXT_CONTEXT_ID: AtomicU64 = AtomicU64::new(1);

/// An open GPU: device, queue, cached pipelines and scratch buffers.
///
/// Operations take `&self` and serialise on an internal lock, so one context
/// can be shared between threads (wrap it in an `Arc`, as
/// [`crate::Device`] does).
pub struct GpuContext {
    /// The instance and adapter the device was opened from (kept for
    /// [`GpuContext::wgpu_handles`]).
    instance: wgpu::Instance,
    adapter: wgpu::Adapter,
    /// Whether the device has every feature of [`shareable_features`].
    shares_adapter_features: bool,
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) pipelines: pipelines::Pipelines,
    pub(crate) scratch: Mutex<buffers::Scratch>,
    /// The partials of the last arg-max (`icd`), reused while the next one
    /// has as many blocks in the same precision; held for a whole arg-max.
    pub(crate) argmax_partials: Mutex<Option<GpuMatrix>>,
    /// The fused kernel matvec's partial sums, reused across matvecs.
    pub(crate) matvec_scratch: matvec::MatvecScratch,
    pub(crate) max_binding_bytes: u64,
    pub(crate) max_buffer_bytes: u64,
    pub(crate) max_workgroups: u32,
    pub(crate) storage_offset_alignment: u32,
    pub(crate) counters: counters::Counters,
    pub(crate) id: u64,
    /// The autotuner's state (choices per shape class, forced variants).
    pub(crate) tuner: Mutex<tuner::Tuner>,
    /// Compiled product variants, by catalogue index (compiled on first use).
    pub(crate) variant_pipelines: Mutex<std::collections::HashMap<usize, wgpu::ComputePipeline>>,
    pub(crate) workgroup_limits: variants::WorkgroupLimits,
    /// How the product variants are compiled.
    pub(crate) variant_checks: pipelines::Checks,
    pub(crate) is_software: bool,
    /// Bytes of device matrices alive, and the budget (see [`GpuOptions`]).
    pub(crate) allocated: std::sync::Arc<AtomicU64>,
    pub(crate) device_budget: Option<u64>,
    summary: AdapterSummary,
}

impl std::fmt::Debug for GpuContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuContext").field("adapter", &self.summary).finish()
    }
}

fn adapter_rank(info: &wgpu::AdapterInfo) -> (u8, u8) {
    let kind = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    };
    let backend = match info.backend {
        wgpu::Backend::Vulkan | wgpu::Backend::Metal | wgpu::Backend::Dx12 => 0,
        _ => 1,
    };
    (kind, backend)
}

fn is_software(info: &wgpu::AdapterInfo) -> bool {
    let name = info.name.to_lowercase();
    info.device_type == wgpu::DeviceType::Cpu || name.contains("llvmpipe") || name.contains("lavapipe") || name.contains("swiftshader")
}

/// The adapter's features that need no opt-in: all but the experimental
/// ones (which wgpu enables only on request) and `MAPPABLE_PRIMARY_BUFFERS`
/// (which changes how buffers may be mapped). burn's Wgpu backend opens its
/// own devices with this set.
fn shareable_features(adapter: &wgpu::Adapter) -> wgpu::Features {
    adapter.features().difference(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS | wgpu::Features::all_experimental_mask())
}

/// The features the cooperative-matrix variants need.
const COOPERATIVE_FEATURES: wgpu::Features = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX.union(wgpu::Features::SHADER_F16).union(wgpu::Features::SUBGROUP);

/// [`COOPERATIVE_FEATURES`] where the adapter has them and lists the
/// configuration of `shaders/coop_tile.wgsl` (16 x 16 x 16, f16
/// operands, f32 accumulator).
fn cooperative_features(adapter: &wgpu::Adapter) -> Option<wgpu::Features> {
    if !adapter.features().contains(COOPERATIVE_FEATURES) {
        return None;
    }
    let listed = adapter.cooperative_matrix_properties().iter().any(|p| {
        (p.m_size, p.n_size, p.k_size) == (16, 16, 16) && p.ab_type == wgpu::CooperativeScalarType::F16 && p.cr_type == wgpu::CooperativeScalarType::F32
    });
    listed.then_some(COOPERATIVE_FEATURES)
}

/// Opens the device with `features`, experimental ones included.
fn request_cooperative(adapter: &wgpu::Adapter, features: wgpu::Features, limits: &wgpu::Limits) -> std::result::Result<(wgpu::Device, wgpu::Queue), wgpu::RequestDeviceError> {
    pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("gramian"),
        required_features: features,
        required_limits: limits.clone(),
        // SAFETY: the experimental feature is cooperative matrices alone,
        // used only by the cooperative variants, whose shaders naga
        // validates and whose results the tuner checks against the CPU
        // before it keeps one.
        experimental_features: unsafe { wgpu::ExperimentalFeatures::enabled() },
        ..Default::default()
    }))
}

/// The wgpu handles a [`GpuContext`] runs on, for another wgpu library
/// (such as burn's Wgpu backend, in `eksvd::neural`) to work on the same
/// device and queue. Clones of reference-counted handles.
#[derive(Debug, Clone)]
pub struct WgpuHandles {
    /// The instance the adapter was found on.
    pub instance: wgpu::Instance,
    /// The adapter (physical device).
    pub adapter: wgpu::Adapter,
    /// The logical device gramian's pipelines live on.
    pub device: wgpu::Device,
    /// The queue gramian submits to.
    pub queue: wgpu::Queue,
    /// The graphics API (Vulkan, Metal, ...).
    pub backend: wgpu::Backend,
    /// Whether the device was opened with every feature of the adapter that
    /// needs no opt-in (all but the experimental ones and
    /// `MAPPABLE_PRIMARY_BUFFERS`), as burn expects of a device it is given.
    pub all_features: bool,
}

impl GpuContext {
    /// Opens the best adapter: a discrete GPU before an integrated one; a
    /// software adapter only when `options.allow_software`. The backends
    /// searched are Vulkan, Metal and DX12, or those `WGPU_BACKEND` names
    /// (e.g. `gl`).
    ///
    /// Errors: [`Error::NoGpuAdapter`] when no acceptable adapter
    /// exists, [`Error::Gpu`] when the device cannot be opened.
    pub fn new(options: &GpuOptions) -> Result<Self> {
        let instance = wgpu::Instance::new(instance_descriptor());
        let mut adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
        adapters.retain(|a| options.allow_software || !is_software(&a.get_info()));
        adapters.sort_by_key(|a| adapter_rank(&a.get_info()));
        let count = adapters.len().max(1);
        let Some(adapter) = adapters.into_iter().nth(options.adapter % count) else {
            return Err(Error::NoGpuAdapter(if options.allow_software {
                "no Vulkan/Metal/DX12/GL adapter, hardware or software".into()
            } else {
                "no hardware adapter (software adapters were not accepted)".into()
            }));
        };
        let info = adapter.get_info();
        let limits = adapter.limits();
        // Our shaders need only f64 (where the adapter has it). The device is
        // opened with every feature of the adapter that needs no opt-in
        // (`shareable_features`), as burn's Wgpu backend expects of a device
        // it is given (it reads the adapter's features to pick its kernels),
        // so that one device can serve both ([`GpuContext::wgpu_handles`]);
        // should an adapter refuse that set, the minimal one is used.
        let request = |features: wgpu::Features| {
            pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
                label: Some("gramian"),
                required_features: features,
                required_limits: limits.clone(),
                ..Default::default()
            }))
        };
        let wide = shareable_features(&adapter);
        // Cooperative matrices (tensor cores) are experimental in wgpu: asked
        // for only where the adapter lists the configuration the
        // cooperative variants use, and dropped if the device refuses them.
        let with_coop = cooperative_features(&adapter).filter(|_| options.tensor_cores).and_then(|coop| match request_cooperative(&adapter, wide | coop, &limits) {
            Ok(pair) => Some((wide | coop, pair)),
            Err(e) => {
                log::info!("gramian GPU: {} refused cooperative matrices ({e}); opening it without them", info.name);
                None
            }
        });
        let (features, (device, queue)) = match with_coop {
            Some(opened) => opened,
            None => match request(wide) {
                Ok(pair) => (wide, pair),
                Err(e) => {
                    log::info!("gramian GPU: {} refused the device with all its features ({e}); opening it with f64 only", info.name);
                    let narrow = adapter.features() & wgpu::Features::SHADER_F64;
                    (narrow, request(narrow).map_err(|e| Error::Gpu(format!("request_device on {}: {e}", info.name)))?)
                }
            },
        };
        let cooperative = features.contains(COOPERATIVE_FEATURES);

        let adapter_binding = limits.max_storage_buffer_binding_size.min(limits.max_buffer_size);
        let max_binding_bytes = match options.max_tile_bytes {
            Some(cap) => cap.clamp(256, adapter_binding),
            None => adapter_binding,
        } & !31; // whole vec4s of either precision in a block (`zeros`)
        let variant_checks = if options.checked_shaders { pipelines::Checks::Bounds } else { pipelines::Checks::Trusted };
        let pipelines = pipelines::build_pipelines(&device, features.contains(wgpu::Features::SHADER_F64), variant_checks);
        let summary = AdapterSummary {
            name: info.name.clone(),
            backend: format!("{:?}", info.backend),
            is_software: is_software(&info),
            max_binding_bytes,
        };
        log::info!("gramian GPU: {} ({:?}, {:?}), tiles up to {} bytes, f64 {}, cooperative matrices {}", info.name, info.backend, info.device_type, max_binding_bytes, pipelines.product_f64.is_some(), cooperative);
        let adapter_key = format!("{}|{:?}|{:04x}:{:04x}|{}|{}", info.name, info.backend, info.vendor, info.device, info.driver, info.driver_info);
        let tuner = tuner::Tuner::from_env(adapter_key)?;
        let mut variant_pipelines = std::collections::HashMap::new();
        variant_pipelines.insert(variants::default_index(Precision::F32), pipelines.kernel_matrix.clone());
        if let Some(p) = &pipelines.product_f64 {
            variant_pipelines.insert(variants::default_index(Precision::F64), p.clone());
        }
        let workgroup_limits = variants::WorkgroupLimits {
            storage_bytes: limits.max_compute_workgroup_storage_size,
            invocations: limits.max_compute_invocations_per_workgroup,
            size_x: limits.max_compute_workgroup_size_x,
            size_y: limits.max_compute_workgroup_size_y,
            cooperative,
        };
        Ok(GpuContext {
            instance,
            adapter,
            shares_adapter_features: features.contains(wide),
            device,
            queue,
            pipelines,
            scratch: Mutex::new(buffers::Scratch::default()),
            matvec_scratch: matvec::MatvecScratch::default(),
            argmax_partials: Mutex::new(None),
            max_binding_bytes,
            max_buffer_bytes: limits.max_buffer_size,
            max_workgroups: limits.max_compute_workgroups_per_dimension,
            storage_offset_alignment: limits.min_storage_buffer_offset_alignment,
            counters: counters::Counters::default(),
            id: NEXT_CONTEXT_ID.fetch_add(1, Ordering::Relaxed),
            tuner: Mutex::new(tuner),
            variant_pipelines: Mutex::new(variant_pipelines),
            workgroup_limits,
            variant_checks,
            is_software: summary.is_software,
            allocated: Default::default(),
            device_budget: options.max_device_bytes.or_else(|| if summary.is_software { host_memory_bytes() } else { None }),
            summary,
        })
    }

    /// The adapter this context runs on.
    pub fn adapter(&self) -> &AdapterSummary {
        &self.summary
    }

    /// The wgpu instance, adapter, device and queue of this context, to run
    /// another wgpu library's work on the same device and queue (gramian's
    /// own work takes `&self` and is unaffected). Work submitted through them
    /// is ordered with gramian's on the one queue.
    pub fn wgpu_handles(&self) -> WgpuHandles {
        WgpuHandles {
            instance: self.instance.clone(),
            adapter: self.adapter.clone(),
            device: self.device.clone(),
            queue: self.queue.clone(),
            backend: self.adapter.get_info().backend,
            all_features: self.shares_adapter_features,
        }
    }

    /// A number that identifies this context within the process (never
    /// reused): two handles with the same id share one device.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The product variants this adapter can run (its precision's default
    /// first), from [`CATALOGUE`].
    pub fn product_variants(&self) -> Vec<&'static ProductVariant> {
        CATALOGUE.iter().filter(|v| v.fits(&self.workgroup_limits) && self.supports(v.precision)).collect()
    }

    /// Forces the product variant called `name` for every product of its
    /// precision from now on (no tuning), or with `None` returns to the
    /// tuner. Errors: [`Error::InvalidParameter`] for an unknown
    /// name, [`Error::Unsupported`] for one this adapter cannot run.
    pub fn force_variant(&self, name: Option<&str>) -> Result<()> {
        if let Some(name) = name {
            let v = CATALOGUE.iter().find(|v| v.name == name).ok_or_else(|| Error::InvalidParameter { name: "variant", reason: format!("no product variant called {name:?}") })?;
            if !self.product_variants().contains(&v) {
                return Err(Error::Unsupported(format!("variant {name} on {} (workgroup limits or precision)", self.summary.name)));
            }
        }
        self.tuner.lock().map_err(|_| Error::Gpu("tuner lock poisoned".into()))?.force(name)
    }

    /// Sets how the tuner chooses from now on (the environment's
    /// `GRAMIAN_TUNE` sets the initial mode). `Retune` forgets the choices
    /// made or loaded so far.
    pub fn set_tuning_mode(&self, mode: TuningMode) -> Result<()> {
        let mut t = self.tuner.lock().map_err(|_| Error::Gpu("tuner lock poisoned".into()))?;
        t.set_mode(mode);
        Ok(())
    }

    /// Bytes of device matrices this context holds now (views count once).
    pub fn device_bytes_held(&self) -> u64 {
        self.allocated.load(Ordering::Relaxed)
    }

    /// The tuner's choices so far: made in this process (with every
    /// variant's time), then those loaded from the disk cache.
    pub fn tuned_choices(&self) -> Vec<TunedChoice> {
        self.tuner.lock().map(|t| t.choices()).unwrap_or_default()
    }
}

/// A context on any adapter, software ones included, for the unit tests:
/// `None` (the test skips) without one, a panic when `GRAMIAN_REQUIRE_GPU=1`.
#[cfg(test)]
pub(crate) fn test_context() -> Option<GpuContext> {
    match GpuContext::new(&GpuOptions { allow_software: true, ..Default::default() }) {
        Ok(ctx) => Some(ctx),
        Err(e) if std::env::var("GRAMIAN_REQUIRE_GPU").as_deref() == Ok("1") => panic!("GRAMIAN_REQUIRE_GPU=1 but no GPU adapter: {e}"),
        Err(e) => {
            eprintln!("SKIPPED: no GPU adapter ({e})");
            None
        }
    }
}
