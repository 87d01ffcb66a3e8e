//! Bad input to eKSVD gives typed errors, never a panic or a silent NaN.

use crate::common;

use gramian::eksvd::{ksvd_from_kernel, CouplingMatrix, Eigensolver, EksvdParams, FeatureMap, KsvdParams, Solver};
use gramian::MultiSource;
use gramian::Error;
use gramian::{Device, Kernel};
use nalgebra::DMatrix;

#[test]
fn invalid_sources_are_rejected() {
    let mut rng = common::rng();
    let a = common::random_matrix(&mut rng, 10, 3);
    assert_eq!(MultiSource::new(vec![a.clone()]).unwrap_err(), Error::TooFewSources(1));
    assert!(matches!(MultiSource::new(vec![a.clone(), DMatrix::zeros(0, 3)]), Err(Error::EmptySource { source_index: 1, .. })));
    let mut bad = a.clone();
    bad[(4, 2)] = f64::NAN;
    assert_eq!(
        MultiSource::new(vec![a.clone(), bad]).unwrap_err(),
        Error::NonFiniteSource { what: "data", source_index: 1, row: 4, col: 2 }
    );
    let short = common::random_matrix(&mut rng, 9, 3);
    assert!(MultiSource::new(vec![a.clone(), short.clone()]).is_ok());
    assert!(matches!(MultiSource::paired(vec![a, short]), Err(Error::ShapeMismatch { .. })));
}

#[test]
fn invalid_parameters_are_rejected() {
    let mut rng = common::rng();
    let data = MultiSource::paired(vec![common::random_matrix(&mut rng, 20, 3), common::random_matrix(&mut rng, 20, 3)]).unwrap();
    let cpu = Device::cpu();
    assert!(matches!(EksvdParams::new(0).fit(&cpu, &data), Err(Error::InvalidParameter { name: "n_components", .. })));
    assert!(FeatureMap::random_fourier(-1.0, 10).is_err());
    assert!(FeatureMap::random_fourier(1.0, 0).is_err());
    assert!(FeatureMap::nystrom(Kernel::rbf(1.0).unwrap(), 30, 20).is_err());
    let lit = FeatureMap::RandomFourier { gamma: f64::NAN, dim: 4 };
    assert!(EksvdParams::new(1).feature_map(lit).fit(&cpu, &data).is_err());
    let bad_tol = Solver::Dual(Eigensolver::Lanczos { tolerance: 0.0, max_restarts: 10 });
    assert!(matches!(EksvdParams::new(1).solver(bad_tol).fit(&cpu, &data), Err(Error::InvalidParameter { name: "tolerance", .. })));
    let three_maps = vec![FeatureMap::Linear, FeatureMap::Linear, FeatureMap::Linear];
    assert!(matches!(EksvdParams::new(1).feature_maps(three_maps).fit(&cpu, &data), Err(Error::ShapeMismatch { .. })));
    // More components than the order of G_Q.
    assert!(EksvdParams::new(41).fit(&cpu, &data).is_err());
}

#[test]
fn mismatched_feature_dimensions_are_rejected() {
    let mut rng = common::rng();
    let data = MultiSource::new(vec![common::random_matrix(&mut rng, 20, 3), common::random_matrix(&mut rng, 15, 4)]).unwrap();
    // Linear maps keep d_q, which differ: K_pq = Phi_p Phi_q^T is undefined.
    let err = EksvdParams::new(1).fit(&Device::cpu(), &data).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { .. }), "{err:?}");
    // A projection matrix with the wrong number of rows.
    let maps = vec![FeatureMap::projection(DMatrix::identity(3, 2)).unwrap(), FeatureMap::projection(DMatrix::identity(3, 2)).unwrap()];
    assert!(matches!(EksvdParams::new(1).feature_maps(maps).fit(&Device::cpu(), &data), Err(Error::ShapeMismatch { .. })));
    // New data with the wrong input dimension.
    let ok = EksvdParams::new(1).feature_map(FeatureMap::random_fourier(1.0, 8).unwrap()).fit(&Device::cpu(), &data).unwrap();
    assert!(ok.transform_source(0, &common::random_matrix(&mut rng, 2, 4)).is_err());
    let mut nan = common::random_matrix(&mut rng, 2, 3);
    nan[(0, 0)] = f64::INFINITY;
    assert!(ok.transform_source(0, &nan).is_err());
    assert!(ok.transform_source(2, &common::random_matrix(&mut rng, 2, 3)).is_err());
}

#[test]
fn rank_deficient_kernels_are_reported() {
    // Five distinct rows repeated four times: the kernel matrix has rank 5.
    let base = DMatrix::from_fn(5, 2, |i, j| (i * 2 + j) as f64 * 0.3);
    let x = DMatrix::from_fn(20, 2, |i, j| base[(i % 5, j)]);
    let data = MultiSource::paired(vec![x.clone(), x]).unwrap();
    let map = FeatureMap::nystrom(Kernel::rbf(1.0).unwrap(), 8, 20).unwrap();
    let err = EksvdParams::new(1).feature_map(map).fit(&Device::cpu(), &data).unwrap_err();
    assert!(matches!(err, Error::RankDeficientKernel { source_index: 0, rank: 5, requested: 8 }), "{err:?}");
}

