//! Speed of the dual FISTA solver: time per iteration, iterations to a
//! duality gap, and where the time goes (setup = kernel matrices, features
//! and integrals; eigendecompositions; products `P diag(alpha) P^T` and model values).
//!
//! `cargo run -p gramian-repro --example psd_speed [-- n | -- n m max_iterations]`
//! (`PSD_PARTIAL_EIGEN=1`: the warm-started partial eigensolver, for comparison;
//! the earlier default; `PSD_FULL_EIGEN=1` the fresh route, now the default)
//! Defaults: the 10-D density of App. E with n = 1000 (all centres, then
//! Nystrom m = 200), and Nystrom m = 500 on n = 100,000 (budgets: 300 iterations, 5000, 200).
//!
//! `cargo run -p gramian-repro --example psd_speed -- heteroscedastic n m` and `-- quantile n m`:
//! the two regressions of Section 6 through the same engine on `m` Nystrom
//! centres (App. E data: the Yuan & Wahba toy model, sigma 0.1, lambdas
//! 1e-2 / 1e-2 / 1e-3; the quantile data, levels 1/4, 1/2, 3/4, sigma 0.1,
//! lambdas 1e-2 / 1e-3 / 1e-4), gap tolerance 1e-5, budget 5000 iterations.

use std::time::Instant;

use clap::{Parser, Subcommand};
use gramian::psd::regression::QuantileParams;
use gramian::psd::{BaseMeasure, DensityParams, HeteroscedasticParams, PositivePartRoute, SolverOptions, SolverReport};
use gramian::Error;
use gramian::Device;
use nalgebra::DMatrix;
mod psd_data;
mod psd_toy;

use psd_data::mixture_10d;
use rand::{rngs::StdRng, SeedableRng};
use gramian::psd::Regularisation;

#[derive(Parser)]
#[command(about = "Speed of the PSD dual FISTA solver: time per iteration, iterations to a duality gap, where the time goes")]
#[command(args_conflicts_with_subcommands = true, disable_help_subcommand = true)]
struct Args {
    #[command(subcommand)]
    regression: Option<Regression>,
    /// Samples n of the 10-D density (alone: all n centres; none: the three default problems).
    n: Option<usize>,
    /// Nystrom centres m (with MAX_ITERATIONS).
    #[arg(requires = "max_iterations")]
    m: Option<usize>,
    /// Iteration budget of the Nystrom run.
    max_iterations: Option<usize>,
}

#[derive(Subcommand)]
enum Regression {
    /// The heteroscedastic regression of Section 6 on m Nystrom centres.
    Heteroscedastic(RegressionArgs),
    /// The quantile regression of Section 6 on m Nystrom centres.
    Quantile(RegressionArgs),
}

#[derive(clap::Args)]
struct RegressionArgs {
    /// Samples n.
    #[arg(default_value_t = 100_000)]
    n: usize,
    /// Nystrom centres m.
    #[arg(default_value_t = 500)]
    m: usize,
}

fn run(label: &str, x: &DMatrix<f64>, nystrom: Option<usize>, tolerance: f64, max_iterations: usize) {
    let base = BaseMeasure::isotropic_gaussian(10, 5.0).unwrap();
    let partial = std::env::var("PSD_PARTIAL_EIGEN").is_ok();
    let label = &format!("{label}{}", if partial { " (partial eig)" } else { "" });
    let mut params = DensityParams::new(gramian::Kernel::gaussian_with_width(2.0).unwrap()).unwrap().regularisation(Regularisation::new().trace(1e-3).quadratic(1e-4)).base_measure(base).solver(SolverOptions { tolerance, max_iterations, check_every: 2 }).positive_part(if partial { PositivePartRoute::Partial } else { PositivePartRoute::Auto });
    if let Some(m) = nystrom {
        params = params.nystrom(m, 1);
    }
    let start = Instant::now();
    match params.fit(&Device::Cpu, x) {
        Ok(d) => {
            let r = d.report();
            println!(
                "{label:<34} {:>6} {:>10.2e} {:>12.6} {:>9.1} {:>10.1} {:>8.2} {:>8.2} {:>8.2} {:>7} {:>5}/{:<5}",
                r.iterations,
                r.gap,
                r.primal,
                r.seconds_total,
                1e3 * (r.seconds_total - r.seconds_setup) / r.iterations as f64,
                r.seconds_setup,
                r.seconds_eigen,
                r.seconds_products,
                d.model().factor().nrows(),
                d.eigen_stats().full,
                d.eigen_stats().partial,
            );
        }
        Err(Error::NotConverged { iterations, gap, .. }) => {
            let s = start.elapsed().as_secs_f64();
            println!("{label:<34} {iterations:>6} {gap:>10.2e} {:>12} {s:>9.1} {:>10.1}   (budget reached, not converged)", "-", 1e3 * s / iterations as f64);
        }
        Err(e) => println!("{label:<34} error: {e}"),
    }
}

