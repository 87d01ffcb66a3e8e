//! Projected damped Newton method (Bertsekas 1982, "Projected Newton methods
//! for optimization problems with simple constraints") for
//!
//! `min_z f(z)` subject to `z_j >= 0` for the indices in a given set,
//!
//! used by the regression baselines of Appendix D ([`super::baseline_regression`]).
//! `f` may be `+inf` outside an open domain (the Gaussian loss needs
//! `theta(x_i) > 0`); every accepted point has a finite value.
//!
//! Each iteration takes the Newton direction of the bound-constrained
//! quadratic model (a proximal Newton step, Lee, Sun and Saunders 2014):
//!
//! `d = argmin_d g^T d + 1/2 d^T M d` subject to `z_j + d_j >= 0` (bounded `j`),
//!
//! with `M = H + rho I` (the ridge `rho` starts at the current residual, as in
//! regularised Newton methods, and grows until `M` has a Cholesky
//! factorisation, so non-convex objectives get a descent direction too),
//! solved exactly by a primal active-set method ([`box_newton_direction`])
//! warm-started from the eps-active set `{j bounded: z_j <= eps, g_j > 0}`
//! (`eps` = the current residual, at most `1e-3`). The segment `z + t d`,
//! `t in [0, 1]`, is feasible, and `t` follows Armijo backtracking
//! `f(z + t d) <= f(z) + 1e-4 g^T (t d)`. If no step is accepted a projected
//! gradient step is tried instead.
//!
//! (Earlier versions projected a Newton step on the free variables only;
//! with many coefficients near their bound the free set then flipped from
//! one iteration to the next, the projected steps were cut to `t ~ 1e-4`,
//! and some fits stopped at the iteration budget.)
//!
//! Stopping rule (first-order optimality): the projected-gradient residual
//! `max_j |z_j - P(z - grad f(z))_j| <= tolerance`.

use nalgebra::{DMatrix, DVector};

/// Budget and tolerance of [`minimise`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewtonSettings {
    /// Stop when the projected-gradient residual is at most this.
    pub tolerance: f64,
    /// Maximum number of Newton iterations.
    pub max_iterations: usize,
}

/// Result of [`minimise`].
#[derive(Debug, Clone)]
pub(crate) struct NewtonOutcome {
    /// Last iterate (feasible, finite objective).
    pub z: DVector<f64>,
    /// Objective there.
    pub objective: f64,
    /// Projected-gradient residual there.
    pub residual: f64,
    /// Iterations done.
    pub iterations: usize,
}

/// The smallest ridge `rho` in `residual, 10 residual, ..` (at least
/// `1e-10` of the mean absolute diagonal once grown) for which `H + rho I`
/// has a Cholesky factorisation; `None` if it never does (non-finite `H`).
fn ridged_cholesky_ridge(h: &DMatrix<f64>, residual: f64) -> Option<f64> {
    let p = h.nrows();
    if p == 0 {
        return Some(0.0);
    }
    let mean_diag = (0..p).map(|a| h[(a, a)].abs()).sum::<f64>() / p as f64;
    let mut ridge = residual;
    for _ in 0..400 {
        let mut m = h.clone();
        for a in 0..p {
            m[(a, a)] += ridge;
        }
        if m.cholesky().is_some() {
            return Some(ridge);
        }
        ridge = (ridge * 10.0).max(1e-10 * mean_diag.max(f64::MIN_POSITIVE));
        if !ridge.is_finite() {
            return None;
        }
    }
    None
}

