//! eKSVD on paired sources sharded by rows over ranks
//! ([`FitSharded`] for [`EksvdParams`]): rank `r` holds the same block of
//! rows of every source ([`ShardedSources`]) and fits with its own
//! [`Device`]; every rank gets the model a single process fits on all rows.
//!
//! **Shared work.** The feature maps are fitted on every rank from the
//! input dimensions and the seed (Nystrom landmarks: the rows are drawn as
//! one process draws them and sent by their ranks, one collective per
//! source); each rank maps its own rows, `Phi_q^(r) = phi_q(X_q^(r))`, on
//! its device.
//!
//! **Covariance solver** (Eq. 8, Theorem 3.2). `C_qq = Phi_q^T Phi_q =
//! sum_r Phi_q^(r)T Phi_q^(r)`: each rank forms its `Q` Gram matrices on its
//! device and one reduction ([`Communicator::sum`], `Q d_phi^2` numbers)
//! gives all of them to every rank, which solves the symmetric problem of
//! order `Q d_phi` itself. The dual variables `alpha^(q) = (Q-1) gamma
//! Phi_q w_q` (Eq. 5) are row-wise.
//!
//! **Dual solver** (Eq. 4, Theorem 3.1), matrix-free: the block Lanczos of
//! [`super::eigensolver`] on the operator `G_Q`, whose product through the
//! features is `(G_Q V)_q = Phi_q (s - Phi_q^T V_q)` with
//! `s = sum_p Phi_p^T V_p` (each `K_pq = Phi_p Phi_q^T` is applied without
//! being formed), on vectors split by rows
//! ([`crate::distributed::CommRows`]): each rank holds its rows of every
//! source block of every Krylov vector (`Q L` of the `Q N` rows). A product
//! is a sum over rows followed by a row-wise map: each rank forms
//! `Phi_q^(r)T V_q^(r)` for every source, one reduction adds them with a
//! failure flag (`Q d_phi c + 1` numbers), and each rank forms its own rows
//! `Phi_q^(r) (s - Phi_q^T V_q)` of `G_Q V`; nothing of length `N` crosses.
//! The iteration's inner products (orthogonalisation, norms, the
//! Rayleigh-Ritz projections, restarts' Ritz vectors) are each a partial
//! over the rank's rows and one reduction
//! ([`crate::linalg::symmetric_operator_largest_on`]); the projected
//! problems are solved on every rank on the same bits, and a digest of
//! each is compared ([`Error::ShardMismatch`] if the ranks' builds give
//! different bits). With [`Eigensolver::Dense`] and `d_phi < N` the Dual
//! takes the covariance route, as one process does; otherwise the same
//! split vectors run the stored path's block solver, its dense fallback
//! assembled from the gathered features on every rank.
//!
//! **The model** holds every training row's features and dual variables
//! (the same type as [`EksvdParams::fit`] returns): they are gathered once,
//! after the solve (one all-gather of `Q N (d_phi + k)` numbers; the
//! eigenvalues are the same bits on every rank already), so the models are
//! identical on every rank. The covariance route broadcasts rank 0's
//! solution.
//!
//! **A kernel function** on a shared input space (`K_pq = k(X_p, X_q)`, no
//! feature map): [`solve_dual_sharded`] (the module [`kernel`]'s docs).
//!
//! **Failures.** The parameters and the sources' shapes are compared first
//! ([`Error::ShardMismatch`]); a rank whose local work fails (its device,
//! its rows) makes every rank return the same [`Error::RankFailed`], also
//! from inside an eigensolver product: a failure before the product's
//! reduction travels with it as a flag; one after it (this rank's rows of
//! the product) leaves zeros in those rows and travels with the next
//! product's flag, or with the agreement that follows the solver (no
//! extra collective per product).

pub mod kernel;

use std::cell::RefCell;

use nalgebra::DMatrix;

use super::coupling::{frobenius_from_grams, CouplingMatrix, FeatureRows};
use super::covariance::{covariance_of, solve_covariance_from_grams, CovarianceSolution};
use super::dual::{dual_from_covariance, with_eigenvector_signs, DualSolution};
use super::eigensolver::{largest_lanczos_on, largest_stored_on, on_views, Eigensolver, LargestEigenpairs};
use super::features::FittedFeatureMap;
use super::model::{Eksvd, EksvdParams, Solver};
use crate::data::MultiSource;
use crate::distributed::{agree, CommRows, Communicator, FitSharded, RowPartition, RowShard};
use crate::error::{Error, Result};
use crate::linalg::RowSplit;
use crate::precision::Precision;
use crate::Device;

