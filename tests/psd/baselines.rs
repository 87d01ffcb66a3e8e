//! Baselines of Appendix D against the PSD model on the same data.

use crate::common;

use gramian::psd::baselines::{kernel_integrals, project_weighted_simplex, BaselineKind, BaselineParams};
use gramian::psd::{BaseMeasure, DensityParams};
use gramian::Error;
use gramian::Device;
use nalgebra::{DMatrix, DVector};
use rand::rngs::StdRng;
use rand::Rng;
use rand_distr::{Distribution, Normal};
use gramian::psd::Regularisation;

fn bimodal(n: usize, rng: &mut StdRng) -> DMatrix<f64> {
    let noise = Normal::new(0.0, 0.3).unwrap();
    DMatrix::from_fn(n, 1, |_, _| if rng.random::<bool>() { -1.0 } else { 1.0 } + noise.sample(rng))
}

#[test]
fn pnm_goes_negative_where_the_psd_model_does_not() {
    let mut rng = common::rng();
    let x = bimodal(50, &mut rng);
    let grid = DMatrix::from_fn(2001, 1, |i, _| -6.0 + 12.0 * i as f64 / 2000.0);
    let pnm = BaselineParams::new(BaselineKind::Pnm, gramian::Kernel::gaussian_with_width(1.0).unwrap()).unwrap().regularisation(Regularisation::new().quadratic(1e-3)).fit(&Device::Cpu, &x).unwrap();
    // PNM is non-negative on the data and integrates to 1 ...
    assert!(pnm.density(&x).unwrap().iter().all(|&v| v > 0.0));
    assert!((pnm.integral().unwrap() - 1.0).abs() < 1e-8);
    // ... but negative somewhere on the line.
    let p = pnm.density(&grid).unwrap();
    assert!(p.min() < -1e-3, "PNM minimum {}", p.min());
    let psd = DensityParams::new(gramian::Kernel::gaussian_with_width(1.0).unwrap()).unwrap().regularisation(Regularisation::new().trace(1e-3).quadratic(1e-4)).fit(&Device::Cpu, &x).unwrap();
    assert!(psd.density(&grid).unwrap().min() >= 0.0);
}

#[test]
fn ncm_and_glm_are_nonnegative_and_glm_integral_is_only_approximate() {
    let mut rng = common::rng();
    let x = bimodal(40, &mut rng);
    let grid = DMatrix::from_fn(1001, 1, |i, _| -6.0 + 12.0 * i as f64 / 1000.0);
    let ncm = BaselineParams::new(BaselineKind::Ncm, gramian::Kernel::gaussian_with_width(1.0).unwrap()).unwrap().regularisation(Regularisation::new().quadratic(1e-3)).fit(&Device::Cpu, &x).unwrap();
    assert!(ncm.coefficients().iter().all(|&a| a >= 0.0));
    assert!((ncm.integral().unwrap() - 1.0).abs() < 1e-8);
    assert!(ncm.density(&grid).unwrap().min() >= 0.0);
    let glm = BaselineParams::new(BaselineKind::Glm, gramian::Kernel::gaussian_with_width(1.0).unwrap()).unwrap().regularisation(Regularisation::new().quadratic(1e-3)).monte_carlo(2000, 1).fit(&Device::Cpu, &x).unwrap();
    assert!(glm.density(&grid).unwrap().min() > 0.0);
    let h = 12.0 / 1000.0;
    let quad = glm.density(&grid).unwrap().sum() * h;
    // Normalised by a Monte Carlo estimate: close to but not exactly 1 on
    // the grid; on the whole line its tail exp(-log Z) > 0 makes the
    // integral infinite, which integral() reports as an error.
    assert!((quad - 1.0).abs() < 0.2, "GLM integral by quadrature {quad}");
    assert!(matches!(glm.integral(), Err(Error::InvalidParameter { name: "base", .. })), "{:?}", glm.integral());
    let far = glm.density(&DMatrix::from_element(1, 1, 1e6)).unwrap()[0];
    assert!(far > 0.0 && (far - glm.density(&DMatrix::from_element(1, 1, -1e6)).unwrap()[0]).abs() < 1e-12 * far);
    // With a Gaussian base measure p = exp(g) nu / Z has a finite integral,
    // estimated by Monte Carlo: close to the quadrature.
    let base = BaseMeasure::isotropic_gaussian(1, 2.0).unwrap();
    let glm = BaselineParams::new(BaselineKind::Glm, gramian::Kernel::gaussian_with_width(1.0).unwrap()).unwrap().regularisation(Regularisation::new().quadratic(1e-3)).base_measure(base).monte_carlo(2000, 1).fit(&Device::Cpu, &x).unwrap();
    let quad = glm.density(&grid).unwrap().sum() * h;
    assert!((quad - 1.0).abs() < 0.2, "GLM integral by quadrature {quad}");
    assert!((glm.integral().unwrap() - quad).abs() < 0.2, "GLM integral {:?}, quadrature {quad}", glm.integral());
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
        assert!(matches!(gramian::Kernel::gaussian_with_width(0.0).and_then(|k| BaselineParams::new(kind, k)).and_then(|p| p.fit(&Device::Cpu, &x)), Err(Error::InvalidParameter { .. })));
        assert!(matches!(BaselineParams::new(kind, gramian::Kernel::gaussian_with_width(1.0).unwrap()).unwrap().regularisation(Regularisation::new().quadratic(-1.0)).fit(&Device::Cpu, &x), Err(Error::InvalidParameter { .. })));
        let mut bad = x.clone();
        bad[(0, 0)] = f64::INFINITY;
        assert!(matches!(BaselineParams::new(kind, gramian::Kernel::gaussian_with_width(1.0).unwrap()).unwrap().fit(&Device::Cpu, &bad), Err(ref e) if e.is_invalid_input()));
    }
}

