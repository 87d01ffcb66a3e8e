//! Sharded incomplete Cholesky, mklaren and low-rank ridge (ICD, Nystrom,
//! CSI) fits against single-process fits.

use gramian::distributed::{local_vector, Communicator, FitSharded, RowShard, ThreadGroup};
use gramian::estimator::Supervised;
use gramian::mklaren::{IcdFactor, IcdParams, KernelShard, Mklaren, MklarenParams, ShardedSupervised};
use gramian::{Device, Error, GpuOptions, Kernel};
use nalgebra::{DMatrix, DVector};
use rand::Rng;

use crate::common;

fn regression(n: usize) -> (DMatrix<f64>, DVector<f64>) {
    let mut rng = common::rng();
    let x = common::random_matrix(&mut rng, n, 3);
    let y = DVector::from_fn(n, |i, _| (2.0 * x[(i, 0)]).sin() + x[(i, 1)] * x[(i, 2)] + 0.05 * rng.random_range(-1.0..1.0));
    (x, y)
}

fn max_abs_diff(a: &DMatrix<f64>, b: &DMatrix<f64>) -> f64 {
    assert_eq!(a.shape(), b.shape());
    (a - b).amax()
}

fn icd_on_ranks(p: usize, device: impl Fn(usize) -> Device + Sync, params: &IcdParams, kernel: Kernel, x: &DMatrix<f64>) -> Vec<Result<IcdFactor, Error>> {
    ThreadGroup::run(p, |comm| {
        let data = KernelShard { kernel, x: RowShard::from_full(comm, x)? };
        params.fit_sharded(&device(comm.rank()), comm, &data)
    })
    .unwrap()
}

/// Sharded ICD picks the single-process pivots and, on the CPU, computes
/// every row of G and d with the same code on the same numbers: the same
/// bits (the only sums over rows are the arg-max scans, which are exact).
#[test]
fn icd_equals_the_single_process_decomposition() {
    let (x, _) = regression(101);
    let kernel = Kernel::rbf(1.5).unwrap();
    let params = IcdParams::new(12);
    let single = params.fit(&Device::Cpu, &kernel, &x).unwrap();
    for p in 1..=3 {
        let out = icd_on_ranks(p, |_| Device::Cpu, &params, kernel, &x);
        for (rank, f) in out.into_iter().enumerate() {
            let f = f.unwrap();
            assert_eq!(f.pivots(), single.pivots(), "{p} ranks, rank {rank}");
            assert_eq!(f.factor(), single.factor(), "{p} ranks, rank {rank}");
            assert_eq!(f.residual_diagonal(), single.residual_diagonal(), "{p} ranks, rank {rank}");
            assert_eq!(f.transform().matrix(), single.transform().matrix(), "{p} ranks, rank {rank}");
            assert_eq!(f.transform().pivot_rows(), single.transform().pivot_rows(), "{p} ranks, rank {rank}");
        }
    }
    // Tolerance reached before the rank: the same early stop.
    let low = IcdParams::new(100).tolerance(1e-2);
    let single = low.fit(&Device::Cpu, &kernel, &x).unwrap();
    let out = icd_on_ranks(3, |_| Device::Cpu, &low, kernel, &x);
    for f in out {
        let f = f.unwrap();
        assert!(f.rank() < 100, "rank {}", f.rank());
        assert_eq!(f.pivots(), single.pivots());
    }
}

fn mklaren_on_ranks(p: usize, device: impl Fn(usize) -> Device + Sync, params: &MklarenParams, x: &DMatrix<f64>, y: &DVector<f64>) -> Vec<Result<Mklaren, Error>> {
    ThreadGroup::run(p, |comm| {
        let shard = RowShard::from_full(comm, x)?;
        let rows = shard.partition().range(comm.rank());
        let data = ShardedSupervised::new(comm, shard, y.rows(rows.start, rows.len()).into_owned())?;
        params.fit_sharded(&device(comm.rank()), comm, &data)
    })
    .unwrap()
}

