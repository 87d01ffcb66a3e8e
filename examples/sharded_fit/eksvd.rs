//! eKSVD on sharded sources: three paired sources of `n` rows (default
//! 600), random Fourier features (`d_phi = 32`) or one RBF kernel on the
//! shared input space, 4 components. Every rank keeps its block of rows of
//! every source.

use std::cell::Cell;
use std::time::Instant;

use gramian::distributed::{CommStats, Communicator, FitSharded, RowShard};
use gramian::eksvd::{solve_dual, solve_dual_sharded, CouplingMatrix, Eigensolver, Eksvd, EksvdParams, FeatureMap, ShardedSources, Solver};
use gramian::error::Result;
use gramian::{Kernel, MultiSource, Precision};
use nalgebra::DMatrix;
use rand::{rngs::StdRng, Rng, SeedableRng};

use super::{Case, Fail, Outcome};

/// The Dual solver, matrix-free (block Lanczos on products through the
/// features, each one reduction and one all-gather).
pub fn dual(case: &Case) -> Result<Outcome> {
    // Lanczos converges to 1e-10 max |lambda|; the vectors, compared up to
    // sign, to about that over the eigenvalue gaps.
    run(case, Solver::Dual(Eigensolver::lanczos()), 1e-6)
}

/// The Covariance solver (one reduction of the Gram matrices).
pub fn covariance(case: &Case) -> Result<Outcome> {
    // Only the order of the Gram matrices' row sums differs.
    run(case, Solver::Covariance(Eigensolver::Dense), 1e-9)
}

/// Three sources smooth in a shared latent variable, from `seed`.
fn sources(n: usize, seed: u64) -> Result<MultiSource> {
    let mut rng = StdRng::seed_from_u64(seed);
    let t: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let mut view = |d: usize, s: f64| DMatrix::from_fn(n, d, |i, j| (s * (j as f64 + 1.0) * t[i]).sin() + 0.1 * rng.random_range(-1.0..1.0));
    let sources = vec![view(3, 1.0), view(4, 1.5), view(2, 0.7)];
    MultiSource::paired(sources)
}

fn run(case: &Case, solver: Solver, tolerance: f64) -> Result<Outcome> {
    let comm = case.comm;
    let data = sources(case.n.unwrap_or(600), case.seed)?;
    let gamma = if case.fails_here(Fail::Mismatch) { 0.6 } else { 0.5 };
    let params = EksvdParams::new(4).feature_map(FeatureMap::random_fourier(gamma, 32)?).solver(solver).seed(case.seed);
    let shards = shards(case, &data)?;
    let before = comm.stats();
    let started = Instant::now();
    let counting = Counting { inner: comm, sums: Cell::new(0), exchanges: Cell::new(0) };
    let model = params.fit_sharded(case.device, &counting, &shards)?;
    let fit_seconds = started.elapsed().as_secs_f64();
    let traffic = comm.stats().since(&before);
    let difference = if case.check {
        let single = params.fit(case.device, &data)?;
        // f32 features where a GPU adapter lacks f64.
        let tolerance = if case.device.is_gpu() { tolerance.max(1e-3) } else { tolerance };
        Some((difference(&single, &model, &data)?, tolerance))
    } else {
        None
    };
    // Reductions: one per Lanczos product (the Dual), the Gram matrices'
    // one (the Covariance).
    Ok(Outcome { fit_seconds, iterations: counting.sums.get(), comm: traffic, difference })
}

/// This rank's block of every source; with `--fail bad-shard`, rank 1's
/// has a NaN (every rank builds its shards collectively and fails alike).
fn shards(case: &Case, data: &MultiSource) -> Result<ShardedSources> {
    let comm = case.comm;
    if case.fail != Fail::BadShard {
        return ShardedSources::from_full(comm, data);
    }
    let shards = data
        .sources()
        .iter()
        .map(|x| {
            let mut local = RowShard::from_full(comm, x)?.local().clone();
            if case.fails_here(Fail::BadShard) && local.nrows() > 0 {
                local[(0, 0)] = f64::NAN;
            }
            RowShard::new(comm, local)
        })
        .collect::<Result<Vec<_>>>()?;
    ShardedSources::new(shards)
}

