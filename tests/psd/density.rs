//! PSD models: non-negativity, closed-form integrals, duality, sampling, errors.

use crate::common;

use gramian::psd::dual::DualProblem;
use gramian::psd::loss::SquaredLoss;
use gramian::psd::{BaseMeasure, DensityParams, EmpiricalFeatures, PsdModel, SolverOptions};
use gramian::estimator::OnDevice;
use gramian::Error;
use gramian::{linalg, Device};
use nalgebra::{DMatrix, DVector};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};
use gramian::psd::Regularisation;

/// n samples of 1/2 N(-1, 0.3^2) + 1/2 N(1, 0.3^2) (the paper's Figure 1).
fn bimodal(n: usize, rng: &mut StdRng) -> DMatrix<f64> {
    let noise = Normal::new(0.0, 0.3).unwrap();
    DMatrix::from_fn(n, 1, |_, _| if rng.random::<bool>() { -1.0 } else { 1.0 } + noise.sample(rng))
}

fn random_model(rng: &mut StdRng, m: usize, d: usize, sigma: f64) -> PsdModel {
    let centres = DMatrix::from_fn(m, d, |_, _| rng.random_range(-1.0..1.0));
    let factor = DMatrix::from_fn(3, m, |_, _| rng.random_range(-1.0..1.0));
    PsdModel::from_factor(centres, sigma, factor).unwrap()
}

fn grid_1d(a: f64, b: f64, n: usize) -> DMatrix<f64> {
    DMatrix::from_fn(n, 1, |i, _| a + (b - a) * i as f64 / (n - 1) as f64)
}

fn fitted_1d_density(rng: &mut StdRng) -> (DMatrix<f64>, gramian::psd::PsdDensity) {
    let x = bimodal(50, rng);
    let params = DensityParams::new(gramian::Kernel::gaussian_with_width(1.0).unwrap()).unwrap().regularisation(Regularisation::new().trace(1e-3).quadratic(1e-4)).solver(SolverOptions { tolerance: 1e-7, max_iterations: 20_000, check_every: 2 });
    let density = params.fit(&Device::Cpu, &x).unwrap();
    (x, density)
}

#[test]
fn fitted_density_is_nonnegative_everywhere_and_integrates_to_one() {
    let mut rng = common::rng();
    let (x, density) = fitted_1d_density(&mut rng);
    let report = density.report();
    eprintln!("iterations {} gap {:e} time {:.3}s", report.iterations, report.gap, report.seconds_total);
    assert!((density.integral().unwrap() - 1.0).abs() < 1e-6, "integral {}", density.integral().unwrap());
    let grid = grid_1d(-6.0, 6.0, 4001);
    let p = density.density(&grid).unwrap();
    assert!(p.iter().all(|&v| v >= 0.0));
    // Far from the data.
    let far = DMatrix::from_fn(200, 1, |i, _| if i % 2 == 0 { 1.0 } else { -1.0 } * rng.random_range(5.0..1e3));
    assert!(density.density(&far).unwrap().iter().all(|&v| v >= 0.0));
    // Quadrature of the fitted density agrees with the closed form.
    let h = 12.0 / 4000.0;
    let quad: f64 = p.iter().enumerate().map(|(i, v)| v * if i == 0 || i == 4000 { 0.5 } else { 1.0 }).sum::<f64>() * h;
    assert!((quad - 1.0).abs() < 1e-6, "quadrature {quad}");
    // It fits: higher likelihood on its own data than the uniform density on [-3, 3].
    assert!(density.mean_log_likelihood(&x).unwrap() > -(6.0f64).ln());
}