/// mklaren on 1, 2 and 3 ranks (101 rows: uneven blocks) selects the
/// single-process columns (kernel and pivot, step by step), and its
/// coefficients, training fit and predictions agree to 1e-9: the sums over
/// rows (scores, column norms, H^T H, the tall-skinny QR) are added in
/// another order, which moves the numbers by rounding (about 1e-14
/// relative) and the coefficients by that times the conditioning of H.
/// Every rank's model is the same, bit for bit.
#[test]
fn mklaren_equals_the_single_process_model() {
    let (x, y) = regression(101);
    let kernels = [Kernel::rbf(0.5).unwrap(), Kernel::rbf(4.0).unwrap(), Kernel::polynomial(0.5, 1.0, 2).unwrap()];
    let params = MklarenParams::new(10).kernels(&kernels).lookahead(4).lambda(0.01);
    let single = params.fit(&Device::Cpu, &Supervised::new(x.clone(), y.clone()).unwrap()).unwrap();
    let test = common::random_matrix(&mut common::rng(), 20, 3);
    let expected = single.predict(&test).unwrap();
    let order: Vec<(usize, usize)> = single.order().iter().map(|c| (c.kernel, c.pivot)).collect();
    for p in 1..=3 {
        let out: Vec<Mklaren> = mklaren_on_ranks(p, |_| Device::Cpu, &params, &x, &y).into_iter().map(|m| m.unwrap()).collect();
        let m = &out[0];
        let got: Vec<(usize, usize)> = m.order().iter().map(|c| (c.kernel, c.pivot)).collect();
        assert_eq!(got, order, "{p} ranks");
        let coef = (m.coefficients() - single.coefficients()).amax();
        let fit = (m.training_fit() - single.training_fit()).amax();
        let pred = (m.predict(&test).unwrap() - &expected).amax();
        eprintln!("mklaren on {p} ranks: coefficients {coef:.2e}, training fit {fit:.2e}, predictions {pred:.2e}");
        assert!(coef <= 1e-9 && fit <= 1e-9 && pred <= 1e-9, "{p} ranks: {coef:e} {fit:e} {pred:e}");
        assert!((m.kernel_weights() - single.kernel_weights()).amax() <= 1e-9);
        for other in &out[1..] {
            assert_eq!(other.coefficients(), m.coefficients());
            assert_eq!(other.training_fit(), m.training_fit());
            assert_eq!(other.order(), m.order());
            assert_eq!(other.coefficient_path(), m.coefficient_path());
            for (a, b) in other.transforms().iter().zip(m.transforms()) {
                assert_eq!(a.matrix(), b.matrix());
                assert_eq!(a.pivot_rows(), b.pivot_rows());
            }
        }
    }
}

/// A rank that holds no rows (blocks of 60, 0 and 41 rows) takes part in
/// every collective with nothing to offer: the single-process pivots and G
/// (the same bits), and the same mklaren columns.
#[test]
fn a_rank_without_rows_changes_nothing() {
    let (x, y) = regression(101);
    let kernel = Kernel::rbf(1.5).unwrap();
    let blocks = [0..60, 60..60, 60..101];
    let icd = IcdParams::new(10);
    let single = icd.fit(&Device::Cpu, &kernel, &x).unwrap();
    let mk = MklarenParams::new(6).kernels(&[kernel, Kernel::rbf(0.3).unwrap()]).lookahead(3);
    let single_mk = mk.fit(&Device::Cpu, &Supervised::new(x.clone(), y.clone()).unwrap()).unwrap();
    let out = ThreadGroup::run(3, |comm| {
        let rows = blocks[comm.rank()].clone();
        let shard = RowShard::new(comm, x.rows(rows.start, rows.len()).into_owned())?;
        let f = icd.fit_sharded(&Device::Cpu, comm, &KernelShard { kernel, x: shard.clone() })?;
        let data = ShardedSupervised::new(comm, shard, y.rows(rows.start, rows.len()).into_owned())?;
        Ok::<_, Error>((f, mk.fit_sharded(&Device::Cpu, comm, &data)?))
    })
    .unwrap();
    for r in out {
        let (f, m) = r.unwrap();
        assert_eq!(f.pivots(), single.pivots());
        assert_eq!(f.factor(), single.factor());
        assert_eq!(m.order().iter().map(|c| (c.kernel, c.pivot)).collect::<Vec<_>>(), single_mk.order().iter().map(|c| (c.kernel, c.pivot)).collect::<Vec<_>>());
        assert!((m.training_fit() - single_mk.training_fit()).amax() <= 1e-9);
    }
}

