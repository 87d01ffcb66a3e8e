//! Baselines of Appendix D against the PSD model on the same data.

mod common;

use gramian::psd::baselines::{project_weighted_simplex, BaselineKind, BaselineParams};
use gramian::psd::{DensityParams, PsdError};
use gramian::Device;
use nalgebra::{DMatrix, DVector};
use rand::rngs::StdRng;
use rand::Rng;
use rand_distr::{Distribution, Normal};

fn bimodal(n: usize, rng: &mut StdRng) -> DMatrix<f64> {
    let noise = Normal::new(0.0, 0.3).unwrap();
    DMatrix::from_fn(n, 1, |_, _| if rng.random::<bool>() { -1.0 } else { 1.0 } + noise.sample(rng))
}

#[test]
fn pnm_goes_negative_where_the_psd_model_does_not() {
    let mut rng = common::rng();
    let x = bimodal(50, &mut rng);
    let grid = DMatrix::from_fn(2001, 1, |i, _| -6.0 + 12.0 * i as f64 / 2000.0);
    let pnm = BaselineParams::new(BaselineKind::Pnm, 1.0).lambda(1e-3).fit(&Device::Cpu, &x).unwrap();
    // PNM is non-negative on the data and integrates to 1 ...
    assert!(pnm.density(&Device::Cpu, &x).unwrap().iter().all(|&v| v > 0.0));
    assert!((pnm.integral() - 1.0).abs() < 1e-8);
    // ... but negative somewhere on the line.
    let p = pnm.density(&Device::Cpu, &grid).unwrap();
    assert!(p.min() < -1e-3, "PNM minimum {}", p.min());
    let psd = DensityParams::new(1.0).regularisation(1e-3, 1e-4).fit(&Device::Cpu, &x).unwrap();
    assert!(psd.density(&Device::Cpu, &grid).unwrap().min() >= 0.0);
}

#[test]
fn ncm_and_glm_are_nonnegative_and_glm_integral_is_only_approximate() {
    let mut rng = common::rng();
    let x = bimodal(40, &mut rng);
    let grid = DMatrix::from_fn(1001, 1, |i, _| -6.0 + 12.0 * i as f64 / 1000.0);
    let ncm = BaselineParams::new(BaselineKind::Ncm, 1.0).lambda(1e-3).fit(&Device::Cpu, &x).unwrap();
    assert!(ncm.coefficients().iter().all(|&a| a >= 0.0));
    assert!((ncm.integral() - 1.0).abs() < 1e-8);
    assert!(ncm.density(&Device::Cpu, &grid).unwrap().min() >= 0.0);
    let glm = BaselineParams::new(BaselineKind::Glm, 1.0).lambda(1e-3).monte_carlo(2000, 1).fit(&Device::Cpu, &x).unwrap();
    assert!(glm.density(&Device::Cpu, &grid).unwrap().min() > 0.0);
    let h = 12.0 / 1000.0;
    let quad = glm.density(&Device::Cpu, &grid).unwrap().sum() * h;
    // Normalised by a Monte Carlo estimate: close to but not exactly 1.
    assert!((quad - 1.0).abs() < 0.2, "GLM integral by quadrature {quad}");
    assert!((glm.integral() - quad).abs() < 0.2);
}

#[test]
fn weighted_simplex_projection_is_feasible_and_optimal() {
    let mut rng = common::rng();
    let y = DVector::from_fn(12, |_, _| rng.random_range(-1.0..1.0));
    let u = DVector::from_fn(12, |_, _| rng.random_range(0.5..2.0));
    let a = project_weighted_simplex(&y, &u);
    assert!(a.iter().all(|&v| v >= 0.0));
    assert!((u.dot(&a) - 1.0).abs() < 1e-10);
    // Optimality: no feasible random point is closer to y.
    for _ in 0..200 {
        let mut b = DVector::from_fn(12, |_, _| rng.random_range(0.0..1.0));
        b /= u.dot(&b);
        assert!((&b - &y).norm() >= (&a - &y).norm() - 1e-9);
    }
}

#[test]
fn baseline_parameters_are_validated() {
    let mut rng = common::rng();
    let x = bimodal(10, &mut rng);
    for kind in [BaselineKind::Pnm, BaselineKind::Ncm, BaselineKind::Glm] {
        assert!(matches!(BaselineParams::new(kind, 0.0).fit(&Device::Cpu, &x), Err(PsdError::InvalidParameter { .. })));
        assert!(matches!(BaselineParams::new(kind, 1.0).lambda(-1.0).fit(&Device::Cpu, &x), Err(PsdError::InvalidParameter { .. })));
        let mut bad = x.clone();
        bad[(0, 0)] = f64::INFINITY;
        assert!(matches!(BaselineParams::new(kind, 1.0).fit(&Device::Cpu, &bad), Err(PsdError::Compute(_))));
    }
}
