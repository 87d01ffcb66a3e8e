//! The Dual of Eq. 4 for one kernel function on a shared input space,
//! `K_pq = k(X_p, X_q)` ([`CouplingMatrix::from_kernel`]), on paired sources
//! sharded by rows ([`solve_dual_sharded`]): every rank gets the solution
//! one process finds with [`super::super::solve_dual`] on all rows.
//!
//! **What a rank holds.** Its rows `R_r` of every source and, gathered
//! once, every source's inputs (`Q N d` numbers, where a product evaluates
//! `Q N^2 / 2` kernel entries); of every vector of the solver, its
//! rows `R_r` of each source block.
//!
//! **A product** `G_Q V`. For each pair `p < q` the rank evaluates the rows
//! `K_pq(R_r, :) = k(X_p(R_r), X_q)` once and forms both products of the
//! pair (the fused pair matvec: [`crate::kernel::kernel_matvec_pair_cpu`], or
//! the resident one on a GPU): `K_pq(R_r, :) V_q`, its rows of `(G V)_p`,
//! and `K_pq(R_r, :)^T V_p(R_r)`, its share of every row of `(G V)_q`. Over
//! the ranks every kernel entry is evaluated once, as in one process:
//!
//! `(G V)_q(R_r) = sum_{p > q} K_qp(R_r, :) V_p + sum_s sum_{p < q} K_pq(R_s, R_r)^T V_p(R_s)`.
//!
//! The first sum needs `V` in full (one all-gather of `Q N c` numbers); the
//! second sends each rank's shares to the rank owning the rows (one
//! all-to-all of `Q N c` numbers), where they are added in rank order, so
//! a product gives the same bits on every run.
//!
//! **Eigensolvers.** [`Eigensolver::Lanczos`]: the block Lanczos on split
//! vectors ([`largest_lanczos_on_for`]) in blocks of 40 (a product's cost is
//! its kernel entries: [`ProductCost::PerBlock`]), its inner products
//! reduced, `G_Q` never stored. [`Eigensolver::Dense`]: each rank stores its rows
//! `K_pq(R_r, :)` of the upper blocks (a `P`-th of what one process stores)
//! for the block solver of [`largest_stored_on`], with `||G_Q||_F^2 =
//! 2 sum_{p<q} ||K_pq||_F^2` summed over the ranks; the dense matrix,
//! assembled on every rank from the gathered inputs, only if the block
//! solver gives up.
//!
//! **Failures.** The kernel, the solver settings and the sources' shapes
//! are compared first ([`Error::ShardMismatch`]); a rank whose local work
//! fails (its rows, its device) makes every rank return the same
//! [`Error::RankFailed`]: inside a product the failure travels as a flag
//! with the rank's shares, in the all-to-all every product makes anyway.

use std::cell::RefCell;
use std::ops::Range;

use nalgebra::DMatrix;

use super::{agree_redundant, failed_somewhere, gather_rows, ShardedSources};
use crate::data::{check_shape, MultiSource};
use crate::distributed::{agree, CommRows, Communicator, RowPartition};
use crate::eksvd::coupling::CouplingMatrix;
use crate::eksvd::dual::DualSolution;
use crate::eksvd::eigensolver::{check_k, largest_lanczos_on_for, largest_stored_on, on_views, Eigensolver, LargestEigenpairs, ProductCost};
use crate::error::{Error, Result};
use crate::linalg::{matmul_acc, matmul_tn, RowSplit};
use crate::precision::Precision;
use crate::resident::DeviceMatrix;
use crate::{Device, Kernel};

