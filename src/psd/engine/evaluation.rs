//! The engine's evaluations at a dual point (module docs of [`super`]):
//! `M_q`, its positive part, the model values, the linear part, the dual
//! and primal objectives and the gap, with the caches that spare
//! recomputation between FISTA's candidates.

use std::time::Instant;

use nalgebra::{DMatrix, DVector};

use crate::device::Device;
use crate::distributed::{agree, Communicator};
use crate::error::Error;
use crate::linalg;
use crate::resident::{DeviceMatrix, Workspace};

use super::super::positive_part::{PartMatrix, PositivePartSolver};
use super::{BlockLoss, EngineProblem};

/// Per-part solver state.
pub(super) struct PartState {
    pub(super) eigen_solver: PositivePartSolver,
    pub(super) m_cache: MatrixCache,
    /// The last [`RECENT_PARTS`] positive parts, most recent last.
    pub(super) recent: Vec<RecentPart>,
}

/// Positive parts kept per part: FISTA's accepted iterate is its last
/// backtracking candidate (so the gap check reuses it), and while the step
/// is shortened at an unchanged extrapolated point (the first iteration and
/// after a restart, where `x_k = x_{k-1}`) the evaluations alternate between
/// that point and the candidates, so two entries spare the point's
/// recomputation (five of 28 eigendecompositions of the 10-D density at
/// n = 1000).
pub(super) const RECENT_PARTS: usize = 2;

/// `[M(d, mu)]_+` of a recent evaluation.
pub(super) struct RecentPart {
    pub(super) d: DVector<f64>,
    pub(super) mu: f64,
    pub(super) pp: PartMatrix,
    /// `(f_q(x_i))_i` and `tr(A_q W)` once computed: FISTA's extrapolated
    /// point after a restart is the iterate of the last gap check, and the
    /// outer loop and the final evaluation revisit it, so the `O(n r k)`
    /// model values are not recomputed there.
    pub(super) values: Option<(DVector<f64>, f64)>,
}

pub(super) struct State<'c> {
    pub(super) parts: Vec<PartState>,
    pub(super) eigen: f64,
    pub(super) products: f64,
    /// `M_q` and `[M_q]_+` stay on the features' device (resident features
    /// and the polar route): per evaluation the weights `d_q` go up and the
    /// model values, norms and traces (`O(n + r)` numbers) come down.
    pub(super) resident: bool,
    /// `W` on that device, uploaded once.
    pub(super) integral_resident: Option<DeviceMatrix>,
    /// The fit's one workspace on that device (with `resident`): the polar
    /// route's operations are recorded there, its outputs from the pool, so
    /// that once the pool has filled an evaluation of `[M_q]_+` allocates
    /// no device memory; FISTA's resident state (`resident.rs`) uses it too.
    pub(super) workspace: Option<&'c Workspace<'c>>,
    /// The ranks of a sharded solve (`None` in one process): each holds a
    /// block of the samples, and every sum over samples goes through
    /// [`State::reduce`].
    pub(super) comm: Option<&'c dyn Communicator>,
    /// A failure of this rank's local work not yet reported to the others.
    pub(super) deferred: Option<Error>,
}

