//! mklaren on a 1-D toy regression: a smooth trend plus a narrow bump, three
//! RBF kernels of different widths. Prints the test RMSE, the kernel weights
//! and how many columns each kernel contributed; `--out FILE.png` draws the
//! data and the fit, and the order in which the kernels were chosen.
//!
//! ```text
//! cargo run -p gramian-repro --example mklaren_1d [-- --out docs/img/mklaren-1d.png]
//! ```

#[path = "psd_plot/mod.rs"]
mod psd_plot;

use clap::Parser;
use gramian::estimator::Supervised;
use gramian::mklaren::MklarenParams;
use gramian::{Device, Kernel};
use nalgebra::{DMatrix, DVector};
use plotters::style::RGBColor;
use psd_plot::{Curve, Panel};
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::{Distribution, Normal};

#[derive(Parser)]
#[command(about = "mklaren on a 1-D toy regression with three RBF kernels: fit, kernel weights, order of the chosen kernels")]
struct Args {
    /// Write a figure (PNG): data and fit, and the columns chosen per kernel.
    #[arg(long, value_name = "FILE.png")]
    out: Option<String>,
    /// Total rank (columns chosen over all kernels).
    #[arg(long, default_value_t = 24)]
    rank: usize,
}

/// The target: a slow trend plus a narrow bump at x = 1.
fn truth(x: f64) -> f64 {
    (0.8 * x).sin() + 1.2 * (-(x - 1.0).powi(2) / (2.0 * 0.15f64.powi(2))).exp()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let device = Device::auto();
    let mut rng = StdRng::seed_from_u64(5);
    let noise = Normal::new(0.0, 0.1)?;
    let n = 200;
    let xs: Vec<f64> = (0..n).map(|_| rng.random_range(-4.0..4.0)).collect();
    let ys: Vec<f64> = xs.iter().map(|&x| truth(x) + noise.sample(&mut rng)).collect();
    let train = Supervised::new(DMatrix::from_column_slice(n, 1, &xs), DVector::from_vec(ys.clone()))?;
    let gammas = [0.05, 1.0, 20.0];
    let kernels: Vec<Kernel> = gammas.iter().map(|&g| Kernel::rbf(g)).collect::<Result<_, _>>()?;
    let model = MklarenParams::new(args.rank).lookahead(10).lambda(1e-3).kernels(&kernels).fit(&device, &train)?;

    let grid: Vec<f64> = (0..=400).map(|i| -4.0 + 8.0 * i as f64 / 400.0).collect();
    let fit = model.predict(&DMatrix::from_column_slice(grid.len(), 1, &grid))?;
    let rmse = (grid.iter().zip(fit.iter()).map(|(&x, &f)| (f - truth(x)).powi(2)).sum::<f64>() / grid.len() as f64).sqrt();
    println!("mklaren on a 1-D toy: n = {n}, rank {}, device {}", model.rank(), device.describe());
    println!("RMSE against the noiseless target on [-4, 4]: {rmse:.4}");
    println!("{:>10} {:>8} {:>8}", "gamma", "weight", "columns");
    for (k, g) in gammas.iter().enumerate() {
        let columns = model.order().iter().filter(|c| c.kernel == k).count();
        println!("{g:>10} {:>8.3} {columns:>8}", model.kernel_weights()[k]);
    }

    if let Some(out) = args.out {
        let colours = [RGBColor(31, 119, 180), RGBColor(44, 160, 44), RGBColor(214, 39, 40)];
        let data = Curve { points: xs.iter().copied().zip(ys.iter().copied()).collect(), colour: RGBColor(150, 150, 150), dots: true };
        let target = Curve { points: grid.iter().map(|&x| (x, truth(x))).collect(), colour: RGBColor(255, 127, 14), dots: false };
        let fitted = Curve { points: grid.iter().copied().zip(fit.iter().copied()).collect(), colour: RGBColor(31, 119, 180), dots: false };
        let left = Panel { title: format!("data (grey), target (orange), mklaren fit, rank {} (blue)", model.rank()), curves: vec![data, target, fitted], y_range: (-1.6, 2.4), x_range: (-4.0, 4.0) };
        // Columns chosen so far per kernel, step by step.
        let mut counts = vec![vec![(0.0, 0.0)]; kernels.len()];
        let mut seen = vec![0usize; kernels.len()];
        for (step, c) in model.order().iter().enumerate() {
            seen[c.kernel] += 1;
            for (k, curve) in counts.iter_mut().enumerate() {
                curve.push(((step + 1) as f64, seen[k] as f64));
            }
        }
        let curves = counts.into_iter().zip(colours).map(|(points, colour)| Curve { points, colour, dots: false }).collect();
        let w = model.kernel_weights();
        let right = Panel {
            title: format!("columns chosen per kernel; gamma {} (blue, weight {:.2}), {} (green, {:.2}), {} (red, {:.2})", gammas[0], w[0], gammas[1], w[1], gammas[2], w[2]),
            curves,
            y_range: (0.0, (*seen.iter().max().unwrap_or(&1) + 1) as f64),
            x_range: (0.0, model.rank() as f64),
        };
        psd_plot::draw_panels(&out, &[left, right], (800, 360))?;
        println!("figure written to {out}");
    }
    Ok(())
}