/// The minimiser of the quadratic model `q(d) = g^T d + 1/2 d^T M d`,
/// `M = H + ridge I` positive definite, over `d_j >= -z_j` for the bounded
/// `j`, by the primal active-set method (Nocedal and Wright, Algorithm 16.3):
/// a working set `W` of variables held at their bound, Newton steps on the
/// others (`M_FF d_F = -(g_F + M_FW d_W)`), a blocking bound added when a
/// step would cross it, and the variable with the most negative multiplier
/// `(g + M d)_j` released when the step is feasible. It starts from the
/// eps-active set held at its bound (`d_j = -z_j`, `d = 0` elsewhere), or
/// from `d = 0` with an empty `W` if that start has `q > 0`, and `q`
/// decreases monotonically from there. The loop stops at the exact
/// minimiser or after `4 p + 20` changes of `W`, returning the last
/// feasible `d` (`q(d) <= 0`, a descent direction unless `d = 0`).
fn box_newton_direction(g: &DVector<f64>, h: &DMatrix<f64>, ridge: f64, z: &DVector<f64>, bounded: &[bool], eps: f64) -> DVector<f64> {
    let p = g.len();
    let mut m = h.clone();
    for a in 0..p {
        m[(a, a)] += ridge;
    }
    // Working set: at its bound d_j = -z_j. Start with the eps-active
    // variables whose bound is z_j = 0 exactly or that the gradient pushes
    // outwards; d starts at 0 elsewhere and at -z_j on W (feasible).
    let mut in_w: Vec<bool> = (0..p).map(|j| bounded[j] && z[j] <= eps && g[j] > 0.0).collect();
    let mut d = DVector::from_fn(p, |j, _| if in_w[j] { -z[j] } else { 0.0 });
    let q = |d: &DVector<f64>| g.dot(d) + 0.5 * d.dot(&(&m * d));
    // A start that raises q (large z_j on W) is replaced by d = 0 with an empty W.
    if q(&d) > 0.0 {
        in_w.iter_mut().for_each(|w| *w = false);
        d.fill(0.0);
    }
    let tol = 1e-12 * (g.amax() + 1.0);
    for _ in 0..4 * p + 20 {
        let free: Vec<usize> = (0..p).filter(|&j| !in_w[j]).collect();
        let mut target = d.clone();
        if !free.is_empty() {
            // rhs = -(g_F + M_FW d_W)
            let rhs = DVector::from_fn(free.len(), |a, _| {
                let j = free[a];
                -(g[j] + (0..p).filter(|&k| in_w[k]).map(|k| m[(j, k)] * d[k]).sum::<f64>())
            });
            let mff = DMatrix::from_fn(free.len(), free.len(), |a, b| m[(free[a], free[b])]);
            let Some(chol) = mff.cholesky() else { break };
            let step = chol.solve(&rhs);
            for (a, &j) in free.iter().enumerate() {
                target[j] = step[a];
            }
        }
        // Largest feasible fraction of the move d -> target.
        let mut alpha = 1.0;
        let mut blocking = None;
        for &j in &free {
            if bounded[j] && target[j] < -z[j] && d[j] > target[j] {
                let a = (d[j] + z[j]) / (d[j] - target[j]);
                if a < alpha {
                    alpha = a.max(0.0);
                    blocking = Some(j);
                }
            }
        }
        d += (&target - &d) * alpha;
        if let Some(j) = blocking {
            d[j] = -z[j];
            in_w[j] = true;
            continue;
        }
        // Feasible Newton point of the working set: release the most negative multiplier.
        let grad = g + &m * &d;
        let release = (0..p).filter(|&j| in_w[j]).min_by(|&a, &b| grad[a].total_cmp(&grad[b]));
        match release {
            Some(j) if grad[j] < -tol => in_w[j] = false,
            _ => break,
        }
    }
    d
}

/// `max_j |z_j - P(z - g)_j|` for the bound set `bounded`.
pub(crate) fn projected_gradient_residual(z: &DVector<f64>, g: &DVector<f64>, bounded: &[bool]) -> f64 {
    (0..z.len()).map(|j| if bounded[j] { (z[j] - (z[j] - g[j]).max(0.0)).abs() } else { g[j].abs() }).fold(0.0, f64::max)
}

