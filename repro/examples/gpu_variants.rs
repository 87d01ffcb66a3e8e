//! Every product-shader variant at the benchmark shapes, on the GPU, data
//! and outputs resident: time, throughput, % of the f32/f64 peak, a check of
//! sampled rows against the CPU f64 path, and the tuner's choice for each
//! shape (timed afresh with `GRAMIAN_TUNE=retune` semantics). Each variant
//! runs every job: the matvec rows time its fused kernel matvec (the
//! cooperative variants' on tensor cores), beside PyTorch's rows that
//! `scripts/gpu-check.sh` prints. `--only coop,g4` picks the cooperative
//! variants and those with vec4 global loads.
//!
//! ```text
//! GRAMIAN_DEVICE=gpu cargo run -p gramian-repro --example gpu_variants                 # quick, lavapipe accepted
//! cargo run --release -p gramian-repro --example gpu_variants -- --preset h200 --require-gpu
//! ```
//!
//! FLOP counts (as in `compute_table`): kernel matrix 3 n m d, product
//! 2 n k m, kernel matvec n m (3 d + 2 c). The `BEST` lines at the end are
//! read by `scripts/gpu-check.sh` for the PyTorch ratios.

use std::time::Instant;

use clap::Parser;
use gramian::gpu::{GpuContext, TuningMode};
use gramian::{Device, DeviceMatrix, GpuOptions, Kernel, MatrixProduct, Precision};
use nalgebra::DMatrix;
use rand::{rngs::StdRng, Rng, SeedableRng};

#[derive(Parser)]
#[command(about = "Time every GPU product variant at the benchmark shapes")]
struct Args {
    /// `quick` (small shapes, seconds on lavapipe) or `h200` (the issue's benchmark shapes).
    #[arg(long, default_value = "quick")]
    preset: String,
    /// Fail without a hardware GPU (otherwise a software adapter is used when GRAMIAN_DEVICE=gpu).
    #[arg(long)]
    require_gpu: bool,
    /// f32 peak of the card in TFLOP/s (H200: 66.9).
    #[arg(long, default_value_t = 66.9)]
    peak_f32: f64,
    /// f64 peak of the card in TFLOP/s (H200: 33.5, without tensor cores).
    #[arg(long, default_value_t = 33.5)]
    peak_f64: f64,
    /// Timed runs per variant (best kept), after one warm-up.
    #[arg(long)]
    reps: Option<usize>,
    /// Only variants whose name contains one of these (comma-separated).
    #[arg(long, value_delimiter = ',')]
    only: Option<Vec<String>>,
}

#[derive(Clone, Copy)]
enum Job {
    Kernel { n: usize, m: usize, d: usize, p: Precision },
    Product { n: usize, k: usize, m: usize, p: Precision },
    Matvec { n: usize, m: usize, d: usize, c: usize, p: Precision },
}

impl Job {
    fn precision(&self) -> Precision {
        match *self {
            Job::Kernel { p, .. } | Job::Product { p, .. } | Job::Matvec { p, .. } => p,
        }
    }
    fn label(&self) -> String {
        let pn = |p: Precision| if p == Precision::F32 { "f32" } else { "f64" };
        match *self {
            Job::Kernel { n, m, d, p } => format!("rbf-{}-{n}x{m}x{d}", pn(p)),
            Job::Product { n, k, m, p } => format!("product-{}-{n}x{k}x{m}", pn(p)),
            Job::Matvec { n, m, d, c, p } => format!("matvec-{}-{n}x{m}x{d}-c{c}", pn(p)),
        }
    }
    fn flop(&self) -> f64 {
        match *self {
            Job::Kernel { n, m, d, .. } => 3.0 * (n * m * d) as f64,
            Job::Product { n, k, m, .. } => 2.0 * (n * k * m) as f64,
            Job::Matvec { n, m, d, c, .. } => (n * m) as f64 * (3 * d + 2 * c) as f64,
        }
    }
}

fn random(rng: &mut StdRng, r: usize, c: usize) -> DMatrix<f64> {
    DMatrix::from_fn(r, c, |_, _| rng.random_range(-1.0..1.0))
}

