//! Sharded eksvd fits against single-process fits.
//!
//! Tolerances: the Covariance solver (and the Dense Dual, which takes the
//! covariance route) differs from one process only in the order in which
//! the Gram matrices' row sums are added (`1e-15` relative per entry), so
//! eigenvalues and projection scores agree to `1e-9` relative. The Lanczos
//! Dual converges to `1e-10 max |lambda|` from products whose sums over rows
//! are added in another order: the same eigenvalues to `1e-8` relative and
//! the same eigenvectors, compared up to sign, to `1e-6` relative (on more
//! than one rank its random start block differs from one process's as
//! well: a hash of the global row, so that each rank draws only its rows).
//! With one rank every path does one process's arithmetic: the same bits.

use gramian::distributed::{Communicator, FitSharded, RowShard, ThreadGroup};
use gramian::eksvd::{solve_dual, solve_dual_sharded, CouplingMatrix, DualSolution, Eigensolver, Eksvd, EksvdParams, FeatureMap, ShardedSources, Solver};
use gramian::{Device, Error, GpuOptions, Kernel, MultiSource};
use nalgebra::DMatrix;
use rand::Rng;

use crate::common;

/// Three paired sources of `n` rows (widths 3, 4, 2), smooth in a shared
/// latent variable so that the coupling has a decaying spectrum.
fn sources(n: usize) -> MultiSource {
    let mut rng = common::rng();
    let t: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let view = |d: usize, s: f64, rng: &mut rand::rngs::StdRng| DMatrix::from_fn(n, d, |i, j| (s * (j as f64 + 1.0) * t[i]).sin() + 0.1 * rng.random_range(-1.0..1.0));
    let a = view(3, 1.0, &mut rng);
    let b = view(4, 1.5, &mut rng);
    let c = view(2, 0.7, &mut rng);
    MultiSource::paired(vec![a, b, c]).unwrap()
}

fn params(solver: Solver) -> EksvdParams {
    EksvdParams::new(3).feature_map(FeatureMap::random_fourier(0.5, 12).unwrap()).solver(solver).seed(5)
}

fn lanczos() -> Solver {
    Solver::Dual(Eigensolver::Lanczos { tolerance: 1e-10, max_restarts: 200 })
}

