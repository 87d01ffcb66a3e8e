//! Incomplete Cholesky, mklaren and the low-rank ridge baselines (ICD,
//! Nystrom, CSI) on rows sharded over ranks
//! ([`crate::distributed`]): the same pivots, factor and model a single
//! process finds on all rows.
//!
//! **What is sharded.** Every rank holds a block of consecutive rows of the
//! samples ([`RowShard`]), and with them its rows of every Cholesky factor
//! `G`, of the residual diagonal `d`, of the kernel columns, of the
//! look-ahead blocks, of the target, the residual and the LAR direction.
//! Small things are on every rank: the pivots, the samples at the pivots,
//! the rows of `G` at the pivots, `H^T H`, the LAR weights and coefficients,
//! and the `K` augmentation rows of the ridge (Zou & Hastie).
//!
//! **A Cholesky step (Eq. 1-3)** on pivot `i`: the pivot is the arg-max of
//! `d` over all rows ([`Communicator::arg_max`], ties to the lower global
//! index, which is the first maximum a single process finds); its owner
//! broadcasts its sample `x_i`, its row `G(i, :)` and `d_i` (one broadcast
//! of `d + t + 1` numbers); every rank computes its rows of the kernel
//! column `k(x_k, x_i)` on its own device and updates its rows of `G` and
//! `d` with the single-process row-wise code, so each row has the bits the
//! single process gives it (on the CPU the kernel column too).
//!
//! **mklaren (Eq. 4-18)** reduces per step: the sums of `r` and `u` with
//! every kernel's `B^T [r u]` (Eq. 15-16) in one sum; the best candidate of
//! each rank (Eq. 11) in one all-gather; the mean and the norm of the new
//! column (Eq. 4-5); `h^T r`, `h^T u` (Eq. 8, 11); `H_A^T h` and `H_A^T r`
//! in one sum; and after a look-ahead block (Eq. 12-13, `delta` Cholesky
//! steps) `B^T B` and `B^T 1` in one sum (Eq. 14). Least squares on `H`
//! (Eq. 18) is a tall-skinny QR: each rank's `R` of `[H_rank | mu_rank]`,
//! gathered and stacked with the augmentation rows, solved once.
//!
//! **CSI** (Bach & Jordan 2005, module `csi`) runs the single-process
//! steps on each rank's rows, its `Q` (the centred orthonormal basis) and
//! residual of the target sharded by rows like `G`. Per step: the
//! look-ahead block `B` (`delta` Cholesky steps, as mklaren's); the column
//! sums of `B`, `B^T B`, `Q^T B`, `B^T r`, `1^T r`, `||r||^2` and `tr(D)` in
//! one sum; the largest prediction denominator (the floor) in one maximum;
//! each rank's best score on its rows, then the best over the ranks by the
//! arg-max with ties to the lower row (the single process's choice); the
//! step on that pivot; then the new column's mean, the two Gram-Schmidt
//! passes `Q^T P g`, and `||(I - Q Q^T) P g||^2` with its product with `r`,
//! one sum each.
//!
//! The arithmetic of a sum over rows changes with the number of ranks (the
//! partial sums are added in one fixed order), so mklaren's scores, and the
//! model's numbers, agree with the single process to rounding (as do CSI's
//! scores); candidates whose scores tie to rounding could be ordered
//! differently.
//!
//! The kernel columns are computed on each rank's device by
//! [`KernelColumns`] against the broadcast pivot sample; the Cholesky
//! update runs on the host (the device-resident decomposition keeps the
//! pivot's row of `G` on the device of its owner only).

use faer::prelude::SolveLstsq;
use nalgebra::{DMatrix, DVector};

use super::columns::{KernelColumns, SharedInput};
use super::csi::{csi_steps, CsiRows};
use super::fitted::{Assembled, Mklaren, SelectedColumn};
use super::icd::{argmax, cholesky_update, CholeskyState, FactorTransform, IcdFactor, IcdParams};
use super::low_rank::{stack, standardised_ridge, LowRankMethod, LowRankRidge, LowRankRidgeParams};
use super::model::{better_candidate, step_length, take_step, Candidate, KernelState, MklarenParams};
use super::tall::{row_quadratic_forms, tall_tr_mul};
use crate::distributed::{agree, gather_vector, Communicator, FitSharded, RowShard, ShardedSupervised};
use crate::error::{Error, Result};
use crate::linalg::{faer_mut, faer_ref};
use crate::precision::WorkingPrecision;
use crate::{Device, Kernel};

/// One kernel on sharded rows: the data of a sharded incomplete Cholesky
/// decomposition ([`IcdParams`]).
#[derive(Debug, Clone)]
pub struct KernelShard {
    /// The kernel.
    pub kernel: Kernel,
    /// This rank's rows of the samples (a rank may hold none).
    pub x: RowShard,
}

/// The error every rank returns when the flag of a collective says that
/// some rank's `pending` local work failed ([`agree`]).
fn failure(comm: &dyn Communicator, pending: Result<()>) -> Error {
    match agree(comm, pending) {
        Err(e) => e,
        Ok(()) => Error::RankFailed { rank: comm.rank(), invalid_input: false, message: "a rank reported a failure".into() },
    }
}

