//! eKSVD on sparse (CSR) sources against the same fit on their dense
//! copies: every feature map (Nystrom of the RBF, Laplacian, linear and
//! polynomial kernels, random Fourier features, linear, projection) with the
//! Dual solver (dense eigensolver and Lanczos) and the Covariance solver,
//! scores of sparse test sources, the kernel-function coupling on sparse
//! rows (every kernel), on the CPU and on the GPU (`GRAMIAN_REQUIRE_GPU=1`
//! makes a missing adapter a failure); sparse fits on the GPU (feature maps
//! of sparse rows on the device) against the same fits on the CPU; and the
//! typed errors of bad sparse sources. Data: fresh seeds, entries uniform in [-1, 1) with density 5 %.
//!
//! Tolerances. CPU: the sparse and dense paths differ only in the summation
//! order of inner products (about `1e-15` relative), so eigenvalues agree
//! to `1e-9` relative to the largest; an eigenvector moves by about the
//! perturbation over the relative gap to its neighbours, so scores are
//! compared (up to sign, relative Frobenius error per component) to
//! `1e-6` for components whose relative gap is at least `1e-4`
//! (Lanczos converges to `1e-10` residuals). GPU: the dense path builds
//! kernels and products in the device precision (`f32` on most adapters),
//! as the sparse maps do on the device (and the CPU fit in `f64`):
//! eigenvalues to `1e-4`, scores to `1e-2` for gaps of at least `1e-2`.

use gramian::eksvd::{solve_dual, CouplingMatrix, DualSolution, Eigensolver, EksvdParams, FeatureMap, Solver};
use gramian::gpu::GpuOptions;
use gramian::sparse::CsrMatrix;
use gramian::{AsMatrix, Device, Error, Kernel, MultiSource};
use nalgebra::{DMatrix, DVector};
use rand::{rngs::StdRng, Rng};

use crate::common;

/// n x d with each entry non-zero (uniform in [-1, 1)) with probability 5 %.
fn random_sparse(rng: &mut StdRng, n: usize, d: usize) -> DMatrix<f64> {
    DMatrix::from_fn(n, d, |_, _| if rng.random::<f64>() < 0.05 { rng.random_range(-1.0..1.0) } else { 0.0 })
}

/// Paired sources (n rows each, the given widths): the dense copies, and
/// the same data with every source sparse except `dense_source` (if any).
fn paired_sets(dense: &[DMatrix<f64>], dense_source: Option<usize>) -> (MultiSource, MultiSource) {
    let mixed: Vec<Box<dyn AsMatrix<Elem = f64>>> = dense
        .iter()
        .enumerate()
        .map(|(q, x)| if Some(q) == dense_source { Box::new(x.clone()) as Box<dyn AsMatrix<Elem = f64>> } else { Box::new(CsrMatrix::from(x)) })
        .collect();
    let sparse = MultiSource::paired(mixed).unwrap();
    for q in 0..dense.len() {
        assert_eq!(sparse.is_sparse(q), Some(q) != dense_source);
    }
    (MultiSource::paired(dense.to_vec()).unwrap(), sparse)
}

struct Tolerances {
    eigenvalues: f64,
    scores: f64,
    min_gap: f64,
}

const CPU: Tolerances = Tolerances { eigenvalues: 1e-9, scores: 1e-6, min_gap: 1e-4 };
const GPU: Tolerances = Tolerances { eigenvalues: 1e-4, scores: 1e-2, min_gap: 1e-2 };

/// Relative gap of eigenvalue `k` to its neighbours among `values` (descending).
fn relative_gap(values: &DVector<f64>, k: usize) -> f64 {
    let scale = values[0].abs().max(f64::MIN_POSITIVE);
    let below = if k + 1 < values.len() { values[k] - values[k + 1] } else { f64::INFINITY };
    let above = if k > 0 { values[k - 1] - values[k] } else { f64::INFINITY };
    below.min(above) / scale
}

