//! eKSVD solvers against the paper's identities: Lemma 3.3 (J = 0), the KKT
//! conditions (Eq. 5), Theorem 3.2 (dual = covariance), Theorem 2.1 (KSVD =
//! SVD of K_12), the two forms of Eq. 7, and Lanczos against the dense solver.

use crate::common;

use gramian::MultiSource;
use gramian::eksvd::{
    covariance::{covariance_matrix, covariances},
    ksvd_from_kernel, solve_dual, CouplingMatrix, Eigensolver, EksvdParams, FeatureMap, Solver,
};
use gramian::linalg::{faer_ref, relative_frobenius_error};
use gramian::{Device, Kernel};
use nalgebra::DMatrix;

/// Three unpaired sources of different sizes and input dimensions.
fn three_sources(rng: &mut rand::rngs::StdRng) -> MultiSource {
    MultiSource::new(vec![common::random_matrix(rng, 60, 4), common::random_matrix(rng, 45, 6), common::random_matrix(rng, 38, 3)]).unwrap()
}

/// Three sources large enough (order 830) for the block eigensolvers.
fn three_larger_sources(rng: &mut rand::rngs::StdRng) -> MultiSource {
    MultiSource::new(vec![common::random_matrix(rng, 300, 5), common::random_matrix(rng, 250, 5), common::random_matrix(rng, 280, 4)]).unwrap()
}

fn rff_params(k: usize, solver: Solver) -> EksvdParams {
    EksvdParams::new(k).feature_map(FeatureMap::random_fourier(0.7, 24).unwrap()).solver(solver).seed(5)
}

/// Max over columns of min(|a - b|, |a + b|) relative to |b| (equality up to sign).
fn max_error_up_to_sign(a: &DMatrix<f64>, b: &DMatrix<f64>) -> f64 {
    assert_eq!(a.shape(), b.shape());
    (0..a.ncols())
        .map(|j| {
            let (x, y) = (a.column(j), b.column(j));
            (x - y).norm().min((x + y).norm()) / y.norm().max(1e-300)
        })
        .fold(0.0, f64::max)
}

#[test]
fn lemma_3_3_objective_is_zero_at_every_solution() {
    let mut rng = common::rng();
    let data = three_sources(&mut rng);
    for solver in [Solver::Dual(Eigensolver::Dense), Solver::Covariance(Eigensolver::Dense)] {
        let model = rff_params(5, solver).fit(&Device::cpu(), &data).unwrap();
        for k in 0..5 {
            let terms = model.objective(k).unwrap();
            assert!(terms.variance > 0.0 && terms.coupling.abs() > 0.0, "{solver:?}: degenerate terms {terms:?}");
            assert!(terms.relative_value() < 1e-10, "{solver:?} component {k}: J = {} ({terms:?})", terms.value());
        }
    }
}

#[test]
fn objective_is_not_zero_away_from_a_solution() {
    // The check above can fail: perturbed weights give J != 0.
    let mut rng = common::rng();
    let data = three_sources(&mut rng);
    let model = rff_params(1, Solver::Dual(Eigensolver::Dense)).fit(&Device::cpu(), &data).unwrap();
    let mut weights: Vec<_> = (0..3).map(|q| model.weights(q).column(0).into_owned()).collect();
    weights[1] *= 1.5;
    let scores: Vec<_> = (0..3).map(|q| model.training_features(q) * &weights[q]).collect();
    let terms = gramian::eksvd::objective_terms(&weights, &scores, model.gammas()[0]).unwrap();
    assert!(terms.relative_value() > 1e-3, "{terms:?}");
}

#[test]
fn kkt_conditions_hold_for_both_solvers() {
    let mut rng = common::rng();
    let data = three_sources(&mut rng);
    for solver in [Solver::Dual(Eigensolver::Dense), Solver::Covariance(Eigensolver::Dense), Solver::Dual(Eigensolver::lanczos())] {
        let model = rff_params(4, solver).fit(&Device::cpu(), &data).unwrap();
        for k in 0..4 {
            let r = model.kkt(k).unwrap();
            assert!(r.stationarity < 1e-8 && r.dual_scaling < 1e-8, "{solver:?} component {k}: {r:?}");
        }
    }
}

