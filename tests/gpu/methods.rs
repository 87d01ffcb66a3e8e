//! Every method's fit on the GPU against the same fit on the CPU (lavapipe
//! in CI), and what a fit moves between host and device.
//!
//! Tolerances: the GPU paths of these fits compute in `f64` (lavapipe and
//! NVIDIA's Vulkan driver have `SHADER_F64`), so results agree to rounding:
//! - PSD density: the primal objectives within the sum of the two certified
//!   duality gaps (the optimum is unique, the iterates need not be), both
//!   gaps <= the tolerance; the fitted model's density on the device = on
//!   the CPU to 1e-12 relative.
//! - mklaren: training predictions 1e-8 relative (max-norm).
//! - Dual eKSVD, matrix-free Lanczos on a kernel-function coupling:
//!   eigenvalues 1e-8 relative, score vectors equal up to sign to 1e-6.

use crate::common;

use common::{gpu_device, rng};
use gramian::eksvd::{solve_dual, CouplingMatrix, Eigensolver};
use gramian::MultiSource;
use gramian::mklaren::MklarenParams;
use gramian::psd::{BaseMeasure, DensityParams, SolverOptions};
use gramian::estimator::OnDevice;
use gramian::Error;
use gramian::{Device, GpuOptions, Kernel};
use nalgebra::{DMatrix, DVector};
use rand::Rng;
use gramian::psd::Regularisation;

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
    let params = DensityParams::new(gramian::Kernel::gaussian_with_width(0.8).unwrap()).unwrap()
        .regularisation(Regularisation::new().trace(1e-3).quadratic(1e-4))
        .base_measure(BaseMeasure::isotropic_gaussian(d, 2.0).unwrap())
        .nystrom(m, 3)
        .solver(SolverOptions { tolerance: 1e-6, max_iterations: 3000, check_every: 2 });
    gpu.reset_transfer_stats();
    let (cpu, fitted) = match (params.fit(&Device::Cpu, &x), params.fit(&gpu, &x)) {
        (Ok(c), Ok(g)) => (c, g),
        // The same solver on the same numbers: a fit that stops at its
        // budget on one device stops there on the other, at the same gap.
        (Err(Error::NotConverged { iterations: ic, gap: gc, .. }), Err(Error::NotConverged { iterations: ig, gap: gg, .. })) => {
            assert_eq!(ic, ig);
            assert!((gc - gg).abs() <= 1e-6 * gc.abs(), "gaps at the budget: cpu {gc} gpu {gg}");
            eprintln!("both fits stopped at their budget (gap {gc:e}); compared the stops");
            return;
        }
        (c, g) => panic!("cpu and gpu fits disagree: {:?} vs {:?}", c.map(|d| d.report().gap), g.map(|d| d.report().gap)),
    };
    let stats = gpu.transfer_stats();
    // Both primal objectives are within their certified gaps of the optimum.
    let (pc, pg) = (cpu.report().primal, fitted.report().primal);
    let bound = cpu.report().gap.abs() + fitted.report().gap.abs() + 1e-12 * pc.abs();
    assert!((pc - pg).abs() <= bound, "primal cpu {pc} gpu {pg}, gaps allow {bound:e}");
    assert!(fitted.report().gap <= 1e-6 && cpu.report().gap <= 1e-6);
    assert!((fitted.integral().unwrap() - 1.0).abs() < 1e-9);
    // The fitted model evaluated on the device = on the CPU (fresh points).
    let probe = gaussian_matrix(&mut rng, 50, d) * 0.5;
    let (dc, dg) = (fitted.to_device(&Device::Cpu).density(&probe).unwrap(), fitted.density(&probe).unwrap());
    assert!((&dc - &dg).amax() <= 1e-12 * dc.amax(), "densities differ by {}", (&dc - &dg).amax());
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