/// Eigenvalues to `tol.eigenvalues` (relative to the largest), and the
/// columns of `a` and `b` (one per component, `k` components per block of
/// `blocks`) equal up to sign where the gap allows. Returns how many
/// components were compared.
fn assert_same_solution(what: &str, values_a: &DVector<f64>, values_b: &DVector<f64>, a: &DMatrix<f64>, b: &DMatrix<f64>, tol: &Tolerances) -> usize {
    assert_eq!(values_a.len(), values_b.len(), "{what}: number of components");
    let scale = values_b[0].abs();
    for (k, (x, y)) in values_a.iter().zip(values_b.iter()).enumerate() {
        assert!((x - y).abs() <= tol.eigenvalues * scale, "{what}: eigenvalue {k}: sparse {x}, dense {y}");
    }
    assert_eq!(a.shape(), b.shape(), "{what}: scores shape");
    let k = values_b.len();
    let blocks = b.ncols() / k;
    let mut compared = 0;
    for j in 0..k {
        if relative_gap(values_b, j) < tol.min_gap {
            continue;
        }
        compared += 1;
        // Component j of every block, one stacked vector, one sign.
        let stack = |m: &DMatrix<f64>| DVector::from_iterator(m.nrows() * blocks, (0..blocks).flat_map(|s| m.column(s * k + j).iter().copied().collect::<Vec<_>>()));
        let (u, v) = (stack(a), stack(b));
        let sign = if u.dot(&v) < 0.0 { -1.0 } else { 1.0 };
        let err = (sign * &u - &v).norm() / v.norm().max(f64::MIN_POSITIVE);
        assert!(err <= tol.scores, "{what}: component {j} differs by {err:e} (relative gap {:e})", relative_gap(values_b, j));
    }
    compared
}

fn maps(d: usize, rng: &mut StdRng) -> Vec<FeatureMap> {
    let g = 4.0 / d as f64;
    vec![
        FeatureMap::nystrom(Kernel::rbf(g).unwrap(), 6, 24).unwrap(),
        FeatureMap::nystrom(Kernel::laplacian(0.5).unwrap(), 6, 24).unwrap(),
        FeatureMap::nystrom(Kernel::linear(), 5, 24).unwrap(),
        FeatureMap::nystrom(Kernel::polynomial(1.0, 1.0, 2).unwrap(), 6, 24).unwrap(),
        FeatureMap::random_fourier(g, 10).unwrap(),
        FeatureMap::Linear,
        FeatureMap::projection(common::random_matrix(rng, d, 7)).unwrap(),
    ]
}

fn solvers() -> Vec<Solver> {
    vec![Solver::Dual(Eigensolver::Dense), Solver::Dual(Eigensolver::lanczos()), Solver::Covariance(Eigensolver::Dense)]
}

/// Fits on sparse and on dense sources, on `device`, and compares the
/// eigenvalues and the scores of sparse vs dense test sources.
fn sparse_fit_equals_dense_fit(device: &Device, tol: &Tolerances) {
    let mut rng = common::rng();
    let (n, n_test, d) = (60usize, 25usize, 40usize);
    let train: Vec<DMatrix<f64>> = (0..3).map(|_| random_sparse(&mut rng, n, d)).collect();
    let test: Vec<DMatrix<f64>> = (0..3).map(|_| random_sparse(&mut rng, n_test, d)).collect();
    let mut compared = 0;
    for (i, map) in maps(d, &mut rng).into_iter().enumerate() {
        // All sources sparse, and source 1 dense among sparse ones.
        let dense_source = if i % 2 == 0 { None } else { Some(1) };
        let (train_dense, train_sparse) = paired_sets(&train, dense_source);
        let (test_dense, test_sparse) = paired_sets(&test, None);
        for solver in solvers() {
            let what = format!("{map:?} {solver:?} (dense source {dense_source:?})");
            let params = EksvdParams::new(3).feature_map(map.clone()).solver(solver).seed(11);
            let on_dense = params.fit(device, &train_dense).unwrap_or_else(|e| panic!("{what}: dense fit: {e}"));
            let on_sparse = params.fit(device, &train_sparse).unwrap_or_else(|e| panic!("{what}: sparse fit: {e}"));
            let (scores_dense, scores_sparse) = (on_dense.transform_paired(&test_dense).unwrap(), on_sparse.transform_paired(&test_sparse).unwrap());
            compared += assert_same_solution(&what, on_sparse.eigenvalues(), on_dense.eigenvalues(), &scores_sparse, &scores_dense, tol);
            // One source's scores through transform_source on a CSR matrix.
            let e2 = on_sparse.transform_source(2, &CsrMatrix::from(&test[2])).unwrap();
            let k = on_sparse.n_components();
            assert!((&e2 - scores_sparse.columns(2 * k, k)).amax() <= 1e-12 * scores_sparse.amax().max(1.0), "{what}: transform_source vs transform_paired");
        }
    }
    assert!(compared > 0, "no component had a gap to compare its scores");
}

#[test]
fn sparse_sources_fit_as_their_dense_copies_on_the_cpu() {
    sparse_fit_equals_dense_fit(&Device::cpu(), &CPU);
}

#[test]
fn sparse_sources_fit_as_their_dense_copies_on_the_gpu() {
    let Some(gpu) = common::gpu_device(GpuOptions::default()) else { return };
    sparse_fit_equals_dense_fit(&gpu, &GPU);
}

