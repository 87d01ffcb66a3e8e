//! The adversarial suite: property-based (proptest strategies,
//! seeded and replayable) inputs to every public entry point — the compute
//! core on the CPU path and on the GPU path (lavapipe in CI), the resident
//! operations and [`KernelOperator`], every estimator and baseline, and the
//! small solvers — drawn from empty, 1x1, mismatched, NaN/Inf, huge
//! (1e200, 1e300) and tiny (1e-300) magnitudes, duplicate points, constant
//! columns, extreme and integer-overflow parameters, and wrong shapes at
//! predict time.
//!
//! Each case runs under a time bound (`common/harness.rs`) and is classified
//! as a typed error, a finite `Ok`, a panic, a hang or an `Ok` holding
//! NaN/Inf; the suite prints the counts and fails on any of the last three
//! (documented non-finite results, the `-inf` log-likelihood of a point of
//! zero density, are mapped away by the case itself).
//!
//! Replay: `GRAMIAN_TEST_SEED=<n> cargo test --all-features --test integration adversarial::suite:: -- --nocapture`
//! (the seed is printed). GPU cases run when an adapter exists (set
//! `GRAMIAN_REQUIRE_GPU=1` to make a missing adapter a failure).

use crate::harness;
use crate::common;
use crate::strategies::{count_param, draw, helper_input, kernel, matrix, matrix_of, positive_param, runner, size, vector_of, HelperInput};

use gramian::eksvd::eigensolver::{largest_dense, largest_lanczos};
use gramian::eksvd::{kkt_residuals, ksvd_from_kernel, objective_terms, solve_covariance, solve_dual, CouplingMatrix, Eigensolver, EksvdParams, FeatureMap, KsvdParams, Solver};
use gramian::MultiSource;
use gramian::mklaren::{nystrom, FullKernelRidgeParams, IcdParams, KernelCombination, LowRankMethod, LowRankRidgeParams, MklarenParams};
use gramian::psd::baseline_regression::{BaselineHeteroscedasticParams, BaselineQuantileParams};
use gramian::psd::baselines::{try_project_weighted_simplex, BaselineParams};
use gramian::psd::density::nystrom_indices;
use gramian::psd::positive_part::{positive_part_full, PositivePartSolver};
use gramian::psd::regression::QuantileParams;
use gramian::psd::{BaseMeasure, BaselineKind, DensityParams, EmpiricalFeatures, HeteroscedasticParams, PsdModel, SolverOptions};
use gramian::{Device, GpuOptions, Kernel, KernelOperator, MatrixProduct, Precision};
use harness::Tally;
use nalgebra::{DMatrix, DVector};
use proptest::prelude::*;
use rand::SeedableRng;
use gramian::psd::Regularisation;

fn gpu() -> Option<Device> {
    common::gpu_device(GpuOptions::default())
}

// ------------------------------------------------------------ core operations

#[derive(Debug, Clone)]
struct CoreInput {
    kernel: Kernel,
    x: DMatrix<f64>,
    z: DMatrix<f64>,
    v: DMatrix<f64>,
    index: usize,
    form: MatrixProduct,
}

fn core_input() -> impl Strategy<Value = CoreInput> {
    let form = prop_oneof![Just(MatrixProduct::AB), Just(MatrixProduct::ABt), Just(MatrixProduct::AtB)];
    (kernel(), size(5), size(3), size(5), size(3), any::<bool>(), form, prop_oneof![Just(0usize), Just(1), Just(5), Just(usize::MAX)])
        .prop_flat_map(|(kernel, n, d, m, c, same_d, form, index)| {
            let dz = if same_d { d } else { (d + 1) % 4 };
            (Just(kernel), matrix_of(n, d), matrix_of(m, dz), prop_oneof![3 => Just(m), 1 => Just(m + 1)].prop_flat_map(move |rows| matrix_of(rows, c)), Just(index), Just(form))
        })
        .prop_map(|(kernel, x, z, v, index, form)| CoreInput { kernel, x, z, v, index, form })
}

