//! The mklaren algorithm: LAR-guided simultaneous incomplete Cholesky
//! decomposition of several kernels (Eq. 4-21).

use nalgebra::{DMatrix, DVector};
use rayon::prelude::*;

use super::columns::{KernelColumns, Rows, SharedInput};
use crate::input::{AsMatrix, AsVector};
use crate::error::Error;
use super::fitted::{Mklaren, SelectedColumn};
use super::icd::{argmax, CholeskyState};
use super::tall::{columns_of, row_chunks, row_quadratic_forms, tall_tr_mul, tall_tr_mul_cols};
use super::{centred_target, check_lambda, rows_per_kernel};
use crate::precision::WorkingPrecision;
use crate::{Device, Kernel};

/// Parameters of mklaren: total rank K, look-ahead delta, ridge lambda.
#[derive(Debug, Clone, PartialEq)]
pub struct MklarenParams {
    pub(super) kernels: Vec<Kernel>,
    pub(super) rank: usize,
    pub(super) lookahead: usize,
    pub(super) lambda: f64,
    pub(super) precision: WorkingPrecision,
}

impl MklarenParams {
    /// Total rank `K` (number of pivot columns over all kernels), valid in
    /// `1..=n` for n samples (checked at fit: 0 is `InvalidParameter`, above
    /// n `RankTooLarge`); defaults:
    /// look-ahead `delta = 10`, `lambda = 0` (plain least squares at the end
    /// of the path).
    pub fn new(rank: usize) -> Self {
        MklarenParams { kernels: Vec::new(), rank, lookahead: 10, lambda: 0.0, precision: WorkingPrecision::Auto }
    }

    /// The working precision of the fit on a GPU
    /// ([`Device::working_precision`]): `Auto` and `F64` hold the inputs in
    /// `f64` where the adapter has it and run every O(n) part of a pivot
    /// step on the device (look-ahead, scores, Cholesky column, LAR update;
    /// one blocking wait per step, see [`MklarenParams::fit_inputs`]); `F32`
    /// computes the kernel columns in `f32` and reads them back for the host
    /// steps (`F64` on an adapter without `SHADER_F64` is
    /// [`Error::Unsupported`] at fit). On the CPU the fit is `f64` whatever
    /// the setting.
    pub fn precision(mut self, precision: WorkingPrecision) -> Self {
        self.precision = precision;
        self
    }

    /// The working precision set ([`MklarenParams::precision`]).
    pub fn precision_setting(&self) -> WorkingPrecision {
        self.precision
    }

    /// The kernels `k_1 .. k_p` (at least one; checked at fit), each on
    /// the shared input or on its own input ([`MklarenParams::fit_inputs`]).
    pub fn kernels(mut self, kernels: &[Kernel]) -> Self {
        self.kernels = kernels.to_vec();
        self
    }

    /// The kernels.
    pub fn kernel_list(&self) -> &[Kernel] {
        &self.kernels
    }

    /// Number of look-ahead columns `delta >= 1` per kernel (Eq. 12). A
    /// kernel on n samples has at most n look-ahead columns, so values above
    /// n (up to `usize::MAX`) act as n.
    pub fn lookahead(mut self, delta: usize) -> Self {
        self.lookahead = delta;
        self
    }

    /// Ridge parameter `lambda`, finite and `>= 0`, applied through the augmentation of
    /// Zou & Hastie: every column `h` becomes `(1 + lambda)^{-1/2} [h ;
    /// sqrt(lambda) e_l]` and the residual carries K zeros below `y`.
    pub fn lambda(mut self, lambda: f64) -> Self {
        self.lambda = lambda;
        self
    }

    /// Checks the parameters (the data, and the rank against the number of
    /// samples, are checked by `fit`); `fit` calls it first.
    ///
    /// Errors, [`Error::InvalidParameter`] unless noted: no kernel, an
    /// invalid kernel (the error of [`Kernel::validate`]), `rank == 0`,
    /// `lookahead == 0`, a `lambda` not finite and `>= 0`.
    pub fn validate(&self) -> Result<(), Error> {
        super::check_kernels(&self.kernels)?;
        if self.rank == 0 {
            return Err(Error::InvalidParameter { name: "rank", reason: "must be >= 1".into() });
        }
        if self.lookahead == 0 {
            return Err(Error::InvalidParameter { name: "lookahead", reason: "must be >= 1".into() });
        }
        check_lambda(self.lambda)
    }

