//! Criterion group of method fits, CPU against GPU (when an adapter is found;
//! software ones only with GRAMIAN_DEVICE=gpu): the small sizes of
//! `examples/method_bench.rs --preset quick`. The table with transfers and
//! GPU-vs-CPU differences at large n is that example.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use gramian::eksvd::{solve_dual, CouplingMatrix, Eigensolver};
use gramian::MultiSource;
use gramian::mklaren::MklarenParams;
use gramian::psd::{BaseMeasure, DensityParams, SolverOptions};
use gramian::{Device, Kernel};
use nalgebra::{DMatrix, DVector};
use rand::{rngs::StdRng, Rng, SeedableRng};
use gramian::psd::Regularisation;

fn devices() -> Vec<(&'static str, Device)> {
    let mut d = vec![("cpu", Device::Cpu)];
    if let g @ Device::Gpu(_) = Device::auto() {
        d.push(("gpu", g));
    }
    d
}

fn uniform(rng: &mut StdRng, r: usize, c: usize) -> DMatrix<f64> {
    DMatrix::from_fn(r, c, |_, _| rng.random_range(-1.0..1.0))
}

fn bench(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(5);
    let devices = devices();
    let mut group = c.benchmark_group("method_fit");
    group.sample_size(10);
    let n = 400;
    let shared = uniform(&mut rng, n, 4);
    let sources: Vec<DMatrix<f64>> = (0..3).map(|_| &shared + uniform(&mut rng, n, 4) * 0.3).collect();
    let data = MultiSource::paired(sources).unwrap();
    let coupling = CouplingMatrix::from_kernel(Kernel::rbf(0.25).unwrap(), &data).unwrap();
    let solver = Eigensolver::Lanczos { tolerance: 1e-8, max_restarts: 200 };
    let x = uniform(&mut rng, 2000, 5);
    let y = DVector::from_fn(2000, |i, _| (3.0 * x[(i, 0)]).sin() + x[(i, 1)]);
    let kernels = [Kernel::rbf(0.1).unwrap(), Kernel::rbf(1.0).unwrap()];
    let density_x = uniform(&mut rng, 1000, 10) * 0.5;
    let density = DensityParams::new(gramian::Kernel::gaussian_with_width(1.0).unwrap()).unwrap()
        .regularisation(Regularisation::new().trace(1e-3).quadratic(1e-4))
        .base_measure(BaseMeasure::isotropic_gaussian(10, 5.0).unwrap())
        .nystrom(60, 1)
        .solver(SolverOptions { tolerance: 1e-6, max_iterations: 500, check_every: 2 });
    for (name, device) in &devices {
        group.bench_with_input(BenchmarkId::new("eksvd_dual_lanczos_3x400", name), device, |b, d| b.iter(|| solve_dual(d, &coupling, 4, &solver, 5).unwrap()));
        group.bench_with_input(BenchmarkId::new("mklaren_n2000", name), device, |b, d| b.iter(|| MklarenParams::new(20).lookahead(5).kernels(&kernels).fit_inputs(d, &[&x, &x], &y).unwrap()));
        group.bench_with_input(BenchmarkId::new("psd_density_n1000_m60", name), device, |b, d| b.iter(|| density.fit(d, &density_x).unwrap()));
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