/// A sparse fit on the GPU (its feature maps of sparse rows on the device:
/// `X Omega`, `X W`, `k(X, L)` from the CSR arrays) against the same sparse
/// fit on the CPU, with the GPU tolerances; the device's counters show the
/// Nystrom kernel matrices of the sparse rows ran there (the engine's own
/// tests count the sparse products).
#[test]
fn sparse_fits_on_the_gpu_equal_the_cpu() {
    use gramian::gpu::ShapeKind;
    let Some(gpu) = common::gpu_device(GpuOptions::default()) else { return };
    let Device::Gpu(ctx) = &gpu else { panic!("gpu_device returned the CPU") };
    let mut rng = common::rng();
    let (n, n_test, d) = (60usize, 25usize, 40usize);
    let train: Vec<DMatrix<f64>> = (0..3).map(|_| random_sparse(&mut rng, n, d)).collect();
    let test: Vec<DMatrix<f64>> = (0..3).map(|_| random_sparse(&mut rng, n_test, d)).collect();
    let (_, train_sparse) = paired_sets(&train, None);
    let (_, test_sparse) = paired_sets(&test, None);
    let precision = gpu.best_precision();
    let mut compared = 0;
    for map in maps(d, &mut rng) {
        let nonlinear_nystrom = matches!(map, FeatureMap::Nystrom { kernel, .. } if kernel != Kernel::linear());
        for solver in solvers() {
            let what = format!("{map:?} {solver:?}");
            let params = EksvdParams::new(3).feature_map(map.clone()).solver(solver).seed(11);
            let on_cpu = params.fit(&Device::cpu(), &train_sparse).unwrap_or_else(|e| panic!("{what}: CPU fit: {e}"));
            ctx.reset_device_counters();
            let on_gpu = params.fit(&gpu, &train_sparse).unwrap_or_else(|e| panic!("{what}: GPU fit: {e}"));
            let evaluations = ctx.device_counters().class(ShapeKind::KernelMatrix, precision).kernel_evaluations;
            if nonlinear_nystrom {
                // k(X_q, L_q) of every source (n x 24 each) is the fit's only kernel matrix.
                assert!(evaluations >= 3 * (n * 24) as u64, "{what}: {evaluations} kernel evaluations on the device");
            }
            let (scores_gpu, scores_cpu) = (on_gpu.transform_paired(&test_sparse).unwrap(), on_cpu.transform_paired(&test_sparse).unwrap());
            compared += assert_same_solution(&what, on_gpu.eigenvalues(), on_cpu.eigenvalues(), &scores_gpu, &scores_cpu, &GPU);
        }
    }
    assert!(compared > 0, "no component had a gap to compare its scores");
}

fn stacked(solution: &DualSolution) -> DMatrix<f64> {
    let rows: usize = solution.alphas.iter().map(|a| a.nrows()).sum();
    let k = solution.eigenvalues.len();
    let mut out = DMatrix::zeros(rows, k);
    let mut r0 = 0;
    for a in &solution.alphas {
        out.rows_mut(r0, a.nrows()).copy_from(a);
        r0 += a.nrows();
    }
    out
}

/// The kernel-function coupling `K_pq = k(X_p, X_q)` on sparse rows (blocks
/// and products from the sparse kernels) against the dense one, with the
/// dense eigensolver (stored blocks) and Lanczos (products only).
fn sparse_coupling_equals_dense(device: &Device, tol: &Tolerances) {
    let mut rng = common::rng();
    let d = 50;
    // Unpaired: N_q differ.
    let dense: Vec<DMatrix<f64>> = [45usize, 60, 52].iter().map(|&n| random_sparse(&mut rng, n, d)).collect();
    let sparse: Vec<CsrMatrix<f64>> = dense.iter().map(CsrMatrix::from).collect();
    let (data_dense, data_sparse) = (MultiSource::new(dense).unwrap(), MultiSource::new(sparse).unwrap());
    let g = 4.0 / d as f64;
    let kernels = [Kernel::rbf(g).unwrap(), Kernel::laplacian(0.5).unwrap(), Kernel::linear(), Kernel::polynomial(1.0, 1.0, 2).unwrap(), Kernel::sigmoid(g, 0.1).unwrap()];
    for kernel in kernels {
        let c_dense = CouplingMatrix::from_kernel(kernel, &data_dense).unwrap();
        let c_sparse = CouplingMatrix::from_kernel(kernel, &data_sparse).unwrap();
        let (g_dense, g_sparse) = (c_dense.assemble(&Device::cpu()).unwrap(), c_sparse.assemble(device).unwrap());
        assert!((&g_sparse - &g_dense).amax() <= 1e-12 * g_dense.amax(), "{kernel:?}: G_Q of sparse rows");
        for solver in [Eigensolver::Dense, Eigensolver::lanczos()] {
            let what = format!("{kernel:?} {solver:?}");
            let a = solve_dual(device, &c_sparse, 3, &solver, 5).unwrap_or_else(|e| panic!("{what}: sparse: {e}"));
            let b = solve_dual(device, &c_dense, 3, &solver, 5).unwrap_or_else(|e| panic!("{what}: dense: {e}"));
            // G_Q alpha = lambda alpha for the sparse solution, from the dense G_Q.
            let (alpha, values) = (stacked(&a), &a.eigenvalues);
            let residual = (&g_dense * &alpha - &alpha * DMatrix::from_diagonal(values)).amax();
            assert!(residual <= tol.eigenvalues.max(1e-8) * values[0].abs() * 10.0, "{what}: residual {residual:e}");
            assert_same_solution(&what, &a.eigenvalues, &b.eigenvalues, &alpha, &stacked(&b), tol);
        }
    }
}