impl State<'_> {
    /// Whether the samples are sharded over several ranks.
    pub(super) fn sharded(&self) -> bool {
        self.comm.is_some()
    }

    /// Replaces `values` by their sums over the ranks (one
    /// [`Communicator::sum`]; in one process nothing, and `local` is
    /// returned). `local` is this rank's outcome of the work that produced
    /// `values` (zeros there when it failed): a failure on any rank, or one
    /// deferred before ([`Self::local`]), fails every rank at this call with
    /// the same [`Error::RankFailed`], so the ranks never part ways.
    pub(super) fn reduce(&mut self, local: Result<(), Error>, values: &mut [f64]) -> Result<(), Error> {
        let Some(comm) = self.comm else { return local };
        if let Err(e) = local {
            self.deferred.get_or_insert(e);
        }
        let mut all = Vec::with_capacity(values.len() + 1);
        all.extend_from_slice(values);
        all.push(if self.deferred.is_some() { 1.0 } else { 0.0 });
        comm.sum(&mut all)?;
        if all[values.len()] > 0.0 {
            let own = match self.deferred.take() {
                Some(e) => Err(e),
                None => Ok(()),
            };
            agree(comm, own)?;
            return Err(Error::RankFailed { rank: 0, invalid_input: false, message: "a rank's local work failed".into() });
        }
        values.copy_from_slice(&all[..values.len()]);
        Ok(())
    }

    /// The largest `value` over the ranks (failures as in [`Self::reduce`]).
    pub(super) fn max(&mut self, value: f64) -> Result<f64, Error> {
        let Some(comm) = self.comm else { return Ok(value) };
        let mut both = [value, if self.deferred.is_some() { 1.0 } else { 0.0 }];
        comm.max(&mut both)?;
        if both[1] > 0.0 {
            let mut flag = [1.0];
            return self.reduce(Ok(()), &mut flag).map(|_| both[0]);
        }
        Ok(both[0])
    }

    /// The outcome of local work (per-sample values): in one process as it
    /// is; in a sharded solve a failure is kept for the next
    /// [`Self::reduce`] (which fails every rank) and `fallback` stands in,
    /// so that this rank reaches the same collectives as the others.
    pub(super) fn local<T>(&mut self, result: Result<T, Error>, fallback: impl FnOnce() -> T) -> Result<T, Error> {
        match result {
            Err(e) if self.sharded() => {
                self.deferred.get_or_insert(e);
                Ok(fallback())
            }
            other => other,
        }
    }
}

/// `M_q` where it was computed (see [`State::resident`]).
#[derive(Clone)]
pub(super) enum DualMatrix {
    Host(DMatrix<f64>),
    Resident(DeviceMatrix),
}

/// The last few `(d, mu, M(d, mu))`. `M` is affine in `d`, and FISTA's
/// extrapolated point is an affine combination of two earlier candidates,
/// so `M` there costs `O(r^2)` instead of the `O(n r^2)` product. The
/// combination is used only when it reproduces `d` to `1e-13` relative
/// (checked entry by entry).
#[derive(Default)]
pub(super) struct MatrixCache {
    pub(super) entries: Vec<(DVector<f64>, f64, DualMatrix)>,
}

impl MatrixCache {
    const SIZE: usize = 3;

    fn insert(&mut self, d: &DVector<f64>, mu: f64, m: &DualMatrix) {
        if self.entries.len() == Self::SIZE {
            self.entries.remove(0);
        }
        self.entries.push((d.clone(), mu, m.clone()));
    }

    /// `device` holds the resident entries.
    fn combination(&self, d: &DVector<f64>, mu: f64, device: Option<&Device>) -> Result<Option<DualMatrix>, Error> {
        let close = |c: &DVector<f64>| c.iter().zip(d.iter()).all(|(a, b)| (a - b).abs() <= 1e-13 * b.abs().max(f64::MIN_POSITIVE));
        for (i, (a1, mu1, m1)) in self.entries.iter().enumerate().rev() {
            if *mu1 == mu && a1 == d {
                return Ok(Some(m1.clone()));
            }
            for (a2, mu2, m2) in self.entries[..i].iter().rev() {
                if *mu1 != mu || *mu2 != mu {
                    continue;
                }
                let diff = a1 - a2;
                let dd = diff.norm_squared();
                if !(dd > 0.0) {
                    continue;
                }
                let t = (d - a2).dot(&diff) / dd;
                if close(&(a2 + &diff * t)) {
                    return match (m1, m2, device) {
                        (DualMatrix::Host(m1), DualMatrix::Host(m2), _) => {
                            // t m1 + (1 - t) m2 without temporaries.
                            let mut m = m2.clone();
                            m.iter_mut().zip(m1.iter()).for_each(|(a, b)| *a = t * b + (1.0 - t) * *a);
                            Ok(Some(DualMatrix::Host(m)))
                        }
                        (DualMatrix::Resident(m1), DualMatrix::Resident(m2), Some(device)) => Ok(Some(DualMatrix::Resident(device.resident_combine(t, m1, 1.0 - t, m2, 0.0)?))),
                        _ => Ok(None),
                    };
                }
            }
        }
        Ok(None)
    }