#[test]
fn closed_form_integrals_match_quadrature_in_1d_and_2d() {
    let mut rng = common::rng();
    // 1-D, Lebesgue and Gaussian base measure.
    let model = random_model(&mut rng, 7, 1, 0.6);
    let grid = grid_1d(-12.0, 12.0, 24_001);
    let f = model.evaluate(&Device::Cpu, &grid).unwrap();
    let h = 24.0 / 24_000.0;
    let base = BaseMeasure::gaussian(DVector::from_element(1, 0.3), DVector::from_element(1, 0.8)).unwrap();
    let nu = base.density(&grid);
    let w = |i: usize| if i == 0 || i == 24_000 { 0.5 * h } else { h };
    let leb: f64 = (0..grid.nrows()).map(|i| w(i) * f[i]).sum();
    let gau: f64 = (0..grid.nrows()).map(|i| w(i) * f[i] * nu[i]).sum();
    assert!((model.integral(&BaseMeasure::Lebesgue).unwrap() - leb).abs() < 1e-9 * leb.max(1.0));
    assert!((model.integral(&base).unwrap() - gau).abs() < 1e-9 * gau.max(1.0));
    // Box integral on [-0.5, 0.7].
    // The grid has nodes at -0.5 (i = 11500) and 0.7 (i = 12700): trapezoid rule
    // between them, error (b - a) h^2 max|f''| / 12, about 1e-6 for these models.
    let boxed: f64 = (11_500..=12_700).map(|i| f[i] * if i == 11_500 || i == 12_700 { 0.5 * h } else { h }).sum();
    let closed_box = model.box_integral(&BaseMeasure::Lebesgue, &[-0.5], &[0.7]).unwrap();
    assert!((closed_box - boxed).abs() < 1e-5 * leb.max(1.0), "box: closed {closed_box} vs trapezoid {boxed}");
    // 2-D tensor trapezoid.
    let model2 = random_model(&mut rng, 6, 2, 0.5);
    let g = 401;
    let pts = DMatrix::from_fn(g * g, 2, |r, k| -8.0 + 16.0 * (if k == 0 { r / g } else { r % g }) as f64 / (g - 1) as f64);
    let f2 = model2.evaluate(&Device::Cpu, &pts).unwrap();
    let h2 = 16.0 / (g - 1) as f64;
    let quad2: f64 = (0..pts.nrows()).map(|r| {
        let wa = if r / g == 0 || r / g == g - 1 { 0.5 } else { 1.0 };
        let wb = if r % g == 0 || r % g == g - 1 { 0.5 } else { 1.0 };
        wa * wb * f2[r]
    }).sum::<f64>() * h2 * h2;
    let closed = model2.integral(&BaseMeasure::Lebesgue).unwrap();
    assert!((closed - quad2).abs() < 1e-8 * closed.max(1.0), "{closed} vs {quad2}");
}

#[test]
fn closed_form_integral_matches_monte_carlo_in_10d() {
    let mut rng = common::rng();
    let model = random_model(&mut rng, 8, 10, 1.5);
    let base = BaseMeasure::isotropic_gaussian(10, 0.5).unwrap();
    let n = 200_000;
    let normal = Normal::new(0.0, 0.5f64.sqrt()).unwrap();
    let pts = DMatrix::from_fn(n, 10, |_, _| normal.sample(&mut rng));
    let f = model.evaluate(&Device::Cpu, &pts).unwrap();
    let mean = f.mean();
    let sd = (f.map(|v| (v - mean).powi(2)).sum() / (n - 1) as f64).sqrt() / (n as f64).sqrt();
    let closed = model.integral(&base).unwrap();
    assert!((closed - mean).abs() < 5.0 * sd, "closed {closed} vs Monte Carlo {mean} +- {sd}");
}

