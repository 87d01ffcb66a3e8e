//! Quickstart: fit a kernel method on whatever device `Device::auto()` finds
//! and on the CPU, and compare the two.
//!
//! The method is mklaren (multiple-kernel low-rank regression): a target
//! that depends on two of four inputs, three RBF kernels of different
//! widths, a rank-40 model. The table gives each device's fit time, the test
//! error against the mean predictor, and how far the device's predictions are
//! from the CPU's. Without a GPU both rows run the CPU path (the first is
//! then the same computation again).
//!
//! ```text
//! cargo run --example quickstart
//! GRAMIAN_DEVICE=gpu cargo run --example quickstart   # accept a software GPU (lavapipe)
//! ```

use std::time::Instant;

use gramian::prelude::*;
use nalgebra::{DMatrix, DVector};
use rand::{rngs::StdRng, Rng, SeedableRng};

fn rmse(a: &DVector<f64>, b: &DVector<f64>) -> f64 {
    ((a - b).norm_squared() / a.len() as f64).sqrt()
}

fn main() -> Result<(), Error> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let device = Device::auto();
    let (n_train, n_test, d) = (4000, 1000, 4);
    let mut rng = StdRng::seed_from_u64(42);
    let x = DMatrix::<f64>::from_fn(n_train + n_test, d, |_, _| rng.random_range(-1.0..1.0));
    let y = DVector::from_fn(n_train + n_test, |i, _| (3.0 * x[(i, 0)]).sin() + x[(i, 1)] * x[(i, 1)] + 0.05 * rng.random_range(-1.0..1.0));
    let train = Supervised::new(x.rows(0, n_train).into_owned(), y.rows(0, n_train).into_owned())?;
    let (x_test, y_test) = (x.rows(n_train, n_test).into_owned(), y.rows(n_train, n_test).into_owned());
    let kernels = [Kernel::rbf(0.1)?, Kernel::rbf(0.3)?, Kernel::rbf(1.0)?];
    let params = MklarenParams::new(40).lookahead(10).lambda(1e-3).kernels(&kernels);

    // A first small fit on the device compiles its shaders (and, on a GPU,
    // tunes its products), so the timed fit measures the fit alone.
    params.fit(&device, &Supervised::new(x.rows(0, 200).into_owned(), y.rows(0, 200).into_owned())?)?;
    let mut rows = Vec::new();
    for on in [&device, &Device::cpu()] {
        let start = Instant::now();
        let model = params.fit(on, &train)?;
        let seconds = start.elapsed().as_secs_f64();
        rows.push((on.describe(), seconds, model.predict(&x_test)?));
    }
    let cpu_prediction = &rows[1].2;
    let scale = cpu_prediction.amax().max(f64::MIN_POSITIVE);
    let mean = DVector::from_element(n_test, train.y.mean());

    println!("gramian quickstart: mklaren, rank 40, 3 RBF kernels, {n_train} training and {n_test} test samples, {d} inputs");
    println!("{:<56} {:>10} {:>10} {:>22}", "device", "fit (s)", "test RMSE", "max |diff| vs CPU");
    for (name, seconds, prediction) in &rows {
        println!("{name:<56} {seconds:>10.3} {:>10.4} {:>22.2e}", rmse(&y_test, prediction), (prediction - cpu_prediction).amax() / scale);
    }
    println!("mean predictor: test RMSE {:.4}", rmse(&y_test, &mean));
    match &device {
        Device::Gpu(gpu) if gpu.adapter().is_software => println!("(a software GPU runs its shaders on the CPU, far slower than the CPU path: its row shows agreement, not speed)"),
        Device::Cpu => println!("(no GPU found: both rows are the CPU path; GRAMIAN_DEVICE=gpu accepts a software GPU)"),
        Device::Gpu(_) => {}
    }

    // The GPU fits in f64 where the adapter has it, otherwise in f32.
    let tolerance = if device.best_precision() == Precision::F64 { 1e-6 } else { 1e-2 };
    let difference = (&rows[0].2 - cpu_prediction).amax() / scale;
    if !(difference <= tolerance) || !(rmse(&y_test, &rows[0].2) < 0.5 * rmse(&y_test, &mean)) {
        eprintln!("verification FAILED: device vs CPU {difference:.2e} (tolerance {tolerance:e}), or no better than the mean predictor");
        std::process::exit(1);
    }
    println!("verified: the device's predictions are within {tolerance:e} of the CPU's (relative, max-norm)");
    Ok(())
}
