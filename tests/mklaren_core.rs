//! mklaren: incomplete Cholesky, Nystrom, mklaren (LAR with look-ahead),
//! out-of-sample prediction, baselines and input validation.

mod common;

use gramian::linalg::relative_frobenius_error;
use gramian::mklaren::{
    nystrom, select_columns, FullKernelRidgeParams, IcdParams, KernelCombination, LowRankMethod, LowRankRidgeParams, MklarenError, MklarenParams,
};
use gramian::{ComputeError, Device, Kernel};
use nalgebra::{DMatrix, DVector};
use rand::Rng;

fn kernel_matrix(kernel: &Kernel, x: &DMatrix<f64>) -> DMatrix<f64> {
    Device::Cpu.kernel_matrix_symmetric(kernel, x).unwrap()
}

#[test]
fn icd_at_full_rank_reproduces_the_kernel_matrix() {
    let mut rng = common::rng();
    let x = common::random_matrix(&mut rng, 40, 3);
    let kernel = Kernel::rbf(0.8).unwrap();
    let icd = IcdParams::new(40).tolerance(1e-13).fit(&Device::Cpu, &kernel, &x).unwrap();
    let g = icd.factor();
    let k = kernel_matrix(&kernel, &x);
    let err = relative_frobenius_error(&(g * g.transpose()), &k);
    assert!(err < 1e-9, "full-rank ICD error {err}");
    // Eq. 21 on the training samples gives back the training factor.
    let g_star = icd.transform().apply(&Device::Cpu, &x).unwrap();
    assert!(relative_frobenius_error(&g_star, g) < 1e-7);
}

#[test]
fn icd_error_is_non_increasing_in_the_rank() {
    let mut rng = common::rng();
    let x = common::random_matrix(&mut rng, 60, 4);
    let kernel = Kernel::laplacian(0.5).unwrap();
    let k = kernel_matrix(&kernel, &x);
    let mut previous = (f64::INFINITY, f64::INFINITY);
    for rank in 1..=25 {
        let icd = IcdParams::new(rank).fit(&Device::Cpu, &kernel, &x).unwrap();
        assert_eq!(icd.rank(), rank);
        let g = icd.factor();
        let residual = &k - g * g.transpose();
        let trace = icd.residual_diagonal().sum();
        assert!((trace - residual.trace()).abs() < 1e-9 * k.trace(), "residual diagonal is diag(K - G G^T)");
        let frob = residual.norm();
        assert!(trace <= previous.0 + 1e-12 && frob <= previous.1 + 1e-12, "rank {rank}: trace {trace} frob {frob} after {previous:?}");
        previous = (trace, frob);
    }
}

#[test]
fn icd_and_nystrom_on_the_same_pivots_agree() {
    let mut rng = common::rng();
    let x = common::random_matrix(&mut rng, 50, 3);
    let kernel = Kernel::rbf(1.5).unwrap();
    let icd = IcdParams::new(12).fit(&Device::Cpu, &kernel, &x).unwrap();
    let ny = nystrom(&Device::Cpu, &kernel, &x, icd.pivots()).unwrap();
    let (g, h) = (icd.factor(), ny.factor());
    let err = relative_frobenius_error(&(g * g.transpose()), &(h * h.transpose()));
    assert!(err < 1e-8, "ICD vs Nystrom on the same pivots: {err}");
    // The stored transform T = L^{-T} equals the literal Eq. 21,
    // K(A,A)^{-1} K(A,:) G (G^T G)^{-1}.
    let k = kernel_matrix(&kernel, &x);
    let a = icd.pivots();
    let kaa = DMatrix::from_fn(a.len(), a.len(), |i, j| k[(a[i], a[j])]);
    let ka = DMatrix::from_fn(a.len(), 50, |i, j| k[(a[i], j)]);
    let literal = kaa.try_inverse().unwrap() * ka * g * (g.transpose() * g).try_inverse().unwrap();
    assert!(relative_frobenius_error(icd.transform().matrix(), &literal) < 1e-6);
    // Random pivots give a different (worse or equal trace) approximation: the test can fail.
    let other = nystrom(&Device::Cpu, &kernel, &x, &[0, 1, 2]).unwrap();
    assert!(relative_frobenius_error(&(g * g.transpose()), &(other.factor() * other.factor().transpose())) > 1e-3);
}

