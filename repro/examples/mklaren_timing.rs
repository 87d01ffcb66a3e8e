//! Fit time against n: mklaren, the low-rank baselines (ICD, Nystrom, CSI)
//! and the full-kernel methods (uniform, align, alignf, alignfc) as far as
//! they are feasible, on synthetic data with p = 10 Gaussian kernels, total
//! rank 30 (3 per kernel for the baselines), d = 100, delta = 10.
//!
//! Usage: `cargo run -p gramian-repro --example mklaren_timing [MAX_N] [D] [MAX_N_FULL] [--repeat N]`
//! (defaults 1000000, 100, 3162, 1; `MKLAREN_ONLY=1` skips the other methods; `--repeat N`
//! gives the median of N mklaren fits up to n = 10^4). Prints one row per n with seconds per fit,
//! the CPU time of the mklaren fit over its wall time (about the number of
//! busy cores) and the process's peak resident memory after the mklaren fit.

use std::time::Instant;

use clap::Parser;
use gramian::mklaren::{FullKernelRidgeParams, KernelCombination, LowRankMethod, LowRankRidgeParams, MklarenParams};
use gramian::{Device, Kernel};
use nalgebra::{DMatrix, DVector};
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::StandardNormal;

#[derive(Parser)]
#[command(about = "Fit time against n: mklaren, the low-rank baselines and the full-kernel methods on synthetic data")]
struct Args {
    /// Largest n (sizes 10^2, 10^2.5, ... up to it).
    #[arg(default_value_t = 1_000_000)]
    max_n: usize,
    /// Input dimension d.
    #[arg(default_value_t = 100)]
    d: usize,
    /// Largest n for the full-kernel methods (uniform, align, alignf, alignfc).
    #[arg(default_value_t = 3162)]
    max_n_full: usize,
    /// mklaren fits per n: the column gives their median (the first fit's
    /// `cpu/wall`); up to n = 10^4, one fit above.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
}

fn peak_memory_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok()))
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// User + system CPU seconds of this process so far (Linux `/proc/self/stat`,
/// clock ticks of 1/100 s); NaN where it cannot be read.
fn cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Fields after the command name in parentheses; utime and stime are fields 14 and 15.
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) / 100.0)
        })
        .unwrap_or(f64::NAN)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `RUST_LOG=gramian=debug` prints the kernel columns each fit computed.
    env_logger::init();
    let args = Args::parse();
    let (max_n, d, max_full) = (args.max_n, args.d, args.max_n_full);
    // `MKLAREN_ONLY=1`: time mklaren alone (for profiles).
    let mklaren_only = std::env::var("MKLAREN_ONLY").is_ok_and(|v| v == "1");
    let device = Device::auto();
    let p = 10;
    let kernels: Vec<Kernel> = (0..p).map(|q| Kernel::rbf(2f64.powi(q as i32 - 5) / d as f64)).collect::<Result<_, _>>()?;
    let (rank, delta, lambda) = (30, 10, 0.1);
    println!("p = {p} Gaussian kernels, d = {d}, mklaren rank {rank} (baselines {} per kernel), delta = {delta}, {}", rank / p, device.describe());
    println!("{:>8} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10}", "n", "mklaren", "cpu/wall", "icd", "nystrom", "csi", "uniform", "align", "alignf", "alignfc", "peak MB");
    let mut rng = StdRng::seed_from_u64(1);
    let w: Vec<f64> = (0..d).map(|_| rng.sample::<f64, _>(StandardNormal) / (d as f64).sqrt()).collect();
    let sizes: Vec<usize> = (4..=12).map(|e| 10f64.powf(e as f64 / 2.0).round() as usize).filter(|&n| n <= max_n).collect();
    for n in sizes {
        let x = DMatrix::from_fn(n, d, |_, _| rng.sample::<f64, _>(StandardNormal));
        let y = DVector::from_fn(n, |i, _| (0..d).map(|j| x[(i, j)] * w[j]).sum::<f64>().sin() + 0.1 * rng.sample::<f64, _>(StandardNormal));
        let time = |f: &mut dyn FnMut() -> Result<(), gramian::Error>| -> Result<String, gramian::Error> {
            let t = Instant::now();
            f()?;
            Ok(format!("{:.3}", t.elapsed().as_secs_f64()))
        };
        let (cpu0, wall0) = (cpu_seconds(), Instant::now());
        let fit_mklaren = || MklarenParams::new(rank).lookahead(delta).lambda(lambda).kernels(&kernels).fit_inputs(&device, &[&x], &y).map(|_| ());
        fit_mklaren()?;
        let first = wall0.elapsed().as_secs_f64();
        let busy = (cpu_seconds() - cpu0) / first;
        let mut fits = vec![first];
        for _ in 1..if n <= 10_000 { args.repeat.max(1) } else { 1 } {
            let t = Instant::now();
            fit_mklaren()?;
            fits.push(t.elapsed().as_secs_f64());
        }
        fits.sort_by(f64::total_cmp);
        let mk = format!("{:.3}", fits[fits.len() / 2]);
        let peak = peak_memory_mb();
        if mklaren_only {
            println!("{n:>8} {mk:>9} {busy:>8.2} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {peak:>10.0}", "-", "-", "-", "-", "-", "-", "-");
            continue;
        }
        let low = |method| time(&mut || LowRankRidgeParams::new(method, rank / p).lambda(lambda).kernels(&kernels).fit_inputs(&device, &[&x], &y).map(|_| ()));
        let icd = low(LowRankMethod::Icd)?;
        let ny = low(LowRankMethod::Nystrom { seed: 0 })?;
        let csi = low(LowRankMethod::Csi { lookahead: delta, kappa: 0.5 })?;
        let mut full = Vec::new();
        for c in [KernelCombination::Uniform, KernelCombination::Align, KernelCombination::Alignf, KernelCombination::Alignfc] {
            full.push(if n > max_full {
                "-".to_string()
            } else {
                let t = Instant::now();
                match FullKernelRidgeParams::new(c).lambda(lambda).kernels(&kernels).fit_inputs(&device, &[&x], &y) {
                    Ok(_) => format!("{:.3}", t.elapsed().as_secs_f64()),
                    Err(e) => {
                        eprintln!("{c:?} at n = {n}: {e}");
                        "error".to_string()
                    }
                }
            });
        }
        println!("{n:>8} {mk:>9} {busy:>8.2} {icd:>9} {ny:>9} {csi:>9} {:>9} {:>9} {:>9} {:>9} {peak:>10.0}", full[0], full[1], full[2], full[3]);
    }
    Ok(())
}