    /// [`Self::combination`] for samples sharded over ranks (host
    /// matrices): the entry comparisons and the inner products of the
    /// affine fits are sums over the ranks (`sum`), the closeness checks
    /// too, so every rank finds the same entry or none.
    fn combination_sharded(&self, d: &DVector<f64>, mu: f64, sum: &mut dyn FnMut(&mut [f64]) -> Result<(), Error>) -> Result<Option<DualMatrix>, Error> {
        let k = self.entries.len();
        if k == 0 {
            return Ok(None);
        }
        // The pairs (i, j < i) of `combination`, in its order.
        let pairs: Vec<(usize, usize)> = (0..k).rev().flat_map(|i| (0..i).rev().map(move |j| (i, j))).filter(|&(i, j)| self.entries[i].1 == mu && self.entries[j].1 == mu).collect();
        let mut first = Vec::with_capacity(k + 2 * pairs.len());
        first.extend(self.entries.iter().map(|(a, _, _)| if a == d { 0.0 } else { 1.0 }));
        for &(i, j) in &pairs {
            let diff = &self.entries[i].0 - &self.entries[j].0;
            first.push((d - &self.entries[j].0).dot(&diff));
            first.push(diff.norm_squared());
        }
        sum(&mut first)?;
        let ts: Vec<Option<f64>> = (0..pairs.len()).map(|p| (first[k + 2 * p + 1] > 0.0).then(|| first[k + 2 * p] / first[k + 2 * p + 1])).collect();
        let close = |c: &DVector<f64>| c.iter().zip(d.iter()).all(|(a, b)| (a - b).abs() <= 1e-13 * b.abs().max(f64::MIN_POSITIVE));
        let mut far = vec![1.0; pairs.len()];
        if ts.iter().any(Option::is_some) {
            for (p, &(i, j)) in pairs.iter().enumerate() {
                if let Some(t) = ts[p] {
                    let a2 = &self.entries[j].0;
                    far[p] = if close(&(a2 + (&self.entries[i].0 - a2) * t)) { 0.0 } else { 1.0 };
                }
            }
            sum(&mut far)?;
        }
        for i in (0..k).rev() {
            if self.entries[i].1 == mu && first[i] == 0.0 {
                return Ok(Some(self.entries[i].2.clone()));
            }
            for (p, &(_, j)) in pairs.iter().enumerate().filter(|(_, &(pi, _))| pi == i) {
                if let (Some(t), 0.0) = (ts[p], far[p]) {
                    if let (DualMatrix::Host(m1), DualMatrix::Host(m2)) = (&self.entries[i].2, &self.entries[j].2) {
                        let mut m = m2.clone();
                        m.iter_mut().zip(m1.iter()).for_each(|(a, b)| *a = t * b + (1.0 - t) * *a);
                        return Ok(Some(DualMatrix::Host(m)));
                    }
                }
            }
        }
        Ok(None)
    }
}

/// The loss terms of [`EngineProblem::loss_terms`].
pub(super) struct LossTerms {
    /// `L*(z)`.
    pub(super) conjugate: f64,
    /// `L(u / s)` at the feasible scale.
    pub(super) scaled: f64,
    /// `L(u)`.
    pub(super) plain: f64,
}

/// Everything the gap needs at a dual point.
pub(super) struct Evaluation {
    pub(super) pps: Vec<PartMatrix>,
    /// Model values `u` (B n).
    pub(super) u: DVector<f64>,
    /// `tr(A W)` (0 without an integral).
    pub(super) trace_aw: f64,
    /// `w` of the linear part (empty without one).
    pub(super) w: DVector<f64>,
    /// `||P s||^2 / (2 lambda_0)` (= `lambda_0/2 ||w||^2`).
    pub(super) linear_energy: f64,
}

