//! Long rows on the GPU: every GPU operation at depths 70,000 and 100,000
//! against the CPU `f64` path. Mesa's software Vulkan (lavapipe) stops every
//! loop of an invocation once it has made 65,535 loop passes in all, without
//! an error, so these depths are beyond what one unplanned invocation may run
//! there (see `LOOP_BUDGET` in `src/gpu/mod.rs`); on other adapters they
//! check the same depth chunking. A few rows only (the cost is the depth),
//! with near-duplicate rows (where the expanded distance form recomputes
//! directly over the depth).
//!
//! Tolerances, per entry, against the CPU in f64: kernel values (RBF,
//! Laplacian, at most 1) within 1e-4 (f32) / 1e-10 (f64); inner products,
//! products, sums and matvecs within 1e-5 (f32) / 1e-12 (f64) times the same
//! expression over absolute values (e.g. `sum_k |a_ik| |b_jk|`), which bounds
//! the rounding of a sum of that many terms with room to spare. A truncated
//! sum misses thousands of terms and fails by orders of magnitude.

use crate::common;

use common::{gpu_device, rng};
use gramian::gpu::{GpuContext, TuningMode};
use gramian::{Error, Device, DeviceMatrix, GpuOptions, Kernel, KernelOperator, MatrixProduct, Precision};
use nalgebra::DMatrix;
use rand::rngs::StdRng;
use rand::Rng;
use std::sync::Arc;

const DEPTHS: [usize; 2] = [70_000, 100_000];

/// The GPU device with tuning off (the default variants; the variant test
/// forces each one in turn).
fn device() -> Option<(Device, Arc<GpuContext>)> {
    let d = gpu_device(GpuOptions::default())?;
    let Device::Gpu(ctx) = &d else { panic!("gpu_device returned the CPU") };
    let ctx = ctx.clone();
    ctx.set_tuning_mode(TuningMode::Off).unwrap();
    Some((d, ctx))
}

/// X (4 x d) with row 1 a near-duplicate of row 0, Z (3 x d) with row 0 a
/// near-duplicate of row 2 of X; entries uniform in [-1, 1).
fn data(rng: &mut StdRng, d: usize) -> (DMatrix<f64>, DMatrix<f64>) {
    let mut x = DMatrix::from_fn(4, d, |_, _| rng.random_range(-1.0..1.0));
    let mut z = DMatrix::from_fn(3, d, |_, _| rng.random_range(-1.0..1.0));
    for k in 0..d {
        x[(1, k)] = x[(0, k)] + 1e-3 * rng.random_range(-1.0..1.0);
        z[(0, k)] = x[(2, k)] + 1e-3 * rng.random_range(-1.0..1.0);
    }
    (x, z)
}

/// RBF and Laplacian with values of order 1/2 at this depth, and the linear kernel.
fn kernels(d: usize) -> Vec<Kernel> {
    vec![Kernel::rbf(1.0 / d as f64).unwrap(), Kernel::laplacian(1.0 / (d as f64).sqrt()).unwrap(), Kernel::linear()]
}

fn tolerances(precision: Precision) -> (f64, f64) {
    match precision {
        Precision::F32 => (1e-4, 1e-5),
        Precision::F64 => (1e-10, 1e-12),
    }
}

/// The failed comparisons of a test, reported together at its end (so that
/// a failure names every operation that is wrong, not the first).
#[derive(Default)]
struct Checks(Vec<String>);

impl Checks {
    /// Every entry of `got` within `tol * bound` of `want`.
    fn check(&mut self, what: &str, got: &DMatrix<f64>, want: &DMatrix<f64>, bound: &DMatrix<f64>, tol: f64) {
        assert_eq!(got.shape(), want.shape(), "{what}: shape");
        let wrong: Vec<String> = (0..want.nrows())
            .flat_map(|i| (0..want.ncols()).map(move |j| (i, j)))
            .filter(|&(i, j)| (got[(i, j)] - want[(i, j)]).abs() > tol * bound[(i, j)])
            .map(|(i, j)| format!("({i}, {j}) is {}, the CPU gives {} (tolerance {:e})", got[(i, j)], want[(i, j)], tol * bound[(i, j)]))
            .collect();
        if !wrong.is_empty() {
            self.0.push(format!("{what}: {} of {} entries wrong, e.g. {}", wrong.len(), want.len(), wrong[0]));
        }
    }

