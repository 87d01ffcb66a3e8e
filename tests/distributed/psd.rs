//! Sharded PSD fits (density, heteroscedastic and quantile regression)
//! against single-process fits.
//!
//! The ranks sum `P diag(alpha) P^T` and the dual's scalars in one fixed order,
//! so a sharded fit differs from the single-process fit of all rows by the
//! rounding of those partial sums only. On most data that leaves the same
//! iterations and a relative difference of the model below `1e-8`; on some
//! (random data sets of the test seed) the rounding tips a step or restart
//! decision of FISTA and the two runs stop at different certified points:
//! both within the duality gap `1e-6` of the optimum, so within
//! `sqrt(2 gap / lambda_2) = 0.14` of it in `||A||_F`; measured up to
//! `2.4e-3` relative. Checked at `1e-2` relative, iterations within 20%.

use gramian::distributed::{Communicator, FitSharded, RowPartition, RowShard, ShardedSupervised, ThreadGroup};
use gramian::psd::{DensityParams, HeteroscedasticParams, HeteroscedasticRegression, PsdDensity, QuantileParams, QuantileRegression, Regularisation, SolverOptions, SolverReport};
use gramian::{Device, Error, GpuOptions, Kernel};
use nalgebra::{DMatrix, DVector};
use rand::Rng;

use crate::common;

/// Two clusters in 2-D.
fn sample(n: usize) -> DMatrix<f64> {
    let mut rng = common::rng();
    DMatrix::from_fn(n, 2, |i, _| if i % 3 == 0 { 1.5 } else { -0.5 } + 0.6 * rng.random_range(-1.0..1.0))
}

fn params(width: f64) -> DensityParams {
    DensityParams::new(Kernel::gaussian_with_width(width).unwrap()).unwrap().nystrom(24, 5)
}

fn largest_relative(a: &DMatrix<f64>, b: &DMatrix<f64>) -> f64 {
    (a - b).amax() / b.amax()
}

/// Every rank's model equals rank 0's bit for bit; rank 0's against `single`.
fn compare(fits: &[PsdDensity], single: &PsdDensity, test: &DMatrix<f64>, tolerance: f64) {
    let first = fits[0].model().coefficients();
    for f in fits {
        assert_eq!(f.model().coefficients(), first, "every rank must hold the same model");
        assert_eq!(f.model().centres(), single.model().centres(), "the same Nystrom centres");
        assert_eq!(f.report().iterations, fits[0].report().iterations);
    }
    let b = largest_relative(&first, &single.model().coefficients());
    let p = fits[0].density(test).unwrap();
    let q = single.density(test).unwrap();
    let values = (&p - &q).amax() / q.amax();
    assert!(b <= tolerance && values <= tolerance, "coefficients {b:e}, densities {values:e}");
    let (a, b) = (fits[0].report().iterations as f64, single.report().iterations as f64);
    assert!((a - b).abs() <= 0.2 * b, "{a} iterations sharded, {b} in one process");
}

#[test]
fn sharded_density_matches_the_single_process_fit() {
    let x = sample(101);
    let test = sample(17).add_scalar(0.1);
    let p = params(0.6);
    let single = p.fit(&Device::Cpu, &x).unwrap();
    for ranks in 1..=3 {
        let fits = ThreadGroup::run(ranks, |c| {
            let shard = RowShard::from_full(c, &x)?;
            p.fit_sharded(&Device::Cpu, c, &shard)
        })
        .unwrap();
        let fits: Vec<PsdDensity> = fits.into_iter().map(|r| r.unwrap()).collect();
        compare(&fits, &single, &test, 1e-2);
        // The fit is normalised to tr(A W) = 1; recomputing that trace sums
        // 24^2 products of both signs, whose rounding reaches 1.1e-10 on some
        // samples (the one-process fit's as well).
        assert!((fits[0].integral().unwrap() - 1.0).abs() < 1e-9, "integral {:e} off 1 on {ranks} ranks; one process {:e}", fits[0].integral().unwrap() - 1.0, single.integral().unwrap() - 1.0);
    }
}

