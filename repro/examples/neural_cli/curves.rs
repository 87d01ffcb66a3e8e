//! Figure 1 of the eKSVD paper for one training run: `log10 sum_k (J_k /
//! N)^2` and the cross-entropy per epoch, as a CSV and a two-panel PNG
//! (shared by the Neural eKSVD reproductions).

use gramian::eksvd::neural::TrainingHistory;
use plotters::style::RGBColor;

use crate::neural_cli::AnyResult;
use crate::psd_plot::{self, Curve, Panel};

/// Writes `out/name.csv` (the history) and `out/name.png` (the two curves).
pub fn write_curves(history: &TrainingHistory, out: &std::path::Path, name: &str) -> AnyResult<()> {
    std::fs::create_dir_all(out)?;
    let csv = out.join(format!("{name}.csv"));
    history.write_csv(&csv)?;
    let j2: Vec<(f64, f64)> = history.epochs.iter().map(|e| (e.epoch as f64, e.objective_squared.max(1e-30).log10())).collect();
    let ce: Vec<(f64, f64)> = history.epochs.iter().map(|e| (e.epoch as f64, e.cross_entropy)).collect();
    let range = |v: &[(f64, f64)]| {
        let lo = v.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
        let hi = v.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
        let pad = 0.05 * (hi - lo).max(1e-6);
        (lo - pad, hi + pad)
    };
    let x_range = (1.0, history.epochs.len().max(2) as f64);
    let blue = RGBColor(31, 119, 180);
    let panels = [
        Panel { title: "(a) log10 sum_k (J_k / N)^2".into(), y_range: range(&j2), x_range, curves: vec![Curve { points: j2, colour: blue, dots: false }] },
        Panel { title: "(b) cross-entropy L_CE".into(), y_range: range(&ce), x_range, curves: vec![Curve { points: ce, colour: blue, dots: false }] },
    ];
    let png = out.join(format!("{name}.png"));
    psd_plot::draw_panels(png.to_str().ok_or("non-UTF-8 output path")?, &panels, (480, 360))?;
    println!("curves: {} and {}", csv.display(), png.display());
    Ok(())
}
