//! Heteroscedastic Gaussian regression with a PSD model for the precision.

use crate::common;

use crate::psd_toy;
use gramian::psd::heteroscedastic::GaussianNaturalLoss;
use gramian::psd::{HeteroscedasticParams, SolverOptions};
use gramian::Error;
use gramian::Device;
use nalgebra::{DMatrix, DVector};
use rand::Rng;
use psd_toy::{toy_data, true_mean, true_variance};
use gramian::psd::Regularisation;

/// Golden-section minimum of a unimodal `f` on `[a, b]`.
fn golden(f: impl Fn(f64) -> f64, mut a: f64, mut b: f64) -> f64 {
    let r = (5f64.sqrt() - 1.0) / 2.0;
    for _ in 0..200 {
        let c = b - r * (b - a);
        let d = a + r * (b - a);
        if f(c) < f(d) { b = d } else { a = c }
    }
    0.5 * (a + b)
}

#[test]
fn prox_of_the_loss_matches_a_brute_force_minimisation() {
    let mut rng = common::rng();
    for _ in 0..40 {
        let n = rng.random_range(1..6);
        let targets = DVector::from_fn(n, |_, _| rng.random_range(-3.0..3.0));
        let loss = GaussianNaturalLoss { targets: targets.clone() };
        let c = 1.0 / n as f64;
        let i = rng.random_range(0..n);
        let y = targets[i];
        let u = rng.random_range(-3.0..3.0);
        let v = rng.random_range(-3.0..3.0);
        let q = 10f64.powf(rng.random_range(-2.0..2.0));
        let obj = |e: f64, t: f64| q * c * (t * y * y / 2.0 - e * y + e * e / (2.0 * t) - t.ln() / 2.0) + (e - u).powi(2) / 2.0 + (t - v).powi(2) / 2.0;
        let (e, t) = loss.prox_loss(i, u, v, q);
        assert!(t > 0.0 && e.is_finite());
        // Brute force: nested golden sections, over log t outside and eta inside.
        let inner = |t: f64| {
            let e = golden(|e| obj(e, t), -50.0, 50.0);
            obj(e, t)
        };
        let log_t = golden(|s| inner(s.exp()), -40.0, 5.0);
        let (t_bf, e_bf) = (log_t.exp(), golden(|e| obj(e, log_t.exp()), -50.0, 50.0));
        let (f_prox, f_bf) = (obj(e, t), obj(e_bf, t_bf));
        assert!(f_prox <= f_bf + 1e-12 * (1.0 + f_bf.abs()), "prox {f_prox} vs brute force {f_bf} at y {y} u {u} v {v} q {q}");
        assert!((t - t_bf).abs() <= 1e-5 * (1.0 + t), "theta {t} vs brute force {t_bf} (y {y} u {u} v {v} q {q})");
        assert!((e - e_bf).abs() <= 1e-5 * (1.0 + e.abs()), "eta {e} vs brute force {e_bf}");
        // First-order conditions at machine precision.
        let de = q * c * (-y + e / t) + (e - u);
        let dt = q * c * (y * y / 2.0 - e * e / (2.0 * t * t) - 1.0 / (2.0 * t)) + (t - v);
        let scale = 1.0 + u.abs() + v.abs() + q * c * (y * y + 1.0 / t + (e / t).powi(2));
        assert!(de.abs() <= 1e-12 * scale && dt.abs() <= 1e-12 * scale, "stationarity {de:e} {dt:e}");
    }
}

#[test]
fn conjugate_and_its_prox_are_consistent() {
    let mut rng = common::rng();
    let n = 5;
    let loss = GaussianNaturalLoss { targets: DVector::from_fn(n, |_, _| rng.random_range(-2.0..2.0)) };
    // Fenchel-Young with equality at the gradient.
    let eta = DVector::from_fn(n, |_, _| rng.random_range(-2.0..2.0));
    let theta = DVector::from_fn(n, |_, _| rng.random_range(0.1..3.0));
    let (beta, alpha) = loss.gradient(&eta, &theta);
    let fy = loss.value(&eta, &theta) + loss.conjugate(&beta, &alpha) - beta.dot(&eta) - alpha.dot(&theta);
    assert!(fy.abs() < 1e-12, "Fenchel-Young residual {fy:e}");
    // prox_{s L*} minimises 1/2 ||z - v||^2 + s L*(z).
    let vb = DVector::from_fn(n, |_, _| rng.random_range(-1.0..1.0));
    let va = DVector::from_fn(n, |_, _| rng.random_range(-1.0..1.0));
    let s = 10f64.powf(rng.random_range(-1.0..1.0));
    let (pb, pa) = loss.prox_conjugate(&vb, &va, s);
    let obj = |b: &DVector<f64>, a: &DVector<f64>| 0.5 * ((b - &vb).norm_squared() + (a - &va).norm_squared()) + s * loss.conjugate(b, a);
    let base = obj(&pb, &pa);
    assert!(base.is_finite());
    for i in 0..n {
        for h in [1e-3, -1e-3, 1e-5, -1e-5] {
            let mut b2 = pb.clone();
            b2[i] += h;
            let mut a2 = pa.clone();
            a2[i] += h;
            assert!(obj(&b2, &pa) >= base - 1e-13, "beta {i} {h}");
            assert!(obj(&pb, &a2) >= base - 1e-13, "alpha {i} {h}");
        }
    }
}

