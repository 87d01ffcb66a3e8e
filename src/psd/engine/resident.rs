//! The engine's FISTA with its state on the features' device: the polar
//! route, no sharding, and a loss whose conjugate's prox runs there per
//! coordinate ([`ResidentLoss`]): the density of Section 6 (one block, one
//! PSD part with coupling 1, no linear part) and quantile regression (`K`
//! blocks, `K - 1` PSD parts with couplings `+-1`, the linear part on all
//! levels).
//!
//! The dual point `z` (the blocks `z_b` as the columns of an `n x B`
//! matrix), FISTA's momentum point and previous iterate, the gradient `-u`
//! and the diagonal metric `D` (with `1/D`; ones where FISTA takes one
//! scalar step, with a linear part) are `n x B` device matrices; the
//! weights `d_q = Z c_q` (`z` itself for the density) and `s = Z l` are
//! `n x 1`, `P s` is `r x 1`, and `M_q(z) = -P diag(d_q) P^T - mu W -
//! lambda_1 I` and `[M_q]_+` are `r x r` device matrices, so nothing of
//! length `n` crosses in an iteration. The gradient is
//! `-u = -sum_q f_q c_q^T / lambda_2 - eta l^T` with `f_{q,i} = p_i^T
//! [M_q]_+ p_i` and `eta = P^T w`, `w = -P s / lambda_0` (outer products
//! of `n x 1` vectors and `1 x B` rows of couplings). FISTA runs in the
//! metric `D` (the variable `w = D^{1/2} z` of the host path, here in
//! `z`): the candidate is `c = prox_{(t/D) L*}(y - (t/D) grad)`, its inner
//! products are `<grad, c - y>`, `||c - y||_D^2` and the restart criterion
//! `<y - c, c - x>_D` (sums over the blocks, then the samples). Per
//! candidate one read-back brings these three numbers, `||M_q(c) -
//! M_q(y)||_F^2` per part and `||P (s_c - s_y)||^2` (the remainder bound,
//! `sum_q /(2 lambda_2) + /(2 lambda_0)`) together. `M_q` and `P s` at the
//! extrapolated point `y = x + beta (x - x_prev)` are `(1 + beta) M_q(x) -
//! beta M_q(x_prev)` and the same of `P s` (affine in `z`, coefficients
//! summing to 1), `r x r` and `r` work. The smooth part's linear energy
//! `||P s||^2 / (2 lambda_0)` at a point is one read-back of one number.
//! The loss values are sums of element-wise terms (logs for the density,
//! pinball terms for quantile regression), read back with the other
//! scalars of a gap check (`tr(A W)`, `||P s||^2`) in one wait; `w` comes
//! down once, at the end. The polar route's own read-backs are `O(r)`
//! numbers per part ([`super::super::polar`]).
//!
//! **Recording.** Every device operation of the solve (the extrapolation,
//! `M`, the polar route's products, the gradient, the prox, the inner
//! products and the loss terms) writes into a matrix of the setting's
//! [`Workspace`] and is recorded there, not submitted: the work between two
//! read-backs is one submission. Per candidate that is the polar route's
//! two read-backs per PSD part at `y` (`||M||_F` with `||M^2||_F`, the
//! extrapolation and `M^2` recorded before it; `tr P` with `||P||_F`, the
//! products of the steps before it) and the step's one (the gradient, the prox, the inner
//! products and `M(c)` before it), each one submission of what was
//! recorded before it, then the read-back's copy (a second submission) and
//! its wait, and with a linear part the linear energy's one at `y`;
//! an evaluation of `h` at the candidate (when the remainder bound fails)
//! adds the polar route's two per part at `c`, the linear energy's and
//! the loss sums', a gap check one. The outputs come from the workspace's pool,
//! which hands a matrix out again once no point, cache or pending
//! temporary holds it: the pool fills during the first iterations (the
//! points FISTA keeps, their `M`, `[M]_+` and gradients, and the
//! temporaries of one candidate) and an iteration after that allocates no
//! device memory.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

use nalgebra::{DMatrix, DVector};

use crate::device::Device;
use crate::error::Error;
use crate::linalg::MatrixProduct;
use crate::precision::Precision;
use crate::resident::{DeviceMatrix, Workspace};

use super::super::fista::{self, FistaOutcome, FistaSettings, FistaSpace};
use super::super::loss::ResidentLoss;
use super::super::options::SolverOptions;
use super::super::positive_part::PartMatrix;
use super::evaluation::{Evaluation, LossTerms, State};
use super::{BlockLoss, EngineProblem};

/// A dual point (or gradient) on the device, with what has been computed
/// at it; clones share that.
#[derive(Clone)]
pub(super) struct ResidentPoint {
    /// The blocks `z_b` as the columns of an `n x B` matrix.
    pub(super) z: DeviceMatrix,
    cache: Rc<RefCell<PointCache>>,
}

