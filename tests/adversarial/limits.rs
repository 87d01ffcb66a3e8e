//! The adversarial suite's limit cases: small inputs that imply a huge host
//! allocation (every one must be a typed `OutOfMemory` of the host, raised
//! before any work, on the CPU and on the GPU's host outputs), values built
//! as literals that bypass the constructors' checks, and edges where a
//! finite input used to give a wrong value without an error.
//!
//! An allocation that the process cannot survive aborts the whole test
//! binary: a failing case here does not return a wrong answer, it kills the
//! run.

use crate::common;
use crate::harness::Tally;

use gramian::eksvd::eigensolver::largest_lanczos;
use gramian::eksvd::{solve_dual, CouplingMatrix, Eigensolver, EksvdParams, FeatureMap, Solver};
use gramian::MultiSource;
use gramian::estimator::{cross_validate, Splits, Supervised};
use gramian::mklaren::{nystrom, FullKernelRidgeParams, KernelCombination};
use gramian::psd::baseline_regression::BaselineHeteroscedasticParams;
use gramian::psd::baselines::BaselineParams;
use gramian::psd::integrals::product_integrals;
use gramian::psd::{BaseMeasure, BaselineKind, DensityParams, EmpiricalFeatures, QuantileParams};
use gramian::{Device, Error, GpuOptions, Kernel, MatrixProduct, Memory, Precision};
use nalgebra::{DMatrix, DVector};

/// Rows of the inputs whose square outputs cannot fit any host (200,000^2
/// f64 = 320 GB).
const HUGE: usize = 200_000;

fn tall(rows: usize, cols: usize) -> DMatrix<f64> {
    DMatrix::from_fn(rows, cols, |i, j| ((i * 7 + j * 3) % 101) as f64 * 0.01)
}

fn devices() -> Vec<(&'static str, Device)> {
    let mut out = vec![("cpu", Device::Cpu)];
    if let Some(g) = common::gpu_device(GpuOptions::default()) {
        out.push(("gpu", g));
    }
    out
}

/// Runs `f`, checks it ends in a host `OutOfMemory`, and counts it.
fn expect_host_oom<T: crate::harness::Values + 'static>(t: &mut Tally, wrong: &mut Vec<String>, name: String, f: impl FnOnce() -> Result<T, Error> + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    t.run(name.clone(), move || {
        let r = f();
        let _ = tx.send(match &r {
            Err(Error::OutOfMemory { memory: Memory::Host, .. }) => None,
            Err(e) => Some(format!("{e:?}")),
            Ok(_) => Some("Ok".into()),
        });
        r
    });
    if let Ok(Some(got)) = rx.try_recv() {
        wrong.push(format!("{name}: {got}"));
    }
}