/// Projected gradient on the primal `min_{A >= 0} L(diag(P^T A P)) + l1 tr A + l2/2 ||A||^2`.
fn primal_projected_gradient(p: &DMatrix<f64>, y: &DVector<f64>, l1: f64, l2: f64, iterations: usize) -> DMatrix<f64> {
    let (r, n) = p.shape();
    let ptp_norm = linalg::symmetric_eigenvalues(&(p * p.transpose())).unwrap().max();
    let step = 1.0 / (ptp_norm * ptp_norm / n as f64 + l2);
    let mut a = DMatrix::<f64>::zeros(r, r);
    for _ in 0..iterations {
        let f = DVector::from_fn(n, |i, _| (p.column(i).transpose() * &a * p.column(i))[(0, 0)]);
        let dl = (f - y) / n as f64;
        let grad = p * DMatrix::from_diagonal(&dl) * p.transpose() + DMatrix::identity(r, r) * l1 + &a * l2;
        let stepped = &a - grad * step;
        let e = linalg::symmetric_eigen(&((&stepped + stepped.transpose()) * 0.5)).unwrap();
        let pos = e.eigenvalues.map(|v| v.max(0.0));
        a = &e.eigenvectors * DMatrix::from_diagonal(&pos) * e.eigenvectors.transpose();
    }
    a
}

#[test]
fn dual_solution_matches_a_direct_primal_solver_and_the_gap_closes() {
    let mut rng = common::rng();
    let x = DMatrix::from_fn(8, 1, |_, _| rng.random_range(-2.0..2.0));
    // Targets of either sign: the PSD constraint is active.
    let y = DVector::from_fn(8, |i, _| (1.5f64 * x[(i, 0)]).sin());
    let features = EmpiricalFeatures::new(&x, 0.7).unwrap();
    let p = features.features(&Device::Cpu, &x).unwrap();
    let loss = SquaredLoss { targets: y.clone() };
    let (l1, l2) = (1e-3, 1e-2);
    let problem = DualProblem { features: (&p).into(), integral: None, loss: &loss, lambda1: l1, lambda2: l2 };
    let sol = problem.solve(&SolverOptions { tolerance: 1e-12, max_iterations: 100_000, check_every: 5 }).unwrap();
    assert!(sol.report.gap <= 1e-12 && sol.report.gap >= -1e-12);
    // The gap decreases to 0 along the run.
    let hist = &sol.report.gap_history;
    assert!(hist.first().unwrap().1 > 1e3 * hist.last().unwrap().1.max(1e-15));
    let direct = primal_projected_gradient(&p, &y, l1, l2, 200_000);
    let err = linalg::relative_frobenius_error(&sol.a, &direct);
    assert!(err < 1e-4, "dual vs primal A: relative error {err}");
    // Strong duality: primal value equals the dual value.
    assert!((sol.report.primal - sol.dual_objective).abs() < 1e-10);
    // The solution is PSD and has a negative eigen-direction removed (constraint active).
    assert!(linalg::symmetric_eigenvalues(&sol.a).unwrap().min() > -1e-12);
}

#[test]
fn samples_match_the_closed_form_moments() {
    let mut rng = common::rng();
    let (_, density) = fitted_1d_density(&mut rng);
    let (mean, var) = density.moments();
    let count = 4000;
    let s = density.sample(count, &mut rng).unwrap();
    let sm = s.column(0).mean();
    let sv = s.column(0).map(|v| (v - sm).powi(2)).mean();
    let se = (var[0] / count as f64).sqrt();
    assert!((sm - mean[0]).abs() < 5.0 * se, "sample mean {sm} vs {}", mean[0]);
    assert!((sv - var[0]).abs() < 0.08 * var[0], "sample variance {sv} vs {}", var[0]);
    // Closed-form mean agrees with quadrature of x p(x).
    let grid = grid_1d(-8.0, 8.0, 16_001);
    let p = density.density(&grid).unwrap();
    let qm: f64 = (0..grid.nrows()).map(|i| grid[(i, 0)] * p[i]).sum::<f64>() * 16.0 / 16_000.0;
    assert!((qm - mean[0]).abs() < 1e-6);
}