/// Every rank's model of a sharded fit on `p` threads.
fn fit_on(p: usize, params: &EksvdParams, data: &MultiSource, device: &Device) -> Vec<Eksvd> {
    ThreadGroup::run(p, |comm| {
        let shards = ShardedSources::from_full(comm, data)?;
        params.fit_sharded(device, comm, &shards)
    })
    .unwrap()
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

/// Largest difference of `b` to `a` relative to `max |a|`, each column
/// compared up to sign.
fn up_to_sign(a: &DMatrix<f64>, b: &DMatrix<f64>) -> f64 {
    assert_eq!(a.shape(), b.shape());
    let scale = a.amax().max(f64::MIN_POSITIVE);
    (0..a.ncols()).map(|j| (a.column(j) - b.column(j)).amax().min((a.column(j) + b.column(j)).amax())).fold(0.0, f64::max) / scale
}

fn assert_same_models(models: &[Eksvd]) {
    for m in &models[1..] {
        assert_eq!(m.eigenvalues(), models[0].eigenvalues());
        for q in 0..m.n_sources() {
            assert_eq!(m.alphas(q), models[0].alphas(q));
            assert_eq!(m.weights(q), models[0].weights(q));
            assert_eq!(m.training_features(q), models[0].training_features(q));
        }
    }
}

/// Eigenvalue and projection differences of `got` to `want` (relative).
fn differences(want: &Eksvd, got: &Eksvd, data: &MultiSource) -> (f64, f64) {
    let values = (want.eigenvalues() - got.eigenvalues()).amax() / want.eigenvalues()[0];
    let scores = up_to_sign(&want.transform_paired(data).unwrap(), &got.transform_paired(data).unwrap());
    let alphas = (0..want.n_sources()).map(|q| up_to_sign(want.alphas(q), got.alphas(q)) * want.alphas(q).amax()).fold(0.0, f64::max);
    (values, scores.max(alphas))
}

#[test]
fn covariance_and_dual_fits_match_one_process_on_1_2_and_3_ranks() {
    let data = sources(101);
    let cpu = Device::cpu();
    for (solver, value_tol, vector_tol) in [
        (Solver::Covariance(Eigensolver::Dense), 1e-9, 1e-9),
        (Solver::Dual(Eigensolver::Dense), 1e-9, 1e-9),
        (lanczos(), 1e-8, 1e-6),
    ] {
        let p = params(solver);
        let single = p.fit(&cpu, &data).unwrap();
        for ranks in 1..=3 {
            let models = fit_on(ranks, &p, &data, &cpu);
            assert_same_models(&models);
            let (values, vectors) = differences(&single, &models[0], &data);
            if ranks == 1 {
                assert_eq!(models[0].eigenvalues(), single.eigenvalues(), "{solver:?}: one rank is one process");
                assert_eq!(models[0].alphas(0), single.alphas(0), "{solver:?}: one rank is one process");
            }
            assert!(values <= value_tol, "{solver:?}, {ranks} ranks: eigenvalues differ by {values:e}");
            assert!(vectors <= vector_tol, "{solver:?}, {ranks} ranks: projections differ by {vectors:e}");
            assert_eq!(models[0].solver(), solver);
        }
    }
}

/// Every rank's model of a sharded fit on `counts.len()` threads, rank `r`
/// holding `counts[r]` consecutive rows.
fn fit_on_counts(counts: &[usize], params: &EksvdParams, data: &MultiSource, device: &Device) -> Vec<Eksvd> {
    ThreadGroup::run(counts.len(), |comm| {
        let start: usize = counts[..comm.rank()].iter().sum();
        let shards = data.sources().iter().map(|x| RowShard::new(comm, x.rows(start, counts[comm.rank()]).into_owned())).collect::<Result<Vec<_>, _>>()?;
        params.fit_sharded(device, comm, &ShardedSources::new(shards)?)
    })
    .unwrap()
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

#[test]
fn dual_fits_on_uneven_rows_match_one_process() {
    // The Lanczos Dual (101 rows, 36 features) and the Dense Dual through
    // the operator (20 rows, 24 features: Q d_phi >= Q N, the stored path's
    // dense fallback), on 1, 2 and 3 ranks with uneven rows; tolerances of
    // the module docs.
    let cpu = Device::cpu();
    let cases = [(101usize, 12usize, lanczos(), vec![vec![101], vec![30, 71], vec![52, 9, 40]]), (20, 24, Solver::Dual(Eigensolver::Dense), vec![vec![20], vec![13, 7], vec![2, 11, 7]])];
    for (n, dim, solver, splits) in cases {
        let data = sources(n);
        let p = EksvdParams::new(3).feature_map(FeatureMap::random_fourier(0.5, dim).unwrap()).solver(solver).seed(5);
        let single = p.fit(&cpu, &data).unwrap();
        for counts in splits {
            let models = fit_on_counts(&counts, &p, &data, &cpu);
            assert_same_models(&models);
            let (values, vectors) = differences(&single, &models[0], &data);
            assert!(values <= 1e-8, "{solver:?}, rows {counts:?}: eigenvalues differ by {values:e}");
            assert!(vectors <= 1e-6, "{solver:?}, rows {counts:?}: projections differ by {vectors:e}");
            if counts.len() == 1 {
                assert_eq!(models[0].eigenvalues(), single.eigenvalues(), "{solver:?}: one rank is one process");
            }
        }
    }
}

#[test]
fn a_lanczos_product_communicates_the_same_bytes_at_any_row_count() {
    // The Krylov vectors stay on their rows: a product sums Q d_phi c
    // numbers and a flag, the iteration's inner products are sums of basis
    // sizes; nothing grows with N. The same fit at N = 90 and N = 180 on 2
    // ranks, stopped after the first basis (max_restarts 0 and a tolerance
    // no basis of 50 columns meets, so that both sizes take the same
    // steps and stop before the model's rows are gathered): the same
    // collectives and the same bytes.
    let run = |n: usize| {
        let mut rng = common::rng();
        let x: Vec<DMatrix<f64>> = (0..3).map(|_| DMatrix::from_fn(n, 4, |_, _| rng.random_range(-1.0..1.0))).collect();
        let data = MultiSource::paired(x).unwrap();
        let p = EksvdParams::new(10).feature_map(FeatureMap::random_fourier(2.0, 40).unwrap()).solver(Solver::Dual(Eigensolver::Lanczos { tolerance: 1e-15, max_restarts: 0 })).seed(2);
        ThreadGroup::run(2, |comm| {
            let shards = ShardedSources::from_full(comm, &data)?;
            let before = comm.stats();
            let fit = p.fit_sharded(&Device::cpu(), comm, &shards);
            assert!(matches!(fit, Err(Error::EigenNotConverged { restarts: 0, .. })), "N = {n}: {fit:?}");
            Ok::<_, Error>(comm.stats().since(&before))
        })
        .unwrap()
        .into_iter()
        .map(|s| s.unwrap())
        .collect::<Vec<_>>()
    };
    let (small, large) = (run(90), run(180));
    for r in 0..2 {
        assert_eq!(small[r].collectives, large[r].collectives, "rank {r}: collectives");
        assert_eq!(small[r].bytes_sent, large[r].bytes_sent, "rank {r}: bytes sent");
        assert_eq!(small[r].bytes_received, large[r].bytes_received, "rank {r}: bytes received");
        // Each of the 7 products (6 blocks of 8, the start's and the
        // basis's) moves its 3 x 40 x 8 sums; the whole 270-row basis
        // block of one product alone would be more than a quarter of it.
        assert!(small[r].bytes_received < 7 * 8 * (3 * 40 * 8 + 1) * 2 + 8 * 40_000, "rank {r}: {} bytes", small[r].bytes_received);
    }
}

#[test]
fn nystrom_landmarks_come_from_their_ranks() {
    let data = sources(61);
    let cpu = Device::cpu();
    let p = EksvdParams::new(2).feature_map(FeatureMap::nystrom(Kernel::rbf(0.8).unwrap(), 6, 20).unwrap()).solver(Solver::Covariance(Eigensolver::Dense)).seed(3);
    let single = p.fit(&cpu, &data).unwrap();
    let models = fit_on(3, &p, &data, &cpu);
    assert_same_models(&models);
    let (values, vectors) = differences(&single, &models[0], &data);
    assert!(values <= 1e-9 && vectors <= 1e-9, "eigenvalues {values:e}, projections {vectors:e}");
}

#[test]
fn a_rank_with_no_rows_takes_part() {
    // 4 rows over 5 ranks: the last rank holds none.
    let data = sources(4);
    let p = EksvdParams::new(2).feature_map(FeatureMap::random_fourier(0.5, 3).unwrap()).solver(lanczos());
    let single = p.fit(&Device::cpu(), &data).unwrap();
    let models = fit_on(5, &p, &data, &Device::cpu());
    assert_same_models(&models);
    let (values, vectors) = differences(&single, &models[0], &data);
    assert!(values <= 1e-8 && vectors <= 1e-6, "eigenvalues {values:e}, projections {vectors:e}");
}

#[test]
fn a_nan_in_one_shard_fails_every_rank() {
    let data = sources(31);
    let out = ThreadGroup::run(3, |comm| {
        let shards = data
            .sources()
            .iter()
            .enumerate()
            .map(|(q, x)| {
                let mut local = RowShard::from_full(comm, x)?.local().clone();
                if comm.rank() == 1 && q == 2 {
                    local[(0, 1)] = f64::NAN;
                }
                RowShard::new(comm, local)
            })
            .collect::<Result<Vec<_>, _>>()?;
        params(lanczos()).fit_sharded(&Device::cpu(), comm, &ShardedSources::new(shards)?)
    })
    .unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::RankFailed { rank: 1, invalid_input: true, .. })), "{r:?}");
    }
}