#[test]
fn theorem_3_2_dual_and_covariance_agree() {
    let mut rng = common::rng();
    let data = three_sources(&mut rng);
    let device = Device::cpu();
    let dual = rff_params(6, Solver::Dual(Eigensolver::Dense)).fit(&device, &data).unwrap();
    let cov = rff_params(6, Solver::Covariance(Eigensolver::Dense)).fit(&device, &data).unwrap();
    assert_same_solution(&dual, &cov, 1e-10, 1e-7);
    let fresh = common::random_matrix(&mut rng, 17, 6);
    let err = max_error_up_to_sign(&dual.transform_source(1, &fresh).unwrap(), &cov.transform_source(1, &fresh).unwrap());
    assert!(err < 1e-7, "out-of-sample scores: {err}");
    // The covariance weights solve the nonsymmetric Eq. 8 directly.
    assert_weights_solve_eq_8(&device, &cov, 1e-9);
}

/// Theorem 3.2: the Dual and the Covariance fit of the same three sources
/// have the same eigenvalues (relative `eigenvalue_tolerance`) and, with the
/// same normalisation on both sides, the same training scores up to sign
/// (`score_tolerance`).
fn assert_same_solution(dual: &gramian::eksvd::Eksvd, cov: &gramian::eksvd::Eksvd, eigenvalue_tolerance: f64, score_tolerance: f64) {
    assert_eq!(dual.n_components(), cov.n_components());
    for k in 0..dual.n_components() {
        let (a, b) = (dual.eigenvalues()[k], cov.eigenvalues()[k]);
        assert!((a - b).abs() < eigenvalue_tolerance * a, "eigenvalue {k}: dual {a} vs covariance {b}");
    }
    for q in 0..3 {
        let err = max_error_up_to_sign(&dual.training_scores(q).unwrap(), &cov.training_scores(q).unwrap());
        assert!(err < score_tolerance, "training scores of source {q}: {err}");
    }
}

/// `C_Q w = lambda w` (Eq. 8) for every retained component of a model with
/// three sources of 24 features, relative residual below `tolerance`.
fn assert_weights_solve_eq_8(device: &Device, model: &gramian::eksvd::Eksvd, tolerance: f64) {
    let features: Vec<DMatrix<f64>> = (0..3).map(|q| model.training_features(q).clone()).collect();
    let c_q = covariance_matrix(&covariances(device, &features).unwrap()).unwrap();
    for k in 0..model.n_components() {
        let w = DMatrix::from_fn(3 * 24, 1, |i, _| model.weights(i / 24)[(i % 24, k)]);
        let residual = (&c_q * &w - &w * model.eigenvalues()[k]).norm() / (w.norm() * model.eigenvalues()[k]);
        assert!(residual < tolerance, "C_Q w = lambda w residual {residual} at component {k}");
    }
}

#[test]
fn theorem_2_1_ksvd_gives_the_svd_of_k12() {
    let mut rng = common::rng();
    let k12 = common::random_matrix(&mut rng, 30, 19);
    let sol = ksvd_from_kernel(&Device::cpu(), &k12, 5, &Eigensolver::Dense, 0).unwrap();
    let svd = faer_ref(&k12).thin_svd().unwrap();
    let (s, u, v) = (svd.S(), svd.U(), svd.V());
    for i in 0..5 {
        assert!((sol.eigenvalues[i] - s[i]).abs() < 1e-11 * s[0], "sigma {i}: {} vs {}", sol.eigenvalues[i], s[i]);
        let uu = DMatrix::from_fn(30, 1, |r, _| u[(r, i)] / 2f64.sqrt());
        let vv = DMatrix::from_fn(19, 1, |r, _| v[(r, i)] / 2f64.sqrt());
        let alpha = DMatrix::from_fn(30, 1, |r, _| sol.alphas[0][(r, i)]);
        let beta = DMatrix::from_fn(19, 1, |r, _| sol.alphas[1][(r, i)]);
        // One common sign for the pair (u, v).
        let sign = if (&alpha - &uu).norm() < (&alpha + &uu).norm() { 1.0 } else { -1.0 };
        assert!((&alpha - &uu * sign).norm() < 1e-9 && (&beta - &vv * sign).norm() < 1e-9, "singular vectors {i}");
    }
    // The full spectrum of G_2 is {+sigma, -sigma, 0 (N - M times)}.
    let g = CouplingMatrix::from_blocks(2, vec![(0, 1, k12.clone())]).unwrap().assemble(&Device::cpu()).unwrap();
    let eig = gramian::linalg::symmetric_eigenvalues(&g).unwrap();
    let mut expected: Vec<f64> = (0..19).flat_map(|i| [s[i], -s[i]]).chain(std::iter::repeat_n(0.0, 11)).collect();
    expected.sort_by(f64::total_cmp);
    for (a, b) in eig.iter().zip(&expected) {
        assert!((a - b).abs() < 1e-11 * s[0], "{a} vs {b}");
    }
}

