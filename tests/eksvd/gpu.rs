//! eKSVD matrices built on the GPU (f32) agree with the CPU f64 reference.
//! Skips without an adapter unless GRAMIAN_REQUIRE_GPU=1.

use crate::common;

use gramian::eksvd::{covariance::covariances, CouplingMatrix, Eigensolver, EksvdParams, FeatureMap, Solver};
use gramian::MultiSource;
use gramian::linalg::relative_frobenius_error;
use gramian::{Device, GpuOptions, Kernel};
use nalgebra::DMatrix;

#[test]
fn gpu_built_features_and_matrices_match_cpu() {
    let Some(gpu) = common::gpu_device(GpuOptions::default()) else { return };
    let cpu = Device::cpu();
    let mut rng = common::rng();
    let data = MultiSource::new(vec![common::random_matrix(&mut rng, 120, 5), common::random_matrix(&mut rng, 90, 7), common::random_matrix(&mut rng, 100, 4)]).unwrap();
    for map in [FeatureMap::random_fourier(0.4, 48).unwrap(), FeatureMap::nystrom(Kernel::rbf(0.5).unwrap(), 16, 64).unwrap()] {
        let fitted_cpu = map.fit(&cpu, data.source(0), 0, 3).unwrap();
        let fitted_gpu = map.fit(&gpu, data.source(0), 0, 3).unwrap();
        let phi_cpu = fitted_cpu.transform(data.source(0)).unwrap();
        let phi_gpu = fitted_gpu.transform(data.source(0)).unwrap();
        let err = relative_frobenius_error(&phi_gpu, &phi_cpu);
        assert!(err < 1e-3, "{map:?}: features differ by {err}");
    }
    // Same (CPU-built) features, G_Q and C_qq built on each device.
    let params = EksvdParams::new(4).feature_map(FeatureMap::random_fourier(0.4, 48).unwrap()).seed(1);
    let model = params.clone().fit(&cpu, &data).unwrap();
    let phi: Vec<DMatrix<f64>> = (0..3).map(|q| model.training_features(q).clone()).collect();
    let coupling = CouplingMatrix::from_features(phi.clone()).unwrap();
    let g_err = relative_frobenius_error(&coupling.assemble(&gpu).unwrap(), &coupling.assemble(&cpu).unwrap());
    assert!(g_err < 1e-5, "G_Q differs by {g_err}");
    let (c_gpu, c_cpu) = (covariances(&gpu, &phi).unwrap(), covariances(&cpu, &phi).unwrap());
    for q in 0..3 {
        let err = relative_frobenius_error(&c_gpu[q], &c_cpu[q]);
        assert!(err < 1e-5, "C_{q}{q} differs by {err}");
    }
    // Whole fits: eigenvalues agree to f32 accuracy.
    for solver in [Solver::Dual(Eigensolver::Dense), Solver::Covariance(Eigensolver::Dense)] {
        let on_cpu = params.clone().solver(solver).fit(&cpu, &data).unwrap();
        let on_gpu = params.clone().solver(solver).fit(&gpu, &data).unwrap();
        for k in 0..4 {
            let (a, b) = (on_cpu.eigenvalues()[k], on_gpu.eigenvalues()[k]);
            assert!((a - b).abs() < 1e-4 * on_cpu.eigenvalues()[0], "{solver:?} eigenvalue {k}: cpu {a} gpu {b}");
        }
    }
}