#[test]
fn sharded_density_without_nystrom_gathers_the_centres() {
    let x = sample(30);
    let p = DensityParams::new(Kernel::gaussian_with_width(0.8).unwrap()).unwrap();
    let single = p.fit(&Device::Cpu, &x).unwrap();
    let fits = ThreadGroup::run(2, |c| p.fit_sharded(&Device::Cpu, c, &RowShard::from_full(c, &x)?)).unwrap();
    let fits: Vec<PsdDensity> = fits.into_iter().map(|r| r.unwrap()).collect();
    compare(&fits, &single, &sample(9), 1e-2);
}

#[test]
fn a_nan_in_one_shard_or_other_parameters_fail_every_rank() {
    let x = sample(40);
    let out = ThreadGroup::run(3, |c| {
        let mut local = RowShard::from_full(c, &x)?.local().clone();
        if c.rank() == 1 {
            local[(2, 0)] = f64::NAN;
        }
        let shard = RowShard::new(c, local)?;
        params(0.6).fit_sharded(&Device::Cpu, c, &shard)
    })
    .unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::RankFailed { rank: 1, invalid_input: true, .. })), "{r:?}");
    }
    let out = ThreadGroup::run(3, |c| {
        let shard = RowShard::from_full(c, &x)?;
        params(if c.rank() == 2 { 0.61 } else { 0.6 }).fit_sharded(&Device::Cpu, c, &shard)
    })
    .unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::ShardMismatch { rank: 2, .. })), "{r:?}");
    }
    // The same invalid parameters on every rank: the single-process error,
    // on every rank.
    let bad = params(0.6).solver(SolverOptions::default().max_iterations(0));
    assert!(matches!(bad.fit(&Device::Cpu, &x), Err(Error::InvalidParameter { .. })));
    let out = ThreadGroup::run(3, |c| bad.fit_sharded(&Device::Cpu, c, &RowShard::from_full(c, &x)?)).unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::InvalidParameter { name: "max_iterations/check_every", .. })), "{r:?}");
    }
}

#[test]
fn a_rank_whose_device_fails_fails_every_rank() {
    let x = sample(40);
    let Some(_) = common::gpu_device(GpuOptions::default()) else { return };
    let out = ThreadGroup::run(2, |c| {
        let device = if c.rank() == 1 { common::gpu_device(GpuOptions { max_device_bytes: Some(0), ..Default::default() }).unwrap() } else { Device::Cpu };
        params(0.6).fit_sharded(&device, c, &RowShard::from_full(c, &x)?)
    })
    .unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::RankFailed { rank: 1, invalid_input: false, .. })), "{r:?}");
    }
}

#[test]
fn sharded_density_on_gpu_ranks_matches_the_single_process_fit() {
    let Some(gpu) = common::gpu_device(GpuOptions::default()) else { return };
    let x = sample(41);
    // A loose gap (few iterations: every one dispatches to the software GPU here).
    let p = DensityParams::new(Kernel::gaussian_with_width(0.8).unwrap()).unwrap().nystrom(10, 5).solver(SolverOptions::default().tolerance(1e-3).check_every(2));
    let single = p.fit(&gpu, &x).unwrap();
    let fits = ThreadGroup::run(2, |c| p.fit_sharded(&gpu, c, &RowShard::from_full(c, &x)?)).unwrap();
    let fits: Vec<PsdDensity> = fits.into_iter().map(|r| r.unwrap()).collect();
    compare(&fits, &single, &sample(11), 1e-6);
}

