//! The adapter listing ([`gramian::gpu::adapters`]): every adapter the
//! device search can open, in its ranking, with what the contexts report.

use crate::common;

use gramian::gpu::adapters;
use gramian::{GpuOptions, Precision};

#[test]
fn the_listing_starts_with_the_adapter_a_gpu_device_opens() {
    let Some(device) = common::gpu_device(GpuOptions::default()) else { return };
    let listed = adapters();
    assert!(!listed.is_empty(), "a GPU opened, but the listing is empty");
    let gramian::Device::Gpu(ctx) = &device else { panic!("gpu_device returned the CPU") };
    let first = &listed[0];
    assert_eq!((&first.name, &first.backend, first.is_software), (&ctx.adapter().name, &ctx.adapter().backend, ctx.adapter().is_software));
    assert_eq!(first.supports_f64, device.supports(Precision::F64), "{first:?}");
    // Hardware before software, as the device search ranks them.
    let first_software = listed.iter().position(|a| a.is_software).unwrap_or(listed.len());
    assert!(listed[first_software..].iter().all(|a| a.is_software), "{listed:?}");
    for a in &listed {
        assert!(!a.name.is_empty() && !a.backend.is_empty(), "{a:?}");
        assert!(["DiscreteGpu", "IntegratedGpu", "VirtualGpu", "Cpu", "Other"].contains(&a.device_type.as_str()), "{a:?}");
        if a.device_type == "Cpu" {
            assert!(a.is_software, "{a:?}");
        }
    }
}

/// On Mesa's software Vulkan (lavapipe, as the test machines run) the
/// listing names the software adapter.
#[test]
fn lavapipe_is_listed_as_software() {
    let Some(_device) = common::gpu_device(GpuOptions::default()) else { return };
    let listed = adapters();
    let on_lavapipe = std::env::var("VK_ICD_FILENAMES").is_ok_and(|f| f.contains("lvp"));
    if on_lavapipe {
        assert!(listed.iter().any(|a| a.is_software && a.name.contains("llvmpipe")), "{listed:?}");
    }
}