/// A NaN in one rank's rows or targets, or parameters that differ on one
/// rank, fail every rank with the same typed error (no hang).
#[test]
fn bad_shards_and_mismatched_parameters_fail_every_rank() {
    let (x, y) = regression(31);
    let kernel = Kernel::rbf(1.0).unwrap();
    let params = MklarenParams::new(4).kernels(&[kernel]);
    let out = ThreadGroup::run(3, |comm| {
        let shard = RowShard::from_full(comm, &x)?;
        let rows = shard.partition().range(comm.rank());
        let mut local_y = y.rows(rows.start, rows.len()).into_owned();
        if comm.rank() == 1 {
            local_y[0] = f64::NAN;
        }
        let data = ShardedSupervised::new(comm, shard, local_y)?;
        params.fit_sharded(&Device::Cpu, comm, &data)
    })
    .unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::RankFailed { rank: 1, invalid_input: true, .. })), "{r:?}");
    }
    let out = ThreadGroup::run(3, |comm| {
        let mut local = RowShard::from_full(comm, &x)?.local().clone();
        if comm.rank() == 2 {
            local[(0, 0)] = f64::NAN;
        }
        let data = KernelShard { kernel, x: RowShard::new(comm, local)? };
        IcdParams::new(5).fit_sharded(&Device::Cpu, comm, &data)
    })
    .unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::RankFailed { rank: 2, invalid_input: true, .. })), "{r:?}");
    }
    let out = ThreadGroup::run(3, |comm| {
        let shard = RowShard::from_full(comm, &x)?;
        let width = if comm.rank() == 1 { 1.1 } else { 1.0 };
        let rows = shard.partition().range(comm.rank());
        let local_y = local_vector(comm, &shard, y.rows(rows.start, rows.len()).into_owned())?;
        let data = ShardedSupervised::new(comm, shard.clone(), local_y)?;
        let m = MklarenParams::new(4).kernels(&[Kernel::rbf(width).unwrap()]).fit_sharded(&Device::Cpu, comm, &data);
        let icd = IcdParams::new(if comm.rank() == 1 { 4 } else { 5 }).fit_sharded(&Device::Cpu, comm, &KernelShard { kernel, x: shard });
        Ok::<_, Error>((m, icd))
    })
    .unwrap();
    for r in out {
        let (m, icd) = r.unwrap();
        assert!(matches!(m, Err(Error::ShardMismatch { rank: 1, .. })), "{m:?}");
        assert!(matches!(icd, Err(Error::ShardMismatch { rank: 1, .. })), "{icd:?}");
    }
    // The same invalid parameters on every rank: the plain error everywhere.
    let out = ThreadGroup::run(2, |comm| IcdParams::new(40).fit_sharded(&Device::Cpu, comm, &KernelShard { kernel, x: RowShard::from_full(comm, &x)? })).unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::RankTooLarge { rank: 40, n: 31 })), "{r:?}");
    }
}

/// The ranks on a GPU (lavapipe here): the kernel columns on the device
/// against the broadcast pivot sample; the pivots and columns of the CPU's
/// single-process fit, G within 1e-10 (kernel columns on the device agree
/// with the CPU's to about 1e-15, and a step divides by `sqrt(d_i)` above
/// 1e-3 here). A device that can hold nothing on one rank fails every rank.
#[test]
fn ranks_on_a_gpu_fit_the_cpu_model() {
    let Some(gpu) = common::gpu_device(GpuOptions::default()) else { return };
    let (x, y) = regression(61);
    let kernel = Kernel::rbf(1.5).unwrap();
    let params = IcdParams::new(8);
    let single = params.fit(&Device::Cpu, &kernel, &x).unwrap();
    let tolerance = if gpu.supports(gramian::Precision::F64) { 1e-10 } else { 1e-4 };
    for f in icd_on_ranks(2, |_| gpu.clone(), &params, kernel, &x) {
        let f = f.unwrap();
        assert_eq!(f.pivots(), single.pivots());
        let diff = max_abs_diff(f.factor(), single.factor());
        assert!(diff <= tolerance, "G differs by {diff:e}");
    }
    let mk = MklarenParams::new(5).kernels(&[kernel, Kernel::rbf(0.3).unwrap()]).lookahead(3);
    let single = mk.fit(&Device::Cpu, &Supervised::new(x.clone(), y.clone()).unwrap()).unwrap();
    for m in mklaren_on_ranks(2, |_| gpu.clone(), &mk, &x, &y) {
        let m = m.unwrap();
        assert_eq!(m.order().iter().map(|c| c.pivot).collect::<Vec<_>>(), single.order().iter().map(|c| c.pivot).collect::<Vec<_>>());
        assert!((m.training_fit() - single.training_fit()).amax() <= 1e3 * tolerance);
    }
    let empty = Device::gpu_with(&GpuOptions { allow_software: true, max_device_bytes: Some(0), ..Default::default() }).unwrap();
    let out = icd_on_ranks(2, |r| if r == 1 { empty.clone() } else { gpu.clone() }, &params, kernel, &x);
    for r in out {
        assert!(matches!(r, Err(Error::RankFailed { rank: 1, invalid_input: false, .. })), "{r:?}");
    }
    // CSI on GPU ranks against the single-process fit on the same GPU: the
    // same pivots, the training fit within 1e-4 (the host-matrix Gram
    // `F^T F` is `f32` on a GPU, summed per rank).
    use gramian::mklaren::{LowRankMethod, LowRankRidgeParams};
    let csi = LowRankRidgeParams::new(LowRankMethod::Csi { lookahead: 3, kappa: 0.5 }, 6).kernels(&[kernel, Kernel::rbf(0.3).unwrap()]).lambda(1e-3);
    let single = csi.fit(&gpu, &Supervised::new(x.clone(), y.clone()).unwrap()).unwrap();
    for m in low_rank_on_blocks(&even_blocks(61, 2), |_| gpu.clone(), &csi, &x, &y) {
        let m = m.unwrap();
        for (a, b) in m.transforms().iter().zip(single.transforms()) {
            assert_eq!(a.pivot_rows(), b.pivot_rows());
        }
        assert!((m.training_fit() - single.training_fit()).amax() <= 1e-4);
    }
    for r in low_rank_on_blocks(&even_blocks(61, 2), |r| if r == 1 { empty.clone() } else { gpu.clone() }, &csi, &x, &y) {
        assert!(matches!(r, Err(Error::RankFailed { rank: 1, invalid_input: false, .. })), "{r:?}");
    }
}