/// Solves Eq. 4 for the `n_components` largest positive eigenvalues of the
/// coupling matrix of one kernel function, `K_pq = k(X_p, X_q)`, on paired
/// sources sharded by rows (module docs: what is gathered, what a product
/// sends). Collective. Every rank returns the whole solution (every row of
/// each `alpha^(q)`, one all-gather after the solve), the same bits on
/// every rank; against [`super::super::solve_dual`] on all rows, the same
/// eigenpairs to the solver's tolerance. This rank's kernel entries are
/// evaluated on `device` (resident inputs on a GPU, in
/// [`Device::best_precision`]).
///
/// Errors: [`Error::ShardMismatch`] when the kernel, `n_components`, the
/// solver, the seed or the sources' shapes differ between ranks;
/// [`Error::RankFailed`] on every rank when one rank's local work fails;
/// otherwise those of [`super::super::solve_dual`] (sources of different
/// widths: [`Error::ShapeMismatch`]).
pub fn solve_dual_sharded(device: &Device, comm: &dyn Communicator, kernel: Kernel, data: &ShardedSources, n_components: usize, solver: &Eigensolver, seed: u64) -> Result<DualSolution> {
    comm.check_same("the kernel Dual's parameters", &format!("{kernel:?}, {n_components} components, {solver:?}, seed {seed}"))?;
    comm.check_same("the sharded sources", &data.describe())?;
    // The same on every rank from here on (agreed above): no collective needed.
    kernel.validate()?;
    solver.validate()?;
    let (n_sources, n, d) = (data.n_sources(), data.total_rows(), data.shard(0).ncols());
    for q in 1..n_sources {
        check_shape(format!("input dimension of source {q} vs source 0 (one kernel on a shared space)"), d, data.shard(q).ncols())?;
    }
    let order = n_sources.checked_mul(n).ok_or(Error::ShapeOverflow { what: "order of the coupling matrix", rows: n_sources, cols: n })?;
    check_k(n_components, order)?;
    // Every source's inputs on every rank (one all-gather).
    agree(comm, crate::memory::check_host::<f64>(order.saturating_mul(d), "gathered inputs"))?;
    let locals: Vec<DMatrix<f64>> = (0..n_sources).map(|q| data.local(q).clone()).collect();
    let inputs = gather_rows(comm, data.partition(), &[], &locals)?.1;
    let partition = data.partition();
    let mine = partition.range(comm.rank());
    let rows = CommRows::new(comm, order, (0..n_sources).map(|q| q * n + mine.start..q * n + mine.end).collect())?;
    let pairs = match *solver {
        Eigensolver::Dense => {
            let rows_of_blocks = agree(comm, LocalRows::stored(device, kernel, &inputs, mine.clone()))?;
            let mut squares = [rows_of_blocks.squared_norm()];
            comm.sum(&mut squares)?;
            let frobenius = (2.0 * squares[0]).sqrt();
            if !frobenius.is_finite() {
                return Err(Error::Overflow { what: "Frobenius norm of the coupling matrix", row: 0, col: 0 });
            }
            let operator = ShardedKernelCoupling { comm, partition, mine, n_sources, local: rows_of_blocks };
            let apply = on_views(|v| operator.apply(v));
            let dense = || CouplingMatrix::from_kernel(kernel, &MultiSource::paired(inputs.clone())?)?.assemble(device);
            largest_stored_on(&rows, n_components, apply, frobenius, dense)
        }
        Eigensolver::Lanczos { tolerance, max_restarts } => {
            let cost = ProductCost::PerBlock;
            if let Some(entries) = rows.local_len().checked_mul(n_components.saturating_add(cost.block())) {
                agree(comm, crate::memory::check_host::<f64>(entries, "Lanczos basis"))?;
            }
            let local = agree(comm, LocalRows::evaluated(device, kernel, &inputs, mine.clone()))?;
            let operator = ShardedKernelCoupling { comm, partition, mine, n_sources, local };
            largest_lanczos_on_for(&rows, n_components, |v| operator.apply(v), tolerance, max_restarts, seed, cost)
        }
    };
    let LargestEigenpairs { values, vectors } = agree_redundant(comm, pairs)?;
    // Every row of each source's alpha on every rank (one all-gather).
    let l = rows.local_len() / n_sources;
    let blocks: Vec<DMatrix<f64>> = (0..n_sources).map(|q| vectors.rows(q * l, l).into_owned()).collect();
    let alphas = gather_rows(comm, partition, &[], &blocks)?.1;
    Ok(DualSolution { eigenvalues: values, alphas })
}

