//! Device-resident matrices: every resident operation on the GPU (f32 and
//! f64) against the CPU f64 path on fresh random inputs, with and without a
//! forced small binding limit (so matrices span many row blocks and products
//! are cut at every block boundary), plus transfer accounting and the typed
//! errors of misuse.
//!
//! Tolerances (relative Frobenius error): f64 shaders 1e-12 (products of at
//! most a few hundred terms, our exp within a few ulps); f32 1e-5 (as in
//! `tests/gpu/vs_cpu.rs`), 1e-4 for the polynomial kernel.

use crate::common;

use common::{gpu_device, random_matrix, rng};
use gramian::linalg::relative_frobenius_error;
use gramian::{Error, Device, GpuOptions, Kernel, MatrixProduct, Precision};
use nalgebra::{DMatrix, DVector};

const SHAPES: &[(usize, usize, usize)] = &[(1, 1, 1), (13, 1, 5), (67, 31, 3), (130, 64, 65), (257, 193, 17)];

fn kernels() -> Vec<(Kernel, f64)> {
    common::test_kernels()
}

fn tolerance(precision: Precision) -> f64 {
    match precision {
        Precision::F32 => 1e-5,
        Precision::F64 => 1e-12,
    }
}

fn devices() -> Vec<Device> {
    let mut out = Vec::new();
    if let Some(d) = gpu_device(GpuOptions::default()) {
        out.push(d);
    }
    // 4 KiB bindings: 512 f64 per block, so every matrix here spans many blocks.
    if let Some(d) = gpu_device(GpuOptions { max_tile_bytes: Some(4096), ..Default::default() }) {
        out.push(d);
    }
    out
}

fn precisions(device: &Device) -> Vec<Precision> {
    [Precision::F32, Precision::F64].into_iter().filter(|p| device.supports(*p)).collect()
}

#[test]
fn lavapipe_and_real_gpus_run_f64() {
    // The f64 path is what the PSD dual needs; lavapipe and NVIDIA's Vulkan
    // driver both have SHADER_F64, so a GPU test machine without it is a
    // configuration error, not a skip.
    for device in devices() {
        assert!(device.supports(Precision::F64), "{} lacks f64", device.describe());
    }
}

#[test]
fn resident_kernel_matrices_match_cpu() {
    let mut rng = rng();
    for device in devices() {
        for precision in precisions(&device) {
            for &(n, m, d) in SHAPES {
                let x = random_matrix(&mut rng, n, d);
                let z = random_matrix(&mut rng, m, d);
                let (xd, zd) = (device.upload(&x, precision).unwrap(), device.upload(&z, precision).unwrap());
                for (kernel, scale) in kernels() {
                    let reference = Device::Cpu.kernel_matrix(&kernel, &x, &z).unwrap();
                    let got = device.to_host(&device.resident_kernel_matrix(&kernel, &xd, &zd).unwrap()).unwrap();
                    let err = relative_frobenius_error(&got, &reference);
                    let tol = tolerance(precision) * scale;
                    assert!(err <= tol, "{} {precision:?} {kernel:?} {n}x{m}x{d}: {err:e} > {tol:e}", device.describe());
                }
            }
        }
    }
}

#[test]
fn f64_exponential_is_accurate_over_the_whole_range() {
    // RBF values exp(-gamma s) for s spanning 0 .. 700 / gamma: our WGSL exp
    // (Cody-Waite reduction + Taylor) against the host's, entry by entry.
    let Some(device) = gpu_device(GpuOptions::default()) else { return };
    let x = DMatrix::from_fn(64, 1, |i, _| i as f64 * 0.42);
    let z = DMatrix::from_element(1, 1, 0.0);
    let kernel = Kernel::rbf(1.0).unwrap();
    let got = device.to_host(&device.resident_kernel_matrix(&kernel, &device.upload(&x, Precision::F64).unwrap(), &device.upload(&z, Precision::F64).unwrap()).unwrap()).unwrap();
    // Every entry beyond the tolerance is listed, so that a failure says
    // where in the range it lies (near |x| = 745 the reduction's low part
    // matters most; a failure everywhere would point elsewhere).
    let mut beyond = Vec::new();
    for i in 0..64 {
        let s = (i as f64 * 0.42).powi(2);
        let want = (-s).exp();
        let rel = if want > 1e-300 { ((got[(i, 0)] - want) / want).abs() } else { (got[(i, 0)] - want).abs() };
        if !(rel <= 1e-14) {
            beyond.push(format!("exp(-{s}) = {:e} on the GPU, {want:e} on the host (rel {rel:e})", got[(i, 0)]));
        }
    }
    assert!(beyond.is_empty(), "{} of 64 entries beyond 1e-14 relative:\n{}", beyond.len(), beyond.join("\n"));
}