/// Every core operation on `dev` with `input` (host and resident).
fn core_cases(t: &mut Tally, dev: &Device, path: &str, input: &CoreInput) {
    let tag = |op: &str| format!("{path} {op} {input:?}");
    macro_rules! case {
        ($op:expr, |$d:ident, $i:ident| $body:expr) => {{
            let $d = dev.clone();
            let $i = input.clone();
            t.run(tag($op), move || $body);
        }};
    }
    case!("kernel_matrix", |d, i| d.kernel_matrix(&i.kernel, &i.x, &i.z));
    case!("kernel_matrix f32", |d, i| d.kernel_matrix(&i.kernel, &i.x.map(|v| v as f32), &i.z.map(|v| v as f32)));
    case!("kernel_matrix_symmetric", |d, i| d.kernel_matrix_symmetric(&i.kernel, &i.x));
    case!("kernel_column", |d, i| {
        let z: Vec<f64> = if i.z.nrows() == 0 { Vec::new() } else { i.z.row(0).iter().copied().collect() };
        d.kernel_column(&i.kernel, &i.x, &z)
    });
    case!("kernel_column_of", |d, i| d.kernel_column_of(&i.kernel, &i.x, i.index));
    case!("kernel_diagonal", |d, i| d.kernel_diagonal(&i.kernel, &i.x));
    case!("gram", |d, i| d.gram(&i.x));
    case!("gram f32", |d, i| d.gram(&i.x.map(|v| v as f32)));
    case!("outer_gram", |d, i| d.outer_gram(&i.x));
    case!("matmul", |d, i| d.matmul(&i.x, &i.z, i.form));
    case!("batched_matmul", |d, i| d.batched_matmul(&[(&i.x, &i.z), (&i.z, &i.v)], i.form));
    case!("kernel_matvec", |d, i| d.kernel_matvec(&i.kernel, &i.x, &i.z, &i.v));
    case!("kernel_matvec f32", |d, i| d.kernel_matvec(&i.kernel, &i.x.map(|v| v as f32), &i.z.map(|v| v as f32), &i.v.map(|v| v as f32)));
    for precision in [Precision::F32, Precision::F64] {
        let p = format!("{precision:?}");
        case!(&format!("upload+to_host {p}"), |d, i| d.upload(&i.x, precision).and_then(|m| d.to_host(&m)));
        case!(&format!("resident_kernel_matrix {p}"), |d, i| {
            let (x, z) = (d.upload(&i.x, precision)?, d.upload(&i.z, precision)?);
            d.to_host(&d.resident_kernel_matrix(&i.kernel, &x, &z)?)
        });
        case!(&format!("resident_matmul {p}"), |d, i| {
            let (x, z) = (d.upload(&i.x, precision)?, d.upload(&i.z, precision)?);
            d.to_host(&d.resident_matmul(&x, &z, i.form)?)
        });
        case!(&format!("resident_weighted_gram {p}"), |d, i| {
            let (x, w) = (d.upload(&i.x, precision)?, d.upload(&i.v, precision)?);
            d.to_host(&d.resident_weighted_gram(&x, &w)?)
        });
        case!(&format!("resident_kernel_matvec {p}"), |d, i| {
            let (x, z, v) = (d.upload(&i.x, precision)?, d.upload(&i.z, precision)?, d.upload(&i.v, precision)?);
            d.to_host(&d.resident_kernel_matvec(&i.kernel, &x, &z, &v)?)
        });
        case!(&format!("resident rows/gather/norms/sums/hadamard {p}"), |d, i| {
            let x = d.upload(&i.x, precision)?;
            let rows = x.rows(i.index.min(1), i.index.min(2))?;
            let g = d.resident_gather_rows(&x, &[0, i.index])?;
            let h = d.resident_hadamard(&x, &d.upload(&i.z, precision)?)?;
            Ok::<_, gramian::Error>(vec![
                d.to_host(&rows)?,
                d.to_host(&g)?,
                d.to_host(&d.resident_row_squared_norms(&x)?)?,
                d.to_host(&d.resident_row_sums(&x)?)?,
                d.to_host(&h)?,
            ])
        });
        case!(&format!("KernelOperator {p}"), |d, i| {
            let op = KernelOperator::new(&d, i.kernel, &i.x, &i.z, precision)?;
            let applied = op.apply(&i.v)?;
            let cols = d.to_host(&op.columns(&[0, i.index.min(i.z.nrows())])?)?;
            Ok::<_, gramian::Error>((vec![applied, cols, d.to_host(&op.materialise()?)?], op.diagonal()?))
        });
    }
}