// Heteroscedastic and quantile regression on sharded rows.
//
// Tolerances from the duality-gap certificate. Both primal objectives are
// within their certified gaps `g` of the optimum, so they differ by at most
// `g_sharded + g_single` (plus the rounding of two sums of n terms,
// `1e-12` relative). The primal is `lambda_0`-strongly convex in the linear
// part `w` and `lambda_2`-strongly convex in each PSD part `A_q`, so a point
// within `g` of the optimum has `lambda_0/2 ||w - w*||^2 + lambda_2/2 sum_q
// ||A_q - A_q*||_F^2 <= g`; with features of norm `||p(x)|| <= 1` (Nystrom
// features of a Gaussian kernel; 2 with the constant feature of the
// heteroscedastic model, counted as `||p||^2 <= 2`) a model value moves by
// at most `||w - w*|| ||p||` or `||A_q - A_q*||_F ||p||^2`. Two fits, each
// within that of the optimum: twice the bound. Measured: the same
// iterations as one process and differences of 1e-12 (heteroscedastic) and
// 2e-13 (quantile) at 2 and 3 ranks, against bounds of 0.34 and 0.13; the
// objective check is the tight one.

fn regression(n: usize) -> (DMatrix<f64>, DVector<f64>) {
    let mut rng = common::rng();
    let x = DMatrix::<f64>::from_fn(n, 1, |_, _| rng.random_range(0.0..1.0));
    let y = DVector::from_fn(n, |i, _| (6.0 * x[(i, 0)]).sin() + (0.1 + 0.4 * x[(i, 0)]) * rng.random_range(-1.0..1.0));
    (x, y)
}

/// This rank's rows of `x` and `y` in `counts` blocks (uneven, or with an empty block).
fn supervised_shard(comm: &dyn Communicator, x: &DMatrix<f64>, y: &DVector<f64>, counts: Option<&[usize]>) -> Result<ShardedSupervised, Error> {
    let partition = match counts {
        Some(c) => RowPartition::from_counts(c)?,
        None => RowPartition::even(x.nrows(), comm.size())?,
    };
    let rows = partition.range(comm.rank());
    let shard = RowShard::new(comm, x.rows(rows.start, rows.len()).into_owned())?;
    ShardedSupervised::new(comm, shard, y.rows(rows.start, rows.len()).into_owned())
}

fn heteroscedastic_params() -> HeteroscedasticParams {
    HeteroscedasticParams::new(Kernel::gaussian_with_width(0.15).unwrap()).unwrap().nystrom(16, 5)
}

fn quantile_params() -> QuantileParams {
    QuantileParams::new(Kernel::gaussian_with_width(0.15).unwrap(), &[0.25, 0.5, 0.75])
        .unwrap()
        .regularisation(Regularisation::new().linear(1e-2).trace(1e-3).quadratic(1e-3))
        .nystrom(16, 5)
        .solver(SolverOptions::default().tolerance(1e-6))
}

/// Certified objectives within the two gaps.
fn objectives_agree(sharded: &SolverReport, single: &SolverReport, tolerance: f64) {
    assert!(sharded.gap <= tolerance && single.gap <= tolerance, "gaps {:e} {:e}", sharded.gap, single.gap);
    let (a, b) = (sharded.primal, single.primal);
    assert!((a - b).abs() <= sharded.gap + single.gap + 1e-12 * b.abs(), "primal {a} sharded, {b} in one process");
}

fn heteroscedastic_on_ranks(ranks: usize, device: &Device, x: &DMatrix<f64>, y: &DVector<f64>, params: &HeteroscedasticParams) -> Vec<HeteroscedasticRegression> {
    ThreadGroup::run(ranks, |c| params.fit_sharded(device, c, &supervised_shard(c, x, y, None)?)).unwrap().into_iter().map(|r| r.unwrap()).collect()
}

fn quantile_on_ranks(ranks: usize, device: &Device, x: &DMatrix<f64>, y: &DVector<f64>, params: &QuantileParams) -> Vec<QuantileRegression> {
    ThreadGroup::run(ranks, |c| params.fit_sharded(device, c, &supervised_shard(c, x, y, None)?)).unwrap().into_iter().map(|r| r.unwrap()).collect()
}