/// This rank's rows of `G_Q V` from its rows of `V` (module docs): one
/// all-gather of `V`, the rank's pair products, one all-to-all of the
/// shares with a failure flag.
struct ShardedKernelCoupling<'a> {
    comm: &'a dyn Communicator,
    partition: &'a RowPartition,
    /// This rank's rows of each source.
    mine: Range<usize>,
    n_sources: usize,
    local: LocalRows<'a>,
}

impl ShardedKernelCoupling<'_> {
    fn apply(&self, v: &DMatrix<f64>) -> Result<DMatrix<f64>> {
        let (comm, partition) = (self.comm, self.partition);
        let (n_sources, l, c) = (self.n_sources, self.mine.len(), v.ncols());
        check_shape("rows of V vs this rank's rows of G_Q", n_sources * l, v.nrows())?;
        let parts: Vec<DMatrix<f64>> = (0..n_sources).map(|q| v.rows(q * l, l).into_owned()).collect();
        let full = gather_rows(comm, partition, &[], &parts)?.1;
        let products = self.local.products(&parts, &full);
        // To rank s: a failure flag, then its rows of every source's shares.
        let p = comm.size();
        let piece = |s: usize| 1 + n_sources * partition.range(s).len() * c;
        let send_counts: Vec<usize> = (0..p).map(piece).collect();
        let mut send = Vec::with_capacity(send_counts.iter().sum());
        for s in 0..p {
            let rows = partition.range(s);
            match &products {
                Ok((_, shares)) => {
                    // Column by column, the sources' rows stacked: the
                    // column-major order of this rank's rows of G_Q V.
                    send.push(0.0);
                    for j in 0..c {
                        for share in shares {
                            let column = j * share.nrows();
                            send.extend_from_slice(&share.as_slice()[column + rows.start..column + rows.end]);
                        }
                    }
                }
                Err(_) => {
                    send.push(1.0);
                    send.resize(send.len() + piece(s) - 1, 0.0);
                }
            }
        }
        let received = comm.all_to_all_varcount(&send, &send_counts, &vec![piece(comm.rank()); p])?;
        if received.chunks(piece(comm.rank())).any(|from| from[0] != 0.0) {
            return failed_somewhere(comm, products.map(|_| ()));
        }
        let (direct, _) = products?;
        let mut out = DMatrix::zeros(n_sources * l, c);
        for (q, block) in direct.iter().enumerate() {
            out.rows_mut(q * l, l).copy_from(block);
        }
        // The shares in rank order: the same sums on every run.
        for from in received.chunks(piece(comm.rank())) {
            for (o, x) in out.iter_mut().zip(&from[1..]) {
                *o += x;
            }
        }
        Ok(out)
    }
}

