//! FISTA with backtracking (Beck & Teboulle 2009, Section 4) and adaptive
//! restart (O'Donoghue & Candes 2015) for `min_x h(x) + g(x)`, `h` smooth,
//! `g` with a computable proximal operator.
//!
//! The step may grow as well as shrink (Scheinberg, Goldfarb & Bai 2014,
//! FISTA with full backtracking): iteration k tries `t_k = t_{k-1} / 0.8`,
//! `theta_k = (1 + sqrt(1 + 4 theta_{k-1}^2 t_{k-1}/t_k))/2`,
//! `y = x_k + (theta_{k-1} - 1)/theta_k (x_k - x_{k-1})`,
//! `x+ = prox_{t g}(y - t grad h(y))`, accepted when
//! `h(x+) <= h(y) + <grad h(y), x+ - y> + ||x+ - y||^2/(2t)`, otherwise `t <- t/2`
//! and the extrapolation is recomputed. The momentum is reset when the
//! objective increases. Once changes of `h` are at round-off level
//! (`|h(x+) - h(y)| <= 1e-9 |h(y)|`) the step stops growing, since the test
//! can no longer reject a step that is too long.
//!
//! **Skipping `h(x+)`.** Where the caller can bound the remainder
//! `h(x+) - h(y) - <grad h(y), x+ - y> <= rho(y, x+)` more cheaply than it can
//! evaluate `h(x+)` ([`minimise_with_bound`]), a step with
//! `rho <= ||x+ - y||^2 / (2t)` passes the sufficient-decrease test without
//! evaluating `h`; only when the bound fails is `h(x+)` computed and the
//! test above applied. On such steps the momentum is reset by the gradient
//! criterion of O'Donoghue & Candes (`<y - x+, x+ - x_k> > 0`) instead of the
//! objective, which is not known there, and the next iteration tries a longer
//! step only if the bound would still hold for it (`rho <= 0.8 ||x+ - y||^2 / (2t)`).

use nalgebra::DVector;

/// Each iteration first tries the previous step divided by this factor.
const SHRINK_TO_GROW: f64 = 0.8;

/// Outcome of [`minimise`].
#[derive(Debug, Clone)]
pub struct FistaOutcome<V = DVector<f64>> {
    /// Last iterate.
    pub x: V,
    /// Iterations done.
    pub iterations: usize,
    /// Last stopping-rule value (duality gap).
    pub gap: f64,
    /// `(iteration, gap)` at every check.
    pub gap_history: Vec<(usize, f64)>,
    /// Final step size.
    pub step: f64,
}

/// Budget and stopping rule of [`minimise`].
#[derive(Debug, Clone, Copy)]
pub struct FistaSettings {
    /// Initial step (backtracking only decreases it).
    pub initial_step: f64,
    /// Maximum number of iterations.
    pub max_iterations: usize,
    /// Stop when the gap is at most this.
    pub tolerance: f64,
    /// Evaluate the gap every this many iterations.
    pub check_every: usize,
}

/// Where FISTA's vectors live and how its vector operations run: the
/// host's `DVector` ([`HostSpace`]) or vectors resident on a device. The
/// method itself ([`minimise_in`]) sees only these operations and scalars.
pub trait FistaSpace {
    /// An iterate, extrapolated point or gradient.
    type Vector: Clone;
    /// A failure of a vector operation.
    type Error;
    /// The extrapolated point `x + beta (x - x_prev)`.
    fn extrapolate(&mut self, x: &Self::Vector, x_prev: &Self::Vector, beta: f64) -> Result<Self::Vector, Self::Error>;
    /// The candidate `c = prox_{t g}(y - t grad)` with the inner products
    /// `[<grad, c - y>, ||c - y||^2]` of the sufficient-decrease test and
    /// `<y - c, c - x>` of the gradient restart criterion (`x` the current
    /// iterate), computed together.
    fn step(&mut self, y: &Self::Vector, grad: &Self::Vector, t: f64, x: &Self::Vector) -> Result<(Self::Vector, [f64; 3]), Self::Error>;
}

/// FISTA's vectors on the host: `prox(v, t)` is `prox_{t g}(v)`, and
/// `sum(values)` replaces each of `values` by its sum over the ranks of a
/// sharded solve (nothing in one process).
pub struct HostSpace<P, S> {
    /// `prox_{t g}`.
    pub prox: P,
    /// The sum over the ranks.
    pub sum: S,
}

impl<P: Fn(&DVector<f64>, f64) -> DVector<f64>, S: FnMut(&mut [f64])> FistaSpace for HostSpace<P, S> {
    type Vector = DVector<f64>;
    type Error = std::convert::Infallible;
    fn extrapolate(&mut self, x: &DVector<f64>, x_prev: &DVector<f64>, beta: f64) -> Result<DVector<f64>, Self::Error> {
        Ok(x + (x - x_prev) * beta)
    }
    fn step(&mut self, y: &DVector<f64>, grad: &DVector<f64>, t: f64, x: &DVector<f64>) -> Result<(DVector<f64>, [f64; 3]), Self::Error> {
        let cand = (self.prox)(&(y - grad * t), t);
        let d = &cand - y;
        let mut dots = [grad.dot(&d), d.norm_squared(), (y - &cand).dot(&(&cand - x))];
        (self.sum)(&mut dots);
        Ok((cand, dots))
    }
}

