//! The paper's Figure 1 (top row): 1-D density estimation on samples of
//! 1/2 N(-1, 0.3^2) + 1/2 N(1, 0.3^2) with sigma = 1, for PNM, NCM, GLM and
//! the PSD model, side by side in one PNG; prints each model's integral and
//! minimum. lambda is chosen per model on the log-likelihood of an
//! independent validation sample (500 points drawn here): one fixed split of
//! the training and validation points stacked,
//! [`gramian::estimator::cross_validate`] with
//! [`gramian::estimator::Splits::holdout`].
//!
//! The training sample is by default the authors' own n = 80 set
//! (`../shared/data/psd/density-1d-n80.csv`, see `../shared/data/README.md`);
//! `--data sample` draws n = 50 here instead (the main text's n), and
//! `--data FILE` reads another one-column CSV with a header row. Each panel
//! has its own y-scale, wide enough for the whole curve on [-3, 3] (PNM goes
//! negative away from the data).
//!
//! `cargo run -p gramian-repro --example psd_density_1d [-- --data authors|sample|FILE --out out/psd_density_1d.png]`

#[path = "psd_plot/mod.rs"]
mod psd_plot;
mod psd_data;

use clap::Parser;
use gramian::estimator::{cross_validate, Fit, Splits};
use gramian::psd::baselines::{BaselineDensity, BaselineKind, BaselineParams};
use gramian::psd::{DensityParams, PsdDensity, SolverOptions};
use gramian::Device;
use nalgebra::{DMatrix, DVector};
use plotters::style::RGBColor;
use psd_plot::{Curve, Panel};
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::{Distribution, Normal};
use gramian::psd::Regularisation;

fn sample(n: usize, rng: &mut StdRng) -> DMatrix<f64> {
    let noise = Normal::new(0.0, 0.3).unwrap();
    DMatrix::from_fn(n, 1, |_, _| if rng.random::<bool>() { -1.0 } else { 1.0 } + noise.sample(rng))
}

fn truth(x: f64) -> f64 {
    let g = |m: f64| (-(x - m) * (x - m) / (2.0 * 0.09)).exp() / (0.3 * (2.0 * std::f64::consts::PI).sqrt());
    0.5 * g(-1.0) + 0.5 * g(1.0)
}

/// A fitted model as (name, density on a grid, integral, log-likelihood on validation).
type Fitted = (String, DVector<f64>, f64, f64);

/// The lambda of `grid` with the highest validation log-likelihood (the
/// first on ties; `-inf` where a fit fails or the likelihood is not
/// finite) and that log-likelihood: fit on `data`'s training rows, score on
/// its held-out rows.
fn select<P: Fit<DMatrix<f64>>>(
    device: &Device,
    grid: &[f64],
    params: impl Fn(f64) -> P,
    data: &DMatrix<f64>,
    holdout: &Splits,
    log_likelihood: impl Fn(&P::Fitted, &DMatrix<f64>) -> Result<f64, gramian::Error>,
) -> Result<(f64, f64), gramian::Error> {
    let candidates: Vec<P> = grid.iter().map(|&l| params(l)).collect();
    let cv = cross_validate(device, &candidates, data, holdout, log_likelihood)?;
    Ok((cv.mean_scores[cv.best], grid[cv.best]))
}