/// The numbers a device mklaren fit with `p` RBF kernels on one input
/// (n x d, rank K, look-ahead delta) moves: up, X once (the kernels share
/// it; their diagonals are 1, filled on the device), the starting residual
/// and direction (n + K rows), per step after the first the LAR weights and
/// the active correlation (K + 1 numbers), then the last weights (K + 1),
/// the step length 1, `R1^{-1}` (K^2) and the coefficients per kernel (K p)
/// of Eq. 18; down, per step the 16 numbers of the step's state and `H^T
/// h`, `H^T r` (2K), at the end `Q1^T Q1` and `Q1^T mu` (K (K + 1)), the p
/// kernel weights, the fit (n) and G at each kernel's pivots (K rows of C =
/// delta + 1 + K columns in all).
pub(crate) fn mklaren_traffic(n: usize, d: usize, rank: usize, delta: usize, p: usize) -> (usize, usize) {
    let up = n * d + 2 * (n + rank) + (rank - 1) * (rank + 1) + (rank + 1) + 1 + rank * rank + rank * p;
    let down = rank * (16 + 2 * rank) + rank * (rank + 1) + p + n + rank * (delta + 1 + rank);
    (up, down)
}

#[test]
fn mklaren_fit_on_the_gpu_matches_the_cpu_and_uploads_x_once() {
    let Some(gpu) = gpu_device(GpuOptions::default()) else { return };
    let mut rng = rng();
    let (n, d) = (300, 4);
    let x = DMatrix::<f64>::from_fn(n, d, |_, _| rng.random_range(-1.0..1.0));
    let y = DVector::from_fn(n, |i, _| (2.0 * x[(i, 0)]).sin() + x[(i, 1)]);
    let kernels = [Kernel::rbf(0.3).unwrap(), Kernel::rbf(3.0).unwrap()];
    let params = MklarenParams::new(12).lookahead(4).kernels(&kernels);
    let cpu = params.fit_inputs(&Device::Cpu, &[&x, &x], &y).unwrap();
    gpu.reset_transfer_stats();
    let fitted = params.fit_inputs(&gpu, &[&x, &x], &y).unwrap();
    let stats = gpu.transfer_stats();
    let (up, down) = mklaren_traffic(n, d, 12, 4, kernels.len());
    assert_eq!(stats.host_to_device_bytes, (8 * up) as u64, "{stats:?}");
    assert_eq!(stats.device_to_host_bytes, (8 * down) as u64, "{stats:?}");
    let (pc, pg) = (cpu.predict_inputs(&[&x, &x]).unwrap(), fitted.predict_inputs(&[&x, &x]).unwrap());
    let err = (&pc - &pg).amax() / pc.amax();
    // On a failure, say whether the two fits chose the same columns: a
    // different order means the GPU's kernel values moved a near-tie of the
    // pivot search (a precision question), the same order a wrong product.
    let same_order = cpu.order().len() == fitted.order().len() && cpu.order().iter().zip(fitted.order()).all(|(a, b)| (a.kernel, a.pivot) == (b.kernel, b.pivot));
    assert!(err <= 1e-8, "predictions differ by {err:e} (relative); same columns chosen: {same_order}; cpu {:?}, gpu {:?}", cpu.order().iter().map(|c| (c.kernel, c.pivot)).collect::<Vec<_>>(), fitted.order().iter().map(|c| (c.kernel, c.pivot)).collect::<Vec<_>>());
}