/// Textbook least-angle regression (Efron, Hastie, Johnstone & Tibshirani
/// 2004, Section 2) on centred, unit-norm columns: returns the order of the
/// variables and the fit after each step.
fn reference_lar(x: &DMatrix<f64>, y: &DVector<f64>) -> (Vec<usize>, Vec<DVector<f64>>) {
    let (n, p) = x.shape();
    let mut mu = DVector::<f64>::zeros(n);
    let c = x.tr_mul(y);
    let first = c.iamax();
    let mut active = vec![first];
    let mut fits = Vec::new();
    loop {
        let c = x.tr_mul(&(y - &mu));
        let big_c = c[active[0]].abs();
        let xa = DMatrix::from_fn(n, active.len(), |i, j| x[(i, active[j])] * c[active[j]].signum());
        let ga_inv = (xa.transpose() * &xa).try_inverse().unwrap();
        let ones = DVector::from_element(active.len(), 1.0);
        let big_a = 1.0 / (ones.dot(&(&ga_inv * &ones))).sqrt();
        let w = &ga_inv * &ones * big_a;
        let u = &xa * w;
        let a = x.tr_mul(&u);
        let mut best: Option<(f64, usize)> = None;
        for j in (0..p).filter(|j| !active.contains(j)) {
            for v in [(big_c - c[j]) / (big_a - a[j]), (big_c + c[j]) / (big_a + a[j])] {
                if v > 1e-12 && best.is_none_or(|(b, _)| v < b) {
                    best = Some((v, j));
                }
            }
        }
        let gamma = best.map_or(big_c / big_a, |(g, _)| g);
        mu += &u * gamma;
        fits.push(mu.clone());
        match best {
            Some((_, j)) => active.push(j),
            None => return (active, fits),
        }
    }
}

#[test]
fn mklaren_with_rank_one_kernels_and_delta_one_is_lar() {
    let mut rng = common::rng();
    let (n, p) = (60, 6);
    let x = common::random_matrix(&mut rng, n, p);
    let y = DVector::from_fn(n, |i, _| 2.0 * x[(i, 1)] - 1.5 * x[(i, 4)] + 0.7 * x[(i, 0)] + 0.3 * rng.random_range(-1.0..1.0) + 5.0);
    let feature_inputs: Vec<DMatrix<f64>> = (0..p).map(|j| select_columns(&x, &[j]).unwrap()).collect();
    let inputs: Vec<&DMatrix<f64>> = feature_inputs.iter().collect();
    let kernels = vec![Kernel::linear(); p];
    let model = MklarenParams::new(p).lookahead(1).lambda(0.0).kernels(&kernels).fit_inputs(&Device::Cpu, &inputs, &y).unwrap();

    // Reference on standardised columns.
    let ybar = y.mean();
    let yc = y.map(|v| v - ybar);
    let mut xs = x.clone();
    for j in 0..p {
        let mut col = xs.column_mut(j);
        let m = col.mean();
        col.add_scalar_mut(-m);
        let norm = col.norm();
        col /= norm;
    }
    let (order, fits) = reference_lar(&xs, &yc);
    let mk_order: Vec<usize> = model.order().iter().map(|s| s.kernel).collect();
    assert_eq!(mk_order, order, "order of entry");
    assert_eq!(model.coefficient_path().len(), fits.len());
    for (step, fit) in fits.iter().enumerate() {
        let pred = model.predict_at_step(&Device::Cpu, &inputs, step).unwrap();
        let err = (&pred - fit.add_scalar(ybar)).norm() / fit.norm();
        assert!(err < 1e-8, "step {step}: relative difference {err}");
    }
    // The last step is ordinary least squares.
    let design = DMatrix::from_fn(n, p + 1, |i, j| if j == p { 1.0 } else { x[(i, j)] });
    let ols = design.clone().svd(true, true).solve(&y, 1e-12).unwrap();
    let ols_fit = &design * ols;
    assert!((model.training_fit() - &ols_fit).norm() < 1e-8 * ols_fit.norm());
}

