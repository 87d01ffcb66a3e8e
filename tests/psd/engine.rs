//! The one dual engine (`gramian::psd::engine`) behind the density,
//! heteroscedastic and quantile estimators.
//!
//! Before the regression drivers were replaced by the engine, the engine was
//! checked against them on these App. E problems (the drivers as oracles, git
//! history of this file): heteroscedastic primal 0.174390970744 vs
//! 0.174390970739 (relative 3.3e-11, gaps 8e-11), quantile 0.185133045423 vs
//! 0.185133045043 (relative 2.0e-9, gaps 9.4e-8). What stays tested here:
//! weak duality and the gap certificate with Nystrom centres on all three
//! problems, and the ordering `OPT(all centres) <= OPT(Nystrom)` that holds
//! because the Nystrom model class is a subset of the full one.

use crate::common;

use crate::psd_toy;

use gramian::psd::Features;
use gramian::psd::engine::{EngineProblem, LinearPart};
use gramian::psd::loss::SquaredLoss;
use gramian::psd::regression::QuantileParams;
use gramian::psd::{BaseMeasure, DensityParams, HeteroscedasticParams, SolverOptions, SolverReport};
use gramian::Error;
use gramian::Device;
use nalgebra::{DMatrix, DVector};
use rand::Rng;
use gramian::psd::Regularisation;

const TOLERANCE: f64 = 1e-7;

fn options() -> SolverOptions {
    SolverOptions { tolerance: TOLERANCE, max_iterations: 200_000, check_every: 5 }
}

/// The certificate: final gap within the tolerance, no gap ever negative
/// (weak duality; a wrong conjugate, coupling or sign shows up here).
fn assert_certified(label: &str, r: &SolverReport) {
    assert!(r.gap <= TOLERANCE && r.gap >= -1e-12, "{label}: gap {}", r.gap);
    for &(k, g) in &r.gap_history {
        assert!(g >= -1e-10, "{label}: negative gap {g:e} at iteration {k}");
    }
}

/// `OPT(full) <= OPT(Nystrom)`, so `P_full - gap_full <= P_nystrom`.
fn assert_nystrom_not_below(label: &str, full: &SolverReport, nystrom: &SolverReport) {
    println!("{label}: all centres primal {:.10} ({} it), Nystrom primal {:.10} ({} it)", full.primal, full.iterations, nystrom.primal, nystrom.iterations);
    assert!(full.primal - full.gap <= nystrom.primal + 1e-12, "{label}: Nystrom objective {} below the full optimum {}", nystrom.primal, full.primal - full.gap);
}

#[test]
fn heteroscedastic_with_nystrom_centres_is_certified() {
    let mut rng = common::rng();
    let (x, y) = psd_toy::toy_data(80, &mut rng);
    let params = HeteroscedasticParams::new(gramian::Kernel::gaussian_with_width(0.1).unwrap()).unwrap().regularisation(Regularisation::new().linear(1e-2).trace(1e-2).quadratic(1e-3)).solver(options());
    let full = params.clone().fit_xy(&Device::Cpu, &x, &y).unwrap();
    let nys = params.nystrom(25, 4).fit_xy(&Device::Cpu, &x, &y).unwrap();
    assert_certified("heteroscedastic, all centres", full.report());
    assert_certified("heteroscedastic, Nystrom 25", nys.report());
    assert_nystrom_not_below("heteroscedastic", full.report(), nys.report());
    let grid = DMatrix::from_fn(101, 1, |i, _| i as f64 / 100.0);
    assert!(nys.predict_variance(&grid).unwrap().iter().all(|v| *v > 0.0 && v.is_finite()));
}

#[test]
fn quantile_with_nystrom_centres_is_certified_and_never_crosses() {
    let mut rng = common::rng();
    let (x, y) = common::quantile_appendix_e(80, &mut rng);
    let params = QuantileParams::new(gramian::Kernel::gaussian_with_width(0.15).unwrap(), &[0.25, 0.5, 0.75]).unwrap().regularisation(Regularisation::new().linear(1e-2).trace(1e-3).quadratic(1e-4)).solver(options());
    let full = params.clone().fit_xy(&Device::Cpu, &x, &y).unwrap();
    let nys = params.nystrom(25, 4).fit_xy(&Device::Cpu, &x, &y).unwrap();
    assert_certified("quantile, all centres", full.report());
    assert_certified("quantile, Nystrom 25", nys.report());
    assert_nystrom_not_below("quantile", full.report(), nys.report());
    let grid = DMatrix::from_fn(1001, 1, |i, _| -0.5 + 2.0 * i as f64 / 1000.0);
    let q = nys.predict(&grid).unwrap();
    assert!((0..grid.nrows()).all(|i| q[(i, 0)] <= q[(i, 1)] && q[(i, 1)] <= q[(i, 2)]));
}

#[test]
fn density_with_nystrom_centres_is_certified() {
    let mut rng = common::rng();
    let x = DMatrix::from_fn(120, 2, |_, _| rng.random_range(-1.0..1.0));
    let params = DensityParams::new(gramian::Kernel::gaussian_with_width(0.5).unwrap()).unwrap().regularisation(Regularisation::new().trace(1e-3).quadratic(1e-4)).base_measure(BaseMeasure::isotropic_gaussian(2, 2.0).unwrap()).solver(SolverOptions { check_every: 2, ..options() });
    let full = params.clone().fit(&Device::Cpu, &x).unwrap();
    let nys = params.nystrom(30, 4).fit(&Device::Cpu, &x).unwrap();
    assert_certified("density, all centres", full.report());
    assert_certified("density, Nystrom 30", nys.report());
    assert_nystrom_not_below("density", full.report(), nys.report());
    assert!((nys.integral().unwrap() - 1.0).abs() < 1e-9);
}