#[test]
fn resident_products_match_cpu_in_every_form() {
    let mut rng = rng();
    for device in devices() {
        for precision in precisions(&device) {
            for &(n, m, d) in SHAPES {
                let a = random_matrix(&mut rng, n, d);
                let cases = [
                    (MatrixProduct::AB, random_matrix(&mut rng, d, m)),
                    (MatrixProduct::ABt, random_matrix(&mut rng, m, d)),
                    (MatrixProduct::AtB, random_matrix(&mut rng, n, m)),
                ];
                for (form, b) in cases {
                    let reference = match form {
                        MatrixProduct::AB => &a * &b,
                        MatrixProduct::ABt => &a * b.transpose(),
                        MatrixProduct::AtB => a.transpose() * &b,
                    };
                    let (ad, bd) = (device.upload(&a, precision).unwrap(), device.upload(&b, precision).unwrap());
                    let got = device.to_host(&device.resident_matmul(&ad, &bd, form).unwrap()).unwrap();
                    let err = relative_frobenius_error(&got, &reference);
                    assert!(err <= tolerance(precision), "{} {precision:?} {form:?} {n}x{m}x{d}: {err:e}", device.describe());
                    // Accumulating into the same output doubles it.
                    let out = device.resident_matmul(&ad, &bd, form).unwrap();
                    device.resident_matmul_into(&ad, &bd, form, &out, true).unwrap();
                    let twice = device.to_host(&out).unwrap();
                    assert!(relative_frobenius_error(&twice, &(&reference * 2.0)) <= tolerance(precision));
                }
            }
        }
    }
}

#[test]
fn weighted_gram_and_row_norms_match_cpu() {
    let mut rng = rng();
    for device in devices() {
        for precision in precisions(&device) {
            for &(n, r) in &[(1usize, 1usize), (300, 7), (1000, 33), (517, 70)] {
                let phi = random_matrix(&mut rng, n, r);
                let w = DVector::from_fn(n, |i, _| (i as f64 * 0.37).sin());
                let reference = phi.transpose() * DMatrix::from_diagonal(&w) * &phi;
                let (pd, wd) = (device.upload(&phi, precision).unwrap(), device.upload_vector(&w, precision).unwrap());
                let got = device.to_host(&device.resident_weighted_gram(&pd, &wd).unwrap()).unwrap();
                let err = relative_frobenius_error(&got, &reference);
                assert!(err <= tolerance(precision) * 10.0, "{} {precision:?} weighted gram {n}x{r}: {err:e}", device.describe());
                let norms = device.to_host_vector(&device.resident_row_squared_norms(&pd).unwrap()).unwrap();
                let want = DVector::from_fn(n, |i, _| phi.row(i).norm_squared());
                assert!((norms - &want).norm() <= tolerance(precision) * want.norm());
            }
        }
    }
}

