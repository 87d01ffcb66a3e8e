//! The GPU engine's CSR operand (`gramian::gpu::GpuCsr`): `Y = X B` and the
//! kernel matrix `K(X, Z)` of every kernel against the CPU `f64` reference
//! (`gramian::sparse::csr_times_dense`, `kernel_matrix_sparse_cpu`) on fresh
//! random sparse inputs: densities from none to full, empty rows, rows
//! longer than a workgroup (64), shapes that are not multiples of 64, rows
//! of Z equal to rows of X; in f32 and (where the adapter has it) f64. The
//! counters (the CSR arrays are what goes up, never `n x d`; dispatches,
//! flops, bytes and kernel evaluations by the formulas of
//! `gramian::gpu::counters`), and the typed errors of what the device
//! cannot take.
//!
//! Tolerances, per entry. Inner products and products: within `t` times
//! `sum_p |x_p| |d_p|` (the same sum over absolute values), `t = 1e-5` in
//! f32 (the inputs rounded to f32, `2^-24` relative each, and a sum of at
//! most a few hundred terms whose rounding grows as `sqrt(nnz) 2^-24` in
//! practice, `nnz 2^-24 ~ 2e-5` at the very worst for 300 terms) and
//! `1e-13` in f64 (`nnz 2^-53 ~ 3e-14`). Kernel values of RBF, Laplacian
//! and sigmoid (at most 1 in magnitude): within `1e-4` (f32; the
//! statistic's error times the kernel's slope, `gamma ||x - z||^2 <= 10`
//! here) and `1e-10` (f64). The polynomial kernel `(gamma s + c)^3`:
//! within `3 (gamma S + |c|)^2 gamma t S` with `S` the sum over absolute
//! values, its derivative times the statistic's bound, doubled. Every
//! kernel value also gets `1e-6` (f32) / `1e-15` (f64) of itself for the
//! rounding of the kernel function. Rows of Z
//! equal to rows of X give RBF and Laplacian exactly 1 up to `1e-6` (f32;
//! the distance is 0 exactly, see `gramian::gpu::sparse`), where the
//! expanded form `||x||^2 + ||z||^2 - 2 <x, z>` would leave the Laplacian
//! `gamma sqrt(2^-24 ||x||^2) ~ 1e-4` away.

use crate::common;

use common::{gpu_device, rng};
use gramian::gpu::{GpuContext, ShapeKind, SPARSE_MAX_ROW_NNZ};
use gramian::sparse::{csr_times_dense, kernel_matrix_sparse_cpu, CsrMatrix};
use gramian::{Device, Error, GpuOptions, Kernel, Precision};
use nalgebra::DMatrix;
use rand::rngs::StdRng;
use rand::Rng;

fn context() -> Option<std::sync::Arc<GpuContext>> {
    match gpu_device(GpuOptions::default())? {
        Device::Gpu(ctx) => Some(ctx),
        Device::Cpu => panic!("gpu_device returned the CPU"),
    }
}

/// n x d with each entry non-zero (uniform in [-1, 1)) with probability
/// `density`, rows `empty` left empty and row `long` (if any) full.
fn random_sparse(rng: &mut StdRng, n: usize, d: usize, density: f64, empty: &[usize], long: Option<usize>) -> DMatrix<f64> {
    DMatrix::from_fn(n, d, |i, _| {
        if empty.contains(&i) {
            0.0
        } else if Some(i) == long || rng.random::<f64>() < density {
            rng.random_range(-1.0..1.0)
        } else {
            0.0
        }
    })
}

fn precisions(ctx: &GpuContext) -> Vec<Precision> {
    [Precision::F32, Precision::F64].into_iter().filter(|&p| ctx.supports(p)).collect()
}

fn row_major(m: &DMatrix<f64>) -> Vec<f64> {
    m.transpose().as_slice().to_vec()
}

fn upload(ctx: &GpuContext, m: &DMatrix<f64>, precision: Precision) -> gramian::gpu::GpuMatrix {
    ctx.upload(&row_major(m), m.nrows(), m.ncols(), precision).unwrap()
}

fn download(ctx: &GpuContext, m: &gramian::gpu::GpuMatrix) -> DMatrix<f64> {
    DMatrix::from_row_slice(m.nrows(), m.ncols(), &ctx.download(m).unwrap())
}

/// The cases: (n, d, output columns, density, empty rows, a full row).
fn cases() -> Vec<(usize, usize, usize, f64, Vec<usize>, Option<usize>)> {
    vec![
        (37, 53, 29, 0.1, vec![0, 36], None),
        (5, 300, 70, 0.02, vec![2], Some(1)),
        (70, 130, 130, 0.5, vec![3, 4, 5], Some(69)),
        (9, 17, 65, 1.0, vec![], None),
        (3, 11, 7, 0.0, vec![0, 1, 2], None),
        (129, 40, 1, 0.05, vec![64], None),
    ]
}

