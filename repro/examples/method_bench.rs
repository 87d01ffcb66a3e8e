//! One benchmark per method, CPU against GPU in the same run: fits each
//! method at growing n on the CPU and on the GPU and prints one markdown
//! table (fit seconds, the time breakdown each method reports, MB moved
//! host-to-device and device-to-host during the fit, and the largest
//! relative difference between the GPU and the CPU results).
//!
//! ```text
//! cargo run --release -p gramian-repro --example method_bench -- --preset quick   # seconds on lavapipe (CI runs it)
//! cargo run --release -p gramian-repro --example method_bench -- --preset h200    # large n on a real GPU
//! ```
//! `--methods eksvd,mklaren,psd` picks methods; `--cpu-limit N` skips CPU
//! fits above n = N and `--cpu-methods mklaren,eksvd` the CPU fits of the
//! other methods (their rows say so). Every row also gives the device
//! counters of the fit (blocking waits, GFLOP, kernel evaluations, device
//! allocations; `gramian::gpu::counters`), and the fit's first-use time
//! (tuning and shader compilation, paid once per process) apart.
//!
//! `--predict h200` (or `h100`, or `measured`: a profile timed on the
//! adapter at hand) adds, after each GPU row, the time the cost model
//! (`gramian::gpu::cost`) predicts for the same fit on that card from the
//! fit's counters and its host time here (wall less blocked and less the
//! release of device matrices, which the card's profile prices; divided by
//! `--host-speed`), and, where the H200 run (`repro/results/h200-2026-12-04-methods*.txt`)
//! timed the same fit, the ratio predicted / measured (with `measured`, or
//! when the adapter at hand is the card predicted, also the ratio to this
//! run's own fit: the model checked on the adapter at hand). With `--predict` the
//! tuner is off (default variants: the counters' flops and bytes do not
//! depend on the variant, and no tuning time enters the host time). The GPU is any adapter, software
//! ones included (`Device::gpu`); without one only CPU rows are printed.
//! On a software adapter with few cores, hold its device work to one core
//! (`LP_NUM_THREADS=1` for lavapipe) when the host time matters: its
//! threads otherwise take the fit thread's core while it records the next
//! work, and that time counts as host time; on a shared machine, `--repeat
//! 3` keeps the fastest of three runs of each fit (the counters do not
//! change between runs, other programs' interference only adds time).
//!
//! `--extrapolate 100000,1000000` (with `--predict`) adds, per method, a
//! predicted row at each of those n from the method's GPU rows, for sizes
//! too large to run on the adapter at hand (a software one): every counter
//! of a row and its host time are divided by the row's iterations (PSD:
//! FISTA iterations; eKSVD: Lanczos products, `3 N^2` kernel evaluations
//! each for N samples per source; mklaren
//! and ICD: the fit, whose K steps do not depend on n), the quotient is
//! continued through the two largest GPU rows: as the line `a + b n` where
//! it grows at most linearly between them, else as the power law `a n^p`
//! with `p <= 2` (exact for a constant part plus one linear in n, as a
//! step's waits and kernel columns or an iteration's fixed `r x r` work
//! and its weighted Gram, and for work quadratic in n, as a Lanczos
//! product's kernel evaluations), evaluated at the target n and
//! multiplied by the iterations the H200 run took at that n where it ran it
//! (PSD 26, eKSVD 17 at 3 x 10^4 and 15 at 3 x 10^5), else by those of the
//! largest row. It is a model of the counters as much as of the card: the
//! row says it is extrapolated. Each such row also gives the H200 run's
//! 16-core host time for the same fit (logged, or the logged time scaled by
//! the CPU's growth in n measured here between the method's two largest
//! CPU rows) and its ratio to the prediction.
//!
//! What each method fits:
//! - eKSVD: the Dual solver, matrix-free (Lanczos over a kernel-function
//!   coupling, RBF, Q = 3 sources of N each, 4 components); result compared:
//!   the eigenvalues.
//! - mklaren: 2 RBF kernels on X (n x d), rank 20, look-ahead 5; compared:
//!   the training predictions. The row's time and counters are the fit's
//!   alone (from the call of `fit_inputs` to its return: neither the data
//!   generation nor the predictions); the predictions' time is in the
//!   breakdown column.
//! - PSD: density on Nystrom centres (10-D mixture, Gaussian base measure);
//!   compared: the primal objective.
//! - ICD: the incomplete Cholesky decomposition of mklaren's baselines, one
//!   RBF kernel on X (n x d), rank 20 (on a GPU with `f64`, G and the
//!   residual diagonal stay on the device); compared: the trace of the
//!   residual and `||G||_F`; the row is the fit alone.

