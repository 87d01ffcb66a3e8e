//! PSD models on sharded rows.

use std::time::Instant;

use gramian::distributed::{FitSharded, RowShard};
use gramian::psd::DensityParams;
use gramian::Kernel;
use nalgebra::DMatrix;
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