#[test]
fn mismatched_parameters_fail_every_rank() {
    let data = sources(31);
    let out = ThreadGroup::run(3, |comm| {
        let shards = ShardedSources::from_full(comm, &data)?;
        let gamma = if comm.rank() == 1 { 0.6 } else { 0.5 };
        let p = EksvdParams::new(3).feature_map(FeatureMap::random_fourier(gamma, 12)?).solver(Solver::Covariance(Eigensolver::Dense));
        p.fit_sharded(&Device::cpu(), comm, &shards)
    })
    .unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::ShardMismatch { rank: 1, .. })), "{r:?}");
    }
    // Parameters every rank rejects alike keep their type.
    let out = ThreadGroup::run(2, |comm| EksvdParams::new(0).fit_sharded(&Device::cpu(), comm, &ShardedSources::from_full(comm, &data)?)).unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::InvalidParameter { name: "n_components", .. })), "{r:?}");
    }
}

#[test]
fn sources_must_share_one_partition() {
    let data = sources(10);
    let out = ThreadGroup::run(2, |comm| {
        let a = RowShard::from_full(comm, data.source(0))?;
        // Source 1 split 6 + 4 instead of 5 + 5.
        let rows = if comm.rank() == 0 { 0..6 } else { 6..10 };
        let b = RowShard::new(comm, data.source(1).rows(rows.start, rows.len()).into_owned())?;
        ShardedSources::new(vec![a, b])
    })
    .unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::InvalidParameter { name: "shards", .. })), "{r:?}");
    }
    assert!(matches!(ThreadGroup::run(1, |comm| ShardedSources::new(vec![RowShard::from_full(comm, data.source(0))?])).unwrap()[0], Err(Error::TooFewSources(1))));
}