/// The largest residual diagonal over all rows and its global row: this
/// rank's first maximum, then the one of the ranks with ties to the lower
/// row (as [`Communicator::arg_max`]), the choice of a sequential scan of
/// all rows. The outcome of this rank's local work since the last
/// collective (`pending`) travels as a flag beside it: when any rank
/// failed, every rank returns the same error ([`agree`]).
fn global_argmax(comm: &dyn Communicator, diag: &[f64], offset: usize, pending: Result<()>) -> Result<(f64, usize)> {
    let (i, v) = argmax(diag);
    let p = comm.size();
    if p == 1 {
        pending?;
        return Ok((v, offset + i));
    }
    let flag = if pending.is_err() { 1.0 } else { 0.0 };
    let all = comm.all_gather_varcount(&[v, (offset + i) as f64, flag], &vec![3; p])?;
    if all.chunks_exact(3).any(|c| c[2] != 0.0) {
        return Err(failure(comm, pending));
    }
    let mut best = (all[0], all[1] as usize);
    for c in all.chunks_exact(3).skip(1) {
        let (v, i) = (c[0], c[1] as usize);
        if v > best.0 || (v == best.0 && i < best.1) || (best.0.is_nan() && !v.is_nan()) {
            best = (v, i);
        }
    }
    Ok(best)
}

/// [`Communicator::sum`] of `values` with the outcome of this rank's local
/// work since the last collective (`pending`) as a flag beside them: when
/// any rank failed, every rank returns the same error ([`agree`]).
fn sum_checked(comm: &dyn Communicator, values: &mut Vec<f64>, pending: Result<()>) -> Result<()> {
    values.push(if pending.is_err() { 1.0 } else { 0.0 });
    comm.sum(values)?;
    if values.pop() != Some(0.0) {
        return Err(failure(comm, pending));
    }
    Ok(())
}

/// What the owner of a pivot tells every rank: the pivot's sample and its
/// row of `G` (the earlier columns, then `sqrt(d_i)`).
struct PivotRow {
    sample: Vec<f64>,
    g: Vec<f64>,
}

/// One Cholesky step (Eq. 2-3) on global pivot `i` over this rank's rows:
/// the owner broadcasts `[x_i, G(i, previous), d_i]`, every rank computes
/// its rows of `K(:, i)` on its device into `out` and updates `out` and
/// `diag` ([`cholesky_update`]); `local_pivots` gets the pivot's local index
/// on its owner. Collective. The outcome of the local kernel column comes
/// back unshared, for the next collective to carry ([`global_argmax`],
/// [`sum_checked`]).
fn sharded_cholesky_column(
    comm: &dyn Communicator,
    x: &RowShard,
    cols: &KernelColumns<'_>,
    previous: &[&[f64]],
    local_pivots: &mut Vec<usize>,
    diag: &mut [f64],
    i: usize,
    out: &mut [f64],
) -> Result<(PivotRow, Result<()>)> {
    let (owner, li) = x.partition().owner(i).ok_or(Error::IndexOutOfRange { what: "sharded rows", index: i, len: x.total_rows() })?;
    let (d, t) = (x.ncols(), previous.len());
    let mine = owner == comm.rank();
    let mut buf = vec![0.0; d + t + 1];
    if mine {
        for (b, v) in buf.iter_mut().zip(x.local().row(li).iter()) {
            *b = *v;
        }
        for (s, c) in previous.iter().enumerate() {
            buf[d + s] = c[li];
        }
        buf[d + t] = diag[li];
    }
    comm.broadcast(owner, &mut buf)?;
    let z = DMatrix::from_row_slice(1, d, &buf[..d]);
    let column = cols.column_against(&z, out);
    let pivot_value = buf[d + t].max(0.0).sqrt();
    cholesky_update(out, previous, &buf[d..d + t], diag, pivot_value, mine.then_some(li), local_pivots);
    if mine {
        local_pivots.push(li);
    }
    buf[d + t] = pivot_value;
    let g = buf.split_off(d);
    Ok((PivotRow { sample: buf, g }, column))
}

/// The pivots of one decomposition with what every rank knows of them.
#[derive(Default)]
struct PivotLog {
    pivots: Vec<usize>,
    rows: Vec<PivotRow>,
}

impl PivotLog {
    fn push(&mut self, i: usize, row: PivotRow) {
        self.pivots.push(i);
        self.rows.push(row);
    }

    /// The out-of-sample transform (Eq. 21) from the samples and the rows
    /// of `G` at the pivots.
    fn transform(&self, kernel: Kernel, d: usize) -> FactorTransform {
        let j = self.rows.len();
        let samples = DMatrix::from_fn(j, d, |a, c| self.rows[a].sample[c]);
        let l = DMatrix::from_fn(j, j, |a, t| if t <= a { self.rows[a].g[t] } else { 0.0 });
        FactorTransform::from_pivots(kernel, samples, &l)
    }
}

/// The columns of the kernel on this rank's rows (none, or columns of no
/// entries where it holds none), on `device` (a GPU failure on one rank
/// fails every rank).
fn local_columns<'a>(comm: &dyn Communicator, device: &'a Device, kernel: Kernel, x: &'a DMatrix<f64>) -> Result<KernelColumns<'a>> {
    agree(comm, KernelColumns::for_rows(device, kernel, x))
}

