//! Multiple quantile regression (Figure 1, bottom row) on the distribution of
//! App. E: X ~ 1/2 U(0, 1/3) + 1/2 U(2/3, 1), Y | x ~ N(0, s(x)^2),
//! levels 1/4, 1/2, 3/4. The median is linear and the other levels are the
//! median -+ a non-negative gap, modelled by PNM, NCM, GLM (Appendix D,
//! [`gramian::psd::baseline_regression`]) or a PSD model
//! ([`gramian::psd::regression`]). PNM orders the curves on the data only.
//!
//! `sigma` and `lambda` are chosen per model on a validation split (70% / 30%
//! of the training data, as in App. E: the first 70 % fitted, the rest
//! scored, [`gramian::estimator::cross_validate`] with
//! [`gramian::estimator::Splits::holdout`]) by the pinball loss (PSD:
//! `lambda_0 = lambda`, `lambda_1 = 0.1 lambda`, `lambda_2 = 0.01 lambda`, the
//! ratios of the fixed setting used before; baselines: `lambda_0 = lambda` and
//! `lambda/2 ||w||^2` per gap); the table gives the
//! pinball loss (mean over the levels) on fresh test data and the count of
//! grid points of [-0.25, 1.25] (1501 points, including the gap (1/3, 2/3)
//! without data) where the curves cross.
//!
//! NCM runs on 100 Nystrom centres (its Newton systems would otherwise have
//! order `3n`); the other models use every sample.
//!
//! `cargo run -p gramian-repro --example psd_quantile [-- out/psd_quantile.png [n]]` (n = 500 by default, the paper's;
//! `-- out.png 200` for a quicker run)

#[path = "psd_plot/mod.rs"]
mod psd_plot;
#[path = "psd_toy/mod.rs"]
mod psd_toy;

use clap::Parser;
use gramian::estimator::{cross_validate, Fit, Splits, Supervised};
use gramian::psd::regression::QuantileParams;
use gramian::psd::{BaselineKind, BaselineQuantileParams, SolverOptions};
use gramian::Error;
use gramian::Device;
use nalgebra::{DMatrix, DVector};
use plotters::style::RGBColor;
use psd_plot::{Curve, Panel};
use psd_toy::{quantile_data, quantile_spread};
use rand::{rngs::StdRng, SeedableRng};
use gramian::psd::Regularisation;

const LEVELS: [f64; 3] = [0.25, 0.5, 0.75];

/// Nystrom centres of the NCM baseline (features and kernel coefficients).
const NCM_CENTRES: usize = 100;

/// Mean over the levels of the mean pinball loss of the curves `q` (n x 3).
fn pinball(q: &DMatrix<f64>, y: &DVector<f64>) -> f64 {
    let mut total = 0.0;
    for (j, &tau) in LEVELS.iter().enumerate() {
        for i in 0..y.len() {
            let u = y[i] - q[(i, j)];
            total += (tau * u).max((tau - 1.0) * u);
        }
    }
    total / (y.len() * LEVELS.len()) as f64
}

fn crossings(m: &DMatrix<f64>) -> usize {
    (0..m.nrows()).filter(|&i| m[(i, 0)] > m[(i, 1)] || m[(i, 1)] > m[(i, 2)]).count()
}

#[derive(Clone, Copy)]
enum Model {
    Baseline(BaselineKind),
    Psd,
}

type Predictor = Box<dyn Fn(&DMatrix<f64>) -> Result<DMatrix<f64>, Error>>;

impl Model {
    fn name(&self) -> &'static str {
        match self {
            Model::Baseline(k) => k.name(),
            Model::Psd => "PSD",
        }
    }

    fn fit(&self, device: &Device, data: &Supervised, sigma: f64, lambda: f64) -> Result<Predictor, Error> {
        let device = device.clone();
        Ok(match *self {
            Model::Baseline(kind) => {
                let mut params = BaselineQuantileParams::new(kind, gramian::Kernel::gaussian_with_width(sigma)?, &LEVELS)?.regularisation(Regularisation::new().linear(lambda).quadratic(lambda)).restarts(3, 7);
                // NCM's Newton systems have order (r + 1) + (K - 1) m: its
                // kernel coefficients live on NCM_CENTRES Nystrom centres.
                if kind == BaselineKind::Ncm && data.x.nrows() > NCM_CENTRES {
                    params = params.nystrom(NCM_CENTRES, 11);
                }
                let m = params.fit(&device, data)?;
                Box::new(move |g| m.predict(g))
            }
            Model::Psd => {
                let options = SolverOptions { tolerance: 1e-4, max_iterations: 20_000, check_every: 10 };
                let m = QuantileParams::new(gramian::Kernel::gaussian_with_width(sigma)?, &LEVELS)?.regularisation(Regularisation::new().linear(lambda).trace(0.1 * lambda).quadratic(0.01 * lambda)).solver(options).fit(&device, data)?;
                Box::new(move |g| m.predict(g))
            }
        })
    }
}

/// One point of a model's (sigma, lambda) grid: a candidate for
/// [`cross_validate`].
struct Candidate {
    model: Model,
    sigma: f64,
    lambda: f64,
}