#[test]
fn out_of_sample_prediction_on_training_points_equals_the_fit() {
    let mut rng = common::rng();
    let n = 120;
    let x = common::random_matrix(&mut rng, n, 3);
    let y = DVector::from_fn(n, |i, _| (3.0 * x[(i, 0)]).sin() + x[(i, 1)] * x[(i, 2)] + 0.1 * rng.random_range(-1.0..1.0));
    let kernels = [Kernel::rbf(0.25).unwrap(), Kernel::rbf(1.0).unwrap(), Kernel::rbf(4.0).unwrap()];
    let lambda = 0.3;
    let model = MklarenParams::new(15).lookahead(5).lambda(lambda).kernels(&kernels).fit_inputs(&Device::Cpu, &[&x], &y).unwrap();
    assert_eq!(model.rank(), 15);
    let pred = model.predict_inputs(&Device::Cpu, &[&x]).unwrap();
    let fit = model.training_fit();
    assert!((&pred - fit).norm() < 1e-7 * fit.norm(), "{}", (&pred - fit).norm());
    // Eq. 18 (thin QR of H) equals the coefficients accumulated along the path.
    let last = model.coefficient_path().last().unwrap();
    assert!((last - model.coefficients()).norm() < 1e-8 * model.coefficients().norm());
    // Zou-Hastie: the final fit is ridge regression with lambda on the
    // selected (centred, unit-norm) columns.
    let mut z = DMatrix::<f64>::zeros(n, model.rank());
    let factors: Vec<DMatrix<f64>> = model.transforms().iter().map(|t| t.apply(&Device::Cpu, &x).unwrap()).collect();
    for (l, s) in model.order().iter().enumerate() {
        for i in 0..n {
            z[(i, l)] = s.sign * (factors[s.kernel][(i, s.position)] - s.mean) / s.norm;
        }
    }
    let ybar = y.mean();
    let yc = y.map(|v| v - ybar);
    let ridge = (z.transpose() * &z + DMatrix::identity(15, 15) * lambda).cholesky().unwrap().solve(&(z.transpose() * &yc));
    let ridge_fit = (&z * ridge).add_scalar(ybar);
    assert!((&ridge_fit - fit).norm() < 1e-7 * fit.norm(), "ridge equivalence {}", (&ridge_fit - fit).norm());
    // Kernel weights are the norms of each kernel's contribution.
    assert!(model.kernel_weights().iter().all(|w| w.is_finite() && *w >= 0.0));
    assert!(model.kernel_weights().sum() > 0.0);
}

#[test]
fn mklaren_picks_the_kernel_that_explains_the_target() {
    let mut rng = common::rng();
    let n = 150;
    let x = common::random_matrix(&mut rng, n, 3);
    let y = DVector::from_fn(n, |i, _| (4.0 * x[(i, 2)]).sin() + 0.05 * rng.random_range(-1.0..1.0));
    let subsets: Vec<DMatrix<f64>> = (0..3).map(|j| select_columns(&x, &[j]).unwrap()).collect();
    let inputs: Vec<&DMatrix<f64>> = subsets.iter().collect();
    let kernels = [Kernel::rbf(2.0).unwrap(); 3];
    let model = MklarenParams::new(6).lookahead(5).kernels(&kernels).fit_inputs(&Device::Cpu, &inputs, &y).unwrap();
    assert_eq!(model.order()[0].kernel, 2);
    let w = model.kernel_weights();
    assert!(w[2] > 5.0 * w[0].max(w[1]), "weights {w}");
}

