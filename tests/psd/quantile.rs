//! Non-crossing multiple quantile regression with PSD models.

use crate::common;

use gramian::psd::regression::QuantileParams;
use gramian::psd::SolverOptions;
use gramian::Error;
use gramian::Device;
use nalgebra::DMatrix;
use gramian::psd::Regularisation;


#[test]
fn quantile_curves_never_cross_and_cover_their_levels() {
    let mut rng = common::rng();
    let (x, y) = common::quantile_appendix_e(120, &mut rng);
    let params = QuantileParams::new(gramian::Kernel::gaussian_with_width(0.15).unwrap(), &[0.25, 0.5, 0.75]).unwrap().regularisation(Regularisation::new().linear(1e-4).trace(1e-4).quadratic(1e-5)).solver(SolverOptions { tolerance: 1e-5, max_iterations: 20_000, check_every: 10 });
    let model = params.fit_xy(&Device::Cpu, &x, &y).unwrap();
    assert!(model.report().gap <= 1e-5);
    let grid = DMatrix::from_fn(2001, 1, |i, _| -0.5 + 2.0 * i as f64 / 2000.0);
    let q = model.predict(&grid).unwrap();
    for i in 0..grid.nrows() {
        assert!(q[(i, 0)] <= q[(i, 1)] && q[(i, 1)] <= q[(i, 2)], "crossing at {}", grid[(i, 0)]);
    }
    // Empirical coverage on the training data is near the level (pinball optimality).
    let fitted = model.predict(&x).unwrap();
    for (j, tau) in [0.25, 0.5, 0.75].iter().enumerate() {
        let below = (0..x.nrows()).filter(|&i| y[i] <= fitted[(i, j)] + 1e-9).count() as f64 / x.nrows() as f64;
        assert!((below - tau).abs() < 0.12, "level {tau}: coverage {below}");
    }
}

#[test]
fn quantile_levels_are_validated() {
    let mut rng = common::rng();
    let (x, y) = common::quantile_appendix_e(20, &mut rng);
    for levels in [vec![0.5, 0.25], vec![0.0, 0.5], vec![0.5, 1.0], vec![0.3, 0.3], vec![]] {
        assert!(matches!(QuantileParams::new(gramian::Kernel::gaussian_with_width(0.2).unwrap(), &levels).unwrap().fit_xy(&Device::Cpu, &x, &y), Err(Error::InvalidParameter { .. })), "{levels:?}");
    }
    assert!(matches!(QuantileParams::new(gramian::Kernel::gaussian_with_width(0.2).unwrap(), &[0.5]).unwrap().fit_xy(&Device::Cpu, &x, &y.rows(0, 10).into_owned()), Err(ref e) if e.is_invalid_input()));
    let mut bad = y.clone();
    bad[2] = f64::NAN;
    assert!(matches!(QuantileParams::new(gramian::Kernel::gaussian_with_width(0.2).unwrap(), &[0.5]).unwrap().fit_xy(&Device::Cpu, &x, &bad), Err(ref e) if e.is_invalid_input()));
}