/// The stacked low-rank ridge baselines (ICD and Nystrom factors) on 1, 2
/// and 3 ranks against the single-process fit: the same factors (the same
/// pivots, the same landmarks), and coefficients and predictions within
/// 1e-9 (the column sums, norms and `F^T F` are added in one fixed order).
#[test]
fn low_rank_ridge_baselines_match_the_single_process_fit() {
    use gramian::mklaren::{LowRankMethod, LowRankRidgeParams};
    let (x, y) = regression(101);
    let kernels = [Kernel::rbf(1.5).unwrap(), Kernel::rbf(0.3).unwrap()];
    for method in [LowRankMethod::Icd, LowRankMethod::Nystrom { seed: 11 }] {
        let params = LowRankRidgeParams::new(method, 8).kernels(&kernels).lambda(1e-3);
        let single = params.fit(&Device::Cpu, &Supervised::new(x.clone(), y.clone()).unwrap()).unwrap();
        let expected = single.predict(&x).unwrap();
        for p in 1..=3 {
            let out = ThreadGroup::run(p, |comm| {
                let shard = RowShard::from_full(comm, &x)?;
                let rows = shard.partition().range(comm.rank());
                let data = ShardedSupervised::new(comm, shard, y.rows(rows.start, rows.len()).into_owned())?;
                params.fit_sharded(&Device::Cpu, comm, &data)
            })
            .unwrap();
            let first = out[0].as_ref().unwrap().coefficients().clone();
            for model in out {
                let model = model.unwrap();
                assert_eq!(model.coefficients(), &first, "every rank the same model");
                let diff = (model.coefficients() - single.coefficients()).amax();
                assert!(diff < 1e-9, "{method:?}, {p} ranks: coefficients {diff:e}");
                let diff = (model.predict(&x).unwrap() - &expected).amax();
                assert!(diff < 1e-9, "{method:?}, {p} ranks: predictions {diff:e}");
                assert!((model.training_fit() - single.training_fit()).amax() < 1e-9);
            }
        }
    }
}

fn low_rank_on_blocks(blocks: &[std::ops::Range<usize>], device: impl Fn(usize) -> Device + Sync, params: &gramian::mklaren::LowRankRidgeParams, x: &DMatrix<f64>, y: &DVector<f64>) -> Vec<Result<gramian::mklaren::LowRankRidge, Error>> {
    ThreadGroup::run(blocks.len(), |comm| {
        let rows = blocks[comm.rank()].clone();
        let shard = RowShard::new(comm, x.rows(rows.start, rows.len()).into_owned())?;
        let data = ShardedSupervised::new(comm, shard, y.rows(rows.start, rows.len()).into_owned())?;
        params.fit_sharded(&device(comm.rank()), comm, &data)
    })
    .unwrap()
}