/// The CPU's fused inference (random Fourier features and the projection
/// per block of 128 rows on one thread) gives the two-step product
/// `phi(X) W` to rounding, for row counts below, at and across the block
/// size (ragged last blocks).
#[test]
fn fused_primal_inference_matches_features_times_weights() {
    let mut rng = common::rng();
    let data = three_sources(&mut rng);
    let device = Device::cpu();
    let model = rff_params(4, Solver::Covariance(Eigensolver::Dense)).fit(&device, &data).unwrap();
    for rows in [1, 7, 128, 129, 300, 641] {
        for q in 0..3 {
            let fresh = common::random_matrix(&mut rng, rows, data.source(q).ncols());
            let fused = model.transform_source(q, &fresh).unwrap();
            let two_step = model.transform_features(q, &model.features_of(q, &fresh).unwrap()).unwrap();
            assert_eq!(fused.shape(), (rows, 4));
            assert!(relative_frobenius_error(&fused, &two_step) < 1e-13, "{rows} rows, source {q}: {:e}", relative_frobenius_error(&fused, &two_step));
        }
    }
}

#[test]
fn dual_and_primal_projections_agree_out_of_sample() {
    let mut rng = common::rng();
    let data = three_sources(&mut rng);
    let device = Device::cpu();
    let model = rff_params(4, Solver::Dual(Eigensolver::Dense)).fit(&device, &data).unwrap();
    // 7 new rows: no block K(x, X_p) is square (N_p = 60, 45, 38).
    for q in 0..3 {
        let fresh = common::random_matrix(&mut rng, 7, data.source(q).ncols());
        let primal = model.transform_source(q, &fresh).unwrap();
        let dual = model.transform_dual(q, &fresh).unwrap();
        assert_eq!(primal.shape(), (7, 4));
        assert!(relative_frobenius_error(&dual, &primal) < 1e-10, "source {q}");
    }
    // On training rows, the dual form of Eq. 7 is lambda alpha / (Q - 1).
    let coupling = CouplingMatrix::from_features((0..3).map(|q| model.training_features(q).clone()).collect()).unwrap();
    let sol = model.dual_solution();
    let scores = sol.training_scores(&device, &coupling).unwrap();
    for (q, score) in scores.iter().enumerate() {
        let mut expected = model.alphas(q).clone();
        for (k, mut col) in expected.column_iter_mut().enumerate() {
            col *= model.eigenvalues()[k] / 2.0;
        }
        assert!(relative_frobenius_error(score, &expected) < 1e-10);
        assert!(relative_frobenius_error(score, &model.training_scores(q).unwrap()) < 1e-10);
    }
}

#[test]
fn lanczos_matches_dense_without_storing_g() {
    let mut rng = common::rng();
    let data = three_larger_sources(&mut rng);
    let device = Device::cpu();
    let params = |solver| EksvdParams::new(8).feature_map(FeatureMap::random_fourier(0.5, 64).unwrap()).solver(Solver::Dual(solver)).seed(9);
    let dense = params(Eigensolver::Dense).fit(&device, &data).unwrap();
    let lanczos = params(Eigensolver::lanczos()).fit(&device, &data).unwrap();
    for k in 0..8 {
        let (a, b) = (dense.eigenvalues()[k], lanczos.eigenvalues()[k]);
        assert!((a - b).abs() < 1e-9 * dense.eigenvalues()[0], "eigenvalue {k}: {a} vs {b}");
    }
    for q in 0..3 {
        let err = max_error_up_to_sign(&lanczos.alphas(q).clone(), dense.alphas(q));
        assert!(err < 1e-5, "alpha^({q}): {err}");
    }
}