#[derive(Default)]
struct PointCache {
    /// `M_q` per PSD part.
    ms: Option<Vec<DeviceMatrix>>,
    /// `[M_q]_+` per PSD part.
    pps: Option<Vec<PartMatrix>>,
    /// `P s` (r x 1) of the linear part.
    ps: Option<DeviceMatrix>,
    /// `||P s||^2 / (2 lambda_0)`, once read back.
    linear_energy: Option<f64>,
    /// `-u` (n x B), once computed.
    gradient: Option<DeviceMatrix>,
    /// `(id of y, remainder bound)` for the point `y` this candidate was
    /// stepped from: `sum_q ||M_q(self) - M_q(y)||_F^2 / (2 lambda_2) +
    /// ||P (s_self - s_y)||^2 / (2 lambda_0)`.
    remainder: Option<(usize, f64)>,
}

impl ResidentPoint {
    pub(super) fn new(z: DeviceMatrix) -> Self {
        ResidentPoint { z, cache: Rc::new(RefCell::new(PointCache::default())) }
    }

    fn id(&self) -> usize {
        Rc::as_ptr(&self.cache) as usize
    }
}

/// The couplings of a PSD part or the linear part on the device: the
/// `B x 1` column (for `d = Z c`) and the `1 x B` row (for the gradient's
/// `f c^T`).
struct Couplings {
    column: DeviceMatrix,
    row: DeviceMatrix,
}

/// The device, the metric, the couplings and the loss of a resident solve.
pub(super) struct ResidentSetting<'d> {
    pub(super) device: &'d Device,
    /// `n`.
    samples: usize,
    /// `B`.
    blocks: usize,
    /// `D` (n x B; ones where FISTA takes one scalar step).
    metric: DeviceMatrix,
    /// `1/D` (n x B).
    inverse_metric: DeviceMatrix,
    /// Per PSD part its couplings; `None` for one block with coupling 1
    /// (the density: `d = z`).
    parts: Vec<Option<Couplings>>,
    /// The linear part's couplings and `lambda_0`.
    linear: Option<(Couplings, f64)>,
    loss: &'d dyn ResidentLoss,
    /// The loss's data on the device ([`ResidentLoss::upload`]).
    loss_data: Vec<DeviceMatrix>,
    /// Where every operation of the solve is recorded, its outputs from
    /// the workspace's pool (module docs): the fit's workspace
    /// ([`State::workspace`]).
    workspace: &'d Workspace<'d>,
}

impl<'d> ResidentSetting<'d> {
    /// The setting where the problem takes the resident path (module
    /// docs): `D` and `1/D` (ones without a metric), the couplings and the
    /// loss's data uploaded once; `None` elsewhere.
    pub(super) fn new<L: BlockLoss + ?Sized>(problem: &'d EngineProblem<'_, L>, state: &State<'d>, metric: Option<&DVector<f64>>) -> Result<Option<Self>, Error> {
        let (Some(loss), Some(device), Some(workspace)) = (problem.loss.resident(), problem.features.device(), state.workspace) else { return Ok(None) };
        if !state.resident {
            return Ok(None);
        }
        let (samples, blocks) = (problem.n(), problem.loss.blocks());
        let upload = |v: &DVector<f64>| device.upload(&DMatrix::from_column_slice(samples, blocks, v.as_slice()), Precision::F64);
        let (metric, inverse_metric) = match metric {
            Some(d) => (upload(d)?, upload(&d.map(|v| 1.0 / v))?),
            None => {
                let ones = upload(&DVector::from_element(samples * blocks, 1.0))?;
                (ones.clone(), ones)
            }
        };
        let couplings = |c: &[f64]| -> Result<Couplings, Error> {
            Ok(Couplings { column: device.upload(&DMatrix::from_column_slice(blocks, 1, c), Precision::F64)?, row: device.upload(&DMatrix::from_row_slice(1, blocks, c), Precision::F64)? })
        };
        let parts = problem.parts.iter().map(|c| if blocks == 1 && c[..] == [1.0] { Ok(None) } else { couplings(c).map(Some) }).collect::<Result<Vec<_>, Error>>()?;
        let linear = match &problem.linear {
            Some(lin) => Some((couplings(&lin.coupling)?, lin.lambda0)),
            None => None,
        };
        Ok(Some(ResidentSetting { device, samples, blocks, metric, inverse_metric, parts, linear, loss, loss_data: loss.upload(device)?, workspace }))
    }

    /// The stacked blocks `z` (B n) as a resident `n x B` matrix.
    pub(super) fn upload_point(&self, z: &DVector<f64>) -> Result<ResidentPoint, Error> {
        let m = DMatrix::from_column_slice(self.samples, self.blocks, z.as_slice());
        Ok(ResidentPoint::new(self.device.upload(&m, Precision::F64)?))
    }