/// Operands on the device, their host copies (for the check) and the output.
struct Prepared {
    host: Vec<DMatrix<f64>>,
    dev: Vec<DeviceMatrix>,
    out: DeviceMatrix,
    kernel: Kernel,
}

fn prepare(device: &Device, job: Job, rng: &mut StdRng) -> gramian::error::Result<Prepared> {
    let p = job.precision();
    let (host, out_shape, kernel) = match job {
        Job::Kernel { n, m, d, .. } => (vec![random(rng, n, d), random(rng, m, d)], (n, m), Kernel::rbf(1.0 / d as f64)?),
        Job::Product { n, k, m, .. } => (vec![random(rng, n, k), random(rng, m, k)], (n, m), Kernel::linear()),
        Job::Matvec { n, m, d, c, .. } => (vec![random(rng, n, d), random(rng, m, d), random(rng, m, c)], (n, c), Kernel::rbf(1.0 / d as f64)?),
    };
    let dev = host.iter().map(|h| device.upload(h, p)).collect::<gramian::error::Result<Vec<_>>>()?;
    let out = device.zeros(out_shape.0, out_shape.1, p)?;
    Ok(Prepared { host, dev, out, kernel })
}

fn run(device: &Device, job: Job, w: &Prepared) -> gramian::error::Result<()> {
    match job {
        Job::Kernel { .. } => device.resident_kernel_matrix_into(&w.kernel, &w.dev[0], &w.dev[1], &w.out),
        // A B^T of two row-major operands (the product engine's NN form).
        Job::Product { .. } => device.resident_matmul_into(&w.dev[0], &w.dev[1], MatrixProduct::ABt, &w.out, false),
        Job::Matvec { .. } => device.resident_kernel_matvec_into(&w.kernel, &w.dev[0], &w.dev[1], &w.dev[2], &w.out, false),
    }
}

