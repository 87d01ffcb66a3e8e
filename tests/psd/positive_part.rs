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

/// The route of `PositivePartRoute::Auto` for given (device, n, r): on the
/// host always the eigendecomposition; on a GPU the polar route where the
/// card's cost model predicts it cheaper. With the H200 profile the
/// crossing at r = 1000 is at n ~ 4.3e5 (34 ms against 100 ms at
/// n = 1e5, 213 ms against 100 ms at n = 1e6), and below r ~ 220 the
/// eigendecomposition is taken at any n.
#[test]
fn auto_route_follows_the_cost_model_of_the_card() {
    use gramian::gpu::cost::CardProfile;
    use gramian::psd::positive_part::{card_profile, polar_is_cheaper, route_seconds};
    use gramian::psd::PositivePartRoute;
    let h200 = CardProfile::h200();
    let auto = |card: Option<&CardProfile>, n: usize, r: usize| PositivePartRoute::Auto.solver(card, n, r).is_polar();
    // (n, r, polar on an H200)
    for (n, r, polar) in [(100_000, 1000, true), (1_000_000, 1000, false), (400_000, 1000, true), (470_000, 1000, false), (2000, 500, true), (2000, 200, false), (600, 250, true), (200, 30, false), (10_000_000, 5000, false), (1_000_000, 5000, true)] {
        assert_eq!(auto(Some(&h200), n, r), polar, "n = {n}, r = {r}: {:?}", route_seconds(&h200, n, r));
        assert_eq!(polar_is_cheaper(&h200, n, r), polar);
        // The host keeps the eigendecomposition.
        assert!(!auto(None, n, r), "host, n = {n}, r = {r}");
    }
    // At n = 1e5, r = 1000: the figures of the doc comment.
    let (polar, eigen) = route_seconds(&h200, 100_000, 1000);
    assert!((polar - 0.0342).abs() < 1e-3 && (eigen - 0.1002).abs() < 1e-3, "{polar} {eigen}");
    // A card without f64 never takes the polar route.
    let no_f64 = CardProfile { f64_flops: 0.0, ..CardProfile::h200() };
    assert!(!auto(Some(&no_f64), 2000, 1000));
    // The explicit routes ignore the card.
    assert!(PositivePartRoute::Polar.solver(None, 10, 10).is_polar());
    assert!(!PositivePartRoute::Eigen.solver(Some(&h200), 100_000, 1000).is_polar());
    // The host has no card; a GPU adapter that is not an H100 takes the H200's profile.
    assert!(card_profile(&gramian::Device::Cpu).is_none());
    if let Some(gpu) = common::gpu_device(gramian::GpuOptions::default()) {
        let card = card_profile(&gpu).expect("a GPU has a card profile");
        let gramian::Device::Gpu(ctx) = &gpu else { unreachable!() };
        let expected = if ctx.adapter().name.to_ascii_uppercase().contains("H100") { CardProfile::h100() } else { CardProfile::h200() };
        assert_eq!(card, expected);
    }
}