    /// Fits on `data`: every kernel on the shared input `data.x`, target
    /// `data.y` ([`MklarenParams::fit_inputs`] for one input per kernel).
    pub fn fit(&self, device: &Device, data: &crate::estimator::Supervised) -> Result<Mklaren, Error> {
        self.fit_inputs(device, &[&data.x], &data.y)
    }

    /// Fits mklaren to `y` with the kernels of [`MklarenParams::kernels`] on `inputs` (one matrix
    /// shared by all kernels, or one per kernel; rows are samples).
    ///
    /// Each of the K iterations: (1) scores every candidate pivot `i` of
    /// every kernel `q` with the look-ahead approximation of its column
    /// (Eq. 12-16, O(delta^2) per candidate once the per-kernel products are
    /// formed) and picks the LAR step minimiser (Eq. 11); (2) computes the
    /// exact column by a Cholesky step (Eq. 2) and recomputes that kernel's
    /// look-ahead block by plain ICD; (3) takes the LAR step (Eq. 8) with the
    /// exact correlation of the new column `h` (Eq. 4-5). After the K-th
    /// column the step `gamma = C / A` reaches the (ridge) least-squares fit;
    /// the coefficients come from the thin QR of `H` (Eq. 18).
    ///
    /// The LAR direction is the projection of the residual on the active
    /// columns, `u ~ H_A (H_A^T H_A)^{-1} H_A^T r`, which is the equiangular
    /// bisector `H_A G_A^{-1} 1` of Eq. 6-7 when the active correlations are
    /// equal, as LAR keeps them; the step is `mu += t u`, `t` in [0, 1], where
    /// `t = 1` is the least-squares fit on the active columns.
    ///
    /// On a GPU in `f64` (with look-ahead delta <= 128, delta + 1 + K <= 256
    /// and every buffer in one binding) the whole step runs on the device and the host waits once
    /// per step for O(K) numbers: the pivots of the look-ahead, the
    /// candidates' scores and their arg-min over the kernels, the exact
    /// Cholesky column and the LAR update never leave it; the host solves
    /// the (l x l) system of the LAR weights and sends them back (K + 1
    /// numbers); `H`, the fit and each kernel's factor rows at its pivots
    /// come down once at the end. The sums are the host fit's terms in
    /// another order (about 1e-16 relative), so the kernels and pivots are
    /// the host fit's unless two candidates tie to within that. Memory on the device
    /// is O(n (d + K + p (delta + K))), with `nnz(X)` in place of `n d` for a
    /// sparse input. Sparse inputs (at most 16383 non-zeros a row) take this
    /// path too: X goes up once as its CSR arrays with its squared row norms,
    /// and a kernel column is one dispatch that merges each row's non-zeros
    /// with the pivot's.
    ///
    /// Elsewhere kernel columns are computed on `device` (one column at a
    /// time; never a full kernel matrix; on a GPU in `f32` the last
    /// delta + 1 columns of each kernel are cached, since the look-ahead
    /// block is mostly recomputed on the same pivots). Memory is
    /// O(n (d + K + p delta)).
    ///
    /// On the host every O(n) part of a step is a few blocked passes over row chunks,
    /// the chunks in parallel: one fused pass per Cholesky column (Eq. 2-3:
    /// combination of the earlier columns, scaling, residual diagonal and the
    /// next greedy pivot of the look-ahead), one for the look-ahead Gram
    /// matrix `B^T B` and one for the candidate norms `z_i^T M z_i`
    /// (Eq. 14), and two per kernel for the scores (Eq. 15-16: `B^T [r u]`,
    /// then `B v` row chunk by row chunk with the LAR step of Eq. 11 and the
    /// running best, no per-candidate array); the kernels are scored, and
    /// their first look-ahead blocks computed, in parallel, and the
    /// look-ahead block of the kernel that took the last step is recomputed
    /// while the other kernels are scored (the choice is the same: ties go
    /// to the lower kernel index however the work is split). The fit runs
    /// on a worker of rayon's pool, so a pass of a single chunk runs inline.
    ///
    /// Sparse inputs (CSR, [`AsMatrix::as_csr`]) are never densified: their
    /// kernel columns and diagonals come from sparse inner products, on the
    /// device in the device fit above, and on the CPU wherever the host path
    /// fits (a CPU, a GPU in `f32`, or a row beyond the device's loop
    /// budget: every step then runs on the host, as on [`Device::Cpu`]; the
    /// model keeps `device` for its predictions of dense rows). See the
    /// [module](super) for the cost.
    ///
    /// Errors: invalid parameters, rank above n, inputs that disagree on n,
    /// NaN/Inf inputs or target, constant target, and
    /// [`Error::RankDeficient`] when the kernels run out of
    /// independent columns before K.
    pub fn fit_inputs<X, Y>(&self, device: &Device, inputs: &[&X], y: &Y) -> Result<Mklaren, Error>
    where
        X: AsMatrix<Elem = f64> + ?Sized,
        Y: AsVector<Elem = f64> + ?Sized,
    {
        let converted = super::convert_inputs(inputs)?;
        let inputs: Vec<Rows<'_>> = converted.iter().map(|x| x.rows()).collect();
        let y = y.as_vector()?;
        // On a worker of the thread pool, the many short parallel passes of
        // a step run inline when they are a single chunk instead of each
        // waking a worker and waiting for it.
        rayon::scope(|_| self.fit_on_pool(device, &inputs, &y))
    }

