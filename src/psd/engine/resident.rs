//! The engine's FISTA with its state on the features' device: one PSD part
//! with coupling 1, one block, no linear part, the polar route and a loss
//! with a per-coordinate prox that runs there ([`ResidentLoss`]; the
//! density of Section 6).
//!
//! The dual point `z`, FISTA's momentum point and previous iterate, the
//! gradient `-u` (`u_i = p_i^T A p_i`, `A = [M]_+ / lambda_2`) and the
//! diagonal metric `D` (with `1/D`) are `n x 1` device vectors, and `M(z) =
//! -P diag(z) P^T - mu W - lambda_1 I` and `[M]_+` are `r x r` device
//! matrices, so nothing of length `n` crosses in an iteration. FISTA runs
//! in the metric `D` (the variable `w = D^{1/2} z` of the host path, here
//! in `z`): the candidate is `c = prox_{(t/D) L*}(y - (t/D) grad)`, its inner
//! products are `<grad, c - y>`, `||c - y||_D^2` and the restart criterion
//! `<y - c, c - x>_D`. Per candidate one read-back brings these three
//! numbers and `||M(c) - M(y)||_F^2` (the remainder bound,
//! `/(2 lambda_2)`) together. `M` at the extrapolated point `y = x +
//! beta (x - x_prev)` is `(1 + beta) M(x) - beta M(x_prev)` (affine in
//! `z`, coefficients summing to 1), `r x r` work. The loss values are sums
//! of element-wise terms (logs for the density), read back with the other
//! scalars of a gap check (`tr(A W)`) in one wait. The polar route's own
//! read-backs are `O(r)` numbers ([`super::super::polar`]).
//!
//! **Recording.** Every device operation of the solve (the extrapolation,
//! `M`, the polar route's products, the gradient, the prox, the inner
//! products and the loss terms) writes into a matrix of the setting's
//! [`Workspace`] and is recorded there, not submitted: the work between two
//! read-backs is one submission. Per candidate that is the polar route's
//! four read-backs at `y` (`||M||_F`, `||M^2||_F`, `tr P` and `||P||_F`,
//! the extrapolation recorded before the first, the products of the steps
//! before the third) and the step's one (the gradient, the prox, the inner
//! products and `M(c)` before it), each one submission of what was
//! recorded before it, then the read-back's copy (a second submission) and
//! its wait; an evaluation of `h` at the candidate (when the
//! remainder bound fails) adds the polar route's four at `c` and the loss
//! sums', a gap check one. The outputs come from the workspace's pool,
//! which hands a matrix out again once no point, cache or pending
//! temporary holds it: the pool fills during the first iterations (the
//! points FISTA keeps, their `M`, `[M]_+` and gradients, and the
//! temporaries of one candidate) and an iteration after that allocates no
//! device memory.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

use nalgebra::DVector;

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
    /// The vector (n x 1).
    pub(super) z: DeviceMatrix,
    cache: Rc<RefCell<PointCache>>,
}

#[derive(Default)]
struct PointCache {
    m: Option<DeviceMatrix>,
    pp: Option<PartMatrix>,
    /// `-u` and `tr(A W)` (0 without an integral), once computed.
    gradient: Option<DeviceMatrix>,
    /// `(id of y, ||M(self) - M(y)||_F^2 / (2 lambda_2))` for the point
    /// `y` this candidate was stepped from.
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

/// The device, the metric and the loss of a resident solve.
pub(super) struct ResidentSetting<'d> {
    pub(super) device: &'d Device,
    /// `D` (n x 1).
    pub(super) metric: DeviceMatrix,
    /// `1/D` (n x 1).
    pub(super) inverse_metric: DeviceMatrix,
    pub(super) loss: &'d dyn ResidentLoss,
    /// Where every operation of the solve is recorded, its outputs from
    /// the workspace's pool (module docs): the fit's workspace
    /// ([`State::workspace`]).
    pub(super) workspace: &'d Workspace<'d>,
}

impl<'d> ResidentSetting<'d> {
    /// The setting where the problem takes the resident path (module
    /// docs), `D` and `1/D` uploaded once; `None` elsewhere.
    pub(super) fn new<L: BlockLoss + ?Sized>(problem: &'d EngineProblem<'_, L>, state: &State<'d>, metric: Option<&DVector<f64>>) -> Result<Option<Self>, Error> {
        let (Some(metric), Some(loss), Some(device), Some(workspace)) = (metric, problem.loss.resident(), problem.features.device(), state.workspace) else { return Ok(None) };
        let one_part = problem.parts.len() == 1 && problem.parts[0] == [1.0];
        if !(state.resident && one_part && problem.linear.is_none() && problem.loss.blocks() == 1) {
            return Ok(None);
        }
        Ok(Some(ResidentSetting {
            device,
            metric: device.upload_vector(metric, Precision::F64)?,
            inverse_metric: device.upload_vector(&metric.map(|d| 1.0 / d), Precision::F64)?,
            loss,
            workspace,
        }))
    }
}

