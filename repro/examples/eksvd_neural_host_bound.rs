//! Neural eKSVD training where the arithmetic is nothing and every step is
//! bound by the host's work per kernel, as a step of the benchmark's size is
//! on a real GPU: the same training loop as `eksvd_neural_bench`'s UCI Digit
//! fit (batches of 64, a validation set, per-epoch evaluation) at tiny
//! widths. On a software Vulkan device (lavapipe), where larger steps are
//! bound by its arithmetic on the CPU, this is how the host work saved by
//! replaying steps and evaluations shows.
//!
//! ```text
//! cargo run --release -p gramian-repro --features neural,burn/fusion --example eksvd_neural_host_bound -- \
//!     [--width W] [--epochs E] [--fits F]
//! ```
//!
//! Synthetic data: 3 sources of `W` columns (default 8), 10 classes, 1200
//! training and 400 validation rows; networks `W -> W` (hidden) `-> W`
//! (`d_phi`), `min(4, W)` components. Runs `F` fits (default 4) on the GPU,
//! alternating replayed and eager steps, and prints one row per fit: the
//! setup, epoch 1's steps, and per later epoch the seconds of steps and of
//! the evaluation (training loss and validation scores), with how many steps
//! and evaluations were replayed.

use std::time::Instant;

use clap::Parser;
use gramian::eksvd::neural::{shared_gpu, NeuralEksvdParams};
use gramian::{Labelled, MultiSource};
use nalgebra::DMatrix;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

#[derive(Parser)]
#[command(about = "Neural eKSVD fits bound by the host's work per kernel (tiny widths), replayed against eager steps")]
struct Args {
    /// Columns per source, hidden units, and d_phi.
    #[arg(long, value_name = "W", default_value_t = 8)]
    width: usize,
    /// Epochs per fit (no early stopping).
    #[arg(long, value_name = "E", default_value_t = 20)]
    epochs: usize,
    /// Fits, alternating replayed and eager steps (replayed first).
    #[arg(long, value_name = "F", default_value_t = 4)]
    fits: usize,
}

/// `n` samples of 3 sources, class means plus standard normal noise.
fn synthetic(n: usize, width: usize, seed: u64) -> AnyResult<(MultiSource, Vec<usize>)> {
    let mut rng = StdRng::seed_from_u64(seed);
    let labels: Vec<usize> = (0..n).map(|i| i % 10).collect();
    let mut sources = Vec::new();
    for _ in 0..3 {
        let means = DMatrix::from_fn(10, width, |_, _| rng.sample::<f64, _>(StandardNormal));
        sources.push(DMatrix::from_fn(n, width, |i, j| means[(labels[i], j)] + rng.sample::<f64, _>(StandardNormal)));
    }
    Ok((MultiSource::paired(sources)?, labels))
}

fn main() -> AnyResult<()> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    if args.width == 0 || args.epochs < 2 {
        return Err("--width must be positive and --epochs at least 2".into());
    }
    let device = shared_gpu()?;
    println!("build: {}", if cfg!(debug_assertions) { "dev profile (debug assertions on)" } else { "release" });
    println!("wgpu: {}", device.describe());
    let (train, train_labels) = synthetic(1200, args.width, 1)?;
    let (validation, validation_labels) = synthetic(400, args.width, 2)?;
    let (train, validation) = (Labelled::new(train, train_labels)?, Labelled::new(validation, validation_labels)?);
    println!("3 sources of {} columns, 1200 training + 400 validation rows, batches of 64, {} epochs", args.width, args.epochs);
    println!("| fit | steps | total s | setup s | epoch 1 steps s | steps s per later epoch | evaluation s per later epoch | steps replayed | evaluations replayed |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for fit in 0..args.fits {
        let replay = fit % 2 == 0;
        let params = NeuralEksvdParams::new(4.min(args.width))
            .hidden(vec![args.width])
            .d_phi(args.width)
            .batch_size(64)
            .max_epochs(args.epochs)
            .patience(args.epochs)
            .seed(0)
            .graph_replay(replay);
        let start = Instant::now();
        let model = params.fit_with_validation(&device, &train, &validation)?;
        let total = start.elapsed().as_secs_f64();
        let h = model.history();
        let later = h.epochs.len().saturating_sub(1).max(1) as f64;
        let steps: f64 = h.epochs.iter().skip(1).map(|e| e.seconds).sum::<f64>() / later;
        let evaluations: f64 = h.epochs.iter().skip(1).map(|e| e.evaluation_seconds).sum::<f64>() / later;
        println!(
            "| {} | {} | {:.2} | {:.3} | {:.3} | {:.4} | {:.4} | {} | {} |",
            fit + 1,
            if replay { "replayed" } else { "eager" },
            total,
            h.setup_seconds,
            h.epochs.first().map_or(0.0, |e| e.seconds),
            steps,
            evaluations,
            h.replayed_steps,
            h.replayed_evaluations
        );
    }
    Ok(())
}
