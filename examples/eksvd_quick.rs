//! eKSVD in a few lines: three paired sources sharing a latent signal, the
//! Dual solver, scores of new samples, and the KKT conditions of the paper
//! (Eq. 5) as a check of the solution.
//!
//! ```text
//! cargo run --example eksvd_quick
//! ```

use gramian::eksvd::FeatureMap;
use gramian::prelude::*;
use nalgebra::DMatrix;
use rand::{rngs::StdRng, Rng, SeedableRng};

fn main() -> Result<(), Error> {
    let device = Device::auto();
    let mut rng = StdRng::seed_from_u64(1);
    let n = 300;
    let latent = DMatrix::<f64>::from_fn(n, 2, |_, _| rng.random_range(-1.0..1.0));
    let source = |rng: &mut StdRng, d: usize| {
        let mix = DMatrix::<f64>::from_fn(2, d, |_, _| rng.random_range(-1.0..1.0));
        &latent * mix + DMatrix::from_fn(n, d, |_, _| 0.1 * rng.random_range(-1.0..1.0))
    };
    let sources = [source(&mut rng, 5), source(&mut rng, 8), source(&mut rng, 3)];
    let train = MultiSource::paired(sources.iter().map(|s| s.rows(0, 250).into_owned()).collect())?;
    let test = MultiSource::paired(sources.iter().map(|s| s.rows(250, 50).into_owned()).collect())?;

    let params = EksvdParams::new(2).feature_maps(vec![FeatureMap::random_fourier(0.2, 64)?; 3]).seed(7);
    let model = params.fit(&device, &train)?;
    let scores = model.transform(&test)?; // 50 x (3 sources * 2 components)
    let kkt = model.kkt(0)?;

    println!("eKSVD on {} ({} sources, {} training samples)", device.describe(), train.n_sources(), 250);
    println!("eigenvalues lambda_k = 1/gamma_k: {:.4?}", model.eigenvalues().as_slice());
    println!("test scores: {} x {}", scores.nrows(), scores.ncols());
    println!("KKT residuals of component 0 (Eq. 5, relative): stationarity {:.2e}, dual scaling {:.2e}", kkt.stationarity, kkt.dual_scaling);
    Ok(())
}