/// The Dense Dual solver multiplies G through the features when that is
/// cheaper, otherwise keeps G as its upper blocks and multiplies them block
/// by block (order 830 is large enough for the block solver): both against
/// the full decomposition of the assembled G.
#[test]
fn dense_dual_on_features_or_stored_blocks_matches_the_full_decomposition() {
    let mut rng = common::rng();
    let three = three_larger_sources(&mut rng);
    let four = MultiSource::new(vec![common::random_matrix(&mut rng, 300, 5), common::random_matrix(&mut rng, 250, 5), common::random_matrix(&mut rng, 280, 4), common::random_matrix(&mut rng, 260, 3)]).unwrap();
    let device = Device::cpu();
    // Three sources of 830 rows: 64 features take the covariance form (Q d_phi
    // = 192 < 830); 400 the stored blocks (400 x 830 multiply-adds per column
    // against 229,000). Four sources of 1090 rows and 300 features: the
    // products through the features (327,000 against 444,800), as Q d_phi =
    // 1200 is not below 1090.
    for (data, d_phi, covariance_form, factored) in [(&three, 64, true, true), (&three, 400, false, false), (&four, 300, false, true)] {
        let n_sources = data.n_sources();
        let maps: Vec<_> = (0..n_sources).map(|q| FeatureMap::random_fourier(0.5, d_phi).unwrap().fit(&device, data.source(q), q, 3 + q as u64).unwrap()).collect();
        let features: Vec<DMatrix<f64>> = (0..n_sources).map(|q| maps[q].transform(data.source(q)).unwrap()).collect();
        let coupling = CouplingMatrix::from_features(features).unwrap();
        assert_eq!(coupling.covariance_form_order(), covariance_form.then_some(n_sources * d_phi), "Q = {n_sources}, d_phi = {d_phi}");
        assert_eq!(coupling.factored_product_is_cheaper(), factored, "Q = {n_sources}, d_phi = {d_phi}");
        let g = coupling.assemble(&device).unwrap();
        let frobenius = coupling.frobenius_norm_from_features().unwrap();
        assert!((frobenius - g.norm()).abs() <= 1e-12 * g.norm(), "||G||_F: {frobenius} vs {}", g.norm());
        let full = gramian::linalg::symmetric_eigen(&g).unwrap();
        let n = g.nrows();
        let got = solve_dual(&device, &coupling, 8, &Eigensolver::Dense, 0).unwrap();
        let scale = full.eigenvalues[n - 1].abs();
        for k in 0..8 {
            let want = full.eigenvalues[n - 1 - k];
            assert!((got.eigenvalues[k] - want).abs() <= 1e-9 * scale, "Q = {n_sources}, d_phi = {d_phi}, eigenvalue {k}: {} vs {want}", got.eigenvalues[k]);
        }
        let want_vectors = DMatrix::from_fn(n, 8, |i, j| full.eigenvectors[(i, n - 1 - j)]);
        let mut stacked = DMatrix::<f64>::zeros(n, 8);
        for q in 0..n_sources {
            stacked.rows_mut(coupling.offset(q), coupling.sizes()[q]).copy_from(&got.alphas[q]);
        }
        let err = max_error_up_to_sign(&stacked, &want_vectors);
        assert!(err < 1e-6, "Q = {n_sources}, d_phi = {d_phi}, eigenvectors: {err}");
        // Unit vectors and the residual of Eq. 4, G alpha = lambda alpha.
        let residual = &g * &stacked - &stacked * DMatrix::from_diagonal(&got.eigenvalues);
        assert!(residual.norm() <= 1e-9 * scale, "Q = {n_sources}, d_phi = {d_phi}, ||G A - A Lambda||: {}", residual.norm());
        for j in 0..8 {
            let column = stacked.column(j);
            assert!((column.norm() - 1.0).abs() < 1e-10, "Q = {n_sources}, d_phi = {d_phi}, ||alpha_{j}|| = {}", column.norm());
            // Every path fixes the sign: the entry of largest magnitude is positive.
            assert!(column.iter().fold(0.0f64, |m, &x| if x.abs() > m.abs() { x } else { m }) > 0.0, "Q = {n_sources}, d_phi = {d_phi}: sign of alpha_{j}");
        }
        // G V from the features, as the solver applies it, against the dense G.
        let v = common::random_matrix(&mut rng, n, 3);
        assert!(relative_frobenius_error(&coupling.apply(&device, &v).unwrap(), &(&g * &v)) < 1e-12);
    }
}

