//! mklaren: incomplete Cholesky, Nystrom, mklaren (LAR with look-ahead),
//! out-of-sample prediction, baselines and input validation.

use crate::common;

use gramian::estimator::OnDevice;
use gramian::linalg::relative_frobenius_error;
use gramian::mklaren::{nystrom, select_columns, FullKernelRidgeParams, IcdParams, KernelCombination, LowRankMethod, LowRankRidgeParams, MklarenParams};
use gramian::{Error, Device, Kernel};
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
        let pred = model.predict_at_step(&inputs, step).unwrap();
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
    let pred = model.predict_inputs(&[&x]).unwrap();
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
        let pred = model.predict_inputs(&[&x]).unwrap();
        assert!((&pred - model.training_fit()).norm() < 1e-7 * pred.norm(), "{method:?}");
        let rmse = common::rmse(&y, &pred);
        assert!(rmse < 0.8 * y.map(|v| v - y.mean()).norm() / (n as f64).sqrt(), "{method:?} explains little: {rmse}");
    }
    // Uniform kernel ridge regression against a direct dense solve.
    let lambda = 0.5;
    let uniform = FullKernelRidgeParams::new(KernelCombination::Uniform).lambda(lambda).kernels(&kernels).fit_inputs(&Device::Cpu, &[&x], &y).unwrap();
    let k = kernel_matrix(&kernels[0], &x) + kernel_matrix(&kernels[1], &x);
    let yc = y.map(|v| v - y.mean());
    let alpha = (&k + DMatrix::identity(n, n) * lambda).try_inverse().unwrap() * &yc;
    assert!((uniform.dual_coefficients() - &alpha).norm() < 1e-8 * alpha.norm());
    let pred = uniform.predict_inputs(&[&x]).unwrap();
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
    assert!(matches!(MklarenParams::new(21).kernels(&k).fit_inputs(&cpu, &[&x], &y), Err(Error::RankTooLarge { rank: 21, n: 20 })));
    assert!(matches!(MklarenParams::new(0).kernels(&k).fit_inputs(&cpu, &[&x], &y), Err(Error::InvalidParameter { name: "rank", .. })));
    assert!(matches!(MklarenParams::new(3).lambda(-1.0).kernels(&k).fit_inputs(&cpu, &[&x], &y), Err(Error::InvalidParameter { name: "lambda", .. })));
    assert!(matches!(MklarenParams::new(3).lookahead(0).kernels(&k).fit_inputs(&cpu, &[&x], &y), Err(Error::InvalidParameter { name: "lookahead", .. })));
    assert!(matches!(MklarenParams::new(3).kernels(&k).fit_inputs(&cpu, &[&x], &DVector::from_element(20, 4.2)), Err(Error::ConstantTarget)));
    assert!(matches!(MklarenParams::new(3).kernels(&k).fit_inputs(&cpu, &[&x], &DVector::zeros(19)), Err(Error::TargetLength { .. })));
    let mut bad = x.clone();
    bad[(3, 1)] = f64::NAN;
    assert!(matches!(MklarenParams::new(3).kernels(&k).fit_inputs(&cpu, &[&bad], &y), Err(Error::NonFinite { .. })));
    let mut bad_y = y.clone();
    bad_y[2] = f64::INFINITY;
    assert!(matches!(MklarenParams::new(3).kernels(&k).fit_inputs(&cpu, &[&x], &bad_y), Err(Error::NonFinite { .. })));
    let short = x.rows(0, 15).into_owned();
    let two = [k[0], Kernel::linear()];
    assert!(matches!(MklarenParams::new(3).kernels(&two).fit_inputs(&cpu, &[&x, &short], &y), Err(Error::SampleCountMismatch { kernel: 1, .. })));
    assert!(matches!(MklarenParams::new(3).kernels(&k).fit_inputs(&cpu, &[&x, &x], &y), Err(Error::InputCount { .. })));
    assert!(matches!(MklarenParams::new(3).kernels(&[]).fit_inputs(&cpu, &[&x], &y), Err(Error::InvalidParameter { name: "kernels", .. })));
    let empty = DMatrix::<f64>::zeros(0, 2);
    assert!(matches!(MklarenParams::new(1).kernels(&k).fit_inputs(&cpu, &[&empty], &DVector::zeros(0)), Err(Error::Empty { .. })));
    // Two rank-one linear kernels cannot give rank 3.
    let cols: Vec<DMatrix<f64>> = (0..2).map(|j| select_columns(&x, &[j]).unwrap()).collect();
    let lin = [Kernel::linear(); 2];
    assert!(matches!(MklarenParams::new(3).lookahead(2).kernels(&lin).fit_inputs(&cpu, &[&cols[0], &cols[1]], &y), Err(Error::RankDeficient { requested: 3, reached: 2 })));
    // The same on a GPU with f64, where the steps run on the device.
    if let Some(gpu) = common::gpu_device(gramian::GpuOptions::default()).filter(|g| g.supports(gramian::Precision::F64)) {
        assert!(matches!(MklarenParams::new(3).lookahead(2).kernels(&lin).fit_inputs(&gpu, &[&cols[0], &cols[1]], &y), Err(Error::RankDeficient { requested: 3, reached: 2 })));
        assert!(matches!(MklarenParams::new(3).kernels(&k).fit_inputs(&gpu, &[&bad], &y), Err(Error::NonFinite { .. })));
        assert!(matches!(MklarenParams::new(3).kernels(&k).fit_inputs(&gpu, &[&x], &bad_y), Err(Error::NonFinite { .. })));
        // Duplicated samples: 5 distinct rows give an RBF kernel of rank 5.
        let few = DMatrix::from_fn(20, 2, |i, j| ((i % 5) * 2 + j) as f64 * 0.3);
        assert!(matches!(MklarenParams::new(7).kernels(&k).fit_inputs(&gpu, &[&few], &y), Err(Error::RankDeficient { requested: 7, .. })));
        assert!(matches!(MklarenParams::new(7).kernels(&k).fit_inputs(&cpu, &[&few], &y), Err(Error::RankDeficient { requested: 7, .. })));
    }
    // Prediction with the wrong feature dimension.
    let model = MklarenParams::new(3).kernels(&k).fit_inputs(&cpu, &[&x], &y).unwrap();
    assert!(matches!(model.predict_inputs(&[&DMatrix::zeros(4, 3)]), Err(Error::DimensionMismatch { .. })));
    // Baselines and ICD.
    assert!(matches!(IcdParams::new(25).fit(&cpu, &k[0], &x), Err(Error::RankTooLarge { .. })));
    assert!(matches!(nystrom(&cpu, &k[0], &x, &[1, 1]), Err(Error::InvalidParameter { name: "pivots", .. })));
    assert!(matches!(LowRankRidgeParams::new(LowRankMethod::Csi { lookahead: 2, kappa: 1.5 }, 3).kernels(&k).fit_inputs(&cpu, &[&x], &y), Err(Error::InvalidParameter { name: "kappa", .. })));
    assert!(matches!(FullKernelRidgeParams::new(KernelCombination::Uniform).lambda(-0.1).kernels(&k).fit_inputs(&cpu, &[&x], &y), Err(Error::InvalidParameter { .. })));
    let dup = DMatrix::from_fn(20, 2, |i, j| (i % 5 + j) as f64);
    assert!(matches!(FullKernelRidgeParams::new(KernelCombination::Uniform).lambda(0.0).kernels(&[Kernel::linear()]).fit_inputs(&cpu, &[&dup], &y), Err(Error::Singular(_))));
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
    let on_cpu = cpu_model.predict_inputs(&[&test]).unwrap();
    let on_gpu = cpu_model.to_device(&gpu).predict_inputs(&[&test]).unwrap();
    assert!((&on_cpu - &on_gpu).norm() < 1e-3 * on_cpu.norm().max(1.0), "{}", (&on_cpu - &on_gpu).norm());
    // Fitting with GPU kernel columns (f32) selects a model of the same quality.
    let gpu_model = MklarenParams::new(12).lookahead(4).lambda(0.1).kernels(&kernels).fit_inputs(&gpu, &[&x], &y).unwrap();
    let r_cpu = common::rmse(&y, cpu_model.training_fit());
    let r_gpu = common::rmse(&y, gpu_model.training_fit());
    assert!((r_cpu - r_gpu).abs() < 0.05 * r_cpu.max(1e-3) + 1e-3, "cpu {r_cpu} gpu {r_gpu}");
}

