//! Time per epoch of Neural eKSVD training at the NUS-WIDE-OBJ scale of the
//! paper (Section 4): `N = 30,000` samples, 5 sources, 31 classes, with
//! synthetic data of that shape (the usual NUS-WIDE-OBJ feature sets: colour
//! histogram 64, colour correlogram 144, edge direction histogram 73, wavelet
//! texture 128, block-wise colour moments 225). Needs no files.
//!
//! ```text
//! cargo run --release -p gramian-repro --features neural --example eksvd_neural_bench -- \
//!     [--backend wgpu|cpu|both] [--samples N] [--epochs E] [--cpu-epochs E] \
//!     [--batch B] [--mfeat DIR] [--mfeat-epochs E] [--replay on|off|both]
//! ```
//!
//! Prints one row per backend: seconds per epoch (mean over epochs 2..E;
//! epoch 1 includes warm-up such as shader compilation) and of epoch 1.
//! `wgpu` trains on gramian's GPU ([`shared_gpu`], opened like
//! `Device::gpu()`: burn runs on gramian's own wgpu device and queue),
//! `cpu` (burn Flex) on the host's CPU cores (`--cpu-epochs`, default 2: the CPU
//! rows are the slow ones). `--replay` (default `both`) times the GPU with
//! its steps replayed from one captured step (the library's default,
//! `NeuralEksvdParams::graph_replay`), eager, or a row each. With `--mfeat DIR` (the folder of
//! `mfeat-*.csv`), also one full UCI Digit fit per backend: split 0 of
//! `eksvd_neural_mfeat`'s protocol, views fac+fou+kar, its first candidate
//! (k = 32, eta = 1, lr 1e-3, weight decay 0.05, batches of 64, at most
//! `--mfeat-epochs` = 100 epochs, early stopping with patience 20), timed end to end (training,
//! per-epoch curves and validation included), with its test macro-F1 and
//! where the seconds went (setup before the first epoch, the first epoch's
//! steps, the later steps, the per-epoch evaluations).

use std::time::Instant;

use clap::Parser;
use gramian_repro::datasets::macro_f1;
use gramian_repro::evaluation::MultiViewData;
use gramian::eksvd::neural::{shared_gpu, NeuralBackend, NeuralEksvdParams};
use gramian::estimator::{Fit, Predict};
use gramian::{Device, Labelled, MultiSource};
use nalgebra::DMatrix;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

const DIMS: [usize; 5] = [64, 144, 73, 128, 225];
const CLASSES: usize = 31;

fn synthetic(n: usize, seed: u64) -> AnyResult<(MultiSource, Vec<usize>)> {
    let mut rng = StdRng::seed_from_u64(seed);
    let labels: Vec<usize> = (0..n).map(|i| i % CLASSES).collect();
    let mut sources = Vec::new();
    for &d in &DIMS {
        let means = DMatrix::from_fn(CLASSES, d, |_, _| 0.5 * rng.sample::<f64, _>(StandardNormal));
        sources.push(DMatrix::from_fn(n, d, |i, j| means[(labels[i], j)] + rng.sample::<f64, _>(StandardNormal)));
    }
    Ok((MultiSource::paired(sources)?, labels))
}

/// `wgpu`, `cpu` or `both` (the GPU first).
fn parse_backends(text: &str) -> Result<Vec<NeuralBackend>, String> {
    match text {
        "both" => Ok(vec![NeuralBackend::Wgpu, NeuralBackend::Cpu]),
        other => NeuralBackend::parse(other).map(|b| vec![b]).ok_or_else(|| "wgpu, cpu or both".into()),
    }
}

#[derive(Parser)]
#[command(about = "Time per epoch of Neural eKSVD training at the NUS-WIDE-OBJ scale (synthetic data), optionally a full UCI Digit fit")]
struct Args {
    /// Backends to time: wgpu, cpu or both.
    // `std::vec::Vec`, not `Vec`: clap then parses the whole list from one value.
    #[arg(long = "backend", value_name = "BACKEND", default_value = "both", value_parser = parse_backends)]
    backends: std::vec::Vec<NeuralBackend>,
    /// Synthetic samples N.
    #[arg(long, value_name = "N", default_value_t = 30_000)]
    samples: usize,
    /// Epochs on the GPU (wgpu).
    #[arg(long, value_name = "E", default_value_t = 3)]
    epochs: usize,
    /// Epochs on the CPU (burn Flex).
    #[arg(long, value_name = "E", default_value_t = 2)]
    cpu_epochs: usize,
    /// Mini-batch size of the synthetic runs.
    #[arg(long, value_name = "B", default_value_t = 1024)]
    batch: usize,
    /// Folder holding mfeat-*.csv: also one full UCI Digit fit per backend.
    #[arg(long, value_name = "DIR")]
    mfeat: Option<String>,
    /// Most epochs of the UCI Digit fit.
    #[arg(long, value_name = "E", default_value_t = 100)]
    mfeat_epochs: usize,
    /// GPU steps: `on` (one step captured and replayed, the library's
    /// default), `off` (every step eager) or `both` (a row each).
    #[arg(long, value_name = "MODE", default_value = "both", value_parser = ["on", "off", "both"])]
    replay: String,
}

/// The rows to time: each GPU once per replay mode, the CPU once.
fn rows<'a>(devices: &'a [(NeuralBackend, Device)], modes: &'a [bool]) -> impl Iterator<Item = (NeuralBackend, &'a Device, bool)> + 'a {
    devices.iter().flat_map(move |(backend, device)| {
        let modes: &[bool] = if *backend == NeuralBackend::Cpu { &[false] } else { modes };
        modes.iter().map(move |&replay| (*backend, device, replay))
    })
}

