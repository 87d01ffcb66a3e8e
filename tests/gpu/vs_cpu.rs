//! Every GPU operation against the CPU f64 path, on fresh random inputs over
//! awkward shapes (1, primes, non-multiples of the 128-wide tile, n != m), and
//! with a forced small tile limit so outputs span many tiles.
//!
//! Tolerance: relative Frobenius error <= 1e-5 for products and bounded
//! kernels (f32 has 24-bit mantissas; sums of up to a few hundred terms of
//! inputs in [-1, 1) lose a few more bits), 1e-4 for the polynomial kernel
//! (degree 3 amplifies the relative error of its argument threefold).

use crate::common;

use common::{gpu_device, random_matrix, rng};
use gramian::linalg::relative_frobenius_error;
use gramian::{Device, GpuOptions, Kernel, MatrixProduct};
use nalgebra::DMatrix;

const SHAPES: &[(usize, usize, usize)] = &[(1, 1, 1), (1, 7, 3), (13, 1, 5), (67, 31, 1), (97, 131, 17), (130, 64, 65), (257, 193, 33), (300, 129, 7)];

fn kernels() -> Vec<(Kernel, f64)> {
    vec![
        (Kernel::rbf(0.3).unwrap(), 1e-5),
        (Kernel::laplacian(0.4).unwrap(), 1e-5),
        (Kernel::linear(), 1e-5),
        (Kernel::polynomial(0.2, 1.0, 3).unwrap(), 1e-4),
        (Kernel::sigmoid(0.1, -0.2).unwrap(), 1e-5),
    ]
}

fn check_kernel_matrices(gpu: &Device) {
    let mut rng = rng();
    for &(n, m, d) in SHAPES {
        let x = random_matrix(&mut rng, n, d);
        let z = random_matrix(&mut rng, m, d);
        for (kernel, tol) in kernels() {
            let reference = Device::Cpu.kernel_matrix(&kernel, &x, &z).unwrap();
            let got = gpu.kernel_matrix(&kernel, &x, &z).unwrap();
            let err = relative_frobenius_error(&got, &reference);
            assert!(err <= tol, "{kernel:?} n={n} m={m} d={d}: rel. Frobenius error {err:e} > {tol:e}");
        }
    }
}

#[test]
fn kernel_matrices_match_cpu() {
    let Some(gpu) = gpu_device(GpuOptions::default()) else { return };
    check_kernel_matrices(&gpu);
}

#[test]
fn kernel_matrices_match_cpu_with_forced_tiling() {
    // 4 KiB bindings: at most 1024 floats per tile, so (257 x 193) outputs
    // need dozens of tiles and d = 65 needs depth chunks that accumulate.
    let Some(gpu) = gpu_device(GpuOptions { max_tile_bytes: Some(4096), ..Default::default() }) else { return };
    check_kernel_matrices(&gpu);
}

#[test]
fn f32_inputs_work_on_both_paths() {
    let Some(gpu) = gpu_device(GpuOptions::default()) else { return };
    let mut rng = rng();
    let x = random_matrix(&mut rng, 45, 9).map(|v| v as f32);
    let z = random_matrix(&mut rng, 38, 9).map(|v| v as f32);
    let kernel = Kernel::rbf(0.5).unwrap();
    let cpu = Device::Cpu.kernel_matrix(&kernel, &x, &z).unwrap();
    let got = gpu.kernel_matrix(&kernel, &x, &z).unwrap();
    assert!(relative_frobenius_error(&got, &cpu) < 1e-5);
}

fn check_products(gpu: &Device) {
    let mut rng = rng();
    for &(n, m, k) in SHAPES {
        let a = random_matrix(&mut rng, n, k);
        let b = random_matrix(&mut rng, k, m);
        let bt = b.transpose();
        let at = a.transpose();
        let reference = &a * &b;
        for (got, what) in [
            (gpu.matmul(&a, &b, MatrixProduct::AB).unwrap(), "AB"),
            (gpu.matmul(&a, &bt, MatrixProduct::ABt).unwrap(), "ABt"),
            (gpu.matmul(&at, &b, MatrixProduct::AtB).unwrap(), "AtB"),
        ] {
            let err = relative_frobenius_error(&got, &reference);
            assert!(err <= 1e-5, "{what} {n}x{k} * {k}x{m}: error {err:e}");
        }
        // Gram matrices of a tall Phi (n samples x k features) and its outer product.
        let gram_ref = a.transpose() * &a;
        let err = relative_frobenius_error(&gpu.gram(&a).unwrap(), &gram_ref);
        assert!(err <= 1e-5, "gram {n}x{k}: error {err:e}");
        let outer_ref = &a * a.transpose();
        let err = relative_frobenius_error(&gpu.outer_gram(&a).unwrap(), &outer_ref);
        assert!(err <= 1e-5, "outer gram {n}x{k}: error {err:e}");
    }
}

#[test]
fn products_and_grams_match_cpu() {
    let Some(gpu) = gpu_device(GpuOptions::default()) else { return };
    check_products(&gpu);
}

