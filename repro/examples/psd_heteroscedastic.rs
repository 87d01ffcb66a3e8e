//! Heteroscedastic Gaussian regression (Figure 1, centre row): `eta = mu/v`
//! linear and `theta = 1/v` modelled by each non-negative model of the
//! paper: PNM, NCM, GLM (Appendix D, [`gramian::psd::baseline_regression`])
//! and the PSD model ([`gramian::psd::heteroscedastic`]).
//!
//! Data: the paper uses "the toy data in section 5 of LSC 05" (Le, Smola &
//! Canu 2005), n = 80, and cites Yuan & Wahba (2004) for the same model. That
//! generator is not given in the paper; this example uses the Yuan & Wahba
//! toy model as a documented **stand-in**: `x ~ U(0, 1)`,
//! `mu(x) = 2 (exp(-30 (x - 1/4)^2) + sin(pi x^2)) - 2`, `log v(x) = sin(2 pi x)`.
//!
//! `sigma` and `lambda` are chosen for each model independently by 5-fold
//! cross-validation of the held-out log-likelihood on the 80 training points
//! (interleaved folds, sample `i` held out in fold `i % 5`:
//! [`gramian::estimator::cross_validate`] with
//! [`gramian::estimator::Splits::interleaved`])
//! (PSD: the paper's `lambda (||A||_* + 0.05 ||A||_F^2)`, i.e. `lambda_1 = lambda`,
//! `lambda_2 = 0.1 lambda` in this crate's `lambda_2/2` convention, and
//! `lambda_0 = lambda`; baselines: `lambda_0 = lambda` for `eta` and
//! `lambda/2 ||w||^2` for `theta`); the test log-likelihood is on 2000 fresh
//! points. `min theta` is over a grid of [-0.5, 1.5], which extends beyond the
//! data on [0, 1]: PNM is only constrained to be positive on the data.
//!
//! `cargo run -p gramian-repro --example psd_heteroscedastic [-- out/psd_heteroscedastic.png]`

#[path = "psd_plot/mod.rs"]
mod psd_plot;

#[path = "psd_toy/mod.rs"]
mod psd_toy;
use clap::Parser;
use gramian::estimator::{cross_validate, Fit, Splits, Supervised};
use gramian::psd::heteroscedastic::NaturalParameters;
use gramian::psd::{BaselineHeteroscedasticParams, BaselineKind, HeteroscedasticParams, SolverOptions};
use gramian::Error;
use gramian::Device;
use nalgebra::DMatrix;
use plotters::style::RGBColor;
use psd_plot::{Curve, Panel};
use psd_toy::{toy_data, true_mean, true_variance};
use rand::{rngs::StdRng, SeedableRng};
use gramian::psd::Regularisation;

/// The four models for `theta`, in the column order of Figure 1.
#[derive(Clone, Copy)]
enum Model {
    Baseline(BaselineKind),
    Psd,
}

/// A fitted model: the natural parameters at new points.
type Predictor = Box<dyn Fn(&DMatrix<f64>) -> Result<NaturalParameters, Error>>;