#[test]
fn dense_dual_asked_for_more_components_than_are_positive_says_so_on_either_path() {
    // Four features per source: G_Q = B ((1 1^T - I) (x) I) B^T has at most
    // d_phi = 4 positive eigenvalues (the middle factor has eigenvalue Q - 1
    // d_phi times, -1 otherwise) and rank at most Q d_phi = 12. Asked for 5
    // (the covariance form, order 12) or 14 (more than that order: the
    // stored path), the Dense Dual solver reports the same typed error; asked
    // for 4 it returns the positive eigenvalues of G_Q.
    let mut rng = common::rng();
    let data = three_larger_sources(&mut rng);
    let device = Device::cpu();
    let features: Vec<DMatrix<f64>> = (0..3).map(|q| FeatureMap::random_fourier(0.5, 4).unwrap().fit(&device, data.source(q), q, 7 + q as u64).unwrap().transform(data.source(q)).unwrap()).collect();
    let coupling = CouplingMatrix::from_features(features).unwrap();
    assert_eq!(coupling.covariance_form_order(), Some(12));
    let g = coupling.assemble(&device).unwrap();
    let full = gramian::linalg::symmetric_eigen(&g).unwrap();
    let top = full.eigenvalues[g.nrows() - 1];
    let positive: Vec<f64> = full.eigenvalues.iter().rev().copied().filter(|&l| l > 1e-9 * top).collect();
    assert_eq!(positive.len(), 4, "positive eigenvalues of G_Q");
    for requested in [5, 14] {
        match solve_dual(&device, &coupling, requested, &Eigensolver::Dense, 0) {
            Err(gramian::Error::TooFewPositiveEigenvalues { requested: r, available }) => assert_eq!((r, available), (requested, 4)),
            other => panic!("{requested} components: expected TooFewPositiveEigenvalues, got {other:?}"),
        }
    }
    let got = solve_dual(&device, &coupling, 4, &Eigensolver::Dense, 0).unwrap();
    for (k, want) in positive.iter().enumerate() {
        assert!((got.eigenvalues[k] - want).abs() <= 1e-9 * top, "eigenvalue {k}: {} vs {want}", got.eigenvalues[k]);
    }
}

#[test]
fn kernel_function_coupling_is_matrix_free_and_matches_dense() {
    let mut rng = common::rng();
    let data = MultiSource::new(vec![common::random_matrix(&mut rng, 90, 3), common::random_matrix(&mut rng, 70, 3), common::random_matrix(&mut rng, 80, 3)]).unwrap();
    let device = Device::cpu();
    let coupling = CouplingMatrix::from_kernel(Kernel::rbf(0.8).unwrap(), &data).unwrap();
    let g = coupling.assemble(&device).unwrap();
    // The block K_01 is k(X_0, X_1): rectangular and not K_10.
    let k01 = device.kernel_matrix(&Kernel::rbf(0.8).unwrap(), data.source(0), data.source(1)).unwrap();
    assert!(relative_frobenius_error(&g.view((0, 90), (90, 70)).into_owned(), &k01) < 1e-15);
    let v = common::random_matrix(&mut rng, 240, 2);
    assert!(relative_frobenius_error(&coupling.apply(&device, &v).unwrap(), &(&g * &v)) < 1e-12);
    let dense = solve_dual(&device, &coupling, 4, &Eigensolver::Dense, 0).unwrap();
    let lanczos = solve_dual(&device, &coupling, 4, &Eigensolver::lanczos(), 0).unwrap();
    for k in 0..4 {
        assert!((dense.eigenvalues[k] - lanczos.eigenvalues[k]).abs() < 1e-9 * dense.eigenvalues[0]);
    }
}