#[derive(Parser)]
#[command(about = "1-D density estimation (Figure 1, top row): PNM, NCM, GLM and the PSD model side by side")]
struct Args {
    /// Training sample: authors (their n = 80 file), sample (n = 50 drawn here) or a one-column CSV file.
    #[arg(long, default_value = "authors")]
    data: String,
    /// Output PNG of the figure [default: out/psd_density_1d.png].
    #[arg(long)]
    out: Option<String>,
    /// Output PNG of the figure, as a lone argument (the example's earlier interface).
    #[arg(value_name = "OUT", conflicts_with_all = ["out", "data"])]
    out_path: Option<String>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let out = args.out.or(args.out_path).unwrap_or_else(|| "out/psd_density_1d.png".into());
    let data = args.data;
    let device = Device::Cpu;
    let mut rng = StdRng::seed_from_u64(7);
    let x = match data.as_str() {
        "sample" => sample(50, &mut rng),
        other => {
            let path = if other == "authors" { "../shared/data/psd/density-1d-n80.csv" } else { other };
            let x = psd_data::read_samples(path)?;
            if x.ncols() != 1 {
                return Err(format!("{path}: expected one column, got {}", x.ncols()).into());
            }
            // Keep the validation sample the same draw as with `--data sample`.
            let _ = sample(50, &mut rng);
            println!("training sample: {path}, n = {}", x.nrows());
            x
        }
    };
    let validation = sample(500, &mut rng);
    // The training sample, then the validation sample: fit on the first rows, score on the rest.
    let stacked = DMatrix::from_fn(x.nrows() + validation.nrows(), 1, |i, _| if i < x.nrows() { x[(i, 0)] } else { validation[(i - x.nrows(), 0)] });
    let holdout = Splits::holdout((0..x.nrows()).collect(), (x.nrows()..stacked.nrows()).collect())?;
    let grid = DMatrix::from_fn(1201, 1, |i, _| -6.0 + 12.0 * i as f64 / 1200.0);
    let lambdas = [1e-4, 1e-3, 1e-2, 1e-1];
    let sigma = 1.0;
    let mut fitted: Vec<Fitted> = Vec::new();
    for kind in [BaselineKind::Pnm, BaselineKind::Ncm, BaselineKind::Glm] {
        let baseline = BaselineParams::new(kind, gramian::Kernel::gaussian_with_width(sigma)?)?;
        let params = |l: f64| baseline.clone().regularisation(Regularisation::new().quadratic(l));
        let (ll, l) = select(&device, &lambdas, params, &stacked, &holdout, |m: &BaselineDensity, held: &DMatrix<f64>| m.mean_log_likelihood(held))?;
        let model = baseline.clone().regularisation(Regularisation::new().quadratic(l)).fit(&device, &x)?;
        // GLM on the Lebesgue measure has no finite integral (its tail is a positive constant).
        let integral = model.integral().unwrap_or(f64::INFINITY);
        fitted.push((format!("{} (lambda {l:e})", kind.name()), model.density(&grid)?, integral, ll));
    }
    let options = SolverOptions { tolerance: 1e-6, max_iterations: 50_000, check_every: 2 };
    let density = DensityParams::new(gramian::Kernel::gaussian_with_width(sigma)?)?;
    let params = |l: f64| density.clone().regularisation(Regularisation::new().trace(l).quadratic(0.1 * l)).solver(options);
    let (ll, l) = select(&device, &lambdas, params, &stacked, &holdout, |m: &PsdDensity, held: &DMatrix<f64>| m.mean_log_likelihood(held))?;
    let psd = DensityParams::new(gramian::Kernel::gaussian_with_width(sigma)?)?.regularisation(Regularisation::new().trace(l).quadratic(0.1 * l)).solver(options).fit(&device, &x)?;
    let r = psd.report();
    println!("PSD fit: {} FISTA iterations, duality gap {:.2e}, {:.3} s", r.iterations, r.gap, r.seconds_total);
    fitted.push((format!("PSD model (lambda {l:e})"), psd.density(&grid)?, psd.integral()?, ll));

    println!("{:<26} {:>12} {:>14} {:>16}", "model", "integral", "min on [-6,6]", "validation LL");
    for (name, p, integral, ll) in &fitted {
        println!("{:<26} {:>12.6} {:>14.4e} {:>16.4}", name, integral, p.min(), ll);
    }
    let truth_curve: Vec<(f64, f64)> = (0..grid.nrows()).map(|i| (grid[(i, 0)], truth(grid[(i, 0)]))).collect();
    let (x_lo, x_hi) = (-3.0, 3.0);
    let shown = |v: &DVector<f64>| -> (f64, f64) {
        (0..grid.nrows()).filter(|&i| grid[(i, 0)] >= x_lo && grid[(i, 0)] <= x_hi).fold((0.0f64, 0.0f64), |(lo, hi), i| (lo.min(v[i]), hi.max(v[i])))
    };
    let truth_top = truth_curve.iter().fold(0.0f64, |m, p| m.max(p.1));
    let panels: Vec<Panel> = fitted
        .iter()
        .map(|(name, p, integral, _)| {
            // Each panel's own scale: the whole curve on [-3, 3] and the truth, at least [-0.3, 1].
            let (lo, hi) = shown(p);
            let (lo, hi) = (lo.min(-0.3 / 1.1), hi.max(truth_top).max(1.0 / 1.1));
            Panel {
                title: format!("{name}: int {integral:.3}, min {:.2}", p.min()),
                curves: vec![
                    Curve { points: truth_curve.iter().copied().filter(|q| q.0 >= x_lo && q.0 <= x_hi).collect(), colour: RGBColor(255, 140, 0), dots: false },
                    Curve { points: (0..grid.nrows()).filter(|&i| grid[(i, 0)] >= x_lo && grid[(i, 0)] <= x_hi).map(|i| (grid[(i, 0)], p[i])).collect(), colour: RGBColor(31, 119, 180), dots: false },
                    Curve { points: (0..x.nrows()).map(|i| (x[(i, 0)], 0.0)).collect(), colour: RGBColor(0, 0, 0), dots: true },
                ],
                x_range: (x_lo, x_hi),
                y_range: (1.1 * lo, 1.1 * hi),
            }
        })
        .collect();
    psd_plot::draw_panels(&out, &panels, (420, 340))?;
    println!("figure written to {out}");
    Ok(())
}