#[test]
fn products_and_grams_match_cpu_with_forced_tiling() {
    let Some(gpu) = gpu_device(GpuOptions { max_tile_bytes: Some(4096), ..Default::default() }) else { return };
    check_products(&gpu);
}

#[test]
fn gram_over_many_samples_splits_the_sum() {
    // Phi^T Phi with n = 3001 samples and a 4 KiB limit: the sum over samples
    // is split into depth chunks accumulated on the GPU.
    let Some(gpu) = gpu_device(GpuOptions { max_tile_bytes: Some(4096), ..Default::default() }) else { return };
    let mut rng = rng();
    let phi = random_matrix(&mut rng, 3001, 11);
    let err = relative_frobenius_error(&gpu.gram(&phi).unwrap(), &(phi.transpose() * &phi));
    assert!(err <= 1e-5, "error {err:e}");
}

fn check_batched(gpu: &Device) {
    let mut rng = rng();
    let shapes = [(1, 1, 1), (3, 5, 2), (64, 64, 64), (65, 17, 33), (7, 130, 19), (31, 31, 97), (2, 200, 3)];
    let mats: Vec<(DMatrix<f64>, DMatrix<f64>)> =
        shapes.iter().map(|&(n, k, m)| (random_matrix(&mut rng, n, k), random_matrix(&mut rng, k, m))).collect();
    let pairs: Vec<(&DMatrix<f64>, &DMatrix<f64>)> = mats.iter().map(|(a, b)| (a, b)).collect();
    let got = gpu.batched_matmul(&pairs, MatrixProduct::AB).unwrap();
    let cpu = Device::Cpu.batched_matmul(&pairs, MatrixProduct::AB).unwrap();
    assert_eq!(got.len(), pairs.len());
    for (i, ((a, b), (g, c))) in mats.iter().zip(got.iter().zip(cpu.iter())).enumerate() {
        let reference = a * b;
        assert!(relative_frobenius_error(c, &reference) < 1e-12);
        let err = relative_frobenius_error(g, &reference);
        assert!(err <= 1e-5, "batch item {i}: error {err:e}");
    }
}

#[test]
fn batched_products_match_cpu() {
    let Some(gpu) = gpu_device(GpuOptions::default()) else { return };
    check_batched(&gpu);
}

#[test]
fn batched_products_match_cpu_with_forced_tiling() {
    // 16 KiB bindings: the batch is split into groups and the largest items
    // go through the tiled single-product path.
    let Some(gpu) = gpu_device(GpuOptions { max_tile_bytes: Some(16384), ..Default::default() }) else { return };
    check_batched(&gpu);
}

fn check_matvec(gpu: &Device) {
    let mut rng = rng();
    for &(n, m, d) in SHAPES {
        for c in [1usize, 3, 11] {
            let x = random_matrix(&mut rng, n, d);
            let z = random_matrix(&mut rng, m, d);
            let v = random_matrix(&mut rng, m, c);
            for (kernel, tol) in kernels() {
                let reference = Device::Cpu.kernel_matrix(&kernel, &x, &z).unwrap() * &v;
                let got = gpu.kernel_matvec(&kernel, &x, &z, &v).unwrap();
                let err = relative_frobenius_error(&got, &reference);
                // Signed sums over m terms cancel: allow 10x the entry tolerance.
                assert!(err <= 10.0 * tol, "{kernel:?} n={n} m={m} d={d} c={c}: error {err:e}");
            }
        }
    }
}

#[test]
fn kernel_matvec_matches_cpu() {
    let Some(gpu) = gpu_device(GpuOptions::default()) else { return };
    check_matvec(&gpu);
}

#[test]
fn kernel_matvec_matches_cpu_with_forced_tiling() {
    // 8 KiB bindings: kernel tiles of at most 2048 entries, so Z is streamed
    // in blocks and the products accumulate across them.
    let Some(gpu) = gpu_device(GpuOptions { max_tile_bytes: Some(8192), ..Default::default() }) else { return };
    check_matvec(&gpu);
}

#[test]
fn kernel_columns_and_diagonal_match_cpu() {
    let Some(gpu) = gpu_device(GpuOptions::default()) else { return };
    let mut rng = rng();
    let x = random_matrix(&mut rng, 101, 7);
    for (kernel, tol) in kernels() {
        let full = Device::Cpu.kernel_matrix(&kernel, &x, &x).unwrap();
        for i in [0usize, 50, 100] {
            let col = gpu.kernel_column_of(&kernel, &x, i).unwrap();
            let err = (col - full.column(i)).norm() / full.column(i).norm();
            assert!(err <= tol, "{kernel:?} column {i}: {err:e}");
        }
        let diag = gpu.kernel_diagonal(&kernel, &x).unwrap();
        let err = (&diag - full.diagonal()).norm() / full.diagonal().norm();
        assert!(err <= 1e-12, "{kernel:?} diagonal: {err:e}");
    }
}