/// Heteroscedastic regression on 1, 2 and 3 ranks (101 rows: uneven
/// blocks) against the single-process fit: every rank the same model bit
/// for bit, the objective within the two certified gaps, and the natural
/// parameters at test points within the gap's bound (module note above;
/// in the units of `y`: `theta = theta'/sd^2`, `eta = (theta' mean/sd +
/// eta')/sd` for the standardised `theta'`, `eta'`).
#[test]
fn sharded_heteroscedastic_regression_matches_the_single_process_fit() {
    let (x, y) = regression(101);
    let test = DMatrix::from_fn(23, 1, |i, _| i as f64 / 22.0);
    let p = heteroscedastic_params();
    let tolerance = p.settings().solver().tolerance;
    let single = p.fit_xy(&Device::Cpu, &x, &y).unwrap();
    let reference = single.natural_parameters(&test).unwrap();
    let (mean, sd) = (y.mean(), (y.map(|v| (v - y.mean()).powi(2)).sum() / y.len() as f64).sqrt());
    let lambda = p.regularisation_weights();
    let theta_s = 2.0 * 2.0 * (2.0 * tolerance / lambda.quadratic).sqrt();
    let eta_s = 2.0 * 2f64.sqrt() * (2.0 * tolerance / lambda.linear).sqrt();
    let (theta_bound, eta_bound) = (theta_s / (sd * sd), (theta_s * mean.abs() / sd + eta_s) / sd);
    for ranks in 1..=3 {
        let fits = heteroscedastic_on_ranks(ranks, &Device::Cpu, &x, &y, &p);
        let first = fits[0].natural_parameters(&test).unwrap();
        for f in &fits {
            let nat = f.natural_parameters(&test).unwrap();
            assert_eq!((nat.eta.clone(), nat.theta.clone()), (first.eta.clone(), first.theta.clone()), "every rank must hold the same model");
            assert_eq!(f.report().iterations, fits[0].report().iterations);
        }
        objectives_agree(fits[0].report(), single.report(), tolerance);
        let d_theta = (&first.theta - &reference.theta).amax();
        let d_eta = (&first.eta - &reference.eta).amax();
        println!("heteroscedastic, {ranks} ranks: theta {d_theta:e} (bound {theta_bound:e}), eta {d_eta:e} (bound {eta_bound:e}), {} iterations ({} in one process)", fits[0].report().iterations, single.report().iterations);
        assert!(d_theta <= theta_bound && d_eta <= eta_bound, "{ranks} ranks: theta {d_theta:e} > {theta_bound:e} or eta {d_eta:e} > {eta_bound:e}");
    }
}

/// Quantile regression (3 levels) on 1, 2 and 3 ranks (101 rows) against
/// the single-process fit: the same median offset (an exact order
/// statistic), every rank the same curves bit for bit, the objective
/// within the two certified gaps, the curves at test points within the
/// gap's bound (module note above: each curve is the linear part plus at
/// most `K - 1` gap parts, so by Cauchy-Schwarz it moves by at most
/// `sqrt(2 g (1/lambda_0 + (K - 1)/lambda_2))` per fit), and no crossing.
#[test]
fn sharded_quantile_regression_matches_the_single_process_fit() {
    let (x, y) = regression(101);
    let test = DMatrix::from_fn(23, 1, |i, _| i as f64 / 22.0);
    let p = quantile_params();
    let tolerance = p.settings().solver().tolerance;
    let single = p.fit_xy(&Device::Cpu, &x, &y).unwrap();
    let reference = single.predict(&test).unwrap();
    let lambda = p.regularisation_weights();
    let bound = 2.0 * (2.0 * tolerance * (1.0 / lambda.linear + 2.0 / lambda.quadratic)).sqrt();
    for ranks in 1..=3 {
        let fits = quantile_on_ranks(ranks, &Device::Cpu, &x, &y, &p);
        let first = fits[0].predict(&test).unwrap();
        for f in &fits {
            assert_eq!(f.predict(&test).unwrap(), first, "every rank must hold the same model");
        }
        objectives_agree(fits[0].report(), single.report(), tolerance);
        let d = (&first - &reference).amax();
        println!("quantile, {ranks} ranks: curves {d:e} (bound {bound:e}), {} iterations ({} in one process)", fits[0].report().iterations, single.report().iterations);
        assert!(d <= bound, "{ranks} ranks: curves differ by {d:e} > {bound:e}");
        assert!((0..test.nrows()).all(|i| first[(i, 0)] <= first[(i, 1)] && first[(i, 1)] <= first[(i, 2)]));
    }
}

