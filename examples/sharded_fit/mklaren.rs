//! Incomplete Cholesky, mklaren and the low-rank ridge baselines on sharded rows.

use std::time::Instant;

use gramian::distributed::{FitSharded, RowShard};
use gramian::estimator::Supervised;
use gramian::mklaren::{IcdParams, KernelShard, MklarenParams, ShardedSupervised};
use gramian::Kernel;
use nalgebra::{DMatrix, DVector};
use rand::{rngs::StdRng, Rng, SeedableRng};

use super::{Case, Fail, Outcome};

/// Every rank's copy of the same data: `n x 3` samples uniform in [-1, 1)
/// and a smooth target with a little noise.
fn data(case: &Case) -> (DMatrix<f64>, DVector<f64>) {
    let n = case.n.unwrap_or(300);
    let mut rng = StdRng::seed_from_u64(case.seed);
    let x = DMatrix::<f64>::from_fn(n, 3, |_, _| rng.random_range(-1.0..1.0));
    let y = DVector::from_fn(n, |i, _| (2.0 * x[(i, 0)]).sin() + x[(i, 1)] * x[(i, 2)] + 0.05 * rng.random_range(-1.0f64..1.0));
    (x, y)
}

/// This rank's shard of `x`: rank 1 puts a NaN into its rows with
/// `--fail bad-shard` (and then the collective, validated constructor).
fn shard(case: &Case, x: &DMatrix<f64>) -> gramian::error::Result<RowShard> {
    let shard = RowShard::from_full(case.comm, x)?;
    if case.fails_here(Fail::BadShard) {
        let mut local = shard.local().clone();
        local[(0, 0)] = f64::NAN;
        return RowShard::new(case.comm, local);
    }
    if case.fail == Fail::BadShard {
        return RowShard::new(case.comm, shard.local().clone());
    }
    Ok(shard)
}

/// This rank's shard of `x` ([`shard`]) with its block of the targets.
fn supervised(case: &Case, x: &DMatrix<f64>, y: &DVector<f64>) -> gramian::error::Result<ShardedSupervised> {
    let shard = shard(case, x)?;
    let rows = shard.partition().range(case.comm.rank());
    ShardedSupervised::new(case.comm, shard, y.rows(rows.start, rows.len()).into_owned())
}

/// The kernel width: another one on rank 1 with `--fail mismatch`.
fn gamma(case: &Case, gamma: f64) -> f64 {
    if case.fails_here(Fail::Mismatch) {
        gamma * 1.01
    } else {
        gamma
    }
}

/// Incomplete Cholesky (the ICD baseline): rank 20 of an RBF kernel.
/// Checked: the pivots equal and G within 1e-10 (on the CPU the same bits;
/// on a GPU the resident single-process decomposition sums in another
/// order).
pub fn icd(case: &Case) -> gramian::error::Result<Outcome> {
    let (x, _) = data(case);
    let params = IcdParams::new(20);
    let kernel = Kernel::rbf(gamma(case, 1.5))?;
    let data = KernelShard { kernel, x: shard(case, &x)? };
    let before = case.comm.stats();
    let start = Instant::now();
    let fitted = params.fit_sharded(case.device, case.comm, &data)?;
    let fit_seconds = start.elapsed().as_secs_f64();
    let comm = case.comm.stats().since(&before);
    let difference = if case.check {
        let single = params.fit(case.device, &kernel, &x)?;
        let d = if single.pivots() == fitted.pivots() { (single.factor() - fitted.factor()).amax() } else { f64::INFINITY };
        Some((d, 1e-10))
    } else {
        None
    };
    Ok(Outcome { fit_seconds, iterations: fitted.rank(), comm, difference })
}