    /// No entry of `got` equal to the one an earlier call left (`before`).
    fn unlike(&mut self, what: &str, got: &DMatrix<f64>, before: &DMatrix<f64>) {
        let stale = got.iter().zip(before.iter()).filter(|(g, b)| g == b).count();
        if stale > 0 {
            self.0.push(format!("{what}: {stale} of {} entries are the earlier call's", got.len()));
        }
    }

    fn finish(self) {
        assert!(self.0.is_empty(), "{} comparisons failed:\n{}", self.0.len(), self.0.join("\n"));
    }
}

fn abs(m: &DMatrix<f64>) -> DMatrix<f64> {
    m.map(f64::abs)
}

/// The bound for entries of `K(X, Z)`: 1 for the distance kernels (values
/// at most 1), `|X| |Z|^T` for the linear kernel.
fn kernel_bound(kernel: &Kernel, x: &DMatrix<f64>, z: &DMatrix<f64>) -> DMatrix<f64> {
    if kernel.is_distance_based() {
        DMatrix::from_element(x.nrows(), z.nrows(), 1.0)
    } else {
        abs(x) * abs(z).transpose()
    }
}

/// The tolerance for `K(X, Z)` entries in `precision`.
fn kernel_tol(kernel: &Kernel, precision: Precision) -> f64 {
    let (values, sums) = tolerances(precision);
    if kernel.is_distance_based() { values } else { sums }
}

#[test]
fn host_api_kernel_matrices_columns_and_matvecs_match_the_cpu() {
    let Some((gpu, _)) = device() else { return };
    let cpu = Device::cpu();
    let mut checks = Checks::default();
    let mut rng = rng();
    let p = Precision::F32;
    for d in DEPTHS {
        let (x, z) = data(&mut rng, d);
        let v = DMatrix::from_fn(3, 2, |_, _| rng.random_range(-1.0..1.0));
        for kernel in kernels(d) {
            let tol = kernel_tol(&kernel, p);
            let what = |op: &str| format!("{op} {kernel:?} d = {d}");
            checks.check(&what("kernel_matrix"), &gpu.kernel_matrix(&kernel, &x, &z).unwrap(), &cpu.kernel_matrix(&kernel, &x, &z).unwrap(), &kernel_bound(&kernel, &x, &z), tol);
            // The same product path as kernel_matrix: one distance kernel each.
            if matches!(kernel, Kernel::Laplacian { .. }) {
                checks.check(&what("kernel_matrix_symmetric"), &gpu.kernel_matrix_symmetric(&kernel, &x).unwrap(), &cpu.kernel_matrix_symmetric(&kernel, &x).unwrap(), &kernel_bound(&kernel, &x, &x), tol);
            }
            if matches!(kernel, Kernel::Rbf { .. }) {
                let point: Vec<f64> = z.row(0).iter().copied().collect();
                let column = DMatrix::from_column_slice(4, 1, gpu.kernel_column(&kernel, &x, &point).unwrap().as_slice());
                let column_cpu = DMatrix::from_column_slice(4, 1, cpu.kernel_column(&kernel, &x, &point).unwrap().as_slice());
                checks.check(&what("kernel_column"), &column, &column_cpu, &kernel_bound(&kernel, &x, &z.rows(0, 1).into_owned()), tol);
            }
            let diagonal = DMatrix::from_column_slice(4, 1, gpu.kernel_diagonal(&kernel, &x).unwrap().as_slice());
            let diagonal_cpu = DMatrix::from_column_slice(4, 1, cpu.kernel_diagonal(&kernel, &x).unwrap().as_slice());
            let diagonal_bound = DMatrix::from_fn(4, 1, |i, _| kernel_bound(&kernel, &x, &x)[(i, i)]);
            checks.check(&what("kernel_diagonal"), &diagonal, &diagonal_cpu, &diagonal_bound, tol);
            let kv = gpu.kernel_matvec(&kernel, &x, &z, &v).unwrap();
            let kv_cpu = cpu.kernel_matvec(&kernel, &x, &z, &v).unwrap();
            checks.check(&what("kernel_matvec"), &kv, &kv_cpu, &(kernel_bound(&kernel, &x, &z) * abs(&v)), tol);
        }
    }
    checks.finish();
}