#[test]
fn ranks_on_a_gpu_match_one_process_on_it() {
    let Some(gpu) = common::gpu_device(GpuOptions::default()) else { return };
    let data = sources(101);
    for solver in [Solver::Covariance(Eigensolver::Dense), lanczos()] {
        let p = params(solver);
        let single = p.fit(&gpu, &data).unwrap();
        let models = fit_on(2, &p, &data, &gpu);
        assert_same_models(&models);
        // f32 features where the adapter lacks f64.
        let (values, vectors) = differences(&single, &models[0], &data);
        assert!(values <= 1e-4 && vectors <= 1e-3, "{solver:?}: eigenvalues {values:e}, projections {vectors:e}");
    }
    // A rank whose device holds nothing fails every rank.
    let out = ThreadGroup::run(2, |comm| {
        let device = if comm.rank() == 1 { Device::gpu_with(&GpuOptions { allow_software: true, max_device_bytes: Some(0), ..Default::default() })? } else { gpu.clone() };
        params(lanczos()).fit_sharded(&device, comm, &ShardedSources::from_full(comm, &data)?)
    })
    .unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::RankFailed { rank: 1, invalid_input: false, .. })), "{r:?}");
    }
}

#[test]
fn communication_is_one_reduction_for_the_covariance_solver() {
    let data = sources(40);
    let p = params(Solver::Covariance(Eigensolver::Dense));
    let stats = ThreadGroup::run(2, |comm| {
        let shards = ShardedSources::from_full(comm, &data)?;
        let before = comm.stats();
        p.fit_sharded(&Device::cpu(), comm, &shards)?;
        Ok::<_, Error>(comm.stats().since(&before))
    })
    .unwrap();
    // Received per rank: the Gram sum's 3 x 12 x 12 numbers (reduce-scatter
    // and all-gather), the other rank's features (20 x 36), the broadcast
    // solution, and a few agreement words: far below the data's rows.
    let received = stats[0].as_ref().unwrap().bytes_received as usize / 8;
    assert!(received < 3 * 12 * 12 + 20 * 36 + 200, "{received} numbers received");
}

#[test]
fn a_device_that_fails_at_any_step_fails_every_rank_alike() {
    // Rank 1's GPU budget grows from nothing to enough: its first failure
    // moves from the features to the Lanczos products (on lavapipe in f64,
    // 10 000 bytes hold rank 1's features and fail the first product's
    // upload); every rank must end with the same outcome, never hang.
    let Some(gpu) = common::gpu_device(GpuOptions::default()) else { return };
    let data = sources(61);
    let mut failures = 0;
    for budget in (0..=40_000u64).step_by(2_000) {
        let out = ThreadGroup::run(2, |comm| {
            let device = if comm.rank() == 1 { Device::gpu_with(&GpuOptions { allow_software: true, max_device_bytes: Some(budget), ..Default::default() })? } else { gpu.clone() };
            params(lanczos()).fit_sharded(&device, comm, &ShardedSources::from_full(comm, &data)?).map(|m| m.eigenvalues().clone())
        })
        .unwrap();
        match (&out[0], &out[1]) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "budget {budget}"),
            (Err(a), Err(b)) => {
                assert!(matches!(a, Error::RankFailed { rank: 1, invalid_input: false, .. }), "budget {budget}: {a:?}");
                assert_eq!(a, b, "budget {budget}");
                failures += 1;
            }
            other => panic!("budget {budget}: the ranks disagree: {other:?}"),
        }
    }
    assert!(failures > 0, "no budget made rank 1 fail");
}