impl Fit<Supervised> for Candidate {
    type Fitted = Predictor;
    fn fit(&self, device: &Device, data: &Supervised) -> Result<Predictor, Error> {
        self.model.fit(device, data, self.sigma, self.lambda)
    }
}

#[derive(Parser)]
#[command(about = "Multiple quantile regression (Figure 1, bottom row): PNM, NCM, GLM and PSD gaps; pinball loss and crossings")]
struct Args {
    /// Output PNG of the figure.
    #[arg(default_value = "out/psd_quantile.png")]
    out: String,
    /// Training samples n (the paper's 500; 200 for a quicker run).
    #[arg(default_value_t = 500)]
    n: usize,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Args { out, n } = Args::parse();
    let device = Device::Cpu;
    let mut rng = StdRng::seed_from_u64(5);
    let (x, y) = quantile_data(n, &mut rng);
    let (x_test, y_test) = quantile_data(5000, &mut rng);
    let split = n * 7 / 10;
    let data = Supervised::new(x.clone(), y.clone())?;
    let holdout = Splits::holdout((0..split).collect(), (split..n).collect())?;
    let sigmas = [0.05, 0.1, 0.2];
    let lambdas = [1e-4, 1e-3, 1e-2];
    let grid = DMatrix::from_fn(1501, 1, |i, _| -0.25 + 1.5 * i as f64 / 1500.0);
    let models = [Model::Baseline(BaselineKind::Pnm), Model::Baseline(BaselineKind::Ncm), Model::Baseline(BaselineKind::Glm), Model::Psd];
    // True quantiles: s(x) z_tau, z_{1/4} = -0.6745.
    let z = [-0.674_489_750_196_081_7, 0.0, 0.674_489_750_196_081_7];
    let colours = [RGBColor(31, 119, 180), RGBColor(20, 60, 140), RGBColor(31, 119, 180)];
    let mut table = Vec::new();
    let mut panels = Vec::new();
    for model in models {
        let start = std::time::Instant::now();
        let candidates: Vec<Candidate> = sigmas.iter().flat_map(|&sigma| lambdas.iter().map(move |&lambda| Candidate { model, sigma, lambda })).collect();
        // Higher is better: minus the pinball loss.
        let cv = cross_validate(&device, &candidates, &data, &holdout, |m: &Predictor, held: &Supervised| Ok(-pinball(&m(&held.x)?, &held.y)))?;
        for f in &cv.failures {
            let c = &candidates[f.candidate];
            eprintln!("{} sigma {} lambda {}: {}", model.name(), c.sigma, c.lambda, f.error);
        }
        for (c, score) in candidates.iter().zip(&cv.mean_scores) {
            println!("val {:<4} sigma {:<5} lambda {:<6e}  pinball {:.5}", model.name(), c.sigma, c.lambda, -score);
        }
        let best = (-cv.mean_scores[cv.best], candidates[cv.best].sigma, candidates[cv.best].lambda);
        let t_select = start.elapsed().as_secs_f64();
        let start = std::time::Instant::now();
        let fitted = model.fit(&device, &data, best.1, best.2)?;
        let t_fit = start.elapsed().as_secs_f64();
        let test = pinball(&fitted(&x_test)?, &y_test);
        let q = fitted(&grid)?;
        table.push(format!("{:<5} {:>6} {:>8.0e} {:>14.5} {:>16} {:>10.1} {:>8.2}", model.name(), best.1, best.2, test, crossings(&q), t_select, t_fit));
        let mut curves = vec![Curve { points: (0..n).map(|i| (x[(i, 0)], y[i])).collect(), colour: RGBColor(150, 150, 150), dots: true }];
        for &z_j in &z {
            curves.push(Curve { points: (0..grid.nrows()).map(|i| (grid[(i, 0)], quantile_spread(grid[(i, 0)]) * z_j)).collect(), colour: RGBColor(255, 140, 0), dots: false });
        }
        for j in 0..3 {
            curves.push(Curve { points: (0..grid.nrows()).map(|i| (grid[(i, 0)], q[(i, j)].clamp(-5.0, 5.0))).collect(), colour: colours[j], dots: false });
        }
        panels.push(Panel { title: format!("{}: {} crossing points", model.name(), crossings(&q)), curves, x_range: (-0.25, 1.25), y_range: (-0.6, 0.6) });
    }
    let truth = {
        let q = DMatrix::from_fn(x_test.nrows(), 3, |i, j| quantile_spread(x_test[(i, 0)]) * z[j]);
        pinball(&q, &y_test)
    };
    println!();
    println!("n = {n} ({split} fit / {} validation), 5000 test points; sigma {sigmas:?} x lambda {lambdas:?}; grid of 1501 points on [-0.25, 1.25]", n - split);
    println!("{:<5} {:>6} {:>8} {:>14} {:>16} {:>10} {:>8}", "model", "sigma", "lambda", "test pinball", "crossing points", "select s", "fit s");
    for row in &table {
        println!("{row}");
    }
    println!("{:<5} {:>6} {:>8} {:>14.5} {:>16} {:>10} {:>8}", "truth", "-", "-", truth, 0, "-", "-");
    psd_plot::draw_panels(&out, &panels, (420, 340))?;
    println!("figure written to {out} (orange: true quantiles; blue: fitted)");
    Ok(())
}