#[test]
fn the_duality_gap_closes_and_stays_nonnegative() {
    let mut rng = common::rng();
    let (x, y) = toy_data(40, &mut rng);
    let options = SolverOptions { tolerance: 1e-8, max_iterations: 50_000, check_every: 10 };
    let model = HeteroscedasticParams::new(gramian::Kernel::gaussian_with_width(0.15).unwrap()).unwrap().regularisation(Regularisation::new().linear(1e-3).trace(1e-3).quadratic(1e-3)).solver(options).fit_xy(&Device::Cpu, &x, &y).unwrap();
    let report = model.report();
    assert!(report.gap <= 1e-8 && report.gap >= -1e-12, "gap {}", report.gap);
    for &(k, g) in &report.gap_history {
        assert!(g >= -1e-10, "negative gap {g:e} at iteration {k} (weak duality violated)");
    }
    let first = report.gap_history.first().unwrap().1;
    assert!(first > 1e3 * report.gap, "gap did not decrease: {first:e} -> {:e}", report.gap);
}

fn fit_toy(x: &DMatrix<f64>, y: &DVector<f64>) -> gramian::psd::HeteroscedasticRegression {
    HeteroscedasticParams::new(gramian::Kernel::gaussian_with_width(0.1).unwrap()).unwrap()
        .regularisation(Regularisation::new().linear(1e-2).trace(1e-2).quadratic(1e-3))
        .solver(SolverOptions { tolerance: 1e-6, max_iterations: 50_000, check_every: 10 })
        .fit_xy(&Device::Cpu, x, y)
        .unwrap()
}

#[test]
fn fitted_variance_tracks_the_true_variance() {
    let mut rng = common::rng();
    let (x, y) = toy_data(200, &mut rng);
    let model = fit_toy(&x, &y);
    let grid = DMatrix::from_fn(181, 1, |i, _| 0.05 + 0.9 * i as f64 / 180.0);
    let var = model.predict_variance(&grid).unwrap();
    let mean = model.predict_mean(&grid).unwrap();
    let log_err = (0..grid.nrows()).map(|i| (var[i] / true_variance(grid[(i, 0)])).ln().abs()).sum::<f64>() / grid.nrows() as f64;
    let mean_err = ((0..grid.nrows()).map(|i| (mean[i] - true_mean(grid[(i, 0)])).powi(2)).sum::<f64>() / grid.nrows() as f64).sqrt();
    println!("mean |log(v/v*)| = {log_err:.3}, rms mean error = {mean_err:.3}");
    assert!(log_err < LOG_VARIANCE_TOLERANCE, "mean |log(v/v*)| = {log_err}");
    assert!(mean_err < MEAN_TOLERANCE, "rms mean error {mean_err}");
    // The fitted model beats the best constant-variance model in held-out likelihood.
    let (xt, yt) = toy_data(2000, &mut rng);
    let ll = model.mean_log_likelihood(&xt, &yt).unwrap();
    let mu = model.predict_mean(&xt).unwrap();
    let v_const = (0..yt.len()).map(|i| (yt[i] - mu[i]).powi(2)).sum::<f64>() / yt.len() as f64;
    let ll_const = -0.5 * (2.0 * std::f64::consts::PI * v_const).ln() - 0.5;
    println!("held-out log-likelihood {ll:.4} vs constant variance (oracle) {ll_const:.4}");
    assert!(ll > ll_const, "heteroscedastic {ll} <= constant variance {ll_const}");
}

/// Worst over 26 seeds (n = 200): mean abs log-variance ratio 0.318, rms mean error 0.332;
/// held-out log-likelihood margin over the constant-variance oracle >= 0.068.
const LOG_VARIANCE_TOLERANCE: f64 = 0.5;
const MEAN_TOLERANCE: f64 = 0.5;