/// Three paired sources of `n` rows on one input space (width 3), smooth in
/// a shared latent variable: the coupling of an RBF kernel has a decaying
/// spectrum.
fn shared_space_sources(n: usize) -> MultiSource {
    let mut rng = common::rng();
    let t: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let views: Vec<DMatrix<f64>> = [1.0, 1.5, 0.7].iter().map(|&s| DMatrix::from_fn(n, 3, |i, j| (s * (j as f64 + 1.0) * t[i]).sin() + 0.1 * rng.random_range(-1.0..1.0))).collect();
    MultiSource::paired(views).unwrap()
}

/// Every rank's kernel-Dual solution on `counts.len()` threads, rank `r`
/// holding `counts[r]` consecutive rows of every source.
fn kernel_dual_on(counts: &[usize], kernel: Kernel, data: &MultiSource, k: usize, solver: &Eigensolver, device: &Device) -> Vec<DualSolution> {
    ThreadGroup::run(counts.len(), |comm| {
        let start: usize = counts[..comm.rank()].iter().sum();
        let shards = data.sources().iter().map(|x| RowShard::new(comm, x.rows(start, counts[comm.rank()]).into_owned())).collect::<Result<Vec<_>, _>>()?;
        solve_dual_sharded(device, comm, kernel, &ShardedSources::new(shards)?, k, solver, 9)
    })
    .unwrap()
    .into_iter()
    .map(|r| r.unwrap())
    .collect()
}

/// Eigenvalue and stacked-alpha differences of `got` to `want` (relative,
/// the alphas up to sign per component).
fn dual_differences(want: &DualSolution, got: &DualSolution) -> (f64, f64) {
    let values = (&want.eigenvalues - &got.eigenvalues).amax() / want.eigenvalues[0];
    let stack = |s: &DualSolution| {
        let rows: usize = s.alphas.iter().map(|a| a.nrows()).sum();
        let mut m = DMatrix::zeros(rows, s.n_components());
        let mut at = 0;
        for a in &s.alphas {
            m.rows_mut(at, a.nrows()).copy_from(a);
            at += a.nrows();
        }
        m
    };
    (values, up_to_sign(&stack(want), &stack(got)))
}

#[test]
fn kernel_dual_matches_one_process_on_1_2_and_3_ranks() {
    // The Lanczos Dual converges to 1e-10 max |lambda| from products whose
    // sums are added in another order (the shares of K_pq^T V_p arrive by
    // rank): eigenvalues to 1e-8 relative, the unit alphas up to sign to
    // 1e-6. The Dense Dual's stored rows give the block solver the same
    // products: the same tolerances. Uneven rows, and a rank without rows.
    let cpu = Device::cpu();
    let kernel = Kernel::rbf(0.8).unwrap();
    for (n, solver) in [(97usize, Eigensolver::Lanczos { tolerance: 1e-10, max_restarts: 200 }), (61, Eigensolver::Dense)] {
        let data = shared_space_sources(n);
        let single = solve_dual(&cpu, &CouplingMatrix::from_kernel(kernel, &data).unwrap(), 4, &solver, 9).unwrap();
        for counts in [vec![n], vec![n / 2, n - n / 2], vec![n / 5, 0, n - n / 5], vec![10, n - 30, 20]] {
            let solutions = kernel_dual_on(&counts, kernel, &data, 4, &solver, &cpu);
            for s in &solutions[1..] {
                assert_eq!(s.eigenvalues, solutions[0].eigenvalues, "{solver:?}, rows {counts:?}: every rank the same bits");
                assert_eq!(s.alphas, solutions[0].alphas, "{solver:?}, rows {counts:?}: every rank the same bits");
            }
            let (values, vectors) = dual_differences(&single, &solutions[0]);
            assert!(values <= 1e-8, "{solver:?}, rows {counts:?}: eigenvalues differ by {values:e}");
            assert!(vectors <= 1e-6, "{solver:?}, rows {counts:?}: alphas differ by {vectors:e}");
            // Eq. 4 itself: G_Q alpha = lambda alpha on all rows.
            let coupling = CouplingMatrix::from_kernel(kernel, &data).unwrap();
            let g = coupling.assemble(&cpu).unwrap();
            let mut stacked = DMatrix::zeros(coupling.order(), 4);
            for q in 0..3 {
                stacked.rows_mut(q * n, n).copy_from(&solutions[0].alphas[q]);
            }
            let residual = (&g * &stacked - &stacked * DMatrix::from_diagonal(&solutions[0].eigenvalues)).amax() / solutions[0].eigenvalues[0];
            assert!(residual <= 1e-8, "{solver:?}, rows {counts:?}: residual of Eq. 4 {residual:e}");
        }
    }
}

