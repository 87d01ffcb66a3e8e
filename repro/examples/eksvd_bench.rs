//! eKSVD speed and scale: prints tables (nothing is asserted).
//!
//! ```text
//! cargo run -p gramian-repro --example eksvd_bench [-- DATA_DIR] [--max-total N]
//! ```
//!
//! 1. dense symmetric eigensolvers at n = 1024: faer (used by gramian) vs nalgebra;
//! 2. Dual eKSVD on 3 views x 1200 training samples of UCI Multiple Features
//!    (fac, fou, kar; DATA_DIR defaults to `../shared/data/multiview/mfeat`),
//!    random Fourier features d_phi = 512, top 64: dense eigensolver on G_Q
//!    (3600 x 3600) vs Lanczos on the stored G_Q vs matrix-free Lanczos, and
//!    Covariance eKSVD;
//! 3. scale: matrix-free Dual eKSVD (top 10, d_phi = 128, 3 synthetic sources)
//!    for sum N_q from 1,000 to `--max-total` (default 100,000), CPU path.

use std::time::Instant;

use clap::Parser;
use gramian::eksvd::eigensolver::{largest_dense, largest_lanczos};
use gramian_repro::evaluation::MultiViewData;
use gramian::eksvd::{solve_covariance, solve_dual, CouplingMatrix, Eigensolver, EksvdParams, FeatureMap, Solver};
use gramian::MultiSource;
use gramian::linalg::{matmul, symmetric_eigen};
use gramian::Device;
use nalgebra::DMatrix;
use rand::{rngs::StdRng, Rng, SeedableRng};

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

#[derive(Parser)]
#[command(about = "eKSVD speed and scale: dense eigensolvers, Dual eKSVD on UCI Multiple Features, the scale curve")]
struct Args {
    /// Folder holding mfeat-*.csv (UCI Multiple Features).
    #[arg(default_value = "../shared/data/multiview/mfeat")]
    data_dir: String,
    /// Largest sum N_q of the scale curve.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    max_total: usize,
}

fn secs(start: Instant) -> f64 {
    start.elapsed().as_secs_f64()
}

fn random_symmetric(n: usize, seed: u64) -> DMatrix<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    let b = DMatrix::from_fn(n, n, |_, _| rng.random_range(-1.0..1.0));
    (&b + b.transpose()) * 0.5
}

fn dense_eigensolvers() -> AnyResult<()> {
    println!("\n1. dense symmetric eigendecomposition (values and vectors), n = 1024");
    println!("| solver | seconds |");
    println!("|---|---|");
    let a = random_symmetric(1024, 1);
    let start = Instant::now();
    std::hint::black_box(symmetric_eigen(&a)?);
    println!("| faer divide and conquer (gramian::linalg::symmetric_eigen) | {:.3} |", secs(start));
    let start = Instant::now();
    std::hint::black_box(a.clone().symmetric_eigen());
    println!("| nalgebra SymmetricEigen | {:.3} |", secs(start));
    Ok(())
}