#[test]
fn kernel_columns_matvec_and_diagonal_match_cpu() {
    let mut rng = rng();
    for device in devices() {
        for precision in precisions(&device) {
            let (n, m, d, c) = (300, 211, 9, 3);
            let x = random_matrix(&mut rng, n, d);
            let z = random_matrix(&mut rng, m, d);
            let v = random_matrix(&mut rng, m, c);
            let (xd, zd, vd) = (device.upload(&x, precision).unwrap(), device.upload(&z, precision).unwrap(), device.upload(&v, precision).unwrap());
            for (kernel, scale) in kernels() {
                let tol = tolerance(precision) * scale;
                let reference = Device::Cpu.kernel_matvec(&kernel, &x, &z, &v).unwrap();
                let got = device.to_host(&device.resident_kernel_matvec(&kernel, &xd, &zd, &vd).unwrap()).unwrap();
                assert!(relative_frobenius_error(&got, &reference) <= tol, "{} {precision:?} {kernel:?} matvec", device.describe());
                let idx = [0usize, 17, 299, 17, 5];
                let cols = device.to_host(&device.resident_kernel_columns(&kernel, &xd, &idx).unwrap()).unwrap();
                for (t, &i) in idx.iter().enumerate() {
                    let want = Device::Cpu.kernel_column_of(&kernel, &x, i).unwrap();
                    let err = (cols.column(t) - &want).norm() / want.norm().max(1e-300);
                    assert!(err <= tol, "{} {precision:?} {kernel:?} column {i}: {err:e}", device.describe());
                }
                let diag = device.resident_kernel_diagonal(&kernel, &xd).unwrap();
                let want = kernel.diagonal(&x).unwrap();
                assert!((diag - &want).norm() <= tol * want.norm());
            }
        }
    }
}

/// The pair matvec against `K V` and `K^T W` from the CPU's f64 kernel
/// matrix: fused (V and W rows of one matrix of at most 8 columns), through
/// tiles of K (wider, V spanning several blocks, long rows), accumulating
/// into disjoint rows of one output; the CPU path too.
#[test]
fn pair_matvec_gives_both_directions_from_one_evaluation() {
    let mut rng = rng();
    let mut all = devices();
    all.push(Device::Cpu);
    for device in all {
        for precision in [Precision::F32, Precision::F64].into_iter().filter(|p| device.supports(*p)) {
            for (n, m, d, c) in [(300usize, 211usize, 9usize, 3usize), (67, 130, 3, 1), (129, 64, 5, 8), (90, 70, 4, 11), (40, 30, 3000, 2)] {
                let x = random_matrix(&mut rng, n, d).scale(if d > 100 { 0.05 } else { 1.0 });
                let z = random_matrix(&mut rng, m, d).scale(if d > 100 { 0.05 } else { 1.0 });
                let vw = random_matrix(&mut rng, m + n, c);
                let (v, w) = (vw.rows(0, m).into_owned(), vw.rows(m, n).into_owned());
                let xd = match device.upload(&x, precision) {
                    // Long rows on the device with 4 KiB bindings: no row fits.
                    Err(Error::TooLargeForGpu { .. }) if d > 100 => continue,
                    xd => xd.unwrap(),
                };
                let (zd, vwd) = (device.upload(&z, precision).unwrap(), device.upload(&vw, precision).unwrap());
                let (vd, wd) = (vwd.rows(0, m).unwrap(), vwd.rows(m, n).unwrap());
                for (kernel, scale) in kernels() {
                    // Signed sums over m (or n) terms cancel, and the tuner's
                    // variant may use the expanded distance form: 10x the
                    // entry tolerance, as tests/gpu/variants.rs allows its matvecs.
                    let tol = 10.0 * tolerance(precision) * scale;
                    let k = Device::Cpu.kernel_matrix(&kernel, &x, &z).unwrap();
                    let (want, want_t) = (&k * &v, k.transpose() * &w);
                    // Outputs: rows 0..n and n..n+m of one matrix, each call added twice.
                    let out = device.zeros(n + m, c, precision).unwrap();
                    let (o, ot) = (out.rows(0, n).unwrap(), out.rows(n, m).unwrap());
                    for _ in 0..2 {
                        device.resident_kernel_matvec_pair_into(&kernel, &xd, &zd, &vd, &wd, &o, &ot, true).unwrap();
                    }
                    let got = device.to_host(&out).unwrap() / 2.0;
                    let what = format!("{} {precision:?} {kernel:?} {n}x{m}x{d} c={c}", device.describe());
                    assert!(relative_frobenius_error(&got.rows(0, n).into_owned(), &want) <= tol, "{what}: K V");
                    assert!(relative_frobenius_error(&got.rows(n, m).into_owned(), &want_t) <= tol, "{what}: K^T W");
                    // Without accumulation the outputs are overwritten.
                    device.resident_kernel_matvec_pair_into(&kernel, &xd, &zd, &vd, &wd, &o, &ot, false).unwrap();
                    let once = device.to_host(&out).unwrap();
                    assert!(relative_frobenius_error(&once.rows(n, m).into_owned(), &want_t) <= tol, "{what}: K^T W, overwritten");
                }
                // Misuse: overlapping outputs, an output sharing an operand, wrong shapes.
                let out = device.zeros(n + m, c, precision).unwrap();
                let kernel = Kernel::rbf(0.5).unwrap();
                let overlapping = device.resident_kernel_matvec_pair_into(&kernel, &xd, &zd, &vd, &wd, &out.rows(0, n).unwrap(), &out.rows(1, m).unwrap(), false);
                assert!(matches!(overlapping, Err(Error::InvalidParameter { .. })), "{overlapping:?}");
                let aliased = device.resident_kernel_matvec_pair_into(&kernel, &xd, &zd, &vd, &wd, &vwd.rows(m, n).unwrap(), &out.rows(n, m).unwrap(), false);
                assert!(matches!(aliased, Err(Error::InvalidParameter { .. })), "{aliased:?}");
                let shapes = device.resident_kernel_matvec_pair_into(&kernel, &xd, &zd, &wd, &vd, &out.rows(0, n).unwrap(), &out.rows(n, m).unwrap(), false);
                assert!(shapes.is_err() || n == m, "{shapes:?}");
            }
        }
    }
}