#[test]
fn core_operations_cpu_and_gpu() {
    let mut r = runner("core");
    let strategy = core_input();
    let mut t = Tally::default();
    let inputs: Vec<CoreInput> = (0..110).map(|_| draw(&mut r, &strategy)).collect();
    for input in &inputs {
        core_cases(&mut t, &Device::Cpu, "cpu", input);
    }
    t.report_and_check("core/cpu", 2000);
    if let Some(dev) = gpu() {
        let mut g = Tally::default();
        for input in inputs.iter().take(40) {
            core_cases(&mut g, &dev, "gpu", input);
        }
        g.report_and_check("core/gpu", 800);
    }
}

// ------------------------------------------------------------ estimators

#[derive(Debug, Clone)]
struct FitInput {
    x: DMatrix<f64>,
    y: DVector<f64>,
    /// Points to predict at (sometimes of the wrong dimension).
    x_new: DMatrix<f64>,
    sources: Vec<DMatrix<f64>>,
    kernel: Kernel,
    sigma: f64,
    lambda: f64,
    count: usize,
    seed: u64,
}

fn fit_input() -> impl Strategy<Value = FitInput> {
    (size(7), size(3), prop_oneof![4 => Just(0usize), 1 => Just(1usize)], prop_oneof![4 => Just(0usize), 1 => Just(1usize)], kernel(), positive_param(), positive_param(), count_param(), any::<u64>())
        .prop_flat_map(|(n, d, dy, dx, kernel, sigma, lambda, count, seed)| {
            (
                matrix_of(n, d),
                vector_of(n + dy),
                matrix(4, 1).prop_flat_map(move |m| matrix_of(m.nrows().max(1), d + dx)),
                sources(),
                Just((kernel, sigma, lambda, count, seed)),
            )
        })
        .prop_map(|(x, y, x_new, sources, (kernel, sigma, lambda, count, seed))| FitInput { x, y, x_new, sources, kernel, sigma, lambda, count, seed })
}

/// eKSVD sources: mostly 2-3 sources of one dimension, sometimes 0 or 1
/// source or mismatched dimensions.
fn sources() -> BoxedStrategy<Vec<DMatrix<f64>>> {
    (prop_oneof![1 => 0..=1usize, 6 => 2..=3usize], size(3), any::<bool>())
        .prop_flat_map(|(count, d, same)| {
            proptest::collection::vec(size(6).prop_flat_map(move |n| (Just(n), if same { Just(d).boxed() } else { size(3).boxed() })).prop_flat_map(|(n, dq)| matrix_of(n.max(1), dq)), count)
        })
        .boxed()
}

/// Small iteration budgets keep failing solvers fast.
fn options() -> SolverOptions {
    SolverOptions { tolerance: 1e-5, max_iterations: 2000, check_every: 10 }
}