impl<'a, L: BlockLoss + ?Sized> EngineProblem<'a, L> {
    /// `sum_b c_b z_b`.
    pub(super) fn combine(&self, coupling: &[f64], z: &DVector<f64>) -> DVector<f64> {
        let n = self.n();
        let mut d = DVector::zeros(n);
        for (b, &c) in coupling.iter().enumerate() {
            if c != 0.0 {
                d.axpy(c, &z.rows(b * n, n), 1.0);
            }
        }
        d
    }

    /// `M_q = -P diag(d) P^T - mu W - lambda_1 I`.
    pub(super) fn m_matrix(&self, q: usize, d: &DVector<f64>, mu: f64, state: &mut State<'_>) -> Result<DualMatrix, Error> {
        let start = Instant::now();
        let cache = std::mem::take(&mut state.parts[q].m_cache);
        let found = if state.sharded() { cache.combination_sharded(d, mu, &mut |v: &mut [f64]| state.reduce(Ok(()), v)) } else { cache.combination(d, mu, self.features.device()) };
        state.parts[q].m_cache = cache;
        if let Some(m) = found? {
            state.products += start.elapsed().as_secs_f64();
            return Ok(m);
        }
        if state.resident {
            // On the device; a non-finite entry shows in ||M||_F, which the
            // polar route computes first (Error::IllConditioned there).
            let device = self.resident_device()?;
            let g = self.features.weighted_gram_resident(&(-d))?;
            let m = match &state.integral_resident {
                Some(w) => device.resident_combine(1.0, &g, -mu, w, -self.lambda1)?,
                None => device.resident_combine(1.0, &g, 0.0, &g, -self.lambda1)?,
            };
            let m = DualMatrix::Resident(m);
            state.parts[q].m_cache.insert(d, mu, &m);
            state.products += start.elapsed().as_secs_f64();
            return Ok(m);
        }
        let mut m = if state.sharded() {
            // This rank's samples' share, summed over the ranks.
            let r = self.features.dim();
            let (mut g, local) = match self.features.weighted_gram(&(-d)) {
                Ok(g) => (g, Ok(())),
                Err(e) => (DMatrix::zeros(r, r), Err(e)),
            };
            state.reduce(local, g.as_mut_slice())?;
            g
        } else {
            self.features.weighted_gram(&(-d))?
        };
        if let Some(w) = self.integral {
            m.iter_mut().zip(w.iter()).for_each(|(a, b)| *a -= mu * b);
        }
        for i in 0..m.nrows() {
            m[(i, i)] -= self.lambda1;
        }
        if let Some(bad) = m.iter().position(|v| !v.is_finite()) {
            return Err(Error::IllConditioned {
                what: "PSD dual",
                reason: format!("M = -P diag(d) P^T - mu W - lambda_1 I has a non-finite entry at ({}, {}) (mu {mu:e}, max |d| {:e}): the dual iterates left the range of f64", bad % m.nrows(), bad / m.nrows(), d.amax()),
            });
        }
        let m = DualMatrix::Host(m);
        state.parts[q].m_cache.insert(d, mu, &m);
        state.products += start.elapsed().as_secs_f64();
        Ok(m)
    }

    /// The device of resident features.
    pub(super) fn resident_device(&self) -> Result<&Device, Error> {
        self.features.device().ok_or_else(|| Error::InvalidParameter { name: "features", reason: "resident dual matrices need features resident on a device".into() })
    }

    /// `||A - B||_F^2` of two `M` matrices of one part.
    pub(super) fn distance_squared(&self, a: &DualMatrix, b: &DualMatrix) -> Result<f64, Error> {
        match (a, b) {
            (DualMatrix::Host(a), DualMatrix::Host(b)) => Ok(a.iter().zip(b.iter()).map(|(x, y)| (x - y) * (x - y)).sum()),
            (DualMatrix::Resident(a), DualMatrix::Resident(b)) => {
                let device = self.resident_device()?;
                let difference = device.resident_combine(1.0, a, -1.0, b, 0.0)?;
                Ok(device.to_host_vector(&device.resident_row_squared_norms(&difference)?)?.sum())
            }
            _ => Err(Error::InvalidParameter { name: "features", reason: "M matrices of one part on different devices".into() }),
        }
    }