#[test]
fn host_api_products_and_grams_match_the_cpu() {
    let Some((gpu, _)) = device() else { return };
    let cpu = Device::cpu();
    let mut checks = Checks::default();
    let mut rng = rng();
    let (_, tol) = tolerances(Precision::F32);
    for d in DEPTHS {
        let (x, z) = data(&mut rng, d);
        let (xt, zt) = (x.transpose(), z.transpose());
        let what = |op: &str| format!("{op} d = {d}");
        checks.check(&what("gram"), &gpu.gram(&xt).unwrap(), &cpu.gram(&xt).unwrap(), &(abs(&x) * abs(&xt)), tol);
        checks.check(&what("outer_gram"), &gpu.outer_gram(&x).unwrap(), &cpu.outer_gram(&x).unwrap(), &(abs(&x) * abs(&xt)), tol);
        let bound = abs(&x) * abs(&zt);
        checks.check(&what("matmul AB"), &gpu.matmul(&x, &zt, MatrixProduct::AB).unwrap(), &cpu.matmul(&x, &zt, MatrixProduct::AB).unwrap(), &bound, tol);
        checks.check(&what("matmul ABt"), &gpu.matmul(&x, &z, MatrixProduct::ABt).unwrap(), &cpu.matmul(&x, &z, MatrixProduct::ABt).unwrap(), &bound, tol);
        checks.check(&what("matmul AtB"), &gpu.matmul(&xt, &zt, MatrixProduct::AtB).unwrap(), &cpu.matmul(&xt, &zt, MatrixProduct::AtB).unwrap(), &bound, tol);
        let pairs = [(&x, &z), (&z, &x)];
        let got = gpu.batched_matmul(&pairs, MatrixProduct::ABt).unwrap();
        let want = cpu.batched_matmul(&pairs, MatrixProduct::ABt).unwrap();
        checks.check(&what("batched_matmul 0"), &got[0], &want[0], &bound, tol);
        checks.check(&what("batched_matmul 1"), &got[1], &want[1], &bound.transpose(), tol);
    }
    checks.finish();
}