fn estimator_cases(t: &mut Tally, dev: &Device, path: &str, input: &FitInput) {
    let tag = |op: &str| format!("{path} {op} {input:?}");
    macro_rules! case {
        ($op:expr, |$d:ident, $i:ident| $body:expr) => {{
            let $d = dev.clone();
            let $i = input.clone();
            t.run(tag($op), move || $body);
        }};
    }
    // eKSVD (dual and covariance, feature maps), KSVD, the solvers.
    let maps = |i: &FitInput| -> Vec<FeatureMap> {
        vec![
            FeatureMap::Linear,
            FeatureMap::random_fourier(i.sigma, i.count.min(64)).unwrap_or(FeatureMap::Linear),
            FeatureMap::nystrom(i.kernel, i.count.min(8), i.count.min(8)).unwrap_or(FeatureMap::Linear),
        ]
    };
    for (m, map) in maps(input).into_iter().enumerate() {
        for (s, solver) in [Solver::Dual(Eigensolver::Dense), Solver::Covariance(Eigensolver::Dense), Solver::Dual(Eigensolver::lanczos()), Solver::Covariance(Eigensolver::Lanczos { tolerance: 1e-8, max_restarts: 50 })]
            .into_iter()
            .enumerate()
        {
            let map = map.clone();
            case!(&format!("eKSVD fit+transform map {m} solver {s}"), |d, i| {
                let data = MultiSource::new(i.sources.clone())?;
                let model = EksvdParams::new(i.count.min(3)).feature_map(map).solver(solver).seed(i.seed).fit(&d, &data)?;
                let q = (i.seed % 3) as usize;
                let kkt = model.kkt(0)?;
                let out = model.transform_source(q, &i.x_new)?;
                Ok::<_, gramian::Error>((out, { let o = model.objective(0)?; vec![kkt.stationarity, kkt.dual_scaling, o.weight_norms, o.coupling, o.variance] }))
            });
        }
    }
    case!("eKSVD n_components extreme", |d, i| {
        let data = MultiSource::new(i.sources.clone())?;
        EksvdParams::new(i.count).fit(&d, &data).map(|m| m.eigenvalues().clone())
    });
    case!("eKSVD fit_features", |d, i| EksvdParams::new(2).fit_features(&d, i.sources.clone()).map(|m| m.eigenvalues().clone()));
    case!("KSVD fit+transform", |d, i| {
        let model = KsvdParams::new(i.count.min(3)).feature_maps(FeatureMap::Linear, FeatureMap::Linear).fit_pair(&d, &i.x, &i.x.map(|v| v * 0.5))?;
        Ok::<_, gramian::Error>((model.singular_values().clone(), model.transform_x(&i.x_new)?))
    });
    case!("ksvd_from_kernel", |d, i| ksvd_from_kernel(&d, &i.x, i.count, &Eigensolver::Dense, i.seed).map(|s| s.eigenvalues));
    case!("solve_dual kernel coupling", |d, i| {
        let data = MultiSource::new(i.sources.clone())?;
        let c = CouplingMatrix::from_kernel(i.kernel, &data)?;
        solve_dual(&d, &c, i.count.min(4), &Eigensolver::lanczos(), i.seed).map(|s| s.eigenvalues)
    });
    case!("solve_covariance", |d, i| solve_covariance(&d, &i.sources, i.count.min(4), &Eigensolver::Dense, i.seed).map(|s| s.eigenvalues));
    case!("CouplingMatrix::from_blocks", |d, i| {
        let c = CouplingMatrix::from_blocks(2, vec![(0, 1, i.x.clone()), (1, 0, i.x.transpose())])?;
        c.assemble(&d)
    });

    // mklaren and the low-rank / full-kernel ridge baselines.
    let kernels = |i: &FitInput| vec![i.kernel, Kernel::Linear];
    case!("Mklaren fit+predict", |d, i| {
        let model = MklarenParams::new(i.count.min(5)).lookahead(i.count).lambda(i.lambda).kernels(&kernels(&i)).fit_inputs(&d, &[&i.x], &i.y)?;
        Ok::<_, gramian::Error>((model.training_fit().clone(), model.predict_inputs(&[&i.x_new])?))
    });
    case!("Mklaren rank extreme", |d, i| MklarenParams::new(i.count).kernels(&[Kernel::rbf(1.0).unwrap()]).fit_inputs(&d, &[&i.x], &i.y).map(|m| m.coefficients().clone()));
    for (mi, method) in [LowRankMethod::Icd, LowRankMethod::Nystrom { seed: input.seed }, LowRankMethod::Csi { lookahead: input.count, kappa: 0.5 }].into_iter().enumerate() {
        case!(&format!("LowRankRidge {mi} fit+predict"), |d, i| {
            let model = LowRankRidgeParams::new(method, i.count.min(4)).lambda(if i.lambda.is_finite() { i.lambda.min(10.0) } else { i.lambda }).kernels(&kernels(&i)).fit_inputs(&d, &[&i.x], &i.y)?;
            Ok::<_, gramian::Error>((model.coefficients().clone(), model.predict_inputs(&[&i.x_new])?))
        });
        case!(&format!("LowRankRidge {mi} lambda 0"), |d, i| {
            let model = LowRankRidgeParams::new(method, 2).lambda(0.0).kernels(&[Kernel::rbf(0.5).unwrap()]).fit_inputs(&d, &[&i.x], &i.y)?;
            Ok::<_, gramian::Error>(model.coefficients().clone())
        });
    }
    for (ci, comb) in [KernelCombination::Uniform, KernelCombination::Align, KernelCombination::Alignf, KernelCombination::Alignfc].into_iter().enumerate() {
        case!(&format!("FullKernelRidge {ci} fit+predict"), |d, i| {
            let model = FullKernelRidgeParams::new(comb).lambda(i.lambda).kernels(&kernels(&i)).fit_inputs(&d, &[&i.x], &i.y)?;
            Ok::<_, gramian::Error>((model.weights().clone(), model.predict_inputs(&[&i.x_new])?))
        });
    }
    case!("IcdParams fit", |d, i| {
        let f = IcdParams::new(i.count).tolerance(i.lambda).fit(&d, &i.kernel, &i.x)?;
        Ok::<_, gramian::Error>((f.factor().clone(), f.transform().apply(&d, &i.x_new)?))
    });
    case!("nystrom pivots", |d, i| nystrom(&d, &i.kernel, &i.x, &[0, i.count, 1]).map(|f| f.factor().clone()));

    // PSD models: density, heteroscedastic and quantile regression, baselines.
    case!("PSD density fit+density+integral", |d, i| {
        let m = DensityParams::new(gramian::Kernel::gaussian_with_width(i.sigma)?)?.regularisation(Regularisation::new().trace(1e-3).quadratic(i.lambda)).solver(options()).fit(&d, &i.x)?;
        let ll = m.mean_log_likelihood(&i.x_new)?;
        // -inf is the documented value where the density is 0.
        let ll = if ll == f64::NEG_INFINITY { 0.0 } else { ll };
        Ok::<_, gramian::Error>((m.density(&i.x_new)?, vec![ll, m.integral()?]))
    });
    case!("PSD density gaussian base + nystrom + sample", |d, i| {
        let dim = i.x.ncols().max(1);
        let base = BaseMeasure::isotropic_gaussian(dim, i.sigma)?;
        let m = DensityParams::new(gramian::Kernel::gaussian_with_width(0.7)?)?.base_measure(base).nystrom(i.count, i.seed).solver(options()).fit(&d, &i.x)?;
        let mut rng = rand::rngs::StdRng::seed_from_u64(i.seed);
        Ok::<_, gramian::Error>((m.sample(i.count.min(5), &mut rng)?, vec![m.box_probability(&vec![-1.0; dim], &vec![i.sigma; dim])?]))
    });
    for kind in [BaselineKind::Pnm, BaselineKind::Ncm, BaselineKind::Glm] {
        case!(&format!("baseline density {}", kind.name()), |d, i| {
            let base = BaseMeasure::isotropic_gaussian(i.x.ncols().max(1), 1.0)?;
            let m = BaselineParams::new(kind, gramian::Kernel::gaussian_with_width(i.sigma)?)?.regularisation(Regularisation::new().quadratic(i.lambda)).base_measure(base).monte_carlo(200, i.seed).fit(&d, &i.x)?;
            m.density(&i.x_new)
        });
        case!(&format!("baseline heteroscedastic {}", kind.name()), |d, i| {
            let m = BaselineHeteroscedasticParams::new(kind, gramian::Kernel::gaussian_with_width(i.sigma)?)?.solver(SolverOptions::default().tolerance(1e-6).max_iterations(300)).fit_xy(&d, &i.x, &i.y)?;
            Ok::<_, gramian::Error>((m.predict_mean(&i.x_new)?, m.predict_variance(&i.x_new)?))
        });
        case!(&format!("baseline quantile {}", kind.name()), |d, i| {
            BaselineQuantileParams::new(kind, gramian::Kernel::gaussian_with_width(i.sigma)?, &[0.1, 0.5, 0.9])?.solver(SolverOptions::default().tolerance(1e-6).max_iterations(300)).fit_xy(&d, &i.x, &i.y)?.predict(&i.x_new)
        });
    }
    case!("heteroscedastic fit+predict", |d, i| {
        let m = HeteroscedasticParams::new(gramian::Kernel::gaussian_with_width(i.sigma)?)?.regularisation(Regularisation::new().linear(1e-3).trace(1e-3).quadratic(i.lambda)).solver(options()).fit_xy(&d, &i.x, &i.y)?;
        let ll = m.mean_log_likelihood(&i.x_new, &i.y.rows(0, i.y.len().min(i.x_new.nrows())).into_owned())?;
        Ok::<_, gramian::Error>((m.predict_mean(&i.x_new)?, (m.predict_variance(&i.x_new)?, ll)))
    });
    case!("quantile fit+predict", |d, i| {
        let levels = [0.1, 0.5, i.lambda.min(0.95)];
        QuantileParams::new(gramian::Kernel::gaussian_with_width(i.sigma)?, &levels)?.solver(options()).fit_xy(&d, &i.x, &i.y)?.predict(&i.x_new)
    });
    case!("EmpiricalFeatures + PsdModel", |d, i| {
        let f = EmpiricalFeatures::new(&i.x, i.sigma)?;
        let feats = f.features(&d, &i.x_new)?;
        let model = PsdModel::from_factor(i.x.clone(), i.sigma, DMatrix::from_fn(1, i.x.nrows(), |_, j| i.y.get(j).copied().unwrap_or(1.0)))?;
        let base = BaseMeasure::isotropic_gaussian(i.x.ncols().max(1), 1.0)?;
        Ok::<_, gramian::Error>((vec![feats, model.gradient(&d, &i.x_new)?], (model.evaluate(&d, &i.x_new)?, model.integral(&base)?)))
    });
}