    pub(super) fn positive_part(&self, q: usize, z: &DVector<f64>, mu: f64, state: &mut State<'_>) -> Result<PartMatrix, Error> {
        let d = self.combine(&self.parts[q], z);
        let hit = if state.sharded() {
            let mut differs: Vec<f64> = state.parts[q].recent.iter().map(|e| if e.mu == mu && e.d == d { 0.0 } else { 1.0 }).collect();
            state.reduce(Ok(()), &mut differs)?;
            differs.iter().position(|&v| v == 0.0)
        } else {
            state.parts[q].recent.iter().position(|e| e.mu == mu && e.d == d)
        };
        let recent = &mut state.parts[q].recent;
        if let Some(i) = hit {
            let entry = recent.remove(i);
            let pp = entry.pp.clone();
            recent.push(entry);
            return Ok(pp);
        }
        let m = self.m_matrix(q, &d, mu, state)?;
        let start = Instant::now();
        let (pp, _) = match &m {
            DualMatrix::Host(m) => state.parts[q].eigen_solver.compute_part(m)?,
            DualMatrix::Resident(m) => {
                let workspace = state.workspace.ok_or_else(|| Error::InvalidParameter { name: "features", reason: "resident dual matrices need the fit's device workspace".into() })?;
                let part = state.parts[q].eigen_solver.compute_part_in(workspace, m)?;
                // The part is read by the device's own calls next: what is still recorded is submitted.
                workspace.flush()?;
                part
            }
        };
        state.eigen += start.elapsed().as_secs_f64();
        let recent = &mut state.parts[q].recent;
        if recent.len() == RECENT_PARTS {
            recent.remove(0);
        }
        recent.push(RecentPart { d, mu, pp: pp.clone(), values: None });
        Ok(pp)
    }

    pub(super) fn positive_parts(&self, z: &DVector<f64>, mu: f64, state: &mut State<'_>) -> Result<Vec<PartMatrix>, Error> {
        (0..self.parts.len()).map(|q| self.positive_part(q, z, mu, state)).collect()
    }

    /// `P s`, `w = -P s / lambda_0`, `eta = P^T w` and `||P s||^2/(2 lambda_0)`.
    pub(super) fn linear_values(&self, z: &DVector<f64>, state: &mut State<'_>) -> Result<(DVector<f64>, DVector<f64>, f64), Error> {
        let Some(lin) = &self.linear else { return Ok((DVector::zeros(0), DVector::zeros(0), 0.0)) };
        let start = Instant::now();
        let s = self.combine(&lin.coupling, z);
        let ps = self.apply_summed(&s, state)?;
        let w = -&ps / lin.lambda0;
        let eta = self.features.apply_transpose(&w);
        let eta = state.local(eta, || DVector::zeros(self.n()))?;
        state.products += start.elapsed().as_secs_f64();
        Ok((w, eta, ps.norm_squared() / (2.0 * lin.lambda0)))
    }

    /// `P s` (r), summed over the ranks of a sharded solve.
    pub(super) fn apply_summed(&self, s: &DVector<f64>, state: &mut State<'_>) -> Result<DVector<f64>, Error> {
        if !state.sharded() {
            return self.features.apply(s);
        }
        let (mut ps, local) = match self.features.apply(s) {
            Ok(ps) => (ps, Ok(())),
            Err(e) => (DVector::zeros(self.features.dim()), Err(e)),
        };
        state.reduce(local, ps.as_mut_slice())?;
        Ok(ps)
    }