    fn fit_on_pool(&self, device: &Device, inputs: &[Rows<'_>], y: &DVector<f64>) -> Result<Mklaren, Error> {
        self.validate()?;
        let kernels: &[Kernel] = &self.kernels;
        let xs = rows_per_kernel(kernels, inputs, None)?;
        let n = xs[0].nrows();
        if self.rank > n {
            return Err(Error::RankTooLarge { rank: self.rank, n });
        }
        let (yc, target_mean) = centred_target(y, n)?;
        let rank = self.rank;
        let scale = 1.0 / (1.0 + self.lambda).sqrt();
        let aug = n + rank;
        // On a GPU with `f64`: every O(n) part of a step on the device,
        // dense and sparse inputs alike.
        if let Some(model) = super::device::fit(&super::device::Settings { kernels: &self.kernels, rank: self.rank, lookahead: self.lookahead, lambda: self.lambda, precision: self.precision }, device, &xs, &yc, target_mean)? {
            return Ok(model);
        }
        // The host path. Dense inputs only go up to a GPU (the kernel
        // columns of sparse ones are computed on the CPU).
        let dense: Option<Vec<&DMatrix<f64>>> = xs.iter().map(Rows::dense).collect();

        // On a GPU each distinct input goes up once for the whole fit; the
        // columns of sparse inputs are computed on the CPU (as on
        // `Device::Cpu`, with the shared statistic columns cached).
        let on_device = device.is_gpu() && dense.is_some();
        let resident = match &dense {
            Some(dense) => KernelColumns::upload_inputs_in(device, dense, device.working_precision(self.precision)?)?,
            None => vec![None; xs.len()],
        };
        // At most n look-ahead columns exist: clamp before the `+ 1`.
        let delta = self.lookahead.min(n);
        // Each distinct input's norms once, and on the CPU its statistic
        // columns shared by the kernels on it (delta + 1 per kernel: the
        // look-ahead is mostly recomputed on the same pivots, and kernels
        // on one input mostly pick the same pivots); on a GPU each kernel
        // caches its own delta + 1 columns.
        let shared = SharedInput::for_inputs(&xs, if on_device { 0 } else { delta + 1 })?;
        let own_cache = if on_device { delta + 1 } else { 0 };
        // The kernels' first look-ahead blocks, in parallel.
        let mut states = kernels
            .par_iter()
            .enumerate()
            .map(|(q, kernel)| {
                let cols = KernelColumns::on_input(device, *kernel, shared[q].clone(), resident[q].clone())?;
                KernelState::new(cols.with_cache(own_cache), delta)
            })
            .collect::<Result<Vec<_>, Error>>()?;

        let mut residual = DVector::<f64>::zeros(aug);
        residual.rows_mut(0, n).copy_from(&yc);
        let mut fit = DVector::<f64>::zeros(aug);
        let mut direction = DVector::<f64>::zeros(aug);
        let mut weights = DVector::<f64>::zeros(0);
        let mut h = DMatrix::<f64>::zeros(aug, rank);
        let mut hth = DMatrix::<f64>::zeros(rank, rank);
        let mut beta = DVector::<f64>::zeros(rank);
        let mut path = Vec::with_capacity(rank);
        let mut selected: Vec<SelectedColumn> = Vec::with_capacity(rank);
        let mut active_correlation = 0.0;

        // The kernel whose look-ahead block is out of date (the one that
        // took the last step).
        let mut stale: Option<usize> = None;
        for l in 0..rank {
            // (1) Kernel and pivot by LAR on approximated columns, the
            // kernels in parallel; the look-ahead block of the kernel that
            // took the last step is recomputed (Eq. 12-13) beside the
            // scoring of the others.
            let (r, u) = (&residual.as_slice()[..n], &direction.as_slice()[..n]);
            let sums = [r.iter().sum::<f64>(), u.iter().sum::<f64>()];
            let active = if l == 0 { None } else { Some(active_correlation) };
            let best = match stale.take() {
                None => best_candidate_of(states.par_iter().enumerate(), r, u, sums, scale, active),
                Some(q) => {
                    let (before, rest) = states.split_at_mut(q);
                    let (st, after) = rest.split_first_mut().expect("the stale kernel is one of the states");
                    let (own, others) = rayon::join(
                        || -> Result<Option<(Candidate, usize)>, Error> {
                            st.refresh()?;
                            Ok(st.best_candidate(r, u, sums, scale, active).map(|c| (c, q)))
                        },
                        || {
                            let others = before.par_iter().enumerate().chain(after.par_iter().enumerate().map(|(i, st)| (q + 1 + i, st)));
                            best_candidate_of(others, r, u, sums, scale, active)
                        },
                    );
                    own?.into_iter().chain(others).reduce(better_candidate)
                }
            };
            let Some((candidate, q)) = best else {
                return Err(Error::RankDeficient { requested: rank, reached: l });
            };
            // (2) Exact Cholesky step; the look-ahead block is recomputed at
            // the start of the next step (not at all after the last).
            let st = &mut states[q];
            let g = st.chol.step(&st.cols, candidate.pivot)?.to_vec();
            stale = Some(q);
            // (3) Exact h (Eq. 4-5, augmented) and the LAR step (Eq. 8, 11).
            let mean = g.iter().sum::<f64>() / n as f64;
            let norm = g.iter().map(|v| (v - mean).powi(2)).sum::<f64>().sqrt();
            if !(norm > 0.0 && norm.is_finite()) {
                return Err(Error::RankDeficient { requested: rank, reached: l });
            }
            let mut hcol = DVector::<f64>::zeros(aug);
            for (k, v) in g.iter().enumerate() {
                hcol[k] = (v - mean) / norm * scale;
            }
            hcol[n + l] = self.lambda.sqrt() * scale;
            if l > 0 {
                let t = step_length(active_correlation, hcol.dot(&residual), hcol.dot(&direction)).min(1.0);
                take_step(t, &direction, &weights, &mut fit, &mut residual, &mut beta);
                path.push(beta.clone());
            }
            let sign = if hcol.dot(&residual) < 0.0 { -1.0 } else { 1.0 };
            hcol *= sign;
            h.set_column(l, &hcol);
            // O(n l) products of the LAR bookkeeping in nalgebra's order of
            // summation (the pivots of near-tied candidates depend on it).
            let active_h = h.columns(0, l + 1);
            let cross = active_h.tr_mul(&hcol);
            for k in 0..=l {
                hth[(k, l)] = cross[k];
                hth[(l, k)] = cross[k];
            }
            selected.push(SelectedColumn { kernel: q, pivot: candidate.pivot, position: st.chol.rank() - 1, mean, norm, sign });
            // New direction: projection of r on span(H_A).
            let correlations = active_h.tr_mul(&residual);
            active_correlation = correlations.amax();
            let chol = hth.view((0, 0), (l + 1, l + 1)).into_owned().cholesky().ok_or(Error::RankDeficient { requested: rank, reached: l })?;
            weights = chol.solve(&correlations);
            direction = active_h * &weights;
        }
        // Last step: gamma = C / A, the least-squares fit (t = 1).
        take_step(1.0, &direction, &weights, &mut fit, &mut residual, &mut beta);
        path.push(beta.clone());

        let computed: Vec<usize> = states.iter().map(|st| st.cols.computed()).collect();
        let passes: usize = (0..shared.len()).filter(|&q| (0..q).all(|p| !std::sync::Arc::ptr_eq(&shared[p], &shared[q]))).map(|q| shared[q].passes()).sum();
        log::debug!(
            "mklaren: n = {n}, rank {rank}: kernel columns computed per kernel {computed:?} (total {}), passes over the inputs {passes}",
            computed.iter().sum::<usize>()
        );
        let transforms = states.iter().map(|st| st.chol.transform(st.cols.kernel(), st.cols.rows())).collect::<Result<Vec<_>, Error>>()?;
        Mklaren::assemble(device, kernels, transforms, selected, &h, &fit, path, target_mean, scale)
    }
}

/// The better of two `(candidate, kernel)` pairs ([`Candidate::better_than`],
/// then the lower kernel index): a total order, so the best of a parallel
/// reduction does not depend on how it was split.
pub(super) fn better_candidate(a: (Candidate, usize), b: (Candidate, usize)) -> (Candidate, usize) {
    if b.0.better_than(&a.0) || (!a.0.better_than(&b.0) && b.1 < a.1) {
        b
    } else {
        a
    }
}

/// The best candidate (Eq. 11) over the `(kernel index, state)` pairs of
/// `states`, scored in parallel.
fn best_candidate_of<'s, 'a: 's>(
    states: impl ParallelIterator<Item = (usize, &'s KernelState<'a>)>,
    r: &[f64],
    u: &[f64],
    sums: [f64; 2],
    scale: f64,
    active: Option<f64>,
) -> Option<(Candidate, usize)> {
    states.filter_map(|(q, st)| st.best_candidate(r, u, sums, scale, active).map(|c| (c, q))).reduce_with(better_candidate)
}

