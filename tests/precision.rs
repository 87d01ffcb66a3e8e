//! The working precision of a fit ([`WorkingPrecision`]): how
//! [`Device::working_precision`] resolves it, and the methods that honour
//! or reject it. GPU cases skip without an adapter unless
//! GRAMIAN_REQUIRE_GPU=1.

use crate::common;

use gramian::eksvd::{Eigensolver, EksvdParams, FeatureMap, Solver};
use gramian::estimator::Supervised;
use gramian::mklaren::MklarenParams;
use gramian::psd::{BaseMeasure, DensityParams, QuantileParams};
use gramian::{Device, Error, GpuOptions, Kernel, MultiSource, Precision, WorkingPrecision};
use nalgebra::DVector;

#[test]
fn the_cpu_computes_in_f64_whatever_the_setting() {
    let cpu = Device::cpu();
    for setting in [WorkingPrecision::Auto, WorkingPrecision::F32, WorkingPrecision::F64] {
        assert_eq!(cpu.working_precision(setting).unwrap(), Precision::F64, "{setting:?}");
    }
    assert_eq!(WorkingPrecision::default(), WorkingPrecision::Auto);
}

#[test]
fn a_gpu_resolves_each_setting() {
    let Some(gpu) = common::gpu_device(GpuOptions::default()) else { return };
    assert_eq!(gpu.working_precision(WorkingPrecision::Auto).unwrap(), gpu.best_precision());
    assert_eq!(gpu.working_precision(WorkingPrecision::F32).unwrap(), Precision::F32);
    match gpu.working_precision(WorkingPrecision::F64) {
        Ok(p) => {
            assert!(gpu.supports(Precision::F64));
            assert_eq!(p, Precision::F64);
        }
        Err(e) => {
            assert!(!gpu.supports(Precision::F64), "{e}");
            assert!(matches!(e, Error::Unsupported(ref m) if m.contains("SHADER_F64")), "{e}");
        }
    }
}

fn three_sources() -> MultiSource {
    let mut rng = common::rng();
    MultiSource::new(vec![common::random_matrix(&mut rng, 120, 5), common::random_matrix(&mut rng, 120, 7), common::random_matrix(&mut rng, 120, 4)]).unwrap()
}

/// eKSVD in f32 on a GPU agrees with the f64 fit to f32 accuracy, and its
/// data really went up in f32 (half the bytes of the f64 fit).
#[test]
fn eksvd_in_f32_on_a_gpu_agrees_with_f64() {
    let Some(gpu) = common::gpu_device(GpuOptions::default()) else { return };
    let data = three_sources();
    for solver in [Solver::Covariance(Eigensolver::Dense), Solver::Dual(Eigensolver::Lanczos { tolerance: 1e-5, max_restarts: 200 })] {
        let params = EksvdParams::new(3).feature_map(FeatureMap::random_fourier(0.4, 32).unwrap()).solver(solver).seed(2);
        let reference = params.clone().fit(&Device::cpu(), &data).unwrap();
        let mut bytes = Vec::new();
        for setting in [WorkingPrecision::F32, WorkingPrecision::F64] {
            if setting == WorkingPrecision::F64 && !gpu.supports(Precision::F64) {
                assert!(matches!(params.clone().precision(setting).fit(&gpu, &data), Err(Error::Unsupported(_))));
                continue;
            }
            let before = gpu.transfer_stats();
            let model = params.clone().precision(setting).fit(&gpu, &data).unwrap();
            bytes.push(gpu.transfer_stats().since(&before).host_to_device_bytes);
            // f32: features of unit-scale entries from sums of 5-7 terms and
            // Grams of 120 rows carry relative errors of about 120 * 6e-8;
            // the well-separated top eigenvalues move by as much. 1e-4
            // leaves a margin. f64 agrees with the CPU to 1e-8 (the
            // Lanczos residual of 1e-5 bounds the eigenvalue error by its
            // square). The Lanczos tolerance sits above f32's accuracy of
            // the products, which a tighter one could not reach.
            let tolerance = if setting == WorkingPrecision::F32 { 1e-4 } else { 1e-8 };
            for (k, (a, b)) in model.eigenvalues().iter().zip(reference.eigenvalues().iter()).enumerate() {
                assert!((a - b).abs() <= tolerance * b.abs(), "{solver:?} {setting:?}: eigenvalue {k}: {a} against {b}");
            }
            let scores = model.transform_source(0, data.source(0)).unwrap();
            let expected = reference.transform_source(0, data.source(0)).unwrap();
            // Scores up to each component's sign.
            for k in 0..3 {
                let (s, e) = (scores.column(k), expected.column(k));
                let err = (s - e).norm().min((s + e).norm()) / e.norm();
                assert!(err < 1e3 * tolerance, "{solver:?} {setting:?}: scores of component {k} differ by {err}");
            }
        }
        if let [f32_bytes, f64_bytes] = bytes[..] {
            assert!(f32_bytes < f64_bytes, "{solver:?}: f32 fit moved {f32_bytes} bytes, f64 fit {f64_bytes}");
        }
    }
}