/// A row's name: the backend, and for the GPU whether its steps are replayed.
fn row_name(backend: NeuralBackend, replay: bool) -> String {
    match (backend, replay) {
        (NeuralBackend::Cpu, _) => backend.name().to_string(),
        (_, true) => format!("{} replayed", backend.name()),
        (_, false) => format!("{} eager", backend.name()),
    }
}

fn main() -> AnyResult<()> {
    // burn's CPU backend allocates per operation: keep freed memory for reuse.
    gramian_repro::process::reuse_freed_memory();
    // Warnings (e.g. a fit that falls back to eager steps) on stderr.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    let (backends, samples, epochs, cpu_epochs, batch) = (args.backends, args.samples, args.epochs, args.cpu_epochs, args.batch);
    let (mfeat, mfeat_epochs) = (args.mfeat, args.mfeat_epochs);
    let replay_modes: &[bool] = match args.replay.as_str() {
        "on" => &[true],
        "off" => &[false],
        _ => &[true, false],
    };
    println!("build: {}", if cfg!(debug_assertions) { "dev profile (debug assertions on)" } else { "release" });
    // The gramian device of each backend: the GPU is opened once and burn
    // runs on its wgpu device and queue.
    let mut devices = Vec::new();
    for &backend in &backends {
        match backend {
            NeuralBackend::Wgpu => match shared_gpu() {
                Ok(d) => devices.push((backend, d)),
                Err(e) => println!("wgpu: {e}"),
            },
            NeuralBackend::Cpu => devices.push((backend, Device::Cpu)),
        }
        if let Some((_, d)) = devices.last() {
            println!("{}: {}", backend.name(), d.describe());
        }
    }
    let start = Instant::now();
    let (data, labels) = synthetic(samples, 7)?;
    println!("synthetic NUS-WIDE-OBJ shape: N = {samples}, sources {DIMS:?}, {CLASSES} classes (generated in {:.1} s)", start.elapsed().as_secs_f64());
    println!("model: MLP d_q-512-256 per source (ReLU), k = 64 components, batch {batch}, Adam");
    println!("| backend | epochs | seconds per epoch (2..E) | epoch 1 (s) | steps per epoch | steps replayed | final sum_k (J_k / N)^2 | final CE |");
    println!("|---|---|---|---|---|---|---|---|");
    let labelled = Labelled::new(data, labels)?;
    for (backend, device, replay) in rows(&devices, replay_modes) {
        let e = if backend == NeuralBackend::Cpu { cpu_epochs } else { epochs };
        let params = NeuralEksvdParams::new(64).hidden(vec![512]).d_phi(256).batch_size(batch).max_epochs(e).learning_rate(1e-3).graph_replay(replay).progress(true);
        match params.fit(device, &labelled) {
            Ok(model) => {
                let h = model.history();
                let last = h.epochs.last().expect("at least one epoch");
                println!(
                    "| {} | {} | {:.3} | {:.3} | {} | {} | {:.3e} | {:.4} |",
                    row_name(backend, replay),
                    h.epochs.len(),
                    h.seconds_per_epoch(),
                    h.epochs[0].seconds,
                    samples.div_ceil(batch),
                    h.replayed_steps,
                    last.objective_squared,
                    last.cross_entropy
                );
            }
            Err(e) => println!("| {} | - | failed: {e} | | | | | |", row_name(backend, replay)),
        }
    }
    if let Some(dir) = mfeat {
        let views = MultiViewData::load_csv_views(&dir, "mfeat-", &["fac", "fou", "kar"])?;
        let split = views.split(0.6, 0.2, 0)?;
        println!("\nfull UCI Digit fit: split 0 (60/20/20, seed 0), fac+fou+kar, k = 32, eta = 1, lr 1e-3, wd 0.05, batch 64, <= {mfeat_epochs} epochs, patience 20");
        println!("| backend | fit seconds | setup s | epoch 1 steps s | later steps s | evaluations s | epochs run | best epoch | seconds per epoch (steps only) | steps replayed | evaluations replayed | test macro-F1 % |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
        let train = Labelled::new(split.train.clone(), split.train_labels.clone())?;
        let validation = Labelled::new(split.validation.clone(), split.validation_labels.clone())?;
        for (backend, device, replay) in rows(&devices, replay_modes) {
            let params = NeuralEksvdParams::new(32).hidden(vec![256]).d_phi(128).eta(1.0).learning_rate(1e-3).weight_decay(0.05).batch_size(64).max_epochs(mfeat_epochs).patience(20).seed(0).graph_replay(replay);
            let start = Instant::now();
            match params.fit_with_validation(device, &train, &validation) {
                Ok(model) => {
                    let seconds = start.elapsed().as_secs_f64();
                    let f1 = macro_f1(&split.test_labels, &model.predict(&split.test)?);
                    let h = model.history();
                    // Where the fit's seconds went: before the first epoch,
                    // the first epoch's steps (first compilations), the
                    // other steps, and the per-epoch evaluations.
                    let first = h.epochs.first().map_or(0.0, |e| e.seconds);
                    let later: f64 = h.epochs.iter().skip(1).map(|e| e.seconds).sum();
                    let evaluations: f64 = h.epochs.iter().map(|e| e.evaluation_seconds).sum();
                    println!(
                        "| {} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {:.4} | {} | {} | {:.2} |",
                        row_name(backend, replay),
                        seconds,
                        h.setup_seconds,
                        first,
                        later,
                        evaluations,
                        h.epochs.len(),
                        model.best_epoch(),
                        h.seconds_per_epoch(),
                        h.replayed_steps,
                        h.replayed_evaluations,
                        100.0 * f1
                    );
                }
                Err(e) => println!("| {} | failed: {e} | | | | | | | | | | |", row_name(backend, replay)),
            }
        }
    }
    Ok(())
}
