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

/// The quantile fit on a GPU with `f64` (lavapipe in CI): features, `M_q`
/// and `[M_q]_+` on the device (the polar route, asked for: at this order
/// `Auto` keeps the host eigendecomposition), the same problem as on
/// the CPU (eigendecompositions on the host). Both certified, primal
/// objectives within the sum of the two gaps; the curves still never cross;
/// no r x r matrix crosses per evaluation (only vectors of at most n or r
/// numbers come down, and the fitted parts once).
#[test]
fn quantile_fit_on_a_gpu_matches_the_cpu() {
    let Some(gpu) = common::gpu_device(gramian::GpuOptions::default()) else { return };
    let mut rng = common::rng();
    let (x, y) = common::quantile_appendix_e(50, &mut rng);
    let (levels, m) = ([0.3, 0.7], 16usize);
    let params = QuantileParams::new(gramian::Kernel::gaussian_with_width(0.2).unwrap(), &levels).unwrap()
        .regularisation(Regularisation::new().linear(1e-2).trace(1e-2).quadratic(1e-3))
        .nystrom(m, 5)
        .positive_part(gramian::psd::PositivePartRoute::Polar)
        .solver(SolverOptions { tolerance: 2e-3, max_iterations: 20_000, check_every: 5 });
    let cpu = params.fit_xy(&Device::Cpu, &x, &y).unwrap();
    gpu.reset_device_counters();
    let fitted = params.fit_xy(&gpu, &x, &y).unwrap();
    let counters = gpu.device_counters();
    let (pc, pg) = (cpu.report().primal, fitted.report().primal);
    println!("quantile: cpu primal {pc:.10} gap {:.1e} in {} iterations; gpu primal {pg:.10} gap {:.1e} in {} iterations; {} waits, {} bytes down", cpu.report().gap, cpu.report().iterations, fitted.report().gap, fitted.report().iterations, counters.waits, counters.transfers.device_to_host_bytes);
    assert!(cpu.report().gap <= 2e-3 && fitted.report().gap <= 2e-3);
    assert!((pc - pg).abs() <= cpu.report().gap + fitted.report().gap + 1e-12 * pc.abs(), "primal cpu {pc} gpu {pg}");
    let grid = DMatrix::from_fn(401, 1, |i, _| -0.5 + 2.0 * i as f64 / 400.0);
    let q = fitted.predict(&grid).unwrap();
    assert!((0..grid.nrows()).all(|i| q[(i, 0)] <= q[(i, 1)]));
    let (n, parts) = (x.nrows() as u64, (levels.len() - 1) as u64);
    let vector = 8 * n.max(m as u64);
    assert!(counters.transfers.device_to_host_bytes <= counters.waits * vector + parts * 8 * (m * m) as u64, "{} bytes down in {} waits", counters.transfers.device_to_host_bytes, counters.waits);
}

