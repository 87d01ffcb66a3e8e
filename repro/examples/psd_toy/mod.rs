//! The heteroscedastic toy model of Yuan & Wahba (2004), the documented
//! stand-in for the LSC 05 data of the paper; shared by the
//! `psd_heteroscedastic` example and `tests/psd/heteroscedastic.rs`; and the
//! quantile-regression data of App. E (`psd_quantile`, `psd_speed`). Each
//! includer uses some of the functions only.

use nalgebra::{DMatrix, DVector};
use rand::{rngs::StdRng, Rng};
use rand_distr::{Distribution, Normal};

/// Mean `m(x) = 2 (exp(-30 (x - 1/4)^2) + sin(pi x^2)) - 2`.
#[allow(dead_code)]
pub fn true_mean(x: f64) -> f64 {
    2.0 * ((-30.0 * (x - 0.25).powi(2)).exp() + (std::f64::consts::PI * x * x).sin()) - 2.0
}

/// Variance, `log v(x) = sin(2 pi x)`.
#[allow(dead_code)]
pub fn true_variance(x: f64) -> f64 {
    (2.0 * std::f64::consts::PI * x).sin().exp()
}

/// `n` samples `x ~ U(0, 1)`, `y | x ~ N(m(x), v(x))`.
#[allow(dead_code)]
pub fn toy_data(n: usize, rng: &mut StdRng) -> (DMatrix<f64>, DVector<f64>) {
    let x = DMatrix::from_fn(n, 1, |_, _| rng.random_range(0.0..1.0));
    let normal = Normal::new(0.0, 1.0).expect("unit normal");
    let y = DVector::from_fn(n, |i, _| true_mean(x[(i, 0)]) + true_variance(x[(i, 0)]).sqrt() * normal.sample(rng));
    (x, y)
}

/// Spread of the quantile-regression distribution of App. E:
/// `s(x) = 1/3 - x` on `[0, 1/3]`, `x - 2/3` on `[2/3, 1]`, 0 elsewhere.
#[allow(dead_code)]
pub fn quantile_spread(t: f64) -> f64 {
    if (0.0..=1.0 / 3.0).contains(&t) {
        1.0 / 3.0 - t
    } else if (2.0 / 3.0..=1.0).contains(&t) {
        t - 2.0 / 3.0
    } else {
        0.0
    }
}

/// `n` samples of App. E's quantile data: `X ~ 1/2 U(0, 1/3) + 1/2 U(2/3, 1)`, `Y | x ~ N(0, s(x)^2)`.
#[allow(dead_code)]
pub fn quantile_data(n: usize, rng: &mut StdRng) -> (DMatrix<f64>, DVector<f64>) {
    let x = DMatrix::from_fn(n, 1, |_, _| if rng.random::<bool>() { rng.random_range(0.0..1.0 / 3.0) } else { rng.random_range(2.0 / 3.0..1.0) });
    let normal = Normal::new(0.0, 1.0).expect("unit normal");
    let y = DVector::from_fn(n, |i, _| quantile_spread(x[(i, 0)]) * normal.sample(rng));
    (x, y)
}