#[test]
fn row_views_are_blocks_of_samples() {
    let mut rng = rng();
    for device in devices().into_iter().chain([Device::Cpu]) {
        for precision in precisions(&device) {
            let x = random_matrix(&mut rng, 700, 6);
            let xd = device.upload(&x, precision).unwrap();
            let view = xd.rows(123, 400).unwrap();
            assert_eq!(view.shape(), (400, 6));
            let got = device.to_host(&view).unwrap();
            let want = x.rows(123, 400).into_owned();
            assert!(relative_frobenius_error(&got, &want) <= tolerance(precision));
            // A product of a view reads only its rows.
            let k = Kernel::rbf(0.5).unwrap();
            let kv = device.to_host(&device.resident_kernel_matrix(&k, &view, &xd.rows(0, 50).unwrap()).unwrap()).unwrap();
            let want = Device::Cpu.kernel_matrix(&k, &want, &x.rows(0, 50).into_owned()).unwrap();
            assert!(relative_frobenius_error(&kv, &want) <= tolerance(precision));
            assert!(matches!(xd.rows(650, 51), Err(Error::IndexOutOfRange { .. })));
            assert!(matches!(xd.rows(0, 0), Err(Error::IndexOutOfRange { .. })));
        }
    }
}

#[test]
fn a_pipeline_of_resident_operations_moves_only_what_it_is_asked_for() {
    let Some(device) = gpu_device(GpuOptions::default()) else { return };
    let mut rng = rng();
    let (n, m, d) = (500, 40, 8);
    let x = random_matrix(&mut rng, n, d);
    let z = random_matrix(&mut rng, m, d);
    device.reset_transfer_stats();
    let xd = device.upload(&x, Precision::F64).unwrap();
    let zd = device.upload(&z, Precision::F64).unwrap();
    let after_upload = device.transfer_stats();
    assert_eq!(after_upload.host_to_device_bytes, ((n + m) * d * 8) as u64);
    assert_eq!(after_upload.device_to_host_bytes, 0);
    // K(X, Z), then K^T K (m x m), then the row norms of K: nothing comes back.
    let k = device.resident_kernel_matrix(&Kernel::rbf(0.2).unwrap(), &xd, &zd).unwrap();
    let ktk = device.resident_matmul(&k, &k, MatrixProduct::AtB).unwrap();
    let norms = device.resident_row_squared_norms(&k).unwrap();
    let mid = device.transfer_stats();
    assert_eq!(mid.device_to_host_bytes, 0, "no read-back inside a resident pipeline");
    // Only the descriptors of the three operations went up, no data.
    assert_eq!(mid.host_to_device_bytes, after_upload.host_to_device_bytes);
    assert_eq!(mid.uploads, 2);
    assert!(mid.descriptor_bytes > 0 && mid.descriptor_bytes < 4096);
    assert!(mid.dispatches >= 3 && mid.submissions >= 3);
    let ktk_host = device.to_host(&ktk).unwrap();
    let norms_host = device.to_host_vector(&norms).unwrap();
    let end = device.transfer_stats();
    assert_eq!(end.device_to_host_bytes, ((m * m + n) * 8) as u64);
    let kh = Device::Cpu.kernel_matrix(&Kernel::rbf(0.2).unwrap(), &x, &z).unwrap();
    assert!(relative_frobenius_error(&ktk_host, &(kh.transpose() * &kh)) <= 1e-12);
    assert!((norms_host - DVector::from_fn(n, |i, _| kh.row(i).norm_squared())).amax() <= 1e-12);
    device.reset_transfer_stats();
    assert_eq!(device.transfer_stats(), Default::default());
}

