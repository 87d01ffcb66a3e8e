//! The cost model (`gramian::gpu::cost`): its arithmetic on a synthetic
//! counter set, exactly, and predictions that never fall as flops or bytes
//! grow. No device needed.

use gramian::gpu::cost::{host_seconds, predict, CardProfile};
use gramian::gpu::{DeviceCounters, ShapeKind};
use gramian::{Error, Precision};

/// A card with round numbers: 1 TFLOP/s f32, 0.5 f64, 1 TB/s memory,
/// 10 GB/s link, 1 ms per wait, 10 us per dispatch, 1e10 kernel
/// evaluations per second in f32 and 1e9 in f64, 2 ms per released matrix
/// and 1 ms per released GB.
fn card() -> CardProfile {
    CardProfile {
        name: "round".into(),
        f32_flops: 1e12,
        f64_flops: 0.5e12,
        memory_bandwidth: 1e12,
        link_bandwidth: 1e10,
        wait_latency: 1e-3,
        dispatch_overhead: 1e-5,
        f32_evaluations: 1e10,
        f64_evaluations: 1e9,
        efficiency: [0.5, 0.25, 0.5, 0.25, 0.1, 0.1],
        release_latency: 2e-3,
        release_per_byte: 1e-12,
    }
}

fn counters() -> DeviceCounters {
    let mut c = DeviceCounters::default();
    // Compute-bound: 1e12 / (0.25 x 1e12) = 4 s (bytes 1e9 / 1e12 = 1 ms).
    *c.class_mut(ShapeKind::KernelMatrix, Precision::F32) = gramian::gpu::DispatchCounters { dispatches: 10, workgroups: 100, flops: 1_000_000_000_000, bytes: 1_000_000_000, kernel_evaluations: 5, launched_flops: 0, launched_evaluations: 0 };
    // Memory-bound: 2e9 / 1e12 = 2 ms (flops 1e6 / (0.1 x 0.5e12) = 20 us).
    *c.class_mut(ShapeKind::RowReduce, Precision::F64) = gramian::gpu::DispatchCounters { dispatches: 90, workgroups: 90, flops: 1_000_000, bytes: 2_000_000_000, kernel_evaluations: 0, launched_flops: 0, launched_evaluations: 0 };
    c.waits = 7;
    c.transfers.host_to_device_bytes = 3_000_000_000;
    c.transfers.device_to_host_bytes = 1_000_000_000;
    c.transfers.descriptor_bytes = 1_000_000;
    c.blocked_nanos = 250_000_000;
    c.releases = 5;
    c.released_bytes = 1_000_000_000;
    c.release_nanos = 100_000_000;
    c
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * b.abs().max(1.0)
}

#[test]
fn the_model_adds_up_as_documented() {
    let c = counters();
    // Less blocked (0.25 s) and released (0.1 s), over the host speed.
    let host = host_seconds(1.25, &c, 2.0).unwrap();
    assert!(close(host, 0.45), "(1.25 - 0.25 - 0.1) / 2 = {host}");
    let p = predict(&card(), &c, host).unwrap();
    assert!(close(p.device, 4.0 + 2e-3), "{p:?}");
    assert!(close(p.dispatch, 100.0 * 1e-5), "{p:?}");
    assert!(close(p.waits, 7e-3), "{p:?}");
    assert!(close(p.link, 4.001e9 / 1e10), "{p:?}");
    assert!(close(p.host, 0.45));
    // 5 releases x 2 ms + 1 GB x 1 ms per GB.
    assert!(close(p.release, 0.011), "{p:?}");
    assert!(close(p.total(), 4.002 + 1e-3 + 7e-3 + 0.4001 + 0.45 + 0.011), "{}", p.total());
    // The presets release at a latency per matrix and nothing per byte.
    let h200 = predict(&CardProfile::h200(), &c, 0.0).unwrap();
    assert!(close(h200.release, 5.0 * gramian::gpu::cost::H200_RELEASE_LATENCY), "{h200:?}");
    // No work: the host time alone.
    assert_eq!(predict(&card(), &DeviceCounters::default(), 0.0).unwrap().total(), 0.0);
}