pub(super) fn take_step(t: f64, direction: &DVector<f64>, weights: &DVector<f64>, fit: &mut DVector<f64>, residual: &mut DVector<f64>, beta: &mut DVector<f64>) {
    fit.axpy(t, direction, 1.0);
    residual.axpy(-t, direction, 1.0);
    for (b, w) in beta.iter_mut().zip(weights.iter()) {
        *b += t * w;
    }
}

/// The LAR step (Eq. 11) in units of the direction `u`, where `t = 1` is
/// least squares on the active set: the smallest positive `t` at which
/// `|c - t a| = (1 - t) C` (`C`: the active correlation, `c = h^T r`,
/// `a = h^T u`). A column already as correlated as the active set gets `t =
/// 0`; none positive gives infinity.
pub(crate) fn step_length(active: f64, c: f64, a: f64) -> f64 {
    if c.abs() >= active {
        return 0.0;
    }
    let mut t = f64::INFINITY;
    for (num, den) in [(active - c, active - a), (active + c, active + a)] {
        if den > 0.0 {
            let v = num / den;
            if v > 0.0 && v < t {
                t = v;
            }
        }
    }
    t
}

/// A scored candidate pivot.
#[derive(Debug, Clone, Copy)]
pub(super) struct Candidate {
    pub(super) step: f64,
    pub(super) correlation: f64,
    pub(super) pivot: usize,
}

