//! Adversarial inputs to public entry points: each call must end
//! in `Err` with a sensible variant or in `Ok` with finite output, never
//! panic and never hang. Every call runs in its own thread with a time
//! bound, so a hang is a test failure, not a stuck CI job. Inputs are seeded
//! with fixed seeds.

use crate::harness::{bounded, run_bounded};

use gramian::eksvd::eigensolver::largest_lanczos;
use gramian::eksvd::{kkt_residuals, CouplingMatrix, EksvdParams, FeatureMap};
use gramian::MultiSource;
use gramian::mklaren::{LowRankMethod, LowRankRidgeParams, MklarenParams};
use gramian::psd::baselines::{project_weighted_simplex, try_project_weighted_simplex};
use gramian::{Error, Device, Kernel};
use nalgebra::{DMatrix, DVector};
use rand::{rngs::StdRng, Rng, SeedableRng};

fn random_matrix(rng: &mut StdRng, rows: usize, cols: usize) -> DMatrix<f64> {
    DMatrix::from_fn(rows, cols, |_, _| rng.random_range(-1.0..1.0))
}

// ---------------------------------------------------------------- hangs

#[test]
fn weighted_simplex_projection_rejects_degenerate_input_without_hanging() {
    let empty = DVector::<f64>::zeros(0);
    let y = DVector::from_vec(vec![0.3, -0.2, 1.5]);
    let cases: Vec<(&str, DVector<f64>, DVector<f64>)> = vec![
        ("empty", empty.clone(), empty.clone()),
        ("all-zero weights", y.clone(), DVector::zeros(3)),
        ("one zero weight", y.clone(), DVector::from_vec(vec![1.0, 0.0, 1.0])),
        ("negative weight", y.clone(), DVector::from_vec(vec![1.0, -1.0, 1.0])),
        ("lengths differ", y.clone(), DVector::from_element(2, 1.0)),
        ("NaN in y", DVector::from_vec(vec![f64::NAN, 0.0, 1.0]), DVector::from_element(3, 1.0)),
        ("inf in u", y.clone(), DVector::from_vec(vec![1.0, f64::INFINITY, 1.0])),
        ("u^T u underflows", y.clone(), DVector::from_element(3, 1e-300)),
    ];
    for (what, y, u) in cases {
        let (yc, uc) = (y.clone(), u.clone());
        let r = bounded(what, move || try_project_weighted_simplex(&yc, &uc));
        assert!(
            matches!(r, Err(Error::Empty { .. } | Error::DimensionMismatch { .. } | Error::NonFinite { .. }) | Err(Error::InvalidParameter { name: "u", .. })),
            "{what}: {r:?}"
        );
        // The unchecked form panics with the reason instead of looping.
        assert!(run_bounded(what, move || project_weighted_simplex(&y, &u)).is_err(), "{what}: no panic");
    }
    // A valid case still projects.
    let a = try_project_weighted_simplex(&y, &DVector::from_element(3, 2.0)).unwrap();
    assert!(a.iter().all(|&v| v >= 0.0) && (a.sum() * 2.0 - 1.0).abs() < 1e-10);
}

// ---------------------------------------------------------------- panics

fn regression_data(seed: u64, n: usize) -> (DMatrix<f64>, DVector<f64>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let x = random_matrix(&mut rng, n, 2);
    let y = DVector::from_fn(n, |i, _| (2.0 * x[(i, 0)]).sin() + 0.3 * x[(i, 1)]);
    (x, y)
}

#[test]
fn mklaren_lookahead_usize_max_acts_as_n() {
    let (x, y) = regression_data(6, 40);
    let r = bounded("MklarenParams::lookahead(usize::MAX)", move || {
        let kernels = [Kernel::rbf(1.0).unwrap(), Kernel::linear()];
        let model = MklarenParams::new(6).lookahead(usize::MAX).kernels(&kernels).fit_inputs(&Device::Cpu, &[&x], &y)?;
        let reference = MklarenParams::new(6).lookahead(40).kernels(&kernels).fit_inputs(&Device::Cpu, &[&x], &y)?;
        Ok::<_, gramian::Error>((model.predict_inputs(&[&x])?, reference.predict_inputs(&[&x])?))
    });
    let (p, q) = r.unwrap();
    assert!(p.iter().all(|v| v.is_finite()));
    assert!((&p - &q).amax() < 1e-10, "usize::MAX and n look-ahead differ by {}", (&p - &q).amax());
}