    /// The stacked blocks of a resident point, read back.
    pub(super) fn download_point(&self, point: &ResidentPoint) -> Result<DVector<f64>, Error> {
        self.workspace.flush()?;
        let m = self.device.to_host(&point.z)?;
        Ok(DVector::from_column_slice(m.as_slice()))
    }

    /// The row sums of an `n x B` matrix (the matrix itself for one block).
    fn block_sums(&self, m: DeviceMatrix) -> Result<DeviceMatrix, Error> {
        if m.ncols() == 1 {
            return Ok(m);
        }
        let out = self.workspace.take(m.nrows(), 1, m.precision())?;
        self.workspace.row_reduction_into(&m, false, &out)?;
        Ok(out)
    }
}

impl<'a, L: BlockLoss + ?Sized> EngineProblem<'a, L> {
    /// `M_q(z)` of every PSD part at a resident point (cached there),
    /// recorded in the workspace: `d_q = Z c_q` (`z` itself for the
    /// density), `M_q = -P diag(d_q) P^T - mu W - lambda_1 I`.
    fn resident_ms(&self, setting: &ResidentSetting<'_>, point: &ResidentPoint, mu: f64, state: &mut State<'_>) -> Result<Vec<DeviceMatrix>, Error> {
        if let Some(ms) = &point.cache.borrow().ms {
            return Ok(ms.clone());
        }
        let start = Instant::now();
        let ws = setting.workspace;
        let phi = self.features.resident_phi()?;
        let (n, r, precision) = (phi.nrows(), phi.ncols(), point.z.precision());
        let mut ms = Vec::with_capacity(setting.parts.len());
        for couplings in &setting.parts {
            let d = match couplings {
                None => point.z.clone(),
                Some(c) => {
                    let d = ws.take(n, 1, precision)?;
                    ws.matmul_into(&point.z, &c.column, MatrixProduct::AB, &d)?;
                    d
                }
            };
            let g = ws.take(r, r, precision)?;
            ws.weighted_gram_into(phi, &d, &g)?;
            let m = ws.take(r, r, precision)?;
            match &state.integral_resident {
                Some(w) => ws.combine_into(-1.0, &g, -mu, w, -self.lambda1, &m)?,
                None => ws.combine_into(-1.0, &g, 0.0, &g, -self.lambda1, &m)?,
            }
            ms.push(m);
        }
        point.cache.borrow_mut().ms = Some(ms.clone());
        state.products += start.elapsed().as_secs_f64();
        Ok(ms)
    }

    /// `[M_q(z)]_+` of every PSD part at a resident point (cached there).
    fn resident_parts(&self, setting: &ResidentSetting<'_>, point: &ResidentPoint, mu: f64, state: &mut State<'_>) -> Result<Vec<PartMatrix>, Error> {
        if let Some(pps) = &point.cache.borrow().pps {
            return Ok(pps.clone());
        }
        let ms = self.resident_ms(setting, point, mu, state)?;
        let start = Instant::now();
        let mut pps = Vec::with_capacity(ms.len());
        for (q, m) in ms.iter().enumerate() {
            let (pp, _) = state.parts[q].eigen_solver.compute_part_in(setting.workspace, m)?;
            pps.push(pp);
        }
        state.eigen += start.elapsed().as_secs_f64();
        point.cache.borrow_mut().pps = Some(pps.clone());
        Ok(pps)
    }

    /// `P s` (r x 1, `s = Z l`) of the linear part at a resident point
    /// (cached there), recorded in the workspace; `None` without a linear part.
    fn resident_linear(&self, setting: &ResidentSetting<'_>, point: &ResidentPoint, state: &mut State<'_>) -> Result<Option<DeviceMatrix>, Error> {
        let Some((couplings, _)) = &setting.linear else { return Ok(None) };
        if let Some(ps) = &point.cache.borrow().ps {
            return Ok(Some(ps.clone()));
        }
        let start = Instant::now();
        let ws = setting.workspace;
        let phi = self.features.resident_phi()?;
        let (n, r, precision) = (phi.nrows(), phi.ncols(), point.z.precision());
        let s = ws.take(n, 1, precision)?;
        ws.matmul_into(&point.z, &couplings.column, MatrixProduct::AB, &s)?;
        let ps = ws.take(r, 1, precision)?;
        ws.matmul_into(phi, &s, MatrixProduct::AtB, &ps)?;
        point.cache.borrow_mut().ps = Some(ps.clone());
        state.products += start.elapsed().as_secs_f64();
        Ok(Some(ps))
    }

    /// The linear part's `w = -P s / lambda_0` at a resident point, read back
    /// (empty without a linear part).
    pub(super) fn resident_linear_weights(&self, setting: &ResidentSetting<'_>, point: &ResidentPoint, state: &mut State<'_>) -> Result<DVector<f64>, Error> {
        match (self.resident_linear(setting, point, state)?, &setting.linear) {
            (Some(ps), Some((_, lambda0))) => Ok(-setting.workspace.read_vector(&ps)? / *lambda0),
            _ => Ok(DVector::zeros(0)),
        }
    }