/// `inner`, recording each all-gather's and all-to-all's received length
/// and each sum's length (a sum's own messages are not recorded).
struct Recording<'a> {
    inner: &'a dyn Communicator,
    calls: std::cell::RefCell<Vec<(&'static str, usize)>>,
}

impl Communicator for Recording<'_> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn all_gather_varcount(&self, local: &[f64], counts: &[usize]) -> Result<Vec<f64>, Error> {
        let out = self.inner.all_gather_varcount(local, counts)?;
        self.calls.borrow_mut().push(("all-gather", out.len()));
        Ok(out)
    }
    fn all_to_all_varcount(&self, send: &[f64], send_counts: &[usize], recv_counts: &[usize]) -> Result<Vec<f64>, Error> {
        let out = self.inner.all_to_all_varcount(send, send_counts, recv_counts)?;
        self.calls.borrow_mut().push(("all-to-all", out.len()));
        Ok(out)
    }
    fn broadcast(&self, root: usize, values: &mut [f64]) -> Result<(), Error> {
        self.inner.broadcast(root, values)
    }
    fn stats(&self) -> gramian::distributed::CommStats {
        self.inner.stats()
    }
    fn sum(&self, values: &mut [f64]) -> Result<(), Error> {
        self.calls.borrow_mut().push(("sum", values.len()));
        self.inner.sum(values)
    }
}

#[test]
fn a_kernel_dual_product_gathers_the_block_and_exchanges_the_shares() {
    // Per product: one all-gather of the Krylov block (Q N c numbers on
    // every rank), then one all-to-all bringing each rank its rows of the
    // other ranks' shares and a flag (P (1 + Q L c)); the inputs are
    // gathered once before the solve and the alphas once after it; nothing
    // else of length Q N crosses (the Lanczos sums are basis-sized).
    let (n, counts) = (101usize, [40usize, 61]);
    let data = shared_space_sources(n);
    let calls = ThreadGroup::run(2, |comm| {
        let start: usize = counts[..comm.rank()].iter().sum();
        let shards = data.sources().iter().map(|x| RowShard::new(comm, x.rows(start, counts[comm.rank()]).into_owned())).collect::<Result<Vec<_>, _>>()?;
        let recording = Recording { inner: comm, calls: Default::default() };
        let solution = solve_dual_sharded(&Device::cpu(), &recording, Kernel::rbf(0.8)?, &ShardedSources::new(shards)?, 4, &Eigensolver::lanczos(), 9)?;
        assert_eq!(solution.alphas[0].nrows(), n);
        Ok::<_, Error>(recording.calls.into_inner())
    })
    .unwrap();
    for (r, calls) in calls.into_iter().enumerate() {
        let calls = calls.unwrap();
        let large: Vec<(&str, usize)> = calls.iter().copied().filter(|&(kind, len)| kind != "sum" && len >= 3 * n).collect();
        // The inputs (3 sources of width 3), then products, then the alphas (k = 4).
        assert_eq!(large[0], ("all-gather", 3 * n * 3), "rank {r}: {large:?}");
        assert_eq!(*large.last().unwrap(), ("all-gather", 3 * n * 4), "rank {r}");
        let products = &large[1..large.len() - 1];
        assert!(products.len() >= 4 && products.len() % 2 == 0, "rank {r}: {products:?}");
        for pair in products.chunks(2) {
            let (("all-gather", gathered), ("all-to-all", exchanged)) = (pair[0], pair[1]) else { panic!("rank {r}: {pair:?}") };
            assert_eq!(gathered % (3 * n), 0, "rank {r}");
            let c = gathered / (3 * n);
            assert_eq!(exchanged, 2 * (1 + 3 * counts[r] * c), "rank {r}: {c} columns");
        }
        // Every all-to-all is a product's.
        assert_eq!(calls.iter().filter(|c| c.0 == "all-to-all").count(), products.len() / 2, "rank {r}");
    }
}