/// Blocks of `n` rows over `p` ranks as `RowShard::from_full` splits them.
fn even_blocks(n: usize, p: usize) -> Vec<std::ops::Range<usize>> {
    let partition = gramian::distributed::RowPartition::even(n, p).unwrap();
    (0..p).map(|r| partition.range(r)).collect()
}

/// The CSI ridge baseline (Bach & Jordan 2005) on 1, 2 and 3 ranks (101
/// rows: uneven blocks; and blocks of 60, 0 and 41 rows) against the
/// single-process fit, over look-aheads and weights `kappa` (0: the
/// prediction gain alone, 1: the approximation gain alone; not look-ahead
/// 1 with kappa 0, where every candidate's score is `v^2 / C` and the
/// pivot is decided by rounding): the same
/// pivots in the same order (the samples at the pivots, bit for bit), and
/// coefficients, training fit and predictions within 1e-9 (the scores' and
/// the basis' sums over rows are added in rank order, which moves them by
/// rounding, about 1e-15 relative, and the ridge solution by that times
/// its conditioning). On one rank the fit is the single process's, bit for
/// bit (the same row-wise code, sums of one part). Every rank's model is the
/// same, bit for bit.
#[test]
fn csi_ridge_matches_the_single_process_fit() {
    use gramian::mklaren::{LowRankMethod, LowRankRidgeParams};
    let (x, y) = regression(101);
    let test = common::random_matrix(&mut common::rng(), 20, 3);
    let kernels = [Kernel::rbf(1.5).unwrap(), Kernel::rbf(0.3).unwrap(), Kernel::polynomial(0.5, 1.0, 2).unwrap()];
    for (lookahead, kappa, rank) in [(3, 0.5, 8), (2, 0.0, 6), (1, 0.3, 6), (6, 1.0, 10), (4, 0.9, 12)] {
        let params = LowRankRidgeParams::new(LowRankMethod::Csi { lookahead, kappa }, rank).kernels(&kernels).lambda(1e-3);
        let single = params.fit(&Device::Cpu, &Supervised::new(x.clone(), y.clone()).unwrap()).unwrap();
        let expected = single.predict(&test).unwrap();
        let mut layouts: Vec<Vec<std::ops::Range<usize>>> = (1..=3).map(|p| even_blocks(101, p)).collect();
        layouts.push(vec![0..60, 60..60, 60..101]);
        for blocks in layouts {
            let what = format!("delta {lookahead}, kappa {kappa}, blocks {blocks:?}");
            let out: Vec<_> = low_rank_on_blocks(&blocks, |_| Device::Cpu, &params, &x, &y).into_iter().map(|m| m.unwrap()).collect();
            let m = &out[0];
            for (a, b) in m.transforms().iter().zip(single.transforms()) {
                assert_eq!(a.pivot_rows(), b.pivot_rows(), "{what}: pivots");
            }
            assert_eq!(m.transforms().len(), single.transforms().len());
            let coef = (m.coefficients() - single.coefficients()).amax();
            let fit = (m.training_fit() - single.training_fit()).amax();
            let pred = (m.predict(&test).unwrap() - &expected).amax();
            eprintln!("CSI, {what}: coefficients {coef:.2e}, training fit {fit:.2e}, predictions {pred:.2e}");
            assert!(coef <= 1e-9 && fit <= 1e-9 && pred <= 1e-9, "{what}: {coef:e} {fit:e} {pred:e}");
            if blocks.len() == 1 {
                assert_eq!(m.coefficients(), single.coefficients(), "{what}: one rank, the same bits");
                for (a, b) in m.transforms().iter().zip(single.transforms()) {
                    assert_eq!(a.matrix(), b.matrix(), "{what}: one rank, the same transform");
                }
            }
            for other in &out[1..] {
                assert_eq!(other.coefficients(), m.coefficients());
                assert_eq!(other.training_fit(), m.training_fit());
                for (a, b) in other.transforms().iter().zip(m.transforms()) {
                    assert_eq!(a.matrix(), b.matrix());
                    assert_eq!(a.pivot_rows(), b.pivot_rows());
                }
            }
        }
    }
}

