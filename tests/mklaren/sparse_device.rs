//! mklaren's device fit (a GPU with `f64`) on sparse (CSR) inputs against
//! the CPU fit of the same data: RBF, Laplacian, linear and polynomial
//! kernels alone, two kernels sharing one input, one input per kernel; that
//! the fit ran on the device without a dense copy of X; and that an input
//! with a row beyond the device's loop budget falls back to the host fit.
//! `GRAMIAN_REQUIRE_GPU=1` makes a missing adapter a failure.
//!
//! Data: fresh seeds, each entry non-zero with probability 5 %, the
//! non-zeros `+-U(1/4, 1)` (continuous: no two candidates' scores tie to
//! rounding, so both fits must choose the same kernels and pivots). Rows of
//! 30 non-zeros (d = 600) and a look-ahead of 6 columns make it unlikely
//! that two rows meet the look-ahead pivots' columns in at most one column,
//! where the approximate columns of a linear (or, with none shared, a
//! distance) kernel are proportional and their scores tie exactly, which
//! rounding breaks either way.
//!
//! Tolerance: training fit, coefficients, kernel weights and predictions of
//! fresh sparse rows within `1e-8` relative to the largest value, as the
//! dense device fit against the host one (tests/mklaren/model.rs): the
//! kernel columns are the CPU's statistic (the same inner products in the
//! same column order, to an FMA), the device sums the steps' terms in
//! another order (about `1e-15` relative), and the LAR path and the QR of
//! Eq. 18 amplify that by the conditioning of H, far below `1e-8` here; a
//! wrong kernel column or pivot moves them by O(1).

use gramian::gpu::{GpuOptions, ShapeKind};
use gramian::mklaren::{Mklaren, MklarenParams};
use gramian::sparse::CsrMatrix;
use gramian::{Device, Kernel, Precision};
use nalgebra::{DMatrix, DVector};
use rand::{rngs::StdRng, Rng};

use crate::common;

/// n x d with each entry non-zero with probability 5 %, the non-zeros
/// `+-U(1/4, 1)`.
fn random_sparse(rng: &mut StdRng, n: usize, d: usize) -> DMatrix<f64> {
    DMatrix::from_fn(n, d, |_, _| {
        if rng.random::<f64>() < 0.05 {
            let v = rng.random_range(0.25..1.0);
            if rng.random::<bool>() { v } else { -v }
        } else {
            0.0
        }
    })
}

/// A target that depends on the rows.
fn target(rng: &mut StdRng, x: &DMatrix<f64>) -> DVector<f64> {
    let w = DVector::from_fn(x.ncols(), |_, _| rng.random_range(-1.0..1.0));
    let lin = x * &w;
    DVector::from_fn(x.nrows(), |i, _| lin[i].sin() + 0.5 * lin[i] + 0.01 * rng.random_range(-1.0..1.0))
}

const TOL: f64 = 1e-8;

fn assert_close(what: &str, a: &DVector<f64>, b: &DVector<f64>) {
    assert_within(what, a, b, TOL);
}

fn assert_within(what: &str, a: &DVector<f64>, b: &DVector<f64>, tol: f64) {
    assert_eq!(a.len(), b.len(), "{what}: length");
    let err = (a - b).amax() / b.amax().max(1e-300);
    assert!(err <= tol, "{what}: relative difference {err:e}");
}

fn order(m: &Mklaren) -> Vec<(usize, usize)> {
    m.order().iter().map(|c| (c.kernel, c.pivot)).collect()
}

/// A GPU with `f64` (`None`: no adapter, unless one is required, or no `f64`).
fn f64_gpu() -> Option<Device> {
    common::gpu_device(GpuOptions::default()).filter(|g| g.supports(Precision::F64))
}