#[test]
fn sparse_times_dense_equals_the_cpu() {
    let Some(ctx) = context() else { return };
    let mut rng = rng();
    for precision in precisions(&ctx) {
        let t = if precision == Precision::F32 { 1e-5 } else { 1e-13 };
        for (n, d, c, density, empty, long) in cases() {
            let x = random_sparse(&mut rng, n, d, density, &empty, long);
            let b = common::random_matrix(&mut rng, d, c);
            let xs = CsrMatrix::from(&x);
            let want = csr_times_dense(&xs, &b).unwrap();
            let bound = x.abs() * b.abs();
            let got = download(&ctx, &ctx.sparse_times_dense(&ctx.upload_csr(&xs, precision).unwrap(), &upload(&ctx, &b, precision)).unwrap());
            assert_eq!(got.shape(), (n, c));
            for i in 0..n {
                for j in 0..c {
                    assert!((got[(i, j)] - want[(i, j)]).abs() <= t * bound[(i, j)] + 1e-30, "{precision:?} {n}x{d}x{c} density {density}: ({i}, {j}) {} vs {}", got[(i, j)], want[(i, j)]);
                }
            }
        }
    }
}

fn kernels(d: usize) -> Vec<Kernel> {
    let g = 2.0 / d as f64;
    vec![Kernel::linear(), Kernel::polynomial(g, 0.5, 3).unwrap(), Kernel::rbf(g).unwrap(), Kernel::laplacian(0.5).unwrap(), Kernel::sigmoid(g, 0.1).unwrap()]
}

#[test]
fn sparse_kernel_matrices_equal_the_cpu() {
    let Some(ctx) = context() else { return };
    let mut rng = rng();
    for precision in precisions(&ctx) {
        let f32 = precision == Precision::F32;
        let t = if f32 { 1e-5 } else { 1e-13 };
        for (n, d, m, density, empty, long) in cases() {
            let x = random_sparse(&mut rng, n, d, density, &empty, long);
            // Z: dense rows, the first min(n, m) / 2 of them copies of rows of X.
            let mut z = common::random_matrix(&mut rng, m, d);
            let copies = n.min(m) / 2;
            for r in 0..copies {
                z.set_row(r, &x.row(r));
            }
            let xs = CsrMatrix::from(&x);
            let bound = x.abs() * z.abs().transpose();
            let (xg, zg) = (ctx.upload_csr(&xs, precision).unwrap(), upload(&ctx, &z, precision));
            for kernel in kernels(d) {
                let want = kernel_matrix_sparse_cpu(&kernel, &xs, &CsrMatrix::from(&z)).unwrap();
                let got = download(&ctx, &ctx.sparse_kernel_matrix(&kernel, &xg, &zg).unwrap());
                assert_eq!(got.shape(), (n, m));
                for i in 0..n {
                    for j in 0..m {
                        let s = bound[(i, j)];
                        let tol = match kernel {
                            Kernel::Linear => t * s,
                            Kernel::Polynomial { gamma, coef0, degree } => 2.0 * degree as f64 * (gamma * s + coef0.abs()).powi(degree as i32 - 1) * gamma * t * s,
                            _ => if f32 { 1e-4 } else { 1e-10 },
                        };
                        let (a, w) = (got[(i, j)], want[(i, j)]);
                        // The kernel function's own rounding, a few units in the last place.
                        let tol = tol + if f32 { 1e-6 } else { 1e-15 } * w.abs() + 1e-30;
                        assert!((a - w).abs() <= tol, "{kernel:?} {precision:?} {n}x{d}x{m} density {density}: ({i}, {j}) {a} vs {w}");
                        if i == j && i < copies && kernel.is_distance_based() {
                            assert!((a - 1.0).abs() <= if f32 { 1e-6 } else { 1e-14 }, "{kernel:?} {precision:?}: a row against its copy gives {a}");
                        }
                    }
                }
            }
        }
    }
}