#[test]
fn baselines_fit_and_predict_consistently() {
    let mut rng = common::rng();
    let n = 80;
    let x = common::random_matrix(&mut rng, n, 2);
    let y = DVector::from_fn(n, |i, _| x[(i, 0)] - (2.0 * x[(i, 1)]).cos() + 0.1 * rng.random_range(-1.0..1.0));
    let kernels = [Kernel::rbf(0.5).unwrap(), Kernel::rbf(2.0).unwrap()];
    for method in [LowRankMethod::Icd, LowRankMethod::Nystrom { seed: 3 }, LowRankMethod::Csi { lookahead: 5, kappa: 0.5 }] {
        let model = LowRankRidgeParams::new(method, 8).lambda(0.1).kernels(&kernels).fit_inputs(&Device::Cpu, &[&x], &y).unwrap();
        let pred = model.predict_inputs(&Device::Cpu, &[&x]).unwrap();
        assert!((&pred - model.training_fit()).norm() < 1e-7 * pred.norm(), "{method:?}");
        let rmse = gramian::datasets::rmse(&y, &pred);
        assert!(rmse < 0.8 * y.map(|v| v - y.mean()).norm() / (n as f64).sqrt(), "{method:?} explains little: {rmse}");
    }
    // Uniform kernel ridge regression against a direct dense solve.
    let lambda = 0.5;
    let uniform = FullKernelRidgeParams::new(KernelCombination::Uniform).lambda(lambda).kernels(&kernels).fit_inputs(&Device::Cpu, &[&x], &y).unwrap();
    let k = kernel_matrix(&kernels[0], &x) + kernel_matrix(&kernels[1], &x);
    let yc = y.map(|v| v - y.mean());
    let alpha = (&k + DMatrix::identity(n, n) * lambda).try_inverse().unwrap() * &yc;
    assert!((uniform.dual_coefficients() - &alpha).norm() < 1e-8 * alpha.norm());
    let pred = uniform.predict_inputs(&Device::Cpu, &[&x]).unwrap();
    assert!((&pred - (&k * &alpha).add_scalar(y.mean())).norm() < 1e-8 * pred.norm());
    for combination in [KernelCombination::Align, KernelCombination::Alignf, KernelCombination::Alignfc] {
        let model = FullKernelRidgeParams::new(combination).lambda(lambda).kernels(&kernels).fit_inputs(&Device::Cpu, &[&x], &y).unwrap();
        let w = model.weights();
        assert!((w.iter().map(|v| v.abs()).sum::<f64>() - 2.0).abs() < 1e-12);
        if combination != KernelCombination::Alignf {
            assert!(w.iter().all(|&v| v >= 0.0), "{combination:?} {w}");
        }
    }
}