#[test]
fn precomputed_blocks_reproduce_the_feature_model() {
    let mut rng = common::rng();
    let data = three_sources(&mut rng);
    let device = Device::cpu();
    let model = rff_params(3, Solver::Dual(Eigensolver::Dense)).fit(&device, &data).unwrap();
    let phi: Vec<DMatrix<f64>> = (0..3).map(|q| model.training_features(q).clone()).collect();
    let blocks = vec![(0, 1, &phi[0] * phi[1].transpose()), (0, 2, &phi[0] * phi[2].transpose()), (1, 2, &phi[1] * phi[2].transpose())];
    let coupling = CouplingMatrix::from_blocks(3, blocks).unwrap();
    let sol = solve_dual(&device, &coupling, 3, &Eigensolver::Dense, 0).unwrap();
    for k in 0..3 {
        assert!((sol.eigenvalues[k] - model.eigenvalues()[k]).abs() < 1e-10 * sol.eigenvalues[0]);
    }
    // Out of sample with user-supplied rectangular blocks K(x, X_p), p != 2.
    let fresh = common::random_matrix(&mut rng, 5, 3);
    let phi_new = model.features_of(2, &fresh).unwrap();
    let k0 = &phi_new * phi[0].transpose();
    let k1 = &phi_new * phi[1].transpose();
    let projected = sol.project(2, &[Some(&k0), Some(&k1), None]).unwrap();
    let err = max_error_up_to_sign(&projected, &model.transform_source(2, &fresh).unwrap());
    assert!(err < 1e-8, "{err}");
    // A block of the wrong width is a typed error, not a panic.
    assert!(sol.project(2, &[Some(&k1), Some(&k0), None]).is_err());
}

#[test]
fn nystrom_with_all_landmarks_reproduces_the_kernel_matrix() {
    let mut rng = common::rng();
    let x = common::random_matrix(&mut rng, 15, 3);
    let cpu = Device::cpu();
    // A narrow kernel on 15 points is well conditioned: all 15 eigenpairs
    // give Phi Phi^T = K exactly (up to rounding).
    let kernel = Kernel::rbf(3.0).unwrap();
    let k = cpu.kernel_matrix(&kernel, &x, &x).unwrap();
    let reconstruction_error = |dim: usize| {
        let map = FeatureMap::nystrom(kernel, dim, 15).unwrap().fit(&cpu, &x, 0, 1).unwrap();
        let phi = map.transform(&x).unwrap();
        relative_frobenius_error(&(&phi * phi.transpose()), &k)
    };
    let (full, truncated) = (reconstruction_error(15), reconstruction_error(5));
    assert!(full < 1e-9 && truncated > 1e-4, "full {full}, rank-5 {truncated}");
    // Out of sample: phi(z)^T phi(x_i) = k(z, x_i) when the map is exact.
    let map = FeatureMap::nystrom(kernel, 15, 15).unwrap().fit(&cpu, &x, 0, 1).unwrap();
    let z = common::random_matrix(&mut rng, 4, 3);
    let cross = map.transform(&z).unwrap() * map.transform(&x).unwrap().transpose();
    assert!(relative_frobenius_error(&cross, &cpu.kernel_matrix(&kernel, &z, &x).unwrap()) < 1e-8);
}

#[test]
fn random_fourier_features_approximate_the_rbf_kernel() {
    let mut rng = common::rng();
    let x = common::random_matrix(&mut rng, 20, 3);
    let kernel = Kernel::rbf(0.5).unwrap();
    let map = FeatureMap::random_fourier(0.5, 8000).unwrap().fit(&Device::cpu(), &x, 0, 2).unwrap();
    let phi = map.transform(&x).unwrap();
    let k = Device::cpu().kernel_matrix(&kernel, &x, &x).unwrap();
    let max_err = (&phi * phi.transpose() - &k).abs().max();
    assert!(max_err < 0.08, "max |Phi Phi^T - K| = {max_err}");
}

#[test]
fn dual_and_covariance_agree_when_the_covariances_are_singular() {
    // N_q < d_phi: every C_qq = Phi_q^T Phi_q is singular (rank N_q), so the
    // covariance solver's factor D = F^T F cannot rely on positive definiteness.
    let mut rng = common::rng();
    let data = MultiSource::new(vec![common::random_matrix(&mut rng, 15, 4), common::random_matrix(&mut rng, 12, 6), common::random_matrix(&mut rng, 10, 3)]).unwrap();
    let device = Device::cpu();
    let dual = rff_params(5, Solver::Dual(Eigensolver::Dense)).fit(&device, &data).unwrap();
    let cov = rff_params(5, Solver::Covariance(Eigensolver::Dense)).fit(&device, &data).unwrap();
    assert_same_solution(&dual, &cov, 1e-9, 1e-6);
    assert_weights_solve_eq_8(&device, &cov, 1e-8);
}
