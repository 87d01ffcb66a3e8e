//! The heteroscedastic toy model of Yuan & Wahba (2004), the documented
//! stand-in for the LSC 05 data of the paper; shared by the
//! `psd_heteroscedastic` example and `tests/psd_heteroscedastic.rs`.

use nalgebra::{DMatrix, DVector};
use rand::{rngs::StdRng, Rng};
use rand_distr::{Distribution, Normal};

/// Mean `m(x) = 2 (exp(-30 (x - 1/4)^2) + sin(pi x^2)) - 2`.
pub fn true_mean(x: f64) -> f64 {
    2.0 * ((-30.0 * (x - 0.25).powi(2)).exp() + (std::f64::consts::PI * x * x).sin()) - 2.0
}

/// Variance, `log v(x) = sin(2 pi x)`.
pub fn true_variance(x: f64) -> f64 {
    (2.0 * std::f64::consts::PI * x).sin().exp()
}

/// `n` samples `x ~ U(0, 1)`, `y | x ~ N(m(x), v(x))`.
pub fn toy_data(n: usize, rng: &mut StdRng) -> (DMatrix<f64>, DVector<f64>) {
    let x = DMatrix::from_fn(n, 1, |_, _| rng.random_range(0.0..1.0));
    let normal = Normal::new(0.0, 1.0).expect("unit normal");
    let y = DVector::from_fn(n, |i, _| true_mean(x[(i, 0)]) + true_variance(x[(i, 0)]).sqrt() * normal.sample(rng));
    (x, y)
}