/// Dense reference of the mklaren fit on full kernel matrices (small n), the
/// algorithm of `MklarenParams::fit_inputs` written out plainly (Eq. 2-3
/// Cholesky steps, Eq. 12-16 look-ahead scores, Eq. 4-11 LAR, Zou-Hastie
/// augmentation) with the same tolerances and tie-breaking (smaller step,
/// then larger |c|, then lower pivot, then lower kernel). Returns the
/// selected (kernel, pivot) pairs, the LAR path of coefficients and the
/// augmented fit `mu` (first n rows).
struct DenseIcd {
    k: DMatrix<f64>,
    columns: Vec<DVector<f64>>,
    pivots: Vec<usize>,
    diag: Vec<f64>,
    tolerance: f64,
}

impl DenseIcd {
    fn new(k: DMatrix<f64>) -> Self {
        let diag: Vec<f64> = k.diagonal().iter().copied().collect();
        let top = diag.iter().fold(0.0f64, |a, &b| a.max(b));
        DenseIcd { k, columns: Vec::new(), pivots: Vec::new(), diag, tolerance: 1e-12 * top }
    }

    /// One Cholesky step on pivot i (Eq. 2-3) with previous columns and diag.
    fn column(&self, previous: &[DVector<f64>], pivots: &[usize], diag: &mut [f64], i: usize) -> DVector<f64> {
        let mut g = self.k.column(i).into_owned();
        for c in previous {
            g -= c * c[i];
        }
        let pv = diag[i].max(0.0).sqrt();
        g /= pv;
        g[i] = pv;
        for &p in pivots {
            g[p] = 0.0;
        }
        for (d, v) in diag.iter_mut().zip(g.iter()) {
            *d = (*d - v * v).max(0.0);
        }
        diag[i] = 0.0;
        for &p in pivots {
            diag[p] = 0.0;
        }
        g
    }