#[test]
fn large_output_spans_many_tiles() {
    // 600 x 500 output = 1.2 MB of f32 with a 64 KiB limit: at least 19 tiles.
    let Some(gpu) = gpu_device(GpuOptions { max_tile_bytes: Some(65536), ..Default::default() }) else { return };
    let mut rng = rng();
    let x = random_matrix(&mut rng, 600, 24);
    let z = random_matrix(&mut rng, 500, 24);
    let kernel = Kernel::rbf(0.05).unwrap();
    let err = relative_frobenius_error(&gpu.kernel_matrix(&kernel, &x, &z).unwrap(), &Device::Cpu.kernel_matrix(&kernel, &x, &z).unwrap());
    assert!(err <= 1e-5, "error {err:e}");
}

#[test]
fn long_reductions_are_complete() {
    // Regression: with naga's forced loop bounding, lavapipe stopped long
    // shader loops early (Phi^T Phi over 8000 samples summed only 6349).
    let Some(gpu) = gpu_device(GpuOptions::default()) else { return };
    let mut rng = rng();
    let phi = random_matrix(&mut rng, 12000, 3);
    let err = relative_frobenius_error(&gpu.gram(&phi).unwrap(), &(phi.transpose() * &phi));
    assert!(err <= 1e-5, "gram over 12000 samples: error {err:e}");
    // Split-K: a 130 x 70 output (2 x 1 tiles) over 9000 samples runs as
    // depth chunks of one batched dispatch summed on the host.
    let a = random_matrix(&mut rng, 9000, 130);
    let b = random_matrix(&mut rng, 9000, 70);
    let err = relative_frobenius_error(&gpu.matmul(&a, &b, MatrixProduct::AtB).unwrap(), &(a.transpose() * &b));
    assert!(err <= 1e-5, "A^T B over 9000 samples: error {err:e}");
    // (A fused matvec shader returned wrong sums here on lavapipe from about
    // 50 passes of its point loop on; the tile-then-product path does not.)
    let x = random_matrix(&mut rng, 64, 4);
    let z = random_matrix(&mut rng, 4800, 4);
    let v = random_matrix(&mut rng, 4800, 2);
    let kernel = Kernel::rbf(0.5).unwrap();
    let reference = Device::Cpu.kernel_matrix(&kernel, &x, &z).unwrap() * &v;
    let err = relative_frobenius_error(&gpu.kernel_matvec(&kernel, &x, &z, &v).unwrap(), &reference);
    assert!(err <= 1e-4, "matvec over 4800 points: error {err:e}");
}

#[test]
fn rbf_is_accurate_far_from_the_origin() {
    // Data at 1000 with unit spread: rounded to f32 as it is, the differences
    // keep only about 4 digits; the host centres it in f64 first.
    let Some(gpu) = gpu_device(GpuOptions::default()) else { return };
    let mut rng = rng();
    let x = random_matrix(&mut rng, 70, 5).add_scalar(1000.0);
    let z = random_matrix(&mut rng, 90, 5).add_scalar(1000.0);
    let kernel = Kernel::rbf(0.5).unwrap();
    let err = relative_frobenius_error(&gpu.kernel_matrix(&kernel, &x, &z).unwrap(), &Device::Cpu.kernel_matrix(&kernel, &x, &z).unwrap());
    assert!(err <= 1e-5, "error {err:e}");
}

#[test]
fn rows_and_outputs_wider_than_a_binding_are_cut() {
    // 256-byte bindings hold 64 floats: rows of 80 features are uploaded in
    // two depth parts whose statistics accumulate, and outputs of 70 columns
    // are computed in column bands.
    let Some(gpu) = gpu_device(GpuOptions { max_tile_bytes: Some(256), ..Default::default() }) else { return };
    let mut rng = rng();
    let x = random_matrix(&mut rng, 6, 80);
    let z = random_matrix(&mut rng, 70, 80);
    for (kernel, tol) in kernels() {
        let reference = Device::Cpu.kernel_matrix(&kernel, &x, &z).unwrap();
        let err = relative_frobenius_error(&gpu.kernel_matrix(&kernel, &x, &z).unwrap(), &reference);
        assert!(err <= tol, "{kernel:?}: error {err:e}");
    }
    let reference = &x * z.transpose();
    let zt = z.transpose();
    for (got, what) in [(gpu.matmul(&x, &z, MatrixProduct::ABt).unwrap(), "ABt"), (gpu.matmul(&x, &zt, MatrixProduct::AB).unwrap(), "AB")] {
        let err = relative_frobenius_error(&got, &reference);
        assert!(err <= 1e-5, "{what}: error {err:e}");
    }
    let got = gpu.batched_matmul(&[(&x, &z), (&z, &z)], MatrixProduct::ABt).unwrap();
    assert!(relative_frobenius_error(&got[0], &reference) <= 1e-5);
    assert!(relative_frobenius_error(&got[1], &(&z * z.transpose())) <= 1e-5);
}