/// Largest error of sampled output rows against the CPU f64 path, relative
/// to the largest reference entry of those rows.
fn check(device: &Device, job: Job, w: &Prepared) -> gramian::error::Result<f64> {
    let n = w.host[0].nrows();
    let rows: Vec<usize> = (0..8).map(|t| (t * 7919 + 3) % n).collect();
    let mut worst = 0f64;
    for &r in &rows {
        let xr = w.host[0].rows(r, 1).into_owned();
        let want = match job {
            Job::Kernel { .. } | Job::Product { .. } => Device::cpu().kernel_matrix(&w.kernel, &xr, &w.host[1])?,
            Job::Matvec { .. } => Device::cpu().kernel_matrix(&w.kernel, &xr, &w.host[1])? * &w.host[2],
        };
        let got = device.to_host(&w.out.rows(r, 1)?)?;
        let scale = want.amax().max(1e-300);
        worst = worst.max((got - &want).amax() / scale);
    }
    Ok(worst)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::init();
    let args = Args::parse();
    let software = std::env::var("GRAMIAN_DEVICE").as_deref() == Ok("gpu") && !args.require_gpu;
    let device = Device::gpu_with(&GpuOptions { allow_software: software, ..Default::default() }).map_err(|e| format!("no GPU adapter ({e}); set GRAMIAN_DEVICE=gpu to accept a software one"))?;
    let Device::Gpu(ctx) = &device else { unreachable!() };
    let ctx: &GpuContext = ctx;
    let f64_ok = device.supports(Precision::F64);
    let (jobs, reps) = match args.preset.as_str() {
        "h200" => (
            vec![
                Job::Kernel { n: 32768, m: 32768, d: 256, p: Precision::F32 },
                Job::Product { n: 8192, k: 8192, m: 8192, p: Precision::F32 },
                Job::Matvec { n: 32768, m: 32768, d: 256, c: 1, p: Precision::F32 },
                Job::Matvec { n: 32768, m: 32768, d: 256, c: 8, p: Precision::F32 },
                Job::Kernel { n: 16384, m: 16384, d: 256, p: Precision::F64 },
                Job::Matvec { n: 16384, m: 16384, d: 256, c: 1, p: Precision::F64 },
            ],
            5,
        ),
        "quick" => (
            vec![
                Job::Kernel { n: 300, m: 257, d: 64, p: Precision::F32 },
                Job::Product { n: 200, k: 256, m: 130, p: Precision::F32 },
                Job::Matvec { n: 300, m: 257, d: 64, c: 1, p: Precision::F32 },
                Job::Matvec { n: 300, m: 257, d: 64, c: 8, p: Precision::F32 },
                Job::Kernel { n: 150, m: 129, d: 32, p: Precision::F64 },
                Job::Matvec { n: 150, m: 129, d: 32, c: 1, p: Precision::F64 },
            ],
            1,
        ),
        other => return Err(format!("unknown preset {other:?} (quick, h200)").into()),
    };
    let reps = args.reps.unwrap_or(reps);
    println!("gramian GPU variants, preset {}: {}", args.preset, device.describe());
    println!("| job                              | variant                                  |  time (ms) |  GFLOP/s | % peak | max rel. err |");
    println!("|----------------------------------|------------------------------------------|------------|----------|--------|--------------|");
    let mut rng = StdRng::seed_from_u64(12);
    let mut best_lines = Vec::new();
    let mut failed = false;
    for job in jobs {
        let p = job.precision();
        if p == Precision::F64 && !f64_ok {
            println!("| {:<32} | (no SHADER_F64 on this adapter)          |            |          |        |              |", job.label());
            continue;
        }
        let w = prepare(&device, job, &mut rng)?;
        let peak = if p == Precision::F32 { args.peak_f32 } else { args.peak_f64 } * 1e12;
        let mut best: Option<(&str, f64)> = None;
        let mut default_ms = None;
        for v in ctx.product_variants().into_iter().filter(|v| v.precision == p) {
            if args.only.as_ref().is_some_and(|o| !o.iter().any(|o| v.name.contains(o.as_str()))) {
                continue;
            }
            ctx.force_variant(Some(v.name))?;
            run(&device, job, &w)?;
            device.synchronize()?;
            let mut secs = f64::INFINITY;
            for _ in 0..reps {
                let t = Instant::now();
                run(&device, job, &w)?;
                device.synchronize()?;
                secs = secs.min(t.elapsed().as_secs_f64());
            }
            let err = check(&device, job, &w)?;
            // Opt-in reduced precision (one f16 product) is reported, not held to f32's tolerance.
            let tol = if v.is_opt_in() { 1e-2 } else if p == Precision::F32 { 1e-4 } else { 1e-10 };
            if err.is_nan() || err > tol {
                failed = true;
            }
            let rate = job.flop() / secs;
            println!("| {:<32} | {:<40} | {:>10.2} | {:>8.1} | {:>5.1}% | {:>12.2e} |", job.label(), v.name, secs * 1e3, rate / 1e9, 100.0 * rate / peak, err);
            default_ms.get_or_insert(secs * 1e3);
            if best.is_none_or(|(_, s)| secs < s) {
                best = Some((v.name, secs));
            }
        }
        // The tuner, from scratch for this job's class.
        ctx.force_variant(None)?;
        ctx.set_tuning_mode(TuningMode::Retune)?;
        ctx.set_tuning_mode(TuningMode::On)?;
        let t = Instant::now();
        run(&device, job, &w)?;
        device.synchronize()?;
        let tune_secs = t.elapsed().as_secs_f64();
        let choice = ctx.tuned_choices().into_iter().next();
        if let (Some((name, secs)), Some(c)) = (best, choice) {
            println!(
                "  {}: fastest {} {:.2} ms ({:.2}x the default); tuner ({:.0} ms, {} timed on {}) chose {}",
                job.label(),
                name,
                secs * 1e3,
                default_ms.unwrap_or(secs * 1e3) / (secs * 1e3),
                tune_secs * 1e3,
                c.timings.len(),
                c.class,
                c.variant
            );
            best_lines.push(format!("BEST {} ms={:.3} gflops={:.1} variant={} tuned={}", job.label(), secs * 1e3, job.flop() / secs / 1e9, name, c.variant));
        }
    }
    for l in best_lines {
        println!("{l}");
    }
    if failed {
        return Err("a variant's sampled rows differ from the CPU f64 path beyond tolerance (1e-4 f32, 1e-10 f64)".into());
    }
    Ok(())
}