/// mklaren: rank 12 over three kernels, look-ahead 5, ridge 0.01.
/// Checked: the same columns (kernel and pivot) in the same order, and the
/// training fit within 1e-8 (sums over rows are added in rank order).
pub fn mklaren(case: &Case) -> gramian::error::Result<Outcome> {
    let (x, y) = data(case);
    let kernels = [Kernel::rbf(gamma(case, 0.5))?, Kernel::rbf(4.0)?, Kernel::polynomial(0.5, 1.0, 2)?];
    let params = MklarenParams::new(12).kernels(&kernels).lookahead(5).lambda(0.01);
    let data = supervised(case, &x, &y)?;
    let before = case.comm.stats();
    let start = Instant::now();
    let fitted = params.fit_sharded(case.device, case.comm, &data)?;
    let fit_seconds = start.elapsed().as_secs_f64();
    let comm = case.comm.stats().since(&before);
    let difference = if case.check {
        let single = params.fit(case.device, &Supervised::new(x, y)?)?;
        let same = single.order().iter().zip(fitted.order()).all(|(a, b)| (a.kernel, a.pivot) == (b.kernel, b.pivot));
        let d = if same { (single.training_fit() - fitted.training_fit()).amax() } else { f64::INFINITY };
        Some((d, 1e-8))
    } else {
        None
    };
    Ok(Outcome { fit_seconds, iterations: fitted.rank(), comm, difference })
}

/// The Nystrom ridge baseline: rank 20 per kernel over two RBF kernels,
/// ridge 1e-3. Checked: the training fit within 1e-8 on the CPU (the same
/// landmarks; the ridge system's sums are added in rank order), 1e-4 on a
/// GPU (its host-matrix Gram `F^T F` is `f32`, summed per rank).
pub fn nystrom(case: &Case) -> gramian::error::Result<Outcome> {
    use gramian::mklaren::{LowRankMethod, LowRankRidgeParams};
    let (x, y) = data(case);
    let kernels = [Kernel::rbf(gamma(case, 1.5))?, Kernel::rbf(0.3)?];
    let params = LowRankRidgeParams::new(LowRankMethod::Nystrom { seed: case.seed }, 20).kernels(&kernels).lambda(1e-3);
    let data = supervised(case, &x, &y)?;
    let before = case.comm.stats();
    let start = Instant::now();
    let fitted = params.fit_sharded(case.device, case.comm, &data)?;
    let fit_seconds = start.elapsed().as_secs_f64();
    let comm = case.comm.stats().since(&before);
    let difference = if case.check {
        let single = params.fit(case.device, &Supervised::new(x, y)?)?;
        Some(((single.training_fit() - fitted.training_fit()).amax(), if case.device.is_gpu() { 1e-4 } else { 1e-8 }))
    } else {
        None
    };
    Ok(Outcome { fit_seconds, iterations: 1, comm, difference })
}

/// The CSI ridge baseline (Bach & Jordan 2005): rank 15 per kernel over two
/// RBF kernels, look-ahead 5, kappa 0.5, ridge 1e-3. Checked: the same
/// pivots (the samples at the pivots) and the training fit within 1e-8 on
/// the CPU (the scores' and the ridge system's sums are added in rank
/// order), 1e-4 on a GPU (its host-matrix Gram `F^T F` is `f32`, summed
/// per rank).
pub fn csi(case: &Case) -> gramian::error::Result<Outcome> {
    use gramian::mklaren::{LowRankMethod, LowRankRidgeParams};
    let (x, y) = data(case);
    let kernels = [Kernel::rbf(gamma(case, 1.5))?, Kernel::rbf(0.3)?];
    let params = LowRankRidgeParams::new(LowRankMethod::Csi { lookahead: 5, kappa: 0.5 }, 15).kernels(&kernels).lambda(1e-3);
    let data = supervised(case, &x, &y)?;
    let before = case.comm.stats();
    let start = Instant::now();
    let fitted = params.fit_sharded(case.device, case.comm, &data)?;
    let fit_seconds = start.elapsed().as_secs_f64();
    let comm = case.comm.stats().since(&before);
    let iterations = fitted.transforms().iter().map(|t| t.pivot_rows().nrows()).sum();
    let difference = if case.check {
        let single = params.fit(case.device, &Supervised::new(x, y)?)?;
        let same = single.transforms().len() == fitted.transforms().len() && single.transforms().iter().zip(fitted.transforms()).all(|(a, b)| a.pivot_rows() == b.pivot_rows());
        let d = if same { (single.training_fit() - fitted.training_fit()).amax() } else { f64::INFINITY };
        Some((d, if case.device.is_gpu() { 1e-4 } else { 1e-8 }))
    } else {
        None
    };
    Ok(Outcome { fit_seconds, iterations, comm, difference })
}
