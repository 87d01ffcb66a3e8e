//! The options every PSD estimator and baseline shares: named regularisation
//! weights (`psd::Regularisation`), `SolverOptions` built by name, and the
//! kernel passed as a `Kernel` as for the other methods.

use crate::common;

use gramian::prelude::*;
use gramian::psd::{BaselineHeteroscedasticParams, BaselineKind, BaselineParams, BaselineQuantileParams};
use nalgebra::DVector;

fn invalid_named<T: std::fmt::Debug>(r: Result<T, Error>, expected: &str) {
    match r {
        Err(Error::InvalidParameter { name, .. }) => assert!(name.contains(expected), "error names {name:?}, expected {expected:?}"),
        other => panic!("expected InvalidParameter({expected}), got {other:?}"),
    }
}

#[test]
fn psd_params_take_a_gaussian_kernel_and_reject_others_when_built() {
    let cpu = Device::cpu();
    let mut rng = common::rng();
    let x = common::random_matrix(&mut rng, 40, 2);
    let grid = common::random_matrix(&mut rng, 10, 2);
    let by_width = DensityParams::new(Kernel::gaussian_with_width(0.7).unwrap()).unwrap().fit(&cpu, &x).unwrap();
    let by_gamma = DensityParams::new(Kernel::rbf(1.0 / (2.0 * 0.7 * 0.7)).unwrap()).unwrap().fit(&cpu, &x).unwrap();
    let (a, b) = (by_width.predict(&grid).unwrap(), by_gamma.predict(&grid).unwrap());
    // sigma -> gamma -> sigma may move the last bit of sigma.
    assert!((&a - &b).amax() <= 1e-12 * a.amax(), "{:e}", (&a - &b).amax());
    assert_eq!(DensityParams::new(Kernel::gaussian_with_width(0.7).unwrap()).unwrap().kernel_width(), Kernel::gaussian_with_width(0.7).unwrap().gaussian_width().unwrap());

    // Any other kernel is a typed error when the parameters are built.
    let laplacian = Kernel::laplacian(1.0).unwrap();
    invalid_named(DensityParams::new(laplacian), "kernel");
    invalid_named(BaselineParams::new(BaselineKind::Pnm, Kernel::linear()), "kernel");
    invalid_named(HeteroscedasticParams::new(laplacian), "kernel");
    invalid_named(QuantileParams::new(laplacian, &[0.25, 0.5, 0.75]), "kernel");
    invalid_named(BaselineHeteroscedasticParams::new(BaselineKind::Glm, laplacian), "kernel");
    invalid_named(BaselineQuantileParams::new(BaselineKind::Ncm, laplacian, &[0.25, 0.5, 0.75]), "kernel");
    // An invalid Gaussian kernel (a literal of a non-positive gamma) as well.
    invalid_named(DensityParams::new(Kernel::Rbf { gamma: -1.0 }), "gamma");
}