/// How a rank forms its products with its rows `K_pq(R_r, :)` of the upper
/// blocks, `p < q` (pairs in row-major order).
enum LocalRows<'a> {
    /// The rows of the upper blocks, stored (the Dense solver).
    Stored(Vec<DMatrix<f64>>),
    /// Evaluated in every product on the CPU: the rank's rows of each
    /// source and the gathered inputs.
    Host { kernel: Kernel, mine: Vec<DMatrix<f64>>, inputs: &'a [DMatrix<f64>] },
    /// Evaluated in every product on a GPU, from the gathered inputs
    /// uploaded once (the rank's rows are views of them), with the scratch
    /// tiles of K of products wider than the fused shader kept for the solve.
    Resident { device: &'a Device, precision: Precision, kernel: Kernel, inputs: Vec<DeviceMatrix>, rows: Range<usize>, tiles: RefCell<crate::gpu::KernelTiles> },
}

impl<'a> LocalRows<'a> {
    /// The stored rows of the upper blocks, built on `device`.
    fn stored(device: &Device, kernel: Kernel, inputs: &[DMatrix<f64>], mine: Range<usize>) -> Result<Self> {
        let n_sources = inputs.len();
        let mut blocks = Vec::with_capacity(n_sources * (n_sources - 1) / 2);
        for p in 0..n_sources {
            let rows = inputs[p].rows(mine.start, mine.len()).into_owned();
            for q in (p + 1)..n_sources {
                blocks.push(if mine.is_empty() { DMatrix::zeros(0, inputs[q].nrows()) } else { device.kernel_matrix(&kernel, &rows, &inputs[q])? });
            }
        }
        Ok(LocalRows::Stored(blocks))
    }

    /// Rows evaluated in every product, on `device`.
    fn evaluated(device: &'a Device, kernel: Kernel, inputs: &'a [DMatrix<f64>], mine: Range<usize>) -> Result<Self> {
        if device.is_gpu() {
            let precision = device.best_precision();
            let inputs = inputs.iter().map(|x| device.upload(x, precision)).collect::<Result<_>>()?;
            return Ok(LocalRows::Resident { device, precision, kernel, inputs, rows: mine, tiles: Default::default() });
        }
        let mine = inputs.iter().map(|x| x.rows(mine.start, mine.len()).into_owned()).collect();
        Ok(LocalRows::Host { kernel, mine, inputs })
    }

    /// `sum_{p<q} ||K_pq(R_r, :)||_F^2` of the stored rows (0 otherwise).
    fn squared_norm(&self) -> f64 {
        match self {
            LocalRows::Stored(blocks) => blocks.iter().map(|b| b.norm_squared()).sum(),
            _ => 0.0,
        }
    }

    /// For this rank's rows `parts[q]` of `V` and `V` in full (`full[q]`,
    /// `N x c`): the rank's rows of each `sum_{q > p} K_pq V_q` (`L x c`)
    /// and its shares `sum_{p < q} K_pq(R_r, :)^T V_p(R_r)` of every row
    /// (`N x c`).
    fn products(&self, parts: &[DMatrix<f64>], full: &[DMatrix<f64>]) -> Result<(Vec<DMatrix<f64>>, Vec<DMatrix<f64>>)> {
        let (n_sources, l, c) = (parts.len(), parts[0].nrows(), parts[0].ncols());
        let mut direct: Vec<DMatrix<f64>> = (0..n_sources).map(|_| DMatrix::zeros(l, c)).collect();
        let mut shares: Vec<DMatrix<f64>> = full.iter().map(|f| DMatrix::zeros(f.nrows(), c)).collect();
        if l == 0 {
            return Ok((direct, shares));
        }
        let pairs = (0..n_sources).flat_map(|p| ((p + 1)..n_sources).map(move |q| (p, q)));
        match self {
            LocalRows::Stored(blocks) => {
                for ((p, q), k) in pairs.zip(blocks) {
                    matmul_acc(&mut direct[p], k, &full[q]);
                    shares[q] += matmul_tn(k, &parts[p]);
                }
            }
            LocalRows::Host { kernel, mine, inputs } => {
                for (p, q) in pairs {
                    let (kv, ktv) = crate::kernel::kernel_matvec_pair_cpu(kernel, &mine[p], &inputs[q], &full[q], &parts[p])?;
                    direct[p] += kv;
                    shares[q] += ktv;
                }
            }
            LocalRows::Resident { device, precision, kernel, inputs, rows, tiles } => {
                let (device, precision) = (*device, *precision);
                let uploaded: Vec<DeviceMatrix> = full.iter().map(|f| device.upload(f, precision)).collect::<Result<_>>()?;
                let direct_out: Vec<DeviceMatrix> = (0..n_sources).map(|_| device.zeros(l, c, precision)).collect::<Result<_>>()?;
                let shares_out: Vec<DeviceMatrix> = full.iter().map(|f| device.zeros(f.nrows(), c, precision)).collect::<Result<_>>()?;
                let mut tiles = tiles.borrow_mut();
                for (p, q) in pairs {
                    let x_p = inputs[p].rows(rows.start, l)?;
                    let v_p = uploaded[p].rows(rows.start, l)?;
                    device.resident_kernel_matvec_pair_reusing(kernel, &x_p, &inputs[q], &uploaded[q], &v_p, &direct_out[p], &shares_out[q], true, &mut tiles)?;
                }
                direct = direct_out.iter().map(|m| device.to_host(m)).collect::<Result<_>>()?;
                shares = shares_out.iter().map(|m| device.to_host(m)).collect::<Result<_>>()?;
            }
        }
        Ok((direct, shares))
    }
}