#[test]
fn misuse_gives_typed_errors() {
    let Some(device) = gpu_device(GpuOptions::default()) else { return };
    let Some(other) = gpu_device(GpuOptions::default()) else { return };
    let a = DMatrix::from_element(4, 3, 1.0);
    let ad = device.upload(&a, Precision::F32).unwrap();
    let a64 = device.upload(&a, Precision::F64).unwrap();
    let foreign = other.upload(&a, Precision::F32).unwrap();
    assert!(matches!(device.resident_matmul(&ad, &a64, MatrixProduct::ABt), Err(Error::PrecisionMismatch { .. })));
    assert!(matches!(device.resident_matmul(&ad, &foreign, MatrixProduct::ABt), Err(Error::DeviceMismatch)));
    assert!(matches!(device.to_host(&foreign), Err(Error::DeviceMismatch)));
    assert!(matches!(Device::Cpu.to_host(&ad), Err(Error::DeviceMismatch)));
    assert!(matches!(device.resident_matmul(&ad, &ad, MatrixProduct::AB), Err(Error::DimensionMismatch { .. })));
    let out = device.resident_matmul(&ad, &ad, MatrixProduct::ABt).unwrap();
    assert!(matches!(device.resident_matmul_into(&out, &out, MatrixProduct::AB, &out, false), Err(Error::InvalidParameter { .. })));
    let nan = DMatrix::from_element(2, 2, f64::NAN);
    assert!(matches!(device.upload(&nan, Precision::F32), Err(Error::NonFinite { .. })));
    // Finite f64 beyond the f32 range: an error on every f32 path, fine in f64.
    let huge = DMatrix::from_element(2, 2, 1e200);
    assert!(matches!(device.upload(&huge, Precision::F32), Err(Error::NotRepresentable { .. })));
    assert!(matches!(Device::Cpu.upload(&huge, Precision::F32), Err(Error::NotRepresentable { .. })));
    assert!(matches!(device.kernel_matrix(&Kernel::laplacian(1.0).unwrap(), &huge, &huge), Err(Error::NotRepresentable { .. })));
    assert!(matches!(device.matmul(&huge, &huge, MatrixProduct::AB), Err(Error::NotRepresentable { .. })));
    assert!(device.upload(&huge, Precision::F64).is_ok());
    assert!(matches!(device.resident_kernel_columns(&Kernel::linear(), &ad, &[4]), Err(Error::IndexOutOfRange { .. })));
}

#[test]
fn the_cpu_path_runs_the_same_calls() {
    let mut rng = rng();
    let device = Device::Cpu;
    let x = random_matrix(&mut rng, 50, 4);
    let xd = device.upload(&x, Precision::F64).unwrap();
    let g = device.to_host(&device.resident_matmul(&xd, &xd, MatrixProduct::AtB).unwrap()).unwrap();
    assert!(relative_frobenius_error(&g, &(x.transpose() * &x)) <= 1e-14);
    let out = device.zeros(4, 4, Precision::F64).unwrap();
    device.resident_matmul_into(&xd, &xd, MatrixProduct::AtB, &out, false).unwrap();
    device.resident_matmul_into(&xd, &xd, MatrixProduct::AtB, &out, true).unwrap();
    assert!(relative_frobenius_error(&device.to_host(&out).unwrap(), &(x.transpose() * &x * 2.0)) <= 1e-14);
    assert_eq!(device.transfer_stats(), Default::default());
}