/// GPU fit = CPU fit at n = 2000 and n = 16000: the same columns (kernel
/// and pivot, in order) and the training predictions within 1e-8 relative
/// (max-norm); X goes up once, one wait per pivot step, and O(n) numbers
/// come down only at the end (the fit).
#[test]
fn mklaren_gpu_fit_chooses_the_cpu_pivots_at_two_sizes() {
    let Some(gpu) = gpu_device(GpuOptions::default()) else { return };
    let mut rng = rng();
    let (d, rank, lookahead) = (3usize, 8usize, 3usize);
    let kernels = [Kernel::rbf(0.3).unwrap(), Kernel::rbf(3.0).unwrap()];
    let params = MklarenParams::new(rank).lookahead(lookahead).kernels(&kernels);
    for n in [2000usize, 16000] {
        let x = DMatrix::<f64>::from_fn(n, d, |_, _| rng.random_range(-1.0..1.0));
        let y = DVector::from_fn(n, |i, _| (2.0 * x[(i, 0)]).sin() + x[(i, 1)] + 0.05 * rng.random_range(-1.0..1.0));
        let cpu = params.fit_inputs(&Device::Cpu, &[&x, &x], &y).unwrap();
        gpu.reset_device_counters();
        let fitted = params.fit_inputs(&gpu, &[&x, &x], &y).unwrap();
        let c = gpu.device_counters();
        let order = |m: &gramian::mklaren::Mklaren| m.order().iter().map(|s| (s.kernel, s.pivot)).collect::<Vec<_>>();
        assert_eq!(order(&cpu), order(&fitted), "n = {n}: the GPU fit chose other columns");
        let (pc, pg) = (cpu.training_fit(), fitted.training_fit());
        let err = (pc - pg).amax() / pc.amax();
        assert!(err <= 1e-8, "n = {n}: training predictions differ by {err:e} (relative)");
        // One wait per step, then Eq. 18, the kernel weights, the fit and
        // each used kernel's G at its pivots ([`mklaren_traffic`]).
        let used = (0..kernels.len()).filter(|&q| fitted.order().iter().any(|s| s.kernel == q)).count();
        assert_eq!(c.waits as usize, rank + 3 + used, "n = {n}: {c:?}");
        let (up, down) = mklaren_traffic(n, d, rank, lookahead, kernels.len());
        assert_eq!(c.transfers.host_to_device_bytes, (8 * up) as u64, "n = {n}: {c:?}");
        assert_eq!(c.transfers.device_to_host_bytes, (8 * down) as u64, "n = {n}: {c:?}");
    }
}

/// The matrix-free Dual on a GPU (in f64 its Krylov basis resident there)
/// against the CPU's, on fresh random sources: an RBF coupling (a decaying
/// spectrum) and a linear kernel on 2-D inputs (`G_Q` of rank at most 6,
/// two of its eigenvalues positive, below the block of 8: every block
/// product meets an invariant subspace, and the device's CholQR2 hands the
/// block to the host's Gram-Schmidt).
/// Both runs stop at true residuals within `100 * 1e-10 max |lambda|`, so
/// each eigenvalue is within that of the exact one: `1e-8` relative; the
/// dual variables (eigenvectors, compared up to sign over all sources) are
/// within the residual over the gap to the rest of the spectrum: `1e-6`
/// relative. In f32 (an adapter without f64) the products' rounding
/// decides: `1e-4` and `1e-3`.
#[test]
fn matrix_free_dual_eksvd_on_the_gpu_matches_the_cpu() {
    let Some(gpu) = gpu_device(GpuOptions::default()) else { return };
    let f64_products = gpu.supports(gramian::Precision::F64);
    let (values_tolerance, vectors_tolerance) = if f64_products { (1e-8, 1e-6) } else { (1e-4, 1e-3) };
    let mut rng = rng();
    for (kernel, n, d, components) in [(Kernel::rbf(0.3).unwrap(), 120, 3, 3), (Kernel::Linear, 70, 2, 2)] {
        let shared = gaussian_matrix(&mut rng, n, d);
        let sources: Vec<DMatrix<f64>> = (0..3).map(|_| &shared + gaussian_matrix(&mut rng, n, d) * 0.3).collect();
        let data = MultiSource::paired(sources).unwrap();
        let coupling = CouplingMatrix::from_kernel(kernel, &data).unwrap();
        let solver = Eigensolver::Lanczos { tolerance: 1e-10, max_restarts: 300 };
        let cpu = solve_dual(&Device::Cpu, &coupling, components, &solver, 7).unwrap();
        gpu.reset_transfer_stats();
        let fitted = solve_dual(&gpu, &coupling, components, &solver, 7).unwrap();
        let stats = gpu.transfer_stats();
        for k in 0..components {
            let (a, b) = (cpu.eigenvalues[k], fitted.eigenvalues[k]);
            assert!((a - b).abs() <= values_tolerance * cpu.eigenvalues[0], "{kernel:?} eigenvalue {k}: cpu {a} gpu {b}");
            let stack = |alphas: &[DMatrix<f64>]| DVector::from_iterator(3 * n, alphas.iter().flat_map(|a| a.column(k).iter().copied().collect::<Vec<_>>()));
            let (u, v) = (stack(&cpu.alphas), stack(&fitted.alphas));
            let sign = if u.dot(&v) < 0.0 { -1.0 } else { 1.0 };
            assert!((&u - &v * sign).amax() <= vectors_tolerance * u.amax(), "{kernel:?} component {k} differs by {:e}", (&u - &v * sign).amax() / u.amax());
        }
        // The sources go up once (and the Krylov start block, or each
        // block where the products are in f32).
        assert!(stats.host_to_device_bytes >= (3 * n * d * 8) as u64, "{stats:?}");
    }
}

