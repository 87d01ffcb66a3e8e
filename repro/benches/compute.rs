//! Criterion benchmarks of the compute core, CPU and (when an adapter is
//! found, software ones only with GRAMIAN_DEVICE=gpu) GPU. The table with
//! GFLOP/s at several sizes is `cargo run -p gramian-repro --example compute_table`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gramian::kernel::{kernel_matvec_cpu, kernel_matvec_pair_cpu};
use gramian::{Device, Kernel, MatrixProduct};
use nalgebra::DMatrix;
use rand::{rngs::StdRng, Rng, SeedableRng};

fn random(rng: &mut StdRng, r: usize, c: usize) -> DMatrix<f64> {
    DMatrix::from_fn(r, c, |_, _| rng.random_range(-1.0..1.0))
}

fn devices() -> Vec<(&'static str, Device)> {
    let mut d = vec![("cpu", Device::Cpu)];
    if let g @ Device::Gpu(_) = Device::auto() {
        d.push(("gpu", g));
    }
    d
}

fn bench(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(1);
    let devices = devices();
    let mut group = c.benchmark_group("rbf_kernel_matrix");
    group.sample_size(10);
    for n in [512usize, 2048] {
        let x = random(&mut rng, n, 64);
        let k = Kernel::rbf(1.0 / 64.0).unwrap();
        group.throughput(Throughput::Elements((n * n) as u64));
        for (name, dev) in &devices {
            group.bench_with_input(BenchmarkId::new(*name, n), &x, |b, x| b.iter(|| dev.kernel_matrix(&k, x, x).unwrap()));
        }
    }
    group.finish();

    // Issue 17: the fused CPU kernel matrix in f32, and the dense symmetric
    // eigendecomposition (the side-by-side table against NumPy/SciPy is
    // `cargo run -p gramian-repro --example cpu_table`).
    let mut group = c.benchmark_group("rbf_kernel_matrix_f32_cpu");
    group.sample_size(10);
    for n in [512usize, 2048] {
        let x: DMatrix<f32> = gramian::linalg::convert(&random(&mut rng, n, 64));
        let k = Kernel::rbf(1.0 / 64.0).unwrap();
        group.throughput(Throughput::Elements((n * n) as u64));
        group.bench_with_input(BenchmarkId::new("cpu", n), &x, |b, x| b.iter(|| gramian::kernel::kernel_matrix_cpu(&k, x, x).unwrap()));
    }
    group.finish();

    let mut group = c.benchmark_group("symmetric_eigen_cpu");
    group.sample_size(10);
    for n in [256usize, 768] {
        let b = random(&mut rng, n, n);
        let a = &b + b.transpose();
        group.bench_with_input(BenchmarkId::new("all", n), &a, |bch, a| bch.iter(|| gramian::linalg::symmetric_eigen(a).unwrap()));
    }
    group.finish();

    let mut group = c.benchmark_group("gram");
    group.sample_size(10);
    let phi = random(&mut rng, 20000, 64);
    for (name, dev) in &devices {
        group.bench_function(*name, |b| b.iter(|| dev.gram(&phi).unwrap()));
    }
    group.finish();

    let mut group = c.benchmark_group("batched_matmul_64x64");
    group.sample_size(10);
    let mats: Vec<(DMatrix<f64>, DMatrix<f64>)> = (0..64).map(|_| (random(&mut rng, 64, 64), random(&mut rng, 64, 64))).collect();
    let pairs: Vec<(&DMatrix<f64>, &DMatrix<f64>)> = mats.iter().map(|(a, b)| (a, b)).collect();
    for (name, dev) in &devices {
        group.bench_function(*name, |b| b.iter(|| dev.batched_matmul(&pairs, MatrixProduct::AB).unwrap()));
    }
    group.finish();

    let mut group = c.benchmark_group("rbf_kernel_matvec");
    group.sample_size(10);
    let x = random(&mut rng, 4096, 32);
    let v = random(&mut rng, 4096, 4);
    let k = Kernel::rbf(1.0 / 32.0).unwrap();
    for (name, dev) in &devices {
        group.bench_function(*name, |b| b.iter(|| dev.kernel_matvec(&k, &x, &x, &v).unwrap()));
    }
    group.finish();

    // Both directions of one cross-source block (eKSVD's coupling: K V and
    // K^T W) on the CPU: two one-sided matvecs against the pair matvec,
    // which evaluates each kernel entry once.
    let mut group = c.benchmark_group("rbf_kernel_matvec_both_ways_cpu");
    group.sample_size(10);
    let z = random(&mut rng, 4096, 32);
    let w = random(&mut rng, 4096, 4);
    group.bench_function("two_matvecs", |b| {
        b.iter(|| (kernel_matvec_cpu(&k, &x, &z, &v).unwrap(), kernel_matvec_cpu(&k, &z, &x, &w).unwrap()))
    });
    group.bench_function("pair_matvec", |b| b.iter(|| kernel_matvec_pair_cpu(&k, &x, &z, &v, &w).unwrap()));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