    /// `||P s||^2` as a resident vector to sum (r x 1), recorded in the workspace.
    fn resident_linear_squares(&self, setting: &ResidentSetting<'_>, ps: &DeviceMatrix) -> Result<DeviceMatrix, Error> {
        let squares = setting.workspace.take(ps.nrows(), 1, ps.precision())?;
        setting.workspace.hadamard_into(ps, ps, &squares)?;
        Ok(squares)
    }

    /// `||P s||^2 / (2 lambda_0)` at a resident point (cached there; one
    /// read-back when not yet known, 0 without a linear part).
    fn resident_linear_energy(&self, setting: &ResidentSetting<'_>, point: &ResidentPoint, state: &mut State<'_>) -> Result<f64, Error> {
        if let Some(e) = point.cache.borrow().linear_energy {
            return Ok(e);
        }
        let (Some(ps), Some((_, lambda0))) = (self.resident_linear(setting, point, state)?, &setting.linear) else { return Ok(0.0) };
        let start = Instant::now();
        let squares = self.resident_linear_squares(setting, &ps)?;
        let energy = setting.workspace.sums(&[&squares])?[0] / (2.0 * lambda0);
        point.cache.borrow_mut().linear_energy = Some(energy);
        state.products += start.elapsed().as_secs_f64();
        Ok(energy)
    }

    /// The gradient `-u` (n x B) at a resident point (cached there),
    /// recorded in the workspace: `u = sum_q f_q c_q^T / lambda_2 + eta l^T`
    /// with `f_q,i = p_i^T [M_q]_+ p_i` (from `Phi [M_q]_+` and its row dots
    /// with `Phi`) and `eta = Phi w`, `w = -P s / lambda_0`.
    fn resident_gradient(&self, setting: &ResidentSetting<'_>, point: &ResidentPoint, mu: f64, state: &mut State<'_>) -> Result<DeviceMatrix, Error> {
        if let Some(g) = &point.cache.borrow().gradient {
            return Ok(g.clone());
        }
        let pps = self.resident_parts(setting, point, mu, state)?;
        let ps = self.resident_linear(setting, point, state)?;
        let start = Instant::now();
        let ws = setting.workspace;
        let phi = self.features.resident_phi()?;
        let (n, r, precision) = (phi.nrows(), phi.ncols(), point.z.precision());
        // The terms of -u: a vector (n x 1), its couplings' row (None: one
        // block with coupling 1) and its factor.
        let mut terms: Vec<(DeviceMatrix, Option<&DeviceMatrix>, f64)> = Vec::with_capacity(pps.len() + 1);
        for (pp, couplings) in pps.iter().zip(&setting.parts) {
            let PartMatrix::Resident(part) = pp else { return Err(Error::InvalidParameter { name: "positive part", reason: "the resident solve needs the polar route's resident [M]_+".into() }) };
            let phi_a = ws.take(n, r, precision)?;
            ws.matmul_into(phi, &part.matrix, MatrixProduct::AB, &phi_a)?;
            let products = ws.take(n, r, precision)?;
            ws.hadamard_into(&phi_a, phi, &products)?;
            let forms = ws.take(n, 1, precision)?;
            ws.row_reduction_into(&products, false, &forms)?;
            terms.push((forms, couplings.as_ref().map(|c| &c.row), -1.0 / self.lambda2));
        }
        if let (Some(ps), Some((couplings, lambda0))) = (&ps, &setting.linear) {
            let w = ws.take(r, 1, precision)?;
            ws.combine_into(-1.0 / lambda0, ps, 0.0, ps, 0.0, &w)?;
            let eta = ws.take(n, 1, precision)?;
            ws.matmul_into(phi, &w, MatrixProduct::AB, &eta)?;
            terms.push((eta, Some(&couplings.row), -1.0));
        }
        let mut g: Option<DeviceMatrix> = None;
        for (vector, row, factor) in terms {
            let spread = match row {
                None => vector,
                Some(row) => {
                    let outer = ws.take(n, setting.blocks, precision)?;
                    ws.matmul_into(&vector, row, MatrixProduct::AB, &outer)?;
                    outer
                }
            };
            let next = ws.take(n, setting.blocks, precision)?;
            match &g {
                None => ws.combine_into(factor, &spread, 0.0, &spread, 0.0, &next)?,
                Some(sum) => ws.combine_into(factor, &spread, 1.0, sum, 0.0, &next)?,
            }
            g = Some(next);
        }
        let g = g.ok_or_else(|| Error::InvalidParameter { name: "parts", reason: "need a PSD part or a linear part".into() })?;
        point.cache.borrow_mut().gradient = Some(g.clone());
        state.products += start.elapsed().as_secs_f64();
        Ok(g)
    }