impl Candidate {
    /// Smaller LAR step first, then larger |correlation|, then lower index.
    pub(super) fn better_than(&self, other: &Candidate) -> bool {
        (self.step, -self.correlation, self.pivot) < (other.step, -other.correlation, other.pivot)
    }
}

/// One kernel's decomposition with its look-ahead block.
///
/// In a sharded fit the rows are this rank's: `cols`, `chol.columns`,
/// `chol.diag`, `block` and `candidate_norm2` hold its rows (`chol.pivots`
/// the local indices of the pivots it holds), and `block_sum`, `norm_floor`,
/// `max_diag` and `tolerance` are over all rows.
pub(super) struct KernelState<'a> {
    pub(super) cols: KernelColumns<'a>,
    pub(super) chol: CholeskyState,
    pub(super) delta: usize,
    pub(super) tolerance: f64,
    /// Look-ahead block `B` (n x delta').
    pub(super) block: DMatrix<f64>,
    /// `B^T 1`.
    pub(super) block_sum: DVector<f64>,
    /// `||P B z_i||^2 = z_i^T (B^T B - B^T 1 1^T B / n) z_i` for `z_i = B(i, :)^T` (Eq. 14).
    pub(super) candidate_norm2: Vec<f64>,
    pub(super) norm_floor: f64,
    /// `max_i d_i` of the decomposition (none left to pick when at the tolerance).
    pub(super) max_diag: f64,
}

