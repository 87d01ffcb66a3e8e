//! faer's self-adjoint eigendecomposition under its tuning parameters:
//! parallelism (`Par::rayon` vs `Par::Seq`), the
//! tridiagonalisation's parallel threshold and the divide-and-conquer
//! recursion threshold, each the median of REPS runs on `B + B^T` with a
//! deterministic `B` in [-1, 1). Prints one line per setting; `gramian::linalg::symmetric_eigen`
//! uses faer's defaults (the first line), which no other setting beat
//! beyond the noise of the shared machine (BENCHMARKS.md).
//!
//! The mode `top` sweeps the block Lanczos settings of
//! `gramian::linalg::symmetric_eigen_largest` (block size, extra blocks,
//! blocks kept at a restart) for the top K on the same matrix.
//!
//! ```text
//! cargo run -p gramian-repro --example eigen_params -- N [REPS]
//! cargo run -p gramian-repro --example eigen_params -- top N K [REPS]
//! cargo run -p gramian-repro --example eigen_params -- phases N   # faer tridiagonalisation / tridiagonal D&C / whole, against ours (and our blocked reduction alone)
//! ```

use std::time::Instant;
use clap::{Parser, Subcommand};
use faer::{Mat, Par, Side};
use faer::linalg::evd::{self, ComputeEigenvectors, SelfAdjointEvdParams};
use faer::dyn_stack::{MemBuffer, MemStack};
use faer::{Auto, Spec};

#[derive(Parser)]
#[command(about = "faer's self-adjoint eigendecomposition under its tuning parameters, median of REPS runs each")]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true, disable_help_subcommand = true)]
struct Args {
    #[command(subcommand)]
    mode: Option<Mode>,
    /// Order n of the matrix B + B^T.
    #[arg(required = true)]
    n: Option<usize>,
    /// Timed runs per setting (median kept).
    #[arg(default_value_t = 3)]
    reps: usize,
}

#[derive(Subcommand)]
enum Mode {
    /// Sweep the block Lanczos settings (block size, extra blocks, kept blocks) for the top K.
    Top {
        /// Order n of the matrix B + B^T.
        n: usize,
        /// Number K of leading eigenpairs.
        k: usize,
        /// Timed runs per setting (median kept).
        #[arg(default_value_t = 3)]
        reps: usize,
    },
    /// faer's tridiagonalisation, tridiagonal D&C and whole decomposition timed apart, against gramian's.
    Phases {
        /// Order n of the matrix B + B^T.
        n: usize,
    },
}

fn top(n: usize, k: usize, reps: usize) {
    let b = nalgebra::DMatrix::<f64>::from_fn(n, n, |i, j| ((i * 7919 + j * 104729) % 1000) as f64 / 500.0 - 1.0);
    let a = &b + b.transpose();
    let default = gramian::linalg::TopEigenSettings::default();
    let mut shapes = vec![];
    for block in [k / 2, k, 2 * k] {
        for extra_blocks in [1usize, 2, 4] {
            shapes.push((block.max(1), extra_blocks, default.keep_blocks));
        }
    }
    // The default block and basis with 1-8 blocks kept at a restart.
    for keep_blocks in [1usize, 2, 4, 6, 8] {
        shapes.push((default.block, default.extra_blocks, keep_blocks));
    }
    for (block, extra_blocks, keep_blocks) in shapes {
        let settings = gramian::linalg::TopEigenSettings { block, extra_blocks, keep_blocks, ..default };
        let mut times = vec![];
        let mut info = String::new();
        for _ in 0..reps {
            let t = Instant::now();
            let e = gramian::linalg::symmetric_eigen_largest_with(&a, k, &settings).unwrap();
            times.push(t.elapsed().as_secs_f64());
            info = format!("partial {} restarts {}", e.partial, e.restarts);
        }
        times.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("block {block} extra {extra_blocks} keep {keep_blocks}: median {:.3} s ({info}) all {times:?}", times[times.len() / 2]);
    }
}