pub use kernel::solve_dual_sharded;

/// Paired sources sharded by rows: one [`RowShard`] per source, all over
/// one [`RowPartition`] (rank `r` holds the same global rows of every
/// source, as paired samples require).
#[derive(Debug, Clone, PartialEq)]
pub struct ShardedSources {
    shards: Vec<RowShard>,
}

impl ShardedSources {
    /// The sources from their shards (each built by [`RowShard::new`] or
    /// [`RowShard::from_full`]). Not collective: the partitions are known
    /// to every rank.
    ///
    /// Errors: [`Error::TooFewSources`] for fewer than two;
    /// [`Error::InvalidParameter`] (`shards`) when the shards' partitions
    /// differ (the sources' rows would not be paired on every rank).
    pub fn new(shards: Vec<RowShard>) -> Result<Self> {
        if shards.len() < 2 {
            return Err(Error::TooFewSources(shards.len()));
        }
        let first = shards[0].partition();
        if let Some(q) = shards.iter().position(|s| s.partition() != first) {
            return Err(Error::InvalidParameter {
                name: "shards",
                reason: format!("source {q} is split over the ranks as {:?}, source 0 as {:?}: paired sources need one partition", shards[q].partition().counts(), first.counts()),
            });
        }
        Ok(ShardedSources { shards })
    }

    /// This rank's even block of each source of paired data every rank
    /// holds in full (tests, examples). Not collective.
    ///
    /// Errors: unpaired sources ([`Error::NotAvailable`]), those of
    /// [`RowShard::from_full`].
    pub fn from_full(comm: &dyn Communicator, data: &MultiSource) -> Result<Self> {
        if !data.is_paired() {
            return Err(Error::NotAvailable("sharded eKSVD needs paired sources (one row count)"));
        }
        Self::new(data.try_sources()?.iter().map(|x| RowShard::from_full(comm, x)).collect::<Result<_>>()?)
    }

    /// Number of sources `Q`.
    pub fn n_sources(&self) -> usize {
        self.shards.len()
    }

    /// The shard of source `q`.
    ///
    /// # Panics
    ///
    /// If `q >= n_sources()`.
    pub fn shard(&self, q: usize) -> &RowShard {
        &self.shards[q]
    }

    /// This rank's rows of source `q`.
    ///
    /// # Panics
    ///
    /// If `q >= n_sources()`.
    pub fn local(&self, q: usize) -> &DMatrix<f64> {
        self.shards[q].local()
    }

    /// How the rows (of every source) are split over the ranks.
    pub fn partition(&self) -> &RowPartition {
        self.shards[0].partition()
    }

    /// Rows `N` of each source over all ranks.
    pub fn total_rows(&self) -> usize {
        self.partition().total()
    }

    /// What must agree across ranks: the sources' widths and the partition.
    fn describe(&self) -> String {
        format!("{} sources of widths {:?}, rows per rank {:?}", self.n_sources(), self.shards.iter().map(RowShard::ncols).collect::<Vec<_>>(), self.partition().counts())
    }
}

impl FitSharded<ShardedSources> for EksvdParams {
    type Fitted = Eksvd;

    /// [`EksvdParams::fit`] on sources sharded by rows (module docs: what is
    /// reduced, what is gathered). Collective.
    ///
    /// Errors: [`Error::ShardMismatch`] when the parameters or the sources'
    /// shapes differ between ranks; [`Error::RankFailed`] on every rank when
    /// one rank's local work fails; otherwise those of [`EksvdParams::fit`].
    fn fit_sharded(&self, device: &Device, comm: &dyn Communicator, data: &ShardedSources) -> Result<Eksvd> {
        comm.check_same("eKSVD parameters", &format!("{self:?}"))?;
        comm.check_same("the sharded sources", &data.describe())?;
        self.validate_for(data.n_sources())?;
        let seed = self.seed_value();
        let precision = agree(comm, device.working_precision(self.precision_setting()))?;
        let maps = fit_maps(self, device, comm, data, seed)?;
        let d_phi = maps[0].output_dim();
        let local: Vec<DMatrix<f64>> = agree(
            comm,
            maps.iter()
                .enumerate()
                .map(|(q, map)| {
                    check_feature_width(q, d_phi, map.output_dim())?;
                    let x = data.local(q);
                    if x.nrows() == 0 { Ok(DMatrix::zeros(0, d_phi)) } else { map.transform(x) }
                })
                .collect(),
        )?;
        let partition = data.partition();
        let k = self.n_components();
        let solver = self.solver_value();
        let (features, solution, weights) = match solver {
            Solver::Covariance(eig) => {
                let grams = summed_grams(comm, device, precision, &local)?;
                let covariance = same_on_every_rank(comm, agree_redundant(comm, solve_covariance_from_grams(&grams, k, &eig, seed))?)?;
                let features = gather_rows(comm, partition, &[], &local)?.1;
                // alpha^(q) = (Q-1) gamma Phi_q w_q (Eq. 5), row-wise.
                let solution = dual_from_covariance(&features, &covariance)?;
                (features, solution, covariance.weights)
            }
            Solver::Dual(eig) => {
                let (features, solution) = solve_dual_on_features(comm, device, precision, partition, &local, k, &eig, seed)?;
                let weights = solution.primal_weights(&features)?;
                (features, solution, weights)
            }
        };
        Ok(Eksvd::from_parts(device, Some(maps), features, solution, weights, solver).in_precision(self.precision_setting()))
    }
}