#[test]
fn each_weight_means_the_same_term_everywhere() {
    let cpu = Device::cpu();
    let mut rng = common::rng();
    let x = common::random_matrix(&mut rng, 30, 1);
    let y = DVector::from_fn(30, |i, _| (2.0 * x[(i, 0)]).sin());
    let data = Supervised::new(x.clone(), y).unwrap();
    let psd = Regularisation::new().trace(1e-3).quadratic(1e-3);
    // The density has no linear part, the baselines no trace term: a weight
    // for a term that does not exist is an error, not ignored.
    invalid_named(DensityParams::new(gramian::Kernel::gaussian_with_width(0.5).unwrap()).unwrap().regularisation(psd.linear(1e-3)).fit(&cpu, &x), "linear");
    invalid_named(BaselineParams::new(BaselineKind::Pnm, gramian::Kernel::gaussian_with_width(0.5).unwrap()).unwrap().regularisation(psd).fit(&cpu, &x), "trace");
    invalid_named(BaselineHeteroscedasticParams::new(BaselineKind::Pnm, gramian::Kernel::gaussian_with_width(0.5).unwrap()).unwrap().regularisation(psd.linear(1e-3)).fit(&cpu, &data), "trace");
    // The regressions need lambda_0 > 0; everyone needs the quadratic weight > 0.
    invalid_named(HeteroscedasticParams::new(gramian::Kernel::gaussian_with_width(0.5).unwrap()).unwrap().regularisation(psd).fit(&cpu, &data), "linear");
    invalid_named(QuantileParams::new(gramian::Kernel::gaussian_with_width(0.5).unwrap(), &[0.25, 0.5, 0.75]).unwrap().regularisation(psd.linear(1e-3).quadratic(0.0)).fit(&cpu, &data), "quadratic");
    invalid_named(BaselineQuantileParams::new(BaselineKind::Pnm, gramian::Kernel::gaussian_with_width(0.5).unwrap(), &[0.25, 0.5, 0.75]).unwrap().regularisation(Regularisation::new().linear(1e-3)).fit(&cpu, &data), "quadratic");
    // The getter returns what was set, and the defaults are the documented ones.
    assert_eq!(HeteroscedasticParams::new(gramian::Kernel::gaussian_with_width(0.5).unwrap()).unwrap().regularisation(psd.linear(2e-3)).regularisation_weights(), Regularisation { linear: 2e-3, trace: 1e-3, quadratic: 1e-3 });
    assert_eq!(DensityParams::new(gramian::Kernel::gaussian_with_width(0.5).unwrap()).unwrap().regularisation_weights(), Regularisation::new().trace(1e-3).quadratic(1e-4));
    assert_eq!(BaselineParams::new(BaselineKind::Glm, gramian::Kernel::gaussian_with_width(0.5).unwrap()).unwrap().regularisation_weights(), Regularisation::new().quadratic(1e-3));
    // A fit with the weights set by name works on every estimator.
    assert!(HeteroscedasticParams::new(gramian::Kernel::gaussian_with_width(0.5).unwrap()).unwrap().regularisation(psd.linear(1e-3)).fit(&cpu, &data).is_ok());
    assert!(BaselineHeteroscedasticParams::new(BaselineKind::Pnm, gramian::Kernel::gaussian_with_width(0.5).unwrap()).unwrap().regularisation(Regularisation::new().linear(1e-3).quadratic(1e-3)).fit(&cpu, &data).is_ok());
}

#[test]
fn solver_options_by_name_and_budgets_that_bind() {
    let cpu = Device::cpu();
    let mut rng = common::rng();
    let x = common::random_matrix(&mut rng, 30, 1);
    let y = DVector::from_fn(30, |i, _| (2.0 * x[(i, 0)]).sin());
    let data = Supervised::new(x.clone(), y).unwrap();
    let options = SolverOptions::default().tolerance(1e-9).max_iterations(7).check_every(3);
    assert_eq!(options, SolverOptions { tolerance: 1e-9, max_iterations: 7, check_every: 3 });
    // A budget of one iteration cannot reach a tiny tolerance: NotConverged, for PSD models and baselines alike.
    let one = SolverOptions::default().tolerance(1e-14).max_iterations(1);
    assert!(matches!(DensityParams::new(gramian::Kernel::gaussian_with_width(0.5).unwrap()).unwrap().solver(one).fit(&cpu, &x), Err(Error::NotConverged { .. })));
    assert!(matches!(BaselineHeteroscedasticParams::new(BaselineKind::Ncm, gramian::Kernel::gaussian_with_width(0.5).unwrap()).unwrap().solver(one).fit(&cpu, &data), Err(Error::NotConverged { .. })));
    invalid_named(BaselineQuantileParams::new(BaselineKind::Glm, gramian::Kernel::gaussian_with_width(0.5).unwrap(), &[0.25, 0.5, 0.75]).unwrap().solver(SolverOptions::default().tolerance(-1.0)).fit(&cpu, &data), "tolerance");
    invalid_named(BaselineParams::new(BaselineKind::Ncm, gramian::Kernel::gaussian_with_width(0.5).unwrap()).unwrap().solver(SolverOptions::default().max_iterations(0)).fit(&cpu, &x), "max_iterations");
}
