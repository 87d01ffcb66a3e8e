//! Projected damped Newton method (Bertsekas 1982, "Projected Newton methods
//! for optimization problems with simple constraints") for
//!
//! `min_z f(z)` subject to `z_j >= 0` for the indices in a given set,
//!
//! used by the regression baselines of Appendix D ([`super::baseline_regression`]).
//! `f` may be `+inf` outside an open domain (the Gaussian loss needs
//! `theta(x_i) > 0`); every accepted point has a finite value.
//!
//! Each iteration: the eps-active set `{j bounded: z_j <= eps, g_j > 0}`
//! (`eps` = the current residual) takes a projected gradient step; the free
//! variables a Newton step with `H_FF` (a ridge is added until its Cholesky
//! factorisation exists, so non-convex objectives get a descent direction
//! too; it starts at the current residual, as in regularised Newton
//! methods); then `z(t) = P(z + t d)` with Armijo backtracking
//! `f(z(t)) <= f(z) + 1e-4 g^T (z(t) - z)`. If no Newton step is accepted a
//! projected gradient step is tried instead.
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
        let free: Vec<usize> = (0..z.len()).filter(|&j| !(bounded[j] && z[j] <= eps && g[j] > 0.0)).collect();
        let mut d = -&g;
        if !free.is_empty() {
            let hff = DMatrix::from_fn(free.len(), free.len(), |a, b| h[(free[a], free[b])]);
            let gf = DVector::from_fn(free.len(), |a, _| g[free[a]]);
            let mean_diag = (0..free.len()).map(|a| hff[(a, a)].abs()).sum::<f64>() / free.len() as f64;
            // Regularised Newton: a ridge proportional to the residual keeps the
            // steps bounded along (near-)null directions of the Hessian (the
            // smoothed pinball loss is flat away from its kinks) and vanishes at
            // the solution, so the local convergence stays superlinear.
            let mut ridge = residual;
            let step = loop {
                let mut m = hff.clone();
                for a in 0..free.len() {
                    m[(a, a)] += ridge;
                }
                if let Some(chol) = m.cholesky() {
                    break Some(chol.solve(&(-&gf)));
                }
                ridge = (ridge * 10.0).max(1e-10 * mean_diag.max(f64::MIN_POSITIVE));
                if !ridge.is_finite() {
                    break None;
                }
            };
            if let Some(step) = step {
                for (a, &j) in free.iter().enumerate() {
                    d[j] = step[a];
                }
            }
        }
        let armijo = |zt: &DVector<f64>, ft: f64| ft.is_finite() && ft <= f + 1e-4 * g.dot(&(zt - &z));
        let mut accepted = None;
        let mut t = 1.0;
        while t > 1e-14 {
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
                stalled = if ft >= f { stalled + 1 } else { 0 };
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