    /// `f_q(x_i) = p_i^T A_q p_i` for `A_q = [M_q]_+ / lambda_2`, and `tr(A W)`.
    pub(super) fn part_values(&self, part: &PartMatrix, state: &mut State<'_>) -> Result<(DVector<f64>, f64), Error> {
        let start = Instant::now();
        let pp = match part {
            PartMatrix::Eigen(pp) => pp,
            PartMatrix::Resident(d) => {
                // f = p_i^T A p_i and tr(A W) = sum A o W for A = P_k / lambda_2, on the device.
                let device = self.resident_device()?;
                let f = self.features.quadratic_forms_resident(&d.matrix)? / self.lambda2;
                let trace_aw = match &state.integral_resident {
                    Some(w) => device.to_host_vector(&device.resident_row_sums(&device.resident_hadamard(&d.matrix, w)?)?)?.sum() / self.lambda2,
                    None => 0.0,
                };
                state.products += start.elapsed().as_secs_f64();
                return Ok((f, trace_aw));
            }
            PartMatrix::Dense(d) => {
                // A dense [M]_+ (the polar route): f = p_i^T A p_i, tr(A W) = sum A o W.
                let a = &d.matrix / self.lambda2;
                let f = self.features.quadratic_forms(&a)?;
                let trace_aw = self.integral.map_or(0.0, |w| a.iter().zip(w.iter()).map(|(x, y)| x * y).sum());
                state.products += start.elapsed().as_secs_f64();
                return Ok((f, trace_aw));
            }
        };
        let scale: Vec<f64> = pp.values.iter().map(|v| (v / self.lambda2).sqrt()).collect();
        let f = if pp.values.is_empty() {
            DVector::zeros(self.n())
        } else {
            let mut v = pp.vectors.clone();
            for (a, mut col) in v.column_iter_mut().enumerate() {
                col *= scale[a];
            }
            self.features.projected_norms(&v)?
        };
        let trace_aw = match self.integral {
            Some(w) => {
                let uw = linalg::matmul_tn(&pp.vectors, w);
                (0..pp.values.len()).map(|a| scale[a] * scale[a] * uw.row(a).dot(&pp.vectors.column(a).transpose())).sum()
            }
            None => 0.0,
        };
        state.products += start.elapsed().as_secs_f64();
        Ok((f, trace_aw))
    }

    /// Model values and the rest of [`Evaluation`] at `z`.
    pub(super) fn evaluate(&self, z: &DVector<f64>, mu: f64, state: &mut State<'_>) -> Result<Evaluation, Error> {
        let n = self.n();
        let pps = self.positive_parts(z, mu, state)?;
        let mut u = DVector::zeros(n * self.loss.blocks());
        let mut trace_aw = 0.0;
        for (q, pp) in pps.iter().enumerate() {
            // `positive_parts` just made `pp` the most recent entry, so its values (if any) belong to it.
            let (f, t) = match state.parts[q].recent.last_mut().and_then(|e| e.values.take()) {
                Some(values) => values,
                None => {
                    let values = self.part_values(pp, state);
                    state.local(values, || (DVector::zeros(n), 0.0))?
                }
            };
            if let Some(entry) = state.parts[q].recent.last_mut() {
                entry.values = Some((f.clone(), t));
            }
            trace_aw += t;
            for (b, &c) in self.parts[q].iter().enumerate() {
                if c != 0.0 {
                    u.rows_mut(b * n, n).axpy(c, &f, 1.0);
                }
            }
        }
        let (w, eta, linear_energy) = self.linear_values(z, state)?;
        if let Some(lin) = &self.linear {
            for (b, &c) in lin.coupling.iter().enumerate() {
                if c != 0.0 {
                    u.rows_mut(b * n, n).axpy(c, &eta, 1.0);
                }
            }
        }
        Ok(Evaluation { pps, u, trace_aw, w, linear_energy })
    }

    /// `sum_q ||[M_q]_+||_F^2 / (2 lambda_2)`.
    pub(super) fn psd_energy(&self, pps: &[PartMatrix]) -> f64 {
        pps.iter().map(PartMatrix::frobenius_squared).sum::<f64>() / (2.0 * self.lambda2)
    }

