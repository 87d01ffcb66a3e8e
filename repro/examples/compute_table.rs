//! CPU vs GPU throughput of the compute core, as a table (GFLOP/s), with
//! every GPU result checked against the CPU f64 path.
//!
//! ```text
//! cargo run -p gramian-repro --example compute_table                      # CPU, plus a hardware GPU if present
//! GRAMIAN_DEVICE=gpu cargo run -p gramian-repro --example compute_table   # also accept software Vulkan
//! cargo run --release -p gramian-repro --example compute_table -- --preset h200 --require-gpu
//! ```
//!
//! FLOP counts: kernel matrix 3 n m d (subtract, multiply, add per feature;
//! the exponential is not counted), products 2 n k m, Gram 2 n d^2, kernel
//! matvec n m (3 d + 2 c). GPU times include upload and read-back unless the
//! row says "device"; "device" rows leave the output on the GPU (what a
//! GPU-resident pipeline, or PyTorch's `cdist` + `exp`, measures).

use std::time::Instant;

use clap::Parser;
use gramian::linalg::relative_frobenius_error;
use gramian::{Device, Kernel, MatrixProduct};
use nalgebra::DMatrix;
use rand::{rngs::StdRng, Rng, SeedableRng};

#[derive(Parser)]
#[command(about = "CPU vs GPU throughput of gramian's compute core")]
struct Args {
    /// Problem sizes: `quick` (seconds on a laptop or lavapipe), `full`, or `h200` (large, GPU-resident RBF at n = 32768, d = 256).
    #[arg(long, default_value = "quick")]
    preset: String,
    /// Fail if no GPU adapter is found (software adapters accepted only with GRAMIAN_DEVICE=gpu).
    #[arg(long)]
    require_gpu: bool,
    /// Skip the CPU timings (the GPU is still checked against CPU f64 on sizes where that is cheap).
    #[arg(long)]
    gpu_only: bool,
}

/// `(n, d)` shapes of the kernel, Gram, batch and resident rows, and
/// `(n, d, columns)` shapes of the matvec rows, of one preset.
type PresetShapes = (Vec<(usize, usize)>, Vec<(usize, usize)>, Vec<(usize, usize)>, Vec<(usize, usize, usize)>, Vec<(usize, usize)>);

struct Row {
    op: String,
    shape: String,
    device: String,
    secs: f64,
    gflop: f64,
    error: Option<f64>,
}

fn random(rng: &mut StdRng, r: usize, c: usize) -> DMatrix<f64> {
    DMatrix::from_fn(r, c, |_, _| rng.random_range(-1.0..1.0))
}