#[test]
fn marginals_and_box_probabilities_of_a_2d_density() {
    let mut rng = common::rng();
    let x = DMatrix::from_fn(40, 2, |_, _| rng.random_range(-1.0..1.0));
    let base = BaseMeasure::isotropic_gaussian(2, 2.0).unwrap();
    let density = DensityParams::new(gramian::Kernel::gaussian_with_width(0.8).unwrap()).unwrap().base_measure(base).fit(&Device::Cpu, &x).unwrap();
    assert!((density.integral().unwrap() - 1.0).abs() < 1e-6);
    let marginal = density.marginal(&[1]).unwrap();
    assert!((marginal.integral().unwrap() - 1.0).abs() < 1e-6);
    // Marginal at a point = integral of the joint over the other coordinate (quadrature).
    let t = 0.37;
    let g = 8001;
    let pts = DMatrix::from_fn(g, 2, |i, k| if k == 1 { t } else { -12.0 + 24.0 * i as f64 / (g - 1) as f64 });
    let joint = density.density(&pts).unwrap();
    let quad = joint.sum() * 24.0 / (g - 1) as f64;
    let closed = marginal.density(&DMatrix::from_element(1, 1, t)).unwrap()[0];
    // Round-off: B has large entries that cancel (ill-conditioned K), ~1e-7 relative.
    assert!((quad - closed).abs() < 2e-6 * closed.max(1e-3), "{quad} vs {closed}");
    // Box probabilities: whole space = 1, and additivity along a split.
    let inf = f64::INFINITY;
    assert!((density.box_probability(&[-inf, -inf], &[inf, inf]).unwrap() - 1.0).abs() < 1e-6);
    let left = density.box_probability(&[-inf, -inf], &[0.2, inf]).unwrap();
    let right = density.box_probability(&[0.2, -inf], &[inf, inf]).unwrap();
    assert!((left + right - 1.0).abs() < 1e-6 && left > 0.0 && right > 0.0);
}

/// The sampler in 2-D (coordinate by coordinate, through the conditionals):
/// sample means within 5 standard errors of the closed-form means, and the
/// fraction of samples in a half-plane and a quadrant within 5 binomial
/// standard errors of the closed-form box probabilities.
#[test]
fn samples_of_a_2d_density_match_its_moments_and_box_probabilities() {
    let mut rng = common::rng();
    let x = DMatrix::from_fn(30, 2, |i, k| rng.random_range(-1.0..1.0) + if k == 0 && i % 2 == 0 { 1.5 } else { 0.0 });
    let base = BaseMeasure::isotropic_gaussian(2, 2.0).unwrap();
    let density = DensityParams::new(gramian::Kernel::gaussian_with_width(0.8).unwrap()).unwrap().base_measure(base).fit(&Device::Cpu, &x).unwrap();
    let count = 4000;
    let s = density.sample(count, &mut rng).unwrap();
    assert_eq!(s.shape(), (count, 2));
    let (mean, var) = density.moments();
    for k in 0..2 {
        let sm = s.column(k).mean();
        let se = (var[k] / count as f64).sqrt();
        assert!((sm - mean[k]).abs() < 5.0 * se, "coordinate {k}: sample mean {sm} vs {}", mean[k]);
    }
    let inf = f64::INFINITY;
    for (lower, upper) in [([-inf, -inf], [0.2, inf]), ([0.0, -0.3], [inf, inf])] {
        let p = density.box_probability(&lower, &upper).unwrap();
        let inside = (0..count).filter(|&i| (0..2).all(|k| s[(i, k)] >= lower[k] && s[(i, k)] <= upper[k])).count();
        let frac = inside as f64 / count as f64;
        let se = (p * (1.0 - p) / count as f64).sqrt();
        assert!((frac - p).abs() < 5.0 * se, "box {lower:?}..{upper:?}: fraction {frac} vs probability {p}");
    }
}