/// The resident operations (and `KernelOperator`) in `precision`, with the
/// product variant `variant` forced (a 32 x 32 tile: a quarter or a
/// sixteenth of the default's work on padded rows; every variant has its
/// own test below).
fn resident_ops_match_the_cpu(precision: Precision, variant: &str) {
    let Some((gpu, ctx)) = device() else { return };
    if !ctx.supports(precision) {
        assert_ne!(precision, Precision::F32);
        eprintln!("SKIPPED: {precision:?} not supported by {}", ctx.adapter().name);
        return;
    }
    ctx.force_variant(Some(variant)).unwrap();
    let cpu = Device::cpu();
    let mut checks = Checks::default();
    let mut rng = rng();
    let (_, tol) = tolerances(precision);
    for d in DEPTHS {
        let (x, z) = data(&mut rng, d);
        let (xt, zt) = (x.transpose(), z.transpose());
        let what = |op: &str| format!("{op} {precision:?} d = {d}");
        let up = |m: &DMatrix<f64>| gpu.upload(m, precision).unwrap();
        let host = |m: &DeviceMatrix| gpu.to_host(m).unwrap();
        let (xg, zg, xtg, ztg) = (up(&x), up(&z), up(&xt), up(&zt));
        // Row reductions.
        let sums = DMatrix::from_fn(4, 1, |i, _| x.row(i).sum());
        checks.check(&what("resident_row_sums"), &host(&gpu.resident_row_sums(&xg).unwrap()), &sums, &DMatrix::from_fn(4, 1, |i, _| abs(&x).row(i).sum()), tol);
        let norms = DMatrix::from_fn(4, 1, |i, _| x.row(i).norm_squared());
        checks.check(&what("resident_row_squared_norms"), &host(&gpu.resident_row_squared_norms(&xg).unwrap()), &norms, &norms, tol);
        // Products.
        let bound = abs(&x) * abs(&zt);
        checks.check(&what("resident_matmul AB"), &host(&gpu.resident_matmul(&xg, &ztg, MatrixProduct::AB).unwrap()), &(&x * &zt), &bound, tol);
        checks.check(&what("resident_matmul ABt"), &host(&gpu.resident_matmul(&xg, &zg, MatrixProduct::ABt).unwrap()), &(&x * &zt), &bound, tol);
        checks.check(&what("resident_matmul AtB"), &host(&gpu.resident_matmul(&xtg, &ztg, MatrixProduct::AtB).unwrap()), &(&x * &zt), &bound, tol);
        let w = DMatrix::from_fn(d, 1, |_, _| rng.random_range(0.0..1.0));
        let wg = up(&w);
        let xw = DMatrix::from_fn(4, d, |i, k| x[(i, k)] * w[k]);
        checks.check(&what("resident_weighted_gram"), &host(&gpu.resident_weighted_gram(&xtg, &wg).unwrap()), &(&xw * &xt), &(abs(&xw) * abs(&xt)), tol);
        for kernel in kernels(d) {
            let ktol = kernel_tol(&kernel, precision);
            let what = |op: &str| format!("{op} {kernel:?} {precision:?} d = {d}");
            let k_cpu = cpu.kernel_matrix(&kernel, &x, &z).unwrap();
            let k_bound = kernel_bound(&kernel, &x, &z);
            checks.check(&what("resident_kernel_matrix"), &host(&gpu.resident_kernel_matrix(&kernel, &xg, &zg).unwrap()), &k_cpu, &k_bound, ktol);
            let kxx = cpu.kernel_matrix(&kernel, &x, &x).unwrap();
            let columns = host(&gpu.resident_kernel_columns(&kernel, &xg, &[1, 3]).unwrap());
            let columns_cpu = DMatrix::from_fn(4, 2, |i, j| kxx[(i, [1, 3][j])]);
            let columns_bound = DMatrix::from_fn(4, 2, |i, j| kernel_bound(&kernel, &x, &x)[(i, [1, 3][j])]);
            checks.check(&what("resident_kernel_columns"), &columns, &columns_cpu, &columns_bound, ktol);
            let diagonal = gpu.resident_kernel_diagonal(&kernel, &xg).unwrap();
            let diagonal_cpu = cpu.kernel_diagonal(&kernel, &x).unwrap();
            let diagonal_bound = DMatrix::from_fn(4, 1, |i, _| kernel_bound(&kernel, &x, &x)[(i, i)]);
            checks.check(&what("resident_kernel_diagonal"), &DMatrix::from_column_slice(4, 1, diagonal.as_slice()), &DMatrix::from_column_slice(4, 1, diagonal_cpu.as_slice()), &diagonal_bound, ktol);
            // Matvecs: one column and a few (fused where the depth allows),
            // nine (tiles of K).
            let operator = KernelOperator::new(&gpu, kernel, &x, &z, precision).unwrap();
            for c in [1, 3, 9] {
                let v = DMatrix::from_fn(3, c, |_, _| rng.random_range(-1.0..1.0));
                let want = &k_cpu * &v;
                let bound = &k_bound * abs(&v);
                if c == 3 {
                    checks.check(&what(&format!("KernelOperator::apply c = {c}")), &operator.apply(&v).unwrap(), &want, &bound, ktol);
                } else {
                    checks.check(&what(&format!("resident_kernel_matvec c = {c}")), &host(&gpu.resident_kernel_matvec(&kernel, &xg, &zg, &up(&v)).unwrap()), &want, &bound, ktol);
                }
            }
        }
    }
    checks.finish();
}

#[test]
fn resident_operations_match_the_cpu_in_f32() {
    resident_ops_match_the_cpu(Precision::F32, "f32-32x32-b4x4-k16-v4-direct");
}

#[test]
fn resident_operations_match_the_cpu_in_f64() {
    resident_ops_match_the_cpu(Precision::F64, "f64-32x32-b4x4-k16-v1-direct");
}