/// `phases N`: faer's three phases timed apart on the random `B + B^T`
/// (`B` uniform in [-1, 1)): tridiagonalisation, the tridiagonal
/// divide-and-conquer with vectors, and the whole decomposition.
fn phases(n: usize) {
    use faer::linalg::evd::tridiag;
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(17);
    let b = Mat::<f64>::from_fn(n, n, |_, _| rand::Rng::random_range(&mut rng, -1.0..1.0));
    let a = Mat::<f64>::from_fn(n, n, |i, j| b[(i, j)] + b[(j, i)]);
    let par = Par::rayon(0);
    let mut t_mat = a.clone();
    let bs = 64.min(n.saturating_sub(1)).max(1);
    let mut h = Mat::<f64>::zeros(bs, n.saturating_sub(1));
    let params = <tridiag::TridiagParams as Auto<f64>>::auto();
    let mut mem = MemBuffer::new(tridiag::tridiag_in_place_scratch::<f64>(n, par, Spec::new(params)));
    let t = Instant::now();
    tridiag::tridiag_in_place(t_mat.as_mut(), h.as_mut(), par, MemStack::new(&mut mem), Spec::new(params));
    let t_tri = t.elapsed().as_secs_f64();
    let d = faer::Col::<f64>::from_fn(n, |i| t_mat[(i, i)]);
    let e = faer::Col::<f64>::from_fn(n, |i| if i + 1 < n { t_mat[(i + 1, i)] } else { 0.0 });
    let mut s = faer::diag::Diag::<f64>::zeros(n);
    let mut u = Mat::<f64>::zeros(n, n);
    let eparams = <SelfAdjointEvdParams as Auto<f64>>::auto();
    let mut mem = MemBuffer::new(evd::self_adjoint_evd_scratch::<f64>(n, ComputeEigenvectors::Yes, par, Spec::new(eparams)));
    let t = Instant::now();
    evd::tridiagonal_self_adjoint_evd(d.as_diagonal(), e.as_diagonal(), s.as_mut(), Some(u.as_mut()), par, MemStack::new(&mut mem), Spec::new(eparams)).unwrap();
    let t_dc = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let _ = a.as_ref().self_adjoint_eigen(Side::Lower).unwrap();
    let t_all = t.elapsed().as_secs_f64();
    // gramian's functions on one nalgebra copy, made outside the timings.
    let a_host = nalgebra::DMatrix::from_fn(n, n, |i, j| a[(i, j)]);
    let t = Instant::now();
    let _ = gramian::linalg::symmetric_eigen(&a_host).unwrap();
    let t_ours = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let _ = gramian::linalg::symmetric_eigenvalues(&a_host).unwrap();
    let t_values = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let _ = gramian::linalg::symmetric_tridiagonal(&a_host).unwrap();
    let t_blocked = t.elapsed().as_secs_f64();
    gramian::linalg::clear_upper_simd_state(true);
    println!("n {n}: faer tridiagonalisation {t_tri:.3} s, tridiagonal D&C with vectors {t_dc:.3} s, faer whole {t_all:.3} s, gramian::linalg::symmetric_eigen {t_ours:.3} s, its eigenvalues alone {t_values:.3} s, gramian's blocked tridiagonalisation {t_blocked:.3} s");
}

fn main() {
    let args = Args::parse();
    let (n, reps) = match args.mode {
        Some(Mode::Top { n, k, reps }) => return top(n, k, reps),
        Some(Mode::Phases { n }) => return phases(n),
        None => (args.n.expect("clap requires N without a mode"), args.reps),
    };
    let b = Mat::<f64>::from_fn(n, n, |i, j| ((i * 7919 + j * 104729) % 1000) as f64 / 500.0 - 1.0);
    let a = Mat::<f64>::from_fn(n, n, |i, j| b[(i, j)] + b[(j, i)]);
    for (label, par, pt, rt) in [
        ("default", Par::rayon(0), 192 * 256, 64usize),
        ("seq", Par::Seq, 192 * 256, 64),
        ("pt small", Par::rayon(0), 64 * 64, 64),
        ("rt 128", Par::rayon(0), 192 * 256, 128),
        ("rt 32", Par::rayon(0), 192 * 256, 32),
    ] {
        let mut params: SelfAdjointEvdParams = <SelfAdjointEvdParams as Auto<f64>>::auto();
        params.tridiag.par_threshold = pt;
        params.recursion_threshold = rt;
        let mut times = vec![];
        for _ in 0..reps {
            let t = Instant::now();
            let mut s = faer::diag::Diag::<f64>::zeros(n);
            let mut u = Mat::<f64>::zeros(n, n);
            let mut mem = MemBuffer::new(evd::self_adjoint_evd_scratch::<f64>(n, ComputeEigenvectors::Yes, par, Spec::new(params)));
            evd::self_adjoint_evd(a.as_ref(), s.as_mut(), Some(u.as_mut()), par, MemStack::new(&mut mem), Spec::new(params)).unwrap();
            times.push(t.elapsed().as_secs_f64());
            gramian::linalg::clear_upper_simd_state(true);
        }
        times.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("{label}: median {:.3} s  all {:?}", times[times.len() / 2], times);
    }
    let t = Instant::now();
    let _ = a.as_ref().self_adjoint_eigenvalues(Side::Lower).unwrap();
    println!("values only: {:.3}", t.elapsed().as_secs_f64());
}