/// A class whose kernel evaluations take longer than its flops and bytes
/// is bounded by them (`E / R`), in the rate of its precision; a profile
/// without an f64 evaluation rate cannot predict f64 evaluations.
#[test]
fn kernel_evaluations_bound_a_class_at_their_rate() {
    let mut c = DeviceCounters::default();
    // 1e9 flops / (0.25 x 0.5e12) = 8 ms; 1e6 bytes: 1 us; 1e8 f64
    // evaluations / 1e9 per second = 100 ms.
    *c.class_mut(ShapeKind::Matvec, Precision::F64) = gramian::gpu::DispatchCounters { dispatches: 1, workgroups: 1, flops: 1_000_000_000, bytes: 1_000_000, kernel_evaluations: 100_000_000, launched_flops: 0, launched_evaluations: 0 };
    let p = predict(&card(), &c, 0.0).unwrap();
    assert!(close(p.device, 0.1), "{p:?}");
    // The same in f32: 1e8 / 1e10 = 10 ms against 1e9 / (0.25 x 1e12) = 4 ms.
    let mut c32 = DeviceCounters::default();
    *c32.class_mut(ShapeKind::Matvec, Precision::F32) = c.class(ShapeKind::Matvec, Precision::F64);
    assert!(close(predict(&card(), &c32, 0.0).unwrap().device, 0.01));
    // Few evaluations: the flops decide again.
    c.class_mut(ShapeKind::Matvec, Precision::F64).kernel_evaluations = 1_000_000;
    assert!(close(predict(&card(), &c, 0.0).unwrap().device, 8e-3));
    let no_rate = CardProfile { f64_evaluations: 0.0, ..card() };
    assert!(matches!(predict(&no_rate, &c, 0.0), Err(Error::InvalidParameter { .. })));
    // The H200 preset's f64 rate reproduces the eKSVD Dual row it was
    // fitted to: 15 Lanczos products of 6 N^2 evaluations at N = 10^5, 43.0 s.
    let mut dual = DeviceCounters::default();
    let products = 15u64;
    let n = 100_000u64;
    *dual.class_mut(ShapeKind::Matvec, Precision::F64) = gramian::gpu::DispatchCounters {
        dispatches: 6 * products,
        workgroups: 0,
        flops: products * 6 * n * n * (3 * 4 + 2 * 8),
        bytes: products * 6 * 8 * (n * 4 + n * 8),
        kernel_evaluations: products * 6 * n * n,
        launched_flops: 0,
        launched_evaluations: 0,
    };
    let t = predict(&CardProfile::h200(), &dual, 0.0).unwrap().total();
    assert!((t / 42.996 - 1.0).abs() < 0.01, "predicted {t} s against 42.996 s measured");
}

#[test]
fn predictions_grow_with_flops_and_bytes() {
    for profile in [card(), CardProfile::h200(), CardProfile::h100()] {
        for step in 0..12u64 {
            let mut c = counters();
            let k = c.class_mut(ShapeKind::KernelMatrix, Precision::F32);
            k.flops = step * step * 100_000_000_000;
            k.bytes = (11 - step.min(11)) * 1_000_000_000 + step * step * step * 1_000_000_000;
            let t = predict(&profile, &c, 0.0).unwrap().total();
            let mut more_flops = c;
            more_flops.class_mut(ShapeKind::KernelMatrix, Precision::F32).flops += 1_000_000_000;
            let mut more_bytes = c;
            more_bytes.class_mut(ShapeKind::RowReduce, Precision::F64).bytes += 1_000_000_000;
            assert!(predict(&profile, &more_flops, 0.0).unwrap().total() >= t);
            assert!(predict(&profile, &more_bytes, 0.0).unwrap().total() >= t);
        }
    }
}

#[test]
fn the_presets_and_bad_profiles() {
    assert_eq!(CardProfile::preset("H200").unwrap(), CardProfile::h200());
    assert_eq!(CardProfile::preset("h100").unwrap().memory_bandwidth, 3.35e12);
    assert!(matches!(CardProfile::preset("a100"), Err(Error::InvalidParameter { .. })));
    let c = counters();
    let no_f64 = CardProfile { f64_flops: 0.0, ..card() };
    assert!(matches!(predict(&no_f64, &c, 0.0), Err(Error::InvalidParameter { .. })));
    let no_link = CardProfile { link_bandwidth: f64::NAN, ..card() };
    assert!(matches!(predict(&no_link, &c, 0.0), Err(Error::InvalidParameter { .. })));
    let negative_release = CardProfile { release_per_byte: -1.0, ..card() };
    assert!(matches!(predict(&negative_release, &c, 0.0), Err(Error::InvalidParameter { .. })));
    assert!(matches!(predict(&card(), &c, -1.0), Err(Error::InvalidParameter { .. })));
    assert!(matches!(host_seconds(f64::INFINITY, &c, 1.0), Err(Error::InvalidParameter { .. })));
    assert!(matches!(host_seconds(1.0, &c, 0.0), Err(Error::InvalidParameter { .. })));
    // The blocked time never makes the host time negative.
    assert_eq!(host_seconds(0.1, &c, 1.0).unwrap(), 0.0);
}

#[test]
fn measuring_the_current_adapter_gives_a_usable_profile() {
    let Some(gramian::Device::Gpu(ctx)) = crate::common::gpu_device(gramian::GpuOptions::default()) else { return };
    let before = ctx.device_counters();
    let p = CardProfile::measure(&ctx).unwrap();
    assert_eq!(ctx.device_counters(), before, "calibration is not counted");
    assert!(p.f32_flops > 0.0 && p.memory_bandwidth > 0.0 && p.link_bandwidth > 0.0 && p.wait_latency > 0.0, "{p:?}");
    assert!(p.release_latency.is_finite() && p.release_latency >= 0.0 && p.release_per_byte.is_finite() && p.release_per_byte >= 0.0, "{p:?}");
    assert!(predict(&p, &counters(), 0.0).is_ok() || p.f64_flops == 0.0);
    eprintln!("{p:?}");
}
