//! PSD models on sharded rows: the density, heteroscedastic and quantile
//! regression.

use std::time::Instant;

use gramian::distributed::{FitSharded, RowShard, ShardedSupervised};
use gramian::psd::{DensityParams, HeteroscedasticParams, QuantileParams, Regularisation, SolverOptions, SolverReport};
use gramian::Kernel;
use nalgebra::{DMatrix, DVector};
use rand::{rngs::StdRng, Rng, SeedableRng};

use super::{Case, Fail, Outcome};

/// Two clusters in 2-D, the same on every rank for one seed.
fn clusters(n: usize, seed: u64) -> DMatrix<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    DMatrix::from_fn(n, 2, |i, _| if i % 3 == 0 { 1.5 } else { -0.5 } + 0.6 * rng.random_range(-1.0..1.0))
}

/// Density with 40 Nystrom centres: every rank's model against the
/// single-process fit's (coefficients and densities at 50 points, largest
/// relative difference, and the same iteration count). The ranks' partial
/// sums round differently, and the ~2600 iterations of this fit carry that
/// rounding to about `4e-9` at 2 and 3 ranks: tolerance `1e-7`, far below
/// the duality-gap tolerance `1e-6` the fit is certified to.
pub fn density(case: &Case) -> gramian::error::Result<Outcome> {
    let comm = case.comm;
    let n = case.n.unwrap_or(600);
    let x = clusters(n, case.seed);
    let width = if case.fails_here(Fail::Mismatch) { 0.55 } else { 0.5 };
    let params = DensityParams::new(Kernel::gaussian_with_width(width)?)?.nystrom(40, case.seed);
    let shard = if case.fail == Fail::BadShard {
        let mut local = RowShard::from_full(comm, &x)?.local().clone();
        if case.fails_here(Fail::BadShard) {
            local[(0, 0)] = f64::NAN;
        }
        RowShard::new(comm, local)?
    } else {
        RowShard::from_full(comm, &x)?
    };
    let before = comm.stats();
    let start = Instant::now();
    let fitted = params.fit_sharded(case.device, comm, &shard)?;
    let fit_seconds = start.elapsed().as_secs_f64();
    let traffic = comm.stats().since(&before);
    let difference = if case.check {
        let single = params.fit(case.device, &x)?;
        let b = fitted.model().coefficients();
        let b1 = single.model().coefficients();
        let test = clusters(50, case.seed + 1);
        let p = fitted.density(&test)?;
        let p1 = single.density(&test)?;
        let mut d = ((&b - &b1).amax() / b1.amax()).max((&p - &p1).amax() / p1.amax());
        if fitted.report().iterations != single.report().iterations {
            d = f64::INFINITY;
        }
        Some((d, 1e-7))
    } else {
        None
    };
    Ok(Outcome { fit_seconds, iterations: fitted.report().iterations, comm: traffic, difference })
}


/// A 1-D regression data set with noise growing in x, the same on every
/// rank for one seed.
fn regression(n: usize, seed: u64) -> (DMatrix<f64>, DVector<f64>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let x = DMatrix::<f64>::from_fn(n, 1, |_, _| rng.random_range(0.0..1.0));
    let y = DVector::from_fn(n, |i, _| (6.0 * x[(i, 0)]).sin() + (0.1 + 0.4 * x[(i, 0)]) * rng.random_range(-1.0..1.0));
    (x, y)
}

/// This rank's block of the regression data (rank 1's first row NaN with `--fail bad-shard`).
fn supervised(case: &Case, x: &DMatrix<f64>, y: &DVector<f64>) -> gramian::error::Result<ShardedSupervised> {
    let comm = case.comm;
    let shard = if case.fail == Fail::BadShard {
        let mut local = RowShard::from_full(comm, x)?.local().clone();
        if case.fails_here(Fail::BadShard) {
            local[(0, 0)] = f64::NAN;
        }
        RowShard::new(comm, local)?
    } else {
        RowShard::from_full(comm, x)?
    };
    let rows = shard.partition().range(comm.rank());
    ShardedSupervised::new(comm, shard, y.rows(rows.start, rows.len()).into_owned())
}