#[test]
fn huge_implied_allocations_are_host_out_of_memory() {
    let mut t = Tally::default();
    let mut wrong = Vec::new();
    for (name, dev) in devices() {
        let tag = |op: &str| format!("{name} {op}");
        let rbf = Kernel::rbf(0.5).unwrap();
        macro_rules! case {
            ($op:expr, |$d:ident| $body:expr) => {{
                let $d = dev.clone();
                expect_host_oom(&mut t, &mut wrong, tag($op), move || $body);
            }};
        }
        case!("kernel_matrix", |d| d.kernel_matrix(&rbf, &tall(HUGE, 2), &tall(HUGE, 2)));
        case!("kernel_matrix f32", |d| d.kernel_matrix(&rbf, &tall(HUGE, 2).map(|v| v as f32), &tall(HUGE, 2).map(|v| v as f32)));
        case!("kernel_matrix_symmetric", |d| d.kernel_matrix_symmetric(&Kernel::Linear, &tall(HUGE, 2)));
        case!("outer_gram", |d| d.outer_gram(&tall(HUGE, 2)));
        case!("gram", |d| d.gram(&tall(2, HUGE)));
        case!("matmul ABt", |d| d.matmul(&tall(HUGE, 1), &tall(HUGE, 1), MatrixProduct::ABt));
        case!("matmul AB", |d| d.matmul(&tall(HUGE, 1), &tall(1, HUGE), MatrixProduct::AB));
        case!("batched_matmul", |d| {
            let (a, b) = (tall(HUGE / 2, 1), tall(HUGE / 2, 1));
            d.batched_matmul(&[(&a, &b), (&a, &b), (&a, &b), (&a, &b), (&a, &b)], MatrixProduct::ABt)
        });
        case!("kernel_matvec", |d| d.kernel_matvec(&rbf, &tall(HUGE, 2), &tall(1, 2), &tall(1, HUGE)));
        case!("PSD density without Nystrom, 110,000 samples", |d| DensityParams::new(gramian::Kernel::gaussian_with_width(1.0).unwrap()).unwrap().fit(&d, &tall(110_000, 1)).and_then(|m| m.integral()));
        case!("full-kernel ridge, 120,000 samples", |d| {
            let x = tall(120_000, 1);
            let y = DVector::from_fn(x.nrows(), |i, _| (i % 13) as f64);
            FullKernelRidgeParams::new(KernelCombination::Uniform).kernels(&[Kernel::rbf(1.0).unwrap()]).fit_inputs(&d, &[&x], &y).map(|m| m.weights().clone())
        });
        case!("mklaren::nystrom with 120,000 pivots", |d| {
            let pivots: Vec<usize> = (0..120_000).collect();
            nystrom(&d, &Kernel::rbf(1.0).unwrap(), &tall(HUGE, 1), &pivots).map(|f| f.factor().nrows())
        });
        case!("covariance eKSVD, 100,000 random Fourier features", |d| {
            let data = MultiSource::paired(vec![tall(40, 2), tall(40, 2).map(|v| v * 0.5)])?;
            EksvdParams::new(2).feature_map(FeatureMap::random_fourier(0.5, 100_000)?).solver(Solver::Covariance(Eigensolver::Dense)).fit(&d, &data).map(|m| m.eigenvalues().clone())
        });
        case!("dense solve_dual, two 100,000-row sources", |d| {
            let data = MultiSource::paired(vec![tall(100_000, 2), tall(100_000, 2).map(|v| v * 0.5)])?;
            let c = CouplingMatrix::from_kernel(Kernel::rbf(1.0).unwrap(), &data)?;
            solve_dual(&d, &c, 2, &Eigensolver::Dense, 0).map(|s| s.eigenvalues)
        });
    }
    macro_rules! case {
        ($op:expr, $body:expr) => {
            expect_host_oom(&mut t, &mut wrong, $op.to_string(), move || $body)
        };
    }
    case!("product_integrals of 120,000 centres", product_integrals(&tall(120_000, 1), 1.0, &BaseMeasure::Lebesgue));
    case!("EmpiricalFeatures of 120,000 centres", EmpiricalFeatures::new(&tall(120_000, 1), 1.0).map(|f| f.rank()));
    case!("largest_lanczos of order 2^40", largest_lanczos(1 << 40, 2, |v| Ok(v.clone()), 1e-8, 10, 0).map(|p| p.values));
    case!("random_holdout 2^40 splits", Splits::random_holdout(1 << 40)?.train_fraction(0.5)?.indices(10).map(|f| f.len()));
    case!("random_holdout usize::MAX splits", Splits::random_holdout(usize::MAX)?.train_fraction(0.5)?.indices(10).map(|f| f.len()));
    case!("zeros 2^40 x 2^30 on the CPU", Device::Cpu.zeros(1 << 40, 1 << 30, Precision::F64).map(|m| m.nrows()));
    for w in &wrong {
        println!("  NOT A HOST OUT-OF-MEMORY ERROR: {w}");
    }
    t.report_and_check("huge implied allocations", 20);
    assert!(wrong.is_empty(), "{} cases did not end in a host OutOfMemory", wrong.len());
    assert_eq!(t.errs, t.cases);
}