#[test]
fn estimators_and_baselines_cpu_and_gpu() {
    let mut r = runner("estimators");
    let strategy = fit_input();
    let inputs: Vec<FitInput> = (0..45).map(|_| draw(&mut r, &strategy)).collect();
    let mut t = Tally::default();
    for input in &inputs {
        estimator_cases(&mut t, &Device::Cpu, "cpu", input);
    }
    t.report_and_check("estimators/cpu", 1000);
    if let Some(dev) = gpu() {
        let mut g = Tally::default();
        for input in inputs.iter().take(8) {
            estimator_cases(&mut g, &dev, "gpu", input);
        }
        g.report_and_check("estimators/gpu", 200);
    }
}

// ------------------------------------------------------------ small solvers


fn helper_cases(t: &mut Tally, input: &HelperInput) {
    let tag = |op: &str| format!("{op} {input:?}");
    macro_rules! case {
        ($op:expr, |$i:ident| $body:expr) => {{
            let $i = input.clone();
            t.run(tag($op), move || $body);
        }};
    }
    let dev = Device::Cpu;
    case!("kkt_residuals", |i| {
        let w = vec![DVector::from_element(i.m.ncols(), 0.5), DVector::from_element(i.m.ncols(), 0.5)];
        let alphas = vec![i.a.clone(), i.b.clone()];
        kkt_residuals(&[i.m.clone(), i.m.clone()], &w, &alphas, i.gamma).map(|k| vec![k.stationarity, k.dual_scaling])
    });
    case!("objective_terms", |i| objective_terms(&[i.a.clone(), i.b.clone()], &[i.a.clone(), i.b.clone()], i.gamma).map(|o| vec![o.weight_norms, o.coupling, o.variance]));
    case!("largest_dense", |i| largest_dense(&(&i.m * i.m.transpose()), i.count).map(|e| e.values));
    case!("largest_lanczos", |i| {
        let a = &i.m * i.m.transpose();
        let n = a.nrows();
        largest_lanczos(n, i.count.min(n + 1), move |v: &DMatrix<f64>| Ok(&a * v), 1e-8, 20, 5).map(|e| e.values)
    });
    case!("try_project_weighted_simplex", |i| try_project_weighted_simplex(&i.a, &i.b));
    case!("nystrom_indices", |i| nystrom_indices(i.labels.len(), i.count, 3).map(|v| v.len()));
    case!("PositivePartSolver set_basis + compute", |i| {
        let sym = (&i.m * i.m.transpose()).map(|v| v - 0.1);
        let mut s = PositivePartSolver::new();
        s.try_set_basis(i.m.clone(), sym.nrows())?;
        let (pp, _) = s.compute(&sym)?;
        Ok::<_, gramian::Error>(pp.to_matrix())
    });
    case!("positive_part_full", |i| positive_part_full(&(&i.m * i.m.transpose())).map(|p| p.to_matrix()));
    case!("BaseMeasure::gaussian", |i| BaseMeasure::gaussian(i.a.clone(), i.b.clone()).map(|b| b.density(&DMatrix::zeros(1, i.a.len()))));
    let _ = dev;
}

