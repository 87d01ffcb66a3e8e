//! The warm-started, certified partial eigensolver of `psd::positive_part`
//! must give the same `[M]_+` as the full eigendecomposition, and must fall
//! back to it when a positive direction appears outside its basis.

use crate::common;

use gramian::psd::positive_part::{positive_part_full, PositivePartSolver, Route};
use nalgebra::DMatrix;
use rand::rngs::StdRng;
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

fn gaussian(rng: &mut StdRng, rows: usize, cols: usize) -> DMatrix<f64> {
    DMatrix::from_fn(rows, cols, |_, _| StandardNormal.sample(rng))
}

/// `U diag(s) U^T` with a random orthogonal `U`.
fn with_spectrum(rng: &mut StdRng, s: &[f64]) -> DMatrix<f64> {
    let r = s.len();
    let u = gaussian(rng, r, r).qr().q();
    let mut us = u.clone();
    for (a, mut col) in us.column_iter_mut().enumerate() {
        col *= s[a];
    }
    let m = &us * u.transpose();
    (&m + m.transpose()) * 0.5
}

/// A symmetric random perturbation of Frobenius norm `size`.
fn perturbation(rng: &mut StdRng, r: usize, size: f64) -> DMatrix<f64> {
    let e = gaussian(rng, r, r);
    let e = &e + e.transpose();
    &e * (size / e.norm())
}

fn difference(solver: &mut PositivePartSolver, m: &DMatrix<f64>) -> (f64, Route) {
    let (pp, route) = solver.compute(m).unwrap();
    let reference = positive_part_full(m).unwrap().to_matrix();
    ((pp.to_matrix() - reference).norm() / m.norm(), route)
}

#[test]
fn partial_positive_part_matches_the_full_one_and_falls_back_when_it_cannot_certify() {
    let mut rng = common::rng();
    let cases = 30;
    let mut partial = 0;
    for case in 0..cases {
        let r = rng.random_range(60..140);
        let k = rng.random_range(1..r / 6);
        // k positive eigenvalues in [0.05, 2], the rest negative in [-2, -0.05].
        let mut s: Vec<f64> = (0..r).map(|i| if i < k { rng.random_range(0.05..2.0) } else { -rng.random_range(0.05..2.0) }).collect();
        s.rotate_left(rng.random_range(0..r));
        let m1 = with_spectrum(&mut rng, &s);
        let mut solver = PositivePartSolver::new();
        // Cold start: full eigendecomposition.
        let (err, route) = difference(&mut solver, &m1);
        assert_eq!(route, Route::Full, "case {case}: first call has no basis");
        assert!(err < 1e-12, "case {case}: full vs full {err:e}");
        // A nearby matrix (as between late FISTA iterations): warm-started partial solve.
        let m2 = &m1 + perturbation(&mut rng, r, 1e-6 * m1.norm());
        let (err, route) = difference(&mut solver, &m2);
        // Certified bound 1e-9 ||M||_F plus the reference's own round-off.
        assert!(err < 1e-8, "case {case} ({route:?}): partial vs full {err:e}");
        if matches!(route, Route::Partial { .. }) {
            partial += 1;
        }
        // A new positive eigen-direction orthogonal to the warm basis.
        let eig = m2.clone().symmetric_eigen();
        let lowest = eig.eigenvalues.imin();
        let v = eig.eigenvectors.column(lowest).into_owned();
        let m3 = &m2 + (&v * v.transpose()) * (1.0 - eig.eigenvalues[lowest]);
        // (a) Along the run, either route may answer (a block Krylov step can
        // pick the new direction up from round-off), but the answer must agree.
        let mut follow = solver.clone();
        let (err, route) = difference(&mut follow, &m3);
        assert!(err < 1e-8, "case {case} ({route:?}): new direction, partial vs full {err:e}");
        // (b) From the exact eigenvectors of m2 (positive ones and a buffer) the
        // Ritz residuals are at round-off and do not see the new direction:
        // only the certificate can catch it, and it must force the fallback.
        let mut order: Vec<usize> = (0..r).collect();
        order.sort_by(|&a, &b| eig.eigenvalues[b].total_cmp(&eig.eigenvalues[a]));
        let b = k + 12;
        solver.set_basis(DMatrix::from_fn(r, b, |i, a| eig.eigenvectors[(i, order[a])]));
        let fallbacks = solver.stats().fallbacks;
        let (err, route) = difference(&mut solver, &m3);
        assert_eq!(route, Route::Full, "case {case}: a direction outside the basis must force the fallback");
        assert_eq!(solver.stats().fallbacks, fallbacks + 1, "case {case}: the fallback is counted");
        assert!(err < 1e-12, "case {case}: fallback vs full {err:e}");
    }
    // The warm start must actually be used (it is what makes the dual fast).
    assert!(partial >= cases * 9 / 10, "partial path used in only {partial} of {cases} cases");
}

#[test]
fn partial_positive_part_handles_no_positive_eigenvalue_and_a_basis_of_wrong_size() {
    let mut rng = common::rng();
    let r = 80;
    let s: Vec<f64> = (0..r).map(|_| -rng.random_range(0.01..1.0)).collect();
    let m = with_spectrum(&mut rng, &s);
    let mut solver = PositivePartSolver::new();
    solver.compute(&m).unwrap();
    let (pp, _) = solver.compute(&m).unwrap();
    assert!(pp.values.is_empty() && pp.to_matrix().norm() == 0.0);
    // A basis of the wrong dimension is ignored (full path), not a panic.
    solver.set_basis(DMatrix::from_element(5, 3, 1.0));
    let (pp, route) = solver.compute(&m).unwrap();
    assert_eq!(route, Route::Full);
    assert!(pp.values.is_empty());
}