impl<'a> KernelState<'a> {
    fn new(cols: KernelColumns<'a>, delta: usize) -> Result<Self, Error> {
        let top = cols.diagonal().iter().fold(0.0f64, |a, &b| a.max(b));
        let chol = CholeskyState::new(&cols);
        let mut st = KernelState {
            cols,
            chol,
            delta,
            tolerance: 1e-12 * top,
            block: DMatrix::zeros(0, 0),
            block_sum: DVector::zeros(0),
            candidate_norm2: Vec::new(),
            norm_floor: 0.0,
            max_diag: 0.0,
        };
        st.refresh()?;
        Ok(st)
    }

    /// Recomputes the look-ahead block and the candidate norms (Eq. 14).
    fn refresh(&mut self) -> Result<(), Error> {
        let (b, _) = self.chol.lookahead(&self.cols, self.delta, self.tolerance)?;
        let n = b.nrows() as f64;
        let sum = DVector::from_fn(b.ncols(), |t, _| b.column(t).sum());
        let m = tall_tr_mul(&b, &b) - &sum * sum.transpose() / n;
        let norm2 = row_quadratic_forms(b.as_slice(), b.ncols(), b.nrows(), &m);
        let top = norm2.iter().fold(0.0f64, |a, &v| a.max(v));
        self.norm_floor = 1e-10 * top;
        self.max_diag = argmax(&self.chol.diag).1;
        self.block = b;
        self.block_sum = sum;
        self.candidate_norm2 = norm2;
        Ok(())
    }

    /// `v = B^T [r u] - (B^T 1)(1^T [r u]) / n` (delta x 2), the per-kernel
    /// products of Eq. 15-16.
    fn score_products(&self, r: &[f64], u: &[f64], sums: [f64; 2]) -> DMatrix<f64> {
        let mut v = self.block_products(r, u);
        self.centre_products(&mut v, sums, self.block.nrows());
        v
    }

    /// `B^T [r u]` (delta x 2) over the rows of `B` (zero for no rows).
    pub(super) fn block_products(&self, r: &[f64], u: &[f64]) -> DMatrix<f64> {
        let n = self.block.nrows();
        if n == 0 {
            return DMatrix::zeros(self.block.ncols(), 2);
        }
        tall_tr_mul_cols(&columns_of(self.block.as_slice(), n), &[r, u], n)
    }