impl Model {
    fn name(&self) -> &'static str {
        match self {
            Model::Baseline(k) => k.name(),
            Model::Psd => "PSD",
        }
    }

    /// Fits and returns a closure giving the natural parameters at new points.
    fn fit(&self, device: &Device, data: &Supervised, sigma: f64, lambda: f64) -> Result<Predictor, Error> {
        let device = device.clone();
        Ok(match *self {
            Model::Baseline(kind) => {
                let m = BaselineHeteroscedasticParams::new(kind, gramian::Kernel::gaussian_with_width(sigma)?)?.regularisation(Regularisation::new().linear(lambda).quadratic(lambda)).restarts(3, 7).fit(&device, data)?;
                Box::new(move |g| m.natural_parameters(g))
            }
            Model::Psd => {
                let m = HeteroscedasticParams::new(gramian::Kernel::gaussian_with_width(sigma)?)?.regularisation(Regularisation::new().linear(lambda).trace(lambda).quadratic(0.1 * lambda)).solver(SolverOptions { tolerance: 1e-6, max_iterations: 50_000, check_every: 10 }).fit(&device, data)?;
                Box::new(move |g| m.natural_parameters(g))
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
#[command(about = "Heteroscedastic regression (Figure 1, centre row): PNM, NCM, GLM and the PSD model for 1/variance")]
struct Args {
    /// Output PNG of the figure.
    #[arg(default_value = "out/psd_heteroscedastic.png")]
    out: String,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = Args::parse().out;
    let device = Device::Cpu;
    let mut rng = StdRng::seed_from_u64(2005);
    let (x, y) = toy_data(80, &mut rng);
    let data = Supervised::new(x.clone(), y.clone())?;
    let folds = Splits::interleaved(5)?;
    let (x_test, y_test) = toy_data(2000, &mut rng);
    let sigmas = [0.05, 0.1, 0.2];
    let lambdas = [1e-3, 1e-2, 1e-1];
    let models = [Model::Baseline(BaselineKind::Pnm), Model::Baseline(BaselineKind::Ncm), Model::Baseline(BaselineKind::Glm), Model::Psd];
    let plot_grid = DMatrix::from_fn(601, 1, |i, _| -0.1 + 1.2 * i as f64 / 600.0);
    let wide_grid = DMatrix::from_fn(2001, 1, |i, _| -0.5 + 2.0 * i as f64 / 2000.0);
    let truth_ll = (0..y_test.len()).map(|i| {
        let (m, v) = (true_mean(x_test[(i, 0)]), true_variance(x_test[(i, 0)]));
        -0.5 * (2.0 * std::f64::consts::PI * v).ln() - (y_test[i] - m).powi(2) / (2.0 * v)
    }).sum::<f64>() / y_test.len() as f64;

    let mut rows_out = Vec::new();
    let mut panels = Vec::new();
    let g: Vec<f64> = plot_grid.column(0).iter().copied().collect();
    let (orange, blue, light) = (RGBColor(255, 140, 0), RGBColor(31, 119, 180), RGBColor(120, 170, 220));
    for model in models {
        let start = std::time::Instant::now();
        let candidates: Vec<Candidate> = sigmas.iter().flat_map(|&sigma| lambdas.iter().map(move |&lambda| Candidate { model, sigma, lambda })).collect();
        let cv = cross_validate(&device, &candidates, &data, &folds, |m: &Predictor, held: &Supervised| Ok(m(&held.x)?.log_likelihood(&held.y).mean()))?;
        for f in &cv.failures {
            let c = &candidates[f.candidate];
            eprintln!("{} sigma {} lambda {}: {}", model.name(), c.sigma, c.lambda, f.error);
        }
        for (c, score) in candidates.iter().zip(&cv.mean_scores) {
            println!("cv  {:<4} sigma {:<5} lambda {:<6e}  held-out log-lik {score:>9.4}", model.name(), c.sigma, c.lambda);
        }
        let best = (cv.mean_scores[cv.best], candidates[cv.best].sigma, candidates[cv.best].lambda);
        let t_cv = start.elapsed().as_secs_f64();
        let fitted = model.fit(&device, &data, best.1, best.2)?;
        let test_ll = fitted(&x_test)?.log_likelihood(&y_test).mean();
        let theta_wide = fitted(&wide_grid)?.theta;
        let min_theta = theta_wide.min();
        let negative = theta_wide.iter().filter(|&&t| t <= 0.0).count();
        let inside: Vec<usize> = (0..plot_grid.nrows()).filter(|&i| (0.0..=1.0).contains(&plot_grid[(i, 0)])).collect();
        let np = fitted(&plot_grid)?;
        let (mu, var) = (np.mean(), np.variance());
        let log_var_err = inside.iter().map(|&i| if var[i] > 0.0 { (var[i] / true_variance(plot_grid[(i, 0)])).ln().abs() } else { f64::INFINITY }).sum::<f64>() / inside.len() as f64;
        rows_out.push(format!("{:<5} {:>6} {:>8.0e} {:>14.4} {:>16.3} {:>14.3e} {:>10} {:>8.1}", model.name(), best.1, best.2, test_ll, log_var_err, min_theta, negative, t_cv));
        let mut curves = vec![Curve { points: (0..y.len()).map(|i| (x[(i, 0)], y[i])).collect(), colour: RGBColor(150, 150, 150), dots: true }];
        for s in [-2.0, 0.0, 2.0] {
            curves.push(Curve { points: g.iter().map(|&t| (t, true_mean(t) + s * true_variance(t).sqrt())).collect(), colour: orange, dots: false });
        }
        // Bands only where the fitted variance is positive (PNM's may not be).
        for s in [-2.0, 2.0] {
            curves.push(Curve { points: (0..g.len()).filter(|&i| var[i] > 0.0).map(|i| (g[i], (mu[i] + s * var[i].sqrt()).clamp(-50.0, 50.0))).collect(), colour: light, dots: false });
        }
        curves.push(Curve { points: (0..g.len()).map(|i| (g[i], mu[i].clamp(-50.0, 50.0))).collect(), colour: blue, dots: false });
        panels.push(Panel { title: format!("{} (test log-lik {test_ll:.3})", model.name()), curves, x_range: (-0.1, 1.1), y_range: (-7.0, 5.0) });
    }
    println!();
    println!("n = 80 training points, 2000 test points; 5-fold CV per model over sigma {sigmas:?} x lambda {lambdas:?}");
    println!("{:<5} {:>6} {:>8} {:>14} {:>16} {:>14} {:>10} {:>8}", "model", "sigma", "lambda", "test log-lik", "mean |log v/v*|", "min theta", "theta<=0", "CV s");
    for r in &rows_out {
        println!("{r}");
    }
    println!("{:<5} {:>6} {:>8} {:>14.4} {:>16} {:>14} {:>10} {:>8}", "truth", "-", "-", truth_ll, "0", "-", "-", "-");
    println!("(mean |log v/v*| on [0, 1]; min theta and the count of theta <= 0 on 2001 points of [-0.5, 1.5], units of 1/y^2)");
    psd_plot::draw_panels(&out, &panels, (420, 340))?;
    println!("figure written to {out} (orange: truth mean +- 2 sd; blue: fitted)");
    Ok(())
}
