//! Bad input gets a typed error on both paths, never a panic or a NaN.

use crate::common;

use common::gpu_device;
use gramian::{Error, Device, GpuOptions, Kernel, MatrixProduct};
use nalgebra::DMatrix;

fn devices() -> Vec<Device> {
    let mut d = vec![Device::Cpu];
    if let Some(g) = gpu_device(GpuOptions::default()) {
        d.push(g);
    }
    d
}

#[test]
fn empty_mismatched_and_nonfinite_inputs() {
    let k = Kernel::rbf(1.0).unwrap();
    let x = DMatrix::<f64>::from_element(4, 3, 0.5);
    let z = DMatrix::<f64>::from_element(5, 2, 0.5);
    let empty = DMatrix::<f64>::zeros(0, 3);
    let mut nan = x.clone();
    nan[(2, 1)] = f64::NAN;
    let mut inf = x.clone();
    inf[(3, 0)] = f64::INFINITY;
    for dev in devices() {
        assert!(matches!(dev.kernel_matrix(&k, &x, &z), Err(Error::DimensionMismatch { .. })));
        assert!(matches!(dev.kernel_matrix(&k, &empty, &x), Err(Error::Empty { .. })));
        assert_eq!(dev.kernel_matrix(&k, &nan, &x), Err(Error::NonFinite { what: "x", row: 2, col: 1 }));
        assert!(matches!(dev.kernel_matrix(&k, &x, &inf), Err(Error::NonFinite { what: "z", .. })));
        assert!(matches!(dev.gram(&nan), Err(Error::NonFinite { .. })));
        assert!(matches!(dev.matmul(&x, &z, MatrixProduct::AB), Err(Error::DimensionMismatch { .. })));
        let v = DMatrix::<f64>::from_element(3, 1, 1.0);
        assert!(matches!(dev.kernel_matvec(&k, &x, &x, &v), Err(Error::DimensionMismatch { .. })));
        assert!(matches!(dev.kernel_column(&k, &x, &[1.0, 2.0]), Err(Error::DimensionMismatch { .. })));
        assert!(matches!(dev.kernel_column_of(&k, &x, 4), Err(Error::IndexOutOfRange { .. })));
        assert!(matches!(dev.batched_matmul(&[(&x, &z)], MatrixProduct::AB), Err(Error::DimensionMismatch { .. })));
    }
}

#[test]
fn invalid_kernel_parameters() {
    let x = DMatrix::<f64>::from_element(4, 3, 0.5);
    for bad in [Kernel::Rbf { gamma: 0.0 }, Kernel::Laplacian { gamma: -1.0 }, Kernel::Polynomial { gamma: 1.0, coef0: 0.0, degree: 0 }] {
        for dev in devices() {
            assert!(matches!(dev.kernel_matrix(&bad, &x, &x), Err(Error::InvalidParameter { .. })), "{bad:?}");
        }
    }
    assert!(matches!(Kernel::rbf(-0.1), Err(Error::InvalidParameter { name: "gamma", .. })));
    assert!(matches!(Kernel::polynomial(1.0, 1.0, 0), Err(Error::InvalidParameter { name: "degree", .. })));
}

#[test]
fn gpu_request_without_adapter_is_a_typed_error() {
    // Point the Vulkan loader at no driver and allow only Vulkan: no adapter.
    // Run in a child process so the environment change stays local.
    if std::env::var("GRAMIAN_CHILD_NO_ADAPTER").is_ok() {
        let r = Device::gpu();
        assert!(matches!(r, Err(Error::NoGpuAdapter(_))), "{r:?}");
        assert!(!Device::auto().is_gpu());
        return;
    }
    // By its full path in the integration binary (with the bare name the
    // child ran no test and passed, found 2026-12-05).
    common::run_test_in_child("errors::gpu_request_without_adapter_is_a_typed_error", false, |c| {
        c.env("GRAMIAN_CHILD_NO_ADAPTER", "1")
            .env("WGPU_BACKEND", "vulkan")
            .env("VK_ICD_FILENAMES", "/nonexistent/icd.json")
            .env("VK_DRIVER_FILES", "/nonexistent/icd.json")
            .env_remove(gramian::device::DEVICE_ENV)
    });
}
