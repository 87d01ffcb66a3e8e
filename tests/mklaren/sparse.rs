//! mklaren and incomplete Cholesky on sparse (CSR) inputs against the same
//! fits on their dense copies: every kernel (RBF, Laplacian, linear,
//! polynomial), one shared input and one input per kernel, predictions and
//! factors of sparse and dense test rows, on the CPU and on a GPU (with
//! `f64` both mklaren fits run on the device: `GRAMIAN_REQUIRE_GPU=1` makes
//! a missing adapter a failure); and the typed errors of bad sparse inputs.
//! The device fit of sparse rows against the CPU fit: `sparse_device.rs`.
//!
//! Data: fresh seeds, each entry non-zero with probability 5 %, the
//! non-zeros uniform on the grid `k / 16`, `k = +-1 .. +-16`. On that grid
//! every product and every sum of an inner product or squared norm is exact
//! in `f64` whatever the order of summation, so the sparse kernel columns
//! (sums over the shared non-zeros) and the dense ones (sums over all d
//! features) are the same bits, and so is everything computed from them:
//! the kernels and pivots must be the same, in the same order. This matters
//! for the linear kernel on sparse rows, whose candidates tie exactly (two
//! rows that meet the look-ahead pivots' features in one feature have
//! proportional approximate columns): with continuous values the sparse
//! and dense paths differ by the summation order (about `1e-15` relative),
//! which breaks such ties either way.
//!
//! Tolerances: fits, coefficients, factors and predictions to `1e-12`
//! relative to the largest value. The fits are the same computation on the
//! same columns; the predictions of sparse test rows form `K(X*, A) T`
//! with the sparse kernel matrix and the host product, those of dense rows
//! with the device's kernel matrix and product, which may sum in another
//! order (a few `1e-16` relative per entry of a rank-8 product).

use gramian::gpu::GpuOptions;
use gramian::mklaren::{IcdParams, MklarenParams};
use gramian::sparse::CsrMatrix;
use gramian::{Device, Error, Kernel};
use nalgebra::{DMatrix, DVector};
use rand::{rngs::StdRng, Rng};

use crate::common;

/// n x d with each entry non-zero with probability 5 %, the non-zeros
/// uniform on `{+-1, .., +-16} / 16` (exact sums, see the module).
fn random_sparse(rng: &mut StdRng, n: usize, d: usize) -> DMatrix<f64> {
    DMatrix::from_fn(n, d, |_, _| {
        if rng.random::<f64>() < 0.05 {
            let k = rng.random_range(1..=16) as f64 / 16.0;
            if rng.random::<bool>() { k } else { -k }
        } else {
            0.0
        }
    })
}

/// Relative tolerance of fits, factors and predictions (see the module).
const TOL: f64 = 1e-12;

fn assert_close(what: &str, a: &DMatrix<f64>, b: &DMatrix<f64>) {
    assert_eq!(a.shape(), b.shape(), "{what}: shape");
    let scale = b.amax().max(1e-300);
    let err = (a - b).amax();
    assert!(err <= TOL * scale, "{what}: max difference {err:e} (scale {scale:e})");
}

fn assert_close_vec(what: &str, a: &DVector<f64>, b: &DVector<f64>) {
    assert_close(what, &DMatrix::from_column_slice(a.len(), 1, a.as_slice()), &DMatrix::from_column_slice(b.len(), 1, b.as_slice()));
}

/// The kernels of the comparison (parameters that suit d = 200 at 5 %).
fn kernels(d: usize) -> Vec<Kernel> {
    let g = 4.0 / (0.05 * d as f64);
    vec![Kernel::rbf(g).unwrap(), Kernel::laplacian(0.5).unwrap(), Kernel::linear(), Kernel::polynomial(0.5, 1.0, 2).unwrap()]
}

/// A target that depends on the rows (so LAR has something to follow).
fn target(rng: &mut StdRng, x: &DMatrix<f64>) -> DVector<f64> {
    let w = DVector::from_fn(x.ncols(), |_, _| rng.random_range(-1.0..1.0));
    let lin = x * &w;
    DVector::from_fn(x.nrows(), |i, _| lin[i].sin() + 0.5 * lin[i] + 0.01 * rng.random_range(-1.0..1.0))
}

