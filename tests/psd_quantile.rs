//! Non-crossing multiple quantile regression with PSD models.

mod common;

use gramian::psd::regression::QuantileParams;
use gramian::psd::{PsdError, SolverOptions};
use gramian::Device;
use nalgebra::{DMatrix, DVector};
use rand::rngs::StdRng;
use rand::Rng;
use rand_distr::{Distribution, Normal};

/// The distribution of App. E: X ~ 1/2 U(0, 1/3) + 1/2 U(2/3, 1), Y | x ~ N(0, s(x)^2).
fn appendix_e(n: usize, rng: &mut StdRng) -> (DMatrix<f64>, DVector<f64>) {
    let x = DMatrix::from_fn(n, 1, |_, _| if rng.random::<bool>() { rng.random_range(0.0..1.0 / 3.0) } else { rng.random_range(2.0 / 3.0..1.0) });
    let y = DVector::from_fn(n, |i, _| {
        let t = x[(i, 0)];
        let s = if t <= 1.0 / 3.0 { 1.0 / 3.0 - t } else { t - 2.0 / 3.0 };
        s * Normal::new(0.0, 1.0).unwrap().sample(rng)
    });
    (x, y)
}

#[test]
fn quantile_curves_never_cross_and_cover_their_levels() {
    let mut rng = common::rng();
    let (x, y) = appendix_e(120, &mut rng);
    let params = QuantileParams::new(0.15, &[0.25, 0.5, 0.75]).regularisation(1e-4, 1e-4, 1e-5).solver(SolverOptions { tolerance: 1e-5, max_iterations: 20_000, check_every: 10 });
    let model = params.fit(&Device::Cpu, &x, &y).unwrap();
    assert!(model.report().gap <= 1e-5);
    let grid = DMatrix::from_fn(2001, 1, |i, _| -0.5 + 2.0 * i as f64 / 2000.0);
    let q = model.predict(&Device::Cpu, &grid).unwrap();
    for i in 0..grid.nrows() {
        assert!(q[(i, 0)] <= q[(i, 1)] && q[(i, 1)] <= q[(i, 2)], "crossing at {}", grid[(i, 0)]);
    }
    // Empirical coverage on the training data is near the level (pinball optimality).
    let fitted = model.predict(&Device::Cpu, &x).unwrap();
    for (j, tau) in [0.25, 0.5, 0.75].iter().enumerate() {
        let below = (0..x.nrows()).filter(|&i| y[i] <= fitted[(i, j)] + 1e-9).count() as f64 / x.nrows() as f64;
        assert!((below - tau).abs() < 0.12, "level {tau}: coverage {below}");
    }
}

#[test]
fn quantile_levels_are_validated() {
    let mut rng = common::rng();
    let (x, y) = appendix_e(20, &mut rng);
    for levels in [vec![0.5, 0.25], vec![0.0, 0.5], vec![0.5, 1.0], vec![0.3, 0.3], vec![]] {
        assert!(matches!(QuantileParams::new(0.2, &levels).fit(&Device::Cpu, &x, &y), Err(PsdError::InvalidParameter { .. })), "{levels:?}");
    }
    assert!(matches!(QuantileParams::new(0.2, &[0.5]).fit(&Device::Cpu, &x, &y.rows(0, 10).into_owned()), Err(PsdError::Compute(_))));
    let mut bad = y.clone();
    bad[2] = f64::NAN;
    assert!(matches!(QuantileParams::new(0.2, &[0.5]).fit(&Device::Cpu, &x, &bad), Err(PsdError::Compute(_))));
}