#[test]
fn feature_maps_and_psd_gradients_on_the_gpu_match_the_cpu() {
    use gramian::eksvd::FeatureMap;
    use gramian::psd::PsdModel;
    let Some(gpu) = gpu_device(GpuOptions::default()) else { return };
    let mut rng = rng();
    let x = gaussian_matrix(&mut rng, 200, 4);
    for map in [FeatureMap::random_fourier(0.5, 30).unwrap(), FeatureMap::nystrom(Kernel::rbf(0.5).unwrap(), 20, 40).unwrap()] {
        let fitted = map.fit(&Device::Cpu, &x, 0, 3).unwrap();
        let (c, g) = (fitted.transform(&x).unwrap(), fitted.to_device(&gpu).transform(&x).unwrap());
        let err = (&c - &g).amax() / c.amax();
        assert!(err <= 1e-12, "{map:?}: GPU features differ by {err:e}");
    }
    // A fitted eKSVD model's scores of new data: on the device = on the CPU.
    let sources: Vec<DMatrix<f64>> = (0..3).map(|_| &x + gaussian_matrix(&mut rng, 200, 4) * 0.2).collect();
    let data = MultiSource::paired(sources).unwrap();
    let model = gramian::eksvd::EksvdParams::new(3).feature_map(FeatureMap::nystrom(Kernel::rbf(0.4).unwrap(), 25, 50).unwrap()).fit(&Device::Cpu, &data).unwrap();
    let fresh = gaussian_matrix(&mut rng, 60, 4);
    for q in 0..3 {
        let (c, g) = (model.transform_source(q, &fresh).unwrap(), model.to_device(&gpu).transform_source(q, &fresh).unwrap());
        assert!((&c - &g).amax() <= 1e-10 * c.amax(), "source {q}: scores differ by {}", (&c - &g).amax());
    }
    let centres = gaussian_matrix(&mut rng, 15, 3);
    let factor = gaussian_matrix(&mut rng, 15, 15);
    let model = PsdModel::from_factor(centres, 0.9, factor).unwrap();
    let probe = gaussian_matrix(&mut rng, 80, 3);
    let (gc, gg) = (model.gradient(&Device::Cpu, &probe).unwrap(), model.gradient(&gpu, &probe).unwrap());
    assert!((&gc - &gg).amax() <= 1e-10 * gc.amax(), "gradients differ by {}", (&gc - &gg).amax());
    let (fc, fg) = (model.evaluate(&Device::Cpu, &probe).unwrap(), model.evaluate(&gpu, &probe).unwrap());
    assert!((&fc - &fg).amax() <= 1e-12 * fc.amax());
}