/// mklaren on sparse rows on `device` equals mklaren on their dense copy on
/// `reference`: for each kernel alone and for all four kernels together,
/// the same kernels and pivots in the same order, fits and predictions of
/// sparse and dense test rows within [`TOL`].
fn sparse_mklaren_equals_dense(device: &Device, reference: &Device) {
    let mut rng = common::rng();
    let (n, t, d) = (60, 25, 200);
    let (x, xt) = (random_sparse(&mut rng, n, d), random_sparse(&mut rng, t, d));
    let (xs, xts) = (CsrMatrix::from(&x), CsrMatrix::from(&xt));
    let y = target(&mut rng, &x);
    let all = kernels(d);
    let mut sets: Vec<Vec<Kernel>> = all.iter().map(|k| vec![*k]).collect();
    sets.push(all.clone());
    for set in sets {
        let what = format!("{set:?} on {device:?}");
        let params = MklarenParams::new(8).lookahead(4).lambda(0.1).kernels(&set);
        let dense = params.fit_inputs(reference, &[&x], &y).unwrap_or_else(|e| panic!("{what}: dense fit: {e}"));
        let sparse = params.fit_inputs(device, &[&xs], &y).unwrap_or_else(|e| panic!("{what}: sparse fit: {e}"));
        let order = |m: &gramian::mklaren::Mklaren| m.order().iter().map(|c| (c.kernel, c.pivot)).collect::<Vec<_>>();
        assert_eq!(order(&sparse), order(&dense), "{what}: kernels and pivots");
        assert_close_vec(&format!("{what}: training fit"), sparse.training_fit(), dense.training_fit());
        assert_close_vec(&format!("{what}: coefficients"), sparse.coefficients(), dense.coefficients());
        assert_close_vec(&format!("{what}: kernel weights"), sparse.kernel_weights(), dense.kernel_weights());
        let expected = dense.predict(&xt).unwrap();
        assert_close_vec(&format!("{what}: predictions of sparse rows"), &sparse.predict(&xts).unwrap(), &expected);
        assert_close_vec(&format!("{what}: predictions of dense rows"), &sparse.predict(&xt).unwrap(), &expected);
        assert_close_vec(&format!("{what}: dense model, sparse rows"), &dense.predict(&xts).unwrap(), &expected);
        // The transforms keep the pivots' rows (dense), those of the dense fit.
        for (a, b) in sparse.transforms().iter().zip(dense.transforms()) {
            assert_eq!(a.pivot_rows(), b.pivot_rows(), "{what}: pivot rows");
        }
    }
    // One sparse input per kernel (different widths).
    let x2 = random_sparse(&mut rng, n, 50);
    let xt2 = random_sparse(&mut rng, t, 50);
    let (x2s, xt2s) = (CsrMatrix::from(&x2), CsrMatrix::from(&xt2));
    let params = MklarenParams::new(6).lookahead(3).kernels(&[all[0], Kernel::rbf(1.0).unwrap()]);
    let dense = params.fit_inputs(reference, &[&x, &x2], &y).unwrap();
    let sparse = params.fit_inputs(device, &[&xs, &x2s], &y).unwrap();
    let order = |m: &gramian::mklaren::Mklaren| m.order().iter().map(|c| (c.kernel, c.pivot)).collect::<Vec<_>>();
    assert_eq!(order(&sparse), order(&dense), "one input per kernel: kernels and pivots");
    assert_close_vec("one input per kernel: predictions", &sparse.predict_inputs(&[&xts, &xt2s]).unwrap(), &dense.predict_inputs(&[&xt, &xt2]).unwrap());
}

#[test]
fn sparse_mklaren_fits_as_its_dense_copy_on_the_cpu() {
    sparse_mklaren_equals_dense(&Device::cpu(), &Device::cpu());
}

#[test]
fn sparse_mklaren_on_a_gpu_fits_as_its_dense_copy_on_the_gpu() {
    let Some(gpu) = common::gpu_device(GpuOptions::default()) else { return };
    // The reference is the dense fit on the same device: with `f64` both
    // run on the device, whose kernel columns of the sparse rows (a merge
    // of the non-zeros) and of the dense ones (sums over all d features)
    // are exact on the grid, and the same steps follow; without `f64` both
    // take the host path. (The CPU's fit sums the LAR steps in another
    // order, which may break the linear kernel's exact ties.)
    sparse_mklaren_equals_dense(&gpu, &gpu);
}

/// ICD on sparse rows equals ICD on their dense copy: the same pivots,
/// factor and residual diagonal, and the same out-of-sample factors of
/// sparse test rows.
fn sparse_icd_equals_dense(device: &Device) {
    let mut rng = common::rng();
    let (n, t, d) = (50, 20, 200);
    let (x, xt) = (random_sparse(&mut rng, n, d), random_sparse(&mut rng, t, d));
    let (xs, xts) = (CsrMatrix::from(&x), CsrMatrix::from(&xt));
    for kernel in kernels(d) {
        let what = format!("{kernel:?} on {device:?}");
        let dense = IcdParams::new(10).fit(&Device::cpu(), &kernel, &x).unwrap();
        let sparse = IcdParams::new(10).fit(device, &kernel, &xs).unwrap();
        assert_eq!(sparse.pivots(), dense.pivots(), "{what}: pivots");
        assert_close(&format!("{what}: factor"), sparse.factor(), dense.factor());
        let (rs, rd) = (sparse.residual_diagonal(), dense.residual_diagonal());
        assert!((rs - rd).amax() <= TOL * dense.factor().amax().powi(2), "{what}: residual diagonal");
        assert_close(&format!("{what}: factors of sparse rows"), &sparse.apply(&xts).unwrap(), &dense.apply(&xt).unwrap());
    }
}