/// Every product variant (forced), on the worst case of each at depth
/// 70,000: RBF kernel matrices of near-duplicate rows (the expanded form
/// recomputes those entries over the whole depth).
#[test]
fn every_variant_takes_long_rows() {
    let Some((gpu, ctx)) = device() else { return };
    let cpu = Device::cpu();
    let mut checks = Checks::default();
    let mut rng = rng();
    let d = DEPTHS[0];
    let (x, z) = data(&mut rng, d);
    let kernel = Kernel::rbf(1.0 / d as f64).unwrap();
    let k_cpu = cpu.kernel_matrix(&kernel, &x, &z).unwrap();
    let ones = DMatrix::from_element(4, 3, 1.0);
    for variant in ctx.product_variants() {
        let precision = variant.precision;
        ctx.force_variant(Some(variant.name)).unwrap();
        let (tol, _) = tolerances(precision);
        let (xg, zg) = (gpu.upload(&x, precision).unwrap(), gpu.upload(&z, precision).unwrap());
        let k = gpu.to_host(&gpu.resident_kernel_matrix(&kernel, &xg, &zg).unwrap()).unwrap();
        checks.check(&format!("resident_kernel_matrix {}", variant.name), &k, &k_cpu, &ones, tol);
    }
    ctx.force_variant(None).unwrap();
    checks.finish();
}

/// A second call whose rows must be cut into depth chunks returns its own
/// result, not what the first call left in the reused output buffers.
#[test]
fn a_long_call_after_a_short_one_returns_its_own_result() {
    let Some((gpu, _)) = device() else { return };
    let cpu = Device::cpu();
    let mut checks = Checks::default();
    let mut rng = rng();
    let d = DEPTHS[0];
    let kernel = Kernel::rbf(1.0 / d as f64).unwrap();
    let ones = DMatrix::from_element(4, 3, 1.0);
    let (tol, _) = tolerances(Precision::F32);
    // Short rows without near-duplicates: every value near 0.99, unlike
    // every value of the long call.
    let (xs, zs) = (common::random_matrix(&mut rng, 4, 1000), common::random_matrix(&mut rng, 3, 1000));
    let (x, z) = data(&mut rng, d);
    let want = cpu.kernel_matrix(&kernel, &x, &z).unwrap();
    // Host API: the scratch output buffer is reused.
    let first = gpu.kernel_matrix(&kernel, &xs, &zs).unwrap();
    let second = gpu.kernel_matrix(&kernel, &x, &z).unwrap();
    assert!(first.iter().zip(want.iter()).all(|(a, b)| (a - b).abs() > tol), "the test needs a first result unlike the second");
    checks.check("kernel_matrix after a short call", &second, &want, &ones, tol);
    checks.unlike("kernel_matrix after a short call", &second, &first);
    // Resident: the same output matrix written twice.
    let out = gpu.zeros(4, 3, Precision::F32).unwrap();
    let up = |m: &DMatrix<f64>| gpu.upload(m, Precision::F32).unwrap();
    gpu.resident_kernel_matrix_into(&kernel, &up(&xs), &up(&zs), &out).unwrap();
    checks.check("resident_kernel_matrix_into, short", &gpu.to_host(&out).unwrap(), &first, &ones, tol);
    let short = gpu.to_host(&out).unwrap();
    gpu.resident_kernel_matrix_into(&kernel, &up(&x), &up(&z), &out).unwrap();
    let long = gpu.to_host(&out).unwrap();
    checks.check("resident_kernel_matrix_into after a short call", &long, &want, &ones, tol);
    checks.unlike("resident_kernel_matrix_into after a short call", &long, &short);
    checks.finish();
}

/// An operation that cannot run (here: rows beyond a binding) is an error
/// after a call that ran, never the earlier call's output.
#[test]
fn a_rejected_call_after_a_good_one_is_an_error() {
    let Some(gpu) = gpu_device(GpuOptions { max_tile_bytes: Some(4096), ..Default::default() }) else { return };
    let mut rng = rng();
    let kernel = Kernel::rbf(0.01).unwrap();
    let (xs, zs) = data(&mut rng, 100);
    let v = DMatrix::from_element(3, 1, 1.0);
    gpu.kernel_matvec(&kernel, &xs, &zs, &v).unwrap();
    let (x, z) = data(&mut rng, 2000);
    match gpu.kernel_matvec(&kernel, &x, &z, &v) {
        Err(Error::TooLargeForGpu { .. }) => {}
        other => panic!("rows of 8000 bytes with 4096-byte bindings: expected TooLargeForGpu, got {other:?}"),
    }
}