use std::time::Instant;

use clap::Parser;
use gramian::eksvd::{solve_dual, CouplingMatrix, Eigensolver};
use gramian::MultiSource;
use gramian::mklaren::{IcdParams, MklarenParams};
use gramian::psd::{BaseMeasure, DensityParams, SolverOptions};
use gramian::gpu::{cost, DeviceCounters, ShapeKind};
use gramian::Precision;
use gramian::{Device, Kernel};
use nalgebra::{DMatrix, DVector};
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::{Distribution, Normal};
use gramian::psd::Regularisation;

#[derive(Parser)]
struct Args {
    /// `quick` (small n, seconds on a software GPU) or `h200` (large n).
    #[arg(long, default_value = "quick")]
    preset: String,
    /// Comma-separated subset of eksvd, mklaren, psd, icd.
    #[arg(long, default_value = "eksvd,mklaren,psd,icd")]
    methods: String,
    /// Largest n for which the CPU fit is run (default: the preset's).
    #[arg(long)]
    cpu_limit: Option<usize>,
    /// Methods whose CPU fits run (comma-separated subset of `--methods`;
    /// default: all of them): the others print GPU rows only.
    #[arg(long, value_delimiter = ',')]
    cpu_methods: Option<Vec<String>>,
    /// Override the preset's eKSVD sizes (samples per source, comma-separated).
    #[arg(long, value_delimiter = ',')]
    eksvd_n: Option<Vec<usize>>,
    /// Override the preset's mklaren sizes (n, comma-separated; the preset's d).
    #[arg(long, value_delimiter = ',')]
    mklaren_n: Option<Vec<usize>>,
    /// Override the preset's PSD density sizes (n, comma-separated; the preset's centres).
    #[arg(long, value_delimiter = ',')]
    psd_n: Option<Vec<usize>>,
    /// Stops each PSD fit after this many FISTA iterations (its row then
    /// gives the first iterations' counters, for `--extrapolate` where a
    /// whole fit is too slow for the adapter at hand).
    #[arg(long)]
    psd_iterations: Option<usize>,
    /// A GPU result further than this (relative, max-norm) from its CPU
    /// result fails the run. The GPU fits compute in f64 where the adapter
    /// has it; 1e-6 leaves room for the different summation orders.
    #[arg(long, default_value_t = 1e-6)]
    max_difference: f64,
    /// Predict each GPU fit's time on this card: h200, h100 or measured.
    #[arg(long)]
    predict: Option<String>,
    /// How many times faster the predicted card's host is than this one
    /// (divides the measured host time of each fit).
    #[arg(long, default_value_t = 1.0)]
    host_speed: f64,
    /// Runs each fit this many times and keeps the fastest (its time,
    /// breakdown and counters; the counters are the same each time): the
    /// CPU fits and the GPU fits' host part measured with the least
    /// interference of other work on a shared machine.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// With `--predict`: also predict each method at these n (comma-separated;
    /// eKSVD: samples in all) from its GPU rows, extrapolated (needs at least
    /// two GPU sizes of the method; see the module docs).
    #[arg(long, value_delimiter = ',')]
    extrapolate: Option<Vec<usize>>,
}

/// The H200 run's GPU and CPU fit seconds (`repro/results/h200-2026-12-04-methods.txt`
/// and `-methods-eksvd.txt`), by method and n.
const H200_LOGGED: &[(&str, usize, f64, Option<f64>)] = &[
    ("PSD density (m=1000)", 100_000, 13.139, Some(52.587)),
    ("PSD density (m=1000)", 1_000_000, 43.272, None),
    ("mklaren (2 RBF, rank 20)", 100_000, 1.003, Some(0.668)),
    ("mklaren (2 RBF, rank 20)", 1_000_000, 14.793, None),
    ("eKSVD dual (Q=3, Lanczos)", 30_000, 2.911, Some(2.203)),
    ("eKSVD dual (Q=3, Lanczos)", 300_000, 42.996, None),
];