/// `GLM` with a Monte Carlo sample beyond `MAX_MONTE_CARLO` (2^40, or so
/// large that `4 x monte_carlo` overflows) is a parameter error before any
/// work.
#[test]
fn glm_monte_carlo_sizes_are_bounded() {
    for samples in [gramian::psd::baselines::MAX_MONTE_CARLO + 1, 1 << 40, usize::MAX / 4, usize::MAX] {
        let r = BaselineParams::new(BaselineKind::Glm, gramian::Kernel::gaussian_with_width(1.0).unwrap()).unwrap().monte_carlo(samples, 0).fit(&Device::Cpu, &tall(20, 1));
        assert!(matches!(r, Err(Error::InvalidParameter { name: "monte_carlo", .. })), "{samples}: {r:?}");
    }
}

#[test]
fn restarts_are_bounded() {
    let x = tall(30, 1);
    let y = DVector::from_fn(30, |i, _| (i as f64 * 0.3).sin());
    let r = BaselineHeteroscedasticParams::new(BaselineKind::Glm, gramian::Kernel::gaussian_with_width(1.0).unwrap()).unwrap().restarts(usize::MAX, 0).fit_xy(&Device::Cpu, &x, &y);
    assert!(matches!(r, Err(Error::InvalidParameter { name: "restarts", .. })), "{r:?}");
    let r = gramian::psd::baseline_regression::BaselineQuantileParams::new(BaselineKind::Glm, gramian::Kernel::gaussian_with_width(1.0).unwrap(), &[0.5]).unwrap().restarts(gramian::psd::baseline_regression::MAX_RESTARTS + 1, 0).fit_xy(&Device::Cpu, &x, &y);
    assert!(matches!(r, Err(Error::InvalidParameter { name: "restarts", .. })), "{r:?}");
}

/// Kernel literals that skip the constructors, slices of different lengths,
/// and far-apart points under tiny `gamma`.
#[test]
fn kernel_eval_checks_its_arguments_and_far_points() {
    let degree_max = Kernel::Polynomial { gamma: 1.0, coef0: -0.5, degree: u32::MAX };
    assert!(matches!(degree_max.eval(&[1.0], &[1.0]), Err(Error::InvalidParameter { name: "degree", .. })));
    assert!(matches!(Kernel::Rbf { gamma: -1.0 }.eval(&[1.0], &[0.0]), Err(Error::InvalidParameter { name: "gamma", .. })));
    assert!(matches!(Kernel::rbf(1.0).unwrap().eval(&[1.0, 2.0], &[1.0]), Err(Error::DimensionMismatch { .. })));
    assert!(matches!(Kernel::Linear.eval(&[f64::NAN], &[1.0]), Err(Error::NonFinite { what: "x", .. })));
    assert!(matches!(Kernel::Linear.eval(&[1e200], &[1e200]), Err(Error::Overflow { .. })));
    // exp(-1e-300 * 1e300) = e^-1, though ||x - z||^2 = 1e600 overflows.
    let e1 = (-1.0f64).exp();
    let lap = Kernel::laplacian(1e-300).unwrap().eval(&[1e300], &[0.0]).unwrap();
    assert!((lap - e1).abs() < 1e-15, "{lap}");
    let lap2 = Kernel::laplacian(1e-300).unwrap().eval(&[6e299, 0.0], &[0.0, 8e299]).unwrap();
    assert!((lap2 - e1).abs() < 1e-15, "{lap2}");
    let rbf = Kernel::rbf(1e-310).unwrap().eval(&[1e155], &[0.0]).unwrap();
    assert!((rbf - (-1.0f64).exp()).abs() < 1e-9, "{rbf}");
    // Still 0 where the true value underflows.
    assert_eq!(Kernel::rbf(1.0).unwrap().eval(&[1e300], &[0.0]).unwrap(), 0.0);
    assert_eq!(Kernel::laplacian(1.0).unwrap().eval(&[1e300], &[-1e300]).unwrap(), 0.0);
    // f32: the squared distance overflows at 1.8e19 apart.
    let lap32 = Kernel::laplacian(1e-30).unwrap().eval(&[1e30f32], &[0.0f32]).unwrap();
    assert!((lap32 as f64 - e1).abs() < 1e-6, "{lap32}");
}