/// `n x k` from every rank's column-major `local` (rows x k), in row order.
fn gather_rows(comm: &dyn Communicator, x: &RowShard, local: &[Vec<f64>]) -> Result<DMatrix<f64>> {
    let (nl, k) = (x.local().nrows(), local.len());
    let mut mine = Vec::with_capacity(nl * k);
    for r in 0..nl {
        mine.extend(local.iter().map(|c| c[r]));
    }
    let counts: Vec<usize> = x.partition().counts().iter().map(|c| c * k).collect();
    let all = comm.all_gather_varcount(&mine, &counts)?;
    Ok(DMatrix::from_row_slice(x.total_rows(), k, &all))
}

/// Incomplete Cholesky decomposition `K ~ G G^T` with greedy pivots (Eq.
/// 1-3) of the kernel on the rows of all ranks.
///
/// Sharded: the rows of `G`, of `d` and of each kernel column. Per step:
/// one arg-max of `d` (the pivot, with the agreement on the previous local
/// kernel column) and one broadcast of the pivot's sample, its row of `G`
/// and `d_i`; at
/// the end `G` and `d` are gathered, so every rank holds the
/// [`IcdFactor`] a single process fits on all rows (the same pivots; on
/// the CPU the same bits).
///
/// Errors: those of [`IcdParams::fit`] (the same on every rank),
/// [`Error::ShardMismatch`] when the ranks differ in parameters, kernel or
/// shape, and
/// [`Error::RankFailed`] when one rank's device fails.
impl FitSharded<KernelShard> for IcdParams {
    type Fitted = IcdFactor;

    fn fit_sharded(&self, device: &Device, comm: &dyn Communicator, data: &KernelShard) -> Result<IcdFactor> {
        let x = &data.x;
        let n = x.total_rows();
        comm.check_same("ICD parameters, kernel and shape", &format!("{self:?} {:?} {n} x {}", data.kernel, x.ncols()))?;
        self.validate()?;
        data.kernel.validate()?;
        if self.rank > n {
            return Err(Error::RankTooLarge { rank: self.rank, n });
        }
        let cols = local_columns(comm, device, data.kernel, x.local())?;
        let nl = cols.n();
        let mut state = CholeskyState { columns: Vec::new(), pivots: Vec::new(), diag: cols.diagonal().to_vec() };
        let mut log = PivotLog::default();
        let mut pending = Ok(());
        while state.rank() < self.rank {
            let (best, i) = global_argmax(comm, &state.diag, x.offset(), std::mem::replace(&mut pending, Ok(())))?;
            if !(best > self.tolerance) {
                break;
            }
            let mut g = vec![0.0; nl];
            let previous: Vec<&[f64]> = state.columns.iter().map(|c| c.as_slice()).collect();
            let (row, column) = sharded_cholesky_column(comm, x, &cols, &previous, &mut state.pivots, &mut state.diag, i, &mut g)?;
            pending = column;
            state.columns.push(g);
            log.push(i, row);
        }
        agree(comm, pending)?;
        let factor = gather_rows(comm, x, &state.columns)?;
        let diag = gather_vector(comm, x.partition(), &state.diag)?;
        let transform = log.transform(data.kernel, x.ncols());
        Ok(IcdFactor::from_parts(device, factor, log.pivots, diag, transform))
    }
}

/// Up to `delta` look-ahead columns (Eq. 12-13: plain ICD steps continuing
/// from `chol` without changing it) on this rank's rows, stopping where the
/// largest residual diagonal over all rows falls to `tolerance`: this
/// rank's rows of the block `B`, and the outcome of its last local kernel
/// column for the next collective to carry (`pending` is the outcome of
/// the local work before, carried by the first arg-max). Collective.
fn sharded_lookahead(comm: &dyn Communicator, x: &RowShard, cols: &KernelColumns<'_>, chol: &CholeskyState, delta: usize, tolerance: f64, pending: Result<()>) -> Result<(DMatrix<f64>, Result<()>)> {
    let nl = chol.diag.len();
    let delta = delta.min(x.total_rows());
    let mut diag = chol.diag.clone();
    let mut local_pivots = chol.pivots.clone();
    let mut block = vec![0.0; nl * delta];
    let mut done = 0;
    let mut pending = pending;
    while done < delta {
        let (best, i) = global_argmax(comm, &diag, x.offset(), std::mem::replace(&mut pending, Ok(())))?;
        if !(best > tolerance) {
            break;
        }
        let (before, rest) = block.split_at_mut(done * nl);
        let previous: Vec<&[f64]> = chol.columns.iter().map(|c| c.as_slice()).chain((0..done).map(|t| &before[t * nl..(t + 1) * nl])).collect();
        pending = sharded_cholesky_column(comm, x, cols, &previous, &mut local_pivots, &mut diag, i, &mut rest[..nl])?.1;
        done += 1;
    }
    block.truncate(nl * done);
    Ok((DMatrix::from_vec(nl, done, block), pending))
}