/// Runs FISTA. `smooth(x, want_gradient)` returns `h(x)` and, when asked,
/// `grad h(x)`; `prox(v, t)` is `prox_{t g}(v)`; `nonsmooth(x)` is `g(x)`;
/// `gap(x)` is the stopping-rule value at an iterate.
pub fn minimise(
    smooth: impl FnMut(&DVector<f64>, bool) -> (f64, Option<DVector<f64>>),
    prox: impl Fn(&DVector<f64>, f64) -> DVector<f64>,
    nonsmooth: impl Fn(&DVector<f64>) -> f64,
    gap: impl FnMut(&DVector<f64>) -> f64,
    x0: DVector<f64>,
    settings: FistaSettings,
) -> FistaOutcome {
    minimise_with_bound(smooth, |_, _| None, prox, nonsmooth, gap, x0, settings)
}

/// [`minimise`] with `remainder_bound(y, x)`, an upper bound on
/// `h(x) - h(y) - <grad h(y), x - y>` (or `None`), that lets a step be
/// accepted without evaluating `h(x)` (module docs).
pub fn minimise_with_bound(
    smooth: impl FnMut(&DVector<f64>, bool) -> (f64, Option<DVector<f64>>),
    remainder_bound: impl FnMut(&DVector<f64>, &DVector<f64>) -> Option<f64>,
    prox: impl Fn(&DVector<f64>, f64) -> DVector<f64>,
    nonsmooth: impl Fn(&DVector<f64>) -> f64,
    gap: impl FnMut(&DVector<f64>) -> f64,
    x0: DVector<f64>,
    settings: FistaSettings,
) -> FistaOutcome {
    minimise_with_bound_sharded(smooth, remainder_bound, prox, nonsmooth, gap, |_| {}, x0, settings)
}

/// [`minimise_with_bound`] on vectors sharded over ranks (each caller holds
/// a block of the coordinates): `sum(values)` replaces each of `values` by
/// its sum over the ranks, and is applied to the inner products of the
/// method (`<grad h(y), x+ - y>`, `||x+ - y||^2` and the restart test's
/// `<y - x+, x+ - x_k>`, one call per candidate); the callbacks
/// return values that are the same on every rank (`h`, `g`, the bound and
/// the gap are sums over the ranks), so every rank takes the same steps.
/// With one rank `sum` does nothing and this is [`minimise_with_bound`].
#[allow(clippy::too_many_arguments)]
pub fn minimise_with_bound_sharded(
    smooth: impl FnMut(&DVector<f64>, bool) -> (f64, Option<DVector<f64>>),
    remainder_bound: impl FnMut(&DVector<f64>, &DVector<f64>) -> Option<f64>,
    prox: impl Fn(&DVector<f64>, f64) -> DVector<f64>,
    nonsmooth: impl Fn(&DVector<f64>) -> f64,
    gap: impl FnMut(&DVector<f64>) -> f64,
    sum: impl FnMut(&mut [f64]),
    x0: DVector<f64>,
    settings: FistaSettings,
) -> FistaOutcome {
    match minimise_in(HostSpace { prox, sum }, smooth, remainder_bound, nonsmooth, gap, x0, settings) {
        Ok(outcome) => outcome,
        Err(never) => match never {},
    }
}