/// The matrix paths cannot rescale per pair: where an overflowed squared
/// distance leaves the kernel value undetermined they report an overflow,
/// and where the true value underflows they give the 0 it is.
#[test]
fn kernel_matrices_of_far_points_are_right_or_overflow() {
    let x = DMatrix::from_row_slice(2, 1, &[1e300, 0.0]);
    let z = DMatrix::from_row_slice(1, 1, &[0.0]);
    // In f32 the squared distance overflows 1.8e19 apart.
    let x32 = DMatrix::from_row_slice(2, 1, &[2e19f32, 0.0]);
    let z32 = DMatrix::from_row_slice(1, 1, &[-2e19f32]);
    for (name, dev) in devices() {
        let tiny32 = dev.kernel_matrix(&Kernel::laplacian(1e-25).unwrap(), &x32, &z32);
        assert!(matches!(tiny32, Err(Error::Overflow { .. })), "{name}: {tiny32:?}");
        let tiny32 = dev.kernel_matvec(&Kernel::laplacian(1e-25).unwrap(), &x32, &z32, &DMatrix::from_element(1, 1, 1.0f32));
        assert!(matches!(tiny32, Err(Error::Overflow { .. })), "{name}: {tiny32:?}");
        let k32 = dev.kernel_matrix(&Kernel::laplacian(1.0).unwrap(), &x32, &z32).unwrap();
        assert_eq!((k32[(0, 0)], k32[(1, 0)]), (0.0, 0.0), "{name}");
        if name == "gpu" {
            // f64 data beyond the f32 range: a typed error on the f32 host path.
            assert!(dev.kernel_matrix(&Kernel::laplacian(1e-300).unwrap(), &x, &z).is_err());
            if dev.supports(Precision::F64) {
                let (xr, zr) = (dev.upload(&x, Precision::F64).unwrap(), dev.upload(&z, Precision::F64).unwrap());
                let tiny = dev.resident_kernel_matrix(&Kernel::laplacian(1e-300).unwrap(), &xr, &zr);
                assert!(matches!(tiny, Err(Error::Overflow { .. })), "{name} resident: {tiny:?}");
                let v = dev.upload(&DMatrix::from_element(1, 1, 1.0), Precision::F64).unwrap();
                let tiny = dev.resident_kernel_matvec(&Kernel::laplacian(1e-300).unwrap(), &xr, &zr, &v);
                assert!(matches!(tiny, Err(Error::Overflow { .. })), "{name} resident matvec: {tiny:?}");
                let k = dev.to_host(&dev.resident_kernel_matrix(&Kernel::laplacian(1.0).unwrap(), &xr, &zr).unwrap()).unwrap();
                assert_eq!((k[(0, 0)], k[(1, 0)]), (0.0, 1.0), "{name} resident");
            }
            continue;
        }
        let tiny = dev.kernel_matrix(&Kernel::laplacian(1e-300).unwrap(), &x, &z);
        assert!(matches!(tiny, Err(Error::Overflow { .. })), "{name}: {tiny:?}");
        let tiny = dev.kernel_matrix(&Kernel::rbf(1e-310).unwrap(), &x, &z);
        assert!(matches!(tiny, Err(Error::Overflow { .. })), "{name}: {tiny:?}");
        let column = dev.kernel_column(&Kernel::laplacian(1e-300).unwrap(), &x, &[0.0]);
        assert!(matches!(column, Err(Error::Overflow { .. })), "{name}: {column:?}");
        let k = dev.kernel_matrix(&Kernel::laplacian(1.0).unwrap(), &x, &z).unwrap();
        assert_eq!((k[(0, 0)], k[(1, 0)]), (0.0, 1.0), "{name}");
        let k = dev.kernel_matrix(&Kernel::rbf(1.0).unwrap(), &x, &z).unwrap();
        assert_eq!((k[(0, 0)], k[(1, 0)]), (0.0, 1.0), "{name}");
    }
}

