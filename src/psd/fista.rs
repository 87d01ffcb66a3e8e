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

use nalgebra::DVector;

/// Each iteration first tries the previous step divided by this factor.
const SHRINK_TO_GROW: f64 = 0.8;

/// Outcome of [`minimise`].
#[derive(Debug, Clone)]
pub struct FistaOutcome {
    /// Last iterate.
    pub x: DVector<f64>,
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

/// Runs FISTA. `smooth(x, want_gradient)` returns `h(x)` and, when asked,
/// `grad h(x)`; `prox(v, t)` is `prox_{t g}(v)`; `nonsmooth(x)` is `g(x)`;
/// `gap(x)` is the stopping-rule value at an iterate.
pub fn minimise(
    mut smooth: impl FnMut(&DVector<f64>, bool) -> (f64, Option<DVector<f64>>),
    prox: impl Fn(&DVector<f64>, f64) -> DVector<f64>,
    nonsmooth: impl Fn(&DVector<f64>) -> f64,
    mut gap: impl FnMut(&DVector<f64>) -> f64,
    x0: DVector<f64>,
    settings: FistaSettings,
) -> FistaOutcome {
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
        let (x_new, h_new, theta_new) = loop {
            let theta_new = (1.0 + (1.0 + 4.0 * theta * theta * t / t_new).sqrt()) / 2.0;
            let y = &x + (&x - &x_prev) * ((theta - 1.0) / theta_new);
            let (hy, grad) = smooth(&y, true);
            let grad = grad.expect("gradient requested");
            let cand = prox(&(&y - &grad * t_new), t_new);
            let d = &cand - &y;
            let (h_cand, _) = smooth(&cand, false);
            let bound = hy + grad.dot(&d) + d.norm_squared() / (2.0 * t_new);
            if h_cand <= bound + 8.0 * f64::EPSILON * hy.abs() || t_new < 1e-300 {
                // Near the optimum the test is decided by round-off: stop growing the step.
                grow = (h_cand - hy).abs() > 1e-9 * hy.abs();
                break (cand, h_cand, theta_new);
            }
            t_new *= 0.5;
        };
        t = t_new;
        let obj_new = h_new + nonsmooth(&x_new);
        if obj_new > objective {
            // Adaptive restart: drop the momentum.
            theta = 1.0;
            x_prev = x_new.clone();
        } else {
            theta = theta_new;
            x_prev = x;
        }
        objective = obj_new.min(objective);
        x = x_new;
        if iterations % settings.check_every == 0 || iterations == settings.max_iterations {
            last_gap = gap(&x);
            history.push((iterations, last_gap));
            if last_gap <= settings.tolerance {
                break;
            }
        }
    }
    FistaOutcome { x, iterations, gap: last_gap, gap_history: history, step: t }
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
}
