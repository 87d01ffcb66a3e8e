//! Every method's fit on the GPU against the same fit on the CPU (lavapipe
//! in CI), and what a fit moves between host and device.
//!
//! Tolerances: the GPU paths of these fits compute in `f64` (lavapipe and
//! NVIDIA's Vulkan driver have `SHADER_F64`), so results agree to rounding:
//! - PSD density: primal objective 1e-8 relative, both gaps <= the tolerance.
//! - mklaren: training predictions 1e-8 relative (max-norm).
//! - Dual eKSVD, matrix-free Lanczos on a kernel-function coupling:
//!   eigenvalues 1e-8 relative, score vectors equal up to sign to 1e-6.

mod common;

use common::{gpu_device, rng};
use gramian::eksvd::{solve_dual, CouplingMatrix, Eigensolver, MultiSource};
use gramian::mklaren::MklarenParams;
use gramian::psd::{BaseMeasure, DensityParams, SolverOptions};
use gramian::{Device, GpuOptions, Kernel};
use nalgebra::{DMatrix, DVector};
use rand::Rng;

fn gaussian_matrix(rng: &mut impl Rng, rows: usize, cols: usize) -> DMatrix<f64> {
    use rand_distr::{Distribution, StandardNormal};
    DMatrix::from_fn(rows, cols, |_, _| StandardNormal.sample(rng))
}

#[test]
fn psd_density_fit_on_the_gpu_matches_the_cpu_and_moves_o_n_per_iteration() {
    let Some(gpu) = gpu_device(GpuOptions::default()) else { return };
    let mut rng = rng();
    let (n, d, m) = (400, 3, 30);
    let x = gaussian_matrix(&mut rng, n, d) * 0.5;
    let params = DensityParams::new(0.8)
        .regularisation(1e-3, 1e-4)
        .base_measure(BaseMeasure::isotropic_gaussian(d, 2.0).unwrap())
        .nystrom(m, 3)
        .solver(SolverOptions { tolerance: 1e-7, max_iterations: 2000, check_every: 2 });
    let cpu = params.fit(&Device::Cpu, &x).unwrap();
    gpu.reset_transfer_stats();
    let fitted = params.fit(&gpu, &x).unwrap();
    let stats = gpu.transfer_stats();
    let (pc, pg) = (cpu.report().primal, fitted.report().primal);
    assert!((pc - pg).abs() <= 1e-8 * pc.abs().max(1.0), "primal cpu {pc} gpu {pg}");
    assert!(fitted.report().gap <= 1e-7 && cpu.report().gap <= 1e-7);
    assert!((fitted.integral().unwrap() - 1.0).abs() < 1e-9);
    // Density values on fresh points agree too (evaluated on the device).
    let probe = gaussian_matrix(&mut rng, 50, d) * 0.5;
    let (dc, dg) = (cpu.density(&Device::Cpu, &probe).unwrap(), fitted.density(&gpu, &probe).unwrap());
    assert!((&dc - &dg).amax() <= 1e-7 * dc.amax(), "densities differ by {}", (&dc - &dg).amax());
    // Traffic: X once (n d), then per evaluation O(n + m^2) numbers; never
    // the n x m features.
    let iterations = fitted.report().iterations as u64;
    let per_iteration_bound = 8 * (4 * (n + m * m) as u64) * 4;
    let x_bytes = (n * d * 8) as u64;
    assert!(stats.host_to_device_bytes >= x_bytes);
    assert!(
        stats.host_to_device_bytes <= x_bytes + (iterations + 10) * per_iteration_bound,
        "{} bytes up for {} iterations",
        stats.host_to_device_bytes,
        iterations
    );
    assert!(stats.device_to_host_bytes <= (iterations + 10) * per_iteration_bound);
}

#[test]
fn mklaren_fit_on_the_gpu_matches_the_cpu_and_uploads_x_once() {
    let Some(gpu) = gpu_device(GpuOptions::default()) else { return };
    let mut rng = rng();
    let (n, d) = (300, 4);
    let x = DMatrix::<f64>::from_fn(n, d, |_, _| rng.random_range(-1.0..1.0));
    let y = DVector::from_fn(n, |i, _| (2.0 * x[(i, 0)]).sin() + x[(i, 1)]);
    let kernels = [Kernel::rbf(0.3).unwrap(), Kernel::rbf(3.0).unwrap()];
    let params = MklarenParams::new(12).lookahead(4);
    let cpu = params.fit(&Device::Cpu, &kernels, &[&x, &x], &y).unwrap();
    gpu.reset_transfer_stats();
    let fitted = params.fit(&gpu, &kernels, &[&x, &x], &y).unwrap();
    let stats = gpu.transfer_stats();
    // Both kernels read the same X: one upload of n d f64 for the whole fit.
    assert_eq!(stats.uploads, 1, "{stats:?}");
    assert_eq!(stats.host_to_device_bytes, (n * d * 8) as u64);
    // Columns come back: at most (rank + look-ahead refreshes) columns of n.
    assert!(stats.device_to_host_bytes <= (12 * 6 * 2 * n * 8) as u64, "{stats:?}");
    let (pc, pg) = (cpu.predict(&Device::Cpu, &[&x, &x]).unwrap(), fitted.predict(&gpu, &[&x, &x]).unwrap());
    let err = (&pc - &pg).amax() / pc.amax();
    assert!(err <= 1e-8, "predictions differ by {err:e} (relative)");
}

#[test]
fn matrix_free_dual_eksvd_on_the_gpu_matches_the_cpu_and_uploads_each_source_once() {
    let Some(gpu) = gpu_device(GpuOptions::default()) else { return };
    let mut rng = rng();
    let (n, d) = (120, 3);
    let shared = gaussian_matrix(&mut rng, n, d);
    let sources: Vec<DMatrix<f64>> = (0..3).map(|_| &shared + gaussian_matrix(&mut rng, n, d) * 0.3).collect();
    let data = MultiSource::paired(sources).unwrap();
    let coupling = CouplingMatrix::from_kernel(Kernel::rbf(0.3).unwrap(), &data).unwrap();
    let solver = Eigensolver::Lanczos { tolerance: 1e-10, max_restarts: 300 };
    let cpu = solve_dual(&Device::Cpu, &coupling, 3, &solver, 7).unwrap();
    gpu.reset_transfer_stats();
    let fitted = solve_dual(&gpu, &coupling, 3, &solver, 7).unwrap();
    let stats = gpu.transfer_stats();
    for k in 0..3 {
        let (a, b) = (cpu.eigenvalues[k], fitted.eigenvalues[k]);
        assert!((a - b).abs() <= 1e-8 * a.abs(), "eigenvalue {k}: cpu {a} gpu {b}");
        let (u, v) = (&cpu.alphas[0].column(k), &fitted.alphas[0].column(k));
        let sign = if u.dot(v) < 0.0 { -1.0 } else { 1.0 };
        assert!((u - v * sign).amax() <= 1e-6 * u.amax(), "component {k} differs");
    }
    // Uploads: the 3 sources once, then one Krylov block per product.
    let sources_bytes = (3 * n * d * 8) as u64;
    let products = stats.uploads - 3;
    assert!(products >= 1);
    assert_eq!(stats.host_to_device_bytes, sources_bytes + products * (3 * n * 8) as u64, "{stats:?}");
}