/// `Supervised` has public fields: a literal may pair inputs with a target
/// of another length, which must not panic inside cross-validation.
#[test]
fn supervised_literal_with_short_target_is_a_typed_error() {
    use gramian::estimator::Samples;
    let data = Supervised { x: tall(20, 2), y: DVector::from_element(15, 1.0) };
    assert!(matches!(data.select(&[0, 19]), Err(Error::TargetLength { expected: 20, found: 15 })));
    let candidates = [QuantileParams::new(gramian::Kernel::gaussian_with_width(1.0).unwrap(), &[0.5]).unwrap()];
    let r = cross_validate(&Device::Cpu, &candidates, &data, &Splits::k_fold(4).unwrap(), |_, _| Ok(0.0));
    match r {
        Err(e) => assert!(matches!(e, Error::TargetLength { .. }), "{e:?}"),
        Ok(cv) => assert!(cv.scores.iter().flatten().all(|s| *s == f64::NEG_INFINITY), "{cv:?}"),
    }
}

#[test]
fn selections_out_of_range_are_typed_errors() {
    let data = MultiSource::paired(vec![tall(30, 2), tall(30, 2).map(|v| (v * 3.0).sin())]).unwrap();
    let model = EksvdParams::new(2).fit(&Device::Cpu, &data).unwrap();
    assert!(model.training_scores(1).is_ok());
    assert!(matches!(model.training_scores(99), Err(Error::IndexOutOfRange { index: 99, len: 2, .. })));
}

/// Resident results on the CPU are what a GPU stores: `F32` rounds, and
/// operands of different precisions are rejected on both paths.
#[test]
fn resident_precision_is_the_same_on_cpu_and_gpu() {
    let x = DMatrix::from_fn(6, 3, |i, j| 0.1 + (i * 3 + j) as f64 / 7.0);
    for (name, dev) in devices() {
        let a = dev.upload(&x, Precision::F32).unwrap();
        let p = dev.resident_matmul(&a, &a, MatrixProduct::ABt).unwrap();
        let host = dev.to_host(&p).unwrap();
        assert!(host.iter().all(|&v| v == v as f32 as f64), "{name}: F32 product not rounded to f32");
        let s = dev.to_host(&dev.resident_row_sums(&a).unwrap()).unwrap();
        assert!(s.iter().all(|&v| v == v as f32 as f64), "{name}: F32 row sums not rounded");
        if dev.supports(Precision::F64) {
            let b = dev.upload(&x, Precision::F64).unwrap();
            assert!(matches!(dev.resident_matmul(&a, &b, MatrixProduct::ABt), Err(Error::PrecisionMismatch { .. })), "{name}");
            assert!(matches!(dev.resident_hadamard(&a, &b), Err(Error::PrecisionMismatch { .. })), "{name}");
            assert!(matches!(dev.resident_kernel_matrix(&Kernel::rbf(0.3).unwrap(), &a, &b), Err(Error::PrecisionMismatch { .. })), "{name}");
        }
        let phases = dev.upload(&DMatrix::from_element(1, 3, 0.5), Precision::F32).unwrap();
        assert!(matches!(dev.resident_cosine_features(&a, &phases, f64::NAN), Err(Error::InvalidParameter { name: "scale", .. })), "{name}");
    }
}

/// An operator whose products overflow is reported as an overflow of the
/// operator's product, not as an invalid parameter.
#[test]
fn lanczos_on_overflowing_products_reports_an_overflow() {
    let r = largest_lanczos(200, 2, |v| Ok(v * 1e308 * 1e10), 1e-8, 10, 0);
    assert!(matches!(r, Err(Error::Overflow { .. })), "{r:?}");
}

#[test]
fn out_of_memory_says_host_or_device() {
    let e = Device::Cpu.zeros(1 << 40, 1 << 40, Precision::F64).unwrap_err();
    assert!(e.to_string().starts_with("host out of memory"), "{e}");
    if let Some(g) = common::gpu_device(GpuOptions::default()) {
        let e = g.zeros(1 << 40, 1 << 30, Precision::F32).unwrap_err();
        assert!(matches!(e, Error::OutOfMemory { memory: Memory::Device, .. } | Error::TooLargeForGpu { .. }), "{e:?}");
    }
}