/// The sharded fit's distance to the single-process fit in units of what
/// the duality-gap certificate allows (tolerance 1): the primal objectives
/// differ by at most the sum of the two gaps (plus `1e-12` relative
/// rounding), and the model values at the test points by at most `bound`
/// (twice the distance `sqrt(2 g / lambda)` of a certified point to the
/// optimum, through the features' norms; tests/distributed/psd.rs).
fn certified_distance(sharded: &SolverReport, single: &SolverReport, values: f64, bound: f64) -> f64 {
    let objective = (sharded.primal - single.primal).abs() / (sharded.gap + single.gap + 1e-12 * single.primal.abs());
    objective.max(values / bound)
}

/// Heteroscedastic regression with 20 Nystrom centres, checked against the
/// single-process fit by [`certified_distance`] (natural parameters
/// `theta`, `eta` at 50 points, standardised units).
pub fn heteroscedastic(case: &Case) -> gramian::error::Result<Outcome> {
    let comm = case.comm;
    let (x, y) = regression(case.n.unwrap_or(400), case.seed);
    let width = if case.fails_here(Fail::Mismatch) { 0.17 } else { 0.15 };
    let params = HeteroscedasticParams::new(Kernel::gaussian_with_width(width)?)?.nystrom(20, case.seed);
    let data = supervised(case, &x, &y)?;
    let before = comm.stats();
    let start = Instant::now();
    let fitted = params.fit_sharded(case.device, comm, &data)?;
    let fit_seconds = start.elapsed().as_secs_f64();
    let traffic = comm.stats().since(&before);
    let difference = if case.check {
        let single = params.fit_xy(case.device, &x, &y)?;
        let test = DMatrix::from_fn(50, 1, |i, _| i as f64 / 49.0);
        let (a, b) = (fitted.natural_parameters(&test)?, single.natural_parameters(&test)?);
        // In the units of y: theta' = theta sd^2, eta' = (eta - theta mean) sd.
        let (mean, sd) = (y.mean(), (y.map(|v| (v - y.mean()).powi(2)).sum() / y.len() as f64).sqrt());
        let d_theta = ((&a.theta - &b.theta) * (sd * sd)).amax();
        let d_eta = (((&a.eta - &b.eta) - (&a.theta - &b.theta) * mean) * sd).amax();
        let (g, l) = (params.settings().solver().tolerance, params.regularisation_weights());
        let theta_bound = 2.0 * 2.0 * (2.0 * g / l.quadratic).sqrt();
        let eta_bound = 2.0 * 2f64.sqrt() * (2.0 * g / l.linear).sqrt();
        Some((certified_distance(fitted.report(), single.report(), (d_theta / theta_bound).max(d_eta / eta_bound), 1.0), 1.0))
    } else {
        None
    };
    Ok(Outcome { fit_seconds, iterations: fitted.report().iterations, comm: traffic, difference })
}

/// Quantile regression (levels 0.1, 0.5, 0.9) with 20 Nystrom centres,
/// checked against the single-process fit by [`certified_distance`] (the
/// curves at 50 points: each moves by at most
/// `sqrt(2 g (1/lambda_0 + (K - 1)/lambda_2))` per fit).
pub fn quantile(case: &Case) -> gramian::error::Result<Outcome> {
    let comm = case.comm;
    let (x, y) = regression(case.n.unwrap_or(400), case.seed);
    let width = if case.fails_here(Fail::Mismatch) { 0.17 } else { 0.15 };
    let levels = [0.1, 0.5, 0.9];
    let params = QuantileParams::new(Kernel::gaussian_with_width(width)?, &levels)?
        .regularisation(Regularisation::new().linear(1e-2).trace(1e-3).quadratic(1e-3))
        .nystrom(20, case.seed)
        .solver(SolverOptions::default().tolerance(1e-6));
    let data = supervised(case, &x, &y)?;
    let before = comm.stats();
    let start = Instant::now();
    let fitted = params.fit_sharded(case.device, comm, &data)?;
    let fit_seconds = start.elapsed().as_secs_f64();
    let traffic = comm.stats().since(&before);
    let difference = if case.check {
        let single = params.fit_xy(case.device, &x, &y)?;
        let test = DMatrix::from_fn(50, 1, |i, _| i as f64 / 49.0);
        let d = (fitted.predict(&test)? - single.predict(&test)?).amax();
        let (g, l) = (params.settings().solver().tolerance, params.regularisation_weights());
        let bound = 2.0 * (2.0 * g * (1.0 / l.linear + (levels.len() - 1) as f64 / l.quadratic)).sqrt();
        Some((certified_distance(fitted.report(), single.report(), d, bound), 1.0))
    } else {
        None
    };
    Ok(Outcome { fit_seconds, iterations: fitted.report().iterations, comm: traffic, difference })
}
