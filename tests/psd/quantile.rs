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