    /// What dense parts `P_k` (the polar route) may change in
    /// [`Self::psd_energy`]: with `||[M_q]_+ - P_k||_F <= delta_q`,
    /// `| ||[M_q]_+||_F^2 - ||P_k||_F^2 | <= 2 ||P_k||_F delta_q + delta_q^2`,
    /// so the gap is reported larger by `sum_q (2 ||P_k||_F delta_q + delta_q^2) / (2 lambda_2)`
    /// (0 for eigenpairs).
    pub(super) fn dense_allowance(&self, pps: &[PartMatrix]) -> f64 {
        pps.iter().map(|p| (2.0 * p.frobenius_squared().sqrt() * p.bound() + p.bound() * p.bound()) / (2.0 * self.lambda2)).sum()
    }

    /// `sum_q lambda_1 tr(A_q s) + lambda_2/2 ||A_q s||_F^2` from the trace
    /// and Frobenius norm of each `[M_q]_+` (`A_q = [M_q]_+ / lambda_2`).
    pub(super) fn regulariser(&self, pps: &[PartMatrix], scale: f64) -> f64 {
        let s = scale / self.lambda2;
        pps.iter()
            .map(|part| match part {
                PartMatrix::Eigen(pp) => pp
                    .values
                    .iter()
                    .map(|v| {
                        let a = v / self.lambda2 * scale;
                        self.lambda1 * a + 0.5 * self.lambda2 * a * a
                    })
                    .sum::<f64>(),
                PartMatrix::Dense(_) | PartMatrix::Resident(_) => self.lambda1 * s * part.trace() + 0.5 * self.lambda2 * s * s * part.frobenius_squared(),
            })
            .sum()
    }

    /// The loss terms of the objectives, sums over the samples (over the
    /// ranks too in a sharded solve, in one reduction): `L*(z)`, `L(u / s)`
    /// at the feasible scale `s = tr(A W)` (`s = 1` without an integral;
    /// `+inf` for `s <= 0`) and, with `penalised`, `L(u)`.
    pub(super) fn loss_terms(&self, z: &DVector<f64>, ev: &Evaluation, penalised: bool, state: &mut State<'_>) -> Result<LossTerms, Error> {
        let scaled = match self.integral {
            None => self.loss.value(&ev.u),
            Some(_) if ev.trace_aw > 0.0 => self.loss.value(&(&ev.u / ev.trace_aw)),
            Some(_) => f64::INFINITY,
        };
        let plain = match (penalised, self.integral) {
            (true, Some(_)) => self.loss.value(&ev.u),
            _ => scaled,
        };
        let mut terms = [self.loss.conjugate(z), scaled, plain];
        state.reduce(Ok(()), &mut terms)?;
        Ok(LossTerms { conjugate: terms[0], scaled: terms[1], plain: terms[2] })
    }

    /// `F(z, mu) = L*(z) + mu + smooth part` (minus the dual objective).
    pub(super) fn dual_value(&self, terms: &LossTerms, mu: f64, ev: &Evaluation) -> f64 {
        terms.conjugate + self.psd_energy(&ev.pps) + ev.linear_energy + if self.integral.is_some() { mu } else { 0.0 }
    }

    /// Primal objective at the feasible point (`A / tr(A W)` with an integral).
    pub(super) fn primal(&self, terms: &LossTerms, ev: &Evaluation) -> f64 {
        let s = if self.integral.is_some() { ev.trace_aw } else { 1.0 };
        if !(s > 0.0) {
            return f64::INFINITY;
        }
        terms.scaled + self.regulariser(&ev.pps, 1.0 / s) + ev.linear_energy
    }

