//! Data of the PSD examples, shared by `psd_density_10d` and `psd_speed`.

use nalgebra::DMatrix;
use rand::{rngs::StdRng, Rng};
use rand_distr::{Distribution, Normal};

/// n samples of 1/2 N(-2 e_1, c I) + 1/2 N(2 e_1, c I) in 10-D,
/// c = 1/sqrt(2 pi) (the paper's Appendix E).
pub fn mixture_10d(n: usize, rng: &mut StdRng) -> DMatrix<f64> {
    let sd = (1.0 / (2.0 * std::f64::consts::PI).sqrt()).sqrt();
    let noise = Normal::new(0.0, sd).expect("positive standard deviation");
    let mut x = DMatrix::from_fn(n, 10, |_, _| noise.sample(rng));
    for i in 0..n {
        x[(i, 0)] += if rng.random::<bool>() { 2.0 } else { -2.0 };
    }
    x
}