/// What goes up is the CSR arrays; the dispatches and their work are the
/// counters' formulas for the sparse shapes.
#[test]
fn sparse_counters_follow_the_csr_arrays() {
    let Some(ctx) = context() else { return };
    let mut rng = rng();
    for precision in precisions(&ctx) {
        let e = if precision == Precision::F32 { 4u64 } else { 8 };
        let (n, d, c) = (90usize, 400usize, 33usize);
        let x = random_sparse(&mut rng, n, d, 0.03, &[7], Some(11));
        let xs = CsrMatrix::from(&x);
        let nnz = xs.nnz() as u64;
        let (b, z) = (common::random_matrix(&mut rng, d, c), common::random_matrix(&mut rng, c, d));

        ctx.reset_device_counters();
        let xg = ctx.upload_csr(&xs, precision).unwrap();
        let up = ctx.device_counters();
        let csr_bytes = 4 * (n as u64 + 1) + (4 + e) * nnz;
        assert_eq!(up.transfers.host_to_device_bytes, csr_bytes, "{precision:?}: bytes uploaded");
        assert_eq!(xg.bytes(), csr_bytes);
        assert!(csr_bytes * 5 < n as u64 * d as u64 * e, "{precision:?}: the CSR arrays are far below n x d");
        assert_eq!((up.transfers.uploads, up.allocations, up.allocated_bytes), (1, 1, csr_bytes));
        assert_eq!(up.transfers.dispatches, 0);

        let bg = upload(&ctx, &b, precision);
        ctx.reset_device_counters();
        ctx.sparse_times_dense(&xg, &bg).unwrap();
        let run = ctx.device_counters();
        assert_eq!(run.transfers.host_to_device_bytes, 0, "{precision:?}: a resident product uploads nothing");
        let product = run.class(ShapeKind::Product, precision);
        assert_eq!(product.dispatches, 1);
        assert_eq!(product.workgroups, n as u64 * (c as u64).div_ceil(64));
        assert_eq!(product.flops, 2 * nnz * c as u64);
        assert_eq!(product.bytes, e * nnz + 4 * nnz + 4 * (n as u64 + 1) + e * (c as u64 * d as u64 + n as u64 * c as u64));
        assert_eq!(product.kernel_evaluations, 0);

        let zg = upload(&ctx, &z, precision);
        for kernel in [Kernel::rbf(0.01).unwrap(), Kernel::polynomial(0.1, 1.0, 2).unwrap()] {
            ctx.reset_device_counters();
            ctx.sparse_kernel_matrix(&kernel, &xg, &zg).unwrap();
            let run = ctx.device_counters();
            let km = run.class(ShapeKind::KernelMatrix, precision);
            let distance = kernel.is_distance_based();
            assert_eq!(km.dispatches, 1, "{kernel:?}");
            assert_eq!(km.kernel_evaluations, (n * c) as u64, "{kernel:?}");
            assert_eq!(km.flops, if distance { 5 } else { 2 } * nnz * c as u64, "{kernel:?}");
            assert_eq!(km.bytes, e * nnz + 4 * nnz + 4 * (n as u64 + 1) + e * (c as u64 * d as u64 + n as u64 * c as u64) + if distance { e * c as u64 } else { 0 }, "{kernel:?}");
            // The squared norms of Z's rows: one row reduction for the distance kernels.
            assert_eq!(run.class(ShapeKind::RowReduce, precision).dispatches, distance as u64, "{kernel:?}");
            assert_eq!(run.transfers.dispatches, 1 + distance as u64, "{kernel:?}");
        }
    }
}

/// What the device cannot take is a typed error, before any work.
#[test]
fn sparse_operands_the_device_cannot_take_are_typed_errors() {
    let Some(ctx) = context() else { return };
    let mut rng = rng();
    let long = DMatrix::from_fn(2, SPARSE_MAX_ROW_NNZ + 1, |i, _| if i == 1 { 1.0 } else { 0.0 });
    assert!(matches!(ctx.upload_csr(&CsrMatrix::from(&long), Precision::F32), Err(Error::TooLargeForGpu { .. })));
    let just = DMatrix::from_fn(1, SPARSE_MAX_ROW_NNZ, |_, k| (k % 7) as f64 - 3.0 + 0.5);
    let xg = ctx.upload_csr(&CsrMatrix::from(&just), Precision::F32).unwrap();
    // The longest row allowed is summed in full (a truncated loop would miss terms).
    let ones = DMatrix::from_element(SPARSE_MAX_ROW_NNZ, 1, 1.0);
    let sum = download(&ctx, &ctx.sparse_times_dense(&xg, &upload(&ctx, &ones, Precision::F32)).unwrap())[(0, 0)];
    assert!((sum - just.sum()).abs() <= 1e-5 * just.abs().sum(), "{sum} vs {}", just.sum());

    let x = CsrMatrix::from(&random_sparse(&mut rng, 6, 10, 0.3, &[], Some(0)));
    let xg = ctx.upload_csr(&x, Precision::F32).unwrap();
    let wrong = upload(&ctx, &common::random_matrix(&mut rng, 9, 4), Precision::F32);
    assert!(matches!(ctx.sparse_times_dense(&xg, &wrong), Err(Error::DimensionMismatch { .. })));
    assert!(matches!(ctx.sparse_kernel_matrix(&Kernel::linear(), &xg, &wrong), Err(Error::DimensionMismatch { .. })));
    assert!(ctx.sparse_kernel_matrix(&Kernel::Rbf { gamma: -1.0 }, &xg, &upload(&ctx, &common::random_matrix(&mut rng, 3, 10), Precision::F32)).is_err());
    if ctx.supports(Precision::F64) {
        let b64 = upload(&ctx, &common::random_matrix(&mut rng, 10, 4), Precision::F64);
        assert!(matches!(ctx.sparse_times_dense(&xg, &b64), Err(Error::PrecisionMismatch { .. })));
    }
    let mut bad = random_sparse(&mut rng, 4, 5, 0.5, &[], Some(2));
    bad[(2, 3)] = f64::NAN;
    assert!(matches!(ctx.upload_csr(&CsrMatrix::from(&bad), Precision::F32), Err(Error::NonFinite { row: 2, col: 3, .. })));
    // A matrix of another context.
    let Some(other) = context() else { return };
    assert!(matches!(other.sparse_times_dense(&xg, &other.upload(&[1.0; 40], 10, 4, Precision::F32).unwrap()), Err(Error::DeviceMismatch)));
}