/// Best of `reps` runs of `f` (after one warm-up run when `warm`).
fn time<R>(reps: usize, mut f: impl FnMut() -> R) -> (f64, R) {
    let mut out = f();
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let t = Instant::now();
        out = f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    (best, out)
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    let gpu = match Device::auto() {
        d @ Device::Gpu(_) => Some(d),
        Device::Cpu => None,
    };
    if args.require_gpu && gpu.is_none() {
        eprintln!("--require-gpu: no GPU adapter found");
        std::process::exit(2);
    }
    let (kernel_sizes, gram_sizes, batch_sizes, matvec_sizes, resident): PresetShapes =
        match args.preset.as_str() {
            "quick" => (vec![(512, 64), (2048, 64)], vec![(20000, 64)], vec![(64, 32), (16, 128)], vec![(4096, 32, 1), (4096, 32, 8)], vec![]),
            "full" => (vec![(1024, 64), (4096, 64)], vec![(100000, 128)], vec![(256, 64), (64, 256)], vec![(16384, 64, 1), (16384, 64, 8)], vec![(4096, 64)]),
            "h200" => (vec![(4096, 64), (8192, 256)], vec![(200000, 256)], vec![(1024, 64), (256, 256)], vec![(32768, 256, 1), (32768, 256, 8)], vec![(8192, 256), (32768, 256)]),
            other => {
                eprintln!("unknown preset {other:?} (quick, full, h200)");
                std::process::exit(2);
            }
        };
    let mut rng = StdRng::seed_from_u64(7);
    let mut rows: Vec<Row> = Vec::new();
    let mut failed = false;
    let kernel = |d: usize| Kernel::rbf(1.0 / d as f64).expect("valid gamma");
    let mut check = |rows: &mut Vec<Row>, row: Row, tol: f64| {
        if let Some(e) = row.error {
            if e.is_nan() || e > tol {
                eprintln!("CHECK FAILED: {} {} on {}: relative error {e:e} > {tol:e}", row.op, row.shape, row.device);
                failed = true;
            }
        }
        rows.push(row);
    };

    for &(n, d) in &kernel_sizes {
        let x = random(&mut rng, n, d);
        let k = kernel(d);
        let gflop = 3.0 * (n * n * d) as f64 / 1e9;
        let (cpu_secs, reference) = time(2, || Device::Cpu.kernel_matrix(&k, &x, &x).expect("cpu kernel matrix"));
        if !args.gpu_only {
            let (s32, _) = time(2, || Device::Cpu.kernel_matrix(&k, &x.map(|v| v as f32), &x.map(|v| v as f32)).expect("cpu f32"));
            check(&mut rows, Row { op: "rbf kernel matrix".into(), shape: format!("{n}x{n}x{d}"), device: "cpu f64".into(), secs: cpu_secs, gflop, error: None }, 0.0);
            check(&mut rows, Row { op: "rbf kernel matrix".into(), shape: format!("{n}x{n}x{d}"), device: "cpu f32".into(), secs: s32, gflop, error: None }, 0.0);
        }
        if let Some(g) = &gpu {
            let (secs, got) = time(2, || g.kernel_matrix(&k, &x, &x).expect("gpu kernel matrix"));
            let error = Some(relative_frobenius_error(&got, &reference));
            check(&mut rows, Row { op: "rbf kernel matrix".into(), shape: format!("{n}x{n}x{d}"), device: "gpu f32".into(), secs, gflop, error }, 1e-5);
        }
    }
    if let Some(Device::Gpu(ctx)) = &gpu {
        for &(n, d) in &resident {
            let x = random(&mut rng, n, d);
            let k = kernel(d);
            let secs = (0..3).map(|_| ctx.time_kernel_matrix_on_device(&k, &x, &x).expect("device timing").as_secs_f64()).fold(f64::INFINITY, f64::min);
            rows.push(Row { op: "rbf kernel matrix".into(), shape: format!("{n}x{n}x{d}"), device: "gpu f32 device".into(), secs, gflop: 3.0 * (n * n * d) as f64 / 1e9, error: None });
        }
    }
    for &(n, d) in &gram_sizes {
        let phi = random(&mut rng, n, d);
        let gflop = 2.0 * (n * d * d) as f64 / 1e9;
        let (cpu_secs, reference) = time(2, || Device::Cpu.gram(&phi).expect("cpu gram"));
        if !args.gpu_only {
            check(&mut rows, Row { op: "gram Phi^T Phi".into(), shape: format!("{n}x{d}"), device: "cpu f64".into(), secs: cpu_secs, gflop, error: None }, 0.0);
        }
        if let Some(g) = &gpu {
            let (secs, got) = time(2, || g.gram(&phi).expect("gpu gram"));
            let error = Some(relative_frobenius_error(&got, &reference));
            // f32 sums of n terms: error grows like sqrt(n) * 2^-24.
            let tol = (4.0 * (n as f64).sqrt() * f32::EPSILON as f64 / 2.0).max(1e-5);
            check(&mut rows, Row { op: "gram Phi^T Phi".into(), shape: format!("{n}x{d}"), device: "gpu f32".into(), secs, gflop, error }, tol);
        }
    }
    for &(count, s) in &batch_sizes {
        let mats: Vec<(DMatrix<f64>, DMatrix<f64>)> = (0..count).map(|_| (random(&mut rng, s, s), random(&mut rng, s, s))).collect();
        let pairs: Vec<(&DMatrix<f64>, &DMatrix<f64>)> = mats.iter().map(|(a, b)| (a, b)).collect();
        let gflop = 2.0 * (count * s * s * s) as f64 / 1e9;
        let (cpu_secs, reference) = time(2, || Device::Cpu.batched_matmul(&pairs, MatrixProduct::AB).expect("cpu batched"));
        if !args.gpu_only {
            check(&mut rows, Row { op: "batched matmul".into(), shape: format!("{count} x {s}^3"), device: "cpu f64".into(), secs: cpu_secs, gflop, error: None }, 0.0);
        }
        if let Some(g) = &gpu {
            let (secs, got) = time(2, || g.batched_matmul(&pairs, MatrixProduct::AB).expect("gpu batched"));
            let error = got.iter().zip(&reference).map(|(a, b)| relative_frobenius_error(a, b)).fold(0.0, f64::max);
            check(&mut rows, Row { op: "batched matmul".into(), shape: format!("{count} x {s}^3"), device: "gpu f32".into(), secs, gflop, error: Some(error) }, 1e-5);
        }
    }
    for &(n, d, c) in &matvec_sizes {
        let x = random(&mut rng, n, d);
        let v = random(&mut rng, n, c);
        let k = kernel(d);
        let gflop = (n * n * (3 * d + 2 * c)) as f64 / 1e9;
        let (cpu_secs, reference) = time(1, || Device::Cpu.kernel_matvec(&k, &x, &x, &v).expect("cpu matvec"));
        if !args.gpu_only {
            check(&mut rows, Row { op: "rbf kernel matvec".into(), shape: format!("{n}x{n}x{d}, c={c}"), device: "cpu f64".into(), secs: cpu_secs, gflop, error: None }, 0.0);
        }
        if let Some(g) = &gpu {
            let (secs, got) = time(2, || g.kernel_matvec(&k, &x, &x, &v).expect("gpu matvec"));
            let error = Some(relative_frobenius_error(&got, &reference));
            check(&mut rows, Row { op: "rbf kernel matvec".into(), shape: format!("{n}x{n}x{d}, c={c}"), device: "gpu f32".into(), secs, gflop, error }, 1e-4);
        }
    }

    println!("gramian compute core, preset {}: cpu = {}, gpu = {}", args.preset, Device::Cpu.describe(), gpu.as_ref().map_or("none".into(), |g| g.describe()));
    println!("| {:<20} | {:<20} | {:<15} | {:>10} | {:>9} | {:>14} |", "operation", "shape", "device", "time (ms)", "GFLOP/s", "rel. err vs f64");
    println!("|{:-<22}|{:-<22}|{:-<17}|{:->12}|{:->11}|{:->16}|", "", "", "", "", "", "");
    for r in &rows {
        let err = r.error.map_or("-".to_string(), |e| format!("{e:.2e}"));
        println!("| {:<20} | {:<20} | {:<15} | {:>10.2} | {:>9.2} | {:>14} |", r.op, r.shape, r.device, r.secs * 1e3, r.gflop / r.secs, err);
    }
    if failed {
        eprintln!("some GPU results disagree with the CPU f64 reference");
        std::process::exit(1);
    }
}