    /// `v -= (B^T 1)(1^T [r u]) / n` for `n` rows in all, `sums = 1^T [r u]`.
    pub(super) fn centre_products(&self, v: &mut DMatrix<f64>, sums: [f64; 2], n: usize) {
        for j in 0..2 {
            for t in 0..v.nrows() {
                v[(t, j)] -= self.block_sum[t] * sums[j] / n as f64;
            }
        }
    }

    /// Approximate `(c_i, a_i)` of candidate `i` (Eq. 15-16) from `B v` at
    /// row i: `c_i = (r^T B - (r^T 1)(1^T B)/n) z_i / ||P B z_i||` (times
    /// the augmentation scale), and the same with the direction `u` for
    /// `a_i`; `None` for pivots and candidates the look-ahead block cannot
    /// represent.
    fn score(&self, i: usize, bv: [f64; 2], scale: f64) -> Option<(f64, f64)> {
        if !(self.chol.diag[i] > self.tolerance && self.candidate_norm2[i] > self.norm_floor) {
            return None;
        }
        let inv = scale / self.candidate_norm2[i].sqrt();
        Some((bv[0] * inv, bv[1] * inv))
    }

    /// The best candidate of this kernel by the LAR step (Eq. 11) on the
    /// approximated correlations: one pass over row chunks (in parallel)
    /// forms `B v` chunk by chunk, scores its rows and keeps the best.
    fn best_candidate(&self, r: &[f64], u: &[f64], sums: [f64; 2], scale: f64, active: Option<f64>) -> Option<Candidate> {
        if !self.has_candidates() {
            return None;
        }
        self.best_with_products(&self.score_products(r, u, sums), scale, active)
    }

    /// Whether the kernel has columns left to offer.
    pub(super) fn has_candidates(&self) -> bool {
        self.block.ncols() > 0 && self.max_diag > self.tolerance
    }

    /// The best candidate of the rows of `B` given the centred products
    /// `v` of [`KernelState::score_products`] (pivots are row indices of `B`).
    pub(super) fn best_with_products(&self, v: &DMatrix<f64>, scale: f64, active: Option<f64>) -> Option<Candidate> {
        let n = self.block.nrows();
        let block = columns_of(self.block.as_slice(), n);
        row_chunks(n)
            .filter_map(|(r0, len)| {
                let mut bv = vec![[0.0f64; 2]; len];
                for (t, col) in block.iter().enumerate() {
                    for (j, f) in [v[(t, 0)], v[(t, 1)]].into_iter().enumerate() {
                        if f != 0.0 {
                            for (s, &x) in bv.iter_mut().zip(&col[r0..r0 + len]) {
                                s[j] += f * x;
                            }
                        }
                    }
                }
                let mut best: Option<Candidate> = None;
                for (k, s) in bv.iter().enumerate() {
                    let Some((c, a)) = self.score(r0 + k, *s, scale) else { continue };
                    let step = match active {
                        None => 0.0,
                        Some(active) => step_length(active, c, a),
                    };
                    let cand = Candidate { step, correlation: c.abs(), pivot: r0 + k };
                    if best.as_ref().is_none_or(|b| cand.better_than(b)) {
                        best = Some(cand);
                    }
                }
                best
            })
            .reduce_with(|x, y| if y.better_than(&x) { y } else { x })
    }

    /// Every candidate's `(c_i, a_i)` (the reference for the scores of
    /// [`KernelState::best_candidate`] in the tests).
    #[cfg(test)]
    fn candidate_scores(&self, rd: &DMatrix<f64>, sums: [f64; 2], scale: f64) -> Vec<Option<(f64, f64)>> {
        let n = self.block.nrows();
        if self.block.ncols() == 0 {
            return vec![None; n];
        }
        let v = self.score_products(rd.column(0).as_slice(), rd.column(1).as_slice(), sums);
        let s = &self.block * v;
        (0..n).map(|i| self.score(i, [s[(i, 0)], s[(i, 1)]], scale)).collect()
    }
}