struct Preset {
    eksvd_n: Vec<usize>,
    mklaren: Vec<(usize, usize)>,
    psd: Vec<(usize, usize)>,
    /// ICD (n, d).
    icd: Vec<(usize, usize)>,
    cpu_limit: usize,
}

fn preset(name: &str) -> Preset {
    match name {
        "h200" => Preset {
            // eKSVD: N per source (3 sources; sum N up to 10^6). Each Lanczos
            // product is 6 N^2 kernel evaluations in f64 (our exp is a
            // polynomial): the largest solve runs last.
            eksvd_n: vec![10_000, 100_000, 333_334],
            // mklaren (n, d).
            mklaren: vec![(100_000, 100), (1_000_000, 100), (10_000_000, 100)],
            // PSD density (n, Nystrom centres).
            psd: vec![(100_000, 1000), (1_000_000, 1000)],
            icd: vec![(100_000, 100), (1_000_000, 100)],
            cpu_limit: 100_000,
        },
        _ => Preset { eksvd_n: vec![200, 400], mklaren: vec![(500, 5), (2000, 5)], psd: vec![(300, 40), (1000, 60)], icd: vec![(500, 5), (2000, 5)], cpu_limit: usize::MAX },
    }
}

struct Row {
    method: &'static str,
    n: usize,
    device: String,
    seconds: f64,
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

fn max_relative_difference(a: &[f64], b: &[f64]) -> f64 {
    let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(f64::MIN_POSITIVE);
    a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs() / scale))
}

fn gaussian(rng: &mut StdRng, rows: usize, cols: usize, std: f64) -> DMatrix<f64> {
    let normal = Normal::new(0.0, std).expect("valid std");
    DMatrix::from_fn(rows, cols, |_, _| normal.sample(rng))
}

/// What a job returns: its result to compare, the breakdown column, and,
/// where the job times its fit apart from its other work, the fit's seconds
/// and device counters (otherwise the row is the whole job), and the fit's
/// iterations where they vary with the data (PSD), for `--extrapolate`.
type Outcome = (Vec<f64>, String, Option<(f64, DeviceCounters)>, Option<usize>);

/// FISTA iterations of the H200 run's PSD density fits (by method and n),
/// for `--extrapolate`. The eKSVD Dual's Lanczos block products are those
/// of the largest GPU row run here (blocks of 40: 6 block products and the
/// final check from 10^3 to 10^4 rows per source; `RUST_LOG=gramian=debug`
/// prints them).
const H200_ITERATIONS: &[(&str, usize, usize)] = &[("PSD density (m=1000)", 100_000, 26), ("PSD density (m=1000)", 1_000_000, 26)];

/// A GPU row kept for `--extrapolate`: n, its counters, host seconds and
/// iterations.
struct Measured {
    n: usize,
    counters: DeviceCounters,
    host: f64,
    iterations: f64,
}

/// The value at `x > x2 > x1` of the growth through `(x1, y1)` and
/// `(x2, y2)`: where `y` grows at most linearly (`y2 / y1 <= x2 / x1`), the
/// line `a + b x` through both points (exact for a constant part plus one
/// linear in n, as a step's fixed work and its columns of length n; never
/// below `y2` when `y2 >= y1`), else the power law `a x^p` through them
/// with `p` clamped to at most 2 (exact for work quadratic in n, as a
/// Lanczos product's kernel evaluations). Where either value is 0: the
/// larger value, as a constant.
fn growth_through((x1, y1): (f64, f64), (x2, y2): (f64, f64), x: f64) -> f64 {
    if y1 <= 0.0 || y2 <= 0.0 {
        return y1.max(y2);
    }
    if y2 / y1 <= x2 / x1 {
        return y2.max(y2 + (y2 - y1) / (x2 - x1) * (x - x2));
    }
    let p = ((y2 / y1).ln() / (x2 / x1).ln()).min(2.0);
    y2 * (x / x2).powf(p)
}