#[test]
fn kernel_operator_applies_columns_diagonal_and_materialises_like_the_cpu() {
    let mut rng = rng();
    let (n, m, d) = (230, 170, 5);
    let x = random_matrix(&mut rng, n, d);
    let z = random_matrix(&mut rng, m, d);
    let v = random_matrix(&mut rng, m, 2);
    let kernel = Kernel::laplacian(0.7).unwrap();
    let reference = Device::Cpu.kernel_matrix(&kernel, &x, &z).unwrap();
    for device in devices().into_iter().chain([Device::Cpu]) {
        let precision = device.best_precision();
        let tol = tolerance(precision);
        let op = gramian::KernelOperator::new(&device, kernel, &x, &z, precision).unwrap();
        assert_eq!((op.nrows(), op.ncols()), (n, m));
        let kv = op.apply(&v).unwrap();
        assert!(relative_frobenius_error(&kv, &(&reference * &v)) <= tol, "{}", device.describe());
        let cols = device.to_host(&op.columns(&[3, 0, 169]).unwrap()).unwrap();
        for (t, j) in [3usize, 0, 169].into_iter().enumerate() {
            assert!((cols.column(t) - reference.column(j)).amax() <= tol);
        }
        let full = device.to_host(&op.materialise().unwrap()).unwrap();
        assert!(relative_frobenius_error(&full, &reference) <= tol);
        assert!(matches!(op.diagonal(), Err(Error::InvalidParameter { .. })));
        let sq = gramian::KernelOperator::square(&device, Kernel::polynomial(0.3, 1.0, 2).unwrap(), &x, precision).unwrap();
        let want = Kernel::polynomial(0.3, 1.0, 2).unwrap().diagonal(&x).unwrap();
        assert!((sq.diagonal().unwrap() - &want).amax() <= tol * want.amax());
        // Matrix-free Lanczos on the operator: the top eigenvalues of K(X, X).
        let rbf = gramian::KernelOperator::square(&device, Kernel::rbf(0.5).unwrap(), &x, precision).unwrap();
        let top = gramian::eksvd::eigensolver::largest_lanczos(n, 3, |w| rbf.apply(w), 1e-9, 200, 1).unwrap();
        let dense = gramian::linalg::symmetric_eigenvalues(&Device::Cpu.kernel_matrix_symmetric(&Kernel::rbf(0.5).unwrap(), &x).unwrap()).unwrap();
        let mut sorted: Vec<f64> = dense.iter().copied().collect();
        sorted.sort_by(|a, b| b.partial_cmp(a).unwrap());
        for k in 0..3 {
            assert!((top.values[k] - sorted[k]).abs() <= 1e-6 * sorted[0].max(tol * 1e3), "{} eigenvalue {k}", device.describe());
        }
    }
}

#[test]
fn elementwise_maps_and_row_sums_match_cpu() {
    let mut rng = rng();
    for device in devices() {
        for precision in precisions(&device) {
            let tol = tolerance(precision);
            // Arguments up to |x| ~ 1000 exercise the cosine's range reduction.
            let x = random_matrix(&mut rng, 301, 7) * 900.0;
            let y = random_matrix(&mut rng, 301, 7);
            let phases = random_matrix(&mut rng, 1, 7) * 3.0;
            let (xd, yd, pd) = (device.upload(&x, precision).unwrap(), device.upload(&y, precision).unwrap(), device.upload(&phases, precision).unwrap());
            let cos = device.to_host(&device.resident_cosine_features(&xd, &pd, 0.5).unwrap()).unwrap();
            // f32 rounds x itself by up to 3e-5 at |x| = 900: compare with the rounded input.
            let round = |m: &DMatrix<f64>| if precision == Precision::F32 { m.map(|v| v as f32 as f64) } else { m.clone() };
            let (xr, pr) = (round(&x), round(&phases));
            let cos_tol = if precision == Precision::F32 { 1e-4 } else { 1e-13 };
            for i in 0..301 {
                for j in 0..7 {
                    let want = 0.5 * (xr[(i, j)] + pr[(0, j)]).cos();
                    assert!((cos[(i, j)] - want).abs() <= cos_tol, "{} {precision:?} cos({}) = {} vs {want}", device.describe(), xr[(i, j)], cos[(i, j)]);
                }
            }
            let had = device.to_host(&device.resident_hadamard(&xd, &yd).unwrap()).unwrap();
            assert!(relative_frobenius_error(&had, &x.component_mul(&y)) <= tol);
            let sums = device.to_host_vector(&device.resident_row_sums(&yd).unwrap()).unwrap();
            assert!((sums - DVector::from_fn(301, |i, _| y.row(i).sum())).amax() <= tol * 10.0);
            assert!(matches!(device.resident_hadamard(&xd, &pd), Err(Error::DimensionMismatch { .. })));
        }
    }
}