#[test]
fn sparse_mklaren_fits_on_the_device_as_on_the_cpu() {
    let Some(gpu) = f64_gpu() else { return };
    let cpu = Device::cpu();
    let mut rng = common::rng();
    let (n, t, d, d2) = (80, 20, 600, 300);
    let (x, xt) = (random_sparse(&mut rng, n, d), random_sparse(&mut rng, t, d));
    let (x2, xt2) = (random_sparse(&mut rng, n, d2), random_sparse(&mut rng, t, d2));
    let (xs, xts, x2s, xt2s) = (CsrMatrix::from(&x), CsrMatrix::from(&xt), CsrMatrix::from(&x2), CsrMatrix::from(&xt2));
    let y = target(&mut rng, &x);
    // Widths for rows of about 30 non-zeros (squared distances about 35).
    let (rbf, laplacian, linear, polynomial) = (Kernel::rbf(1.0 / 30.0).unwrap(), Kernel::laplacian(0.2).unwrap(), Kernel::linear(), Kernel::polynomial(0.05, 1.0, 2).unwrap());
    let one = |k: Kernel| (vec![k], vec![&xs], vec![&xts]);
    let cases = [one(rbf), one(laplacian), one(linear), one(polynomial), (vec![rbf, linear], vec![&xs], vec![&xts]), (vec![laplacian, polynomial], vec![&xs, &x2s], vec![&xts, &xt2s])];
    for (kernels, inputs, tests) in cases {
        let what = format!("{kernels:?} on {} input(s)", inputs.len());
        let params = MklarenParams::new(8).lookahead(6).lambda(0.1).kernels(&kernels);
        gpu.reset_device_counters();
        let on_gpu = params.fit_inputs(&gpu, &inputs, &y).unwrap_or_else(|e| panic!("{what}: GPU fit: {e}"));
        let used = gpu.device_counters();
        let on_cpu = params.fit_inputs(&cpu, &inputs, &y).unwrap_or_else(|e| panic!("{what}: CPU fit: {e}"));
        // On the device: kernel columns as kernel-matrix dispatches (n
        // evaluations each), and far fewer bytes up than a dense X.
        let columns = used.class(ShapeKind::KernelMatrix, Precision::F64);
        let dense_bytes: usize = inputs.iter().map(|x| 8 * x.nrows() * x.ncols()).sum();
        let up = used.transfers.host_to_device_bytes;
        println!("{what}: {columns:?}, {up} bytes up (a dense X: {dense_bytes})");
        assert!(columns.dispatches > 0 && columns.kernel_evaluations == columns.dispatches * n as u64, "{what}: kernel columns on the device: {columns:?}");
        assert!((up as usize) < dense_bytes / 4, "{what}: {up} bytes up, a dense X is {dense_bytes}");
        assert_eq!(order(&on_gpu), order(&on_cpu), "{what}: kernels and pivots");
        assert_close(&format!("{what}: training fit"), on_gpu.training_fit(), on_cpu.training_fit());
        assert_close(&format!("{what}: coefficients"), on_gpu.coefficients(), on_cpu.coefficients());
        assert_close(&format!("{what}: kernel weights"), on_gpu.kernel_weights(), on_cpu.kernel_weights());
        assert_close(&format!("{what}: predictions of sparse rows"), &on_gpu.predict_inputs(&tests).unwrap(), &on_cpu.predict_inputs(&tests).unwrap());
    }
}

#[test]
fn a_sparse_row_beyond_the_device_budget_takes_the_host_fit() {
    let Some(gpu) = f64_gpu() else { return };
    let mut rng = common::rng();
    // The device merges two rows in at most 2^15 - 2 passes: rows of at
    // most 16383 non-zeros. Row 3 holds 16384.
    let (n, d) = (40, 16384);
    let mut x = random_sparse(&mut rng, n, d);
    for c in 0..d {
        x[(3, c)] = rng.random_range(0.25..1.0);
    }
    let y = target(&mut rng, &x);
    let xs = CsrMatrix::from(&x);
    assert_eq!(xs.row(3).nnz(), 16384);
    let params = MklarenParams::new(5).lookahead(3).lambda(0.1).kernels(&[Kernel::rbf(1.0 / 800.0).unwrap(), Kernel::linear()]);
    gpu.reset_device_counters();
    let on_gpu = params.fit_inputs(&gpu, &[&xs], &y).unwrap();
    let used = gpu.device_counters();
    assert_eq!(used.class(ShapeKind::KernelMatrix, Precision::F64).dispatches, 0, "no kernel column on the device");
    assert_eq!(used.transfers.host_to_device_bytes, 0, "nothing up");
    let on_cpu = params.fit_inputs(&Device::cpu(), &[&xs], &y).unwrap();
    // The same host computation (to the order of a parallel sum: 1e-12).
    assert_eq!(order(&on_gpu), order(&on_cpu), "kernels and pivots");
    assert_within("training fit", on_gpu.training_fit(), on_cpu.training_fit(), 1e-12);
    assert_within("coefficients", on_gpu.coefficients(), on_cpu.coefficients(), 1e-12);
}