/// Counters and host seconds at `n` for `iterations`, from the
/// per-iteration power law through the two largest of `rows` (sorted by
/// n), each counter at least 0.
fn extrapolate(rows: &[Measured], n: usize, iterations: f64) -> (DeviceCounters, f64) {
    let (a, b) = (&rows[rows.len() - 2], &rows[rows.len() - 1]);
    let at = |f: &dyn Fn(&Measured) -> f64| -> f64 { (growth_through((a.n as f64, f(a) / a.iterations), (b.n as f64, f(b) / b.iterations), n as f64) * iterations).max(0.0) };
    let whole = |f: &dyn Fn(&Measured) -> u64| -> u64 { at(&|m| f(m) as f64).round() as u64 };
    let mut c = DeviceCounters::default();
    c.waits = whole(&|m| m.counters.waits);
    c.transfers.host_to_device_bytes = whole(&|m| m.counters.transfers.host_to_device_bytes);
    c.transfers.device_to_host_bytes = whole(&|m| m.counters.transfers.device_to_host_bytes);
    c.transfers.descriptor_bytes = whole(&|m| m.counters.transfers.descriptor_bytes);
    c.transfers.dispatches = whole(&|m| m.counters.transfers.dispatches);
    c.allocations = whole(&|m| m.counters.allocations);
    c.allocated_bytes = whole(&|m| m.counters.allocated_bytes);
    c.releases = whole(&|m| m.counters.releases);
    c.released_bytes = whole(&|m| m.counters.released_bytes);
    for kind in ShapeKind::ALL {
        for precision in [Precision::F32, Precision::F64] {
            let class = |m: &Measured| m.counters.class(kind, precision);
            let e = c.class_mut(kind, precision);
            e.dispatches = whole(&|m| class(m).dispatches);
            e.workgroups = whole(&|m| class(m).workgroups);
            e.flops = whole(&|m| class(m).flops);
            e.bytes = whole(&|m| class(m).bytes);
            e.kernel_evaluations = whole(&|m| class(m).kernel_evaluations);
            e.launched_flops = whole(&|m| class(m).launched_flops);
            e.launched_evaluations = whole(&|m| class(m).launched_evaluations);
        }
    }
    (c, at(&|m| m.host))
}

/// The H200 run's 16-core host fit of `method` at `n`: the logged time
/// where the run timed that n, else the logged time at its n scaled by the
/// growth of the CPU fit between them here ([`growth_through`] this run's
/// two largest CPU rows of the method, both at most the logged n), with how
/// it was obtained.
fn host_reference(rows: &[Row], method: &str, n: usize) -> Option<(f64, String)> {
    let logged: Vec<(usize, f64)> = H200_LOGGED.iter().filter(|l| l.0 == method).filter_map(|l| l.3.map(|cpu| (l.1, cpu))).collect();
    if let Some(&(_, cpu)) = logged.iter().find(|l| l.0 == n) {
        return Some((cpu, "logged".into()));
    }
    let &(at, cpu) = logged.first()?;
    let mut here: Vec<&Row> = rows.iter().filter(|r| r.method == method && r.device == "cpu").collect();
    here.sort_by_key(|r| r.n);
    here.retain(|r| r.n <= at);
    let [.., a, b] = here.as_slice() else { return None };
    let (a, b) = ((a.n as f64, a.seconds), (b.n as f64, b.seconds));
    let growth = growth_through(a, b, n as f64) / growth_through(a, b, at as f64);
    Some((cpu * growth, format!("logged at {at} x {growth:.2}, the CPU's growth here from {} to {}", a.0, b.0)))
}

fn fit_eksvd(device: &Device, n: usize) -> Result<Outcome, String> {
    let mut rng = StdRng::seed_from_u64(11);
    let shared = gaussian(&mut rng, n, 4, 1.0);
    let sources: Vec<DMatrix<f64>> = (0..3).map(|_| &shared + gaussian(&mut rng, n, 4, 0.3)).collect();
    let data = MultiSource::paired(sources).map_err(|e| e.to_string())?;
    let coupling = CouplingMatrix::from_kernel(Kernel::rbf(0.25).map_err(|e| e.to_string())?, &data).map_err(|e| e.to_string())?;
    let solution = solve_dual(device, &coupling, 4, &Eigensolver::Lanczos { tolerance: 1e-8, max_restarts: 200 }, 5).map_err(|e| e.to_string())?;
    Ok((solution.eigenvalues.as_slice().to_vec(), "-".into(), None, None))
}