    /// Everything the gap needs at a resident point: the evaluation (its
    /// `u` and `w` empty: the model values and the linear part stay on the
    /// device) and the loss terms (`L(u)` as `plain`), from one read-back
    /// of the loss sums, `tr(A W)` and `||P s||^2`.
    pub(super) fn resident_terms(&self, setting: &ResidentSetting<'_>, point: &ResidentPoint, mu: f64, state: &mut State<'_>) -> Result<(Evaluation, LossTerms), Error> {
        let pps = self.resident_parts(setting, point, mu, state)?;
        let gradient = self.resident_gradient(setting, point, mu, state)?;
        let ps = self.resident_linear(setting, point, state)?;
        let ws = setting.workspace;
        let data = &setting.loss_data;
        let conjugate = setting.loss.conjugate_terms(ws, data, &point.z)?;
        let value = setting.loss.value_terms(ws, data, &gradient, -1.0)?;
        let mut vectors: Vec<&DeviceMatrix> = conjugate.iter().chain(value.iter()).collect();
        let trace_terms = match (&state.integral_resident, pps.first()) {
            (Some(w), Some(PartMatrix::Resident(part))) => {
                let (r, precision) = (part.matrix.nrows(), part.matrix.precision());
                let products = ws.take(r, r, precision)?;
                ws.hadamard_into(&part.matrix, w, &products)?;
                let rows = ws.take(r, 1, precision)?;
                ws.row_reduction_into(&products, false, &rows)?;
                Some(rows)
            }
            _ => None,
        };
        if let Some(t) = &trace_terms {
            vectors.push(t);
        }
        let squares = match &ps {
            Some(ps) => Some(self.resident_linear_squares(setting, ps)?),
            None => None,
        };
        if let Some(sq) = &squares {
            vectors.push(sq);
        }
        let sums = ws.sums(&vectors)?;
        let (conjugate_sums, rest) = sums.split_at(conjugate.len());
        let (value_sums, rest) = rest.split_at(value.len());
        let (trace, rest) = rest.split_at(usize::from(trace_terms.is_some()));
        let trace_aw = trace.first().map_or(0.0, |t| t / self.lambda2);
        let linear_energy = match (rest.first(), &setting.linear) {
            (Some(sq), Some((_, lambda0))) => sq / (2.0 * lambda0),
            _ => 0.0,
        };
        point.cache.borrow_mut().linear_energy = Some(linear_energy);
        let plain = setting.loss.value_from_sums(value_sums);
        let scaled = match self.integral {
            None => plain,
            Some(_) if trace_aw > 0.0 => setting.loss.value_at_scale(plain, trace_aw),
            Some(_) => f64::INFINITY,
        };
        let ev = Evaluation { pps, u: DVector::zeros(0), trace_aw, w: DVector::zeros(0), linear_energy };
        Ok((ev, LossTerms { conjugate: setting.loss.conjugate_from_sums(conjugate_sums), scaled, plain }))
    }

    /// [`Self::gaps`] at a resident point.
    pub(super) fn resident_gaps(&self, setting: &ResidentSetting<'_>, point: &ResidentPoint, mu: f64, state: &mut State<'_>) -> Result<(f64, f64, f64), Error> {
        let (ev, terms) = self.resident_terms(setting, point, mu, state)?;
        Ok(self.gaps_of(&ev, &terms, mu))
    }

    /// [`Self::solve_at`] with FISTA's state on the device (module docs).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn solve_at_resident(
        &self,
        setting: &ResidentSetting<'_>,
        z0: ResidentPoint,
        mu: f64,
        step: f64,
        inner_tol: f64,
        options: &SolverOptions,
        budget: usize,
        state: &mut State<'_>,
        history: &mut Vec<(usize, f64)>,
        done_before: usize,
    ) -> Result<FistaOutcome<ResidentPoint>, Error> {
        let cell = RefCell::new(state);
        let failure: RefCell<Option<Error>> = RefCell::new(None);
        let gaps_seen = RefCell::new(Vec::new());
        let record = |e: Error| {
            failure.borrow_mut().get_or_insert(e);
        };
        let smooth = |y: &ResidentPoint, want_gradient: bool| -> (f64, Option<ResidentPoint>) {
            let mut st = cell.borrow_mut();
            let out = self.resident_parts(setting, y, mu, &mut st).and_then(|pps| {
                let value = self.psd_energy(&pps) + self.resident_linear_energy(setting, y, &mut st)?;
                let gradient = if want_gradient { Some(ResidentPoint::new(self.resident_gradient(setting, y, mu, &mut st)?)) } else { None };
                Ok((value, gradient))
            });
            out.unwrap_or_else(|e| {
                record(e);
                (f64::NAN, want_gradient.then(|| y.clone()))
            })
        };
        let remainder_bound = |y: &ResidentPoint, x: &ResidentPoint| x.cache.borrow().remainder.filter(|&(id, _)| id == y.id()).map(|(_, rho)| rho);
        let nonsmooth = |x: &ResidentPoint| {
            let out = setting.loss.conjugate_terms(setting.workspace, &setting.loss_data, &x.z).and_then(|terms| setting.workspace.sums(&terms.iter().collect::<Vec<_>>()));
            match out {
                Ok(sums) => setting.loss.conjugate_from_sums(&sums),
                Err(e) => {
                    record(e);
                    f64::NAN
                }
            }
        };
        let stop = self.stopping_rule(options);
        let gap = |x: &ResidentPoint| -> f64 {
            let mut st = cell.borrow_mut();
            match self.resident_gaps(setting, x, mu, &mut st) {
                Ok(gaps) => {
                    gaps_seen.borrow_mut().push(gaps.0);
                    stop(gaps)
                }
                Err(e) => {
                    record(e);
                    0.0
                }
            }
        };
        let space = ResidentSpace { problem: self, setting, mu, state: &cell, failure: &failure };
        let settings = FistaSettings { initial_step: step, max_iterations: budget, tolerance: inner_tol, check_every: options.check_every };
        let outcome = fista::minimise_in(space, smooth, remainder_bound, nonsmooth, gap, z0, settings);
        // What is still recorded (a gradient or candidate never read) is
        // submitted, so that the points handed out are written.
        setting.workspace.flush()?;
        if let Some(e) = failure.borrow_mut().take() {
            return Err(e);
        }
        let outcome = outcome?;
        for (&(k, _), &g) in outcome.gap_history.iter().zip(gaps_seen.borrow().iter()) {
            history.push((done_before + k, g));
        }
        Ok(outcome)
    }
}