/// The Dual solver on one RBF kernel of the shared input space (no feature
/// map), matrix-free: block Lanczos, each product one all-gather of the
/// Krylov block and one all-to-all of the ranks' shares; each kernel entry
/// evaluated once over the ranks.
pub fn kernel_dual(case: &Case) -> Result<Outcome> {
    let comm = case.comm;
    let n = case.n.unwrap_or(600);
    let mut rng = StdRng::seed_from_u64(case.seed);
    let t: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let views = [1.0, 1.5, 0.7].iter().map(|&s| DMatrix::from_fn(n, 3, |i, j| (s * (j as f64 + 1.0) * t[i]).sin() + 0.1 * rng.random_range(-1.0..1.0))).collect();
    let data = MultiSource::paired(views)?;
    let kernel = Kernel::rbf(if case.fails_here(Fail::Mismatch) { 0.6 } else { 0.5 })?;
    let (k, solver) = (4, Eigensolver::lanczos());
    let shards = shards(case, &data)?;
    let before = comm.stats();
    let started = Instant::now();
    let counting = Counting { inner: comm, sums: Cell::new(0), exchanges: Cell::new(0) };
    let solution = solve_dual_sharded(case.device, &counting, kernel, &shards, k, &solver, case.seed)?;
    let fit_seconds = started.elapsed().as_secs_f64();
    let traffic = comm.stats().since(&before);
    let difference = if case.check {
        let single = solve_dual(case.device, &CouplingMatrix::from_kernel(kernel, &data)?, k, &solver, case.seed)?;
        let values = (&single.eigenvalues - &solution.eigenvalues).amax() / single.eigenvalues[0];
        let alphas = (0..data.n_sources()).map(|q| up_to_sign(&single.alphas[q], &solution.alphas[q])).fold(0.0, f64::max);
        // Lanczos to 1e-10 max |lambda| from products summed in another
        // order; f32 kernel entries where a GPU adapter lacks f64.
        let tolerance = if case.device.is_gpu() && case.device.best_precision() != Precision::F64 { 1e-3 } else { 1e-6 };
        Some((values.max(alphas), tolerance))
    } else {
        None
    };
    // One all-to-all per Lanczos product column block.
    Ok(Outcome { fit_seconds, iterations: counting.exchanges.get(), comm: traffic, difference })
}

/// Largest difference of the columns of `b` to those of `a`, each up to
/// sign (the unit alphas of a component).
fn up_to_sign(a: &DMatrix<f64>, b: &DMatrix<f64>) -> f64 {
    (0..a.ncols()).map(|j| (a.column(j) - b.column(j)).amax().min((a.column(j) + b.column(j)).amax())).fold(0.0, f64::max)
}

/// `inner`, counting the reductions ([`Communicator::sum`]) of a fit.
struct Counting<'a> {
    inner: &'a dyn Communicator,
    sums: Cell<usize>,
    /// All-to-all exchanges ([`Communicator::all_to_all_varcount`]).
    exchanges: Cell<usize>,
}

impl Communicator for Counting<'_> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn all_gather_varcount(&self, local: &[f64], counts: &[usize]) -> Result<Vec<f64>> {
        self.inner.all_gather_varcount(local, counts)
    }
    fn all_to_all_varcount(&self, send: &[f64], send_counts: &[usize], recv_counts: &[usize]) -> Result<Vec<f64>> {
        self.exchanges.set(self.exchanges.get() + 1);
        self.inner.all_to_all_varcount(send, send_counts, recv_counts)
    }
    fn broadcast(&self, root: usize, values: &mut [f64]) -> Result<()> {
        self.inner.broadcast(root, values)
    }
    fn stats(&self) -> CommStats {
        self.inner.stats()
    }
    fn sum(&self, values: &mut [f64]) -> Result<()> {
        self.sums.set(self.sums.get() + 1);
        self.inner.sum(values)
    }
}

/// The largest of the eigenvalues' difference and the paired projection
/// scores' difference (each column up to sign), relative to the largest
/// eigenvalue and the largest score.
fn difference(single: &Eksvd, sharded: &Eksvd, data: &MultiSource) -> Result<f64> {
    let values = (single.eigenvalues() - sharded.eigenvalues()).amax() / single.eigenvalues()[0];
    let (a, b) = (single.transform_paired(data)?, sharded.transform_paired(data)?);
    let scores = up_to_sign(&a, &b) / a.amax();
    Ok(values.max(scores))
}