fn dual_at_3600(device: &Device, dir: &str) -> AnyResult<()> {
    let data = MultiViewData::load_csv_views(dir, "mfeat-", &["fac", "fou", "kar"])?;
    let split = data.split(0.6, 0.2, 0)?;
    let train: &MultiSource = &split.train;
    let maps: Vec<FeatureMap> = train.sources().iter().map(|x| FeatureMap::random_fourier(1.0 / x.ncols() as f64, 512)).collect::<Result<_, _>>()?;
    let start = Instant::now();
    let features: Vec<DMatrix<f64>> = maps
        .iter()
        .enumerate()
        .map(|(q, m)| Ok(m.fit(device, train.source(q), q, 3)?.transform(train.source(q))?))
        .collect::<AnyResult<_>>()?;
    let feature_s = secs(start);
    let coupling = CouplingMatrix::from_features(features.clone())?;
    println!("\n2. Dual eKSVD, 3 views x {} training samples (G_Q {} x {}), d_phi = 512, top 64 ({})", train.source(0).nrows(), coupling.order(), coupling.order(), device.describe());
    println!("random Fourier features of the 3 views: {feature_s:.3} s (not included below)");
    println!("| method | seconds | largest lambda | 64th lambda |");
    println!("|---|---|---|---|");
    let start = Instant::now();
    let g = coupling.assemble(device)?;
    let assemble_s = secs(start);
    println!("| assemble G_Q (3 products Phi_p Phi_q^T) | {assemble_s:.3} | | |");
    let start = Instant::now();
    let dense = largest_dense(&g, 64)?;
    println!("| dense eigensolver on G_Q (faer, all 3600 pairs) | {:.3} | {:.6} | {:.6} |", secs(start), dense.values[0], dense.values[63]);
    let start = Instant::now();
    let stored = largest_lanczos(g.nrows(), 64, |v| Ok(matmul(&g, v)), 1e-10, 1000, 0)?;
    println!("| Lanczos top-64 on the stored G_Q | {:.3} | {:.6} | {:.6} |", secs(start), stored.values[0], stored.values[63]);
    let start = Instant::now();
    let free = solve_dual(device, &coupling, 64, &Eigensolver::lanczos(), 0)?;
    println!("| Lanczos top-64, matrix-free G_Q v = Phi_q (s - Phi_q^T v_q) | {:.3} | {:.6} | {:.6} |", secs(start), free.eigenvalues[0], free.eigenvalues[63]);
    let start = Instant::now();
    let cov = solve_covariance(device, &features, 64, &Eigensolver::Dense, 0)?;
    println!("| Covariance, dense on H (order 1536), incl. Gram matrices | {:.3} | {:.6} | {:.6} |", secs(start), cov.eigenvalues[0], cov.eigenvalues[63]);
    let start = Instant::now();
    let cov_l = solve_covariance(device, &features, 64, &Eigensolver::lanczos(), 0)?;
    println!("| Covariance, Lanczos on H | {:.3} | {:.6} | {:.6} |", secs(start), cov_l.eigenvalues[0], cov_l.eigenvalues[63]);
    let worst = (0..64).map(|k| ((free.eigenvalues[k] - dense.values[k]) / dense.values[0]).abs()).fold(0.0, f64::max);
    println!("max |lambda_lanczos - lambda_dense| / lambda_1 = {worst:.2e}");
    Ok(())
}

fn scale_curve(max_total: usize) -> AnyResult<()> {
    println!("\n3. matrix-free Dual eKSVD at scale (CPU, 3 synthetic sources, d_q = 10, RFF d_phi = 128, top 10, tol 1e-8)");
    println!("| sum N_q | features (s) | Lanczos solve (s) | lambda_1 |");
    println!("|---|---|---|---|");
    let cpu = Device::cpu();
    let mut rng = StdRng::seed_from_u64(5);
    for total in [1_000usize, 3_000, 10_000, 30_000, 100_000].into_iter().filter(|&t| t <= max_total) {
        let n = total / 3;
        let sources: Vec<DMatrix<f64>> = (0..3).map(|_| DMatrix::from_fn(n, 10, |_, _| rng.random_range(-1.0..1.0))).collect();
        let data = MultiSource::paired(sources)?;
        let params = EksvdParams::new(10)
            .feature_map(FeatureMap::random_fourier(0.1, 128)?)
            .solver(Solver::Dual(Eigensolver::Lanczos { tolerance: 1e-8, max_restarts: 1000 }));
        let start = Instant::now();
        let features: Vec<DMatrix<f64>> = (0..3).map(|q| Ok(FeatureMap::random_fourier(0.1, 128)?.fit(&cpu, data.source(q), q, 1)?.transform(data.source(q))?)).collect::<AnyResult<_>>()?;
        let feature_s = secs(start);
        let start = Instant::now();
        let model = params.fit_features(&cpu, features)?;
        println!("| {} | {feature_s:.2} | {:.2} | {:.4} |", 3 * n, secs(start), model.eigenvalues()[0]);
    }
    Ok(())
}

fn main() -> AnyResult<()> {
    let args = Args::parse();
    let (dir, max_total) = (args.data_dir, args.max_total);
    let device = Device::auto();
    dense_eigensolvers()?;
    if std::path::Path::new(&dir).is_dir() {
        dual_at_3600(&device, &dir)?;
    } else {
        println!("\n2. skipped: data folder {dir} not found (pass the folder holding mfeat-*.csv)");
    }
    scale_curve(max_total)?;
    Ok(())
}