/// The feature maps, fitted on every rank: from the input dimension and the
/// seed, and for Nystrom maps from the landmark rows, drawn among the `N`
/// rows as one process draws them and sent by the ranks holding them.
fn fit_maps(params: &EksvdParams, device: &Device, comm: &dyn Communicator, data: &ShardedSources, seed: u64) -> Result<Vec<FittedFeatureMap>> {
    let mut fitted = Vec::with_capacity(data.n_sources());
    for q in 0..data.n_sources() {
        let (map, shard, seed_q) = (params.map_for(q), data.shard(q), seed.wrapping_add(q as u64));
        // The same rows on every rank (a function of N and the seed).
        let points = match map.landmark_rows(shard.total_rows(), seed_q)? {
            Some(rows) => Some(shard.rows(comm, &rows)?),
            None => None,
        };
        fitted.push(map.fit_on_landmarks(device, shard.ncols(), points, q, seed_q).map(|m| m.in_precision(params.precision_setting())));
    }
    agree(comm, fitted.into_iter().collect())
}

fn check_feature_width(q: usize, d_phi: usize, found: usize) -> Result<()> {
    crate::data::check_shape(format!("feature dimension of source {q} vs source 0"), d_phi, found)
}

/// `C_qq = Phi_q^T Phi_q` summed over the ranks: each rank's Gram matrices
/// on its device (in `precision` on a GPU), then one reduction of
/// `Q d_phi^2` numbers.
fn summed_grams(comm: &dyn Communicator, device: &Device, precision: Precision, local: &[DMatrix<f64>]) -> Result<Vec<DMatrix<f64>>> {
    let d = local[0].ncols();
    let grams: Vec<DMatrix<f64>> = agree(comm, local.iter().map(|phi| if phi.nrows() == 0 { Ok(DMatrix::zeros(d, d)) } else { covariance_of(device, precision, phi) }).collect())?;
    let mut flat: Vec<f64> = grams.iter().flat_map(|c| c.iter().copied()).collect();
    comm.sum(&mut flat)?;
    Ok(flat.chunks(d * d).map(|c| DMatrix::from_column_slice(d, d, c)).collect())
}