/// A NaN in one rank's targets (heteroscedastic) or rows (quantile), other
/// parameters on one rank, a rank without rows: every rank the same error.
#[test]
fn sharded_regressions_fail_every_rank_alike() {
    let (x, y) = regression(40);
    let out = ThreadGroup::run(3, |c| {
        let rows = RowPartition::even(40, 3)?.range(c.rank());
        let mut local_y = y.rows(rows.start, rows.len()).into_owned();
        if c.rank() == 1 {
            local_y[2] = f64::NAN;
        }
        let data = ShardedSupervised::new(c, RowShard::from_full(c, &x)?, local_y)?;
        heteroscedastic_params().fit_sharded(&Device::Cpu, c, &data)
    })
    .unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::RankFailed { rank: 1, invalid_input: true, .. })), "{r:?}");
    }
    let out = ThreadGroup::run(3, |c| {
        let mut local = RowShard::from_full(c, &x)?.local().clone();
        if c.rank() == 1 {
            local[(0, 0)] = f64::NAN;
        }
        let rows = RowPartition::even(40, 3)?.range(c.rank());
        let data = ShardedSupervised::new(c, RowShard::new(c, local)?, y.rows(rows.start, rows.len()).into_owned())?;
        quantile_params().fit_sharded(&Device::Cpu, c, &data)
    })
    .unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::RankFailed { rank: 1, invalid_input: true, .. })), "{r:?}");
    }
    let out = ThreadGroup::run(3, |c| {
        let p = if c.rank() == 2 { heteroscedastic_params().nystrom(17, 5) } else { heteroscedastic_params() };
        p.fit_sharded(&Device::Cpu, c, &supervised_shard(c, &x, &y, None)?)
    })
    .unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::ShardMismatch { rank: 2, .. })), "{r:?}");
    }
    let out = ThreadGroup::run(3, |c| {
        let levels: &[f64] = if c.rank() == 2 { &[0.2, 0.5, 0.75] } else { &[0.25, 0.5, 0.75] };
        let p = QuantileParams::new(Kernel::gaussian_with_width(0.15).unwrap(), levels).unwrap().nystrom(16, 5);
        p.fit_sharded(&Device::Cpu, c, &supervised_shard(c, &x, &y, None)?)
    })
    .unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::ShardMismatch { rank: 2, .. })), "{r:?}");
    }
    // A rank without rows: every PSD fit needs rows on every rank (as the density).
    let counts = [25, 0, 15];
    let out = ThreadGroup::run(3, |c| heteroscedastic_params().fit_sharded(&Device::Cpu, c, &supervised_shard(c, &x, &y, Some(&counts))?).map(|_| ())).unwrap();
    let out_q = ThreadGroup::run(3, |c| quantile_params().fit_sharded(&Device::Cpu, c, &supervised_shard(c, &x, &y, Some(&counts))?).map(|_| ())).unwrap();
    let xs = x.clone();
    let out_d = ThreadGroup::run(3, |c| {
        let rows = RowPartition::from_counts(&counts)?.range(c.rank());
        params(0.6).fit_sharded(&Device::Cpu, c, &RowShard::new(c, xs.rows(rows.start, rows.len()).into_owned())?).map(|_| ())
    })
    .unwrap();
    for r in out.into_iter().chain(out_q).chain(out_d) {
        assert!(matches!(r, Err(Error::RankFailed { rank: 1, invalid_input: true, .. })), "{r:?}");
    }
}