#[test]
fn combinations_and_identity_shifts_match_cpu() {
    // `alpha X + beta Y + gamma I` on square and tall matrices; with the
    // 4 KiB bindings the matrices span many row blocks, so the diagonal of a
    // later block is found from its first row in the whole matrix.
    let mut rng = rng();
    for device in devices().into_iter().chain([Device::Cpu]) {
        for precision in precisions(&device) {
            let tol = tolerance(precision);
            for (rows, cols) in [(1, 1), (97, 97), (150, 40)] {
                let x = random_matrix(&mut rng, rows, cols);
                let y = random_matrix(&mut rng, rows, cols);
                let (xd, yd) = (device.upload(&x, precision).unwrap(), device.upload(&y, precision).unwrap());
                for (alpha, beta, gamma) in [(0.5, -2.0, 0.0), (-1.5, 0.0, 3.0), (2.0, 0.25, -1.0), (0.0, 0.0, 1.0)] {
                    let got = device.to_host(&device.resident_combine(alpha, &xd, beta, &yd, gamma).unwrap()).unwrap();
                    let want = DMatrix::from_fn(rows, cols, |i, j| alpha * x[(i, j)] + beta * y[(i, j)] + if i == j { gamma } else { 0.0 });
                    let error = (&got - &want).amax();
                    assert!(error <= tol * 4.0, "{} {precision:?} {rows}x{cols} ({alpha}, {beta}, {gamma}): {error:e}", device.describe());
                }
            }
            let x = device.upload(&random_matrix(&mut rng, 5, 5), precision).unwrap();
            let wrong = device.upload(&random_matrix(&mut rng, 5, 4), precision).unwrap();
            assert!(matches!(device.resident_combine(1.0, &x, 1.0, &wrong, 0.0), Err(Error::DimensionMismatch { .. })));
            assert!(matches!(device.resident_combine(f64::NAN, &x, 1.0, &x, 0.0), Err(Error::InvalidParameter { .. })));
        }
    }
}

#[test]
fn long_products_split_their_depth_and_sum_every_chunk() {
    // Depths of 20,000 and more with small outputs take the split-K path
    // (partial products summed by a reduction dispatch); a lost or doubled
    // chunk changes the result by a whole chunk's share.
    let mut rng = rng();
    let Some(device) = gpu_device(GpuOptions::default()) else { return };
    for precision in precisions(&device) {
        for &(n, r) in &[(20_000usize, 3usize), (33_333, 17), (41_000, 70)] {
            let phi = random_matrix(&mut rng, n, r);
            let w = DVector::from_fn(n, |i, _| 1.0 + (i as f64 * 0.37).sin());
            let (pd, wd) = (device.upload(&phi, precision).unwrap(), device.upload_vector(&w, precision).unwrap());
            device.reset_transfer_stats();
            let got = device.to_host(&device.resident_weighted_gram(&pd, &wd).unwrap()).unwrap();
            assert!(device.transfer_stats().dispatches > 2, "expected a split product");
            let mut reference = DMatrix::zeros(r, r);
            for i in 0..n {
                let row = phi.row(i);
                reference += row.transpose() * row * w[i];
            }
            let err = relative_frobenius_error(&got, &reference);
            assert!(err <= tolerance(precision) * 10.0, "{precision:?} weighted gram {n}x{r}: {err:e}");
            let v = random_matrix(&mut rng, n, 2);
            let vd = device.upload(&v, precision).unwrap();
            let out = device.resident_matmul(&pd, &vd, MatrixProduct::AtB).unwrap();
            device.resident_matmul_into(&pd, &vd, MatrixProduct::AtB, &out, true).unwrap();
            let err = relative_frobenius_error(&device.to_host(&out).unwrap(), &(phi.transpose() * &v * 2.0));
            assert!(err <= tolerance(precision) * 10.0, "{precision:?} accumulated A^T B {n}x{r}: {err:e}");
        }
    }
}