#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    /// With delta = n the look-ahead block completes the decomposition,
    /// `L_q = K_q`, so the approximated scores (Eq. 15-16) must equal the
    /// exact ones from a trial Cholesky step on every candidate.
    #[test]
    fn full_lookahead_scores_equal_exact_scores() {
        let mut rng = StdRng::seed_from_u64(11);
        let n = 25;
        let x = DMatrix::from_fn(n, 3, |_, _| rng.random_range(-1.0..1.0));
        let device = Device::Cpu;
        let cols = KernelColumns::new(&device, Kernel::rbf(0.3).unwrap(), &x).unwrap();
        let mut st = KernelState::new(cols, n).unwrap();
        for pivot in [4usize, 17, 9] {
            let rd = DMatrix::from_fn(n, 2, |_, _| rng.random_range(-1.0..1.0));
            let sums = [rd.column(0).sum(), rd.column(1).sum()];
            let scale = 0.7;
            let approx = st.candidate_scores(&rd, sums, scale);
            let mut compared = 0;
            for (i, s) in approx.iter().enumerate() {
                let Some((c, a)) = *s else { continue };
                let mut trial = st.chol.clone();
                let g = trial.step(&st.cols, i).unwrap().to_vec();
                let mean = g.iter().sum::<f64>() / n as f64;
                let pg: Vec<f64> = g.iter().map(|v| v - mean).collect();
                let norm = pg.iter().map(|v| v * v).sum::<f64>().sqrt();
                let c_exact: f64 = pg.iter().zip(rd.column(0).iter()).map(|(p, r)| p * r).sum::<f64>() / norm * scale;
                let a_exact: f64 = pg.iter().zip(rd.column(1).iter()).map(|(p, r)| p * r).sum::<f64>() / norm * scale;
                assert!((c - c_exact).abs() < 1e-6 * (1.0 + c_exact.abs()), "c at {i}: {c} vs {c_exact}");
                assert!((a - a_exact).abs() < 1e-6 * (1.0 + a_exact.abs()), "a at {i}: {a} vs {a_exact}");
                compared += 1;
            }
            assert!(compared > n / 2, "only {compared} candidates compared");
            st.chol.step(&st.cols, pivot).unwrap();
            st.refresh().unwrap();
        }
    }

    /// With a short look-ahead the approximation is not exact: the test above
    /// can fail when the block does not complete the decomposition.
    #[test]
    fn short_lookahead_scores_are_approximate() {
        let mut rng = StdRng::seed_from_u64(5);
        let n = 40;
        let x = DMatrix::from_fn(n, 3, |_, _| rng.random_range(-1.0..1.0));
        let device = Device::Cpu;
        let cols = KernelColumns::new(&device, Kernel::rbf(2.0).unwrap(), &x).unwrap();
        let st = KernelState::new(cols, 2).unwrap();
        let rd = DMatrix::from_fn(n, 2, |_, _| rng.random_range(-1.0..1.0));
        let approx = st.candidate_scores(&rd, [rd.column(0).sum(), rd.column(1).sum()], 1.0);
        let mut max_err = 0.0f64;
        for (i, s) in approx.iter().enumerate() {
            let Some((c, _)) = *s else { continue };
            let mut trial = st.chol.clone();
            let g = trial.step(&st.cols, i).unwrap().to_vec();
            let mean = g.iter().sum::<f64>() / n as f64;
            let norm = g.iter().map(|v| (v - mean).powi(2)).sum::<f64>().sqrt();
            let c_exact: f64 = g.iter().zip(rd.column(0).iter()).map(|(v, r)| (v - mean) * r).sum::<f64>() / norm;
            max_err = max_err.max((c - c_exact).abs());
        }
        assert!(max_err > 1e-3, "delta = 2 should not be exact (max error {max_err})");
    }

    #[test]
    fn step_length_equalises_correlations() {
        let (cmax, c, a) = (2.0, 0.5, -0.3);
        let t = step_length(cmax, c, a);
        assert!(t > 0.0 && t < 1.0);
        assert!(((c - t * a).abs() - (1.0 - t) * cmax).abs() < 1e-12);
        assert_eq!(step_length(1.0, 1.5, 0.0), 0.0);
    }
}