/// One row of the regression table.
fn print_regression(label: &str, result: Result<SolverReport, Error>, seconds: f64) {
    match result {
        Ok(r) => println!(
            "{label:<40} {:>6} {:>10.2e} {:>12.6} {:>9.1} {:>10.1} {:>8.2} {:>8.2} {:>8.2}",
            r.iterations,
            r.gap,
            r.primal,
            r.seconds_total,
            1e3 * (r.seconds_total - r.seconds_setup) / r.iterations.max(1) as f64,
            r.seconds_setup,
            r.seconds_eigen,
            r.seconds_products
        ),
        Err(e) => println!("{label:<40} error after {seconds:.1} s: {e}"),
    }
}

fn regression(kind: &str, n: usize, m: usize) {
    let mut rng = StdRng::seed_from_u64(3);
    let options = SolverOptions { tolerance: 1e-5, max_iterations: 5000, check_every: 2 };
    println!("device: cpu ({} threads)", rayon::current_num_threads());
    println!("{:<40} {:>6} {:>10} {:>12} {:>9} {:>10} {:>8} {:>8} {:>8}", "problem", "iters", "gap", "primal", "total s", "ms/iter", "setup s", "eigen s", "prod s");
    let start = Instant::now();
    let label = format!("{kind} n {n} Nystrom m {m}");
    let result = if kind == "heteroscedastic" {
        let (x, y) = psd_toy::toy_data(n, &mut rng);
        HeteroscedasticParams::new(gramian::Kernel::gaussian_with_width(0.1).unwrap()).unwrap().regularisation(Regularisation::new().linear(1e-2).trace(1e-2).quadratic(1e-3)).nystrom(m, 1).solver(options).fit_xy(&Device::Cpu, &x, &y).map(|f| f.report().clone())
    } else {
        let (x, y) = psd_toy::quantile_data(n, &mut rng);
        QuantileParams::new(gramian::Kernel::gaussian_with_width(0.1).unwrap(), &[0.25, 0.5, 0.75]).unwrap().regularisation(Regularisation::new().linear(1e-2).trace(1e-3).quadratic(1e-4)).nystrom(m, 1).solver(options).fit_xy(&Device::Cpu, &x, &y).map(|f| f.report().clone())
    };
    print_regression(&label, result, start.elapsed().as_secs_f64());
}

fn main() {
    let args = Args::parse();
    match args.regression {
        Some(Regression::Heteroscedastic(RegressionArgs { n, m })) => return regression("heteroscedastic", n, m),
        Some(Regression::Quantile(RegressionArgs { n, m })) => return regression("quantile", n, m),
        None => {}
    }
    let mut rng = StdRng::seed_from_u64(3);
    println!("device: cpu ({} threads); sigma 2, lambda_1 1e-3, lambda_2 1e-4, base N(0, 5 I)", rayon::current_num_threads());
    println!("{:<34} {:>6} {:>10} {:>12} {:>9} {:>10} {:>8} {:>8} {:>8} {:>7} {:>11}", "problem", "iters", "gap", "primal", "total s", "ms/iter", "setup s", "eigen s", "prod s", "rank B", "full/partial");
    match (args.n, args.m, args.max_iterations) {
        (Some(n), Some(m), Some(max_iterations)) => {
            let x = mixture_10d(n, &mut rng);
            run(&format!("n {n} Nystrom m {m}"), &x, Some(m), 1e-4, max_iterations);
        }
        (Some(n), _, _) => {
            let x = mixture_10d(n, &mut rng);
            run(&format!("10-D n {n}, all centres"), &x, None, 1e-4, 2000);
        }
        (None, _, _) => {
            let x = mixture_10d(1000, &mut rng);
            run("10-D n 1000, all centres", &x, None, 1e-4, 300);
            run("10-D n 1000, Nystrom m 200", &x, Some(200), 1e-4, 5000);
            let big = mixture_10d(100_000, &mut rng);
            run("10-D n 100000, Nystrom m 500", &big, Some(500), 1e-4, 200);
        }
    }
}