#[test]
fn csi_lookahead_usize_max_acts_as_n() {
    let (x, y) = regression_data(7, 40);
    let r = bounded("Csi { lookahead: usize::MAX }", move || {
        let kernels = [Kernel::rbf(1.0).unwrap()];
        let fit = |lookahead| LowRankRidgeParams::new(LowRankMethod::Csi { lookahead, kappa: 0.5 }, 5).lambda(0.1).kernels(&kernels).fit_inputs(&Device::Cpu, &[&x], &y);
        let (model, reference) = (fit(usize::MAX)?, fit(40)?);
        Ok::<_, gramian::Error>((model.predict_inputs(&[&x])?, reference.predict_inputs(&[&x])?))
    });
    let (p, q) = r.unwrap();
    assert!(p.iter().all(|v| v.is_finite()));
    assert!((&p - &q).amax() < 1e-10);
}

#[test]
fn coupling_from_blocks_with_huge_source_counts_is_an_error() {
    for n_sources in [usize::MAX, usize::MAX / 2, 1usize << 33] {
        let r = bounded("CouplingMatrix::from_blocks", move || CouplingMatrix::from_blocks(n_sources, vec![(0, 1, DMatrix::identity(3, 3))]).map(|_| ()));
        assert!(matches!(r, Err(Error::InvalidParameter { name: "n_sources", .. }) | Err(Error::ShapeMismatch { .. })), "{n_sources}: {r:?}");
    }
}

#[test]
fn lanczos_with_an_operator_of_the_wrong_shape_is_an_error() {
    // n = 10 takes the dense path (A I), n = 200 the Lanczos iteration (A v).
    let cases = [(10usize, [(9usize, 10usize), (10, 11), (10, 1)]), (200, [(199, 1), (201, 1), (200, 2)])];
    for (n, shapes) in cases {
        for (rows, cols) in shapes {
            let r = bounded("largest_lanczos", move || largest_lanczos(n, 2, |_: &DMatrix<f64>| Ok(DMatrix::from_element(rows, cols, 1.0)), 1e-10, 50, 1).map(|_| ()));
            assert!(matches!(r, Err(Error::ShapeMismatch { .. })), "n {n}, {rows} x {cols}: {r:?}");
        }
    }
    // n = 0 is named as such (it was reported as "n_components must be in 1..=0").
    let r = bounded("largest_lanczos n = 0", || largest_lanczos(0, 1, |v: &DMatrix<f64>| Ok(v.clone()), 1e-10, 5, 1).map(|_| ()));
    assert!(matches!(r, Err(Error::InvalidParameter { name: "n", .. })), "{r:?}");
    // Sizes whose basis overflows are rejected before any allocation or call.
    let r = bounded("largest_lanczos huge", || largest_lanczos(usize::MAX, usize::MAX / 2 + 1, |v: &DMatrix<f64>| Ok(v.clone()), 1e-10, 5, 1).map(|_| ()));
    assert!(matches!(r, Err(Error::InvalidParameter { name: "n", .. })), "{r:?}");
    let r = bounded("largest_lanczos huge n", || largest_lanczos(usize::MAX / 4, 3, |v: &DMatrix<f64>| Ok(v.clone()), 1e-10, 5, 1).map(|_| ()));
    assert!(matches!(r, Err(Error::InvalidParameter { name: "n", .. })), "{r:?}");
}