    fn step(&mut self, i: usize) -> DVector<f64> {
        let mut diag = std::mem::take(&mut self.diag);
        let g = self.column(&self.columns, &self.pivots, &mut diag, i);
        self.diag = diag;
        self.columns.push(g.clone());
        self.pivots.push(i);
        g
    }

    fn lookahead(&self, delta: usize) -> DMatrix<f64> {
        let n = self.diag.len();
        let mut diag = self.diag.clone();
        let mut previous = self.columns.clone();
        let mut pivots = self.pivots.clone();
        let mut block = Vec::new();
        for _ in 0..delta.min(n) {
            let (i, best) = diag.iter().enumerate().fold((0, f64::NEG_INFINITY), |b, (i, &v)| if v > b.1 { (i, v) } else { b });
            if best.is_nan() || best <= self.tolerance {
                break;
            }
            let g = self.column(&previous, &pivots, &mut diag, i);
            previous.push(g.clone());
            pivots.push(i);
            block.push(g);
        }
        DMatrix::from_fn(n, block.len(), |r, c| block[c][r])
    }
}

fn dense_step_length(active: f64, c: f64, a: f64) -> f64 {
    if c.abs() >= active {
        return 0.0;
    }
    [(active - c, active - a), (active + c, active + a)].iter().filter(|(_, den)| *den > 0.0).map(|(num, den)| num / den).filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min)
}

/// The reference fit: chosen `(kernel, pivot)` pairs, the coefficient path
/// (one vector per step) and the final fitted values `mu`.
type ReferenceFit = (Vec<(usize, usize)>, Vec<DVector<f64>>, DVector<f64>);