/// [`minimise_with_bound`] with the vectors and their operations in
/// `space` (module docs); the callbacks are as there. Errors: the first
/// failure of an operation of `space`.
pub fn minimise_in<S: FistaSpace>(
    mut space: S,
    mut smooth: impl FnMut(&S::Vector, bool) -> (f64, Option<S::Vector>),
    mut remainder_bound: impl FnMut(&S::Vector, &S::Vector) -> Option<f64>,
    nonsmooth: impl Fn(&S::Vector) -> f64,
    mut gap: impl FnMut(&S::Vector) -> f64,
    x0: S::Vector,
    settings: FistaSettings,
) -> Result<FistaOutcome<S::Vector>, S::Error> {
    let mut x_prev = x0.clone();
    let mut x = x0;
    let mut theta = 1.0f64;
    let mut t = settings.initial_step;
    let mut objective = f64::INFINITY;
    let mut history = Vec::new();
    let mut last_gap = f64::INFINITY;
    let mut iterations = 0;
    let mut grow = true;
    while iterations < settings.max_iterations {
        iterations += 1;
        // Try a longer step first; shrink until the sufficient-decrease test holds.
        let mut t_new = if grow { t / SHRINK_TO_GROW } else { t };
        // `h_new` is `None` when the step was accepted through the remainder bound.
        let (x_new, h_new, direction, theta_new) = loop {
            let theta_new = (1.0 + (1.0 + 4.0 * theta * theta * t / t_new).sqrt()) / 2.0;
            let y = space.extrapolate(&x, &x_prev, (theta - 1.0) / theta_new)?;
            let (hy, grad) = smooth(&y, true);
            let grad = grad.expect("gradient requested");
            let (cand, [grad_d, d_squared, direction]) = space.step(&y, &grad, t_new, &x)?;
            if let Some(rho) = remainder_bound(&y, &cand) {
                let allowed = d_squared / (2.0 * t_new);
                if rho <= allowed {
                    // Grow the next step only if the bound leaves room for it.
                    grow = rho <= SHRINK_TO_GROW * allowed;
                    break (cand, None, direction, theta_new);
                }
            }
            let (h_cand, _) = smooth(&cand, false);
            let bound = hy + grad_d + d_squared / (2.0 * t_new);
            if h_cand <= bound + 8.0 * f64::EPSILON * hy.abs() || t_new < 1e-300 {
                // Near the optimum the test is decided by round-off: stop growing the step.
                grow = (h_cand - hy).abs() > 1e-9 * hy.abs();
                break (cand, Some(h_cand), direction, theta_new);
            }
            t_new *= 0.5;
        };
        t = t_new;
        let restart = match h_new {
            Some(h) => {
                let obj_new = h + nonsmooth(&x_new);
                let increased = obj_new > objective;
                objective = obj_new.min(objective);
                increased
            }
            None => direction > 0.0,
        };
        if restart {
            // Adaptive restart: drop the momentum.
            theta = 1.0;
            x_prev = x_new.clone();
        } else {
            theta = theta_new;
            x_prev = x;
        }
        x = x_new;
        if iterations % settings.check_every == 0 || iterations == settings.max_iterations {
            last_gap = gap(&x);
            history.push((iterations, last_gap));
            if last_gap <= settings.tolerance {
                break;
            }
        }
    }
    Ok(FistaOutcome { x, iterations, gap: last_gap, gap_history: history, step: t })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solves_a_nonnegative_least_squares_problem() {
        // min 1/2 ||x - c||^2_D + indicator(x >= 0): solution max(c, 0).
        let c = DVector::from_vec(vec![1.0, -2.0, 0.5, -0.1]);
        let dw = DVector::from_vec(vec![1.0, 3.0, 0.5, 2.0]);
        let out = minimise(
            |x, g| {
                let r = x - &c;
                (0.5 * r.component_mul(&dw).dot(&r), if g { Some(r.component_mul(&dw)) } else { None })
            },
            |v, _| v.map(|a| a.max(0.0)),
            |_| 0.0,
            |x| (x - c.map(|a| a.max(0.0))).norm(),
            DVector::zeros(4),
            FistaSettings { initial_step: 10.0, max_iterations: 500, tolerance: 1e-10, check_every: 1 },
        );
        assert!(out.gap <= 1e-10, "gap {}", out.gap);
        assert!(out.step < 10.0, "backtracking must shrink a step that is too long");
    }

    #[test]
    fn remainder_bound_skips_evaluations_and_reaches_the_same_solution() {
        // min 1/2 x^T D x - c^T x + indicator(x >= 0); the remainder is
        // 1/2 d^T D d <= 1/2 max(D) ||d||^2, a tight bound for D close to 2 I.
        let c = DVector::from_vec(vec![1.0, -2.0, 0.5, -0.1, 3.0]);
        let dw = DVector::from_vec(vec![2.0, 2.2, 1.9, 2.1, 2.05]);
        let solution = c.component_div(&dw).map(|a: f64| a.max(0.0));
        let value_only_calls = std::cell::Cell::new(0);
        let out = minimise_with_bound(
            |x, g| {
                if !g {
                    value_only_calls.set(value_only_calls.get() + 1);
                }
                (0.5 * x.component_mul(&dw).dot(x) - c.dot(x), if g { Some(x.component_mul(&dw) - &c) } else { None })
            },
            |y, x| Some(0.5 * 2.2 * (x - y).norm_squared()),
            |v, _| v.map(|a| a.max(0.0)),
            |_| 0.0,
            |x| (x - &solution).norm(),
            DVector::zeros(5),
            FistaSettings { initial_step: 10.0, max_iterations: 2000, tolerance: 1e-10, check_every: 1 },
        );
        assert!(out.gap <= 1e-10, "gap {}", out.gap);
        // Halving the step from 10 to below 1/2.2 takes 5 exact tests; after
        // that every step passes through the bound (without it: one per iteration).
        assert!(value_only_calls.get() <= 6 && out.iterations >= 10, "{} value-only evaluations in {} iterations", value_only_calls.get(), out.iterations);
    }
}