/// Recomputes a kernel's look-ahead block ([`sharded_lookahead`]) on this
/// rank's rows, and the candidate norms (Eq. 14) with `B^T B` and `B^T 1`
/// summed over the ranks.
fn refresh(comm: &dyn Communicator, x: &RowShard, st: &mut KernelState<'_>) -> Result<()> {
    let n = x.total_rows();
    let nl = st.chol.diag.len();
    let (b, pending) = sharded_lookahead(comm, x, &st.cols, &st.chol, st.delta, st.tolerance, Ok(()))?;
    let done = b.ncols();
    let btb = tall_tr_mul(&b, &b);
    let mut sums: Vec<f64> = btb.as_slice().to_vec();
    sums.extend((0..done).map(|t| b.column(t).sum()));
    sum_checked(comm, &mut sums, pending)?;
    let btb = DMatrix::from_column_slice(done, done, &sums[..done * done]);
    let sum = DVector::from_column_slice(&sums[done * done..]);
    let m = btb - &sum * sum.transpose() / n as f64;
    let norm2 = row_quadratic_forms(b.as_slice(), done, nl, &m);
    let mut tops = [norm2.iter().fold(0.0f64, |a, &v| a.max(v)), argmax(&st.chol.diag).1];
    comm.max(&mut tops)?;
    st.norm_floor = 1e-10 * tops[0];
    st.max_diag = tops[1];
    st.block = b;
    st.block_sum = sum;
    st.candidate_norm2 = norm2;
    Ok(())
}

/// `a^T b` over all rows of vectors laid out as this rank's rows (the first
/// `nl`) followed by rows every rank holds (the augmentation): the local
/// parts come summed over the ranks in `reduced`.
fn with_augmentation(reduced: f64, a: &[f64], b: &[f64], nl: usize) -> f64 {
    reduced + a[nl..].iter().zip(&b[nl..]).map(|(x, y)| x * y).sum::<f64>()
}

/// `a^T b` over the first `nl` entries.
fn local_dot(a: &[f64], b: &[f64], nl: usize) -> f64 {
    a[..nl].iter().zip(&b[..nl]).map(|(x, y)| x * y).sum()
}

/// The best `(candidate, kernel)` over the ranks (Eq. 11): each rank's best
/// gathered, then [`better_candidate`], a total order, so every rank picks
/// what a single process picks from the same scores.
fn best_over_ranks(comm: &dyn Communicator, local: Option<(Candidate, usize)>) -> Result<Option<(Candidate, usize)>> {
    let mine = match local {
        Some((c, q)) => [1.0, c.step, c.correlation, c.pivot as f64, q as f64],
        None => [0.0; 5],
    };
    let all = comm.all_gather_varcount(&mine, &vec![5; comm.size()])?;
    Ok(all
        .chunks_exact(5)
        .filter(|c| c[0] == 1.0)
        .map(|c| (Candidate { step: c[1], correlation: c[2], pivot: c[3] as usize }, c[4] as usize))
        .reduce(better_candidate))
}

/// mklaren (Eq. 4-18) on a sharded supervised set, every kernel on the
/// samples: the model a single process fits on all rows
/// ([`MklarenParams::fit`]), on every rank.
///
/// Sharded: the rows of the samples, the target, the residual, the LAR
/// direction, the columns of `H`, and per kernel the rows of `G`, `d` and
/// the look-ahead block. Reduced per step (module docs): the LAR scores'
/// products `B_q^T [r u]` of every kernel with `1^T [r u]` (one sum), each
/// rank's best candidate (one all-gather), the new column's mean and norm
/// (two sums), `h^T r`, `h^T u` (one sum), `H_A^T h` and `H_A^T r` (one sum),
/// plus the Cholesky steps of the exact column and of the look-ahead block
/// of the kernel that took it. The coefficients of Eq. 18 come from a
/// tall-skinny QR (one all-gather of a `(K + 1)^2` triangle per rank).
///
/// Agreement with the single process: the same pivots and kernels while no
/// two candidates' scores tie to rounding; coefficients, fit and
/// predictions to rounding of sums over rows (about `1e-10` relative on
/// well-conditioned problems).
///
/// Errors: those of [`MklarenParams::fit`] (the same on every rank),
/// [`Error::ShardMismatch`] when the ranks differ in parameters or shape,
/// and
/// [`Error::RankFailed`] when one rank's device fails.
impl FitSharded<ShardedSupervised> for MklarenParams {
    type Fitted = Mklaren;

