//! The Rust side of the Python overhead benchmark
//! (`python/benchmarks/overhead.py`): the same calls the Python package
//! makes, timed in Rust on the same data.
//!
//! ```text
//! rust_timings DIR N D REPEATS
//! ```
//!
//! reads `DIR/x.bin` (N x D) and `DIR/y.bin` (N), row-major little-endian
//! `f64`, and prints, one per line:
//! - `kernel_matrix_small_us <median>`: `Device::kernel_matrix` (RBF,
//!   gamma 0.5) of the first 8 rows against themselves on the CPU, the
//!   median over 2000 calls, in microseconds;
//! - `mklaren_fit_s <median>`: mklaren (rank 40, RBF gamma 0.1, 1 and 10,
//!   look-ahead 10, lambda 0) on all N rows on the CPU, the median of
//!   REPEATS fits, in seconds.

use std::error::Error as StdError;
use std::path::Path;
use std::time::Instant;

use gramian::mklaren::MklarenParams;
use gramian::{Device, Kernel, RowMajor};
use nalgebra::DVector;

fn read(dir: &Path, name: &str, len: usize) -> Result<Vec<f64>, Box<dyn StdError>> {
    let bytes = std::fs::read(dir.join(name))?;
    if bytes.len() != len * 8 {
        return Err(format!("{name}: {} bytes, expected {len} f64", bytes.len()).into());
    }
    Ok(bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))).collect())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn StdError>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 5 {
        return Err("usage: rust_timings DIR N D REPEATS".into());
    }
    let dir = Path::new(&args[1]);
    let (n, d, repeats): (usize, usize, usize) = (args[2].parse()?, args[3].parse()?, args[4].parse()?);
    let x = read(dir, "x.bin", n * d)?;
    let y = DVector::from_vec(read(dir, "y.bin", n)?);
    let cpu = Device::cpu();

    // The small call, on the same row-major view the bindings pass.
    let small = RowMajor::new(&x[..8 * d], 8, d)?;
    let rbf = Kernel::rbf(0.5)?;
    let mut times = Vec::with_capacity(2000);
    for _ in 0..2000 {
        let start = Instant::now();
        std::hint::black_box(cpu.kernel_matrix(&rbf, &small, &small)?);
        times.push(start.elapsed().as_secs_f64() * 1e6);
    }
    println!("kernel_matrix_small_us {:.3}", median(times));

    let all = RowMajor::new(&x, n, d)?;
    let kernels = [Kernel::rbf(0.1)?, Kernel::rbf(1.0)?, Kernel::rbf(10.0)?];
    let mut fits = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let start = Instant::now();
        std::hint::black_box(MklarenParams::new(40).lookahead(10).lambda(0.0).kernels(&kernels).fit_inputs(&cpu, &[&all], &y)?);
        fits.push(start.elapsed().as_secs_f64());
    }
    println!("mklaren_fit_s {:.4}", median(fits));
    Ok(())
}
