//! A PSD model of a density in a few lines: a bimodal 1-D sample, sigma
//! chosen by 3-fold cross-validation of the log-likelihood, and the checks
//! that make the model a density (closed-form integral 1, non-negative on a
//! grid, by construction `f(x) = phi(x)^T A phi(x)` with `A >= 0`).
//!
//! ```text
//! cargo run --example psd_quick
//! ```

use gramian::prelude::*;
use nalgebra::DMatrix;
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::StandardNormal;
use gramian::psd::Regularisation;

fn main() -> Result<(), Error> {
    let device = Device::auto();
    let mut rng = StdRng::seed_from_u64(5);
    let x = DMatrix::<f64>::from_fn(200, 1, |_, _| {
        let centre = if rng.random_bool(0.4) { -1.0 } else { 1.2 };
        centre + 0.3 * rng.sample::<f64, _>(StandardNormal)
    });
    let candidates: Vec<DensityParams> = [0.2, 0.4, 0.8, 1.6, 3.2].iter().map(|&s| Ok(DensityParams::new(Kernel::gaussian_with_width(s)?)?.regularisation(Regularisation::new().trace(1e-3).quadratic(1e-3)))).collect::<Result<_, Error>>()?;
    let cv = cross_validate(&device, &candidates, &x, &Splits::k_fold(3)?, |model: &PsdDensity, held: &DMatrix<f64>| model.mean_log_likelihood(held))?;
    let model = candidates[cv.best].fit(&device, &x)?;

    let grid = DMatrix::from_fn(401, 1, |i, _| -4.0 + 0.02 * i as f64);
    let p = model.predict(&grid)?;
    println!("PSD density on {} (n = {})", device.describe(), x.nrows());
    for (c, s) in candidates.iter().zip(&cv.mean_scores) {
        println!("  sigma {:<4} CV mean log-likelihood {s:.4}", c.kernel_width());
    }
    println!("chosen sigma {}, integral {:.10}, min p on [-4, 4] {:.2e}", candidates[cv.best].kernel_width(), model.integral()?, p.min());
    Ok(())
}