/// The App. E quantile problem of the polar-route tests (levels 0.25, 0.5,
/// 0.75, n = 40, every sample a centre) on a GPU with `f64`: with the
/// features resident there and the polar route, FISTA's state stays on the
/// device (`n x 3` blocks); against the same problem on the host (the
/// features read back, FISTA's state and the polar route on the host).
/// Tolerances as in the polar-route tests: both certified, the primal
/// objectives within the sum of the gaps, the iterations within 25 % + 5
/// (round-off of the products in another order flips a backtracking or
/// restart decision), the fitted parts and linear part within what the
/// gaps certify (`sum_q lambda_2 ||A_q - A_q*||_F^2 + lambda_0 ||w -
/// w*||^2 <= 2 gap` for each fit: the primal is strongly convex in them),
/// with `1e-9` relative for the projection of the dense parts onto the PSD
/// cone. The device fit uploads nothing per iteration: its uploads (the
/// features, the couplings, the loss's data, the start) are fewer than a
/// tenth of its iterations.
#[test]
fn quantile_dual_with_its_state_on_a_gpu_matches_the_host() {
    use gramian::psd::engine::{EngineProblem, LinearPart};
    use gramian::psd::features::{EmpiricalFeatures, Features};
    use gramian::psd::positive_part::PositivePartSolver;
    use gramian::psd::regression::PinballLoss;
    let Some(gpu) = common::gpu_device(gramian::GpuOptions::default()) else { return };
    assert!(gpu.supports(gramian::Precision::F64), "the resident PSD dual needs f64 shaders");
    let mut rng = common::rng();
    let (x, y) = common::quantile_appendix_e(40, &mut rng);
    let mut sorted: Vec<f64> = y.iter().copied().collect();
    sorted.sort_by(f64::total_cmp);
    let loss = PinballLoss { targets: y.add_scalar(-sorted[20]), levels: vec![0.25, 0.5, 0.75] };
    let (lambda0, lambda2) = (1e-2, 1e-4);
    let problem = |features| EngineProblem { features, parts: vec![vec![-1.0, 0.0, 0.0], vec![0.0, 0.0, 1.0]], linear: Some(LinearPart { coupling: vec![1.0; 3], lambda0 }), integral: None, loss: &loss, lambda1: 1e-3, lambda2 };
    let options = SolverOptions { tolerance: 1e-6, max_iterations: 50_000, check_every: 5 };
    let features = EmpiricalFeatures::new(&x, 0.15).unwrap();
    let phi = features.resident_features(&gpu, &gpu.upload(&x, gramian::Precision::F64).unwrap()).unwrap();
    let before = gpu.transfer_stats();
    let on_gpu = problem(Features::Resident { device: &gpu, phi: &phi }).solve_with(&options, PositivePartSolver::polar()).unwrap();
    let uploads = gpu.transfer_stats().since(&before).uploads;
    let p = gpu.to_host(&phi).unwrap().transpose();
    let on_host = problem(Features::Host(&p)).solve_with(&options, PositivePartSolver::polar()).unwrap();
    let (g, h) = (&on_gpu.report, &on_host.report);
    println!("quantile dual: gpu state {} iterations, primal {:.12}, gap {:.2e}, {uploads} uploads; host state {} iterations, primal {:.12}, gap {:.2e}", g.iterations, g.primal, g.gap, h.iterations, h.primal, h.gap);
    assert!(g.gap <= options.tolerance && h.gap <= options.tolerance, "gaps {:e} {:e}", g.gap, h.gap);
    assert!((g.primal - h.primal).abs() <= g.gap + h.gap + 1e-12 * h.primal.abs(), "primal {} vs {}", g.primal, h.primal);
    assert!(g.iterations.abs_diff(h.iterations) <= h.iterations / 4 + 5, "iterations {} vs {}", g.iterations, h.iterations);
    assert!(10 * uploads < g.iterations as u64, "{uploads} uploads in {} iterations", g.iterations);
    let distance = (on_gpu.parts.iter().zip(&on_host.parts).map(|(a, b)| lambda2 * (a - b).norm_squared()).sum::<f64>() + lambda0 * (&on_gpu.linear - &on_host.linear).norm_squared()).sqrt();
    let size = (on_host.parts.iter().map(|a| lambda2 * a.norm_squared()).sum::<f64>() + lambda0 * on_host.linear.norm_squared()).sqrt();
    let certified = (2.0 * g.gap.max(0.0)).sqrt() + (2.0 * h.gap.max(0.0)).sqrt() + 1e-9 * size;
    println!("quantile dual: weighted distance of (A_q, w) {distance:e}, certified {certified:e}");
    assert!(distance <= certified, "(A_q, w) {distance:e} apart, certified {certified:e}");
    assert_eq!(on_gpu.z.len(), 3 * x.nrows());
}

/// Bad input to the quantile fit on a GPU is a typed error, as on the CPU:
/// non-finite targets or inputs, mismatched lengths and invalid levels are
/// invalid input; an engine problem whose targets hold a NaN (past the
/// estimator's checks) fails with an error, never a panic or a NaN inside
/// `Ok`, with FISTA's state on the device.
#[test]
fn quantile_fit_on_a_gpu_rejects_bad_input() {
    use gramian::psd::engine::{EngineProblem, LinearPart};
    use gramian::psd::features::{EmpiricalFeatures, Features};
    use gramian::psd::positive_part::PositivePartSolver;
    use gramian::psd::regression::PinballLoss;
    let Some(gpu) = common::gpu_device(gramian::GpuOptions::default()) else { return };
    let mut rng = common::rng();
    let (x, y) = common::quantile_appendix_e(30, &mut rng);
    let params = |levels: &[f64]| QuantileParams::new(gramian::Kernel::gaussian_with_width(0.2).unwrap(), levels).unwrap().positive_part(gramian::psd::PositivePartRoute::Polar);
    let invalid = |r: Result<gramian::psd::regression::QuantileRegression, Error>| matches!(r, Err(ref e) if e.is_invalid_input());
    let mut bad_y = y.clone();
    bad_y[3] = f64::NAN;
    assert!(invalid(params(&[0.3, 0.7]).fit_xy(&gpu, &x, &bad_y)));
    let mut bad_x = x.clone();
    bad_x[(4, 0)] = f64::INFINITY;
    assert!(invalid(params(&[0.3, 0.7]).fit_xy(&gpu, &bad_x, &y)));
    assert!(invalid(params(&[0.3, 0.7]).fit_xy(&gpu, &x, &y.rows(0, 10).into_owned())));
    assert!(invalid(params(&[0.7, 0.3]).fit_xy(&gpu, &x, &y)));
    let loss = PinballLoss { targets: bad_y, levels: vec![0.3, 0.7] };
    let features = EmpiricalFeatures::new(&x, 0.2).unwrap();
    let phi = features.resident_features(&gpu, &gpu.upload(&x, gramian::Precision::F64).unwrap()).unwrap();
    let problem = EngineProblem { features: Features::Resident { device: &gpu, phi: &phi }, parts: vec![vec![-1.0, 0.0]], linear: Some(LinearPart { coupling: vec![1.0; 2], lambda0: 1e-2 }), integral: None, loss: &loss, lambda1: 1e-3, lambda2: 1e-4 };
    let out = problem.solve_with(&SolverOptions { tolerance: 1e-6, max_iterations: 200, check_every: 5 }, PositivePartSolver::polar());
    assert!(out.is_err(), "NaN targets: {:?}", out.map(|s| s.report));
}
