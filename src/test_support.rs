//! What the library's unit tests share: the seed of a randomized test and
//! the GPU they run on.

use crate::device::Device;
use crate::precision::Precision;

/// The seed of a randomized test: `GRAMIAN_TEST_SEED`, else random
/// (printed, to replay a failure).
pub(crate) fn seed() -> u64 {
    let seed = std::env::var("GRAMIAN_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    eprintln!("test seed: {seed} (replay with GRAMIAN_TEST_SEED={seed})");
    seed
}

/// A GPU with `f64` (software ones included); `None` (the test's GPU part
/// skipped) without one, unless `GRAMIAN_REQUIRE_GPU=1`, where that fails.
pub(crate) fn f64_gpu() -> Option<Device> {
    match Device::gpu_with(&crate::GpuOptions { allow_software: true, ..Default::default() }) {
        Ok(d) if d.supports(Precision::F64) => Some(d),
        Ok(_) | Err(_) if std::env::var("GRAMIAN_REQUIRE_GPU").as_deref() == Ok("1") => panic!("GRAMIAN_REQUIRE_GPU=1 but no GPU adapter with f64"),
        _ => {
            eprintln!("SKIPPED on a GPU: no GPU adapter with f64");
            None
        }
    }
}