/// Quantile regression on two GPU ranks (lavapipe in CI: features resident
/// on each rank's device, `M_q` summed on the host) against the
/// single-process fit on the same GPU: objectives within the two gaps,
/// every rank the same curves. A loose gap: every iteration dispatches to
/// the software GPU here.
#[test]
fn sharded_quantile_regression_on_gpu_ranks_matches_the_single_process_fit() {
    let Some(gpu) = common::gpu_device(GpuOptions::default()) else { return };
    let (x, y) = regression(41);
    let p = QuantileParams::new(Kernel::gaussian_with_width(0.2).unwrap(), &[0.3, 0.7])
        .unwrap()
        .regularisation(Regularisation::new().linear(1e-2).trace(1e-2).quadratic(1e-3))
        .nystrom(10, 5)
        .solver(SolverOptions::default().tolerance(2e-3).check_every(5));
    let single = p.fit_xy(&gpu, &x, &y).unwrap();
    let fits = quantile_on_ranks(2, &gpu, &x, &y, &p);
    let test = DMatrix::from_fn(9, 1, |i, _| i as f64 / 8.0);
    let first = fits[0].predict(&test).unwrap();
    assert_eq!(fits[1].predict(&test).unwrap(), first);
    objectives_agree(fits[0].report(), single.report(), 2e-3);
}

/// Predictions on a sharded test set ([`RowShard::predict`]): each rank
/// predicts its own rows (one rank holds none), the gathered outputs are
/// the single-process model's on all rows (the same model: the same bits
/// row by row); a prediction failing on one rank fails every rank.
#[test]
fn sharded_models_predict_sharded_test_sets() {
    let (x, y) = regression(60);
    let test = DMatrix::from_fn(10, 1, |i, _| 0.05 + i as f64 / 10.0);
    let counts = [6, 0, 4];
    let out = ThreadGroup::run(3, |c| {
        let data = supervised_shard(c, &x, &y, None)?;
        let hetero = heteroscedastic_params().fit_sharded(&Device::Cpu, c, &data)?;
        let quantile = quantile_params().fit_sharded(&Device::Cpu, c, &data)?;
        let rows = RowPartition::from_counts(&counts)?.range(c.rank());
        let shard = RowShard::new(c, test.rows(rows.start, rows.len()).into_owned())?;
        let mean = shard.predict(c, |t| hetero.predict_mean(t))?;
        let curves = shard.predict(c, |t| quantile.predict(t))?;
        // Each rank's own rows are its model's predictions there.
        if rows.len() > 0 {
            assert_eq!(mean.local_column(), hetero.predict_mean(shard.local())?);
        }
        assert_eq!(mean.local().nrows(), rows.len());
        assert_eq!(curves.local().shape(), (rows.len(), 3));
        let failing = shard.predict(c, |t| if c.rank() == 2 { Err(Error::Empty { what: "a failing prediction", rows: 0, cols: 0 }) } else { quantile.predict(t) });
        Ok::<_, Error>((mean.gather_vector(c)?, curves.gather(c)?, hetero.predict_mean(&test)?, quantile.predict(&test)?, failing.map(|_| ())))
    })
    .unwrap();
    for r in out {
        let (mean, curves, full_mean, full_curves, failing) = r.unwrap();
        assert_eq!(mean, full_mean);
        assert_eq!(curves, full_curves);
        assert!(matches!(failing, Err(Error::RankFailed { rank: 2, invalid_input: true, .. })), "{failing:?}");
    }
}