/// The Dual of Eq. 4 on this rank's rows of the features, `local`
/// (module docs), the resident products in `precision` on a GPU: the
/// features of all rows, gathered, and the solution.
#[allow(clippy::too_many_arguments)]
fn solve_dual_on_features(comm: &dyn Communicator, device: &Device, precision: Precision, partition: &RowPartition, local: &[DMatrix<f64>], k: usize, eig: &Eigensolver, seed: u64) -> Result<(Vec<DMatrix<f64>>, DualSolution)> {
    eig.validate()?;
    let (n_sources, n, d) = (local.len(), partition.total(), local[0].ncols());
    let order = n_sources * n;
    if matches!(eig, Eigensolver::Dense) && n_sources * d < order && k <= n_sources * d {
        // G_Q has rank at most Q d_phi: its nonzero eigenpairs are those of
        // the covariance form (Theorem 3.2), as for one process.
        let grams = summed_grams(comm, device, precision, local)?;
        let covariance = same_on_every_rank(comm, agree_redundant(comm, solve_covariance_from_grams(&grams, k, &Eigensolver::Dense, seed))?)?;
        let features = gather_rows(comm, partition, &[], local)?.1;
        let solution = with_eigenvector_signs(dual_from_covariance(&features, &covariance)?);
        return Ok((features, solution));
    }
    // This rank's rows of the Dual's vectors (Q N rows, source blocks of N
    // stacked): its block of each source.
    let mine = partition.range(comm.rank());
    let rows = CommRows::new(comm, order, (0..n_sources).map(|q| q * n + mine.start..q * n + mine.end).collect())?;
    let operator = ShardedCoupling::new(comm, device, precision, &rows, local)?;
    let apply = |v: &DMatrix<f64>| operator.apply(v);
    let pairs = match *eig {
        Eigensolver::Dense => {
            let frobenius = frobenius_from_grams(&summed_grams(comm, device, precision, local)?);
            if !frobenius.is_finite() {
                return Err(Error::Overflow { what: "Frobenius norm of the coupling matrix", row: 0, col: 0 });
            }
            let apply = on_views(apply);
            // The dense matrix (only if the block solver gives up) from the
            // gathered features, on every rank.
            let dense = || -> Result<DMatrix<f64>> {
                let features = gather_rows(comm, partition, &[], local)?.1;
                CouplingMatrix::from_features(features)?.assemble(device)
            };
            largest_stored_on(&rows, k, apply, frobenius, dense)
        }
        Eigensolver::Lanczos { tolerance, max_restarts } => {
            // The solver's memory check (this rank's rows of the basis),
            // agreed on before the products start (a rank short of memory
            // must not leave the others in a product).
            if let Some(entries) = rows.local_len().checked_mul(k.saturating_add(8)) {
                agree(comm, crate::memory::check_host::<f64>(entries, "Lanczos basis"))?;
            }
            largest_lanczos_on(&rows, k, apply, tolerance, max_restarts, seed)
        }
    };
    // A rank whose last product failed after its reduction says so now.
    agree(comm, operator.take_failure())?;
    let LargestEigenpairs { values, vectors } = agree_redundant(comm, pairs)?;
    // This rank's rows of the features and of each source's alpha, then
    // every row of both (one all-gather).
    let l = rows.local_len() / n_sources;
    let mut blocks: Vec<DMatrix<f64>> = local.to_vec();
    blocks.extend((0..n_sources).map(|q| vectors.rows(q * l, l).into_owned()));
    let mut full = gather_rows(comm, partition, &[], &blocks)?.1;
    let alphas = full.split_off(n_sources);
    Ok((full, DualSolution { eigenvalues: values, alphas }))
}

/// This rank's rows of `G_Q V` from its rows of `V` (`Q L x c`, its `L`
/// rows of each source stacked) and of the features: one reduction of the
/// `Phi_q^T V_q` and a failure flag, then this rank's rows of the product.
/// A rank whose rows of the product fail (after the reduction) returns
/// zeros and keeps the error: the next product's flag, or
/// [`ShardedCoupling::take_failure`] after the solver, makes every rank
/// fail with it.
struct ShardedCoupling<'a> {
    comm: &'a dyn Communicator,
    rows: FeatureRows<'a>,
    n_sources: usize,
    local_rows: usize,
    d_phi: usize,
    failure: RefCell<Option<Error>>,
}

impl<'a> ShardedCoupling<'a> {
    fn new(comm: &'a dyn Communicator, device: &'a Device, precision: Precision, split: &CommRows<'_>, local: &'a [DMatrix<f64>]) -> Result<Self> {
        let rows = agree(comm, FeatureRows::new(device, local, precision))?;
        Ok(ShardedCoupling { comm, rows, n_sources: local.len(), local_rows: split.local_len() / local.len(), d_phi: local[0].ncols(), failure: RefCell::new(None) })
    }

    fn apply(&self, v: &DMatrix<f64>) -> Result<DMatrix<f64>> {
        let (comm, l, c, d) = (self.comm, self.local_rows, v.ncols(), self.d_phi);
        crate::data::check_shape("rows of V vs this rank's rows of G_Q", self.n_sources * l, v.nrows())?;
        let parts: Vec<DMatrix<f64>> = (0..self.n_sources).map(|q| v.rows(q * l, l).into_owned()).collect();
        // s: this rank's Phi_q^T V_q, and a failure flag (this product's or
        // an earlier one's), summed over the ranks.
        let projected = match self.failure.borrow_mut().take() {
            Some(earlier) => Err(earlier),
            None => self.rows.project(&parts),
        };
        let mut sums = vec![0.0; self.n_sources * d * c + 1];
        match &projected {
            Ok(p) => sums[1..].iter_mut().zip(p.iter().flat_map(|m| m.iter())).for_each(|(o, &x)| *o = x),
            Err(_) => sums[0] = 1.0,
        }
        comm.sum(&mut sums)?;
        if sums[0] != 0.0 {
            return failed_somewhere(comm, projected.map(|_| ()));
        }
        let projected: Vec<DMatrix<f64>> = sums[1..].chunks(d * c).map(|s| DMatrix::from_column_slice(d, c, s)).collect();
        let mut out = DMatrix::zeros(self.n_sources * l, c);
        match self.rows.expand(&projected) {
            Ok(blocks) => {
                for (q, block) in blocks.iter().enumerate() {
                    out.rows_mut(q * l, l).copy_from(block);
                }
            }
            Err(e) => *self.failure.borrow_mut() = Some(e),
        }
        Ok(out)
    }