    /// `(gap, penalised gap at fixed mu, tr(A W))`.
    /// The diagonal metric `D` of FISTA (a variable-metric proximal gradient
    /// method), or `None` where the loss has no per-coordinate prox or there
    /// is a linear part.
    ///
    /// Each part's energy `||[M_q]_+||_F^2 / (2 lambda_2)` has a gradient that
    /// is `1/lambda_2`-Lipschitz in `M_q`, and `M_q` is linear in `d_q =
    /// sum_b c_{qb} z_b` with `||P diag(d) P^T||_F^2 = d^T (K o K) d`,
    /// `K = P^T P`. So the Hessian of the smooth part is at most
    /// `sum_q (c_q c_q^T) kron (K o K) / lambda_2`, and since `K o K` has
    /// non-negative entries it is at most the diagonal of its row sums
    /// `sum_j (p_i^T p_j)^2 = p_i^T (P P^T) p_i` (diagonal dominance), and
    /// `c_q c_q^T` at most `diag(|c_{qb}| sum_b' |c_{qb'}|)`:
    ///
    /// `D_{b i} = sum_q |c_{qb}| (sum_b' |c_{qb'}|) p_i^T (P P^T) p_i / lambda_2`.
    ///
    /// Against the scalar step `1/L`, `L = sum_q ||c_q||^2 max_i ||p_i||^2
    /// ||P P^T|| / lambda_2`, the coordinates of samples far from the others
    /// (small `p_i^T P P^T p_i`, small model values, large `|z_i|`) take
    /// steps larger by up to `L / D_{bi}`; with the scalar step they were
    /// the ones left unconverged at small `lambda` (the 10-D density of App. E).
    pub(super) fn diagonal_metric(&self, ppt: &DMatrix<f64>, state: &mut State<'_>) -> Result<Option<DVector<f64>>, Error> {
        let (n, blocks) = (self.n(), self.loss.blocks());
        if self.linear.is_some() || self.loss.prox_conjugate_per_coordinate(&DVector::from_element(n * blocks, -1.0), &DVector::from_element(n * blocks, 1.0)).is_none() {
            return Ok(None);
        }
        // p_i^T G p_i <= p_i^T (G + delta I) p_i = ||L^T p_i||^2 with the
        // Cholesky factor L of G + delta I (the smallest ridge delta that
        // lets a singular G through, at most 1e-4 max G_jj: D only grows, so
        // it still bounds the Hessian). Without a factor, the scalar step.
        let Some((l, _)) = linalg::ridged_cholesky_factor(ppt) else { return Ok(None) };
        let row_sums = self.features.projected_norms(&l);
        let row_sums = state.local(row_sums, || DVector::zeros(n))?;
        let mut d = DVector::zeros(n * blocks);
        for c in &self.parts {
            let total: f64 = c.iter().map(|v| v.abs()).sum();
            for (b, &cb) in c.iter().enumerate() {
                d.rows_mut(b * n, n).axpy(cb.abs() * total / self.lambda2, &row_sums, 1.0);
            }
        }
        // A sample whose features vanish has no curvature from the smooth
        // part; give it the largest entry so its step stays bounded.
        let top = state.max(if d.is_empty() { f64::NEG_INFINITY } else { d.max() })?;
        if !(top > 0.0 && top.is_finite()) {
            return Ok(None);
        }
        Ok(Some(d.map(|v| if v > 1e-12 * top { v } else { top })))
    }

    pub(super) fn gaps(&self, z: &DVector<f64>, mu: f64, state: &mut State<'_>) -> Result<(f64, f64, f64), Error> {
        let ev = self.evaluate(z, mu, state)?;
        let terms = self.loss_terms(z, &ev, true, state)?;
        Ok(self.gaps_of(&ev, &terms, mu))
    }

    /// [`Self::gaps`] from the evaluation and the loss terms (`plain` = `L(u)`).
    pub(super) fn gaps_of(&self, ev: &Evaluation, terms: &LossTerms, mu: f64) -> (f64, f64, f64) {
        let dual = self.dual_value(terms, mu, ev);
        let allowance = self.dense_allowance(&ev.pps);
        let gap = self.primal(terms, ev) + dual + allowance;
        let penalised = terms.plain + self.regulariser(&ev.pps, 1.0) + ev.linear_energy + if self.integral.is_some() { mu * (ev.trace_aw - 1.0) } else { 0.0 };
        (gap, penalised + dual + allowance, ev.trace_aw)
    }
}