#[test]
fn spectra_without_enough_positive_eigenvalues_are_reported() {
    // All-zero features: G_Q = 0.
    let zeros = vec![DMatrix::<f64>::zeros(6, 3), DMatrix::zeros(5, 3)];
    let err = EksvdParams::new(1).fit_features(&Device::cpu(), zeros).unwrap_err();
    assert_eq!(err, Error::NoPositiveEigenvalues);
    // K_12 of rank 2 has 2 positive eigenvalues in G_2.
    let u = DMatrix::from_fn(8, 2, |i, j| ((i + 1) * (j + 2)) as f64 % 5.0 - 2.0);
    let v = DMatrix::from_fn(6, 2, |i, j| ((i + 3) * (j + 1)) as f64 % 4.0 - 1.5);
    let k = &u * v.transpose();
    assert_eq!(
        ksvd_from_kernel(&Device::cpu(), &k, 3, &Eigensolver::Dense, 0).unwrap_err(),
        Error::TooFewPositiveEigenvalues { requested: 3, available: 2 }
    );
    assert!(ksvd_from_kernel(&Device::cpu(), &k, 2, &Eigensolver::Dense, 0).is_ok());
}

#[test]
fn non_convergence_is_reported() {
    let mut rng = common::rng();
    let phi = vec![common::random_matrix(&mut rng, 200, 60), common::random_matrix(&mut rng, 200, 60)];
    let solver = Solver::Dual(Eigensolver::Lanczos { tolerance: 1e-14, max_restarts: 0 });
    let err = EksvdParams::new(20).solver(solver).fit_features(&Device::cpu(), phi).unwrap_err();
    assert!(matches!(err, Error::EigenNotConverged { requested: 20, restarts: 0, .. }), "{err:?}");
}

#[test]
fn invalid_kernel_blocks_are_rejected() {
    let a = DMatrix::<f64>::from_element(4, 3, 1.0);
    assert!(CouplingMatrix::from_blocks(3, vec![(0, 1, a.clone())]).is_err()); // missing pairs
    assert!(CouplingMatrix::from_blocks(2, vec![(1, 0, a.clone())]).is_err()); // p > q
    let b = DMatrix::<f64>::from_element(5, 3, 1.0);
    // K_01 says N_1 = 3, K_12 says N_1 = 5.
    let err = CouplingMatrix::from_blocks(3, vec![(0, 1, a.clone()), (0, 2, a.clone()), (1, 2, b)]).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { .. }), "{err:?}");
    let mut nan = a.clone();
    nan[(1, 1)] = f64::NAN;
    assert!(matches!(CouplingMatrix::from_blocks(2, vec![(0, 1, nan)]), Err(Error::NonFiniteSource { .. })));
    let data = MultiSource::new(vec![DMatrix::from_element(3, 2, 1.0), DMatrix::from_element(3, 3, 1.0)]).unwrap();
    assert!(CouplingMatrix::from_kernel(Kernel::rbf(1.0).unwrap(), &data).is_err()); // d_q differ
}

#[test]
fn ksvd_rejects_bad_input() {
    let x = DMatrix::<f64>::from_fn(6, 2, |i, j| (i + j) as f64);
    let mut z = DMatrix::<f64>::from_fn(5, 2, |i, j| (i * j) as f64);
    z[(0, 0)] = f64::NAN;
    assert!(KsvdParams::new(1).fit_pair(&Device::cpu(), &x, &z).is_err());
}

#[test]
fn paired_operations_need_paired_sources() {
    let mut rng = common::rng();
    let unpaired = MultiSource::new(vec![common::random_matrix(&mut rng, 10, 3), common::random_matrix(&mut rng, 10, 3)]).unwrap();
    assert!(matches!(unpaired.select_rows(&[0, 1]), Err(Error::NotAvailable(_))));
    let model = EksvdParams::new(1).fit(&Device::cpu(), &unpaired).unwrap();
    assert!(matches!(model.transform_paired(&unpaired), Err(Error::NotAvailable(_))));
    let paired = MultiSource::paired(unpaired.into_sources()).unwrap();
    assert!(paired.select_rows(&[0, 10]).is_err());
    assert_eq!(paired.select_rows(&[3, 1]).unwrap().source(1).nrows(), 2);
    assert_eq!(model.transform_paired(&paired).unwrap().shape(), (10, 2));
}

#[test]
fn projections_that_overflow_are_errors_for_every_feature_map() {
    // New rows near f64::MAX: the linear map's features are finite, their
    // projection is not; Fourier features are NaN already. Both must be
    // typed errors, never infinities inside Ok.
    let mut rng = common::rng();
    let x = common::random_matrix(&mut rng, 12, 2);
    let z = common::random_matrix(&mut rng, 12, 2);
    let huge = DMatrix::from_row_slice(3, 2, &[f64::MAX, f64::MAX, f64::MAX, -f64::MAX, 1.0, -1.0]);
    for map in [FeatureMap::Linear, FeatureMap::random_fourier(0.5, 16).unwrap()] {
        let model = KsvdParams::new(1).feature_maps(map.clone(), map.clone()).seed(3).fit_pair(&Device::Cpu, &x, &z).unwrap();
        let w = model.transform_x(&huge);
        assert!(w.is_err(), "{map:?}: {w:?}");
    }
}