#[test]
fn kkt_residuals_with_weights_of_different_lengths_is_an_error() {
    let mut rng = StdRng::seed_from_u64(8);
    let features = vec![random_matrix(&mut rng, 5, 3), random_matrix(&mut rng, 6, 4)];
    let weights = vec![DVector::from_element(3, 0.1), DVector::from_element(4, 0.1)];
    let alphas = vec![DVector::from_element(5, 0.1), DVector::from_element(6, 0.1)];
    let (f, w, a) = (features.clone(), weights.clone(), alphas.clone());
    let r = bounded("kkt_residuals", move || kkt_residuals(&f, &w, &a, 1.0).map(|_| ()));
    assert!(matches!(r, Err(Error::ShapeMismatch { .. })), "{r:?}");
    // gamma must be finite (NaN used to come back inside Ok).
    let features = vec![random_matrix(&mut rng, 5, 3), random_matrix(&mut rng, 6, 3)];
    let weights = vec![DVector::from_element(3, 0.1), DVector::from_element(3, 0.1)];
    for gamma in [f64::NAN, f64::INFINITY] {
        let (f, w, a) = (features.clone(), weights.clone(), alphas.clone());
        let r = bounded("kkt_residuals gamma", move || kkt_residuals(&f, &w, &a, gamma).map(|_| ()));
        assert!(matches!(r, Err(Error::InvalidParameter { name: "gamma", .. })), "{gamma}: {r:?}");
    }
    let r = kkt_residuals(&features, &weights, &alphas, 1.0).unwrap();
    assert!(r.stationarity.is_finite() && r.dual_scaling.is_finite());
}

#[test]
fn fitted_eksvd_checked_accessors_reject_out_of_range_sources() {
    let mut rng = StdRng::seed_from_u64(9);
    let data = MultiSource::new(vec![random_matrix(&mut rng, 30, 3), random_matrix(&mut rng, 25, 2)]).unwrap();
    let sources = data.clone();
    assert_eq!(sources.try_source(1).unwrap(), sources.source(1));
    let model = bounded("eKSVD fit", move || EksvdParams::new(2).feature_map(FeatureMap::random_fourier(0.7, 12).unwrap()).seed(3).fit(&Device::Cpu, &data)).unwrap();
    for q in [2usize, 99, usize::MAX] {
        assert!(matches!(sources.try_source(q), Err(Error::InvalidParameter { name: "q", .. })));
        assert!(matches!(model.try_weights(q), Err(Error::InvalidParameter { name: "q", .. })));
        assert!(matches!(model.try_alphas(q), Err(Error::InvalidParameter { name: "q", .. })));
        assert!(matches!(model.try_training_features(q), Err(Error::InvalidParameter { name: "q", .. })));
        assert!(model.feature_map(q).is_none());
    }
    for q in 0..2 {
        assert_eq!(model.try_weights(q).unwrap(), model.weights(q));
        assert_eq!(model.try_alphas(q).unwrap(), model.alphas(q));
        assert_eq!(model.try_training_features(q).unwrap(), model.training_features(q));
        assert!(model.feature_map(q).is_some());
    }
}

// ---------------------------------------------------------------- silently wrong

#[test]
fn polynomial_degrees_beyond_i32_max_are_rejected() {
    let top = Kernel::MAX_POLYNOMIAL_DEGREE;
    assert_eq!(top, i32::MAX as u32);
    assert!(Kernel::polynomial(1.0, 0.0, top).is_ok());
    for degree in [top + 1, u32::MAX] {
        assert!(matches!(Kernel::polynomial(1.0, 0.0, degree), Err(Error::InvalidParameter { name: "degree", .. })));
        let literal = Kernel::Polynomial { gamma: 1.0, coef0: 0.0, degree };
        assert!(literal.validate().is_err());
        // An enum literal reaches no computation either (powi would wrap to a negative power).
        let x = DMatrix::from_element(2, 1, 0.5);
        assert!(matches!(Device::Cpu.kernel_matrix(&literal, &x, &x), Err(Error::InvalidParameter { name: "degree", .. })));
    }
    // Degree i32::MAX with |base| < 1 is a valid (tiny) value, not a wrapped one.
    let k = Kernel::polynomial(1.0, 0.0, top).unwrap();
    let x = DMatrix::from_element(1, 1, 0.5);
    let v: f64 = Device::Cpu.kernel_matrix(&k, &x, &x).unwrap()[(0, 0)];
    assert!(v.is_finite() && (0.0..1e-300).contains(&v), "{v}");
}