fn fit_mklaren(device: &Device, n: usize, d: usize) -> Result<Outcome, String> {
    let mut rng = StdRng::seed_from_u64(12);
    let x = DMatrix::<f64>::from_fn(n, d, |_, _| rng.random_range(-1.0..1.0));
    let y = DVector::from_fn(n, |i, _| (3.0 * x[(i, 0)]).sin() + 0.5 * x[(i, d - 1)] + 0.05 * rng.random_range(-1.0..1.0));
    let kernels = [Kernel::rbf(0.5 / d as f64).map_err(|e| e.to_string())?, Kernel::rbf(4.0 / d as f64).map_err(|e| e.to_string())?];
    let params = MklarenParams::new(20).lookahead(5).kernels(&kernels);
    let before = device.device_counters();
    let start = Instant::now();
    let model = params.fit_inputs(device, &[&x, &x], &y).map_err(|e| e.to_string())?;
    let fit = (start.elapsed().as_secs_f64(), device.device_counters().since(&before));
    let start = Instant::now();
    let predictions = model.predict_inputs(&[&x, &x]).map_err(|e| e.to_string())?;
    let breakdown = format!("predict {:.3} (not in the fit)", start.elapsed().as_secs_f64());
    Ok((predictions.as_slice().to_vec(), breakdown, Some(fit), None))
}

fn fit_icd(device: &Device, n: usize, d: usize) -> Result<Outcome, String> {
    let mut rng = StdRng::seed_from_u64(14);
    let x = DMatrix::<f64>::from_fn(n, d, |_, _| rng.random_range(-1.0..1.0));
    let kernel = Kernel::rbf(2.0 / d as f64).map_err(|e| e.to_string())?;
    let before = device.device_counters();
    let start = Instant::now();
    let factor = IcdParams::new(20).fit(device, &kernel, &x).map_err(|e| e.to_string())?;
    let fit = (start.elapsed().as_secs_f64(), device.device_counters().since(&before));
    Ok((vec![factor.residual_diagonal().sum(), factor.factor().norm()], format!("rank {}", factor.rank()), Some(fit), None))
}

