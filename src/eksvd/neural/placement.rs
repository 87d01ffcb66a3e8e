//! Where Neural eKSVD runs: burn devices made from gramian's own device
//! selection, so that burn's training and gramian's WGSL kernels share one
//! wgpu instance, adapter, device and queue.
//!
//! * [`burn_device`]: the burn device of a gramian [`crate::Device`]
//!   (`Device::Cpu` -> burn's Flex backend; `Device::Gpu(ctx)` -> burn's
//!   Wgpu backend registered on `ctx`'s wgpu handles, once per context).
//! * [`shared_gpu`]: the process's GPU for [`NeuralBackend::Wgpu`] by name:
//!   opened once as [`crate::Device::gpu`] opens one (a hardware adapter
//!   first; a software one such as lavapipe only because a GPU was asked
//!   for by name), and usable for gramian's kernels too.

use std::sync::{Arc, Mutex, OnceLock};

use burn::tensor::wgpu::WgpuSetup;
use burn::tensor::Device as BurnDevice;

use super::Result;
#[cfg(doc)]
use super::NeuralBackend;
use crate::error::Error;
use crate::gpu::GpuContext;
use crate::Device;

/// Contexts registered with burn (by [`GpuContext::id`]) and their burn
/// device. burn cannot unregister a runtime and must not register the same
/// handles twice, so each context is registered once and kept.
static REGISTERED: Mutex<Vec<(u64, BurnDevice)>> = Mutex::new(Vec::new());

/// The burn device (without autodiff) that runs on `device`: burn's Flex
/// backend for [`Device::Cpu`] (threaded matrix products, SIMD kernels); for [`Device::Gpu`] burn's Wgpu backend on
/// the context's own wgpu device and queue ([`GpuContext::wgpu_handles`]),
/// registered with burn on first use and reused afterwards.
///
/// Errors: [`Error::BackendUnavailable`] when burn refuses the handles
/// (e.g. the device was opened without the adapter's features, see
/// [`crate::gpu::WgpuHandles::all_features`]).
pub fn burn_device(device: &Device) -> Result<BurnDevice> {
    match device {
        Device::Cpu => Ok(BurnDevice::flex()),
        Device::Gpu(ctx) => wgpu_on(ctx),
    }
}

fn wgpu_on(ctx: &GpuContext) -> Result<BurnDevice> {
    let unavailable = |reason: String| Error::BackendUnavailable { backend: "wgpu", reason };
    let mut registered = REGISTERED.lock().map_err(|_| unavailable("registry lock poisoned".into()))?;
    if let Some((_, d)) = registered.iter().find(|(id, _)| *id == ctx.id()) {
        return Ok(d.clone());
    }
    let h = ctx.wgpu_handles();
    if !h.all_features {
        return Err(unavailable(format!("gramian's device on {} was opened without the adapter's features, which burn's kernels assume", ctx.adapter().name)));
    }
    let setup = WgpuSetup { instance: h.instance, adapter: h.adapter, device: h.device, queue: h.queue, backend: h.backend };
    let d = BurnDevice::wgpu_options().setup(setup).init().map_err(|e| unavailable(format!("burn refused gramian's device on {}: {e}", ctx.adapter().name)))?;
    registered.push((ctx.id(), d.clone()));
    Ok(d)
}

/// The GPU [`NeuralBackend::Wgpu`] names: opened once per process like [`Device::gpu`] (hardware adapters first, a
/// software one accepted), and shared: gramian's kernels may run on the
/// returned device while burn trains on it.
///
/// Errors: [`Error::BackendUnavailable`] when there is no adapter.
pub fn shared_gpu() -> Result<Device> {
    static GPU: OnceLock<std::result::Result<Arc<GpuContext>, String>> = OnceLock::new();
    let ctx = GPU
        .get_or_init(|| match Device::gpu() {
            Ok(Device::Gpu(ctx)) => Ok(ctx),
            Ok(Device::Cpu) => Err("Device::gpu returned the CPU path".into()),
            Err(e) => Err(e.to_string()),
        })
        .clone()
        .map_err(|reason| Error::BackendUnavailable { backend: "wgpu", reason })?;
    Ok(Device::Gpu(ctx))
}