#[test]
fn duplicate_points_and_nystrom_centres_work() {
    let mut rng = common::rng();
    let base = bimodal(30, &mut rng);
    let x = DMatrix::from_fn(60, 1, |i, _| base[(i % 30, 0)]);
    let d = DensityParams::new(gramian::Kernel::gaussian_with_width(0.7).unwrap()).unwrap().fit(&Device::Cpu, &x).unwrap();
    assert!((d.integral().unwrap() - 1.0).abs() < 1e-6);
    assert!(d.density(&grid_1d(-5.0, 5.0, 501)).unwrap().iter().all(|&v| v >= 0.0));
    let big = bimodal(200, &mut rng);
    let loose = SolverOptions { tolerance: 1e-5, ..SolverOptions::default() };
    let ny = DensityParams::new(gramian::Kernel::gaussian_with_width(0.7).unwrap()).unwrap().nystrom(30, 3).solver(loose).fit(&Device::Cpu, &big).unwrap();
    assert_eq!(ny.model().centres().nrows(), 30);
    assert!((ny.integral().unwrap() - 1.0).abs() < 1e-6);
    let full = DensityParams::new(gramian::Kernel::gaussian_with_width(0.7).unwrap()).unwrap().solver(loose).fit(&Device::Cpu, &big).unwrap();
    let test = bimodal(400, &mut StdRng::seed_from_u64(11));
    let (lf, ln) = (full.mean_log_likelihood(&test).unwrap(), ny.mean_log_likelihood(&test).unwrap());
    assert!((lf - ln).abs() < 0.05, "full {lf} vs Nystrom {ln}");
}

#[test]
fn gradient_matches_finite_differences() {
    let mut rng = common::rng();
    let model = random_model(&mut rng, 6, 3, 0.9);
    let x = DMatrix::from_fn(4, 3, |_, _| rng.random_range(-1.0..1.0));
    let g = model.gradient(&Device::Cpu, &x).unwrap();
    let h = 1e-6;
    for k in 0..3 {
        let mut xp = x.clone();
        let mut xm = x.clone();
        xp.column_mut(k).add_scalar_mut(h);
        xm.column_mut(k).add_scalar_mut(-h);
        let fd = (model.evaluate(&Device::Cpu, &xp).unwrap() - model.evaluate(&Device::Cpu, &xm).unwrap()) / (2.0 * h);
        for i in 0..4 {
            assert!((fd[i] - g[(i, k)]).abs() < 1e-6 * (1.0 + fd[i].abs()), "({i},{k}): {} vs {}", fd[i], g[(i, k)]);
        }
    }
}

#[test]
fn bad_input_gives_typed_errors() {
    let mut rng = common::rng();
    let x = bimodal(20, &mut rng);
    let invalid = |r: Result<gramian::psd::PsdDensity, Error>| matches!(r, Err(Error::InvalidParameter { .. }));
    assert!(invalid(gramian::Kernel::gaussian_with_width(0.0).and_then(DensityParams::new).and_then(|p| p.fit(&Device::Cpu, &x))));
    assert!(invalid(gramian::Kernel::gaussian_with_width(-1.0).and_then(DensityParams::new).and_then(|p| p.fit(&Device::Cpu, &x))));
    assert!(invalid(DensityParams::new(gramian::Kernel::gaussian_with_width(1.0).unwrap()).unwrap().regularisation(Regularisation::new().trace(1e-3).quadratic(0.0)).fit(&Device::Cpu, &x)));
    assert!(invalid(DensityParams::new(gramian::Kernel::gaussian_with_width(1.0).unwrap()).unwrap().regularisation(Regularisation::new().trace(-1.0).quadratic(1e-3)).fit(&Device::Cpu, &x)));
    assert!(invalid(DensityParams::new(gramian::Kernel::gaussian_with_width(1.0).unwrap()).unwrap().nystrom(50, 0).fit(&Device::Cpu, &x)));
    let mut bad = x.clone();
    bad[(3, 0)] = f64::NAN;
    assert!(matches!(DensityParams::new(gramian::Kernel::gaussian_with_width(1.0).unwrap()).unwrap().fit(&Device::Cpu, &bad), Err(ref e) if e.is_invalid_input()));
    assert!(matches!(DensityParams::new(gramian::Kernel::gaussian_with_width(1.0).unwrap()).unwrap().fit(&Device::Cpu, &DMatrix::zeros(0, 1)), Err(ref e) if e.is_invalid_input()));
    let wrong_base = BaseMeasure::isotropic_gaussian(3, 1.0).unwrap();
    assert!(matches!(DensityParams::new(gramian::Kernel::gaussian_with_width(1.0).unwrap()).unwrap().base_measure(wrong_base).fit(&Device::Cpu, &x), Err(ref e) if e.is_invalid_input()));
    let tiny = SolverOptions { tolerance: 1e-12, max_iterations: 3, check_every: 1 };
    match DensityParams::new(gramian::Kernel::gaussian_with_width(1.0).unwrap()).unwrap().solver(tiny).fit(&Device::Cpu, &x) {
        Err(Error::NotConverged { iterations, gap, tolerance }) => {
            assert_eq!(iterations, 3);
            assert!(gap > tolerance);
        }
        other => panic!("expected NotConverged, got {other:?}"),
    }
}