    /// The failure of this rank's rows of the last product, if any.
    fn take_failure(&self) -> Result<()> {
        self.failure.borrow_mut().take().map_or(Ok(()), Err)
    }
}

/// Every rank's error once a reduction said that some rank failed: the
/// ranks agree on the first failure ([`agree`]).
fn failed_somewhere<T>(comm: &dyn Communicator, local: Result<()>) -> Result<T> {
    agree(comm, local)?;
    Err(Error::NotAvailable("a rank's share of the product"))
}

/// The outcome of work every rank repeats on the same numbers (the small
/// eigenproblems): each rank's own result when the ranks agree on success or
/// on failure (a failure keeps its type, as one process reports it), and
/// [`Error::RankFailed`] on every rank when they do not ([`agree`]).
fn agree_redundant<T>(comm: &dyn Communicator, local: Result<T>) -> Result<T> {
    let p = comm.size();
    if p == 1 {
        return local;
    }
    let failed = if local.is_err() { 1.0 } else { 0.0 };
    let all = comm.all_gather_varcount(&[failed], &vec![1; p])?;
    if all.iter().all(|&f| f == failed) {
        return local;
    }
    agree(comm, local)
}

/// Rank 0's covariance solution on every rank (one broadcast).
fn same_on_every_rank(comm: &dyn Communicator, mut s: CovarianceSolution) -> Result<CovarianceSolution> {
    if comm.size() == 1 {
        return Ok(s);
    }
    let mut flat: Vec<f64> = s.eigenvalues.iter().chain(s.weights.iter().flat_map(|w| w.iter())).copied().collect();
    comm.broadcast(0, &mut flat)?;
    let k = s.eigenvalues.len();
    s.eigenvalues.copy_from_slice(&flat[..k]);
    let mut at = k;
    for w in &mut s.weights {
        let len = w.len();
        w.copy_from_slice(&flat[at..at + len]);
        at += len;
    }
    Ok(s)
}

/// Blocks sharded by rows like `partition` (`blocks[j]`: this rank's rows x
/// `c_j`, the same `c_j` on every rank) in full on every rank (`N x c_j`),
/// with `extra` numbers of each rank in front (all ranks pass as many):
/// one all-gather. Returns every rank's extras in rank order and the blocks.
fn gather_rows(comm: &dyn Communicator, partition: &RowPartition, extra: &[f64], blocks: &[DMatrix<f64>]) -> Result<(Vec<f64>, Vec<DMatrix<f64>>)> {
    let widths: Vec<usize> = blocks.iter().map(|b| b.ncols()).collect();
    let width: usize = widths.iter().sum();
    let counts: Vec<usize> = partition.counts().iter().map(|&rows| extra.len() + rows * width).collect();
    let mut send = extra.to_vec();
    for b in blocks {
        send.extend(b.iter());
    }
    let all = comm.all_gather_varcount(&send, &counts)?;
    let mut extras = Vec::with_capacity(extra.len() * counts.len());
    let mut full: Vec<DMatrix<f64>> = widths.iter().map(|&c| DMatrix::zeros(partition.total(), c)).collect();
    let mut at = 0;
    for r in 0..counts.len() {
        let rows = partition.range(r);
        extras.extend_from_slice(&all[at..at + extra.len()]);
        at += extra.len();
        for (f, &c) in full.iter_mut().zip(&widths) {
            let len = rows.len() * c;
            if len > 0 {
                f.view_mut((rows.start, 0), (rows.len(), c)).copy_from(&DMatrix::from_column_slice(rows.len(), c, &all[at..at + len]));
            }
            at += len;
        }
    }
    Ok((extras, full))
}