#[test]
fn sparse_kernel_coupling_solves_as_the_dense_one_on_the_cpu() {
    sparse_coupling_equals_dense(&Device::cpu(), &CPU);
}

#[test]
fn sparse_kernel_coupling_solves_as_the_dense_one_on_the_gpu() {
    let Some(gpu) = common::gpu_device(GpuOptions::default()) else { return };
    sparse_coupling_equals_dense(&gpu, &GPU);
}

fn csr(rows: usize, cols: usize, offsets: Vec<usize>, indices: Vec<usize>, values: Vec<f64>) -> CsrMatrix<f64> {
    CsrMatrix::try_from_csr_data(rows, cols, offsets, indices, values).unwrap()
}

#[test]
fn bad_sparse_sources_give_typed_errors() {
    let good = csr(3, 4, vec![0, 1, 1, 3], vec![2, 0, 3], vec![1.0, -2.0, 0.5]);
    // A stored NaN: its source, row and column.
    let nan = csr(3, 4, vec![0, 1, 2, 2], vec![1, 3], vec![1.0, f64::NAN]);
    match MultiSource::new(vec![good.clone(), nan]) {
        Err(Error::NonFiniteSource { source_index: 1, row: 1, col: 3, .. }) => {}
        other => panic!("NaN in a sparse source: {other:?}"),
    }
    let inf = csr(3, 4, vec![0, 1, 1, 1], vec![0], vec![f64::INFINITY]);
    assert!(matches!(MultiSource::new(vec![inf, good.clone()]), Err(Error::NonFiniteSource { source_index: 0, row: 0, col: 0, .. })));
    // No rows, or no columns.
    let empty = csr(0, 4, vec![0], vec![], vec![]);
    assert!(matches!(MultiSource::new(vec![good.clone(), empty]), Err(Error::EmptySource { source_index: 1, .. })));
    // Paired views with different numbers of rows (sparse and dense mixed).
    let four_rows: Box<dyn AsMatrix<Elem = f64>> = Box::new(DMatrix::from_element(4, 2, 1.0));
    let sparse: Box<dyn AsMatrix<Elem = f64>> = Box::new(good.clone());
    assert!(matches!(MultiSource::paired(vec![sparse, four_rows]), Err(Error::ShapeMismatch { expected: 3, found: 4, .. })));
    // Out-of-range column indices (and unsorted ones) cannot be built.
    assert!(CsrMatrix::try_from_csr_data(1, 2, vec![0, 1], vec![2], vec![1.0]).is_err());
    assert!(CsrMatrix::try_from_csr_data(1, 3, vec![0, 2], vec![2, 1], vec![1.0, 1.0]).is_err());
    // One kernel on a shared space needs equal widths.
    let narrow = csr(3, 2, vec![0, 1, 1, 1], vec![1], vec![1.0]);
    let data = MultiSource::new(vec![good.clone(), narrow]).unwrap();
    assert!(matches!(CouplingMatrix::from_kernel(Kernel::linear(), &data), Err(Error::ShapeMismatch { .. })));
    // A fitted model: new sparse rows with a NaN or the wrong width.
    let mut rng = common::rng();
    let train: Vec<CsrMatrix<f64>> = (0..2).map(|_| CsrMatrix::from(&common::random_matrix(&mut rng, 20, 4))).collect();
    let model = EksvdParams::new(2).feature_map(FeatureMap::nystrom(Kernel::rbf(0.5).unwrap(), 4, 10).unwrap()).fit(&Device::cpu(), &MultiSource::paired(train).unwrap()).unwrap();
    let nan_rows = csr(2, 4, vec![0, 1, 1], vec![2], vec![f64::NAN]);
    assert!(matches!(model.transform_source(0, &nan_rows), Err(Error::NonFinite { row: 0, col: 2, .. })));
    let wide = csr(2, 5, vec![0, 1, 1], vec![4], vec![1.0]);
    assert!(matches!(model.transform_source(1, &wide), Err(Error::ShapeMismatch { expected: 4, found: 5, .. })));
    assert!(matches!(model.transform_source(2, &good), Err(Error::InvalidParameter { name: "q", .. })));
}
