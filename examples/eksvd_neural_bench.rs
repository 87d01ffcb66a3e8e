//! Time per epoch of Neural eKSVD training at the NUS-WIDE-OBJ scale of the
//! paper (Section 4): `N = 30,000` samples, 5 sources, 31 classes, with
//! synthetic data of that shape (the usual NUS-WIDE-OBJ feature sets: colour
//! histogram 64, colour correlogram 144, edge direction histogram 73, wavelet
//! texture 128, block-wise colour moments 225). Needs no files.
//!
//! ```text
//! cargo run --release --features neural --example eksvd_neural_bench -- \
//!     [--backend wgpu|ndarray|both] [--samples N] [--epochs E] [--batch B]
//! ```
//!
//! Prints one row per backend: seconds per epoch (mean over epochs 2..E;
//! epoch 1 includes warm-up such as shader compilation) and of epoch 1.

use std::time::Instant;

use gramian::eksvd::neural::{NeuralBackend, NeuralEksvdParams};
use gramian::eksvd::MultiSource;
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

fn main() -> AnyResult<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut backends, mut samples, mut epochs, mut batch) = (vec![NeuralBackend::NdArray, NeuralBackend::Wgpu], 30_000usize, 3usize, 1024usize);
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).ok_or(format!("{} needs a value", args[i]))?;
        match args[i].as_str() {
            "--backend" => {
                backends = match value.as_str() {
                    "both" => vec![NeuralBackend::NdArray, NeuralBackend::Wgpu],
                    other => vec![NeuralBackend::parse(other).ok_or("--backend: wgpu, ndarray or both")?],
                }
            }
            "--samples" => samples = value.parse()?,
            "--epochs" => epochs = value.parse()?,
            "--batch" => batch = value.parse()?,
            other => return Err(format!("unknown argument {other}").into()),
        }
        i += 2;
    }
    let start = Instant::now();
    let (data, labels) = synthetic(samples, 7)?;
    println!("synthetic NUS-WIDE-OBJ shape: N = {samples}, sources {DIMS:?}, {CLASSES} classes (generated in {:.1} s)", start.elapsed().as_secs_f64());
    println!("model: MLP d_q-512-256 per source (ReLU), k = 64 components, batch {batch}, Adam");
    println!("| backend | epochs | seconds per epoch (2..E) | epoch 1 (s) | steps per epoch | final sum_k (J_k / N)^2 | final CE |");
    println!("|---|---|---|---|---|---|---|");
    for backend in backends {
        let params = NeuralEksvdParams::new(64).hidden(vec![512]).d_phi(256).batch_size(batch).max_epochs(epochs).learning_rate(1e-3).backend(backend).progress(true);
        match params.fit(&data, &labels, None) {
            Ok(model) => {
                let h = model.history();
                let last = h.epochs.last().expect("at least one epoch");
                println!(
                    "| {} | {} | {:.3} | {:.3} | {} | {:.3e} | {:.4} |",
                    backend.name(),
                    h.epochs.len(),
                    h.seconds_per_epoch(),
                    h.epochs[0].seconds,
                    samples.div_ceil(batch),
                    last.objective_squared,
                    last.cross_entropy
                );
            }
            Err(e) => println!("| {} | - | failed: {e} | | | | |", backend.name()),
        }
    }
    Ok(())
}
