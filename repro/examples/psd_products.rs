//! The per-iteration `O(n r^2)` products of the PSD dual engine, timed on
//! their own: `||V^T p_i||^2` for every column and the Nystrom feature map
//! `T K(Z, X)`, each by the engine's current host path
//! (`gramian::psd::products`) and by the plain products they replaced, back
//! to back in one run, with the max relative difference; and `P diag(w) P^T`
//! (`linalg::weighted_gram`, lower triangle) against the full product
//! `(P diag(w)) P^T` for scale.
//!
//! `cargo run -p gramian-repro --example psd_products -- n r k [repeats]`
//! (defaults 50000 1000 1000 3; `k` = columns of `V`, the rank of `[M]_+`).

use std::time::Instant;

use clap::Parser;
use gramian::linalg;
use gramian::psd::products;
use nalgebra::{DMatrix, DVector};
use rand::{rngs::StdRng, Rng, SeedableRng};

#[derive(Parser)]
#[command(about = "The per-iteration products of the PSD dual engine against the plain products they replaced")]
struct Args {
    /// Columns n of P (samples).
    #[arg(default_value_t = 50_000)]
    n: usize,
    /// Rows r of P (centres).
    #[arg(default_value_t = 1000)]
    r: usize,
    /// Columns k of V, the rank of [M]_+, at most r [default: r].
    k: Option<usize>,
    /// Timed runs per product (median kept; at least 1).
    #[arg(default_value_t = 3)]
    repeats: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn time<T>(repeats: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..repeats {
        let start = Instant::now();
        last = Some(f());
        times.push(start.elapsed().as_secs_f64());
    }
    (median(times), last.expect("at least one repeat"))
}

fn rel(a: &DMatrix<f64>, b: &DMatrix<f64>) -> f64 {
    (a - b).abs().max() / b.abs().max().max(f64::MIN_POSITIVE)
}

fn main() {
    let args = Args::parse();
    let (n, r) = (args.n, args.r);
    let k = args.k.unwrap_or(r).min(r);
    let repeats = args.repeats.max(1);
    let mut rng = StdRng::seed_from_u64(7);
    let p = DMatrix::from_fn(r, n, |_, _| rng.random::<f64>() - 0.5);
    let w = DVector::from_fn(n, |_, _| rng.random::<f64>() - 0.5);
    let v = DMatrix::from_fn(r, k, |_, _| rng.random::<f64>() - 0.5);
    // A lower-triangular map as the Cholesky case of the Nystrom features.
    let t = DMatrix::from_fn(r, r, |i, j| if j <= i { rng.random::<f64>() - 0.5 } else { 0.0 });
    let kxz = DMatrix::from_fn(n, r, |_, _| rng.random::<f64>());
    println!("n {n}, r {r}, k {k}, {repeats} repeats, {} threads; median seconds", rayon::current_num_threads());
    println!("{:<34} {:>10} {:>10} {:>9} {:>10}", "product", "plain s", "engine s", "speed-up", "max rel");

    let (t_old, old) = time(repeats, || {
        let mut pw = p.clone();
        for (j, mut c) in pw.column_iter_mut().enumerate() {
            c *= w[j];
        }
        linalg::matmul_nt(&pw, &p)
    });
    let (t_new, new) = time(repeats, || linalg::weighted_gram(&p, &w));
    println!("{:<34} {t_old:>10.3} {t_new:>10.3} {:>9.2} {:>10.1e}", "P diag(w) P^T (full vs triangle)", t_old / t_new, rel(&new, &old));

    let (t_old, old) = time(repeats, || {
        let g = linalg::matmul_tn(&v, &p);
        DMatrix::from_fn(n, 1, |j, _| g.column(j).norm_squared())
    });
    let (t_new, new) = time(repeats, || DMatrix::from_column_slice(n, 1, products::projected_norms(&p, &v).as_slice()));
    println!("{:<34} {t_old:>10.3} {t_new:>10.3} {:>9.2} {:>10.1e}", "||V^T p_i||^2", t_old / t_new, rel(&new, &old));

    let (t_old, old) = time(repeats, || linalg::matmul_nt(&t, &kxz));
    let (t_new, new) = time(repeats, || products::lower_triangular_times_transpose(&t, &kxz));
    println!("{:<34} {t_old:>10.3} {t_new:>10.3} {:>9.2} {:>10.1e}", "T K^T (T lower triangular)", t_old / t_new, rel(&new, &old));
}
