//! Multiple quantile regression (Figure 1, bottom row) on the distribution of
//! App. E, n = 500: X ~ 1/2 U(0, 1/3) + 1/2 U(2/3, 1), Y | x ~ N(0, s(x)^2),
//! levels 1/4, 1/2, 3/4. Compares independent kernel quantile regressions
//! (one linear model per level, no ordering constraint) with the PSD model
//! (median linear, the others median +- PSD models: never cross), counts
//! crossings on a dense grid of [-0.25, 1.25] (it includes the gap (1/3, 2/3)
//! without data), and draws both in one PNG with the true quantiles.
//!
//! `cargo run --example psd_quantile [-- out/psd_quantile.png]`

#[path = "psd_plot/mod.rs"]
mod psd_plot;

use gramian::psd::regression::QuantileParams;
use gramian::psd::SolverOptions;
use gramian::Device;
use nalgebra::{DMatrix, DVector};
use plotters::style::RGBColor;
use psd_plot::{Curve, Panel};
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::{Distribution, Normal};

fn spread(t: f64) -> f64 {
    if t <= 1.0 / 3.0 && t >= 0.0 {
        1.0 / 3.0 - t
    } else if (2.0 / 3.0..=1.0).contains(&t) {
        t - 2.0 / 3.0
    } else {
        0.0
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args().nth(1).unwrap_or_else(|| "out/psd_quantile.png".into());
    let device = Device::Cpu;
    let mut rng = StdRng::seed_from_u64(5);
    let n = 500;
    let x = DMatrix::from_fn(n, 1, |_, _| if rng.random::<bool>() { rng.random_range(0.0..1.0 / 3.0) } else { rng.random_range(2.0 / 3.0..1.0) });
    let normal = Normal::new(0.0, 1.0)?;
    let y = DVector::from_fn(n, |i, _| spread(x[(i, 0)]) * normal.sample(&mut rng));
    let levels = [0.25, 0.5, 0.75];
    let (sigma, l0, l1, l2) = (0.1, 1e-3, 1e-4, 1e-5);
    let options = SolverOptions { tolerance: 1e-4, max_iterations: 20_000, check_every: 10 };
    let grid = DMatrix::from_fn(1501, 1, |i, _| -0.25 + 1.5 * i as f64 / 1500.0);

    let start = std::time::Instant::now();
    let mut independent = DMatrix::zeros(grid.nrows(), 3);
    for (j, &tau) in levels.iter().enumerate() {
        let m = QuantileParams::new(sigma, &[tau]).regularisation(l0, l1, l2).solver(options).fit(&device, &x, &y)?;
        independent.column_mut(j).copy_from(&m.predict(&device, &grid)?.column(0));
    }
    let t_ind = start.elapsed().as_secs_f64();
    let start = std::time::Instant::now();
    let psd = QuantileParams::new(sigma, &levels).regularisation(l0, l1, l2).solver(options).fit(&device, &x, &y)?;
    let t_psd = start.elapsed().as_secs_f64();
    let q = psd.predict(&device, &grid)?;
    let crossings = |m: &DMatrix<f64>| (0..m.nrows()).filter(|&i| m[(i, 0)] > m[(i, 1)] || m[(i, 1)] > m[(i, 2)]).count();
    println!("sigma {sigma}, lambda_0 {l0:e}, lambda_1 {l1:e}, lambda_2 {l2:e}; n {n}; grid of {} points on [-0.25, 1.25]", grid.nrows());
    println!("{:<34} {:>18} {:>8} {:>10}", "model", "crossing points", "fit s", "gap");
    println!("{:<34} {:>18} {:>8.2} {:>10}", "independent kernel quantile reg.", crossings(&independent), t_ind, "-");
    println!("{:<34} {:>18} {:>8.2} {:>10.2e}", "PSD model (median +- PSD)", crossings(&q), t_psd, psd.report().gap);
    // True quantiles: s(x) * z_tau, z_{1/4} = -0.6745.
    let z = [-0.674_489_750_196_081_7, 0.0, 0.674_489_750_196_081_7];
    let colours = [RGBColor(31, 119, 180), RGBColor(20, 60, 140), RGBColor(31, 119, 180)];
    let panel = |title: &str, m: &DMatrix<f64>| {
        let mut curves = vec![Curve { points: (0..n).map(|i| (x[(i, 0)], y[i])).collect(), colour: RGBColor(150, 150, 150), dots: true }];
        for j in 0..3 {
            curves.push(Curve { points: (0..grid.nrows()).map(|i| (grid[(i, 0)], spread(grid[(i, 0)]) * z[j])).collect(), colour: RGBColor(255, 140, 0), dots: false });
        }
        for j in 0..3 {
            curves.push(Curve { points: (0..grid.nrows()).map(|i| (grid[(i, 0)], m[(i, j)])).collect(), colour: colours[j], dots: false });
        }
        Panel { title: format!("{title}: {} crossing points", crossings(m)), curves, x_range: (-0.25, 1.25), y_range: (-0.6, 0.6) }
    };
    psd_plot::draw_panels(&out, &[panel("independent", &independent), panel("PSD model", &q)], (520, 380))?;
    println!("figure written to {out}");
    Ok(())
}