#[test]
fn outputs_can_be_written_in_place_into_row_views() {
    let mut rng = rng();
    for device in devices().into_iter().chain([Device::Cpu]) {
        let precision = device.best_precision();
        let tol = tolerance(precision);
        let x = random_matrix(&mut rng, 90, 4);
        let z = random_matrix(&mut rng, 30, 4);
        let (xd, zd) = (device.upload(&x, precision).unwrap(), device.upload(&z, precision).unwrap());
        let kernel = Kernel::rbf(0.6).unwrap();
        // K(X, Z) written block by block into one resident 90 x 30 output.
        let out = device.zeros(90, 30, precision).unwrap();
        for start in [0usize, 40, 70] {
            let rows = if start == 70 { 20 } else { 40.min(70 - start) };
            device.resident_kernel_matrix_into(&kernel, &xd.rows(start, rows).unwrap(), &zd, &out.rows(start, rows).unwrap()).unwrap();
        }
        let want = Device::Cpu.kernel_matrix(&kernel, &x, &z).unwrap();
        assert!(relative_frobenius_error(&device.to_host(&out).unwrap(), &want) <= tol, "{}", device.describe());
        // Two halves of the samples accumulate into one weighted Gram.
        let w = device.upload_vector(&DVector::from_element(90, 0.5), precision).unwrap();
        let g = device.zeros(4, 4, precision).unwrap();
        device.resident_weighted_gram_into(&xd.rows(0, 45).unwrap(), &w.rows(0, 45).unwrap(), &g, false).unwrap();
        device.resident_weighted_gram_into(&xd.rows(45, 45).unwrap(), &w.rows(45, 45).unwrap(), &g, true).unwrap();
        assert!(relative_frobenius_error(&device.to_host(&g).unwrap(), &(x.transpose() * &x * 0.5)) <= tol);
        assert!(matches!(device.resident_kernel_matrix_into(&kernel, &xd, &zd, &xd), Err(Error::DimensionMismatch { .. }) | Err(Error::InvalidParameter { .. })));
    }
}

#[test]
fn a_device_budget_turns_oversized_allocations_into_out_of_memory() {
    // 1 MiB budget: two 512 KiB matrices fit, a third byte does not; freeing
    // one makes room again.
    let Some(device) = gpu_device(GpuOptions { max_device_bytes: Some(1 << 20), ..Default::default() }) else { return };
    let Device::Gpu(ctx) = &device else { panic!("gpu_device returned the CPU") };
    let a = device.zeros(256, 256, Precision::F64).unwrap();
    let b = device.zeros(256, 256, Precision::F64).unwrap();
    assert_eq!(ctx.device_bytes_held(), 1 << 20);
    assert!(matches!(device.zeros(1, 1, Precision::F64), Err(Error::OutOfMemory { .. })));
    let view = a.rows(0, 10).unwrap();
    drop(a);
    assert_eq!(ctx.device_bytes_held(), 1 << 20, "a view keeps its storage alive");
    drop(view);
    assert_eq!(ctx.device_bytes_held(), 1 << 19);
    let c = device.zeros(256, 256, Precision::F64).unwrap();
    drop((b, c));
    assert_eq!(ctx.device_bytes_held(), 0);
    // Without a budget option a software adapter is held to the host's
    // memory: 8 TiB is refused at once instead of creating 65536 buffers.
    let Some(device) = gpu_device(GpuOptions::default()) else { return };
    let Device::Gpu(ctx) = &device else { panic!("gpu_device returned the CPU") };
    if ctx.adapter().is_software {
        let t = std::time::Instant::now();
        assert!(matches!(device.zeros(1 << 20, 1 << 20, Precision::F64), Err(Error::OutOfMemory { .. })));
        assert!(t.elapsed().as_secs() < 5);
    }
}