#[test]
fn gpu_evaluation_matches_cpu() {
    let Some(gpu) = common::gpu_device(gramian::GpuOptions::default()) else { return };
    let mut rng = common::rng();
    let (_, density) = fitted_1d_density(&mut rng);
    let grid = grid_1d(-4.0, 4.0, 300);
    let cpu = density.density(&grid).unwrap();
    let gpu_values = density.to_device(&gpu).density(&grid).unwrap();
    // f32 kernel values (1e-7 relative) are amplified by the coefficients of
    // B, which cancel: the GPU path is accurate to ~1e-3 of the peak here.
    let err = (&cpu - &gpu_values).amax() / cpu.amax();
    eprintln!("gpu vs cpu: relative max error {err:e}");
    assert!(err < 1e-2, "relative max error {err}");
}

#[test]
fn a_multiplier_far_from_its_start_is_found_in_few_iterations() {
    // 10-D mixture of App. E with a small lambda_2: the root of c(mu) = 1 is
    // far from the starting mu = 1 (near -700). With solves far from the root
    // left early (certified side of the root, src/psd/dual.rs) the fit takes
    // 20 iterations (seeds 1-5); finishing every solve took 290 or more than 300.
    let mut rng = common::rng();
    let c = 1.0 / (2.0 * std::f64::consts::PI).sqrt();
    let normal = Normal::new(0.0, c.sqrt()).unwrap();
    let x = DMatrix::from_fn(300, 10, |i, k| normal.sample(&mut rng) + if k == 0 { if i % 2 == 0 { 2.0 } else { -2.0 } } else { 0.0 });
    let base = BaseMeasure::isotropic_gaussian(10, 5.0).unwrap();
    let options = SolverOptions { tolerance: 1e-4, max_iterations: 100, check_every: 2 };
    let d = DensityParams::new(gramian::Kernel::gaussian_with_width(1.0).unwrap()).unwrap().regularisation(Regularisation::new().trace(1e-4).quadratic(1e-6)).base_measure(base).nystrom(100, 1).solver(options).fit(&Device::Cpu, &x).unwrap();
    assert!(d.report().gap <= 1e-4);
    assert!((d.integral().unwrap() - 1.0).abs() < 1e-6);
    assert!(d.density(&x).unwrap().iter().all(|&v| v >= 0.0));
}

/// The same problem on the samples of three seeds where the search for the
/// multiplier once failed (one in about 13 random seeds):
/// a secant step outside the bracket, through two nearly equal values of
/// `ln c(mu)`, jumped away from the root (from mu = -3 to 7e5, where
/// `[M]_+ = 0`), and the fit ended with an infinite gap even after 1000
/// iterations (seed 30). Each must now converge within the same budget.
#[test]
fn the_multiplier_search_never_steps_away_from_the_root() {
    for seed in [5u64, 30, 33] {
        let mut rng = StdRng::seed_from_u64(seed);
        let c = 1.0 / (2.0 * std::f64::consts::PI).sqrt();
        let normal = Normal::new(0.0, c.sqrt()).unwrap();
        let x = DMatrix::from_fn(300, 10, |i, k| normal.sample(&mut rng) + if k == 0 { if i % 2 == 0 { 2.0 } else { -2.0 } } else { 0.0 });
        let base = BaseMeasure::isotropic_gaussian(10, 5.0).unwrap();
        let options = SolverOptions { tolerance: 1e-4, max_iterations: 100, check_every: 2 };
        let d = DensityParams::new(gramian::Kernel::gaussian_with_width(1.0).unwrap()).unwrap().regularisation(Regularisation::new().trace(1e-4).quadratic(1e-6)).base_measure(base).nystrom(100, 1).solver(options).fit(&Device::Cpu, &x);
        let d = d.unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert!(d.report().gap <= 1e-4, "seed {seed}");
        assert!((d.integral().unwrap() - 1.0).abs() < 1e-6, "seed {seed}");
    }
}