    fn fit_sharded(&self, device: &Device, comm: &dyn Communicator, data: &ShardedSupervised) -> Result<Mklaren> {
        let x = data.x();
        let n = x.total_rows();
        comm.check_same("mklaren parameters and shape", &format!("{self:?} {n} x {}", x.ncols()))?;
        self.validate()?;
        if self.rank > n {
            return Err(Error::RankTooLarge { rank: self.rank, n });
        }
        let nl = x.local().nrows();
        // One target per local row, finite (`ShardedSupervised::new`).
        let y = data.y();
        // Centred target (the checks of the single-process fit).
        let target_mean = comm.sum_scalar(y.sum())? / n as f64;
        let yc = y.map(|v| v - target_mean);
        let largest = |v: &DVector<f64>| v.iter().fold(0.0f64, |m, e| m.max(e.abs()));
        let mut tops = [largest(&yc), largest(y).max(f64::MIN_POSITIVE)];
        comm.max(&mut tops)?;
        if tops[0] <= 1e-12 * tops[1] {
            return Err(Error::ConstantTarget);
        }
        let kernels = &self.kernels;
        let (rank, p) = (self.rank, kernels.len());
        let scale = 1.0 / (1.0 + self.lambda).sqrt();
        let aug = nl + rank;
        let delta = self.lookahead.min(n);

        // Columns of every kernel on this rank's rows (on a GPU the rows go
        // up once).
        let local = x.local();
        let xs = vec![local; p];
        let columns = agree(comm, (|| {
            if nl == 0 {
                return kernels.iter().map(|k| KernelColumns::for_rows(device, *k, local)).collect::<Result<Vec<_>>>();
            }
            let resident = KernelColumns::upload_inputs_in(device, &xs, device.working_precision(self.precision)?)?;
            let shared = SharedInput::for_inputs(&xs.iter().map(|x| super::columns::Rows::Dense(x)).collect::<Vec<_>>(), 0)?;
            (0..p).map(|q| KernelColumns::on_input(device, kernels[q], shared[q].clone(), resident[q].clone())).collect::<Result<Vec<_>>>()
        })())?;
        let mut top: Vec<f64> = columns.iter().map(|c| c.diagonal().iter().fold(0.0f64, |a, &b| a.max(b))).collect();
        comm.max(&mut top)?;
        let mut states = Vec::with_capacity(p);
        for (cols, top) in columns.into_iter().zip(top) {
            let diag = cols.diagonal().to_vec();
            let mut st = KernelState {
                cols,
                chol: CholeskyState { columns: Vec::new(), pivots: Vec::new(), diag },
                delta,
                tolerance: 1e-12 * top,
                block: DMatrix::zeros(0, 0),
                block_sum: DVector::zeros(0),
                candidate_norm2: Vec::new(),
                norm_floor: 0.0,
                max_diag: 0.0,
            };
            refresh(comm, x, &mut st)?;
            states.push(st);
        }
        let mut logs: Vec<PivotLog> = (0..p).map(|_| PivotLog::default()).collect();

        // Vectors of `aug` entries: this rank's rows, then the K rows of
        // the augmentation (the same on every rank).
        let mut residual = DVector::<f64>::zeros(aug);
        residual.rows_mut(0, nl).copy_from(&yc);
        let mut fit = DVector::<f64>::zeros(aug);
        let mut direction = DVector::<f64>::zeros(aug);
        let mut weights = DVector::<f64>::zeros(0);
        let mut h = DMatrix::<f64>::zeros(aug, rank);
        let mut hth = DMatrix::<f64>::zeros(rank, rank);
        let mut beta = DVector::<f64>::zeros(rank);
        let mut path = Vec::with_capacity(rank);
        let mut selected: Vec<SelectedColumn> = Vec::with_capacity(rank);
        let mut active_correlation = 0.0;
        let mut stale: Option<usize> = None;
        for l in 0..rank {
            // (1) Scores (Eq. 12-16) and the LAR choice (Eq. 11).
            if let Some(q) = stale.take() {
                refresh(comm, x, &mut states[q])?;
            }
            let (r, u) = (&residual.as_slice()[..nl], &direction.as_slice()[..nl]);
            let mut products = vec![r.iter().sum::<f64>(), u.iter().sum::<f64>()];
            for st in states.iter().filter(|st| st.has_candidates()) {
                products.extend_from_slice(st.block_products(r, u).as_slice());
            }
            comm.sum(&mut products)?;
            let sums = [products[0], products[1]];
            let active = if l == 0 { None } else { Some(active_correlation) };
            let mut at = 2;
            let mut best: Option<(Candidate, usize)> = None;
            for (q, st) in states.iter().enumerate().filter(|(_, st)| st.has_candidates()) {
                let c = st.block.ncols();
                let mut v = DMatrix::from_column_slice(c, 2, &products[at..at + 2 * c]);
                at += 2 * c;
                st.centre_products(&mut v, sums, n);
                if let Some(mut cand) = st.best_with_products(&v, scale, active) {
                    cand.pivot += x.offset();
                    best = Some(match best {
                        None => (cand, q),
                        Some(b) => better_candidate(b, (cand, q)),
                    });
                }
            }
            let Some((candidate, q)) = best_over_ranks(comm, best)? else {
                return Err(Error::RankDeficient { requested: rank, reached: l });
            };
            // (2) The exact column (Eq. 2-3).
            let st = &mut states[q];
            let mut g = vec![0.0; nl];
            let previous: Vec<&[f64]> = st.chol.columns.iter().map(|c| c.as_slice()).collect();
            let (row, column) = sharded_cholesky_column(comm, x, &st.cols, &previous, &mut st.chol.pivots, &mut st.chol.diag, candidate.pivot, &mut g)?;
            st.chol.columns.push(g);
            logs[q].push(candidate.pivot, row);
            stale = Some(q);
            let g = st.chol.columns.last().expect("just pushed");
            // (3) h (Eq. 4-5, augmented) and the LAR step (Eq. 8, 11).
            let mut total = vec![g.iter().sum::<f64>()];
            sum_checked(comm, &mut total, column)?;
            let mean = total[0] / n as f64;
            let norm = comm.sum_scalar(g.iter().map(|v| (v - mean).powi(2)).sum::<f64>())?.sqrt();
            if !(norm > 0.0 && norm.is_finite()) {
                return Err(Error::RankDeficient { requested: rank, reached: l });
            }
            let mut hcol = DVector::<f64>::zeros(aug);
            for (k, v) in g.iter().enumerate() {
                hcol[k] = (v - mean) / norm * scale;
            }
            hcol[nl + l] = self.lambda.sqrt() * scale;
            if l > 0 {
                let mut dots = [local_dot(hcol.as_slice(), residual.as_slice(), nl), local_dot(hcol.as_slice(), direction.as_slice(), nl)];
                comm.sum(&mut dots)?;
                let c = with_augmentation(dots[0], hcol.as_slice(), residual.as_slice(), nl);
                let a = with_augmentation(dots[1], hcol.as_slice(), direction.as_slice(), nl);
                let t = step_length(active_correlation, c, a).min(1.0);
                take_step(t, &direction, &weights, &mut fit, &mut residual, &mut beta);
                path.push(beta.clone());
            }
            h.set_column(l, &hcol);
            // H_A^T h (h not yet signed), H_A^T r.
            let mut dots: Vec<f64> = (0..=l).map(|k| local_dot(h.column(k).as_slice(), hcol.as_slice(), nl)).collect();
            dots.extend((0..=l).map(|k| local_dot(h.column(k).as_slice(), residual.as_slice(), nl)));
            comm.sum(&mut dots)?;
            let hr = with_augmentation(dots[2 * l + 1], hcol.as_slice(), residual.as_slice(), nl);
            let sign = if hr < 0.0 { -1.0 } else { 1.0 };
            hcol *= sign;
            h.set_column(l, &hcol);
            for k in 0..=l {
                // The local part of h_k^T h flips with the sign unless k = l.
                let local = if k < l { sign * dots[k] } else { dots[k] };
                let cross = with_augmentation(local, h.column(k).as_slice(), hcol.as_slice(), nl);
                hth[(k, l)] = cross;
                hth[(l, k)] = cross;
            }
            let correlations = DVector::from_fn(l + 1, |k, _| if k == l { sign * hr } else { with_augmentation(dots[l + 1 + k], h.column(k).as_slice(), residual.as_slice(), nl) });
            selected.push(SelectedColumn { kernel: q, pivot: candidate.pivot, position: st.chol.columns.len() - 1, mean, norm, sign });
            // New direction: projection of r on span(H_A).
            active_correlation = correlations.amax();
            let chol = hth.view((0, 0), (l + 1, l + 1)).into_owned().cholesky().ok_or(Error::RankDeficient { requested: rank, reached: l })?;
            weights = chol.solve(&correlations);
            direction = h.columns(0, l + 1) * &weights;
        }
        take_step(1.0, &direction, &weights, &mut fit, &mut residual, &mut beta);
        path.push(beta.clone());

        // Eq. 18 by a tall-skinny QR: the R of each rank's rows of
        // [H | mu] (padded to K + 1 rows), stacked over the ranks with the
        // augmentation rows, then least squares on the stack.
        let width = rank + 1;
        let mut mine = DMatrix::<f64>::zeros(nl, width);
        mine.view_mut((0, 0), (nl, rank)).copy_from(&h.rows(0, nl));
        mine.column_mut(rank).copy_from(&fit.rows(0, nl));
        let r_local = if nl == 0 { DMatrix::zeros(0, width) } else { mine.qr().r() };
        let mut padded = DMatrix::<f64>::zeros(width, width);
        padded.view_mut((0, 0), (r_local.nrows(), width)).copy_from(&r_local);
        let stacked = comm.all_gather_varcount(padded.as_slice(), &vec![width * width; comm.size()])?;
        let ranks = comm.size();
        let mut system = DMatrix::<f64>::zeros(ranks * width + rank, width);
        for (s, block) in stacked.chunks_exact(width * width).enumerate() {
            system.view_mut((s * width, 0), (width, width)).copy_from(&DMatrix::from_column_slice(width, width, block));
        }
        system.view_mut((ranks * width, 0), (rank, rank)).copy_from(&h.rows(nl, rank));
        system.view_mut((ranks * width, rank), (rank, 1)).copy_from(&fit.rows(nl, rank));
        let lhs = system.columns(0, rank).into_owned();
        let mut rhs = system.columns(rank, 1).into_owned();
        faer_ref(&lhs).qr().solve_lstsq_in_place(faer_mut(&mut rhs));
        crate::linalg::clear_upper_simd_state(true);
        let coefficients = DVector::from_fn(rank, |i, _| rhs[(i, 0)]);
        let mut kernel_weights: Vec<f64> = (0..p)
            .map(|q| {
                let mut contribution = DVector::<f64>::zeros(nl);
                for (l, _) in selected.iter().enumerate().filter(|(_, s)| s.kernel == q) {
                    contribution.axpy(coefficients[l], &h.column(l).rows(0, nl), 1.0);
                }
                contribution.norm_squared()
            })
            .collect();
        comm.sum(&mut kernel_weights)?;
        let kernel_weights = DVector::from_iterator(p, kernel_weights.into_iter().map(f64::sqrt));
        let transforms = kernels.iter().zip(&logs).map(|(k, log)| log.transform(*k, x.ncols())).collect();
        // The coefficients are the same on every rank and the fit is gathered
        // to all, so a non-finite value fails every rank alike.
        let fit = gather_vector(comm, x.partition(), &fit.as_slice()[..nl])?;
        Mklaren::from_parts(device, kernels, Assembled { transforms, selected, coefficients, kernel_weights, fit, path }, target_mean, scale)
    }
}

