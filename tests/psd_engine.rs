//! The one dual engine (`gramian::psd::engine`) on the App. E regression
//! problems: the engine's fits against the drivers it replaced (test
//! oracles), and Nystrom compression on all three problems.

mod common;

#[path = "../examples/psd_toy/mod.rs"]
mod psd_toy;

use gramian::psd::regression::QuantileParams;
use gramian::psd::{HeteroscedasticParams, SolverOptions};
use gramian::Device;
use nalgebra::DMatrix;
use psd_toy::toy_data;

/// Both fits certified to a gap of at most `5e-9 |primal|`: the primal
/// objectives then agree to `1e-8` relative, which is asserted.
fn assert_same(label: &str, engine: &gramian::psd::SolverReport, oracle: &gramian::psd::SolverReport) {
    let rel = (engine.primal - oracle.primal).abs() / oracle.primal.abs();
    println!("{label}: engine primal {:.12} gap {:.2e} ({} it), oracle primal {:.12} gap {:.2e} ({} it), rel diff {rel:.2e}", engine.primal, engine.gap, engine.iterations, oracle.primal, oracle.gap, oracle.iterations);
    assert!(rel <= 1e-8, "{label}: objectives differ by {rel:e} relative");
    assert!(engine.gap <= 5e-9 * oracle.primal.abs() && engine.gap >= -1e-12, "{label}: engine gap {}", engine.gap);
}

#[test]
fn heteroscedastic_engine_matches_the_old_driver() {
    let mut rng = common::rng();
    let (x, y) = toy_data(60, &mut rng);
    let options = SolverOptions { tolerance: 1e-10, max_iterations: 100_000, check_every: 5 };
    let params = HeteroscedasticParams::new(0.1).regularisation(1e-2, 1e-2, 1e-3).solver(options);
    let engine = params.fit(&Device::Cpu, &x, &y).unwrap();
    let oracle = params.fit_reference(&Device::Cpu, &x, &y).unwrap();
    assert_same("heteroscedastic", engine.report(), oracle.report());
    let grid = DMatrix::from_fn(101, 1, |i, _| i as f64 / 100.0);
    let (a, b) = (engine.predict_variance(&Device::Cpu, &grid).unwrap(), oracle.predict_variance(&Device::Cpu, &grid).unwrap());
    let worst = (0..grid.nrows()).map(|i| (a[i] / b[i]).ln().abs()).fold(0.0, f64::max);
    println!("heteroscedastic: max |log variance ratio| on [0, 1]: {worst:.2e}");
    assert!(worst < 1e-3, "variances differ: {worst}");
}

/// The pinball dual is not strongly convex and the old driver's gap falls
/// slowly (n = 40: gap 2.4e-9 after 400,000 iterations), so the quantile fits
/// are compared at a gap of 1e-7: both primal values lie within their gaps of
/// the optimum, so they must differ by at most the sum of the gaps.
#[test]
fn quantile_engine_matches_the_old_driver() {
    let mut rng = common::rng();
    let (x, y) = common::quantile_appendix_e(40, &mut rng);
    let options = SolverOptions { tolerance: 1e-7, max_iterations: 200_000, check_every: 5 };
    let params = QuantileParams::new(0.15, &[0.25, 0.5, 0.75]).regularisation(1e-2, 1e-3, 1e-4).solver(options);
    let engine = params.fit(&Device::Cpu, &x, &y).unwrap();
    let oracle = params.fit_reference(&Device::Cpu, &x, &y).unwrap();
    let (e, o) = (engine.report(), oracle.report());
    let diff = (e.primal - o.primal).abs();
    println!("quantile: engine primal {:.12} gap {:.2e} ({} it), oracle primal {:.12} gap {:.2e} ({} it), diff {diff:.2e}", e.primal, e.gap, e.iterations, o.primal, o.gap, o.iterations);
    assert!(e.gap <= 1e-7 && e.gap >= -1e-12 && o.gap <= 1e-7);
    assert!(diff <= e.gap + o.gap + 1e-14, "objectives differ by {diff:e}, more than the gaps allow");
    let grid = DMatrix::from_fn(101, 1, |i, _| i as f64 / 100.0);
    let (qe, qo) = (engine.predict(&Device::Cpu, &grid).unwrap(), oracle.predict(&Device::Cpu, &grid).unwrap());
    let worst = (&qe - &qo).amax();
    println!("quantile: max |q_engine - q_oracle| on [0, 1]: {worst:.2e}");
}