#[test]
fn engine_configurations_are_validated() {
    let p = DMatrix::from_fn(4, 6, |i, j| ((i + 2 * j) as f64 * 0.3).sin());
    let loss = SquaredLoss { targets: DVector::from_element(6, 1.0) };
    let w = DMatrix::<f64>::identity(4, 4);
    let base = || EngineProblem { features: Features::Host(&p), parts: vec![vec![1.0]], linear: None, integral: None, loss: &loss, lambda1: 1e-3, lambda2: 1e-3 };
    let invalid = |e: EngineProblem<SquaredLoss>| matches!(e.solve(&options()), Err(Error::InvalidParameter { .. }));
    // An integral constraint needs exactly one PSD part and no linear part.
    assert!(invalid(EngineProblem { parts: vec![vec![1.0], vec![1.0]], integral: Some(&w), ..base() }));
    assert!(invalid(EngineProblem { linear: Some(LinearPart { coupling: vec![1.0], lambda0: 1.0 }), integral: Some(&w), ..base() }));
    assert!(invalid(EngineProblem { parts: vec![], ..base() }));
    assert!(invalid(EngineProblem { linear: Some(LinearPart { coupling: vec![1.0], lambda0: 0.0 }), ..base() }));
    assert!(matches!(EngineProblem { parts: vec![vec![1.0, 0.0]], ..base() }.solve(&options()), Err(ref e) if e.is_invalid_input()));
    // A valid configuration: one PSD part plus a linear part on the same block.
    let both = EngineProblem { linear: Some(LinearPart { coupling: vec![1.0], lambda0: 1e-2 }), ..base() }.solve(&options()).unwrap();
    assert!(both.report.gap <= TOLERANCE && both.linear.len() == 4 && both.parts.len() == 1);
}

/// The blocked host products of `gramian::psd::products` against the plain
/// ones: the same engine problems solved on `Features::Host` (blocked
/// products, model values memoised across restarts) and on CPU-resident
/// features (`Features::Resident` on `Device::Cpu`, which runs
/// `linalg::weighted_gram` and whole-matrix products, the path the host
/// used before). Same iterations and objective to 1e-10 relative (the
/// products differ by round-off only, summation order, 1e-13 relative); should
/// round-off flip a step decision, the objectives must agree within the two
/// certified gaps and the iterations within 10 %.
/// n = 3000 > two blocks of columns and above the parallel threshold.
#[test]
fn blocked_host_products_match_the_plain_products_in_the_engine() {
    let mut rng = common::rng();
    let (r, n) = (24, 3000);
    let p = DMatrix::from_fn(r, n, |_, _| rng.random::<f64>() - 0.5);
    let phi = Device::Cpu.upload(&p.transpose(), gramian::Precision::F64).unwrap();
    let resident = Features::Resident { device: &Device::Cpu, phi: &phi };
    let strict = SolverOptions { tolerance: 1e-9, max_iterations: 200_000, check_every: 2 };
    let compare = |label: &str, host: &gramian::psd::engine::EngineSolution, plain: &gramian::psd::engine::EngineSolution| {
        let rel = (host.report.primal - plain.report.primal).abs() / plain.report.primal.abs();
        println!("{label}: primal {:.14} vs {:.14} (relative {rel:.1e}), iterations {} vs {}, gaps {:.1e} / {:.1e}", host.report.primal, plain.report.primal, host.report.iterations, plain.report.iterations, host.report.gap, plain.report.gap);
        assert!(host.report.gap <= strict.tolerance && plain.report.gap <= strict.tolerance);
        if host.report.iterations == plain.report.iterations {
            assert!(rel <= 1e-10, "{label}: relative objective difference {rel:e} on the same iterations");
        } else {
            // Round-off flipped a step decision: both are still certified within
            // their gaps of the one optimum, and the paths must stay close.
            let diff = (host.report.primal - plain.report.primal).abs();
            assert!(diff <= host.report.gap + plain.report.gap, "{label}: objectives {diff:e} apart, beyond the gaps");
            assert!(host.report.iterations.abs_diff(plain.report.iterations) <= plain.report.iterations / 10 + 2, "{label}: iterations");
        }
    };
    // Two signed PSD parts and a linear part on one block (squared loss).
    let targets = DVector::from_fn(n, |i, _| (0.01 * i as f64).sin());
    let loss = SquaredLoss { targets };
    let problem = |features| EngineProblem { features, parts: vec![vec![1.0], vec![-1.0]], linear: Some(LinearPart { coupling: vec![1.0], lambda0: 1e-2 }), integral: None, loss: &loss, lambda1: 1e-3, lambda2: 1e-2 };
    compare("two parts + linear", &problem(Features::Host(&p)).solve(&strict).unwrap(), &problem(resident).solve(&strict).unwrap());
    // The density configuration: one part, the integral constraint, the log-likelihood.
    let w = DMatrix::from_fn(r, r, |i, j| if i == j { 1.0 } else { 0.1 / (1.0 + (i as f64 - j as f64).abs()) });
    let nll = gramian::psd::loss::NegativeLogLikelihood { n };
    let density = |features| EngineProblem { features, parts: vec![vec![1.0]], linear: None, integral: Some(&w), loss: &nll, lambda1: 1e-2, lambda2: 1e-2 };
    compare("density", &density(Features::Host(&p)).solve(&strict).unwrap(), &density(resident).solve(&strict).unwrap());
}