/// CSI's rows ([`CsiRows`]) on this rank: its rows of `G`, `d` and the
/// kernel columns, the pivots' log, and the outcome of the local work not
/// yet carried by a collective. The look-ahead and the steps are
/// [`sharded_lookahead`] and [`sharded_cholesky_column`]; the sums and
/// maxima carry the outcome as a flag, so a failure on one rank fails
/// every rank alike.
struct CsiShard<'c, 'a> {
    comm: &'c dyn Communicator,
    x: &'c RowShard,
    cols: KernelColumns<'a>,
    chol: CholeskyState,
    log: PivotLog,
    pending: Result<()>,
}

impl CsiShard<'_, '_> {
    fn take_pending(&mut self) -> Result<()> {
        std::mem::replace(&mut self.pending, Ok(()))
    }
}

impl CsiRows for CsiShard<'_, '_> {
    fn total_rows(&self) -> usize {
        self.x.total_rows()
    }

    fn diag(&self) -> &[f64] {
        &self.chol.diag
    }

    fn lookahead(&mut self, delta: usize, tolerance: f64) -> Result<DMatrix<f64>> {
        let pending = self.take_pending();
        let (b, pending) = sharded_lookahead(self.comm, self.x, &self.cols, &self.chol, delta, tolerance, pending)?;
        self.pending = pending;
        Ok(b)
    }