impl<'a, L: BlockLoss + ?Sized> EngineProblem<'a, L> {
    /// `M(z)` at a resident point (cached there), recorded in the workspace.
    fn resident_m(&self, setting: &ResidentSetting<'_>, point: &ResidentPoint, mu: f64, state: &mut State<'_>) -> Result<DeviceMatrix, Error> {
        if let Some(m) = &point.cache.borrow().m {
            return Ok(m.clone());
        }
        let start = Instant::now();
        let ws = setting.workspace;
        let phi = self.features.resident_phi()?;
        let (r, precision) = (phi.ncols(), point.z.precision());
        let g = ws.take(r, r, precision)?;
        ws.weighted_gram_into(phi, &point.z, &g)?;
        let m = ws.take(r, r, precision)?;
        match &state.integral_resident {
            Some(w) => ws.combine_into(-1.0, &g, -mu, w, -self.lambda1, &m)?,
            None => ws.combine_into(-1.0, &g, 0.0, &g, -self.lambda1, &m)?,
        }
        point.cache.borrow_mut().m = Some(m.clone());
        state.products += start.elapsed().as_secs_f64();
        Ok(m)
    }

    /// `[M(z)]_+` at a resident point (cached there).
    fn resident_part(&self, setting: &ResidentSetting<'_>, point: &ResidentPoint, mu: f64, state: &mut State<'_>) -> Result<PartMatrix, Error> {
        if let Some(pp) = &point.cache.borrow().pp {
            return Ok(pp.clone());
        }
        let m = self.resident_m(setting, point, mu, state)?;
        let start = Instant::now();
        let (pp, _) = state.parts[0].eigen_solver.compute_part_in(setting.workspace, &m)?;
        state.eigen += start.elapsed().as_secs_f64();
        point.cache.borrow_mut().pp = Some(pp.clone());
        Ok(pp)
    }

    /// The gradient `-u` (n x 1, `u_i = p_i^T A p_i` from `Phi A` and its
    /// row dots with `Phi`) at a resident point (cached there), recorded
    /// in the workspace.
    fn resident_gradient(&self, setting: &ResidentSetting<'_>, point: &ResidentPoint, mu: f64, state: &mut State<'_>) -> Result<DeviceMatrix, Error> {
        if let Some(g) = &point.cache.borrow().gradient {
            return Ok(g.clone());
        }
        let pp = self.resident_part(setting, point, mu, state)?;
        let PartMatrix::Resident(part) = &pp else { return Err(Error::InvalidParameter { name: "positive part", reason: "the resident solve needs the polar route's resident [M]_+".into() }) };
        let start = Instant::now();
        let ws = setting.workspace;
        let phi = self.features.resident_phi()?;
        let (n, r, precision) = (phi.nrows(), phi.ncols(), point.z.precision());
        let phi_a = ws.take(n, r, precision)?;
        ws.matmul_into(phi, &part.matrix, MatrixProduct::AB, &phi_a)?;
        let products = ws.take(n, r, precision)?;
        ws.hadamard_into(&phi_a, phi, &products)?;
        let forms = ws.take(n, 1, precision)?;
        ws.row_reduction_into(&products, false, &forms)?;
        let g = ws.take(n, 1, precision)?;
        ws.combine_into(-1.0 / self.lambda2, &forms, 0.0, &forms, 0.0, &g)?;
        point.cache.borrow_mut().gradient = Some(g.clone());
        state.products += start.elapsed().as_secs_f64();
        Ok(g)
    }