#[test]
fn kernel_dual_ranks_on_a_gpu_match_one_process() {
    let Some(gpu) = common::gpu_device(GpuOptions::default()) else { return };
    let data = shared_space_sources(83);
    let kernel = Kernel::rbf(0.8).unwrap();
    let solver = Eigensolver::Lanczos { tolerance: 1e-10, max_restarts: 200 };
    let single = solve_dual(&Device::cpu(), &CouplingMatrix::from_kernel(kernel, &data).unwrap(), 3, &solver, 9).unwrap();
    let solutions = kernel_dual_on(&[40, 43], kernel, &data, 3, &solver, &gpu);
    assert_eq!(solutions[0].alphas, solutions[1].alphas);
    // f32 kernel entries where the adapter lacks f64.
    let (values, vectors) = dual_differences(&single, &solutions[0]);
    let (value_tol, vector_tol) = if gpu.best_precision() == gramian::Precision::F64 { (1e-8, 1e-6) } else { (1e-4, 1e-3) };
    assert!(values <= value_tol && vectors <= vector_tol, "eigenvalues {values:e}, alphas {vectors:e}");
    // A rank whose device holds nothing, or a little: every rank fails alike.
    for budget in [0u64, 4_000, 9_000] {
        let out = ThreadGroup::run(2, |comm| {
            let device = if comm.rank() == 1 { Device::gpu_with(&GpuOptions { allow_software: true, max_device_bytes: Some(budget), ..Default::default() })? } else { gpu.clone() };
            solve_dual_sharded(&device, comm, kernel, &ShardedSources::from_full(comm, &data)?, 3, &solver, 9).map(|s| s.eigenvalues)
        })
        .unwrap();
        for r in &out {
            assert!(matches!(r, Err(Error::RankFailed { rank: 1, invalid_input: false, .. })), "budget {budget}: {r:?}");
        }
        assert_eq!(out[0], out[1], "budget {budget}");
    }
}

#[test]
fn kernel_dual_bad_inputs_fail_every_rank_alike() {
    let data = shared_space_sources(30);
    let solver = Eigensolver::lanczos();
    // Another kernel width on rank 1.
    let out = ThreadGroup::run(3, |comm| {
        let kernel = Kernel::rbf(if comm.rank() == 1 { 0.9 } else { 0.8 })?;
        solve_dual_sharded(&Device::cpu(), comm, kernel, &ShardedSources::from_full(comm, &data)?, 3, &solver, 9)
    })
    .unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::ShardMismatch { rank: 1, .. })), "{r:?}");
    }
    // Sources of different widths: no shared input space.
    let wide = sources(30);
    let out = ThreadGroup::run(2, |comm| solve_dual_sharded(&Device::cpu(), comm, Kernel::rbf(0.8)?, &ShardedSources::from_full(comm, &wide)?, 3, &solver, 9)).unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::ShapeMismatch { .. })), "{r:?}");
    }
    // Too many components, none, and a bad solver setting: every rank the same type.
    for (k, solver) in [(91usize, solver), (0, solver), (2, Eigensolver::Lanczos { tolerance: -1.0, max_restarts: 3 })] {
        let out = ThreadGroup::run(2, |comm| solve_dual_sharded(&Device::cpu(), comm, Kernel::rbf(0.8)?, &ShardedSources::from_full(comm, &data)?, k, &solver, 9)).unwrap();
        for r in out {
            assert!(matches!(r, Err(Error::InvalidParameter { .. })), "k = {k}, {solver:?}: {r:?}");
        }
    }
}
