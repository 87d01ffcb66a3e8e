//! Quickstart: build an RBF kernel matrix on whatever device `Device::auto()`
//! finds, verify it against the CPU f64 path, and print a short table.
//!
//! ```text
//! cargo run --example quickstart
//! GRAMIAN_DEVICE=gpu cargo run --example quickstart   # accept a software GPU (lavapipe)
//! ```

use std::time::Instant;

use gramian::linalg::relative_frobenius_error;
use gramian::{Device, Kernel};
use nalgebra::DMatrix;
use rand::{rngs::StdRng, Rng, SeedableRng};

fn main() -> Result<(), gramian::Error> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let device = Device::auto();
    let (n, m, d) = (2000, 1500, 32);
    let mut rng = StdRng::seed_from_u64(42);
    let x = DMatrix::<f64>::from_fn(n, d, |_, _| rng.random_range(-1.0..1.0));
    let z = DMatrix::<f64>::from_fn(m, d, |_, _| rng.random_range(-1.0..1.0));
    let kernel = Kernel::rbf(1.0 / d as f64)?;

    // Warm up (pipeline compilation, thread pool), then time.
    device.kernel_matrix(&kernel, &x.rows(0, 64).into_owned(), &z.rows(0, 64).into_owned())?;
    let start = Instant::now();
    let k = device.kernel_matrix(&kernel, &x, &z)?;
    let secs = start.elapsed().as_secs_f64();

    let start = Instant::now();
    let reference = Device::Cpu.kernel_matrix(&kernel, &x, &z)?;
    let cpu_secs = start.elapsed().as_secs_f64();

    // Independent check of the reference itself: direct pointwise evaluation on a sample.
    let mut worst = 0.0f64;
    for _ in 0..1000 {
        let (i, j) = (rng.random_range(0..n), rng.random_range(0..m));
        let xi: Vec<f64> = x.row(i).iter().copied().collect();
        let zj: Vec<f64> = z.row(j).iter().copied().collect();
        worst = worst.max((reference[(i, j)] - kernel.eval(&xi, &zj)?).abs());
    }
    let err = relative_frobenius_error(&k, &reference);
    let gflop = 3.0 * (n * m * d) as f64 / 1e9;

    println!("gramian quickstart: RBF kernel matrix K(X, Z), X {n} x {d}, Z {m} x {d}");
    println!("{:<44} {:>10} {:>10} {:>14}", "device", "time (ms)", "GFLOP/s", "rel. error");
    println!("{:<44} {:>10.1} {:>10.2} {:>14.2e}", device.describe(), secs * 1e3, gflop / secs, err);
    println!("{:<44} {:>10.1} {:>10.2} {:>14}", "cpu f64 reference", cpu_secs * 1e3, gflop / cpu_secs, "-");
    println!("reference vs direct pointwise evaluation (1000 entries): max abs diff {worst:.2e}");
    let tolerance = if device.is_gpu() { 1e-5 } else { 1e-12 };
    if err > tolerance || worst > 1e-12 {
        eprintln!("verification FAILED (tolerance {tolerance:e})");
        std::process::exit(1);
    }
    println!("verified: relative Frobenius error {err:.2e} <= {tolerance:e}");
    Ok(())
}