fn reference_mklaren(ks: Vec<DMatrix<f64>>, y: &DVector<f64>, rank: usize, delta: usize, lambda: f64) -> ReferenceFit {
    let n = y.len();
    let ybar = y.mean();
    let scale = 1.0 / (1.0 + lambda).sqrt();
    let aug = n + rank;
    let mut states: Vec<DenseIcd> = ks.into_iter().map(DenseIcd::new).collect();
    let mut blocks: Vec<DMatrix<f64>> = states.iter().map(|s| s.lookahead(delta)).collect();
    let mut r = DVector::<f64>::zeros(aug);
    for i in 0..n {
        r[i] = y[i] - ybar;
    }
    let mut mu = DVector::<f64>::zeros(aug);
    let mut u = DVector::<f64>::zeros(aug);
    let mut w = DVector::<f64>::zeros(0);
    let mut beta = DVector::<f64>::zeros(rank);
    let mut h = DMatrix::<f64>::zeros(aug, rank);
    let mut path = Vec::new();
    let mut chosen = Vec::new();
    let mut active = 0.0;
    for l in 0..rank {
        let (rn, un) = (r.rows(0, n).into_owned(), u.rows(0, n).into_owned());
        let mut best: Option<((f64, f64, usize), usize)> = None;
        for (q, (st, b)) in states.iter().zip(&blocks).enumerate() {
            if b.ncols() == 0 || st.diag.iter().fold(f64::NEG_INFINITY, |a, &v| a.max(v)) <= st.tolerance {
                continue;
            }
            let ones = DVector::from_element(n, 1.0);
            let sum = b.tr_mul(&ones);
            let m = b.tr_mul(b) - &sum * sum.transpose() / n as f64;
            let norm2: Vec<f64> = (0..n).map(|i| (b.row(i) * &m * b.row(i).transpose())[0]).collect();
            let floor = 1e-10 * norm2.iter().fold(0.0f64, |a, &v| a.max(v));
            let vr = b.tr_mul(&rn) - &sum * (rn.sum() / n as f64);
            let vu = b.tr_mul(&un) - &sum * (un.sum() / n as f64);
            for (i, &norm2_i) in norm2.iter().enumerate() {
                if !(st.diag[i] > st.tolerance && norm2_i > floor) {
                    continue;
                }
                let inv = scale / norm2_i.sqrt();
                let c = (b.row(i) * &vr)[0] * inv;
                let a = (b.row(i) * &vu)[0] * inv;
                let step = if l == 0 { 0.0 } else { dense_step_length(active, c, a) };
                let key = (step, -c.abs(), i);
                if best.as_ref().is_none_or(|(bk, _)| key < *bk) {
                    best = Some((key, q));
                }
            }
        }
        let ((_, _, pivot), q) = best.expect("a candidate");
        let g = states[q].step(pivot);
        blocks[q] = states[q].lookahead(delta);
        let mean = g.mean();
        let norm = g.map(|v| v - mean).norm();
        let mut hc = DVector::<f64>::zeros(aug);
        for i in 0..n {
            hc[i] = (g[i] - mean) / norm * scale;
        }
        hc[n + l] = lambda.sqrt() * scale;
        if l > 0 {
            let t = dense_step_length(active, hc.dot(&r), hc.dot(&u)).min(1.0);
            mu += &u * t;
            r -= &u * t;
            beta.rows_mut(0, w.len()).axpy(t, &w, 1.0);
            path.push(beta.clone());
        }
        if hc.dot(&r) < 0.0 {
            hc = -hc;
        }
        h.set_column(l, &hc);
        chosen.push((q, pivot));
        let ha = h.columns(0, l + 1);
        let corr = ha.tr_mul(&r);
        active = corr.amax();
        w = (ha.transpose() * ha).cholesky().unwrap().solve(&corr);
        u = ha * &w;
    }
    mu += &u;
    beta.rows_mut(0, w.len()).axpy(1.0, &w, 1.0);
    path.push(beta);
    (chosen, path, mu.rows(0, n).into_owned())
}

/// The fit against the dense reference: same (kernel, pivot) sequence, path
/// coefficients and in-sample fit within 1e-10 relative.
fn assert_matches_reference(kernels: &[Kernel], x: &DMatrix<f64>, y: &DVector<f64>, rank: usize, delta: usize, lambda: f64) {
    let model = MklarenParams::new(rank).lookahead(delta).lambda(lambda).kernels(kernels).fit_inputs(&Device::Cpu, &[x], y).unwrap();
    let ks = kernels.iter().map(|k| kernel_matrix(k, x)).collect();
    let (chosen, path, mu) = reference_mklaren(ks, y, rank, delta, lambda);
    let got: Vec<(usize, usize)> = model.order().iter().map(|s| (s.kernel, s.pivot)).collect();
    assert_eq!(got, chosen, "selected (kernel, pivot)");
    assert_eq!(model.coefficient_path().len(), path.len());
    // Relative to the final coefficients (early steps may be 0: t = 0 when
    // two columns tie).
    let top = path.last().unwrap().norm();
    for (step, (a, b)) in model.coefficient_path().iter().zip(&path).enumerate() {
        let err = (a - b).norm() / top.max(b.norm());
        assert!(err < 1e-10, "path step {step}: relative difference {err}");
    }
    let fit = model.training_fit().add_scalar(-y.mean());
    let err = (&fit - &mu).norm() / mu.norm();
    assert!(err < 1e-10, "training fit: relative difference {err}");
    let err = (model.coefficients() - path.last().unwrap()).norm() / path.last().unwrap().norm();
    assert!(err < 1e-8, "Eq. 18 coefficients against the path: {err}");
    assert_gpu_matches_cpu(&model, kernels, x, y, rank, delta, lambda);
}