#[test]
fn sparse_icd_fits_as_its_dense_copy() {
    sparse_icd_equals_dense(&Device::cpu());
    if let Some(gpu) = common::gpu_device(GpuOptions::default()) {
        sparse_icd_equals_dense(&gpu);
    }
}

fn csr(rows: usize, cols: usize, offsets: Vec<usize>, indices: Vec<usize>, values: Vec<f64>) -> CsrMatrix<f64> {
    CsrMatrix::try_from_csr_data(rows, cols, offsets, indices, values).unwrap()
}

#[test]
fn bad_sparse_inputs_give_typed_errors() {
    let mut rng = common::rng();
    let x = CsrMatrix::from(&random_sparse(&mut rng, 30, 40));
    let y = DVector::from_fn(30, |_, _| rng.random_range(-1.0..1.0));
    let params = MklarenParams::new(3).kernels(&[Kernel::rbf(0.5).unwrap(), Kernel::linear()]);
    let cpu = Device::cpu();
    // A stored NaN or infinity: its row and column.
    let mut nan = x.clone();
    let (row, col) = (7, nan.row(7).col_indices().first().copied().unwrap_or(0));
    nan = if nan.row(7).nnz() > 0 {
        let (offsets, indices, mut values) = nan.disassemble();
        values[offsets[7]] = f64::NAN;
        CsrMatrix::try_from_csr_data(30, 40, offsets, indices, values).unwrap()
    } else {
        let mut dense = gramian::sparse::densify(&nan).unwrap();
        dense[(row, col)] = f64::NAN;
        CsrMatrix::from(&dense)
    };
    match params.fit_inputs(&cpu, &[&nan], &y) {
        Err(Error::NonFinite { row: 7, col: c, .. }) if c == col => {}
        other => panic!("NaN in a sparse input: {other:?}"),
    }
    let inf = csr(30, 40, (0..=30).map(|i| usize::from(i > 0)).collect(), vec![3], vec![f64::INFINITY]);
    assert!(matches!(params.fit_inputs(&cpu, &[&inf], &y), Err(Error::NonFinite { row: 0, col: 3, .. })));
    // No rows, or no columns.
    let no_rows = csr(0, 40, vec![0], vec![], vec![]);
    assert!(matches!(params.fit_inputs(&cpu, &[&no_rows], &y), Err(Error::Empty { .. })));
    let no_cols = csr(30, 0, vec![0; 31], vec![], vec![]);
    assert!(matches!(params.fit_inputs(&cpu, &[&no_cols], &y), Err(Error::Empty { .. })));
    assert!(matches!(IcdParams::new(2).fit(&cpu, &Kernel::linear(), &no_rows), Err(Error::Empty { .. })));
    // Shape mismatches: inputs that disagree on n, a target of another
    // length, an input count that is neither 1 nor p.
    let short = CsrMatrix::from(&random_sparse(&mut rng, 20, 40));
    assert!(matches!(params.fit_inputs(&cpu, &[&x, &short], &y), Err(Error::SampleCountMismatch { kernel: 1, expected: 30, found: 20 })));
    assert!(matches!(params.fit_inputs(&cpu, &[&x], &y.rows(0, 29).into_owned()), Err(Error::TargetLength { expected: 30, found: 29 })));
    assert!(matches!(params.fit_inputs(&cpu, &[&x, &x, &x], &y), Err(Error::InputCount { kernels: 2, inputs: 3 })));
    // A fitted model: test rows of the wrong width, with a NaN, or empty.
    let model = params.fit_inputs(&cpu, &[&x], &y).unwrap();
    let wide = CsrMatrix::from(&random_sparse(&mut rng, 5, 41));
    assert!(matches!(model.predict(&wide), Err(Error::DimensionMismatch { .. })));
    assert!(matches!(model.predict(&csr(2, 40, vec![0, 1, 1], vec![2], vec![f64::NAN])), Err(Error::NonFinite { row: 0, col: 2, .. })));
    assert!(matches!(model.predict(&no_rows), Err(Error::Empty { .. })));
    assert!(matches!(model.predict_inputs(&[&x, &x, &x]), Err(Error::InputCount { kernels: 2, inputs: 3 })));
}