#[test]
fn small_solvers() {
    let mut r = runner("helpers");
    let strategy = helper_input();
    let mut t = Tally::default();
    for _ in 0..120 {
        let input = draw(&mut r, &strategy);
        helper_cases(&mut t, &input);
    }
    t.report_and_check("small solvers", 1000);
}

// ------------------------------------------------------------ allocation faults

/// Allocations far beyond what the device (or the address space) holds must
/// be typed errors (`OutOfMemory`, `TooLargeForGpu`), not panics or aborts;
/// on the GPU also with a tiny forced tile budget (`max_tile_bytes`).
#[test]
fn huge_allocations_are_typed_errors() {
    let mut t = Tally::default();
    let mut devices = vec![("cpu", Device::Cpu)];
    if let Some(g) = gpu() {
        devices.push(("gpu", g));
    }
    if let Some(g) = common::gpu_device(GpuOptions { max_tile_bytes: Some(256), ..GpuOptions::default() }) {
        devices.push(("gpu tiny tiles", g));
    }
    for (name, dev) in devices {
        // 2^20 x 2^20 (4-8 TiB) is a typed error on the CPU path; wgpu on
        // lavapipe accepts such buffers lazily (no device memory budget is
        // tracked in src/gpu yet), so the GPU gets the sizes over its limits.
        let sizes: &[(usize, usize)] = if name == "cpu" { &[(usize::MAX, 2), (1 << 40, 1 << 30), (1 << 20, 1 << 20), (u32::MAX as usize, u32::MAX as usize)] } else { &[(usize::MAX, 2), (1 << 40, 1 << 30), (u32::MAX as usize, u32::MAX as usize), (3, 1 << 40)] };
        for &(rows, cols) in sizes {
            for precision in [Precision::F32, Precision::F64] {
                let d = dev.clone();
                t.run(format!("{name} zeros {rows} x {cols} {precision:?}"), move || d.zeros(rows, cols, precision).map(|m| m.nrows()));
            }
        }
        let d = dev.clone();
        t.run(format!("{name} kernel matrix after tiny tiles"), move || {
            let x = DMatrix::from_fn(9, 3, |i, j| (i * 3 + j) as f64 * 0.1);
            d.kernel_matrix(&Kernel::rbf(0.5).unwrap(), &x, &x)
        });
    }
    let oks = t.oks;
    t.report_and_check("allocation faults", 9);
    assert!(oks <= 3, "a huge allocation succeeded");
}
