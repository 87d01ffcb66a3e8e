//! CPU side-by-side table: the fused RBF kernel matrix, the
//! fused kernel matvec and the dense symmetric eigendecomposition, each as
//! the median of several runs (after one warm-up), to set beside NumPy/SciPy
//! run in the same run (the one-liners are in BENCHMARKS.md, "CPU at the
//! hardware limit").
//!
//! ```text
//! cargo run -p gramian-repro --example cpu_table                 # all rows, 5 runs each
//! cargo run -p gramian-repro --example cpu_table -- kernel 7     # only the kernel rows, 7 runs
//! cargo run -p gramian-repro --example cpu_table -- eigen 3      # only the eigensolver rows
//! cargo run -p gramian-repro --example cpu_table -- f64 9        # only the f64 kernel matrix (`f32`: only f32), for profiling
//! cargo run -p gramian-repro --example cpu_table -- thin 100     # products with 8 right-hand columns: faer against the thin kernels
//! ```
//!
//! Data: X uniform in [-1, 1) (seed 1), gamma = 1/d; eigen rows on the
//! symmetric matrix B + B^T with B uniform in [-1, 1) (seed 2).

use std::time::Instant;

use clap::Parser;
use gramian::eksvd::eigensolver::largest_dense;
use gramian::kernel::{kernel_matrix_cpu, kernel_matvec_cpu};
use gramian::linalg::{convert, faer_mut, faer_ref, matmul_thin, matmul_tn_thin, symmetric_eigen, symmetric_eigen_largest};
use gramian::Kernel;
use nalgebra::DMatrix;
use rand::{rngs::StdRng, Rng, SeedableRng};

#[derive(Parser)]
#[command(about = "CPU timings of the fused RBF kernel matrix and matvec, the dense eigensolver and the thin products")]
struct Args {
    /// Rows to time: all (kernel and eigen), kernel, eigen, f64 or f32 (one kernel matrix), thin (products with 8 columns).
    #[arg(default_value = "all", value_parser = ["all", "kernel", "eigen", "f64", "f32", "thin"])]
    mode: String,
    /// Timed runs per row (median kept), after one warm-up.
    #[arg(default_value_t = 5)]
    reps: usize,
}

fn random(rng: &mut StdRng, r: usize, c: usize) -> DMatrix<f64> {
    DMatrix::from_fn(r, c, |_, _| rng.random_range(-1.0..1.0))
}

/// Median seconds of `reps` runs of `f` after one warm-up run.
fn median<R>(reps: usize, mut f: impl FnMut() -> R) -> f64 {
    std::hint::black_box(f());
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let s = Instant::now();
            std::hint::black_box(f());
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// `A B` (or `A^T B`) by faer's matrix multiply on all threads.
fn faer_product(a: &DMatrix<f64>, b: &DMatrix<f64>, transpose: bool) -> DMatrix<f64> {
    let lhs = if transpose { faer_ref(a).transpose() } else { faer_ref(a) };
    let mut c = DMatrix::<f64>::zeros(lhs.nrows(), b.ncols());
    faer::linalg::matmul::matmul(faer_mut(&mut c), faer::Accum::Replace, lhs, faer_ref(b), 1.0, faer::Par::rayon(0));
    c
}

fn main() {
    let args = Args::parse();
    let (which, reps) = (args.mode.as_str(), args.reps);
    println!("| operation | shape | gramian (median of {reps}) |");
    println!("|---|---|---|");
    if which == "all" || which == "kernel" || which == "f64" || which == "f32" {
        let mut rng = StdRng::seed_from_u64(1);
        let x = random(&mut rng, 4096, 64);
        let k = Kernel::rbf(1.0 / 64.0).unwrap();
        if which != "f32" {
            let s = median(reps, || kernel_matrix_cpu(&k, &x, &x).unwrap());
            println!("| RBF kernel matrix f64 | 4096 x 4096 x 64 | {:.1} ms |", s * 1e3);
        }
        if which != "f64" {
            let x32 = convert::<f64, f32>(&x);
            let s = median(reps, || kernel_matrix_cpu(&k, &x32, &x32).unwrap());
            println!("| RBF kernel matrix f32 | 4096 x 4096 x 64 | {:.1} ms |", s * 1e3);
        }
        if which == "f64" || which == "f32" {
            return;
        }
        let x = random(&mut rng, 16384, 64);
        let v = random(&mut rng, 16384, 1);
        let s = median(reps.min(3), || kernel_matvec_cpu(&k, &x, &x, &v).unwrap());
        println!("| RBF kernel matvec f64, c = 1 | 16384 x 16384 x 64 | {:.0} ms |", s * 1e3);
    }
    if which == "thin" {
        // Not in "all": a per-product comparison for the thin kernels.
        let mut rng = StdRng::seed_from_u64(3);
        for (m, k) in [(1200usize, 512usize), (3600, 232), (1200, 1200), (1536, 1536), (3600, 3600)] {
            let a = random(&mut rng, m, k);
            let (b, bt) = (random(&mut rng, k, 8), random(&mut rng, m, 8));
            let faer_ab = median(reps, || faer_product(&a, &b, false));
            let thin_ab = median(reps, || matmul_thin(&a, &b));
            let faer_atb = median(reps, || faer_product(&a, &bt, true));
            let thin_atb = median(reps, || matmul_tn_thin(&a, &bt));
            println!("| A B, 8 columns, faer / thin | {m} x {k} | {:.3} / {:.3} ms |", faer_ab * 1e3, thin_ab * 1e3);
            println!("| A^T B, 8 columns, faer / thin | {m} x {k} | {:.3} / {:.3} ms |", faer_atb * 1e3, thin_atb * 1e3);
        }
    }
    if which == "all" || which == "eigen" {
        let mut rng = StdRng::seed_from_u64(2);
        for n in [1536usize, 3600] {
            let b = random(&mut rng, n, n);
            let a = &b + b.transpose();
            let r = if n > 2000 { reps.min(3) } else { reps };
            let s = median(r, || symmetric_eigen(&a).unwrap());
            println!("| symmetric eigen, all pairs | {n} | {s:.3} s |");
            let s = median(r, || symmetric_eigen_largest(&a, 64).unwrap());
            println!("| symmetric eigen, top 64 | {n} | {s:.3} s |");
            // eKSVD's dense top-k tries the block solver on smaller orders
            // (decaying spectra); this matrix has a flat one, its worst case.
            let s = median(r, || largest_dense(&a, 64).unwrap());
            println!("| symmetric eigen, top 64, eKSVD's largest_dense | {n} | {s:.3} s |");
        }
    }
}