/// The fit on a GPU with `f64` (every O(n) part of a step on the device)
/// against the CPU fit: the same (kernel, pivot) sequence, and the training
/// fit, the path and predictions at fresh points within 1e-8 relative. The
/// device sums the same terms in another order (kernel values and sums
/// agree to about 1e-15 relative), and the LAR path and the QR of Eq. 18
/// amplify that by the conditioning of H, far below 1e-8 on these problems.
fn assert_gpu_matches_cpu(cpu: &gramian::mklaren::Mklaren, kernels: &[Kernel], x: &DMatrix<f64>, y: &DVector<f64>, rank: usize, delta: usize, lambda: f64) {
    let Some(gpu) = common::gpu_device(gramian::GpuOptions::default()) else { return };
    if !gpu.supports(gramian::Precision::F64) {
        return;
    }
    let model = MklarenParams::new(rank).lookahead(delta).lambda(lambda).kernels(kernels).fit_inputs(&gpu, &[x], y).unwrap();
    let order = |m: &gramian::mklaren::Mklaren| m.order().iter().map(|s| (s.kernel, s.pivot)).collect::<Vec<_>>();
    assert_eq!(order(&model), order(cpu), "GPU against CPU: selected (kernel, pivot), n = {}, delta = {delta}, lambda = {lambda}", x.nrows());
    let err = (model.training_fit() - cpu.training_fit()).amax() / cpu.training_fit().amax();
    assert!(err < 1e-8, "GPU against CPU: training fit differs by {err:e} (relative)");
    let top = cpu.coefficient_path().last().unwrap().norm();
    for (step, (a, b)) in model.coefficient_path().iter().zip(cpu.coefficient_path()).enumerate() {
        let err = (a - b).norm() / top.max(b.norm());
        assert!(err < 1e-8, "GPU against CPU: path step {step} differs by {err:e}");
    }
    let mut rng = common::rng();
    let fresh = common::random_matrix(&mut rng, 25, x.ncols());
    let (pc, pg) = (cpu.predict_inputs(&[&fresh]).unwrap(), model.to_device(&Device::Cpu).predict_inputs(&[&fresh]).unwrap());
    let err = (&pc - &pg).amax() / pc.amax();
    assert!(err < 1e-8, "GPU against CPU: predictions at fresh points differ by {err:e}");
}

#[test]
fn mklaren_matches_the_dense_reference() {
    let mut rng = common::rng();
    // The existing test problems' shapes, and fresh random ones (seeded).
    for (n, d, p, rank, delta, lambda) in [(120, 3, 3, 15, 5, 0.3), (150, 3, 3, 6, 5, 0.0), (200, 10, 10, 30, 10, 0.1), (90, 5, 4, 20, 3, 1.0), (64, 2, 2, 12, 64, 0.01)] {
        let x = common::random_matrix(&mut rng, n, d);
        let y = DVector::from_fn(n, |i, _| (2.0 * x[(i, 0)]).sin() + x[(i, d - 1)] * x[(i, 0)] + 0.1 * rng.random_range(-1.0..1.0));
        // Widths that scale with the dimension: at d = 10 an unscaled
        // gamma of 8 or 16 leaves every off-diagonal entry below 1e-20, the
        // kernel matrix is the identity to rounding, and its candidates'
        // scores tie exactly (any pivot is then as good, and rounding picks).
        let widen = 3.0 / (d.max(3) as f64);
        let kernels: Vec<Kernel> = (0..p).map(|q| Kernel::rbf(2f64.powi(q - p / 2) * widen).unwrap()).collect();
        assert_matches_reference(&kernels, &x, &y, rank, delta, lambda);
    }
    // Other kernel families: Laplacian and polynomial mixed with RBF.
    let x = common::random_matrix(&mut rng, 110, 4);
    let y = DVector::from_fn(110, |i, _| x[(i, 1)].abs() + 0.5 * x[(i, 2)] + 0.1 * rng.random_range(-1.0..1.0));
    let kernels = [Kernel::laplacian(0.5).unwrap(), Kernel::polynomial(0.5, 1.0, 2).unwrap(), Kernel::rbf(1.0).unwrap()];
    assert_matches_reference(&kernels, &x, &y, 18, 6, 0.2);
}