#[test]
fn bad_inputs_get_typed_errors() {
    let mut rng = common::rng();
    let x = common::random_matrix(&mut rng, 20, 2);
    let y = DVector::from_fn(20, |i, _| x[(i, 0)]);
    let k = [Kernel::rbf(1.0).unwrap()];
    let cpu = Device::Cpu;
    assert!(matches!(MklarenParams::new(21).kernels(&k).fit_inputs(&cpu, &[&x], &y), Err(MklarenError::RankTooLarge { rank: 21, n: 20 })));
    assert!(matches!(MklarenParams::new(0).kernels(&k).fit_inputs(&cpu, &[&x], &y), Err(MklarenError::InvalidParameter { name: "rank", .. })));
    assert!(matches!(MklarenParams::new(3).lambda(-1.0).kernels(&k).fit_inputs(&cpu, &[&x], &y), Err(MklarenError::InvalidParameter { name: "lambda", .. })));
    assert!(matches!(MklarenParams::new(3).lookahead(0).kernels(&k).fit_inputs(&cpu, &[&x], &y), Err(MklarenError::InvalidParameter { name: "lookahead", .. })));
    assert!(matches!(MklarenParams::new(3).kernels(&k).fit_inputs(&cpu, &[&x], &DVector::from_element(20, 4.2)), Err(MklarenError::ConstantTarget)));
    assert!(matches!(MklarenParams::new(3).kernels(&k).fit_inputs(&cpu, &[&x], &DVector::zeros(19)), Err(MklarenError::TargetLength { .. })));
    let mut bad = x.clone();
    bad[(3, 1)] = f64::NAN;
    assert!(matches!(MklarenParams::new(3).kernels(&k).fit_inputs(&cpu, &[&bad], &y), Err(ComputeError::NonFinite { .. })));
    let mut bad_y = y.clone();
    bad_y[2] = f64::INFINITY;
    assert!(matches!(MklarenParams::new(3).kernels(&k).fit_inputs(&cpu, &[&x], &bad_y), Err(ComputeError::NonFinite { .. })));
    let short = x.rows(0, 15).into_owned();
    let two = [k[0], Kernel::linear()];
    assert!(matches!(MklarenParams::new(3).kernels(&two).fit_inputs(&cpu, &[&x, &short], &y), Err(MklarenError::SampleCountMismatch { kernel: 1, .. })));
    assert!(matches!(MklarenParams::new(3).kernels(&k).fit_inputs(&cpu, &[&x, &x], &y), Err(MklarenError::InputCount { .. })));
    assert!(matches!(MklarenParams::new(3).kernels(&[]).fit_inputs(&cpu, &[&x], &y), Err(MklarenError::InvalidParameter { name: "kernels", .. })));
    let empty = DMatrix::<f64>::zeros(0, 2);
    assert!(matches!(MklarenParams::new(1).kernels(&k).fit_inputs(&cpu, &[&empty], &DVector::zeros(0)), Err(ComputeError::Empty { .. })));
    // Two rank-one linear kernels cannot give rank 3.
    let cols: Vec<DMatrix<f64>> = (0..2).map(|j| select_columns(&x, &[j]).unwrap()).collect();
    let lin = [Kernel::linear(); 2];
    assert!(matches!(MklarenParams::new(3).lookahead(2).kernels(&lin).fit_inputs(&cpu, &[&cols[0], &cols[1]], &y), Err(MklarenError::RankDeficient { requested: 3, reached: 2 })));
    // Prediction with the wrong feature dimension.
    let model = MklarenParams::new(3).kernels(&k).fit_inputs(&cpu, &[&x], &y).unwrap();
    assert!(matches!(model.predict_inputs(&cpu, &[&DMatrix::zeros(4, 3)]), Err(ComputeError::DimensionMismatch { .. })));
    // Baselines and ICD.
    assert!(matches!(IcdParams::new(25).fit(&cpu, &k[0], &x), Err(MklarenError::RankTooLarge { .. })));
    assert!(matches!(nystrom(&cpu, &k[0], &x, &[1, 1]), Err(MklarenError::InvalidParameter { name: "pivots", .. })));
    assert!(matches!(LowRankRidgeParams::new(LowRankMethod::Csi { lookahead: 2, kappa: 1.5 }, 3).kernels(&k).fit_inputs(&cpu, &[&x], &y), Err(MklarenError::InvalidParameter { name: "kappa", .. })));
    assert!(matches!(FullKernelRidgeParams::new(KernelCombination::Uniform).lambda(-0.1).kernels(&k).fit_inputs(&cpu, &[&x], &y), Err(MklarenError::InvalidParameter { .. })));
    let dup = DMatrix::from_fn(20, 2, |i, j| (i % 5 + j) as f64);
    assert!(matches!(FullKernelRidgeParams::new(KernelCombination::Uniform).lambda(0.0).kernels(&[Kernel::linear()]).fit_inputs(&cpu, &[&dup], &y), Err(MklarenError::Singular(_))));
}

#[test]
fn gpu_prediction_matches_cpu() {
    let Some(gpu) = common::gpu_device(gramian::GpuOptions::default()) else { return };
    let mut rng = common::rng();
    let n = 200;
    let x = common::random_matrix(&mut rng, n, 4);
    let y = DVector::from_fn(n, |i, _| x[(i, 0)] * x[(i, 1)] + x[(i, 3)]);
    let kernels = [Kernel::rbf(0.5).unwrap(), Kernel::rbf(2.0).unwrap()];
    let cpu_model = MklarenParams::new(12).lookahead(4).lambda(0.1).kernels(&kernels).fit_inputs(&Device::Cpu, &[&x], &y).unwrap();
    let test = common::random_matrix(&mut rng, 50, 4);
    let on_cpu = cpu_model.predict_inputs(&Device::Cpu, &[&test]).unwrap();
    let on_gpu = cpu_model.predict_inputs(&gpu, &[&test]).unwrap();
    assert!((&on_cpu - &on_gpu).norm() < 1e-3 * on_cpu.norm().max(1.0), "{}", (&on_cpu - &on_gpu).norm());
    // Fitting with GPU kernel columns (f32) selects a model of the same quality.
    let gpu_model = MklarenParams::new(12).lookahead(4).lambda(0.1).kernels(&kernels).fit_inputs(&gpu, &[&x], &y).unwrap();
    let r_cpu = gramian::datasets::rmse(&y, cpu_model.training_fit());
    let r_gpu = gramian::datasets::rmse(&y, gpu_model.training_fit());
    assert!((r_cpu - r_gpu).abs() < 0.05 * r_cpu.max(1e-3) + 1e-3, "cpu {r_cpu} gpu {r_gpu}");
}