    fn step(&mut self, pivot: usize) -> Result<Vec<f64>> {
        let mut g = vec![0.0; self.chol.diag.len()];
        let previous: Vec<&[f64]> = self.chol.columns.iter().map(|c| c.as_slice()).collect();
        let (row, column) = sharded_cholesky_column(self.comm, self.x, &self.cols, &previous, &mut self.chol.pivots, &mut self.chol.diag, pivot, &mut g)?;
        let earlier = self.take_pending();
        self.pending = earlier.and(column);
        self.chol.columns.push(g.clone());
        self.log.push(pivot, row);
        Ok(g)
    }

    fn sum(&mut self, values: &mut Vec<f64>) -> Result<()> {
        let pending = self.take_pending();
        sum_checked(self.comm, values, pending)
    }

    fn max(&mut self, values: &mut Vec<f64>) -> Result<()> {
        let pending = self.take_pending();
        values.push(if pending.is_err() { 1.0 } else { 0.0 });
        self.comm.max(values)?;
        if values.pop() != Some(0.0) {
            return Err(failure(self.comm, pending));
        }
        Ok(())
    }

    fn best(&mut self, local: Option<(f64, usize)>) -> Result<Option<usize>> {
        let pending = self.take_pending();
        let (scores, row) = match local {
            Some((score, i)) => (vec![score], i),
            None => (Vec::new(), 0),
        };
        let (score, pivot) = global_argmax(self.comm, &scores, self.x.offset() + row, pending)?;
        Ok((score > f64::NEG_INFINITY).then_some(pivot))
    }
}

/// CSI (Bach & Jordan 2005, module `csi`) of one kernel on this rank's
/// rows, with the centred target `yc` on them: this rank's rows of `G` and
/// the out-of-sample transform (Eq. 21), the same on every rank.
#[allow(clippy::too_many_arguments)]
fn csi_sharded(comm: &dyn Communicator, device: &Device, x: &RowShard, kernel: Kernel, precision: WorkingPrecision, yc: &DVector<f64>, rank: usize, lookahead: usize, kappa: f64) -> Result<(DMatrix<f64>, FactorTransform)> {
    let local = x.local();
    let cols = agree(comm, (|| if local.nrows() == 0 { KernelColumns::for_rows(device, kernel, local) } else { KernelColumns::new_in(device, kernel, local, device.working_precision(precision)?) })())?;
    let chol = CholeskyState { columns: Vec::new(), pivots: Vec::new(), diag: cols.diagonal().to_vec() };
    let mut rows = CsiShard { comm, x, cols, chol, log: PivotLog::default(), pending: Ok(()) };
    csi_steps(&mut rows, yc, rank, lookahead.min(x.total_rows()), kappa)?;
    agree(comm, rows.take_pending())?;
    Ok((rows.chol.factor(), rows.log.transform(kernel, x.ncols())))
}

