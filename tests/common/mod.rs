//! Shared helpers for integration tests.
#![allow(dead_code)]

use gramian::{Device, GpuOptions};
use nalgebra::DMatrix;
use rand::{rngs::StdRng, Rng, SeedableRng};

/// Environment variable that makes GPU tests fail, not skip, without an adapter.
pub const REQUIRE_GPU_ENV: &str = "GRAMIAN_REQUIRE_GPU";

/// A GPU device (software adapters accepted) for tests. Without an adapter:
/// panics when `GRAMIAN_REQUIRE_GPU=1`, otherwise prints a skip message and
/// returns `None`.
pub fn gpu_device(options: GpuOptions) -> Option<Device> {
    let options = GpuOptions { allow_software: true, ..options };
    match Device::gpu_with(&options) {
        Ok(d) => Some(d),
        Err(e) => {
            if std::env::var(REQUIRE_GPU_ENV).as_deref() == Ok("1") {
                panic!("{REQUIRE_GPU_ENV}=1 but no GPU adapter: {e}");
            }
            eprintln!("SKIPPED: no GPU adapter ({e}); set {REQUIRE_GPU_ENV}=1 to make this a failure");
            None
        }
    }
}

/// Runs test `name` (its full path in the integration binary, e.g.
/// `errors::...`) alone in a child process of this test binary, with
/// `configure` setting the child's environment (`ignored`: the test is
/// `#[ignore]`d and run for this purpose only). Fails unless the child
/// passed and exactly that one test ran: a name that matches nothing runs
/// no test and would pass silently.
pub fn run_test_in_child(name: &str, ignored: bool, configure: impl FnOnce(&mut std::process::Command) -> &mut std::process::Command) {
    let exe = std::env::current_exe().expect("the test binary");
    let mut command = std::process::Command::new(exe);
    command.args(["--exact", name, "--nocapture", "--test-threads=1"]);
    if ignored {
        command.arg("--ignored");
    }
    let out = configure(&mut command).output().expect("the child test runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let tail = |s: &str| s.chars().rev().take(3000).collect::<Vec<_>>().into_iter().rev().collect::<String>();
    assert!(out.status.success() && stdout.contains("test result: ok. 1 passed"), "child test {name} failed:\nstdout: {}\nstderr: {}", tail(&stdout), tail(&stderr));
}

/// The five kernels with parameters the GPU tests use, each with the scale
/// of its values (the polynomial kernel's reach 10), for scaled tolerances.
pub fn test_kernels() -> Vec<(gramian::Kernel, f64)> {
    use gramian::Kernel;
    vec![
        (Kernel::rbf(0.3).unwrap(), 1.0),
        (Kernel::laplacian(0.4).unwrap(), 1.0),
        (Kernel::linear(), 1.0),
        (Kernel::polynomial(0.2, 1.0, 3).unwrap(), 10.0),
        (Kernel::sigmoid(0.1, -0.2).unwrap(), 1.0),
    ]
}

/// Fresh random matrix with entries uniform in [-1, 1) (seeded from the
/// test's own seed so failures reproduce).
pub fn random_matrix(rng: &mut StdRng, rows: usize, cols: usize) -> DMatrix<f64> {
    DMatrix::from_fn(rows, cols, |_, _| rng.random_range(-1.0..1.0))
}

/// A seeded RNG; the seed comes from the clock unless `GRAMIAN_TEST_SEED` is set,
/// and is printed so a failure can be replayed.
pub fn rng() -> StdRng {
    let seed = std::env::var("GRAMIAN_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64);
    eprintln!("test seed: {seed} (replay with GRAMIAN_TEST_SEED={seed})");
    StdRng::seed_from_u64(seed)
}

/// The distribution of App. E: X ~ 1/2 U(0, 1/3) + 1/2 U(2/3, 1), Y | x ~ N(0, s(x)^2).
pub fn quantile_appendix_e(n: usize, rng: &mut StdRng) -> (DMatrix<f64>, nalgebra::DVector<f64>) {
    use nalgebra::DVector;
    use rand_distr::{Distribution, Normal};
    let x = DMatrix::from_fn(n, 1, |_, _| if rng.random::<bool>() { rng.random_range(0.0..1.0 / 3.0) } else { rng.random_range(2.0 / 3.0..1.0) });
    let y = DVector::from_fn(n, |i, _| {
        let t = x[(i, 0)];
        let s = if t <= 1.0 / 3.0 { 1.0 / 3.0 - t } else { t - 2.0 / 3.0 };
        s * Normal::new(0.0, 1.0).unwrap().sample(rng)
    });
    (x, y)
}

/// Root mean squared error of `predicted` against `truth` (same lengths).
pub fn rmse(truth: &nalgebra::DVector<f64>, predicted: &nalgebra::DVector<f64>) -> f64 {
    assert_eq!(truth.len(), predicted.len(), "rmse: lengths differ");
    ((truth - predicted).norm_squared() / truth.len().max(1) as f64).sqrt()
}