/// CSI stops where no candidate is left (a linear kernel on 3 features has
/// rank 3, asked for 7): the sharded fit stops at the same step as the
/// single process, with the same pivots but the last. At the last step the
/// residual kernel has rank 1, `u u^T`, so every candidate's approximation
/// `g^_i` is a multiple of `u` and every score is the same: rounding picks
/// the pivot, on one process as on several. The columns span the span of
/// the centred features whatever the pivots, so least squares (`lambda =
/// 0`) gives the same training fit, within 1e-8 (rounding times the
/// conditioning of the factor).
#[test]
fn csi_stops_early_on_every_rank_alike() {
    use gramian::mklaren::{LowRankMethod, LowRankRidgeParams};
    let (x, y) = regression(41);
    let params = LowRankRidgeParams::new(LowRankMethod::Csi { lookahead: 2, kappa: 0.5 }, 7).kernels(&[Kernel::linear()]);
    let single = params.fit(&Device::Cpu, &Supervised::new(x.clone(), y.clone()).unwrap()).unwrap();
    let pivots = single.transforms()[0].pivot_rows();
    assert_eq!(pivots.nrows(), 3, "the rank of the kernel");
    for p in 1..=3 {
        for m in low_rank_on_blocks(&even_blocks(41, p), |_| Device::Cpu, &params, &x, &y) {
            let m = m.unwrap();
            let got = m.transforms()[0].pivot_rows();
            assert_eq!(got.nrows(), 3, "{p} ranks");
            assert_eq!(got.rows(0, 2), pivots.rows(0, 2), "{p} ranks");
            let fit = (m.training_fit() - single.training_fit()).amax();
            assert!(fit <= 1e-8, "{p} ranks: training fit {fit:e}");
        }
    }
}

/// CSI with a NaN in one rank's targets or rows, or a `kappa` that differs
/// on one rank, fails every rank with the same typed error (no hang).
#[test]
fn csi_bad_shards_and_mismatched_parameters_fail_every_rank() {
    use gramian::mklaren::{LowRankMethod, LowRankRidgeParams};
    let (x, y) = regression(31);
    let kernels = [Kernel::rbf(1.0).unwrap()];
    let params = |kappa| LowRankRidgeParams::new(LowRankMethod::Csi { lookahead: 3, kappa }, 4).kernels(&kernels).lambda(1e-3);
    let out = ThreadGroup::run(3, |comm| {
        let shard = RowShard::from_full(comm, &x)?;
        let rows = shard.partition().range(comm.rank());
        let mut local_y = y.rows(rows.start, rows.len()).into_owned();
        if comm.rank() == 1 {
            local_y[0] = f64::NAN;
        }
        let data = ShardedSupervised::new(comm, shard, local_y)?;
        params(0.5).fit_sharded(&Device::Cpu, comm, &data)
    })
    .unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::RankFailed { rank: 1, invalid_input: true, .. })), "{r:?}");
    }
    let out = ThreadGroup::run(3, |comm| {
        let full = RowShard::from_full(comm, &x)?;
        let rows = full.partition().range(comm.rank());
        let mut local = full.local().clone();
        if comm.rank() == 2 {
            local[(0, 1)] = f64::INFINITY;
        }
        let data = ShardedSupervised::new(comm, RowShard::new(comm, local)?, y.rows(rows.start, rows.len()).into_owned())?;
        params(0.5).fit_sharded(&Device::Cpu, comm, &data)
    })
    .unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::RankFailed { rank: 2, invalid_input: true, .. })), "{r:?}");
    }
    let out = ThreadGroup::run(3, |comm| {
        let shard = RowShard::from_full(comm, &x)?;
        let rows = shard.partition().range(comm.rank());
        let data = ShardedSupervised::new(comm, shard, y.rows(rows.start, rows.len()).into_owned())?;
        params(if comm.rank() == 1 { 0.4 } else { 0.5 }).fit_sharded(&Device::Cpu, comm, &data)
    })
    .unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::ShardMismatch { rank: 1, .. })), "{r:?}");
    }
    // The same invalid parameters on every rank: the plain error everywhere.
    for (kappa, rank) in [(1.5, 4), (0.5, 40)] {
        let bad = LowRankRidgeParams::new(LowRankMethod::Csi { lookahead: 3, kappa }, rank).kernels(&kernels);
        for r in low_rank_on_blocks(&even_blocks(31, 2), |_| Device::Cpu, &bad, &x, &y) {
            assert!(matches!(r, Err(Error::InvalidParameter { name: "kappa", .. }) | Err(Error::RankTooLarge { rank: 40, n: 31 })), "{r:?}");
        }
    }
}
