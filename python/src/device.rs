//! The `device` argument: `"auto"`, `"cpu"` or `"gpu"`.
//!
//! `"auto"` is [`Device::auto`]: a hardware GPU when one exists, otherwise
//! the CPU, quietly (a software Vulkan adapter only with
//! `GRAMIAN_DEVICE=gpu`). `"gpu"` is [`Device::gpu`]: any adapter, software
//! ones included, and `gramian.exceptions.DeviceError` when there is none.
//! The GPU context is opened once per process and shared by every call.

use std::sync::{Mutex, OnceLock};

use gramian::{Device, WorkingPrecision};
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

/// The `precision` argument of the estimators: `"auto"`, `"float32"` or
/// `"float64"` ([`WorkingPrecision`]; a fit resolves it against its device
/// with [`Device::working_precision`]).
pub fn working_precision(py: Python<'_>, name: &str) -> PyResult<WorkingPrecision> {
    match name {
        "auto" => Ok(WorkingPrecision::Auto),
        "float32" => Ok(WorkingPrecision::F32),
        "float64" => Ok(WorkingPrecision::F64),
        other => Err(errors::invalid(py, format!("precision must be 'auto', 'float32' or 'float64', got {other:?}"))),
    }
}

/// A one-line description of the device `device` resolves to (adapter name
/// and backend for a GPU, "CPU ..." otherwise).
#[pyfunction]
pub fn device_description(py: Python<'_>, device: &str) -> PyResult<String> {
    Ok(resolve(py, device)?.describe())
}

/// The GPU adapters the graphics APIs report, in the order `device="gpu"`
/// prefers them ([`gramian::gpu::adapters`]: discrete, integrated, virtual,
/// software): for each, a tuple `(name, backend, device_type, driver,
/// software, float64)` with the backend in lower case (e.g. "vulkan"). An
/// empty list where there is no adapter.
#[pyfunction]
pub fn adapters(py: Python<'_>) -> Vec<(String, String, String, String, bool, bool)> {
    py.detach(|| gramian::gpu::adapters().into_iter().map(|a| (a.name, a.backend.to_lowercase(), a.device_type, a.driver, a.is_software, a.supports_f64)).collect())
}