/// The target's mean over all ranks and this rank's centred block; a
/// target constant to rounding is [`Error::ConstantTarget`] on every rank
/// (the test of the single-process fit, on the reduced extremes).
fn centred_target_sharded(comm: &dyn Communicator, y: &DVector<f64>, n: usize) -> Result<(DVector<f64>, f64)> {
    let mean = comm.sum_scalar(y.sum())? / n as f64;
    let centred = y.map(|v| v - mean);
    let mut extremes = [centred.amax(), y.amax()];
    comm.max(&mut extremes)?;
    if extremes[0] <= 1e-12 * extremes[1].max(f64::MIN_POSITIVE) {
        return Err(Error::ConstantTarget);
    }
    Ok((centred, mean))
}

/// The stacked low-rank ridge baselines on sharded rows: each kernel's
/// factor as the single process builds it, this rank's rows kept (ICD:
/// the sharded decomposition above; Nystrom: the landmarks drawn over all
/// `n` rows as one process draws them, their samples gathered, `K(A, A)`
/// from rank 0's device broadcast and the map `T = K(A, A)^{-1/2}` computed
/// by every rank, this rank's `K(X_r, A) T` on its device; CSI: the
/// single-process steps of CSI (Bach & Jordan 2005) on this rank's rows,
/// as the module docs say), then the standardised ridge system with its
/// column sums, norms, `F^T F` and `F^T y` summed over the ranks.
///
/// Agreement with the single process: ICD and Nystrom give the same
/// factors (on the CPU the same bits). CSI gives the same pivots, and so on
/// the CPU the same factor bits, while no two candidates' scores tie to
/// rounding (its scores' sums over rows are added in rank order; on one
/// rank the whole fit has the single process's bits); where scores tie
/// exactly (look-ahead 1 with `kappa = 0`, or a residual kernel of rank 1,
/// whose candidates all score the same) rounding picks the pivot, on one
/// process as on several. Coefficients and predictions agree to rounding
/// of the sums over rows (about `1e-10` on well-conditioned problems).
impl FitSharded<ShardedSupervised> for LowRankRidgeParams {
    type Fitted = LowRankRidge;

    fn fit_sharded(&self, device: &Device, comm: &dyn Communicator, data: &ShardedSupervised) -> Result<LowRankRidge> {
        let x = data.x();
        let n = x.total_rows();
        comm.check_same("low-rank ridge parameters and shape", &format!("{self:?} {n} x {}", x.ncols()))?;
        self.validate()?;
        let (method, rank) = self.method_and_rank();
        if rank > n {
            return Err(Error::RankTooLarge { rank, n });
        }
        let (yc, target_mean) = centred_target_sharded(comm, data.y(), n)?;
        let (offset, nl) = (x.offset(), x.local().nrows());
        let mut factors = Vec::with_capacity(self.kernel_list().len());
        let mut transforms = Vec::with_capacity(self.kernel_list().len());
        for (q, kernel) in self.kernel_list().iter().enumerate() {
            match method {
                LowRankMethod::Icd => {
                    let f = IcdParams::new(rank).fit_sharded(device, comm, &KernelShard { kernel: *kernel, x: x.clone() })?;
                    factors.push(f.factor().rows(offset, nl).into_owned());
                    transforms.push(f.transform().clone());
                }
                LowRankMethod::Nystrom { seed } => {
                    let landmarks = crate::nystrom::landmark_indices(n, rank, seed.wrapping_add(q as u64))?;
                    let pivot_rows = x.rows(comm, &landmarks)?;
                    // K(A, A) from rank 0's device (in its precision, as one
                    // process computes it there), the same bits on every rank.
                    let local = if comm.rank() == 0 { device.kernel_matrix(kernel, &pivot_rows, &pivot_rows) } else { Ok(DMatrix::zeros(rank, rank)) };
                    let mut w = agree(comm, local)?;
                    comm.broadcast(0, w.as_mut_slice())?;
                    let w = DMatrix::from_fn(rank, rank, |a, b| 0.5 * (w[(a, b)] + w[(b, a)]));
                    let map = crate::nystrom::NystromMap::eigen(&w, 1e-12, None)?;
                    if map.rank() == 0 {
                        return Err(Error::RankDeficient { requested: rank, reached: 0 });
                    }
                    let map = map.into_matrix();
                    let local = if nl == 0 { Ok(DMatrix::zeros(0, rank)) } else { device.kernel_matrix(kernel, x.local(), &pivot_rows) };
                    let c = agree(comm, local)?;
                    factors.push(crate::linalg::matmul(&c, &map));
                    transforms.push(FactorTransform::new(*kernel, pivot_rows, map));
                }
                LowRankMethod::Csi { lookahead, kappa } => {
                    let (g, transform) = csi_sharded(comm, device, x, *kernel, self.precision_setting(), &yc, rank, lookahead, kappa)?;
                    factors.push(g);
                    transforms.push(transform);
                }
            }
        }
        let mut stacked = stack(&factors, nl);
        let (means, scales, coefficients) = standardised_ridge(device, comm, &mut stacked, &yc, n, self.lambda_value())?;
        let local_fit = (&stacked * &coefficients).add_scalar(target_mean);
        let training_fit = gather_vector(comm, x.partition(), local_fit.as_slice())?;
        Ok(LowRankRidge::from_parts(device, self.kernel_list().to_vec(), transforms, means, scales, coefficients, target_mean, training_fit))
    }
}