/// The PSD density's fit on `n` samples and `centres` Nystrom centres, to
/// its gap (at most 500 iterations) or, with `iterations`, stopped after
/// that many (a row of the first iterations' counters for
/// `--extrapolate`; compared: the iterations and the gap where it stopped,
/// which the CPU and GPU fits reach alike).
fn fit_psd(device: &Device, n: usize, centres: usize, iterations: Option<usize>) -> Result<Outcome, String> {
    let mut rng = StdRng::seed_from_u64(13);
    let d = 10;
    let normal = Normal::new(0.0, 0.4).expect("valid std");
    let x = DMatrix::from_fn(n, d, |i, j| normal.sample(&mut rng) + if j == 0 { if i % 2 == 0 { 2.0 } else { -2.0 } } else { 0.0 });
    let base = BaseMeasure::isotropic_gaussian(d, 5.0).map_err(|e| e.to_string())?;
    let params = DensityParams::new(gramian::Kernel::gaussian_with_width(1.0).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?.regularisation(Regularisation::new().trace(1e-3).quadratic(1e-4)).base_measure(base).nystrom(centres, 1).solver(SolverOptions { tolerance: 1e-6, max_iterations: iterations.unwrap_or(500), check_every: 2 });
    let fitted = match (params.fit(device, &x), iterations) {
        (Ok(f), _) => f,
        (Err(gramian::Error::NotConverged { iterations: done, gap, .. }), Some(_)) => return Ok((vec![done as f64, gap], format!("stopped at {done} iterations, gap {gap:.3e}"), None, Some(done))),
        (Err(e), _) => return Err(e.to_string()),
    };
    let r = fitted.report();
    let other = r.seconds_total - r.seconds_setup - r.seconds_eigen - r.seconds_products;
    let breakdown = format!("setup {:.2} / products {:.2} / eigen {:.2} / other {:.2} ({} it)", r.seconds_setup, r.seconds_products, r.seconds_eigen, other, r.iterations);
    Ok((vec![r.primal], breakdown, None, Some(r.iterations)))
}

fn main() {
    // RUST_LOG=gramian=debug: the solvers' iteration counts (e.g. the
    // Lanczos block products).
    env_logger::init();
    let args = Args::parse();
    let mut p = preset(&args.preset);
    if let Some(n) = &args.eksvd_n {
        p.eksvd_n = n.clone();
    }
    if let Some(n) = &args.mklaren_n {
        let d = p.mklaren.first().map_or(5, |r| r.1);
        p.mklaren = n.iter().map(|&n| (n, d)).collect();
    }
    if let Some(n) = &args.psd_n {
        let centres = p.psd.first().map_or(40, |r| r.1);
        p.psd = n.iter().map(|&n| (n, centres)).collect();
    }
    let cpu_limit = args.cpu_limit.unwrap_or(p.cpu_limit);
    let methods: Vec<&str> = args.methods.split(',').map(str::trim).collect();
    // A job's method name starts with its `--methods` key's word (PSD, mklaren, ICD, eKSVD).
    let cpu_method = |name: &str| args.cpu_methods.as_ref().is_none_or(|list| list.iter().any(|m| name.to_lowercase().starts_with(m.trim())));
    let gpu = match Device::gpu() {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("no GPU adapter ({e}): CPU rows only");
            None
        }
    };
    let card = match args.predict.as_deref() {
        None => None,
        Some("measured") => match &gpu {
            Some(Device::Gpu(ctx)) => Some(cost::CardProfile::measure(ctx).unwrap_or_else(|e| panic!("measuring the adapter: {e}"))),
            _ => panic!("--predict measured needs a GPU adapter"),
        },
        Some(name) => Some(cost::CardProfile::preset(name).unwrap_or_else(|e| panic!("{e}"))),
    };
    // Whether the card predicted is the (hardware) adapter at hand: the
    // profile's model ("H200" of "NVIDIA H200") in the adapter's name.
    let on_the_card = match (&card, &gpu) {
        (Some(card), Some(Device::Gpu(ctx))) => {
            let model = card.name.split_whitespace().nth(1).unwrap_or(&card.name);
            args.predict.as_deref() != Some("measured") && !ctx.adapter().is_software && ctx.adapter().name.contains(model)
        }
        _ => false,
    };
    if let (Some(card), Some(Device::Gpu(ctx))) = (&card, &gpu) {
        ctx.set_tuning_mode(gramian::gpu::TuningMode::Off).expect("tuning mode");
        println!("predicting for {card:?}; host speed factor {}", args.host_speed);
    }
    let mut devices: Vec<Device> = vec![Device::Cpu];
    devices.extend(gpu.clone());
    println!("preset {}; devices: {}", args.preset, devices.iter().map(|d| d.describe()).collect::<Vec<_>>().join(", "));
    type Job = (&'static str, usize, Box<dyn Fn(&Device) -> Result<Outcome, String>>);
    let mut jobs: Vec<Job> = Vec::new();
    // Cheapest GPU work first, so that a run stopped by a time limit has
    // printed every row before the largest eKSVD solve.
    let psd_iterations = args.psd_iterations;
    if methods.contains(&"psd") {
        for &(n, m) in &p.psd {
            jobs.push(if m >= 1000 { ("PSD density (m=1000)", n, Box::new(move |d| fit_psd(d, n, m, psd_iterations))) } else { ("PSD density (Nystrom)", n, Box::new(move |d| fit_psd(d, n, m, psd_iterations))) });
        }
    }
    if methods.contains(&"mklaren") {
        for &(n, dim) in &p.mklaren {
            jobs.push(("mklaren (2 RBF, rank 20)", n, Box::new(move |d| fit_mklaren(d, n, dim))));
        }
    }
    if methods.contains(&"icd") {
        for &(n, dim) in &p.icd {
            jobs.push(("ICD (RBF, rank 20)", n, Box::new(move |d| fit_icd(d, n, dim))));
        }
    }
    if methods.contains(&"eksvd") {
        for &n in &p.eksvd_n {
            jobs.push(("eKSVD dual (Q=3, Lanczos)", 3 * n, Box::new(move |d| fit_eksvd(d, n))));
        }
    }
    let mut rows: Vec<Row> = Vec::new();
    let mut measured: std::collections::BTreeMap<&str, Vec<Measured>> = std::collections::BTreeMap::new();
    let mut failures = 0;
    println!();
    println!("| method | n | device | fit s | breakdown (s) | H2D MB | D2H MB | dispatches | waits (blocked s) | GFLOP | kernel evals | allocations (MB) | max rel. diff vs CPU |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (method, n, job) in &jobs {
        let mut cpu_result: Option<Vec<f64>> = None;
        for device in &devices {
            let label = if device.is_gpu() { "gpu" } else { "cpu" };
            if !device.is_gpu() && *n > cpu_limit {
                println!("| {method} | {n} | cpu | skipped (n > --cpu-limit {cpu_limit}) | | | | | | | | | |");
                continue;
            }
            if !device.is_gpu() && !cpu_method(method) {
                println!("| {method} | {n} | cpu | skipped (not in --cpu-methods) | | | | | | | | | |");
                continue;
            }
            let mut fastest: Option<(Outcome, f64, DeviceCounters)> = None;
            let mut failed = None;
            for _ in 0..args.repeat.max(1) {
                device.reset_transfer_stats();
                let start = Instant::now();
                let outcome = job(device);
                let job_seconds = start.elapsed().as_secs_f64();
                match outcome {
                    Ok(o) => {
                        let (seconds, counters) = o.2.clone().unwrap_or_else(|| (job_seconds, device.device_counters()));
                        if fastest.as_ref().is_none_or(|f| seconds < f.1) {
                            fastest = Some((o, seconds, counters));
                        }
                    }
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            let outcome = match (fastest, failed) {
                (Some(f), None) => Ok(f),
                (_, Some(e)) => Err(e),
                (None, None) => unreachable!("at least one run"),
            };
            match outcome {
                Ok(((result, breakdown, _, iterations), seconds, counters)) => {
                    let diff = match (&cpu_result, device.is_gpu()) {
                        (_, false) => "reference".to_string(),
                        (Some(r), true) => {
                            let diff = max_relative_difference(&result, r);
                            if diff.is_nan() || diff > args.max_difference {
                                failures += 1;
                                eprintln!("{method} n={n}: GPU differs from CPU by {diff:e} > {:e}", args.max_difference);
                            }
                            format!("{diff:.2e}")
                        }
                        (None, true) => "no CPU row".to_string(),
                    };
                    if !device.is_gpu() {
                        cpu_result = Some(result.clone());
                    }
                    let transfers = counters.transfers;
                    let work = counters.total();
                    // Tuning and shader compilation (first use in the process) apart.
                    let first_use = counters.first_use_seconds();
                    let fit = if first_use > 0.0 { format!("{seconds:.3} (first use {first_use:.3})") } else { format!("{seconds:.3}") };
                    println!(
                        "| {method} | {n} | {label} | {fit} | {breakdown} | {:.2} | {:.2} | {} | {} ({:.3}) | {:.3} | {} | {} ({:.2}) | {diff} |",
                        mb(transfers.host_to_device_bytes),
                        mb(transfers.device_to_host_bytes),
                        transfers.dispatches,
                        counters.waits,
                        counters.blocked_seconds(),
                        work.flops as f64 / 1e9,
                        work.kernel_evaluations,
                        counters.allocations,
                        mb(counters.allocated_bytes),
                    );
                    if let (Some(card), true) = (&card, device.is_gpu()) {
                        let host = cost::host_seconds(seconds, &counters, args.host_speed).expect("host seconds");
                        let iterations = match (*method, iterations) {
                            (_, Some(i)) => i as f64,
                            // Each Lanczos product evaluates the 3 pairs' N^2 entries once.
                            (m, None) if m.starts_with("eKSVD") => (counters.total().kernel_evaluations as f64 / (3.0 * (*n as f64 / 3.0).powi(2))).max(1.0),
                            _ => 1.0,
                        };
                        measured.entry(*method).or_default().push(Measured { n: *n, counters, host, iterations });
                        let p = cost::predict(card, &counters, host).expect("prediction");
                        let logged = if card.name.contains("H200") { H200_LOGGED.iter().find(|l| l.0 == *method && l.1 == *n) } else { None };
                        let versus = if args.predict.as_deref() == Some("measured") {
                            // The profile of this adapter: the model against this very fit.
                            let here = (seconds - first_use).max(1e-9);
                            format!("predicted / measured here {here:.3} s = {:.2}", p.total() / here)
                        } else {
                            let logged = logged.map_or("no H200 row".to_string(), |l| format!("predicted / measured H200 {:.3} s = {:.2}", l.2, p.total() / l.2));
                            if on_the_card {
                                // The preset's card is the adapter at hand: its error on this very fit as well.
                                let here = (seconds - first_use).max(1e-9);
                                format!("predicted / measured here {here:.3} s = {:.2}; {logged}", p.total() / here)
                            } else {
                                logged
                            }
                        };
                        println!(
                            "| {method} | {n} | {} (predicted) | {:.3} | device {:.3} / dispatch {:.3} / waits {:.3} / link {:.3} / host {:.3} / releases {:.3} | | | | | | | | {versus} |",
                            card.name,
                            p.total(),
                            p.device,
                            p.dispatch,
                            p.waits,
                            p.link,
                            p.host,
                            p.release,
                        );
                        for (kind, precision, c) in counters.classes() {
                            println!("|  |  | {} {precision:?} | | {} dispatches, {} workgroups, {:.3} GFLOP, {:.2} MB, {} kernel evals | | | | | | | | |", kind.name(), c.dispatches, c.workgroups, c.flops as f64 / 1e9, mb(c.bytes), c.kernel_evaluations);
                        }
                    }
                    rows.push(Row { method, n: *n, device: label.into(), seconds });
                }
                Err(e) => {
                    failures += 1;
                    println!("| {method} | {n} | {label} | failed: {e} | | | | | | | | | |");
                }
            }
        }
    }
    if let (Some(card), Some(targets)) = (&card, &args.extrapolate) {
        println!();
        println!("| method | n | predicted on | s | breakdown (s) | from the GPU rows at n = | iterations | H200 host, 16 cores (s) | host / predicted |");
        println!("|---|---|---|---|---|---|---|---|---|");
        for (method, list) in measured.iter_mut() {
            list.sort_by_key(|m| m.n);
            if list.len() < 2 {
                println!("| {method} | - | {} | - | needs two GPU sizes, has {} | | |", card.name, list.len());
                continue;
            }
            for &n in targets {
                let iterations = H200_ITERATIONS.iter().find(|l| l.0 == *method && l.1 == n).map_or(list[list.len() - 1].iterations, |l| l.2 as f64);
                let (counters, host) = extrapolate(list, n, iterations);
                let p = cost::predict(card, &counters, host).expect("prediction");
                let from: Vec<String> = list[list.len() - 2..].iter().map(|m| m.n.to_string()).collect();
                let (reference, ratio) = match host_reference(&rows, method, n) {
                    Some((s, how)) => (format!("{s:.3} ({how})"), format!("{:.1}", s / p.total())),
                    None => ("-".into(), "-".into()),
                };
                println!(
                    "| {method} | {n} | {} (extrapolated) | {:.3} | device {:.3} / dispatch {:.3} / waits {:.3} ({}) / link {:.3} / host {:.3} / releases {:.3} | {} | {iterations} | {reference} | {ratio} |",
                    card.name,
                    p.total(),
                    p.device,
                    p.dispatch,
                    p.waits,
                    counters.waits,
                    p.link,
                    p.host,
                    p.release,
                    from.join(", "),
                );
            }
        }
    }
    println!();
    for row in rows.iter().filter(|r| r.device != "cpu") {
        if let Some(r) = rows.iter().find(|c| c.method == row.method && c.n == row.n && c.device == "cpu") {
            println!("speed-up {} n={}: {:.2}x (cpu {:.3} s / gpu {:.3} s)", row.method, row.n, r.seconds / row.seconds, r.seconds, row.seconds);
        }
    }
    for row in rows.iter().filter(|r| r.device == "cpu") {
        if let Some((_, _, _, Some(logged))) = H200_LOGGED.iter().find(|l| l.0 == row.method && l.1 == row.n) {
            println!("host speed of the H200 run's host vs this one, from the CPU fit of {} n={}: {:.2} ({:.3} s here / {logged:.3} s there; a value for --host-speed)", row.method, row.n, row.seconds / logged, row.seconds);
        }
    }
    if failures > 0 {
        eprintln!("{failures} fit(s) failed");
        std::process::exit(1);
    }
}
