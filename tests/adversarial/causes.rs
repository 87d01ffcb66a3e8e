//! Errors that name their cause: overflow from finite inputs is
//! `Overflow` (not "contains NaN" or `RankDeficient`), a width outside its
//! valid range names `sigma` and the range, invalid sizes are rejected
//! instead of ignored, and degenerate ridge systems are `Singular` as
//! documented. Deterministic inputs; every call is time-bounded.

use crate::harness;
use crate::common;

use std::fmt::Debug;

use gramian::eksvd::{EksvdParams, FeatureMap};
use gramian::MultiSource;
use gramian::mklaren::{IcdParams, LowRankMethod, LowRankRidgeParams};
use gramian::psd::positive_part::PositivePartSolver;
use gramian::psd::HeteroscedasticParams;
use gramian::{Error, Device, GpuOptions, Kernel, MatrixProduct};
use nalgebra::{DMatrix, DVector};

fn grid(n: usize, d: usize, scale: f64) -> DMatrix<f64> {
    DMatrix::from_fn(n, d, |i, j| scale * (((i * d + j) as f64) * 0.7).sin())
}

/// Runs `f` bounded (panics and hangs fail) and returns its `Debug` text.
fn outcome<T: Debug, E: Debug>(f: impl FnOnce() -> Result<T, E> + Send + 'static) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(format!("{:?}", f()));
    });
    rx.recv_timeout(harness::LIMIT).expect("call panicked or hung")
}

fn devices() -> Vec<Device> {
    let mut d = vec![Device::Cpu];
    d.extend(common::gpu_device(GpuOptions::default()));
    d
}

#[test]
fn overflow_from_finite_inputs_is_reported_as_overflow() {
    for dev in devices() {
        let big = grid(6, 3, 1e200);
        let (d1, b1) = (dev.clone(), big.clone());
        let r = outcome(move || d1.kernel_matrix(&Kernel::linear(), &b1, &b1));
        // On an f32 device path 1e200 is not representable: that is named too.
        assert!(r.contains("Overflow") || r.contains("NotRepresentable"), "{r}");
        let (d2, b2) = (dev.clone(), big.clone());
        let r = outcome(move || d2.matmul(&b2, &b2, MatrixProduct::AtB));
        assert!(r.contains("Overflow") || r.contains("NotRepresentable"), "{r}");
        let d3 = dev.clone();
        let x = grid(6, 2, 1e30).map(|v| v as f32);
        let r = outcome(move || d3.kernel_matrix(&Kernel::polynomial(1.0, 1.0, 3).unwrap(), &x, &x));
        assert!(r.contains("Overflow"), "f32 polynomial: {r}");
        let (d4, b4) = (dev.clone(), big.clone());
        let r = outcome(move || IcdParams::new(3).fit(&d4, &Kernel::linear(), &b4).map(|f| f.factor().clone()));
        assert!(r.contains("Overflow") || r.contains("NotRepresentable"), "ICD: {r}");
        assert!(!r.contains("NaN"), "ICD overflow reported as NaN: {r}");
        let d5 = dev.clone();
        let r = outcome(move || {
            let data = MultiSource::new(vec![grid(8, 3, 1e200), grid(8, 3, -1e200)])?;
            EksvdParams::new(2).feature_map(FeatureMap::Linear).fit(&d5, &data).map(|m| m.eigenvalues().clone())
        });
        assert!(r.contains("Overflow") || r.contains("NotRepresentable"), "eKSVD: {r}");
    }
}

#[test]
fn heteroscedastic_targets_near_1e300_end_in_error_or_finite_fit() {
    let x = grid(12, 1, 1.0);
    let y = DVector::from_fn(12, |i, _| 1e300 * ((i as f64) * 0.3).cos());
    let r = outcome(move || {
        let m = HeteroscedasticParams::new(gramian::Kernel::gaussian_with_width(0.5).unwrap()).unwrap().fit_xy(&Device::Cpu, &x, &y)?;
        let mean = m.predict_mean(&x)?;
        assert!(mean.iter().all(|v| v.is_finite()), "non-finite mean in Ok");
        Ok::<_, Error>(mean)
    });
    assert!(!r.contains("NaN"), "{r}");
}

#[test]
fn gaussian_width_outside_its_range_names_sigma_and_the_range() {
    for sigma in [1e-300, 1e-160, 1e200] {
        let e = Kernel::gaussian_with_width(sigma).unwrap_err();
        match &e {
            Error::InvalidParameter { name, reason } => {
                assert_eq!(*name, "sigma", "{e}");
                assert!(reason.contains("5.3e-155"), "{e}");
            }
            other => panic!("sigma {sigma}: {other:?}"),
        }
    }
    assert!(Kernel::gaussian_with_width(1e-150).is_ok());
    assert!(Kernel::gaussian_with_width(1e150).is_ok());
}

#[test]
fn low_rank_ridge_with_lambda_zero_on_identical_rows_is_singular() {
    let x = DMatrix::from_element(8, 2, 0.3);
    let y = DVector::from_fn(8, |i, _| i as f64);
    for method in [LowRankMethod::Icd, LowRankMethod::Nystrom { seed: 1 }, LowRankMethod::Csi { lookahead: 3, kappa: 0.5 }] {
        let r = LowRankRidgeParams::new(method, 2).lambda(0.0).kernels(&[Kernel::rbf(0.5).unwrap()]).fit_inputs(&Device::Cpu, &[&x], &y);
        assert!(matches!(r, Err(Error::Singular(_)) | Err(Error::RankDeficient { .. })), "{method:?}: {:?}", r.map(|m| m.coefficients().clone()));
    }
}

#[test]
fn positive_part_basis_of_the_wrong_size_is_rejected() {
    let mut s = PositivePartSolver::new();
    assert!(matches!(s.try_set_basis(DMatrix::zeros(5, 2), 8), Err(Error::InvalidParameter { name: "basis", .. })));
    assert!(matches!(s.try_set_basis(DMatrix::zeros(8, 5), 8), Err(Error::InvalidParameter { name: "basis", .. })));
    assert!(matches!(s.try_set_basis(DMatrix::from_element(8, 2, f64::NAN), 8), Err(Error::NonFinite { .. })));
    assert!(s.try_set_basis(DMatrix::identity(8, 2), 8).is_ok());
}