/// The 10-D mixture of App. E as the paper's authors sampled it (standard
/// deviation 1/sqrt(2 pi) per coordinate), with their base measure N(0, 5^2 I).
fn authors_10d(n: usize, rng: &mut StdRng) -> (DMatrix<f64>, BaseMeasure) {
    let noise = Normal::new(0.0, 1.0 / (2.0 * std::f64::consts::PI).sqrt()).unwrap();
    let mut x = DMatrix::from_fn(n, 10, |_, _| noise.sample(rng));
    for i in 0..n {
        x[(i, 0)] += if rng.random::<bool>() { 2.0 } else { -2.0 };
    }
    (x, BaseMeasure::gaussian(DVector::zeros(10), DVector::from_element(10, 5.0)).unwrap())
}

#[test]
fn weighted_simplex_projection_works_at_the_scale_of_a_10d_gaussian_base_measure() {
    // u ~ 1e-11 and y ~ 1e8 (NCM in 10-D with nu = N(0, 5^2 I)): y / u ~ 1e19,
    // where a bracket grown from `hi - 1` never grows. Run in a thread so that
    // a hang is a failure.
    let mut rng = common::rng();
    let u = DVector::from_fn(50, |_, _| rng.random_range(0.5e-11..2e-11));
    let y = DVector::from_fn(50, |_, _| rng.random_range(0.5e8..2e8));
    let (tx, rx) = std::sync::mpsc::channel();
    let (yc, uc) = (y.clone(), u.clone());
    std::thread::spawn(move || tx.send(project_weighted_simplex(&yc, &uc)).unwrap());
    let a = rx.recv_timeout(std::time::Duration::from_secs(20)).expect("projection did not finish in 20 s");
    assert!(a.iter().all(|&v| v >= 0.0));
    assert!((u.dot(&a) - 1.0).abs() < 1e-10, "u^T a = {}", u.dot(&a));
    // Same projection as the problem scaled to u ~ 1: a(c y, u / c) = c a(y, u).
    let c = 1e-11;
    let b = project_weighted_simplex(&(&y * c), &(&u / c));
    assert!((&a * c - &b).amax() <= 1e-8 * b.amax(), "{} vs {}", (&a * c - &b).amax(), b.amax());
}

#[test]
fn ncm_moves_off_its_start_with_a_10d_gaussian_base_measure() {
    // With nu = N(0, 5^2 I) in 10-D the coefficients are ~1e8 and the
    // gradient ~1e-11; an absolute stopping rule stopped NCM at its uniform
    // start a = 1 / (u^T 1) whatever lambda.
    let mut rng = common::rng();
    let (x, base) = authors_10d(150, &mut rng);
    let sigma = 0.5;
    let (tx, rx) = std::sync::mpsc::channel();
    let (xc, bc) = (x.clone(), base.clone());
    std::thread::spawn(move || tx.send(BaselineParams::new(BaselineKind::Ncm, gramian::Kernel::gaussian_with_width(sigma).unwrap()).unwrap().regularisation(Regularisation::new().quadratic(1e-24)).base_measure(bc).fit(&Device::Cpu, &xc).unwrap()).unwrap());
    let ncm = rx.recv_timeout(std::time::Duration::from_secs(120)).expect("NCM fit did not finish in 120 s");
    assert!((ncm.integral().unwrap() - 1.0).abs() < 1e-9, "integral {:?}", ncm.integral());
    let u = kernel_integrals(&x, sigma, &base);
    let start = 1.0 / u.sum();
    let nu = base.density(&x);
    let start_ll = (0..x.nrows())
        .map(|i| {
            let g: f64 = (0..x.nrows()).map(|j| (-(x.row(i) - x.row(j)).norm_squared() / (2.0 * sigma * sigma)).exp()).sum::<f64>() * start;
            (g * nu[i]).ln()
        })
        .sum::<f64>()
        / x.nrows() as f64;
    let fitted_ll = ncm.mean_log_likelihood(&x).unwrap();
    let spread = ncm.coefficients().max() / ncm.coefficients().min().max(f64::MIN_POSITIVE);
    assert!(fitted_ll > start_ll + 0.05, "training LL: fitted {fitted_ll}, uniform start {start_ll}");
    assert!(spread > 2.0, "coefficients still uniform: max/min {spread}");
}