/// FISTA's vector operations on the device (module docs).
struct ResidentSpace<'s, 'p, 'a, 'c, L: BlockLoss + ?Sized> {
    problem: &'p EngineProblem<'a, L>,
    setting: &'s ResidentSetting<'s>,
    mu: f64,
    state: &'s RefCell<&'s mut State<'c>>,
    /// A failure of the callbacks, reported at the next operation.
    failure: &'s RefCell<Option<Error>>,
}

impl<L: BlockLoss + ?Sized> ResidentSpace<'_, '_, '_, '_, L> {
    fn check(&self) -> Result<(), Error> {
        match self.failure.borrow_mut().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl<L: BlockLoss + ?Sized> FistaSpace for ResidentSpace<'_, '_, '_, '_, L> {
    type Vector = ResidentPoint;
    type Error = Error;

    fn extrapolate(&mut self, x: &ResidentPoint, x_prev: &ResidentPoint, beta: f64) -> Result<ResidentPoint, Error> {
        self.check()?;
        if beta == 0.0 {
            return Ok(x.clone());
        }
        let ws = self.setting.workspace;
        let y = ResidentPoint::new(ws.take(x.z.nrows(), x.z.ncols(), x.z.precision())?);
        ws.combine_into(1.0 + beta, &x.z, -beta, &x_prev.z, 0.0, &y.z)?;
        let start = Instant::now();
        let affine = |a: &DeviceMatrix, b: &DeviceMatrix| -> Result<DeviceMatrix, Error> {
            let m = ws.take(a.nrows(), a.ncols(), a.precision())?;
            ws.combine_into(1.0 + beta, a, -beta, b, 0.0, &m)?;
            Ok(m)
        };
        let ms = (x.cache.borrow().ms.clone(), x_prev.cache.borrow().ms.clone());
        if let (Some(mx), Some(mp)) = ms {
            let m = mx.iter().zip(&mp).map(|(a, b)| affine(a, b)).collect::<Result<Vec<_>, Error>>()?;
            y.cache.borrow_mut().ms = Some(m);
        }
        let ps = (x.cache.borrow().ps.clone(), x_prev.cache.borrow().ps.clone());
        if let (Some(px), Some(pp)) = ps {
            y.cache.borrow_mut().ps = Some(affine(&px, &pp)?);
        }
        self.state.borrow_mut().products += start.elapsed().as_secs_f64();
        Ok(y)
    }

    fn step(&mut self, y: &ResidentPoint, grad: &ResidentPoint, t: f64, x: &ResidentPoint) -> Result<(ResidentPoint, [f64; 3]), Error> {
        self.check()?;
        let s = self.setting;
        let ws = s.workspace;
        let (n, blocks, precision) = (y.z.nrows(), y.z.ncols(), y.z.precision());
        let block = || ws.take(n, blocks, precision);
        // c = prox_{(t/D) L*}(y - (t/D) grad).
        let scaled = block()?;
        ws.hadamard_into(&grad.z, &s.inverse_metric, &scaled)?;
        let v = block()?;
        ws.combine_into(1.0, &y.z, -t, &scaled, 0.0, &v)?;
        let cand = ResidentPoint::new(block()?);
        s.loss.prox_conjugate_resident(ws, &s.loss_data, &v, &s.inverse_metric, t, &cand.z)?;
        let d = block()?;
        ws.combine_into(1.0, &cand.z, -1.0, &y.z, 0.0, &d)?;
        let grad_d = block()?;
        ws.hadamard_into(&grad.z, &d, &grad_d)?;
        let d_metric = block()?;
        ws.hadamard_into(&d, &s.metric, &d_metric)?;
        let d_squared = block()?;
        ws.hadamard_into(&d, &d_metric, &d_squared)?;
        // <y - c, c - x>_D = -<D d, c - x>.
        let from_cand = block()?;
        ws.combine_into(-1.0, &cand.z, 1.0, &x.z, 0.0, &from_cand)?;
        let direction = block()?;
        ws.hadamard_into(&d_metric, &from_cand, &direction)?;
        let mut vectors = vec![s.block_sums(grad_d)?, s.block_sums(d_squared)?, s.block_sums(direction)?];
        let mut st = self.state.borrow_mut();
        let ms_c = self.problem.resident_ms(s, &cand, self.mu, &mut st)?;
        let ms_y = self.problem.resident_ms(s, y, self.mu, &mut st)?;
        let lin = (self.problem.resident_linear(s, &cand, &mut st)?, self.problem.resident_linear(s, y, &mut st)?);
        let start = Instant::now();
        for (m_c, m_y) in ms_c.iter().zip(&ms_y) {
            let difference = ws.take(m_c.nrows(), m_c.ncols(), precision)?;
            ws.combine_into(1.0, m_c, -1.0, m_y, 0.0, &difference)?;
            let distance = ws.take(m_c.nrows(), 1, precision)?;
            ws.row_reduction_into(&difference, true, &distance)?;
            vectors.push(distance);
        }
        if let (Some(ps_c), Some(ps_y)) = &lin {
            let difference = ws.take(ps_c.nrows(), 1, precision)?;
            ws.combine_into(1.0, ps_c, -1.0, ps_y, 0.0, &difference)?;
            vectors.push(self.problem.resident_linear_squares(s, &difference)?);
        }
        let sums = ws.sums(&vectors.iter().collect::<Vec<_>>())?;
        st.products += start.elapsed().as_secs_f64();
        let parts = ms_c.len();
        let mut rho = sums[3..3 + parts].iter().sum::<f64>() / (2.0 * self.problem.lambda2);
        if let (Some(&linear), Some((_, lambda0))) = (sums.get(3 + parts), &s.linear) {
            rho += linear / (2.0 * lambda0);
        }
        cand.cache.borrow_mut().remainder = Some((y.id(), rho));
        Ok((cand, [sums[0], sums[1], sums[2]]))
    }
}

#[cfg(test)]
pub(in crate::psd) mod tests {
    use nalgebra::DMatrix;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use rand_distr::{Distribution, Normal};

    use crate::device::Device;
    use crate::linalg;
    use crate::precision::Precision;
    use crate::psd::features::{EmpiricalFeatures, Features};
    use crate::psd::integrals::{product_integrals, BaseMeasure};
    use crate::psd::loss::NegativeLogLikelihood;
    use crate::psd::options::SolverOptions;
    use crate::psd::positive_part::PositivePartSolver;
    use crate::GpuOptions;

    use super::super::{EngineProblem, EngineSolution};

    /// A GPU device with `f64` (a failure under `GRAMIAN_REQUIRE_GPU=1`).
    pub(in crate::psd) fn gpu() -> Option<Device> {
        match Device::gpu_with(&GpuOptions { allow_software: true, ..Default::default() }) {
            Ok(d) if d.supports(Precision::F64) => Some(d),
            Ok(_) | Err(_) if std::env::var("GRAMIAN_REQUIRE_GPU").as_deref() == Ok("1") => panic!("GRAMIAN_REQUIRE_GPU=1 but no GPU adapter with f64"),
            _ => {
                eprintln!("SKIPPED: no GPU adapter with f64");
                None
            }
        }
    }

    /// A density problem of App. E: samples `x` (n x d), Nystrom centres
    /// the first `m` samples, a Gaussian kernel of width `sigma` and the
    /// base measure `N(0, variance I)`.
    struct Density {
        x: DMatrix<f64>,
        features: EmpiricalFeatures,
        w: DMatrix<f64>,
        lambda: (f64, f64),
        options: SolverOptions,
    }

    impl Density {
        fn new(x: DMatrix<f64>, m: usize, sigma: f64, variance: f64, lambda: (f64, f64), options: SolverOptions) -> Self {
            let centres = x.rows(0, m).into_owned();
            let features = EmpiricalFeatures::new(&centres, sigma).unwrap();
            let base = BaseMeasure::isotropic_gaussian(x.ncols(), variance).unwrap();
            let t = features.map();
            let w = linalg::matmul_nt(&linalg::matmul(t, &product_integrals(&centres, sigma, &base).unwrap()), t);
            Density { x, features, w: (&w + w.transpose()) * 0.5, lambda, options }
        }

        fn solve(&self, features: Features<'_>, device_state: bool) -> EngineSolution {
            let loss = NegativeLogLikelihood { n: self.x.nrows() };
            let problem = EngineProblem { features, parts: vec![vec![1.0]], linear: None, integral: Some(&self.w), loss: &loss, lambda1: self.lambda.0, lambda2: self.lambda.1 };
            problem.solve_placed(&self.options, PositivePartSolver::polar(), None, device_state).unwrap()
        }
    }

    /// The 3-D problem of the GPU counters tests and the 10-D mixture of
    /// App. E (two Gaussians of standard deviation `1/sqrt(2 pi)` at
    /// `+-2 e_1`, a multiplier far from its start): FISTA with its state on
    /// the device takes the steps of FISTA with its state on the host on the
    /// same resident features (the same iterations), and both certify the
    /// CPU `f64` fit's optimum. Tolerances: the CPU fit's iterations may
    /// differ by 2 where a backtracking or restart decision sits within
    /// round-off (its products run in another order); each certified primal
    /// objective is within its gap of the optimum, so two fits agree within
    /// the sum of their gaps; the fitted `A` agree to `1e-9` relative
    /// (round-off of the same steps in another order, `1e-14` on lavapipe),
    /// well inside what the gaps certify (`lambda_2`-strong convexity in
    /// `A`: `||A - A*||_F <= sqrt(2 gap / lambda_2)` for each fit).
    #[test]
    fn device_state_takes_the_host_states_steps_and_certifies_the_cpu_optimum() {
        let Some(gpu) = gpu() else { return };
        let mut rng = StdRng::seed_from_u64(7);
        let uniform = DMatrix::from_fn(200, 3, |_, _| rng.random::<f64>() - 0.5);
        let c = 1.0 / (2.0 * std::f64::consts::PI).sqrt();
        let normal = Normal::new(0.0, c.sqrt()).unwrap();
        let mixture = DMatrix::from_fn(300, 10, |i, k| normal.sample(&mut rng) + if k == 0 { if i % 2 == 0 { 2.0 } else { -2.0 } } else { 0.0 });
        let problems = [
            Density::new(uniform, 30, 0.8, 2.0, (1e-3, 1e-4), SolverOptions { tolerance: 1e-6, max_iterations: 3000, check_every: 2 }),
            Density::new(mixture, 100, 1.0, 5.0, (1e-4, 1e-6), SolverOptions { tolerance: 1e-4, max_iterations: 300, check_every: 2 }),
        ];
        for (k, p) in problems.iter().enumerate() {
            let phi = p.features.resident_features(&gpu, &gpu.upload(&p.x, Precision::F64).unwrap()).unwrap();
            let resident = Features::Resident { device: &gpu, phi: &phi };
            let on_device = p.solve(resident, true);
            let on_host = p.solve(resident, false);
            let host_features = p.features.features(&Device::Cpu, &p.x).unwrap();
            let cpu = p.solve(Features::Host(&host_features), false);
            let (rd, rh, rc) = (&on_device.report, &on_host.report, &cpu.report);
            eprintln!("problem {k}: iterations device {} host {} cpu {}; gaps {:e} {:e} {:e}; primal {} {} {}", rd.iterations, rh.iterations, rc.iterations, rd.gap, rh.gap, rc.gap, rd.primal, rh.primal, rc.primal);
            assert_eq!(rd.iterations, rh.iterations, "problem {k}: iterations with the state on the device and on the host");
            assert!(rd.iterations.abs_diff(rc.iterations) <= 2, "problem {k}: {} iterations with the state on the device, {} on the CPU", rd.iterations, rc.iterations);
            let tolerance = p.options.tolerance;
            for (name, other) in [("host state", rh), ("cpu", rc)] {
                assert!(rd.gap <= tolerance && other.gap <= tolerance, "problem {k} vs {name}: gaps {:e} {:e}", rd.gap, other.gap);
                assert!((rd.primal - other.primal).abs() <= rd.gap + other.gap + 1e-12 * rd.primal.abs(), "problem {k} vs {name}: primal {} vs {}", rd.primal, other.primal);
            }
            for (name, other) in [("host state", &on_host), ("cpu", &cpu)] {
                let a = &on_device.parts[0];
                let b = &other.parts[0];
                let certified = ((2.0 * rd.gap.max(0.0) / p.lambda.1).sqrt() + (2.0 * other.report.gap.max(0.0) / p.lambda.1).sqrt()) / b.norm();
                let diff = (a - b).norm() / b.norm();
                eprintln!("problem {k} vs {name}: ||A - A'||_F / ||A'||_F = {diff:e} (certified by the gaps: {certified:e})");
                assert!(diff <= 1e-9 && diff <= certified, "problem {k} vs {name}: relative difference of A {diff:e}");
            }
        }
    }
}