/// The 10-D density of App. E as the paper's authors ran it (two Gaussians
/// of standard deviation 1/sqrt(2 pi) at `+-2 e_1`, base measure
/// `N(0, 5^2 I)`), on Nystrom centres, at `lambda = 1e-19`: there `f = p / nu`
/// is about `e^20` at the data and the dual variables `-1/(n f(x_i))` span
/// orders of magnitude. The dual with one scalar step did not reach a gap
/// of 1e-4 in 20,000 iterations on the authors' sample at sigma 0.55 (it
/// stalled at 1e-3); with the diagonal metric of the engine it needs a few
/// hundred. Certified by the gap, the integral exactly 1.
#[test]
fn ten_dimensional_density_converges_at_small_lambda() {
    let mut rng = common::rng();
    let noise = Normal::new(0.0, 1.0 / (2.0 * std::f64::consts::PI).sqrt()).unwrap();
    let mut x = DMatrix::from_fn(300, 10, |_, _| noise.sample(&mut rng));
    for i in 0..x.nrows() {
        x[(i, 0)] += if rng.random::<bool>() { 2.0 } else { -2.0 };
    }
    let lambda = 1e-19;
    let params = DensityParams::new(gramian::Kernel::gaussian_with_width(0.55).unwrap()).unwrap()
        .regularisation(Regularisation::new().trace(lambda).quadratic(0.01 * lambda))
        .base_measure(BaseMeasure::isotropic_gaussian(10, 25.0).unwrap())
        .nystrom(100, 1)
        .solver(SolverOptions { tolerance: 1e-4, max_iterations: 2000, check_every: 2 });
    let model = params.fit(&Device::Cpu, &x).unwrap();
    let report = model.report();
    assert!(report.gap <= 1e-4 && report.gap >= -1e-12, "gap {}", report.gap);
    assert!((model.integral().unwrap() - 1.0).abs() < 1e-9, "integral {}", model.integral().unwrap());
    println!("10-D density at lambda 1e-19: {} iterations, gap {:.2e}", report.iterations, report.gap);
}

/// A base measure so wide next to the kernel that the integral constraint's
/// entries are tiny (10-D, kernel width 0.4 against a base standard
/// deviation of 5): the model's scale leaves what `f64` can certify, and the
/// fit says so with a typed error instead of a model with a negative gap or
/// a non-finite matrix reported as bad input.
#[test]
fn a_constraint_beyond_f64_is_an_ill_conditioned_error() {
    let mut rng = common::rng();
    let normal = Normal::new(0.0, 1.0).unwrap();
    let x = DMatrix::from_fn(300, 10, |_, _| normal.sample(&mut rng));
    let base = BaseMeasure::gaussian(DVector::zeros(10), DVector::from_element(10, 5.0)).unwrap();
    let params = DensityParams::new(gramian::Kernel::gaussian_with_width(0.4).unwrap()).unwrap().base_measure(base).nystrom(60, 1).solver(SolverOptions::default().check_every(2).max_iterations(2000));
    match params.fit(&Device::cpu(), &x) {
        Err(Error::IllConditioned { what, reason }) => assert!(what.contains("PSD") && !reason.is_empty()),
        Err(e) => panic!("expected IllConditioned, got {e:?}"),
        Ok(model) => panic!("expected IllConditioned, got a model with gap {:e}, primal {:e}", model.report().gap, model.report().primal),
    }
}