/// mklaren in f32 on a GPU (kernel columns read back) agrees with the CPU.
#[test]
fn mklaren_in_f32_on_a_gpu_agrees_with_the_cpu() {
    let Some(gpu) = common::gpu_device(GpuOptions::default()) else { return };
    let mut rng = common::rng();
    let x = common::random_matrix(&mut rng, 80, 3);
    let y = DVector::from_fn(80, |i, _| (2.0 * x[(i, 0)]).sin() + x[(i, 1)] * x[(i, 2)]);
    let data = Supervised::new(x.clone(), y).unwrap();
    let params = MklarenParams::new(6).kernels(&[Kernel::rbf(0.5).unwrap(), Kernel::rbf(2.0).unwrap()]).lambda(1e-3);
    let reference = params.fit(&Device::cpu(), &data).unwrap().predict(&x).unwrap();
    let f32_fit = params.clone().precision(WorkingPrecision::F32);
    assert_eq!(f32_fit.precision_setting(), WorkingPrecision::F32);
    let predicted = f32_fit.fit(&gpu, &data).unwrap().predict(&x).unwrap();
    // Kernel entries in f32 (relative 6e-8) through 6 Cholesky columns and
    // a least-squares solve on the host: 1e-4 relative to the target's
    // scale; a different pivot path would miss it by orders of magnitude.
    let err = (&predicted - &reference).norm() / reference.norm();
    assert!(err < 1e-4, "mklaren f32 predictions differ by {err}");
}

/// The PSD models need f64: float32 is an InvalidParameter from validate,
/// on every device; float64 fits on the CPU.
#[test]
fn psd_models_reject_f32() {
    let gaussian = Kernel::gaussian_with_width(0.5).unwrap();
    let density = DensityParams::new(gaussian).unwrap().base_measure(BaseMeasure::gaussian(DVector::zeros(2), DVector::from_element(2, 2.0)).unwrap());
    let bad = density.clone().precision(WorkingPrecision::F32);
    assert_eq!(bad.settings().precision(), WorkingPrecision::F32);
    match bad.validate() {
        Err(Error::InvalidParameter { name: "precision", reason }) => assert!(reason.contains("f64") && reason.contains("duality-gap"), "{reason}"),
        other => panic!("expected InvalidParameter(precision), got {other:?}"),
    }
    let x = common::random_matrix(&mut common::rng(), 40, 2);
    assert!(matches!(bad.fit(&Device::cpu(), &x), Err(Error::InvalidParameter { name: "precision", .. })));
    assert!(density.precision(WorkingPrecision::F64).fit(&Device::cpu(), &x).is_ok());
    let quantile = QuantileParams::new(gaussian, &[0.5]).unwrap().precision(WorkingPrecision::F32);
    assert!(matches!(quantile.validate(), Err(Error::InvalidParameter { name: "precision", .. })));
}

/// Neural eKSVD trains in f32: float64 is an InvalidParameter.
#[cfg(feature = "neural")]
#[test]
fn neural_eksvd_rejects_f64() {
    use gramian::eksvd::neural::NeuralEksvdParams;
    assert!(NeuralEksvdParams::new(4).precision(WorkingPrecision::F32).validate().is_ok());
    assert!(matches!(NeuralEksvdParams::new(4).precision(WorkingPrecision::F64).validate(), Err(Error::InvalidParameter { name: "precision", .. })));
}

/// The low-rank and full-kernel ridges run their GPU kernel work in f32
/// when asked, and agree with the CPU to f32 accuracy.
#[test]
fn ridge_baselines_in_f32_on_a_gpu_agree_with_the_cpu() {
    use gramian::mklaren::{FullKernelRidgeParams, KernelCombination, LowRankMethod, LowRankRidgeParams};
    let Some(gpu) = common::gpu_device(GpuOptions::default()) else { return };
    let mut rng = common::rng();
    let x = common::random_matrix(&mut rng, 60, 3);
    let y = DVector::from_fn(60, |i, _| x[(i, 0)] - 0.5 * x[(i, 2)] * x[(i, 1)]);
    let data = Supervised::new(x.clone(), y).unwrap();
    let kernels = [Kernel::rbf(0.5).unwrap()];
    let full = FullKernelRidgeParams::new(KernelCombination::Uniform).kernels(&kernels).lambda(1e-1);
    let reference = full.fit(&Device::cpu(), &data).unwrap().predict(&x).unwrap();
    let gpu_fit = full.clone().precision(WorkingPrecision::F32).fit(&gpu, &data).unwrap().predict(&x).unwrap();
    // K in f32 (relative 6e-8 per entry), K + 0.1 I of condition <= 600:
    // the solution moves by at most about 600 * 60 * 6e-8 = 2e-3 relative.
    let err = (&gpu_fit - &reference).norm() / reference.norm();
    assert!(err < 2e-3, "full-kernel ridge f32: {err}");
    for method in [LowRankMethod::Icd, LowRankMethod::Nystrom { seed: 1 }] {
        let low = LowRankRidgeParams::new(method, 8).kernels(&kernels).lambda(1e-2);
        let reference = low.fit(&Device::cpu(), &data).unwrap().predict(&x).unwrap();
        let predicted = low.clone().precision(WorkingPrecision::F32).fit(&gpu, &data).unwrap().predict(&x).unwrap();
        let err = (&predicted - &reference).norm() / reference.norm();
        assert!(err < 1e-3, "{method:?} f32: {err}");
    }
}