#[test]
fn precision_is_positive_on_a_grid_and_far_away() {
    let mut rng = common::rng();
    let (x, y) = toy_data(80, &mut rng);
    let model = fit_toy(&x, &y);
    let mut points: Vec<f64> = (0..=3000).map(|i| -1.0 + 3.0 * i as f64 / 3000.0).collect();
    points.extend([-1e6, -1e3, -50.0, 50.0, 1e3, 1e6]);
    let grid = DMatrix::from_column_slice(points.len(), 1, &points);
    let np = model.natural_parameters(&grid).unwrap();
    for (i, &t) in np.theta.iter().enumerate() {
        assert!(t > 0.0 && t.is_finite(), "theta({}) = {t}", points[i]);
    }
    assert!(model.precision_at_infinity() > 0.0);
    let var = model.predict_variance(&grid).unwrap();
    let mean = model.predict_mean(&grid).unwrap();
    assert!(var.iter().chain(mean.iter()).all(|v| v.is_finite()));
}

#[test]
fn bad_input_gives_typed_errors() {
    let mut rng = common::rng();
    let (x, y) = toy_data(20, &mut rng);
    let dev = Device::Cpu;
    let invalid = |r: Result<gramian::psd::HeteroscedasticRegression, Error>| matches!(r, Err(Error::InvalidParameter { .. }));
    assert!(invalid(gramian::Kernel::gaussian_with_width(0.0).and_then(HeteroscedasticParams::new).and_then(|p| p.fit_xy(&dev, &x, &y))));
    assert!(invalid(gramian::Kernel::gaussian_with_width(f64::NAN).and_then(HeteroscedasticParams::new).and_then(|p| p.fit_xy(&dev, &x, &y))));
    assert!(invalid(HeteroscedasticParams::new(gramian::Kernel::gaussian_with_width(0.1).unwrap()).unwrap().regularisation(Regularisation::new().linear(0.0).trace(1e-3).quadratic(1e-3)).fit_xy(&dev, &x, &y)));
    assert!(invalid(HeteroscedasticParams::new(gramian::Kernel::gaussian_with_width(0.1).unwrap()).unwrap().regularisation(Regularisation::new().linear(1e-3).trace(-1.0).quadratic(1e-3)).fit_xy(&dev, &x, &y)));
    assert!(invalid(HeteroscedasticParams::new(gramian::Kernel::gaussian_with_width(0.1).unwrap()).unwrap().regularisation(Regularisation::new().linear(1e-3).trace(1e-3).quadratic(0.0)).fit_xy(&dev, &x, &y)));
    assert!(invalid(HeteroscedasticParams::new(gramian::Kernel::gaussian_with_width(0.1).unwrap()).unwrap().fit_xy(&dev, &x, &DVector::from_element(20, 1.5))));
    let mut bad_x = x.clone();
    bad_x[(3, 0)] = f64::NAN;
    assert!(matches!(HeteroscedasticParams::new(gramian::Kernel::gaussian_with_width(0.1).unwrap()).unwrap().fit_xy(&dev, &bad_x, &y), Err(ref e) if e.is_invalid_input()));
    let mut bad_y = y.clone();
    bad_y[2] = f64::INFINITY;
    assert!(matches!(HeteroscedasticParams::new(gramian::Kernel::gaussian_with_width(0.1).unwrap()).unwrap().fit_xy(&dev, &x, &bad_y), Err(ref e) if e.is_invalid_input()));
    assert!(matches!(HeteroscedasticParams::new(gramian::Kernel::gaussian_with_width(0.1).unwrap()).unwrap().fit_xy(&dev, &x, &y.rows(0, 19).into_owned()), Err(ref e) if e.is_invalid_input()));
    let budget = SolverOptions { tolerance: 1e-12, max_iterations: 5, check_every: 1 };
    match HeteroscedasticParams::new(gramian::Kernel::gaussian_with_width(0.1).unwrap()).unwrap().solver(budget).fit_xy(&dev, &x, &y) {
        Err(Error::NotConverged { iterations, gap, .. }) => assert!(iterations == 5 && gap > 1e-12),
        other => panic!("expected NotConverged, got {other:?}"),
    }
    let model = fit_toy(&x, &y);
    assert!(model.predict_mean(&DMatrix::zeros(3, 2)).is_err());
    assert!(model.log_likelihood(&x, &DVector::zeros(3)).is_err());
}