    /// Everything the gap needs at a resident point: the evaluation (its
    /// `u` empty: the model values stay on the device) and the loss terms
    /// (`L(u)` as `plain`), from one read-back of the loss sums and `tr(A W)`.
    pub(super) fn resident_terms(&self, setting: &ResidentSetting<'_>, point: &ResidentPoint, mu: f64, state: &mut State<'_>) -> Result<(Evaluation, LossTerms), Error> {
        let pp = self.resident_part(setting, point, mu, state)?;
        let gradient = self.resident_gradient(setting, point, mu, state)?;
        let ws = setting.workspace;
        let conjugate = setting.loss.conjugate_terms(ws, &point.z)?;
        let value = setting.loss.value_terms(ws, &gradient, -1.0)?;
        let mut vectors: Vec<&DeviceMatrix> = conjugate.iter().chain(value.iter()).collect();
        let trace_terms = match (&state.integral_resident, &pp) {
            (Some(w), PartMatrix::Resident(part)) => {
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
        let sums = ws.sums(&vectors)?;
        let (conjugate_sums, rest) = sums.split_at(conjugate.len());
        let (value_sums, trace) = rest.split_at(value.len());
        let trace_aw = trace.first().map_or(0.0, |t| t / self.lambda2);
        let plain = setting.loss.value_from_sums(value_sums);
        let scaled = match self.integral {
            None => plain,
            Some(_) if trace_aw > 0.0 => setting.loss.value_at_scale(plain, trace_aw),
            Some(_) => f64::INFINITY,
        };
        let ev = Evaluation { pps: vec![pp], u: DVector::zeros(0), trace_aw, w: DVector::zeros(0), linear_energy: 0.0 };
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
            let out = self.resident_part(setting, y, mu, &mut st).and_then(|pp| {
                let value = self.psd_energy(std::slice::from_ref(&pp));
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
            let out = setting.loss.conjugate_terms(setting.workspace, &x.z).and_then(|terms| setting.workspace.sums(&terms.iter().collect::<Vec<_>>()));
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
        let y = ResidentPoint::new(ws.take(x.z.nrows(), 1, x.z.precision())?);
        ws.combine_into(1.0 + beta, &x.z, -beta, &x_prev.z, 0.0, &y.z)?;
        let ms = (x.cache.borrow().m.clone(), x_prev.cache.borrow().m.clone());
        if let (Some(mx), Some(mp)) = ms {
            let start = Instant::now();
            let m = ws.take(mx.nrows(), mx.ncols(), mx.precision())?;
            ws.combine_into(1.0 + beta, &mx, -beta, &mp, 0.0, &m)?;
            y.cache.borrow_mut().m = Some(m);
            self.state.borrow_mut().products += start.elapsed().as_secs_f64();
        }
        Ok(y)
    }

    fn step(&mut self, y: &ResidentPoint, grad: &ResidentPoint, t: f64, x: &ResidentPoint) -> Result<(ResidentPoint, [f64; 3]), Error> {
        self.check()?;
        let s = self.setting;
        let ws = s.workspace;
        let (n, precision) = (y.z.nrows(), y.z.precision());
        let vector = || ws.take(n, 1, precision);
        // c = prox_{(t/D) L*}(y - (t/D) grad).
        let scaled = vector()?;
        ws.hadamard_into(&grad.z, &s.inverse_metric, &scaled)?;
        let v = vector()?;
        ws.combine_into(1.0, &y.z, -t, &scaled, 0.0, &v)?;
        let cand = ResidentPoint::new(vector()?);
        s.loss.prox_conjugate_resident(ws, &v, &s.inverse_metric, t, &cand.z)?;
        let d = vector()?;
        ws.combine_into(1.0, &cand.z, -1.0, &y.z, 0.0, &d)?;
        let grad_d = vector()?;
        ws.hadamard_into(&grad.z, &d, &grad_d)?;
        let d_metric = vector()?;
        ws.hadamard_into(&d, &s.metric, &d_metric)?;
        let d_squared = vector()?;
        ws.hadamard_into(&d, &d_metric, &d_squared)?;
        // <y - c, c - x>_D = -<D d, c - x>.
        let from_cand = vector()?;
        ws.combine_into(-1.0, &cand.z, 1.0, &x.z, 0.0, &from_cand)?;
        let direction = vector()?;
        ws.hadamard_into(&d_metric, &from_cand, &direction)?;
        let mut st = self.state.borrow_mut();
        let m_c = self.problem.resident_m(s, &cand, self.mu, &mut st)?;
        let m_y = self.problem.resident_m(s, y, self.mu, &mut st)?;
        let start = Instant::now();
        let difference = ws.take(m_c.nrows(), m_c.ncols(), precision)?;
        ws.combine_into(1.0, &m_c, -1.0, &m_y, 0.0, &difference)?;
        let distance = ws.take(m_c.nrows(), 1, precision)?;
        ws.row_reduction_into(&difference, true, &distance)?;
        let sums = ws.sums(&[&grad_d, &d_squared, &direction, &distance])?;
        st.products += start.elapsed().as_secs_f64();
        cand.cache.borrow_mut().remainder = Some((y.id(), sums[3] / (2.0 * self.problem.lambda2)));
        Ok((cand, [sums[0], sums[1], sums[2]]))
    }
}

#[cfg(test)]
mod tests {
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

    fn gpu() -> Option<Device> {
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
