//! The `device` argument: `"auto"`, `"cpu"` or `"gpu"`.
//!
//! `"auto"` is [`Device::auto`]: a hardware GPU when one exists, otherwise
//! the CPU, quietly (a software Vulkan adapter only with
//! `GRAMIAN_DEVICE=gpu`). `"gpu"` is [`Device::gpu`]: any adapter, software
//! ones included, and `gramian.exceptions.DeviceError` when there is none.
//! The GPU context is opened once per process and shared by every call.

use std::sync::{Mutex, OnceLock};

use gramian::Device;
use pyo3::prelude::*;

use crate::errors;

/// The devices opened so far (`auto`, `gpu`): opening one costs an adapter
/// probe and a device creation, so it happens once.
static AUTO: OnceLock<Device> = OnceLock::new();
static GPU: Mutex<Option<Device>> = Mutex::new(None);

/// The device a `device` argument names.
pub fn resolve(py: Python<'_>, name: &str) -> PyResult<Device> {
    match name {
        "cpu" => Ok(Device::cpu()),
        "auto" => Ok(py.detach(|| AUTO.get_or_init(Device::auto).clone())),
        "gpu" => errors::run(py, || {
            let mut held = GPU.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if let Some(device) = held.as_ref() {
                return Ok(device.clone());
            }
            let device = Device::gpu()?;
            *held = Some(device.clone());
            Ok(device)
        }),
        other => Err(errors::invalid(py, format!("device must be 'auto', 'cpu' or 'gpu', got {other:?}"))),
    }
}

/// A one-line description of the device `device` resolves to (adapter name
/// and backend for a GPU, "CPU ..." otherwise).
#[pyfunction]
pub fn device_description(py: Python<'_>, device: &str) -> PyResult<String> {
    Ok(resolve(py, device)?.describe())
}

/// The GPU adapters the graphics APIs report, in the order `device="gpu"`
/// prefers them (discrete, integrated, virtual, software): for each, a
/// tuple `(name, backend, device_type, driver, software)`. Searched as the
/// library does: Vulkan, Metal and DX12, or the backends `WGPU_BACKEND`
/// names. An empty list where there is no adapter.
#[pyfunction]
pub fn adapters(py: Python<'_>) -> Vec<(String, String, String, String, bool)> {
    py.detach(|| {
        let mut descriptor = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
        if std::env::var_os("WGPU_BACKEND").is_none() {
            descriptor.backends = wgpu::Backends::PRIMARY;
        }
        let instance = wgpu::Instance::new(descriptor);
        let mut infos: Vec<wgpu::AdapterInfo> = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all())).iter().map(|a| a.get_info()).collect();
        let rank = |t: wgpu::DeviceType| match t {
            wgpu::DeviceType::DiscreteGpu => 0,
            wgpu::DeviceType::IntegratedGpu => 1,
            wgpu::DeviceType::VirtualGpu => 2,
            wgpu::DeviceType::Other => 3,
            wgpu::DeviceType::Cpu => 4,
        };
        infos.sort_by_key(|i| rank(i.device_type));
        infos
            .into_iter()
            .map(|i| {
                let name = i.name.to_lowercase();
                let software = i.device_type == wgpu::DeviceType::Cpu || name.contains("llvmpipe") || name.contains("lavapipe") || name.contains("swiftshader");
                (i.name.clone(), i.backend.to_string(), format!("{:?}", i.device_type), format!("{} {}", i.driver, i.driver_info).trim().to_string(), software)
            })
            .collect()
    })
}