/// Minimises `value` (`+inf` outside its domain) from the feasible `z0`;
/// `derivatives(z)` returns the gradient and the Hessian at a point of finite value.
pub(crate) fn minimise(
    value: impl Fn(&DVector<f64>) -> f64,
    derivatives: impl Fn(&DVector<f64>) -> (DVector<f64>, DMatrix<f64>),
    bounded: &[bool],
    z0: DVector<f64>,
    settings: NewtonSettings,
) -> NewtonOutcome {
    let project = |z: &DVector<f64>| DVector::from_fn(z.len(), |j, _| if bounded[j] { z[j].max(0.0) } else { z[j] });
    let mut z = project(&z0);
    let mut f = value(&z);
    let mut residual = f64::INFINITY;
    let mut iterations = 0;
    let mut stalled = 0;
    while iterations < settings.max_iterations {
        let (g, h) = derivatives(&z);
        residual = projected_gradient_residual(&z, &g, bounded);
        if residual <= settings.tolerance || !residual.is_finite() {
            break;
        }
        iterations += 1;
        let eps = residual.min(1e-3);
        // Regularised Newton: a ridge proportional to the residual keeps the
        // steps bounded along (near-)null directions of the Hessian (the
        // smoothed pinball loss is flat away from its kinks) and vanishes at
        // the solution, so the local convergence stays superlinear.
        let d = match ridged_cholesky_ridge(&h, residual) {
            Some(ridge) => box_newton_direction(&g, &h, ridge, &z, bounded, eps),
            None => -&g,
        };
        let armijo = |zt: &DVector<f64>, ft: f64| ft.is_finite() && ft <= f + 1e-4 * g.dot(&(zt - &z));
        let mut accepted = None;
        let mut by_residual = false;
        // Near the solution the decrease a Newton step promises can fall below
        // the rounding of `f` itself (here `|g^T d| <= 64 eps max(1, |f|)`); Armijo
        // then fails on noise and backtracking stalls the iteration. The full step
        // is then accepted when `f` stays within that rounding and the residual,
        // which still carries information, goes down.
        let rounding = 64.0 * f64::EPSILON * f.abs().max(1.0);
        let full = project(&(&z + &d));
        if -g.dot(&(&full - &z)) <= rounding {
            let ft = value(&full);
            if ft.is_finite() && ft <= f + rounding && projected_gradient_residual(&full, &derivatives(&full).0, bounded) < residual {
                accepted = Some((full, ft));
                by_residual = true;
            }
        }
        let mut t = 1.0;
        while accepted.is_none() && t > 1e-14 {
            let zt = project(&(&z + &d * t));
            let ft = value(&zt);
            if armijo(&zt, ft) {
                accepted = Some((zt, ft));
                break;
            }
            t *= 0.5;
        }
        if accepted.is_none() {
            // Projected gradient step, scaled by the Hessian's diagonal.
            let scale = 1.0 / (0..z.len()).map(|j| h[(j, j)].abs()).fold(f64::MIN_POSITIVE, f64::max);
            let mut s = scale;
            while s > 1e-30 * scale {
                let zt = project(&(&z - &g * s));
                let ft = value(&zt);
                if armijo(&zt, ft) {
                    accepted = Some((zt, ft));
                    break;
                }
                s *= 0.5;
            }
        }
        match accepted {
            Some((zt, ft)) => {
                stalled = if ft >= f && !by_residual { stalled + 1 } else { 0 };
                z = zt;
                f = ft;
                if stalled >= 3 {
                    break;
                }
            }
            None => break,
        }
    }
    if iterations == settings.max_iterations || residual > settings.tolerance {
        let (g, _) = derivatives(&z);
        residual = projected_gradient_residual(&z, &g, bounded);
    }
    NewtonOutcome { z, objective: f, residual, iterations }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The box-constrained Newton direction satisfies the KKT conditions of
    /// its quadratic model on random problems: feasible, zero model
    /// gradient on the free variables, non-negative on those at the bound.
    #[test]
    fn box_newton_direction_solves_the_quadratic_model() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(17);
        for trial in 0..200 {
            let p = rng.random_range(1..25);
            let b = DMatrix::from_fn(p, p + 2, |_, _| rng.random_range(-1.0..1.0));
            let h = &b * b.transpose() * 10f64.powi(rng.random_range(-3..3));
            let g = DVector::from_fn(p, |_, _| rng.random_range(-1.0..1.0));
            let z = DVector::from_fn(p, |_, _| if rng.random::<bool>() { 0.0 } else { rng.random_range(0.0..0.5) });
            let bounded: Vec<bool> = (0..p).map(|_| rng.random_range(0.0..1.0) < 0.8).collect();
            let ridge = 1e-3;
            let d = box_newton_direction(&g, &h, ridge, &z, &bounded, 1e-3);
            let m = &h + DMatrix::identity(p, p) * ridge;
            let grad = &g + &m * &d;
            let scale = g.amax() + (&m * &d).amax();
            for j in 0..p {
                if bounded[j] {
                    assert!(d[j] >= -z[j] - 1e-14, "trial {trial}: infeasible d_{j}");
                }
                if bounded[j] && d[j] <= -z[j] + 1e-12 {
                    assert!(grad[j] >= -1e-9 * scale, "trial {trial}: multiplier {} at {j}", grad[j]);
                } else {
                    assert!(grad[j].abs() <= 1e-9 * scale, "trial {trial}: model gradient {} at free {j}", grad[j]);
                }
            }
        }
    }

    /// A large constant in the objective puts its rounding (`~1.5e-8` at
    /// `1e8`) above the decrease the last Newton steps promise; those steps
    /// are accepted on the residual, and the tolerance is still reached.
    #[test]
    fn converges_when_the_decrease_falls_below_the_objectives_rounding() {
        let a = DMatrix::from_row_slice(3, 3, &[4.0, 1.0, 0.5, 1.0, 3.0, 0.2, 0.5, 0.2, 2.0]);
        let b = DVector::from_vec(vec![1.0, -2.0, 0.5]);
        let offset = 1e8;
        // A smooth non-quadratic term so that Newton needs several steps.
        let value = |z: &DVector<f64>| offset + 0.5 * z.dot(&(&a * z)) - b.dot(z) + z.iter().map(|v| (1.0 + v * v).ln()).sum::<f64>();
        let derivatives = |z: &DVector<f64>| {
            let g = &a * z - &b + DVector::from_fn(3, |j, _| 2.0 * z[j] / (1.0 + z[j] * z[j]));
            let h = &a + DMatrix::from_fn(3, 3, |i, j| if i == j { 2.0 * (1.0 - z[j] * z[j]) / (1.0 + z[j] * z[j]).powi(2) } else { 0.0 });
            (g, h)
        };
        let out = minimise(value, derivatives, &[true, false, false], DVector::from_vec(vec![3.0, 4.0, -5.0]), NewtonSettings { tolerance: 1e-11, max_iterations: 100 });
        assert!(out.residual <= 1e-11, "residual {:e} after {} iterations", out.residual, out.iterations);
        assert!(out.iterations < 30, "{} iterations", out.iterations);
    }

    #[test]
    fn solves_a_bound_constrained_quadratic() {
        // min 1/2 z^T A z - b^T z, z_0 >= 0 (active), z_1 free: the KKT point is known.
        let a = DMatrix::from_row_slice(2, 2, &[2.0, 0.5, 0.5, 1.0]);
        let b = DVector::from_vec(vec![-1.0, 1.0]);
        let out = minimise(
            |z| 0.5 * z.dot(&(&a * z)) - b.dot(z),
            |z| (&a * z - &b, a.clone()),
            &[true, false],
            DVector::from_vec(vec![3.0, -2.0]),
            NewtonSettings { tolerance: 1e-12, max_iterations: 50 },
        );
        // z_0 = 0, z_1 = b_1 / a_11 = 1; gradient in z_0: 0.5 * 1 + 1 > 0.
        assert!(out.z[0].abs() < 1e-12 && (out.z[1] - 1.0).abs() < 1e-12, "{:?}", out.z);
        assert!(out.residual <= 1e-12);
    }
}
